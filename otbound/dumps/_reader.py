"""Reading dumps lazily: otbound's directories and single files, behind one interface."""

from __future__ import annotations

import copy
import json
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from otbound.dumps._format import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    METADATA_COLUMNS,
    STORAGE_CODE,
    DumpError,
    ShardInfo,
    TopKRows,
    file_sha256,
    from_storage,
    parse_storage,
    validate_manifest,
)
from otbound.dumps._processing import (
    StepDistributions,
    describe_steps,
    find_probability_rows,
    prepare_distributions,
    probability_tolerance,
)
from otbound.dumps._safetensors import SafetensorsFile, SafetensorsFormatError
from otbound.dumps._topk import AcceptanceInterval, acceptance_interval

#: Single-file formats :func:`open_dump` reads, by suffix.
SINGLE_FILE_SUFFIXES = (".safetensors", ".npz", ".npy", ".pt", ".pth")
#: What ``open_dump(values=...)`` accepts: by array name, all logits, all probabilities.
VALUES_CHOICES = ("auto", "logits", "probs")
#: Rows of each logits array that opening a single file checks (reading a shard checks all).
_PROBE_ROWS = 64


@dataclass(frozen=True)
class ShardData:
    """The arrays and per-step metadata of one shard, loaded.

    Attributes
    ----------
    shard : ShardInfo
    target, draft : numpy.ndarray, shape (steps, V), or TopKRows
        Logits as float32 (from 16-bit storage) or as stored; probabilities when ``values``
        says so; :class:`TopKRows` for top-k dumps. May be read-only memory maps.
    values : (str, str)
        What ``target`` and ``draft`` hold: ``"logits"``, ``"probs"`` or ``"topk"``.
    metadata : pandas.DataFrame
        One row per step: ``step`` (global id), ``prompt_id``, ``position``, ``token``
        (null where unknown), then any extra columns.
    """

    shard: ShardInfo
    target: np.ndarray | TopKRows
    draft: np.ndarray | TopKRows
    values: tuple[str, str]
    metadata: pd.DataFrame

    @property
    def step(self) -> np.ndarray:
        """Global step ids, int64."""
        return self.shard.steps

    @property
    def num_steps(self) -> int:
        """Steps in the shard."""
        return self.shard.num_steps

    @property
    def is_topk(self) -> bool:
        """Whether the rows are truncated top-k rows."""
        return self.values[0] == "topk"

    def head(self, steps: int) -> ShardData:
        """The shard's first ``steps`` steps (all of them if it has fewer); arrays are views.

        Examples
        --------
        >>> import numpy as np, tempfile, otbound as ob
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     np.savez(tmp + "/run.npz", target_logits=np.zeros((8, 5)),
        ...              draft_logits=np.zeros((8, 5)))
        ...     part = ob.open_dump(tmp + "/run.npz").read_shard(0).head(3)
        >>> part.step.tolist(), part.target.shape, len(part.metadata)
        ([0, 1, 2], (3, 5), 3)
        """
        steps = max(0, min(int(steps), self.num_steps))
        if steps == self.num_steps:
            return self

        def cut(side: np.ndarray | TopKRows) -> np.ndarray | TopKRows:
            return side.take(np.arange(steps)) if isinstance(side, TopKRows) else side[:steps]

        return ShardData(
            replace(self.shard, num_steps=steps),
            cut(self.target),
            cut(self.draft),
            self.values,
            self.metadata.iloc[:steps].reset_index(drop=True),
        )

    def distributions(
        self,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        *,
        skip_bad_steps: bool = False,
        truncate_vocab: bool = False,
    ) -> StepDistributions:
        """``p`` and ``q`` of the shard's steps (see :func:`prepare_distributions`).

        Raises
        ------
        DumpError
            For top-k rows, which are not full distributions: use
            :meth:`acceptance_interval`.
        """
        if self.is_topk:
            raise DumpError(
                f"shard {self.shard.id} holds top-k rows, not full distributions: use "
                "acceptance_interval for bounds on α*"
            )
        return prepare_distributions(
            self.target,
            self.draft,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            values=self.values,
            step_ids=self.step,
            skip_bad_steps=skip_bad_steps,
            truncate_vocab=truncate_vocab,
        )

    def acceptance_interval(
        self,
        n: int,
        design: str = "iid",
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        skip_bad_steps: bool = False,
        truncate_vocab: bool = False,
    ) -> AcceptanceInterval:
        """``α*`` per step: exact for full rows, an interval for top-k rows.

        See :func:`otbound.dumps.acceptance_interval`.
        """
        values: tuple[str, str] = ("logits", "logits") if self.is_topk else self.values
        return acceptance_interval(
            self.target,
            self.draft,
            n,
            design,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            values=values,
            step_ids=self.step,
            skip_bad_steps=skip_bad_steps,
            truncate_vocab=truncate_vocab,
        )


