r"""The decoding loop: tree speculative decoding of prompts with a draft and a target model.

One *target call* per iteration and prompt: the draft model grows the tree with the verifier's
design (:func:`grow_with`), the target scores every node in one forward pass (a scorer of
:mod:`._scorer`, which by default keeps each model's key/value cache of the committed tokens
between calls) and the verifier walks the tree (:func:`walk_tree`); the tokens it
appends (accepted drafts, then a correction or a bonus token) are that call's
**tokens per call**. A prompt stops once ``max_new_tokens`` tokens are generated (the last call's
tokens are all counted; the continuation is cut) or after an end-of-sequence token.

Randomness: common random numbers (:mod:`._streams`). Call ``t`` of the ``c``-th prompt draws
its drafts from one generator and its verifications and bonus draw from another, both seeded
from ``(seed, c, t)`` alone, so every (verifier, tree) run of the same prompts meets the same
numbers where its situation coincides with another run's (the first call of each prompt, and
for as long as two texts agree), which tightens the paired comparison of
:func:`otbound.tree_decoding.tree_differences`. Distinct (prompt, call) pairs have independent
streams, so each run alone samples as one generator advanced through it would. The
prediction's Monte Carlo has a stream of its own per run, seeded from ``(seed, verifier,
tree)``.

At each call the root's ``(p, q)`` also give the prediction's inputs: the verifier's positional
acceptance per depth (:func:`otbound.trees.positional_acceptance`, exact where the verifier
allows it, else Monte Carlo) and the design's ``α*`` (:func:`otbound.optimal_acceptance`);
:func:`summarise_tree_steps` averages them over the calls.

Resuming: with ``parts_dir`` each finished (verifier, tree) pair is saved at once, and the pairs
an interrupted run finished are read back instead of computed
(:mod:`otbound.tree_decoding._resume`); since a pair's random numbers depend on the seed, the
prompt and the call alone, the result equals an uninterrupted run's.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from otbound.bounds import optimal_acceptance
from otbound.drafts import get_design
from otbound.tree_decoding._budget import summarise_systems
from otbound.tree_decoding._differences import tree_differences
from otbound.tree_decoding._dynamic import (
    ROOTS,
    DecodeRow,
    System,
    batch_rows,
    decode_system,
    family_width,
    largest_depth,
    system_not_applicable,
)
from otbound.tree_decoding._grow import grow_with
from otbound.tree_decoding._layout import TreeLayout
from otbound.tree_decoding._resume import Part, PartStore, checkpoint_settings
from otbound.tree_decoding._scorer import make_scorer
from otbound.tree_decoding._scoring import NodeDistributions
from otbound.tree_decoding._specs import TreeSpec, parse_trees
from otbound.tree_decoding._stopping import StoppingPolicy, parse_stopping
from otbound.tree_decoding._streams import (
    RANDOM_NUMBERS,
    CallStreams,
    RandomSource,
    row_generators,
)
from otbound.tree_decoding._summary import TREE_KEYS, summarise_tree_steps
from otbound.tree_decoding._walk import tree_verifier, walk_tree
from otbound.trees import positional_acceptance

#: The verifiers a tree run compares by default.
TREE_VERIFIERS: tuple[str, ...] = ("rrs", "rrs_without_replacement", "spechub", "greedy", "kseq")

#: Columns of the per-call table (``tree_steps.parquet``).
STEP_COLUMNS: tuple[str, ...] = (
    *TREE_KEYS,
    "branching",
    "prompt",
    "call",
    "tokens",
    "accepted",
    "bonus",
    "root_acceptance",
    "root_alpha_star",
    "positional",
    "alpha_star",
)

#: Columns the per-call table of a dynamic run adds (:mod:`._dynamic`, :mod:`._budget`).
DYNAMIC_STEP_COLUMNS: tuple[str, ...] = (
    "root",
    "stopping",
    "budget",
    "nodes_scored",
    "draft_calls",
    "target_passes",
    "max_depth",
    "draft_passes",
    "draft_seconds",
    "target_seconds",
    "beam_prediction",
    "node_features",
    "node_accepted",
)


@dataclass(frozen=True)
class TreeDecodingResult:
    """The output of :func:`run_tree_decoding`.

    Attributes
    ----------
    steps : pandas.DataFrame
        One row per target call (:data:`STEP_COLUMNS`): ``tokens`` appended, ``accepted``
        drafts, ``bonus`` (the walk reached a leaf), and at the root context the verifier's
        acceptance ``root_acceptance``, the design's ``root_alpha_star``, and the per-depth
        matrices ``positional`` and ``alpha_star`` (nested lists) the prediction averages.
    summary : pandas.DataFrame
        :func:`summarise_tree_steps` of ``steps``.
    differences : pandas.DataFrame
        :func:`tree_differences` of ``steps``: every pair of runs (at one budget) compared on
        the same prompts, the difference in tokens per call and its paired interval.
    continuations : pandas.DataFrame
        ``verifier, tree, prompt, tokens`` (the generated token ids).
    trees : tuple of TreeSpec
    seed : int
    temperature : float
    fingerprint : str or None
        The hash of the settings, prompts and models the checkpoint is keyed by (with
        ``parts_dir`` only).
    settings : dict
        What the fingerprint covers (:func:`checkpoint_settings`; with ``parts_dir`` only).
    resumed : int
        (verifier, tree) pairs read from ``parts_dir`` instead of computed.
    systems : tuple of System
        The dynamic systems run (beam trees, target roots, stopping, budgets), else empty.
    """

    steps: pd.DataFrame
    summary: pd.DataFrame
    continuations: pd.DataFrame = field(repr=False)
    trees: tuple[TreeSpec, ...] = ()
    seed: int = 0
    temperature: float = 1.0
    fingerprint: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict, repr=False)
    resumed: int = 0
    systems: tuple[System, ...] = ()
    differences: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)


def not_applicable_reason(verifier: Any, layout: TreeLayout) -> str | None:
    """Why a verifier cannot run on a tree (a node width it is not defined for), or None."""
    own = getattr(verifier, "not_applicable", None)  # sequence-level verifiers: tree shapes
    if callable(own):
        return cast("str | None", own(layout))
    fixed = getattr(verifier, "fixed_n", None) or get_design(verifier.design).fixed_n
    widths = sorted({len(kids) for kids in layout.children if kids})
    if fixed is not None and any(w != fixed for w in widths):
        return (
            f"{getattr(verifier, 'name', verifier)} is defined for {fixed} drafts per node; "
            f"this tree has nodes with {', '.join(map(str, widths))} children"
        )
    return None


class _RootPrediction:
    """Per call: the verifier's positional acceptance and the design's α* at the root."""

    def __init__(self, verifier: Any, layout: TreeLayout, trials: int, seed: int) -> None:
        self.verifier = verifier
        self.branching = list(layout.branching)
        self.trials = trials
        self.rng = np.random.default_rng(seed)
        self.widths = [layout.widths_at_depth(d) for d in range(layout.max_depth)]

    def __call__(self, p: np.ndarray, q: np.ndarray) -> list[dict[str, object]]:
        """The prediction's inputs for root contexts ``p``, ``q`` of shape (B, V), per row."""
        star = {  # α* of every width in the tree, for all rows at once
            w: np.atleast_1d(
                cast("np.ndarray", optimal_acceptance(p, q, n=w, design=self.verifier.design))
            )
            for w in sorted({w for widths in self.widths for w in widths})
        }
        out = []
        for b in range(p.shape[0]):
            seed = int(self.rng.integers(2**31))
            pa = positional_acceptance(self.verifier, p[b], q[b], self.branching, self.trials, seed)
            values = np.asarray(pa.values, dtype=float)
            stars = np.zeros_like(values)
            for d, widths in enumerate(self.widths):
                for w in widths:
                    stars[d, w - 1] = star[w][b]
            out.append(
                {
                    "root_acceptance": float(values[0].sum()),
                    "root_alpha_star": float(stars[0, self.branching[0] - 1]),
                    "positional": values.tolist(),
                    "alpha_star": stars.tolist(),
                }
            )
        return out


