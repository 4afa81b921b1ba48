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

import numpy as np
import torch
from bench_torch_sweep import TorchRun, ints, lm_like, machine, torch_parser

from otbound.problem import Step
from otbound.verifiers import get_verifier
from otbound.verifiers.torch_acceptance import (
    TORCH_VERIFIERS,
    serves,
    verifier_acceptance_torch,
)


def numpy_rows(name: str, batch: Step, n: int) -> np.ndarray:
    """The numpy verifier's exact acceptance of every row, one row at a time (a new verifier:
    no cached values)."""
    v = get_verifier(name)
    return np.array([v.acceptance_of(batch.row(i), n) for i in range(batch.rows)], dtype=float)


def main() -> None:
    parser = torch_parser(__doc__.split("\n\n")[0], "steps timed with numpy", "1,2,4,8")
    parser.add_argument("--verifiers", default=",".join(TORCH_VERIFIERS))
    args = parser.parse_args()
    names = [v.strip() for v in args.verifiers.split(",") if v.strip()]
    unknown = [v for v in names if v not in TORCH_VERIFIERS]
    if unknown:
        parser.error(f"no torch formula for {unknown}; of {','.join(TORCH_VERIFIERS)}")
    run = TorchRun.from_args(args)
    print(f"machine: {machine()}\n")
    print(
        f"float64; torch on {run.device} in batches of {run.batch} steps (chunks of "
        f"{run.chunk_elements:,} entries), numpy (CPU) one step at a time over "
        f"{run.numpy_batch} steps; max |torch − numpy| over the numpy rows\n"
    )
    print(
        f"| verifier | V | n | numpy CPU steps/s | torch {run.device.type} steps/s | ratio "
        "| max diff |"
    )
    print("|---|---|---|---|---|---|---|")
    for vocab in run.vocabs:
        p, q = lm_like(max(run.batch, run.numpy_batch), vocab)
        rows = Step.validate(p[: run.numpy_batch], q[: run.numpy_batch])
        p_t = torch.from_numpy(p[: run.batch]).to(run.device)
        q_t = torch.from_numpy(q[: run.batch]).to(run.device)
        for name in names:
            for n in [k for k in ints(args.ns) if serves(name, k)]:
                run.row(
                    name,
                    vocab,
                    n,
                    lambda name=name, n=n: numpy_rows(name, rows, n),
                    lambda name=name, n=n: verifier_acceptance_torch(
                        p_t, q_t, n, chunk_elements=run.chunk_elements, verifier=name
                    ),
                )


if __name__ == "__main__":
    main()
