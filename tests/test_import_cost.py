"""``import otbound`` is cheap: each public name is imported from its module on first use.

The package and its subpackages re-export their names lazily (PEP 562 module ``__getattr__``,
:func:`otbound._lazy.lazy_exports`), with the same imports under ``TYPE_CHECKING`` for type
checkers. These tests hold the heavy dependencies out of a bare import (no timings: the time
itself is ``benchmarks/bench_import.py``'s), check that using a name loads what it needs, and
that the lazy tables, the ``TYPE_CHECKING`` imports and ``__all__`` name the same objects.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Never imported by ``import otbound`` alone.
HEAVY = ("pandas", "numba", "highspy", "scipy", "matplotlib", "cvxpy", "torch", "sklearn")

#: The packages whose ``__init__`` re-exports lazily.
LAZY_PACKAGES = (
    "otbound",
    "otbound.analysis",
    "otbound.audits",
    "otbound.bounds",
    "otbound.capture",
    "otbound.drafts",
    "otbound.dumps",
    "otbound.engines",
    "otbound.sequence",
    "otbound.tree_decoding",
    "otbound.trees",
    "otbound.verifiers",
)


#: The name the lazy table's call goes by (``otbound/__init__.py`` keeps it private).
LAZY_FUNCTIONS = ("lazy_exports", "_lazy_exports")

#: Modules that still take a name from ``otbound/__init__.py`` (to import it from its module).
IMPORTS_BACK_UP = {"otbound/tree_decoding/__init__.py"}


def loaded_after(code: str) -> dict[str, bool]:
    """Which of :data:`HEAVY` a fresh interpreter holds after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_otbound_loads_no_heavy_dependency():
    loaded = loaded_after("import otbound")
    assert not any(loaded.values()), {name for name, on in loaded.items() if on}


def test_import_of_each_subpackage_loads_no_heavy_dependency():
    packages = "; ".join(f"import {name}" for name in LAZY_PACKAGES)
    loaded = loaded_after(packages)
    assert not any(loaded.values()), {name for name, on in loaded.items() if on}


def test_the_registry_of_designs_does_not_load_the_kernels():
    """The designs import their numba kernels on first use, not to be listed."""
    loaded = loaded_after("import otbound; assert 'conditional_poisson' in otbound.DESIGNS")
    assert not loaded["numba"]
    assert not loaded["pandas"]


@pytest.mark.parametrize(
    ("code", "needs", "spares"),
    [
        ("import otbound as ob; ob.compare([.5, .5], [.9, .1], n=2)", ("pandas",), ()),
        ("import otbound as ob; ob.open_dump", ("pandas",), ("highspy",)),
        (
            "import otbound as ob; ob.optimal_acceptance([.5, .5], [.9, .1], 2)",
            (),
            ("pandas", "highspy"),
        ),
        ("import otbound as ob; ob.solve_primal([.5, .5], [.9, .1], 2)", ("highspy",), ("pandas",)),
        ("import otbound as ob; ob.trees.chain(3)", (), ("pandas", "numba", "highspy")),
    ],
)
def test_using_a_name_loads_what_it_needs(code, needs, spares):
    loaded = loaded_after(code)
    assert all(loaded[name] for name in needs), loaded
    assert not any(loaded[name] for name in spares), loaded


def test_names_resolve_as_before():
    """Every public name is there, from ``otbound`` and its subpackages, attribute or
    ``from`` import, and the same object as in its module."""
    import otbound as ob
    from otbound import DESIGNS, compare, open_dump
    from otbound.bounds import optimal_acceptance
    from otbound.bounds.sweep import optimal_acceptance as from_module
    from otbound.drafts.registry import DESIGNS as registry_designs
    from otbound.dumps._reader import open_dump as reader_open_dump
    from otbound.evaluate import compare as evaluate_compare

    assert DESIGNS is registry_designs and ob.DESIGNS is registry_designs
    assert open_dump is reader_open_dump and compare is evaluate_compare
    assert ob.optimal_acceptance is optimal_acceptance is from_module
    assert ob.trees.chain(2) == [[0], [0, 0]]
    for name in ob.__all__:
        assert getattr(ob, name) is not None
        assert name in dir(ob)
    assert ob.bounds.sweep.optimal_acceptance is from_module  # submodules, as attributes
    with pytest.raises(AttributeError, match="no attribute 'nowhere'"):
        ob.nowhere  # noqa: B018
    with pytest.raises(ImportError):
        from otbound import nowhere  # noqa: F401


def test_a_function_named_as_its_module_wins():
    """``otbound.sequence.block_acceptance`` is the function, even where the module of the
    same name was imported first."""
    code = (
        "import sys, otbound.sequence.block_acceptance\n"
        "from otbound.sequence import block_acceptance\n"
        "import otbound\n"
        "module = sys.modules['otbound.sequence.block_acceptance']\n"
        "assert callable(block_acceptance) and block_acceptance is module.block_acceptance\n"
        "assert otbound.block_acceptance is block_acceptance\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _declared(package: str) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """What ``package``'s ``__init__`` imports under ``TYPE_CHECKING`` and what its lazy
    table holds, name -> module each, and the submodules it re-exports."""
    path = ROOT / Path(*package.split(".")) / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    lazy: dict[str, str] = {}
    submodules: set[str] = set()
    for node in tree.body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module:
                for alias in statement.names:
                    if statement.module == package:  # from otbound import dumps
                        submodules.add(alias.name)
                        typed[alias.name] = f"{package}.{alias.name}"
                    else:
                        typed[alias.asname or alias.name] = statement.module
        for statement in node.orelse:
            call = getattr(statement, "value", None)
            if isinstance(call, ast.Call) and ast.unparse(call.func) in LAZY_FUNCTIONS:
                table = ast.literal_eval(call.args[1])
                lazy = {name: module for module, names in table.items() for name in names}
    return typed, lazy, submodules


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_table_matches_type_checking_imports_and_all(package):
    module = importlib.import_module(package)
    typed, lazy, submodules = _declared(package)
    assert lazy, f"{package} has no lazy table"
    # the table names what type checkers see (submodules need no entry: they import as such)
    assert set(typed) - submodules == set(lazy)
    assert set(typed) == set(module.__all__)
    assert set(module.__all__) <= set(dir(module))
    if package == "otbound.capture":
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    for name in module.__all__:
        origin = importlib.import_module(typed[name])
        expected = origin if name in submodules else getattr(origin, name)
        assert getattr(module, name) is expected, f"{package}.{name}"
        if name not in submodules:
            assert getattr(importlib.import_module(lazy[name]), name) is expected


def _names_from_the_package(path: Path) -> list[str]:
    """The names ``path`` imports from ``otbound`` itself that are not its submodules."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "otbound" and node.level == 0:
            for alias in node.names:
                package = ROOT / "otbound" / alias.name
                if not (package.is_dir() or package.with_suffix(".py").is_file()):
                    found.append(alias.name)
    return found


def test_no_module_imports_back_up_to_the_package():
    """``otbound/__init__.py`` re-exports for users; inside the package each name comes from
    its own module (``__version__`` from ``otbound._version``, the lazy tables from
    ``otbound._lazy``), so no import runs back up to the top."""
    offenders = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "otbound").rglob("*.py"))
        if path.name != "__init__.py" or path.parent != ROOT / "otbound"
        if (names := _names_from_the_package(path))
    }
    assert set(offenders) <= IMPORTS_BACK_UP, offenders