def decode_tree(
    target: Any,
    draft: Any,
    prompts: Sequence[tuple[int, Sequence[int]]],
    tree: object,
    verifier: Any,
    rng: RandomSource,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    vocab_size: int | None = None,
    batch_size: int = 8,
    eos_token_ids: Sequence[int] = (),
    predict: bool = True,
    prediction_trials: int = 2000,
    prediction_seed: int = 0,
    on_prompt_done: Callable[[], None] | None = None,
    kv_cache: bool = True,
) -> tuple[list[dict[str, object]], dict[int, list[int]]]:
    """Tree speculative decoding of each prompt with one verifier and one tree.

    Parameters
    ----------
    target, draft : transformers.PreTrainedModel
    prompts : sequence of (int, sequence of int)
        ``(prompt id, token ids)`` pairs.
    tree : path list or TreeLayout
    verifier : verifier object
        Its ``design`` draws the drafts; its ``verify`` walks the tree.
    rng : numpy.random.Generator or CallStreams
        The run's one generator, advanced throughout, or the common random numbers of
        :class:`._streams.CallStreams` (call ``t`` of the ``c``-th prompt draws from streams
        seeded by ``(seed, c, t)``: what :func:`run_tree_decoding` passes).
    max_new_tokens : int
    temperature : float, default 1.0
        Applied to both models (``> 0``).
    vocab_size : int, optional
        The vocabulary shared by the two models (default: all of the target's logits).
    batch_size : int, default 8
        Prompts decoded side by side (one padded forward pass per depth and call).
    eos_token_ids : sequence of int
        A prompt stops after one of these.
    predict : bool, default True
        Compute the root contexts' positional acceptance and ``α*`` (the prediction's inputs).
    prediction_trials : int, default 2000
        Monte Carlo trials per call for verifiers without an exact positional vector.
    prediction_seed : int, default 0
        Seed of the prediction's own Monte Carlo stream (separate from ``rng``).
    on_prompt_done : callable, optional
        Called once per finished prompt (a progress bar).
    kv_cache : bool, default True
        Keep each model's key/value cache of the committed tokens between calls
        (:class:`._scorer.CachedScorer`): a call then feeds only the tokens committed since the
        last one and the tree, instead of every prefix again. Same logits to float rounding.

    Returns
    -------
    (list of dict, dict)
        Per-call records (``prompt``, ``call``, ``tokens``, ``accepted``, ``bonus`` and the
        prediction's inputs), and each prompt's continuation.
    """
    from otbound.capture import out_of_memory_guard

    layout = tree if isinstance(tree, TreeLayout) else TreeLayout.from_paths(tree)
    reason = not_applicable_reason(verifier, layout)
    if reason is not None:
        raise ValueError(reason)
    predictor = (
        _RootPrediction(verifier, layout, prediction_trials, prediction_seed)
        if predict and layout.size and not getattr(verifier, "sequence_level", False)
        else None
    )
    eos = {int(t) for t in eos_token_ids}
    records: list[dict[str, object]] = []
    out: dict[int, list[int]] = {}
    every_row = list(range(layout.size + 1))
    for start in range(0, len(prompts), batch_size):
        active = batch_rows(prompts, start, batch_size)
        scorers = [
            make_scorer(model, [row.ids for row in active], layout, vocab_size, kv_cache=kv_cache)
            for model in (draft, target)
        ]
        while active:
            where = f"decoding a {layout.size}-node tree for prompts {active[0].prompt}.."
            where += f"{active[-1].prompt}"
            drafting, verifying = row_generators(
                rng, [row.position for row in active], [row.calls for row in active]
            )
            with out_of_memory_guard(batch_size, where):
                grown = grow_with(
                    scorers[0], len(active), layout, verifier.design, drafting,
                    temperature=temperature,
                )  # fmt: skip
                logits = scorers[1](grown.tokens, every_row)
            p = [NodeDistributions(logits[b], temperature) for b in range(len(active))]
            still: list[DecodeRow] = []
            kept: list[int] = []
            committed: list[list[int]] = []
            for b, row in enumerate(active):
                walk = walk_tree(verifier, layout, grown.tokens[b], p[b], grown.q[b], verifying[b])
                records.append(
                    {
                        "prompt": row.prompt,
                        "call": row.calls,
                        "tokens": len(walk.tokens),
                        "accepted": walk.accepted,
                        "bonus": walk.bonus,
                    }
                )
                row.calls += 1
                row.new.extend(walk.tokens)
                committed.append(list(walk.tokens))
                stop = next((i for i, t in enumerate(row.new) if t in eos), None)
                if stop is not None or len(row.new) >= max_new_tokens:
                    end = max_new_tokens if stop is None else min(stop + 1, max_new_tokens)
                    out[row.prompt] = row.new[:end]
                    if on_prompt_done is not None:
                        on_prompt_done()
                else:
                    still.append(row)
                    kept.append(b)
            if predictor is not None:
                roots = predictor(
                    np.stack([dist[0] for dist in p]), np.stack([q[0] for q in grown.q])
                )
                for record, extra in zip(records[-len(active) :], roots, strict=True):
                    record.update(extra)
            active = still
            for scorer in scorers:
                scorer.commit(committed)
                scorer.keep(kept)
    return records, out


