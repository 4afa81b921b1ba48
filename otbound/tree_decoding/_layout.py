"""A draft tree as arrays: parents, depths and children of an EAGLE-style path list."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otbound.trees import canonical_tree


@dataclass(frozen=True)
class TreeLayout:
    """The shape of a draft tree, nodes in the order of :func:`otbound.trees.canonical_tree`.

    Nodes are numbered ``0 .. N − 1`` by depth, then path; *rows* number the root ``0`` and node
    ``i`` as ``i + 1`` (the rows of the per-node distributions: row 0 is the distribution after
    the prefix, row ``i + 1`` the distribution after the path to node ``i``).

    Attributes
    ----------
    paths : tuple of tuple of int
        The canonical path list.
    parent_row : numpy.ndarray of int64, shape (N,)
        Row of each node's parent (0 for the root's children).
    depth : numpy.ndarray of int64, shape (N,)
        ``len(path)``: 1 for the root's children.
    children : tuple of tuple of int
        ``children[row]``: the nodes under that row, in draft order (child index 0 first).

    Examples
    --------
    >>> layout = TreeLayout.from_paths([[0], [1], [0, 0]])
    >>> layout.parent_row.tolist(), layout.children
    ([0, 0, 1], ((0, 1), (2,), (), ()))
    >>> layout.branching
    (2, 1)
    """

    paths: tuple[tuple[int, ...], ...]
    parent_row: np.ndarray
    depth: np.ndarray
    children: tuple[tuple[int, ...], ...]

    @classmethod
    def from_paths(cls, tree: object) -> TreeLayout:
        """Validate a path list (``ValueError`` naming the bad path) and lay it out."""
        paths = tuple(tuple(p) for p in canonical_tree(tree))
        index = {path: i for i, path in enumerate(paths)}
        parent_row = np.array([index[p[:-1]] + 1 if len(p) > 1 else 0 for p in paths], np.int64)
        kids: list[list[int]] = [[] for _ in range(len(paths) + 1)]
        for i, row in enumerate(parent_row):  # canonical order lists siblings by child index
            kids[int(row)].append(i)
        depth = np.array([len(p) for p in paths], dtype=np.int64)
        return cls(paths, parent_row, depth, tuple(tuple(k) for k in kids))

    @property
    def size(self) -> int:
        """Number of nodes ``N`` (drafted tokens per target call)."""
        return len(self.paths)

    @property
    def max_depth(self) -> int:
        """Length of the longest path (0 for the empty tree)."""
        return int(self.depth.max()) if self.size else 0

    @property
    def branching(self) -> tuple[int, ...]:
        """The most children of a node at each depth ``0 .. max_depth − 1``."""
        widths = [0] * self.max_depth
        for row, kids in enumerate(self.children):
            if kids:
                d = 0 if row == 0 else int(self.depth[row - 1])
                widths[d] = max(widths[d], len(kids))
        return tuple(widths)

    def widths_at_depth(self, d: int) -> tuple[int, ...]:
        """The distinct numbers of children of the internal nodes at depth ``d`` (root: 0)."""
        rows = [0] if d == 0 else [i + 1 for i in np.flatnonzero(self.depth == d)]
        return tuple(sorted({len(self.children[r]) for r in rows if self.children[r]}))

    def known(self, depth: int) -> int:
        """Number of nodes at depth ``<= depth`` (a prefix of the canonical order)."""
        return int(np.count_nonzero(self.depth <= depth))

    def ancestors(self) -> np.ndarray:
        """``mask[i, j]``: node ``j`` is node ``i`` or one of its ancestors; bool (N, N)."""
        n = self.size
        mask = np.eye(n, dtype=bool)
        for i in range(n):  # parents come first, so their rows are complete
            parent = int(self.parent_row[i]) - 1
            if parent >= 0:
                mask[i] |= mask[parent]
        return mask
