"""Prompts: read from JSON lines or text files, put in the chat template if asked, tokenized
and truncated."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otbound.capture._errors import CaptureError, check_limits, first_line
from otbound.dumps import file_sha256

#: Which end of a long prompt ``max_prompt_tokens`` cuts: ``left`` keeps the last tokens.
TRUNCATION_SIDES = ("left", "right")
#: The keys a JSON prompt may give, in the order they are looked for.
PROMPT_KEYS = ("input_ids", "input_tokens", "text", "messages", "turns")

#: A chat: ``{"role": ..., "content": ...}`` messages.
Messages = list[dict[str, str]]


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
        The text it was tokenized from, if any (with the chat template applied, if it was).
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
    if not (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        raise CaptureError(
            f"{where}: {key!r} must be a non-empty list of token ids (integers >= 0)"
        )
    return list(value)


def _nonempty_text(value: object, where: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise CaptureError(f"{where}: {what} must be a non-empty string")
    return value


def _messages(value: object, where: str) -> Messages:
    if not isinstance(value, list) or not value:
        raise CaptureError(f"{where}: 'messages' must be a non-empty list of messages")
    for message in value:
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
            raise CaptureError(
                f"{where}: each message must be an object with 'role' and 'content' strings"
            )
        _nonempty_text(message.get("content"), where, "each message's 'content'")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _json_prompt(line: str, where: str) -> tuple[list[int] | None, str | Messages | None]:
    """Token ids, text or chat messages of one JSON line (MT-bench's ``turns``: the first)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CaptureError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    expected = ", ".join(map(repr, PROMPT_KEYS))
    if not isinstance(obj, dict):
        raise CaptureError(f"{where}: expected a JSON object with one of {expected}")
    for key in ("input_ids", "input_tokens"):
        if key in obj:
            return _token_list(obj[key], where, key), None
    if "text" in obj:
        return None, _nonempty_text(obj["text"], where, "'text'")
    if "messages" in obj:
        return None, _messages(obj["messages"], where)
    if "turns" in obj:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns:
            raise CaptureError(f"{where}: 'turns' must be a non-empty list of strings")
        return None, _nonempty_text(turns[0], where, "the first of 'turns'")
    keys = ", ".join(map(repr, obj)) or "none"
    raise CaptureError(f"{where}: none of {expected} (keys: {keys})")


def _check_chat_template(tokenizer: Any) -> None:
    if tokenizer is not None and not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise CaptureError(
            f"the tokenizer ({name}) has no chat template: drop chat_template=True, or give a "
            "tokenizer that has one"
        )


def _chat_text(content: str | Messages, tokenizer: Any, where: str) -> str:
    """The chat template applied to a prompt (a text is one user message), ready for the
    assistant's reply (``add_generation_prompt``)."""
    messages = [{"role": "user", "content": content}] if isinstance(content, str) else content
    try:
        return str(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        )
    except Exception as exc:
        raise CaptureError(f"{where}: the chat template fails: {first_line(exc)}") from None


def _encode(
    content: str | Messages,
    tokenizer: Any,
    where: str,
    add_special_tokens: bool,
    chat_template: bool,
) -> tuple[list[int], str]:
    """Token ids of a text or chat prompt, and the text they were tokenized from."""
    if tokenizer is None:
        raise CaptureError(
            f"{where}: a text prompt needs a tokenizer (give one, or token ids as 'input_ids')"
        )
    if chat_template:
        text = _chat_text(content, tokenizer, where)
        add_special_tokens = False  # the template writes its own special tokens
    elif isinstance(content, str):
        text = content
    else:
        raise CaptureError(
            f"{where}: a 'messages' prompt is a chat: it needs chat_template=True (the "
            "tokenizer's chat template)"
        )
    ids = list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    if not ids:
        raise CaptureError(f"{where}: the text tokenizes to no tokens")
    return ids, text


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
    chat_template: bool = False,
) -> list[Prompt]:
    """Read prompts from JSON lines or a plain text file.

    Parameters
    ----------
    path : str or pathlib.Path
        JSON lines, each an object with one of: ``"input_ids"`` (or ``"input_tokens"``, the C4
        token file's key), a list of token ids; ``"text"``; ``"messages"``, a chat (a list of
        ``{"role": ..., "content": ...}``); or ``"turns"``, MT-bench's list of user turns, of
        which the first is used. Or a plain text file, one prompt per line (see
        :func:`prompt_format`). Blank lines are skipped.
    tokenizer : transformers tokenizer, optional
        Needed for text and chat prompts.
    add_special_tokens : bool, default True
        Passed to the tokenizer (a BOS token, for instance); not used with the chat template,
        which writes its own special tokens.
    max_prompts : int, optional
        Read only the first prompts.
    max_prompt_tokens : int, optional
        Cut longer prompts to this many tokens.
    truncation_side : {"left", "right"}, default "left"
        ``"left"`` drops the first tokens and keeps the last ones (the context nearest the
        continuation); ``"right"`` keeps the first ones.
    chat_template : bool, default False
        Put every text, ``messages`` and ``turns`` prompt in the tokenizer's chat template,
        ready for the assistant's reply (``add_generation_prompt=True``): how instruct models
        are used. A text is one user message. Token-id prompts are used as given. Off by
        default: base models have no template, and text is then tokenized as it stands.

    Returns
    -------
    list of Prompt

    Raises
    ------
    CaptureError
        A bad line (its number is given), no prompts at all, or ``chat_template`` with a
        tokenizer that has none.
    """
    path = Path(path)
    check_limits(max_prompts=max_prompts, max_prompt_tokens=max_prompt_tokens)
    if truncation_side not in TRUNCATION_SIDES:
        raise CaptureError(f"truncation_side must be 'left' or 'right', got {truncation_side!r}")
    if chat_template:
        _check_chat_template(tokenizer)
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
            ids, content = _json_prompt(line, where) if jsonl else (None, line)
            text = None
            if ids is None:
                assert content is not None
                ids, text = _encode(content, tokenizer, where, add_special_tokens, chat_template)
            ids, cut = _truncate(ids, max_prompt_tokens, truncation_side)
            prompts.append(Prompt(len(prompts), tuple(ids), number, text, cut))
    if not prompts:
        raise CaptureError(f"{path}: no prompts (the file is empty or blank)")
    return prompts


def prompt_file_info(path: str | Path) -> dict[str, Any]:
    """The prompt file as the manifest records it: path, sha256, size and format."""
    path = Path(path)
    return {
        "file": str(path.resolve()),
        "sha256": file_sha256(path),
        "size": path.stat().st_size,
        "format": prompt_format(path),
    }


def prompts_digest(prompts: Sequence[Prompt]) -> str:
    """sha256 of the prompts' token ids (what identifies prompts given as objects)."""
    sha = hashlib.sha256()
    for prompt in prompts:
        sha.update(json.dumps([prompt.id, list(prompt.input_ids)]).encode("ascii"))
    return sha.hexdigest()
