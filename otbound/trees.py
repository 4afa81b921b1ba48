r"""Draft trees: block efficiency (tokens per target call) predicted from acceptance rates.

A *draft tree* is given EAGLE-style, as the list of its nodes, each node the path of child
indices from the root (0-based): ``[[0], [1], [0, 0], [0, 1], [1, 0]]`` has two children of
the root, two children under ``[0]`` and one under ``[1]``. The root (the last verified token)
is not listed. Valid trees have non-empty paths of non-negative integers, no duplicates, every
prefix of a path among the nodes, and contiguous siblings (child ``k`` implies child ``k − 1``).

*The model* (Sequoia; Chen et al. 2024). One target call verifies the whole tree; the accepted
tokens form a path from the root, and the call also yields one token from the target (the
bonus token, or the correction after a rejection). With the **positional acceptance vector**

.. math::

    a = (a_0, a_1, …),\qquad a_i = P(\text{child } i \text{ of an accepted node is accepted}),

(sibling events are exclusive, so ``Σ a_i ≤ 1``), and acceptance at a node independent of the
path that led to it, the expected number of tokens per target call (the *block efficiency*) is

.. math::

    E = 1 + \sum_{v ∈ \text{tree}} \prod_{j=1}^{|v|} a_{v_j}

(a node is reached iff every node on its path is accepted, each with the factor of its child
index). A per-depth matrix ``a[d, i]`` (row ``d`` for the children of the nodes at depth ``d``,
the root at depth 0) models acceptance that changes with depth. The rates are means over
decoding steps: this is the i.i.d. approximation under which a chain of ``γ`` drafts gives
``(1 − α^{γ+1}) / (1 − α)``.

What this module offers:

* :func:`block_efficiency`, and the builders :func:`chain`, :func:`kary_tree` and
  :func:`best_tree` (Sequoia's dynamic programme: the tree of at most ``budget`` nodes with the
  largest ``E``, exact for any non-negative vector);
* :func:`positional_acceptance`: the vector ``a`` of a verifier on given ``(p, q)``, exact where
  the verifier allows it, else by Monte Carlo;
* :func:`bound_block_efficiency`: the counterpart of ``α*``: an upper bound on ``E`` for every
  verifier of a draft design, from the design's optimal acceptance rates ``α*(k)``;
* :func:`predict_tokens_per_call`: tokens per call of k-ary trees for every verifier of a
  per-step table (:func:`otbound.compare`, or ``steps.parquet`` of ``compute-bounds``).

Examples
--------
>>> from otbound.trees import block_efficiency, best_tree, chain, kary_tree
>>> round(block_efficiency([0.8], chain(3)), 6)  # 1 + .8 + .64 + .512
2.952
>>> round(block_efficiency([0.5, 0.2], kary_tree([2, 2])), 4)  # 1 + .7 + .7²
2.19
>>> best_tree([0.6, 0.2, 0.1], budget=4)
[[0], [1], [0, 0], [0, 0, 0]]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from otbound._checks import as_distribution_pair, broadcast_batch
from otbound.drafts import _top_tokens, get_design
from otbound.verifiers.base import BaseVerifier, as_trials, sample_drafts
from otbound.verifiers.registry import get_verifier

__all__ = [
    "EXACT_POSITIONAL",
    "PositionalAcceptance",
    "best_tree",
    "block_efficiency",
    "bound_block_efficiency",
    "canonical_tree",
    "chain",
    "kary_tree",
    "positional_acceptance",
    "predict_tokens_per_call",
]

#: Verifiers whose ``n``-draft procedure, restricted to its first ``k`` drafts, is its ``k``-draft
#: procedure (the first ``k`` drafts of the design are the ``k``-draft design, and whether draft
#: ``j ≤ k`` is output does not depend on the later drafts). For them the positional vector is
#: exact and width-independent: ``a_{k−1} = α(k) − α(k − 1)``.
EXACT_POSITIONAL = ("single", "rrs", "rrs_without_replacement", "topk")

#: Row sums of positional vectors may exceed one by this much (rounding).
_SUM_TOLERANCE = 1e-9

Tree = list[list[int]]


# -- trees -------------------------------------------------------------------------------------


def _path_text(path: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in path) + "]"


def _node_text(path: Sequence[int]) -> str:
    return _path_text(path) if path else "root"


def _clean_tree(tree: object, name: str = "tree") -> list[tuple[int, ...]]:
    """Validate a path list; return its nodes as tuples in canonical order (depth, then path)."""
    if isinstance(tree, str | bytes) or not isinstance(tree, Iterable):
        raise ValueError(
            f"{name} must be a list of paths (lists of child indices from the root), "
            f"got {type(tree).__name__}"
        )
    nodes: dict[tuple[int, ...], int] = {}
    for index, path in enumerate(tree):
        if isinstance(path, str | bytes) or not isinstance(path, Iterable):
            raise ValueError(
                f"{name}[{index}] must be a path (a list of child indices), got {path!r}"
            )
        items = list(path)
        if not items:
            raise ValueError(
                f"{name}[{index}] is empty: every node is a non-empty path of child indices "
                "from the root (the root itself is not listed)"
            )
        for i in items:
            if isinstance(i, bool | np.bool_) or not isinstance(i, numbers.Integral) or i < 0:
                raise ValueError(
                    f"{name}[{index}] = {items!r}: child indices must be non-negative integers"
                )
        key = tuple(int(i) for i in items)
        if key in nodes:
            raise ValueError(
                f"{name} has the node {_path_text(key)} twice ({name}[{nodes[key]}] and "
                f"{name}[{index}])"
            )
        nodes[key] = index
    for key in nodes:
        if len(key) > 1 and key[:-1] not in nodes:
            raise ValueError(
                f"{name} has the node {_path_text(key)} but not its parent "
                f"{_path_text(key[:-1])}: every prefix of a path must be a node"
            )
        if key[-1] > 0 and (*key[:-1], key[-1] - 1) not in nodes:
            raise ValueError(
                f"{name} has the node {_path_text(key)} but not its sibling "
                f"{_path_text((*key[:-1], key[-1] - 1))}: children must be numbered "
                "contiguously from 0"
            )
    return sorted(nodes, key=lambda k: (len(k), k))


def canonical_tree(tree: object) -> Tree:
    """Validate a tree and return its paths sorted canonically (by depth, then lexicographically).

    Parameters
    ----------
    tree : sequence of sequences of int
        EAGLE-style path list (see the module docstring).

    Returns
    -------
    list of list of int

    Raises
    ------
    ValueError
        A path that is empty or holds something other than non-negative integers, a duplicate
        node, a node whose parent is missing, or a child whose previous sibling is missing (the
        message names the offending path).

    Examples
    --------
    >>> canonical_tree([(1,), [0, 0], [0]])
    [[0], [1], [0, 0]]
    """
    return [list(k) for k in _clean_tree(tree)]


def chain(depth: int) -> Tree:
    """A chain of ``depth`` drafts (one child per node): ``[[0], [0, 0], …]``.

    Its block efficiency with ``a = [α]`` is ``Σ_{d=0}^{γ} α^d = (1 − α^{γ+1}) / (1 − α)``.

    Examples
    --------
    >>> chain(3)
    [[0], [0, 0], [0, 0, 0]]
    """
    depth = _as_count(depth, "depth")
    return [[0] * d for d in range(1, depth + 1)]


def _as_count(value: object, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _as_branching(branching: object, depth: object = None) -> list[int]:
    """Per-depth branching factors from an int and a depth, or a sequence of ints."""
    if isinstance(branching, numbers.Integral) and not isinstance(branching, bool):
        if depth is None:
            raise ValueError(
                "kary_tree(k) needs a depth: kary_tree(k, depth=d), or per-depth branching "
                "factors such as [2, 2, 2]"
            )
        return [_as_count(branching, "branching", 1)] * _as_count(depth, "depth")
    if depth is not None:
        raise ValueError("depth is given by the length of a per-depth branching list; omit depth")
    if isinstance(branching, str | bytes) or not isinstance(branching, Iterable):
        raise ValueError(f"branching must be an integer >= 1 or a list of them, got {branching!r}")
    return [_as_count(b, "each branching factor", 1) for b in branching]


def kary_tree(branching: int | Sequence[int], depth: int | None = None) -> Tree:
    """The complete tree with ``branching[d]`` children under every node at depth ``d``.

    Parameters
    ----------
    branching : int or sequence of int
        One factor for every depth (``depth`` required), or per-depth factors: ``[2, 2, 2]`` is
        the binary tree of depth 3 (2 + 4 + 8 = 14 nodes), ``[1] * γ`` a chain.
    depth : int, optional
        Depth when ``branching`` is an int.

    Returns
    -------
    list of list of int
        Canonical path list with ``Σ_d Π_{i≤d} branching[i]`` nodes.

    Notes
    -----
    With per-depth total acceptance ``s_d`` of a node's ``b_d`` children (``Σ_{i<b_d} a_i`` for
    a positional vector, or ``α(b_d)`` of any verifier), the block efficiency is
    ``1 + Σ_{d=1}^{D} Π_{i<d} s_i``, however the mass is split among siblings.

    Examples
    --------
    >>> kary_tree([2, 1])
    [[0], [1], [0, 0], [1, 0]]
    >>> len(kary_tree(2, depth=3))
    14
    """
    factors = _as_branching(branching, depth)
    level: list[list[int]] = [[]]
    out: Tree = []
    for b in factors:
        level = [[*path, i] for path in level for i in range(b)]
        out.extend(level)
    return out


# -- positional vectors ------------------------------------------------------------------------


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
                f"node {_path_text(node)}, child {node[-1]} of its parent: it needs at least "
                f"{node[-1] + 1} entries"
            )
        if per_depth and len(node) > rows.shape[0]:
            raise ValueError(
                f"{name} has {rows.shape[0]} rows (depths 1..{rows.shape[0]}) but the tree has "
                f"the node {_path_text(node)} at depth {len(node)}"
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
    >>> block_efficiency([0.5, 0.3], [[0], [1], [0, 0]])  # 1 + .5 + .3 + .5·.5
    2.05
    >>> block_efficiency([[0.9], [0.5]], chain(2))  # 1 + .9 + .9·.5
    2.35
    """
    nodes = _clean_tree(tree)
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
    budget = _as_count(budget, "budget")
    limit = budget
    if max_depth is not None:
        limit = min(limit, _as_count(max_depth, "max_depth"))
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
    return np.argmax(cand >= best - 1e-12 * np.maximum(1.0, best), axis=0)


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
    r"""Upper bound on the tokens per call of every verifier of a draft design on this tree.

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
    >>> round(bound_block_efficiency([0.7, 0.9], kary_tree([2, 2])), 6)  # 1 + .9 + .9²
    2.71
    >>> round(bound_block_efficiency([0.7, 0.9], [[0], [1], [0, 0]]), 6)  # root .9, [0] .7
    2.53
    """
    nodes = _clean_tree(tree)
    rows, per_depth = _as_rows(alpha_star_by_width, "alpha_star_by_width", row_sums=False)
    children: dict[tuple[int, ...], int] = {}
    for node in nodes:
        children[node[:-1]] = max(children.get(node[:-1], 0), node[-1] + 1)
    for parent, k in children.items():
        if k > rows.shape[1]:
            raise ValueError(
                f"alpha_star_by_width has {rows.shape[1]} entries (α*(1)..α*({rows.shape[1]})) "
                f"but the node {_node_text(parent)} has {k} children"
            )
        if per_depth and len(parent) >= rows.shape[0]:
            raise ValueError(
                f"alpha_star_by_width has {rows.shape[0]} rows (one per depth from 0) but the "
                f"node {_node_text(parent)} at depth {len(parent)} has children"
            )
    value: dict[tuple[int, ...], float] = {}  # W(u) of the internal nodes; leaves are 0
    for parent in sorted(children, key=len, reverse=True):  # children before parents
        k = children[parent]
        best = max(value.get((*parent, c), 0.0) for c in range(k))
        star = float(rows[len(parent) if per_depth else 0, k - 1])
        value[parent] = star * (1.0 + best)
    return 1.0 + value.get((), 0.0)


