"""Steps on their way to the dump: rows as stored, per-step metadata, and the buffer that cuts
them into shards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from otbound.capture._models import MODEL_DTYPES
from otbound.capture._prompts import Prompt
from otbound.dumps import DumpWriter, TopKRows

#: Shards hold at most this many steps when ``shard_steps`` is not given ...
MAX_SHARD_STEPS = 1024
#: ... and at most about this many bytes of logits (both models together).
SHARD_BYTES = 256 * 2**20
_ROW_CHUNK = 256  # rows converted to top-k at once (float64 copies of full rows)


def storage_rows(rows: torch.Tensor, storage_dtype: str, topk: int | None) -> Any:
    """Rows as the dump stores them: a numpy array (bfloat16 as bits) or TopKRows."""
    if topk is not None:
        parts = [
            TopKRows.from_logits(rows[i : i + _ROW_CHUNK].numpy(), topk)
            for i in range(0, len(rows), _ROW_CHUNK)
        ]
        return _concat(parts)
    if storage_dtype == "bfloat16":
        return rows.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return rows.to(MODEL_DTYPES[storage_dtype]).numpy()


def _concat(parts: Sequence[Any]) -> Any:
    if isinstance(parts[0], TopKRows):
        return TopKRows(
            np.concatenate([p.ids for p in parts]),
            np.concatenate([p.logits for p in parts]),
            np.concatenate([p.logsumexp for p in parts]),
            parts[0].vocab_size,
        )
    return np.concatenate(parts)


def _take(rows: Any, index: Any) -> Any:
    return rows.take(index) if isinstance(rows, TopKRows) else rows[index]


def auto_shard_steps(vocab: int, storage_dtype: str, topk: int | None) -> int:
    """Steps per shard: at most :data:`MAX_SHARD_STEPS` and about :data:`SHARD_BYTES`."""
    if topk is not None:
        per_model = topk * (8 + 4) + 8  # int64 ids, float32 logits, float64 logsumexp
    else:
        per_model = vocab * (4 if storage_dtype == "float32" else 2)
    return int(max(1, min(MAX_SHARD_STEPS, SHARD_BYTES // (2 * per_model))))


def prompt_frame(prompt: Prompt, continuation: Sequence[int], skip: int) -> pd.DataFrame:
    length = len(prompt.input_ids)
    steps = np.arange(skip, len(continuation), dtype=np.int64)
    return pd.DataFrame(
        {
            "prompt_id": np.full(steps.size, prompt.id, dtype=np.int64),
            "position": length + steps,
            "token": np.asarray(continuation, dtype=np.int64)[skip:],
            "prompt_length": np.full(steps.size, length, dtype=np.int64),
            "last": steps == len(continuation) - 1,
        }
    )


class ShardBuffer:
    """Steps waiting for a shard; shards of exactly ``shard_steps`` steps (the last: fewer).

    The writer is opened at the first shard, so a run that fails before it leaves nothing.
    """

    def __init__(self, open_writer: Any, shard_steps: int) -> None:
        self._open_writer = open_writer
        self._writer: DumpWriter | None = None
        self._shard_steps = shard_steps
        self._target: list[Any] = []
        self._draft: list[Any] = []
        self._meta: list[pd.DataFrame] = []
        self.pending = 0
        self.written = 0

    def add(self, target: Any, draft: Any, meta: pd.DataFrame) -> None:
        if len(meta) == 0:
            return
        self._target.append(target)
        self._draft.append(draft)
        self._meta.append(meta)
        self.pending += len(meta)
        while self.pending >= self._shard_steps:
            self._flush(self._shard_steps)

    def finish(self) -> None:
        if self.pending:
            self._flush(self.pending)
        if self._writer is not None:
            self._writer.close()

    def _flush(self, steps: int) -> None:
        target, draft = _concat(self._target), _concat(self._draft)
        meta = pd.concat(self._meta, ignore_index=True)
        head, tail = slice(0, steps), slice(steps, None)
        if self._writer is None:
            self._writer = self._open_writer()
        self._writer.write_shard(
            _take(target, head), _take(draft, head), meta.iloc[head].reset_index(drop=True)
        )
        self.written += steps
        self.pending -= steps
        rest = len(meta) - steps
        self._target = [_take(target, tail)] if rest else []
        self._draft = [_take(draft, tail)] if rest else []
        self._meta = [meta.iloc[tail].reset_index(drop=True)] if rest else []
