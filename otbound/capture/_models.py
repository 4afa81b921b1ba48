"""Models and tokenizers: loaded from directories, GGUF files or hub names, and what they
declare."""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from otbound.capture._errors import (
    CaptureError,
    ModelFileError,
    first_line,
    is_out_of_memory,
    out_of_memory_guard,
)
from otbound.capture._gguf import (
    check_gguf,
    check_same_gguf_tokens,
    gguf_record,
    is_gguf,
    read_gguf_header,
)

#: Model dtypes, by name.
MODEL_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Files that mark a directory as holding a tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
)


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` checked, or ``cuda`` when CUDA is present, else ``cpu``."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise CaptureError(f"device {device!r}: {first_line(exc)}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CaptureError(f"device {device!r}: CUDA is not available on this machine")
    return resolved


def is_hub_name(text: str) -> bool:
    """Whether ``text`` reads as a Hugging Face hub name (``"gpt2"``, ``"org/model"``)."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", text) is not None


def _model_source(path: str | Path) -> tuple[str, bool]:
    """Where to load from and whether it is a local directory; missing paths are refused."""
    text = str(path)
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise CaptureError(f"{text}: not a model directory or a .gguf file (it is a file)")
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


#: The attribute of a model loaded from a GGUF file that holds the file's record.
_GGUF_ATTRIBUTE = "_otbound_gguf"


def _needs_gguf_packages(path: str | Path, exc: BaseException) -> CaptureError:
    return CaptureError(
        f"{path}: loading a GGUF file needs the gguf and accelerate packages "
        f"({first_line(exc)}): pip install 'otbound[torch]'"
    )


@contextlib.contextmanager
def _quiet_gguf_bars() -> Iterator[None]:
    """No dequantisation bar from transformers' GGUF reader when its progress bars are off
    (:func:`quiet_transformers`): that reader draws it with tqdm directly."""
    from transformers.utils import logging as hf_logging

    try:
        reader: Any = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    except ImportError:
        reader = None
    if reader is None or hf_logging.is_progress_bar_enabled():
        yield
        return
    original = reader.tqdm
    reader.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        reader.tqdm = original


def _load_gguf_model(path: str | Path, dtype: torch.dtype, trust_remote_code: bool) -> Any:
    """A causal LM from a GGUF file, dequantised to ``dtype`` by transformers."""
    from transformers import AutoModelForCausalLM

    header = check_gguf(path)
    try:
        with _quiet_gguf_bars():
            model = AutoModelForCausalLM.from_pretrained(
                str(header.path.parent),
                gguf_file=header.path.name,
                dtype=dtype,
                trust_remote_code=trust_remote_code,
            )
    except ImportError as exc:
        raise _needs_gguf_packages(path, exc) from None
    except Exception as exc:
        if isinstance(exc, MemoryError) or is_out_of_memory(exc):
            raise  # out_of_memory_guard's advice, not a bad file
        raise ModelFileError(
            f"{path}: transformers cannot load this GGUF file (architecture "
            f"{header.architecture!r}): {first_line(exc)}"
        ) from None
    model.name_or_path = str(header.path)
    setattr(model, _GGUF_ATTRIBUTE, gguf_record(header.path))
    return model


def gguf_source(model: Any) -> dict[str, Any] | None:
    """The GGUF file a model was loaded from, as :func:`load_model` recorded it (sha256, size,
    architecture, quantisation, ``general.name``), or None for other models."""
    record = getattr(model, _GGUF_ATTRIBUTE, None)
    return dict(record) if record is not None else None


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
        A Hugging Face model directory (``config.json`` and weights), a GGUF file
        (``*.gguf``: dequantised to ``dtype`` by transformers, which needs the ``gguf`` and
        ``accelerate`` packages; :func:`gguf_source` gives its record), or a hub name
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
    ModelFileError
        A truncated or corrupt GGUF file, or one of an architecture transformers cannot load
        (a :class:`CaptureError`).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = _model_dtype(dtype)
    target_device = resolve_device(device)
    if is_gguf(path):
        with out_of_memory_guard(None, "loading the model"):
            model: Any = _load_gguf_model(path, torch_dtype, trust_remote_code)
            model.to(target_device)
        return model.eval()
    source, local = _model_source(path)
    where = "" if local else " (not a local directory; tried the Hugging Face hub)"
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as exc:
        raise CaptureError(
            f"{path}: cannot read the model config{where}: {first_line(exc)}"
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
        raise CaptureError(f"{path}: cannot load the model: {first_line(exc)}") from None
    except Exception as exc:
        raise CaptureError(f"{path}: cannot load the model{where}: {first_line(exc)}") from None
    with out_of_memory_guard(None, "loading the model"):
        model.to(target_device)
    return model.eval()


def has_tokenizer(path: str | Path) -> bool:
    """Whether a local directory holds tokenizer files, or a GGUF file carries a tokenizer.

    Raises
    ------
    ModelFileError
        ``path`` is a truncated or corrupt GGUF file.
    """
    local = Path(path).expanduser()
    if is_gguf(local) and local.is_file():
        return read_gguf_header(local).has_tokenizer
    return local.is_dir() and any((local / name).is_file() for name in TOKENIZER_FILES)


def _load_gguf_tokenizer(path: str | Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    header = check_gguf(path)
    if not header.has_tokenizer:
        raise CaptureError(f"{path}: the GGUF file carries no tokenizer (pass --tokenizer)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(header.path.parent), gguf_file=header.path.name, trust_remote_code=trust_remote_code
        )
    except ImportError as exc:
        raise _needs_gguf_packages(path, exc) from None
    except Exception as exc:
        raise CaptureError(
            f"{path}: cannot build the tokenizer this GGUF file describes: {first_line(exc)}"
        ) from None
    tokenizer.name_or_path = str(header.path)
    return tokenizer


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False) -> Any:
    """A tokenizer from a local directory, a GGUF file (the tokenizer it describes) or a hub
    name.

    Raises
    ------
    CaptureError
        It cannot be loaded (the message says why).
    """
    from transformers import AutoTokenizer

    text = str(path)
    local = Path(text).expanduser()
    if is_gguf(local):
        return _load_gguf_tokenizer(local, trust_remote_code)
    if not local.exists() and (isinstance(path, Path) or not is_hub_name(text)):
        raise CaptureError(f"{text}: no such tokenizer directory")
    if local.is_dir() and not has_tokenizer(local):
        raise CaptureError(f"{text}: holds no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    source = str(local.resolve()) if local.exists() else text
    where = "" if local.exists() else " (not a local directory; tried the Hugging Face hub)"
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as exc:
        raise CaptureError(f"{text}: cannot load the tokenizer{where}: {first_line(exc)}") from None


def prompt_tokenizer(
    target: str | Path, tokenizer: str | Path | None = None, *, trust_remote_code: bool = False
) -> Any:
    """The tokenizer for text prompts: ``tokenizer`` when given, else the target's own (its
    local directory's tokenizer files, its GGUF file's tokenizer, or the hub name's), else None
    (token-id prompts only).

    Raises
    ------
    CaptureError
        The tokenizer cannot be loaded.
    """
    if tokenizer is not None:
        return load_tokenizer(tokenizer, trust_remote_code=trust_remote_code)
    if is_gguf(target):  # a missing or damaged file is refused here, before any prompt is read
        has_one = read_gguf_header(target).has_tokenizer
        return load_tokenizer(target, trust_remote_code=trust_remote_code) if has_one else None
    local = Path(target).expanduser().exists()
    if has_tokenizer(target) or (not local and is_hub_name(str(target))):
        return load_tokenizer(target, trust_remote_code=trust_remote_code)
    return None


def draft_tokenizer(
    draft: str | Path,
    tokenizer: str | Path | None = None,
    *,
    target: str | Path | None = None,
    trust_remote_code: bool = False,
) -> Any:
    """The draft's own tokenizer (its directory's or its GGUF file's), to be checked against the
    target's by :func:`check_shared_vocabulary`; None when it has none or it is ``tokenizer``
    itself.

    When the draft and the target's tokenizer (``tokenizer``, else ``target``) are both GGUF
    files, their token lists are compared here at once and None is returned: building a
    150,000-token tokenizer from a GGUF file takes many seconds.

    Raises
    ------
    CaptureError
        The tokenizer cannot be loaded.
    ModelFileError
        Two GGUF files whose token lists differ.
    """
    source = tokenizer if tokenizer is not None else target
    if not has_tokenizer(draft) or Path(draft) == Path(tokenizer or ""):
        return None
    if is_gguf(draft) and source is not None and is_gguf(source) and has_tokenizer(source):
        check_same_gguf_tokens(source, draft)
        return None
    return load_tokenizer(draft, trust_remote_code=trust_remote_code)


def quiet_transformers() -> None:
    """No loading bars or advisory logging from transformers on stderr."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


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


def model_dtype_name(model: Any) -> str:
    dtype = next(model.parameters()).dtype
    names = {v: k for k, v in MODEL_DTYPES.items()}
    return names.get(dtype, str(dtype).removeprefix("torch."))
