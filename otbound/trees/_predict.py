"""Tokens per target call of k-ary trees for every verifier of a per-step table."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from otbound.trees._shapes import as_branching

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


def _check_table(table: object) -> None:
    """A per-step table with the columns the prediction reads, or a ``ValueError``."""
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    needed = ("n", "design", "verifier", "acceptance", "alpha_star")
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(
            f"table lacks the column(s) {', '.join(missing)}; expected the output of "
            "otbound.compare or a steps.parquet table"
        )


def _tree_specs(trees: object) -> list[tuple[str, list[int]]]:
    """Each tree's name and per-depth branching factors (named ``2x2x2`` by default)."""
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
        factors = as_branching(t)
        specs.append((str(name) if name is not None else "x".join(map(str, factors)), factors))
    return specs


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
    _check_table(table)
    specs = _tree_specs(trees)
    keys = [c for c in ("temperature", "design", "verifier") if c in table.columns]
    clean = table.dropna(subset=["acceptance"])
    grouped = clean.groupby([*keys, "n"], dropna=False, sort=False)
    means = grouped[["acceptance", "alpha_star"]].mean()
    counts = grouped.size()
    rows: list[dict[str, object]] = []
    for group, _ in clean.groupby(keys, dropna=False, sort=False):
        group = group if isinstance(group, tuple) else (group,)
        for name, factors in specs:
            found = [(*group, b) in means.index for b in factors]
            if all(found):
                acc = [float(means.loc[(*group, b), "acceptance"]) for b in factors]
                star = [float(means.loc[(*group, b), "alpha_star"]) for b in factors]
                # group + (b,), not (*group, b): mypy reads a starred subscript as 3.11 syntax
                steps = min(int(counts.loc[group + (b,)]) for b in factors) if factors else 0  # noqa: RUF005
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
