"""How often :func:`otbound.compare` validates its probability rows, and what that costs.

``compare`` validates ``p`` and ``q`` at its public edge; everything inward (the sweep, the
verifiers' ``applies`` and ``acceptance``) takes the validated :class:`otbound.problem.Step`
and trusts it. This benchmark counts the calls of the row checks
(``otbound._checks.as_distribution``, two per validated ``(p, q)`` pair) and times them under
cProfile, over 32 logged-like steps at V = 32,000 with the default verifiers, ``n = (2, 4)``
and ``trials=0`` (exact acceptances only, as the dump analysis runs them).

On 32 steps ``compare`` checks its rows twice (the batch, once: 0.02-0.03 s of a 1.2-1.3 s
``compare`` under the profiler, on a 2-core AMD EPYC; ``docs/performance.md``). Run::

    python benchmarks/bench_validation.py [--steps 32] [--vocab 32000]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
from scipy.special import softmax

import otbound
from otbound import _checks


def logged_pairs(steps: int, vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Target and draft rows that agree on the rough shape, as logged LLM steps do."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 3.0, (steps, vocab))
    p = softmax(base + rng.normal(0.0, 1.0, (steps, vocab)), axis=-1)
    q = softmax(base + rng.normal(0.0, 1.0, (steps, vocab)), axis=-1)
    return p, q


def _calls(stats: pstats.Stats, function: object) -> tuple[int, float]:
    """Primitive calls of ``function`` and their cumulative time, from profiler statistics."""
    code = function.__code__  # type: ignore[attr-defined]
    for (path, line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        if name == code.co_name and path == code.co_filename and line == code.co_firstlineno:
            return int(row[1]), float(row[3])
    return 0, 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=32_000)
    args = parser.parse_args()
    p, q = logged_pairs(args.steps, args.vocab)
    otbound.compare(p[:1], q[:1], n=(2, 4), trials=0)  # compile the numba kernels
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    otbound.compare(p, q, n=(2, 4), trials=0)
    profiler.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    calls, seconds = _calls(stats, _checks.as_distribution)
    pairs, _ = _calls(stats, _checks.as_distribution_pair)
    print(f"compare: {args.steps} steps at V = {args.vocab:,}, n = (2, 4), trials = 0")
    print(f"  as_distribution: {calls} calls ({calls / args.steps:.1f} a step), {seconds:.3f} s")
    print(f"  as_distribution_pair: {pairs} calls ({pairs / args.steps:.1f} a step)")
    print(f"  compare (wall, under the profiler): {wall:.2f} s")


if __name__ == "__main__":
    main()