# -- positional vectors of verifiers -----------------------------------------------------------


@dataclass(frozen=True)
class PositionalAcceptance:
    """A verifier's positional acceptance, averaged over steps (:func:`positional_acceptance`).

    Passes to :func:`block_efficiency` and :func:`best_tree` as its :attr:`values`.

    Attributes
    ----------
    values : numpy.ndarray, shape (width,) or (depth, max width)
        ``values[k]`` = mean over steps of ``P(the accepted token is draft k)`` (0-based); per
        depth (``width`` given per depth) row ``d`` is the vector at ``width[d]`` drafts, padded
        with zeros.
    stderr : numpy.ndarray
        Standard errors of ``values`` from the Monte Carlo steps (0 where exact):
        ``sqrt(Σ_s a_s (1 − a_s) / trials) / steps``.
    method : {"exact", "monte_carlo", "mixed"}
        How the steps were computed (``"mixed"``: some exact, some by Monte Carlo).
    verifier : str
    design : str
    width : int or tuple of int
    steps : int
    trials : int
        Monte Carlo trials per step and width (0 when every step was exact).
    """

    values: np.ndarray
    stderr: np.ndarray = field(repr=False)
    method: str
    verifier: str
    design: str
    width: int | tuple[int, ...]
    steps: int
    trials: int

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.asarray(self.values, dtype=dtype)


