"""The steps a tree-decoding run shares between static trees and dynamic systems: the inputs
(prompts, models, vocabulary, end-of-sequence tokens), the checkpoint, and the loop over the
(verifier, tree or system) jobs that decodes each, or reads it back from the checkpoint."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from otbound.tree_decoding._config import TreeDecodingConfig
from otbound.tree_decoding._resume import Part, PartStore, checkpoint_settings
from otbound.tree_decoding._specs import TreeSpec
from otbound.tree_decoding._streams import CallStreams

__all__ = ["Job", "JobsDone", "RunInputs", "open_store", "prepare_inputs", "run_all", "run_jobs"]


@dataclass(frozen=True)
class RunInputs:
    """What a run decodes with: the prompts as ``(id, token ids)`` pairs, the loaded models,
    the shared vocabulary and the end-of-sequence tokens (empty without ``stop_at_eos``)."""

    pairs: list[tuple[int, tuple[int, ...]]]
    target: Any
    draft: Any
    vocab_size: int
    eos_token_ids: list[int]


def prepare_inputs(
    target: Any, draft: Any, prompts: object, config: TreeDecodingConfig, depth: int, device: Any
) -> RunInputs:
    """Read the prompts, load model directories, check that every prompt and a tree of
    ``depth`` fit both models, and settle the vocabulary and the end-of-sequence tokens."""
    from otbound.capture import eos_token_ids, plan_vocabulary

    pairs = as_prompts(prompts)
    target, draft = load(target, device), load(draft, device)
    check_fit({"target": target, "draft": draft}, pairs, config.max_new_tokens, depth)
    vocab_size = config.vocab_size
    if vocab_size is None:
        vocab_size = plan_vocabulary(target, draft).size
    eos = eos_token_ids(target) if config.stop_at_eos else []
    return RunInputs(pairs, target, draft, vocab_size, eos)


def as_prompts(prompts: object) -> list[tuple[int, tuple[int, ...]]]:
    """``(id, token ids)`` pairs from ``Prompt`` objects or token-id sequences."""
    out: list[tuple[int, tuple[int, ...]]] = []
    for index, prompt in enumerate(cast(Iterable[Any], prompts)):
        ids = getattr(prompt, "input_ids", prompt)
        pid = getattr(prompt, "id", index)
        ids = tuple(int(t) for t in ids)
        if not ids:
            raise ValueError(f"prompts[{index}] is empty")
        out.append((int(pid), ids))
    if not out:
        raise ValueError("prompts is empty")
    return out


def load(model: Any, device: Any) -> Any:
    """A model, loaded in float32 when given as a directory or file."""
    if isinstance(model, str | Path):
        from otbound.capture import load_model

        return load_model(model, "float32", device)
    return model


def check_fit(
    models: Mapping[str, Any],
    prompts: list[tuple[int, tuple[int, ...]]],
    max_new_tokens: int,
    depth: int,
) -> None:
    """Every prefix + tree must fit the models' context and embedding."""
    from otbound.capture import context_length, embedding_rows

    longest = max(len(ids) for _, ids in prompts)
    largest = max(max(ids) for _, ids in prompts)
    for side, model in models.items():
        limit = context_length(model)
        need = longest + max_new_tokens + depth - 1
        if limit is not None and need > limit:
            raise ValueError(
                f"a prompt of {longest} tokens + max_new_tokens {max_new_tokens} + a tree of "
                f"depth {depth} needs {need} positions; the {side} model has {limit} "
                "(use a smaller max_prompt_tokens or max_new_tokens)"
            )
        if largest >= embedding_rows(model):
            raise ValueError(
                f"prompt token id {largest} is beyond the {side} model's vocabulary "
                f"({embedding_rows(model)} ids)"
            )


def open_store(
    parts_dir: str | Path | None, inputs: RunInputs, settings: Mapping[str, Any]
) -> PartStore | None:
    """The checkpoint of ``parts_dir`` keyed by ``settings`` and the prompts and models
    (:func:`checkpoint_settings`), or None without one."""
    if parts_dir is None:
        return None
    keyed = checkpoint_settings(inputs.target, inputs.draft, inputs.pairs, **settings)
    return PartStore(parts_dir, keyed)


