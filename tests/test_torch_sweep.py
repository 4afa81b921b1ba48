"""The torch sweeps equal the numpy path (and brute force), batched, with the same errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import otbound as ob  # noqa: E402
from otbound.bounds.torch_sweep import TORCH_DESIGNS, optimal_acceptance_torch  # noqa: E402

TOL = 1e-9
DISTINCT = ("greedy", "hub", "without_replacement", "conditional_poisson")
CUDA = torch.cuda.is_available()


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def _row(rng: np.random.Generator, vocab: int, kind: str) -> np.ndarray:
    """One distribution of a kind: flat, spiky, zeros, tiny, onehot, grid (ties), uniform."""
    if kind == "flat":
        return _normalise(rng.dirichlet(np.ones(vocab)))
    if kind == "spiky":  # a few tokens carry the mass; the rest underflow or are zeroed
        x = rng.dirichlet(np.full(vocab, 0.1)) if vocab <= 64 else rng.pareto(0.7, vocab) ** 4
        x[rng.random(vocab) < 0.3] = 0.0
        if x.sum() == 0:
            x[rng.integers(vocab)] = 1.0
        return _normalise(x)
    if kind == "zeros":  # a random subset of the support only
        x = rng.random(vocab) * (rng.random(vocab) < 0.5)
        if x.sum() == 0:
            x[rng.integers(vocab)] = 1.0
        return _normalise(x)
    if kind == "tiny":
        x = rng.dirichlet(np.ones(vocab))
        x[rng.random(vocab) < 0.4] = 1e-30
        return _normalise(x)
    if kind == "onehot":
        x = np.zeros(vocab)
        x[rng.integers(vocab)] = 1.0
        return x
    if kind == "grid":  # masses k/4: many equal q's and equal ratios p/q
        x = rng.integers(0, 5, vocab).astype(float)
        if x.sum() == 0:
            x[rng.integers(vocab)] = 1.0
        return _normalise(x)
    if kind == "logits":  # softmax of Gaussian logits, like a language model's
        z = rng.standard_normal(vocab) * 3.0
        return _normalise(np.exp(z - z.max()))
    if kind == "uniform":
        return np.full(vocab, 1.0 / vocab)
    raise ValueError(kind)


KINDS = ("flat", "spiky", "zeros", "tiny", "onehot", "grid", "logits", "uniform")


def _batch(rng: np.random.Generator, rows: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) of shape (rows, vocab) with kinds drawn independently for p and q per row."""
    p = np.stack([_row(rng, vocab, KINDS[rng.integers(len(KINDS))]) for _ in range(rows)])
    q = np.stack([_row(rng, vocab, KINDS[rng.integers(len(KINDS))]) for _ in range(rows)])
    return p, q


def _valid_rows(design: str, q: np.ndarray, n: int) -> np.ndarray:
    """Rows of ``q`` the design accepts ``n`` drafts for."""
    if design in DISTINCT:
        return np.count_nonzero(q > 0, axis=-1) >= n
    return np.ones(q.shape[0], dtype=bool)


def _compare(p: np.ndarray, q: np.ndarray, n: int, design: str, **kw) -> float:
    """Largest |torch − numpy| over the rows (both must give the batch's shape)."""
    expected = np.atleast_1d(ob.optimal_acceptance(p, q, n=n, design=design))
    got = optimal_acceptance_torch(p, q, n=n, design=design, **kw)
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.float64
    assert tuple(got.shape) == p.shape[:-1]
    return float(np.max(np.abs(np.atleast_1d(got.cpu().numpy()) - expected)))


@pytest.mark.parametrize("design", TORCH_DESIGNS)
def test_matches_numpy_on_small_cases(design, gen):
    """One step at a time, the shared generators' cases (V 2..9, every kind, n up to 8)."""
    cases = gen.cases(design, 400, seed=901 + TORCH_DESIGNS.index(design), vocab=(2, 9), max_n=8)
    failures = []
    for case in cases:
        err = _compare(case.p, case.q, case.n, design)
        if not err <= TOL:
            failures.append(f"{case}: |torch - numpy| = {err:.3g}")
    assert not failures, f"{len(failures)} of {len(cases)} failed:\n" + "\n".join(failures[:5])


@pytest.mark.parametrize("design", TORCH_DESIGNS)
@pytest.mark.parametrize("vocab", [2, 3, 5, 17, 64, 257, 1000, 5000])
def test_matches_numpy_batched(design, vocab):
    """Batches of mixed rows (zeros, one-hot rows, ties, tiny masses), many seeds, n 1..8."""
    worst = 0.0
    checked = 0
    ns = [2] if design == "hub" else range(1, 9)
    seeds, rows = (6, 48) if vocab <= 1000 else (2, 16)
    if design == "without_replacement" and vocab >= 257:  # the integral: O(V n nodes) per row
        seeds, rows = (2, 12) if vocab <= 1000 else (1, 3)
    for seed in range(seeds):
        rng = np.random.default_rng([vocab, seed, TORCH_DESIGNS.index(design)])
        p, q = _batch(rng, rows, vocab)
        for n in ns:
            if design == "topk" and n > vocab:
                continue
            keep = _valid_rows(design, q, n)
            if not keep.any():
                continue
            worst = max(worst, _compare(p[keep], q[keep], n, design))
            checked += int(keep.sum())
    assert checked > 0
    assert worst <= TOL, f"|torch - numpy| up to {worst:.3g}"


