"""compute_bounds end to end on a large dump (a benchmark, not a test).

Run: ``python benchmarks/end_to_end.py [--steps 10000] [--vocab 32000] [--jobs 1,auto]``.

1. Writes (once, reused) an otbound dump of ``--steps`` steps of language-model-like float16
   logits over ``--vocab`` tokens, in shards of 1,024 steps (1.3 GB at the defaults).
2. Times the stages per step on one chunk of 256 steps (what a run processes at once):
   reading (safetensors, float16 to float32), processing ``p`` and ``q`` (softmax), ``α*``
   of each design, and the exact verifiers (``--mc-trials 0``).
3. Runs the whole analysis (``run_analysis``, n in {2, 4, 8}, designs iid and
   without_replacement, every verifier with an exact formula, figures included) once per
   ``--jobs`` value, each in a fresh process, and reports steps per second and the peak
   resident memory of the main process and of the largest worker.

Prints Markdown tables with the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_bounds import lm_like, machine

import otbound as ob
from otbound.analysis import AnalysisConfig, run_analysis
from otbound.bounds.sweep import optimal_acceptance_by_n
from otbound.dumps import DumpWriter, prepare_distributions

N = (2, 4, 8)
DESIGNS = ("iid", "without_replacement")
SHARD_STEPS = 1024


def make_dump(path: Path, steps: int, vocab: int) -> None:
    """The benchmark's dump (kept between runs when it already has the right size)."""
    if (path / "manifest.json").exists():
        manifest = json.loads((path / "manifest.json").read_text())
        if manifest["num_steps"] == steps and manifest["target_vocab_size"] == vocab:
            return
        raise SystemExit(f"{path} holds another dump: remove it or pass another --workdir")
    with DumpWriter(path, target_model="zipf", draft_model="noisy", dtype="float16") as writer:
        for start in range(0, steps, SHARD_STEPS):
            rows = min(SHARD_STEPS, steps - start)
            target, draft = lm_like(rows, vocab, seed=start)
            ids = np.arange(start, start + rows)
            writer.write_shard(target, draft, {"prompt_id": ids // 128, "position": ids % 128})


def config() -> AnalysisConfig:
    return AnalysisConfig(n=N, designs=DESIGNS, mc_trials=0)


def stages(path: Path) -> list[tuple[str, float]]:
    """Seconds per step of each stage, on one chunk of the first shard."""
    dump = ob.open_dump(path)
    start = time.perf_counter()
    shard = dump.read_shard(0)
    rows = slice(0, config().chunk_steps)  # what a run processes at once
    target = np.asarray(shard.target[rows], dtype=np.float32)
    draft = np.asarray(shard.draft[rows], dtype=np.float32)
    steps = target.shape[0]
    out = [("read the shard (float16 -> float32)", time.perf_counter() - start)]
    start = time.perf_counter()
    dist = prepare_distributions(target, draft)
    out.append(("p, q: checks and softmax", time.perf_counter() - start))
    for design in DESIGNS:
        start = time.perf_counter()
        for n in N:
            ob.optimal_acceptance(dist.target, dist.draft, n, design)
        out.append((f"α* {design}, n in {N}, one n at a time", time.perf_counter() - start))
        if ob.get_design(design).shared_sweep:  # what compare does: one sort for every n
            start = time.perf_counter()
            optimal_acceptance_by_n(dist.target, dist.draft, N, design)
            out.append((f"α* {design}, n in {N}, one sort", time.perf_counter() - start))
    sample = slice(0, 64)
    verifiers = config().verifier_names
    start = time.perf_counter()
    ob.compare(
        dist.target[sample], dist.draft[sample], n=N, verifiers=verifiers, designs=(), trials=0
    )
    per_step = (time.perf_counter() - start) / 64
    out.append((f"exact verifiers ({len(verifiers)}) with their α* (64 steps)", per_step * steps))
    return [(name, seconds / steps) for name, seconds in out]


def child(path: Path, jobs: int | str) -> None:
    """One whole run, in this fresh process; prints its numbers as JSON."""
    out = Path(tempfile.mkdtemp(prefix="otbound-e2e-out-"))
    start = time.perf_counter()
    result = run_analysis(ob.open_dump(path), config(), out, jobs=jobs, progress=False)
    seconds = time.perf_counter() - start
    assert result.ok, result.failures
    print(json.dumps({"seconds": seconds, "steps": result.steps}))


def _rss_mb(pid: int) -> float:
    """Resident memory of one process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
            kids = [int(k) for t in tasks for k in (t / "children").read_text().split()]
        except OSError:
            kids = []
        found += kids
        todo += kids
    return found


def measured_run(command: list[str]) -> tuple[dict, float, float]:
    """Run ``command``; its JSON result, and the peak memory (MB) of its main process and of
    the whole process tree (main + workers), sampled every 50 ms from /proc."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    peak_main = peak_tree = 0.0
    while proc.poll() is None:
        main = _rss_mb(proc.pid)
        tree = main + sum(_rss_mb(k) for k in _descendants(proc.pid))
        peak_main, peak_tree = max(peak_main, main), max(peak_tree, tree)
        time.sleep(0.05)
    output = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        raise SystemExit(f"the run failed (exit {proc.returncode})")
    return json.loads(output.strip().splitlines()[-1]), peak_main, peak_tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--jobs", default="1,auto", help="processes per run: integers or auto")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "otbound-e2e"))
    parser.add_argument("--child-jobs", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    path = Path(args.workdir) / f"dump-{args.steps}x{args.vocab}"
    if args.child_jobs is not None:
        child(path, args.child_jobs if args.child_jobs == "auto" else int(args.child_jobs))
        return
    start = time.perf_counter()
    make_dump(path, args.steps, args.vocab)
    size = sum(f.stat().st_size for f in path.iterdir()) / 2**30
    print(f"Machine: {machine()}")
    print(
        f"Dump: {args.steps:,} steps, V = {args.vocab:,}, float16, {size:.2f} GiB "
        f"(ready in {time.perf_counter() - start:.0f} s)\n"
    )
    print(f"### Stages, on one chunk of {config().chunk_steps} steps\n")
    print("| stage | ms per step |\n|---|---|")
    for name, seconds in stages(path):
        print(f"| {name} | {1000 * seconds:.2f} |")
    print("\n### Whole runs (n in {2, 4, 8}; iid and without_replacement; exact verifiers)\n")
    print(
        "| jobs | seconds | steps per second | peak memory, main process (MB) | "
        "peak memory, all processes (MB) |"
    )
    print("|---|---|---|---|---|")
    for jobs in args.jobs.split(","):
        r, main_mb, tree_mb = measured_run(
            [
                sys.executable,
                __file__,
                "--steps",
                str(args.steps),
                "--vocab",
                str(args.vocab),
                "--workdir",
                args.workdir,
                "--child-jobs",
                jobs,
            ]
        )
        print(
            f"| {jobs} | {r['seconds']:.0f} | {r['steps'] / r['seconds']:.1f} | "
            f"{main_mb:.0f} | {tree_mb:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
