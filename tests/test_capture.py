"""The torch logging path: tiny random models (Llama and GPT-2) saved to disk, logged to a dump,
read back and checked against direct forward passes; batching, vocabulary cuts, resuming and
one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from capture_helpers import dump_rows, one_error_line, tiny_config  # noqa: E402

import otbound  # noqa: E402
from otbound import capture  # noqa: E402
from otbound.cli.log_distributions import main  # noqa: E402
from otbound.dumps import DumpWriter, open_dump  # noqa: E402

VOCAB = 256
#: Prompts of several lengths (token ids), so batches are left-padded.
PROMPT_IDS = [[5, 6, 7], [10, 11, 12, 13, 14, 15, 16, 17, 18], [3], [40, 41, 42, 43, 44], [9] * 12]


def _llama_config(vocab: int, layers: int = 2) -> object:
    return tiny_config("llama", vocab, layers)


def _gpt2_config(vocab: int, layers: int = 2) -> object:
    return transformers.GPT2Config(
        vocab_size=vocab, n_positions=64, n_embd=32, n_layer=layers, n_head=2,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip


def _save_model(config: object, path: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(path)
    return path


def _save_tokenizer(path: Path, size: int) -> Path:
    """A word-level tokenizer: ``w3`` is id 3, and so on; built offline."""
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, size)}}
    model = tokenizers.models.WordLevel(vocab, unk_token="[UNK]")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """Two pairs on disk. Llama: a 250-token tokenizer in the target's directory, the draft's
    vocabulary padded to 272. GPT-2: no tokenizer, the draft's vocabulary padded to 264."""
    root = tmp_path_factory.mktemp("models")
    llama_target = _save_model(_llama_config(VOCAB), root / "llama-target", 0)
    _save_tokenizer(llama_target, 250)
    return {
        "llama": {
            "target": llama_target,
            "draft": _save_model(_llama_config(272, layers=1), root / "llama-draft", 1),
        },
        "gpt2": {
            "target": _save_model(_gpt2_config(VOCAB), root / "gpt2-target", 2),
            "draft": _save_model(_gpt2_config(264, layers=1), root / "gpt2-draft", 3),
        },
        "big_tokenizer": {"dir": _save_tokenizer(root / "big-tokenizer", 300)},
    }


def _write_prompts(path: Path, prompts: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(p) for p in prompts) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def prompt_file(tmp_path: Path) -> Path:
    lines = [{"input_ids": ids} for ids in PROMPT_IDS]
    lines[2] = {"input_tokens": PROMPT_IDS[2]}  # the C4 token file's key
    return _write_prompts(tmp_path / "prompts.jsonl", lines)


def _load(path: Path) -> object:
    return transformers.AutoModelForCausalLM.from_pretrained(path).eval()


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


