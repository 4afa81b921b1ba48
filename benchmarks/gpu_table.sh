#!/usr/bin/env bash
# The GPU table of docs/performance.md, in one run (a benchmark, not a test).
#
# Run on a machine with a CUDA GPU and torch, from any directory:
#
#     bash benchmarks/gpu_table.sh [OUT]
#
# It needs numpy, scipy, numba and torch (not pandas, highspy, cvxpy or gguf: the torch
# benchmarks import none of them), and runs otbound from this checkout (PYTHONPATH), so
# nothing is installed. Each benchmark prints one Markdown table, into OUT (default
# benchmarks/gpu-table) as well as to the screen:
#
# 0. warm-up.md: a small run of both benchmarks, so that numba compiles its kernels (a fresh
#    machine has no cache) and CUDA starts before the timed steps;
# 1. sweep-batch1024.md: every design's bound (iid, without_replacement, conditional_poisson,
#    greedy, topk, hub), n in {2, 4, 8}, V in {32,000, 151,936}, batches of 1,024 steps in
#    one chunk (2^25 entries), against numpy/numba on the same machine's CPU cores;
# 2. sweep-batch8192.md: the two GPU goals at V = 32,000 (i.i.d. and without
#    replacement) with batches of 8,192 steps (launches shared by more rows);
# 3. sweep-default-chunks.md: the default designs (iid, without_replacement,
#    conditional_poisson) at V = 32,000 in the API's default chunks (2^22 entries);
# 4. verifiers.md: the exact verifier formulas on the device against numpy's.
#
# Each of the six runs (the warm-up is two) has its own time limit (LIMIT seconds, default
# 95: all six fit in the 10 minutes a device call may take), so that one slow step leaves
# the others their time; a step cut off says so in its file, and the script then exits
# non-zero.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="${1:-$ROOT/benchmarks/gpu-table}"
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
LIMIT="${LIMIT:-95}"
DEVICE="${DEVICE:-cuda}"
# EXTRA: options added to every timed call (a CPU rehearsal: DEVICE=cpu EXTRA="--repeat 1 ...")
EXTRA="${EXTRA:-}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$ROOT/benchmarks" || exit 1
failed=0

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
    echo "== $name: python3 $*"
    timeout -k 10 "$LIMIT" python3 "$@" 2>&1 | tee "$OUT/$name.md"
    local status=${PIPESTATUS[0]}
    if [ "$status" -ne 0 ]; then
        echo "(stopped: exit status $status, limit ${LIMIT} s)" | tee -a "$OUT/$name.md"
        failed=1
    fi
}

small=(--device "$DEVICE" --vocabs 2000 --batch 8 --numpy-batch 8 --repeat 1)
step warm-up bench_torch_sweep.py "${small[@]}" \
    --designs iid,without_replacement,conditional_poisson,greedy,topk,hub
timeout -k 10 "$LIMIT" python3 bench_torch_verifiers.py "${small[@]}" >/dev/null 2>&1 || failed=1
# shellcheck disable=SC2086  # EXTRA: a list of options, split on purpose
step sweep-batch1024 bench_torch_sweep.py --device "$DEVICE" --vocabs 32000,151936 \
    --designs iid,without_replacement,conditional_poisson,greedy,topk,hub \
    --batch 1024 --chunk-elements 33554432 $EXTRA
# shellcheck disable=SC2086
step sweep-batch8192 bench_torch_sweep.py --device "$DEVICE" --vocabs 32000 \
    --designs iid,without_replacement --batch 8192 --chunk-elements 268435456 $EXTRA
# shellcheck disable=SC2086
step sweep-default-chunks bench_torch_sweep.py --device "$DEVICE" --vocabs 32000 \
    --batch 1024 $EXTRA
# shellcheck disable=SC2086
step verifiers bench_torch_verifiers.py --device "$DEVICE" --vocabs 32000,151936 $EXTRA
exit "$failed"
