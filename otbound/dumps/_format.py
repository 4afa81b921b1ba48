"""otbound's dump format: constants, the manifest, top-k rows, dtypes and atomic file writes.

Format version 1 (see :mod:`otbound.dumps` for the full description)::

    DUMP/
      manifest.json              format, version, models, vocabulary sizes, dtype, storage,
                                 processing, creation info, and the shard list with checksums
      shard-00000.safetensors    full rows:  target_logits [steps, V_t], draft_logits [steps, V_d]
                                 top-k rows: {target,draft}_ids [steps, K] (int64),
                                             {target,draft}_topk_logits [steps, K],
                                             {target,draft}_logsumexp [steps] (float64)
      shard-00000.parquet        per-step metadata: prompt_id, position, token (+ any extras)
      ...
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import platform
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from otbound._files import atomic_output
from otbound.drafts.tokens import top_tokens as _top_tokens
from otbound.dumps._safetensors import bf16_bits_to_float32, float32_to_bf16_bits

#: The ``format`` field of every manifest.
FORMAT_NAME = "otbound-dump"
#: The version this otbound writes; it reads this version and older ones.
FORMAT_VERSION = 1
#: The manifest's file name inside a dump directory.
MANIFEST_NAME = "manifest.json"
#: Storage dtypes of the logits (``bfloat16`` is stored as its ``uint16`` bit patterns).
DTYPES = ("float16", "bfloat16", "float32", "float64")
#: The per-step metadata columns every shard's table has (missing ones are null).
METADATA_COLUMNS = ("prompt_id", "position", "token")

#: The safetensors dtype code each storage dtype is written with.
STORAGE_CODE = {"float16": "F16", "bfloat16": "U16", "float32": "F32", "float64": "F64"}


class DumpError(ValueError):
    """A dump cannot be read or processed as asked; the message names the file and the problem."""


# --------------------------------------------------------------------------------------------
# dtypes


def as_storage(values: np.ndarray, dtype: str, name: str) -> np.ndarray:
    """``values`` in the array dtype a shard stores for the logical ``dtype``.

    For ``bfloat16`` the result holds the ``uint16`` bit patterns: floats are rounded to
    bfloat16 (nearest, ties to even) and a ``uint16`` input is taken to be such bit patterns
    already (what ``tensor.view(torch.int16).numpy().view(numpy.uint16)`` gives).
    """
    arr = np.asarray(values)
    if dtype == "bfloat16" and arr.dtype == np.uint16:
        return np.ascontiguousarray(arr)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array, got dtype {arr.dtype}")
    if dtype == "bfloat16":
        return float32_to_bf16_bits(arr.astype(np.float32, copy=False))
    return np.ascontiguousarray(arr, dtype=np.dtype(dtype))


#: float16 arrays of at least this many values are converted by the compiled pass even when
#: numba is not loaded yet (it saves about 5 ns a value: 0.35 s at this size).
COMPILED_HALF_SIZE = 1 << 26


def from_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Logits as float32 (16-bit storage) or as stored (float32, float64)."""
    if dtype == "bfloat16":
        return bf16_bits_to_float32(values)
    if dtype == "float16":
        # the same bits either way; the compiled pass is worth loading numba (about 0.6 s)
        # only when an analysis has loaded it already or for a very large array
        if "numba" in sys.modules or np.size(values) >= COMPILED_HALF_SIZE:
            from otbound.dumps._float16 import float16_to_float32  # numba

            return float16_to_float32(values)
        return np.asarray(values, dtype=np.float32)
    return values


# --------------------------------------------------------------------------------------------
# top-k rows


