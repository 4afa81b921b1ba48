r"""The sequence-verifier protocol: one iteration of draft-then-verify on a draft tree.

One *iteration* drafts a tree of tokens from ``q`` (:mod:`otbound.sequence._models`), calls
the target once, and *emits* ``τ + 1`` tokens: the ``τ`` draft tokens on the path from the
root to an accepted node, then one token from the target side (the *correction* after a
rejection, the *bonus* after a fully accepted leaf). ``τ`` is the number of **accepted draft
tokens**; the iteration yields ``τ + 1`` tokens per target call.

**What lossless means here.** Decoding goes on after the iteration with fresh target draws
(the next iteration starts from the emitted tokens). With a context-independent target the
next iteration's law does not depend on what was emitted, so decoding is exact iff one
iteration is: the law of the emitted tokens ``Z_{1:τ+1}``, completed to ``D + 1`` tokens by
``Z_d ~ p_d`` for ``d > τ + 1``, must be the target's block law

.. math::

    \sum_{t=0}^{D} ν_t(z_{1:t+1}) \prod_{d=t+2}^{D+1} p_d(z_d) = \prod_{d=1}^{D+1} p_d(z_d)
    \quad\text{for every } z ∈ V^{D+1},

where ``ν_t(w) = P(τ = t, Z_{1:t+1} = w)`` (``D`` the tree's depth, ``γ`` for a chain). This
is what :func:`otbound.sequence.sequence_law` computes exactly (by enumeration of every draft
and every random choice of the verifier) and what :meth:`SequenceVerifier.simulate` samples.

Each verifier is written once, as a function of a chooser of random choices
(:mod:`otbound.sequence._choices`): the same code gives one trial
(:meth:`~SequenceVerifier.verify`), a seeded simulation and the exact law.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from otbound.sequence._choices import Chooser, RandomChooser, exact_law
from otbound.sequence._models import SequenceModel, rows_model, sequence_model
from otbound.verifiers.base import as_seed_rng, as_trials

__all__ = ["SequenceSimulation", "SequenceVerifier", "draw_drafts", "positive_part"]

Drafts = tuple[int, ...]
Emitted = tuple[int, ...]


def draw_drafts(model: SequenceModel, chooser: Chooser) -> Drafts:
    """Draw the tree's tokens from their parents' draft laws, in canonical node order.

    Siblings one after the other without replacement (``model.drafting ==
    "without_replacement"``), or each independently (``"iid"``: independent draft paths).
    """
    tokens: list[int] = []
    taken: dict[tuple[int, ...], list[int]] = {}
    for node in model.nodes:
        weights = model.draft_row(node[:-1]).copy()
        used = taken.setdefault(node[:-1], [])
        if model.drafting == "without_replacement":
            weights[used] = 0.0
        token = chooser.categorical(weights)
        used.append(token)
        tokens.append(token)
    return tuple(tokens)


def positive_part(weight: float, target: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """``(w · target − draft)⁺``, the unnormalised residual of block and traversal verification."""
    excess: np.ndarray = np.maximum(weight * target - draft, 0.0)
    return excess


@dataclass(frozen=True)
class SequenceSimulation:
    """Seeded Monte Carlo of one verifier on one model.

    Attributes
    ----------
    accepted : numpy.ndarray of int64, shape (trials,)
        Accepted draft tokens ``τ`` per iteration.
    sequences : numpy.ndarray of int64, shape (trials, depth + 1)
        The emitted tokens completed by fresh target draws: each row is distributed as the
        target's block law iff the verifier is lossless.
    verifier : str
    seed : object
    """

    accepted: np.ndarray
    sequences: np.ndarray = field(repr=False)
    verifier: str = ""
    seed: object = None

    @property
    def mean_accepted(self) -> float:
        """Monte Carlo estimate of the expected accepted draft tokens per iteration."""
        return float(np.mean(self.accepted))

    @property
    def stderr(self) -> float:
        """Standard error of :attr:`mean_accepted`."""
        return float(np.std(self.accepted) / math.sqrt(self.accepted.size))


class SequenceVerifier(ABC):
    """Base class of the sequence verifiers (see the module docstring for the protocol).

    Subclasses set :attr:`name` (and :attr:`chains_only`) and implement :meth:`_verify`: the
    emitted tokens for one drafted tree, drawing their random choices from a chooser.
    """

    name: ClassVar[str]
    chains_only: ClassVar[bool] = False
    #: How the drafts it verifies are drawn (:class:`~otbound.sequence.SequenceModel`).
    drafting: ClassVar[str] = "without_replacement"

    def __repr__(self) -> str:
        return f"<sequence verifier {self.name!r}>"

    def model(self, p: object, q: object, tree: object) -> SequenceModel:
        """Validate ``p``, ``q`` and the tree (:func:`~otbound.sequence.sequence_model`)."""
        model = sequence_model(p, q, tree, drafting=self.drafting)
        self.check_tree(model)
        return model

    def tree_problem(self, model: SequenceModel) -> str | None:
        """Why this verifier cannot verify the model's tree shape, or None."""
        if self.chains_only and not model.is_chain:
            return f"verifier {self.name!r} verifies chains only; got a branching tree"
        return None

    def check_tree(self, model: SequenceModel) -> None:
        """Raise ``ValueError`` with :meth:`tree_problem`'s reason."""
        problem = self.tree_problem(model)
        if problem is not None:
            raise ValueError(problem)

    @abstractmethod
    def _verify(self, drafts: Drafts, model: SequenceModel, chooser: Chooser) -> Emitted:
        """The emitted tokens (accepted path, then one target-side token)."""

    def _iteration(self, model: SequenceModel, chooser: Chooser) -> tuple[Drafts, Emitted]:
        drafts = draw_drafts(model, chooser)
        return drafts, self._verify(drafts, model, chooser)

    # -- the protocol ---------------------------------------------------------------------
    def iteration_law(
        self, p: object, q: object, tree: object
    ) -> dict[tuple[Drafts, Emitted], float]:
        """Exact joint law of (drafted tokens, emitted tokens) of one iteration.

        Enumerates every draft and every random choice of the verifier (small ``V`` and
        trees only). ``len(emitted) − 1`` is the number of accepted draft tokens.
        """
        model = self.model(p, q, tree)
        return exact_law(lambda chooser: self._iteration(model, chooser))

    def output_law(
        self, drafts: object, p: object, q: object, tree: object
    ) -> dict[Emitted, float]:
        """Exact law of the emitted tokens for one given draft (in canonical node order)."""
        model = self.model(p, q, tree)
        tokens = self._check_drafts(drafts, model)
        return exact_law(lambda chooser: self._verify(tokens, model, chooser))

    def acceptance(self, p: object, q: object, tree: object) -> float:
        """Exact expected accepted draft tokens per iteration, ``E[τ]`` (bonus excluded).

        Parameters
        ----------
        p, q : array_like
            Context-independent target and draft laws (:func:`~otbound.sequence.sequence_model`).
        tree : int or path list
            ``γ`` for a chain, or a draft tree.

        Returns
        -------
        float
        """
        law = self.iteration_law(p, q, tree)
        return math.fsum(prob * (len(out) - 1) for (_, out), prob in law.items())

    def verify(
        self, drafts: object, p: object, q: object, tree: object, rng: object = None
    ) -> Emitted:
        """One trial: the emitted tokens for these drafts (canonical node order).

        Returns
        -------
        tuple of int
            The accepted path's tokens, then the correction or bonus token.
        """
        model = self.model(p, q, tree)
        tokens = self._check_drafts(drafts, model)
        return self._verify(tokens, model, RandomChooser(as_seed_rng(rng)))

    def verify_rows(
        self,
        drafts: object,
        target_rows: object,
        draft_rows: object,
        tree: object,
        rng: object = None,
    ) -> Emitted:
        """One trial on a drafted tree of a context-dependent model, from its per-node rows.

        The verifiers read only the target's law after each node and the draft's law of each
        internal node's children (:func:`~otbound.sequence.rows_model`), so the same code
        verifies a real model's tree (:mod:`otbound.tree_decoding`): row ``0`` is the root's,
        row ``i + 1`` node ``i``'s (canonical order). The drafts must have been drawn with
        :attr:`drafting` from ``draft_rows`` for the output to follow the target.

        Returns
        -------
        tuple of int
            The accepted path's tokens, then the correction or bonus token.
        """
        model = rows_model(tree, target_rows, draft_rows, drafting=self.drafting)
        self.check_tree(model)
        tokens = self._check_drafts(drafts, model)
        return self._verify(tokens, model, RandomChooser(as_seed_rng(rng)))

    def simulate(
        self, p: object, q: object, tree: object, trials: int = 100_000, seed: object = 0
    ) -> SequenceSimulation:
        """Seeded Monte Carlo of ``trials`` iterations (draft, verify, complete with ``p``).

        Returns
        -------
        SequenceSimulation
        """
        model = self.model(p, q, tree)
        trials = as_trials(trials)
        chooser = RandomChooser(as_seed_rng(seed))
        accepted = np.empty(trials, dtype=np.int64)
        sequences = np.empty((trials, model.depth + 1), dtype=np.int64)
        for t in range(trials):
            _, out = self._iteration(model, chooser)
            accepted[t] = len(out) - 1
            sequences[t, : len(out)] = out
            for d in range(len(out), model.depth + 1):
                sequences[t, d] = chooser.categorical(model.p[d])  # context-independent here
        return SequenceSimulation(accepted, sequences, verifier=self.name, seed=seed)

    @staticmethod
    def _check_drafts(drafts: object, model: SequenceModel) -> Drafts:
        arr = np.asarray(drafts)
        if arr.shape != (len(model.nodes),) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"drafts must be {len(model.nodes)} integer tokens (one per tree node, in "
                f"canonical order), got {arr.tolist()!r}"
            )
        for node, token in zip(model.nodes, arr.tolist(), strict=True):
            if not 0 <= token < model.vocab or model.draft_row(node[:-1])[token] <= 0:
                raise ValueError(f"draft token {token} at node {list(node)} has q = 0")
        return tuple(int(t) for t in arr)
