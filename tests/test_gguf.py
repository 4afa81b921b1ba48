"""GGUF checkpoints and chat prompts: tiny random Llama and Qwen2 models written both as Hugging
Face directories and, with the same float32 weights, as GGUF files (the ``gguf`` package's
writer, with a byte-level BPE tokenizer and a chat template in the metadata); otbound must log
the same rows from either, record each file, and refuse bad files with one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from capture_helpers import dump_rows, one_error_line, tiny_config  # noqa: E402

from otbound import capture  # noqa: E402
from otbound.cli.log_distributions import main  # noqa: E402
from otbound.cli.simulate_trees import main as simulate_main  # noqa: E402
from otbound.dumps import open_dump  # noqa: E402

#: Merges of the tiny byte-level BPE vocabulary (GPT-2's byte alphabet spells the bytes).
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("Ġ", "t")]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: ChatML, as Qwen's instruct models use it.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FAMILIES = ("llama", "qwen2")
EPS, ROPE_THETA = 1e-6, 10000.0
PROMPTS = [
    {"text": "hello world"},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]},
    {"turns": ["tell the world", "and again"]},
    {"input_ids": [5, 6, 7, 8]},
]


def _tokens() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    spelling = bytes_to_unicode()
    return [spelling[b] for b in range(256)] + ["".join(m) for m in MERGES] + SPECIALS


def _hf_tokenizer(tokens: list[str]) -> object:
    """The same byte-level BPE tokenizer, built with ``tokenizers`` (not from the GGUF)."""
    bpe = tokenizers.models.BPE({t: i for i, t in enumerate(tokens)}, MERGES)
    backend = tokenizers.Tokenizer(bpe)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=SPECIALS[0],
        eos_token=SPECIALS[2],
        additional_special_tokens=SPECIALS[1:2],
        chat_template=CHAT_TEMPLATE,
    )


def _config(family: str, vocab: int, layers: int) -> object:
    return tiny_config(
        family,
        vocab,
        layers,
        rms_norm_eps=EPS,
        rope_theta=ROPE_THETA,
        tie_word_embeddings=False,
        bos_token_id=vocab - 3,
        eos_token_id=vocab - 1,
    )


def _permuted(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order of a Llama q/k projection (transformers undoes it on load)."""
    shape = weight.shape
    return (
        weight.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
    )


def write_gguf(model: object, path: Path, tokens: list[str], *, arch: str | None = None) -> Path:
    """A GGUF file of a Llama or Qwen2 model's float32 weights, with its tokenizer."""
    config = model.config
    family = config.model_type
    kind = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}[family]
    names = gguf.get_tensor_name_map(kind, config.num_hidden_layers)
    writer = gguf.GGUFWriter(str(path), arch or gguf.MODEL_ARCH_NAMES[kind])
    writer.add_name(f"tiny {family}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_vocab_size(config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_merges([" ".join(m) for m in MERGES])
    writer.add_token_types([1] * (len(tokens) - len(SPECIALS)) + [3] * len(SPECIALS))
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_chat_template(CHAT_TEMPLATE)
    heads = {"q_proj": config.num_attention_heads, "k_proj": config.num_key_value_heads}
    for key, tensor in model.state_dict().items():
        base, suffix = key.rsplit(".", 1)
        weight = tensor.detach().numpy().astype(np.float32)
        projection = base.rsplit(".", 1)[-1]
        if family == "llama" and suffix == "weight" and projection in heads:
            weight = _permuted(weight, heads[projection])
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _pair_member(family: str, root: Path, role: str, layers: int, seed: int) -> dict[str, Path]:
    """One model as a Hugging Face directory (with the tokenizer) and as a GGUF file."""
    tokens = _tokens()
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(_config(family, len(tokens), layers))
    hf_dir = root / f"{family}-{role}"
    model.save_pretrained(hf_dir)
    _hf_tokenizer(tokens).save_pretrained(hf_dir)
    return {"hf": hf_dir, "gguf": write_gguf(model.eval(), root / f"{family}-{role}.gguf", tokens)}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, Path]]]:
    """For each family a target (2 layers) and a draft (1 layer), each both ways."""
    root = tmp_path_factory.mktemp("gguf")
    return {
        family: {
            "target": _pair_member(family, root, "target", 2, 10 * i),
            "draft": _pair_member(family, root, "draft", 1, 10 * i + 1),
        }
        for i, family in enumerate(FAMILIES)
    }