@dataclass(frozen=True)
class TopKRows:
    r"""The ``K`` largest logits of each row of a distribution, with the full row's logsumexp.

    The known probabilities are ``exp(ℓ_i − lse)`` and the mass on the unstored tokens (the
    tail) is ``1 − Σ_i exp(ℓ_i − lse)``; nothing else about the tail is known, except that each
    tail token is no more likely than the least likely stored one. A tail is *empty* (known to
    be exactly zero, not merely computed as small) only for rows that store every token
    (``K = V``) or that ``complete`` marks.

    Attributes
    ----------
    ids : numpy.ndarray of int64, shape (steps, K)
        Token ids, distinct within a row, in ``[0, vocab_size)``; any order.
    logits : numpy.ndarray of float, shape (steps, K)
        Their logits; ``-inf`` for a token of probability zero.
    logsumexp : numpy.ndarray of float64, shape (steps,)
        ``log Σ_{x ∈ V} exp(ℓ_x)`` over the full vocabulary.
    vocab_size : int
        The full vocabulary's size ``V``.
    complete : numpy.ndarray of bool, shape (steps,), optional
        Rows whose tail is known to be empty: every unstored token has probability zero
        (:meth:`from_logits` marks the rows with at most ``K`` finite logits; filtering marks
        the rows it truncates). Rows with ``K = V`` are always complete.
    """

    ids: np.ndarray
    logits: np.ndarray
    logsumexp: np.ndarray
    vocab_size: int
    complete: np.ndarray | None = None

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids)
        logits = np.asarray(self.logits)
        lse = np.asarray(self.logsumexp, dtype=np.float64)
        if ids.ndim != 2 or logits.shape != ids.shape or lse.shape != ids.shape[:1]:
            raise DumpError(
                "top-k rows need ids and logits of one shape (steps, K) and logsumexp of shape "
                f"(steps,); got {ids.shape}, {logits.shape} and {lse.shape}"
            )
        if ids.dtype.kind not in "iu":
            raise DumpError(f"top-k ids must be integers, got dtype {ids.dtype}")
        if int(self.vocab_size) < 1:
            raise DumpError(f"vocab_size must be >= 1, got {self.vocab_size}")
        object.__setattr__(self, "ids", ids.astype(np.int64, copy=False))
        object.__setattr__(self, "logits", logits)
        object.__setattr__(self, "logsumexp", lse)
        object.__setattr__(self, "vocab_size", int(self.vocab_size))
        given = np.zeros(ids.shape[0], bool) if self.complete is None else self.complete
        complete = np.array(given, dtype=bool).reshape(-1)
        if complete.shape != ids.shape[:1]:
            raise DumpError(f"complete must have shape ({ids.shape[0]},), got {complete.shape}")
        object.__setattr__(self, "complete", complete | (ids.shape[1] >= self.vocab_size))

    @classmethod
    def from_logits(cls, logits: object, k: int) -> TopKRows:
        """The top ``k`` of full logit rows (largest first, ties to the lower id).

        Parameters
        ----------
        logits : array_like, shape (steps, V)
        k : int
            ``1 <= k <= V``.

        Examples
        --------
        >>> rows = TopKRows.from_logits([[0.0, 2.0, 1.0]], k=2)
        >>> rows.ids.tolist(), round(float(rows.tail_mass()[0]), 4)
        ([[1, 2]], 0.09)
        """
        full = np.asarray(logits, dtype=np.float64)
        if full.ndim == 1:
            full = full[None, :]
        if full.ndim != 2:
            raise DumpError(f"logits must have shape (steps, V), got {full.shape}")
        if not 1 <= k <= full.shape[1]:
            raise DumpError(f"k must be in [1, {full.shape[1]}], got {k}")
        if np.isnan(full).any():
            raise DumpError("logits contain NaN: the top k is undefined")
        order = _top_tokens(full, k)  # O(V) per row, largest first, ties to the lower id
        top = np.take_along_axis(full, order, axis=1)
        peak = np.max(full, axis=1, keepdims=True)
        with np.errstate(invalid="ignore", over="ignore"):
            lse = (peak + np.log(np.sum(np.exp(full - peak), axis=1, keepdims=True)))[:, 0]
        complete = np.sum(full > -np.inf, axis=1) <= k  # every unstored logit is -inf
        return cls(order.astype(np.int64), top, lse, full.shape[1], complete)

    @property
    def num_steps(self) -> int:
        """Number of rows."""
        return int(self.ids.shape[0])

    @property
    def k(self) -> int:
        """Stored tokens per row."""
        return int(self.ids.shape[1])

    def probabilities(self) -> np.ndarray:
        """Known probabilities ``exp(ℓ − lse)``, float64, shape (steps, K)."""
        with np.errstate(invalid="ignore", over="ignore"):
            probs: np.ndarray = np.exp(
                np.asarray(self.logits, dtype=np.float64) - self.logsumexp[:, None]
            )
        return probs

    def tail_mass(self) -> np.ndarray:
        """``1 − Σ exp(ℓ − lse)`` per row, clipped to ``[0, 1]``; exactly 0 for complete rows.

        No threshold: a computed tail of ``1e-13`` is a tail of ``1e-13`` (give or take the
        rounding bounded by :meth:`rounding_allowance`).
        """
        tail: np.ndarray = np.clip(1.0 - self.probabilities().sum(axis=1), 0.0, 1.0)
        tail[self.complete] = 0.0
        return tail

    def rounding_allowance(self) -> np.ndarray:
        r"""A bound ``δ`` on the float error of the known probabilities, per row.

        With ``u = 2⁻⁵³`` (float64), ``u_ℓ`` the unit roundoff of the stored logits' dtype
        (``2⁻²⁴`` for float32: they may have been rounded after the logsumexp was computed),
        ``M = max(|lse|, max_i |ℓ_i|)`` over finite values, ``K`` stored tokens and ``V`` the
        vocabulary, each ``exp(ℓ_i − lse)`` evaluated in float64 is within a relative

        .. math:: ρ = u_ℓ M + u\,(3M + 2⌈\log_2 V⌉ + 5)

        of the value the full row defines (storage of ``ℓ_i``; the logsumexp's own float64
        evaluation, ``u(M + 2⌈\log_2 V⌉ + 3)``; the subtraction, ``2uM``; ``exp``, ``2u``),
        and their float64 sum adds ``Ku`` relative. So

        .. math:: \sum_i |\hat p_i − p_i| \le δ = 2\,(ρ + Ku)\,\sum_i \hat p_i,

        the factor 2 covering second-order terms (``ρ + Ku < 0.1``). It assumes the
        logsumexp was computed in float64 from the full row, as the format requires.

        Returns
        -------
        numpy.ndarray of float64, shape (steps,)
        """
        u = 2.0**-53
        logits = np.asarray(self.logits)
        u_logits = float(np.finfo(logits.dtype).eps) / 2 if logits.dtype.kind == "f" else u
        with np.errstate(invalid="ignore"):
            finite = np.where(np.isfinite(logits), np.abs(logits.astype(np.float64)), 0.0)
        size = finite.max(axis=1, initial=0.0)
        size = np.fmax(size, np.where(np.isfinite(self.logsumexp), np.abs(self.logsumexp), 0.0))
        log_v = np.ceil(np.log2(max(self.vocab_size, 2)))
        rho = u_logits * size + u * (3 * size + 2 * log_v + 5)
        with np.errstate(invalid="ignore", over="ignore"):
            total = self.probabilities().sum(axis=1)
        allowance: np.ndarray = 2.0 * (rho + self.k * u) * np.where(np.isfinite(total), total, 0.0)
        return allowance

    def take(self, rows: np.ndarray | slice) -> TopKRows:
        """The rows selected by an index, slice or boolean mask."""
        return TopKRows(
            self.ids[rows],
            self.logits[rows],
            self.logsumexp[rows],
            self.vocab_size,
            self.complete[rows],  # type: ignore[index]
        )


