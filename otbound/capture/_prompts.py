"""Prompts: read from JSON lines or text files, tokenized and truncated."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otbound.capture._errors import CaptureError, _check_limits

#: Which end of a long prompt ``max_prompt_tokens`` cuts: ``left`` keeps the last tokens.
TRUNCATION_SIDES = ("left", "right")


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