@pytest.fixture
def prompt_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


def _args(target: Path, draft: Path, prompts: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--target", str(target), "--draft", str(draft), "--prompts", str(prompts),
        "--out", str(out), "--quiet", "--max-new-tokens", "5", "--seed", "4", *extra,
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------
# the same rows from a GGUF file as from the same weights in a directory


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_logs_the_rows_of_the_same_weights_in_a_directory(
    family: str, pairs: dict, prompt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    pair = pairs[family]
    runs = {}
    for source in ("hf", "gguf"):
        out = tmp_path / source
        args = _args(pair["target"][source], pair["draft"][source], prompt_file, out)
        assert main([*args, "--chat-template", "--batch-size", "3"]) == 0, capsys.readouterr()
        runs[source] = dump_rows(out)
    assert capsys.readouterr().err == ""
    (hf_t, hf_d, hf_meta), (gg_t, gg_d, gg_meta) = runs["hf"], runs["gguf"]
    assert len(hf_meta) >= len(PROMPTS) and hf_t.shape == (len(hf_meta), len(_tokens()))
    pd.testing.assert_frame_equal(hf_meta, gg_meta)  # same prompt ids, so same tokens
    np.testing.assert_allclose(gg_t, hf_t, rtol=0, atol=1e-5)
    np.testing.assert_allclose(gg_d, hf_d, rtol=0, atol=1e-5)
    assert not np.allclose(gg_t, gg_d, atol=1e-2)  # the target and the draft differ
    # and both equal a plain forward pass of the GGUF target over prompt + continuation
    model = capture.load_model(pair["target"]["gguf"], device="cpu")
    tok = capture.load_tokenizer(pair["target"]["gguf"])
    first = gg_meta[gg_meta["prompt_id"] == 1]
    chat = tok.apply_chat_template(
        PROMPTS[1]["messages"], add_generation_prompt=True, tokenize=False
    )
    ids = tok(chat, add_special_tokens=False)["input_ids"]
    assert int(first["prompt_length"].iloc[0]) == len(ids)
    with torch.no_grad():
        logits = model(torch.tensor([ids + first["token"].astype(int).tolist()])).logits
    np.testing.assert_allclose(gg_t[first.index], logits[0, len(ids) - 1 : -1].numpy(), atol=1e-5)


def test_manifest_records_each_gguf_file(pairs: dict, prompt_file: Path, tmp_path: Path) -> None:
    pair = pairs["qwen2"]
    out = tmp_path / "dump"
    args = _args(pair["target"]["gguf"], pair["draft"]["gguf"], prompt_file, out, "--chat-template")
    assert main([*args, "--max-prompts", "2"]) == 0
    manifest = open_dump(out).manifest
    extra = manifest["extra"]
    for role in ("target", "draft"):
        path = pair[role]["gguf"]
        record = extra[role]["gguf"]
        assert record["file"] == str(path.resolve()) == manifest[f"{role}_model"]
        assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert record["size"] == path.stat().st_size
        assert record["architecture"] == "qwen2" and record["quantisation"] == "F32"
        assert record["name"] == "tiny qwen2" and record["tensor_types"]["F32"] > 0
    assert extra["tokenizer"]["name"] == str(pair["target"]["gguf"].resolve())
    assert extra["prompts"]["chat_template"] is True


def test_an_explicit_tokenizer_replaces_the_files(
    pairs: dict, prompt_file: Path, tmp_path: Path
) -> None:
    pair = pairs["llama"]
    out = tmp_path / "dump"
    tokenizer = pair["target"]["hf"]
    args = _args(pair["target"]["gguf"], pair["draft"]["gguf"], prompt_file, out)
    assert main([*args, "--tokenizer", str(tokenizer), "--max-prompts", "1"]) == 0
    assert open_dump(out).manifest["extra"]["tokenizer"]["name"] == str(tokenizer.resolve())
    assert open_dump(out).manifest["extra"]["prompts"]["chat_template"] is False


def test_simulate_trees_runs_on_gguf_files(pairs: dict, prompt_file: Path, tmp_path: Path) -> None:
    pair = pairs["llama"]
    outs = {}
    for source in ("hf", "gguf"):
        outs[source] = tmp_path / source
        args = [
            "--target", str(pair["target"][source]), "--draft", str(pair["draft"][source]),
            "--prompts", str(prompt_file), "--max-prompts", "2", "--max-new-tokens", "4",
            "--verifiers", "rrs", "--trees", "chain:2", "--no-prediction", "--chat-template",
            "--out", str(outs[source]), "--quiet",
        ]  # fmt: skip
        assert simulate_main(args) == 0
    steps = {s: pd.read_parquet(o / "tree_steps.parquet") for s, o in outs.items()}
    pd.testing.assert_frame_equal(steps["hf"], steps["gguf"])
    record = json.loads((outs["gguf"] / "run.json").read_text(encoding="utf-8"))
    assert (
        record["models"]["target"]["gguf"]["sha256"]
        == hashlib.sha256(pair["target"]["gguf"].read_bytes()).hexdigest()
    )
    assert record["models"]["draft"]["gguf"]["architecture"] == "llama"
    hf_record = json.loads((outs["hf"] / "run.json").read_text(encoding="utf-8"))
    assert hf_record["models"]["target"]["gguf"] is None


# --------------------------------------------------------------------------------------------
# the header


def test_read_gguf_header(pairs: dict) -> None:
    path = pairs["llama"]["target"]["gguf"]
    header = capture.read_gguf_header(path)
    assert header.architecture == "llama" and header.name == "tiny llama"
    assert header.quantisation == "F32" and header.has_tokenizer
    assert header.metadata["tokenizer.ggml.tokens"] == len(_tokens())  # long arrays: lengths
    assert header.metadata["tokenizer.ggml.model"] == "gpt2"
    assert header.data_end == header.size == path.stat().st_size
    assert capture.is_gguf(path) and capture.is_gguf("X.GGUF") and not capture.is_gguf(path.parent)
    assert capture.has_tokenizer(path)


# --------------------------------------------------------------------------------------------
# chat prompts


def test_chat_prompts_follow_the_template(pairs: dict, prompt_file: Path) -> None:
    tok = capture.load_tokenizer(pairs["qwen2"]["target"]["hf"])
    chats = capture.read_prompts(prompt_file, tok, chat_template=True)
    users = [
        [{"role": "user", "content": "hello world"}],
        PROMPTS[1]["messages"],
        [{"role": "user", "content": "tell the world"}],  # MT-bench: the first turn
    ]
    for prompt, messages in zip(chats, users, strict=False):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert text.endswith("<|im_start|>assistant\n") and prompt.text == text
        assert list(prompt.input_ids) == tok(text, add_special_tokens=False)["input_ids"]
    assert chats[3].input_ids == (5, 6, 7, 8)  # token ids are used as given
    plain = capture.read_prompts(prompt_file, tok, max_prompts=1)
    assert list(plain[0].input_ids) == tok("hello world")["input_ids"]
    assert plain[0].text == "hello world"


def test_turns_without_the_template_are_the_first_turn(pairs: dict, tmp_path: Path) -> None:
    tok = capture.load_tokenizer(pairs["qwen2"]["target"]["hf"])
    path = tmp_path / "mt.jsonl"
    path.write_text(json.dumps({"question_id": 81, "turns": ["hello", "more"]}) + "\n")
    assert capture.read_prompts(path, tok)[0].text == "hello"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "needs chat_template=True"),
        ({"messages": []}, "'messages' must be a non-empty list"),
        ({"messages": [{"content": "hi"}]}, "'role' and 'content'"),
        ({"turns": []}, "'turns' must be a non-empty list"),
        ({"turns": [3]}, "the first of 'turns' must be a non-empty string"),
        ({"prompt": "hi"}, "none of 'input_ids'"),
    ],
)
def test_bad_chat_prompts_are_refused(
    line: dict, expected: str, pairs: dict, tmp_path: Path
) -> None:
    tok = capture.load_tokenizer(pairs["qwen2"]["target"]["hf"])
    path = tmp_path / "p.jsonl"
    path.write_text('{"text": "hello"}\n' + json.dumps(line) + "\n", encoding="utf-8")
    with pytest.raises(capture.CaptureError, match=rf"line 2: .*{expected}"):
        capture.read_prompts(path, tok)


