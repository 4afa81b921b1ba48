r"""The level rule that attains ``α*`` for i.i.d. drafts at any ``n``.

For i.i.d. drafts the chances of a selection rule are a base ``r`` of the polymatroid
``f(A) = P(S ∩ A ≠ ∅) = 1 − (1 − q(A))^n`` (``r(A) ≤ f(A)``, ``r(V) = 1``), and
``max_r Σ min(p, r) = α*``. The rule built here reaches it in ``O(V log V)``:

1. **Slots.** Tokens with ``q > 0`` in decreasing ``p / q``; slot ``k`` is ``[a_k, b_k]``
   with ``a_k = Σ_{j>k} q_j``. Its value ``v_k = (b_k^n − a_k^n) / q_k`` is the selection
   chance per unit of ``q`` of a level inside it; alone in its slot (priority in this
   order) token ``k`` is selected with ``q_k v_k = f(B_{k+1}) − f(B_k)`` (``B_k``: the
   first ``k`` tokens), a vertex of the base polytope.
2. **Target.** The greatest convex minorant of the points ``(p(B_k), f(B_k))`` (``B_k``:
   the first ``k`` tokens) cuts the slots into blocks, and ``r = c_j p`` on block ``j``
   (``c_j`` its chord's slope, increasing in ``j``). The blocks of slope ``≤ 1`` end where
   ``f(B_k) − p(B_k)`` is least, so ``Σ min(p, r) = p(q > 0) + min_k [f(B_k) − p(B_k)]``,
   the sweep's ``α*`` at ``H = V ∖ B_k``.
3. **Swaps.** Inside a block, slots whose vertex mass is above ``c p`` (surplus) give
   pieces of their slot to later slots below it (deficit), which give back as much of
   theirs: ``μ`` of measure moves ``μ (v_i − v_k)`` of selection mass from ``i`` to ``k``,
   and the level of one draft stays uniform on ``[0, 1]``. Surpluses come first in every
   prefix of a block (the minorant lies below the curve), and ``v_k ≤ c p_i / q_i``,
   ``v_i ≥ c p_k / q_k``, so each slot's pieces fit in its length.

The marginal is recomputed from the pieces (:func:`~otbound.selection._kernels.level_pieces`),
so it is the rule's own to rounding however the blocks were found. ``docs/mathematics.md`` has
the proofs.
"""

from __future__ import annotations

import numpy as np

from otbound.selection.rule import SelectionRule

__all__ = ["LEVEL_RULE_DESIGNS", "has_level_rule", "level_rule", "level_rule_acceptance"]

#: The designs with a level rule that attains ``α*``, and the ``n`` each serves (None: any).
LEVEL_RULE_DESIGNS: dict[str, int | None] = {"iid": None}


def has_level_rule(design: str, n: int) -> bool:
    """Whether :func:`level_rule` attains ``α*`` for this design and ``n``."""
    if design not in LEVEL_RULE_DESIGNS:
        return False
    most = LEVEL_RULE_DESIGNS[design]
    return most is None or n <= most


def level_rule(p: np.ndarray, q: np.ndarray, n: int, design: str = "iid") -> SelectionRule:
    r"""The level rule of one step whose selection marginal ``r`` has ``Σ min(p, r) = α*``.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Validated target and draft distributions.
    n : int
        Number of drafts.
    design : str, default "iid"
        A design of :data:`LEVEL_RULE_DESIGNS`.

    Returns
    -------
    SelectionRule

    Raises
    ------
    ValueError
        A design or ``n`` without a level rule.
    """
    _check(design, n)
    return _iid_rule(p, q, n, design)


def _check(design: str, n: int) -> None:
    if not has_level_rule(design, n):
        raise ValueError(
            f"no level rule attains α* for design={design!r} at n={n}; available: "
            + ", ".join(
                f"{d} ({'any n' if m is None else f'n ≤ {m}'})"
                for d, m in LEVEL_RULE_DESIGNS.items()
            )
        )


def level_rule_acceptance(p: np.ndarray, q: np.ndarray, n: int, design: str = "iid") -> float:
    """``Σ min(p, r)`` of :func:`level_rule`'s rule without building its swaps (one pass
    over the slots after the sort: :func:`~otbound.selection._kernels.rule_acceptance`)."""
    from otbound.selection._kernels import rule_acceptance  # numba

    _check(design, n)
    order = slot_order(p, q)
    return float(rule_acceptance(q[order], p[order], n))


def slot_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The tokens with ``q > 0`` in decreasing ``p / q`` (the sort is cached per step)."""
    from otbound.verifiers._step_cache import ratio_order

    order: np.ndarray = ratio_order(p, q)[::-1].copy()
    return order


def _iid_rule(p: np.ndarray, q: np.ndarray, n: int, design: str) -> SelectionRule:
    """Steps 1-3 of the module docstring on the tokens with ``q > 0``: the slots, their
    blocks and each block's line of transfers (the level laws follow from it on demand)."""
    from otbound.selection._kernels import (  # numba
        convex_minorant_blocks,
        slot_values,
        transfer_ledger,
    )

    order = slot_order(p, q)
    q_sorted, p_sorted = q[order], p[order]
    _, values = slot_values(q_sorted, n)
    mass = q_sorted * values
    blocks = np.array([0, order.size], dtype=np.int64)  # one draft: r = q, no transfer
    if n > 1:
        blocks = convex_minorant_blocks(p_sorted, mass)
    gain = p_sorted if n > 1 else np.zeros_like(p_sorted)
    return SelectionRule(
        design=design,
        n=n,
        target=p,
        order=order,
        q_sorted=q_sorted,
        values=values,
        ledger=transfer_ledger(mass, gain, blocks),
    )
