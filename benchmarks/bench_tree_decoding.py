"""Tree decoding throughput with and without the key/value cache, against prompt length.

Times :func:`otbound.tree_decoding.decode_tree` (draft growth, the target's tree pass and the
walk; no prediction) on the sample pair in ``data/models`` by default, with prompts of random
token ids of each length in ``--prompt-tokens``, for the cached scorer (a call feeds the tokens
committed since the last call plus the tree) and the plain one (every call re-reads each
prefix). Both runs use the same seed and give the same tokens; the table reports target calls
per second, generated tokens per second and the speed-up. Runs on the CPU, and on CUDA when
present. Run::

    python benchmarks/bench_tree_decoding.py [--prompt-tokens 32,128,200] [--tree binary:3]
    python benchmarks/bench_tree_decoding.py --target DIR --draft DIR --devices cuda
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from bench_capture import machine

from otbound import capture, get_verifier
from otbound.tree_decoding import TreeLayout, decode_tree, parse_trees

ROOT = Path(__file__).resolve().parents[1]


def time_decoding(target, draft, prompts, layout, cached: bool, args) -> tuple[int, int, float]:
    """``(target calls, tokens, seconds)`` of one decoding run (best of ``--repeats``)."""
    best = None
    for _ in range(args.repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        records, _ = decode_tree(
            target,
            draft,
            prompts,
            layout,
            get_verifier(args.verifier),
            np.random.default_rng(0),
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            predict=False,
            kv_cache=cached,
        )
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if best is None or seconds < best[2]:
            best = (len(records), sum(int(r["tokens"]) for r in records), seconds)
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=str(ROOT / "data/models/target"))
    parser.add_argument("--draft", default=str(ROOT / "data/models/draft"))
    parser.add_argument("--prompt-tokens", default="32,128,200", help="comma-separated lengths")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per run")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tree", default="binary:3", help="one tree, as in simulate_trees")
    parser.add_argument("--verifier", default="rrs")
    parser.add_argument("--devices", default=None, help="default: cpu, and cuda when present")
    parser.add_argument("--repeats", type=int, default=1, help="repeats (best is kept)")
    args = parser.parse_args()
    devices = args.devices.split(",") if args.devices else ["cpu"]
    if args.devices is None and torch.cuda.is_available():
        devices.append("cuda")
    (spec,) = parse_trees(args.tree)
    layout = TreeLayout.from_paths(spec.as_lists())
    capture.quiet_transformers()
    print("machine:", machine())
    print(
        f"pair: {args.target} / {args.draft}; tree {spec.name} ({spec.nodes} nodes); "
        f"{args.verifier}; {args.prompts} prompts x {args.max_new_tokens} new tokens, batch "
        f"{args.batch_size}; best of {args.repeats}"
    )
    print()
    print("| device | prompt tokens | cache | calls | seconds | calls/s | tokens/s | speed-up |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for device in devices:
        target = capture.load_model(args.target, "float32", device)
        draft = capture.load_model(args.draft, "float32", device)
        vocab = min(target.config.vocab_size, draft.config.vocab_size)
        for length in (int(x) for x in args.prompt_tokens.split(",")):
            rng = np.random.default_rng(length)
            ids = rng.integers(3, vocab, size=(args.prompts, length))
            prompts = [(i, row.tolist()) for i, row in enumerate(ids)]
            plain = time_decoding(target, draft, prompts, layout, False, args)
            cached = time_decoding(target, draft, prompts, layout, True, args)
            for name, (calls, tokens, seconds) in (("yes", cached), ("no", plain)):
                ratio = f"{plain[2] / cached[2]:.2f}x" if name == "yes" else ""
                print(
                    f"| {device} | {length} | {name} | {calls} | {seconds:.2f} | "
                    f"{calls / seconds:.1f} | {tokens / seconds:.1f} | {ratio} |"
                )


if __name__ == "__main__":
    main()
