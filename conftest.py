"""Collection for the whole test run: the examples in the docstrings of ``otbound`` run as
doctests (``--doctest-modules``); modules that need torch are left out where it is missing.

The notebooks are executed by ``tests/test_notebooks.py`` at small sizes. ``notebooks/`` is
collected only under nbmake's ``--nbmake`` (``pytest --nbmake notebooks/ -o addopts=""`` runs
them unchanged, at their default sizes), so a plain run does not execute them twice.
"""

import importlib.util
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"

collect_ignore_glob = ["scripts/*", "benchmarks/*", "data/*"]
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob += [
        "otbound/capture/*",
        "otbound/bounds/torch_sweep.py",
        "otbound/verifiers/torch_acceptance.py",
        "otbound/cli/log_distributions.py",
    ]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave ``notebooks/`` out unless nbmake's ``--nbmake`` asks for the notebooks."""
    if collection_path.resolve().is_relative_to(NOTEBOOKS) and not _nbmake(config):
        return True
    return None


def _nbmake(config: pytest.Config) -> bool:
    try:
        return bool(config.getoption("nbmake"))
    except ValueError:  # nbmake is not installed: its option does not exist
        return False
