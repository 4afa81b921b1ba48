#!/usr/bin/env bash
# The GPU table of the README's performance section, in one run (a benchmark, not a test).
#
# Run from the repository root on a machine with a CUDA GPU and torch:
#
#     bash benchmarks/gpu_table.sh [OUT]
#
# It needs numpy, scipy, numba, pandas and torch (not highspy, cvxpy or gguf: the torch
# benchmarks import neither), and runs otbound from this checkout (PYTHONPATH), so nothing
# is installed. Each benchmark prints one Markdown table, into OUT (default
# benchmarks/gpu-table) as well as to the screen:
#
# 1. sweep-batch1024.md: every design's bound (iid, without_replacement, conditional_poisson,
#    greedy, topk, hub), n in {2, 4, 8}, V in {32,000, 151,936}, batches of 1,024 steps in
#    one chunk (2^25 entries), against numpy/numba on this machine's CPU cores;
# 2. sweep-batch8192.md: the two goals at V = 32,000 (i.i.d. and without
#    replacement) with batches of 8,192 steps (launches shared by more rows);
# 3. sweep-default-chunks.md: the same as 1 at V = 32,000 in the API's default chunks (2^22);
# 4. verifiers.md: the exact verifier formulas on the device against numpy's.
#
# Each step has its own time limit (LIMIT seconds, default 150), so that one slow step
# leaves the others their time; a step cut off says so in its file.
set -u
OUT="${1:-benchmarks/gpu-table}"
LIMIT="${LIMIT:-150}"
DEVICE="${DEVICE:-cuda}"
# EXTRA: options added to every call (a CPU rehearsal: DEVICE=cpu EXTRA="--repeat 1 ...")
EXTRA="${EXTRA:-}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd benchmarks || exit 1
case "$OUT" in /*) ;; *) OUT="../$OUT" ;; esac

{
    date -u
    nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
    python3 -c "import torch, numpy, numba; print('torch', torch.__version__, \
'cuda' if torch.cuda.is_available() else 'no cuda', '| numpy', numpy.__version__, \
'| numba', numba.__version__, numba.config.NUMBA_NUM_THREADS, 'threads')"
} | tee "$OUT/machine.txt"

step() {  # step NAME ARGS...: one benchmark, its table into OUT/NAME.md
    local name=$1
    shift
    echo "== $name: python3 $* $EXTRA"
    # shellcheck disable=SC2086  # EXTRA is a list of options
    timeout "$LIMIT" python3 "$@" $EXTRA 2>&1 | tee "$OUT/$name.md"
    local status=${PIPESTATUS[0]}
    if [ "$status" -ne 0 ]; then
        echo "(stopped: exit status $status, limit ${LIMIT} s)" | tee -a "$OUT/$name.md"
    fi
}

step sweep-batch1024 bench_torch_sweep.py --device "$DEVICE" --vocabs 32000,151936 \
    --designs iid,without_replacement,conditional_poisson,greedy,topk,hub \
    --batch 1024 --chunk-elements 33554432
step sweep-batch8192 bench_torch_sweep.py --device "$DEVICE" --vocabs 32000 \
    --designs iid,without_replacement --batch 8192 --chunk-elements 268435456
step sweep-default-chunks bench_torch_sweep.py --device "$DEVICE" --vocabs 32000 --batch 1024
step verifiers bench_torch_verifiers.py --device "$DEVICE" --vocabs 32000,151936
