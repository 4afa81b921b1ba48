r"""llama.cpp: the server's sample-and-match verification and the speculative example's
stochastic verification.

Read:

* ``common/sampling.cpp`` at commit ``00efb3e184262872916bf136b3df63c1822a19bd``:
  ``common_sampler_sample_and_accept_n`` samples the target token at each drafted position
  with the request's sampler chain and keeps the draft iff it equals that sample.
* ``examples/speculative/speculative.cpp`` at commit
  ``007d71358afee62ef906904edc79fec9b2d728fa`` (stochastic verification, from
  https://github.com/ggml-org/llama.cpp/pull/5625): the draft at each position is
  ``cur_p->data[0]``, the *most likely* candidate of the draft's processed distribution (its
  sampled token is not used), and it is kept iff ``r <= p_tgt / p_dft`` with ``p_dft`` that
  candidate's probability; on rejection both candidate lists (what survived the filters) are
  sorted by token id and the residual is ``max(0, p_tgt[i] − p_dft[i])`` *by position* ``i``
  in the two lists, not by token.

Both sides use the same sampler chain. otbound applies its processing in Hugging Face's order
(temperature, then top-k, then top-p); llama.cpp's default chain filters before the
temperature. The defects below do not depend on the order.
"""

from __future__ import annotations

import numpy as np

from otbound.engines._base import Sides, SingleTest, TargetDraw
from otbound.verifiers.base import sample_tokens

__all__ = ["LlamaExample", "LlamaSampleMatch"]


class LlamaSampleMatch(TargetDraw):
    r"""``llamacpp_sample_match``: ``Y ~ P`` sampled by the target, the draft kept iff ``Y = x``.

    The output is the target's own sample: lossless, ``α = Σ_x d_x P_x`` (the same joint law of
    draft and output as :class:`~otbound.engines.vllm.VllmOneHot`)."""

    name = "llamacpp_sample_match"
    engine = "llama.cpp"

    def _sample(self, drafts: np.ndarray, sides: Sides, rng: np.random.Generator) -> np.ndarray:
        out: np.ndarray = sample_tokens(sides.target, rng.random(drafts.shape[0]))
        return out


def misaligned_residual(target: np.ndarray, draft: np.ndarray) -> np.ndarray | None:
    r"""The speculative example's residual: with ``t_1 < t_2 < …`` the target's surviving
    tokens and ``d_1 < d_2 < …`` the draft's, token ``t_i`` gets ``max(0, P(t_i) − D(d_i))``
    (``P(t_i)`` past the draft's list), normalised.

    Where it has no mass the example divides by zero; a draw from a list of one entry still
    returns that entry (the target's only surviving token), any longer list leaves the draw
    undefined: ``None``.
    """
    kept_t = np.flatnonzero(target > 0)
    kept_d = np.flatnonzero(draft > 0)
    mass = target[kept_t].copy()
    paired = min(kept_t.size, kept_d.size)
    mass[:paired] = np.maximum(0.0, mass[:paired] - draft[kept_d[:paired]])
    total = float(mass.sum())
    if total <= 0.0:
        if kept_t.size != 1:
            return None
        mass, total = np.ones(1), 1.0
    out = np.zeros_like(target)
    out[kept_t] = mass / total
    return out


class LlamaExample(SingleTest):
    r"""``llamacpp_example``: the most likely candidate ``a`` of the processed draft ``D``
    drafted (design ``topk``), kept w.p. ``min(1, P_a / D_a)``, else a draw from
    :func:`misaligned_residual`.

    .. math:: L(y) = 1[y = a] \min(1, P_a / D_a) + (1 − \min(1, P_a / D_a))\, r_y.

    Two defects: a deterministic draft tested as if drawn from ``D`` (lossy even without
    filters), and a residual paired by list position (lossy when the two filtered lists hold
    different tokens).
    """

    name = "llamacpp_example"
    engine = "llama.cpp"
    default_design = "topk"
    lossless_by_design = False

    def _parts(self, sides: Sides) -> tuple[np.ndarray, np.ndarray | None]:
        accept, _ = super()._parts(sides)
        return accept, misaligned_residual(sides.target, sides.draft)
