"""The functional API's old argument order, kept working for one release.

The functions take ``(p, q, n or gamma or width, ...)`` with the method (the verifier) as a
keyword: ``block_acceptance(p, q, gamma, verifier="block")``. A call in the old order,
``block_acceptance("block", p, q, gamma)``, is recognised by its first argument, which is a
method (a name, or an object with a ``design`` or an ``acceptance``, ``simulate``, ``verify``
or ``iteration_law`` method) where ``p`` would be an array of probabilities; it warns
(``DeprecationWarning``) and runs as the new spelling.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["is_method", "method_keyword"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: What only a method (a verifier, a sequence verifier) has of these, never an array.
_METHOD_ATTRIBUTES = ("design", "acceptance", "simulate", "verify", "iteration_law")


def is_method(value: object) -> bool:
    """Whether ``value`` is a method (a verifier's name or object), not a distribution."""
    return isinstance(value, str) or any(hasattr(value, a) for a in _METHOD_ATTRIBUTES)


def method_keyword(keyword: str) -> Callable[[Callable[_P, _R]], Callable[..., _R]]:
    """Let ``f(p, q, ..., keyword=method)`` also be called as ``f(method, p, q, ...)``, with
    a ``DeprecationWarning`` naming the new spelling (for one release). While both orders are
    accepted the wrapped function's type takes any arguments (``help`` shows the new
    signature)."""

    def decorate(function: Callable[_P, _R]) -> Callable[..., _R]:
        name = function.__name__

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if args and is_method(args[0]):
                if keyword in kwargs:
                    raise TypeError(f"{name}() got {keyword} twice: first and as a keyword")
                warnings.warn(
                    f"{name}({keyword}, p, q, ...) is deprecated: write "
                    f"{name}(p, q, ..., {keyword}=...) (the old order goes in the next release)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[keyword] = args[0]
                args = args[1:]
            return function(*args, **kwargs)

        return wrapper

    return decorate
