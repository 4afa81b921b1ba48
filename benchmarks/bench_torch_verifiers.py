"""Throughput of the torch verifier formulas beside the numpy verifiers (a benchmark, not a test).

Run: ``python benchmarks/bench_torch_verifiers.py [--device cuda] [--quick]
[--verifiers rrs,kseq,gls] [--vocabs 8192,32000,151936] [--ns 1,2,4,8]``.

Prints one Markdown table: steps per second of
:func:`otbound.verifiers.torch_acceptance.verifier_acceptance_torch` (float64, on ``--device``,
default CUDA when one is visible, with the inputs already there; validation included) and of
the numpy verifier's exact acceptance step by step as :func:`otbound.compare` calls it
(``acceptance_of`` on each validated row, a fresh verifier each timed run so that ``gls``'s
per-step cache does not answer), by V, verifier and n, the ratio of the two measured in the
same run, and the largest difference between the two paths. Each number is the best of a few
runs after a warm-up call; numpy is timed on ``--numpy-batch`` steps (it is per-row work),
torch on ``--batch``. The distributions are language-model-like (``bench_torch_sweep.lm_like``).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from bench_torch_sweep import best_time, lm_like, machine, print_rates

from otbound.problem import Step
from otbound.verifiers import get_verifier
from otbound.verifiers.torch_acceptance import (
    TORCH_VERIFIERS,
    serves,
    verifier_acceptance_torch,
)


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def numpy_rows(name: str, batch: Step, n: int) -> np.ndarray:
    """The numpy verifier's exact acceptance of every row, one row at a time (a new verifier:
    no cached values)."""
    v = get_verifier(name)
    return np.array([v.acceptance_of(batch.row(i), n) for i in range(batch.rows)], dtype=float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="V = 32,000 only, one repeat")
    parser.add_argument("--batch", type=int, default=1024, help="steps per torch call")
    parser.add_argument("--numpy-batch", type=int, default=32, help="steps timed with numpy")
    parser.add_argument("--verifiers", default=",".join(TORCH_VERIFIERS))
    parser.add_argument("--vocabs", default="8192,32000,151936")
    parser.add_argument("--ns", default="1,2,4,8")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    names = [v.strip() for v in args.verifiers.split(",") if v.strip()]
    unknown = [v for v in names if v not in TORCH_VERIFIERS]
    if unknown:
        parser.error(f"no torch formula for {unknown}; of {','.join(TORCH_VERIFIERS)}")
    vocabs = [32_000] if args.quick else _ints(args.vocabs)
    repeat = 1 if args.quick else args.repeat
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def nothing() -> None:
        return None

    print(f"machine: {machine()}\n")
    print(
        f"float64; torch on {device} in batches of {args.batch} steps, numpy (CPU) one step at "
        f"a time over {args.numpy_batch} steps; max |torch − numpy| over the numpy rows\n"
    )
    print(
        f"| verifier | V | n | numpy CPU steps/s | torch {device.type} steps/s | ratio | max diff |"
    )
    print("|---|---|---|---|---|---|---|")
    for vocab in vocabs:
        p, q = lm_like(max(args.batch, args.numpy_batch), vocab)
        rows = Step.validate(p[: args.numpy_batch], q[: args.numpy_batch])
        p_t = torch.from_numpy(p[: args.batch]).to(device)
        q_t = torch.from_numpy(q[: args.batch]).to(device)
        for name in names:
            for n in [k for k in _ints(args.ns) if serves(name, k)]:
                want = numpy_rows(name, rows, n)
                t_np = best_time(lambda: numpy_rows(name, rows, n), repeat, nothing)
                t_torch = best_time(
                    lambda: verifier_acceptance_torch(name, p_t, q_t, n), repeat, sync
                )
                got = verifier_acceptance_torch(name, p_t, q_t, n).cpu().numpy()
                print_rates(
                    name, vocab, n, (want, t_np, args.numpy_batch), (got, t_torch, args.batch)
                )


if __name__ == "__main__":
    main()
