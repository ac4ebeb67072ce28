#!/usr/bin/env bash
# mtf against PyTorch on the same model, the same global batch and the same 2 cores, in one run:
#
#   bash tools/bench_peers.sh [small|gpt2] [--steps N] [--warmup W] [--rounds R]
#
#   small  configs/bench/small-gpt.yaml (issue 11's small GPT: 4 layers, d_model 256, batch 8)  [default]
#   gpt2   configs/bench/gpt2-width.yaml (GPT-2-small width: 12 layers, d_model 768, batch 4; slow)
#
# Setups: mtf 1 rank x 2 threads, 2 ranks x 1 thread b:2 (batch:b), 2 ranks x 1 thread m:2
# (heads:m;d_ff:m;vocab:m); PyTorch 1 process x 2 threads, 1 process x 1 thread, DDP 2 x 1 over gloo.
# Each setup runs once per round (R rounds, default 2), each time W warm-up steps (default 2) and then its
# share of the N timed steps (default 10, so 5 per round); a setup's ms/step is the median of its N timed
# steps pooled over the rounds, so a load that comes and goes on a shared machine falls on every setup.
# The same run measures the sgemm ceiling of the 2 cores (mtf_bench_sgemm: cblas_sgemm 2048^3 on 1 process
# x 2 threads and on 2 processes x 1 thread at once, the best of 5 calls each) and prints model FLOPs/s
# (6 N + attention per token, as mtf counts them) as a share of the higher one.
# Needs a build (build/src/mtf, build/src/mtf_bench_sgemm) and a python with torch: Debian's python3-torch
# (apt-get install python3-torch, or bash tools/install-deps.sh --peers); PYTHON=... picks another.
# Results: docs/PERFORMANCE.md, "Against PyTorch".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

model=small steps=10 warmup=2 rounds=2
usage="usage: bash tools/bench_peers.sh [small|gpt2] [--steps N] [--warmup W] [--rounds R]"
while [ $# -gt 0 ]; do
  case "$1" in
    small|gpt2) model=$1; shift ;;
    --steps|--warmup|--rounds)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "bench_peers: $1 needs a number; $usage" >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[ "$steps" -ge 1 ] && [ "$rounds" -ge 1 ] || { echo "bench_peers: --steps and --rounds must be >= 1" >&2; exit 2; }
case "$model" in
  small) config=configs/bench/small-gpt.yaml ;;
  gpt2) config=configs/bench/gpt2-width.yaml ;;
esac
MTF=${MTF:-build/src/mtf}
SGEMM=${MTF_BENCH_SGEMM:-build/src/mtf_bench_sgemm}
for exe in "$MTF" "$SGEMM"; do
  [ -x "$exe" ] || { echo "bench_peers: $exe not found: build first (cmake -S . -B build && cmake --build build -j)" >&2; exit 1; }
done

# A python with torch: $PYTHON, then Debian's, then the one on PATH.
PY=""
for candidate in "${PYTHON:-}" /usr/bin/python3 python3; do
  if [ -n "$candidate" ] && "$candidate" -c "import torch" 2>/dev/null; then PY=$candidate; break; fi
done
if [ -z "$PY" ]; then
  echo "bench_peers: no python with torch (tried ${PYTHON:+$PYTHON, }/usr/bin/python3, python3): install Debian's" \
       "PyTorch with 'apt-get install python3-torch' (or 'bash tools/install-deps.sh --peers'), or set PYTHON" >&2
  exit 1
fi