def _with_steps(frame: pd.DataFrame, info: ShardInfo) -> pd.DataFrame:
    frame = frame.reset_index(drop=True)
    for column in METADATA_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.array([None] * len(frame), dtype="Int64")
    extras = [c for c in frame.columns if c not in METADATA_COLUMNS and c != "step"]
    frame = frame[[*METADATA_COLUMNS, *extras]]
    frame.insert(0, "step", info.steps)
    return frame


def _check_file(path: Path, size: int | None, sha256: str | None, verify: bool) -> None:
    """Existence, size and (with ``verify``) checksum of a file the manifest lists."""
    try:
        actual = path.stat().st_size
    except FileNotFoundError as exc:
        raise DumpError(f"{path}: the file is missing") from exc
    except OSError as exc:
        raise DumpError(f"{path}: cannot read the file ({exc})") from exc
    if size is not None and actual != size:
        what = "truncated" if actual < size else "longer than written"
        raise DumpError(
            f"{path}: the file is {actual} bytes but the manifest says {size} ({what}; "
            "rewrite the shard or restore it)"
        )
    if verify and sha256 is not None:
        try:
            digest = file_sha256(path)
        except OSError as exc:
            raise DumpError(f"{path}: cannot read the file ({exc})") from exc
        if digest != sha256:
            raise DumpError(
                f"{path}: sha256 checksum mismatch (the manifest says {sha256[:16]}…, the file "
                f"hashes to {digest[:16]}…): the file is corrupt"
            )


def _missing_keys(path: Path, needed: tuple[str, ...], found: list[str]) -> None:
    missing = [key for key in needed if key not in found]
    if missing:
        raise DumpError(
            f"{path}: missing array(s) {', '.join(missing)}; arrays found: "
            f"{', '.join(found) or 'none'}"
        )


