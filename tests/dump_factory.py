"""Small otbound dumps with known logits, for the analysis and command-line tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from otbound.dumps import DumpWriter, TopKRows

V = 40
SHARDS = (12, 12, 9)


def logits_pair(rng: np.random.Generator, steps: int, vocab: int = V) -> tuple[np.ndarray, ...]:
    target = 2.0 * rng.standard_normal((steps, vocab))
    draft = target + rng.standard_normal((steps, vocab))
    return target, draft


def write_dump(
    path: Path, shards=SHARDS, seed: int = 0, vocab: int = V, topk: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A dump of ``shards`` with prompts of 3 steps each; returns all target, draft logits."""
    rng = np.random.default_rng(seed)
    targets, drafts, step = [], [], 0
    storage = None if topk is None else f"topk:{topk}"
    with DumpWriter(
        path, target_model="t", draft_model="d", storage=storage, vocab_size=vocab
    ) as writer:
        for steps in shards:
            t, d = logits_pair(rng, steps, vocab)
            ids = np.arange(step, step + steps)
            meta = {"prompt_id": ids // 3, "position": ids % 3, "token": ids % vocab}
            if topk is None:
                writer.write_shard(t, d, meta)
            else:
                writer.write_shard(
                    TopKRows.from_logits(t, topk), TopKRows.from_logits(d, topk), meta
                )
            targets.append(t)
            drafts.append(d)
            step += steps
    return np.concatenate(targets), np.concatenate(drafts)
