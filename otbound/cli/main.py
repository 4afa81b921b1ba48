"""``otbound``: one command with a subcommand per job, as ``python -m otbound`` too.

    otbound bounds [DUMP] ...     optimal acceptance rates and verifiers on a dump (compute_bounds)
    otbound log ...               log target/draft distributions from models (log_distributions)
    otbound trees ...             tree speculative decoding with real models (simulate_trees)
    otbound train-stopping ...    a decision model for learned stopping (train_stopping)
    otbound audit [DUMP] ...      audit verification rules: lossless or not, TV, α* (audit)
    otbound --version

Each subcommand is the same program as its script in ``scripts/`` and takes the same options
(``otbound bounds --help``). The subcommands that need torch import it only when they run, so
``otbound bounds`` works on an installation without the ``torch`` extra.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

from otbound._version import __version__
from otbound.cli._common import exit_now

PROG = "otbound"


class Subcommand(NamedTuple):
    """A subcommand: the module whose ``main(argv, prog=...)`` runs it, and a line of help."""

    module: str
    summary: str


#: The subcommands, in the order ``--help`` lists them.
SUBCOMMANDS: dict[str, Subcommand] = {
    "bounds": Subcommand(
        "otbound.cli.compute_bounds",
        "optimal acceptance rates and every verifier's acceptance on a dump of logits",
    ),
    "log": Subcommand(
        "otbound.cli.log_distributions",
        "log target and draft distributions from two models (needs the torch extra)",
    ),
    "trees": Subcommand(
        "otbound.cli.simulate_trees",
        "tree speculative decoding with a draft and a target model (needs the torch extra)",
    ),
    "train-stopping": Subcommand(
        "otbound.cli.train_stopping",
        "train the decision model of --stopping learned:MODEL (needs scikit-learn)",
    ),
    "audit": Subcommand(
        "otbound.cli.audit",
        "audit verification rules on a dump: lossless or not, TV from the target, α*",
    ),
}


def usage() -> str:
    """The top-level help text."""
    width = max(map(len, SUBCOMMANDS))
    lines = [
        f"usage: {PROG} [--version] [-h] COMMAND [ARGS ...]",
        "",
        "Exact optimal acceptance rates for multi-draft speculative decoding, and every",
        "published verifier beside them.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {sub.summary}" for name, sub in SUBCOMMANDS.items()),
        "",
        f"'{PROG} COMMAND --help' shows a command's options.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``otbound`` with ``argv`` (default: ``sys.argv[1:]``); the exit status.

    Examples
    --------
    >>> main(["--version"])  # doctest: +ELLIPSIS
    otbound ...
    0
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"{PROG} {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(
            f"{PROG}: error: unknown command {name!r}; commands: {', '.join(SUBCOMMANDS)} "
            "(see --help)",
            file=sys.stderr,
        )
        return 2
    try:
        module = importlib.import_module(SUBCOMMANDS[name].module)
    except ImportError as exc:  # the torch extra is missing
        print(
            f"{PROG} {name}: error: {exc} (install the extra: pip install 'otbound[torch]')",
            file=sys.stderr,
        )
        return 1
    return int(module.main(rest, prog=f"{PROG} {name}"))


def run() -> NoReturn:
    """The ``otbound`` executable: :func:`main` on the command line, then the process ends
    (:func:`otbound.cli._common.exit_now`)."""
    exit_now(main())


if __name__ == "__main__":
    run()
