"""otbound.dumps.readers: one contract for every registered dump format, and the registry.

Every format registered by suffix (and the worked ``.jsonl`` example of
``docs/extending.md``, run from the page) must read back the rows written in it, cut them into
the same shards, pickle, and name the damaged file, in the first line of a
:class:`~otbound.dumps.DumpError`, when it is truncated, corrupt, empty or gone.
"""

from __future__ import annotations

import json
import pickle
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import softmax

import otbound.analysis as oa
import otbound.dumps as od
from otbound.dumps._safetensors import write_safetensors
from otbound.dumps.readers import (
    DIRECTORY,
    DumpReader,
    OpenOptions,
    reader_for,
    register_reader,
    registered_readers,
    registry,
)

ROOT = Path(__file__).resolve().parents[1]
EXTENDING = ROOT / "docs/extending.md"
SECTION = "## Adding a dump reader"
STEPS, VOCAB, SHARD = 10, 7, 4
METADATA = ("prompt_id", "position", "token")


@dataclass(frozen=True)
class Format:
    """How the test writes one format: ``write(folder, target, draft, metadata)`` returns the
    dump's path and the file whose damage the reader must notice."""

    write: Callable[[Path, np.ndarray, np.ndarray, dict[str, np.ndarray]], tuple[Path, Path]]
    metadata: bool = True  # whether the format carries prompt_id, position and token
    sharded: bool = False  # shards come from the writer, not from open_dump(shard_steps=)


def _write_directory(folder, target, draft, metadata):
    path = folder / "dump"
    with od.DumpWriter(path, dtype="float32") as writer:
        for start in range(0, len(target), SHARD):
            part = slice(start, start + SHARD)
            writer.write_shard(target[part], draft[part], {k: v[part] for k, v in metadata.items()})
    return path, path / "shard-00000.safetensors"


def _write_safetensors(folder, target, draft, metadata):
    path = folder / "run.safetensors"
    with open(path, "wb") as f:
        write_safetensors(f, {"target_logits": target, "draft_logits": draft, **metadata})
    return path, path


def _write_npz(folder, target, draft, metadata):
    path = folder / "run.npz"
    np.savez(path, target_logits=target, draft_logits=draft, **metadata)
    return path, path


def _write_npy(folder, target, draft, metadata):
    path = folder / "run.npy"
    np.save(path, np.stack([target, draft]))
    return path, path


def _write_pt(folder, target, draft, metadata):
    torch = pytest.importorskip("torch")
    path = folder / "run.pt"
    arrays = {"target_logits": target, "draft_logits": draft, **metadata}
    torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}, path)
    return path, path


def _write_jsonl(folder, target, draft, metadata):
    """The format of the worked example in ``docs/extending.md``."""
    path = folder / "run.jsonl"
    lines = []
    for i in range(len(target)):
        step = {"target_logits": target[i].tolist(), "draft_logits": draft[i].tolist()}
        step.update({k: int(v[i]) for k, v in metadata.items()})
        lines.append(json.dumps(step))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, path


#: A writer for every format otbound registers (a new format needs one here: see the test).
WRITERS = {
    "otbound": Format(_write_directory, sharded=True),
    "safetensors": Format(_write_safetensors),
    "npz": Format(_write_npz),
    "npy": Format(_write_npy, metadata=False),
    "pt": Format(_write_pt),
}
#: The formats of ``docs/extending.md``, registered only by running the page's example.
DOCS_WRITERS = {"jsonl": Format(_write_jsonl)}
BUILTIN = tuple(reader.name for reader in registered_readers())
#: The registry as otbound ships it, whatever other tests register.
_SHIPPED = dict(registry._READERS)


def docs_example() -> str:
    """The Python code of the dump-reader section of ``docs/extending.md``."""
    text = EXTENDING.read_text(encoding="utf-8")
    assert SECTION in text, f"{EXTENDING} has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    assert blocks, f"no python code block under {SECTION!r} in {EXTENDING}"
    return "\n".join(blocks)


