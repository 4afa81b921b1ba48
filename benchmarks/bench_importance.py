"""The importance-sampling verifier on the sample dump, as the main job runs it.

Run: ``python benchmarks/bench_importance.py [--steps 96] [--profile]``. Times
:func:`otbound.compare` with ``verifiers=("importance",)``, ``n = 2, 3, 4, 8``,
``target_se = 0.005`` on the first ``--steps`` steps of ``data/sample`` (``T = 1``,
``V = 8,192``), the verifier's kept rankings emptied before each run so that every stage is
sorted and solved, and prints ms per step (best of ``--repeat``). ``--profile`` prints the top
of a cProfile of one more run.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

import otbound as ob
from otbound.verifiers import importance

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "sample"


def _empty_caches() -> None:
    """Forget the kept rankings (a cold batch of steps)."""
    importance._chain_orders.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=96, help="steps of the sample dump")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (best is kept)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run")
    args = parser.parse_args()
    shard = next(iter(ob.open_dump(SAMPLE))).distributions(temperature=1.0)
    target, draft = shard.target[: args.steps], shard.draft[: args.steps]

    def run() -> object:
        _empty_caches()
        return ob.compare(
            target, draft, n=(2, 3, 4, 8), verifiers=("importance",), designs=(),
            trials=100_000, target_se=0.005,
        )  # fmt: skip

    ob.compare(target[:2], draft[:2], n=(2, 3), verifiers=("importance",), designs=())  # compile
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    steps = target.shape[0]
    print(f"importance, n = 2, 3, 4, 8, {steps} steps of V = {target.shape[-1]:,}:")
    print(f"  {1e3 * best / steps:.2f} ms per step (best of {args.repeat})")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
