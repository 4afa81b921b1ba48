"""Brute-force oracles of the engine rules, written from the engines' code as read, in plain
loops: the processing of each side, then every draft and every branch of the rule's
randomness, summed. No otbound code is used here."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np


def process(dist, temperature=1.0, top_k=None, top_p=None):
    """Temperature, then top-k (ties kept), then top-p (decreasing, lower id first), by hand."""
    vocab = len(dist)
    if temperature == 0:
        best = max(range(vocab), key=lambda i: (dist[i], -i))
        return [1.0 if i == best else 0.0 for i in range(vocab)]
    logits = [math.log(x) / temperature if x > 0 else -math.inf for x in dist]
    if top_k is not None and top_k < vocab:
        kth = sorted(logits, reverse=True)[top_k - 1]
        logits = [v if v >= kth else -math.inf for v in logits]
    top = max(logits)
    weights = [math.exp(v - top) if v > -math.inf else 0.0 for v in logits]
    total = sum(weights)
    probs = [w / total for w in weights]
    if top_p is not None and top_p < 1.0:
        order = sorted(range(vocab), key=lambda i: (-probs[i], i))
        keep, before = set(), 0.0
        for rank, i in enumerate(order):
            if rank == 0 or before < top_p:
                keep.add(i)
            before += probs[i]
        probs = [x if i in keep else 0.0 for i, x in enumerate(probs)]
        total = sum(probs)
        probs = [x / total for x in probs]
    return probs


def argmax(dist):
    return max(range(len(dist)), key=lambda i: (dist[i], -i))


def normalised_excess(target, subtract):
    excess = [max(0.0, t - s) for t, s in zip(target, subtract, strict=True)]
    total = sum(excess)
    return None if total <= 0 else [e / total for e in excess]


def add(law, token, mass):
    law[token] = law.get(token, 0.0) + mass


def leviathan(target, test_q, drafts):
    """Keep x w.p. min(1, P_x / q_x), else draw from (P − q)⁺; drafts: {x: probability}."""
    law, accepted = {}, 0.0
    residual = normalised_excess(target, test_q)
    for x, dx in drafts.items():
        keep = min(1.0, target[x] / test_q[x]) if test_q[x] > 0 else 0.0
        add(law, x, dx * keep)
        accepted += dx * keep
        if keep < 1.0:
            for y, ry in enumerate(residual):
                add(law, y, dx * (1 - keep) * ry)
                if y == x:
                    accepted += dx * (1 - keep) * ry
    return law, accepted


def misaligned(target, draft):
    kept_t = [i for i, x in enumerate(target) if x > 0]
    kept_d = [i for i, x in enumerate(draft) if x > 0]
    mass = []
    for i, token in enumerate(kept_t):
        value = target[token] - draft[kept_d[i]] if i < len(kept_d) else target[token]
        mass.append(max(0.0, value))
    total = sum(mass)
    if total == 0 and len(kept_t) == 1:  # a one-entry list: its entry, whatever the weights
        mass, total = [1.0], 1.0
    out = [0.0] * len(target)
    for token, m in zip(kept_t, mass, strict=True):
        out[token] = m / total
    return out


def sglang_branches(target, siblings, t_single, t_acc):
    """The kernel's loop on one coin, integrated exactly over the coin's breakpoints."""
    acc, points = 0.0, {0.0, 1.0}
    for x in siblings:
        acc += target[x]
        points.add(min(1.0, acc / t_acc))
    points = sorted(points)
    outcome = {}
    for lo, hi in itertools.pairwise(points):
        coin, acc, chosen = (lo + hi) / 2, 0.0, None
        for x in siblings:
            acc += target[x]
            if coin <= acc / t_acc or target[x] >= t_single:
                chosen = x
                break
        add(outcome, chosen, hi - lo)
    return outcome


def oracle(name, p, q, temperature=1.0, top_k=None, top_p=None, n=1, **settings):
    """``(law as a list, acceptance)`` of an engine rule by enumeration."""
    vocab = len(p)
    P = process(p, temperature, top_k, top_p)
    D = process(q, temperature, top_k, top_p)
    DT = process(q, temperature)
    sampled = {x: D[x] for x in range(vocab) if D[x] > 0}
    greedy = {argmax(D): 1.0}
    rules: dict[str, Callable[[], tuple[dict, float]]] = {
        "hf_assisted": lambda: leviathan(P, D, sampled),
        "hf_raw_q": lambda: leviathan(P, q, sampled),
        "hf_argmax_raw_q": lambda: leviathan(P, q, {argmax(q): 1.0}),
        "vllm_rejection": lambda: leviathan(P, DT, {x: DT[x] for x in range(vocab) if DT[x] > 0}),
        "filters_draft_only": lambda: leviathan(process(p, temperature), D, sampled),
    }
    if name in rules:
        law, accepted = rules[name]()
    elif name in ("vllm_one_hot", "llamacpp_sample_match"):
        law, accepted = {}, 0.0
        for x, dx in greedy.items():
            for y in range(vocab):  # vLLM: keep x w.p. P_x, else P without x; llama: y ~ P
                if name == "vllm_one_hot":
                    mass = P[x] if y == x else (1 - P[x]) * P[y] / (1 - P[x]) if P[x] < 1 else 0.0
                else:
                    mass = P[y]
                add(law, y, dx * mass)
                accepted += dx * mass if y == x else 0.0
    elif name == "vllm_strict_match":
        best = argmax(P)
        law, accepted = {best: 1.0}, greedy.get(best, 0.0)
    elif name == "vllm_typical":
        entropy = -sum(x * math.log(x + 1e-5) for x in P)
        threshold = min(settings.get("eps", 0.09), settings.get("delta", 0.3) * math.exp(-entropy))
        law, accepted = {}, 0.0
        for x, dx in sampled.items():
            y = x if P[x] > threshold else argmax(P)
            add(law, y, dx)
            accepted += dx if y == x else 0.0
    elif name == "llamacpp_example":
        a = argmax(D)
        keep = min(1.0, P[a] / D[a])
        residual = misaligned(P, D)
        law = {a: keep}
        for y, ry in enumerate(residual):
            add(law, y, (1 - keep) * ry)
        accepted = keep + (1 - keep) * residual[a]
    elif name in ("sglang_target_only", "sglang_relaxed"):
        t_acc = settings.get("threshold_acc", 0.5 if name == "sglang_relaxed" else 1.0)
        siblings = sorted(range(vocab), key=lambda i: (-DT[i], i))[:n]
        outcome = sglang_branches(P, siblings, settings.get("threshold_single", 1.0), t_acc)
        law = {x: w for x, w in outcome.items() if x is not None}
        rest = sum(P[y] for y in range(vocab) if y not in siblings)
        # every sibling rejected: P off the siblings (none left: the siblings' masses summed
        # to 1 but for rounding, and the last coin's sliver of rejection is that rounding)
        for y in range(vocab):
            if y not in siblings and outcome.get(None, 0.0) > 0 and rest > 0:
                add(law, y, outcome[None] * P[y] / rest)
        assert rest > 0 or outcome.get(None, 0.0) <= 1e-12, "siblings cover P, yet rejected"
        accepted = sum(law.get(x, 0.0) for x in siblings)
    else:
        raise KeyError(name)
    return [law.get(y, 0.0) for y in range(vocab)], accepted


def total_variation(a, b):
    return 0.5 * sum(abs(x - y) for x, y in zip(a, b, strict=True))


def random_pair(seed, vocab=7, concentration=0.6):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab, concentration))
    q = rng.dirichlet(np.full(vocab, concentration))
    return p, q