@pytest.mark.parametrize("design", TORCH_DESIGNS)
def test_ties_go_to_the_lower_token_id(design):
    """Equal draft masses at the top: the numpy path's tie-breaking (lower id) is matched; for
    the designs with fixed top tokens (topk, greedy, hub) the tie matters, and the value is
    the one of the lower ids (the other choices give other values)."""
    n = 2
    q = np.array([0.1, 0.3, 0.3, 0.3])
    p = np.array([0.1, 0.0, 0.2, 0.7])  # the token picked among 1, 2, 3 changes α*
    got = float(optimal_acceptance_torch(p, q, n=n, design=design))
    want = ob.optimal_acceptance(p, q, n=n, design=design)
    assert abs(got - want) <= TOL
    if design == "topk":
        assert abs(got - 0.2) <= TOL  # T = {1, 2}
    if design in ("greedy", "hub"):  # T = {1}, r = (1/7, 0, 3/7, 3/7)
        assert abs(got - (0.0 + 0.1 + 0.2 + 3 / 7)) <= TOL


def test_iid_matches_brute_force():
    """``iid`` against ``1 + min_H [p(H) − q(H)^n]`` over all 2^V subsets (V ≤ 8)."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        vocab = int(rng.integers(2, 9))
        p = _row(rng, vocab, KINDS[rng.integers(len(KINDS))])
        q = _row(rng, vocab, KINDS[rng.integers(len(KINDS))])
        n = int(rng.integers(1, 6))
        best = 0.0
        for bits in itertools.product([False, True], repeat=vocab):
            h = np.array(bits)
            best = min(best, p[h].sum() - q[h].sum() ** n)
        got = float(optimal_acceptance_torch(p, q, n=n))
        assert abs(got - min(1.0, 1.0 + best)) <= TOL, (p.tolist(), q.tolist(), n)


def test_closed_forms_by_hand():
    p = np.array([0.3, 0.4, 0.3])
    q = np.array([0.6, 0.3, 0.1])
    assert abs(float(optimal_acceptance_torch(p, q, n=1)) - 0.7) <= TOL
    assert abs(float(optimal_acceptance_torch(p, q, n=2, design="topk")) - 0.7) <= TOL
    # greedy n=2 = hub: T = {0}, r = (0, .75, .25): .3 + .4 + .25
    for design in ("greedy", "hub"):
        assert abs(float(optimal_acceptance_torch(p, q, n=2, design=design)) - 0.95) <= TOL
    # greedy with n=1 samples one draft from q: Σ min(p, q)
    assert abs(float(optimal_acceptance_torch(p, q, n=1, design="greedy")) - 0.7) <= TOL


def test_inputs_shapes_and_devices():
    rng = np.random.default_rng(3)
    p, q = _batch(rng, 6, 11)
    want = ob.optimal_acceptance(p, q, n=3)
    # numpy, lists and tensors in; a float64 tensor out, on the requested device
    for args in [(p, q), (p.tolist(), q.tolist()), (torch.from_numpy(p), torch.from_numpy(q))]:
        got = optimal_acceptance_torch(*args, n=3, device="cpu")
        assert got.device.type == "cpu" and got.dtype == torch.float64
        assert np.max(np.abs(got.numpy() - want)) <= TOL
    # float32 tensors are computed in float64 by default; float32 on request
    got32 = optimal_acceptance_torch(torch.from_numpy(p).float(), torch.from_numpy(q).float(), 3)
    assert got32.dtype == torch.float64
    assert np.max(np.abs(got32.numpy() - want)) <= 1e-6
    low = optimal_acceptance_torch(p, q, 3, dtype=torch.float32)
    assert low.dtype == torch.float32 and np.max(np.abs(low.numpy() - want)) <= 1e-5
    # a 1-D input gives a 0-dimensional tensor
    one = optimal_acceptance_torch(p[0], q[0], n=3)
    assert one.shape == () and abs(float(one) - want[0]) <= TOL
    # batch axes broadcast as in the numpy path: p (V,) against q (2, 3, V)
    q3 = q.reshape(2, 3, 11)
    got = optimal_acceptance_torch(p[0], q3, n=2, design="greedy")
    assert tuple(got.shape) == (2, 3)
    assert np.max(np.abs(got.numpy() - ob.optimal_acceptance(p[0], q3, 2, "greedy"))) <= TOL
    # chunking does not change anything
    a = optimal_acceptance_torch(p, q, 4, chunk_elements=1)
    b = optimal_acceptance_torch(p, q, 4)
    assert torch.equal(a, b)
    # rows within the tolerance are rescaled, as in the numpy path; normalize=True rescales any
    off = p * (1 + 5e-7)
    assert np.max(np.abs(optimal_acceptance_torch(off, q, 3).numpy() - want)) <= TOL
    scaled = optimal_acceptance_torch(p * 3, q, 3, normalize=True)
    assert np.max(np.abs(scaled.numpy() - want)) <= TOL


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("design", TORCH_DESIGNS)
def test_cuda_matches_numpy(design):
    rng = np.random.default_rng(11)
    p, q = _batch(rng, 64, 3000)
    n = 2
    keep = _valid_rows(design, q, n)
    got = optimal_acceptance_torch(p[keep], q[keep], n=n, design=design, device="cuda")
    assert got.device.type == "cuda"
    want = ob.optimal_acceptance(p[keep], q[keep], n=n, design=design)
    assert np.max(np.abs(got.cpu().numpy() - want)) <= TOL
    on_device = optimal_acceptance_torch(
        torch.from_numpy(p[keep]).cuda(), torch.from_numpy(q[keep]).cuda(), n=n, design=design
    )
    assert on_device.device.type == "cuda"


P = [0.3, 0.4, 0.3]
Q = [0.6, 0.3, 0.1]

#: (p, q, n, design, part of the message); each also raised by the numpy path, same message.
BAD = [
    ([0.3, np.nan, 0.7], Q, 2, "iid", "p contains NaN at index (1,)"),
    (P, [0.6, np.inf, 0.1], 2, "iid", "q contains an infinite value"),
    (P, [0.7, -0.1, 0.4], 2, "iid", "q has a negative entry -0.1 at index (1,)"),
    (P, [2.0, -1.0, 0.5], 2, "iid", "looks like logits"),
    ([0.3, 0.4, 0.4], Q, 2, "iid", "rows of p must sum to 1 within 1e-06"),
    ([[0.3, 0.4, 0.3], [0.5, 0.6, 0.0]], Q, 2, "iid", "the row in row (1,) sums to 1.1"),
    (P, [[0.6, 0.3, 0.1], [0.0, 0.0, 0.0]], 2, "iid", "q has a row of zeros in row (1,)"),
    (P, [0.5, 0.5], 2, "iid", "same vocabulary size (last axis), got 3 and 2"),
    ([P, P], [Q, Q, Q], 2, "iid", "do not broadcast"),
    (0.5, Q, 2, "iid", "p must have at least 1 axis"),
    ([], [], 2, "iid", "empty vocabulary"),
    (P, Q, 0, "iid", "n must be an integer >= 1, got 0"),
    (P, Q, 2.5, "iid", "n must be an integer >= 1"),
    (P, Q, True, "iid", "n must be an integer >= 1"),
    (P, Q, 4, "topk", "n=4 is larger than the vocabulary size V=3"),
    (P, Q, 4, "greedy", "n=4 is larger than the vocabulary size V=3"),
    (P, [0.5, 0.5, 0.0], 3, "greedy", "n=3 is larger than the support of q (2 tokens"),
    (P, [[0.6, 0.3, 0.1], [1.0, 0.0, 0.0]], 2, "hub", "support of q in row (1,) (1 tokens"),
    (P, Q, 3, "hub", "design 'hub' is defined for n=2 only, got n=3"),
    (P, Q, 2, "bogus", "unknown design 'bogus'"),
    ("abc", Q, 2, "iid", "p must be an array of probabilities"),
]


@pytest.mark.parametrize(("p", "q", "n", "design", "message"), BAD)
def test_bad_input_raises_like_numpy(p, q, n, design, message):
    with pytest.raises(ValueError) as torch_err:
        optimal_acceptance_torch(p, q, n=n, design=design)
    assert message in str(torch_err.value)
    with pytest.raises(ValueError) as numpy_err:
        ob.optimal_acceptance(p, q, n=n, design=design)
    if design != "bogus":  # the torch message lists its own designs
        assert str(torch_err.value) == str(numpy_err.value)


def test_design_messages_name_the_valid_ones():
    valid = "valid designs: iid, without_replacement, conditional_poisson, greedy, topk, hub"
    with pytest.raises(ValueError, match=valid):
        optimal_acceptance_torch(P, Q, n=2, design="bogus")
    with pytest.raises(ValueError, match="has no torch sweep; valid designs here: iid"):
        optimal_acceptance_torch(P, [Q, Q], n=2, design="per_slot")
    assert optimal_acceptance_torch(P, Q, n=2, design=ob.get_design("hub")).item() > 0
    with pytest.raises(ValueError, match="dtype must be a floating torch dtype"):
        optimal_acceptance_torch(P, Q, n=2, dtype=torch.int64)
    with pytest.raises(ValueError, match="chunk_elements must be a positive integer"):
        optimal_acceptance_torch(P, Q, n=2, chunk_elements=0)


# -- without_replacement and conditional_poisson: the scans over the tokens -----------------------
SCANNED = ("without_replacement", "conditional_poisson")


def _logits_rows(rng: np.random.Generator, rows: int, vocab: int, kind: str) -> np.ndarray:
    """Language-model-like rows: Zipf, peaked (one token near 1) or Gaussian logits."""
    if kind == "zipf":
        ranks = np.stack([rng.permutation(vocab) + 1 for _ in range(rows)])
        z = -1.1 * np.log(ranks) + 0.3 * rng.standard_normal((rows, vocab))
    elif kind == "peaked":
        z = rng.standard_normal((rows, vocab))
        z[np.arange(rows), rng.integers(vocab, size=rows)] += 25.0
    else:
        z = 3.0 * rng.standard_normal((rows, vocab))
    return _normalise(np.exp(z - z.max(axis=-1, keepdims=True)))


@pytest.mark.parametrize("design", SCANNED)
@pytest.mark.parametrize("kind", ["zipf", "peaked", "gauss"])
def test_scanned_designs_match_numpy_on_large_vocabularies(design, kind):
    """V up to 50,000 (several blocks of the scan, nodes stopped early), batched steps."""
    rng = np.random.default_rng([17, SCANNED.index(design), len(kind)])
    for vocab, rows, ns in ((3000, 6, (1, 2, 3, 5, 8)), (50_000, 2, (2, 4, 8))):
        if design == "without_replacement" and vocab > 3000:
            rows, ns = 1, (2, 8)
        p = _logits_rows(rng, rows, vocab, kind)
        q = _normalise(p ** rng.uniform(0.6, 1.4) * rng.uniform(0.5, 1.5, (rows, vocab)))
        for n in ns:
            err = _compare(p, q, n, design)
            assert err <= TOL, (vocab, n, err)


def _extreme_row(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Masses down to 1e-300 (and subnormal), zeros, one token near 1, equal ratios."""
    q = rng.random(vocab)
    q[rng.random(vocab) < 0.5] = 10.0 ** rng.uniform(-300, -20)
    q[rng.random(vocab) < 0.1] = 5e-324
    q[rng.random(vocab) < 0.2] = 0.0
    q[rng.integers(vocab)] = 1.0
    p = rng.dirichlet(np.ones(vocab))
    p[rng.random(vocab) < 0.3] = 1e-300
    p[rng.random(vocab) < 0.2] = q[rng.random(vocab) < 0.2].sum() if vocab > 3 else 0.0
    return _normalise(p), _normalise(q)


