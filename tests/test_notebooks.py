"""The notebooks in ``notebooks/`` run top to bottom without an error.

Each notebook is executed in a fresh Jupyter kernel (``nbclient``), with smaller sizes than its
defaults: the values in :data:`SMALL` are put in a cell inserted right after the notebook's cell
tagged ``parameters``. The dump is the sample in ``data/sample`` when it exists, else a stand-in
built with ``dump_factory`` (``OTBOUND_SAMPLE`` tells the notebooks where it is). A cell that
raises fails the test (``CellExecutionError`` names the cell and shows the traceback).

Skipped when the notebooks extra is not installed (``pip install -e ".[notebooks]"``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dump_factory import write_dump

nbformat = pytest.importorskip(
    "nbformat", reason='executing the notebooks needs pip install -e ".[notebooks]"'
)
nbclient = pytest.importorskip(
    "nbclient", reason='executing the notebooks needs pip install -e ".[notebooks]"'
)
pytest.importorskip(
    "ipykernel", reason='executing the notebooks needs pip install -e ".[notebooks]"'
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
SAMPLE = ROOT / "data" / "sample"

#: Sizes for the test run, per notebook (names must be set in its parameters cell).
SMALL: dict[str, dict[str, object]] = {
    "01_quickstart": {"MAX_STEPS": 24, "N_DRAFTS": (2, 4), "MC_TRIALS": 50},
    "02_validate_a_new_verifier": {
        "TRIALS": 50_000,
        "RHO_GRID": 6,
        "COMPARE_STEPS": 8,
        "N_DRAFTS": (2, 4),
        "LOSSY_TRIALS": 20_000,
    },
    "03_anatomy_of_the_bound": {"N_MAX": 4},
    "04_temperature_and_drafts": {
        "MAX_STEPS": 12,
        "TEMPERATURES": (0.5, 1.0),
        "N_DRAFTS": (2, 4),
        "MC_TRIALS": 50,
    },
    "05_draft_trees": {
        "MAX_PROMPTS": 2,
        "MAX_NEW_TOKENS": 8,
        "TREES": "binary:1-2,ternary:1",
        "PREDICTION_TRIALS": 100,
        "MAX_STEPS": 16,
    },
}

#: Text a notebook's outputs must contain (the facts it is there to show).
EXPECTED: dict[str, tuple[str, ...]] = {
    # α* per design and n (by hand, then on the dump), the run's files, the verifiers against it
    "01_quickstart": ("0.9929", "files written: steps.parquet", "α* from", "best verifier"),
    # the lossless check passes a lossless verifier and fails the duplicate-skipping RRS
    "02_validate_a_new_verifier": ("passed at significance", "FAILED at significance"),
    # sequential vs conditional Poisson: their set laws and bounds differ
    "03_anatomy_of_the_bound": ("0.5143", "0.4839", "0.99286", "1.00000"),
    # how α* and the gaps move from the coldest to the hottest temperature
    "04_temperature_and_drafts": ("α* rises by more than 0.01", "gap rises by more than 0.01"),
}


@pytest.fixture(scope="module")
def sample_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``data/sample`` if it is there, else a small stand-in dump (two shards, V = 2000)."""
    if (SAMPLE / "manifest.json").is_file():
        return SAMPLE
    path = tmp_path_factory.mktemp("notebook-sample") / "sample"
    write_dump(path, shards=(64, 64), vocab=2000)
    return path


def _parameters_index(nb) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return index
    raise AssertionError("no code cell tagged 'parameters'")


def _outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def test_every_notebook_has_test_sizes() -> None:
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"
    missing = [p.stem for p in NOTEBOOKS if p.stem not in SMALL]
    assert not missing, f"give {missing} small parameter values in SMALL, for a quick test run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_saved_clean(path: Path) -> None:
    """Committed without outputs, with a parameters cell that reads the dump's location."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{path.name} has outputs: clear them (jupyter nbconvert --clear-output --inplace)"
            )
    params = nb.cells[_parameters_index(nb)].source
    for name in SMALL[path.stem]:
        assert f"\n{name} = " in f"\n{params}", f"{path.name}: {name} is not a parameter"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, sample_dump: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(path, as_version=4)
    overrides = "\n".join(f"{k} = {v!r}" for k, v in SMALL[path.stem].items())
    nb.cells.insert(_parameters_index(nb) + 1, nbformat.v4.new_code_cell(overrides))
    monkeypatch.setenv("OTBOUND_SAMPLE", str(sample_dump))
    # numba's OpenMP threads busy-wait; on a shared, loaded machine that costs 10x
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError if a cell raises
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, f"{path.name} drew no figure"
    text = _outputs_text(nb)
    for expected in EXPECTED.get(path.stem, ()):
        assert expected in text, f"{path.name}: no {expected!r} in the outputs"
