"""What the torch formulas defined for ``n ≤ 2`` only share: ``n = 1`` and the refusal."""

from __future__ import annotations

import torch


def single_or_refuse(
    p: torch.Tensor, q: torch.Tensor, n: int, verifier: str, beyond: str
) -> torch.Tensor | None:
    """``β(p, q) = Σ min(p, q)`` per row at ``n = 1`` (one draft: every such verifier is
    speculative sampling), ``None`` at ``n = 2`` (the caller's closed form), and a
    ``ValueError`` naming ``verifier`` and what numpy does instead (``beyond``) for any
    other ``n`` (``n ≥ 3``; the public functions refuse ``n < 1`` before)."""
    if n == 1:
        return torch.minimum(p, q).sum(dim=-1)
    if n != 2:
        raise ValueError(
            f"{verifier} has a torch formula for n = 1 and 2 only (n >= 3 {beyond}: use "
            f"numpy); got n={n}"
        )
    return None