@pytest.mark.parametrize("design", SCANNED)
def test_scanned_designs_with_extreme_masses(design):
    """Masses from 1 down to 5e-324: e_n(q) far below the smallest float (the per-coefficient
    exponents of conditional_poisson) and integration grids over 600 decades of time."""
    rng = np.random.default_rng(23 + SCANNED.index(design))
    worst = 0.0
    for _ in range(30):
        vocab = int(rng.integers(2, 40))
        p, q = _extreme_row(rng, vocab)
        support = int(np.count_nonzero(q))
        ns = [n for n in range(1, 9) if n <= support]
        for n in ns:
            worst = max(worst, _compare(p[None], q[None], n, design))
    assert worst <= TOL, worst


def test_conditional_poisson_below_the_smallest_float():
    """``e_8(q) ≈ 1e-2100``: the scaled rows give the numpy values, and the linear rows of the
    same batch are untouched."""
    from otbound.drafts._torch_distinct import conditional_poisson_prefix_ratio

    tiny = np.array([1.0] + [1e-300] * 7 + [3e-300, 0.0])
    q = np.stack([_normalise(tiny), np.full(10, 0.1)])
    p = np.stack([np.full(10, 0.1), _normalise(np.arange(1.0, 11.0))])
    err = _compare(p, q, 8, "conditional_poisson")
    assert err <= TOL
    ratio = conditional_poisson_prefix_ratio(torch.from_numpy(q), 8).numpy()
    want = ob.get_design("conditional_poisson").prefix_masses(q, [8])[0]
    np.testing.assert_allclose(ratio, want, rtol=1e-12, atol=1e-300)
    assert 0 < ratio[0, 8] < 1  # e_8 of the first 8 tokens over e_8(q): 1e-2100 / 1.4e-2100


