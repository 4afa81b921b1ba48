"""Block efficiency of a tree from a positional acceptance vector, Sequoia's best tree under a
node budget, and the bound from a design's optimal acceptance rates."""

from __future__ import annotations

import numpy as np

from otbound.trees._shapes import Tree, as_count, clean_tree, node_text, path_text

#: Row sums of positional vectors may exceed one by this much (rounding).
_SUM_TOLERANCE = 1e-9


def _as_rows(values: object, name: str, *, row_sums: bool) -> tuple[np.ndarray, bool]:
    """A vector (width,) or a per-depth matrix (depth, width) as 2-D rows; and whether per-depth.

    ``row_sums``: rows are exclusive probabilities and must sum to at most one.
    """
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be a vector or a (depth, width) matrix of probabilities, got "
            f"{type(values).__name__}"
        ) from exc
    if arr.ndim not in (1, 2):
        raise ValueError(
            f"{name} must be a vector (width,) or a per-depth matrix (depth, width), got shape "
            f"{arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or an infinite value")
    if np.any(arr < 0) or np.any(arr > 1):
        bad = tuple(int(i) for i in np.argwhere((arr < 0) | (arr > 1))[0])
        raise ValueError(f"{name} entries must lie in [0, 1], got {arr[bad]:.6g} at index {bad}")
    per_depth = arr.ndim == 2
    rows = arr if per_depth else arr[None, :]
    if row_sums:
        sums = rows.sum(axis=1)
        if np.any(sums > 1.0 + _SUM_TOLERANCE):
            d = int(np.argmax(sums > 1.0 + _SUM_TOLERANCE))
            where = f" (row {d})" if per_depth else ""
            raise ValueError(
                f"{name} sums to {sums[d]:.9g}{where}, above 1: its entries are the "
                "probabilities of exclusive events (which child is accepted)"
            )
    return rows, per_depth


def _check_fits(rows: np.ndarray, per_depth: bool, nodes: list[tuple[int, ...]], name: str) -> None:
    """Raise when a node's child index or depth is beyond the vector or matrix."""
    width = rows.shape[1]
    for node in nodes:
        if node[-1] >= width:
            raise ValueError(
                f"{name} has {width} entr{'y' if width == 1 else 'ies'} but the tree has the "
                f"node {path_text(node)}, child {node[-1]} of its parent: it needs at least "
                f"{node[-1] + 1} entries"
            )
        if per_depth and len(node) > rows.shape[0]:
            raise ValueError(
                f"{name} has {rows.shape[0]} rows (depths 1..{rows.shape[0]}) but the tree has "
                f"the node {path_text(node)} at depth {len(node)}"
            )


def _reach(rows: np.ndarray, per_depth: bool, nodes: list[tuple[int, ...]]) -> float:
    """``Σ_v Π_{j} a[row, v_j]`` over canonical nodes (parents before children)."""
    reach: dict[tuple[int, ...], float] = {(): 1.0}
    total = 0.0
    for node in nodes:
        row = rows[len(node) - 1] if per_depth else rows[0]
        value = reach[node[:-1]] * float(row[node[-1]])
        reach[node] = value
        total += value
    return total


