"""otbound.dumps: the dump format, single files, processing of p and q, and top-k intervals."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import types
from pathlib import Path

import numpy as np
import oracles
import pytest
from scipy.special import softmax as scipy_softmax

import otbound as ob
import otbound.analysis as oa
import otbound.dumps as od
from otbound.dumps import _writer
from otbound.dumps._safetensors import (
    SafetensorsFile,
    float32_to_bf16_bits,
    write_safetensors,
)
from otbound.dumps.readers import directory as _reader

V = 11


def _logits(rng: np.random.Generator, steps: int, vocab: int = V) -> np.ndarray:
    return (rng.normal(size=(steps, vocab)) * 3).astype(np.float32)


def _write_dump(
    path: Path, shards: int = 3, steps: int = 5, dtype: str = "float32", seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray, dict]]:
    rng = np.random.default_rng(seed)
    written = []
    with od.DumpWriter(path, target_model="t", draft_model="d", dtype=dtype) as writer:
        for s in range(shards):
            target, draft = _logits(rng, steps), _logits(rng, steps)
            meta = {
                "prompt_id": np.full(steps, s),
                "position": np.arange(steps),
                "token": rng.integers(0, V, size=steps),
            }
            writer.write_shard(target, draft, meta)
            written.append((target, draft, meta))
    return written


def _files(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


# --------------------------------------------------------------------------------------------
# the safetensors reader and writer against the official library


def test_own_safetensors_io_matches_the_official_library(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(1)
    tensors = {
        "a": rng.normal(size=(3, 4)).astype(np.float32),
        "b": rng.integers(0, 100, size=(5,)).astype(np.int64),
        "c": rng.normal(size=(2, 2)).astype(np.float16),
        "empty": np.zeros((0, 3), dtype=np.float64),
    }
    ours = tmp_path / "ours.safetensors"
    with open(ours, "wb") as f:
        write_safetensors(f, tensors, metadata={"k": "v"})
    theirs = st.load_file(str(ours))
    assert sorted(theirs) == sorted(tensors)
    for key, value in tensors.items():
        np.testing.assert_array_equal(theirs[key], value)
    official = tmp_path / "official.safetensors"
    st.save_file(tensors, str(official), metadata={"x": "y"})
    parsed = SafetensorsFile(official)
    assert parsed.keys() == sorted(tensors) and parsed.metadata == {"x": "y"}
    for key, value in tensors.items():
        got = parsed.array(key)
        assert got.dtype == value.dtype
        np.testing.assert_array_equal(got, value)


def _bf16_file(path: Path, values: np.ndarray, name: str = "target_logits") -> None:
    """A safetensors file with one BF16 tensor, as torch writes it (built by hand)."""
    bits = float32_to_bf16_bits(values)
    header = {
        name: {"dtype": "BF16", "shape": list(values.shape), "data_offsets": [0, bits.nbytes]}
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bits.astype("<u2").tobytes())


def test_bf16_tensors_are_read_as_float32(tmp_path: Path) -> None:
    values = np.array([[1.0, -2.5, 0.15625, 3.0e38], [-np.inf, 0.0, 96.0, -1e-3]], np.float32)
    path = tmp_path / "bf16.safetensors"
    _bf16_file(path, values)
    got = SafetensorsFile(path).array("target_logits")
    assert got.dtype == np.float32
    exact = np.abs(values) != np.float32(1e-3)  # 1e-3 and 3e38 are not bf16 numbers
    exact &= values != np.float32(3.0e38)
    np.testing.assert_array_equal(got[exact], values[exact])
    assert abs(got[1, 3] + 1e-3) <= 2**-8 * 1e-3


def test_bf16_rounding_is_to_nearest_even() -> None:
    rng = np.random.default_rng(2)
    u = rng.integers(0x00800000, 0x7F000000, size=20000, dtype=np.uint32)  # finite normals
    u[::4] = (u[::4] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)  # exact ties
    u[1::2] |= np.uint32(0x80000000)  # negatives
    x = u.view(np.float32)
    # the two bfloat16 neighbours of x (towards and away from zero), compared in float64
    near_bits = u & np.uint32(0xFFFF0000)
    far_bits = near_bits + np.uint32(0x10000)
    d_near = np.abs(x.astype(np.float64) - near_bits.view(np.float32).astype(np.float64))
    d_far = np.abs(far_bits.view(np.float32).astype(np.float64) - x.astype(np.float64))
    even = ((near_bits >> np.uint32(16)) & np.uint32(1)) == 0
    expected = np.where(
        d_near < d_far,
        near_bits,
        np.where(d_far < d_near, far_bits, np.where(even, near_bits, far_bits)),
    )
    np.testing.assert_array_equal(
        float32_to_bf16_bits(x), (expected >> np.uint32(16)).astype(np.uint16)
    )
    assert np.sum(d_near == d_far) > 1000  # the ties were exercised
    special = np.array([np.nan, np.inf, -np.inf, -0.0], np.float32)
    back = (float32_to_bf16_bits(special).astype(np.uint32) << 16).view(np.float32)
    assert np.isnan(back[0]) and back[1] == np.inf and back[2] == -np.inf
    assert back[3] == 0 and np.signbit(back[3])


# --------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_full_round_trip(tmp_path: Path, dtype: str) -> None:
    written = _write_dump(tmp_path / "d", dtype=dtype)
    dump = od.open_dump(tmp_path / "d")
    assert dump.num_steps == 15 and len(dump.shards) == 3 and dump.vocab_size == V
    assert dump.dtype == dtype and dump.topk is None
    manifest = dump.manifest
    assert manifest["format_version"] == od.FORMAT_VERSION == 1
    assert manifest["target_model"] == "t" and manifest["storage"] == "full"
    assert [s["id"] for s in manifest["shards"]] == ["shard-00000", "shard-00001", "shard-00002"]
    for shard, (target, draft, meta) in zip(dump, written, strict=True):
        if dtype == "float16":
            expect_t, expect_d = (x.astype(np.float16).astype(np.float32) for x in (target, draft))
        elif dtype == "bfloat16":
            expect_t, expect_d = (
                (float32_to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
                for x in (target, draft)
            )
            assert np.max(np.abs(expect_t - target)) <= 2**-8 * np.max(np.abs(target))
            assert not np.array_equal(expect_t, target)  # rounding did happen
        else:
            expect_t, expect_d = target, draft
        assert shard.target.dtype == (np.float64 if dtype == "float64" else np.float32)
        np.testing.assert_array_equal(shard.target, expect_t)
        np.testing.assert_array_equal(shard.draft, expect_d)
        assert list(shard.metadata.columns[:4]) == ["step", "prompt_id", "position", "token"]
        np.testing.assert_array_equal(shard.metadata["step"], shard.step)
        np.testing.assert_array_equal(shard.metadata["token"], meta["token"])
        np.testing.assert_array_equal(shard.metadata["prompt_id"], meta["prompt_id"])
    assert [s.start for s in dump.shards] == [0, 5, 10]


def test_bfloat16_bits_are_accepted_as_they_are(tmp_path: Path) -> None:
    values = np.array([[1.0, 2.0, -0.5]], np.float32)
    bits = float32_to_bf16_bits(values)
    with od.DumpWriter(tmp_path / "d", dtype="bfloat16") as writer:
        writer.write_shard(bits, bits)
    np.testing.assert_array_equal(od.open_dump(tmp_path / "d").read_shard(0).target, values)


def test_topk_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    full_t, full_d = _logits(rng, 6), _logits(rng, 6)
    rows_t, rows_d = od.TopKRows.from_logits(full_t, 4), od.TopKRows.from_logits(full_d, 4)
    with od.DumpWriter(tmp_path / "d", storage="topk:4", vocab_size=V) as writer:
        writer.write(rows_t, rows_d, {"token": np.arange(6)}, shard_steps=4)
    dump = od.open_dump(tmp_path / "d")
    assert dump.topk == 4 and [s.num_steps for s in dump.shards] == [4, 2]
    assert dump.values == ("topk", "topk")
    got = [dump.read_shard(i) for i in range(2)]
    assert all(s.is_topk and s.values == ("topk", "topk") for s in got)
    for side, rows in (("target", rows_t), ("draft", rows_d)):
        ids = np.concatenate([getattr(s, side).ids for s in got])
        np.testing.assert_array_equal(ids, rows.ids)
        logits = np.concatenate([getattr(s, side).logits for s in got])
        np.testing.assert_array_equal(logits, rows.logits.astype(np.float32))
        lse = np.concatenate([getattr(s, side).logsumexp for s in got])
        np.testing.assert_array_equal(lse, rows.logsumexp)
        assert getattr(got[0], side).vocab_size == V
    # the stored logsumexp is the full row's, so the tail mass is known
    expected_tail = 1.0 - np.sort(scipy_softmax(full_t.astype(np.float64), axis=1))[:, -4:].sum(1)
    np.testing.assert_allclose(rows_t.tail_mass(), expected_tail, atol=1e-12)
    with pytest.raises(od.DumpError, match="top-k rows"):
        got[0].distributions()


def test_topk_rows_from_logits_order_and_ties() -> None:
    rows = od.TopKRows.from_logits([[1.0, 3.0, 3.0, 0.0, -np.inf], [0.0, 1.0, 2.0, 3.0, 4.0]], 3)
    assert rows.ids.tolist() == [[1, 2, 0], [4, 3, 2]]
    assert rows.logits.tolist() == [[3.0, 3.0, 1.0], [4.0, 3.0, 2.0]]
    expected = [np.log(np.exp([1, 3, 3, 0]).sum()), np.log(np.exp(np.arange(5.0)).sum())]
    np.testing.assert_allclose(rows.logsumexp, expected, rtol=1e-14)
    with pytest.raises(od.DumpError, match="NaN"):
        od.TopKRows.from_logits([[np.nan, 1.0]], 1)


def test_topk_storage_refuses_16_bit_and_missing_vocab(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="float32 or float64"):
        od.DumpWriter(tmp_path / "a", storage="topk:4", vocab_size=V, dtype="float16")
    with pytest.raises(ValueError, match="vocab_size"):
        od.DumpWriter(tmp_path / "b", storage="topk:4")


def test_safetensors_shards_are_readable_by_the_official_library(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    written = _write_dump(tmp_path / "d", shards=1, dtype="bfloat16")
    arrays = st.load_file(str(tmp_path / "d" / "shard-00000.safetensors"))
    np.testing.assert_array_equal(arrays["target_logits"], float32_to_bf16_bits(written[0][0]))


# --------------------------------------------------------------------------------------------
# laziness, resume, atomic writes


def test_open_reads_no_shard_and_iteration_loads_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_dump(tmp_path / "d", shards=3)
    opened: list[str] = []
    real = _reader.SafetensorsFile

    def spy(path: Path) -> SafetensorsFile:
        opened.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(_reader, "SafetensorsFile", spy)
    dump = od.open_dump(tmp_path / "d")
    assert opened == []
    (tmp_path / "d" / "shard-00002.safetensors").unlink()  # only reading it can notice
    shards = iter(dump)
    first = next(shards)
    assert opened == ["shard-00000.safetensors"] and first.shard.id == "shard-00000"
    assert next(shards).step.tolist() == [5, 6, 7, 8, 9]
    assert opened == ["shard-00000.safetensors", "shard-00001.safetensors"]
    with pytest.raises(od.DumpError, match=r"shard-00002\.safetensors: the file is missing"):
        next(shards)
    assert dump.read_shard("shard-00001").shard.index == 1
    problems = dump.check()
    assert list(problems) == ["shard-00002"]


def test_dump_is_picklable(tmp_path: Path) -> None:
    import pickle

    _write_dump(tmp_path / "d", shards=2)
    dump = pickle.loads(pickle.dumps(od.open_dump(tmp_path / "d")))
    assert dump.read_shard(1).num_steps == 5


def test_resume_appends_shards(tmp_path: Path) -> None:
    first = _write_dump(tmp_path / "d", shards=2, seed=1)
    with pytest.raises(FileExistsError, match="resume=True"):
        od.DumpWriter(tmp_path / "d")
    with pytest.raises(ValueError, match="dtype='float16'"):
        od.DumpWriter(tmp_path / "d", resume=True, dtype="float16")
    rng = np.random.default_rng(9)
    extra_t, extra_d = _logits(rng, 4), _logits(rng, 4)
    with od.DumpWriter(tmp_path / "d", resume=True, target_model="t") as writer:
        assert [s.id for s in writer.shards] == ["shard-00000", "shard-00001"]
        info = writer.write_shard(extra_t, extra_d)
    assert info.id == "shard-00002" and info.start == 10
    dump = od.open_dump(tmp_path / "d")
    assert dump.num_steps == 14 and [s.id for s in dump.shards][-1] == "shard-00002"
    np.testing.assert_array_equal(dump.read_shard(0).target, first[0][0])
    last = dump.read_shard(2)
    np.testing.assert_array_equal(last.draft, extra_d)
    assert last.step.tolist() == [10, 11, 12, 13]
    assert last.metadata["prompt_id"].isna().all()


def test_resume_removes_leftover_temporaries_and_overwrites_orphans(tmp_path: Path) -> None:
    _write_dump(tmp_path / "d", shards=1)
    leftover = tmp_path / "d" / ".shard-00001.safetensors.tmp-123-0badc0de"
    leftover.write_bytes(b"partial")
    orphan = tmp_path / "d" / "shard-00001.safetensors"  # complete, but never listed
    orphan.write_bytes(b"old")
    with od.DumpWriter(tmp_path / "d", resume=True) as writer:
        writer.write_shard(np.zeros((2, V)), np.zeros((2, V)))
    assert not leftover.exists()
    assert od.open_dump(tmp_path / "d").read_shard(1).num_steps == 2


def test_a_failing_shard_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_dump(tmp_path / "d", shards=1)
    writer = od.DumpWriter(tmp_path / "d", resume=True)
    before_files = _files(tmp_path / "d")
    before_manifest = (tmp_path / "d" / "manifest.json").read_bytes()

    def dies_mid_way(f, tensors, metadata=None) -> None:
        f.write(b"x" * 1000)  # some bytes reach the disk, then the process "fails"
        raise OSError("disk full")

    monkeypatch.setattr(_writer, "write_safetensors", dies_mid_way)
    with pytest.raises(OSError, match="disk full"):
        writer.write_shard(np.zeros((2, V)), np.zeros((2, V)))
    assert _files(tmp_path / "d") == before_files
    assert (tmp_path / "d" / "manifest.json").read_bytes() == before_manifest
    assert od.open_dump(tmp_path / "d").num_steps == 5
    monkeypatch.undo()
    writer.write_shard(np.zeros((2, V)), np.zeros((2, V)))  # the writer is still usable
    assert od.open_dump(tmp_path / "d").num_steps == 7


def test_a_failing_manifest_update_removes_the_new_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_dump(tmp_path / "d", shards=1)
    writer = od.DumpWriter(tmp_path / "d", resume=True)
    before_files = _files(tmp_path / "d")
    before_manifest = (tmp_path / "d" / "manifest.json").read_bytes()

    def fails() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_write_manifest", fails)
    with pytest.raises(KeyboardInterrupt):
        writer.write_shard(np.zeros((2, V)), np.zeros((2, V)))
    assert _files(tmp_path / "d") == before_files
    assert (tmp_path / "d" / "manifest.json").read_bytes() == before_manifest
    assert writer.num_steps == 5


# --------------------------------------------------------------------------------------------
# damaged dumps


def test_truncated_shard_names_the_file(tmp_path: Path) -> None:
    _write_dump(tmp_path / "d", shards=2)
    path = tmp_path / "d" / "shard-00001.safetensors"
    path.write_bytes(path.read_bytes()[:-7])
    dump = od.open_dump(tmp_path / "d")
    dump.read_shard(0)  # the sound shard still reads
    with pytest.raises(od.DumpError, match=r"shard-00001\.safetensors: .*truncated"):
        dump.read_shard(1)


def test_truncated_single_safetensors_file_is_caught_by_the_parser(tmp_path: Path) -> None:
    path = tmp_path / "run.safetensors"
    with open(path, "wb") as f:
        write_safetensors(f, {"target_logits": np.zeros((4, V)), "draft_logits": np.zeros((4, V))})
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(od.DumpError, match=r"run\.safetensors: .*truncated"):
        od.open_dump(path)


def test_trailing_bytes_after_a_safetensors_file_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "run.safetensors"
    with open(path, "wb") as f:
        write_safetensors(f, {"target_logits": np.zeros((4, V)), "draft_logits": np.zeros((4, V))})
    path.write_bytes(path.read_bytes() + b"\0" * 8)
    with pytest.raises(od.DumpError, match=r"run\.safetensors: .*not fully covered"):
        od.open_dump(path)


def test_corrupted_byte_fails_the_checksum(tmp_path: Path) -> None:
    _write_dump(tmp_path / "d", shards=2)
    path = tmp_path / "d" / "shard-00000.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # inside the tensor data: the file still parses
    path.write_bytes(bytes(data))
    with pytest.raises(od.DumpError, match=r"shard-00000\.safetensors: sha256 checksum mismatch"):
        od.open_dump(tmp_path / "d").read_shard(0)
    od.open_dump(tmp_path / "d", verify=False).read_shard(0)  # only the checksum notices
    od.open_dump(tmp_path / "d").read_shard(1)


def test_corrupted_metadata_table_is_reported(tmp_path: Path) -> None:
    _write_dump(tmp_path / "d", shards=1)
    path = tmp_path / "d" / "shard-00000.parquet"
    path.write_bytes(b"\0" * path.stat().st_size)
    with pytest.raises(od.DumpError, match=r"shard-00000\.parquet: sha256"):
        od.open_dump(tmp_path / "d").read_shard(0)
    with pytest.raises(od.DumpError, match=r"shard-00000\.parquet: cannot read"):
        od.open_dump(tmp_path / "d", verify=False).read_shard(0)


def _replace_shard(dump_dir: Path, tensors: dict[str, np.ndarray]) -> None:
    """Overwrite shard 0 with other arrays and fix its size and checksum in the manifest."""
    path = dump_dir / "shard-00000.safetensors"
    with open(path, "wb") as f:
        write_safetensors(f, tensors)
    manifest = json.loads((dump_dir / "manifest.json").read_text())
    manifest["shards"][0]["size"] = path.stat().st_size
    manifest["shards"][0]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (dump_dir / "manifest.json").write_text(json.dumps(manifest))


def test_wrong_keys_list_the_keys_found(tmp_path: Path) -> None:
    _write_dump(tmp_path / "d", shards=1)
    _replace_shard(tmp_path / "d", {"logits_a": np.zeros((5, V), np.float32), "b": np.zeros(3)})
    with pytest.raises(
        od.DumpError,
        match=r"missing array\(s\) target_logits, draft_logits; "
        r"arrays found: b, logits_a",
    ):
        od.open_dump(tmp_path / "d").read_shard(0)


def test_wrong_shape_or_dtype_is_reported(tmp_path: Path) -> None:
    _write_dump(tmp_path / "d", shards=1)
    _replace_shard(
        tmp_path / "d",
        {"target_logits": np.zeros((5, V), np.float64), "draft_logits": np.zeros((5, V))},
    )
    with pytest.raises(od.DumpError, match=r"target_logits is F64 \[5, 11\].*F32 \[5, 11\]"):
        od.open_dump(tmp_path / "d").read_shard(0)


def test_bad_manifests(tmp_path: Path) -> None:
    _write_dump(tmp_path / "d", shards=1)
    manifest_path = tmp_path / "d" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "format_version": 2}))
    with pytest.raises(od.DumpError, match="newer otbound"):
        od.open_dump(tmp_path / "d")
    manifest_path.write_text(json.dumps({k: v for k, v in manifest.items() if k != "dtype"}))
    with pytest.raises(od.DumpError, match=r"missing field.*dtype; fields found: "):
        od.open_dump(tmp_path / "d")
    bad_shard = {**manifest["shards"][0], "file": "../elsewhere.safetensors"}
    manifest_path.write_text(json.dumps({**manifest, "shards": [bad_shard]}))
    with pytest.raises(od.DumpError, match="not a plain file name"):
        od.open_dump(tmp_path / "d")
    manifest_path.write_text("{not json")
    with pytest.raises(od.DumpError, match=r"manifest.json: cannot read the manifest"):
        od.open_dump(tmp_path / "d")
    with pytest.raises(FileNotFoundError, match="no dump at"):
        od.open_dump(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(od.DumpError, match="not an otbound dump"):
        od.open_dump(tmp_path / "empty")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(od.DumpError, match=r"unsupported file type '.txt'"):
        od.open_dump(tmp_path / "x.txt")


# --------------------------------------------------------------------------------------------
# bad steps and vocabularies


def test_nan_logits_name_the_global_steps_and_can_be_skipped(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    with od.DumpWriter(tmp_path / "d") as writer:
        writer.write_shard(_logits(rng, 5), _logits(rng, 5))
        target, draft = _logits(rng, 6), _logits(rng, 6)
        target[1, 3] = np.nan
        draft[4, 0] = np.inf
        draft[5, :] = -np.inf  # every token masked
        writer.write_shard(target, draft)
    shard = od.open_dump(tmp_path / "d").read_shard(1)
    with pytest.raises(od.DumpError, match=r"target at 1 step: 6; draft at 2 steps: 9, 10 "):
        shard.distributions()
    result = shard.distributions(skip_bad_steps=True)
    assert result.skipped.tolist() == [6, 9, 10] and result.step.tolist() == [5, 7, 8]
    assert result.kept.tolist() == [True, False, True, True, False, False]
    np.testing.assert_allclose(result.target, scipy_softmax(target[[0, 2, 3]].astype(float), 1))
    interval = shard.acceptance_interval(2, skip_bad_steps=True)
    assert interval.step.tolist() == [5, 7, 8] and interval.skipped.tolist() == [6, 9, 10]
    with pytest.raises(od.DumpError, match=r"at 1 step: 6 \(global step ids\)"):
        od.to_probabilities(target, step_ids=shard.step)


def test_error_lists_at_most_ten_steps() -> None:
    rows = np.full((30, 3), np.nan)
    with pytest.raises(od.DumpError, match=r"30 steps: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 20 more"):
        od.to_probabilities(rows)


def test_vocabulary_mismatch_errors_or_truncates_with_a_warning() -> None:
    rng = np.random.default_rng(5)
    target, draft = _logits(rng, 4, 12), _logits(rng, 4, 15)
    with pytest.raises(od.DumpError, match=r"12 and 15 tokens; pass truncate_vocab=True"):
        od.prepare_distributions(target, draft)
    with pytest.warns(UserWarning, match=r"cutting the draft model's last 3 token\(s\)"):
        result = od.prepare_distributions(target, draft, truncate_vocab=True)
    assert result.vocab_size == 12 and result.draft.shape == (4, 12)
    np.testing.assert_allclose(result.draft, scipy_softmax(draft[:, :12].astype(float), axis=1))
    np.testing.assert_allclose(result.target, scipy_softmax(target.astype(float), axis=1))


def test_vocabulary_mismatch_in_a_dump(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    with od.DumpWriter(tmp_path / "d") as writer:
        writer.write_shard(_logits(rng, 3, 10), _logits(rng, 3, 13))
    dump = od.open_dump(tmp_path / "d")
    assert (dump.target_vocab_size, dump.draft_vocab_size, dump.vocab_size) == (10, 13, 10)
    shard = dump.read_shard(0)
    with pytest.raises(od.DumpError, match="vocabularies differ"):
        shard.acceptance_interval(2)
    with pytest.warns(UserWarning, match="cutting"):
        assert shard.acceptance_interval(2, truncate_vocab=True).lower.shape == (3,)


# --------------------------------------------------------------------------------------------
# single files


def _pair(rng: np.random.Generator, steps: int = 7) -> tuple[np.ndarray, np.ndarray]:
    return _logits(rng, steps), _logits(rng, steps)


def _check_single(dump: od.Dump, target: np.ndarray, draft: np.ndarray) -> od.ShardData:
    assert dump.num_steps == len(target) and len(dump.shards) == 1
    shard = dump.read_shard(0)
    np.testing.assert_array_equal(shard.target, target)
    np.testing.assert_array_equal(shard.draft, draft)
    return shard


def test_single_npz_safetensors_and_npy(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    target, draft = _pair(rng)
    np.savez(tmp_path / "a.npz", target_logits=target, draft_logits=draft, token=np.arange(7))
    shard = _check_single(od.open_dump(tmp_path / "a.npz"), target, draft)
    assert shard.values == ("logits", "logits")
    assert shard.metadata["token"].tolist() == list(range(7))
    assert od.open_dump(tmp_path / "a.npz").source == "npz"
    with open(tmp_path / "b.safetensors", "wb") as f:
        write_safetensors(f, {"target_logits": target, "draft_logits": draft})
    shard = _check_single(od.open_dump(tmp_path / "b.safetensors"), target, draft)
    assert isinstance(shard.target, np.memmap)
    np.save(tmp_path / "c.npy", np.stack([target, draft]))
    shard = _check_single(od.open_dump(tmp_path / "c.npy"), target, draft)
    assert isinstance(shard.target, np.memmap)  # large .npy files are memory-mapped
    np.testing.assert_allclose(
        shard.distributions().draft, scipy_softmax(draft.astype(float), axis=1)
    )


def test_single_bf16_safetensors_from_torch(tmp_path: Path) -> None:
    values = np.array([[1.0, 2.0, 4.0], [0.5, 0.25, -1.0]], np.float32)
    path = tmp_path / "bf.safetensors"
    bits = float32_to_bf16_bits(values).astype("<u2").tobytes()
    header = {
        "draft_logits": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
        "target_logits": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [12, 24]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bits + bits)
    _check_single(od.open_dump(path), values, values)


def test_single_file_probabilities_and_named_keys(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    p, q = rng.dirichlet(np.ones(V), size=5), rng.dirichlet(np.ones(V), size=5)
    np.savez(tmp_path / "probs.npz", target_probs=p, draft_probs=q)
    shard = od.open_dump(tmp_path / "probs.npz").read_shard(0)
    assert shard.values == ("probs", "probs")
    result = shard.distributions()
    np.testing.assert_allclose(result.target, p, rtol=1e-12)
    tempered = shard.distributions(temperature=0.5)
    np.testing.assert_allclose(tempered.draft, q**2 / (q**2).sum(1, keepdims=True), rtol=1e-10)
    np.savez(tmp_path / "named.npz", big=p, small=np.log(q))
    with pytest.raises(od.DumpError, match="big holds probabilities, not logits"):
        od.open_dump(tmp_path / "named.npz", target_key="big", draft_key="small", probs=None)
    dump = od.open_dump(tmp_path / "named.npz", target_key="big", draft_key="small", probs=True)
    assert dump.values == ("probs", "probs")
    np.savez(tmp_path / "mixed.npz", p_probs=p, q_logits=np.log(q))
    shard = od.open_dump(tmp_path / "mixed.npz", target_key="p_probs", draft_key="q_logits")
    result = shard.read_shard(0).distributions()
    np.testing.assert_allclose(result.target, p, rtol=1e-12)
    np.testing.assert_allclose(result.draft, q, rtol=1e-12)


def test_single_file_wrong_keys_list_the_keys_found(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", alpha=np.zeros((2, 3)), beta=np.zeros((2, 3)))
    with pytest.raises(
        od.DumpError,
        match=r"no target_logits or target_probs array; arrays "
        r"found: alpha, beta; name the arrays",
    ):
        od.open_dump(tmp_path / "x.npz")
    with pytest.raises(
        od.DumpError,
        match=r"no array named 'gamma' for the draft; arrays found: "
        r"alpha, beta",
    ):
        od.open_dump(tmp_path / "x.npz", target_key="alpha", draft_key="gamma")


def test_single_file_shape_errors(tmp_path: Path) -> None:
    np.save(tmp_path / "bad.npy", np.zeros((3, 4, 5)))
    with pytest.raises(od.DumpError, match=r"shape \(2, steps, V\).*got \[3, 4, 5\]"):
        od.open_dump(tmp_path / "bad.npy")
    np.savez(tmp_path / "steps.npz", target_logits=np.zeros((3, 4)), draft_logits=np.zeros((2, 4)))
    with pytest.raises(od.DumpError, match="holds 3 steps but draft_logits holds 2"):
        od.open_dump(tmp_path / "steps.npz")
    np.savez(
        tmp_path / "int.npz", target_logits=np.zeros((3, 4), int), draft_logits=np.zeros((3, 4))
    )
    with pytest.raises(od.DumpError, match="expected floating point"):
        od.open_dump(tmp_path / "int.npz")


def test_single_file_split_into_shards(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    target, draft = _pair(rng, steps=10)
    np.save(tmp_path / "c.npy", np.stack([target, draft]))
    dump = od.open_dump(tmp_path / "c.npy", shard_steps=4)
    assert [s.num_steps for s in dump.shards] == [4, 4, 2]
    assert len({s.id for s in dump.shards}) == 3
    np.testing.assert_array_equal(np.concatenate([s.target for s in dump]), target)
    assert dump.read_shard(2).step.tolist() == [8, 9]


def test_pt_without_torch_says_to_install_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "x.pt").write_bytes(b"not really")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(od.DumpError, match=r"needs torch: pip install 'otbound\[torch\]'"):
        od.open_dump(tmp_path / "x.pt")


def test_pt_loads_with_weights_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The .pt path with a stand-in torch module: weights_only=True, tensors to numpy."""
    target = np.arange(6, dtype=np.float32).reshape(2, 3)
    calls = []

    class Tensor:
        def __init__(self, value: np.ndarray) -> None:
            self.value, self.dtype = value, "half"

        def detach(self) -> Tensor:
            return self

        def cpu(self) -> Tensor:
            return self

        def float(self) -> Tensor:
            out = Tensor(self.value.astype(np.float32))
            out.dtype = "float"
            return out

        def numpy(self) -> np.ndarray:
            assert self.dtype == "float", "half tensors must be upcast before .numpy()"
            return self.value

    def load(path: Path, map_location: str, weights_only: bool) -> dict:
        calls.append(weights_only)
        return {"target_logits": Tensor(target), "draft_logits": Tensor(target + 1)}

    fake = types.SimpleNamespace(load=load, Tensor=Tensor, bfloat16="bfloat16", float16="half")
    monkeypatch.setitem(sys.modules, "torch", fake)
    (tmp_path / "x.pt").write_bytes(b"")
    _check_single(od.open_dump(tmp_path / "x.pt"), target, target + 1)
    assert calls and all(calls)