def _as_specs(trees: object) -> list[TreeSpec]:
    if isinstance(trees, str):
        return parse_trees(trees)
    if isinstance(trees, TreeSpec):
        return [trees]
    if isinstance(trees, Mapping):
        return [TreeSpec.custom(name, paths) for name, paths in trees.items()]
    specs: list[TreeSpec] = list(trees)  # type: ignore[call-overload]
    if not all(isinstance(s, TreeSpec) for s in specs):
        raise ValueError(
            "trees must be a string such as 'binary:1-5,ternary:1-3', TreeSpec objects, or a "
            "mapping of names to path lists"
        )
    return specs


def _as_prompts(prompts: object) -> list[tuple[int, tuple[int, ...]]]:
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


def _check_fit(
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


def _name(verifier: Any) -> str:
    """A verifier's name: the registry name, or its class name for other objects."""
    if isinstance(verifier, str):
        return verifier
    return str(getattr(verifier, "name", type(verifier).__name__))


def _prompt_bar(runs: int, prompts: int, resumed: int, desc: str, progress: bool) -> Any:
    """A tqdm bar over the (run, prompt) pairs, started at the resumed runs' prompts."""
    from tqdm import tqdm

    return tqdm(
        total=runs * prompts,
        initial=resumed * prompts,
        unit="prompt",
        desc=desc,
        disable=None if progress else True,
    )


def _config_seed(seed: int, *names: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed), *(zlib.crc32(n.encode()) for n in names)])


