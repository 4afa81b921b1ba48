r"""Audit a verification rule: lossless or not, how far its output is from the target, and
its acceptance beside ``α*``.

``otbound.audit(rule, p, q, n=..., design=...)`` on rows of ``(p, q)``,
``otbound.audit_dump(rule, dump)`` on a dump (default: the sample), and the command
``otbound audit [DUMP] --rule NAME|FILE.py:FUNCTION``. A rule is an engine rule
(:mod:`otbound.engines`), a verifier, or a plain function ``verify(drafts, p, q, rng) ->
token``. What is exact and what is Monte Carlo, and how the verdict is reached:
:mod:`otbound.audits._audit`; the test's power: :mod:`otbound.audits._power`.
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.audits._api import SAMPLE_DUMP, audit, audit_dump, audit_rules
    from otbound.audits._audit import EXACT_TOLERANCE, STEP_COLUMNS, AuditResult
    from otbound.audits._power import detectable_tv
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.audits._api": ("SAMPLE_DUMP", "audit", "audit_dump", "audit_rules"),
            "otbound.audits._audit": ("EXACT_TOLERANCE", "STEP_COLUMNS", "AuditResult"),
            "otbound.audits._power": ("detectable_tv",),
        },
    )

__all__ = [
    "EXACT_TOLERANCE",
    "SAMPLE_DUMP",
    "STEP_COLUMNS",
    "AuditResult",
    "audit",
    "audit_dump",
    "audit_rules",
    "detectable_tv",
]
