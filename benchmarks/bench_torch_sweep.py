"""Throughput of the torch sweeps beside numpy's ``optimal_acceptance`` (a benchmark, not a test).

Run: ``python benchmarks/bench_torch_sweep.py [--quick] [--designs iid,greedy,topk,hub]``.

Prints one Markdown table: steps per second of :func:`otbound.bounds.torch_sweep.
optimal_acceptance_torch` (float64, on the CPU and, when one is available, on CUDA with the
inputs already on the device) and of :func:`otbound.optimal_acceptance` (numpy/numba, CPU), for
V = 32,000 and 128,256, n in {2, 4, 8}, batches of 256 steps, with the largest difference
between the two paths. Each number is the best of a few runs after a warm-up call. The
distributions are language-model-like (Zipf logits with a noisy draft, as in
``benchmarks/bench_bounds.py``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from bench_bounds import lm_like as lm_like_logits
from bench_bounds import machine as cpu_and_python
from scipy.special import softmax

import otbound as ob
from otbound.bounds.torch_sweep import TORCH_DESIGNS, optimal_acceptance_torch


def machine() -> str:
    """One line describing where the numbers were measured (CPU, GPU, versions)."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (
        f"{cpu_and_python()}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), GPU: {gpu}"
    )


def lm_like(steps: int, vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities of :func:`bench_bounds.lm_like`'s Zipf-shaped logits, (steps, vocab) each."""
    target, draft = lm_like_logits(steps, vocab, seed)
    return softmax(target, axis=-1), softmax(draft, axis=-1)


def best_time(fn: Callable[[], object], repeat: int, sync: Callable[[], None]) -> float:
    """Best wall time of ``repeat`` calls after one warm-up call, in seconds."""
    fn()
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="V = 32,000 only, one repeat")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--designs", default="iid", help=f"of {','.join(TORCH_DESIGNS)}")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    vocabs = (32_000,) if args.quick else (32_000, 128_256)
    repeat = 1 if args.quick else args.repeat
    cuda = torch.cuda.is_available()

    def nothing() -> None:
        return None

    print(f"machine: {machine()}\n")
    head = "| design | V | n | numpy steps/s | torch CPU steps/s | CPU speed-up |"
    rule = "|---|---|---|---|---|---|"
    if cuda:
        head += " torch CUDA steps/s | CUDA speed-up |"
        rule += "---|---|"
    print(f"batches of {args.batch} steps, float64; max |torch − numpy| in the last column\n")
    print(head + " max diff |")
    print(rule + "---|")
    for vocab in vocabs:
        p, q = lm_like(args.batch, vocab)
        p_cpu, q_cpu = torch.from_numpy(p), torch.from_numpy(q)
        if cuda:
            p_gpu, q_gpu = p_cpu.cuda(), q_cpu.cuda()
        for design in designs:
            for n in (2,) if design == "hub" else (2, 4, 8):
                want = ob.optimal_acceptance(p, q, n=n, design=design)
                t_np = best_time(
                    lambda: ob.optimal_acceptance(p, q, n=n, design=design), repeat, nothing
                )
                t_cpu = best_time(
                    lambda: optimal_acceptance_torch(p_cpu, q_cpu, n=n, design=design),
                    repeat,
                    nothing,
                )
                got = optimal_acceptance_torch(p_cpu, q_cpu, n=n, design=design).numpy()
                diff = float(np.max(np.abs(got - want)))
                row = (
                    f"| {design} | {vocab:,} | {n} | {args.batch / t_np:,.0f} | "
                    f"{args.batch / t_cpu:,.0f} | {t_np / t_cpu:.2f}x |"
                )
                if cuda:
                    t_gpu = best_time(
                        lambda: optimal_acceptance_torch(p_gpu, q_gpu, n=n, design=design),
                        repeat,
                        torch.cuda.synchronize,
                    )
                    got = optimal_acceptance_torch(p_gpu, q_gpu, n=n, design=design)
                    diff = max(diff, float(np.max(np.abs(got.cpu().numpy() - want))))
                    row += f" {args.batch / t_gpu:,.0f} | {t_np / t_gpu:.1f}x |"
                print(row + f" {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
