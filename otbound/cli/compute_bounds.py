"""``compute_bounds``: the optimal acceptance rate and every verifier's acceptance on a dump.

    python scripts/compute_bounds.py [DUMP] --n 2,4 --design iid,without_replacement --out DIR

DUMP is an otbound dump directory or one ``.safetensors``/``.npz``/``.npy``/``.pt`` file
(default: the sample in ``data/sample``). DIR gets ``steps.parquet``, ``summary.csv`` (and
``.parquet``), ``gap_histogram.csv``, ``skipped.csv`` (and ``.parquet``: the cells without a
row, and why), PNG figures and ``run.json``; a table is printed.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from otbound.analysis import (
    DEFAULT_N,
    DUMP_DESIGNS,
    SKIPPED_FILE,
    AnalysisConfig,
    AnalysisError,
    RunResult,
    check_device,
    run_analysis,
)
from otbound.bounds.intervals import INTERVAL_DESIGNS
from otbound.cli._common import (
    EXIT_FAILURE,
    CommandError,
    HelpFormatter,
    OneLineParser,
    check_choices,
    list_option,
    run_command,
    writable_directory,
)
from otbound.dumps import VALUES_CHOICES, Dump, describe_steps, open_dump
from otbound.verifiers import VERIFIERS

PROG = "compute_bounds"

#: The dump analysed when no DUMP is given: the sample shipped with the source tree.
SAMPLE_DUMP = Path(__file__).resolve().parents[2] / "data" / "sample"

#: Library wording of options -> the command line's.
_OPTION_NAMES = {
    "skip_bad_steps=True": "--skip-bad-steps",
    "truncate_vocab=True": "--truncate-vocab",
    "the resume option": "--resume",
    "jobs=N": "--jobs N",
    "chunk_steps=N": "--chunk-steps N",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The argument parser (see ``--help``); ``prog`` names the command in messages."""
    parser = OneLineParser(
        prog=prog,
        description=(
            "Optimal acceptance rate α* of each draft design and each verifier's acceptance, "
            "for every step of a dump of target/draft logits; tables, figures and a summary."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "dump",
        nargs="?",
        default=None,
        help="an otbound dump directory or a .safetensors/.npz/.npy/.pt file "
        f"(default: the sample, {SAMPLE_DUMP})",
    )
    _add_computed_options(parser)
    _add_run_options(parser)
    _add_single_file_options(parser.add_argument_group("single-file dumps"))
    parser.add_argument(
        "--chunk-steps", type=int, default=256, help="steps processed at once (memory)"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="compute with torch on this device (cuda, cuda:1, cpu; needs otbound[torch]), in "
        "float64: α* of every design but per_slot, and the exact acceptance of single, rrs, "
        "rrs_without_replacement (n <= 2), kseq, spechub, greedy, topk and gls, a batch of "
        "steps at a time; the rest with numpy (default: everything with numpy)",
    )
    parser.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    return parser


def _add_computed_options(parser: argparse.ArgumentParser) -> None:
    """What a run computes: drafts, designs, verifiers, processing, Monte Carlo, steps."""
    ints, floats, names = list_option(int, "--n"), list_option(float, "--temperature"), str
    parser.add_argument("--n", type=ints, default=list(DEFAULT_N), help="numbers of drafts")
    parser.add_argument(
        "--design",
        type=list_option(names, "--design"),
        default=None,
        help=f"draft designs, from {', '.join(DUMP_DESIGNS)} (default: all; for top-k dumps: "
        f"{', '.join(INTERVAL_DESIGNS)})",
    )
    parser.add_argument(
        "--verifiers",
        type=list_option(names, "--verifiers"),
        default=None,
        help=f"verifiers, from {', '.join(VERIFIERS)}, or 'none' (default: all whose design is "
        "chosen)",
    )
    parser.add_argument(
        "--temperature",
        type=floats,
        default=[1.0],
        help="temperatures applied identically to both models (0 = argmax); several make a sweep",
    )
    parser.add_argument("--top-k", type=int, default=None, help="top-k filter on both models")
    parser.add_argument("--top-p", type=float, default=None, help="top-p filter on both models")
    parser.add_argument(
        "--mc-trials",
        type=int,
        default=20_000,
        help="most Monte Carlo trials per step for verifiers without an exact formula; each "
        "step's estimate is sized for a standard error of 0.005 (Rao-Blackwellised: a pilot "
        "of 64 trials, then at least 256) and this caps it (0: skip such rows)",
    )
    parser.add_argument("--seed", type=int, default=0, help="Monte Carlo seed")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        metavar="N",
        help="analyse only the dump's first N steps (a quick look; default: all)",
    )


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """Where the results go, how the run is spread, resumed, and what it does with bad rows."""
    parser.add_argument("--out", default="out/bounds", help="output directory")
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default="auto",
        metavar="N|auto",
        help="local processes, this one included (default: auto, one per core, as many as "
        "the memory and the dump's size call for; 1: no worker processes)",
    )
    parser.add_argument(
        "--dask",
        metavar="ADDRESS",
        default=None,
        help="run the shards on this dask.distributed scheduler (needs otbound[dask])",
    )
    parser.add_argument("--resume", action="store_true", help="skip shards already finished")
    parser.add_argument(
        "--skip-bad-steps",
        action="store_true",
        help="drop steps with NaN or infinite logits (counted) instead of failing",
    )
    parser.add_argument(
        "--truncate-vocab",
        action="store_true",
        help="when the two vocabularies differ, cut both to the smaller one (with a warning)",
    )


