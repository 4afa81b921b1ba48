"""Draft trees: cost of Sequoia's dynamic programme and of positional acceptance vectors.

* ``best_tree`` for budgets up to 768 nodes (width 16), with and without a depth limit;
* ``positional_acceptance`` at V = 32,000: exact (``rrs``, ``rrs_without_replacement`` at
  width 2, ``greedy``) and Monte Carlo (``kseq``), per step.

Distributions are softmaxes of correlated Gaussian logits, as in ``bench_verifiers.py``. Run::

    python benchmarks/bench_trees.py [--steps 5] [--repeats 3]
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_verifiers import best_of
from scipy.special import softmax

from otbound.trees import best_tree, block_efficiency, positional_acceptance


def logged_pair(vocab: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    base = rng.normal(0.0, 3.0, vocab)
    return softmax(base + rng.normal(0.0, 1.0, vocab)), softmax(base + rng.normal(0.0, 1.0, vocab))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="steps for positional vectors")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (best is kept)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    a = 0.8 * np.sort(rng.dirichlet(np.full(16, 0.5)))[::-1]
    print(f"best_tree, width 16 (seconds, best of {args.repeats})")
    print(f"{'budget':>6s} {'max_depth':>9s} {'seconds':>9s} {'depth':>5s} {'E':>7s}")
    for budget in (64, 128, 256, 768):
        for depth in (None, 8):
            if depth is not None and budget > 256:
                continue
            seconds = best_of(args.repeats, lambda b=budget, d=depth: best_tree(a, b, d))
            tree = best_tree(a, budget, depth)
            print(
                f"{budget:6d} {depth!s:>9s} {seconds:9.3f} {max(map(len, tree)):5d} "
                f"{block_efficiency(a, tree):7.3f}"
            )
    print()

    steps = [logged_pair(32_000, rng) for _ in range(args.steps)]
    p = np.stack([s[0] for s in steps])
    q = np.stack([s[1] for s in steps])
    print(f"positional_acceptance, V = 32,000, {args.steps} steps: ms per step")
    for name, width, trials in (
        ("rrs", 4, 0),
        ("rrs_without_replacement", 2, 0),
        ("greedy", 4, 0),
        ("kseq", 4, 100_000),
    ):
        kwargs = {"trials": trials} if trials else {}
        positional_acceptance(p[:1], q[:1], width, **kwargs, verifier=name)  # compile and warm up
        seconds = best_of(
            args.repeats,
            lambda n=name, w=width, k=kwargs: positional_acceptance(p, q, w, **k, verifier=n),
        )
        result = positional_acceptance(p, q, width, **kwargs, verifier=name)
        print(
            f"{name:26s} width {width}  {1e3 * seconds / args.steps:9.2f} ms  ({result.method}; "
            f"α = {result.values.sum():.4f})"
        )


if __name__ == "__main__":
    main()