tmp=$(mktemp -d /tmp/mtf-bench-peers.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Token ids of the synthetic task are far below the vocabulary: the speed does not depend on them.
"$MTF" data synth --task add --output "$tmp/data" --examples 20000 --length 8 --force > /dev/null

echo "bench_peers: $config, $rounds round(s) of $warmup warm-up + $(( (steps + rounds - 1) / rounds )) timed steps per setup, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mtf: $("$MTF" --version | head -1); python: $PY, torch $("$PY" -c 'import torch; print(torch.__version__)')"

# The ceiling. mpiexec binds each rank to one core unless told not to: 1 rank x 2 threads needs --bind-to none.
ceiling() { # LABEL THREADS RANKS BIND...
  local label=$1 threads=$2 ranks=$3; shift 3
  local line
  line=$(OPENBLAS_NUM_THREADS=$threads mpiexec "$@" -n "$ranks" "$SGEMM" 2048 5)
  printf '%s\t%s\t%s\n' "$label" "$(sed -n 's/.*, sum \([0-9.]*\) GFLOP\/s.*/\1/p' <<<"$line")" "$line" >> "$tmp/ceilings.tsv"
}
ceiling "1 process x 2 threads" 2 1 --bind-to none
ceiling "2 processes x 1 thread" 1 2

# Rounds: every setup runs once per round (in reverse order in even rounds) and its timed steps are pooled
# over the rounds, so a load that comes and goes on a shared machine falls on every setup alike.
per_round=$(( (steps + rounds - 1) / rounds ))
total=$((warmup + per_round))
load() { cut -d' ' -f1 /proc/loadavg; }
run_mtf() { # ROUND NAME RANKS THREADS MESH LAYOUT MPIEXEC-OPTIONS...
  local round=$1 name=$2 ranks=$3 threads=$4 mesh=$5 layout=$6; shift 6
  local dir="$tmp/run-$round-$ranks-$threads-${mesh%%:*}" before
  before=$(load)
  echo "== round $round: mtf, $name (load $before)" >&2
  if ! OPENBLAS_NUM_THREADS=$threads mpiexec "$@" -n "$ranks" "$MTF" train --fresh "$config" \
        --set "data.train=$tmp/data/train-*.h5" --set "train.steps=$total" --set backend.threads="$threads" \
        --mesh "$mesh" --layout "$layout" --set "run.dir=$dir" > "$dir.log" 2>&1; then
    tail -20 "$dir.log" >&2
    echo "bench_peers: mtf failed ($name)" >&2
    exit 1
  fi
  grep -E "^(backend: |train: [0-9]|train: per rank)" "$dir.log" >&2
  "$PY" tools/bench_peers.py mtf "$dir" --config "$config" --name "mtf, $name" --warmup "$warmup" --procs "$ranks" \
    --threads "$threads" --load "$before" >> "$tmp/results.jsonl"
}
run_torch() { # ROUND PROCS THREADS
  echo "== round $1: PyTorch, $2 process(es) x $3 thread(s) (load $(load))" >&2
  # OpenBLAS (Debian's torch multiplies with it) has its own threads beside torch's OpenMP ones.
  OPENBLAS_NUM_THREADS=$3 OMP_NUM_THREADS=$3 "$PY" tools/bench_peers.py torch --config "$config" --procs "$2" \
    --threads "$3" --steps "$per_round" --warmup "$warmup" --out "$tmp/torch.json"
  cat "$tmp/torch.json" >> "$tmp/results.jsonl"
}
setups=(
  'run_mtf $r "1 rank x 2 threads" 1 2 "" "" --bind-to none'
  'run_torch $r 1 2'
  'run_mtf $r "2 ranks x 1 thread, b:2 (batch:b)" 2 1 "b:2" "batch:b"'
  'run_torch $r 2 1'
  'run_mtf $r "2 ranks x 1 thread, m:2 (heads;d_ff;vocab:m)" 2 1 "m:2" "heads:m;d_ff:m;vocab:m"'
  'run_torch $r 1 1'
)
for r in $(seq "$rounds"); do
  order=$(seq 0 $((${#setups[@]} - 1)))
  [ $((r % 2)) = 0 ] && order=$(seq $((${#setups[@]} - 1)) -1 0)
  for i in $order; do eval "${setups[$i]}"; done
done

echo
"$PY" tools/bench_peers.py table --config "$config" "$tmp/results.jsonl" "$tmp/ceilings.tsv"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
