"""Deprecated name of :mod:`otbound.drafts.tokens` (importing it warns; it goes in the next
release)."""

from __future__ import annotations

import warnings

from otbound.drafts.tokens import *  # noqa: F403
from otbound.drafts.tokens import __all__ as __all__

warnings.warn(
    "otbound.drafts.helpers is renamed otbound.drafts.tokens; import from there",
    DeprecationWarning,
    stacklevel=2,
)
