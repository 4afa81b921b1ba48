"""``otbound audit``: is a verification rule lossless on a dump, and how does its acceptance
compare with ``α*``.

    otbound audit [DUMP] --rule NAME|FILE.py:FUNCTION --temperature 1,0.6 --top-k 50 --top-p 0.9

DUMP is an otbound dump directory or one ``.safetensors``/``.npz``/``.npy``/``.pt`` file
(default: the sample in ``data/sample``). ``--rule`` names an engine rule
(:data:`otbound.engines.ENGINE_RULES`), a verifier (:data:`otbound.VERIFIERS`), or a function
``verify(drafts, p, q, rng) -> token`` in a Python file; several ``--rule`` (or a comma list)
audit several rules on the same steps (default: every engine rule). ``--out DIR`` gets
``audit.csv`` and ``audit.json`` (one row per rule and temperature) and ``steps.csv`` (one
row per rule, temperature and step); a table is printed, then the steps that deviate most for
each lossy rule.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from otbound._files import atomic_output, write_json
from otbound.cli._common import (
    CommandError,
    HelpFormatter,
    OneLineParser,
    list_option,
    run_command,
    writable_directory,
)

PROG = "audit"

#: Where each temperature's finished results are kept for ``--resume``.
PARTS = "parts"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The argument parser (see ``--help``)."""
    from otbound.engines import CHAIN_RULES, ENGINE_RULES

    parser = OneLineParser(
        prog=prog,
        description=(
            "Audit verification rules on a dump: lossless or not (exact law, or a chi-square "
            "test with its power), total variation from the target, acceptance beside α*."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "dump", nargs="?", default=None, help="a dump directory or file (default: the sample)"
    )
    parser.add_argument(
        "--rule",
        action="append",
        default=None,
        metavar="NAME|FILE.py:FUNCTION",
        help=f"a rule: an engine rule ({', '.join(ENGINE_RULES + CHAIN_RULES)}), a verifier "
        "name, or a function verify(drafts, p, q, rng) -> token in a file; repeat or "
        "comma-separate (default: every engine rule; the block rules on chains of --gamma "
        "drafts from consecutive steps)",
    )
    parser.add_argument("--n", type=int, default=None, help="drafts (default: each rule's own)")
    parser.add_argument("--gamma", type=int, default=3, help="drafts per chain of the block rules")
    parser.add_argument("--design", default=None, help="draft design (default: each rule's own)")
    parser.add_argument(
        "--temperature",
        type=list_option(float, "--temperature"),
        default=[1.0],
        help="temperatures (several: one block each)",
    )
    parser.add_argument("--top-k", type=int, default=None, help="top-k of the request")
    parser.add_argument("--top-p", type=float, default=None, help="top-p of the request")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N", help="first N steps")
    parser.add_argument(
        "--trials", type=int, default=200_000, help="Monte Carlo trials per step (inexact laws)"
    )
    parser.add_argument("--seed", type=int, default=0, help="Monte Carlo seed")
    parser.add_argument(
        "--significance", type=float, default=1e-5, help="level of the chi-square tests"
    )
    parser.add_argument(
        "--power", type=float, default=0.99, help="power at which the detectable TV is stated"
    )
    parser.add_argument(
        "--monte-carlo", action="store_true", help="simulate every rule, even with an exact law"
    )
    parser.add_argument("--out", default="out/audit", help="output directory")
    parser.add_argument("--resume", action="store_true", help="keep temperatures already done")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    return parser


def load_rule(text: str) -> object:
    """A rule from ``--rule``: a name, or ``FILE.py:FUNCTION`` (the file imported)."""
    if ":" not in text or not text.split(":", 1)[0].endswith(".py"):
        return text
    file, attribute = text.rsplit(":", 1)
    path = Path(file)
    if not path.is_file():
        raise CommandError(f"--rule {text}: no file {path}")
    spec = importlib.util.spec_from_file_location(f"otbound_rule_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise CommandError(f"--rule {text}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: any error is theirs, reported in one line
        raise CommandError(
            f"--rule {text}: importing {path} failed: {type(exc).__name__}: {exc}"
        ) from None
    if not hasattr(module, attribute):
        raise CommandError(f"--rule {text}: {path} defines no {attribute!r}")
    return getattr(module, attribute)


def rules_of(args: argparse.Namespace) -> list[object]:
    """The rules named by ``--rule`` (default: every engine rule)."""
    from otbound.engines import CHAIN_RULES, ENGINE_RULES

    texts = [t.strip() for entry in (args.rule or []) for t in entry.split(",") if t.strip()]
    return [load_rule(t) for t in texts] if texts else [*ENGINE_RULES, *CHAIN_RULES]


def settings(args: argparse.Namespace, temperature: float) -> dict[str, Any]:
    """What a temperature's results depend on (``--resume`` keeps a part only if equal)."""
    return {
        "dump": str(args.dump),
        "rules": args.rule,
        "n": args.n,
        "gamma": args.gamma,
        "design": args.design,
        "temperature": temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "max_steps": args.max_steps,
        "trials": args.trials,
        "seed": args.seed,
        "significance": args.significance,
        "power": args.power,
        "monte_carlo": args.monte_carlo,
    }


def run_temperature(
    args: argparse.Namespace, rules: list[object], temperature: float, out: Path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One temperature's summary and step rows, from a finished part or computed."""
    from tqdm.auto import tqdm

    from otbound.audits import audit_rules

    part = out / PARTS / f"temperature-{temperature:g}.json"
    wanted = settings(args, temperature)
    if args.resume and part.exists():
        record = json.loads(part.read_text(encoding="utf-8"))
        if record.get("settings") == wanted:
            return pd.DataFrame(record["summary"]), pd.DataFrame(record["steps"])
    from otbound.audits._api import open_audit_dump

    dump = open_audit_dump(args.dump)
    total = dump.num_steps if args.max_steps is None else min(args.max_steps, dump.num_steps)
    with tqdm(
        total=total,
        unit="step",
        desc=f"audit T={temperature:g}",
        disable=args.quiet,
        file=sys.stderr,
    ) as bar:
        results = audit_rules(
            rules,
            dump,
            args.n,
            args.design,
            temperature=temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            max_steps=args.max_steps,
            trials=args.trials,
            seed=args.seed,
            significance=args.significance,
            power=args.power,
            exact=not args.monte_carlo,
            progress=bar.update,
            gamma=args.gamma,
        )
    summary = pd.DataFrame([{"temperature": temperature, **r.summary()} for r in results])
    steps = pd.concat(
        [r.steps.assign(rule=r.rule, temperature=temperature) for r in results], ignore_index=True
    )
    part.parent.mkdir(parents=True, exist_ok=True)
    write_json(
        part,
        {
            "settings": wanted,
            "summary": summary.to_dict(orient="records"),
            "steps": steps.to_dict(orient="records"),
        },
    )
    return summary, steps


def format_table(summary: pd.DataFrame) -> str:
    """The printed table: one line per rule and temperature."""
    view = pd.DataFrame(
        {
            "T": summary["temperature"].map("{:g}".format),
            "rule": summary["rule"],
            "design": summary["design"] + " n=" + summary["n"].astype(str),
            "claims": summary["declared_lossless"]
            .map({True: "lossless", False: "lossy"})
            .fillna(""),
            "measured": summary["lossless"].map({True: "lossless", False: "LOSSY"}),
            "TV": summary["tv"].map("{:.4f}".format),
            "acceptance": summary["acceptance"].map("{:.4f}".format),
            "α*": summary["alpha_star"].map("{:.4f}".format),
            "above α*": summary["above_alpha_star"].astype(str)
            + "/"
            + summary["steps"].astype(str),
        }
    )
    return str(view.to_string(index=False))


def worst_lines(summary: pd.DataFrame, steps: pd.DataFrame, count: int = 3) -> list[str]:
    """For each lossy rule, the steps whose output deviates most."""
    lines = []
    for _, row in summary.loc[~summary["lossless"]].iterrows():
        mine = steps[(steps["rule"] == row["rule"]) & (steps["temperature"] == row["temperature"])]
        top = mine.sort_values("tv", ascending=False, kind="stable").head(count)
        cells = ", ".join(
            f"step {int(s)} TV {tv:.3f}" for s, tv in zip(top["step"], top["tv"], strict=True)
        )
        lines.append(f"  {row['rule']} (T={row['temperature']:g}): {cells}")
    return lines


def write_outputs(summary: pd.DataFrame, steps: pd.DataFrame, out: Path) -> list[Path]:
    """``audit.csv``, ``audit.json`` and ``steps.csv``, each written atomically."""
    files = [out / "audit.csv", out / "audit.json", out / "steps.csv"]
    with atomic_output(files[0]) as tmp:
        summary.to_csv(tmp, index=False)
    write_json(files[1], {"rules": summary.to_dict(orient="records")})
    with atomic_output(files[2]) as tmp:
        steps.to_csv(tmp, index=False)
    return files


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run ``audit`` with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    args = build_parser(prog).parse_args(argv)

    def work() -> int:
        for option in ("max_steps", "trials", "gamma"):
            value = getattr(args, option)
            if value is not None and value < 1:
                raise CommandError(f"--{option.replace('_', '-')} must be at least 1, got {value}")
        rules = rules_of(args)
        out = writable_directory(args.out)
        blocks = [run_temperature(args, rules, t, out) for t in args.temperature]
        summary = pd.concat([b[0] for b in blocks], ignore_index=True)
        steps = pd.concat([b[1] for b in blocks], ignore_index=True)
        files = write_outputs(summary, steps, out)
        if not args.quiet:
            print(format_table(summary))
            worst = worst_lines(summary, steps)
            if worst:
                print("\nsteps that deviate most:")
                print("\n".join(worst))
            print()
        print(f"wrote {', '.join(f.name for f in files)} to {out}")
        return 0

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
