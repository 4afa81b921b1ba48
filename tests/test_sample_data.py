"""The shipped sample: ``data/sample`` is what the shipped models in ``data/models`` log.

The sample is the default input of ``compute_bounds`` and of the notebooks, so it is held to
what the README says of it: an intact dump (checksums), at least 300 steps of full rows, at
most 20 MB, single-draft acceptance ``Σ min(p, q)`` at temperature 1 in the realistic band
0.3–0.8, and rows that a direct forward pass of the shipped target and draft reproduces (to
the float16 rounding of the stored logits), so the models, the prompts and the dump agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import otbound as ob

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
MODELS = ROOT / "data" / "models"
PROMPTS = ROOT / "data" / "prompts" / "c4_heldout.jsonl"

pytestmark = pytest.mark.skipif(
    not (SAMPLE / "manifest.json").is_file(), reason="no sample dump in data/sample"
)


@pytest.fixture(scope="module")
def sample() -> ob.dumps.Dump:
    return ob.open_dump(SAMPLE)


def test_sample_is_intact_and_within_its_limits(sample: ob.dumps.Dump) -> None:
    assert sample.check() == {}  # every shard's size and sha256 match the manifest
    assert sample.num_steps >= 300
    assert sample.topk is None  # full rows: every temperature and verifier works exactly
    size = sum(path.stat().st_size for path in SAMPLE.iterdir())
    assert size <= 20 * 1024**2


def test_single_draft_acceptance_is_in_the_realistic_band(sample: ob.dumps.Dump) -> None:
    overlaps = []
    for shard in sample:
        rows = shard.distributions(temperature=1.0)
        overlaps.append(np.minimum(rows.target, rows.draft).sum(axis=1))
    mean = float(np.concatenate(overlaps).mean())
    assert 0.3 <= mean <= 0.8, mean


@pytest.mark.parametrize("prompt_id", [0, 17, 35])
def test_rows_are_the_shipped_models_forward_pass(sample: ob.dumps.Dump, prompt_id: int) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    settings = json.loads((SAMPLE / "manifest.json").read_text())["extra"]["prompts"]
    line = PROMPTS.read_text().splitlines()[prompt_id]
    prompt = json.loads(line)["input_ids"][: settings["max_prompt_tokens"]]
    assert settings["truncation_side"] == "right"
    rows = {"target": [], "draft": []}
    metadata = []
    for shard in sample:
        keep = shard.metadata["prompt_id"].to_numpy() == prompt_id
        if keep.any():
            rows["target"].append(np.asarray(shard.target)[keep])
            rows["draft"].append(np.asarray(shard.draft)[keep])
            metadata.append(shard.metadata[keep])
    steps = pd.concat(metadata).sort_values("position")
    assert (steps["prompt_length"] == len(prompt)).all()
    sequence = prompt + steps["token"].astype(int).tolist()
    assert steps["position"].tolist() == list(range(len(prompt), len(sequence)))
    for which in ("target", "draft"):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            MODELS / which, dtype=torch.float32
        )
        with torch.no_grad():
            logits = model(torch.tensor([sequence])).logits[0].numpy()
        expected = logits[steps["position"].to_numpy() - 1]
        stored = np.concatenate(rows[which])
        # float16 storage: half a unit in the last place of values up to ~32 is 1/64.
        np.testing.assert_allclose(stored, expected, atol=0.02, rtol=2e-3, err_msg=which)
