r"""Block-level bounds on the accepted tokens of any lossless verifier, by linear programming.

Two bounds for context-independent models (:mod:`otbound.sequence._models`), each a HiGHS LP
(through :func:`otbound.bounds.solve_lp`) over the enumerated drafts and blocks, so for
small vocabularies and trees only, each returned with its dual certificate.

**1. The coupling bound** (:func:`optimal_block_acceptance`, :func:`optimal_tree_acceptance`;
Sun et al. 2025, the "idealised" verifier of their motivating example). A verifier
that knows the joint block laws may draw the target's block ``Y_{1:D} ~ P`` jointly with the
drafted tree ``X ~ Q`` and emit ``Y`` (lossless, because ``Y ~ P``); it accepts the draft
tokens of the longest tree path that is a prefix of ``Y``:

.. math::

    B = \max_{π ∈ Π(Q, P)} \mathbb E_π\bigl[L(X, Y)\bigr],\qquad
    L(X, Y) = \max\{k : Y_{1:k} \text{ is the token path of a depth-}k\text{ node of } X\}.

Every lossless verifier that emits accepted drafts plus one target token is below ``B``
(complete its output with target draws: the result is such a ``Y``, and its accepted path is a
common prefix). Since ``L = Σ_{k≥1} 1[L ≥ k]``,

.. math::

    B ≤ \sum_{k=1}^{D} α^*_k,\qquad α^*_k = \max_{π} P\bigl(Y_{1:k} ∈ S_k(X)\bigr),

``S_k(X)`` the token paths of the depth-``k`` nodes: ``α*_k`` is otbound's multi-draft optimal
acceptance with the depth-``k`` paths as the drafts. On a chain ``α*_k = 1 − TV(P_{1:k}, Q_{1:k})``.

*Theorem (chains): the sum is attained,* ``B = Σ_{k=1}^{γ} (1 − TV(P_{1:k}, Q_{1:k}))``,
for any two laws of blocks (context-independent or not). Proof: write ``g(w) = min(P(w), Q(w))``
for every prefix ``w`` (``|w| ≤ γ``); ``g(w) ≥ Σ_c g(wc)``. A coupling attains every term iff
``A(w) := P(X_{1:k} = Y_{1:k} = w) = g(w)`` for every ``w``. Build it top-down. Inside the event
``{X_{1:k} = Y_{1:k} = w}`` (mass ``g(w)``) choose sub-laws ``α_w ≤ Q(w·)``, ``β_w ≤ P(w·)`` of
mass ``g(w)`` with ``α_w(u), β_w(u) ≥ g(u)`` for every extension ``u`` of ``w`` (possible
prefix by prefix, splitting ``β(u)`` into children with ``g(uc) ≤ β(uc) ≤ P(uc)``, because
``Σ_c g(uc) ≤ g(u) ≤ β(u) ≤ P(u)``; the same for ``α`` with ``Q``; when ``g(w) = Q(w)`` take
``α_w = Q(w·)``). Inside it, couple mass ``g(wc)`` on each ``wc`` (recursively) and pair the
rest, ``a_c = α_w(wc) − g(wc)`` with ``b_{c'} = β_w(wc') − g(wc')``, across different ``c ≠ c'``:
``Σ_c a_c = Σ_c b_c`` and ``a_c b_c = 0`` for each ``c`` (``a_c ≤ Q(wc) − g(wc)``,
``b_c ≤ P(wc) − g(wc)``, and one of them is 0), so a pairing with ``c ≠ c'`` exists. ∎
On Sun et al.'s example this gives ``6/9 + 6/9 = 12/9``. On trees the sum of the ``α*_k`` need
not be attained; :attr:`SequenceBound.per_depth` reports it next to the LP value.

**2. The verifier bound** (:func:`optimal_verification_acceptance`; Thomas and Pal, arXiv
2602.16961, their LP over verifiers with any information). The coupling bound lets the
verifier emit the whole target block; a speculative-decoding verifier emits the accepted
path and **one** target token, after which decoding continues with fresh target draws. Its
best expected accepted length is the LP over the joint law ``ν(X, v, z)`` of draft ``X``,
accepted node ``v`` (depth ``t``) and emitted token ``z``:

.. math::

    \max \sum ν(X, v, z)\, |v| \quad\text{s.t.}\quad
    \sum_{v, z} ν(X, v, z) = Q(X),\qquad
    \sum_{t=0}^{D} \sum_{X, v:\ |v| = t,\ \text{path}_X(v) = z_{1:t}} ν(X, v, z_{t+1})
    \prod_{d=t+2}^{D+1} p_d(z_d) = P(z_{1:D+1})

for every ``z`` (the losslessness of :mod:`otbound.sequence._protocol`). It is at most the
coupling bound and is attained by block verification on chains (Thomas and Pal;
tested): on Sun et al.'s example it is ``11/9``, strictly below the coupling bound's ``12/9``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from otbound.bounds import solve_lp
from otbound.sequence._choices import exact_law
from otbound.sequence._models import SequenceModel, prefix_overlaps, sequence_model
from otbound.sequence._protocol import draw_drafts

__all__ = [
    "SequenceBound",
    "optimal_block_acceptance",
    "optimal_tree_acceptance",
    "optimal_verification_acceptance",
]

Block = tuple[int, ...]


@dataclass(frozen=True)
class SequenceBound:
    """An LP bound on expected accepted draft tokens per iteration, with its certificate.

    Attributes
    ----------
    acceptance : float
        The LP optimum: the bound on the expected accepted draft tokens per iteration.
        (``value``, its old name, warns and still works.)
    per_depth : numpy.ndarray or None
        Coupling bound only: the per-depth bounds ``α*_k`` (``1 − TV(P_{1:k}, Q_{1:k})`` on a
        chain), whose sum bounds ``acceptance``.
    draft_dual : dict
        Dual value ``u_X`` of each draft's marginal row.
    target_dual : dict
        Dual value ``v_y`` of each target row (a block ``y ∈ V^D``, or ``z ∈ V^{D+1}`` for the
        verifier bound).
    message : str
        HiGHS's status line.
    """

    acceptance: float
    per_depth: np.ndarray | None
    draft_dual: dict[Block, float] = field(repr=False)
    target_dual: dict[Block, float] = field(repr=False)
    message: str = ""

    @property
    def value(self) -> float:
        """The old name of :attr:`acceptance` (deprecated: it goes in the next release)."""
        warnings.warn(
            "SequenceBound.value is deprecated: read SequenceBound.acceptance",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.acceptance

    @property
    def closed_form(self) -> float | None:
        """``Σ_k per_depth[k]`` (the coupling bound's closed form on chains)."""
        return None if self.per_depth is None else float(self.per_depth.sum())


def _draft_law(model: SequenceModel) -> dict[Block, float]:
    return exact_law(lambda chooser: draw_drafts(model, chooser))


def _solve(
    columns: list[list[tuple[int, float]]],
    gains: list[float],
    rhs: np.ndarray,
) -> tuple[float, np.ndarray, str]:
    """Maximise ``gains @ x`` s.t. ``A x = rhs``, ``x ≥ 0``; ``A`` given column by column."""
    rows, cols, vals = [], [], []
    for j, column in enumerate(columns):
        for i, value in column:
            rows.append(i)
            cols.append(j)
            vals.append(value)
    matrix = sp.csc_array((vals, (rows, cols)), shape=(rhs.size, len(columns)))
    solution = solve_lp(np.asarray(gains), matrix, rhs, rhs, maximize=True)
    return solution.objective, solution.row_dual, solution.message


def _coupling(
    drafts: dict[Block, float], targets: dict[Block, float], gain: Callable[[Block, Block], float]
) -> tuple[float, np.ndarray, str]:
    """``max_π Σ π(x, y) gain(x, y)`` over couplings of the two laws (transport LP)."""
    n = len(drafts)
    columns, gains = [], []
    for i, x in enumerate(drafts):
        for j, y in enumerate(targets):
            columns.append([(i, 1.0), (n + j, 1.0)])
            gains.append(gain(x, y))
    rhs = np.array([*drafts.values(), *targets.values()])
    return _solve(columns, gains, rhs)


def _paths(model: SequenceModel, drafts: Block) -> set[Block]:
    """The token paths of every node of a drafted tree."""
    return {model.path_tokens(drafts, node) for node in model.nodes}


def _common_length(model: SequenceModel) -> Callable[[Block, Block], float]:
    """``L(X, y)``: the depth of the longest node path of ``X`` that is a prefix of ``y``."""

    def gain(x: Block, y: Block) -> float:
        paths = _paths(model, x)
        return float(max((k for k in range(1, len(y) + 1) if y[:k] in paths), default=0))

    return gain


def _coupling_bound(model: SequenceModel) -> SequenceBound:
    drafts = _draft_law(model)
    targets = model.target_law(model.depth)
    value, duals, message = _coupling(drafts, targets, _common_length(model))
    if model.is_chain:
        per_depth = prefix_overlaps(model)
    else:
        per_depth = np.array(
            [
                _coupling(
                    drafts,
                    model.target_law(k),
                    lambda x, y: float(y in _paths(model, x)),
                )[0]
                for k in range(1, model.depth + 1)
            ]
        )
    return _bound(value, duals, message, drafts, targets, per_depth)


def _bound(
    value: float,
    duals: np.ndarray,
    message: str,
    drafts: dict[Block, float],
    targets: dict[Block, float],
    per_depth: np.ndarray | None,
) -> SequenceBound:
    """A :class:`SequenceBound` with the row duals split between drafts and targets."""
    n = len(drafts)
    return SequenceBound(
        acceptance=value,
        per_depth=per_depth,
        draft_dual=dict(zip(drafts, duals[:n].tolist(), strict=True)),
        target_dual=dict(zip(targets, duals[n:].tolist(), strict=True)),
        message=message,
    )


def optimal_block_acceptance(p: object, q: object, gamma: int) -> SequenceBound:
    r"""The coupling bound on a chain: ``max_π E[LCP(X_{1:γ}, Y_{1:γ})]``.

    Equal to ``Σ_{k=1}^{γ} (1 − TV(P_{1:k}, Q_{1:k}))`` (the theorem of the module docstring).

    The transport LP of the module docstring (``V^γ × V^γ`` variables) and the closed form
    (:attr:`SequenceBound.closed_form`, equal by the theorem there).

    Parameters
    ----------
    p, q : array_like, shape (V,) or (rows, V)
        Context-independent target and draft laws (:func:`~otbound.sequence.sequence_model`).
    gamma : int
        Number of drafted tokens.

    Returns
    -------
    SequenceBound

    Examples
    --------
    >>> b = optimal_block_acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2)  # Sun et al.'s example
    >>> round(b.acceptance * 9, 6), round(b.closed_form * 9, 6)
    (12.0, 12.0)
    """
    return _coupling_bound(sequence_model(p, q, gamma))


def optimal_tree_acceptance(
    p: object, q: object, tree: object, drafting: str = "without_replacement"
) -> SequenceBound:
    r"""The coupling bound on a draft tree: ``max_π E[L(X, Y)]`` (module docstring).

    :attr:`SequenceBound.per_depth` holds the per-depth bounds ``α*_k`` (each a membership
    transport LP with the depth-``k`` token paths as drafts), whose sum bounds the value.
    ``drafting="iid"`` draws every node independently (the independent paths of
    multi-path verification) instead of siblings without replacement.

    Examples
    --------
    >>> b = optimal_tree_acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], [[0], [1], [0, 0]])
    >>> round(b.acceptance, 6), [round(float(a), 6) for a in b.per_depth]
    (1.666667, [1.0, 0.666667])
    """
    return _coupling_bound(sequence_model(p, q, tree, drafting=drafting))


def optimal_verification_acceptance(
    p: object, q: object, tree: object, drafting: str = "without_replacement"
) -> SequenceBound:
    r"""The best expected accepted tokens of any lossless verifier emitting one target token.

    The LP of the module docstring (Thomas and Pal's, over drafts, accepted nodes and emitted
    tokens); ``V^{|tree|} · (|tree| + 1) · V`` variables.

    Parameters
    ----------
    p, q : array_like
        Context-independent target and draft laws.
    tree : int or path list
        ``γ`` for a chain, or a draft tree.
    drafting : {"without_replacement", "iid"}
        How the tree's siblings are drawn (``"iid"``: independent draft paths).

    Returns
    -------
    SequenceBound
        ``per_depth`` is ``None``; ``target_dual`` is keyed by ``z ∈ V^{D+1}``.

    Examples
    --------
    >>> b = optimal_verification_acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2)  # the example
    >>> round(b.acceptance * 9, 6)  # block verification's 11/9, below the coupling bound's 12/9
    11.0
    """
    model = sequence_model(p, q, tree, drafting=drafting)
    drafts = _draft_law(model)
    full = model.target_law(model.depth + 1)
    row_of = {z: len(drafts) + i for i, z in enumerate(full)}
    prefixes: dict[Block, list[Block]] = {}
    for z in full:
        for t in range(1, model.depth + 2):
            prefixes.setdefault(z[:t], []).append(z)
    columns, gains = [], []
    for i, x in enumerate(drafts):
        for node in ((), *model.nodes):
            path = model.path_tokens(x, node)
            for token in np.flatnonzero(model.p[len(node)] > 0):
                emitted = (*path, int(token))
                completions = prefixes.get(emitted)
                if completions is None:  # the target never emits this: no column
                    continue
                column = [(i, 1.0)]
                for z in completions:
                    tail = z[len(emitted) :]
                    weight = float(
                        np.prod([model.p[len(emitted) + d, t] for d, t in enumerate(tail)])
                    )
                    column.append((row_of[z], weight))
                columns.append(column)
                gains.append(float(len(node)))
    rhs = np.array([*drafts.values(), *full.values()])
    return _bound(*_solve(columns, gains, rhs), drafts, full, None)