@pytest.mark.parametrize("design", SCANNED)
def test_scanned_designs_by_brute_force(design):
    """Against ``1 + min_H [p(H) − Q(H)]`` over all subsets, ``Q`` from the exact tuple law."""
    spec = ob.get_design(design)
    rng = np.random.default_rng(29)
    for _ in range(40):
        vocab = int(rng.integers(2, 7))
        p = _row(rng, vocab, KINDS[rng.integers(len(KINDS))])
        q = _row(rng, vocab, "flat")
        n = int(rng.integers(1, vocab + 1))
        tuples, weight = spec.tuple_support(q, n)
        best = 0.0
        for bits in itertools.product([False, True], repeat=vocab):
            h = np.array(bits)
            inside = np.all(h[tuples], axis=1)
            best = min(best, p[h].sum() - weight[inside].sum())
        got = float(optimal_acceptance_torch(p, q, n=n, design=design))
        assert abs(got - (1.0 + best)) <= TOL, (p.tolist(), q.tolist(), n, design)


def test_scanned_designs_ties_and_batches():
    """Grid masses (many equal ratios), a batch against one row at a time, chunked."""
    rng = np.random.default_rng(31)
    p, q = _batch(rng, 10, 60)
    q = _normalise(np.round(q * 8) + (q > 0))
    for design in SCANNED:
        for n in (1, 2, 3, 4, 7):
            keep = np.count_nonzero(q > 0, axis=-1) >= n
            batched = optimal_acceptance_torch(p[keep], q[keep], n=n, design=design)
            alone = torch.stack(
                [
                    optimal_acceptance_torch(a, b, n=n, design=design)
                    for a, b in zip(p[keep], q[keep], strict=True)
                ]
            )
            assert torch.allclose(batched, alone, rtol=0, atol=1e-13)
            want = ob.optimal_acceptance(p[keep], q[keep], n=n, design=design)
            assert np.max(np.abs(batched.numpy() - want)) <= TOL
            chunked = optimal_acceptance_torch(
                p[keep], q[keep], n=n, design=design, chunk_elements=100
            )
            assert torch.allclose(chunked, batched, rtol=0, atol=1e-13)


