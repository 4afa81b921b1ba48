"""Wall time of ``import otbound`` in a fresh interpreter (a benchmark, not a test).

Run: ``python benchmarks/bench_import.py [--repeat N] [--against DIR]``. Each statement runs
in a new ``python -c`` process; the best of ``N`` is printed next to the bare interpreter and
``import numpy`` alone, and the goal (``import otbound`` under 0.5 s). ``--against DIR`` also
times ``import otbound`` from another source tree, e.g. an earlier commit's
(``git archive COMMIT otbound | tar -x -C DIR``). The ratios are measured in one run, on one
machine. ``-X importtime`` shows where the time goes::

    python -X importtime -c "import otbound" 2>&1 | sort -t'|' -k2 -n | tail
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_bounds import machine

#: Goal for ``import otbound``, seconds of wall time.
GOAL = 0.5

#: What is timed: label and the statement run by ``python -c``.
STATEMENTS = (
    ("python -c pass", "pass"),
    ("import numpy", "import numpy"),
    ("import otbound", "import otbound"),
    ("import otbound; otbound.DESIGNS", "import otbound; otbound.DESIGNS"),
    ("from otbound import compare", "from otbound import compare"),
)


def fresh_import_time(statement: str, repeat: int, source: Path | None = None) -> float:
    """Best wall time, in seconds, of ``python -c statement`` over ``repeat`` fresh processes
    (with ``source`` first on the path, where given)."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, env=env, cwd=source)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="fresh processes per statement")
    parser.add_argument(
        "--against", type=Path, help="also time `import otbound` from this source tree"
    )
    args = parser.parse_args()
    print(f"Machine: {machine()}")
    print(f"\nBest of {args.repeat} fresh processes (ratio measured in one run):\n")
    print("| statement | wall time (s) | / import numpy |")
    print("|---|---:|---:|")
    times = {label: fresh_import_time(code, args.repeat) for label, code in STATEMENTS}
    if args.against is not None:
        source = args.against.resolve()
        code = f"import otbound; assert otbound.__file__.startswith({str(source)!r})"
        times[f"import otbound ({source})"] = fresh_import_time(code, args.repeat, source)
    for label, seconds in times.items():
        print(f"| `{label}` | {seconds:.3f} | {seconds / times['import numpy']:.2f} |")
    verdict = "met" if times["import otbound"] < GOAL else "NOT met"
    print(f"\n`import otbound`: {times['import otbound']:.3f} s; goal < {GOAL} s: {verdict}")


if __name__ == "__main__":
    main()
