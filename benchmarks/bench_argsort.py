"""``otbound._sorting.stable_argsort`` against ``np.argsort(kind="stable")`` (a benchmark).

Run: ``python benchmarks/bench_argsort.py [--repeat 20]``. Keys: the ratios ``p / q`` of
language-model-like rows (``bench_bounds.lm_like``, what the verifiers sort) and rounded keys
with long tied runs, V = 8,192 to 151,936. Prints milliseconds per sort of both, their ratio
(measured in one run, best of ``--repeat``) and the machine; both give the same permutation.
"""

from __future__ import annotations

import numpy as np
from bench_bounds import best_time, lm_like, pairs_table

from otbound._sorting import stable_argsort
from otbound.logits import softmax


def main() -> None:
    repeat = pairs_table(
        __doc__.splitlines()[0], "keys | V | numpy stable, ms | stable_argsort, ms | speed-up"
    )
    for vocab in (8_192, 32_000, 151_936):
        target, draft = lm_like(1, vocab, seed=3)
        p, q = softmax(target)[0], softmax(draft)[0]
        keys = {"p / q": p / q, "rounded (ties)": np.round(p / q, 1)}
        for label, key in keys.items():
            assert np.array_equal(stable_argsort(key), np.argsort(key, kind="stable"))
            before = best_time(lambda key=key: np.argsort(key, kind="stable"), repeat)
            after = best_time(lambda key=key: stable_argsort(key), repeat)
            print(
                f"| {label} | {vocab:,} | {before * 1e3:.2f} | {after * 1e3:.2f} | "
                f"{before / after:.2f}x |"
            )


if __name__ == "__main__":
    main()
