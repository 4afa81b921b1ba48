"""The vocabulary both models' rows are cut to, checked against the tokenizers."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otbound.capture._errors import CaptureError, ModelFileError
from otbound.capture._models import embedding_rows, logit_width


@dataclass(frozen=True)
class Vocabulary:
    """The vocabulary both models' rows are cut to.

    Attributes
    ----------
    size : int
        Logits kept per row (ids ``0 .. size − 1``).
    target_width, draft_width : int
        The models' own logit widths.
    tokenizer_length : int or None
        ``len(tokenizer)``, when a tokenizer is known.
    cut : str
        ``"none"``, ``"tokenizer"`` (both cut to the tokenizer's length) or
        ``"smaller width"`` (no tokenizer: both cut to the smaller width).
    """

    size: int
    target_width: int
    draft_width: int
    tokenizer_length: int | None
    cut: str

    def as_dict(self) -> dict[str, Any]:
        """For the manifest."""
        return {
            "size": self.size,
            "target_width": self.target_width,
            "draft_width": self.draft_width,
            "tokenizer_length": self.tokenizer_length,
            "cut": self.cut,
        }


def _tokenizer_fits(tokenizer: Any, length: int, models: Mapping[str, Any]) -> None:
    for side, model in models.items():
        rows = min(logit_width(model), embedding_rows(model))
        if length > rows:
            raise CaptureError(
                f"the tokenizer ({getattr(tokenizer, 'name_or_path', '')}) has {length} tokens "
                f"but the {side} model's vocabulary has {rows}: ids beyond it cannot be scored "
                f"(is it the {side}'s tokenizer?)"
            )


def check_shared_vocabulary(tokenizer: Any, draft_tokenizer: Any) -> None:
    """Refuse a draft whose tokenizer differs from the target's (nothing to check when either
    is None): before the models are loaded, where the tokenizers are known.

    Raises
    ------
    ModelFileError
        They differ in length or map a token to different ids (the first such id is named).
    """
    if draft_tokenizer is None or tokenizer is None:
        return
    a, b = len(tokenizer), len(draft_tokenizer)
    if a != b:
        raise ModelFileError(
            f"the target's and the draft's tokenizers differ ({a} and {b} tokens): the two "
            "models do not share a vocabulary"
        )
    ours, theirs = tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if ours != theirs:
        moved = sorted((i, t) for t, i in ours.items() if theirs.get(t) != i)
        where = f" (the first at id {moved[0][0]}, {moved[0][1]!r})" if moved else ""
        raise ModelFileError(
            f"the target's and the draft's tokenizers map tokens to different ids{where}: the "
            "two models do not share a vocabulary"
        )


def plan_vocabulary(
    target: Any, draft: Any, tokenizer: Any = None, draft_tokenizer: Any = None
) -> Vocabulary:
    """The shared vocabulary, checked.

    Both rows are cut to ``len(tokenizer)`` when a tokenizer is known, else to the smaller
    width (with a warning when the widths differ): the extra ids of a padded embedding matrix
    are never produced by the tokenizer.

    Raises
    ------
    CaptureError
        The tokenizer is longer than either model's vocabulary.
    ModelFileError
        The draft's own tokenizer disagrees with the target's (a :class:`CaptureError`).
    """
    widths = {"target": logit_width(target), "draft": logit_width(draft)}
    check_shared_vocabulary(tokenizer, draft_tokenizer)
    if tokenizer is not None:
        length = len(tokenizer)
        _tokenizer_fits(tokenizer, length, {"target": target, "draft": draft})
        cut = "none" if widths["target"] == widths["draft"] == length else "tokenizer"
        return Vocabulary(length, widths["target"], widths["draft"], length, cut)
    size = min(widths.values())
    cut = "none"
    if widths["target"] != widths["draft"]:
        cut = "smaller width"
        warnings.warn(
            f"the target has {widths['target']} logits and the draft {widths['draft']}, and no "
            f"tokenizer is known: both are cut to the first {size}",
            UserWarning,
            stacklevel=2,
        )
    return Vocabulary(size, widths["target"], widths["draft"], None, cut)