def _load(model: Any, device: Any) -> Any:
    if isinstance(model, str | Path):
        from otbound.capture import load_model

        return load_model(model, "float32", device)
    return model


def run_tree_decoding(
    target: Any,
    draft: Any,
    prompts: object,
    *,
    verifiers: Sequence[str] = TREE_VERIFIERS,
    trees: object = "binary:1-3",
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    vocab_size: int | None = None,
    stop_at_eos: bool = True,
    predict: bool = True,
    prediction_trials: int = 2000,
    device: Any = None,
    progress: bool = False,
    parts_dir: str | Path | None = None,
    kv_cache: bool = True,
    root: str | Sequence[str] = "draft",
    stopping: object = None,
    budgets: Sequence[int] | None = None,
    c_target: float | None = None,
    c_draft: float | None = None,
) -> TreeDecodingResult:
    """Tree speculative decoding for every verifier and tree; tokens per call against prediction.

    Parameters
    ----------
    target, draft : transformers.PreTrainedModel, or a model directory
        Directories are loaded in float32 (:func:`otbound.capture.load_model`).
    prompts : sequence of token-id sequences or of :class:`otbound.capture.Prompt`
    verifiers : sequence of str or verifier objects, default :data:`TREE_VERIFIERS`
        Names in :data:`otbound.VERIFIERS`, objects with ``design`` and a single-trial
        ``verify(drafts, p, q, rng)``, or the sequence-level ``block`` (chains), ``traversal``
        and ``multipath`` (independent paths, tree family ``pathsK``), which walk the whole
        tree at once (:class:`otbound.tree_decoding.SequenceTreeVerifier`; no prediction).
    trees : str, TreeSpec(s) or mapping of name to path list, default "binary:1-3"
        ``"binary:1-5,ternary:1-3"`` (:func:`parse_trees`) or explicit trees.
    max_new_tokens : int, default 32
    temperature : float, default 1.0
        Applied identically to both models; must be ``> 0`` (distinct-draft designs need
        ``k`` tokens with positive mass).
    seed : int, default 0
        The common random numbers (:class:`._streams.CallStreams`): call ``t`` of the ``c``-th
        prompt draws from streams seeded by ``(seed, c, t)`` in every run.
    batch_size : int, default 8
    vocab_size : int, optional
        Default: the smaller of the two models' logit widths (with a warning when they differ).
    stop_at_eos : bool, default True
        Stop a prompt after the models' end-of-sequence token.
    predict : bool, default True
        Compute the prediction and the bound (costs a positional vector and ``α*`` per call).
    prediction_trials : int, default 2000
        Monte Carlo trials per call for the prediction of verifiers without an exact
        positional vector (``rrs_without_replacement`` at width ``>= 3`` on large
        vocabularies, ``importance``, ``gls``, verifier objects).
    device : str, optional
        Where to load model directories.
    progress : bool, default False
        A tqdm bar over (verifier, tree, prompt).
    parts_dir : path, optional
        A checkpoint directory (:mod:`otbound.tree_decoding._resume`): each finished
        (verifier, tree) pair's records and continuations are written there at once, and the
        pairs already there, from an interrupted run with the same settings, prompts and
        models, are read instead of computed. The result equals an uninterrupted run's.
    kv_cache : bool, default True
        Reuse each model's key/value cache between calls (:func:`decode_tree`).
    root : str or sequence of str, default "draft"
        ``"target"``: target-initialised roots (:mod:`._dynamic`); both: ``("draft", "target")``.
    stopping : str, StoppingPolicy or sequence of them, optional
        Stopping policies (:func:`parse_stopping`: ``fixed``, ``confidence:τ``,
        ``confidence-path:τ``, ``learned:MODEL``); a string may list several, comma-separated.
    budgets : sequence of int, optional
        Target budgets: each system runs the largest tree of its family with at most that many
        nodes (:mod:`._budget`); ``trees`` then names families (``"binary,beam4"``; depths are
        ignored).
    c_target, c_draft : float, optional
        The cost model's pass costs (default: measured on the run).

    Beam families (``beamW``), a target root, a stopping policy or budgets make the run
    *dynamic* (:func:`._dynamic.decode_system`): its tables gain the columns of
    :mod:`._budget` and ``TreeDecodingResult.systems`` lists the systems. The static k-ary runs
    without these options are unchanged.

    Returns
    -------
    TreeDecodingResult

    Raises
    ------
    ValueError
        Bad arguments (named), prompts that do not fit the models' context, unknown verifiers.
    CheckpointMismatch
        ``parts_dir`` holds a run with other settings, prompts or models (a ``ValueError``
        that names what changed).
    """
    from otbound.capture import eos_token_ids, plan_vocabulary

    if not (isinstance(temperature, int | float) and np.isfinite(temperature)) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    for name, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(verifiers, str):
        verifiers = [verifiers]
    found: dict[str, Any] = {_name(v): tree_verifier(v) for v in verifiers}
    roots = [root] if isinstance(root, str) else [str(r) for r in root]
    bad_roots = [r for r in roots if r not in ROOTS]
    if bad_roots or not roots:
        raise ValueError(f"root must be one of {', '.join(ROOTS)}, got {', '.join(bad_roots)}")
    policies = _as_policies(stopping)
    if budgets is not None:
        specs: list[TreeSpec] = []
        families = _as_families(trees)
    else:
        specs = _as_specs(trees)
        if not specs:
            raise ValueError("trees is empty")
        families = []
    dynamic = (
        budgets is not None
        or policies is not None
        or roots != ["draft"]
        or any(re.fullmatch(r"beam[0-9]+", s.family) for s in specs)
    )
    if dynamic:
        systems, skipped_systems = _systems(
            specs, families, roots, policies or [StoppingPolicy()], budgets
        )
        return _run_dynamic(
            target, draft, prompts, found, systems, skipped_systems,
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
            batch_size=batch_size, vocab_size=vocab_size, stop_at_eos=stop_at_eos,
            predict=predict, prediction_trials=prediction_trials, device=device,
            progress=progress, parts_dir=parts_dir, kv_cache=kv_cache,
            c_target=c_target, c_draft=c_draft,
        )  # fmt: skip
    pairs = _as_prompts(prompts)
    target, draft = _load(target, device), _load(draft, device)
    depth = max(s.depth for s in specs)
    _check_fit({"target": target, "draft": draft}, pairs, max_new_tokens, depth)
    if vocab_size is None:
        vocab_size = plan_vocabulary(target, draft).size
    eos = eos_token_ids(target) if stop_at_eos else []
    layouts = {s.name: TreeLayout.from_paths(s.as_lists()) for s in specs}
    todo, skipped = [], []
    for name, v in found.items():
        for s in specs:
            reason = not_applicable_reason(v, layouts[s.name])
            info = {"verifier": name, "design": v.design, "family": s.family, "tree": s.name}
            if reason is None:
                todo.append((name, v, s))
            else:
                skipped.append({**info, "nodes": s.nodes, "depth": s.depth, "note": reason})
    options: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "temperature": float(temperature),
        "vocab_size": vocab_size,
        "batch_size": batch_size,
        "eos_token_ids": eos,
        "predict": predict,
        "prediction_trials": prediction_trials,
        "kv_cache": bool(kv_cache),
    }
    store, done = None, {}
    if parts_dir is not None:
        settings = checkpoint_settings(
            target, draft, pairs, seed=seed, stop_at_eos=stop_at_eos,
            random_numbers=RANDOM_NUMBERS, **options,
        )  # fmt: skip
        store = PartStore(parts_dir, settings)
        done = {(name, s.name): store.load(name, v.design, s) for name, v, s in todo}
    resumed = sum(part is not None for part in done.values())
    bar = _prompt_bar(len(todo), len(pairs), resumed, "tree decoding", progress)
    rows: list[dict[str, object]] = []
    texts: list[dict[str, object]] = []
    with bar:
        for name, v, s in todo:
            bar.set_postfix_str(f"{name} {s.name}", refresh=False)
            part: Part | None = done.get((name, s.name))
            if part is None:
                rng = CallStreams(seed)
                pred_seed = int(_config_seed(seed, name, s.name).generate_state(1)[0])
                part = decode_tree(
                    target,
                    draft,
                    pairs,
                    layouts[s.name],
                    v,
                    rng,
                    **options,
                    prediction_seed=pred_seed,
                    on_prompt_done=lambda: bar.update(1),
                )
                if store is not None:
                    store.save(name, v.design, s, part)
            records, out = part
            head = {
                "verifier": name,
                "design": v.design,
                "family": s.family,
                "tree": s.name,
                "nodes": s.nodes,
                "depth": s.depth,
                "branching": list(layouts[s.name].branching),
            }
            rows.extend({**head, **r} for r in records)
            texts.extend(
                {"verifier": name, "tree": s.name, "prompt": pid, "tokens": tokens}
                for pid, tokens in sorted(out.items())
            )
    steps = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    summary = summarise_tree_steps(
        steps, {s.name: s.as_lists() for s in specs}, skipped if skipped else ()
    )
    continuations = pd.DataFrame(texts, columns=["verifier", "tree", "prompt", "tokens"])
    return TreeDecodingResult(
        steps,
        summary,
        continuations,
        tuple(specs),
        seed,
        float(temperature),
        fingerprint=None if store is None else store.fingerprint,
        settings={} if store is None else store.settings,
        resumed=resumed,
        differences=tree_differences(steps),
    )


