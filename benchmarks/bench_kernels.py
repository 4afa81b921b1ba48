"""Small compiled passes against the numpy code they replace (a benchmark, not a test).

Run: ``python benchmarks/bench_kernels.py [--repeat 20]``. On language-model-like rows
(``bench_bounds.lm_like``) at V = 32,000 and 151,936, prints milliseconds of each pair,
measured in one run (best of ``--repeat``), their ratio and the machine:

* float16 logits of 256 steps to float32: ``astype`` against
  :func:`otbound.dumps._float16.float16_to_float32` (the same bits);
* RRS's rejection rates at ``n = 8``: :func:`otbound.verifiers.rrs.residual_chain` against
  :func:`otbound.verifiers._rejection_kernels.rejection_rates` (the same bits).
"""

from __future__ import annotations

import numpy as np
from bench_bounds import best_time, lm_like, pairs_table

from otbound.dumps._float16 import float16_to_float32
from otbound.logits import softmax
from otbound.verifiers._rejection_kernels import rejection_rates
from otbound.verifiers.rrs import residual_chain


def main() -> None:
    repeat = pairs_table(__doc__.splitlines()[0], "what | V | numpy, ms | compiled, ms | speed-up")
    for vocab in (32_000, 151_936):
        target, draft = lm_like(4, vocab, seed=5)
        p, q = softmax(target)[0], softmax(draft)[0]
        half = np.resize(target.astype(np.float16), (256, vocab))
        pairs = {
            "float16 -> float32, 256 steps": (
                lambda: half.astype(np.float32),
                lambda: float16_to_float32(half),
            ),
            "RRS rejection rates, n = 8": (
                lambda: residual_chain(p, q, 8),
                lambda: rejection_rates(p, q, 8),
            ),
        }
        for label, (before, after) in pairs.items():
            after()  # compile
            slow = best_time(before, repeat)
            fast = best_time(after, repeat)
            print(
                f"| {label} | {vocab:,} | {slow * 1e3:.2f} | {fast * 1e3:.2f} | "
                f"{slow / fast:.1f}x |"
            )


if __name__ == "__main__":
    main()