class Dump:
    """A dump opened for reading: the manifest now, the shards one at a time on demand.

    Built by :func:`open_dump`; never reads a shard until asked, so memory stays bounded by
    one shard. Picklable (it holds no open files), so worker processes can read shards.

    Attributes
    ----------
    path : pathlib.Path
    source : str
        ``"otbound"`` for a dump directory, else the single file's format (``"npz"``, ...).
    shards : tuple of ShardInfo
    """

    def __init__(
        self,
        path: Path,
        source: str,
        manifest: dict[str, Any],
        shards: tuple[ShardInfo, ...],
        options: dict[str, Any],
    ) -> None:
        self.path = path
        self.source = source
        self._manifest = manifest
        self.shards = shards
        self._options = options

    def __repr__(self) -> str:
        return (
            f"Dump({str(self.path)!r}, source={self.source!r}, steps={self.num_steps}, "
            f"shards={len(self.shards)}, storage={self._manifest['storage']!r})"
        )

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest (synthesised for a single file)."""
        return copy.deepcopy(self._manifest)

    @property
    def num_steps(self) -> int:
        """Steps in all shards."""
        return sum(s.num_steps for s in self.shards)

    @property
    def target_vocab_size(self) -> int | None:
        """Width of the target's rows (its full vocabulary for top-k storage)."""
        size: int | None = self._manifest["target_vocab_size"]
        return size

    @property
    def draft_vocab_size(self) -> int | None:
        """Width of the draft's rows (its full vocabulary for top-k storage)."""
        size: int | None = self._manifest["draft_vocab_size"]
        return size

    @property
    def vocab_size(self) -> int | None:
        """The vocabulary both models share: their common width, or the smaller one when the
        widths differ (reading then needs ``truncate_vocab=True``); None for an empty dump."""
        widths = [w for w in (self.target_vocab_size, self.draft_vocab_size) if w is not None]
        return min(widths) if widths else None

    @property
    def dtype(self) -> str:
        """Storage dtype of the logits."""
        return str(self._manifest["dtype"])

    @property
    def topk(self) -> int | None:
        """``K`` for top-k storage, None for full rows."""
        return parse_storage(self._manifest["storage"], str(self.path))

    @property
    def values(self) -> tuple[str, str]:
        """What the shards' target and draft arrays hold (``"logits"``, ``"probs"``, ``"topk"``)."""
        if self.topk is not None:
            return ("topk", "topk")
        values = self._manifest.get("values", ["logits", "logits"])
        return (values[0], values[1])

    def __len__(self) -> int:
        return len(self.shards)

    def __iter__(self) -> Iterator[ShardData]:
        """Shards in order, each loaded when reached."""
        for info in self.shards:
            yield self.read_shard(info.index)

    def shard(self, key: int | str) -> ShardInfo:
        """A shard's descriptor by position or id."""
        if isinstance(key, str):
            for info in self.shards:
                if info.id == key:
                    return info
            raise KeyError(f"no shard {key!r} in {self.path}")
        return self.shards[key]

    def read_shard(self, key: int | str) -> ShardData:
        """Load one shard (by position or id), checking it against the manifest.

        Raises
        ------
        DumpError
            The shard is missing, truncated, fails its checksum, is not valid safetensors,
            lacks arrays (those found are listed) or has the wrong dtype or shape.
        """
        info = self.shard(key)
        if self.source == "otbound":
            return self._read_own(info)
        return _read_single(self.path, self.source, self._options, info, self._manifest)

    def check(self) -> dict[str, str]:
        """Read every shard; the problems found, by shard id (empty when all are sound)."""
        problems = {}
        for info in self.shards:
            try:
                self.read_shard(info.index)
            except DumpError as exc:
                problems[info.id] = str(exc)
        return problems

    # ---------------------------------------------------------------------------------------

    def _read_own(self, info: ShardInfo) -> ShardData:
        path = self.path / info.file
        _check_file(path, info.size, info.sha256, self._options["verify"])
        try:
            tensors = SafetensorsFile(path)
        except SafetensorsFormatError as exc:
            raise DumpError(f"{path}: not a valid safetensors shard: {exc}") from exc
        except OSError as exc:
            raise DumpError(f"{path}: cannot read the file ({exc})") from exc
        dtype = self.dtype
        code = STORAGE_CODE[dtype]
        widths = {"target": self.target_vocab_size, "draft": self.draft_vocab_size}
        topk = self.topk
        sides: dict[str, np.ndarray | TopKRows] = {}
        if topk is None:
            _missing_keys(path, ("target_logits", "draft_logits"), tensors.keys())
            for side in ("target", "draft"):
                name = f"{side}_logits"
                self._expect(path, tensors, name, code, (info.num_steps, widths[side]))
                sides[side] = from_storage(tensors.array(name), dtype)
        else:
            needed = tuple(
                f"{side}_{part}"
                for side in ("target", "draft")
                for part in ("ids", "topk_logits", "logsumexp")
            )
            _missing_keys(path, needed, tensors.keys())
            for side in ("target", "draft"):
                self._expect(path, tensors, f"{side}_ids", "I64", (info.num_steps, topk))
                self._expect(path, tensors, f"{side}_topk_logits", code, (info.num_steps, topk))
                self._expect(path, tensors, f"{side}_logsumexp", "F64", (info.num_steps,))
                width = widths[side]
                assert width is not None
                sides[side] = TopKRows(
                    np.asarray(tensors.array(f"{side}_ids")),
                    np.asarray(tensors.array(f"{side}_topk_logits")),
                    np.asarray(tensors.array(f"{side}_logsumexp")),
                    width,
                )
        frame = self._read_metadata(info)
        data = ShardData(info, sides["target"], sides["draft"], self.values, frame)
        names = ("target_logits", "draft_logits")
        return _refuse_probabilities(data, str(path), names, (dtype, dtype))

    @staticmethod
    def _expect(
        path: Path, tensors: SafetensorsFile, name: str, code: str, shape: tuple[Any, ...]
    ) -> None:
        meta = tensors.info(name)
        if meta.dtype != code or meta.shape != shape:
            raise DumpError(
                f"{path}: array {name} is {meta.dtype} {list(meta.shape)}, the manifest implies "
                f"{code} {list(shape)}"
            )

    def _read_metadata(self, info: ShardInfo) -> pd.DataFrame:
        if info.metadata_file is None:
            return _with_steps(pd.DataFrame(index=pd.RangeIndex(info.num_steps)), info)
        path = self.path / info.metadata_file
        _check_file(path, info.metadata_size, info.metadata_sha256, self._options["verify"])
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise DumpError(f"{path}: cannot read the per-step metadata ({exc})") from exc
        if len(frame) != info.num_steps:
            raise DumpError(
                f"{path}: {len(frame)} metadata rows for a shard of {info.num_steps} steps"
            )
        return _with_steps(frame, info)


