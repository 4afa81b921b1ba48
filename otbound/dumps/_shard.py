"""One shard loaded: its rows, what they hold and its per-step metadata (what readers return)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from otbound.dumps._format import DumpError, ShardInfo, TopKRows
from otbound.dumps._processing import StepDistributions, prepare_distributions

if TYPE_CHECKING:
    from otbound.analysis import AcceptanceInterval

__all__ = ["ShardData"]


@dataclass(frozen=True)
class ShardData:
    """The arrays and per-step metadata of one shard, loaded.

    Attributes
    ----------
    shard : ShardInfo
    target, draft : numpy.ndarray, shape (steps, V), or TopKRows
        Logits as float32 (from 16-bit storage) or as stored; probabilities when ``values``
        says so; :class:`TopKRows` for top-k dumps. May be read-only memory maps.
    values : (str, str)
        What ``target`` and ``draft`` hold: ``"logits"``, ``"probs"`` or ``"topk"``.
    metadata : pandas.DataFrame
        One row per step: ``step`` (global id), ``prompt_id``, ``position``, ``token``
        (null where unknown), then any extra columns.
    """

    shard: ShardInfo
    target: np.ndarray | TopKRows
    draft: np.ndarray | TopKRows
    values: tuple[str, str]
    metadata: pd.DataFrame

    @property
    def step(self) -> np.ndarray:
        """Global step ids, int64."""
        return self.shard.steps

    @property
    def num_steps(self) -> int:
        """Steps in the shard."""
        return self.shard.num_steps

    @property
    def is_topk(self) -> bool:
        """Whether the rows are truncated top-k rows."""
        return self.values[0] == "topk"

    def head(self, steps: int) -> ShardData:
        """The shard's first ``steps`` steps (all of them if it has fewer); arrays are views.

        Examples
        --------
        >>> import numpy as np, tempfile, otbound as ob
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     np.savez(tmp + "/run.npz", target_logits=np.zeros((8, 5)),
        ...              draft_logits=np.zeros((8, 5)))
        ...     part = ob.open_dump(tmp + "/run.npz").read_shard(0).head(3)
        >>> part.step.tolist(), part.target.shape, len(part.metadata)
        ([0, 1, 2], (3, 5), 3)
        """
        steps = max(0, min(int(steps), self.num_steps))
        if steps == self.num_steps:
            return self

        def cut(side: np.ndarray | TopKRows) -> np.ndarray | TopKRows:
            return side.take(np.arange(steps)) if isinstance(side, TopKRows) else side[:steps]

        return ShardData(
            replace(self.shard, num_steps=steps),
            cut(self.target),
            cut(self.draft),
            self.values,
            self.metadata.iloc[:steps].reset_index(drop=True),
        )

    def distributions(
        self,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        *,
        skip_bad_steps: bool = False,
        truncate_vocab: bool = False,
    ) -> StepDistributions:
        """``p`` and ``q`` of the shard's steps (see :func:`prepare_distributions`).

        Raises
        ------
        DumpError
            For top-k rows, which are not full distributions: use
            :meth:`acceptance_interval`.
        """
        if self.is_topk:
            raise DumpError(
                f"shard {self.shard.id} holds top-k rows, not full distributions: use "
                "acceptance_interval for bounds on α*"
            )
        return prepare_distributions(
            self.target,
            self.draft,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            values=self.values,
            step_ids=self.step,
            skip_bad_steps=skip_bad_steps,
            truncate_vocab=truncate_vocab,
        )

    def acceptance_interval(
        self,
        n: int,
        design: str = "iid",
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        skip_bad_steps: bool = False,
        truncate_vocab: bool = False,
    ) -> AcceptanceInterval:
        """``α*`` per step: exact for full rows, an interval for top-k rows.

        :func:`otbound.analysis.acceptance_interval` on the shard's rows (a convenience: it
        loads the bounds when called; the dump package itself computes none).
        """
        from otbound.analysis import acceptance_interval

        values: tuple[str, str] = ("logits", "logits") if self.is_topk else self.values
        return acceptance_interval(
            self.target,
            self.draft,
            n,
            design,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            values=values,
            step_ids=self.step,
            skip_bad_steps=skip_bad_steps,
            truncate_vocab=truncate_vocab,
        )