def _exact_path(verifier: object, width: int) -> str | None:
    """``"nested"``, ``"deterministic"``, ``"one"`` or None (Monte Carlo) for this verifier."""
    if not isinstance(verifier, BaseVerifier):
        return None
    if verifier.name in EXACT_POSITIONAL and verifier.design == verifier.default_design:
        return "nested"
    if verifier.design in ("topk", "greedy"):
        return "deterministic"
    if width == 1:
        return "one"
    return None


def _exact_step(
    verifier: BaseVerifier, path: str, p: np.ndarray, q: np.ndarray, width: int
) -> np.ndarray | None:
    """The exact positional vector of one step, or None when an acceptance is unavailable."""
    if path == "one":  # one draft: it is the accepted token whenever one is accepted
        value = verifier.acceptance(p, q, 1)
        return None if value is None else np.array([float(value)])
    if path == "nested":
        alphas = [0.0]
        for k in range(1, width + 1):
            value = verifier.acceptance(p, q, k)
            if value is None:
                return None
            alphas.append(float(value))
        return np.maximum(np.diff(alphas), 0.0)
    # Deterministic draft slots: a lossless verifier outputs Y ~ p, so the slot holding the
    # fixed token t is the accepted one with probability p(t) (the drafts are distinct).
    fixed = width if verifier.design == "topk" else width - 1
    top = _top_tokens(q, fixed)
    out = np.empty(width)
    out[:fixed] = p[top]
    if fixed < width:
        value = verifier.acceptance(p, q, width)
        if value is None:
            return None
        out[fixed] = max(float(value) - float(p[top].sum()), 0.0)
    return out