# --------------------------------------------------------------------------------------------
# single files


def _kind_of(key: str, values: str) -> str:
    if values != "auto":
        return values
    return "probs" if key.lower().endswith(("probs", "probabilities")) else "logits"


def _probability_error(where: str, name: str, steps: np.ndarray, tolerance: float) -> DumpError:
    return DumpError(
        f"{where}: {name} holds probabilities, not logits, at {describe_steps(steps)} (every "
        f"entry >= 0, each row summing to 1 within {tolerance:.1g}); read as logits they would "
        "be flattened towards uniform and every acceptance would come out near 1: declare "
        "them with --values probs (values='probs' in open_dump)"
    )


def _check_rows(where: str, name: str, rows: np.ndarray, dtype: str, steps: np.ndarray) -> None:
    """Raise :func:`_probability_error` if any of ``rows`` (logits) look like probabilities."""
    tolerance = probability_tolerance(dtype, rows.shape[-1])
    found = find_probability_rows(rows, tolerance)
    if np.any(found):
        raise _probability_error(where, name, steps[found], tolerance)


def _refuse_probabilities(
    data: ShardData, where: str, names: tuple[str, str], dtypes: tuple[str, str]
) -> ShardData:
    """``data``, once every row it holds as logits is checked not to look like probabilities.

    One check for every format, as rows are read (see
    :func:`~otbound.dumps.find_probability_rows`): a row whose entries are all ``>= 0`` and
    sum to one within the rounding of its storage ``dtype`` is refused, even when the logits
    were declared (``values="logits"``): read as logits it would make every acceptance
    near 1. Genuine logits of that shape can be shifted by a constant per row (the softmax
    does not change); probabilities are declared with ``values="probs"``.
    """
    for rows, kind, name, dtype in zip(
        (data.target, data.draft), data.values, names, dtypes, strict=True
    ):
        if kind == "logits":
            assert isinstance(rows, np.ndarray)
            _check_rows(where, name, rows, dtype, data.step)
    return data


