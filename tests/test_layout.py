"""The package's layering: a name one module takes from another is a public name of it.

A leading underscore says "used here only"; a name imported by another module is part of its
module's interface and is spelt without one (the module itself may be private, as
``otbound/capture/_settings.py``). Read from the source (AST), so nothing is imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "otbound"

#: Private names taken across modules (none: a name used elsewhere is public in its module).
PENDING: set[str] = set()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(dotted: str) -> bool:
    path = ROOT / Path(*dotted.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def private_names_taken(path: Path) -> set[str]:
    """``module.name`` for each private name ``path`` imports from another otbound module or
    reads as an attribute of an imported otbound module (``_shard._trusted_rows``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: dict[str, str] = {}  # local name -> otbound module
    taken: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("otbound"):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if _is_module(dotted):
                    modules[alias.asname or alias.name] = dotted
                elif _is_private(alias.name):
                    taken.add(dotted)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("otbound") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in modules:
                taken.add(f"{modules[base.id]}.{node.attr}")
    return taken


def test_names_taken_across_modules_are_public():
    taken = {
        name: str(path.relative_to(ROOT))
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in private_names_taken(path)
    }
    assert set(taken) <= PENDING, {
        name: where for name, where in taken.items() if name not in PENDING
    }


def test_the_dump_package_imports_no_analysis():
    """``otbound.dumps`` reads, writes and processes dumps: loading all of it (the readers, the
    writer, the processing of full and top-k rows) loads no bound, verifier or analysis."""
    code = (
        "import sys, otbound.dumps as od, otbound.dumps.readers\n"
        "from otbound.dumps import _format, _processing, _reader, _shard, _topk, _writer\n"
        "for name in od.__all__:\n"
        "    getattr(od, name)\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('otbound.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = set(done.stdout.split())
    assert "otbound.dumps._topk" in loaded and "otbound.dumps._writer" in loaded
    later = ("otbound.bounds", "otbound.analysis", "otbound.verifiers", "otbound.evaluate")
    assert not {m for m in loaded if m.startswith(later)}, sorted(loaded)
