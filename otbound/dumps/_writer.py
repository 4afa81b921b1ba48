"""Writing otbound dumps: shards and manifest, each written atomically; resumable."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pandas as pd

from otbound._files import temporaries
from otbound.dumps._format import (
    DTYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    METADATA_COLUMNS,
    DumpError,
    ShardInfo,
    TopKRows,
    as_storage,
    atomic_write,
    creation_info,
    parse_storage,
    validate_manifest,
)
from otbound.dumps._safetensors import write_safetensors

#: Default number of steps per shard for :meth:`DumpWriter.write`.
DEFAULT_SHARD_STEPS = 1024


def metadata_frame(metadata: object, steps: int) -> pd.DataFrame:
    """Per-step metadata as a DataFrame with ``prompt_id``, ``position``, ``token`` first.

    Missing standard columns are filled with nulls (pandas ``Int64``); extra columns are kept.
    """
    if metadata is None:
        frame = pd.DataFrame(index=pd.RangeIndex(steps))
    elif isinstance(metadata, pd.DataFrame):
        frame = metadata.reset_index(drop=True).copy()
    elif isinstance(metadata, Mapping):
        frame = pd.DataFrame({str(k): np.asarray(v) for k, v in metadata.items()})
    else:
        raise TypeError(
            f"metadata must be a DataFrame or a mapping of arrays, got {type(metadata).__name__}"
        )
    if len(frame) != steps:
        raise ValueError(f"metadata has {len(frame)} rows but the shard has {steps} steps")
    if "step" in frame.columns:
        raise ValueError("metadata column 'step' is reserved (global step ids are assigned)")
    for column in METADATA_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.array([None] * steps, dtype="Int64")
    extras = [c for c in frame.columns if c not in METADATA_COLUMNS]
    return frame[[*METADATA_COLUMNS, *extras]]


def _vocab_pair(vocab_size: object) -> tuple[int | None, int | None]:
    if vocab_size is None:
        return None, None
    if isinstance(vocab_size, (tuple, list)) and len(vocab_size) == 2:
        return int(vocab_size[0]), int(vocab_size[1])
    return int(vocab_size), int(vocab_size)  # type: ignore[call-overload]


class DumpWriter:
    """Write an otbound dump directory shard by shard; each file lands atomically.

    Every shard (safetensors + Parquet) and every manifest update is written to a temporary
    name in the dump directory, fsynced and renamed, so a crash or an exception leaves the
    dump as it was after the last complete shard; ``resume=True`` reopens it and appends.
    One writer per dump at a time.

    Parameters
    ----------
    path : str or os.PathLike
        The dump directory (created if missing; it must be empty or, with ``resume=True``,
        hold a dump).
    target_model, draft_model, tokenizer : str, optional
        Names recorded in the manifest.
    vocab_size : int or (int, int), optional
        Logit widths of the target and draft models (one int for both). Taken from the first
        shard when omitted with full storage; required for top-k storage.
    tokenizer_vocab_size : int, optional
        The tokenizer's length (``len(tokenizer)``), which may be smaller than the widths.
    dtype : {"float32", "float16", "bfloat16", "float64"}, optional
        Storage dtype of the logits (default float32). Top-k storage needs float32 or
        float64. ``bfloat16`` is stored as ``uint16`` bit patterns.
    storage : str, optional
        ``"full"`` (default) or ``"topk:K"``.
    logits_processing : str, default "raw"
        How the stored logits were produced (``"raw"``: straight from the model, before any
        temperature or filtering); recorded, not acted on.
    extra : dict, optional
        Anything JSON-serialisable to keep in the manifest (generation settings, prompt file).
    resume : bool, default False
        Append to the dump at ``path`` if there is one (given options must agree with it).

    Examples
    --------
    >>> import numpy as np, tempfile, otbound.dumps as od
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with od.DumpWriter(tmp + "/dump", target_model="t", draft_model="d") as w:
    ...         _ = w.write_shard(np.zeros((3, 5)), np.zeros((3, 5)), {"prompt_id": [0, 0, 1]})
    ...     od.open_dump(tmp + "/dump").num_steps
    3
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        target_model: str | None = None,
        draft_model: str | None = None,
        tokenizer: str | None = None,
        vocab_size: int | tuple[int, int] | None = None,
        tokenizer_vocab_size: int | None = None,
        dtype: str | None = None,
        storage: str | None = None,
        logits_processing: str = "raw",
        extra: Mapping[str, Any] | None = None,
        resume: bool = False,
    ) -> None:
        self.path = Path(path)
        self._closed = False
        if dtype is not None and dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        if storage is not None:
            parse_storage(storage, "storage")
        target_vocab, draft_vocab = _vocab_pair(vocab_size)
        given = {
            "target_model": target_model,
            "draft_model": draft_model,
            "tokenizer": tokenizer,
            "tokenizer_vocab_size": tokenizer_vocab_size,
            "target_vocab_size": target_vocab,
            "draft_vocab_size": draft_vocab,
            "dtype": dtype,
            "storage": storage,
        }
        manifest_path = self.path / MANIFEST_NAME
        if manifest_path.exists():
            if not resume:
                raise FileExistsError(
                    f"{self.path} already holds a dump; pass resume=True to append to it"
                )
            self._manifest = self._load(manifest_path)
            conflicts = [
                f"{key}={value!r} (the dump has {self._manifest.get(key)!r})"
                for key, value in given.items()
                if value is not None
                and self._manifest.get(key) is not None
                and self._manifest.get(key) != value
            ]
            if conflicts:
                raise ValueError(f"cannot resume {self.path}: " + "; ".join(conflicts))
            for key, value in given.items():
                if value is not None and self._manifest.get(key) is None:
                    self._manifest[key] = value
            for leftover in temporaries(self.path):
                with contextlib.suppress(OSError):
                    leftover.unlink()
        else:
            if self.path.exists() and any(self.path.iterdir()):
                raise FileExistsError(f"{self.path} exists, is not empty and holds no dump")
            self.path.mkdir(parents=True, exist_ok=True)
            self._manifest = {
                "format": FORMAT_NAME,
                "format_version": FORMAT_VERSION,
                **{k: v for k, v in given.items() if k not in ("dtype", "storage")},
                "dtype": dtype or "float32",
                "storage": storage or "full",
                "logits_processing": logits_processing,
                "created": creation_info(),
                "extra": dict(extra or {}),
                "num_steps": 0,
                "shards": [],
            }
        self._topk = parse_storage(self._manifest["storage"], "storage")
        if self._topk is not None:
            if self._manifest["dtype"] not in ("float32", "float64"):
                raise ValueError(
                    "top-k storage needs dtype float32 or float64: 16-bit top-k logits would "
                    "make the known probabilities disagree with the stored logsumexp"
                )
            if self._manifest["target_vocab_size"] is None:
                raise ValueError("top-k storage needs vocab_size (the full vocabulary's size)")
        self._write_manifest()
        self._shards = list(validate_manifest(self._manifest, str(manifest_path)))

    @staticmethod
    def _load(manifest_path: Path) -> dict[str, Any]:
        try:
            manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DumpError(f"{manifest_path}: cannot read the manifest ({exc})") from exc
        validate_manifest(manifest, str(manifest_path))
        return manifest

    # ----------------------------------------------------------------------------------------

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest as last written."""
        return copy.deepcopy(self._manifest)

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        """The shards written so far (including those of a resumed dump)."""
        return tuple(self._shards)

    @property
    def num_steps(self) -> int:
        """Steps written so far."""
        return int(self._manifest["num_steps"])

    def _write_manifest(self) -> None:
        text = json.dumps(self._manifest, indent=2, sort_keys=False) + "\n"
        atomic_write(self.path / MANIFEST_NAME, lambda f: f.write(text.encode("utf-8")))

    def _check_vocab(self, key: str, width: int) -> None:
        expected = self._manifest[key]
        if expected is not None and expected != width:
            side = key.split("_")[0]
            raise ValueError(f"{side} rows have {width} tokens but the dump's {key} is {expected}")

    def _full_tensors(self, target: object, draft: object) -> tuple[dict[str, np.ndarray], int]:
        dtype = self._manifest["dtype"]
        tensors = {}
        shapes = {}
        for side, rows in (("target", target), ("draft", draft)):
            if isinstance(rows, TopKRows):
                raise TypeError(f"this dump stores full rows; {side} is TopKRows")
            arr = np.asarray(rows)
            if arr.ndim != 2:
                raise ValueError(f"{side} logits must have shape (steps, V), got {arr.shape}")
            self._check_vocab(f"{side}_vocab_size", arr.shape[1])
            tensors[f"{side}_logits"] = as_storage(arr, dtype, f"{side} logits")
            shapes[side] = arr.shape
        if shapes["target"][0] != shapes["draft"][0]:
            raise ValueError(
                f"target and draft hold different numbers of steps: {shapes['target'][0]} "
                f"and {shapes['draft'][0]}"
            )
        return tensors, shapes["target"][0]

    def _topk_tensors(self, target: object, draft: object) -> tuple[dict[str, np.ndarray], int]:
        dtype = np.dtype(self._manifest["dtype"])
        tensors = {}
        for side, rows in (("target", target), ("draft", draft)):
            if not isinstance(rows, TopKRows):
                raise TypeError(
                    f"this dump stores top-{self._topk} rows; {side} must be TopKRows "
                    "(TopKRows.from_logits(logits, k) builds them)"
                )
            if rows.k != self._topk:
                raise ValueError(f"{side} rows hold {rows.k} tokens, the dump stores {self._topk}")
            self._check_vocab(f"{side}_vocab_size", rows.vocab_size)
            tensors[f"{side}_ids"] = rows.ids.astype(np.int64)
            tensors[f"{side}_topk_logits"] = np.asarray(rows.logits, dtype=dtype)
            tensors[f"{side}_logsumexp"] = rows.logsumexp.astype(np.float64)
        assert isinstance(target, TopKRows) and isinstance(draft, TopKRows)
        if target.num_steps != draft.num_steps:
            raise ValueError(
                f"target and draft hold different numbers of steps: {target.num_steps} "
                f"and {draft.num_steps}"
            )
        return tensors, target.num_steps

    def write_shard(
        self,
        target: np.ndarray | TopKRows,
        draft: np.ndarray | TopKRows,
        metadata: pd.DataFrame | Mapping[str, object] | None = None,
    ) -> ShardInfo:
        """Write one shard and record it in the manifest.

        Parameters
        ----------
        target, draft : numpy.ndarray, shape (steps, V), or TopKRows
            Logits of the two models at the same steps (full storage), or their top-k rows.
            Converted to the dump's dtype (a ``uint16`` array is taken as bfloat16 bits when
            the dtype is bfloat16).
        metadata : DataFrame or mapping of arrays, optional
            Per-step columns; ``prompt_id``, ``position`` (index of the generated token in
            its sequence) and ``token`` (the token actually generated) are the standard
            ones, null when absent. Extra columns are kept.

        Returns
        -------
        ShardInfo
        """
        if self._closed:
            raise ValueError("the writer is closed")
        if self._topk is None:
            tensors, steps = self._full_tensors(target, draft)
        else:
            tensors, steps = self._topk_tensors(target, draft)
        frame = metadata_frame(metadata, steps)
        index = len(self._shards)
        shard_id = f"shard-{index:05d}"
        shard_file = self.path / f"{shard_id}.safetensors"
        meta_file = self.path / f"{shard_id}.parquet"
        header = {
            "format": FORMAT_NAME,
            "format_version": str(FORMAT_VERSION),
            "dtype": self._manifest["dtype"],
            "storage": self._manifest["storage"],
            "shard": shard_id,
        }
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        table = buffer.getvalue()
        written: list[Path] = []
        try:
            sha, size = atomic_write(
                shard_file, lambda f: write_safetensors(f, tensors, metadata=header)
            )
            written.append(shard_file)
            meta_sha, meta_size = atomic_write(meta_file, lambda f: f.write(table))
            written.append(meta_file)
            entry = {
                "id": shard_id,
                "file": shard_file.name,
                "num_steps": steps,
                "sha256": sha,
                "size": size,
                "metadata_file": meta_file.name,
                "metadata_sha256": meta_sha,
                "metadata_size": meta_size,
            }
            before = copy.deepcopy(self._manifest)
            if self._topk is None:
                self._manifest["target_vocab_size"] = int(tensors["target_logits"].shape[1])
                self._manifest["draft_vocab_size"] = int(tensors["draft_logits"].shape[1])
            self._manifest["shards"].append(entry)
            self._manifest["num_steps"] = int(self._manifest["num_steps"]) + steps
            try:
                self._write_manifest()
            except BaseException:
                self._manifest = before
                raise
        except BaseException:
            for path in written:  # complete files, but no manifest lists them
                with contextlib.suppress(OSError):
                    path.unlink()
            raise
        info = ShardInfo(
            index=index,
            id=shard_id,
            file=shard_file.name,
            num_steps=steps,
            start=int(self._manifest["num_steps"]) - steps,
            sha256=sha,
            size=size,
            metadata_file=meta_file.name,
            metadata_sha256=meta_sha,
            metadata_size=meta_size,
        )
        self._shards.append(info)
        return info

    def write(
        self,
        target: np.ndarray | TopKRows,
        draft: np.ndarray | TopKRows,
        metadata: pd.DataFrame | Mapping[str, object] | None = None,
        *,
        shard_steps: int = DEFAULT_SHARD_STEPS,
    ) -> list[ShardInfo]:
        """Write many steps as consecutive shards of at most ``shard_steps`` steps each.

        Parameters are those of :meth:`write_shard`; returns the shards written.
        """
        if shard_steps < 1:
            raise ValueError(f"shard_steps must be >= 1, got {shard_steps}")
        steps = target.num_steps if isinstance(target, TopKRows) else len(np.asarray(target))
        frame = metadata_frame(metadata, steps)
        out = []
        for start in range(0, steps, shard_steps):
            rows = slice(start, start + shard_steps)
            out.append(
                self.write_shard(
                    _rows(target, rows), _rows(draft, rows), frame.iloc[rows].reset_index(drop=True)
                )
            )
        return out

    def close(self) -> None:
        """Stop writing (the manifest is already up to date after every shard)."""
        self._closed = True

    def __enter__(self) -> DumpWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _rows(rows: np.ndarray | TopKRows, index: slice) -> np.ndarray | TopKRows:
    if isinstance(rows, TopKRows):
        return TopKRows(rows.ids[index], rows.logits[index], rows.logsumexp[index], rows.vocab_size)
    return np.asarray(rows)[index]
