"""Sphinx configuration of otbound's documentation (``sphinx-build -W docs docs/_build``).

The API pages are generated from the numpydoc docstrings (autodoc + autosummary + numpydoc);
the notebooks are rendered from ``notebooks/`` as they are committed, without executing them
(myst-nb, ``nb_execution_mode = "off"``); Markdown pages are read by MyST. The ``docs`` extra
alone builds it: the modules of the ``torch`` extra that are not installed are mocked
(``autodoc_mock_imports``), so the torch modules' pages come from their docstrings all the same.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import otbound  # noqa: E402

project = "otbound"
author = "the otbound developers"
copyright = "2026, the otbound developers"
release = otbound.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_nb",
]

# The notebooks live in notebooks/ (where the test suite executes them); the docs render copies.
_NOTEBOOKS = Path(__file__).parent / "notebooks"
_NOTEBOOKS.mkdir(exist_ok=True)
for _notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
    shutil.copyfile(_notebook, _NOTEBOOKS / _notebook.name)

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

autosummary_generate = True
#: The torch extra's modules, mocked where they are not installed (a venv with the docs extra
#: only); with them installed (CI's full environment) the real modules are imported.
_TORCH_EXTRA = ("torch", "transformers", "safetensors", "gguf", "accelerate")
autodoc_mock_imports = [name for name in _TORCH_EXTRA if importlib.util.find_spec(name) is None]
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": True}
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

html_theme = "pydata_sphinx_theme"
html_title = f"otbound {release}"
html_static_path: list[str] = []
