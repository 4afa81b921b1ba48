"""Reading dumps lazily: :func:`open_dump` picks a format's reader by suffix, :class:`Dump`
reads through it one shard at a time.

The formats are :mod:`otbound.dumps.readers`, one module each, registered by suffix.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from otbound.dumps._format import DumpError, ShardInfo, parse_storage
from otbound.dumps._shard import ShardData
from otbound.dumps.readers import DumpReader, OpenOptions, file_suffixes, reader_for

__all__ = ["SINGLE_FILE_SUFFIXES", "VALUES_CHOICES", "Dump", "ShardData", "open_dump"]

#: Single-file formats :func:`open_dump` reads, by suffix (those otbound ships).
SINGLE_FILE_SUFFIXES = file_suffixes()
#: What ``open_dump(values=...)`` accepts: by array name, all logits, all probabilities.
VALUES_CHOICES = ("auto", "logits", "probs")


class Dump:
    """A dump opened for reading: the manifest now, the shards one at a time on demand.

    Built by :func:`open_dump`; never reads a shard until asked, so memory stays bounded by
    one shard. Picklable (it holds no open files), so worker processes can read shards.

    Parameters
    ----------
    reader : otbound.dumps.readers.DumpReader
        The opened format, which reads the shards.

    Attributes
    ----------
    path : pathlib.Path
    source : str
        ``"otbound"`` for a dump directory, else the single file's format (``"npz"``, ...).
    shards : tuple of ShardInfo
    """

    def __init__(self, reader: DumpReader) -> None:
        self.path = reader.path
        self.source = reader.name
        self._reader = reader
        self._manifest: dict[str, Any] = reader.manifest
        self.shards: tuple[ShardInfo, ...] = reader.shards

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

    @property
    def verifies(self) -> bool | None:
        """Whether reading a shard checks its file against the manifest's checksum (None for
        a format without one)."""
        verify: bool | None = getattr(self._reader, "verify", None)
        return verify

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
        return self._reader.read_shard(self.shard(key))

    def check(self) -> dict[str, str]:
        """Read every shard; the problems found, by shard id (empty when all are sound)."""
        problems = {}
        for info in self.shards:
            try:
                self.read_shard(info.index)
            except DumpError as exc:
                problems[info.id] = str(exc)
        return problems


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

        ``.npy`` and ``.safetensors`` files are memory-mapped. Any other suffix registered
        with :func:`otbound.dumps.readers.register_reader` is read by its reader.
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
    options = OpenOptions(target_key, draft_key, values, verify, shard_steps)
    return Dump(reader_for(path).open(path, options))


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
