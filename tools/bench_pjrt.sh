#!/usr/bin/env bash
# The pjrt backend (XLA CPU plugin, 1 process x 2 devices) against the cpu backend and PyTorch on the small GPT
# of issue 11 (configs/bench/small-gpt.yaml), same 2 cores, same run:
#
#   bash tools/bench_pjrt.sh [--steps N] [--warmup W] [--rounds R] [--no-torch]
#
# Setups: mtf pjrt 1 process x 2 devices under b:2 (batch:b) and m:2 (heads:m;d_ff:m;vocab:m); mtf cpu 2 ranks x
# 1 thread under the same two meshes; mtf cpu 1 rank x 2 threads; PyTorch 1 process x 2 threads and DDP 2 x 1
# (tools/bench_peers.py, the same model). Each setup runs once per round (R rounds, default 2, every other round
# in reverse order), each time W warm-up steps (default 2) and its share of the N timed steps (default 10); a
# setup's ms/step is the median of its timed steps pooled over the rounds, and each run's own median and range
# are printed as it ends (the spread from round to round on a shared machine). The table is bench_peers.py's.
# Needs a build with the pjrt backend (bash tools/install-deps.sh --pjrt), build/src/mtf_bench_sgemm, and a
# python with torch for the PyTorch rows (--no-torch leaves them out). Results: docs/PERFORMANCE.md, "The pjrt
# backend (XLA CPU plugin)".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

steps=10 warmup=2 rounds=2 torch=1
usage="usage: bash tools/bench_pjrt.sh [--steps N] [--warmup W] [--rounds R] [--no-torch]"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps|--warmup|--rounds)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "bench_pjrt: $1 needs a number; $usage" >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    --no-torch) torch=0; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[ "$steps" -ge 1 ] && [ "$rounds" -ge 1 ] || { echo "bench_pjrt: --steps and --rounds must be >= 1" >&2; exit 2; }
config=configs/bench/small-gpt.yaml
BENCH=bench_pjrt
source tools/bench_lib.sh
bench_check_build
"$MTF" --version --set backend.kind=pjrt --set backend.local_devices=2 > /dev/null 2>&1 ||
  { echo "bench_pjrt: $MTF has no working pjrt backend: bash tools/install-deps.sh --pjrt, then rebuild" >&2; exit 1; }
# The arithmetic (medians, table) is bench_peers.py's; it needs only the standard library, torch only for its rows.
PY=""
for candidate in "${PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$candidate" ] || continue
  if [ "$torch" = 0 ] || "$candidate" -c "import torch" 2>/dev/null; then PY=$candidate; break; fi
done
[ -n "$PY" ] || { echo "bench_pjrt: no python with torch (apt-get install python3-torch, or --no-torch)" >&2; exit 1; }

bench_prepare
echo "mtf: $("$MTF" --version | head -1); $("$MTF" --version --set backend.kind=pjrt 2>/dev/null | grep -E '^pjrt (plugin|platform)' | tr '\n' ' ')"
[ "$torch" = 1 ] && echo "python: $PY, torch $("$PY" -c 'import torch; print(torch.__version__)')"
bench_ceilings

# pjrt: one process owns both devices, so threads = 2 (the plugin's threads share the 2 cores); --bind-to none
# lets them use both cores.
pjrt="--set backend.kind=pjrt --set backend.local_devices=2"
setups=(
  'run_mtf $r "pjrt 1 process x 2 devices, b:2 (batch:b)" 1 2 "b:2" "batch:b" "$pjrt" --bind-to none'
  'run_mtf $r "cpu 2 ranks x 1 thread, b:2 (batch:b)" 2 1 "b:2" "batch:b" "--set backend.threads=1"'
  'run_mtf $r "pjrt 1 process x 2 devices, m:2 (heads;d_ff;vocab:m)" 1 2 "m:2" "heads:m;d_ff:m;vocab:m" "$pjrt" --bind-to none'
  'run_mtf $r "cpu 2 ranks x 1 thread, m:2 (heads;d_ff;vocab:m)" 2 1 "m:2" "heads:m;d_ff:m;vocab:m" "--set backend.threads=1"'
  'run_mtf $r "cpu 1 rank x 2 threads" 1 2 "" "" "--set backend.threads=2" --bind-to none'
)
[ "$torch" = 1 ] && setups+=('run_torch $r 1 2' 'run_torch $r 2 1')
bench_rounds_and_table