def test_pt_with_real_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    target = torch.randn(4, V, dtype=torch.bfloat16)
    torch.save({"target_logits": target, "draft_logits": target}, tmp_path / "x.pt")
    shard = od.open_dump(tmp_path / "x.pt").read_shard(0)
    np.testing.assert_array_equal(shard.target, target.float().numpy())


# --------------------------------------------------------------------------------------------
# processing


def _hf_reference(row: np.ndarray, temperature: float, top_k, top_p) -> np.ndarray:
    """One row through temperature, top-k and top-p, written out with Python lists."""
    x = [float(v) for v in row]
    vocab = len(x)
    if temperature == 0:
        best = max(range(vocab), key=lambda i: (x[i], -i))
        return np.array([1.0 if i == best else 0.0 for i in range(vocab)])
    x = [v / temperature for v in x]
    if top_k is not None and top_k < vocab:
        kth = sorted(x, reverse=True)[top_k - 1]
        x = [v if v >= kth else -np.inf for v in x]
    top = max(x)
    e = [np.exp(v - top) for v in x]
    probs = [v / sum(e) for v in e]
    if top_p is not None and top_p < 1:
        ranked = sorted(range(vocab), key=lambda i: (-probs[i], i))
        kept, mass = set(), 0.0
        for i in ranked:
            if mass >= top_p and kept:
                break
            kept.add(i)
            mass += probs[i]
        probs = [probs[i] if i in kept else 0.0 for i in range(vocab)]
        probs = [v / sum(probs) for v in probs]
    return np.array(probs)