def block_efficiency(positional_acceptance: object, tree: object) -> float:
    r"""Expected tokens per target call of a draft tree, the bonus token included.

    .. math::

        E = 1 + \sum_{v ∈ \text{tree}} \prod_{j=1}^{|v|} a_{v_j}
        \quad\text{or, per depth,}\quad
        E = 1 + \sum_{v} \prod_{j=1}^{|v|} a[j − 1, v_j].

    Parameters
    ----------
    positional_acceptance : array_like, shape (width,) or (depth, width)
        Sequoia's positional vector ``a_i = P(child i of an accepted node is accepted)`` (child
        indices from 0; entries in [0, 1], summing to at most 1), or a per-depth matrix whose row
        ``d`` applies to the children of the nodes at depth ``d`` (the root's children use row
        0). A :class:`PositionalAcceptance` passes as its ``values``.
    tree : sequence of sequences of int
        EAGLE-style path list (validated as in :func:`canonical_tree`).

    Returns
    -------
    float
        ``E >= 1`` (``1`` for the empty tree).

    Raises
    ------
    ValueError
        An invalid tree or vector, a vector shorter than the largest child index + 1, or a
        per-depth matrix with fewer rows than the tree's depth.

    Notes
    -----
    Exact under the model of the module docstring: acceptance at a node depends on its child
    index (and depth) only. A vector measured at width ``w`` for a verifier that is not in
    :data:`EXACT_POSITIONAL` describes nodes with ``w`` children; for k-ary trees pass the
    per-depth matrix of :func:`positional_acceptance` with ``width=branching``.

    Examples
    --------
    >>> from otbound.trees import chain, kary_tree
    >>> block_efficiency([0.5, 0.3], [[0], [1], [0, 0]])  # 1 + .5 + .3 + .5·.5
    2.05
    >>> block_efficiency([[0.9], [0.5]], chain(2))  # 1 + .9 + .9·.5
    2.35
    """
    nodes = clean_tree(tree)
    rows, per_depth = _as_rows(positional_acceptance, "positional_acceptance", row_sums=True)
    _check_fits(rows, per_depth, nodes, "positional_acceptance")
    return 1.0 + _reach(rows, per_depth, nodes)


def best_tree(positional_acceptance: object, budget: int, max_depth: int | None = None) -> Tree:
    r"""The tree of at most ``budget`` nodes with the largest :func:`block_efficiency`.

    Sequoia's dynamic programme, over subtrees hanging under a node at depth ``d``:

    .. math::

        F_d(n) = G_d(0, n),\qquad
        G_d(i, n) = \max\Bigl(0,\ \max_{1 ≤ m ≤ n}\ a[d, i]\,\bigl(1 + F_{d+1}(m − 1)\bigr)
                    + G_d(i + 1, n − m)\Bigr),

    where ``F_d(n)`` is the best value of the nodes strictly below a node at depth ``d`` using at
    most ``n`` of them, ``G_d(i, n)`` the best for its children at positions ``i, i+1, …``
    (positions are used contiguously, each with its own subtree of ``m`` nodes),
    ``G_d(width, ·) = F_{D}(·) = 0`` at the depth limit ``D``, and ``E = 1 + F_0(budget)``.

    Exact for **any** non-negative vector, not only non-increasing ones. The programme chooses,
    for each child position in turn, the size of the subtree under it, and uses positions
    contiguously (child ``i`` needs children ``0..i−1``), so it never assumes that earlier
    positions are worth more; each subtree is optimal on its own because its value enters ``E``
    multiplied by ``a[d, i] ≥ 0``. Ties go to the smaller subtree.

    Cost: ``O(width · budget²)`` for a vector without a depth limit (``F`` does not depend on
    ``d``), ``O(D · width · budget²)`` with a depth limit ``D`` or a per-depth matrix; numpy
    carries the last factor (budget 768, width 16: about 0.2 s).

    Parameters
    ----------
    positional_acceptance : array_like, shape (width,) or (depth, width)
        As in :func:`block_efficiency`; a per-depth matrix also caps the depth at its rows.
    budget : int
        Maximum number of nodes (drafted tokens verified per call), ``>= 0``.
    max_depth : int, optional
        Maximum depth (longest path).

    Returns
    -------
    list of list of int
        The canonical path list of an optimal tree (it has fewer than ``budget`` nodes only when
        more nodes cannot raise ``E``: zero entries, or the depth and width limits).

    Examples
    --------
    >>> best_tree([0.8, 0.1], budget=3)
    [[0], [0, 0], [0, 0, 0]]
    >>> best_tree([0.5, 0.3], budget=3)
    [[0], [1], [0, 0]]
    """
    rows, per_depth = _as_rows(positional_acceptance, "positional_acceptance", row_sums=True)
    budget = as_count(budget, "budget")
    limit = budget
    if max_depth is not None:
        limit = min(limit, as_count(max_depth, "max_depth"))
    if per_depth:
        limit = min(limit, rows.shape[0])
    width = min(rows.shape[1], budget)
    if limit == 0 or width == 0:
        return []
    if not per_depth and limit == budget:
        # No depth limit binds (a path is never longer than the budget): F does not depend on d.
        choice = _stationary_choices(rows[0, :width], budget)
        choices = [choice] * limit
    else:
        choices = _layered_choices(rows[:, :width], per_depth, budget, limit)
    out: list[tuple[int, ...]] = []
    stack: list[tuple[tuple[int, ...], int]] = [((), budget)]
    while stack:  # expand each node: its children in turn, each with its subtree size
        prefix, nodes = stack.pop()
        if len(prefix) >= limit:
            continue
        for i in range(width):
            m = int(choices[len(prefix)][i, nodes])
            if m == 0:
                break
            child = (*prefix, i)
            out.append(child)
            stack.append((child, m - 1))
            nodes -= m
    return [list(k) for k in sorted(out, key=lambda k: (len(k), k))]


