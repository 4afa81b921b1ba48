"""One program, two readings: a randomised algorithm run on a generator, or its exact law.

Every sequence verifier (and the drafting of a tree) is written once as a function of a
*chooser* that supplies its random choices: :meth:`Chooser.bernoulli` and
:meth:`Chooser.categorical`. :class:`RandomChooser` draws them from a numpy generator (one
trial, or a seeded simulation). :func:`exact_law` runs the same function under every possible
sequence of choices and returns the law of its result, each outcome with the product of the
probabilities of the choices that led to it. The exact law is therefore the law of the code
that runs, not of a separate formula.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol, TypeVar

import numpy as np

__all__ = ["Chooser", "RandomChooser", "exact_law"]

T = TypeVar("T", bound=Hashable)


class Chooser(Protocol):
    """The source of an algorithm's random choices."""

    def bernoulli(self, prob: float) -> bool:
        """``True`` with probability ``prob`` (clipped to [0, 1])."""
        ...

    def categorical(self, weights: np.ndarray) -> int:
        """An index drawn with probability proportional to ``weights`` (non-negative)."""
        ...


class RandomChooser:
    """Choices drawn from a numpy ``Generator``."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def bernoulli(self, prob: float) -> bool:
        return bool(self.rng.random() < prob)

    def categorical(self, weights: np.ndarray) -> int:
        cdf = np.cumsum(weights)
        index = int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"))
        return min(index, int(np.flatnonzero(weights > 0)[-1]))


class _Branch(Exception):
    """Raised at the first choice beyond the replayed script, with its options."""

    def __init__(self, count: int) -> None:
        self.count = count


class _ReplayChooser:
    """Replays a script of option indices; raises :class:`_Branch` when it runs out."""

    def __init__(self, script: tuple[int, ...]) -> None:
        self.script = script
        self.position = 0
        self.prob = 1.0

    def _choose(self, options: list[tuple[int | bool, float]]) -> int | bool:
        if self.position == len(self.script):
            raise _Branch(len(options))
        value, prob = options[self.script[self.position]]
        self.position += 1
        self.prob *= prob
        return value

    def bernoulli(self, prob: float) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        options = [(True, prob), (False, 1.0 - prob)]
        return bool(self._choose([o for o in options if o[1] > 0.0]))

    def categorical(self, weights: np.ndarray) -> int:
        total = float(np.sum(weights))
        return int(
            self._choose([(int(i), float(weights[i]) / total) for i in np.flatnonzero(weights > 0)])
        )


def exact_law(program: Callable[[Chooser], T]) -> dict[T, float]:
    """The exact law of ``program(chooser)``'s result over all its random choices.

    Depth-first over the tree of choices: each run replays a script of choices and stops at
    the first new one, whose options extend the script. Outcomes reached along several
    branches are summed. Small programs only (the cost is the number of branches times the
    number of choices per run).

    Examples
    --------
    >>> law = exact_law(lambda c: c.bernoulli(0.25) + c.categorical(np.array([1.0, 3.0])))
    >>> sorted((k, round(v, 4)) for k, v in law.items())
    [(0, 0.1875), (1, 0.625), (2, 0.1875)]
    """
    law: dict[T, float] = {}
    stack: list[tuple[int, ...]] = [()]
    while stack:
        script = stack.pop()
        chooser = _ReplayChooser(script)
        try:
            outcome = program(chooser)
        except _Branch as branch:
            stack.extend((*script, i) for i in reversed(range(branch.count)))
            continue
        law[outcome] = law.get(outcome, 0.0) + chooser.prob
    return law