def _as_policies(stopping: object) -> list[StoppingPolicy] | None:
    """Stopping policies from a comma-separated string, policies or strings; None for None."""
    if stopping is None:
        return None
    items: list[object]
    if isinstance(stopping, str):
        items = [t for t in (x.strip() for x in stopping.split(",")) if t]
    elif isinstance(stopping, StoppingPolicy):
        items = [stopping]
    else:
        items = list(cast(Iterable[object], stopping))
    if not items:
        raise ValueError("stopping is empty")
    out = [s if isinstance(s, StoppingPolicy) else parse_stopping(str(s)) for s in items]
    return list({p.label: p for p in out}.values())


def _as_families(trees: object) -> list[str]:
    """Tree families for budget runs: ``"binary,beam4"`` (``:DEPTHS`` ignored) or specs."""
    if isinstance(trees, str):
        names = [item.strip().split(":")[0] for item in trees.split(",") if item.strip()]
    elif isinstance(trees, TreeSpec):
        names = [trees.family]
    else:
        items = cast(Iterable[Any], trees)
        names = [t.family if isinstance(t, TreeSpec) else str(t) for t in items]
    if not names:
        raise ValueError("trees is empty")
    for name in names:
        family_width(name)
    return list(dict.fromkeys(names))


def _systems(
    specs: Sequence[TreeSpec],
    families: Sequence[str],
    roots: Sequence[str],
    policies: Sequence[StoppingPolicy],
    budgets: Sequence[int] | None,
) -> tuple[list[System], list[dict[str, object]]]:
    """The systems of a dynamic run, and the budget/family pairs with no tree within budget."""
    systems: list[System] = []
    skipped: list[dict[str, object]] = []
    if budgets is None:
        for spec in specs:
            if spec.family in ("custom",) or spec.family.startswith("paths"):
                raise ValueError(
                    f"trees: {spec.name} cannot be grown dynamically (beam trees, target roots, "
                    "stopping and budgets take chain, binary, ternary, kN and beamW)"
                )
            for r in roots:
                for policy in policies:
                    if r == "target" and spec.depth < 1:
                        continue
                    systems.append(System(spec.family, spec.depth, r, policy, None))
        return systems, skipped
    for budget in budgets:
        if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 1:
            raise ValueError(
                f"budget must be a whole number of nodes >= 1 (one tree node per target call "
                f"at least), got {budget!r}"
            )
        for family in families:
            for r in roots:
                for policy in policies:
                    depth = largest_depth(family, int(budget), r)
                    if depth:
                        systems.append(System(family, depth, r, policy, int(budget)))
                    else:
                        skipped.append(
                            {
                                "family": family,
                                "tree": f"{family}-0",
                                "nodes": 0,
                                "depth": 0,
                                "root": r,
                                "stopping": policy.label,
                                "budget": int(budget),
                                "note": f"no {family} tree with a {r} root within {budget} nodes",
                            }
                        )
    return systems, skipped