def _add_single_file_options(group: argparse._ArgumentGroup) -> None:
    """How a single file (``.safetensors``, ``.npz``, ``.npy``, ``.pt``) is read."""
    group.add_argument("--target-key", default=None, help="name of the target's array")
    group.add_argument("--draft-key", default=None, help="name of the draft's array")
    group.add_argument(
        "--values",
        choices=VALUES_CHOICES,
        default="auto",
        help="what the full rows hold: auto (probabilities for arrays named *_probs, logits "
        "otherwise), logits, or probs; rows read as logits that are all >= 0 and sum to 1 "
        "are refused",
    )
    group.add_argument(
        "--probs", action="store_true", default=None, help="the same as --values probs"
    )
    group.add_argument(
        "--shard-steps",
        type=int,
        default=1024,
        help="split a single file into shards of this many steps",
    )


def _jobs(text: str) -> int | str:
    """``--jobs``: ``auto`` or an integer (checked to be at least 1 in :func:`main`)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None


def _positive(value: int, option: str) -> int:
    if value < 1:
        raise CommandError(f"{option} must be at least 1, got {value}")
    return value


def open_input(args: argparse.Namespace) -> Dump:
    """The dump named on the command line (or the sample)."""
    path = Path(args.dump) if args.dump is not None else SAMPLE_DUMP
    if args.dump is None and not path.exists():
        raise CommandError(
            f"no DUMP given and the sample dump is missing ({path}): the sample ships with the "
            "source tree (data/sample in a clone of otbound), not with the installed package; "
            "pass the path of a dump"
        )
    return open_dump(
        path,
        target_key=args.target_key,
        draft_key=args.draft_key,
        values=args.values,
        probs=args.probs,
        shard_steps=_positive(args.shard_steps, "--shard-steps"),
    )


def make_config(args: argparse.Namespace, dump: Dump) -> AnalysisConfig:
    """The run's settings from the arguments, checked against the dump."""
    topk = dump.topk is not None
    designs = args.design or list(INTERVAL_DESIGNS if topk else DUMP_DESIGNS)
    check_choices(designs, DUMP_DESIGNS, "--design")
    verifiers = args.verifiers
    if verifiers == ["none"]:
        verifiers = []
    elif verifiers is not None:
        check_choices(verifiers, VERIFIERS, "--verifiers")
    if topk:
        _check_topk(dump, designs, verifiers, args.temperature)
        verifiers = []
    for name in ("--mc-trials", "--seed"):
        value = getattr(args, name[2:].replace("-", "_"))
        if value < 0:
            raise CommandError(f"{name} must be at least 0, got {value}")
    width = dump.vocab_size
    if width is not None and dump.target_vocab_size != dump.draft_vocab_size:
        if not args.truncate_vocab:
            raise CommandError(
                f"vocabulary mismatch: the target has {dump.target_vocab_size} tokens and the "
                f"draft {dump.draft_vocab_size}; pass --truncate-vocab to cut both to the "
                f"first {width}"
            )
        warnings.warn(
            f"vocabularies differ ({dump.target_vocab_size} and {dump.draft_vocab_size} "
            f"tokens): both cut to the first {width}",
            UserWarning,
            stacklevel=2,
        )
    try:
        check_device(args.device)
    except ValueError as exc:
        raise CommandError(f"--{exc}") from None
    too_many = [k for k in args.n if width is not None and k > width]
    if too_many:
        raise CommandError(
            f"--n {','.join(map(str, too_many))}: more drafts than the vocabulary has tokens "
            f"({width})"
        )
    try:
        return AnalysisConfig(
            n=tuple(args.n),
            designs=tuple(designs),
            verifiers=None if verifiers is None else tuple(verifiers),
            temperatures=tuple(args.temperature),
            top_k=args.top_k,
            top_p=args.top_p,
            mc_trials=args.mc_trials,
            seed=args.seed,
            skip_bad_steps=args.skip_bad_steps,
            truncate_vocab=args.truncate_vocab,
            max_steps=None if args.max_steps is None else _positive(args.max_steps, "--max-steps"),
            chunk_steps=_positive(args.chunk_steps, "--chunk-steps"),
            device=args.device,
        )
    except ValueError as exc:
        text = str(exc).replace("top_k", "--top-k").replace("top_p", "--top-p")
        raise CommandError(text) from None


