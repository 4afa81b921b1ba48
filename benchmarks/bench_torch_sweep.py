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
from dataclasses import dataclass

import numpy as np
import torch
from bench_bounds import lm_like as lm_like_logits
from bench_bounds import machine as cpu_and_python
from scipy.special import softmax

import otbound as ob
from otbound.bounds.torch_sweep import TORCH_CHUNK_ELEMENTS, TORCH_DESIGNS, optimal_acceptance_torch


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


def ints(text: str) -> list[int]:
    """``"8192,32_000"`` → ``[8192, 32000]``."""
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def torch_parser(description: str, numpy_help: str, ns: str) -> argparse.ArgumentParser:
    """The options both torch benchmarks take: device, quick, batch sizes, V, n, repeats."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="V = 32,000 only, one repeat")
    parser.add_argument("--batch", type=int, default=1024, help="steps per torch call")
    parser.add_argument("--numpy-batch", type=int, default=32, help=numpy_help)
    parser.add_argument("--vocabs", default="8192,32000,151936")
    parser.add_argument("--ns", default=ns)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--chunk-elements",
        type=int,
        default=TORCH_CHUNK_ELEMENTS,
        help="rows a torch call takes at once, in entries (the API's default: 2^22; on a GPU "
        "2^25 takes a batch of 1,024 steps at V = 32,000 in one chunk: fewer kernel launches)",
    )
    return parser


@dataclass(frozen=True)
class TorchRun:
    """What :func:`torch_parser`'s options set: the vocabularies, repeats, device and sync."""

    vocabs: list[int]
    repeat: int
    device: torch.device
    numpy_batch: int
    batch: int
    chunk_elements: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TorchRun:
        vocabs = [32_000] if args.quick else ints(args.vocabs)
        repeat = 1 if args.quick else args.repeat
        device = torch.device(args.device)
        return cls(vocabs, repeat, device, args.numpy_batch, args.batch, args.chunk_elements)

    def sync(self) -> None:
        """Wait for the device's queued work (CUDA), so that a time covers it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def row(
        self,
        label: str,
        vocab: int,
        n: int,
        numpy_fn: Callable[[], np.ndarray],
        torch_fn: Callable[[], torch.Tensor],
    ) -> None:
        """Time both paths (best of ``repeat`` after a warm-up) and print one Markdown row:
        steps per second of each, their ratio, and the largest difference on the common steps."""
        want = np.asarray(numpy_fn())
        t_np = best_time(numpy_fn, self.repeat, lambda: None)
        t_torch = best_time(torch_fn, self.repeat, self.sync)
        got = torch_fn().cpu().numpy()
        common = min(self.numpy_batch, self.batch)
        diff = float(np.max(np.abs(got[:common] - want[:common])))
        numpy_rate, torch_rate = self.numpy_batch / t_np, self.batch / t_torch
        print(
            f"| {label} | {vocab:,} | {n} | {numpy_rate:,.1f} | {torch_rate:,.1f} | "
            f"{torch_rate / numpy_rate:.2f}x | {diff:.1e} |",
            flush=True,
        )


def main() -> None:
    parser = torch_parser(__doc__.split("\n\n")[0], "steps per numpy call", "2,4,8")
    parser.add_argument(
        "--designs",
        default="iid,without_replacement,conditional_poisson",
        help=f"of {','.join(TORCH_DESIGNS)}",
    )
    args = parser.parse_args()
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    run = TorchRun.from_args(args)
    print(f"machine: {machine()}\n")
    print(
        f"float64; torch on {run.device} in batches of {run.batch} steps (chunks of "
        f"{run.chunk_elements:,} entries), numpy (CPU) in batches of {run.numpy_batch}; "
        "max |torch − numpy| over the numpy rows\n"
    )
    columns = f"numpy CPU steps/s | torch {run.device.type} steps/s | ratio | max diff"
    print(f"| design | V | n | {columns} |")
    print("|---|---|---|---|---|---|---|")
    for vocab in run.vocabs:
        p, q = lm_like(max(run.batch, run.numpy_batch), vocab)
        p_np, q_np = p[: run.numpy_batch], q[: run.numpy_batch]
        p_t = torch.from_numpy(p[: run.batch]).to(run.device)
        q_t = torch.from_numpy(q[: run.batch]).to(run.device)
        for design in designs:
            for n in (2,) if design == "hub" else ints(args.ns):
                run.row(
                    design,
                    vocab,
                    n,
                    lambda n=n, design=design: ob.optimal_acceptance(
                        p_np, q_np, n=n, design=design
                    ),
                    lambda n=n, design=design: optimal_acceptance_torch(
                        p_t, q_t, n=n, design=design, chunk_elements=run.chunk_elements
                    ),
                )


if __name__ == "__main__":
    main()