def _monte_carlo_step(
    verifier: object, p: np.ndarray, q: np.ndarray, width: int, trials: int, seed: object
) -> np.ndarray:
    """``P(first draft position equal to the output = k)`` from ``trials`` seeded trials."""
    drafts = tokens = None
    simulate = getattr(verifier, "simulate", None)
    if callable(simulate):
        out = simulate(p, q, n=width, trials=trials, seed=seed)
        drafts = getattr(out, "drafts", None)
        tokens = getattr(out, "tokens", None)
    if drafts is None or tokens is None:
        verify = getattr(verifier, "verify", None)
        if not callable(verify):
            raise TypeError(
                "positional_acceptance needs the drafts of each trial: a verifier whose simulate "
                "returns .drafts and .tokens (a SimulationResult), or one with "
                "verify(drafts, p, q, rng)"
            )
        rng = np.random.default_rng(seed)  # type: ignore[arg-type]
        drafts = sample_drafts(get_design(verifier.design), q, width, trials, rng)  # type: ignore[attr-defined]
        tokens = np.array([verify(drafts[t], p, q, rng)[0] for t in range(trials)])
    drafts = np.asarray(drafts)
    tokens = np.asarray(tokens)
    if drafts.shape != (trials, width) or tokens.shape != (trials,):
        raise ValueError(
            f"the verifier returned drafts of shape {drafts.shape} and tokens of shape "
            f"{tokens.shape}, expected ({trials}, {width}) and ({trials},)"
        )
    hit = drafts == tokens[:, None]
    accepted = hit.any(axis=1)
    first = np.argmax(hit, axis=1)[accepted]
    return np.bincount(first, minlength=width)[:width] / trials


def _as_widths(width: object) -> tuple[list[int], bool]:
    if isinstance(width, numbers.Integral) and not isinstance(width, bool):
        return [_as_count(width, "width", 1)], False
    if isinstance(width, str | bytes) or not isinstance(width, Iterable):
        raise ValueError(f"width must be an integer >= 1 or a list of them, got {width!r}")
    widths = [_as_count(w, "each width", 1) for w in width]
    if not widths:
        raise ValueError("width must be an integer >= 1 or a non-empty list of them, got []")
    return widths, True


