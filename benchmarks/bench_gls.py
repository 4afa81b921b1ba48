"""Exact GLS acceptance (:func:`otbound.verifiers.gls.gls_acceptances`): fused path against
the previous one.

Run: ``python benchmarks/bench_gls.py [--steps 4]``. For V = 8,192, 32,000 and 151,936 and
n in {2, 4, 8} (and 2..8, as :class:`~otbound.verifiers.gls.GumbelListCoupling` asks), times
``gls_acceptances`` on language-model-like rows (``bench_bounds.lm_like``, softmax through
:func:`otbound.logits.softmax`) with the fused quadrature (the default) and with the previous
one (:func:`~otbound.verifiers.gls._gls_quadrature_many`, one node at a time with libm's
``expm1``), in the same run, and prints a Markdown table: ms per
step, the speed-up and the largest ``|new − old|`` over the rows. ``--float16`` rounds the
logits to float16 first, as dumps store them: long runs of tied ratios, which the fused pass
computes once per run.
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_bounds import best_time, lm_like, machine

from otbound.logits import softmax
from otbound.verifiers import gls

FUSED = gls._gls_quadrature_fused


def _acceptances(
    rows: list[tuple[np.ndarray, np.ndarray]], ns: list[int], old: bool
) -> list[dict[int, float]]:
    """``gls_acceptances`` of each row, with the previous quadrature when ``old``."""
    gls._gls_quadrature_fused = gls._gls_quadrature_many if old else FUSED
    try:
        return [gls.gls_acceptances(p, q, ns) for p, q in rows]
    finally:
        gls._gls_quadrature_fused = FUSED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="rows per vocabulary size")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (best is kept)")
    parser.add_argument(
        "--float16",
        action="store_true",
        help="round the logits to float16 first, as dumps store them (long runs of tied ratios)",
    )
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
    rounding = "float16 logits" if args.float16 else "float32 logits"
    print(f"Rows: `lm_like`, {rounding}\n")
    print("| V | n | old, ms per step | new, ms per step | speed-up | max abs difference |")
    print("|---|---|---|---|---|---|")
    for vocab in (8_192, 32_000, 151_936):
        target, draft = lm_like(args.steps, vocab)
        if args.float16:
            target, draft = (x.astype(np.float16).astype(np.float32) for x in (target, draft))
        rows = [(softmax(t), softmax(d)) for t, d in zip(target, draft, strict=True)]
        for ns in ([2, 4, 8], list(range(2, 9))):
            old = _acceptances(rows, ns, old=True)  # compiles, and the values compared
            new = _acceptances(rows, ns, old=False)
            diff = max(abs(a[k] - b[k]) for a, b in zip(new, old, strict=True) for k in ns)
            t_old = best_time(lambda: _acceptances(rows, ns, True), args.repeat) / len(rows)
            t_new = best_time(lambda: _acceptances(rows, ns, False), args.repeat) / len(rows)
            label = "{2, 4, 8}" if len(ns) == 3 else "2..8"
            print(
                f"| {vocab:,} | {label} | {1e3 * t_old:.2f} | {1e3 * t_new:.2f} "
                f"| {t_old / t_new:.2f}x | {diff:.1e} |"
            )


if __name__ == "__main__":
    main()
