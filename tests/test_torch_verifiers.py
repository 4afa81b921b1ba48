"""The torch verifier formulas equal the numpy verifiers' exact acceptance, and ``compare``
with them (``acceptance=``) gives the numpy table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import otbound as ob  # noqa: E402
from otbound.drafts import get_design  # noqa: E402
from otbound.evaluate import compare, skipped_cells  # noqa: E402
from otbound.verifiers import get_verifier  # noqa: E402
from otbound.verifiers.batched import BatchAcceptance, shipped_name  # noqa: E402
from otbound.verifiers.torch_acceptance import (  # noqa: E402
    _FORMULAS,
    TORCH_VERIFIERS,
    serves,
    torch_acceptance_on,
    verifier_acceptance_torch,
)

TOL = 1e-9
NS = (1, 2, 3, 4, 8)
CUDA = torch.cuda.is_available()
KINDS = ("flat", "spiky", "zeros", "tiny", "onehot", "grid", "logits", "peaked", "uniform")


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def _row(rng: np.random.Generator, vocab: int, kind: str) -> np.ndarray:
    """One distribution: flat, spiky (sparse), zeros (half the support), tiny masses, one-hot,
    grid (many ties in q and in p/q), language-model logits, peaked (one token ~1), uniform."""
    if kind == "flat":
        return _normalise(rng.dirichlet(np.ones(vocab)))
    if kind == "spiky":
        x = rng.dirichlet(np.full(vocab, 0.1))
        x[rng.random(vocab) < 0.3] = 0.0
    elif kind == "zeros":
        x = rng.random(vocab) * (rng.random(vocab) < 0.5)
    elif kind == "tiny":
        x = rng.dirichlet(np.ones(vocab))
        x[rng.random(vocab) < 0.4] = 1e-30
    elif kind == "onehot":
        x = np.zeros(vocab)
        x[rng.integers(vocab)] = 1.0
    elif kind == "grid":
        x = rng.integers(0, 5, vocab).astype(float)
    elif kind == "logits":
        z = rng.standard_normal(vocab) * 3.0
        x = np.exp(z - z.max())
    elif kind == "peaked":
        x = rng.random(vocab) * 1e-6
        x[rng.integers(vocab)] = 1.0
    elif kind == "uniform":
        x = np.ones(vocab)
    else:
        raise ValueError(kind)
    if x.sum() == 0:
        x[rng.integers(vocab)] = 1.0
    return _normalise(x)


def _cases(vocab: int, seed: int, extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of kinds (p, q), plus ``extra`` random pairs; rows (B, V)."""
    rng = np.random.default_rng(seed)
    pairs = [(a, b) for a in KINDS for b in KINDS]
    pairs += [(KINDS[i], KINDS[j]) for i, j in rng.integers(len(KINDS), size=(extra, 2))]
    p = np.array([_row(rng, vocab, a) for a, _ in pairs])
    q = np.array([_row(rng, vocab, b) for _, b in pairs])
    same = rng.random(len(pairs)) < 0.05  # p = q: nothing is ever rejected
    q[same] = p[same]
    return p, q