#: ``decode(rng, prediction_seed, on_prompt_done)``: one job's records and continuations.
Decode = Callable[[CallStreams, int, Callable[[], None]], Part]


@dataclass(frozen=True)
class Job:
    """One (verifier, tree or system) pair of a run.

    Attributes
    ----------
    verifier_name : str
    verifier : verifier object
    spec : TreeSpec
        What the job's checkpoint part is keyed by (with the verifier).
    label : str
        The tree's or system's name in the progress bar and the prediction's seed.
    head : mapping
        The columns every per-call record of the job gets, first.
    text_head : mapping
        The columns every continuation of the job gets, before ``prompt`` and ``tokens``.
    decode : callable
        ``decode(rng, prediction_seed, on_prompt_done)``: the job's records and continuations.
    """

    verifier_name: str
    verifier: Any
    spec: TreeSpec
    label: str
    head: Mapping[str, object]
    text_head: Mapping[str, object]
    decode: Decode


@dataclass(frozen=True)
class JobsDone:
    """A run's jobs done: the per-call rows, the continuations, the jobs read back from the
    checkpoint, and the checkpoint (None without one)."""

    rows: list[dict[str, object]]
    texts: list[dict[str, object]]
    resumed: int
    store: PartStore | None


def run_all(
    jobs: Sequence[Job],
    inputs: RunInputs,
    keyed: Mapping[str, Any],
    parts_dir: str | Path | None,
    seed: int,
    progress: bool,
    desc: str,
) -> JobsDone:
    """:func:`run_jobs` with the checkpoint of ``parts_dir`` keyed by ``keyed`` (the run's
    settings; the prompts and models are added, :func:`open_store`)."""
    store = open_store(parts_dir, inputs, keyed)
    rows, texts, resumed = run_jobs(jobs, len(inputs.pairs), store, seed, progress, desc)
    return JobsDone(rows, texts, resumed, store)


def run_jobs(
    jobs: Sequence[Job],
    prompts: int,
    store: PartStore | None,
    seed: int,
    progress: bool,
    desc: str,
) -> tuple[list[dict[str, object]], list[dict[str, object]], int]:
    """Decode every job, or read it from ``store`` where an earlier run finished it (each
    finished job is saved there at once); returns the per-call rows, the continuations and
    the number of jobs read back.

    Each job decodes with the common random numbers of ``seed`` (:class:`CallStreams`) and
    a prediction stream seeded from ``(seed, verifier, label)``, so a job's result depends on
    neither the other jobs nor their order.
    """
    done: dict[tuple[str, str], Part | None] = {}
    if store is not None:
        done = {
            (job.verifier_name, job.label): store.load(
                job.verifier_name, job.verifier.design, job.spec
            )
            for job in jobs
        }
    resumed = sum(part is not None for part in done.values())
    rows: list[dict[str, object]] = []
    texts: list[dict[str, object]] = []
    with prompt_bar(len(jobs), prompts, resumed, desc, progress) as bar:
        for job in jobs:
            bar.set_postfix_str(f"{job.verifier_name} {job.label}", refresh=False)
            part = done.get((job.verifier_name, job.label))
            if part is None:
                streams = CallStreams(seed)
                prediction = config_seed(seed, job.verifier_name, job.label)
                part = job.decode(
                    streams, int(prediction.generate_state(1)[0]), lambda: bar.update(1)
                )
                if store is not None:
                    store.save(job.verifier_name, job.verifier.design, job.spec, part)
            records, out = part
            rows.extend({**job.head, **r} for r in records)
            texts.extend(
                {**job.text_head, "prompt": pid, "tokens": tokens}
                for pid, tokens in sorted(out.items())
            )
    return rows, texts, resumed


def prompt_bar(runs: int, prompts: int, resumed: int, desc: str, progress: bool) -> Any:
    """A tqdm bar over the (run, prompt) pairs, started at the resumed runs' prompts."""
    from tqdm import tqdm

    return tqdm(
        total=runs * prompts,
        initial=resumed * prompts,
        unit="prompt",
        desc=desc,
        disable=None if progress else True,
    )


def config_seed(seed: int, *names: str) -> np.random.SeedSequence:
    """The seed sequence of ``seed`` and the names (the prediction's stream of one job)."""
    return np.random.SeedSequence([int(seed), *(zlib.crc32(n.encode()) for n in names)])