def _pick(cand: np.ndarray) -> np.ndarray:
    """Index of the first candidate (along axis 0) within rounding of the best: fewest nodes."""
    best = cand.max(axis=0)
    first: np.ndarray = np.argmax(cand >= best - 1e-12 * np.maximum(1.0, best), axis=0)
    return first


def _stationary_choices(row: np.ndarray, budget: int) -> np.ndarray:
    """``choice[i, n]`` (nodes for position ``i`` out of ``n``) for a depth-independent vector.

    ``F(n)`` is computed for ``n = 0, 1, …`` in turn: ``G(i, n)`` needs ``F`` below ``n`` only.
    ``O(width · budget²)`` with numpy over the last factor.
    """
    width = row.size
    size = budget + 1
    below = np.zeros(size)  # F(n)
    g = np.zeros((width + 1, size))  # G(i, n); row `width` stays 0
    choice = np.zeros((width, size), dtype=np.int64)
    for n in range(1, size):
        m = np.arange(1, n + 1)
        for i in range(width - 1, -1, -1):
            cand = np.concatenate(([0.0], row[i] * (1.0 + below[m - 1]) + g[i + 1, n - m]))
            pick = int(_pick(cand))
            choice[i, n] = pick
            g[i, n] = cand[pick]
        below[n] = g[0, n]
    return choice


def _layered_choices(
    rows: np.ndarray, per_depth: bool, budget: int, limit: int
) -> list[np.ndarray]:
    """``choice[d][i, n]`` per depth ``d < limit`` (nothing hangs below depth ``limit``)."""
    width = rows.shape[1]
    size = budget + 1
    n_idx = np.arange(size)[None, :]  # total nodes n (columns)
    m_idx = np.arange(size)[:, None]  # nodes m given to the current position (rows); 0 = stop
    feasible = m_idx <= n_idx
    gather = np.clip(n_idx - m_idx, 0, None)
    below = np.zeros(size)  # F_{d+1}: nothing below the deepest allowed nodes
    choices: list[np.ndarray] = [np.zeros((width, size), dtype=np.int64)] * limit
    for d in range(limit - 1, -1, -1):
        row = rows[d] if per_depth else rows[0]
        subtree = np.concatenate(([0.0], 1.0 + below[:-1]))  # m nodes: the child and m − 1 below
        g = np.zeros(size)  # G_d(width, ·)
        choice = np.zeros((width, size), dtype=np.int64)
        for i in range(width - 1, -1, -1):
            cand = np.where(feasible, row[i] * subtree[:, None] + g[gather], -np.inf)
            cand[0] = 0.0  # stop: positions i.. unused
            pick = _pick(cand)
            choice[i] = pick
            g = cand[pick, np.arange(size)]
        choices[d] = choice
        below = g
    return choices


# -- the bound ---------------------------------------------------------------------------------


