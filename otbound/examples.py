"""Built-in example steps: target and draft distributions shaped like a language model's.

They let the README's first command (and a new user) see ``α*`` by design and ``n`` without
any dumped logits. Each step is a seeded Zipf-like target over ``V = 32,000`` tokens and a
draft that is a noisy, differently tempered copy of it, so that ``1 − TV`` lands in the range
seen with real draft/target pairs (0.4-0.9).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd
from scipy.special import softmax

from otbound.bounds import optimal_acceptance
from otbound.drafts import DESIGNS, get_design

#: (name, target sharpness, draft temperature, draft noise): one row per example step.
_STEPS: tuple[tuple[str, float, float, float], ...] = (
    ("confident", 2.0, 1.3, 1.0),
    ("open-ended", 0.9, 1.1, 1.5),
    ("disagreeing", 1.3, 0.8, 3.0),
)


def example_steps(vocab: int = 32_000, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names and ``(p, q)`` arrays of shape (steps, vocab) of the built-in example steps."""
    rng = np.random.default_rng(seed)
    log_rank = np.log(np.arange(1, vocab + 1))
    names, targets, drafts = [], [], []
    for name, sharpness, temperature, noise in _STEPS:
        logits = -sharpness * log_rank[rng.permutation(vocab)] + 0.3 * rng.standard_normal(vocab)
        draft_logits = (logits + noise * rng.standard_normal(vocab)) / temperature
        names.append(name)
        targets.append(softmax(logits))
        drafts.append(softmax(draft_logits))
    return names, np.array(targets), np.array(drafts)


def bounds_table(
    ns: tuple[int, ...] = (1, 2, 4, 8),
    designs: tuple[str, ...] = tuple(d for d in DESIGNS if d != "per_slot"),  # type: ignore[name-defined]  # mypy's scope bug
) -> pd.DataFrame:
    """``α*`` of every example step by design and ``n``: a tidy table (step, design, n, alpha_star).

    Designs that are not defined for some ``n`` (``hub`` is ``n = 2`` only) get no row there.
    """
    names, p, q = example_steps()
    rows: list[dict[str, object]] = []
    for design in designs:
        spec = get_design(design)
        for n in ns:
            if spec.fixed_n is not None and n != spec.fixed_n:
                continue
            alpha = cast("np.ndarray", optimal_acceptance(p, q, n=n, design=design))  # p is 2-D
            rows.extend(
                {"step": name, "design": design, "n": n, "alpha_star": float(a)}
                for name, a in zip(names, alpha, strict=True)
            )
    return pd.DataFrame(rows)


def main() -> None:
    """Print the example table, one column per ``n``."""
    table = bounds_table()
    wide = table.pivot_table(index=["step", "design"], columns="n", values="alpha_star")
    with pd.option_context("display.float_format", "{:.4f}".format, "display.width", 120):
        print("Optimal acceptance rate α* on the built-in example steps (V = 32,000)")
        print(wide.to_string(na_rep="-"))


if __name__ == "__main__":
    main()
