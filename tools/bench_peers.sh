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
BENCH=bench_peers
source tools/bench_lib.sh
bench_check_build

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

bench_prepare
echo "mtf: $("$MTF" --version | head -1); python: $PY, torch $("$PY" -c 'import torch; print(torch.__version__)')"
bench_ceilings

setups=(
  'run_mtf $r "1 rank x 2 threads" 1 2 "" "" "--set backend.threads=2" --bind-to none'
  'run_torch $r 1 2'
  'run_mtf $r "2 ranks x 1 thread, b:2 (batch:b)" 2 1 "b:2" "batch:b" "--set backend.threads=1"'
  'run_torch $r 2 1'
  'run_mtf $r "2 ranks x 1 thread, m:2 (heads;d_ff;vocab:m)" 2 1 "m:2" "heads:m;d_ff:m;vocab:m" "--set backend.threads=1"'
  'run_torch $r 1 1'
)
bench_rounds_and_table
