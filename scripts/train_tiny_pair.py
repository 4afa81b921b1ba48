r"""Train a tiny draft/target Llama pair from scratch on CPU, on OpenWebText Llama-2 tokens.

The pair exists to produce *real* next-token distributions ``p`` (target) and ``q`` (draft)
for the bounds, offline and in minutes. Both models share a compacted vocabulary of
``V = 8192`` tokens, so that a dump of full rows stays small (two models x steps x V float16
values: 300 steps are about 9.4 MB).

Vocabulary
----------
Compact ids ``0, 1, 2`` are Llama-2's ``<unk>``, ``<s>`` (BOS) and ``</s>`` (EOS); compact ids
``3 .. 8191`` are the 8189 most frequent other Llama-2 ids of the *training* rows (ties to the
lower Llama-2 id). Every other Llama-2 id maps to ``<unk>`` (compact id 0). The map is saved as
``OUT/vocab.json`` (``compact_to_llama``; the reverse rule is "index in that list, else
``unk_id``"); :func:`llama_to_compact` applies it.

Data
----
``data/corpus/openwebtext_llama2_tokens.npy`` (3769 rows of 144 tokens, BOS first): a fixed
permutation (seed 1234, independent of ``--seed``) puts 200 rows aside for validation; the
rest train both models. ``data/corpus/c4_small_llama2_tokens.jsonl`` is never trained on: it
is mapped to compact ids and written to ``data/prompts/c4_heldout.jsonl`` (held-out prompts)
and used for the acceptance check.

Training
--------
AdamW (betas 0.9/0.95, weight decay 0.1), linear warm-up then cosine decay to 10 % of the peak
rate, batch 32 x 144 tokens, no dropout, float32 (saved as float16), seeded and
deterministic (``torch.use_deterministic_algorithms``). The number of steps is
``min(--max-steps, --epochs worth of steps, what --max-minutes allows)``. The last is estimated
from the speed so far at a few points of the first half of the budget (5, 15, 30 and 45 %: the
machine this ran on is shared, its speed varies) and the cosine's length is re-planned there;
the time budget remains a hard stop. The warm-up length is fixed from the step cap. The plan
(``[[from_step, total_steps], ...]``) and the step reached are saved in ``training.json``
beside each model; ``--plan`` and ``--stop-after`` with the same seed replay it exactly (the
``reproduce`` line there). Bit-identical results assume the same torch build and thread count.

Usage
-----
::

    nice -n 19 python scripts/train_tiny_pair.py --out data/models --max-minutes 30 --seed 0
    python scripts/train_tiny_pair.py --out /tmp/tiny --max-minutes 0.5 --which draft
    python scripts/train_tiny_pair.py --out data/models --eval-only   # the acceptance check

Each model is written to a temporary directory beside its destination and renamed into
place, so ``OUT/draft`` and ``OUT/target`` are never seen half written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "corpus" / "openwebtext_llama2_tokens.npy"
C4 = REPO / "data" / "corpus" / "c4_small_llama2_tokens.jsonl"
PROMPTS = REPO / "data" / "prompts" / "c4_heldout.jsonl"

LLAMA2_VOCAB = 32000
VOCAB_SIZE = 8192
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2  # the same ids in Llama-2 and in the compact vocabulary
SEQ_LEN = 144
VALID_ROWS = 200
SPLIT_SEED = 1234

#: Model shapes. Both tie the input embedding to the output layer.
SIZES = {
    "draft": dict(
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=True,
    ),
    "target": dict(
        hidden_size=320,
        intermediate_size=896,
        num_hidden_layers=6,
        num_attention_heads=5,
        num_key_value_heads=5,
        tie_word_embeddings=True,
    ),
}
#: Peak learning rates per model.
PEAK_LR = {"draft": 3e-3, "target": 3e-3}
#: Default caps on training epochs per model. Within 30 CPU minutes (about 4.4 epochs for the
#: target) the 10M target learns no faster per step than the 2M draft (their losses agree
#: step for step), so the draft is made the weaker model the way real drafts are: by less
#: training (1.5 epochs). A 6-epoch draft reached validation perplexity 146, better than the
#: target's 169.
EPOCHS = {"draft": 1.5, "target": 12.0}


# -- vocabulary -----------------------------------------------------------------------------


def build_vocab(train_rows: np.ndarray, size: int = VOCAB_SIZE) -> np.ndarray:
    """Compact id -> Llama-2 id: the special ids 0, 1, 2, then the most frequent others.

    Parameters
    ----------
    train_rows : numpy.ndarray of int
        Llama-2 token ids the frequencies are counted on.
    size : int
        Compact vocabulary size.

    Returns
    -------
    numpy.ndarray of int64, shape (size,)
    """
    counts = np.bincount(train_rows.ravel().astype(np.int64), minlength=LLAMA2_VOCAB)
    counts[[UNK_ID, BOS_ID, EOS_ID]] = -1
    # most frequent first; a stable sort on -count breaks ties towards the lower Llama-2 id
    order = np.argsort(-counts, kind="stable")
    rest = order[: size - 3]
    return np.concatenate([[UNK_ID, BOS_ID, EOS_ID], rest]).astype(np.int64)


def llama_to_compact(ids: object, compact_to_llama: np.ndarray) -> np.ndarray:
    """Map Llama-2 token ids to compact ids (ids outside the compact vocabulary -> ``UNK_ID``).

    Parameters
    ----------
    ids : array_like of int
        Llama-2 token ids (0 .. 31999).
    compact_to_llama : numpy.ndarray of int, shape (V,)
        The saved map (``vocab.json``'s ``compact_to_llama``).

    Returns
    -------
    numpy.ndarray of int64, the shape of ``ids``
    """
    lookup = np.full(LLAMA2_VOCAB, UNK_ID, dtype=np.int64)
    lookup[np.asarray(compact_to_llama, dtype=np.int64)] = np.arange(len(compact_to_llama))
    return lookup[np.asarray(ids, dtype=np.int64)]


def compact_to_llama_ids(ids: object, compact_to_llama: np.ndarray) -> np.ndarray:
    """Map compact ids back to Llama-2 ids (``UNK_ID`` stays Llama-2's ``<unk>``, id 0)."""
    return np.asarray(compact_to_llama, dtype=np.int64)[np.asarray(ids, dtype=np.int64)]


def load_vocab(path: Path) -> np.ndarray:
    """The ``compact_to_llama`` map saved in ``vocab.json``."""
    return np.asarray(json.loads(Path(path).read_text())["compact_to_llama"], dtype=np.int64)


# -- data -----------------------------------------------------------------------------------


def split_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(train, valid) rows by a fixed permutation that does not depend on ``--seed``."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(rows))
    return rows[perm[VALID_ROWS:]], rows[perm[:VALID_ROWS]]


def read_c4() -> list[list[int]]:
    """The C4 documents' Llama-2 token ids."""
    with open(C4) as f:
        return [json.loads(line)["input_tokens"] for line in f if line.strip()]


# -- models ---------------------------------------------------------------------------------


def make_model(which: str):
    """A freshly initialised ``LlamaForCausalLM`` of the given size (float32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=None,
        attention_dropout=0.0,
        **SIZES[which],
    )
    return LlamaForCausalLM(config)


def n_params(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of ``peak`` at ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac)))


@torch.no_grad()
def evaluate(model, rows: torch.Tensor, batch: int = 50) -> float:
    """Mean next-token cross-entropy (nats/token) over ``rows`` (B, T)."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(rows), batch):
        x = rows[start : start + batch]
        logits = model(input_ids=x).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"
        )
        total += float(loss)
        count += x[:, 1:].numel()
    model.train()
    return total / count


def save_atomically(model, dest: Path, info: dict) -> None:
    """``save_pretrained`` (float16 safetensors, config, generation config) into a temporary
    directory beside ``dest``, then rename it onto ``dest``."""
    from transformers import GenerationConfig

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        half = model.to(torch.float16)
        half.generation_config = GenerationConfig(
            bos_token_id=BOS_ID, eos_token_id=EOS_ID, do_sample=True, temperature=1.0, top_p=1.0
        )
        half.save_pretrained(tmp)
        (tmp / "training.json").write_text(json.dumps(info, indent=2) + "\n")
        for f in tmp.iterdir():  # mkdtemp and the writers may leave owner-only modes
            f.chmod(0o644)
        tmp.chmod(0o755)
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json_atomically(path: Path, obj: object) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it onto ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj) + "\n" if path.suffix == ".json" else obj)
    os.replace(tmp, path)