def test_device_solver_serves_every_sampled_design():
    """``compute_bounds --device cpu`` (``compare`` with :func:`otbound.analysis.bound_on`):
    every design but per_slot on torch, the rows equal to numpy's."""
    from otbound.analysis import bound_on

    solver = bound_on("cpu")
    assert solver is not None
    designs = ("iid", "without_replacement", "conditional_poisson", "greedy", "topk", "hub")
    for design in designs:
        assert solver.serves(design)
    assert not solver.serves("per_slot")
    rng = np.random.default_rng(37)
    p = _logits_rows(rng, 5, 400, "zipf")
    q = _normalise(p**0.8 * rng.uniform(0.5, 1.5, p.shape))
    kwargs = dict(n=(1, 2, 3, 4), verifiers=("rrs", "greedy"), designs=designs, trials=100)
    numpy_rows = ob.compare(p, q, **kwargs)
    torch_rows = ob.compare(p, q, bound=solver, **kwargs)
    assert len(numpy_rows) == len(torch_rows) > 0
    assert set(torch_rows.design) >= {"without_replacement", "conditional_poisson"}
    np.testing.assert_allclose(torch_rows.alpha_star, numpy_rows.alpha_star, rtol=0, atol=1e-9)


def _sequential_products(const, lin, degree):
    """Every prefix's ``Π_{x ≤ i} (const_x + lin_x z) mod z^{d+1}`` (..., V, d + 1) in numpy,
    one token after another."""
    out = np.empty((*const.shape, degree + 1))
    for row in np.ndindex(const.shape[:-1]):
        poly = np.zeros(degree + 1)
        poly[0] = 1.0
        for i in range(const.shape[-1]):
            at = (*row, i)
            poly[1:] = poly[1:] * const[at] + poly[:-1] * lin[at]
            poly[0] *= const[at]
            out[at] = poly
    return out


def _sequential_prefix_values(const, lin, degree, cumulative):
    """``prefix_values`` one token after another in numpy (the product chained in order)."""
    products = _sequential_products(const, lin, degree)
    return products.sum(axis=-1) if cumulative else products[..., degree]


@pytest.mark.parametrize("vocab", [1, 2, 3, 37, 256, 300])
def test_full_product_is_the_product_token_by_token(vocab):
    """The product tree (odd counts padded with an identity factor) gives the whole product's
    every coefficient, degrees 0 to 7."""
    from otbound.drafts._torch_distinct import full_product

    rng = np.random.default_rng([61, vocab])
    stay = rng.uniform(0.0, 1.0, (2, 3, vocab))
    for degree in (0, 1, 2, 7):
        got = full_product(torch.tensor(stay), torch.tensor(1.0 - stay), degree)
        want = _sequential_products(stay, 1.0 - stay, degree)[..., -1, :]
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("blocks", [1, 2, 3, 5, 8, 13])
def test_products_before_is_the_product_of_the_blocks_before(blocks):
    """The doubling scan gives ``Π_{m < k} F_m`` for every ``k`` (block counts that are and
    are not powers of two), against the products chained one after another."""
    from otbound.drafts._torch_distinct import poly_mul, products_before

    rng = np.random.default_rng(blocks)
    factors = torch.tensor(rng.uniform(0.1, 1.0, (3, blocks, 5)), dtype=torch.float64)
    got = products_before(factors)
    want = torch.zeros_like(factors)
    current = torch.zeros(3, 5, dtype=torch.float64)
    current[:, 0] = 1.0
    for k in range(blocks):
        want[:, k] = current
        current = poly_mul(current, factors[:, k])
    assert torch.allclose(got, want, rtol=1e-14, atol=0)
    assert torch.equal(got[:, 0], torch.eye(5, dtype=torch.float64)[0].expand(3, 5))


@pytest.mark.parametrize("vocab", [1, 7, 64, 65, 200, 64 * 9 + 5])
@pytest.mark.parametrize("cumulative", [False, True])
def test_prefix_values_match_the_product_token_by_token(vocab, cumulative):
    """Blocks of ``SCAN_BLOCK`` tokens (one, several, a padded last one) give every prefix's
    coefficient as the product taken one token at a time, to a relative 1e-13."""
    from otbound.drafts._torch_distinct import SCAN_BLOCK, prefix_values

    assert SCAN_BLOCK == 64  # the sizes above are chosen around it
    rng = np.random.default_rng(vocab)
    stay = rng.uniform(0.0, 1.0, (2, 3, vocab))
    fire = 1.0 - stay
    for degree in (1, 3, 7):
        got = prefix_values(torch.tensor(stay), torch.tensor(fire), degree, cumulative=cumulative)
        want = _sequential_prefix_values(stay, fire, degree, cumulative)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, atol=1e-300)