def _args(pair: dict[str, Path], prompts: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--target", str(pair["target"]), "--draft", str(pair["draft"]),
        "--prompts", str(prompts), "--out", str(out), "--quiet", "--max-new-tokens", "4", *extra,
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------
# end to end


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_logged_rows_equal_a_direct_forward_pass(
    family: str, models: dict, prompt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    pair = models[family]
    out = tmp_path / "dump"
    args = ["--max-new-tokens", "6", "--batch-size", "3", "--shard-steps", "7", "--seed", "3"]
    assert main(_args(pair, prompt_file, out, *args)) == 0
    err = capsys.readouterr().err
    dump = open_dump(out)
    assert dump.check() == {}
    assert len(dump.shards) > 1 and all(s.num_steps <= 7 for s in dump.shards)
    target_rows, draft_rows, meta = dump_rows(out)
    vocab = 250 if family == "llama" else VOCAB
    assert target_rows.shape == draft_rows.shape == (len(meta), vocab)
    assert target_rows.dtype == np.float32
    target, draft = _load(pair["target"]), _load(pair["draft"])
    eos = dump.manifest["extra"]["generation"]["eos_token_ids"]
    assert eos == [2]
    assert list(meta["prompt_id"].unique()) == list(range(len(PROMPT_IDS)))
    for pid, ids in enumerate(PROMPT_IDS):
        part = meta[meta["prompt_id"] == pid]
        tokens = part["token"].astype(int).tolist()
        assert part["position"].tolist() == list(range(len(ids), len(ids) + len(tokens)))
        assert (part["prompt_length"] == len(ids)).all()
        assert part["last"].tolist() == [False] * (len(tokens) - 1) + [True]
        assert len(tokens) == 6 or tokens[-1] in eos  # stops at EOS, never past it
        assert all(t < vocab for t in tokens)
        sequence = torch.tensor([ids + tokens])
        with torch.no_grad():
            expect_t = target(sequence).logits[0, len(ids) - 1 : -1, :vocab].numpy()
            expect_d = draft(sequence).logits[0, len(ids) - 1 : -1, :vocab].numpy()
        np.testing.assert_allclose(target_rows[part.index], expect_t, rtol=0, atol=1e-5)
        np.testing.assert_allclose(draft_rows[part.index], expect_d, rtol=0, atol=1e-5)
    if family == "gpt2":  # no tokenizer: cut to the smaller width, with one warning line
        assert "warning" in err and "264" in err and len(err.strip().splitlines()) == 1
    else:
        assert err == ""


def test_manifest_records_the_run(models: dict, prompt_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "dump"
    assert main(_args(models["llama"], prompt_file, out, "--max-new-tokens", "2")) == 0
    manifest = open_dump(out).manifest
    extra = manifest["extra"]
    assert manifest["target_model"] == str(models["llama"]["target"].resolve())
    assert manifest["draft_model"] == str(models["llama"]["draft"].resolve())
    assert manifest["logits_processing"] == "raw" and manifest["dtype"] == "float32"
    assert manifest["target_vocab_size"] == manifest["draft_vocab_size"] == 250
    assert manifest["tokenizer_vocab_size"] == 250
    for key in ("target", "draft", "tokenizer", "prompts", "generation", "versions", "device"):
        assert key in extra, key
    assert extra["prompts"]["sha256"] == capture.prompt_file_info(prompt_file)["sha256"]
    assert extra["generation"]["seed"] == 0 and extra["generation"]["generator"] == "target"
    assert extra["versions"]["torch"] == torch.__version__
    assert extra["vocabulary"] == {
        "size": 250,
        "target_width": 256,
        "draft_width": 272,
        "tokenizer_length": 250,
        "cut": "tokenizer",
    }
    assert extra["user"]["command"][0] == "log_distributions"


def test_text_prompts_go_through_the_tokenizer(
    models: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w5 w6 w7\n\nw9 w10\n", encoding="utf-8")
    out = tmp_path / "dump"
    assert main(_args(models["llama"], prompts, out, "--max-new-tokens", "3")) == 0
    _, _, meta = dump_rows(out)
    assert sorted(meta["prompt_id"].unique()) == [0, 1]  # the blank line is no prompt
    assert set(meta.loc[meta["prompt_id"] == 1, "prompt_length"]) == {2}
    jsonl = _write_prompts(tmp_path / "text.jsonl", [{"text": "w5 w6 w7"}, {"text": "w9 w10"}])
    assert main(_args(models["llama"], jsonl, tmp_path / "dump2", "--max-new-tokens", "3")) == 0
    np.testing.assert_array_equal(dump_rows(out)[0], dump_rows(tmp_path / "dump2")[0])


# --------------------------------------------------------------------------------------------
# batching and alignment


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_batched_and_unbatched_logging_agree(family: str, models: dict, tmp_path: Path) -> None:
    pair = models[family]
    prompts = [capture.Prompt(i, tuple(ids)) for i, ids in enumerate(PROMPT_IDS)]
    dumps = []
    for batch in (1, 4):
        with pytest.warns(UserWarning) if family == "gpt2" else _no_warning():
            dumps.append(
                capture.log_distributions(
                    pair["target"], pair["draft"], prompts, tmp_path / f"b{batch}",
                    max_new_tokens=5, batch_size=batch, seed=7, progress=False,
                )
            )  # fmt: skip
    (t1, d1, m1), (t4, d4, m4) = dump_rows(dumps[0]), dump_rows(dumps[1])
    assert m1.equals(m4)
    np.testing.assert_allclose(t1, t4, rtol=0, atol=1e-5)
    np.testing.assert_allclose(d1, d4, rtol=0, atol=1e-5)


def test_a_config_object_logs_what_its_keywords_log(models: dict, tmp_path: Path) -> None:
    """``config=CaptureConfig(...)`` is the keywords at once: the same rows and settings; both
    at once are refused."""
    pair = models["llama"]
    prompts = [capture.Prompt(i, tuple(ids)) for i, ids in enumerate(PROMPT_IDS[:3])]
    settings = {"max_new_tokens": 3, "batch_size": 2, "seed": 5, "top_p": 0.9}
    by_keywords = capture.log_distributions(
        pair["target"], pair["draft"], prompts, tmp_path / "keywords", progress=False, **settings
    )
    config = capture.CaptureConfig(progress=False, **settings)
    by_config = capture.log_distributions(
        pair["target"], pair["draft"], prompts, tmp_path / "config", config=config
    )
    (t1, d1, m1), (t2, d2, m2) = dump_rows(by_keywords), dump_rows(by_config)
    assert m1.equals(m2) and np.array_equal(t1, t2) and np.array_equal(d1, d2)
    generation = [open_dump(p).manifest["extra"]["generation"] for p in (by_keywords, by_config)]
    assert generation[0] == generation[1] and generation[0]["top_p"] == 0.9
    with pytest.raises(capture.CaptureError, match="keywords or as config, not both"):
        capture.log_distributions(
            pair["target"], pair["draft"], prompts, tmp_path / "both", config=config, seed=1
        )


class _no_warning:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_teacher_forced_logits_are_padding_free(family: str, models: dict) -> None:
    model = _load(models[family]["target"])
    sequences = [[*ids, 20, 21] for ids in PROMPT_IDS]
    counts = [2, 5, 1, 3, 4]
    rows = capture.teacher_forced_logits(model, sequences, counts, vocab_size=200)
    for seq, n, got in zip(sequences, counts, rows, strict=True):
        with torch.no_grad():
            expect = model(torch.tensor([seq])).logits[0, len(seq) - 1 - n : -1, :200]
        assert got.shape == (n, 200)
        torch.testing.assert_close(got, expect, rtol=0, atol=1e-5)
    steps = capture.aligned_logits(model, model, PROMPT_IDS[:2], [[20, 21], [22]], vocab_size=VOCAB)
    assert steps.target.shape == (3, VOCAB) and torch.equal(steps.target, steps.draft)
    assert steps.sequence.tolist() == [0, 0, 1]
    assert steps.position.tolist() == [3, 4, 9] and steps.token.tolist() == [20, 21, 22]


def test_sampling_is_per_prompt_and_greedy_at_temperature_zero() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    gens = [capture.prompt_generator(1, i) for i in range(3)]
    alone = capture.sample_tokens(logits[1:2], [capture.prompt_generator(1, 1)])
    together = capture.sample_tokens(logits, gens)
    assert together[1] == alone[0]  # a row's token does not depend on the others
    assert capture.sample_tokens(logits, gens, temperature=0).tolist() == (
        logits.argmax(-1).tolist()
    )
    assert capture.sample_tokens(logits, gens, top_p=1e-9).tolist() == logits.argmax(-1).tolist()
    same = capture.prompt_generator(1, 2)
    assert torch.rand(1, generator=same) == torch.rand(1, generator=capture.prompt_generator(1, 2))


def test_generation_stops_at_eos(models: dict, tmp_path: Path) -> None:
    target, draft = _load(models["gpt2"]["target"]), _load(models["gpt2"]["draft"])
    prompt = capture.Prompt(0, (5, 6, 7))
    with torch.no_grad():
        first = int(target(torch.tensor([prompt.input_ids])).logits[0, -1, :VOCAB].argmax())
    target.generation_config.eos_token_id = first
    with pytest.warns(UserWarning, match="cut to the first 256"):
        out = capture.log_distributions(
            target, draft, [prompt], tmp_path / "dump", temperature=0.0, max_new_tokens=5,
            progress=False,
        )  # fmt: skip
    _, _, meta = dump_rows(out)
    assert meta["token"].tolist() == [first] and meta["last"].tolist() == [True]
    assert first in open_dump(out).manifest["extra"]["generation"]["eos_token_ids"]


# --------------------------------------------------------------------------------------------
# vocabularies


def test_vocabulary_widths_are_cut_and_recorded(models: dict, tmp_path: Path) -> None:
    prompts = [capture.Prompt(0, (5, 6))]
    pair = models["gpt2"]
    with pytest.warns(UserWarning, match="264"):
        out = capture.log_distributions(
            pair["target"], pair["draft"], prompts, tmp_path / "gpt2", max_new_tokens=2,
            progress=False,
        )  # fmt: skip
    dump = open_dump(out)
    assert dump.target_vocab_size == dump.draft_vocab_size == 256
    assert dump.manifest["extra"]["vocabulary"] == {
        "size": 256,
        "target_width": 256,
        "draft_width": 264,
        "tokenizer_length": None,
        "cut": "smaller width",
    }
    assert dump.manifest["extra"]["target"]["logit_width"] == 256
    assert dump.manifest["extra"]["draft"]["logit_width"] == 264
    tok = capture.load_tokenizer(models["llama"]["target"])
    target, draft = _load(models["llama"]["target"]), _load(models["llama"]["draft"])
    vocab = capture.plan_vocabulary(target, draft, tok)
    assert (vocab.size, vocab.cut) == (250, "tokenizer")
    other = capture.load_tokenizer(models["big_tokenizer"]["dir"])
    with pytest.raises(capture.CaptureError, match="300 tokens"):
        capture.plan_vocabulary(target, draft, other)
    with pytest.raises(capture.CaptureError, match="tokenizers differ"):
        capture.plan_vocabulary(target, draft, tok, draft_tokenizer=other)


# --------------------------------------------------------------------------------------------
# resuming


def test_resume_after_an_interruption_equals_an_uninterrupted_run(
    models: dict, prompt_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    options = ["--max-new-tokens", "5", "--batch-size", "2", "--shard-steps", "4", "--seed", "5"]
    pair = models["llama"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(_args(pair, prompt_file, whole, *options)) == 0
    write_shard = DumpWriter.write_shard
    calls = []

    def stop_at_second_shard(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return write_shard(self, *args, **kwargs)

    monkeypatch.setattr(DumpWriter, "write_shard", stop_at_second_shard)
    assert main(_args(pair, prompt_file, cut, *options)) == 130
    assert "--resume" in one_error_line(capsys)
    monkeypatch.setattr(DumpWriter, "write_shard", write_shard)
    partial = open_dump(cut)
    assert len(partial.shards) == 1 and partial.check() == {}
    assert [p.name for p in _files(cut)] == [
        "manifest.json", "shard-00000.parquet", "shard-00000.safetensors",
    ]  # fmt: skip
    # resuming with other settings is refused, in one line
    assert main(_args(pair, prompt_file, cut, *options[:-1], "6", "--resume")) == 1
    assert "generation" in one_error_line(capsys)
    assert main(_args(pair, prompt_file, cut, *options)) == 1
    assert "--resume" in one_error_line(capsys)
    assert main(_args(pair, prompt_file, cut, *options, "--resume")) == 0
    a, b = open_dump(whole), open_dump(cut)
    assert [s.num_steps for s in a.shards] == [s.num_steps for s in b.shards]
    (ta, da, ma), (tb, db, mb) = dump_rows(whole), dump_rows(cut)
    assert ma.equals(mb)
    np.testing.assert_allclose(ta, tb, rtol=0, atol=1e-5)
    np.testing.assert_allclose(da, db, rtol=0, atol=1e-5)
    # resuming a complete dump does nothing
    assert main(_args(pair, prompt_file, cut, *options, "--resume")) == 0
    assert open_dump(cut).num_steps == a.num_steps


# --------------------------------------------------------------------------------------------
# storage and analysis


def test_dump_feeds_the_analysis(models: dict, prompt_file: Path, tmp_path: Path) -> None:
    pair = models["llama"]
    full, topk = tmp_path / "full", tmp_path / "topk"
    assert main(_args(pair, prompt_file, full, "--max-new-tokens", "4")) == 0
    assert main(_args(pair, prompt_file, topk, "--max-new-tokens", "4", "--store", "topk:8")) == 0
    shard = open_dump(full).read_shard(0)
    dist = shard.distributions()
    alpha = otbound.optimal_acceptance(dist.target, dist.draft, n=2)
    assert alpha.shape == (shard.num_steps,) and np.all((alpha >= 0) & (alpha <= 1 + 1e-12))
    top = open_dump(topk).read_shard(0)
    assert top.is_topk and top.target.k == 8
    expect = otbound.dumps.TopKRows.from_logits(shard.target, 8)
    np.testing.assert_array_equal(top.target.ids, expect.ids)
    np.testing.assert_allclose(top.target.logsumexp, expect.logsumexp, rtol=1e-6)
    interval = top.acceptance_interval(2)
    assert np.all(interval.lower <= alpha + 1e-9) and np.all(alpha <= interval.upper + 1e-9)


def test_bfloat16_storage(models: dict, prompt_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "bf16"
    args = ["--max-new-tokens", "3", "--storage-dtype", "bfloat16", "--max-prompts", "2"]
    assert main(_args(models["llama"], prompt_file, out, *args)) == 0
    dump = open_dump(out)
    assert dump.dtype == "bfloat16"
    reference = tmp_path / "f32"
    assert main(_args(models["llama"], prompt_file, reference, *args[:2], *args[4:])) == 0
    np.testing.assert_allclose(dump_rows(out)[0], dump_rows(reference)[0], rtol=1e-2, atol=1e-2)
    assert sorted(dump_rows(out)[2]["prompt_id"].unique()) == [0, 1]


# --------------------------------------------------------------------------------------------
# prompts


def test_read_prompts(models: dict, tmp_path: Path) -> None:
    path = _write_prompts(
        tmp_path / "p.jsonl",
        [{"input_ids": [1, 2, 3, 4, 5]}, {"input_tokens": [7, 8]}, {"text": "w3 w4 w5"}],
    )
    tok = capture.load_tokenizer(models["llama"]["target"])
    prompts = capture.read_prompts(path, tok, max_prompt_tokens=3)
    assert [p.input_ids for p in prompts] == [(3, 4, 5), (7, 8), (3, 4, 5)]
    assert [p.truncated for p in prompts] == [2, 0, 0] and prompts[2].text == "w3 w4 w5"
    right = capture.read_prompts(path, tok, max_prompt_tokens=3, truncation_side="right")
    assert right[0].input_ids == (1, 2, 3)
    assert len(capture.read_prompts(path, tok, max_prompts=2)) == 2
    with pytest.raises(capture.CaptureError, match="line 3: a text prompt needs a tokenizer"):
        capture.read_prompts(path)


# --------------------------------------------------------------------------------------------
# bad input: one line on stderr, a non-zero status, nothing half written


def _bad_cases(models: dict, tmp_path: Path, prompt_file: Path) -> dict[str, tuple[list, str]]:
    llama = models["llama"]
    not_lm = tmp_path / "vit"
    transformers.ViTConfig(hidden_size=32, num_hidden_layers=1).save_pretrained(not_lm)
    empty = tmp_path / "empty"
    empty.mkdir()
    bad_line = tmp_path / "bad.jsonl"
    bad_line.write_text('{"input_ids": [1, 2]}\n\n{"input_ids": [1, "x"]}\n', encoding="utf-8")
    bad_json = tmp_path / "bad-json.jsonl"
    bad_json.write_text('{"input_ids": [1, 2]}\n{"input_ids": [1, 2\n', encoding="utf-8")
    too_high = _write_prompts(tmp_path / "high.jsonl", [{"input_ids": [1]}, {"input_ids": [251]}])
    a_file = tmp_path / "a-file"
    a_file.write_text("x", encoding="utf-8")
    missing = {**llama, "target": tmp_path / "missing"}
    return {
        "missing model": (_args(missing, prompt_file, tmp_path / "o"), "no such model directory"),
        "no config": (_args({**llama, "draft": empty}, prompt_file, tmp_path / "o"), "config"),
        "not a causal LM": (
            _args({**llama, "draft": not_lm}, prompt_file, tmp_path / "o"),
            "no causal language model",
        ),
        "tokenizer too long": (
            _args(
                llama,
                prompt_file,
                tmp_path / "o",
                "--tokenizer",
                str(models["big_tokenizer"]["dir"]),
            ),
            "300 tokens",
        ),
        "bad prompt line": (_args(llama, bad_line, tmp_path / "o"), "line 3"),
        "bad json": (_args(llama, bad_json, tmp_path / "o"), "line 2: not valid JSON"),
        "id beyond vocabulary": (_args(llama, too_high, tmp_path / "o"), "line 2: token id 251"),
        "unwritable out": (_args(llama, prompt_file, a_file / "dump"), "--out"),
        "no room": (
            _args(llama, prompt_file, tmp_path / "o", "--max-new-tokens", "64"),
            "leaves no room",
        ),
        "bad store": (_args(llama, prompt_file, tmp_path / "o", "--store", "top5"), "topk:K"),
        "too long": (
            _args(llama, prompt_file, tmp_path / "o", "--max-new-tokens", "60"),
            "line 2: 9 prompt tokens + --max-new-tokens 60 exceed the target's context of 64 "
            "positions; set --max-prompt-tokens to 4",
        ),
    }


CASES = [
    "missing model",
    "no config",
    "not a causal LM",
    "tokenizer too long",
    "bad prompt line",
    "bad json",
    "id beyond vocabulary",
    "unwritable out",
    "bad store",
    "too long",
    "no room",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line(
    case: str, models: dict, prompt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args, expected = _bad_cases(models, tmp_path, prompt_file)[case]
    assert main(args) == 1
    line = one_error_line(capsys)
    assert line.startswith("log_distributions: error:") and expected in line, line
    assert _files(tmp_path / "o") == []


def test_out_of_memory_suggests_a_smaller_batch(
    models: dict, prompt_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def no_memory(self, *args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(transformers.LlamaForCausalLM, "forward", no_memory)
    out = tmp_path / "o"
    assert main(_args(models["llama"], prompt_file, out, "--batch-size", "4")) == 1
    line = one_error_line(capsys)
    assert "out of memory" in line and "--batch-size (now 4)" in line, line
    assert _files(out) == []


def test_hub_names_fail_readably(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        transformers.AutoConfig,
        "from_pretrained",
        lambda *a, **k: (_ for _ in ()).throw(OSError("We couldn't connect to the hub.\nMore")),
    )
    with pytest.raises(
        capture.CaptureError, match=r"tried the Hugging Face hub\): We couldn't connect"
    ):
        capture.load_model("some-org/some-model")


@pytest.mark.parametrize("generator", ["target", "draft"])
def test_greedy_tokens_are_the_generators_argmax(
    generator: str, models: dict, prompt_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dump"
    args = ["--temperature", "0", "--generator", generator, "--batch-size", "2"]
    assert main(_args(models["llama"], prompt_file, out, *args)) == 0
    target_rows, draft_rows, meta = dump_rows(out)
    rows = target_rows if generator == "target" else draft_rows
    np.testing.assert_array_equal(rows.argmax(axis=1), meta["token"].to_numpy())
    assert open_dump(out).manifest["extra"]["generation"]["generator"] == generator