def _system_spec(system: System) -> TreeSpec:
    """A TreeSpec naming a system's checkpoint part (its key) with its capacity's paths."""
    paths = system.static_paths()
    if paths is None:
        paths = parse_trees(f"{system.family}:{system.depth}")[0].as_lists()
        if system.root == "target":
            paths = [[0], *[[0, *p] for p in paths[: system.width * (system.depth - 1)]]]
    return TreeSpec(system.key, system.family, tuple(tuple(p) for p in paths))


def _run_dynamic(
    target: Any,
    draft: Any,
    prompts: object,
    found: Mapping[str, Any],
    systems: Sequence[System],
    skipped_systems: Sequence[Mapping[str, object]],
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int,
    vocab_size: int | None,
    stop_at_eos: bool,
    predict: bool,
    prediction_trials: int,
    device: Any,
    progress: bool,
    parts_dir: str | Path | None,
    kv_cache: bool,
    c_target: float | None,
    c_draft: float | None,
) -> TreeDecodingResult:
    """:func:`run_tree_decoding` for dynamic systems (:mod:`._dynamic`, :mod:`._budget`)."""
    from otbound.capture import eos_token_ids, plan_vocabulary
    from otbound.tree_decoding._beam_predict import BeamPrediction

    pairs = _as_prompts(prompts)
    target, draft = _load(target, device), _load(draft, device)
    depth = max((s.depth for s in systems), default=1)
    _check_fit({"target": target, "draft": draft}, pairs, max_new_tokens, depth)
    if vocab_size is None:
        vocab_size = plan_vocabulary(target, draft).size
    eos = eos_token_ids(target) if stop_at_eos else []
    todo, skipped = [], []
    for name, v in found.items():
        for row in skipped_systems:
            skipped.append({"verifier": name, "design": v.design, **row})
        for system in systems:
            reason = system_not_applicable(v, system)
            if reason is None:
                todo.append((name, v, system))
            else:
                skipped.append(
                    {
                        "verifier": name, "design": v.design, "family": system.family,
                        "tree": system.name, "nodes": system.nodes, "depth": system.depth,
                        "root": system.root, "stopping": system.stopping.label,
                        "budget": system.budget, "note": reason,
                    }
                )  # fmt: skip
    options: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "temperature": float(temperature),
        "vocab_size": vocab_size,
        "batch_size": batch_size,
        "eos_token_ids": eos,
        "kv_cache": bool(kv_cache),
    }
    store, done = None, {}
    if parts_dir is not None:
        settings = checkpoint_settings(
            target, draft, pairs, seed=seed, stop_at_eos=stop_at_eos, predict=predict,
            prediction_trials=prediction_trials, random_numbers=RANDOM_NUMBERS, **options,
        )  # fmt: skip
        store = PartStore(parts_dir, settings)
        done = {(name, s.key): store.load(name, v.design, _system_spec(s)) for name, v, s in todo}
    resumed = sum(part is not None for part in done.values())
    bar = _prompt_bar(len(todo), len(pairs), resumed, "dynamic drafting", progress)
    rows: list[dict[str, object]] = []
    texts: list[dict[str, object]] = []
    with bar:
        for name, v, system in todo:
            bar.set_postfix_str(f"{name} {system.key}", refresh=False)
            part: Part | None = done.get((name, system.key))
            subtree = system.subtree_paths()
            if part is None:
                rng = CallStreams(seed)
                pred_seed = int(_config_seed(seed, name, system.key).generate_state(1)[0])
                predictor: Any = None
                if predict and system.stopping.predictable:
                    if system.beam:
                        below = system.depth - 1 if system.root == "target" else system.depth
                        predictor = BeamPrediction(
                            v, system.width, below, max(1, prediction_trials // 100), pred_seed
                        )
                    elif subtree:
                        predictor = _RootPrediction(
                            v, TreeLayout.from_paths(subtree), prediction_trials, pred_seed
                        )
                part = decode_system(
                    target, draft, pairs, system, v, rng, **options, predictor=predictor,
                    on_prompt_done=lambda: bar.update(1),
                )  # fmt: skip
                if store is not None:
                    store.save(name, v.design, _system_spec(system), part)
            records, out = part
            head = {
                "verifier": name,
                "design": v.design,
                "family": system.family,
                "tree": system.name,
                "nodes": system.nodes,
                "depth": system.depth,
                "branching": [] if system.beam else list(TreeLayout.from_paths(subtree).branching),
                "root": system.root,
                "stopping": system.stopping.label,
                "budget": system.budget,
            }
            rows.extend({**head, **r} for r in records)
            texts.extend(
                {"verifier": name, "tree": system.name, "root": system.root,
                 "stopping": system.stopping.label, "budget": system.budget, "prompt": pid,
                 "tokens": tokens}
                for pid, tokens in sorted(out.items())
            )  # fmt: skip
    steps = pd.DataFrame(rows, columns=[*STEP_COLUMNS, *DYNAMIC_STEP_COLUMNS])
    steps["budget"] = steps["budget"].astype("float64")
    summary = summarise_systems(steps, skipped, c_target=c_target, c_draft=c_draft)
    continuations = pd.DataFrame(
        texts, columns=["verifier", "tree", "root", "stopping", "budget", "prompt", "tokens"]
    )
    return TreeDecodingResult(
        steps,
        summary,
        continuations,
        tuple(_system_spec(s) for s in systems),
        seed,
        float(temperature),
        fingerprint=None if store is None else store.fingerprint,
        settings={} if store is None else store.settings,
        resumed=resumed,
        systems=tuple(systems),
        differences=tree_differences(steps),
    )