def _check_topk(
    dump: Dump, designs: list[str], verifiers: list[str] | None, temperatures: list[float]
) -> None:
    """Refuse what cannot be computed exactly or certified on truncated (top-k) rows."""
    k = dump.topk
    uncertified = [d for d in designs if d not in INTERVAL_DESIGNS]
    if uncertified:
        raise CommandError(
            f"the dump holds top-{k} rows: no certified interval for design(s) "
            f"{', '.join(uncertified)} (only {', '.join(INTERVAL_DESIGNS)}); dump full rows"
        )
    if verifiers:
        raise CommandError(
            f"the dump holds top-{k} rows: verifiers need full distributions; pass "
            "--verifiers none or dump full rows"
        )
    inexact = [t for t in temperatures if t not in (0.0, 1.0)]
    if inexact:
        raise CommandError(
            f"the dump holds top-{k} rows: temperature {', '.join(f'{t:g}' for t in inexact)} "
            "cannot be applied exactly (the tail's shape is unknown); use 1 or 0, or dump full "
            "rows"
        )


def format_table(summary: pd.DataFrame, steps: int | None = None) -> str:
    """The summary as a text table: mean acceptance per (design, verifier) and n.

    Parameters
    ----------
    summary : pandas.DataFrame
        The run's summary (:func:`otbound.analysis.summarise`).
    steps : int, optional
        Steps analysed per temperature (default: the most steps of a cell). A cell over fewer
        steps (cells skipped where the design or the verifier does not apply) shows its own
        count, ``(k steps)``.

    Returns
    -------
    str
    """
    blocks = []
    for temperature, part in summary.groupby("temperature", sort=True):
        total = int(part["steps"].max()) if steps is None else steps
        cell = part.apply(_cell, axis=1) + [
            "" if k == total else f" ({k} steps)" for k in part["steps"]
        ]
        frame = part.assign(cell=cell, verifier=part["verifier"].replace({"bound": "α* bound"}))
        table = frame.pivot_table(
            index=["design", "verifier"], columns="n", values="cell", aggfunc="first", sort=False
        )
        table.columns = [f"n={k}" for k in table.columns]
        fewer = "; (k steps): a cell over fewer" if (part["steps"] != total).any() else ""
        blocks.append(
            f"temperature {temperature:g} ({total} steps; mean acceptance ± 95% interval"
            f"{fewer})\n" + table.fillna("").to_string()
        )
    return "\n\n".join(blocks)


