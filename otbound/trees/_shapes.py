"""Draft trees as EAGLE-style path lists: validation, canonical order, chains and k-ary trees."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np

Tree = list[list[int]]


def path_text(path: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in path) + "]"


def node_text(path: Sequence[int]) -> str:
    return path_text(path) if path else "root"


def clean_tree(tree: object, name: str = "tree") -> list[tuple[int, ...]]:
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
                f"{name} has the node {path_text(key)} twice ({name}[{nodes[key]}] and "
                f"{name}[{index}])"
            )
        nodes[key] = index
    for key in nodes:
        if len(key) > 1 and key[:-1] not in nodes:
            raise ValueError(
                f"{name} has the node {path_text(key)} but not its parent "
                f"{path_text(key[:-1])}: every prefix of a path must be a node"
            )
        if key[-1] > 0 and (*key[:-1], key[-1] - 1) not in nodes:
            raise ValueError(
                f"{name} has the node {path_text(key)} but not its sibling "
                f"{path_text((*key[:-1], key[-1] - 1))}: children must be numbered "
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
    return [list(k) for k in clean_tree(tree)]


def chain(depth: int) -> Tree:
    """A chain of ``depth`` drafts (one child per node): ``[[0], [0, 0], …]``.

    Its block efficiency with ``a = [α]`` is ``Σ_{d=0}^{γ} α^d = (1 − α^{γ+1}) / (1 − α)``.

    Examples
    --------
    >>> chain(3)
    [[0], [0, 0], [0, 0, 0]]
    """
    depth = as_count(depth, "depth")
    return [[0] * d for d in range(1, depth + 1)]


def as_count(value: object, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def as_branching(branching: object, depth: object = None) -> list[int]:
    """Per-depth branching factors from an int and a depth, or a sequence of ints."""
    if isinstance(branching, numbers.Integral) and not isinstance(branching, bool):
        if depth is None:
            raise ValueError(
                "kary_tree(k) needs a depth: kary_tree(k, depth=d), or per-depth branching "
                "factors such as [2, 2, 2]"
            )
        return [as_count(branching, "branching", 1)] * as_count(depth, "depth")
    if depth is not None:
        raise ValueError("depth is given by the length of a per-depth branching list; omit depth")
    if isinstance(branching, str | bytes) or not isinstance(branching, Iterable):
        raise ValueError(f"branching must be an integer >= 1 or a list of them, got {branching!r}")
    return [as_count(b, "each branching factor", 1) for b in branching]


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
    factors = as_branching(branching, depth)
    level: list[list[int]] = [[]]
    out: Tree = []
    for b in factors:
        level = [[*path, i] for path in level for i in range(b)]
        out.extend(level)
    return out
