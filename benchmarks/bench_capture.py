"""Logging throughput: steps written per second by ``otbound.capture.log_distributions``.

A step is one continuation token: its sampling (generator with the KV cache), both models'
teacher-forced rows and their conversion and writing to the dump. Model loading is not
timed. By default the pair is built from configs with random weights (a Llama-shaped target
and a one-layer draft over a realistic vocabulary, nothing downloaded); ``--target`` and
``--draft`` time real model directories instead. Runs on the CPU, and on CUDA when present.
On a CPU shared with other jobs, ``--threads 1`` avoids OpenMP oversubscription stalls.
EOS is ignored so every prompt gives ``--max-new-tokens`` steps. Run::

    python benchmarks/bench_capture.py [--vocab 32000] [--batch-sizes 1,8] [--devices cpu,cuda]
    python benchmarks/bench_capture.py --target DIR --draft DIR --dtype bfloat16
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from otbound import capture
from otbound.dumps import open_dump


def machine() -> str:
    """CPU, GPU and library versions, in one line."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        usable = os.cpu_count()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (
        f"{platform.platform()} | {platform.processor() or platform.machine()} | "
        f"CPUs: {os.cpu_count()} (usable: {usable}, torch threads: {torch.get_num_threads()}) | "
        f"GPU: {gpu} | Python {platform.python_version()} | torch {torch.__version__} | "
        f"transformers {transformers.__version__}"
    )


def random_pair(root: Path, vocab: int, hidden: int, layers: int) -> tuple[Path, Path]:
    """A Llama-shaped target (``layers`` layers) and a one-layer draft, random weights."""
    paths = []
    for name, depth, seed in (("target", layers, 0), ("draft", 1, 1)):
        config = transformers.LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=4 * hidden,
            num_hidden_layers=depth,
            num_attention_heads=max(1, hidden // 64),
            max_position_embeddings=4096,
        )
        torch.manual_seed(seed)
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(root / name)
        paths.append(root / name)
    return paths[0], paths[1]


def prompts(count: int, length: int, vocab: int) -> list[capture.Prompt]:
    """Random token-id prompts (ids from 3 up, away from the usual special tokens)."""
    rng = np.random.default_rng(0)
    return [
        capture.Prompt(i, tuple(int(t) for t in rng.integers(3, vocab, size=length)))
        for i in range(count)
    ]


def time_run(target, draft, items, batch: int, args: argparse.Namespace) -> tuple[int, float]:
    """Steps written and seconds taken (best of ``args.repeats``)."""
    best, steps = np.inf, 0
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            if target.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = capture.log_distributions(
                target,
                draft,
                items,
                Path(tmp) / "dump",
                max_new_tokens=args.max_new_tokens,
                batch_size=batch,
                store=args.store,
                storage_dtype=args.storage_dtype,
                stop_at_eos=False,
                progress=False,
            )
            best = min(best, time.perf_counter() - start)
            steps = open_dump(out).num_steps
    return steps, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None, help="target model directory")
    parser.add_argument("--draft", default=None, help="draft model directory")
    parser.add_argument("--vocab", type=int, default=32000, help="random pair: vocabulary")
    parser.add_argument("--hidden", type=int, default=256, help="random pair: hidden size")
    parser.add_argument("--layers", type=int, default=4, help="random pair: target layers")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per run")
    parser.add_argument("--prompt-tokens", type=int, default=32, help="tokens per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="steps per prompt")
    parser.add_argument("--batch-sizes", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--devices", default=None, help="default: cpu, and cuda when present")
    parser.add_argument("--dtype", default="float32", choices=sorted(capture.MODEL_DTYPES))
    parser.add_argument("--store", default="full", help="'full' or 'topk:K'")
    parser.add_argument("--storage-dtype", default=None, choices=capture.STORAGE_DTYPES)
    parser.add_argument("--repeats", type=int, default=1, help="repeats (best is kept)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    devices = args.devices.split(",") if args.devices else ["cpu"]
    if args.devices is None and torch.cuda.is_available():
        devices.append("cuda")
    batches = [int(b) for b in args.batch_sizes.split(",")]
    print("machine:", machine())
    with tempfile.TemporaryDirectory() as tmp:
        if args.target is None or args.draft is None:
            target_dir, draft_dir = random_pair(Path(tmp), args.vocab, args.hidden, args.layers)
            pair = (
                f"random Llama pair, V = {args.vocab}, hidden {args.hidden}, {args.layers}+1 layers"
            )
        else:
            target_dir, draft_dir = Path(args.target), Path(args.draft)
            pair = f"{target_dir.name} / {draft_dir.name}"
        print(
            f"models: {pair}; {args.prompts} prompts of {args.prompt_tokens} tokens, "
            f"{args.max_new_tokens} new tokens each; model dtype {args.dtype}, store {args.store}"
        )
        print()
        print("| device | batch | steps | seconds | steps/s |")
        print("|---|---:|---:|---:|---:|")
        for device in devices:
            target = capture.load_model(target_dir, args.dtype, device)
            draft = capture.load_model(draft_dir, args.dtype, device)
            vocab = capture.plan_vocabulary(target, draft).size
            items = prompts(args.prompts, args.prompt_tokens, vocab)
            for batch in batches:
                steps, seconds = time_run(target, draft, items, batch, args)
                print(f"| {device} | {batch} | {steps} | {seconds:.2f} | {steps / seconds:,.0f} |")
            del target, draft
            if device.startswith("cuda"):
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
