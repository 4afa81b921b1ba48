"""Throughput of the exact bounds (a benchmark, not a test).

Run: ``python benchmarks/bench_bounds.py [--quick]``. Prints Markdown tables:

1. the ``iid`` sweep at V = 32,000 and 128,256, n in {2, 4, 8}, batches of 256 steps: time per
   step next to a softmax of the same two rows, measured in the same run (goal: the bound costs
   no more than 3 softmaxes);
2. ``without_replacement`` at V = 32,000, n in {2, 4, 8} (goal: <= 20 ms per step);
3. the primal LP: the largest V solved within 10 s for n = 2 and 3, and the sweep's speed-up
   over the LP at V = 100;
4. SpecHub's compact LP (``solve_spechub_lp``) at V = 5,000 (goal: well under 10 s).

Distributions are language-model-like (Zipf logits with a noisy draft, as in
``otbound.examples``), not uniform noise, because the sweep's cost depends on their shape.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np
from scipy.special import softmax

import otbound as ob


def machine() -> str:
    """One line describing where the numbers were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if "model name" in line)
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}"
    )


def lm_like(steps: int, vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Zipf-shaped target logits and a noisy, re-tempered draft: (steps, vocab) each."""
    rng = np.random.default_rng(seed)
    log_rank = np.log(np.arange(1, vocab + 1))
    sharp = rng.uniform(0.8, 2.0, size=(steps, 1))
    target = -sharp * log_rank[rng.permuted(np.tile(np.arange(vocab), (steps, 1)), axis=1)]
    draft = (target + 1.5 * rng.standard_normal((steps, vocab))) / rng.uniform(0.8, 1.3, (steps, 1))
    return target, draft


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def pairs_table(description: str, header: str) -> int:
    """Parse ``--repeat`` (default 20), print the machine and a Markdown table's header
    (``header``: its columns, ``|``-separated); returns the repeat count."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
    print(f"| {header} |")
    print("|" + "---|" * (header.count("|") + 1))
    return int(args.repeat)


def lean_softmax(x: np.ndarray) -> np.ndarray:
    """The cheapest float64 softmax numpy offers: subtract the max, exp in place, divide."""
    y = x - x.max(axis=-1, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=-1, keepdims=True)
    return y


def bench_iid(vocabs: tuple[int, ...], batch: int) -> None:
    print(f"\n### iid sweep, batches of {batch} steps (ms per step)\n")
    print("| V | n | sweep | scipy softmax (p, q) | lean softmax (p, q) | / scipy | / lean |")
    print("|---|---|---|---|---|---|---|")
    for vocab in vocabs:
        target, draft = lm_like(batch, vocab)
        p, q = softmax(target, axis=-1), softmax(draft, axis=-1)
        t_scipy = best_time(lambda: (softmax(target, axis=-1), softmax(draft, axis=-1))) / batch
        t_lean = best_time(lambda: (lean_softmax(target), lean_softmax(draft))) / batch
        for n in (2, 4, 8):
            t = best_time(lambda: ob.optimal_acceptance(p, q, n=n)) / batch
            print(
                f"| {vocab:,} | {n} | {t * 1e3:.2f} | {t_scipy * 1e3:.2f} | {t_lean * 1e3:.2f} "
                f"| {t / t_scipy:.2f} | {t / t_lean:.2f} |"
            )


def bench_without_replacement(vocab: int, steps: int) -> None:
    print(f"\n### without_replacement, V = {vocab:,} ({steps} steps)\n")
    print("| n | ms per step | iid sweep, ms per step |")
    print("|---|---|---|")
    target, draft = lm_like(steps, vocab, seed=1)
    p, q = softmax(target, axis=-1), softmax(draft, axis=-1)
    ob.optimal_acceptance(p[:1], q[:1], n=2, design="without_replacement")  # compile
    for n in (2, 4, 8):
        t = best_time(lambda: ob.optimal_acceptance(p, q, n=n, design="without_replacement"), 1)
        t_iid = best_time(lambda: ob.optimal_acceptance(p, q, n=n), 3)
        print(f"| {n} | {t / steps * 1e3:.1f} | {t_iid / steps * 1e3:.2f} |")


def bench_lp(limit_s: float, quick: bool) -> None:
    print("\n### primal LP (HiGHS) against the sweep (iid)\n")
    print("| n | V | LP seconds | sweep seconds | speed-up |")
    print("|---|---|---|---|---|")
    grid = {2: (50, 100, 200, 400, 600, 800, 1000, 1400, 2000), 3: (20, 40, 60, 80, 100, 120, 150)}
    largest = {}
    for n, vocabs in grid.items():
        for vocab in vocabs:
            target, draft = lm_like(1, vocab, seed=2)
            p, q = softmax(target[0]), softmax(draft[0])
            t_lp = best_time(lambda: ob.solve_primal(p, q, n=n), 1)
            t_sweep = best_time(lambda: ob.optimal_acceptance(p, q, n=n), 5)
            if vocab == 100 or t_lp <= limit_s:
                print(f"| {n} | {vocab} | {t_lp:.3f} | {t_sweep:.5f} | {t_lp / t_sweep:,.0f}x |")
            if t_lp > limit_s:
                break
            largest[n] = vocab
            if quick and vocab >= 100:
                break
    for n, vocab in largest.items():
        print(f"\nLargest V on the grid solved within {limit_s:g} s for n = {n}: {vocab}")


def bench_spechub_lp(vocab: int) -> None:
    print(f"\n### SpecHub's compact LP (HiGHS), V = {vocab:,}\n")
    target, draft = lm_like(1, vocab, seed=3)
    p, q = softmax(target[0]), softmax(draft[0])
    t_lp = best_time(lambda: ob.solve_spechub_lp(p, q), 3)
    print(f"solve_spechub_lp: {t_lp:.3f} s (goal: well under 10 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    args = parser.parse_args()
    print(f"Machine: {machine()}")
    if args.quick:
        bench_iid((32_000,), 16)
        bench_without_replacement(32_000, 2)
    else:
        bench_iid((32_000, 128_256), 256)
        bench_without_replacement(32_000, 16)
    bench_lp(10.0, args.quick)
    bench_spechub_lp(5_000)


if __name__ == "__main__":
    main()