def _block_and_dense(p: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The without-replacement gap by the block sweep and by the dense path (every prefix)."""
    from otbound.drafts import _torch_block_sweep, _torch_distinct

    pt, qt = torch.tensor(p), torch.tensor(q)
    block = _torch_block_sweep.without_replacement_gap(pt, qt, n).numpy()
    dense = _torch_distinct.without_replacement_gap(pt, qt, n).numpy()
    return block, dense


@pytest.mark.parametrize("vocab", [3, 40, 255, 256, 257, 700, 2500])
def test_block_sweep_equals_the_dense_sweep(vocab):
    """Rows of every kind (flat, spiky, zeros, tiny masses, one-hot, ties) and LM-like rows,
    one block, several, a padded last one: the block sweep's gap is the dense path's, every
    prefix's ``Q`` integrated, to 1e-12."""
    rng = np.random.default_rng([41, vocab])
    p, q = _batch(rng, 12, vocab)
    kinds = [_logits_rows(rng, 2, vocab, kind) for kind in ("zipf", "peaked", "gauss")]
    p = np.concatenate([p, *kinds])
    q = np.concatenate([q, *[_normalise(x ** rng.uniform(0.6, 1.4)) for x in kinds]])
    for n in (3, 4, 5, 8):
        keep = np.count_nonzero(q > 0, axis=-1) >= n
        block, dense = _block_and_dense(p[keep], q[keep], n)
        assert np.max(np.abs(block - dense), initial=0.0) <= 1e-12, (vocab, n)


def test_block_sweep_takes_every_kind_of_block(monkeypatch):
    """LM-like rows at V = 5,000 take all three kinds of block products (the power series,
    the tokens one by one, the dead blocks) and sweep some candidates, and still equal the
    dense path (each kind is needed: a row with one kind only would not test the others)."""
    from otbound.drafts import _torch_block_sweep as sweep

    seen: dict[str, int] = {"series": 0, "tokens": 0, "dead": 0, "candidates": 0}
    series, tokens, certain = sweep._series_products, sweep._token_products, sweep._certain_through
    inside = sweep._inside_values

    def count_series(u, *args):
        seen["series"] += int(torch.count_nonzero(u))
        return series(u, *args)

    def count_tokens(rates, *args):
        seen["tokens"] += rates.shape[0]
        return tokens(rates, *args)

    def count_dead(blocks, t):
        through = certain(blocks, t)
        seen["dead"] += int(torch.count_nonzero(through >= 3))
        return through

    def count_candidates(rates, *args):
        seen["candidates"] += rates.shape[0]
        return inside(rates, *args)

    monkeypatch.setattr(sweep, "_series_products", count_series)
    monkeypatch.setattr(sweep, "_token_products", count_tokens)
    monkeypatch.setattr(sweep, "_certain_through", count_dead)
    monkeypatch.setattr(sweep, "_inside_values", count_candidates)
    rng = np.random.default_rng(43)
    p = _logits_rows(rng, 3, 5000, "zipf")
    q = _normalise(p**0.8 * rng.uniform(0.5, 1.5, p.shape))
    block, dense = _block_and_dense(p, q, 3)
    assert all(count > 0 for count in seen.values()), seen
    assert np.max(np.abs(block - dense)) <= 1e-12


@pytest.mark.parametrize("kind", ["zipf", "peaked", "gauss"])
def test_chord_bound_holds_inside_every_block(kind):
    """The candidate test's bound never exceeds ``p(H_i) − Q(H_i)`` at a prefix inside its
    block (``Q`` of every prefix from the dense path): the blocks it leaves out cannot hold
    the minimum."""
    from otbound.drafts._torch_block_sweep import _chord_lower
    from otbound.drafts._torch_distinct import sweep_sorted, without_replacement_prefix_mass

    rng = np.random.default_rng([47, len(kind)])
    p = _logits_rows(rng, 3, 1500, kind)
    q = _normalise(p ** rng.uniform(0.6, 1.4) * rng.uniform(0.5, 1.5, p.shape))
    p_sorted, q_sorted = sweep_sorted(torch.tensor(p), torch.tensor(q))
    for n in (3, 8):
        mass = without_replacement_prefix_mass(q_sorted, n).clamp(0.0, 1.0)
        cum_p = torch.nn.functional.pad(p_sorted.cumsum(-1), (1, 0))
        suffix = torch.nn.functional.pad(q_sorted.flip(-1).cumsum(-1).flip(-1), (0, 1))
        for size in (7, 64, 256):
            ends = torch.clamp(torch.arange(0, -(-1500 // size) + 1) * size, max=1500)
            lower = _chord_lower(cum_p, suffix, mass[:, ends], size)
            value = cum_p - mass
            for k in range(ends.shape[0] - 1):
                inside = value[:, ends[k] + 1 : ends[k + 1]]
                if inside.shape[1]:
                    assert torch.all(lower[:, k] <= inside.amin(dim=-1) + 1e-15), (n, size, k)


@pytest.mark.parametrize("n", [3, 5])
def test_block_sweep_with_n_minus_one_heavy_tokens(n):
    """``n − 1`` tokens hold nearly all the mass and fire at every large node, the rest is a
    long tail: ``P[N < n]`` stays near 1 at the prefixes that hold the heavy tokens, far past
    their nodes' ``q t > 50`` (a block dies only with ``n`` such tokens before its end)."""
    rng = np.random.default_rng([53, n])
    vocab = 1200
    q = np.full((2, vocab), 0.02 / (vocab - n + 1))
    q[:, : n - 1] = 0.98 / (n - 1)
    p = q * rng.uniform(0.1, 3.0, q.shape)
    p *= 0.9 / p[:, n - 1 :].sum(axis=-1, keepdims=True)
    p[:, : n - 1] = 0.1 / (n - 1)  # the heavy tokens first in the sweep, the minimum past them
    order = np.stack([rng.permutation(vocab) for _ in range(2)])
    p, q = np.take_along_axis(p, order, -1), np.take_along_axis(q, order, -1)
    block, dense = _block_and_dense(p, q, n)
    assert np.all(dense < -0.01)  # the minimum is a prefix that holds the heavy tokens
    assert np.max(np.abs(block - dense)) <= 1e-12


def test_block_sweep_in_small_pieces(monkeypatch):
    """The block products and the candidates taken a few at a time (pieces of 1,000 entries:
    every loop over pieces runs many times) give the same gap as in one piece."""
    from otbound.drafts import _torch_block_sweep as sweep

    rng = np.random.default_rng(59)
    p = _logits_rows(rng, 3, 3000, "zipf")
    q = _normalise(p**0.8 * rng.uniform(0.5, 1.5, p.shape))
    whole, dense = _block_and_dense(p, q, 4)
    monkeypatch.setattr(sweep, "CPU_PIECE", 1000)
    pieces, _ = _block_and_dense(p, q, 4)
    assert np.max(np.abs(pieces - whole)) <= 1e-14
    assert np.max(np.abs(pieces - dense)) <= 1e-12


def test_a_nan_in_the_sweep_raises(monkeypatch):
    """A NaN a design's torch kernel gives is refused with the design, ``n`` and the row, as
    the numpy sweep refuses it, never returned as a rate (``clamp`` keeps a NaN)."""

    def broken(self, p, q, n):
        gap = torch.zeros(p.shape[0], dtype=p.dtype)
        gap[-1] = math.nan
        return gap

    design = ob.get_design("without_replacement")
    monkeypatch.setattr(type(design), "torch_gap", broken)
    p = np.full((3, 4), 0.25)
    with pytest.raises(
        ValueError, match="NaN in the torch sweep of design 'without_replacement', n=3, at row 2"
    ):
        optimal_acceptance_torch(p, p, n=3, design="without_replacement")


@pytest.mark.parametrize("design", SCANNED)
def test_float32_rows_with_masses_below_the_normal_range(design):
    """float32 rows whose other masses are 1e-30 to 1e-45 (subnormal or below float32's
    normal range): the grid's largest node and the linear ``e_n`` floor follow the dtype, so
    the rates are numpy's on the same (float32-rounded) rows to 1e-6 (before: 0.80 for 1.0,
    0.012 for 0.83)."""
    rng = np.random.default_rng(67)
    for tiny in (1e-30, 1e-38, 1e-40, 1e-45):
        q = np.full(40, tiny)
        q[0] = 1.0
        p32 = torch.tensor(rng.dirichlet(np.ones(40)), dtype=torch.float32)
        q32 = torch.tensor(q / q.sum(), dtype=torch.float32)
        for n in (2, 3, 4):
            want = ob.optimal_acceptance(
                p32.double().numpy(), q32.double().numpy(), n=n, design=design, normalize=True
            )
            got = optimal_acceptance_torch(
                p32, q32, n=n, design=design, dtype=torch.float32, normalize=True
            )
            assert abs(float(got) - want) <= 1e-6, (tiny, n, float(got), want)


def test_block_sweep_groups_rows_by_their_grids(monkeypatch):
    """A batch with one row whose grid reaches far (a mass of 1e-300: thousands of nodes) is
    swept in groups of rows with about as many nodes, the far row alone at a small budget;
    every grouping gives the dense path's gaps."""
    from otbound.drafts import _torch_block_sweep as sweep

    rng = np.random.default_rng(71)
    p = _logits_rows(rng, 5, 600, "zipf")
    q = _normalise(p**0.8 * rng.uniform(0.5, 1.5, p.shape))
    q[2, 7] = 1e-300
    q = _normalise(q)
    groups: list[list[int]] = []
    split = sweep._node_groups

    def record(nodes, per_row, budget):
        out = split(nodes, per_row, budget)
        groups.append([len(g) for g in out])
        return out

    monkeypatch.setattr(sweep, "_node_groups", record)
    whole, dense = _block_and_dense(p, q, 3)
    assert np.max(np.abs(whole - dense)) <= 1e-12
    monkeypatch.setattr(sweep, "CPU_GROUP", 5000)
    small, _ = _block_and_dense(p, q, 3)
    assert np.max(np.abs(small - dense)) <= 1e-12
    assert groups[0] == [5] and len(groups[1]) >= 2 and groups[1][-1] == 1, groups


#: What :func:`otbound._checks.clip_rounding` says of a planted ``Q(H) = 1 + 1e-9``, after the
#: design's name and ``n`` (the numpy path also names the first row of its chunk).
_REFUSED = r"(; rows from 0)?\) at index \(.*\) is 1\.000000001, outside \[0, 1\] by more than rounding \(1e-12\): a bug upstream, not clipped"  # noqa: E501


def _plant_mass(monkeypatch, module, name: str, excess: float) -> None:
    """``module.name`` (a function giving ``Q`` of every prefix, (B, V + 1)) with the full
    set's ``Q`` of row 0, exactly 1, replaced by ``1 + excess``: a design whose ``Q`` returns
    more than 1."""
    kernel = getattr(module, name)

    def planted(q_sorted, n, *args):
        mass = kernel(q_sorted, n, *args).clone()
        assert mass[0, -1] == 1.0
        mass[0, -1] = 1.0 + excess
        return mass

    monkeypatch.setattr(module, name, planted)


_PLANTED = {
    "without_replacement": "without_replacement_prefix_mass",
    "conditional_poisson": "conditional_poisson_prefix_ratio",
}


@pytest.mark.parametrize("design", SCANNED)
def test_a_mass_out_of_range_is_refused_with_the_numpy_words(monkeypatch, design):
    """A ``Q(H) = 1 + 1e-9`` in the torch sweep raises, as the numpy sweep does (the same
    words: :func:`otbound.bounds.sweep.prefix_mass_what` and ``clip_rounding``'s sentence),
    where a clamp kept it silent; the numpy sweep, given the same mass, refuses it too."""
    from otbound.drafts import _torch_distinct

    rng = np.random.default_rng(83)
    p, q = _batch(rng, 4, 12)
    q = np.where(q > 0, q, 0.01)
    q /= q.sum(axis=-1, keepdims=True)
    _plant_mass(monkeypatch, _torch_distinct, _PLANTED[design], 1e-9)
    refused = rf"prefix mass Q\(H\) of design '{design}' \(n=2" + _REFUSED
    with pytest.raises(ValueError, match=refused) as torch_error:
        optimal_acceptance_torch(p, q, n=2, design=design)
    assert "index (0, 12)" in str(torch_error.value)  # row 0, its full set
    spec = type(ob.get_design(design))
    masses = spec.prefix_masses

    def numpy_planted(self, q_sorted, counts):
        mass = np.array(masses(self, q_sorted, counts))
        mass[:, 0, -1] = 1.0 + 1e-9
        return mass

    monkeypatch.setattr(spec, "prefix_minimum", lambda self, p, q, counts: None)
    monkeypatch.setattr(spec, "prefix_masses", numpy_planted)
    monkeypatch.setattr(spec, "bucketed_minimum", None, raising=False)
    with pytest.raises(ValueError, match=refused):
        ob.optimal_acceptance(p, q, n=2, design=design)


@pytest.mark.parametrize("design", SCANNED)
def test_a_mass_out_by_rounding_only_is_clipped(monkeypatch, design):
    """A ``Q(H)`` above 1 by less than the rounding tolerance (1e-12 in float64) is clipped,
    not refused: the rates are those of the unplanted kernel, bit for bit."""
    from otbound.drafts import _torch_distinct

    rng = np.random.default_rng(89)
    p, q = _batch(rng, 4, 12)
    q = np.where(q > 0, q, 0.01)
    q /= q.sum(axis=-1, keepdims=True)
    want = optimal_acceptance_torch(p, q, n=2, design=design)
    _plant_mass(monkeypatch, _torch_distinct, _PLANTED[design], 5e-13)
    assert torch.equal(optimal_acceptance_torch(p, q, n=2, design=design), want)


@pytest.mark.parametrize("where", ["poly_mul", "_inside_values"])
def test_block_sweep_refuses_masses_out_of_range(monkeypatch, where):
    """The block sweep checks ``Q`` at the block ends (planted through the distribution at
    each block end, ``P[N < n]`` lowered by 1 or more there only) and at the prefixes inside
    its candidate blocks (planted through their trapezoid sums only, lowered by 1): ``Q``
    above 1 is refused in either place with the numpy words."""
    from otbound.drafts import _torch_block_sweep as sweep

    rng = np.random.default_rng(97)
    p = _logits_rows(rng, 3, 600, "zipf")
    q = _normalise(p**0.8 * rng.uniform(0.5, 1.5, p.shape))
    kernel = getattr(sweep, where)
    monkeypatch.setattr(sweep, where, lambda *args: kernel(*args) - 1.0)
    refused = r"prefix mass Q\(H\) of design 'without_replacement' \(n=3\) at index"
    with pytest.raises(ValueError, match=refused):
        optimal_acceptance_torch(p, q, n=3, design="without_replacement")


def test_an_alpha_out_of_range_is_refused_and_rounding_clipped(monkeypatch):
    """``α* = 1 + gap`` below 0 by 1e-9 raises with the numpy sweep's words
    (:func:`otbound.bounds.sweep.alpha_what`); by 1e-13 it is clipped to 0."""
    design = type(ob.get_design("iid"))
    p = np.full((2, 4), 0.25)
    refused = (
        r"α\* of design 'iid' \(n=2\) at index 0 is -1\.0000000827\d*e-09, outside \[0, 1\] "
        r"by more than rounding \(1e-12\): a bug upstream, not clipped"
    )
    for gap in (-1.0 - 1e-9, -1.0 - 1e-13):
        planted = torch.full((2,), gap, dtype=torch.float64)
        monkeypatch.setattr(design, "torch_gap", lambda self, p, q, n, g=planted: g)
        if gap < -1.0 - 1e-12:
            with pytest.raises(ValueError, match=refused):
                optimal_acceptance_torch(p, p, n=2, design="iid")
        else:
            assert optimal_acceptance_torch(p, p, n=2, design="iid").tolist() == [0.0, 0.0]
