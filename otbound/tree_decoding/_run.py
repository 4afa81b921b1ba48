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

The run in steps: its settings (:class:`TreeDecodingConfig`, validated once), its inputs and a
job per (verifier, tree) pair run or read back from the checkpoint (:mod:`._jobs`), the tables;
a dynamic run's systems are :mod:`._systems`'.

Resuming: with ``parts_dir`` each finished (verifier, tree) pair is saved at once, and the pairs
an interrupted run finished are read back instead of computed
(:mod:`otbound.tree_decoding._resume`); since a pair's random numbers depend on the seed, the
prompt and the call alone, the result equals an uninterrupted run's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from otbound.drafts import get_design
from otbound.tree_decoding._budget import summarise_systems
from otbound.tree_decoding._calls import DecodeRow, RowsCall, call_record
from otbound.tree_decoding._config import TREE_VERIFIERS, TreeDecodingConfig, resolve_config
from otbound.tree_decoding._differences import tree_differences
from otbound.tree_decoding._dynamic import System, decode_system, system_not_applicable
from otbound.tree_decoding._grow import grow_with
from otbound.tree_decoding._jobs import Decode, Job, JobsDone, RunInputs, prepare_inputs, run_all
from otbound.tree_decoding._layout import TreeLayout
from otbound.tree_decoding._prediction import RootPrediction
from otbound.tree_decoding._result import DYNAMIC_STEP_COLUMNS, STEP_COLUMNS, TreeDecodingResult
from otbound.tree_decoding._scoring import NodeDistributions
from otbound.tree_decoding._specs import TreeSpec
from otbound.tree_decoding._streams import RANDOM_NUMBERS, CallStreams, RandomSource
from otbound.tree_decoding._summary import summarise_tree_steps
from otbound.tree_decoding._systems import system_predictor, system_spec, systems_of
from otbound.tree_decoding._walk import WalkResult, walk_tree

__all__ = [
    "DYNAMIC_STEP_COLUMNS",
    "STEP_COLUMNS",
    "TREE_VERIFIERS",
    "TreeDecodingConfig",
    "TreeDecodingResult",
    "decode_tree",
    "not_applicable_reason",
    "run_tree_decoding",
]


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
    layout = tree if isinstance(tree, TreeLayout) else TreeLayout.from_paths(tree)
    reason = not_applicable_reason(verifier, layout)
    if reason is not None:
        raise ValueError(reason)
    predictor = (
        RootPrediction(verifier, layout, prediction_trials, prediction_seed)
        if predict and layout.size and not getattr(verifier, "sequence_level", False)
        else None
    )
    call = _TreeCall(
        verifier, temperature, batch_size, max_new_tokens,
        frozenset(int(t) for t in eos_token_ids), predictor, on_prompt_done, layout,
    )  # fmt: skip
    return call.decode((draft, target), prompts, rng, layout, vocab_size, kv_cache)


@dataclass(frozen=True)
class _TreeCall(RowsCall):
    """Target calls of :func:`decode_tree`: the draft grows the tree, the target scores every
    node, the verifier walks each row's tree."""

    layout: TreeLayout

    def grow_and_score(
        self, active: list[DecodeRow], scorers: list[Any], drafting: Sequence[np.random.Generator]
    ) -> tuple[Any, list[NodeDistributions]]:
        """The call's trees (:func:`grow_with`) and the target's distributions at every node."""
        from otbound.capture import out_of_memory_guard

        layout = self.layout
        where = f"decoding a {layout.size}-node tree for prompts {active[0].prompt}.."
        where += f"{active[-1].prompt}"
        with out_of_memory_guard(self.batch_size, where):
            grown = grow_with(
                scorers[0], len(active), layout, self.verifier.design, drafting,
                temperature=self.temperature,
            )  # fmt: skip
            logits = scorers[1](grown.tokens, list(range(layout.size + 1)))
        p = [NodeDistributions(logits[b], self.temperature) for b in range(len(active))]
        return grown, p

    def walk(self, scored: Any, b: int, rng: np.random.Generator) -> WalkResult:
        grown, p = scored
        return walk_tree(self.verifier, self.layout, grown.tokens[b], p[b], grown.q[b], rng)

    def record(self, scored: Any, row: DecodeRow, b: int, walk: WalkResult) -> dict[str, object]:
        return call_record(row, walk)

    def predict(self, records: list[dict[str, object]], scored: Any) -> None:
        """The root contexts' prediction inputs (:class:`RootPrediction`)."""
        grown, p = scored
        assert self.predictor is not None
        roots = self.predictor(np.stack([dist[0] for dist in p]), np.stack([q[0] for q in grown.q]))
        for record, extra in zip(records, roots, strict=True):
            record.update(extra)