def test_chat_template_needs_a_tokenizer_with_one(
    pairs: dict, prompt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    tok = capture.load_tokenizer(pairs["qwen2"]["target"]["hf"])
    tok.chat_template = None
    with pytest.raises(capture.CaptureError, match="has no chat template"):
        capture.read_prompts(prompt_file, tok, chat_template=True)


# --------------------------------------------------------------------------------------------
# bad files: one line, exit status 2, nothing written


def _truncated(path: Path, out: Path, keep: int) -> Path:
    out.write_bytes(path.read_bytes()[:keep])
    return out


def _corrupt(path: Path, out: Path) -> Path:
    data = bytearray(path.read_bytes())
    data[:4] = b"GGUX"
    out.write_bytes(bytes(data))
    return out


def _unsupported(pairs: dict, out: Path) -> Path:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config("llama", len(_tokens()), 1))
    return write_gguf(model, out, _tokens(), arch="otbound-no-such-arch")


def _other_vocabulary(out: Path) -> Path:
    tokens = _tokens()
    tokens[256], tokens[257] = tokens[257], tokens[256]  # "he" and "ll" swap ids
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config("llama", len(tokens), 1))
    return write_gguf(model, out, tokens)


def _bad_draft(case: str, pairs: dict, tmp_path: Path) -> tuple[Path, str]:
    draft = pairs["llama"]["draft"]["gguf"]
    size = draft.stat().st_size
    if case == "truncated":
        return _truncated(draft, tmp_path / "cut.gguf", size - 100), "truncated GGUF file"
    if case == "header cut":
        return _truncated(draft, tmp_path / "head.gguf", 200), "its header ends early"
    if case == "corrupt":
        return _corrupt(draft, tmp_path / "bad.gguf"), "not a valid GGUF file"
    if case == "unsupported":
        return _unsupported(pairs, tmp_path / "arch.gguf"), "'otbound-no-such-arch' cannot be"
    return _other_vocabulary(tmp_path / "vocab.gguf"), "the first at id 256"


