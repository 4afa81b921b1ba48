"""Verifier throughput: simulation speed and the cost of exact acceptance rates.

Goals:

* ``rrs.simulate`` at V = 1,000, n = 4: at least 1,000,000 trials per second;
* ``gls.simulate`` at V = 32,000, n = 4: 20,000 trials in a few seconds (``O(n log V)`` a trial);
* exact acceptance of ``rrs``, ``rrs_without_replacement`` (n = 2), ``kseq``, ``spechub`` and
  ``greedy`` at V = 32,000: at most 5 ms per step;
* verifiers without a closed form (``--no-closed-form``): per-step time and standard error of
  the 0/1 Monte Carlo (``simulate``, ``--old-trials`` trials, 10,000 by default: what a
  standard error of 0.005 needs at α = 0.5) against otbound's path (:meth:`estimate` with a
  target standard error of 0.005: exact for ``gls``, Rao-Blackwellised for
  ``rrs_without_replacement`` and ``importance`` at ``n ≥ 3``), on the first rows of
  ``data/sample`` (V = 8,192) and at V = 32,000, in one run; plus the importance stage-LP
  cache's hits across those steps.

Distributions are softmaxes of correlated Gaussian logits (a target and a draft model that agree
on the rough shape), which is what logged LLM steps look like; Dirichlet draws with tiny
concentrations produce subnormal floats that slow every elementwise operation and are avoided.
Each timing is the best of several repeats (the machine is shared). Run::

    python benchmarks/bench_verifiers.py [--steps 20] [--repeats 3]
    python benchmarks/bench_verifiers.py --no-closed-form [--sample-steps 16] [--big-steps 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from scipy.special import softmax

from otbound.verifiers import VERIFIERS, get_verifier
from otbound.verifiers.base import sample_drafts


def logged_pair(vocab: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    base = rng.normal(0.0, 3.0, vocab)
    p = softmax(base + rng.normal(0.0, 1.0, vocab))
    q = softmax(base + rng.normal(0.0, 1.0, vocab))
    return p, q


def best_of(repeats: int, fn) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def machine() -> str:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        usable = os.cpu_count()
    return (
        f"{platform.platform()} | {platform.processor() or platform.machine()} | "
        f"CPUs: {os.cpu_count()} (usable: {usable}) | Python {platform.python_version()} | "
        f"numpy {np.__version__}"
    )


def sample_rows(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` steps of ``data/sample`` at temperature 1 (V = 8,192)."""
    import otbound
    from otbound.dumps import prepare_distributions

    shard = otbound.open_dump("data/sample").read_shard(0)
    dist = prepare_distributions(
        shard.target[:count],
        shard.draft[:count],
        temperature=1.0,
        values=shard.values,
        step_ids=shard.step[:count],
    )
    return dist.target, dist.draft