def run_tree_decoding(
    target: Any,
    draft: Any,
    prompts: object,
    config: TreeDecodingConfig | None = None,
    *,
    device: Any = None,
    progress: bool = False,
    parts_dir: str | Path | None = None,
    **settings: Any,
) -> TreeDecodingResult:
    """Tree speculative decoding for every verifier and tree; tokens per call against prediction.

    Parameters
    ----------
    target, draft : transformers.PreTrainedModel, or a model directory
        Directories are loaded in float32 (:func:`otbound.capture.load_model`).
    prompts : sequence of token-id sequences or of :class:`otbound.capture.Prompt`
    config : TreeDecodingConfig, optional
        The settings: verifiers, trees, decoding, prediction, dynamic drafting (see
        :class:`TreeDecodingConfig` for each). Default: the config of ``settings``.
    device : str, optional
        Where to load model directories.
    progress : bool, default False
        A tqdm bar over (verifier, tree, prompt).
    parts_dir : path, optional
        A checkpoint directory (:mod:`otbound.tree_decoding._resume`): each finished
        (verifier, tree) pair's records and continuations are written there at once, and the
        pairs already there, from an interrupted run with the same settings, prompts and
        models, are read instead of computed. The result equals an uninterrupted run's.
    **settings
        Settings of :class:`TreeDecodingConfig` by keyword (``verifiers=``, ``trees=``,
        ``max_new_tokens=``, ``temperature=``, ``seed=``, ``batch_size=``, ``vocab_size=``,
        ``stop_at_eos=``, ``predict=``, ``prediction_trials=``, ``kv_cache=``, ``root=``,
        ``stopping=``, ``budgets=``, ``c_target=``, ``c_draft=``), in place of ``config``'s.

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
    TypeError
        A keyword that is no setting of :class:`TreeDecodingConfig`.
    CheckpointMismatch
        ``parts_dir`` holds a run with other settings, prompts or models (a ``ValueError``
        that names what changed).

    Examples
    --------
    >>> from otbound.tree_decoding import TreeDecodingConfig
    >>> config = TreeDecodingConfig(verifiers=("rrs",), trees="binary:2", max_new_tokens=8)
    >>> config.specs[0].name, config.dynamic
    ('binary-2', False)
    """
    config = resolve_config(config, settings)
    if config.dynamic:
        return _run_systems(
            target, draft, prompts, config, device=device, progress=progress, parts_dir=parts_dir
        )
    depth = max(s.depth for s in config.specs)
    inputs = prepare_inputs(target, draft, prompts, config, depth, device)
    layouts = {s.name: TreeLayout.from_paths(s.as_lists()) for s in config.specs}
    options = _options(config, inputs, predict=True)
    jobs, skipped = _jobs(config, inputs, layouts, options)
    keyed = _checkpoint_keys(config, options, dynamic=False)
    done = run_all(jobs, inputs, keyed, parts_dir, config.seed, progress, "tree decoding")
    steps = pd.DataFrame(done.rows, columns=list(STEP_COLUMNS))
    trees = {s.name: s.as_lists() for s in config.specs}
    summary = summarise_tree_steps(steps, trees, skipped if skipped else ())
    texts = pd.DataFrame(done.texts, columns=["verifier", "tree", "prompt", "tokens"])
    return _result(steps, summary, texts, config.specs, config, done)


