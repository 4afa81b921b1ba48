r"""Inputs of one forward pass over prefix + draft tree: token ids, tree attention, positions.

A batch of prefixes (of different lengths) is left-padded to a common length ``L``; the ``n``
tree tokens follow, in the same columns for every row. With ``ℓ_b`` the length of row ``b``'s
prefix, column ``c`` may attend to column ``c'`` when

* both are in the prefix part: ``c' ≤ c`` and ``c'`` is a real token (``c' ≥ L − ℓ_b``);
  a pad column attends to itself only (no empty rows, hence no NaN);
* ``c`` is tree node ``i``: ``c'`` is a real prefix token, or node ``i`` itself or one of its
  ancestors.

Positions count from each row's first real token: prefix token ``t`` at ``t``, tree node ``i``
at ``ℓ_b + depth(i) − 1`` (siblings share a position, as in a plain pass over the path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from otbound.tree_decoding._layout import TreeLayout


@dataclass(frozen=True)
class TreeInputs:
    """A batch's forward-pass inputs (numpy; :mod:`._scoring` moves them to torch).

    Attributes
    ----------
    input_ids : numpy.ndarray of int64, shape (B, L + n)
    allowed : numpy.ndarray of bool, shape (B, L + n, L + n)
        ``allowed[b, c, c']``: column ``c`` attends to column ``c'``.
    position_ids : numpy.ndarray of int64, shape (B, L + n)
    nodes : int
        ``n``, the tree tokens at the end of each row.
    """

    input_ids: np.ndarray
    allowed: np.ndarray
    position_ids: np.ndarray
    nodes: int


def tree_inputs(
    prefixes: Sequence[Sequence[int]],
    tokens: np.ndarray,
    layout: TreeLayout,
    pad_id: int = 0,
) -> TreeInputs:
    """Token ids, tree attention and position ids for prefixes followed by tree nodes.

    Parameters
    ----------
    prefixes : sequence of sequences of int
        One non-empty prefix per row.
    tokens : numpy.ndarray of int, shape (B, n)
        The first ``n`` nodes of ``layout`` (canonical order), ``0 <= n <= layout.size``: a
        tree grown to some depth is a prefix of that order.
    layout : TreeLayout
    pad_id : int, default 0
        The id written in pad columns (never attended to).

    Returns
    -------
    TreeInputs

    Examples
    --------
    >>> layout = TreeLayout.from_paths([[0], [1], [0, 0]])
    >>> x = tree_inputs([[5, 6]], np.array([[7, 8, 9]]), layout)
    >>> x.position_ids.tolist(), x.allowed[0, -1].astype(int).tolist()
    ([[0, 1, 2, 2, 3]], [1, 1, 1, 0, 1])
    """
    tokens = np.asarray(tokens, dtype=np.int64).reshape(len(prefixes), -1)
    n = tokens.shape[1]
    if n > layout.size:
        raise ValueError(f"tokens has {n} nodes per row but the tree has {layout.size}")
    if any(len(p) == 0 for p in prefixes):
        raise ValueError("prefixes must be non-empty: the root's distribution needs a context")
    lengths = np.array([len(p) for p in prefixes], dtype=np.int64)
    width = int(lengths.max())
    total = width + n
    rows = len(prefixes)
    ids = np.full((rows, total), pad_id, dtype=np.int64)
    for b, prefix in enumerate(prefixes):
        ids[b, width - len(prefix) : width] = prefix
    ids[:, width:] = tokens
    first = width - lengths  # each row's first real column
    cols = np.arange(total)
    real = cols[None, :] >= first[:, None]  # (B, T): real tokens (prefix or tree)
    allowed = np.zeros((rows, total, total), dtype=bool)
    causal = np.tril(np.ones((width, width), dtype=bool))
    allowed[:, :width, :width] = causal[None] & real[:, None, :width]
    pads = ~real[:, :width]
    diag = np.arange(width)
    allowed[:, diag, diag] |= pads  # a pad column attends to itself
    allowed[:, width:, :width] = real[:, None, :width]
    allowed[:, width:, width:] = layout.ancestors()[:n, :n][None]
    positions = np.zeros((rows, total), dtype=np.int64)
    positions[:, :width] = np.clip(cols[None, :width] - first[:, None], 0, None)
    positions[:, width:] = lengths[:, None] + layout.depth[None, :n] - 1
    return TreeInputs(ids, allowed, positions, n)
