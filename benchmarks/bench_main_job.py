"""The main job against the floor under it: ``compute_bounds`` with the README's defaults on a
dump, as a multiple of reading that dump and taking both softmaxes (a benchmark, not a test).

Run: ``python benchmarks/bench_main_job.py [DUMP] [--repeat 3]`` (``DUMP``: the sample in
``data/sample``).

1. **Floor**: a fresh process that imports otbound, reads every shard (float16 to float32) and
   takes the softmax of both models' rows at temperature 1: the least any analysis of the dump
   must do, start-up included.
2. **Main job**: ``scripts/compute_bounds.py DUMP --out TMP --quiet`` in a fresh process with
   the README's defaults (every design, n in {2, 3, 4, 8}, every verifier, Monte Carlo sized
   for a per-step standard error of 0.005, figures), wall time including the interpreter's
   start and imports.

   Defaults include ``--jobs auto``: one process per usable core. A third row runs
   the same with ``--jobs 1``, one process (whose compiled kernels still use numba's threads
   where they have them).

Prints the times, the ratios to the floor (measured in one run, to one decimal; the best of
``--repeat`` for each, the runs interleaved), and the machine. The goal is a ratio of at
most 10 (``docs/performance.md`` has the latest figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_bounds import machine

import otbound as ob

ROOT = Path(__file__).resolve().parents[1]


_FLOOR = """
import sys
import otbound as ob
for shard in ob.open_dump(sys.argv[1]):
    shard.distributions(temperature=1.0)
"""


def floor_seconds(dump_path: Path) -> tuple[float, int]:
    """Wall seconds of a fresh process that imports otbound, reads every shard and takes both
    softmaxes (as the main job's time counts its start too); the number of steps."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _FLOOR, str(dump_path)], check=True)
    seconds = time.perf_counter() - start
    return seconds, ob.open_dump(dump_path).num_steps


def main_job_seconds(dump_path: Path, *options: str) -> float:
    """Wall seconds of ``compute_bounds`` with its defaults (and ``options``), in a fresh
    process."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            str(ROOT / "scripts" / "compute_bounds.py"),
            str(dump_path),
            "--out",
            str(Path(tmp) / "bounds"),
            "--quiet",
            *options,
        ]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", nargs="?", default=str(ROOT / "data" / "sample"))
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs of each")
    args = parser.parse_args(argv)
    dump_path = Path(args.dump)
    floors, jobs, singles = [], [], []
    for _ in range(args.repeat):  # interleaved, so that a slow spell of the machine hits all
        floors.append(floor_seconds(dump_path))
        jobs.append(main_job_seconds(dump_path))
        singles.append(main_job_seconds(dump_path, "--jobs", "1"))
    floor, steps = min(floors)
    job, single = min(jobs), min(singles)
    print(f"machine: {machine()}")
    print(f"dump: {dump_path} ({steps} steps)")
    print("| what | seconds | per step (ms) | ratio to the floor |")
    print("|---|---|---|---|")
    per_step = 1e3 * floor / steps
    print(f"| read the dump and take both softmaxes | {floor:.2f} | {per_step:.1f} | 1 |")
    for what, seconds in (("README defaults", job), ("`--jobs 1`", single)):
        print(
            f"| compute_bounds, {what} | {seconds:.2f} | {1e3 * seconds / steps:.1f} | "
            f"{seconds / floor:.1f}x |"
        )
    print(f"goal: at most 10x with the defaults; cores: {os.cpu_count()}")


if __name__ == "__main__":
    main()