@pytest.mark.parametrize("temperature", [0.0, 0.4, 1.0, 2.5])
@pytest.mark.parametrize("top_k", [None, 1, 3, V, V + 5])
@pytest.mark.parametrize("top_p", [None, 0.3, 0.9, 1.0])
def test_processing_matches_a_direct_computation(temperature, top_k, top_p) -> None:
    rng = np.random.default_rng(10)
    logits = rng.normal(size=(6, V)) * 2
    logits[0, [2, 5, 7]] = logits[0].max() + 1.0  # ties at the top
    logits[1, 4] = -np.inf
    logits = np.round(logits, 1)  # ties at the top-k cut-off
    got = od.to_probabilities(logits, temperature, top_k, top_p)
    expected = np.stack([_hf_reference(r, temperature, top_k, top_p) for r in logits])
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert got.dtype == np.float64
    both = od.prepare_distributions(
        logits.astype(np.float16),
        logits.astype(np.float16),
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    np.testing.assert_array_equal(both.target, both.draft)  # identical processing


def test_processing_filters_change_something() -> None:
    logits = np.array([[3.0, 2.0, 1.0, 0.0]])
    assert od.to_probabilities(logits, top_k=2)[0, 2] == 0
    assert od.to_probabilities(logits, top_p=0.5)[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert np.count_nonzero(od.to_probabilities(logits, top_p=0.8)) == 2
    with pytest.raises(ValueError, match="top_p"):
        od.to_probabilities(logits, top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        od.to_probabilities(logits, top_k=0)
    with pytest.raises(ValueError, match="temperature"):
        od.to_probabilities(logits, temperature=-1.0)


def test_top_p_boundary_follows_hugging_face() -> None:
    """A token is dropped once the mass before it reaches top_p (HF drops cumsum <= 1 - top_p)."""
    got = od.to_probabilities([[0.5, 0.25, 0.125, 0.125]], top_p=0.75, values="probs")
    assert got.tolist() == [[2 / 3, 1 / 3, 0.0, 0.0]]
    got = od.to_probabilities([[0.5, 0.25, 0.25]], top_p=0.5, values="probs")
    assert got.tolist() == [[1.0, 0.0, 0.0]]


# --------------------------------------------------------------------------------------------
# truncated rows: the interval


def _brute_iid(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """1 + min over all 2^V subsets of p(H) − q(H)^n, by enumeration."""
    ps, qs = oracles.subset_sum(p), oracles.subset_sum(q)
    return float(1.0 + min(0.0, float(np.min(ps - qs**n))))


def test_merging_tokens_never_lowers_iid_alpha(gen) -> None:
    """The claim the upper bound rests on, on random pairs and random partitions."""
    rng = np.random.default_rng(11)
    lowered = 0
    for i in range(400):
        kind = gen.KINDS[i % len(gen.KINDS)]
        vocab = int(rng.integers(2, 10))
        p, q = gen.pair(kind, rng, vocab)
        n = int(rng.integers(1, 5))
        cells = int(rng.integers(1, vocab + 1))
        label = rng.integers(0, cells, size=vocab)
        merged_p = np.bincount(label, weights=p, minlength=cells)
        merged_q = np.bincount(label, weights=q, minlength=cells)
        full = _brute_iid(p, q, n)
        merged = _brute_iid(merged_p, merged_q, n)
        lowered += merged < full - 1e-12
    assert lowered == 0


def test_merging_can_lower_alpha_for_other_designs() -> None:
    """Why the argument is not reused for every design (the docstring's example)."""
    p = np.array([0.12, 0.08, 0.01, 0.44, 0.35])
    q = np.array([0.03, 0.31, 0.22, 0.21, 0.23])
    full = ob.optimal_acceptance(p, q, 2, "conditional_poisson")
    merged = ob.optimal_acceptance(
        np.append(p[:3], p[3:].sum()), np.append(q[:3], q[3:].sum()), 2, "conditional_poisson"
    )
    assert full == pytest.approx(0.9100, abs=1e-4) and merged == pytest.approx(0.8836, abs=1e-4)


def _topk_group(rng, gen, rows: int):
    """``rows`` pairs (cycling through the kinds) of one size, cut to one K per model."""
    vocab = int(rng.integers(2, 40))
    pairs = [gen.pair(gen.KINDS[i % len(gen.KINDS)], rng, vocab) for i in range(rows)]
    p, q = np.stack([a for a, _ in pairs]), np.stack([b for _, b in pairs])
    with np.errstate(divide="ignore"):  # zero probabilities: -inf logits
        lp = np.log(p) + rng.normal(size=(rows, 1))
        lq = np.log(q) + rng.normal(size=(rows, 1))
    kp, kq = int(rng.integers(1, vocab + 1)), int(rng.integers(1, vocab + 1))
    return p, q, od.TopKRows.from_logits(lp, kp), od.TopKRows.from_logits(lq, kq)


def test_topk_interval_contains_the_full_alpha(gen) -> None:
    """Full rows -> keep each model's top k -> the interval contains the full α* (900 cases)."""
    rng = np.random.default_rng(12)
    failures, widths, brute_checked = [], [], 0
    for _ in range(150):
        p, q, rows_p, rows_q = _topk_group(rng, gen, len(gen.KINDS))
        vocab = p.shape[1]
        n = int(rng.integers(1, min(vocab, 8) + 1))
        lower, upper = oa.topk_interval(rows_p, rows_q, n)
        full = ob.optimal_acceptance(p, q, n)
        if vocab <= 10:  # the sweep itself against enumeration of all subsets
            brute = [_brute_iid(a, b, n) for a, b in zip(p, q, strict=True)]
            np.testing.assert_allclose(full, brute, atol=1e-9)
            brute_checked += len(brute)
        outside = ~((lower - 1e-10 <= full) & (full <= upper + 1e-10))
        failures += [
            f"V={vocab} K={rows_p.k},{rows_q.k} n={n}: {lower[i]!r} <= {full[i]!r} <= {upper[i]!r}"
            for i in np.flatnonzero(outside)
        ]
        widths.append(upper - lower)
        if rows_p.k == vocab and rows_q.k == vocab:
            np.testing.assert_array_equal(lower, upper)
            np.testing.assert_allclose(lower, full, atol=1e-9)
    assert not failures, "\n".join(failures[:5])
    assert brute_checked >= 60
    mean_width = float(np.mean(np.concatenate(widths)))
    assert 0.05 < mean_width < 0.9  # informative, not [0, 1]


def test_topk_interval_tightens_as_k_grows() -> None:
    rng = np.random.default_rng(13)
    vocab, steps = 200, 40
    p_logits = rng.normal(size=(steps, vocab)) * 3
    q_logits = p_logits + rng.normal(size=(steps, vocab))
    full = ob.optimal_acceptance(scipy_softmax(p_logits, 1), scipy_softmax(q_logits, 1), 4)
    widths = []
    for k in (5, 20, 80, 200):
        rows_p, rows_q = (od.TopKRows.from_logits(x, k) for x in (p_logits, q_logits))
        lower, upper = oa.topk_interval(rows_p, rows_q, 4)
        assert np.all(lower <= full + 1e-10) and np.all(full <= upper + 1e-10)
        widths.append(float(np.mean(upper - lower)))
    assert widths[0] > widths[1] > widths[2] > widths[3] == 0.0


def test_lower_bound_is_attained_by_disjoint_tails() -> None:
    """When the tails can sit on disjoint unseen tokens, the lower bound is that α*."""
    p = np.array([0.4, 0.3, 0.0, 0.0, 0.15, 0.15, 0.0, 0.0])
    q = np.array([0.35, 0.35, 0.0, 0.0, 0.0, 0.0, 0.15, 0.15])
    with np.errstate(divide="ignore"):
        rows_p = od.TopKRows.from_logits(np.log(p)[None, :], 2)
        rows_q = od.TopKRows.from_logits(np.log(q)[None, :], 2)
    lower, upper = oa.topk_interval(rows_p, rows_q, 2)
    assert lower[0] == pytest.approx(ob.optimal_acceptance(p, q, 2), abs=1e-12)
    assert upper[0] > lower[0] + 0.01


def test_topk_refusals() -> None:
    rng = np.random.default_rng(14)
    rows = od.TopKRows.from_logits(rng.normal(size=(3, 10)), 4)
    with pytest.raises(od.DumpError, match=r"'without_replacement'.*dump full logits"):
        oa.topk_interval(rows, rows, 2, "without_replacement")
    with pytest.raises(od.DumpError, match="design 'greedy'"):
        oa.acceptance_interval(rows, rows, 2, "greedy")
    with pytest.raises(ValueError, match=r"temperature 0.7 cannot be applied exactly"):
        oa.acceptance_interval(rows, rows, 2, temperature=0.7)
    with pytest.raises(ValueError, match="top_k=6 needs more tokens than the 4 stored"):
        oa.acceptance_interval(rows, rows, 2, top_k=6)
    with pytest.raises(
        od.DumpError, match=r"top_p=0.9999 needs tokens beyond the 4 stored.*3 steps"
    ):
        oa.acceptance_interval(rows, rows, 2, top_p=0.9999, step_ids=[7, 8, 9])
    other = od.TopKRows(rows.ids, rows.logits, rows.logsumexp, 12)
    with pytest.raises(od.DumpError, match="truncating top-k rows is not exact"):
        oa.acceptance_interval(rows, other, 2)
    with pytest.raises(od.DumpError, match="both be full rows or both be top-k"):
        oa.acceptance_interval(rows, np.zeros((3, 10)), 2)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(0.0, None, None), (1.0, 3, None), (1.0, 4, 0.8), (1.0, None, 0.3)],
)
def test_exact_processing_of_topk_rows_matches_full_rows(temperature, top_k, top_p) -> None:
    rng = np.random.default_rng(15)
    p_logits = rng.normal(size=(20, 30)) * 3
    q_logits = p_logits + rng.normal(size=(20, 30))
    p_logits[:, 0] = p_logits.max(1) + 5  # enough mass in the top 4 for top_p = 0.3
    q_logits[:, 1] = q_logits.max(1) + 5
    kwargs = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    full = oa.acceptance_interval(p_logits, q_logits, 3, **kwargs)
    rows_p, rows_q = (od.TopKRows.from_logits(x, 4) for x in (p_logits, q_logits))
    truncated = oa.acceptance_interval(rows_p, rows_q, 3, **kwargs)
    assert np.all(truncated.exact)
    np.testing.assert_allclose(truncated.lower, full.lower, atol=1e-12)
    raw = oa.acceptance_interval(rows_p, rows_q, 3)  # temperature 1, no filter: an interval
    assert not np.all(raw.exact)


def test_greedy_topk_rows_break_ties_towards_the_lower_id() -> None:
    rows = od.TopKRows(np.array([[5, 2, 7]]), np.array([[1.0, 1.0, 0.0]]), np.array([3.0]), 10)
    greedy = od.process_topk(rows, temperature=0.0)
    assert np.exp(greedy.logits).tolist() == [[0.0, 1.0, 0.0]]
    assert greedy.tail_mass().tolist() == [0.0]
    full = np.full((1, 10), -5.0)
    full[0, [5, 2, 7]] = [1.0, 1.0, 0.0]
    assert od.to_probabilities(full, temperature=0)[0, 2] == 1.0  # the same choice


def test_empty_tails_make_unstored_tokens_known_zeros() -> None:
    """Rows whose tails are empty are exact even when the two models stored different ids."""
    p_logits = np.full((1, 6), -np.inf)
    q_logits = np.full((1, 6), -np.inf)
    p_logits[0, [0, 1]] = [0.0, 1.0]
    q_logits[0, [1, 2]] = [2.0, 0.5]
    rows_p, rows_q = (od.TopKRows.from_logits(x, 2) for x in (p_logits, q_logits))
    assert rows_p.tail_mass().tolist() == rows_q.tail_mass().tolist() == [0.0]
    p, q = scipy_softmax(p_logits, 1), scipy_softmax(q_logits, 1)
    for n in (1, 3):
        lower, upper = oa.topk_interval(rows_p, rows_q, n)
        assert lower[0] == upper[0]
        assert upper[0] == pytest.approx(ob.optimal_acceptance(p, q, n)[0], abs=1e-12)


def test_interval_pairs_on_a_worked_example() -> None:
    """p has an empty tail (stored {0, 1}), q does not (stored {1, 2}, tail on 3..5).

    Upper: both probabilities are known on 1 (p1, q1) and 2 (p = 0: p's tail is empty, q2);
    the rest merges into R = {0, 3, 4, 5} with p(R) = p0 and q(R) = 1 − q1 − q2.
    Lower: p̃ = (p0, p1, 0) and q̃ = (0, q1, q2) on {0, 1, 2}, plus t_p (0, 0) and t_q (0, r_q).
    """
    p_logits = np.array([[np.log(0.3), np.log(0.7), -np.inf, -np.inf, -np.inf, -np.inf]])
    q = np.array([0.05, 0.4, 0.3, 0.1, 0.1, 0.05])
    rows_p = od.TopKRows.from_logits(p_logits, 2)
    rows_q = od.TopKRows.from_logits(np.log(q)[None, :], 2)
    assert sorted(rows_q.ids[0].tolist()) == [1, 2]
    for n in (1, 2, 4):
        lower, upper = oa.topk_interval(rows_p, rows_q, n)
        expected_upper = ob.optimal_acceptance([0.7, 0.0, 0.3, 0.0], [0.4, 0.3, 0.3, 0.0], n)
        expected_lower = ob.optimal_acceptance(
            [0.3, 0.7, 0.0, 0.0, 0.0], [0.0, 0.4, 0.3, 0.0, 0.3], n
        )
        assert upper[0] == pytest.approx(expected_upper, abs=1e-12)
        assert lower[0] == pytest.approx(expected_lower, abs=1e-12)
        full = ob.optimal_acceptance([0.3, 0.7, 0, 0, 0, 0], q, n)
        assert lower[0] <= full + 1e-12 and full <= upper[0] + 1e-12


def test_bad_topk_rows_are_named_and_can_be_skipped() -> None:
    rng = np.random.default_rng(16)
    rows = od.TopKRows.from_logits(rng.normal(size=(4, 10)), 3)
    logits = rows.logits.copy()
    logits[1, 0] = np.nan
    ids = rows.ids.copy()
    ids[2, 1] = ids[2, 0]  # a repeated id
    lse = rows.logsumexp.copy()
    lse[3] -= 5.0  # the stored probabilities would exceed one
    bad = od.TopKRows(ids, logits, lse, 10)
    assert od.find_bad_topk_steps(bad).tolist() == [False, True, True, True]
    with pytest.raises(od.DumpError, match=r"target at 3 steps: 11, 12, 13"):
        oa.acceptance_interval(bad, rows, 2, step_ids=[10, 11, 12, 13])
    result = oa.acceptance_interval(bad, rows, 2, step_ids=[10, 11, 12, 13], skip_bad_steps=True)
    assert result.step.tolist() == [10] and result.skipped.tolist() == [11, 12, 13]


def test_a_tail_of_1e_13_is_carried_into_the_interval() -> None:
    """Tails are not zeroed below a threshold: a tail of 1e-13 moves α* by about 1e-13, and
    the interval (no longer labelled exact) still contains the full-vocabulary value."""
    t = 1e-13
    p = np.array([[0.5, 0.5 - t, t, 0.0]])
    q = np.array([[0.5 - t, 0.5, 0.0, t]])
    with np.errstate(divide="ignore"):
        rows_p, rows_q = (od.TopKRows.from_logits(np.log(x), 2) for x in (p, q))
    assert 0 < rows_p.tail_mass()[0] < 2 * t
    for n in (1, 2, 4):
        full = float(ob.optimal_acceptance(p, q, n)[0])
        result = oa.acceptance_interval(rows_p, rows_q, n)
        assert not result.exact[0]
        assert result.lower[0] <= full <= result.upper[0], (n, result, full)
        assert result.upper[0] - result.lower[0] < 1e-11  # widened by rounding, not more


def test_kept_mass_above_one_is_refused_naming_the_step_and_the_excess() -> None:
    """Stored probabilities summing to 1 + 1e-4 (or 1 + 5e-5) are not rescaled: the row's
    logsumexp does not belong to its logits."""
    rng = np.random.default_rng(18)
    rows = od.TopKRows.from_logits(rng.normal(size=(3, 10)), 4)
    for excess in (1e-4, 5e-5):
        lse = rows.logsumexp.copy()
        stored = np.log(np.exp(rows.logits[1]).sum())
        lse[1] = stored - np.log1p(excess)  # kept mass exp(stored − lse) = 1 + excess
        bad = od.TopKRows(rows.ids, rows.logits, lse, 10)
        assert bad.probabilities()[1].sum() == pytest.approx(1 + excess, rel=1e-12)
        message = rf"step 8: .*sum to 1 \+ {excess:.1e}"
        with pytest.raises(od.DumpError, match=message):
            oa.acceptance_interval(bad, rows, 2, step_ids=[7, 8, 9])
        with pytest.raises(od.DumpError, match=r"step 1: .*sum to 1 \+"):
            oa.topk_interval(bad, rows, 2)
        result = oa.acceptance_interval(bad, rows, 2, step_ids=[7, 8, 9], skip_bad_steps=True)
        assert result.skipped.tolist() == [8]


def test_rows_storing_every_token_stay_exact_despite_float32_rounding() -> None:
    """K = V: the tail is empty by construction, whatever float32 storage does to the sum."""
    rng = np.random.default_rng(19)
    p_logits, q_logits = rng.normal(size=(6, 12)) * 4, rng.normal(size=(6, 12)) * 4
    rows = []
    for x in (p_logits, q_logits):
        full = od.TopKRows.from_logits(x, 12)  # lse from float64; logits rounded below
        rows.append(od.TopKRows(full.ids, full.logits.astype(np.float32), full.logsumexp, 12))
    result = oa.acceptance_interval(*rows, 3)
    assert np.all(result.exact)
    p, q = scipy_softmax(p_logits, 1), scipy_softmax(q_logits, 1)
    np.testing.assert_allclose(result.lower, ob.optimal_acceptance(p, q, 3), atol=1e-5)
    truncated = [od.TopKRows.from_logits(x, 5) for x in (p_logits, q_logits)]
    truncated = [
        od.TopKRows(r.ids, r.logits.astype(np.float32), r.logsumexp, 12) for r in truncated
    ]
    result = oa.acceptance_interval(*truncated, 3)
    full = ob.optimal_acceptance(p, q, 3)
    assert np.all((result.lower <= full) & (full <= result.upper))


def test_full_rows_give_a_point_interval_for_any_design(tmp_path: Path) -> None:
    written = _write_dump(tmp_path / "d", shards=1)
    shard = od.open_dump(tmp_path / "d").read_shard(0)
    target, draft, _ = written[0]
    p = scipy_softmax(target.astype(float), 1)
    q = scipy_softmax(draft.astype(float), 1)
    for design in ("iid", "without_replacement"):
        result = shard.acceptance_interval(3, design)
        assert np.all(result.exact)
        np.testing.assert_allclose(result.lower, ob.optimal_acceptance(p, q, 3, design), atol=1e-12)


def test_topk_dump_end_to_end(tmp_path: Path) -> None:
    rng = np.random.default_rng(17)
    p_logits, q_logits = _logits(rng, 8, 50), _logits(rng, 8, 50)
    with od.DumpWriter(tmp_path / "d", storage="topk:10", vocab_size=50) as writer:
        writer.write(*(od.TopKRows.from_logits(x, 10) for x in (p_logits, q_logits)), shard_steps=5)
    full = ob.optimal_acceptance(
        scipy_softmax(p_logits.astype(float), 1), scipy_softmax(q_logits.astype(float), 1), 2
    )
    lowers, uppers = [], []
    for shard in od.open_dump(tmp_path / "d"):
        result = shard.acceptance_interval(2)
        lowers.append(result.lower)
        uppers.append(result.upper)
    lower, upper = np.concatenate(lowers), np.concatenate(uppers)
    assert np.all(lower <= full + 1e-9) and np.all(full <= upper + 1e-9)
    assert np.all(upper - lower > 1e-6)


def test_writer_refuses_a_directory_that_is_not_a_dump(tmp_path: Path) -> None:
    """The writer refuses a non-empty directory that is not a dump."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "other.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        od.DumpWriter(tmp_path / "d")
    assert os.listdir(tmp_path / "d") == ["other.txt"]


def test_float16_logits_convert_as_numpy_does_for_every_pattern():
    """All 65,536 float16 bit patterns (zeros, subnormals, normals, infinities, NaNs with
    their payloads) give numpy's float32 bit patterns, in any shape."""
    from otbound.dumps._float16 import float16_to_float32
    from otbound.dumps._format import from_storage

    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    grid = every.reshape(256, 256)[:, ::3]  # not contiguous
    for convert in (float16_to_float32, lambda values: from_storage(values, "float16")):
        got = convert(every)
        assert got.dtype == np.float32
        want = every.astype(np.float32)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        want = grid.astype(np.float32)
        np.testing.assert_array_equal(convert(grid).view(np.uint32), want.view(np.uint32))


def test_float16_logits_take_numpys_conversion_until_numba_is_loaded():
    """Reading a small float16 dump in a fresh process does not load numba (numpy converts);
    the values are the same bits either way (the test above)."""
    import subprocess

    code = (
        "import sys, numpy as np\n"
        "from otbound.dumps._format import from_storage\n"
        "out = from_storage(np.ones((4, 8), dtype=np.float16), 'float16')\n"
        "assert out.dtype == np.float32 and 'numba' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
