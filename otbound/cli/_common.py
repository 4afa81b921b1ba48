"""What every otbound command line shares: one-line errors and warnings, option tables, list
options, and output directories that are checked before any work starts."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO, TypeVar

T = TypeVar("T")

#: Exit status for a run that failed (bad input, a failed shard, an unwritable output).
EXIT_FAILURE = 1
#: Exit status for unusable command-line arguments (argparse's convention).
EXIT_USAGE = 2


class CommandError(Exception):
    """A problem to report to the user as one line, with no traceback; the command exits with
    ``status`` (:data:`EXIT_FAILURE` unless given)."""

    def __init__(self, message: str = "", status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except None and flags (their help says what happens)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``prog: error: message``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _warning_printer(prog: str) -> Callable[..., None]:
    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        print(f"{prog}: warning: {_one_line(message)}", file=sys.stderr)

    return show


def exit_now(status: int | None) -> NoReturn:
    """End the process with ``status``, without the interpreter's teardown.

    The ``atexit`` handlers run (every cleanup registered with :mod:`atexit` or
    :class:`weakref.finalize`, in their order) and the standard streams are flushed; then
    :func:`os._exit` skips the freeing of every object and module, which the operating system
    does at once: about 0.35 s after an analysis (numba's compiled libraries, pandas,
    matplotlib). Threads are not joined (no command leaves one running). A stream that cannot
    be flushed (a closed pipe, a full disk) turns a status of 0 into 120, as Python's own exit
    does, with a line on stderr where it can still be written. The commands write every
    output file before they return, atomically, so nothing is lost. Only for a command's entry
    point, never inside a library call.
    """
    code = 0 if status is None else int(status)
    try:
        run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
        if run_exit_handlers is not None:
            run_exit_handlers()
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError) as exc:
                code = code or 120
                with contextlib.suppress(OSError, ValueError):
                    os.write(2, f"cannot write the output: {exc}\n".encode())
    finally:
        os._exit(code)


def run_command(prog: str, work: Callable[[], int]) -> int:
    """Run a command's body; report any expected failure as one line on stderr.

    Parameters
    ----------
    prog : str
        The command's name, which starts every message.
    work : callable
        The body; returns the exit status.

    Returns
    -------
    int
        ``work()``'s status, :data:`EXIT_FAILURE` for a reported error, 130 on Ctrl-C.
    """
    with warnings.catch_warnings():
        warnings.showwarning = _warning_printer(prog)
        try:
            return work()
        except KeyboardInterrupt:
            print(f"{prog}: interrupted; rerun with --resume to continue", file=sys.stderr)
            return 130
        except (CommandError, ValueError, OSError, KeyError, ImportError) as exc:
            text = _one_line(exc) or type(exc).__name__
            if isinstance(exc, FileNotFoundError) and exc.filename and exc.strerror:
                text = f"{exc.filename}: {exc.strerror}"
            print(f"{prog}: error: {text}", file=sys.stderr)
            return exc.status if isinstance(exc, CommandError) else EXIT_FAILURE


def parse_list(text: str, convert: Callable[[str], T], option: str) -> list[T]:
    """``"2,4,8"`` as a list of converted values, with a message naming the option.

    Examples
    --------
    >>> parse_list("2, 4,8", int, "--n")
    [2, 4, 8]
    """
    items = [item.strip() for item in str(text).split(",")]
    if not items or any(not item for item in items):
        raise CommandError(f"{option}: expected a comma-separated list, got {text!r}")
    values = []
    for item in items:
        try:
            values.append(convert(item))
        except (ValueError, TypeError):
            raise CommandError(f"{option}: cannot read {item!r} in {text!r}") from None
    return list(dict.fromkeys(values))


def list_option(convert: Callable[[str], T], option: str) -> Callable[[str], list[T]]:
    """An argparse ``type=`` for comma-separated lists (its errors become usage errors)."""

    def parse(text: str) -> list[T]:
        try:
            return parse_list(text, convert, option)
        except CommandError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None

    parse.__name__ = f"list of {getattr(convert, '__name__', 'values')}"
    return parse


def add_options(
    parser: argparse._ActionsContainer, options: Sequence[tuple[str, Mapping[str, Any]]]
) -> None:
    """Add options to a parser or an argument group, in order.

    Parameters
    ----------
    parser : argparse.ArgumentParser or argparse argument group
    options : sequence of (str, mapping)
        Each option's flag and the keywords of its ``add_argument`` call.
    """
    for flag, keywords in options:
        parser.add_argument(flag, **keywords)


def writable_directory(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """Create ``path`` if needed and prove that files can be written there.

    Raises
    ------
    CommandError
        ``path`` is a file, cannot be created, or is not writable.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CommandError(f"{option} {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise CommandError(f"{option} {out}: not writable ({exc.strerror or exc})") from None
    return out


def check_choices(values: Sequence[str], valid: Sequence[str], option: str) -> None:
    """Raise :class:`CommandError` naming the option and the valid values for unknown ones."""
    unknown = [v for v in values if v not in valid]
    if unknown:
        raise CommandError(
            f"{option}: unknown value(s) {', '.join(unknown)}; valid: {', '.join(valid)}"
        )