def positional_acceptance(
    verifier: object,
    p: object,
    q: object,
    width: int | Sequence[int],
    trials: int = 100_000,
    seed: int = 0,
    *,
    method: str = "auto",
) -> PositionalAcceptance:
    r"""Positional acceptance vector of a verifier: ``P(the accepted token is draft k)``.

    For one step, or the mean over a batch of steps. Draft ``k`` is the ``k``-th draft of the
    verifier's design (0-based); the accepted token is attributed to the **first** draft equal
    to it (duplicates of an i.i.d. design count once), so ``Σ_k a_k`` is the acceptance rate
    ``α(width)``.

    How each verifier is computed (``method="auto"``):

    * ``single``, ``rrs``, ``rrs_without_replacement``, ``topk`` (:data:`EXACT_POSITIONAL`):
      exact differences ``a_{k−1} = α(k) − α(k−1)`` of the verifier's exact ``acceptance``.
      Valid because the ``n``-draft procedure restricted to its first ``k`` drafts is the
      ``k``-draft procedure (the first ``k`` of ``n`` i.i.d. or sequential drafts are the
      ``k``-draft design; drafts are tried in order; ``single`` looks at the first draft only),
      so ``α(k) − α(k−1) = P(Y = x_k, Y ∉ x_{<k})``; the vector does not depend on ``width``.
      Where the exact acceptance is unavailable (``rrs_without_replacement`` with
      ``V^k > 200,000`` at ``k ≥ 3``) that step falls back to Monte Carlo.
    * Verifiers on the ``greedy`` design (``greedy``, ``optimal(design="greedy")``) and the
      ``topk`` design: the first slots hold fixed tokens ``T_i`` (the most likely under ``q``),
      and a lossless verifier outputs ``Y ~ p``, so ``a_i = p(T_i)`` for those slots and the
      sampled last slot of ``greedy`` gets ``α(width) − p(T)``. Exact, but width-dependent.
    * All others (``kseq``: its ``ρ`` depends on ``n``; ``spechub``: ``n = 2`` only;
      ``importance``, ``gls``, ``optimal``; any verifier object): Monte Carlo with ``width``
      drafts, ``trials`` trials per step, from ``verifier.simulate`` (its
      :class:`~otbound.SimulationResult` carries the drafts), or from ``verify`` on drafts drawn
      by the design. Width-dependent: the vector describes nodes with ``width`` children.
      At ``width = 1`` every verifier with an exact ``acceptance`` is exact: ``a_0 = α(1)``.

    Parameters
    ----------
    verifier : str or verifier object
        A name in :data:`otbound.VERIFIERS` or an object with the verifier protocol.
    p, q : array_like, shape (V,) or (steps, V)
        Target and draft distributions (``q`` of shape ``(…, width, V)`` for ``per_slot``).
    width : int or sequence of int
        Number of drafts. A sequence of per-depth widths (k-ary branching factors) returns a
        per-depth matrix whose row ``d`` is the vector at ``width[d]`` drafts (zero-padded):
        with :func:`kary_tree` of the same factors, :func:`block_efficiency` is then exact in
        the model for every verifier, including the width-dependent ones.
    trials : int, default 100_000
        Monte Carlo trials per step and width.
    seed : int, default 0
        Step ``s`` at width ``w`` uses ``SeedSequence(seed, spawn_key=(s, w))``.
    method : {"auto", "exact", "monte_carlo"}, default "auto"
        ``"exact"`` raises where no exact path exists; ``"monte_carlo"`` simulates every verifier.

    Returns
    -------
    PositionalAcceptance

    Raises
    ------
    ValueError
        Invalid distributions, widths, trials or method; a width the verifier or design is not
        defined for (``spechub`` at ``width ≠ 2``, more distinct drafts than the support of
        ``q``); ``method="exact"`` for a verifier without an exact path.

    Examples
    --------
    >>> pa = positional_acceptance("rrs", [0.3, 0.4, 0.3], [0.6, 0.3, 0.1], width=2)
    >>> pa.method, [round(float(x), 4) for x in pa.values]  # α(1) = .7, α(2) = .82
    ('exact', [0.7, 0.12])
    """
    if method not in ("auto", "exact", "monte_carlo"):
        raise ValueError(f"method must be 'auto', 'exact' or 'monte_carlo', got {method!r}")
    trials = as_trials(trials)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    widths, per_depth = _as_widths(width)
    v = get_verifier(verifier)
    if not hasattr(v, "design"):
        raise TypeError(
            f"positional_acceptance needs a verifier with a 'design'; got {type(v).__name__}"
        )
    spec = get_design(v.design)  # type: ignore[attr-defined]
    p_arr, q_arr = as_distribution_pair(p, q, q_min_ndim=2 if spec.slot_axis else 1)
    p2, q2, _ = broadcast_batch(p_arr, q_arr, 1 if spec.slot_axis else 0)
    steps = p2.shape[0]
    top = max(widths)
    values: dict[int, np.ndarray] = {}
    variances: dict[int, np.ndarray] = {}
    used = {"exact": 0, "monte_carlo": 0}
    for w in dict.fromkeys(widths):
        fixed_n = getattr(v, "fixed_n", None)
        if fixed_n is not None and w != fixed_n:
            raise ValueError(
                f"verifier {getattr(v, 'name', type(v).__name__)!r} is defined for n={fixed_n} "
                f"only, got width {w}"
            )
        spec.check(q2, w)
        path = None if method == "monte_carlo" else _exact_path(v, w)
        if method == "exact" and path is None:
            raise ValueError(
                f"verifier {getattr(v, 'name', type(v).__name__)!r} (design {spec.name!r}) has "
                f"no exact positional vector at width {w}; use method='auto' or 'monte_carlo'"
            )
        total = np.zeros(w)
        var = np.zeros(w)
        for s in range(steps):
            vec = _exact_step(v, path, p2[s], q2[s], w) if path else None  # type: ignore[arg-type]
            if vec is None:
                if method == "exact":
                    raise ValueError(
                        f"the exact acceptance of {v.name!r} is unavailable at step {s} "  # type: ignore[attr-defined]
                        f"(width {w}); use method='auto'"
                    )
                step_seed = np.random.SeedSequence(seed, spawn_key=(s, w))
                vec = _monte_carlo_step(v, p2[s], q2[s], w, trials, step_seed)
                var += vec * (1.0 - vec) / trials
                used["monte_carlo"] += 1
            else:
                used["exact"] += 1
            total += vec
        values[w] = total / steps
        variances[w] = var / steps**2
    if per_depth:
        out = np.zeros((len(widths), top))
        err = np.zeros((len(widths), top))
        for d, w in enumerate(widths):
            out[d, :w] = values[w]
            err[d, :w] = np.sqrt(variances[w])
    else:
        out, err = values[widths[0]], np.sqrt(variances[widths[0]])
    kind = (
        "mixed"
        if used["exact"] and used["monte_carlo"]
        else ("monte_carlo" if used["monte_carlo"] else "exact")
    )
    return PositionalAcceptance(
        values=out,
        stderr=err,
        method=kind,
        verifier=str(getattr(v, "name", type(v).__name__)),
        design=spec.name,
        width=tuple(widths) if per_depth else widths[0],
        steps=steps,
        trials=trials if used["monte_carlo"] else 0,
    )


