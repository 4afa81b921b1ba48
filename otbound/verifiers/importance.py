r"""Importance-sampling multi-draft verifier (Khisti et al. 2024, "Towards optimal multi-draft
speculative decoding").

Two steps. **Selection**: pick one draft ``W`` among ``x_1..x_n`` with selection weights that are
non-negative, sum to one and are zero off the drafts. This induces the distribution
``p_I(y) = Σ_x̄ β_y(x̄) Q(x̄)`` of ``W``. **Speculative step**: single-draft speculative
sampling of ``W`` against ``p`` with ``p_I`` as the draft: accept ``W`` with probability
``min(1, p_W / p_I(W))``, else sample ``res(p, p_I)``. Any weights give ``Y ~ p``; the
selected draft is accepted with probability

.. math::

    α_{sel} = \sum_y \min(p_y, p_I(y)),

and maximising over all weights recovers ``α*`` (an LP over the tuples).

The practical scheme implemented here: for two slots with independent draft distributions ``a``
(slot 1) and ``b`` (slot 2), rank tokens by ``p − a b`` (``p − q²`` for i.i.d. drafts), take the
top ``s`` tokens ``S`` (``s = 10`` by default), and

* for a pair inside ``S × S``, keep slot 1 with probability ``W[i, j]`` from the LP
  ``max Σ_{y∈S} min(p_y, p_I(y))`` over ``W ∈ [0, 1]^{s×s}`` (every other pair fixed). The
  LP is a transport of each pair's mass between its two tokens, solved exactly as a maximum
  flow (:mod:`otbound.verifiers._stage_flow`, its optimality certified by a cut; an
  uncertified flow raises). Its optimum is usually not unique; the one taken depends on the
  LP's inputs only: from ``W = 0`` (the challenger, slot 2, keeps the pair) the flow moves
  only what the tokens short of their ``p_y`` can take (the module's docstring says which
  flow);
* a top-``s`` token beats a tail token, and between two tail tokens the higher-ranked wins;
* equal tokens: the draft itself.

For ``n > 2`` pairs are folded in turn: the winner of ``(x_1, x_2)``, whose distribution is the
induced ``p_I^{(2)}``, is paired with ``x_3 ~ q_3`` (slot distributions ``a = p_I^{(2)}``,
``b = q_3``) with its own LP, and so on; ``p_I = p_I^{(n)}``. Drafts may come from different
models: the ``per_slot`` design (``q`` of shape ``(n, V)``) is supported.

On flat distributions this scheme gets *worse* with more drafts, by design rather than by a bug:
the LP only moves mass inside ``S``, while the fixed rules give ``S`` every pair it touches and
the higher-ranked token every tail pair, so each fold multiplies the tail's share of ``p_I`` by
``q(tail)``, which shrinks it geometrically in ``n`` and piles it onto the top of the ranking
("keep ``x_1``" is infeasible, so ``α_sel`` can even fall below single-draft ``β``: ``p = q``
uniform on 4 tokens with ``s = 2`` gives 0.75, not 1). On ``data/sample`` (V = 8192, T = 1)
``p(S) ≈ 0.44`` while ``p_I(S)`` grows from 0.44 to 0.77 between n = 2 and n = 8, the tail's
part of ``α_sel`` drops from 0.31 to 0.13, and ``α_sel`` goes 0.617, 0.599, 0.576, 0.514 for
n = 2, 3, 4, 8 (single draft 0.556).

``p_I`` is exact for any ``V`` (``O(nV log V)`` plus ``n − 1`` small LPs), so ``α_sel`` is
:meth:`ImportanceSampling.selection_acceptance`. The acceptance *event* of otbound is
``Y ∈ x̄``, which also counts the residual draw landing on a draft that was not selected:

.. math::

    α = α_{sel} + P(\text{selected draft rejected},\ Y ∈ \bar x) ≥ α_{sel}.

:meth:`ImportanceSampling.acceptance` returns this ``α``: in closed form for ``n = 2``
(``O(V log V)``), by enumerating the draft tuples for ``n ≥ 3`` when ``V^n ≤ 200,000``, and
``None`` otherwise. Khisti et al. report ``α_sel``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from otbound._checks import clip_rounding
from otbound._sorting import stable_argsort
from otbound.bounds import LP_SLACK as _LP_SLACK
from otbound.bounds import LPError
from otbound.problem import Step
from otbound.verifiers._step_cache import ByteBudgetCache, compact, step_key
from otbound.verifiers.base import BaseVerifier, residual, sample_tokens

__all__ = ["ImportanceSampling", "SelectionStage", "stage_weights"]

#: Largest ``V^n`` (draft tuples) enumerated for the exact acceptance at ``n ≥ 3``.
MAX_TUPLES = 200_000
#: ``s``, the tokens whose pairwise weights a stage's LP chooses, unless ``top`` says otherwise.
DEFAULT_TOP = 10


def stage_weights(lp: np.ndarray) -> np.ndarray:
    """The weights ``W`` (s, s) of a stage's top-``s`` LP (diagonal 1): the optimum
    :func:`~otbound.verifiers._stage_flow.stage_flow` finds as a maximum flow, its cut
    certificate checked.

    ``lp``: the rows ``aS``, ``bS``, ``pS`` and ``base`` of
    :func:`~otbound.verifiers._importance_kernels.stage_top`.

    Raises
    ------
    otbound.bounds.LPError
        Where the flow is not certified optimal to ``LP_SLACK`` (NaN input, or a search that
        did not end: never on valid input).
    """
    from otbound.verifiers._stage_flow import stage_flow

    keep: np.ndarray
    keep, value, gap = stage_flow(lp)
    if not (abs(gap) <= _LP_SLACK and math.isfinite(value)):
        raise LPError(
            f"importance stage LP: the maximum flow is not certified optimal (value {value!r}, "
            f"cut gap {gap!r}; the top tokens' p, a, b: {lp[2]!r}, {lp[0]!r}, {lp[1]!r})"
        )
    keep.setflags(write=False)
    return keep


#: Most bytes of stage rankings :func:`_chain_hints` keeps (uint16 for ``V ≤ 65,536``: the
#: 7-stage chains of about 290 steps at ``V = 8,192``).
CHAIN_HINT_BYTES = 32 << 20

_chain_orders = ByteBudgetCache(CHAIN_HINT_BYTES)


def _hint_key(p: np.ndarray, q: np.ndarray, top: int) -> tuple[object, ...]:
    """The key of :func:`_chain_hints`: :func:`~otbound.verifiers._step_cache.step_key` (a
    CRC-32 of the rows) and ``top``."""
    return (*step_key(p, q), top)


def _chain_hints(key: tuple[object, ...]) -> list[np.ndarray]:
    """The rankings of the stage chain of ``(p, q)`` (i.i.d. drafts, ``top``) computed so far,
    kept across calls (the least recently used chains go past :data:`CHAIN_HINT_BYTES`); the
    list to extend (:func:`_keep_hint`). ``key``: :func:`_hint_key` of ``(p, q, top)``,
    computed once by a step's :class:`_StageChain` rather than on every growth of its chain.

    Only sort hints: :func:`_ranking` returns the stable argsort whatever its hint, so an
    entry of another step (the cheap key's collision) could cost time, never change a stage.
    """
    orders: list[np.ndarray] | None = _chain_orders.get(key)
    if orders is None:
        orders = []
        _chain_orders.put(key, orders)
    return orders


def _keep_hint(orders: list[np.ndarray], order: np.ndarray) -> None:
    """Append ``order`` (compactly) to a list of :func:`_chain_hints`; evict the least
    recently used chains beyond :data:`CHAIN_HINT_BYTES`."""
    small = compact(order, order.size)
    orders.append(small)
    _chain_orders.grew(small.nbytes)


@dataclass(frozen=True)
class SelectionStage:
    """One pairwise selection: slot 1 (``a``) against slot 2 (``b``).

    Attributes
    ----------
    rank : numpy.ndarray of int, (V,)
        Position of each token in the ranking (``S`` first, then the tail by ``p − a b``).
    top : int
        ``s``, the number of LP tokens (the tokens with ``rank < s``).
    keep_top : numpy.ndarray, (s, s)
        ``W[rank i, rank j]``: probability of keeping slot 1's token ``i`` against ``j``.
    induced : numpy.ndarray, (V,)
        Distribution of the winner, ``p_I`` after this stage.
    """

    rank: np.ndarray
    top: int
    keep_top: np.ndarray
    induced: np.ndarray

    def keep(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """Probability that the winner stays ``first`` when challenged by ``second``."""
        ri, rj = self.rank[first], self.rank[second]
        out: np.ndarray = (ri < rj).astype(np.float64)
        both = (ri < self.top) & (rj < self.top)
        out[both] = self.keep_top[ri[both], rj[both]]
        out[first == second] = 1.0
        return out


#: Most element moves a token :func:`_ranking`'s insertion sort from a hint makes before it
#: sorts from scratch instead (a hint that is far from the order).
HINT_MOVES = 16


def _ranking(key: np.ndarray, hint: np.ndarray | None = None) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` (ties by token index), faster from a near order.

    With ``hint`` (a permutation that nearly sorts ``key``: the previous stage's ranking, or
    this very ranking from an earlier call) an insertion sort from the hint on ``(key, token
    id)`` (compiled, linear plus the hint's inversions: the previous stage's ranking is off by
    a few dozen descents on ``data/sample``); past :data:`HINT_MOVES` moves a token it sorts
    from scratch. The result is the plain stable argsort's, element for element, whatever the
    hint.
    """
    if hint is None:
        return stable_argsort(key)
    from otbound.verifiers._importance_kernels import sort_from_hint

    order, done = sort_from_hint(key, hint, HINT_MOVES * key.size)
    if not done:
        return stable_argsort(key)
    result: np.ndarray = order
    return result


def _solve_stage(
    p: np.ndarray, a: np.ndarray, b: np.ndarray, top: int, hint: np.ndarray | None = None
) -> SelectionStage:
    """Rank tokens, solve the top-``s`` LP and return the stage with its induced ``p_I``.

    ``hint``: a near order of the ranking (the previous stage's), which speeds the sort up
    without changing it (:func:`_ranking`).
    """
    return _stage_and_order(p, a, b, top, hint)[0]


def _stage_and_order(
    p: np.ndarray, a: np.ndarray, b: np.ndarray, top: int, hint: np.ndarray | None = None
) -> tuple[SelectionStage, np.ndarray]:
    """:func:`_solve_stage` and the stage's ranking (``rank``'s inverse permutation).

    Compiled passes around the LP (``stage_prepare``, or ``stage_key`` and ``stage_top``,
    before it and ``stage_finish`` after, in :mod:`otbound.verifiers._importance_kernels`) do
    the numpy passes of the stage in numpy's order of operations (its sequential suffix sums
    and the pairwise summation of ``np.sum``), so the stage is the numpy one's bit for bit.
    """
    from otbound.verifiers._importance_kernels import (
        stage_finish,
        stage_key,
        stage_prepare,
        stage_top,
    )

    vocab = p.size
    s = min(top, vocab)
    # The stable argsort of −(p − a b), then the rank rule for every pair: p_I(y) =
    # a_y (b_y + Σ_{later} b) + b_y Σ_{later} a; inside S:
    # p_I(y) = base_y + Σ_{i≠y} a_i b_y + Σ_{j≠y} a_y b_j W[y,j] − Σ_{i≠y} a_i b_y W[i,y].
    done = False
    if hint is not None:  # sorted from the hint and the LP's inputs in one call
        done, order, key, rank, induced_sorted, lp = stage_prepare(
            p, a, b, hint, HINT_MOVES * vocab, s
        )
    else:
        key = stage_key(p, a, b)
    if not done:
        order = stable_argsort(key)
        rank, induced_sorted, lp = stage_top(order, p, a, b, s)
    keep = stage_weights(lp) if s > 1 else np.ones((s, s))
    # p_I ≥ min(p, base) ≥ 0 row by row and Σ p_I = Σ_{i,j} a_i b_j = 1 exactly: off by
    # rounding only (clipped as clip_rounding does, which raises beyond LP_SLACK)
    induced, within, total = stage_finish(order, induced_sorted, lp, keep, _LP_SLACK)
    if not within:
        clip_rounding(
            induced_sorted, 0.0, 1.0, "importance induced distribution p_I", tol=_LP_SLACK
        )
        total = float(induced.sum())
        induced = induced / total
    if not abs(total - 1.0) <= _LP_SLACK:  # clip_rounding's test, which raises
        clip_rounding(
            total, 1.0, 1.0, "importance induced distribution's total Σ p_I", tol=_LP_SLACK
        )
    stage = SelectionStage(rank=rank, top=s, keep_top=keep, induced=induced)
    return stage, order


def _coincidence_two(
    stage: SelectionStage, a: np.ndarray, b: np.ndarray, accept: np.ndarray, rest: np.ndarray
) -> float:
    """``P(selected draft rejected, residual ∈ {x_1, x_2})`` for two slots, ``O(V log V)``.

    ``Σ_{i,j} a_i b_j [k(i,j) f_i r_j + (1 − k(i,j)) f_j r_i]`` with ``f = 1 − accept``: the rank
    rule outside ``S × S`` gives suffix sums, the LP block a correction (one compiled pass,
    :func:`~otbound.verifiers._importance_kernels.coincidence_two`).
    """
    from otbound.verifiers._importance_kernels import coincidence_two

    return float(coincidence_two(stage.rank, stage.keep_top, a, b, accept, rest))


@dataclass(frozen=True)
class _ConditionalPlan:
    """A step's stages, acceptance ``min(1, p / p_I)``, residual ``res(p, p_I)``, ``α_sel``
    and the draft CDFs, as :func:`~otbound.verifiers._importance_kernels.coincidence_values`
    and the inversion of :meth:`ImportanceSampling._conditional` take them."""

    ranks: np.ndarray
    tops: np.ndarray
    keep_tops: np.ndarray
    accept: np.ndarray
    rest: np.ndarray
    selected: float
    cdfs: list[tuple[np.ndarray, np.ndarray, int]]


def _draft_cdf(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`~otbound.drafts.inverse_cdf`'s table of a draft distribution ``d``: its CDF, the
    CDF's guide table and the last token of positive mass
    (:func:`~otbound.verifiers._importance_kernels.cdf_table`)."""
    from otbound.verifiers._importance_kernels import cdf_table

    cdf, guide, last = cdf_table(d)
    if last < 0:
        raise ValueError("a draft distribution has no positive mass")
    return cdf, guide, int(last)


class _StageChain:
    """What every ``n`` of one step with i.i.d. slots shares (:meth:`ImportanceSampling._chain`):
    the chain of stages (stage ``k`` of ``n`` is stage ``k`` of any larger ``n``), the key of
    its kept rankings, the draft CDF and the stages' rankings as rows.

    Attributes
    ----------
    stages : list of SelectionStage
        The stages solved so far (grown on demand, :meth:`ImportanceSampling._grow`).
    hint_key : tuple or None
        :func:`_hint_key` of the step, hashed on the chain's first growth only (a CRC-32 of
        the rows on every growth cost 0.1 ms a step of the main job, whose chain grows for
        ``n = 2``, 3, 4 and 8 in turn).
    """

    def __init__(self) -> None:
        self.stages: list[SelectionStage] = []
        self.hint_key: tuple[object, ...] | None = None
        self._cdf: tuple[np.ndarray, np.ndarray, int] | None = None
        self._ranks = np.zeros((0, 0), dtype=np.int64)
        self._filled = 0

    def cdf(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """:func:`_draft_cdf` of ``q``, built on the first call: the one draft distribution
        of every ``n`` (the plan of each ``n`` built it anew)."""
        if self._cdf is None:
            self._cdf = _draft_cdf(q)
        return self._cdf

    def ranks(self, count: int) -> np.ndarray:
        """The rankings of the first ``count`` stages as rows, int64 (count, V): a view of
        rows kept and extended as the chain grows (the ``np.stack`` of each ``n``'s plan
        copied every ranking again)."""
        if count > self._ranks.shape[0]:  # at least double: n = 3, 4, 8 reallocate twice
            rows = max(count, 2 * self._ranks.shape[0])
            grown = np.empty((rows, self.stages[0].rank.size), dtype=np.int64)
            if self._filled:
                grown[: self._filled] = self._ranks[: self._filled]
            self._ranks = grown
        for k in range(self._filled, count):
            self._ranks[k] = self.stages[k].rank
        self._filled = max(self._filled, count)
        view: np.ndarray = self._ranks[:count]
        return view


class ImportanceSampling(BaseVerifier):
    """Khisti et al.'s importance-sampling verifier (top-``s`` LP, pairwise folding).

    ``α_sel = Σ_y min(p_y, p_I(y))``; :meth:`acceptance` adds the residual landing on an
    unselected draft (see the module docstring).

    Parameters
    ----------
    design : {"iid", "per_slot"}, default "iid"
    top : int, default 10
        ``s``, the number of tokens whose pairwise selection weights the LP chooses.
    """

    name = "importance"
    default_design = "iid"
    designs = ("iid", "per_slot")

    def __init__(self, design: str | None = None, top: int = DEFAULT_TOP) -> None:
        super().__init__(design)
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ValueError(f"top must be an integer >= 1, got {top!r}")
        self.top = top

    def has_default_settings(self) -> bool:
        """Whether ``top`` is :data:`DEFAULT_TOP` (the one the torch formula takes)."""
        return self.top == DEFAULT_TOP

    # -- the scheme -------------------------------------------------------------------------
    @staticmethod
    def _slots(q: np.ndarray, n: int) -> list[np.ndarray]:
        return [q[k] for k in range(n)] if q.ndim == 2 else [q] * n

    def stages(self, p: np.ndarray, q: np.ndarray, n: int) -> list[SelectionStage]:
        """The ``n − 1`` pairwise selection stages (validated inputs).

        Stage ``k`` depends on ``p`` and the slots ``1..k+1`` only, so with one draft
        distribution (``q`` of shape ``(V,)``) the stages of every ``n`` are prefixes of one
        chain, cached per ``(p, q)`` and grown on demand: ``n = 2, 3, 4, 8`` on one step solve
        7 LPs, not 13. The chain's rankings are also kept across calls (:func:`_chain_hints`),
        so that rebuilding a chain (:func:`otbound.compare` asks for one ``n`` at a time over
        all the steps) sorts from its own order.
        """
        if q.ndim == 2:  # per_slot: q itself changes with n
            return self._memo("stages", p, q, n, lambda: self._grow(p, self._slots(q, n), []))
        return self._chain(p, q, n).stages[: n - 1]

    def _chain(self, p: np.ndarray, q: np.ndarray, n: int) -> _StageChain:
        """The step's :class:`_StageChain` (i.i.d. slots), cached per ``(p, q)`` and grown to
        at least ``n − 1`` stages, their sorts hinted by the kept rankings
        (:func:`_chain_hints`, keyed once a chain)."""
        chain: _StageChain = self._memo("stage_chain", p, q, 0, _StageChain)
        if len(chain.stages) < n - 1:
            if chain.hint_key is None:
                chain.hint_key = _hint_key(p, q, self.top)
            orders = _chain_hints(chain.hint_key)
            self._grow(p, self._slots(q, n), chain.stages, orders)
        return chain

    def _grow(
        self,
        p: np.ndarray,
        slots: list[np.ndarray],
        chain: list[SelectionStage],
        orders: list[np.ndarray] | None = None,
    ) -> list[SelectionStage]:
        """Append stages to ``chain`` (in place) until it folds every slot; return it.

        ``orders``: the rankings of this chain's stages from an earlier call (the hints of
        their sorts, which do not change them), extended in place with the new ones.
        """
        previous: np.ndarray | None = None  # the last stage's ranking, once known
        while len(chain) < len(slots) - 1:
            k = len(chain)
            current = chain[-1].induced if chain else slots[0]
            hint = None
            if orders is not None and k < len(orders):  # this very ranking, sorted before
                hint = orders[k]
            elif previous is not None:  # the previous ranking nearly sorts this one
                hint = previous
            elif chain:  # (p_I moves little)
                hint = np.empty_like(chain[-1].rank)
                hint[chain[-1].rank] = np.arange(hint.size)
            stage, previous = _stage_and_order(p, current, slots[k + 1], self.top, hint)
            chain.append(stage)
            if orders is not None and k == len(orders):
                _keep_hint(orders, previous)
        return chain

    def _induced(self, q: np.ndarray, n: int, stages: list[SelectionStage]) -> np.ndarray:
        return stages[-1].induced if stages else self._slots(q, n)[0]

    def selection_probabilities(
        self, drafts: np.ndarray, stages: list[SelectionStage]
    ) -> np.ndarray:
        """``P(slot j is selected | drafts)`` for tuples (m, n): shape (m, n)."""
        m, n = drafts.shape
        probs = np.zeros((m, n))
        probs[:, 0] = 1.0
        for k, stage in enumerate(stages, start=1):
            for j in range(k):
                keep = stage.keep(drafts[:, j], drafts[:, k])
                probs[:, k] += probs[:, j] * (1.0 - keep)
                probs[:, j] *= keep
        return probs

    def selection_acceptance(self, p: object, q: object, n: int = 2) -> float:
        """Khisti et al.'s ``α_sel = Σ_y min(p_y, p_I(y))``, for any ``V``.

        At most :meth:`acceptance`, which also counts the residual landing on a draft.
        """
        p_arr, q_arr, n = self._validate(p, q, n)
        induced = self._induced(q_arr, n, self.stages(p_arr, q_arr, n))
        return float(np.minimum(p_arr, induced).sum())

    # -- the protocol -------------------------------------------------------------------------
    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        if not self._enumerable(q, n):
            return None
        return self._exact(p, q, n, self.stages(p, q, n))

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """Every ``n`` of a step with i.i.d. slots from one chain of stages (stage ``k`` of
        ``n`` is stage ``k`` of any larger ``n``): the step's cached chain
        (:meth:`_chain`), which the estimates of its other ``n`` then extend rather than
        solve its first stages again; each value is the one :meth:`_acceptance` gives."""
        p, q = step.p, step.q
        usable = [n for n in ns if self._enumerable(q, n)]
        if q.ndim == 2 or not usable:
            return super()._acceptances(step, ns)
        chain = self._chain(p, q, max(usable)).stages
        return {n: self._exact(p, q, n, chain[: n - 1]) if n in usable else None for n in ns}

    def _enumerable(self, q: np.ndarray, n: int) -> bool:
        """Whether the exact value is computed: ``n ≤ 2``, or at most ``MAX_TUPLES`` tuples."""
        if n < 3:
            return True
        if q.ndim == 1:  # i.i.d. slots: one count, multiplied as the loop below would
            count = float(np.count_nonzero(q > 0))
            tuples_count = math.prod(count for _ in range(n))
        else:
            tuples_count = math.prod(float(np.count_nonzero(s > 0)) for s in self._slots(q, n))
        return tuples_count <= MAX_TUPLES

    def _exact(self, p: np.ndarray, q: np.ndarray, n: int, stages: list[SelectionStage]) -> float:
        """The exact acceptance from the ``n − 1`` stages of ``(p, q)``."""
        from otbound.verifiers._importance_kernels import accept_rest

        induced = self._induced(q, n, stages)
        # min(1, p / p_I) (0 off p_I's support), res(p, p_I) and Σ min(p, p_I) in one pass
        accept, rest, selected = accept_rest(p, induced)
        selected = float(selected)
        if n == 1:
            return selected
        if n == 2:
            slots = self._slots(q, n)
            return selected + _coincidence_two(stages[0], slots[0], slots[1], accept, rest)
        tuples, probs = self._spec.tuple_support(q, n)
        chosen = self.selection_probabilities(tuples, stages)
        fail = np.sum(chosen * (1.0 - accept[tuples]), axis=1)
        # residual mass on the distinct drafts of each tuple
        sorted_t = np.sort(tuples, axis=1)
        first = np.ones_like(sorted_t, dtype=bool)
        first[:, 1:] = sorted_t[:, 1:] != sorted_t[:, :-1]
        on_drafts = np.sum(rest[sorted_t] * first, axis=1)
        return selected + float(np.sum(probs * fail * on_drafts))

    def _conditional(
        self, p: np.ndarray, q: np.ndarray, n: int, trials: int, rng: np.random.Generator
    ) -> np.ndarray:
        r"""``α_sel + Σ_j π_j(x̄) (1 − acc(x_j)) r(\{x̄\})`` on ``trials`` sampled tuples.

        ``α_sel`` is exact for any ``V``; given the drafts, the selection probabilities
        ``π_j`` (:meth:`selection_probabilities`), the acceptance ``acc = min(1, p / p_I)`` and
        the residual ``r = res(p, p_I)`` give the probability that the selected draft is
        rejected and the residual lands on a draft exactly, so only that (small) coincidence
        term is estimated: unbiased, its variance that of the coincidence term alone.

        The drafts are :func:`~otbound.drafts.inverse_cdf` of the same uniforms (one
        ``rng.random(trials)`` a slot) through a guide table, and the values one compiled pass
        (:mod:`otbound.verifiers._importance_kernels`); what depends on the step only is built
        once for the pilot and the final sample of :meth:`estimate` (:meth:`_conditional_plan`).
        """
        from otbound.verifiers._importance_kernels import coincidence_values, sample_cdf

        plan = self._memo("conditional", p, q, n, lambda: self._conditional_plan(p, q, n))
        # slot k's uniforms are row k: the stream of one rng.random(trials) a slot
        u = rng.random((n, trials))
        drafts = np.empty((trials, n), dtype=np.int64)
        if q.ndim == 1:  # i.i.d. slots: one CDF serves them all
            cdf, guide, last = plan.cdfs[0]
            sample_cdf(cdf, guide, last, u, drafts, 0)
        else:
            for k, (cdf, guide, last) in enumerate(plan.cdfs):
                sample_cdf(cdf, guide, last, u[k : k + 1], drafts, k)
        out: np.ndarray = coincidence_values(
            drafts, plan.ranks, plan.tops, plan.keep_tops, plan.accept, plan.rest, plan.selected
        )
        return out

    def _conditional_range(self, p: np.ndarray, q: np.ndarray, n: int) -> tuple[float, float]:
        r"""``[α_sel, α_sel + min(1, R)]``, ``R`` the sum of the ``n − 1`` largest residual
        masses ``r``: in each value ``α_sel + Σ_j π_j (1 − acc(x_j)) r(\{x̄\})`` the weights
        ``π_j`` sum to 1, and a draft with ``acc < 1`` has ``p < p_I``, so ``r = 0``: where the
        sum is positive, ``r(\{x̄\})`` counts at most ``n − 1`` drafts."""
        plan = self._memo("conditional", p, q, n, lambda: self._conditional_plan(p, q, n))
        vocab = plan.rest.shape[0]
        first = vocab - min(n - 1, vocab)
        largest = float(np.partition(plan.rest, min(first, vocab - 1))[first:].sum())
        return plan.selected, plan.selected + min(1.0, largest)

    def _conditional_plan(self, p: np.ndarray, q: np.ndarray, n: int) -> _ConditionalPlan:
        """What :meth:`_conditional` needs of a step beyond its uniforms (built once for the
        pilot and the final sample of :meth:`estimate`). With i.i.d. slots the draft CDF and
        the rankings' rows come from the step's :class:`_StageChain`, shared by every ``n``."""
        from otbound.verifiers._importance_kernels import accept_rest

        if q.ndim == 2:
            stages = self.stages(p, q, n)
            cdfs = [_draft_cdf(d) for d in self._slots(q, n)]  # sample_tokens's inversion
            ranks = np.stack([stage.rank for stage in stages]) if stages else np.zeros((0, p.size))
        else:
            chain = self._chain(p, q, n)
            stages = chain.stages[: n - 1]
            cdfs = [chain.cdf(q)]
            ranks = chain.ranks(n - 1) if stages else np.zeros((0, p.size))
        induced = self._induced(q, n, stages)
        accept, rest, selected = accept_rest(p, induced)  # min(1, p / p_I), res(p, p_I), α_sel
        size = max((stage.top for stage in stages), default=1)
        keep_tops = np.zeros((len(stages), size, size))
        for k, stage in enumerate(stages):
            keep_tops[k, : stage.top, : stage.top] = stage.keep_top
        return _ConditionalPlan(
            ranks=ranks.astype(np.int64, copy=False),
            tops=np.array([stage.top for stage in stages], dtype=np.int64),
            keep_tops=keep_tops,
            accept=accept,
            rest=rest,
            selected=float(selected),
            cdfs=cdfs,
        )

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        n = len(drafts)
        stages = self.stages(p, q, n)
        # Step 1: fold the drafts pairwise; the winner is the selected draft W.
        winner = int(drafts[0])
        for k, stage in enumerate(stages, start=1):
            challenger = int(drafts[k])
            keep = stage.keep(np.array([winner]), np.array([challenger]))[0]
            if rng.random() >= keep:
                winner = challenger
        # Step 2: speculative sampling of W against p, with p_I as the draft distribution.
        induced = self._induced(q, n, stages)
        if rng.random() < min(1.0, p[winner] / induced[winner]):
            return winner
        return int(sample_tokens(residual(p, induced), rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials, n = drafts.shape
        stages = self.stages(p, q, n)
        winner = drafts[:, 0].copy()
        for k, stage in enumerate(stages, start=1):
            challenger = drafts[:, k]
            switch = rng.random(trials) >= stage.keep(winner, challenger)
            winner[switch] = challenger[switch]
        induced = self._induced(q, n, stages)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(induced > 0, np.minimum(1.0, p / induced), 0.0)
        tokens = sample_tokens(residual(p, induced), rng.random(trials))
        accept = rng.random(trials) < ratio[winner]
        tokens[accept] = winner[accept]
        return tokens