def run_docs_example(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Run the page's example as a module (so its reader pickles), its registration undone
    after the test."""
    module = types.ModuleType("otbound_docs_dump_reader")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(docs_example(), str(EXTENDING), "exec"), module.__dict__)
    return module


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from the shipped registry; its own registrations stay in it."""
    monkeypatch.setattr(registry, "_READERS", dict(_SHIPPED))


@pytest.fixture(params=[*BUILTIN, *DOCS_WRITERS])
def fmt(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param in DOCS_WRITERS:
        run_docs_example(monkeypatch)
    return str(request.param)


def _rows(seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    target = (3 * rng.standard_normal((STEPS, VOCAB))).astype(np.float32)
    draft = (target + rng.standard_normal((STEPS, VOCAB))).astype(np.float32)
    ids = np.arange(STEPS, dtype=np.int64)
    metadata = {"prompt_id": ids // 3, "position": ids % 3, "token": (7 * ids) % VOCAB}
    return target, draft, metadata


def _write(fmt: str, folder: Path, *rows) -> tuple[Path, Path]:
    spec = {**WRITERS, **DOCS_WRITERS}[fmt]
    return spec.write(folder, *(rows or _rows()))


def _open(fmt: str, path: Path, **options) -> od.Dump:
    spec = {**WRITERS, **DOCS_WRITERS}[fmt]
    return od.open_dump(path, **({} if spec.sharded else {"shard_steps": SHARD}), **options)


def _read_all(dump: od.Dump) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    shards = list(dump)
    target = np.concatenate([np.asarray(s.target) for s in shards])
    draft = np.concatenate([np.asarray(s.draft) for s in shards])
    return target, draft, pd.concat([s.metadata for s in shards], ignore_index=True)


# --------------------------------------------------------------------------------------------
# the contract, for every format


def test_every_registered_format_has_a_writer_here() -> None:
    assert set(BUILTIN) == set(WRITERS), "add a writer for the new format to WRITERS"
    assert BUILTIN[0] == "otbound" and registry._READERS[DIRECTORY] is registered_readers()[0]


def test_same_rows_round_trip(fmt: str, tmp_path: Path) -> None:
    target, draft, metadata = _rows()
    path, _ = _write(fmt, tmp_path, target, draft, metadata)
    dump = _open(fmt, path)
    assert dump.source == fmt == reader_for(path).name
    assert dump.num_steps == STEPS and dump.vocab_size == VOCAB == dump.draft_vocab_size
    assert dump.values == ("logits", "logits")
    assert dump.dtype in ("float32", "F32", "float64")  # F32: safetensors' own code; JSON
    assert [s.num_steps for s in dump.shards] == [4, 4, 2]
    assert [s.start for s in dump.shards] == [0, 4, 8]
    got_t, got_d, frame = _read_all(dump)
    np.testing.assert_array_equal(got_t, target)
    np.testing.assert_array_equal(got_d, draft)
    assert frame["step"].tolist() == list(range(STEPS))
    assert list(frame.columns[:4]) == ["step", *METADATA]
    for key in METADATA:
        if {**WRITERS, **DOCS_WRITERS}[fmt].metadata:
            assert frame[key].tolist() == metadata[key].tolist(), key
        else:
            assert frame[key].isna().all(), key
    expected = oa.acceptance_interval(target, draft, 2).lower
    alpha = np.concatenate([s.acceptance_interval(2).lower for s in dump])
    np.testing.assert_array_equal(alpha, expected)


def test_dump_pickles_and_reads_in_a_copy(fmt: str, tmp_path: Path) -> None:
    target, draft, metadata = _rows(1)
    path, _ = _write(fmt, tmp_path, target, draft, metadata)
    dump = pickle.loads(pickle.dumps(_open(fmt, path)))
    np.testing.assert_array_equal(dump.read_shard(1).target, target[4:8])
    assert dump.read_shard(dump.shards[2].id).step.tolist() == [8, 9]


def test_probabilities_are_refused_as_logits_and_read_when_declared(
    fmt: str, tmp_path: Path
) -> None:
    target, draft, metadata = _rows(2)
    p, q = softmax(target, axis=1), softmax(draft, axis=1)
    path, _ = _write(fmt, tmp_path, p, q, metadata)
    with pytest.raises(od.DumpError, match=r"holds probabilities.*values='probs'") as info:
        _open(fmt, path, values="logits").read_shard(0)
    assert str(info.value).startswith(f"{path}")
    dump = _open(fmt, path, values="probs")
    assert dump.values == ("probs", "probs")
    got = dump.read_shard(0).distributions()
    np.testing.assert_allclose(got.target, p[:4], rtol=1e-6)


def _damage(fmt: str, tmp_path: Path, how: Callable[[bytes], bytes]) -> tuple[Path, Path]:
    path, damaged = _write(fmt, tmp_path)
    damaged.write_bytes(how(damaged.read_bytes()))
    return path, damaged


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: np.random.default_rng(3).bytes(len(data)), id="corrupt"),
        pytest.param(lambda data: b"", id="empty"),
    ],
)
def test_a_damaged_file_is_named_in_the_first_line(
    fmt: str, tmp_path: Path, how: Callable[[bytes], bytes]
) -> None:
    path, damaged = _damage(fmt, tmp_path, how)
    with pytest.raises(od.DumpError) as info:
        _open(fmt, path).read_shard(0)
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{damaged}: ") and len(first) > len(f"{damaged}: ") + 10, first


def test_a_file_gone_after_opening_is_named(fmt: str, tmp_path: Path) -> None:
    path, damaged = _write(fmt, tmp_path)
    dump = _open(fmt, path)
    damaged.unlink()
    with pytest.raises(od.DumpError, match="the file is missing") as info:
        dump.read_shard(0)
    assert str(info.value) == f"{damaged}: the file is missing"


# --------------------------------------------------------------------------------------------
# the registry


def test_unknown_suffixes_list_the_registered_ones(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    path.write_text("1,2\n")
    message = (
        f"{path}: unsupported file type '.csv': expected an otbound dump directory or one of "
        ".safetensors, .npz, .npy, .pt, .pth"
    )
    with pytest.raises(od.DumpError) as info:
        od.open_dump(path)
    assert str(info.value) == message
    assert od.SINGLE_FILE_SUFFIXES == (".safetensors", ".npz", ".npy", ".pt", ".pth")


def test_suffixes_resolve_case_insensitively_and_directories_need_a_manifest(
    tmp_path: Path,
) -> None:
    assert reader_for(tmp_path / "RUN.PTH").name == "pt"
    assert reader_for(tmp_path).name == "otbound"
    with pytest.raises(od.DumpError, match=r"not an otbound dump \(no manifest.json"):
        od.open_dump(tmp_path)


class _Toy(DumpReader):
    name = "toy"
    suffixes = (".toy",)

    @classmethod
    def open(cls, path: Path, options: OpenOptions) -> DumpReader:
        raise od.DumpError(f"{path}: toy")

    def read_shard(self, info: od.ShardInfo) -> od.ShardData:
        raise AssertionError("never opened")


def test_register_reader_checks_what_it_registers(tmp_path: Path) -> None:
    assert register_reader(_Toy) is _Toy and reader_for(tmp_path / "a.toy") is _Toy
    register_reader(_Toy)  # again: the same class holds its suffixes
    (tmp_path / "a.toy").touch()
    with pytest.raises(od.DumpError, match=r"a\.toy: toy"):
        od.open_dump(tmp_path / "a.toy")
    taker = type("Taker", (_Toy,), {"name": "taker", "suffixes": (".npz",)})
    with pytest.raises(ValueError, match=r"'\.npz' is already read by NpzReader"):
        register_reader(taker)
    assert register_reader(taker, replace=True) is taker
    assert reader_for(tmp_path / "x.npz") is taker
    with pytest.raises(ValueError, match="lower case with a leading dot"):
        register_reader(type("Bad", (_Toy,), {"suffixes": ("TOY",)}))
    with pytest.raises(ValueError, match="no suffixes"):
        register_reader(type("Empty", (_Toy,), {"suffixes": ()}))
    with pytest.raises(TypeError, match="DumpReader subclass"):
        register_reader(dict)  # type: ignore[type-var]


# --------------------------------------------------------------------------------------------
# the worked example of docs/extending.md


def test_the_docs_example_runs_and_registers_its_reader(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = run_docs_example(monkeypatch)
    assert capsys.readouterr().out.startswith("jsonl 2 [0, 1]")
    assert reader_for(Path("x.jsonl")) is module.JsonLinesReader
    assert ".jsonl" in registry.file_suffixes()
