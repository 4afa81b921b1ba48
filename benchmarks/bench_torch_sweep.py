"""Throughput of the torch sweeps beside numpy's ``optimal_acceptance`` (a benchmark, not a test).

Run: ``python benchmarks/bench_torch_sweep.py [--device cuda] [--quick]
[--designs iid,without_replacement,conditional_poisson] [--vocabs 8192,32000,151936]``.

Prints one Markdown table: steps per second of :func:`otbound.bounds.torch_sweep.
optimal_acceptance_torch` (float64, on ``--device``, default CUDA when one is visible, with the
inputs already there) and of :func:`otbound.optimal_acceptance` (numpy/numba on the CPU), by V
and design for n in {2, 4, 8}, the ratio of the two measured in the same run, and the largest
difference between the two paths. Each number is the best of a few runs after a warm-up call;
numpy is timed on ``--numpy-batch`` steps (it is per-row work), torch on ``--batch``. The
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


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def print_rates(
    label: str,
    vocab: int,
    n: int,
    numpy_run: tuple[np.ndarray, float, int],
    torch_run: tuple[np.ndarray, float, int],
) -> None:
    """One Markdown row: steps per second of numpy and torch (each run: its values, its best
    seconds and its steps), their ratio, and the largest difference on the common steps."""
    (want, t_np, numpy_steps), (got, t_torch, torch_steps) = numpy_run, torch_run
    common = min(numpy_steps, torch_steps)
    diff = float(np.max(np.abs(got[:common] - want[:common])))
    numpy_rate, torch_rate = numpy_steps / t_np, torch_steps / t_torch
    print(
        f"| {label} | {vocab:,} | {n} | {numpy_rate:,.1f} | {torch_rate:,.1f} | "
        f"{torch_rate / numpy_rate:.2f}x | {diff:.1e} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="V = 32,000 only, one repeat")
    parser.add_argument("--batch", type=int, default=1024, help="steps per torch call")
    parser.add_argument("--numpy-batch", type=int, default=32, help="steps per numpy call")
    parser.add_argument(
        "--designs",
        default="iid,without_replacement,conditional_poisson",
        help=f"of {','.join(TORCH_DESIGNS)}",
    )
    parser.add_argument("--vocabs", default="8192,32000,151936")
    parser.add_argument("--ns", default="2,4,8")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    vocabs = [32_000] if args.quick else _ints(args.vocabs)
    repeat = 1 if args.quick else args.repeat
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def nothing() -> None:
        return None

    print(f"machine: {machine()}\n")
    print(
        f"float64; torch on {device} in batches of {args.batch} steps, numpy (CPU) in batches "
        f"of {args.numpy_batch}; max |torch − numpy| over the numpy rows\n"
    )
    columns = f"numpy CPU steps/s | torch {device.type} steps/s | ratio | max diff"
    print(f"| design | V | n | {columns} |")
    print("|---|---|---|---|---|---|---|")
    for vocab in vocabs:
        p, q = lm_like(max(args.batch, args.numpy_batch), vocab)
        p_np, q_np = p[: args.numpy_batch], q[: args.numpy_batch]
        p_t = torch.from_numpy(p[: args.batch]).to(device)
        q_t = torch.from_numpy(q[: args.batch]).to(device)
        for design in designs:
            for n in (2,) if design == "hub" else _ints(args.ns):
                want = ob.optimal_acceptance(p_np, q_np, n=n, design=design)
                t_np = best_time(
                    lambda: ob.optimal_acceptance(p_np, q_np, n=n, design=design),
                    repeat,
                    nothing,
                )
                t_torch = best_time(
                    lambda: optimal_acceptance_torch(p_t, q_t, n=n, design=design), repeat, sync
                )
                got = optimal_acceptance_torch(p_t, q_t, n=n, design=design).cpu().numpy()
                print_rates(
                    design, vocab, n, (want, t_np, args.numpy_batch), (got, t_torch, args.batch)
                )


if __name__ == "__main__":
    main()
