r"""Dynamic drafting: RSD-S beam trees, target-initialised roots, stopping policies, budgets.

A *system* (:class:`System`) is a tree family, a root and a stopping policy under a cap on the
nodes the target scores per call. Its tree may differ from call to call and from prompt to
prompt; a call lays it out in a fixed *capacity* (node slots ordered by depth) with a parent
per row and slot (:class:`RowsLayout`), which the tree attention of :mod:`._mask` reads per
row. Absent slots (pruned or never drawn) are fed as pad tokens that no node attends to, and
are not counted as scored (``nodes_scored``).

**RSD-S trees** (family ``beamW``; Jeon et al., arXiv 2402.14160, RSD with Stochastic Beam
Search; Kool, van Hoof and Welling, arXiv 1903.06059, the Gumbel-top-k trick and Stochastic
Beam Search, their top-down sampling with conditional Gumbels; only the abstracts and
introductions were readable here, the construction below is Kool et al.'s SBS as those
describe it, and the losslessness argument is written out in full). Every node ``u`` holds a
perturbed log-probability ``G_u`` (``G_root = 0``). At each depth, every expanded node ``u``
of the beam draws fresh Gumbel noise ``g_x`` for every token and sets

.. math::

    φ_{u,x} = \log q(\text{path}(u)) + \log q(x | u) + g_x,\qquad Z_u = \max_x φ_{u,x},\\
    G_{u,x} = -\log\bigl(e^{-G_u} - e^{-Z_u} + e^{-φ_{u,x}}\bigr)

(the Gumbel of ``log q(path(u) x)`` conditioned on its maximum over ``x`` being ``G_u``); the
``W`` candidates ``(u, x)`` of largest ``G_{u,x}`` over the whole level become the next level's
nodes. So the tree has at most ``W`` nodes per level, and ``W`` sequences sampled without
replacement from the draft's sequence law at every depth.

*Which draws the verification treats as the drafts of node u.* ``G_{u,x}`` is increasing in
``φ_{u,x}`` for a fixed ``u``, so the children of ``u`` that survive are the first ``k_u`` of
the Gumbel-top-V order of ``log q(· | u) + g``, i.e. the first ``k_u`` draws of sampling
*without replacement* from ``q(· | u)``, in draw order (largest ``G`` first). The verifier is
RRS without replacement (``rrs_without_replacement``, the recursive rejection sampling of RSD)
on those ``k_u`` drafts with ``p(· | u)``, ``q(· | u)``.

*Why the output is exactly the target's.* RRS without replacement is lossless for any number of
drafts as long as, whenever it looks at draft ``j``, that draft is distributed as the ``j``-th
draw without replacement given drafts ``1..j−1`` (each stage outputs the residual target of the
previous one, by the speculative-sampling lemma, whatever the number of stages). ``k_u`` is
random, but it is decided by the *values* ``φ_{(1)} > φ_{(2)} > …`` of ``u``'s children and by
other nodes' noise. Given the first ``j − 1`` draws, the remaining ``φ`` are independent
Gumbels truncated below ``φ_{(j−1)}``, and the maximum of such a family is independent of its
argmax (the Gumbel-max property survives a common truncation). So "draft ``j`` exists" is
independent of *which* token it is, and the conditional law of draft ``j`` given that it exists
is still the without-replacement draw. The same holds below an accepted child ``c``: whether
``c``'s children make the beam depends on ``G_c`` and on other nodes' noise, never on the
identity of ``c``'s children, and the verification's uniforms are independent of all draft
noise. Hence each node's output is ``~ p(· | u)`` given the accepted path, as for static trees.

**Target-initialised roots** (``root="target"``; improved MCSD, Lu et al., arXiv 2409.10644,
abstract only: "a target model initialized multi-candidate process"). Before drafting, the
target's distribution ``p_root`` at the last committed position is computed by a target pass
over the committed tokens not yet scored (the previous call's bonus token: that call computed
only the distribution the bonus was drawn from, so drawing the root's child from *it* would
just be the bonus token again). ``target_passes`` in the cost model counts this second target
pass per call. The root
gets **one** child, a draw ``x ~ p_root``. *The first level's verification*: the child is
appended unconditionally. This is exact: ``x`` is a sample of the target's own next-token law
at that position, which is what lossless decoding must output there. Further root children
drawn from ``p_root`` would add nothing under a lossless first level for the designs here (with
``q = p`` the first draft is accepted with probability one by RRS, RRS without replacement and
K-SEQ, so the others are never read), which is why MCSD's rule of picking among several
target-drawn first tokens by their continuations is not lossless and is not implemented. Below
the root child the family's tree (depth ``D − 1``) or beam grows from the draft as usual.

**Stopping** (:mod:`._stopping`): a node is expanded (gets children) only when the policy says
so, from draft-side quantities fixed before its children are drawn; unexpanded nodes are leaves
(the walk appends a bonus from ``p`` there). For k-ary families a node gets all ``k`` children
or none; for beams an unexpanded node offers no candidates.

Random numbers: one generator per system run, advanced by every draft (design draws, Gumbel
noise, the target root's draw), every verification and every bonus draw; for the static k-ary
families with a draft root and ``fixed`` stopping the draws come in the order of
:func:`._grow.grow_with` and :func:`._walk.walk_tree`, so those runs equal the static path's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from otbound.drafts import get_design
from otbound.tree_decoding._calls import DecodeRow, RowsCall, call_record
from otbound.tree_decoding._layout import TreeLayout
from otbound.tree_decoding._scoring import NodeDistributions
from otbound.tree_decoding._specs import FAMILIES
from otbound.tree_decoding._stopping import StoppingPolicy, entropy
from otbound.tree_decoding._streams import RandomSource
from otbound.tree_decoding._walk import WalkResult, walk_from
from otbound.trees import kary_tree
from otbound.verifiers.base import sample_drafts, sample_tokens

#: Roots of a system: the draft's (a tree as today) or the target's (one child from p_root).
ROOTS: tuple[str, ...] = ("draft", "target")

_BEAM = re.compile(r"^beam([1-9][0-9]*)$")
_KARY = re.compile(r"^k([1-9][0-9]*)$")


def family_width(family: str) -> tuple[int, bool]:
    """``(k, False)`` for a k-ary family (chain, binary, ternary, kN), ``(W, True)`` for beamW.

    Raises
    ------
    ValueError
        An unknown family, or ``beam0``.
    """
    if family in FAMILIES:
        return FAMILIES[family], False
    if (m := _KARY.match(family)) is not None:
        return int(m[1]), False
    if (m := _BEAM.match(family)) is not None:
        return int(m[1]), True
    if re.fullmatch(r"beam[0-9]*", family):
        raise ValueError(f"trees: {family!r} needs a beam width of at least 1, such as beam4")
    raise ValueError(
        f"unknown tree family {family!r} for dynamic drafting; use chain, binary, ternary, kN "
        "or beamW (RSD-S beam of width W, e.g. beam4)"
    )


def capacity_nodes(family: str, depth: int, root: str = "draft") -> int:
    """Nodes the target scores at most per call: the tree of ``family`` and ``depth``.

    ``k``-ary: ``Σ_{d=1..D} k^d``; beam: ``W D``; a target root replaces the first level by one
    node: ``1 + Σ_{d=1..D−1} k^d`` and ``1 + W (D − 1)``.

    Examples
    --------
    >>> capacity_nodes("binary", 3), capacity_nodes("beam4", 3)
    (14, 12)
    >>> capacity_nodes("beam4", 3, "target")
    9
    """
    width, beam = family_width(family)
    below = depth - 1 if root == "target" else depth
    per = [width] * below if beam else [width ** (d + 1) for d in range(below)]
    return (1 if root == "target" else 0) + int(sum(per))


def largest_depth(family: str, budget: int, root: str = "draft", limit: int = 64) -> int:
    """The largest depth whose capacity is at most ``budget`` (0 when none fits)."""
    best = 0
    for depth in range(1, limit + 1):
        if capacity_nodes(family, depth, root) > budget:
            break
        best = depth
    return best


@dataclass(frozen=True)
class System:
    """One dynamic drafting system: family, depth (the cap), root, stopping policy, budget.

    Attributes
    ----------
    family : str
    depth : int
        ``D``, the deepest level (the target root's child is level 1).
    root : str
        ``"draft"`` or ``"target"``.
    stopping : StoppingPolicy
    budget : int or None
        The target budget this system was sized for (``--budget``), else None.
    """

    family: str
    depth: int
    root: str = "draft"
    stopping: StoppingPolicy = field(default_factory=StoppingPolicy)
    budget: int | None = None

    def __post_init__(self) -> None:
        family_width(self.family)
        if self.depth < 1:
            raise ValueError(f"tree depth must be at least 1, got {self.depth}")
        if self.root not in ROOTS:
            raise ValueError(f"root must be one of {', '.join(ROOTS)}, got {self.root!r}")

    @property
    def width(self) -> int:
        """``k`` (children per node) or ``W`` (beam width)."""
        return family_width(self.family)[0]

    @property
    def beam(self) -> bool:
        """Whether the family is an RSD-S beam."""
        return family_width(self.family)[1]

    @property
    def name(self) -> str:
        """The tree's name, ``binary-3``, ``beam4-5``."""
        return f"{self.family}-{self.depth}"

    @property
    def nodes(self) -> int:
        """The capacity: nodes scored per call at most (:func:`capacity_nodes`)."""
        return capacity_nodes(self.family, self.depth, self.root)

    @property
    def key(self) -> str:
        """What distinguishes this system's checkpoint part beside the verifier."""
        budget = "" if self.budget is None else f"@b{self.budget}"
        return f"{self.name}@{self.root}@{self.stopping.label}{budget}"

    def static_paths(self) -> list[list[int]] | None:
        """The k-ary capacity tree as a path list (None for beams)."""
        if self.beam:
            return None
        if self.root == "target":
            below = kary_tree([self.width] * (self.depth - 1)) if self.depth > 1 else []
            return [[0], *[[0, *p] for p in below]]
        return kary_tree([self.width] * self.depth)

    def subtree_paths(self) -> list[list[int]]:
        """The k-ary tree the verifier walks (below the target root's child), as paths; empty
        for beams, whose shape changes from call to call (their ``W^D`` paths are never
        enumerated)."""
        if self.beam:
            return []
        width = self.width
        depth = self.depth - 1 if self.root == "target" else self.depth
        return kary_tree([width] * depth) if depth else []


class RowsLayout:
    """The capacity of one call's trees with a parent per row: what :mod:`._mask` reads.

    Attributes
    ----------
    size : int
        ``N`` slots.
    depth : numpy.ndarray of int64, shape (N,)
        Every row's slot ``i`` is at this depth.
    parent : numpy.ndarray of int64, shape (B, N)
        The parent's layout row (0: the root; ``j + 1``: slot ``j``), ``-1`` while absent.
    """

    def __init__(self, rows: int, depth: np.ndarray) -> None:
        self.depth = np.asarray(depth, dtype=np.int64)
        self.size = int(self.depth.size)
        self.parent = np.full((rows, self.size), -1, dtype=np.int64)

    def ancestors(self) -> np.ndarray:
        """``mask[b, i, j]``: slot ``j`` is slot ``i`` or an ancestor of it in row ``b``."""
        rows, n = self.parent.shape
        mask = np.zeros((rows, n, n), dtype=bool)
        idx = np.arange(n)
        mask[:, idx, idx] = True
        for i in range(n):  # parents come first (slots are ordered by depth)
            par = self.parent[:, i] - 1
            has = par >= 0
            if has.any():
                mask[has, i] |= mask[has, par[has]]
        return mask

    def children(self, b: int) -> list[list[int]]:
        """Row ``b``'s children of every layout row (slot order, which is draw order)."""
        kids: list[list[int]] = [[] for _ in range(self.size + 1)]
        for i in range(self.size):
            r = int(self.parent[b, i])
            if r >= 0:
                kids[r].append(i)
        return kids


def _slots(system: System) -> tuple[np.ndarray, np.ndarray | None]:
    """Depth of every capacity slot, and the fixed parent rows of k-ary families."""
    paths = system.static_paths()
    if paths is not None:
        layout = TreeLayout.from_paths(paths)
        return layout.depth, layout.parent_row
    width = system.width
    depths = [1] if system.root == "target" else [1] * width
    for d in range(2, system.depth + 1):
        depths += [d] * width
    return np.array(depths, dtype=np.int64), None


def _log1mexp(a: np.ndarray) -> np.ndarray:
    """``log(1 − e^a)`` for ``a <= 0``, accurately (Mächler's split at ``−log 2``)."""
    a = np.minimum(a, 0.0)
    with np.errstate(divide="ignore"):
        out: np.ndarray = np.where(
            a > -0.6931471805599453, np.log(-np.expm1(a)), np.log1p(-np.exp(a))
        )
    return out


def conditional_gumbel(top: float, phi: np.ndarray) -> np.ndarray:
    r"""Kool et al.'s ``G̃ = −log(e^{−T} − e^{−Z} + e^{−φ})`` with ``Z = max φ``, stably.

    ``u = T − φ + log(1 − e^{φ − Z})``, ``G̃ = T − max(u, 0) − log1p(e^{−|u|})``; entries with
    ``φ = −∞`` stay ``−∞``.
    """
    phi = np.asarray(phi, dtype=np.float64)
    finite = np.isfinite(phi)
    out = np.full(phi.shape, -np.inf)
    if not finite.any():
        return out
    z = phi[finite].max()
    f = phi[finite]
    u = top - f + _log1mexp(f - z)
    out[finite] = top - np.maximum(u, 0.0) - np.log1p(np.exp(-np.abs(u)))
    return out


@dataclass
class _Grown:
    """One call's trees (per row) and what the records need."""

    layout: RowsLayout
    tokens: np.ndarray
    q: list[dict[int, np.ndarray]]
    p_root: np.ndarray | None
    features: list[dict[int, np.ndarray]]
    draft_calls: np.ndarray


def grow_system(
    scorer: Callable[[np.ndarray, list[int], RowsLayout], np.ndarray],
    rows: int,
    system: System,
    design: str,
    rng: np.random.Generator | Sequence[np.random.Generator],
    *,
    temperature: float,
    p_root: np.ndarray | None = None,
) -> _Grown:
    """Grow one call's trees with the draft scorer (see the module docstring).

    Parameters
    ----------
    scorer : callable
        ``scorer(tokens[:, :known], layout_rows, layout)``: draft logits (B, len(rows), V)
        for the trees laid out so far (slots of depth ``<= d`` are final when depth ``d`` is
        scored).
    rows : int
        ``B``.
    system : System
    design : str
        The verifier's draft design (k-ary families); beams draw by Gumbel-top-k.
    rng : numpy.random.Generator or sequence of them
        One generator for every row, or one per row (:mod:`._streams`).
    temperature : float
    p_root : numpy.ndarray, shape (B, V), optional
        The target's root distributions (target roots).
    """
    rngs = [rng] * rows if isinstance(rng, np.random.Generator) else list(rng)
    depth, fixed_parent = _slots(system)
    growth = _Growth(system, rows, depth)
    spec = get_design(design)
    start = 0
    if system.root == "target":
        if p_root is None:
            raise ValueError("a target root needs the target's root distributions")
        growth.plant_target_root(p_root, rngs)
        start = 1
    for d in range(start, system.depth):
        level_rows = [0] if d == 0 else [i + 1 for i in range(growth.size) if depth[i] == d]
        present = np.array([[growth.layout.parent[b, r - 1] >= 0 if r else True
                             for r in level_rows] for b in range(rows)])  # fmt: skip
        if not present.any():
            break
        known = int(np.count_nonzero(depth <= d))
        logits = scorer(growth.tokens[:, :known], level_rows, growth.layout)
        for b in range(rows):
            dists = NodeDistributions(logits[b], temperature)
            expand_rows = growth.expanding(b, d, level_rows, present[b], dists)
            if not expand_rows:
                continue
            if fixed_parent is not None:
                growth.draw_children(b, expand_rows, fixed_parent, spec, rngs[b])
            else:
                slots = [i for i in range(growth.size) if depth[i] == d + 1]
                growth.draw_beam(b, expand_rows, slots, rngs[b])
    return _Grown(
        growth.layout, growth.tokens, growth.q, p_root, growth.features, growth.draft_calls
    )


class _Growth:
    """One call's trees while they grow, and the steps that grow them.

    Per row ``b`` and layout row (0: the root; ``i + 1``: slot ``i``): the token's probability
    under its parent's ``q``, its path's, its parent's largest probability and entropy (the
    stopping features), and for beams the perturbed log-probability ``G`` and the path's
    log-probability; per row the draft distributions of the expanded layout rows, the
    features of the judged slots, the draft passes needed and the target root's entropy.
    """

    def __init__(self, system: System, rows: int, depth: np.ndarray) -> None:
        self.system = system
        self.layout = RowsLayout(rows, depth)
        self.size = n = self.layout.size
        self.tokens = np.zeros((rows, n), dtype=np.int64)
        self.q: list[dict[int, np.ndarray]] = [{} for _ in range(rows)]
        self.features: list[dict[int, np.ndarray]] = [{} for _ in range(rows)]
        self.tok_prob = np.ones((rows, n + 1))
        self.path_prob = np.ones((rows, n + 1))
        self.parent_top = np.ones((rows, n + 1))
        self.parent_ent = np.zeros((rows, n + 1))
        self.gval = np.zeros((rows, n + 1))
        self.logpath = np.zeros((rows, n + 1))
        self.draft_calls = np.zeros(rows, dtype=np.int64)
        self.target_entropy = np.zeros(rows)

    def plant_target_root(self, p_root: np.ndarray, rngs: Sequence[np.random.Generator]) -> None:
        """Each row's one root child, a draw of the target's ``p_root`` (level 1)."""
        for b in range(p_root.shape[0]):
            x = int(sample_tokens(np.asarray(p_root[b]), rngs[b].random()))
            self.tokens[b, 0] = x
            self.layout.parent[b, 0] = 0
            self.tok_prob[b, 1] = self.path_prob[b, 1] = float(p_root[b][x])
            self.parent_top[b, 1] = float(np.max(p_root[b]))
            self.parent_ent[b, 1] = self.target_entropy[b] = entropy(p_root[b])
            self.logpath[b, 1] = np.log(p_root[b][x])

    def expanding(
        self,
        b: int,
        d: int,
        level_rows: list[int],
        present: np.ndarray,
        dists: NodeDistributions,
    ) -> list[int]:
        """The layout rows of depth ``d`` that row ``b`` expands (the root always; a node
        where the stopping policy says so, from its features), in order; records their
        ``q``, the judged nodes' features and the draft pass."""
        expand_rows: list[int] = []
        cand: list[tuple[int, np.ndarray]] = []
        for k, r in enumerate(level_rows):
            if not present[k]:
                continue
            dist = dists[k]
            if r == 0:
                expand_rows.append(r)
                self.q[b][r] = dist
                continue
            f = self.node_features(b, r, d, dist)
            self.features[b][r - 1] = f
            cand.append((r, f))
        if cand:
            decide = self.system.stopping.expand(np.stack([f for _, f in cand]))
            for (r, _), go in zip(cand, decide, strict=True):
                if go:
                    expand_rows.append(r)
                    self.q[b][r] = dists[level_rows.index(r)]
        expand_rows.sort()
        if expand_rows or (self.system.stopping.kind == "learned" and cand):
            self.draft_calls[b] += 1  # children drawn from this pass's q, or a decision read it
        return expand_rows

    def node_features(self, b: int, r: int, d: int, dist: np.ndarray) -> np.ndarray:
        """The stopping features of layout row ``r`` (:data:`._stopping.FEATURES`)."""
        return np.array(
            [
                d,
                self.tok_prob[b, r],
                self.path_prob[b, r],
                self.parent_top[b, r],
                self.parent_ent[b, r],
                float(dist.max()),
                entropy(dist),
                self.target_entropy[b],
                float(self.system.root == "target"),
            ]
        )

    def draw_children(
        self,
        b: int,
        expand_rows: list[int],
        fixed_parent: np.ndarray,
        spec: Any,
        rng: np.random.Generator,
    ) -> None:
        """k-ary families: every expanded node's children, drawn with the design."""
        for r in expand_rows:
            kids = [i for i in range(self.size) if fixed_parent[i] == r]
            dist = self.q[b][r]
            spec.check(dist, len(kids))
            drawn = sample_drafts(spec, dist, len(kids), 1, rng)[0]
            for i, x in zip(kids, drawn, strict=True):
                self.place(b, i, r, int(x), dist)

    def draw_beam(
        self, b: int, expand_rows: list[int], slots: list[int], rng: np.random.Generator
    ) -> None:
        """Beams: the next level's slots, the candidates ``(u, x)`` of largest conditional
        Gumbel ``G_{u,x}`` over the expanded nodes (Kool et al.'s stochastic beam search)."""
        parents, toks, values = [], [], []
        for r in expand_rows:
            dist = self.q[b][r]
            with np.errstate(divide="ignore"):
                phi = self.logpath[b, r] + np.log(dist) + rng.gumbel(size=dist.size)
            g = conditional_gumbel(self.gval[b, r], phi)
            ok = np.flatnonzero(np.isfinite(g))
            parents.append(np.full(ok.size, r))
            toks.append(ok)
            values.append(g[ok])
        allp, allx, allg = (np.concatenate(a) for a in (parents, toks, values))
        order = np.argsort(-allg, kind="stable")[: len(slots)]
        for i, o in zip(slots, order, strict=False):
            r, x = int(allp[o]), int(allx[o])
            dist = self.q[b][r]
            self.place(b, i, r, x, dist)
            self.gval[b, i + 1] = allg[o]
            self.logpath[b, i + 1] = self.logpath[b, r] + np.log(dist[x])

    def place(self, b: int, i: int, r: int, x: int, dist: np.ndarray) -> None:
        """Put token ``x`` in slot ``i`` of row ``b`` under layout row ``r``."""
        self.layout.parent[b, i] = r
        self.tokens[b, i] = x
        self.tok_prob[b, i + 1] = float(dist[x])
        self.path_prob[b, i + 1] = self.path_prob[b, r] * float(dist[x])
        self.parent_top[b, i + 1] = float(dist.max())
        self.parent_ent[b, i + 1] = entropy(dist)


def walk_rows(
    verifier: Any,
    children: Sequence[Sequence[int]],
    tokens: np.ndarray,
    p: Any,
    q: Any,
    rng: np.random.Generator,
    *,
    target_root: bool = False,
) -> WalkResult:
    """The walk of :func:`._walk.walk_tree` on per-row children lists.

    With ``target_root`` the root's single child is appended unconditionally (it is a draw of
    ``p_root`` itself; see the module docstring) and the walk continues below it.
    """
    if not target_root:
        return walk_from(verifier, children, tokens, p, q, rng)
    node = children[0][0]
    return walk_from(
        verifier,
        children,
        tokens,
        p,
        q,
        rng,
        row=node + 1,
        accepted_tokens=(int(tokens[node]),),
        accepted_nodes=(node,),
    )


def system_not_applicable(verifier: Any, system: System) -> str | None:
    """Why a verifier cannot run a system (one sentence), or None."""
    name = getattr(verifier, "name", verifier)
    if getattr(verifier, "sequence_level", False):
        return (
            f"{name} is sequence-level: it runs on static trees only (no beam trees, target "
            "roots or stopping)"
        )
    design = str(getattr(verifier, "design", ""))
    if system.beam:
        if design != "without_replacement":
            return (
                f"beam trees draw each node's children without replacement (Gumbel-top-k); "
                f"{name} expects the {design} design (use rrs_without_replacement)"
            )
        return None
    fixed = getattr(verifier, "fixed_n", None) or get_design(design).fixed_n
    if fixed is not None and system.width != fixed and system.subtree_paths():
        return (
            f"{name} is defined for {fixed} drafts per node; this tree has nodes with "
            f"{system.width} children"
        )
    return None


def decode_system(
    target: Any,
    draft: Any,
    prompts: Sequence[tuple[int, Sequence[int]]],
    system: System,
    verifier: Any,
    rng: RandomSource,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    vocab_size: int | None = None,
    batch_size: int = 8,
    eos_token_ids: Sequence[int] = (),
    predictor: Callable[[np.ndarray, np.ndarray], list[dict[str, object]]] | None = None,
    on_prompt_done: Callable[[], None] | None = None,
    kv_cache: bool = True,
) -> tuple[list[dict[str, object]], dict[int, list[int]]]:
    """Dynamic tree speculative decoding of each prompt with one verifier and one system.

    As :func:`otbound.tree_decoding.decode_tree`, with per-call records that add
    ``nodes_scored`` (present slots), ``draft_calls`` (draft passes the row needed),
    ``target_passes`` (2 with a target root: the root pass and the tree pass), ``max_depth``,
    ``node_features`` (per present slot, :data:`._stopping.FEATURES`) and ``node_accepted``,
    and the batch's ``draft_passes``, ``draft_seconds`` and ``target_seconds`` (wall time of
    this call's forward passes, for the cost model of :mod:`._budget`).

    ``predictor(p, q)`` (optional) gives the prediction's inputs from the contexts where the
    verifier first decides: the root (draft root) or the target root's child.
    """
    reason = system_not_applicable(verifier, system)
    if reason is not None:
        raise ValueError(reason)
    call = _SystemCall(
        verifier, temperature, batch_size, max_new_tokens,
        frozenset(int(t) for t in eos_token_ids), predictor, on_prompt_done, system,
        _slots(system)[0],
    )  # fmt: skip
    cap = TreeLayout.from_paths([[0]])  # placeholder until the first call lays out its trees
    return call.decode((draft, target), prompts, rng, cap, vocab_size, kv_cache)


@dataclass(frozen=True)
class _SystemCall(RowsCall):
    """Target calls of :func:`decode_system`: the target root (a first target pass), the
    draft's trees, the target's pass over them, the walks."""

    system: System
    depth_of: np.ndarray = field(compare=False)  #: the depth of every capacity slot

    @property
    def target_root(self) -> bool:
        """Whether the system's root is the target's."""
        return self.system.root == "target"

    def grow_and_score(
        self, active: list[DecodeRow], scorers: list[Any], drafting: Sequence[np.random.Generator]
    ) -> _Scored:
        """The target root's distributions (a target root), the draft's trees, and the
        target's distributions at every layout row (row 0 from the root pass), timed."""
        from otbound.capture import out_of_memory_guard

        system = self.system
        clock = {"draft_seconds": 0.0, "draft_passes": 0.0, "target_seconds": 0.0}
        where = f"decoding a {system.nodes}-node {system.family} tree for prompts "
        where += f"{active[0].prompt}..{active[-1].prompt}"
        size = int(self.depth_of.size)
        with out_of_memory_guard(self.batch_size, where):
            p_root = self.root_distributions(scorers[1], len(active), clock)
            grown = grow_system(
                _layout_scorer(scorers[0], clock), len(active), system, self.verifier.design,
                drafting, temperature=self.temperature, p_root=p_root,
            )  # fmt: skip
            scorers[1].layout = cast(TreeLayout, grown.layout)
            every = list(range(1, size + 1)) if self.target_root else list(range(size + 1))
            started = time.perf_counter()
            logits = scorers[1](grown.tokens, every)
            clock["target_seconds"] += time.perf_counter() - started
        p_rows: list[Any] = []
        for b in range(len(active)):
            dist = NodeDistributions(logits[b], self.temperature)
            p_rows.append(_Shifted(dist, p_root[b]) if p_root is not None else dist)
        return _Scored(grown, p_rows, clock)

    def root_distributions(
        self, target: Any, rows: int, clock: dict[str, float]
    ) -> np.ndarray | None:
        """A target root's ``p_root`` per row, from a target pass over the committed tokens
        not yet scored (None for a draft root)."""
        if not self.target_root:
            return None
        target.layout = cast(TreeLayout, RowsLayout(rows, self.depth_of))
        started = time.perf_counter()
        root_logits = target(np.zeros((rows, 0), np.int64), [0])
        clock["target_seconds"] += time.perf_counter() - started
        return np.stack(
            [NodeDistributions(root_logits[b], self.temperature)[0] for b in range(rows)]
        )

    def walk(self, scored: _Scored, b: int, rng: np.random.Generator) -> WalkResult:
        grown = scored.grown
        return walk_rows(
            self.verifier, grown.layout.children(b), grown.tokens[b], scored.p[b], grown.q[b],
            rng, target_root=self.target_root,
        )  # fmt: skip

    def record(
        self, scored: _Scored, row: DecodeRow, b: int, walk: WalkResult
    ) -> dict[str, object]:
        grown, clock = scored.grown, scored.clock
        present = [i for i in range(grown.layout.size) if grown.layout.parent[b, i] >= 0]
        judged = [i for i in present if i in grown.features[b]]
        on_path = set(walk.nodes)
        return {
            **call_record(row, walk),
            "nodes_scored": len(present),
            "draft_calls": int(grown.draft_calls[b]),
            "target_passes": 2 if self.target_root else 1,
            "max_depth": self.system.depth,
            "draft_passes": int(clock["draft_passes"]),
            "draft_seconds": clock["draft_seconds"],
            "target_seconds": clock["target_seconds"],
            "node_features": [grown.features[b][i].tolist() for i in judged],
            "node_accepted": [i in on_path for i in judged],
        }

    def predict(self, records: list[dict[str, object]], scored: _Scored) -> None:
        """The prediction's inputs from the context where the verifier first decides (the
        root, or the target root's child), where every row has its ``q``."""
        assert self.predictor is not None
        rows = range(len(scored.p))
        ctx = 1 if self.target_root else 0
        p_ctx = np.stack([scored.p[b][ctx] for b in rows])
        q_ctx = [scored.grown.q[b].get(ctx) for b in rows]
        if all(x is not None for x in q_ctx):
            extras = self.predictor(p_ctx, np.stack(cast(list[np.ndarray], q_ctx)))
            for record, extra in zip(records, extras, strict=True):
                record.update(extra)


@dataclass
class _Scored:
    """One dynamic call's trees, the target's distributions per row, and its passes' clock."""

    grown: _Grown
    p: list[Any]
    clock: dict[str, float]


def _layout_scorer(
    scorer: Any, clock: dict[str, float]
) -> Callable[[np.ndarray, list[int], RowsLayout], np.ndarray]:
    """A draft scorer that reads the trees laid out so far (its ``layout`` is set per pass);
    ``clock`` accumulates its passes and their seconds."""

    def scored(tokens: np.ndarray, level: list[int], layout: RowsLayout) -> np.ndarray:
        scorer.layout = cast(TreeLayout, layout)
        start = time.perf_counter()
        out = cast(np.ndarray, scorer(tokens, level))
        clock["draft_seconds"] += time.perf_counter() - start
        clock["draft_passes"] += 1
        return out

    return scored


class _Shifted:
    """Target rows of a target-root call: row 0 is ``p_root`` (from the root pass), the others
    come from the tree pass, which scored slots only."""

    def __init__(self, tree: NodeDistributions, root: np.ndarray) -> None:
        self.tree = tree
        self.root = root

    def __getitem__(self, row: int) -> np.ndarray:
        return self.root if int(row) == 0 else self.tree[int(row) - 1]
