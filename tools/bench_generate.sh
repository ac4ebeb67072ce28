#!/usr/bin/env bash
# Decode benchmark of `mtf generate`: time to first token and ms/token at batch 1 and 8, cached vs
# --no-cache, 1 rank x 1 thread vs m:2 (2 ranks x 1 thread; heads, d_ff and vocab split), on a model whose
# decode step is memory-bound (8 layers, d_model 1024, d_ff 4096, length 512: 100M weights, 400 MB read
# per token). The weights are the random initialisation after one training step (a checkpoint is needed).
# usage: tools/bench_generate.sh [BUILD_DIR] [WORK_DIR] [all|b1|pairs N]   (one line per case; b1: only the two
# cached batch-1 cases, 1 rank and m:2, back to back; pairs N: those two cases N times in turn, each pair's
# ratio of medians and the median, lowest and highest of the N ratios: the machine's memory bandwidth drifts
# from minute to minute, so a ratio is only fair between runs made back to back)
set -eu
BUILD=${1:-build}
WORK=${2:-/tmp/mtf-bench-generate}
CASES=${3:-all}
PAIRS=${4:-5}
MTF=$BUILD/src/mtf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
MODEL=(--set model.layers=8 --set model.d_model=1024 --set model.d_ff=4096 --set model.heads=16 --set model.d_kv=64
       --set model.length=512 --set model.vocab=8192 --set backend.threads=1 --set run.dir="$WORK/run")
CONFIG=configs/tiny.yaml
mkdir -p "$WORK"
if [ ! -d "$WORK/run/checkpoints" ]; then
  "$MTF" data synth --task reverse --output "$WORK/data" --examples 4000 --length 12 --force >/dev/null
  mpiexec -n 1 "$MTF" train --fresh "$CONFIG" "${MODEL[@]}" --set "data.train=$WORK/data/train-*.h5" --set data.eval= \
    --set train.batch=1 --set train.steps=1 --set train.checkpoint_every=1 --set train.warmup_steps=0 \
    --set train.optimizer=sgd --set train.log_every=1 >"$WORK/train.log" 2>&1
fi
for i in $(seq 1 8); do echo "[$((i * 7)), $((i + 40)), 61]"; done >"$WORK/prompts8.jsonl"
head -1 "$WORK/prompts8.jsonl" >"$WORK/prompts1.jsonl"
# case NAME NPROCS MESH BATCH MAX_NEW [--no-cache]: prints the time to first token (prefill + choice) and
# the median and fastest of the later steps (ms per token; on a shared machine the fastest is the least
# disturbed by other processes)
run_case() {
  local name=$1 n=$2 mesh=$3 batch=$4 max_new=$5
  shift 5
  local place=()
  [ "$mesh" != - ] && place=(--mesh "$mesh" --layout "heads:m,d_ff:m,vocab:m")
  mpiexec -n "$n" "$MTF" generate "$CONFIG" "${MODEL[@]}" "${place[@]}" --prompts "$WORK/prompts$batch.jsonl" --ids \
    --max-new "$max_new" --temperature 0 --json "$@" 2>/dev/null |
    python3 -c "
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith('{')]
steps = rows[0]['step_ms']
later = sorted(steps[1:])
print('%-24s TTFT %9.1f ms   ms/token median %9.2f  min %9.2f  (%d steps)' % ('$name', steps[0], later[len(later) // 2], later[0], len(later)))
open('$WORK/last_median', 'w').write('%.4f' % later[len(later) // 2])"
}
uptime | sed 's/^/# /'
lscpu | grep -E "Model name|^CPU\(s\)|Thread|L3" | sed 's/^/# /'
if [ "$CASES" = pairs ]; then
  ratios=()
  for i in $(seq 1 "$PAIRS"); do
    run_case "cached  b1 1rank x1" 1 - 1 33
    one=$(cat "$WORK/last_median")
    run_case "cached  b1 m:2 (2x1)" 2 m:2 1 33
    two=$(cat "$WORK/last_median")
    ratios+=("$(python3 -c "print('%.3f' % ($one / $two))")")
    echo "pair $i: 1 rank / m:2 = ${ratios[-1]}x"
  done
  python3 -c "
import sys
r = sorted(float(x) for x in sys.argv[1:])
n = len(r)
median = r[n // 2] if n % 2 else (r[n // 2 - 1] + r[n // 2]) / 2
print('pairs %d: median ratio %.2fx, lowest %.2fx, highest %.2fx, %d of %d at or above 1.5x' % (n, median, r[0], r[-1], sum(x >= 1.5 for x in r), n))" "${ratios[@]}"
  uptime | sed 's/^/# /'
  exit 0
fi
run_case "cached  b1 1rank x1" 1 - 1 33
run_case "cached  b1 m:2 (2x1)" 2 m:2 1 33
if [ "$CASES" = b1 ]; then
  uptime | sed 's/^/# /'
  exit 0
fi
run_case "cached  b8 1rank x1" 1 - 8 17
run_case "cached  b8 m:2 (2x1)" 2 m:2 8 17
run_case "uncached b1 1rank x1" 1 - 1 4 --no-cache
run_case "uncached b1 m:2 (2x1)" 2 m:2 1 4 --no-cache
run_case "uncached b8 1rank x1" 1 - 8 2 --no-cache
run_case "uncached b8 m:2 (2x1)" 2 m:2 8 2 --no-cache
uptime | sed 's/^/# /'