def _options(config: TreeDecodingConfig, inputs: RunInputs, *, predict: bool) -> dict[str, Any]:
    """The keyword arguments every job's decoding shares (:func:`decode_tree`'s, with the
    prediction's settings when ``predict``; :func:`decode_system`'s without)."""
    out: dict[str, Any] = {
        "max_new_tokens": config.max_new_tokens,
        "temperature": float(config.temperature),
        "vocab_size": inputs.vocab_size,
        "batch_size": config.batch_size,
        "eos_token_ids": inputs.eos_token_ids,
    }
    if predict:
        out.update(predict=config.predict, prediction_trials=config.prediction_trials)
    out["kv_cache"] = bool(config.kv_cache)
    return out


def _checkpoint_keys(
    config: TreeDecodingConfig, options: dict[str, Any], *, dynamic: bool
) -> dict[str, Any]:
    """The settings a run's checkpoint is keyed by: the seed, the end-of-sequence rule, the
    random numbers' scheme and the decoding options (in the order runs have always written
    them, so that their checkpoints and ``run.json`` read the same)."""
    head: dict[str, Any] = {"seed": config.seed, "stop_at_eos": config.stop_at_eos}
    if dynamic:
        head.update(predict=config.predict, prediction_trials=config.prediction_trials)
    return {**head, "random_numbers": RANDOM_NUMBERS, **options}


def _result(
    steps: pd.DataFrame,
    summary: pd.DataFrame,
    continuations: pd.DataFrame,
    trees: tuple[TreeSpec, ...],
    config: TreeDecodingConfig,
    done: JobsDone,
    systems: tuple[System, ...] = (),
) -> TreeDecodingResult:
    """The run's :class:`TreeDecodingResult`, with the checkpoint's fingerprint and settings
    and the paired differences of ``steps``."""
    store = done.store
    return TreeDecodingResult(
        steps,
        summary,
        continuations,
        trees,
        config.seed,
        float(config.temperature),
        fingerprint=None if store is None else store.fingerprint,
        settings={} if store is None else store.settings,
        resumed=done.resumed,
        systems=systems,
        differences=tree_differences(steps),
    )


def _jobs(
    config: TreeDecodingConfig,
    inputs: RunInputs,
    layouts: dict[str, TreeLayout],
    options: dict[str, Any],
) -> tuple[list[Job], list[dict[str, object]]]:
    """A job per (verifier, tree) pair the verifier runs on; the others as skipped rows."""
    jobs: list[Job] = []
    skipped: list[dict[str, object]] = []
    for name, v in config.found.items():
        for s in config.specs:
            reason = not_applicable_reason(v, layouts[s.name])
            info = {"verifier": name, "design": v.design, "family": s.family, "tree": s.name}
            if reason is None:
                jobs.append(_job(name, v, s, layouts[s.name], inputs, options))
            else:
                skipped.append({**info, "nodes": s.nodes, "depth": s.depth, "note": reason})
    return jobs, skipped


def _job(
    name: str,
    verifier: Any,
    spec: TreeSpec,
    layout: TreeLayout,
    inputs: RunInputs,
    options: dict[str, Any],
) -> Job:
    """The job of one verifier on one tree (decoded by :func:`decode_tree`)."""
    head = {
        "verifier": name,
        "design": verifier.design,
        "family": spec.family,
        "tree": spec.name,
        "nodes": spec.nodes,
        "depth": spec.depth,
        "branching": list(layout.branching),
    }

    def decode(rng: CallStreams, prediction_seed: int, on_prompt_done: Any) -> Any:
        return decode_tree(
            inputs.target, inputs.draft, inputs.pairs, layout, verifier, rng, **options,
            prediction_seed=prediction_seed, on_prompt_done=on_prompt_done,
        )  # fmt: skip

    run: Decode = decode
    return Job(name, verifier, spec, spec.name, head, {"verifier": name, "tree": spec.name}, run)


