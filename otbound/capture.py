"""Logging target and draft next-token distributions from Hugging Face causal LMs.

For each batch of prompts one model, the *generator* (the target by default), samples a
continuation with its KV cache; then **both** models are run teacher-forced over the same
token sequence (prompt + continuation), so their rows are aligned position by position. One
step per continuation token is written to an otbound dump (:class:`otbound.dumps.DumpWriter`):

* ``target_logits`` and ``draft_logits``: the raw logits (before temperature or filtering,
  which are applied at analysis time) of the distribution of the token at ``position``
  given the tokens before it, cut to the shared vocabulary (full rows or top-k rows);
* Parquet metadata: ``prompt_id`` (the prompt's index in the prompt file, 0-based, blank
  lines not counted), ``position`` (index of the predicted token in prompt + continuation,
  0-based), ``token`` (the token that actually followed), ``prompt_length`` (tokens in the
  prompt as run, after truncation) and ``last`` (true on the continuation's final step).

Sampling is seeded per prompt (a ``torch.Generator`` seeded from ``(seed, prompt_id)``, drawn
on the CPU), so the text does not depend on batching or on the device's random numbers, and
a run interrupted and resumed (``resume=True``) gives the dump an uninterrupted run gives.
Batches are left-padded with attention masks and position ids counted from each row's first
real token, so batched and unbatched runs log the same rows (to float rounding).

    python scripts/log_distributions.py --target DIR --draft DIR --prompts FILE --out DUMP

Needs ``torch`` and ``transformers`` (``pip install 'otbound[torch]'``); ``import otbound``
does not import this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import platform
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from otbound.dumps import DumpWriter, TopKRows
from otbound.dumps._format import MANIFEST_NAME, DumpError, parse_storage

#: Models whose samples may form the text.
GENERATORS = ("target", "draft")
#: Model dtypes, by name.
MODEL_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Dtypes the logits may be stored in.
STORAGE_DTYPES = ("float16", "bfloat16", "float32")
#: Which end of a long prompt ``max_prompt_tokens`` cuts: ``left`` keeps the last tokens.
TRUNCATION_SIDES = ("left", "right")
#: Shards hold at most this many steps when ``shard_steps`` is not given ...
MAX_SHARD_STEPS = 1024
#: ... and at most about this many bytes of logits (both models together).
SHARD_BYTES = 256 * 2**20
#: Version of what this module records (manifest ``extra`` and the extra Parquet columns).
CAPTURE_VERSION = 1
#: Files that mark a directory as holding a tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
)
#: Settings that must not change when a run is resumed (dotted paths into ``extra``).
RESUME_KEYS = (
    "target.name",
    "draft.name",
    "tokenizer.name",
    "model_dtype",
    "vocabulary",
    "store",
    "storage_dtype",
    "prompts.sha256",
    "prompts.max_prompt_tokens",
    "prompts.truncation_side",
    "prompts.add_special_tokens",
    "generation",
)
_ROW_CHUNK = 256  # rows converted to top-k at once (float64 copies of full rows)


class CaptureError(ValueError):
    """Logging cannot go on: the message is one readable line naming the input at fault."""


# --------------------------------------------------------------------------------------------
# prompts


@dataclass(frozen=True)
class Prompt:
    """One prompt, as token ids.

    Attributes
    ----------
    id : int
        Its index among the prompts (0-based; blank lines of a file are not counted).
    input_ids : tuple of int
        The tokens run, after any truncation.
    line : int or None
        Its line in the prompt file (1-based).
    text : str or None
        The text it was tokenized from, if any.
    truncated : int
        Tokens cut by ``max_prompt_tokens``.
    """

    id: int
    input_ids: tuple[int, ...]
    line: int | None = None
    text: str | None = None
    truncated: int = 0

    @property
    def where(self) -> str:
        """``"line 7"`` or ``"prompt 6"``, for messages."""
        return f"line {self.line}" if self.line is not None else f"prompt {self.id}"


def prompt_format(path: str | Path) -> str:
    """``"jsonl"`` or ``"text"``: by suffix (``.jsonl``/``.json``/``.ndjson``, ``.txt``),
    else ``"jsonl"`` when the first non-blank line starts with ``{``."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix == ".txt":
        return "text"
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                return "jsonl" if raw.lstrip().startswith(b"{") else "text"
    return "text"


def _token_list(value: object, where: str, key: str) -> list[int]:
    ok = isinstance(value, list) and value
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    if not ok:
        raise CaptureError(
            f"{where}: {key!r} must be a non-empty list of token ids (integers >= 0)"
        )
    return list(value)  # type: ignore[arg-type]


def _json_prompt(line: str, where: str) -> tuple[list[int] | None, str | None]:
    """Token ids or text of one JSON line."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CaptureError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise CaptureError(
            f"{where}: expected a JSON object with 'text', 'input_ids' or 'input_tokens'"
        )
    for key in ("input_ids", "input_tokens"):
        if key in obj:
            return _token_list(obj[key], where, key), None
    if "text" in obj:
        if not isinstance(obj["text"], str) or not obj["text"]:
            raise CaptureError(f"{where}: 'text' must be a non-empty string")
        return None, obj["text"]
    keys = ", ".join(map(repr, obj)) or "none"
    raise CaptureError(f"{where}: no 'text', 'input_ids' or 'input_tokens' (keys: {keys})")


def _encode(text: str, tokenizer: Any, where: str, add_special_tokens: bool) -> list[int]:
    if tokenizer is None:
        raise CaptureError(
            f"{where}: a text prompt needs a tokenizer (give one, or token ids as 'input_ids')"
        )
    ids = list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    if not ids:
        raise CaptureError(f"{where}: the text tokenizes to no tokens")
    return ids


def _truncate(ids: list[int], limit: int | None, side: str) -> tuple[list[int], int]:
    if limit is None or len(ids) <= limit:
        return ids, 0
    kept = ids[-limit:] if side == "left" else ids[:limit]
    return kept, len(ids) - limit


def read_prompts(
    path: str | Path,
    tokenizer: Any = None,
    *,
    add_special_tokens: bool = True,
    max_prompts: int | None = None,
    max_prompt_tokens: int | None = None,
    truncation_side: str = "left",
) -> list[Prompt]:
    """Read prompts from JSON lines or a plain text file.

    Parameters
    ----------
    path : str or pathlib.Path
        JSON lines, each an object with ``"input_ids"`` (or ``"input_tokens"``, the C4 token
        file's key): a list of token ids, or ``"text"``; or a plain text file, one prompt per
        line (see :func:`prompt_format`). Blank lines are skipped.
    tokenizer : transformers tokenizer, optional
        Needed for text prompts.
    add_special_tokens : bool, default True
        Passed to the tokenizer (a BOS token, for instance).
    max_prompts : int, optional
        Read only the first prompts.
    max_prompt_tokens : int, optional
        Cut longer prompts to this many tokens.
    truncation_side : {"left", "right"}, default "left"
        ``"left"`` drops the first tokens and keeps the last ones (the context nearest the
        continuation); ``"right"`` keeps the first ones.

    Returns
    -------
    list of Prompt

    Raises
    ------
    CaptureError
        A bad line (its number is given), or no prompts at all.
    """
    path = Path(path)
    _check_limits(max_prompts=max_prompts, max_prompt_tokens=max_prompt_tokens)
    if truncation_side not in TRUNCATION_SIDES:
        raise CaptureError(f"truncation_side must be 'left' or 'right', got {truncation_side!r}")
    jsonl = prompt_format(path) == "jsonl"
    prompts: list[Prompt] = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if max_prompts is not None and len(prompts) >= max_prompts:
                break
            where = f"{path}, line {number}"
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise CaptureError(f"{where}: not UTF-8 text") from None
            if not line.strip():
                continue
            ids, text = _json_prompt(line, where) if jsonl else (None, line)
            if ids is None:
                ids = _encode(str(text), tokenizer, where, add_special_tokens)
            ids, cut = _truncate(ids, max_prompt_tokens, truncation_side)
            prompts.append(Prompt(len(prompts), tuple(ids), number, text, cut))
    if not prompts:
        raise CaptureError(f"{path}: no prompts (the file is empty or blank)")
    return prompts


def prompt_file_info(path: str | Path) -> dict[str, Any]:
    """The prompt file as the manifest records it: path, sha256, size and format."""
    path = Path(path)
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            sha.update(block)
    return {
        "file": str(path.resolve()),
        "sha256": sha.hexdigest(),
        "size": path.stat().st_size,
        "format": prompt_format(path),
    }


def _prompts_digest(prompts: Sequence[Prompt]) -> str:
    """sha256 of the prompts' token ids (what identifies prompts given as objects)."""
    sha = hashlib.sha256()
    for prompt in prompts:
        sha.update(json.dumps([prompt.id, list(prompt.input_ids)]).encode("ascii"))
    return sha.hexdigest()


def _check_limits(**limits: int | None) -> None:
    for name, value in limits.items():
        if value is not None and value < 1:
            raise CaptureError(f"{name} must be at least 1, got {value}")


# --------------------------------------------------------------------------------------------
# models and tokenizers


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` checked, or ``cuda`` when CUDA is present, else ``cpu``."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise CaptureError(f"device {device!r}: {_first_line(exc)}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CaptureError(f"device {device!r}: CUDA is not available on this machine")
    return resolved


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def is_hub_name(text: str) -> bool:
    """Whether ``text`` reads as a Hugging Face hub name (``"gpt2"``, ``"org/model"``)."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", text) is not None


def _model_source(path: str | Path) -> tuple[str, bool]:
    """Where to load from and whether it is a local directory; missing paths are refused."""
    text = str(path)
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise CaptureError(f"{text}: not a model directory (it is a file)")
        if not (local / "config.json").is_file():
            raise CaptureError(f"{text}: no config.json: not a Hugging Face model directory")
        return str(local.resolve()), True
    if isinstance(path, Path) or not is_hub_name(text):
        raise CaptureError(f"{text}: no such model directory")
    return text, False


def _model_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in MODEL_DTYPES:
        raise CaptureError(f"dtype must be one of {', '.join(MODEL_DTYPES)}, got {dtype!r}")
    return MODEL_DTYPES[dtype]


def load_model(
    path: str | Path,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device | None = None,
    *,
    trust_remote_code: bool = False,
) -> Any:
    """A causal LM from a local directory (or a hub name), in eval mode on ``device``.

    Parameters
    ----------
    path : str or pathlib.Path
        A Hugging Face model directory (``config.json`` and weights), or a hub name
        (``"org/model"``), which needs the network or the local hub cache.
    dtype : {"float32", "float16", "bfloat16"} or torch.dtype, default "float32"
    device : str or torch.device, optional
        Default: ``cuda`` when present, else ``cpu``.
    trust_remote_code : bool, default False
        Allow model code shipped with the checkpoint.

    Returns
    -------
    transformers.PreTrainedModel

    Raises
    ------
    CaptureError
        A missing directory, one without a causal LM, weights that cannot be read, or no
        memory left on the device.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    source, local = _model_source(path)
    torch_dtype = _model_dtype(dtype)
    target_device = resolve_device(device)
    where = "" if local else " (not a local directory; tried the Hugging Face hub)"
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as exc:
        raise CaptureError(
            f"{path}: cannot read the model config{where}: {_first_line(exc)}"
        ) from None
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source, config=config, dtype=torch_dtype, trust_remote_code=trust_remote_code
        )
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise CaptureError(
                f"{path}: holds no causal language model (model type "
                f"{getattr(config, 'model_type', '?')!r} has no causal-LM head)"
            ) from None
        raise CaptureError(f"{path}: cannot load the model: {_first_line(exc)}") from None
    except Exception as exc:
        raise CaptureError(f"{path}: cannot load the model{where}: {_first_line(exc)}") from None
    with out_of_memory_guard(None, "loading the model"):
        model.to(target_device)
    return model.eval()


def has_tokenizer(path: str | Path) -> bool:
    """Whether a local directory holds tokenizer files."""
    local = Path(path).expanduser()
    return local.is_dir() and any((local / name).is_file() for name in TOKENIZER_FILES)


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False) -> Any:
    """A tokenizer from a local directory or a hub name.

    Raises
    ------
    CaptureError
        It cannot be loaded (the message says why).
    """
    from transformers import AutoTokenizer

    text = str(path)
    local = Path(text).expanduser()
    if not local.exists() and (isinstance(path, Path) or not is_hub_name(text)):
        raise CaptureError(f"{text}: no such tokenizer directory")
    if local.is_dir() and not has_tokenizer(local):
        raise CaptureError(f"{text}: holds no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    source = str(local.resolve()) if local.exists() else text
    where = "" if local.exists() else " (not a local directory; tried the Hugging Face hub)"
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as exc:
        raise CaptureError(
            f"{text}: cannot load the tokenizer{where}: {_first_line(exc)}"
        ) from None


def model_name(model: Any) -> str:
    """What a model was loaded from (``name_or_path``), for the manifest."""
    return str(getattr(model, "name_or_path", "") or type(model).__name__)


def logit_width(model: Any) -> int:
    """Number of logits the model produces per position."""
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def embedding_rows(model: Any) -> int:
    """Rows of the input embedding: token ids must lie below this."""
    return int(model.get_input_embeddings().weight.shape[0])


def context_length(model: Any) -> int | None:
    """The positions the model's config declares (None when it declares none)."""
    config = model.config.get_text_config()
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def eos_token_ids(model: Any, tokenizer: Any = None) -> list[int]:
    """End-of-sequence ids the generation config, the config and the tokenizer define."""
    found: list[int] = []
    sources = (getattr(model, "generation_config", None), model.config, tokenizer)
    for source in sources:
        value = getattr(source, "eos_token_id", None) if source is not None else None
        values = value if isinstance(value, (list, tuple)) else [value]
        found += [int(v) for v in values if isinstance(v, int)]
    return sorted(set(found))


# --------------------------------------------------------------------------------------------
# the vocabulary


@dataclass(frozen=True)
class Vocabulary:
    """The vocabulary both models' rows are cut to.

    Attributes
    ----------
    size : int
        Logits kept per row (ids ``0 .. size − 1``).
    target_width, draft_width : int
        The models' own logit widths.
    tokenizer_length : int or None
        ``len(tokenizer)``, when a tokenizer is known.
    cut : str
        ``"none"``, ``"tokenizer"`` (both cut to the tokenizer's length) or
        ``"smaller width"`` (no tokenizer: both cut to the smaller width).
    """

    size: int
    target_width: int
    draft_width: int
    tokenizer_length: int | None
    cut: str

    def as_dict(self) -> dict[str, Any]:
        """For the manifest."""
        return {
            "size": self.size,
            "target_width": self.target_width,
            "draft_width": self.draft_width,
            "tokenizer_length": self.tokenizer_length,
            "cut": self.cut,
        }


def _tokenizer_fits(tokenizer: Any, length: int, models: Mapping[str, Any]) -> None:
    for side, model in models.items():
        rows = min(logit_width(model), embedding_rows(model))
        if length > rows:
            raise CaptureError(
                f"the tokenizer ({getattr(tokenizer, 'name_or_path', '')}) has {length} tokens "
                f"but the {side} model's vocabulary has {rows}: ids beyond it cannot be scored "
                f"(is it the {side}'s tokenizer?)"
            )


def _same_tokenizers(tokenizer: Any, draft_tokenizer: Any) -> None:
    if draft_tokenizer is None or tokenizer is None:
        return
    a, b = len(tokenizer), len(draft_tokenizer)
    if a != b:
        raise CaptureError(
            f"the target's and the draft's tokenizers differ ({a} and {b} tokens): the two "
            "models do not share a vocabulary"
        )
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise CaptureError(
            "the target's and the draft's tokenizers map tokens to different ids: the two "
            "models do not share a vocabulary"
        )


def plan_vocabulary(
    target: Any, draft: Any, tokenizer: Any = None, draft_tokenizer: Any = None
) -> Vocabulary:
    """The shared vocabulary, checked.

    Both rows are cut to ``len(tokenizer)`` when a tokenizer is known, else to the smaller
    width (with a warning when the widths differ): the extra ids of a padded embedding matrix
    are never produced by the tokenizer.

    Raises
    ------
    CaptureError
        The tokenizer is longer than either model's vocabulary, or the draft's own tokenizer
        disagrees with the target's.
    """
    widths = {"target": logit_width(target), "draft": logit_width(draft)}
    _same_tokenizers(tokenizer, draft_tokenizer)
    if tokenizer is not None:
        length = len(tokenizer)
        _tokenizer_fits(tokenizer, length, {"target": target, "draft": draft})
        cut = "none" if widths["target"] == widths["draft"] == length else "tokenizer"
        return Vocabulary(length, widths["target"], widths["draft"], length, cut)
    size = min(widths.values())
    cut = "none"
    if widths["target"] != widths["draft"]:
        cut = "smaller width"
        warnings.warn(
            f"the target has {widths['target']} logits and the draft {widths['draft']}, and no "
            f"tokenizer is known: both are cut to the first {size}",
            UserWarning,
            stacklevel=2,
        )
    return Vocabulary(size, widths["target"], widths["draft"], None, cut)


# --------------------------------------------------------------------------------------------
# sampling


def prompt_generator(seed: int, prompt_id: int) -> torch.Generator:
    """The CPU random stream of one prompt: seeded from ``(seed, prompt_id)`` only."""
    state = np.random.SeedSequence([int(seed), int(prompt_id)]).generate_state(1, np.uint64)[0]
    return torch.Generator(device="cpu").manual_seed(int(state) & (2**63 - 1))


def sample_tokens(
    logits: torch.Tensor,
    generators: Sequence[torch.Generator],
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """One token per row, each row from its own generator (inverse CDF, float64).

    ``temperature = 0`` is greedy (the lowest id on ties). Top-p keeps the most likely
    tokens while the mass before a token is below ``top_p`` (at least one). Every row draws
    exactly one uniform from its generator, so a row's token does not depend on the others.

    Returns
    -------
    torch.Tensor of int64, shape (rows,), on the CPU
    """
    if temperature == 0:
        return logits.argmax(dim=-1).cpu()
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    cdf = probs.cumsum(dim=-1)
    target = (uniforms.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return tokens.clamp(max=probs.shape[-1] - 1).cpu()


# --------------------------------------------------------------------------------------------
# forward passes


def _forward_parameters(model: Any) -> frozenset[str]:
    return frozenset(inspect.signature(model.forward).parameters)


def _model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def left_pad(
    sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu", pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded ``input_ids``, ``attention_mask`` and ``position_ids`` (0 at each row's
    first real token; pads get 0)."""
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, length - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, length - len(seq) :] = 1
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def _call(model: Any, **kwargs: Any) -> Any:
    """``model(**kwargs)`` without the keywords its ``forward`` does not name."""
    accepted = _forward_parameters(model)
    optional = ("position_ids", "logits_to_keep")
    return model(**{k: v for k, v in kwargs.items() if k not in optional or k in accepted})


def _check_logits(logits: torch.Tensor, vocab_size: int | None, who: str) -> torch.Tensor:
    if vocab_size is not None:
        if logits.shape[-1] < vocab_size:
            raise CaptureError(
                f"the {who} produced {logits.shape[-1]} logits per position, fewer than the "
                f"vocabulary's {vocab_size}"
            )
        logits = logits[..., :vocab_size]
    if torch.isnan(logits).any():
        raise CaptureError(
            f"the {who} produced NaN logits (try dtype float32 or bfloat16 instead of float16)"
        )
    return logits


@torch.inference_mode()
def generate_continuations(
    model: Any,
    prompts: Sequence[Sequence[int]],
    generators: Sequence[torch.Generator],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    vocab_size: int | None = None,
    eos_token_ids: Sequence[int] = (),
) -> list[list[int]]:
    """Sample a continuation of each prompt with the KV cache (left-padded batch).

    Parameters
    ----------
    model : transformers.PreTrainedModel
    prompts : sequence of sequences of int
    generators : sequence of torch.Generator
        One per prompt (see :func:`prompt_generator`).
    max_new_tokens : int
    temperature, top_p : float
        Sampling settings (``temperature = 0``: greedy).
    vocab_size : int, optional
        Sample among the first ``vocab_size`` ids only (the shared vocabulary).
    eos_token_ids : sequence of int
        A row stops after sampling one of these (which is kept).

    Returns
    -------
    list of list of int
        The continuations, 1 to ``max_new_tokens`` tokens each.
    """
    if len(generators) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(generators)} generators")
    device = _model_device(model)
    ids, mask, positions = left_pad(prompts, device)
    out = _call(
        model,
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    eos = set(int(t) for t in eos_token_ids)
    continuations: list[list[int]] = [[] for _ in prompts]
    finished = [False] * len(prompts)
    for step in range(max_new_tokens):
        logits = _check_logits(out.logits[:, -1, :], vocab_size, "generator")
        tokens = sample_tokens(logits, generators, temperature, top_p).tolist()
        for row, token in enumerate(tokens):
            if not finished[row]:
                continuations[row].append(int(token))
                finished[row] = int(token) in eos
        if all(finished) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, mask.new_ones((len(prompts), 1))], dim=-1)
        positions = positions[:, -1:] + 1
        out = _call(
            model,
            input_ids=torch.tensor(tokens, dtype=torch.long, device=device).unsqueeze(-1),
            attention_mask=mask,
            position_ids=positions,
            past_key_values=out.past_key_values,
            use_cache=True,
        )
    return continuations


@torch.inference_mode()
def teacher_forced_logits(
    model: Any,
    sequences: Sequence[Sequence[int]],
    num_rows: Sequence[int],
    *,
    vocab_size: int | None = None,
) -> list[torch.Tensor]:
    """Logits of the last tokens of each sequence, predicted from the tokens before them.

    One forward pass over the left-padded batch (the final token of each sequence is not
    fed: its prediction is never used).

    Parameters
    ----------
    model : transformers.PreTrainedModel
    sequences : sequence of sequences of int
    num_rows : sequence of int
        ``n_i`` rows for sequence ``i``, ``1 <= n_i < len(sequences[i])``.
    vocab_size : int, optional
        Keep the first ``vocab_size`` logits of each row.

    Returns
    -------
    list of torch.Tensor
        ``rows[i][t]`` (float32, CPU, shape ``(n_i, V)``) is the distribution of
        ``sequences[i][len_i − n_i + t]`` given ``sequences[i][: len_i − n_i + t]``.
    """
    if len(num_rows) != len(sequences):
        raise ValueError(f"{len(sequences)} sequences but {len(num_rows)} row counts")
    for seq, rows in zip(sequences, num_rows, strict=True):
        if not 1 <= rows < len(seq):
            raise ValueError(f"num_rows must be in [1, {len(seq) - 1}], got {rows}")
    keep = max(num_rows)
    ids, mask, positions = left_pad([list(s)[:-1] for s in sequences], _model_device(model))
    out = _call(
        model,
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=False,
        logits_to_keep=keep,
    )
    logits = out.logits[:, -keep:, :]
    rows = [
        _check_logits(logits[i, keep - n :], vocab_size, "model") for i, n in enumerate(num_rows)
    ]
    return [r.float().cpu() for r in rows]


@dataclass(frozen=True)
class AlignedSteps:
    """Both models' rows at the same steps (a batch's continuation tokens).

    Attributes
    ----------
    target, draft : torch.Tensor, shape (steps, V), float32, CPU
    sequence : numpy.ndarray of int64
        Index of each step's sequence in the batch.
    position : numpy.ndarray of int64
        Index of the predicted token in its sequence.
    token : numpy.ndarray of int64
        The predicted token.
    """

    target: torch.Tensor
    draft: torch.Tensor
    sequence: np.ndarray
    position: np.ndarray
    token: np.ndarray


def aligned_logits(
    target: Any,
    draft: Any,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    vocab_size: int | None = None,
) -> AlignedSteps:
    """Teacher-forced rows of both models for every continuation token of a batch.

    Steps are ordered by sequence, then position; step ``s`` of sequence ``i`` predicts
    ``continuations[i][s]`` from ``prompts[i] + continuations[i][:s]``.
    """
    sequences = [list(p) + list(c) for p, c in zip(prompts, continuations, strict=True)]
    counts = [len(c) for c in continuations]
    rows_t = teacher_forced_logits(target, sequences, counts, vocab_size=vocab_size)
    rows_d = teacher_forced_logits(draft, sequences, counts, vocab_size=vocab_size)
    return AlignedSteps(
        target=torch.cat(rows_t),
        draft=torch.cat(rows_d),
        sequence=np.repeat(np.arange(len(sequences), dtype=np.int64), counts),
        position=np.concatenate(
            [
                np.arange(len(p), len(p) + n, dtype=np.int64)
                for p, n in zip(prompts, counts, strict=True)
            ]
        ),
        token=np.concatenate([np.asarray(c, dtype=np.int64) for c in continuations]),
    )


def _is_out_of_memory(exc: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    return isinstance(exc, (oom, torch.cuda.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


@contextlib.contextmanager
def out_of_memory_guard(batch_size: int | None, what: str) -> Iterator[None]:
    """Turn running out of (GPU) memory into a :class:`CaptureError` with advice."""
    try:
        yield
    except (RuntimeError, MemoryError) as exc:
        if not (_is_out_of_memory(exc) or isinstance(exc, MemoryError)):
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        advice = (
            f"use a smaller batch_size (now {batch_size}) or fewer max_new_tokens"
            if batch_size is not None
            else "use a smaller dtype or a larger device"
        )
        raise CaptureError(f"out of memory while {what}: {advice}") from None


# --------------------------------------------------------------------------------------------
# storage


def _storage_rows(rows: torch.Tensor, storage_dtype: str, topk: int | None) -> Any:
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


def _auto_shard_steps(vocab: int, storage_dtype: str, topk: int | None) -> int:
    """Steps per shard: at most :data:`MAX_SHARD_STEPS` and about :data:`SHARD_BYTES`."""
    if topk is not None:
        per_model = topk * (8 + 4) + 8  # int64 ids, float32 logits, float64 logsumexp
    else:
        per_model = vocab * (4 if storage_dtype == "float32" else 2)
    return int(max(1, min(MAX_SHARD_STEPS, SHARD_BYTES // (2 * per_model))))


class _ShardBuffer:
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


# --------------------------------------------------------------------------------------------
# resuming


@dataclass(frozen=True)
class DumpProgress:
    """What a dump already holds, per prompt.

    Attributes
    ----------
    steps : int
        Steps in the dump.
    logged : dict
        Steps logged per prompt id.
    finished : frozenset of int
        Prompts whose continuation is complete (its ``last`` step is in the dump).
    tokens : dict
        The tokens logged so far of the prompts not finished.
    """

    steps: int
    logged: Mapping[int, int]
    finished: frozenset[int]
    tokens: Mapping[int, list[int]]


def dump_progress(path: str | Path) -> DumpProgress:
    """Read a dump's per-step metadata to see which prompts are complete.

    Raises
    ------
    CaptureError
        The dump was not written by :func:`log_distributions`.
    """
    from otbound.dumps import open_dump

    dump = open_dump(path)
    frames = []
    for info in dump.shards:
        frame = pd.read_parquet(Path(path) / str(info.metadata_file))
        if not {"prompt_id", "token", "last"} <= set(frame.columns):
            raise CaptureError(f"{path}: the dump was not written by log_distributions")
        frames.append(frame[["prompt_id", "token", "last"]])
    if not frames:
        return DumpProgress(0, {}, frozenset(), {})
    meta = pd.concat(frames, ignore_index=True)
    logged = {int(k): int(v) for k, v in meta.groupby("prompt_id").size().items()}
    finished = frozenset(int(k) for k in meta.loc[meta["last"].astype(bool), "prompt_id"])
    tokens = {
        int(k): [int(t) for t in part["token"]]
        for k, part in meta.groupby("prompt_id")
        if int(k) not in finished
    }
    return DumpProgress(len(meta), logged, finished, tokens)


def _lookup(mapping: Mapping[str, Any], dotted: str) -> Any:
    value: Any = mapping
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def check_resumable(manifest: Mapping[str, Any], extra: Mapping[str, Any], path: Path) -> None:
    """Refuse to resume a dump written with other settings (see :data:`RESUME_KEYS`)."""
    old = manifest.get("extra", {})
    if old.get("capture_version") is None:
        raise CaptureError(f"cannot resume {path}: it was not written by log_distributions")
    for key in RESUME_KEYS:
        before, now = _lookup(old, key), _lookup(extra, key)
        if json.dumps(before, sort_keys=True) != json.dumps(now, sort_keys=True):
            raise CaptureError(
                f"cannot resume {path}: {key} is {_short(now)} but the dump was written with "
                f"{_short(before)}"
            )


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


# --------------------------------------------------------------------------------------------
# the run


@dataclass(frozen=True)
class _Settings:
    max_new_tokens: int
    temperature: float
    top_p: float
    generator: str
    batch_size: int
    topk: int | None
    storage_dtype: str
    seed: int
    stop_at_eos: bool


def _check_settings(
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    generator: str,
    batch_size: int,
    store: str,
    storage_dtype: str | None,
    shard_steps: int | None,
    seed: int,
    model_dtype: str,
    stop_at_eos: bool,
) -> _Settings:
    _check_limits(max_new_tokens=max_new_tokens, batch_size=batch_size, shard_steps=shard_steps)
    if not temperature >= 0 or not np.isfinite(temperature):
        raise CaptureError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise CaptureError(f"top_p must be in (0, 1], got {top_p}")
    if generator not in GENERATORS:
        raise CaptureError(f"generator must be 'target' or 'draft', got {generator!r}")
    if seed < 0:
        raise CaptureError(f"seed must be >= 0, got {seed}")
    try:
        topk = parse_storage(store, "store")
    except DumpError as exc:
        raise CaptureError(str(exc)) from None
    if storage_dtype is None:
        storage_dtype = "float32" if topk is not None else model_dtype
    if storage_dtype not in STORAGE_DTYPES:
        raise CaptureError(
            f"storage_dtype must be one of {', '.join(STORAGE_DTYPES)}, got {storage_dtype!r}"
        )
    if topk is not None and storage_dtype != "float32":
        raise CaptureError(f"top-k storage needs storage_dtype float32, got {storage_dtype}")
    return _Settings(
        max_new_tokens,
        float(temperature),
        float(top_p),
        generator,
        batch_size,
        topk,
        storage_dtype,
        int(seed),
        stop_at_eos,
    )


def _dtype_name(model: Any) -> str:
    dtype = next(model.parameters()).dtype
    names = {v: k for k, v in MODEL_DTYPES.items()}
    return names.get(dtype, str(dtype).removeprefix("torch."))


def _check_prompts(
    prompts: Sequence[Prompt], vocab: Vocabulary, models: Mapping[str, Any], new_tokens: int
) -> None:
    """Token ids inside the vocabulary; prompt + continuation inside each model's context."""
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise CaptureError("prompt ids must be distinct")
    contexts = {side: context_length(m) for side, m in models.items()}
    for side, context in contexts.items():
        if context is not None and new_tokens >= context:
            raise CaptureError(
                f"max_new_tokens {new_tokens} leaves no room for a prompt in the {side}'s "
                f"context of {context} positions"
            )
    for prompt in prompts:
        if not prompt.input_ids:
            raise CaptureError(f"{prompt.where}: the prompt is empty")
        if max(prompt.input_ids) >= vocab.size:
            raise CaptureError(
                f"{prompt.where}: token id {max(prompt.input_ids)} is beyond the vocabulary "
                f"({vocab.size} tokens): the prompts do not fit these models"
            )
        for side, context in contexts.items():
            if context is not None and len(prompt.input_ids) + new_tokens > context:
                raise CaptureError(
                    f"{prompt.where}: {len(prompt.input_ids)} prompt tokens + max_new_tokens "
                    f"{new_tokens} exceed the {side}'s context of {context} positions; set "
                    f"max_prompt_tokens to {context - new_tokens} or fewer"
                )


def _model_entry(model: Any) -> dict[str, Any]:
    config = model.config
    return {
        "name": model_name(model),
        "class": type(model).__name__,
        "model_type": getattr(config, "model_type", None),
        "config_vocab_size": getattr(config.get_text_config(), "vocab_size", None),
        "logit_width": logit_width(model),
        "commit": getattr(config, "_commit_hash", None),
    }


def _versions() -> dict[str, str]:
    import transformers

    from otbound import __version__

    return {
        "otbound": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _build_extra(
    *,
    target: Any,
    draft: Any,
    tokenizer: Any,
    vocab: Vocabulary,
    settings: _Settings,
    store: str,
    shard_steps: int,
    prompts: Mapping[str, Any],
    eos: Sequence[int],
    device: torch.device,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    tok = None
    if tokenizer is not None:
        tok = {"name": str(getattr(tokenizer, "name_or_path", "")), "length": len(tokenizer)}
    return {
        "capture_version": CAPTURE_VERSION,
        "target": _model_entry(target),
        "draft": _model_entry(draft),
        "tokenizer": tok,
        "model_dtype": _dtype_name(target),
        "device": str(device),
        "batch_size": settings.batch_size,
        "store": store,
        "storage_dtype": settings.storage_dtype,
        "shard_steps": shard_steps,
        "vocabulary": vocab.as_dict(),
        "prompts": dict(prompts),
        "generation": {
            "generator": settings.generator,
            "max_new_tokens": settings.max_new_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "seed": settings.seed,
            "seeding": "per prompt: CPU torch.Generator seeded from "
            "numpy.random.SeedSequence([seed, prompt_id]); one uniform per step, inverse CDF",
            "stop_at_eos": settings.stop_at_eos,
            "eos_token_ids": list(eos),
            "kv_cache": True,
        },
        "logged_positions": "continuation: one step per generated token (the EOS included); "
        "'position' is the index of the predicted token in prompt + continuation (0-based), "
        "'token' the token that followed; both models teacher-forced over the same sequence",
        "metadata_columns": {
            "prompt_length": "tokens of the prompt as run (after truncation)",
            "last": "true on the continuation's final step",
        },
        "versions": _versions(),
        "user": dict(extra or {}),
    }


def _as_model(model: Any, dtype: str, device: Any, trust_remote_code: bool) -> Any:
    if isinstance(model, (str, Path)):
        return load_model(model, dtype, device, trust_remote_code=trust_remote_code)
    return model


def _as_tokenizer(tokenizer: Any, target: Any) -> Any:
    if isinstance(tokenizer, (str, Path)):
        return load_tokenizer(tokenizer)
    if tokenizer is None and isinstance(target, (str, Path)) and has_tokenizer(target):
        return load_tokenizer(target)
    return tokenizer


def _prompt_list(
    prompts: Any, tokenizer: Any, options: Mapping[str, Any], source: Mapping[str, Any] | None
) -> tuple[list[Prompt], dict[str, Any]]:
    if isinstance(prompts, (str, Path)):
        info = prompt_file_info(prompts)
        return read_prompts(prompts, tokenizer, **options), {**info, **options}
    prompts = list(prompts)
    if source is None:
        source = {"file": None, "sha256": _prompts_digest(prompts), "format": "objects"}
    if options["max_prompts"] is not None:
        prompts = prompts[: options["max_prompts"]]
    return prompts, {**source, **options}


def _prompt_frame(prompt: Prompt, continuation: Sequence[int], skip: int) -> pd.DataFrame:
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


def _already_logged(prompt: Prompt, continuation: list[int], state: DumpProgress) -> int:
    """Steps of ``prompt`` already in the dump; checks they are the ones just regenerated."""
    done = state.logged.get(prompt.id, 0)
    if done and continuation[:done] != state.tokens.get(prompt.id, [])[:done]:
        raise CaptureError(
            f"{prompt.where}: the resumed run does not reproduce the tokens already logged "
            "(the models, prompts or device changed): start a new dump"
        )
    if done > len(continuation):
        raise CaptureError(f"{prompt.where}: the dump holds more steps than the run produces")
    return done


def _run_batches(
    todo: Sequence[Prompt],
    models: Mapping[str, Any],
    settings: _Settings,
    vocab: Vocabulary,
    eos: Sequence[int],
    state: DumpProgress,
    buffer: _ShardBuffer,
    progress: bool,
) -> None:
    bar = tqdm(total=len(todo), unit="prompt", desc="logging", disable=None if progress else True)
    with bar:
        for start in range(0, len(todo), settings.batch_size):
            batch = todo[start : start + settings.batch_size]
            inputs = [list(p.input_ids) for p in batch]
            with out_of_memory_guard(settings.batch_size, f"running {batch[0].where}"):
                continuations = generate_continuations(
                    models[settings.generator],
                    inputs,
                    [prompt_generator(settings.seed, p.id) for p in batch],
                    max_new_tokens=settings.max_new_tokens,
                    temperature=settings.temperature,
                    top_p=settings.top_p,
                    vocab_size=vocab.size,
                    eos_token_ids=eos,
                )
                steps = aligned_logits(
                    models["target"], models["draft"], inputs, continuations, vocab_size=vocab.size
                )
            skips = [
                _already_logged(p, c, state) for p, c in zip(batch, continuations, strict=True)
            ]
            keep = np.concatenate(
                [np.arange(len(c)) >= s for c, s in zip(continuations, skips, strict=True)]
            )
            frames = [
                _prompt_frame(p, c, s) for p, c, s in zip(batch, continuations, skips, strict=True)
            ]
            buffer.add(
                _storage_rows(steps.target[keep], settings.storage_dtype, settings.topk),
                _storage_rows(steps.draft[keep], settings.storage_dtype, settings.topk),
                pd.concat(frames, ignore_index=True),
            )
            bar.update(len(batch))
            bar.set_postfix(steps=state.steps + buffer.written + buffer.pending)


def _existing_dump(out: Path, resume: bool) -> Mapping[str, Any] | None:
    manifest_path = out / MANIFEST_NAME
    if manifest_path.exists():
        if not resume:
            raise CaptureError(
                f"{out} already holds a dump: pass resume=True to continue it, or choose "
                "another output directory"
            )
        from otbound.dumps import open_dump

        return open_dump(out).manifest
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CaptureError(f"{out}: exists, and is not an empty directory or a dump")
    return None


def log_distributions(
    target: Any,
    draft: Any,
    prompts: str | Path | Sequence[Prompt],
    out: str | Path,
    *,
    tokenizer: Any = None,
    draft_tokenizer: Any = None,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: str = "target",
    batch_size: int = 8,
    store: str = "full",
    storage_dtype: str | None = None,
    shard_steps: int | None = None,
    seed: int = 0,
    stop_at_eos: bool = True,
    dtype: str = "float32",
    device: str | torch.device | None = None,
    max_prompts: int | None = None,
    max_prompt_tokens: int | None = None,
    truncation_side: str = "left",
    add_special_tokens: bool = True,
    prompt_source: Mapping[str, Any] | None = None,
    resume: bool = False,
    progress: bool = True,
    trust_remote_code: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Log aligned target and draft next-token logits over sampled continuations to a dump.

    Parameters
    ----------
    target, draft : str, pathlib.Path or transformers.PreTrainedModel
        Model directories or hub names (loaded with ``dtype`` on ``device``), or loaded
        models (on one device).
    prompts : str, pathlib.Path or sequence of Prompt
        A prompt file (see :func:`read_prompts`) or prompts already read.
    out : str or pathlib.Path
        The dump directory (created; must be empty, or hold a dump when ``resume``).
    tokenizer : str, pathlib.Path or tokenizer, optional
        Needed for text prompts; cuts the vocabulary to its length. Default: the target's
        directory when it holds tokenizer files.
    draft_tokenizer : tokenizer, optional
        The draft's own tokenizer, checked against ``tokenizer``.
    max_new_tokens : int, default 128
        Continuation length (shorter when the generator samples an end-of-sequence token).
    temperature, top_p : float
        Sampling of the continuation (``temperature = 0``: greedy). The logged logits are raw.
    generator : {"target", "draft"}, default "target"
        The model whose samples form the text.
    batch_size : int, default 8
        Prompts run at once (left-padded).
    store : str, default "full"
        ``"full"`` rows or ``"topk:K"``.
    storage_dtype : {"float16", "bfloat16", "float32"}, optional
        Default: the models' dtype for full rows (lossless), float32 for top-k.
    shard_steps : int, optional
        Steps per shard; default: up to 1024, and about 256 MiB of logits.
    seed : int, default 0
        Each prompt's sampling is seeded from ``(seed, prompt_id)``.
    stop_at_eos : bool, default True
        Stop a continuation at the end-of-sequence token(s) the generator's config or the
        tokenizer define (the EOS step is logged).
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        Model dtype, for models given as paths.
    device : str or torch.device, optional
        For models given as paths; default ``cuda`` when present, else ``cpu``.
    max_prompts, max_prompt_tokens, truncation_side, add_special_tokens
        Passed to :func:`read_prompts` for a prompt file (``truncation_side="left"`` keeps a
        long prompt's last tokens).
    prompt_source : mapping, optional
        How prompts given as objects were made (recorded; ``sha256`` is checked on resume).
    resume : bool, default False
        Continue the dump at ``out``: prompts already complete are skipped, a prompt cut by
        the interruption is regenerated (same seed, same text) and its missing steps appended.
    progress : bool, default True
        Show a progress bar (on a terminal).
    trust_remote_code : bool, default False
    extra : mapping, optional
        Recorded in the manifest's ``extra["user"]``.

    Returns
    -------
    pathlib.Path
        The dump directory (read it with :func:`otbound.dumps.open_dump`).

    Raises
    ------
    CaptureError
        Bad input or settings, a tokenizer that does not fit the models, settings that differ
        from those of the dump being resumed, or running out of memory (shards already
        written stay, complete, for ``resume``).
    """
    out = Path(out)
    options = {
        "max_prompts": max_prompts,
        "max_prompt_tokens": max_prompt_tokens,
        "truncation_side": truncation_side,
        "add_special_tokens": add_special_tokens,
    }
    _check_limits(max_prompts=max_prompts, max_prompt_tokens=max_prompt_tokens)
    if isinstance(target, (str, Path)):
        dtype_name = dtype
    else:
        dtype_name = _dtype_name(target)
    settings = _check_settings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        generator=generator,
        batch_size=batch_size,
        store=store,
        storage_dtype=storage_dtype,
        shard_steps=shard_steps,
        seed=seed,
        model_dtype=dtype_name,
        stop_at_eos=stop_at_eos,
    )
    previous = _existing_dump(out, resume)
    tokenizer = _as_tokenizer(tokenizer, target)
    prompt_list, prompt_info = _prompt_list(prompts, tokenizer, options, prompt_source)
    models = {
        "target": _as_model(target, dtype, device, trust_remote_code),
        "draft": _as_model(draft, dtype, device, trust_remote_code),
    }
    if _model_device(models["target"]) != _model_device(models["draft"]):
        raise CaptureError("the target and the draft must be on the same device")
    vocab = plan_vocabulary(models["target"], models["draft"], tokenizer, draft_tokenizer)
    if settings.topk is not None and settings.topk > vocab.size:
        raise CaptureError(f"store topk:{settings.topk} exceeds the vocabulary ({vocab.size})")
    _check_prompts(prompt_list, vocab, models, settings.max_new_tokens)
    gen_model = models[settings.generator]
    eos = [t for t in eos_token_ids(gen_model, tokenizer) if t < vocab.size] if stop_at_eos else []
    steps_per_shard = shard_steps or _auto_shard_steps(
        vocab.size, settings.storage_dtype, settings.topk
    )
    record = _build_extra(
        target=models["target"],
        draft=models["draft"],
        tokenizer=tokenizer,
        vocab=vocab,
        settings=settings,
        store=store,
        shard_steps=steps_per_shard,
        prompts=prompt_info,
        eos=eos,
        device=_model_device(gen_model),
        extra=extra,
    )
    state = DumpProgress(0, {}, frozenset(), {})
    if previous is not None:
        check_resumable(previous, record, out)
        state = dump_progress(out)
    todo = [p for p in prompt_list if p.id not in state.finished]

    def open_writer() -> DumpWriter:
        return DumpWriter(
            out,
            target_model=record["target"]["name"],
            draft_model=record["draft"]["name"],
            tokenizer=None if tokenizer is None else record["tokenizer"]["name"],
            vocab_size=vocab.size,
            tokenizer_vocab_size=vocab.tokenizer_length,
            dtype=settings.storage_dtype,
            storage=store,
            extra=record,
            resume=previous is not None,
        )

    buffer = _ShardBuffer(open_writer, steps_per_shard)
    _run_batches(todo, models, settings, vocab, eos, state, buffer, progress)
    buffer.finish()
    return out
