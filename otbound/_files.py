"""Files that are never seen half written: write to a temporary name, fsync, rename."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

_TMP_RE = re.compile(r"^\..+\.tmp-[0-9]+-[0-9a-f]{8}$")


def fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temporary_name(path: Path) -> Path:
    """A fresh hidden name beside ``path`` (``.NAME.tmp-PID-RANDOM``)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path to write ``path``'s content to; renamed onto ``path`` on success.

    Readers see either the old file or the complete new one: the temporary file is fsynced,
    renamed over ``path`` and the rename made durable. If the block raises, the temporary
    file is removed and ``path`` is untouched.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     target = pathlib.Path(tmp) / "table.csv"
    ...     with atomic_output(target) as part:
    ...         _ = part.write_text("a,b\\n1,2\\n")
    ...     target.read_text().splitlines()
    ['a,b', '1,2']
    """
    path = Path(path)
    tmp = temporary_name(path)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(path.parent)


def write_json(path: str | os.PathLike[str], record: Mapping[str, Any]) -> None:
    """Write ``record`` to ``path`` as indented JSON, atomically (:func:`atomic_output`);
    values JSON does not know are written as their ``str``."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")


def temporaries(directory: Path) -> Iterable[Path]:
    """Leftover temporary files of :func:`atomic_output` (from a crashed writer)."""
    return (p for p in directory.iterdir() if _TMP_RE.match(p.name))