def bound_block_efficiency(alpha_star_by_width: object, tree: object) -> float:
    r"""Upper bound on the tokens per call of every token-level verifier of a design on this tree.

    *Token-level* verifiers decide node by node, from the drafts of one node's children and
    ``p``, ``q`` at that node (every verifier of :data:`otbound.VERIFIERS`). The bound does
    **not** cover sequence-level verifiers (block, traversal, multi-path block verification,
    :mod:`otbound.sequence`), which decide on whole paths and can exceed it; their block-level
    bounds are :func:`otbound.sequence.optimal_verification_acceptance` and
    :func:`otbound.sequence.optimal_tree_acceptance`.

    With ``A(u) = α*(k(u))``, the design's optimal acceptance rate for the ``k(u)`` children of
    node ``u`` (row ``depth(u)`` of a per-depth matrix), this returns ``1 + W(root)`` with

    .. math::

        W(u) = A(u) \bigl(1 + \max_{c \text{ child of } u} W(c)\bigr),\qquad W(\text{leaf}) = 0:

    the whole mass ``α*(k)`` flows to the child with the largest subtree value. Equivalently, the
    best root-to-leaf path ``u_0 u_1 … u_L`` of ``1 + Σ_{l=1}^{L} Π_{j<l} A(u_j)``, where each
    ``A(u_j)`` counts all the children of ``u_j``, not only the one on the path.

    **Claim.** For every split ``π_u(c) ≥ 0`` of the acceptance among the children of each node
    with ``Σ_c π_u(c) ≤ α*(k(u))`` (in particular every positional vector or per-depth matrix
    with ``Σ_{i<k} a_i ≤ α*(k)`` for the ``k`` of every internal node, and every verifier of
    the design in the model of the module docstring),
    ``block_efficiency ≤ bound_block_efficiency``.

    *Proof.* The block efficiency is ``1 + V(root)`` with
    ``V(u) = Σ_c π_u(c) (1 + V(c))`` and ``V(leaf) = 0``. By induction from the leaves, with
    ``V(c) ≤ W(c)`` for every child and ``π_u ≥ 0``:
    ``V(u) ≤ (Σ_c π_u(c)) · max_c (1 + V(c)) ≤ α*(k(u)) · (1 + max_c W(c)) = W(u)``. ∎

    The bound is attained by a split that puts ``α*(k(u))`` on a best child, so it is the
    maximum over all splits; on complete k-ary trees (all subtrees at a depth alike) every split
    gives ``1 + Σ_{d=1}^{D} Π_{i<d} α*(b_i)``, which any verifier reaching ``α*`` attains.

    Parameters
    ----------
    alpha_star_by_width : array_like, shape (width,) or (depth, width)
        ``[α*(1), α*(2), …]`` (entry ``k − 1`` for ``k`` children), or per depth: row ``d`` for
        the nodes at depth ``d`` (the root at depth 0). Entries in [0, 1].
    tree : sequence of sequences of int
        EAGLE-style path list.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        An invalid tree, or ``alpha_star_by_width`` too short for a node's number of children
        (or with too few rows for the depth of a node that has children).

    Examples
    --------
    >>> from otbound.trees import kary_tree
    >>> round(bound_block_efficiency([0.7, 0.9], kary_tree([2, 2])), 6)  # 1 + .9 + .9²
    2.71
    >>> round(bound_block_efficiency([0.7, 0.9], [[0], [1], [0, 0]]), 6)  # root .9, [0] .7
    2.53
    """
    nodes = clean_tree(tree)
    rows, per_depth = _as_rows(alpha_star_by_width, "alpha_star_by_width", row_sums=False)
    children: dict[tuple[int, ...], int] = {}
    for node in nodes:
        children[node[:-1]] = max(children.get(node[:-1], 0), node[-1] + 1)
    for parent, k in children.items():
        if k > rows.shape[1]:
            raise ValueError(
                f"alpha_star_by_width has {rows.shape[1]} entries (α*(1)..α*({rows.shape[1]})) "
                f"but the node {node_text(parent)} has {k} children"
            )
        if per_depth and len(parent) >= rows.shape[0]:
            raise ValueError(
                f"alpha_star_by_width has {rows.shape[0]} rows (one per depth from 0) but the "
                f"node {node_text(parent)} at depth {len(parent)} has children"
            )
    value: dict[tuple[int, ...], float] = {}  # W(u) of the internal nodes; leaves are 0
    for parent in sorted(children, key=len, reverse=True):  # children before parents
        k = children[parent]
        best = max(value.get((*parent, c), 0.0) for c in range(k))
        star = float(rows[len(parent) if per_depth else 0, k - 1])
        value[parent] = star * (1.0 + best)
    return 1.0 + value.get((), 0.0)
