r"""Common random numbers: every run draws call ``t`` of prompt ``c`` from the same numbers.

Two runs of a tree-decoding comparison (two verifiers, two trees, two systems at one budget)
decode the same prompts, so their tokens per call are compared prompt by prompt
(:func:`otbound.stats.paired_difference_interval`). The comparison is tighter when the runs also
share their random numbers where their situations coincide: :class:`CallStreams` gives call
``t`` of the prompt at position ``c`` of the prompt list one generator for drawing the drafts
and one for verifying them, seeded from ``(seed, c, t)`` only, not from the verifier or the
tree. So at the first call of a prompt, where every run sees the same context, two verifiers
of one design verify the same drafted tree with the same uniforms, and two runs stay on the
same numbers for as long as their texts agree; on a chain every token-level verifier is
single-draft speculative sampling, and their runs coincide call for call. Once two texts
differ, their contexts differ and the shared numbers no longer couple much.

Within one run the streams of distinct (prompt, call) pairs are independent, as one generator
advanced through the run would be, so each run alone is the same lossless sampler.

Why: with a separate generator per run, pairing by prompt alone left the paired interval no
narrower than two separate ones combined (on the sample pair, 64 prompts × 32 tokens, block
against single-draft verification on chains: half-widths 0.112 and 0.112). With common
numbers, on the sequence-level run of ``docs/results.md``: 0.094 against 0.108 for that pair,
0.061 against 0.078 for RRS against RRS without replacement on binary trees of depth 2, 0.099
against 0.106 for multi-path verification against K-SEQ on two paths, and 0 for the
token-level verifiers on chains (one system). Pairs whose drafts and tests share little gain
little (RRS against K-SEQ on binary trees: 0.084 against 0.081).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: How a run's random numbers are drawn, as its checkpoint records it (an older checkpoint,
#: drawn from one generator per run, is refused rather than mixed with these runs).
RANDOM_NUMBERS = "common to every run: one draft and one verify stream per (prompt, call)"

#: The two streams of a call: drawing the drafts, then verifying them (and the bonus draw).
DRAFT, VERIFY = 0, 1


class CallStreams:
    """The generators of each (prompt, call): common to every run with the same ``seed``.

    Parameters
    ----------
    seed : int
        The run's seed (``run_tree_decoding(seed=...)``).

    Examples
    --------
    >>> streams = CallStreams(0)
    >>> a = streams.generator(3, 1, DRAFT).random()
    >>> a == CallStreams(0).generator(3, 1, DRAFT).random()  # any run, same numbers
    True
    >>> a == streams.generator(3, 2, DRAFT).random()  # the next call: fresh numbers
    False
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)

    def generator(self, position: int, call: int, stream: int) -> np.random.Generator:
        """The generator of ``stream`` (:data:`DRAFT` or :data:`VERIFY`) at ``call`` of the
        prompt at ``position`` in the prompt list."""
        key = (int(position), int(call), int(stream))
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=key))


#: What a decoding loop draws from: one generator for the whole run, or per-call streams.
RandomSource = np.random.Generator | CallStreams


def row_generators(
    source: RandomSource, positions: Sequence[int], calls: Sequence[int]
) -> tuple[list[np.random.Generator], list[np.random.Generator]]:
    """Per active row: the generators that draw its drafts and verify them at this call.

    With one ``numpy.random.Generator`` every row draws from it, in the loop's order (a
    run's single stream); with :class:`CallStreams`, each row from its own (prompt, call)
    streams.
    """
    if isinstance(source, np.random.Generator):
        return [source] * len(positions), [source] * len(positions)
    pairs = list(zip(positions, calls, strict=True))
    return (
        [source.generator(c, t, DRAFT) for c, t in pairs],
        [source.generator(c, t, VERIFY) for c, t in pairs],
    )