# -- tables ------------------------------------------------------------------------------------

#: Columns of :func:`predict_tokens_per_call`'s table after the grouping columns.
PREDICT_COLUMNS = (
    "tree",
    "branching",
    "nodes",
    "depth",
    "steps",
    "tokens_per_call",
    "bound_tokens_per_call",
    "ratio",
)


def _kary_tokens(rates: Sequence[float]) -> float:
    """``1 + Σ_d Π_{i≤d} s_i`` for per-depth total acceptance ``s``."""
    total, reach = 1.0, 1.0
    for s in rates:
        reach *= s
        total += reach
    return total


def predict_tokens_per_call(table: pd.DataFrame, trees: object) -> pd.DataFrame:
    r"""Tokens per target call of k-ary draft trees for every verifier of a per-step table.

    A complete tree with ``b_d`` children under every node at depth ``d − 1`` needs only the
    acceptance ``α(b)`` of each verifier at ``n = b`` drafts: every node at a depth has the same
    subtree under each child, so however a verifier splits ``α(b)`` among the children,

    .. math::

        E = 1 + \sum_{d=1}^{D} \prod_{i=1}^{d} \bar α(b_i),\qquad
        E^* = 1 + \sum_{d=1}^{D} \prod_{i=1}^{d} \bar α^*(b_i) \;\ge\; E,

    with ``ᾱ(b)`` the mean of ``acceptance`` over the table's steps at ``n = b`` and ``ᾱ*(b)``
    the mean of ``alpha_star`` (the i.i.d. approximation: each depth sees an independent step).
    ``E*`` is :func:`bound_block_efficiency` with ``α*`` of the verifier's design.

    Parameters
    ----------
    table : pandas.DataFrame
        Columns ``n, design, verifier, acceptance, alpha_star`` (and ``step``), as from
        :func:`otbound.compare` or ``steps.parquet``; rows are grouped by ``temperature`` too
        when present. ``"bound"`` rows give ``E = E*``.
    trees : mapping of name to branching, or iterable of branching
        Per-depth branching factors (``[1, 1, 1, 1]`` a chain of 4, ``[2, 2, 2]`` a binary tree
        of depth 3; ``[k] * depth`` for a k-ary tree). Default names: ``"2x2x2"``.

    Returns
    -------
    pandas.DataFrame
        One row per (group, tree): the grouping columns, ``tree``, ``branching`` (a tuple),
        ``nodes``, ``depth``, ``steps`` (the fewest steps averaged at one width),
        ``tokens_per_call`` ``E``, ``bound_tokens_per_call`` ``E*`` and ``ratio = E / E*``.
        ``E`` and ``E*`` are NaN when the table lacks a width the tree needs for that group
        (``spechub`` has ``n = 2`` only).

    Examples
    --------
    >>> from otbound.evaluate import compare
    >>> df = compare([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=[1, 2], verifiers=["rrs"])
    >>> out = predict_tokens_per_call(df, {"chain": [1, 1], "binary": [2, 2]})
    >>> out[["verifier", "tree", "tokens_per_call", "bound_tokens_per_call"]].round(4)
      verifier    tree  tokens_per_call  bound_tokens_per_call
    0      rrs   chain           2.1900                 2.1900
    1      rrs  binary           2.4924                 2.6821
    2    bound   chain           2.1900                 2.1900
    3    bound  binary           2.6821                 2.6821
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    needed = ("n", "design", "verifier", "acceptance", "alpha_star")
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(
            f"table lacks the column(s) {', '.join(missing)}; expected the output of "
            "otbound.compare or a steps.parquet table"
        )
    if isinstance(trees, Mapping):
        items = list(trees.items())
    elif isinstance(trees, str | bytes) or not isinstance(trees, Iterable):
        raise ValueError(f"trees must be a mapping or a list of branching lists, got {trees!r}")
    else:
        items = [(None, t) for t in trees]
    specs: list[tuple[str, list[int]]] = []
    for name, t in items:
        if isinstance(t, numbers.Integral):
            raise ValueError(
                f"each tree is a list of per-depth branching factors (e.g. [2, 2, 2]), got {t!r}"
            )
        factors = _as_branching(t)
        specs.append((str(name) if name is not None else "x".join(map(str, factors)), factors))
    keys = [c for c in ("temperature", "design", "verifier") if c in table.columns]
    clean = table.dropna(subset=["acceptance"])
    grouped = clean.groupby([*keys, "n"], dropna=False, sort=False)
    means = grouped[["acceptance", "alpha_star"]].mean()
    counts = grouped.size()
    rows: list[dict] = []
    for group, _ in clean.groupby(keys, dropna=False, sort=False):
        group = group if isinstance(group, tuple) else (group,)
        for name, factors in specs:
            found = [(*group, b) in means.index for b in factors]
            if all(found):
                acc = [float(means.loc[(*group, b), "acceptance"]) for b in factors]
                star = [float(means.loc[(*group, b), "alpha_star"]) for b in factors]
                steps = min(int(counts.loc[(*group, b)]) for b in factors) if factors else 0
                tokens, bound = _kary_tokens(acc), _kary_tokens(star)
            else:
                steps, tokens, bound = 0, math.nan, math.nan
            rows.append(
                {
                    **dict(zip(keys, group, strict=True)),
                    "tree": name,
                    "branching": tuple(factors),
                    "nodes": int(sum(np.cumprod(factors))) if factors else 0,
                    "depth": len(factors),
                    "steps": steps,
                    "tokens_per_call": tokens,
                    "bound_tokens_per_call": bound,
                    "ratio": tokens / bound if bound > 0 else math.nan,
                }
            )
    return pd.DataFrame(rows, columns=[*keys, *PREDICT_COLUMNS])
