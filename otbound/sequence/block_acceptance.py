r"""Exact expected accepted tokens and exact output laws of sequence verifiers.

For context-independent models (:mod:`otbound.sequence._models`) everything here is exact, by
enumeration of every drafted tree and every random choice of the verifier
(:func:`otbound.sequence._choices.exact_law`): small vocabularies and trees only (the cost
grows as ``V^{|tree|}``).

* :func:`block_acceptance` - ``E[τ]`` on a chain of ``γ`` drafts, the accepted draft tokens
  per iteration (the bonus or correction token excluded; tokens per target call are
  ``E[τ] + 1``);
* :func:`tree_acceptance` - the same on a draft tree;
* :func:`token_acceptance` - token verification's closed form ``Σ_{k=1}^{γ} Π_{d≤k} α_d``;
* :func:`sequence_law` and :func:`lossless_gap` - the law of the emitted tokens completed by
  fresh target draws, and its total variation from the target's block law (zero iff the
  verifier is lossless, see :mod:`otbound.sequence._protocol`).

Anchor (Sun et al. 2025, the motivating example): ``p = (1/3, 2/3)``, ``q = (2/3, 1/3)`` at
every position, ``γ = 2``: token verification accepts ``10/9`` tokens per iteration, block
verification ``11/9``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from otbound._spellings import method_keyword
from otbound.sequence._models import sequence_model
from otbound.sequence._protocol import SequenceVerifier
from otbound.sequence.block import BlockVerifier
from otbound.sequence.multipath import MultiPathVerifier
from otbound.sequence.token import TokenVerifier
from otbound.sequence.traversal import TraversalVerifier

__all__ = [
    "SEQUENCE_VERIFIERS",
    "block_acceptance",
    "get_sequence_verifier",
    "lossless_gap",
    "sequence_law",
    "token_acceptance",
    "tree_acceptance",
]

#: Registry of the sequence verifiers by name.
SEQUENCE_VERIFIERS: dict[str, type[SequenceVerifier]] = {
    "token": TokenVerifier,
    "block": BlockVerifier,
    "traversal": TraversalVerifier,
    "multipath": MultiPathVerifier,
}


def get_sequence_verifier(verifier: str | SequenceVerifier) -> SequenceVerifier:
    """A sequence verifier from its name (or passed through).

    Examples
    --------
    >>> get_sequence_verifier("block")
    <sequence verifier 'block'>
    """
    if isinstance(verifier, SequenceVerifier):
        return verifier
    try:
        return SEQUENCE_VERIFIERS[verifier]()
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown sequence verifier {verifier!r}; choose from {', '.join(SEQUENCE_VERIFIERS)}"
        ) from None


@method_keyword("verifier")
def block_acceptance(
    p: object, q: object, gamma: int, *, verifier: str | SequenceVerifier
) -> float:
    r"""Exact expected accepted draft tokens per iteration on a chain of ``γ`` drafts.

    .. math::

        E[τ] = \sum_{x_{1:γ}} Q(x_{1:γ}) \sum_{t} t\, P(τ = t \mid x_{1:γ})

    by enumeration of the drafts and of the verifier's random choices.

    Parameters
    ----------
    p, q : array_like, shape (V,) or (rows, V)
        Context-independent target and draft laws, one vector for every position or one row
        per depth (``p`` needs ``γ + 1`` rows, the last for the bonus token).
    gamma : int
        Number of drafted tokens.
    verifier : str or SequenceVerifier
        A name of :data:`SEQUENCE_VERIFIERS` (or an instance). (The old order,
        ``block_acceptance(verifier, p, q, gamma)``, warns and still works.)

    Returns
    -------
    float

    Examples
    --------
    >>> p, q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]  # Sun et al. 2025, the motivating example
    >>> [round(block_acceptance(p, q, 2, verifier=v) * 9, 9) for v in ("token", "block")]
    [10.0, 11.0]
    """
    return get_sequence_verifier(verifier).acceptance(p, q, gamma)


@method_keyword("verifier")
def tree_acceptance(
    p: object, q: object, tree: object, *, verifier: str | SequenceVerifier
) -> float:
    """Exact expected accepted draft tokens per iteration on a draft tree.

    The tree's siblings are drawn from ``q`` without replacement
    (:mod:`otbound.sequence._models`); otherwise as :func:`block_acceptance`.

    Examples
    --------
    >>> p, q, tree = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [[0], [1], [0, 0]]
    >>> [round(tree_acceptance(p, q, tree, verifier=v), 6) for v in ("token", "traversal")]
    [1.31, 1.37]
    """
    return get_sequence_verifier(verifier).acceptance(p, q, tree)


def token_acceptance(p: object, q: object, gamma: int) -> float:
    r"""Token verification on a chain: ``E[τ] = Σ_{k=1}^{γ} Π_{d=1}^{k} α_d``.

    ``α_d = 1 − TV(p_d, q_d)``.

    Token ``k`` is reached iff the ``k − 1`` before it were accepted, each independently with
    probability ``α_d`` under context-independent models (Leviathan et al. 2023).

    Examples
    --------
    >>> round(token_acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2) * 9, 9)  # 2/3 + 4/9
    10.0
    """
    model = sequence_model(p, q, gamma)
    alphas = np.minimum(model.p[:gamma], model.q).sum(axis=1)
    return float(np.cumprod(alphas).sum())


@method_keyword("verifier")
def sequence_law(
    p: object, q: object, tree: object, *, verifier: str | SequenceVerifier
) -> dict[tuple[int, ...], float]:
    r"""Exact law of the first ``D + 1`` generated tokens: one iteration, then fresh target draws.

    .. math::

        L(z_{1:D+1}) = \sum_{t=0}^{D} ν_t(z_{1:t+1}) \prod_{d=t+2}^{D+1} p_d(z_d),

    with ``ν_t`` the exact law of the emitted tokens with ``τ = t``. Lossless iff ``L`` is the
    target's block law ``Π_d p_d(z_d)`` (see :mod:`otbound.sequence._protocol`).

    Returns
    -------
    dict
        ``z ↦ L(z)`` over the blocks of positive probability.
    """
    verifier = get_sequence_verifier(verifier)
    model = verifier.model(p, q, tree)
    emitted: dict[tuple[int, ...], float] = {}
    for (_, out), prob in verifier.iteration_law(p, q, tree).items():
        emitted[out] = emitted.get(out, 0.0) + prob
    law: dict[tuple[int, ...], float] = {}
    for out, prob in emitted.items():
        rest = model.p[len(out) :]
        supports = [np.flatnonzero(row > 0) for row in rest]
        for tail in itertools.product(*supports):
            z = out + tuple(int(t) for t in tail)
            weight = math.prod(float(rest[d, t]) for d, t in enumerate(tail))
            law[z] = law.get(z, 0.0) + prob * weight
    return law


@method_keyword("verifier")
def lossless_gap(p: object, q: object, tree: object, *, verifier: str | SequenceVerifier) -> float:
    """Total variation between :func:`sequence_law` and the target's block law (0 iff lossless).

    Examples
    --------
    >>> p, q, tree = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [[0], [1], [0, 0]]
    >>> lossless_gap(p, q, tree, verifier="traversal") < 1e-12
    True
    """
    verifier = get_sequence_verifier(verifier)
    model = verifier.model(p, q, tree)
    target = model.target_law(model.depth + 1)
    law = sequence_law(p, q, tree, verifier=verifier)
    keys = set(target) | set(law)
    return 0.5 * math.fsum(abs(law.get(z, 0.0) - target.get(z, 0.0)) for z in keys)