def train(
    which: str,
    train_ids: np.ndarray,
    valid_ids: np.ndarray,
    *,
    seed: int,
    max_minutes: float,
    batch: int,
    epochs: float | None,
    max_steps: int | None,
    steps: int | None,
    stop_after: int | None,
    plan: list[list[int]] | None,
    out: Path,
) -> dict:
    """Train one model and save it to ``out / which``; returns its training record."""
    torch.manual_seed(seed)
    model = make_model(which)
    model.train()
    params = n_params(model)
    print(f"[{which}] {params:,} parameters, {SIZES[which]}", flush=True)
    peak = PEAK_LR[which]
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=peak,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    train_t = torch.from_numpy(train_ids)
    valid_t = torch.from_numpy(valid_ids)
    per_epoch = len(train_ids) // batch
    cap = int((EPOCHS[which] if epochs is None else epochs) * per_epoch)
    if max_steps is not None:
        cap = min(cap, max_steps)
    total = steps if steps is not None else cap
    warmup = max(1, min(100, total // 20))
    # re-planning: either replayed (--plan), or decided from the speed at these budget fractions
    replay = dict(plan) if plan is not None else None
    if replay is not None:
        total = replay.get(0, total)
    checkpoints = [] if steps is not None or replay is not None else [0.05, 0.15, 0.30, 0.45]
    history = [[0, total]]
    gen = np.random.default_rng(seed)
    order = np.empty(0, dtype=np.int64)
    budget = max_minutes * 60.0
    start = time.monotonic()
    step, epoch_pos, losses = 0, 0, []
    stopped_by = "steps"
    evals = []
    while step < (total if stop_after is None else min(total, stop_after)):
        elapsed = time.monotonic() - start
        if elapsed >= budget:
            stopped_by = "time"
            break
        new_total = None
        if replay is not None and step > 0 and step in replay:
            new_total = replay[step]
        elif checkpoints and step >= 5 and elapsed >= checkpoints[0] * budget:
            while checkpoints and elapsed >= checkpoints[0] * budget:
                checkpoints.pop(0)
            per_step = elapsed / step  # mean speed so far, with a margin for a busy machine
            fit = int((budget * 0.92 - elapsed) / per_step) + step
            new_total = max(step + 1, min(cap, fit))
            print(
                f"[{which}] {per_step:.3f} s/step after {elapsed:.0f}s: planning {new_total} "
                f"steps ({new_total / max(per_epoch, 1):.2f} epochs)",
                flush=True,
            )
        if new_total is not None and new_total != total:
            total = new_total
            history.append([step, total])
        if epoch_pos + batch > len(order):
            order = gen.permutation(len(train_ids))
            epoch_pos = 0
        idx = torch.from_numpy(order[epoch_pos : epoch_pos + batch])
        epoch_pos += batch
        x = train_t[idx]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, peak, warmup)
        logits = model(input_ids=x).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % 50 == 0 or step == total:
            recent = float(np.mean(losses[-50:]))
            lr = opt.param_groups[0]["lr"]
            print(
                f"[{which}] step {step}/{total} loss {recent:.3f} lr {lr:.2e}"
                f" {time.monotonic() - start:.0f}s",
                flush=True,
            )
        if step % 250 == 0 and step < total:
            v = evaluate(model, valid_t)
            evals.append(
                {"step": step, "valid_loss": v, "seconds": round(time.monotonic() - start)}
            )
            print(f"[{which}] step {step} valid loss {v:.3f} ppl {math.exp(v):.1f}", flush=True)
    train_seconds = time.monotonic() - start
    valid = evaluate(model, valid_t)
    info = {
        "model": which,
        "parameters": params,
        "architecture": SIZES[which],
        "vocab_size": VOCAB_SIZE,
        "seed": seed,
        "steps": step,
        "planned_steps": total,
        "plan": history,
        "stopped_by": stopped_by,
        "batch": batch,
        "seq_len": SEQ_LEN,
        "tokens_seen": step * batch * SEQ_LEN,
        "epochs": step / max(per_epoch, 1),
        "peak_lr": peak,
        "warmup_steps": warmup,
        "train_seconds": round(train_seconds, 1),
        "max_minutes": max_minutes,
        "threads": torch.get_num_threads(),
        "valid_curve": evals,
        "final_train_loss": float(np.mean(losses[-50:])) if losses else None,
        "valid_loss": valid,
        "valid_perplexity": math.exp(valid),
        "valid_rows": VALID_ROWS,
        "torch": torch.__version__,
        "reproduce": (
            f"python scripts/train_tiny_pair.py --which {which} --seed {seed} "
            f"--plan {','.join(f'{a}:{b}' for a, b in history)} --stop-after {step} "
            f"--epochs {(EPOCHS[which] if epochs is None else epochs):g} --batch {batch} "
            f"--threads {torch.get_num_threads()}"
        ),
    }
    print(
        f"[{which}] done: {step} steps in {train_seconds:.0f}s, valid loss {valid:.4f} "
        f"ppl {math.exp(valid):.2f}",
        flush=True,
    )
    save_atomically(model, out / which, info)
    return info


@torch.no_grad()
def acceptance_check(out: Path, compact_c4: list[list[int]], docs: int = 32) -> dict:
    """Teacher-forced single-draft acceptance ``Σ_x min(p_x, q_x)`` at temperature 1.

    Both saved models read the same held-out C4 documents; every position's ``p`` (target) and
    ``q`` (draft) next-token distributions give one acceptance; the mean over positions is
    reported, with the validation-free cross-entropies of both models on the same tokens.
    """
    from transformers import LlamaForCausalLM

    models = {
        w: LlamaForCausalLM.from_pretrained(out / w, dtype=torch.float32).eval()
        for w in ("draft", "target")
    }
    accs, ce = [], {"draft": [], "target": []}
    for ids in compact_c4[:docs]:
        x = torch.tensor([ids])
        probs = {}
        for w, m in models.items():
            logits = m(input_ids=x).logits[0, :-1].double()
            probs[w] = torch.softmax(logits, -1)
            ce[w].append(
                torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="none").numpy()
            )
        accs.append(torch.minimum(probs["draft"], probs["target"]).sum(-1).numpy())
    a = np.concatenate(accs)
    result = {
        "c4_docs": min(docs, len(compact_c4)),
        "positions": int(a.size),
        "single_draft_acceptance_mean": float(a.mean()),
        "single_draft_acceptance_quartiles": [float(v) for v in np.quantile(a, [0.25, 0.5, 0.75])],
        "c4_perplexity": {w: float(np.exp(np.concatenate(v).mean())) for w, v in ce.items()},
    }
    print(json.dumps(result, indent=2), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "data" / "models")
    parser.add_argument("--which", choices=["draft", "target", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-minutes", type=float, default=30.0, help="budget per model")
    parser.add_argument(
        "--epochs", type=float, default=None, help=f"cap on epochs per model (default {EPOCHS})"
    )
    parser.add_argument("--max-steps", type=int, default=None, help="cap on steps per model")
    parser.add_argument(
        "--steps", type=int, default=None, help="planned steps of the schedule (no calibration)"
    )
    parser.add_argument(
        "--plan",
        type=str,
        default=None,
        help="replay a schedule plan FROM:TOTAL,FROM:TOTAL,... (from training.json)",
    )
    parser.add_argument(
        "--stop-after", type=int, default=None, help="stop after this many steps of the plan"
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--prompts", type=Path, default=PROMPTS, help="where the mapped C4 prompts go"
    )
    parser.add_argument("--eval-only", action="store_true", help="only the acceptance check")
    args = parser.parse_args(argv)

    plan = None
    if args.plan:
        plan = [[int(v) for v in item.split(":")] for item in args.plan.split(",")]
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    rows = np.load(CORPUS).astype(np.int64)
    assert rows.shape[1] == SEQ_LEN, rows.shape
    train_rows, valid_rows = split_rows(rows)
    vocab = build_vocab(train_rows)
    kept = np.isin(train_rows, vocab).mean()
    kept_valid = np.isin(valid_rows, vocab).mean()
    c4 = read_c4()
    c4_flat = np.concatenate([np.asarray(d) for d in c4])
    kept_c4 = np.isin(c4_flat, vocab).mean()
    compact_c4 = [llama_to_compact(d, vocab).tolist() for d in c4]
    print(
        f"vocabulary {VOCAB_SIZE}: keeps {kept:.4f} of training tokens, {kept_valid:.4f} of "
        f"validation tokens, {kept_c4:.4f} of C4 tokens",
        flush=True,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    vocab_info = {
        "vocab_size": VOCAB_SIZE,
        "unk_id": UNK_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "source_vocabulary": "Llama-2 SentencePiece tokenizer, 32000 ids (BOS 1, EOS 2, UNK 0)",
        "rule": (
            "compact id i <-> Llama-2 id compact_to_llama[i]; a Llama-2 id not in "
            "compact_to_llama maps to unk_id"
        ),
        "built_from": "training rows of data/corpus/openwebtext_llama2_tokens.npy "
        f"(all but {VALID_ROWS} validation rows, split seed {SPLIT_SEED})",
        "coverage": {
            "openwebtext_train": float(kept),
            "openwebtext_valid": float(kept_valid),
            "c4_small": float(kept_c4),
        },
        "compact_to_llama": vocab.tolist(),
    }
    write_json_atomically(args.out / "vocab.json", vocab_info)
    args.prompts.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(
        args.prompts, "".join(json.dumps({"input_ids": d}) + "\n" for d in compact_c4)
    )
    if not args.eval_only:
        train_ids = llama_to_compact(train_rows, vocab)
        valid_ids = llama_to_compact(valid_rows, vocab)
        whichs = ["draft", "target"] if args.which == "both" else [args.which]
        for which in whichs:
            train(
                which,
                train_ids,
                valid_ids,
                seed=args.seed,
                max_minutes=args.max_minutes,
                batch=args.batch,
                epochs=args.epochs,
                max_steps=args.max_steps,
                steps=args.steps,
                stop_after=args.stop_after,
                plan=plan,
                out=args.out,
            )
    if (args.out / "draft").exists() and (args.out / "target").exists():
        result = acceptance_check(args.out, compact_c4)
        write_json_atomically(args.out / "pair_eval.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