class _Arrays:
    """Named arrays of one single file: keys, shapes and dtypes cheaply, data on demand."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self._st: SafetensorsFile | None = None
        self._loaded: dict[str, np.ndarray] | None = None
        self._dtypes: dict[str, str] = {}
        if source == "safetensors":
            try:
                self._st = SafetensorsFile(path)
            except SafetensorsFormatError as exc:
                raise DumpError(f"{path}: not a valid safetensors file: {exc}") from exc
        elif source == "npz":
            try:
                with np.load(path, allow_pickle=False) as npz:
                    self._keys = sorted(npz.files)
            except (OSError, ValueError, zipfile.BadZipFile) as exc:
                raise DumpError(f"{path}: not a valid .npz file ({exc})") from exc
        elif source == "pt":
            self._loaded, self._dtypes = _torch_load(path)

    def keys(self) -> list[str]:
        if self._st is not None:
            return self._st.keys()
        if self._loaded is not None:
            return sorted(self._loaded)
        return self._keys

    def shape_and_dtype(self, key: str) -> tuple[tuple[int, ...], str]:
        if self._st is not None:
            info = self._st.info(key)
            return info.shape, info.dtype
        if self._loaded is not None:
            arr = self._loaded[key]
            return arr.shape, self._dtypes.get(key, str(arr.dtype))
        header = _npz_header(self.path, key)
        if header is not None:
            return header
        arr = self.load(key)
        return arr.shape, str(arr.dtype)

    def load(self, key: str) -> np.ndarray:
        if self._st is not None:
            return self._st.array(key)
        if self._loaded is not None:
            return self._loaded[key]
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                arr: np.ndarray = npz[key]
                return arr
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise DumpError(f"{self.path}: cannot read array {key!r} ({exc})") from exc

    def head(self, key: str, rows: int) -> np.ndarray:
        """The first ``rows`` rows of an array as (rows, V); for .npz only they are inflated."""
        head = None
        if self._st is None and self._loaded is None:
            head = _npz_member(self.path, key, rows)[1]
        if head is None:
            arr = self.load(key)
            head = arr.reshape(-1, arr.shape[-1])[:rows]
        return head


def _npz_member(
    path: Path, key: str, rows: int = 0
) -> tuple[tuple[tuple[int, ...], str] | None, np.ndarray | None]:
    """Shape and dtype of one .npz member from its .npy header, and its first ``rows`` rows
    (shape (rows, V)) read without the rest of its data; None for what cannot be had so."""
    head = None
    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{key}.npy") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                return None, None
            if rows and shape and not fortran and not dtype.hasobject:
                width = int(shape[-1])
                count = min(rows, int(np.prod(shape[:-1])))
                data = f.read(count * width * dtype.itemsize)
                if len(data) == count * width * dtype.itemsize:
                    head = np.frombuffer(data, dtype=dtype).reshape(count, width)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None, None
    return (tuple(shape), str(dtype)), head


def _npz_header(path: Path, key: str) -> tuple[tuple[int, ...], str] | None:
    """Shape and dtype of one .npz member from its .npy header, without reading its data."""
    return _npz_member(path, key)[0]


def _torch_load(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors as numpy arrays (16-bit ones as float32) and those tensors' own dtypes."""
    try:
        import torch
    except ImportError as exc:
        raise DumpError(
            f"{path}: reading .pt files needs torch: pip install 'otbound[torch]' (or save the "
            "arrays as .safetensors or .npz)"
        ) from exc
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a bad file
        raise DumpError(f"{path}: torch.load failed ({exc})") from exc
    if not isinstance(obj, dict):
        raise DumpError(
            f"{path}: expected a dict of tensors (torch.save({{'target_logits': ..., "
            f"'draft_logits': ...}})), got {type(obj).__name__}"
        )
    out, dtypes = {}, {}
    half = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
    for key, value in obj.items():
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu()
            if tensor.dtype in half:
                dtypes[str(key)] = half[tensor.dtype]
                tensor = tensor.float()
            out[str(key)] = tensor.numpy()
        else:
            out[str(key)] = np.asarray(value)
    return out, dtypes


