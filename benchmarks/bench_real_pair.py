"""Logging throughput on the real pair: Qwen2.5-Coder 1.5B (target) and 0.5B (draft) Instruct,
Q4_K_M GGUF files dequantised by transformers, on MT-bench questions in the chat template.

Get the pair first (``python scripts/get_real_pair.py``, about 1.6 GB). The tokenizer (from the
target's GGUF file) and the two models are loaded once, each timed; then, for every batch size,
``otbound.capture.log_distributions`` logs ``--max-prompts`` questions (the first turn, chat
template applied) with ``--max-new-tokens`` steps each, EOS ignored, and steps per second are
reported (best of ``--repeats``; a step = sampling one token with the KV cache plus both models'
teacher-forced rows written to the dump; see ``bench_capture.py``). Run::

    python benchmarks/bench_real_pair.py [--batch-sizes 1,4,8] [--dtype float32] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
import transformers
from bench_capture import machine, time_run

from otbound import capture

ROOT = Path(__file__).resolve().parents[1]
PAIR_DIR = ROOT / "data" / "models" / "qwen2.5-coder"
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
T = TypeVar("T")


def timed(what: str, work: Callable[[], T]) -> T:
    """``work()``, printing how long it took."""
    start = time.perf_counter()
    result = work()
    print(f"{what}: {time.perf_counter() - start:.1f} s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair-dir", default=str(PAIR_DIR), help="where get_real_pair put it")
    parser.add_argument("--prompts", default=str(ROOT / "data/prompts/mt_bench.jsonl"))
    parser.add_argument("--max-prompts", type=int, default=8, help="questions per run")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="steps per question")
    parser.add_argument("--batch-sizes", default="1,4,8", help="comma-separated batch sizes")
    parser.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    parser.add_argument("--dtype", default="float32", choices=sorted(capture.MODEL_DTYPES))
    parser.add_argument("--store", default="full", help="'full' or 'topk:K'")
    parser.add_argument("--storage-dtype", default="float16", choices=capture.STORAGE_DTYPES)
    parser.add_argument("--repeats", type=int, default=1, help="repeats (best is kept)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    capture.quiet_transformers()
    pair = Path(args.pair_dir)
    target_path, draft_path = pair / TARGET, pair / DRAFT
    if not (target_path.is_file() and draft_path.is_file()):
        raise SystemExit(f"the pair is not in {pair}: run python scripts/get_real_pair.py")
    print("machine:", machine())
    tokenizer = timed("tokenizer (the target's GGUF)", lambda: capture.load_tokenizer(target_path))
    items = capture.read_prompts(
        args.prompts, tokenizer, max_prompts=args.max_prompts, chat_template=True
    )
    lengths = [len(p.input_ids) for p in items]
    target = timed(
        f"target {TARGET} ({args.dtype})",
        lambda: capture.load_model(target_path, args.dtype, args.device),
    )
    draft = timed(
        f"draft {DRAFT} ({args.dtype})",
        lambda: capture.load_model(draft_path, args.dtype, args.device),
    )
    device = next(target.parameters()).device
    print(
        f"prompts: {len(items)} MT-bench questions in the chat template, {min(lengths)} to "
        f"{max(lengths)} tokens; {args.max_new_tokens} new tokens each; model dtype {args.dtype}, "
        f"store {args.store} {args.storage_dtype}; transformers {transformers.__version__}"
    )
    print()
    print("| device | batch | steps | seconds | steps/s |")
    print("|---|---:|---:|---:|---:|")
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        steps, seconds = time_run(target, draft, items, batch, args)
        print(f"| {device} | {batch} | {steps} | {seconds:.2f} | {steps / seconds:.2f} |")


if __name__ == "__main__":
    main()
