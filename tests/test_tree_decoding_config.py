"""The settings of a tree-decoding run (``otbound.tree_decoding.TreeDecodingConfig``): validated
on construction, passed as an object or by keyword to ``run_tree_decoding`` with the same
result."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
from capture_helpers import tiny_config

from otbound.tree_decoding import TreeDecodingConfig, run_tree_decoding
from otbound.tree_decoding._config import SETTINGS, resolve_config

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="needs torch and transformers (pip install 'otbound[torch]')",
)


def test_the_settings_are_normalised_and_resolved():
    config = TreeDecodingConfig(verifiers="rrs", trees="binary:1-2", root=["draft"])
    assert config.verifiers == ("rrs",) and tuple(config.found) == ("rrs",)
    assert config.found["rrs"].design == "iid"
    assert [s.name for s in config.specs] == ["binary-1", "binary-2"] and config.families == ()
    assert config.roots == ("draft",) and config.policies is None and not config.dynamic


@pytest.mark.parametrize(
    ("settings", "dynamic"),
    [
        ({"trees": "binary:2"}, False),
        ({"trees": "beam2:2", "verifiers": "rrs_without_replacement"}, True),
        ({"trees": "binary:2", "root": ("draft", "target")}, True),
        ({"trees": "binary:2", "stopping": "fixed"}, True),
        ({"trees": "binary,beam4", "budgets": [8]}, True),
    ],
)
def test_dynamic_runs_are_recognised(settings, dynamic):
    assert TreeDecodingConfig(**settings).dynamic is dynamic


def test_budget_runs_name_families():
    config = TreeDecodingConfig(trees="binary:3,beam4,binary", budgets=[8, 16])
    assert config.families == ("binary", "beam4") and config.budgets == (8, 16)
    assert config.specs == ()


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"temperature": 0.0}, "temperature must be a finite number > 0"),
        ({"temperature": float("nan")}, "temperature must be a finite number > 0"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
        ({"batch_size": True}, "batch_size must be an integer >= 1"),
        ({"verifiers": ["nope"]}, "nope"),
        ({"root": "middle"}, "root must be one of draft, target, got middle"),
        ({"root": []}, "root must be one of"),
        ({"stopping": ""}, "stopping is empty"),
        ({"trees": []}, "trees is empty"),
        ({"trees": "", "budgets": [4]}, "trees is empty"),
        ({"trees": "beam0", "budgets": [4]}, "beam width of at least 1"),
    ],
)
def test_bad_settings_are_refused_on_construction(settings, match):
    with pytest.raises(ValueError, match=match):
        TreeDecodingConfig(**settings)


def test_keywords_replace_the_config_s_settings():
    config = TreeDecodingConfig(verifiers=("rrs",), trees="chain:2", seed=3)
    assert resolve_config(config, {}) is config
    changed = resolve_config(config, {"seed": 5, "max_new_tokens": 4})
    assert (changed.seed, changed.max_new_tokens, changed.verifiers) == (5, 4, ("rrs",))
    assert resolve_config(None, {"trees": "chain:2", "verifiers": "rrs", "seed": 3}) == config
    assert set(SETTINGS) == {
        "verifiers", "trees", "max_new_tokens", "temperature", "seed", "batch_size",
        "vocab_size", "stop_at_eos", "predict", "prediction_trials", "kv_cache", "root",
        "stopping", "budgets", "c_target", "c_draft",
    }  # fmt: skip


def test_a_keyword_that_is_no_setting_is_refused():
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*max_tokens"):
        resolve_config(None, {"max_tokens": 4})
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*max_tokens"):
        run_tree_decoding(None, None, [[1, 2]], max_tokens=4)
    with pytest.raises(ValueError, match="config must be a TreeDecodingConfig, got dict"):
        run_tree_decoding(None, None, [[1, 2]], {"trees": "chain:1"})


def _llama(seed: int, layers: int):
    import torch
    import transformers

    config = tiny_config("llama", 40, layers, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


@needs_torch
def test_a_config_object_runs_as_its_keywords():
    models = (_llama(0, 2), _llama(1, 1))
    prompts = [[3, 4, 5], [3, 4, 6]]
    settings = {
        "verifiers": ("rrs", "rrs_without_replacement"),
        "trees": "binary:1-2",
        "max_new_tokens": 4,
        "batch_size": 2,
        "prediction_trials": 50,
        "seed": 7,
    }
    by_keyword = run_tree_decoding(*models, prompts, **settings)
    by_config = run_tree_decoding(*models, prompts, TreeDecodingConfig(**settings))
    pd.testing.assert_frame_equal(by_config.steps, by_keyword.steps)
    pd.testing.assert_frame_equal(by_config.continuations, by_keyword.continuations)
    other_seed = run_tree_decoding(*models, prompts, TreeDecodingConfig(**settings), seed=8)
    assert other_seed.seed == 8 and not other_seed.steps.equals(by_keyword.steps)
