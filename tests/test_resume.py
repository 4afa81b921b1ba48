"""otbound.resume: fingerprints (same settings, same key; any change, another), the record on
disk, the comparison and its one-line refusal, as the three commands use them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from dump_factory import write_dump

import otbound as ob
from otbound._files import write_json
from otbound.resume import (
    Change,
    ResumeMismatch,
    canonical_json,
    compare_settings,
    describe_changes,
    fingerprint,
    flatten,
    lookup,
    read_record,
)

SETTINGS = {
    "seed": 0,
    "temperature": 1.0,
    "n": [2, 3],
    "target": {"class": "M", "config": "ab" * 32},
    "otbound": "1.2.3",
}


def test_same_settings_same_fingerprint() -> None:
    again = json.loads(json.dumps(dict(reversed(list(SETTINGS.items())))))  # another key order
    assert fingerprint(SETTINGS) == fingerprint(again)
    assert len(fingerprint(SETTINGS)) == 16 and len(fingerprint(SETTINGS, None)) == 64
    assert fingerprint(SETTINGS, None).startswith(fingerprint(SETTINGS))


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 1},
        {"temperature": 0.7},
        {"temperature": 1},  # an int is another setting than a float (as in the canonical text)
        {"n": [3, 2]},
        {"target": {"class": "M", "config": "ab" * 31 + "ac"}},
        {"otbound": "1.2.4"},  # the version
        {"extra": 0},  # a new entry
    ],
)
def test_any_changed_setting_or_version_changes_the_fingerprint(change) -> None:
    other = {**SETTINGS, **change}
    assert fingerprint(other) != fingerprint(SETTINGS)
    assert compare_settings(SETTINGS, other)  # and the comparison sees it


def test_fingerprints_keep_their_bytes() -> None:
    """The legacy formulas of the three commands (run keys, settings.json and prompts hashes
    stay what earlier runs wrote)."""
    from otbound.analysis import AnalysisConfig

    config = AnalysisConfig(n=(2,), designs=("iid",), verifiers=("rrs",))
    text = json.dumps(config.to_dict(), sort_keys=True)
    assert config.fingerprint() == hashlib.sha256(text.encode()).hexdigest()[:16]
    key = ["0123456789abcdef", config.to_dict(), "1.2.3"]
    text = json.dumps(key, sort_keys=True)
    assert fingerprint(key) == hashlib.sha256(text.encode()).hexdigest()[:16]
    prompts = [[0, [3, 4, 5]], [1, [3, 4, 6]]]
    text = json.dumps(prompts, sort_keys=True, default=str)
    assert fingerprint(prompts, None) == hashlib.sha256(text.encode()).hexdigest()
    assert canonical_json({"b": Path("x"), "a": 1}) == '{"a": 1, "b": "x"}'


def test_flatten_lookup_and_describe() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": None}}, "e": [1]}) == {
        "a.b": 1,
        "a.c.d": None,
        "e": [1],
    }
    assert lookup({"a": {"b": 1}}, "a.b") == 1 and lookup({"a": 1}, "a.b") is None
    before = {**SETTINGS, "seed": 0}
    now = {**SETTINGS, "seed": 1, "target": {"class": "M", "config": "cd" * 32}}
    assert compare_settings(before, now) == [
        Change("seed", 0, 1),
        Change("target.config", "ab" * 32, "cd" * 32),
    ]
    assert describe_changes(before, now) == (
        'seed: 0 then, 1 now; target.config: "abababababab..." then, "cdcdcdcdcdcd..." now'
    )


def test_compare_named_keys_with_defaults_of_older_records() -> None:
    old = {"generation": {"seed": 0, "top_p": 1.0}, "prompts": {"sha256": "ab"}}
    new = {**old, "prompts": {"sha256": "ab", "chat_template": False}}
    keys = ("generation", "prompts.sha256", "prompts.chat_template")
    assert compare_settings(old, new, keys, {"prompts.chat_template": False}) == []
    changed = compare_settings(old, {**new, "generation": {"seed": 1, "top_p": 1.0}}, keys)
    assert [c.key for c in changed] == ["generation", "prompts.chat_template"]


def test_read_record(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    assert read_record(path) is None
    write_json(path, {"fingerprint": fingerprint(SETTINGS), "settings": SETTINGS})
    assert read_record(path) == {"fingerprint": fingerprint(SETTINGS), "settings": SETTINGS}
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot resume: .*run\.json is unreadable"):
        read_record(path)


def test_mismatch_is_one_readable_line(tmp_path: Path) -> None:
    exc = ResumeMismatch(tmp_path, describe_changes({"seed": 0}, {"seed": 1}))
    assert str(exc) == (
        f"cannot resume from {tmp_path}: it holds a run with other settings "
        "(seed: 0 then, 1 now); empty it or choose another directory"
    )
    assert isinstance(exc, ValueError) and exc.directory == tmp_path


# -- the three commands refuse a mismatched run with a ResumeMismatch -------------------------


def test_analysis_refuses_a_mismatched_run(tmp_path: Path) -> None:
    from otbound.analysis import AnalysisConfig, run_analysis
    from otbound.analysis._runner import ROWS_FORMAT

    path = tmp_path / "dump"
    write_dump(path, shards=(6,))
    dump, out = ob.open_dump(path), tmp_path / "out"
    small = {"n": (2,), "designs": ("iid",), "verifiers": ("rrs",)}
    options = {"progress": False, "figures": False}
    first = run_analysis(dump, AnalysisConfig(**small), out, **options)
    record = json.loads((out / "run.json").read_text())
    key = [record["dump_fingerprint"], record["config"], record["otbound"], ROWS_FORMAT]
    assert first.ok and record["run_key"] == fingerprint(key)
    again = run_analysis(dump, AnalysisConfig(**small), out, resume=True, **options)
    assert again.resumed == 1
    # the shards of a run whose tables had another format are redone, not mixed in
    record["run_key"] = fingerprint([*key[:3], ROWS_FORMAT - 1])
    (out / "run.json").write_text(json.dumps(record))
    for marker in (out / "shards").glob("*.json"):
        kept = json.loads(marker.read_text())
        marker.write_text(json.dumps({**kept, "run_key": record["run_key"]}))
    redone = run_analysis(dump, AnalysisConfig(**small), out, resume=True, **options)
    assert redone.ok and redone.resumed == 0
    with pytest.raises(ResumeMismatch) as info:
        run_analysis(dump, AnalysisConfig(**small, seed=3), out, resume=True, **options)
    assert str(info.value) == (
        f"cannot resume: the settings differ from the run in {out} (seed: 0 then, 3 now)"
    )
    assert info.value.changes == "seed: 0 then, 3 now" and info.value.directory == out


def test_tree_checkpoints_refuse_a_mismatched_run(tmp_path: Path) -> None:
    from otbound.tree_decoding import CheckpointMismatch, PartStore

    settings = {"seed": 0, "temperature": np.float64(1.0), "prompts": {"sha256": "ab" * 32}}
    store = PartStore(tmp_path, settings)
    saved = read_record(tmp_path / "settings.json")
    assert saved == {"fingerprint": store.fingerprint, "settings": store.settings}
    assert store.fingerprint == fingerprint({**settings, "temperature": 1.0})
    assert PartStore(tmp_path, settings).fingerprint == store.fingerprint  # resumed
    with pytest.raises(CheckpointMismatch, match=r"temperature: 1\.0 then, 0\.7 now") as info:
        PartStore(tmp_path, {**settings, "temperature": 0.7})
    assert isinstance(info.value, ResumeMismatch) and "\n" not in str(info.value)


def test_capture_refuses_a_mismatched_dump(tmp_path: Path) -> None:
    capture = pytest.importorskip("otbound.capture")
    prompts = {"sha256": "ab", "chat_template": False}
    extra = {"capture_version": 1, "generation": {"seed": 0}, "prompts": prompts}
    capture.check_resumable({"extra": extra}, extra, tmp_path)
    now = {**extra, "generation": {"seed": 1}}
    with pytest.raises(capture.ResumeRefused) as info:
        capture.check_resumable({"extra": extra}, now, tmp_path)
    assert isinstance(info.value, capture.CaptureError) and isinstance(info.value, ResumeMismatch)
    assert str(info.value) == (
        f'cannot resume {tmp_path}: generation is {{"seed": 1}} but the dump was written with '
        '{"seed": 0}'
    )
