"""Without-replacement ``α*`` with many drafts (``n ≥ 20``) equals the plain-numpy reference.

A block fold's power series (``c_m`` for ``m < n``, each from its terms ``r ≥ m``) needs
``n − 1`` power sums, and a block keeps ``MOST_TERMS``: from ``n = MOST_TERMS + 2 = 20`` on
the block sweep takes no power sums and sweeps every token one by one. Folding there read
past the power sums and the series tables, and gave NaN or values like ``−1e160`` that
changed from run to run with whatever lay in that memory. The compiled row and batch paths
run in a fresh process, ``n = 30`` and ``100`` first, as a first call finds the memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from otbound._threads import SERIAL_WORK
from otbound.drafts._row_batch import ROW_DONE
from otbound.drafts._sequential_mass import MOST_TERMS, log_time_step
from otbound.drafts._sequential_sweep import prefix_minimum_kernel, row_buffers, row_constants
from otbound.drafts.reference import reference_alpha_star, sweep_order

VOCAB = 400
SEEDS = (0, 1, 2)
#: The first two are the process's first calls; 20 is the first ``n`` whose fold would need
#: ``MOST_TERMS + 1`` power sums, 19 the last whose fold needs at most ``MOST_TERMS``.
COUNTS = (30, 100, 20, 19, 25)
#: The reference's own step error stays below 1e-12 at these ``n`` (its default step).
TOLERANCE = 1e-10

_FRESH_RUN = """
import json, sys
import numpy as np
import otbound as ob

rows = np.load(sys.argv[1])
p, q, counts = rows["p"], rows["q"], [int(n) for n in sys.argv[3].split(",")]
if sys.argv[2] == "rows":
    found = [[ob.optimal_acceptance(p[r], q[r], n=n, design="without_replacement")
              for r in range(p.shape[0])] for n in counts]
else:
    found = [ob.optimal_acceptance(p, q, n=n, design="without_replacement").tolist()
             for n in counts]
print(json.dumps(found))
"""


def _rows() -> tuple[np.ndarray, np.ndarray]:
    """One Dirichlet(1) pair of rows of ``VOCAB`` tokens per seed: (seeds, V) each."""
    pairs = [np.random.default_rng(seed).dirichlet(np.ones(VOCAB), size=2) for seed in SEEDS]
    return np.array([pair[0] for pair in pairs]), np.array([pair[1] for pair in pairs])


def _references(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``reference_alpha_star`` of every row at every ``n`` of ``COUNTS``: (counts, rows)."""
    return np.array(
        [
            [
                reference_alpha_star(a, b, n, "without_replacement")
                for a, b in zip(p, q, strict=True)
            ]
            for n in COUNTS
        ]
    )


@pytest.fixture(scope="module")
def rows_and_references() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p, q = _rows()
    return p, q, _references(p, q)


def _fresh_process(path: Path, mode: str) -> np.ndarray:
    """``α*`` at every ``n`` of ``COUNTS`` (in that order) from a new Python process."""
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_RUN, str(path), mode, ",".join(map(str, COUNTS))],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return np.array(json.loads(done.stdout))


def _first_level_sizes(p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """The power sums' and stored states' sizes the block sweep's first level took for ``n``
    drafts on the row ``p``, ``q`` (every prefix, the default first level)."""
    order = sweep_order(p, q)
    distinct, left_times, beta, inverse = row_constants([n])
    found = prefix_minimum_kernel(
        p[order], q[order], distinct, np.arange(q.size + 1), np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.bool_), q.size, np.empty(0), left_times, log_time_step([n]), beta,
        inverse, *row_buffers(q.size), numba.get_num_threads(), SERIAL_WORK,
    )  # fmt: skip
    assert found[0] == ROW_DONE
    return np.asarray(found[-1], dtype=np.int64)


def test_only_rows_within_the_fold_limit_take_power_sums() -> None:
    assert {MOST_TERMS + 1, MOST_TERMS + 2} <= set(COUNTS)  # the last n folded, the first not
    p, q = _rows()
    for n in COUNTS:
        power_sums, stored = _first_level_sizes(p[0], q[0], n)
        assert stored > 0  # the block sweep ran
        assert (power_sums > 0) == (n - 1 <= MOST_TERMS), n


@pytest.mark.parametrize("mode", ["rows", "batch"])
def test_a_fresh_process_matches_the_reference(
    mode: str, rows_and_references: tuple[np.ndarray, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    p, q, expected = rows_and_references
    path = tmp_path / "rows.npz"
    np.savez(path, p=p, q=q)
    found = _fresh_process(path, mode)
    assert found.shape == expected.shape
    assert np.all(expected < 1.0)  # no trivial α* = 1 among the checked values
    np.testing.assert_allclose(found, expected, rtol=0.0, atol=TOLERANCE)


def test_the_torch_sweep_matches_the_reference(
    rows_and_references: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    torch = pytest.importorskip("torch")
    from otbound.bounds.torch_sweep import optimal_acceptance_torch

    p, q, expected = rows_and_references
    found = np.array(
        [
            optimal_acceptance_torch(
                torch.from_numpy(p), torch.from_numpy(q), n=n, design="without_replacement"
            ).numpy()
            for n in COUNTS
        ]
    )
    np.testing.assert_allclose(found, expected, rtol=0.0, atol=TOLERANCE)