# --------------------------------------------------------------------------------------------
# shards


@dataclass(frozen=True)
class ShardInfo:
    """One shard of a dump, as listed by the manifest (or one slice of a single file).

    Attributes
    ----------
    index : int
        Position in ``Dump.shards``.
    id : str
        Stable identifier (``"shard-00000"``); results keyed by it survive a resume.
    file : str
        The shard's file name (relative to the dump directory) or the single file's path.
    num_steps : int
    start : int
        Global id of the shard's first step; its steps are ``start .. start + num_steps − 1``.
    sha256 : str or None
        Expected checksum of ``file`` (None for single files).
    size : int or None
        Expected size of ``file`` in bytes (None for single files).
    metadata_file : str or None
        The Parquet table of per-step metadata.
    metadata_sha256 : str or None
    metadata_size : int or None
    """

    index: int
    id: str
    file: str
    num_steps: int
    start: int
    sha256: str | None = None
    size: int | None = None
    metadata_file: str | None = None
    metadata_sha256: str | None = None
    metadata_size: int | None = None

    @property
    def steps(self) -> np.ndarray:
        """Global step ids of the shard, int64."""
        return np.arange(self.start, self.start + self.num_steps, dtype=np.int64)


# --------------------------------------------------------------------------------------------
# the manifest


def parse_storage(storage: object, where: str) -> int | None:
    """``None`` for ``"full"``, ``K`` for ``"topk:K"``; anything else is a :class:`DumpError`."""
    if storage == "full":
        return None
    if isinstance(storage, str):
        match = re.fullmatch(r"topk:([0-9]+)", storage)
        if match and int(match.group(1)) >= 1:
            return int(match.group(1))
    raise DumpError(f"{where}: storage must be 'full' or 'topk:K' with K >= 1, got {storage!r}")