def _resolve_key(
    path: Path, found: list[str], side: str, key: str | None, values: str
) -> tuple[str, str]:
    if key is not None:
        if key not in found:
            raise DumpError(
                f"{path}: no array named {key!r} for the {side}; arrays found: "
                f"{', '.join(found) or 'none'}"
            )
        return key, _kind_of(key, values)
    for candidate in (f"{side}_logits", f"{side}_probs"):
        if candidate in found:
            return candidate, _kind_of(candidate, values)
    raise DumpError(
        f"{path}: no {side}_logits or {side}_probs array; arrays found: "
        f"{', '.join(found) or 'none'}; name the arrays with target_key= and draft_key= "
        "(--target-key/--draft-key)"
    )


def _rows_shape(path: Path, name: str, shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 1:
        shape = (1, *shape)
    if len(shape) < 2 or shape[-1] == 0:
        raise DumpError(f"{path}: array {name} has shape {list(shape)}, expected (steps, V)")
    return int(np.prod(shape[:-1])), int(shape[-1])


_FLOAT_CODES = ("F16", "BF16", "F32", "F64", "float16", "bfloat16", "float32", "float64")


def _open_single(
    path: Path,
    source: str,
    target_key: str | None,
    draft_key: str | None,
    values: str,
    shard_steps: int | None,
) -> Dump:
    options: dict[str, Any] = {
        "target_key": target_key,
        "draft_key": draft_key,
        "values": values,
        "verify": False,
    }
    if source == "npy":
        if target_key is not None or draft_key is not None:
            raise DumpError(
                f"{path}: a .npy file holds one array of shape (2, steps, V) (target, draft); "
                "target_key/draft_key do not apply (use .npz or .safetensors for named arrays)"
            )
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DumpError(f"{path}: not a valid .npy file ({exc})") from exc
        if arr.ndim < 3 or arr.shape[0] != 2:
            raise DumpError(
                f"{path}: a .npy dump must hold one array of shape (2, steps, V): index 0 the "
                f"target, index 1 the draft; got {list(arr.shape)} (use .npz or .safetensors "
                "for separate named arrays)"
            )
        steps, width = _rows_shape(path, "array", arr.shape[1:])
        dtype = d_dtype = str(arr.dtype)
        widths = (width, width)
        kind = _kind_of("", values)
        keys: list[str | None] = [None, None]
        kinds = [kind, kind]
        names = ("the target (index 0)", "the draft (index 1)")
        flat = arr.reshape(2, -1, width)
        heads = [flat[0, :_PROBE_ROWS], flat[1, :_PROBE_ROWS]]
    else:
        arrays = _Arrays(path, source)
        found = arrays.keys()
        t_key, t_kind = _resolve_key(path, found, "target", target_key, values)
        d_key, d_kind = _resolve_key(path, found, "draft", draft_key, values)
        t_shape, dtype = arrays.shape_and_dtype(t_key)
        d_shape, d_dtype = arrays.shape_and_dtype(d_key)
        for key, code in ((t_key, dtype), (d_key, d_dtype)):
            if code not in _FLOAT_CODES:
                raise DumpError(f"{path}: array {key} has dtype {code}, expected floating point")
        t_steps, t_width = _rows_shape(path, t_key, t_shape)
        d_steps, d_width = _rows_shape(path, d_key, d_shape)
        if t_steps != d_steps:
            raise DumpError(f"{path}: {t_key} holds {t_steps} steps but {d_key} holds {d_steps}")
        steps, widths = t_steps, (t_width, d_width)
        keys = [t_key, d_key]
        kinds = [t_kind, d_kind]
        names = (t_key, d_key)
        options["metadata_keys"] = [k for k in METADATA_COLUMNS if k in found]
        heads = [
            arrays.head(key, _PROBE_ROWS) if kind == "logits" else None
            for key, kind in ((t_key, t_kind), (d_key, d_kind))
        ]
    options["keys"] = keys
    options["names"] = names
    options["dtypes"] = (dtype, d_dtype)
    for head, kind, name, code in zip(heads, kinds, names, options["dtypes"], strict=True):
        if kind == "logits":
            assert head is not None
            _check_rows(str(path), name, head, code, np.arange(len(head)))
    manifest = {
        "format": "single-file",
        "format_version": FORMAT_VERSION,
        "source": str(path),
        "file_format": source,
        "target_model": None,
        "draft_model": None,
        "tokenizer": None,
        "target_vocab_size": widths[0],
        "draft_vocab_size": widths[1],
        "dtype": dtype,
        "storage": "full",
        "values": kinds,
        "keys": keys,
        "num_steps": steps,
    }
    if shard_steps is not None and shard_steps < 1:
        raise ValueError(f"shard_steps must be >= 1, got {shard_steps}")
    size = shard_steps or max(steps, 1)
    shards = []
    for index, start in enumerate(range(0, steps, size)):
        count = min(size, steps - start)
        shard_id = "file" if count == steps else f"steps-{start:09d}-{start + count:09d}"
        shards.append(ShardInfo(index, shard_id, str(path), count, start))
    return Dump(path, source, manifest, tuple(shards), options)


def _read_single(
    path: Path, source: str, options: dict[str, Any], info: ShardInfo, manifest: dict[str, Any]
) -> ShardData:
    rows = slice(info.start, info.start + info.num_steps)
    if not path.exists():
        raise DumpError(f"{path}: the file is missing")
    if source == "npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DumpError(f"{path}: not a valid .npy file ({exc})") from exc
        flat = arr.reshape(2, -1, arr.shape[-1])
        target, draft = flat[0, rows], flat[1, rows]
        frame = pd.DataFrame(index=pd.RangeIndex(info.num_steps))
    else:
        arrays = _Arrays(path, source)
        t_key, d_key = options["keys"]
        loaded = [arrays.load(t_key), arrays.load(d_key)]
        target, draft = (a.reshape(-1, a.shape[-1])[rows] for a in loaded)
        columns = {}
        for key in options["metadata_keys"]:
            column = np.asarray(arrays.load(key)).ravel()
            if column.size != manifest["num_steps"]:
                raise DumpError(
                    f"{path}: metadata array {key} has {column.size} entries for "
                    f"{manifest['num_steps']} steps"
                )
            columns[key] = column[rows]
        frame = pd.DataFrame(columns, index=pd.RangeIndex(info.num_steps))
    target = (
        target
        if target.dtype.kind == "f" and target.dtype.itemsize >= 4
        else target.astype(np.float32)
    )
    draft = (
        draft if draft.dtype.kind == "f" and draft.dtype.itemsize >= 4 else draft.astype(np.float32)
    )
    values = manifest["values"]
    data = ShardData(info, target, draft, (values[0], values[1]), _with_steps(frame, info))
    return _refuse_probabilities(data, str(path), options["names"], options["dtypes"])


# --------------------------------------------------------------------------------------------


def open_dump(
    path: str | os.PathLike[str],
    *,
    target_key: str | None = None,
    draft_key: str | None = None,
    values: str = "auto",
    probs: bool | None = None,
    verify: bool = True,
    shard_steps: int | None = None,
) -> Dump:
    """Open a dump for lazy reading: an otbound dump directory or a single file.

    Parameters
    ----------
    path : str or os.PathLike
        A dump directory (with ``manifest.json``), or one file from the user's own script:

        * ``.safetensors``, ``.npz``, ``.pt``/``.pth`` (needs torch; loaded with
          ``weights_only=True``): named arrays ``target_logits`` and ``draft_logits``, or
          ``target_probs`` and ``draft_probs`` (probabilities), each ``(steps, V)`` (leading
          axes are flattened into steps; one row may be 1-D). Optional 1-D arrays
          ``prompt_id``, ``position``, ``token`` become the per-step metadata.
        * ``.npy``: one array of shape ``(2, steps, V)``: index 0 the target, 1 the draft.

        ``.npy`` and ``.safetensors`` files are memory-mapped.
    target_key, draft_key : str, optional
        Names of the arrays in a single file (defaults as above).
    values : {"auto", "logits", "probs"}, default "auto"
        What the full rows hold. ``"auto"``: probabilities for arrays whose name ends in
        ``probs`` or ``probabilities``, logits otherwise (always for ``.npy`` and dump
        directories). ``"logits"`` or ``"probs"``: every array (top-k dumps hold logits
        only). Rows read as logits are checked as they are read (the first rows of a single
        file already here, every row when a shard is read): a row whose entries are all
        ``>= 0`` and sum to one within its dtype's rounding
        (:func:`~otbound.dumps.find_probability_rows`) is a :class:`DumpError` naming
        ``values="probs"``, also under ``values="logits"``, since read as logits it would make
        every acceptance near 1. Genuine logits of that shape can be shifted by a constant
        per row: the softmax does not change.
    probs : bool, optional
        The older spelling: ``True`` is ``values="probs"``, ``False`` ``values="logits"``.
    verify : bool, default True
        Check each shard's sha256 against the manifest when it is read (the size is always
        checked).
    shard_steps : int, optional
        Split a single file into shards of this many steps; by default one shard. For
        ``.npy`` and ``.safetensors`` a shard is a slice of the memory map, so memory stays
        bounded by the shard; ``.npz`` and ``.pt`` files are loaded whole at every read.

    Returns
    -------
    Dump

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ValueError
        An unknown ``values``, or ``probs`` contradicting it.
    DumpError
        An unreadable or invalid manifest, a directory without a manifest, an unsupported
        file type, missing arrays (the arrays found are listed), or probabilities where
        logits are expected (in the first rows of a single file).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     np.savez(tmp + "/run.npz", target_logits=np.zeros((4, 3)),
    ...              draft_logits=np.ones((4, 3)))
    ...     dump = open_dump(tmp + "/run.npz")
    ...     shard = dump.read_shard(0)
    ...     dump.num_steps, shard.distributions().target[0].tolist()
    (4, [0.3333333333333333, 0.3333333333333333, 0.3333333333333333])
    """
    values = _declared_values(values, probs)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no dump at {path}: no such file or directory")
    if path.is_dir():
        manifest_path = path / MANIFEST_NAME
        if not manifest_path.is_file():
            raise DumpError(f"{path}: not an otbound dump (no {MANIFEST_NAME} in the directory)")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DumpError(f"{manifest_path}: cannot read the manifest ({exc})") from exc
        shards = validate_manifest(manifest, str(manifest_path))
        if values != "auto" and parse_storage(manifest["storage"], str(manifest_path)) is None:
            manifest["values"] = [values, values]
        elif values == "probs":
            raise DumpError(f"{path}: a top-k dump holds logits; values='probs' does not apply")
        return Dump(path, "otbound", manifest, shards, {"verify": verify})
    suffix = path.suffix.lower()
    if suffix not in SINGLE_FILE_SUFFIXES:
        raise DumpError(
            f"{path}: unsupported file type {suffix or '(none)'!r}: expected an otbound dump "
            f"directory or one of {', '.join(SINGLE_FILE_SUFFIXES)}"
        )
    source = {".pth": "pt"}.get(suffix, suffix[1:])
    return _open_single(path, source, target_key, draft_key, values, shard_steps)


def _declared_values(values: str, probs: bool | None) -> str:
    """``values`` after ``probs`` (its older spelling), checked."""
    if values not in VALUES_CHOICES:
        raise ValueError(f"values must be one of {', '.join(VALUES_CHOICES)}, got {values!r}")
    if probs is None:
        return values
    implied = "probs" if probs else "logits"
    if values not in ("auto", implied):
        raise ValueError(f"probs={probs} contradicts values={values!r}")
    return implied