def _numpy(name: str, p: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows where the numpy verifier applies, and its exact acceptance there."""
    v = get_verifier(name)
    rows = np.array([v.applies(p[i], q[i], n) for i in range(len(p))], dtype=bool)
    values = np.array([v.acceptance(p[i], q[i], n) for i in np.flatnonzero(rows)], dtype=float)
    return rows, values


CASES = [(name, n) for name in TORCH_VERIFIERS for n in NS if serves(name, n)]


#: (verifier, n, V): designs with distinct drafts (greedy, topk) need n <= V.
GRID = [
    (name, n, vocab)
    for name, n in CASES
    for vocab in (2, 3, 5, 16, 97)
    if name not in ("greedy", "topk") or n <= vocab
]


@pytest.mark.parametrize(("name", "n", "vocab"), GRID)
def test_formula_equals_numpy(name: str, n: int, vocab: int) -> None:
    p, q = _cases(vocab, seed=vocab * 100 + n, extra=20)
    rows, want = _numpy(name, p, q, n)
    assert rows.sum() >= 10
    got = _FORMULAS[name](torch.from_numpy(p[rows]), torch.from_numpy(q[rows]), n).numpy()
    assert got.shape == want.shape and np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


@pytest.mark.parametrize("name", TORCH_VERIFIERS)
def test_public_function_validates_clips_and_broadcasts(name: str) -> None:
    n = 2
    p, q = _cases(12, seed=7)
    rows, want = _numpy(name, p, q, n)
    got = verifier_acceptance_torch(p[rows], q[rows], n, verifier=name)
    assert got.dtype == torch.float64 and got.shape == (int(rows.sum()),)
    assert float(got.min()) >= 0.0 and float(got.max()) <= 1.0
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=TOL)
    one = verifier_acceptance_torch(p[rows][0], q[rows][0], n, verifier=name)  # one step: 0-d
    assert one.shape == () and abs(float(one) - want[0]) <= TOL


def test_public_function_errors() -> None:
    p, q = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
    with pytest.raises(ValueError, match="no torch formula for verifier 'block'"):
        verifier_acceptance_torch(p, q, 2, verifier="block")
    with pytest.raises(ValueError, match="n=3"):
        verifier_acceptance_torch(p, q, 3, verifier="rrs_without_replacement")
    with pytest.raises(ValueError, match="n=3"):
        verifier_acceptance_torch(p, q, 3, verifier="spechub")
    with pytest.raises(ValueError, match="n=3"):
        verifier_acceptance_torch(p, q, 3, verifier="importance")
    with pytest.raises(ValueError, match="n=3"):  # the formula itself, called directly
        _FORMULAS["importance"](torch.tensor([p]), torch.tensor([q]), 3)
    with pytest.raises(ValueError, match="q"):
        verifier_acceptance_torch(p, [0.6, 0.3, 0.3], 2, verifier="rrs")
    with pytest.raises(ValueError, match="support"):  # the design's own words
        verifier_acceptance_torch(p, [1.0, 0.0, 0.0], 2, verifier="greedy")


def test_serves_only_shipped_classes_on_their_design() -> None:
    hook = torch_acceptance_on("cpu")
    assert hook.serves(get_verifier("rrs"), 4)
    assert hook.serves(get_verifier("rrs_without_replacement"), 2)
    assert not hook.serves(get_verifier("rrs_without_replacement"), 3)
    assert not hook.serves(get_verifier("spechub"), 3)
    assert hook.serves(get_verifier("importance"), 2)
    assert not hook.serves(get_verifier("importance"), 3)
    # another top: another formula, which numpy computes
    other_top = type(get_verifier("importance"))(top=5)
    assert shipped_name(other_top) is None and not hook.serves(other_top, 2)
    assert hook.serves(get_verifier("optimal"), 2)  # its level rule
    assert not hook.serves(get_verifier("optimal", method="lp"), 2)
    assert not hook.serves(get_verifier("optimal", design="greedy"), 2)
    subclass = type("MyRRS", (type(get_verifier("rrs")),), {})()
    assert shipped_name(subclass) is None and not hook.serves(subclass, 2)
    assert not hook.serves("rrs", 2)


def _tables_equal(with_hook: pd.DataFrame, without: pd.DataFrame) -> None:
    assert list(with_hook.columns) == list(without.columns)
    assert len(with_hook) == len(without) > 0
    for column in ("step", "n", "design", "verifier", "exact", "trials"):
        assert with_hook[column].tolist() == without[column].tolist(), column
    for column in ("acceptance", "ci_low", "ci_high", "alpha_star", "gap", "stderr"):
        np.testing.assert_allclose(
            with_hook[column].to_numpy(float), without[column].to_numpy(float), rtol=0, atol=TOL
        )
    # ratio = acceptance / α*: a difference of TOL in the acceptance is TOL / α* in the ratio
    # (α* = 9e-8 on one of these steps)
    star = without["alpha_star"].to_numpy(float)
    ratio_h, ratio_w = with_hook["ratio"].to_numpy(float), without["ratio"].to_numpy(float)
    assert np.array_equal(np.isnan(ratio_h), np.isnan(ratio_w))
    known = ~np.isnan(ratio_w)
    assert np.all(np.abs(ratio_h - ratio_w)[known] <= TOL / star[known])
    assert with_hook.dtypes.equals(without.dtypes)
    pd.testing.assert_frame_equal(skipped_cells(with_hook), skipped_cells(without))


@pytest.mark.parametrize("vocab", [3, 16])
def test_compare_with_torch_acceptance_gives_the_numpy_table(vocab: int) -> None:
    p, q = _cases(vocab, seed=vocab)
    # a few steps with a support of 1 or 2 in q: distinct-draft designs are skipped there
    q[:3] = 0.0
    q[0, 0] = 1.0
    q[1:3, :2] = 0.5
    kwargs = dict(n=[1, 2, 3, 4], verifiers=ob.VERIFIERS, trials=0, step_ids=np.arange(len(p)) + 5)
    if vocab > 3:  # optimal's LP at n = 4 on V = 16 is too slow for a test; numpy anyway
        kwargs["verifiers"] = [v for v in ob.VERIFIERS if v != "optimal"]
    without = compare(p, q, **kwargs)
    with_hook = compare(p, q, **kwargs, acceptance=torch_acceptance_on("cpu"))
    _tables_equal(with_hook, without)
    served = with_hook[with_hook.verifier.isin(TORCH_VERIFIERS)]
    assert served.exact.all()


def test_compare_uses_the_hook_once_per_verifier_and_n() -> None:
    """One call per served (verifier, n) on the steps where the design applies; user-defined
    verifiers and the unserved ones go through numpy."""
    p, q = _cases(6, seed=3)
    calls: list[tuple[str, int, int]] = []
    inner = torch_acceptance_on("cpu")

    def compute(name: str, pp: object, qq: object, n: int) -> object:
        calls.append((name, n, np.asarray(pp).shape[0]))
        return inner.compute(name, pp, qq, n)

    hook = BatchAcceptance("counting", compute, serves)
    rrs = get_verifier("rrs")

    class Mine:  # the protocol only: numpy, step by step
        name = "mine"
        design = "iid"

        def acceptance(self, p: object, q: object, n: int = 2) -> float | None:
            return rrs.acceptance(p, q, n)

        def simulate(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("exact: never simulated")

    verifiers = ["rrs", "rrs_without_replacement", "spechub", Mine()]
    table = compare(p, q, n=[2, 3], verifiers=verifiers, trials=0, acceptance=hook)
    wor = get_design("without_replacement")
    usable3 = int(np.count_nonzero(wor.unusable(q, 3) == ""))
    assert sorted(calls) == sorted(
        [
            ("rrs", 2, len(p)),
            ("rrs", 3, len(p)),
            ("rrs_without_replacement", 2, int(np.count_nonzero(wor.unusable(q, 2) == ""))),
            ("spechub", 2, int(np.count_nonzero(get_design("hub").unusable(q, 2) == ""))),
        ]
    )
    assert usable3 > 0  # rrs_without_replacement at n = 3: numpy, rows still there
    mine = table[table.verifier == "mine"].acceptance.to_numpy()
    np.testing.assert_allclose(mine, table[table.verifier == "rrs"].acceptance, rtol=0, atol=TOL)


def test_compare_checks_what_the_hook_returns() -> None:
    p, q = _cases(4, seed=1)
    short = BatchAcceptance("short", lambda name, pp, qq, n: np.zeros(1), serves)
    with pytest.raises(ValueError, match="one acceptance per step"):
        compare(p, q, n=2, verifiers=["rrs"], trials=0, acceptance=short)
    wrong = BatchAcceptance("wrong", lambda name, pp, qq, n: np.full(len(pp), 1.5), serves)
    with pytest.raises(ValueError, match="acceptance rate of verifier 'rrs'"):
        compare(p, q, n=2, verifiers=["rrs"], trials=0, acceptance=wrong)


def test_device_path_of_the_analysis() -> None:
    from otbound.analysis._device import acceptance_on

    assert acceptance_on(None) is None
    hook = acceptance_on("cpu")
    assert hook is not None and hook.serves(get_verifier("gls"), 8)


def test_analysis_on_cpu_torch_gives_the_numpy_rows(tmp_path) -> None:
    """``compute_bounds --device cpu``'s shard analysis: every verifier, the same rows and
    skipped cells as numpy."""
    from otbound.analysis import AnalysisConfig
    from otbound.analysis._shard import analyse_shard

    rng = np.random.default_rng(5)
    target = rng.standard_normal((12, 40)) * 2.0
    draft = target + rng.standard_normal((12, 40))
    draft[:2, 3:] = -np.inf  # two steps whose q has a support of 3
    np.savez(tmp_path / "run.npz", target_logits=target, draft_logits=draft)
    dump = ob.open_dump(tmp_path / "run.npz")
    kwargs = dict(n=(1, 2, 4), verifiers=ob.VERIFIERS, mc_trials=200)
    numpy_out = analyse_shard(dump, 0, AnalysisConfig(**kwargs))
    torch_out = analyse_shard(dump, 0, AnalysisConfig(**kwargs, device="cpu"))
    a, b = torch_out.rows, numpy_out.rows
    assert len(a) == len(b) > 0 and set(TORCH_VERIFIERS) <= set(a.verifier)
    for column in ("step", "n", "design", "verifier", "exact", "trials"):
        assert a[column].tolist() == b[column].tolist(), column
    for column in ("acceptance", "ci_low", "ci_high", "alpha_star", "gap", "stderr"):
        np.testing.assert_allclose(a[column], b[column], rtol=0, atol=TOL)
    assert (numpy_out.skipped_cells.n == 4).any()  # n above the support of q at two steps
    pd.testing.assert_frame_equal(torch_out.skipped_cells, numpy_out.skipped_cells)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize(("name", "n"), CASES)
def test_cuda_equals_numpy(name: str, n: int) -> None:
    p, q = _cases(257, seed=n, extra=50)
    rows, want = _numpy(name, p, q, n)
    got = verifier_acceptance_torch(p[rows], q[rows], n, device="cuda", verifier=name)
    assert got.device.type == "cuda"
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=0, atol=TOL)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_compare_gives_the_numpy_table() -> None:
    p, q = _cases(64, seed=2)
    kwargs = dict(n=[1, 2, 4], verifiers=list(TORCH_VERIFIERS), trials=0)
    _tables_equal(
        compare(p, q, **kwargs, acceptance=torch_acceptance_on("cuda")), compare(p, q, **kwargs)
    )


def test_importance_ranks_ties_by_token_id() -> None:
    """Tokens with equal ``p − q²`` (dyadic masses) but different ``q`` are ranked by token
    id, as numpy's stable sort ranks them: the other order gives 0.449358, not 0.449421."""
    p = np.array([0.8876953125, 0.005859375, 0.0048828125, 0.0048828125, 0.001953125,
                  0.001953125, 0.009765625, 0.0380859375, 0.0068359375, 0.0107421875,
                  0.02734375])  # fmt: skip
    q = np.array([0.1875, 0.0625, 0.0625, 0.0625, 0.03125, 0, 0.09375, 0.1875, 0.0625,
                  0.09375, 0.15625])  # fmt: skip
    want = get_verifier("importance").acceptance(p, q, 2)
    got = float(verifier_acceptance_torch(p, q, 2, verifier="importance"))
    assert abs(got - want) <= TOL and abs(want - 0.44942080) < 1e-8
    empty = _FORMULAS["importance"](torch.zeros((0, 11)), torch.zeros((0, 11)), 2)
    assert empty.shape == (0,)  # no rows: no stage flows, no values


def test_importance_refuses_an_induced_distribution_out_of_range(monkeypatch) -> None:
    """``p_I`` outside ``[0, 1]`` beyond ``LP_SLACK``, or its total off 1, raises with the
    numpy path's words (never on valid rows: here the stage weights, then the rows, are
    broken on purpose)."""
    from otbound.verifiers import _torch_importance

    p, q = _cases(12, seed=3)
    p_t, q_t = torch.from_numpy(p), torch.from_numpy(q)
    unbroken = _FORMULAS["importance"](p_t, q_t, 2)  # the same rows pass as they are
    assert torch.all(torch.isfinite(unbroken))
    flat = torch.full((1, 12), 1.1 / 12, dtype=torch.float64)  # Σ q = 1.1: Σ p_I = 1.21
    with pytest.raises(ValueError, match="total"):
        _FORMULAS["importance"](p_t[:1], flat, 2)
    monkeypatch.setattr(_torch_importance, "_stage_keep", lambda lp: torch.triu(torch.full(
        (lp.shape[0], lp.shape[2], lp.shape[2]), 40.0, dtype=lp.dtype
    )))  # weights far outside [0, 1], one way only (W_ij − W_ji moves mass)  # fmt: skip
    with pytest.raises(ValueError, match="importance induced distribution p_I"):
        _FORMULAS["importance"](p_t, q_t, 2)


def test_public_function_refuses_a_rate_out_of_range_with_the_numpy_words(monkeypatch) -> None:
    """A formula giving ``1 + 1e-9`` is refused as :meth:`BaseVerifier.acceptance` refuses it
    (:func:`otbound.verifiers.base.acceptance_what` and ``clip_rounding``'s sentence), where a
    clamp kept it silent; ``1 + 1e-13`` (rounding) is clipped to 1."""
    p, q = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
    refused = (
        r"acceptance rate of verifier 'rrs' \(n=2\)( at index 1)? is 1\.000000001, "
        r"outside \[0, 1\] by more than rounding \(1e-12\): a bug upstream, not clipped"
    )
    for excess in (1e-9, 1e-13):
        planted = torch.tensor([0.5, 1.0 + excess], dtype=torch.float64)
        monkeypatch.setitem(_FORMULAS, "rrs", lambda p, q, n, rates=planted: rates)
        rrs = type(get_verifier("rrs"))
        monkeypatch.setattr(rrs, "_acceptance", lambda self, p, q, n, e=excess: 1.0 + e)
        if excess > 1e-12:
            with pytest.raises(ValueError, match=refused):
                verifier_acceptance_torch([p, p], [q, q], 2, verifier="rrs")
            with pytest.raises(ValueError, match=refused):
                get_verifier("rrs").acceptance(p, q, 2)
        else:
            assert verifier_acceptance_torch([p, p], [q, q], 2, verifier="rrs").tolist() == [
                0.5,
                1.0,
            ]
            assert get_verifier("rrs").acceptance(p, q, 2) == 1.0
