"""Checkpoints of a tree-decoding run: one file per finished (verifier, tree) pair.

A pair's random numbers depend on the seed, the prompt and the call alone (the common random
numbers of :mod:`._streams`), so a pair's records do not depend on the other pairs: a pair
finished by an interrupted run is kept, and the run continued gives the tables an
uninterrupted run gives. A checkpoint directory holds

==========================  ===============================================================
``settings.json``           the settings that determine the results, and their fingerprint
``VERIFIER__TREE__H.json``  one finished pair: its per-call records and continuations
==========================  ===============================================================

Every file is written to a temporary name and renamed (:func:`otbound._files.atomic_output`),
so a file present is complete. Parts are JSON: Python writes each float as its shortest exact
``repr``, so the nested lists ``positional`` and ``alpha_star`` read back bit for bit.

The fingerprint covers the settings (``max_new_tokens``, ``temperature``, ``seed``,
``batch_size``, which decides the random numbers each prompt gets, the vocabulary, the
end-of-sequence ids, ``predict``, ``prediction_trials``), the prompts (a sha256 of their ids and
tokens) and both models (:func:`model_fingerprint`); it is :func:`otbound.resume.fingerprint`,
the mechanism every command resumes by. Verifiers and trees are recorded per part,
so a run may add verifiers or trees to a directory; any other change is refused with a
:class:`CheckpointMismatch` naming what changed. The device is not part of it: a run resumed on
another device computes its remaining pairs with that device's rounding.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from otbound._files import atomic_output, temporaries, write_json
from otbound.resume import ResumeMismatch, describe_changes, fingerprint, read_record
from otbound.tree_decoding._specs import TreeSpec

__all__ = [
    "SETTINGS_FILE",
    "CheckpointMismatch",
    "Part",
    "PartStore",
    "checkpoint_settings",
    "clear_parts",
    "describe_changes",
    "model_fingerprint",
]

#: The checkpoint's settings file (the part files sit beside it).
SETTINGS_FILE = "settings.json"

#: Config entries that do not change a model's outputs (where it was loaded from, the version
#: of transformers that wrote it).
_VOLATILE_CONFIG = ("_name_or_path", "transformers_version")

#: Elements read from each tensor for the parameter hash.
_SAMPLES = 64

_PART_FILE = re.compile(r"^.+__[0-9a-f]{8}\.json$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

#: One finished pair: per-call records and each prompt's continuation.
Part = tuple[list[dict[str, Any]], dict[int, list[int]]]


class CheckpointMismatch(ResumeMismatch):
    """A checkpoint directory holds results computed with other settings, prompts or models
    (the :class:`otbound.resume.ResumeMismatch` of tree decoding).

    Attributes
    ----------
    directory : pathlib.Path
    changes : str
        What changed, e.g. ``"temperature: 1.0 then, 0.7 now"``.
    """


def model_fingerprint(model: Any) -> dict[str, str]:
    """Hashes of a model's class and config, and a cheap hash of its parameters.

    The parameter hash reads, from every tensor of ``model.state_dict()`` (sorted by name), its
    name, shape and dtype and :data:`_SAMPLES` evenly spaced elements (as float64): it tells
    checkpoints, fine-tunes and dtypes apart in milliseconds without reading every weight, but
    not an edit of a single weight between the samples. ``_name_or_path`` and
    ``transformers_version`` are left out of the config: moving a model directory does not
    change its outputs.

    Returns
    -------
    dict
        ``{"class": ..., "config": sha256, "parameters": sha256}``.
    """
    config: Any = getattr(model, "config", None)
    entries = dict(config.to_dict()) if hasattr(config, "to_dict") else {}
    for key in _VOLATILE_CONFIG:
        entries.pop(key, None)
    digest = hashlib.sha256()
    state = model.state_dict() if hasattr(model, "state_dict") else {}
    for name in sorted(state):
        tensor = state[name].detach().reshape(-1)
        digest.update(f"{name}{tuple(state[name].shape)}{tensor.dtype};".encode())
        if tensor.numel():
            at = np.unique(np.linspace(0, tensor.numel() - 1, _SAMPLES).round().astype(np.int64))
            picked = tensor[at.tolist()].double().cpu().numpy()
            digest.update(picked.tobytes())
    return {
        "class": type(model).__name__,
        "config": fingerprint(entries, None),
        "parameters": digest.hexdigest(),
    }


def checkpoint_settings(
    target: Any, draft: Any, prompts: Sequence[tuple[int, Sequence[int]]], **settings: Any
) -> dict[str, Any]:
    """What determines a run's results: ``settings`` and fingerprints of prompts and models.

    Parameters
    ----------
    target, draft : transformers.PreTrainedModel
    prompts : sequence of (int, sequence of int)
        ``(prompt id, token ids)`` pairs.
    **settings
        JSON-serialisable run settings (``temperature=0.7``, ...).
    """
    plain = [[int(i), [int(t) for t in ids]] for i, ids in prompts]
    return {
        **settings,
        "prompts": {"count": len(plain), "sha256": fingerprint(plain, None)},
        "target": model_fingerprint(target),
        "draft": model_fingerprint(draft),
    }


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (for ``json.dumps``)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to a checkpoint")


class PartStore:
    """A checkpoint directory of one run (see the module's description).

    Parameters
    ----------
    directory : path
        Created if missing.
    settings : dict
        From :func:`checkpoint_settings`.

    Raises
    ------
    CheckpointMismatch
        ``directory`` holds a run with other settings.
    """

    def __init__(self, directory: str | Path, settings: Mapping[str, Any]) -> None:
        self.directory = Path(directory)
        self.settings = json.loads(json.dumps(settings, default=_plain))
        self.fingerprint = fingerprint(self.settings)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / SETTINGS_FILE
        earlier = read_record(path)
        if earlier is None:
            write_json(path, {"fingerprint": self.fingerprint, "settings": self.settings})
            return
        if earlier.get("fingerprint") != self.fingerprint:
            changes = describe_changes(earlier.get("settings", {}), self.settings)
            raise CheckpointMismatch(self.directory, changes or "the fingerprint")

    def path(self, verifier: str, tree: TreeSpec) -> Path:
        """The part file of one (verifier, tree) pair."""
        key = f"{verifier}__{tree.name}"
        return self.directory / f"{_UNSAFE.sub('_', key)}__{zlib.crc32(key.encode()):08x}.json"

    def _header(self, verifier: str, design: str, tree: TreeSpec) -> dict[str, Any]:
        pair: dict[str, Any] = {"verifier": verifier, "design": design, "tree": tree.name}
        pair["paths"] = tree.as_lists()
        return {"run": self.fingerprint, "pair": pair, "settings": self.settings}

    def load(self, verifier: str, design: str, tree: TreeSpec) -> Part | None:
        """The pair's records and continuations, or None if it is not finished.

        Raises
        ------
        CheckpointMismatch
            The part was computed with other settings, or for another design or tree shape.
        """
        try:
            saved = json.loads(self.path(verifier, tree).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # missing (or unreadable): computed again
        header = self._header(verifier, design, tree)
        if saved.get("run") != self.fingerprint or saved.get("pair") != header["pair"]:
            before = {"pair": saved.get("pair"), "settings": saved.get("settings")}
            changes = describe_changes(before, {k: header[k] for k in before})
            raise CheckpointMismatch(self.directory, changes or "the fingerprint")
        columns, rows = saved["records"]["columns"], saved["records"]["rows"]
        records = [dict(zip(columns, row, strict=True)) for row in rows]
        return records, {int(pid): tokens for pid, tokens in saved["continuations"]}

    def save(self, verifier: str, design: str, tree: TreeSpec, part: Part) -> None:
        """Write one finished pair (atomically)."""
        records, continuations = part
        columns = list(records[0]) if records else []
        saved = {
            **self._header(verifier, design, tree),
            "records": {"columns": columns, "rows": [[r[c] for c in columns] for r in records]},
            "continuations": [[pid, continuations[pid]] for pid in sorted(continuations)],
        }
        with atomic_output(self.path(verifier, tree)) as tmp:
            tmp.write_text(json.dumps(saved, default=_plain), encoding="utf-8")


def clear_parts(directory: str | Path) -> None:
    """Remove a checkpoint directory's files (parts, settings, leftover temporaries)."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for path in [*directory.iterdir()]:
        if path.name == SETTINGS_FILE or _PART_FILE.match(path.name):
            path.unlink()
    for path in [*temporaries(directory)]:
        path.unlink()
