"""What the capture tests share: tiny configs, a dump's rows read back whole, and a command's one
error line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from otbound.dumps import open_dump


def tiny_config(family: str, vocab: int, layers: int = 2, **extra: Any) -> object:
    """A tiny Llama or Qwen2 config: width 32, 4 heads (2 key/value), 64 positions, BOS 1 and
    EOS 2 unless ``extra`` says otherwise."""
    import transformers

    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
    settings = {"bos_token_id": 1, "eos_token_id": 2, **extra}
    return config_class(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **settings,
    )


def dump_rows(path: Path) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """All target rows, all draft rows and the per-step metadata of a full-row dump."""
    shards = list(open_dump(path))
    meta = pd.concat([s.metadata for s in shards], ignore_index=True)
    return (
        np.concatenate([s.target for s in shards]),
        np.concatenate([s.draft for s in shards]),
        meta,
    )


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a command wrote on stderr (no traceback), checked to be one."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]
