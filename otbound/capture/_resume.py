"""Resuming: what a dump already holds, and the checks that the run continues it faithfully.

The settings of :data:`RESUME_KEYS`, as the manifest's ``extra`` records them, are compared
with the run's by :func:`otbound.resume.compare_settings` (the check every command resumes by);
a mismatch is a :class:`ResumeRefused`, both a :class:`CaptureError` and an
:class:`otbound.resume.ResumeMismatch`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from otbound.capture._errors import CaptureError
from otbound.capture._prompts import Prompt
from otbound.dumps import MANIFEST_NAME
from otbound.resume import ResumeMismatch, compare_settings

#: Settings that must not change when a run is resumed (dotted paths into ``extra``).
RESUME_KEYS = (
    "target.name",
    "target.gguf",
    "draft.name",
    "draft.gguf",
    "tokenizer.name",
    "model_dtype",
    "vocabulary",
    "store",
    "storage_dtype",
    "prompts.sha256",
    "prompts.max_prompt_tokens",
    "prompts.truncation_side",
    "prompts.add_special_tokens",
    "prompts.chat_template",
    "generation",
)
#: What a key of :data:`RESUME_KEYS` that a dump of an earlier version lacks stood for.
_RESUME_DEFAULTS = {"prompts.chat_template": False}


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


class ResumeRefused(CaptureError, ResumeMismatch):
    """A dump written with other settings cannot be continued (see :data:`RESUME_KEYS`)."""


def check_resumable(manifest: Mapping[str, Any], extra: Mapping[str, Any], path: Path) -> None:
    """Refuse to resume a dump written with other settings (see :data:`RESUME_KEYS`).

    Raises
    ------
    CaptureError
        The dump was not written by :func:`log_distributions`, or (:class:`ResumeRefused`) a
        setting of :data:`RESUME_KEYS` differs; the message names the first that does.
    """
    old = manifest.get("extra", {})
    if old.get("capture_version") is None:
        raise CaptureError(f"cannot resume {path}: it was not written by log_distributions")
    changed = compare_settings(old, extra, RESUME_KEYS, _RESUME_DEFAULTS)
    if changed:
        first = changed[0]
        raise ResumeRefused(
            path,
            "; ".join(map(str, changed)),
            f"cannot resume {path}: {first.key} is {_short(first.now)} but the dump was "
            f"written with {_short(first.before)}",
        )


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def existing_dump(out: Path, resume: bool) -> Mapping[str, Any] | None:
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


def already_logged(prompt: Prompt, continuation: list[int], state: DumpProgress) -> int:
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