def creation_info() -> dict[str, str]:
    """When and with what a dump was created (no host or user names)."""
    from otbound._version import __version__

    return {
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "otbound_version": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


_REQUIRED = (
    "format",
    "format_version",
    "dtype",
    "storage",
    "target_vocab_size",
    "draft_vocab_size",
    "shards",
)
_SHARD_REQUIRED = ("id", "file", "num_steps", "sha256", "size")


def _plain_name(name: object, where: str) -> str:
    """A file name inside the dump directory (no separators, no '..')."""
    if not isinstance(name, str) or not name or name in (".", "..") or re.search(r"[/\\]", name):
        raise DumpError(f"{where}: {name!r} is not a plain file name inside the dump")
    return name


def validate_manifest(manifest: object, where: str) -> tuple[ShardInfo, ...]:
    """Check a parsed manifest and return its shards; problems raise :class:`DumpError`.

    ``where`` names the manifest file in messages.
    """
    if not isinstance(manifest, dict):
        raise DumpError(f"{where}: the manifest is not a JSON object")
    missing = [key for key in _REQUIRED if key not in manifest]
    if missing:
        raise DumpError(
            f"{where}: missing field(s) {', '.join(missing)}; fields found: "
            f"{', '.join(sorted(manifest)) or 'none'}"
        )
    if manifest["format"] != FORMAT_NAME:
        raise DumpError(f"{where}: format is {manifest['format']!r}, expected {FORMAT_NAME!r}")
    version = manifest["format_version"]
    if not isinstance(version, int) or version < 1:
        raise DumpError(f"{where}: format_version must be an integer >= 1, got {version!r}")
    if version > FORMAT_VERSION:
        raise DumpError(
            f"{where}: format version {version} was written by a newer otbound; this one reads "
            f"versions up to {FORMAT_VERSION}: upgrade otbound"
        )
    if manifest["dtype"] not in DTYPES:
        raise DumpError(f"{where}: dtype must be one of {DTYPES}, got {manifest['dtype']!r}")
    topk = parse_storage(manifest["storage"], where)
    if topk is not None and manifest["dtype"] not in ("float32", "float64"):
        raise DumpError(f"{where}: top-k storage needs dtype float32 or float64")
    for key in ("target_vocab_size", "draft_vocab_size"):
        value = manifest[key]
        if value is not None and (not isinstance(value, int) or value < 1):
            raise DumpError(f"{where}: {key} must be a positive integer, got {value!r}")
    shards = manifest["shards"]
    if not isinstance(shards, list):
        raise DumpError(f"{where}: shards must be a list")
    if shards and (manifest["target_vocab_size"] is None or manifest["draft_vocab_size"] is None):
        raise DumpError(f"{where}: a dump with shards must give both vocabulary sizes")
    out: list[ShardInfo] = []
    seen: set[str] = set()
    start = 0
    for index, entry in enumerate(shards):
        if not isinstance(entry, dict):
            raise DumpError(f"{where}: shard entry {index} is not a JSON object")
        gone = [key for key in _SHARD_REQUIRED if key not in entry]
        if gone:
            raise DumpError(f"{where}: shard entry {index} lacks {', '.join(gone)}")
        steps = entry["num_steps"]
        if not isinstance(steps, int) or steps < 0:
            raise DumpError(f"{where}: shard entry {index} has num_steps {steps!r}")
        if entry["id"] in seen:
            raise DumpError(f"{where}: shard id {entry['id']!r} appears twice")
        seen.add(entry["id"])
        meta_file = entry.get("metadata_file")
        out.append(
            ShardInfo(
                index=index,
                id=str(entry["id"]),
                file=_plain_name(entry["file"], where),
                num_steps=steps,
                start=start,
                sha256=entry["sha256"],
                size=entry["size"],
                metadata_file=None if meta_file is None else _plain_name(meta_file, where),
                metadata_sha256=entry.get("metadata_sha256"),
                metadata_size=entry.get("metadata_size"),
            )
        )
        start += steps
    if manifest.get("num_steps", start) != start:
        raise DumpError(
            f"{where}: num_steps is {manifest['num_steps']} but the shards hold {start} steps"
        )
    return tuple(out)


# --------------------------------------------------------------------------------------------
# files


class _HashingWriter:
    """A binary sink that writes through to ``f`` and keeps a sha256 and a byte count."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | memoryview) -> int:
        self.sha.update(data)
        self.size += len(data) if isinstance(data, bytes) else data.nbytes
        return self._f.write(data)


def atomic_write(path: Path, write: Callable[[Any], None]) -> tuple[str, int]:
    """Write a file atomically (:func:`otbound._files.atomic_output`) through a hashing sink.

    Parameters
    ----------
    path : pathlib.Path
    write : callable
        Called with a binary sink (``.write(bytes)``) that also hashes what it is given.

    Returns
    -------
    (str, int)
        The sha256 (hex) and the size of what was written.
    """
    with atomic_output(path) as tmp, open(tmp, "xb") as raw:
        sink = _HashingWriter(raw)
        write(sink)
    return sink.sha.hexdigest(), sink.size


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    """sha256 of a file, read in chunks (memory stays at ``chunk`` bytes)."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            sha.update(block)
    return sha.hexdigest()
