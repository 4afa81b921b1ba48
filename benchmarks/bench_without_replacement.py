"""``α*`` without replacement (and conditional Poisson) per step, in softmaxes of the same rows.

Run: ``python benchmarks/bench_without_replacement.py [--steps 8]``. For V = 32,000 and
128,000 and n in {2, 4, 8} together (:func:`otbound.bounds.sweep.optimal_acceptance_by_n`),
prints the time per step of the exact bound next to the time of the two softmaxes of the same
rows (a (2, V) float32 logits pair through :func:`otbound.logits.softmax`, in float64, as the
main job computes them), and their ratio, all measured in one run. ``--old`` also times the
previous path (every prefix integrated) and checks the two agree to 1e-12. Rows: Zipf logits
with a perturbed draft (as ``bench_bounds.py``) and plain Gaussian logits. The sort alone
(``argsort`` of ``p/q``) is printed as the floor of any sorted sweep.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_bounds import best_time, lm_like, machine

from otbound.bounds.sweep import optimal_acceptance_by_n
from otbound.drafts import WithoutReplacement
from otbound.logits import softmax


class _EveryPrefix(WithoutReplacement):
    """The previous path: ``Q`` integrated at every prefix, then the minimum."""

    prefix_minimum = None


def _rows(kind: str, steps: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    if kind == "zipf":
        target, draft = lm_like(steps, vocab, seed=1)
    else:
        rng = np.random.default_rng(2)
        target, draft = rng.standard_normal((2, steps, vocab)) * 2.0
    return target.astype(np.float32), draft.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="steps per batch")
    parser.add_argument("--old", action="store_true", help="also time the previous path")
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
    print("| rows | V | design | ms per step | softmax pair, ms | ratio | sort, ratio |")
    print("|---|---|---|---|---|---|---|")
    counts = [2, 4, 8]
    for vocab in (32_000, 128_000):
        for kind in ("zipf", "gaussian"):
            target, draft = _rows(kind, args.steps, vocab)
            p, q = softmax(target), softmax(draft)
            pair = np.stack([target[0], draft[0]])
            t_soft = best_time(lambda pair=pair: softmax(pair), 20)
            t_sort = best_time(lambda: np.argsort(p / q, axis=-1), 3) / args.steps
            designs = [("without_replacement", "without_replacement")]
            designs.append(("conditional_poisson", "conditional_poisson"))
            if args.old:
                designs.append(("previous path", _EveryPrefix()))
            values = {}
            for name, design in designs:
                optimal_acceptance_by_n(p[:1], q[:1], counts, design)  # compile
                start = time.perf_counter()
                values[name] = optimal_acceptance_by_n(p, q, counts, design)
                step = (time.perf_counter() - start) / args.steps
                print(
                    f"| {kind} | {vocab:,} | {name} | {step * 1e3:.1f} | {t_soft * 1e3:.2f} "
                    f"| {step / t_soft:.1f} | {t_sort / t_soft:.1f} |"
                )
            if args.old:
                diff = np.abs(values["without_replacement"] - values["previous path"]).max()
                print(f"|  |  | largest difference to the previous path: {diff:.1e} |  |  |  |  |")


if __name__ == "__main__":
    main()