def _cell(row: pd.Series) -> str:
    value, lo, hi = row["acceptance"], row["acceptance_ci_low"], row["acceptance_ci_high"]
    if row["verifier"] == "bound" and pd.isna(value):
        return f"[{row['alpha_star_lower']:.3f}, {row['alpha_star_upper']:.3f}]"
    if pd.isna(lo) or pd.isna(hi):
        return f"{value:.3f}"
    return f"{value:.3f} ± {max(hi - value, value - lo):.3f}"


def _cli_words(text: str) -> str:
    for library, option in _OPTION_NAMES.items():
        text = text.replace(library, option)
    return text


def skipped_cells_line(result: RunResult, prog: str = PROG) -> str | None:
    """One line counting the cells without a row, by reason (None when there are none)."""
    cells = result.skipped_cells
    if cells is None or cells.empty:
        return None
    reasons = ", ".join(f"{k:,} {reason}" for reason, k in cells["reason"].value_counts().items())
    several = result.summary is not None and result.summary["temperature"].nunique() > 1
    grid = "(step, temperature, n, design, verifier)" if several else "(step, n, design, verifier)"
    return (
        f"{prog}: skipped {len(cells):,} of {result.cells:,} {grid} cells: {reasons} "
        f"(listed in {SKIPPED_FILE})"
    )


def report(result: RunResult, quiet: bool, prog: str = PROG) -> int:
    """Print the outcome; the exit status."""
    if result.skipped.size:
        print(
            f"{prog}: skipped {result.skipped.size} bad step(s) (NaN or infinite logits): "
            f"{describe_steps(result.skipped)}",
            file=sys.stderr,
        )
    if result.failures:
        bad = "; ".join(f"{k}: {_cli_words(v)}" for k, v in result.failures.items())
        print(
            f"{prog}: error: {len(result.failures)} shard(s) failed ({bad}); the other shards' "
            f"results are kept in {result.out / 'shards'}: fix the dump and rerun with --resume",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    line = skipped_cells_line(result, prog)
    if line is not None:
        print(line, file=sys.stderr)
    if not quiet and result.summary is not None:
        print(format_table(result.summary, result.steps - result.skipped.size))
        print()
    written = ", ".join(p.name for p in result.files)
    print(f"wrote {written} to {result.out}")
    return 0


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run ``compute_bounds`` with ``argv`` (default: ``sys.argv[1:]``); the exit status.

    ``prog`` names the command in its help and messages (``otbound bounds`` runs it too).
    """
    args = build_parser(prog).parse_args(argv)

    def work() -> int:
        dump = open_input(args)
        config = make_config(args, dump)
        out = writable_directory(args.out)
        jobs = args.jobs if args.jobs == "auto" else _positive(args.jobs, "--jobs")
        try:
            result = run_analysis(
                dump,
                config,
                out,
                jobs=jobs,
                dask=args.dask,
                resume=args.resume,
                progress=not args.quiet,
                figures=not args.no_figures,
            )
        except ValueError as exc:
            raise CommandError(_cli_words(str(exc))) from None
        except AnalysisError as exc:  # a bug, not bad input: the traceback, then one line
            print(exc.traceback, end="", file=sys.stderr)
            raise CommandError(_cli_words(str(exc))) from None
        return report(result, args.quiet, prog)

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