def no_closed_form(args: argparse.Namespace) -> None:
    """Old 0/1 Monte Carlo against exact / Rao-Blackwellised estimates, per step."""
    rng = np.random.default_rng(0)
    sets = [("data/sample rows", *sample_rows(args.sample_steps))]
    big = [logged_pair(32_000, rng) for _ in range(args.big_steps)]
    sets.append(("V = 32,000", np.stack([a for a, _ in big]), np.stack([b for _, b in big])))
    cases = [
        ("rrs_without_replacement", 3),
        ("rrs_without_replacement", 8),
        ("importance", 3),
        ("importance", 8),
        ("gls", 2),
        ("gls", 8),
    ]
    print(
        f"verifiers without a closed form: old = simulate, {args.old_trials:,} trials, 0/1; "
        "new = estimate(target_se=0.005); ms and standard error per step (mean; max SE)"
    )
    head = f"{'rows':18s} {'verifier':24s} {'n':>2s} {'old ms':>9s} {'old SE':>8s} "
    print(head + f"{'new ms':>8s} {'new SE':>8s} {'max SE':>8s} {'method':>13s} {'speed-up':>9s}")
    for label, P, Q in sets:
        steps = P.shape[0]
        for name, n in cases:
            v = get_verifier(name)
            v.estimate(P[0], Q[0], n, trials=2_000, seed=0, target_se=0.005)  # compile, warm
            v.simulate(P[0], Q[0], n, trials=100, seed=0)
            fresh = get_verifier(name)  # no stage chain memoised from the warm-up
            start = time.perf_counter()
            old_se = []
            for i in range(steps):
                sim = fresh.simulate(P[i], Q[i], n, trials=args.old_trials, seed=i)
                old_se.append(sim.stderr)
            old = (time.perf_counter() - start) / steps
            fresh = get_verifier(name)
            start = time.perf_counter()
            new_se, method = [], ""
            for i in range(steps):
                est = fresh.estimate(P[i], Q[i], n, trials=20_000, seed=i, target_se=0.005)
                new_se.append(est.stderr)
                method = est.method
            new = (time.perf_counter() - start) / steps
            print(
                f"{label:18s} {name:24s} {n:2d} {1e3 * old:9.1f} {np.mean(old_se):8.4f} "
                f"{1e3 * new:8.1f} {np.mean(new_se):8.5f} {np.max(new_se):8.5f} {method:>13s} "
                f"{old / new:8.1f}x"
            )
    # the stage chain over distinct steps: 7 stages (sorts and top-s flows) per step
    P, Q = sets[0][1], sets[0][2]
    start = time.perf_counter()
    for i in range(P.shape[0]):
        get_verifier("importance").stages(P[i], Q[i], 8)
    seconds = (time.perf_counter() - start) / P.shape[0]
    print(
        f"importance stage chains over {P.shape[0]} distinct sample steps (n = 8): "
        f"{1e3 * seconds:.1f} ms per step"
    )
    start = time.perf_counter()
    for i in range(P.shape[0]):
        get_verifier("importance").stages(P[i], Q[i], 8)
    seconds = (time.perf_counter() - start) / P.shape[0]
    print(f"  the same steps again (every LP a cache hit): {1e3 * seconds:.1f} ms per step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps for the exact timings")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (best is kept)")
    parser.add_argument("--trials", type=int, default=1_000_000, help="trials for simulate")
    parser.add_argument(
        "--no-closed-form",
        action="store_true",
        help="only the old-vs-new table of the verifiers without a closed form",
    )
    parser.add_argument("--sample-steps", type=int, default=16, help="data/sample rows")
    parser.add_argument("--big-steps", type=int, default=3, help="steps at V = 32,000")
    parser.add_argument("--old-trials", type=int, default=10_000, help="0/1 Monte Carlo trials")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("machine:", machine())
    print()
    if args.no_closed_form:
        no_closed_form(args)
        return

    # -- simulation throughput at V = 1,000 -----------------------------------------------------
    p, q = logged_pair(1_000, rng)
    print(
        f"simulate, V = 1,000, {args.trials:,} trials (trials per second, best of {args.repeats})"
    )
    print(f"{'verifier':26s} {'n':>2s} {'trials/s':>14s} {'goal':>12s}")
    for name in VERIFIERS:
        v = get_verifier(name)
        n = 2 if name == "spechub" else 4
        if not v.applies(p, q, n):
            continue
        trials = args.trials if name in ("rrs", "single", "kseq", "greedy", "topk") else 100_000
        v.simulate(p, q, n, trials=1_000, seed=0)  # compile and warm up
        seconds = best_of(args.repeats, lambda v=v, n=n, t=trials: v.simulate(p, q, n, t, seed=1))
        goal = ">= 1,000,000" if name == "rrs" else ""
        flag = ("  ok" if trials / seconds >= 1e6 else "  MISSED") if goal else ""
        print(f"{name:26s} {n:2d} {trials / seconds:14,.0f} {goal:>12s}{flag}")
    v = get_verifier("rrs_without_replacement")
    drafts = sample_drafts(v._spec, q, 4, 100_000, np.random.default_rng(0))
    gen = np.random.default_rng(1)
    seconds = best_of(args.repeats, lambda: v._verify_batch(drafts, p, q, gen))
    print(f"{'  its verification only':26s} {4:2d} {100_000 / seconds:14,.0f}")
    print("(rrs_without_replacement's simulate is dominated by drafts.WithoutReplacement.sample,")
    print(" which draws a Gumbel key for every token: O(trials x V))")
    print()

    # -- GLS at a real vocabulary: O(n log V) per trial -------------------------------------------
    p32, q32 = logged_pair(32_000, rng)
    v = get_verifier("gls")
    seconds = best_of(3, lambda: v.simulate(p32, q32, 4, trials=20_000, seed=1))
    print(f"gls simulate, V = 32,000, n = 4, 20,000 trials: {seconds:.2f} s (best of 3)")
    print()

    # -- exact acceptance at V = 32,000 ------------------------------------------------------------
    steps = [logged_pair(32_000, rng) for _ in range(args.steps)]
    print(
        f"exact acceptance, V = 32,000: ms per step (mean over {args.steps} steps, best of "
        f"{args.repeats}; input validation included)"
    )
    print(f"{'verifier':26s} {'n':>2s} {'ms/step':>10s} {'goal':>8s}")
    rows = [
        ("rrs", 2),
        ("rrs", 4),
        ("rrs_without_replacement", 2),
        ("kseq", 2),
        ("kseq", 4),
        ("spechub", 2),
        ("greedy", 2),
        ("greedy", 4),
        ("single", 4),
        ("topk", 4),
        ("importance", 2),
    ]
    for name, n in rows:
        v = get_verifier(name)
        v.acceptance(*steps[0], n)  # compile and warm up
        seconds = best_of(args.repeats, lambda v=v, n=n: [v.acceptance(a, b, n) for a, b in steps])
        ms = 1e3 * seconds / len(steps)
        goal = (
            "<= 5"
            if name in ("rrs", "rrs_without_replacement", "kseq", "spechub", "greedy")
            else ""
        )
        flag = ("  ok" if ms <= 5 else "  MISSED") if goal else ""
        print(f"{name:26s} {n:2d} {ms:10.3f} {goal:>8s}{flag}")


if __name__ == "__main__":
    main()
