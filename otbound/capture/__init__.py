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

Models may be Hugging Face directories, hub names or GGUF files (``*.gguf``, dequantised by
transformers; the tokenizer comes from the file, and the manifest records each file's sha256,
size, architecture, quantisation and ``general.name``: :func:`gguf_source`). Prompts may be
token ids, text, chats (``messages``) or MT-bench questions (``turns``); ``chat_template=True``
puts them in the tokenizer's chat template, as instruct models are used.

:func:`log_distributions` does the whole run (its settings: :class:`CaptureConfig`). Its parts
can be used alone: prompts (:func:`read_prompts`), models and tokenizers (:func:`load_model`,
:func:`load_tokenizer`), the shared vocabulary (:func:`plan_vocabulary`), sampling and
forward passes (:func:`generate_continuations`, :func:`teacher_forced_logits`,
:func:`aligned_logits`; the model-call helpers of :mod:`otbound.capture.calls`, which tree
decoding shares) and resuming (:func:`dump_progress`, :func:`check_resumable`), GGUF headers
(:func:`read_gguf_header`, :func:`check_gguf`, :func:`gguf_record`). Every refusal is a
:class:`CaptureError` with a one-line message; a model file or pair that cannot be used at all
(a truncated or corrupt GGUF file, an architecture transformers cannot load, vocabularies that
differ) is its subclass :class:`ModelFileError`.

Needs ``torch`` and ``transformers`` (``pip install 'otbound[torch]'``); ``import otbound``
does not import this package.
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.capture._config import CaptureConfig
    from otbound.capture._errors import CaptureError, ModelFileError, out_of_memory_guard
    from otbound.capture._generate import (
        AlignedSteps,
        aligned_logits,
        generate_continuations,
        left_pad,
        prompt_generator,
        sample_tokens,
        teacher_forced_logits,
    )
    from otbound.capture._gguf import (
        GGUF_SUFFIX,
        GGUFHeader,
        check_gguf,
        check_gguf_paths,
        check_same_gguf_tokens,
        gguf_record,
        is_gguf,
        read_gguf_header,
        read_gguf_tokens,
    )
    from otbound.capture._manifest import CAPTURE_VERSION, model_entry
    from otbound.capture._models import (
        MODEL_DTYPES,
        TOKENIZER_FILES,
        context_length,
        draft_tokenizer,
        embedding_rows,
        eos_token_ids,
        gguf_source,
        has_tokenizer,
        is_hub_name,
        load_model,
        load_tokenizer,
        logit_width,
        model_name,
        prompt_tokenizer,
        quiet_transformers,
        resolve_device,
    )
    from otbound.capture._prompts import (
        PROMPT_KEYS,
        TRUNCATION_SIDES,
        Prompt,
        prompt_file_info,
        prompt_format,
        read_prompts,
    )
    from otbound.capture._resume import (
        RESUME_KEYS,
        DumpProgress,
        ResumeRefused,
        check_resumable,
        dump_progress,
    )
    from otbound.capture._run import log_distributions
    from otbound.capture._settings import GENERATORS, STORAGE_DTYPES
    from otbound.capture._shards import MAX_SHARD_STEPS, SHARD_BYTES
    from otbound.capture._vocabulary import Vocabulary, check_shared_vocabulary, plan_vocabulary
    from otbound.capture.calls import (
        call_model,
        check_logits,
        forward_parameters,
        model_device,
        returned_cache,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.capture._config": ("CaptureConfig",),
            "otbound.capture._errors": ("CaptureError", "ModelFileError", "out_of_memory_guard"),
            "otbound.capture._generate": (
                "AlignedSteps",
                "aligned_logits",
                "generate_continuations",
                "left_pad",
                "prompt_generator",
                "sample_tokens",
                "teacher_forced_logits",
            ),
            "otbound.capture._gguf": (
                "GGUF_SUFFIX",
                "GGUFHeader",
                "check_gguf",
                "check_gguf_paths",
                "check_same_gguf_tokens",
                "gguf_record",
                "is_gguf",
                "read_gguf_header",
                "read_gguf_tokens",
            ),
            "otbound.capture._manifest": ("CAPTURE_VERSION", "model_entry"),
            "otbound.capture._models": (
                "MODEL_DTYPES",
                "TOKENIZER_FILES",
                "context_length",
                "draft_tokenizer",
                "embedding_rows",
                "eos_token_ids",
                "gguf_source",
                "has_tokenizer",
                "is_hub_name",
                "load_model",
                "load_tokenizer",
                "logit_width",
                "model_name",
                "prompt_tokenizer",
                "quiet_transformers",
                "resolve_device",
            ),
            "otbound.capture._prompts": (
                "PROMPT_KEYS",
                "TRUNCATION_SIDES",
                "Prompt",
                "prompt_file_info",
                "prompt_format",
                "read_prompts",
            ),
            "otbound.capture._resume": (
                "RESUME_KEYS",
                "DumpProgress",
                "ResumeRefused",
                "check_resumable",
                "dump_progress",
            ),
            "otbound.capture._run": ("log_distributions",),
            "otbound.capture._settings": ("GENERATORS", "STORAGE_DTYPES"),
            "otbound.capture._shards": ("MAX_SHARD_STEPS", "SHARD_BYTES"),
            "otbound.capture._vocabulary": (
                "Vocabulary",
                "check_shared_vocabulary",
                "plan_vocabulary",
            ),
            "otbound.capture.calls": (
                "call_model",
                "check_logits",
                "forward_parameters",
                "model_device",
                "returned_cache",
            ),
        },
    )

__all__ = [
    "CAPTURE_VERSION",
    "GENERATORS",
    "GGUF_SUFFIX",
    "MAX_SHARD_STEPS",
    "MODEL_DTYPES",
    "PROMPT_KEYS",
    "RESUME_KEYS",
    "SHARD_BYTES",
    "STORAGE_DTYPES",
    "TOKENIZER_FILES",
    "TRUNCATION_SIDES",
    "AlignedSteps",
    "CaptureConfig",
    "CaptureError",
    "DumpProgress",
    "GGUFHeader",
    "ModelFileError",
    "Prompt",
    "ResumeRefused",
    "Vocabulary",
    "aligned_logits",
    "call_model",
    "check_gguf",
    "check_gguf_paths",
    "check_logits",
    "check_resumable",
    "check_same_gguf_tokens",
    "check_shared_vocabulary",
    "context_length",
    "draft_tokenizer",
    "dump_progress",
    "embedding_rows",
    "eos_token_ids",
    "forward_parameters",
    "generate_continuations",
    "gguf_record",
    "gguf_source",
    "has_tokenizer",
    "is_gguf",
    "is_hub_name",
    "left_pad",
    "load_model",
    "load_tokenizer",
    "log_distributions",
    "logit_width",
    "model_device",
    "model_entry",
    "model_name",
    "out_of_memory_guard",
    "plan_vocabulary",
    "prompt_file_info",
    "prompt_format",
    "prompt_generator",
    "prompt_tokenizer",
    "quiet_transformers",
    "read_gguf_header",
    "read_gguf_tokens",
    "read_prompts",
    "resolve_device",
    "returned_cache",
    "sample_tokens",
    "teacher_forced_logits",
]
