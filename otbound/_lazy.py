"""The lazy re-exports of otbound's packages (PEP 562 module ``__getattr__`` and ``__dir__``).

Every package ``__init__`` lists the names it re-exports and imports each from its module on
first use, so ``import otbound`` and its subpackages load none of the heavy dependencies.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, tuple[str, ...]], moved: dict[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module ``__getattr__`` and ``__dir__`` (PEP 562) that import each exported
    name from its module on first use.

    ``exports`` maps a module to the names the package re-exports from it (the same names the
    package imports under ``TYPE_CHECKING``, for type checkers). Any other name is looked up
    as a submodule (``otbound.bounds.sweep``), as an eager ``import`` of the package once made
    every submodule an attribute. A name is bound in the package once found, so the next use
    costs nothing.

    ``moved`` maps names the package no longer holds to the module that does: each use warns
    (``DeprecationWarning``, naming the new place) and gives that module's object, for one
    release.
    """
    origins = {name: module for module, names in exports.items() for name in names}
    moved = dict(moved or {})

    def __getattr__(name: str) -> Any:
        origin = origins.get(name)
        if name in moved:
            warnings.warn(
                f"{package}.{name} has moved to {moved[name]}.{name}; import it from there "
                "(the old name goes in the next release)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(moved[name]), name)
        if origin is not None:
            value = getattr(importlib.import_module(origin), name)
        elif name.startswith("__") or not name.isidentifier():
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise  # the submodule exists but needs what is not installed
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        module = sys.modules[package]
        return sorted(set(vars(module)) | set(origins) | set(getattr(module, "__all__", ())))

    return __getattr__, __dir__