# -- dynamic runs --------------------------------------------------------------------------------

#: The continuations' columns of a dynamic run.
SYSTEM_TEXT_COLUMNS = ["verifier", "tree", "root", "stopping", "budget", "prompt", "tokens"]


def _run_systems(
    target: Any,
    draft: Any,
    prompts: object,
    config: TreeDecodingConfig,
    *,
    device: Any,
    progress: bool,
    parts_dir: str | Path | None,
) -> TreeDecodingResult:
    """:func:`run_tree_decoding` of a dynamic ``config``: its systems (:mod:`._systems`),
    every verifier on each that it applies to (the others are skipped with the reason),
    summarised at their budgets (:func:`summarise_systems`)."""
    systems, skipped_systems = systems_of(config)
    depth = max((s.depth for s in systems), default=1)
    inputs = prepare_inputs(target, draft, prompts, config, depth, device)
    options = _options(config, inputs, predict=False)
    jobs, skipped = _system_jobs(config, inputs, systems, skipped_systems, options)
    keyed = _checkpoint_keys(config, options, dynamic=True)
    done = run_all(jobs, inputs, keyed, parts_dir, config.seed, progress, "dynamic drafting")
    steps = pd.DataFrame(done.rows, columns=[*STEP_COLUMNS, *DYNAMIC_STEP_COLUMNS])
    steps["budget"] = steps["budget"].astype("float64")
    summary = summarise_systems(steps, skipped, c_target=config.c_target, c_draft=config.c_draft)
    texts = pd.DataFrame(done.texts, columns=SYSTEM_TEXT_COLUMNS)
    trees = tuple(system_spec(s) for s in systems)
    return _result(steps, summary, texts, trees, config, done, tuple(systems))


def _system_jobs(
    config: TreeDecodingConfig,
    inputs: RunInputs,
    systems: Sequence[System],
    skipped_systems: Sequence[dict[str, object]],
    options: dict[str, Any],
) -> tuple[list[Job], list[dict[str, object]]]:
    """A job per (verifier, system) pair that applies; the others, and the budget/family pairs
    without a system, as skipped rows."""
    jobs: list[Job] = []
    skipped: list[dict[str, object]] = []
    for name, v in config.found.items():
        for row in skipped_systems:
            skipped.append({"verifier": name, "design": v.design, **row})
        for system in systems:
            reason = system_not_applicable(v, system)
            if reason is None:
                jobs.append(_system_job(name, v, system, config, inputs, options))
            else:
                skipped.append(
                    {
                        "verifier": name, "design": v.design, "family": system.family,
                        "tree": system.name, "nodes": system.nodes, "depth": system.depth,
                        "root": system.root, "stopping": system.stopping.label,
                        "budget": system.budget, "note": reason,
                    }
                )  # fmt: skip
    return jobs, skipped


def _system_job(
    name: str,
    verifier: Any,
    system: System,
    config: TreeDecodingConfig,
    inputs: RunInputs,
    options: dict[str, Any],
) -> Job:
    """The job of one verifier on one system (decoded by :func:`decode_system`)."""
    labels = {"root": system.root, "stopping": system.stopping.label, "budget": system.budget}
    subtree = system.subtree_paths()
    head = {
        "verifier": name,
        "design": verifier.design,
        "family": system.family,
        "tree": system.name,
        "nodes": system.nodes,
        "depth": system.depth,
        "branching": [] if system.beam else list(TreeLayout.from_paths(subtree).branching),
        **labels,
    }

    def decode(rng: CallStreams, prediction_seed: int, on_prompt_done: Any) -> Any:
        predictor = system_predictor(verifier, system, config, prediction_seed)
        return decode_system(
            inputs.target, inputs.draft, inputs.pairs, system, verifier, rng, **options,
            predictor=predictor, on_prompt_done=on_prompt_done,
        )  # fmt: skip

    run: Decode = decode
    text_head = {"verifier": name, "tree": system.name, **labels}
    return Job(name, verifier, system_spec(system), system.key, head, text_head, run)