BAD = ["truncated", "header cut", "corrupt", "unsupported", "other vocabulary"]


@pytest.mark.parametrize("case", BAD)
def test_a_bad_gguf_draft_is_one_line_and_exit_2(
    case: str, pairs: dict, prompt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    draft, expected = _bad_draft(case, pairs, tmp_path)
    out = tmp_path / "o"
    assert main(_args(pairs["llama"]["target"]["gguf"], draft, prompt_file, out)) == 2
    line = one_error_line(capsys)
    assert line.startswith("log_distributions: error:") and expected in line, line
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("case", ["truncated", "other vocabulary"])
def test_simulate_trees_refuses_a_bad_draft(
    case: str, pairs: dict, prompt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    draft, expected = _bad_draft(case, pairs, tmp_path)
    args = [
        "--target", str(pairs["llama"]["target"]["gguf"]), "--draft", str(draft),
        "--prompts", str(prompt_file), "--out", str(tmp_path / "o"), "--quiet",
    ]  # fmt: skip
    assert simulate_main(args) == 2
    line = one_error_line(capsys)
    assert line.startswith("simulate_trees: error:") and expected in line, line
    assert not list((tmp_path / "o").glob("*.*"))


def test_a_missing_gguf_is_one_line(
    pairs: dict, prompt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    draft = pairs["llama"]["draft"]["gguf"]
    args = _args(tmp_path / "none.gguf", draft, prompt_file, tmp_path / "o")
    assert main(args) == 1
    assert "none.gguf: no such GGUF file" in one_error_line(capsys)
