"""The optimal verifier's cost per step, in softmaxes of the same rows, beside K-SEQ's.

Run: ``python benchmarks/bench_optimal.py [--steps 8] [--vocabs 32000,151936]``. For each
vocabulary and ``n`` in {2, 4, 8}, on language-model-like rows (``bench_bounds.lm_like``,
float32 logits through :func:`otbound.logits.softmax`), prints in one run:

* the set-up of a step that does not depend on the drafts (:func:`otbound.selection.level_rule`:
  the sort, the slot values, the blocks, the ledger of transfers; the residual's CDF) plus its
  exact acceptance, in ms and as a ratio to the two softmaxes of the step's (2, V) logits pair
  (a token's level law is read from the ledger when it is drafted, in the verification);
* the exact acceptance alone (:meth:`OptimalTransport.acceptance`, what ``compute_bounds``
  computes: one pass after the sort);
* K-SEQ's exact acceptance (its bisection on ``ρ``) on the same rows;
* one verification given the drafts, on a built rule (:meth:`SelectionRule.verify` on one
  draft tuple: the selection and the single-draft test), in ms;
* then, for draft sets (``conditional_poisson``, ``without_replacement``) at ``--round-vocab``
  (default 151,936) and ``n`` in {2, 4}, the round rule's set-up
  (:func:`otbound.selection.round_rule`: blocks, fit, exact marginal) per step on
  ``--round-steps`` rows, in ms and in softmaxes, with the largest ``α*`` gap it left.

The sort is not cached between the timed calls (each call sees fresh rows).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_bounds import best_time, lm_like, machine

from otbound.logits import softmax
from otbound.selection import level_rule, round_rule
from otbound.verifiers.kseq import KSequential
from otbound.verifiers.optimal import OptimalTransport


def _fresh(rows: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Copies of the rows (new objects and digests: no cached sort serves them)."""
    return [(p.copy(), q.copy()) for p, q in rows]


def _per_step(fn, rows: list[tuple[np.ndarray, np.ndarray]], repeat: int) -> float:  # type: ignore[no-untyped-def]
    def run() -> None:
        for p, q in _fresh(rows):
            fn(p, q)

    return best_time(run, repeat) / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="rows per vocabulary size")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (best is kept)")
    parser.add_argument("--vocabs", default="32000,151936", help="vocabulary sizes")
    parser.add_argument("--round-vocab", type=int, default=151_936, help="round rule's V")
    parser.add_argument("--round-steps", type=int, default=2, help="round rule's rows")
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
    print(
        "| V | n | softmax pair, ms | set-up + acceptance, ms (softmaxes) | acceptance, ms "
        "(softmaxes) | K-SEQ acceptance, ms (softmaxes) | one verification, ms |"
    )
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for vocab in (int(v) for v in args.vocabs.split(",")):
        target, draft = (x.astype(np.float32) for x in lm_like(args.steps, vocab))
        rows = [(softmax(t), softmax(d)) for t, d in zip(target, draft, strict=True)]
        pair = np.stack([target[0], draft[0]])
        t_soft = best_time(lambda pair=pair: softmax(pair), 20)
        for n in (2, 4, 8):
            optimal, kseq = OptimalTransport(), KSequential()
            rule = level_rule(*rows[0], n)  # compiles
            t_rule = _per_step(lambda p, q, n=n, v=optimal: _set_up(v, p, q, n), rows, args.repeat)
            t_acc = _per_step(lambda p, q, n=n: optimal.acceptance(p, q, n), rows, args.repeat)
            t_kseq = _per_step(lambda p, q, n=n: kseq.acceptance(p, q, n), rows, args.repeat)
            q0 = rows[0][1]
            drafts = rng.choice(vocab, size=(1, n), p=q0)
            t_one = best_time(lambda: rule.verify(drafts, rng), 50)
            print(
                f"| {vocab:,} | {n} | {1e3 * t_soft:.2f} | {1e3 * t_rule:.2f} "
                f"({t_rule / t_soft:.1f}) | {1e3 * t_acc:.2f} ({t_acc / t_soft:.1f}) "
                f"| {1e3 * t_kseq:.2f} ({t_kseq / t_soft:.1f}) | {1e3 * t_one:.3f} |"
            )

    _round_table(args.round_vocab, args.round_steps)


def _set_up(verifier: OptimalTransport, p: np.ndarray, q: np.ndarray, n: int) -> float:
    """What a step needs before its drafts arrive: the rule (sort, slot values, blocks, the
    ledger of transfers), the residual's CDF, and the exact acceptance (one pass after the
    sort, which the rule's step cache shares)."""
    rule = level_rule(p, q, n)
    _ = rule.rest_cdf
    return float(verifier.acceptance(p, q, n))


def _round_table(vocab: int, steps: int) -> None:
    """The round rule's set-up per step for draft sets, beside the softmax pair."""
    print(
        "\n| V | design | n | softmax pair, ms | round rule set-up, ms (softmaxes) "
        "| largest gap to α* |"
    )
    print("|---|---|---|---|---|---|")
    target, draft = (x.astype(np.float32) for x in lm_like(steps, vocab))
    rows = [(softmax(t), softmax(d)) for t, d in zip(target, draft, strict=True)]
    pair = np.stack([target[0], draft[0]])
    t_soft = best_time(lambda: softmax(pair), 20)
    for design in ("conditional_poisson", "without_replacement"):
        for n in (2, 4):
            small = np.array([0.5, 0.3, 0.2])
            round_rule(small, small[::-1].copy(), 2, design)  # compiles
            start = time.perf_counter()
            rules = [round_rule(p, q, n, design) for p, q in _fresh(rows)]
            t_rule = (time.perf_counter() - start) / len(rows)
            gap = max(rule.gap for rule in rules)
            print(
                f"| {vocab:,} | {design} | {n} | {1e3 * t_soft:.2f} | {1e3 * t_rule:.0f} "
                f"({t_rule / t_soft:.0f}) | {gap:.1e} |"
            )


if __name__ == "__main__":
    main()
