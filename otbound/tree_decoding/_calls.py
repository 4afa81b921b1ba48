"""The decoding loop static trees and dynamic systems share: prompts decoded side by side in
batches, one target call at a time for every active prompt, until each has its tokens.

A call draws its drafts and its verifications from the streams of each row's (prompt, call)
(:func:`._streams.row_generators`), grows and scores the trees, walks each row's tree, records
the call, appends the accepted tokens, and tells both models' scorers what was committed and
which rows go on. What grows, scores, walks and records is the subclass's
(:class:`otbound.tree_decoding._run` for static trees, :mod:`._dynamic` for systems).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otbound.tree_decoding._layout import TreeLayout
from otbound.tree_decoding._scorer import make_scorer
from otbound.tree_decoding._streams import RandomSource, row_generators
from otbound.tree_decoding._walk import WalkResult

__all__ = ["DecodeRow", "RowsCall", "advance", "batch_rows", "call_record"]

#: ``predictor(p, q)``: the prediction's inputs from the contexts (B, V) where the verifier
#: first decides, one dict per row.
Predictor = Callable[[np.ndarray, np.ndarray], list[dict[str, object]]]


@dataclass
class DecodeRow:
    """One prompt being decoded: its tokens so far, those generated, and the calls made."""

    prompt: int
    ids: list[int]
    new: list[int] = field(default_factory=list)
    calls: int = 0
    position: int = 0  #: the prompt's position in the run's list (:mod:`._streams`)


def batch_rows(
    prompts: Sequence[tuple[int, Sequence[int]]], start: int, batch_size: int
) -> list[DecodeRow]:
    """The rows of the batch of prompts from ``start``, each with its position in the list."""
    batch = prompts[start : start + batch_size]
    return [DecodeRow(int(i), list(ids), position=start + k) for k, (i, ids) in enumerate(batch)]


def advance(
    row: DecodeRow,
    tokens: Sequence[int],
    eos: Collection[int],
    max_new_tokens: int,
    out: dict[int, list[int]],
    on_prompt_done: Callable[[], None] | None,
) -> bool:
    """Append one call's ``tokens`` to ``row``; whether its prompt goes on.

    A prompt stops once ``max_new_tokens`` tokens are generated or after an end-of-sequence
    token; its continuation (cut at ``max_new_tokens``, or just after that token) goes into
    ``out`` and ``on_prompt_done`` is called.
    """
    row.calls += 1
    row.new.extend(tokens)
    stop = next((i for i, t in enumerate(row.new) if t in eos), None)
    if stop is None and len(row.new) < max_new_tokens:
        return True
    end = max_new_tokens if stop is None else min(stop + 1, max_new_tokens)
    out[row.prompt] = row.new[:end]
    if on_prompt_done is not None:
        on_prompt_done()
    return False


def call_record(row: DecodeRow, walk: WalkResult) -> dict[str, object]:
    """What every per-call record holds: the prompt, the call, the tokens appended, the
    accepted drafts and whether the walk ended in a bonus token."""
    return {
        "prompt": row.prompt,
        "call": row.calls,
        "tokens": len(walk.tokens),
        "accepted": walk.accepted,
        "bonus": walk.bonus,
    }


@dataclass(frozen=True)
class RowsCall(ABC):
    """Target calls of one verifier for prompts decoded side by side.

    Attributes
    ----------
    verifier : verifier object
    temperature : float
    batch_size : int
        Prompts decoded side by side.
    max_new_tokens : int
    eos : frozenset of int
        A prompt stops after one of these.
    predictor : callable, optional
        ``predictor(p, q)``: the prediction's inputs, added to each call's records.
    on_prompt_done : callable, optional
        Called once per finished prompt (a progress bar).
    """

    verifier: Any
    temperature: float
    batch_size: int
    max_new_tokens: int
    eos: frozenset[int]
    predictor: Predictor | None
    on_prompt_done: Callable[[], None] | None

    def decode(
        self,
        models: tuple[Any, Any],
        prompts: Sequence[tuple[int, Sequence[int]]],
        rng: RandomSource,
        layout: TreeLayout,
        vocab_size: int | None,
        kv_cache: bool,
    ) -> tuple[list[dict[str, object]], dict[int, list[int]]]:
        """Decode every prompt with the ``(draft, target)`` models: the per-call records and
        each prompt's continuation. ``layout`` is the trees' layout the scorers start with."""
        records: list[dict[str, object]] = []
        out: dict[int, list[int]] = {}
        for start in range(0, len(prompts), self.batch_size):
            active = batch_rows(prompts, start, self.batch_size)
            scorers = [
                make_scorer(
                    model, [row.ids for row in active], layout, vocab_size, kv_cache=kv_cache
                )
                for model in models
            ]
            while active:
                active = self.run(active, scorers, rng, records, out)
        return records, out

    def run(
        self,
        active: list[DecodeRow],
        scorers: list[Any],
        rng: RandomSource,
        records: list[dict[str, object]],
        out: dict[int, list[int]],
    ) -> list[DecodeRow]:
        """One call of every active row with the ``(draft, target)`` scorers: append its
        records (and each finished prompt's continuation to ``out``); the rows that go on."""
        drafting, verifying = row_generators(
            rng, [row.position for row in active], [row.calls for row in active]
        )
        scored = self.grow_and_score(active, scorers, drafting)
        first = len(records)
        still: list[DecodeRow] = []
        kept: list[int] = []
        committed: list[list[int]] = []
        for b, row in enumerate(active):
            walk = self.walk(scored, b, verifying[b])
            records.append(self.record(scored, row, b, walk))
            committed.append(list(walk.tokens))
            if advance(row, walk.tokens, self.eos, self.max_new_tokens, out, self.on_prompt_done):
                still.append(row)
                kept.append(b)
        if self.predictor is not None:
            self.predict(records[first:], scored)
        for scorer in scorers:
            scorer.commit(committed)
            scorer.keep(kept)
        return still

    @abstractmethod
    def grow_and_score(
        self, active: list[DecodeRow], scorers: list[Any], drafting: Sequence[np.random.Generator]
    ) -> Any:
        """The call's trees grown by the draft scorer and scored by the target's."""

    @abstractmethod
    def walk(self, scored: Any, b: int, rng: np.random.Generator) -> WalkResult:
        """The verifier's walk of row ``b``'s tree."""

    @abstractmethod
    def record(self, scored: Any, row: DecodeRow, b: int, walk: WalkResult) -> dict[str, object]:
        """Row ``b``'s record of the call (before ``row`` is advanced)."""

    @abstractmethod
    def predict(self, records: list[dict[str, object]], scored: Any) -> None:
        """Add the prediction's inputs to the call's ``records``."""
