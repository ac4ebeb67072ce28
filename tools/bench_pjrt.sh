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
MTF=${MTF:-build/src/mtf}
SGEMM=${MTF_BENCH_SGEMM:-build/src/mtf_bench_sgemm}
for exe in "$MTF" "$SGEMM"; do
  [ -x "$exe" ] || { echo "bench_pjrt: $exe not found: build first (cmake -S . -B build && cmake --build build -j)" >&2; exit 1; }
done
"$MTF" --version --set backend.kind=pjrt --set backend.local_devices=2 > /dev/null 2>&1 ||
  { echo "bench_pjrt: $MTF has no working pjrt backend: bash tools/install-deps.sh --pjrt, then rebuild" >&2; exit 1; }
# The arithmetic (medians, table) is bench_peers.py's; it needs only the standard library, torch only for its rows.
PY=""
for candidate in "${PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$candidate" ] || continue
  if [ "$torch" = 0 ] || "$candidate" -c "import torch" 2>/dev/null; then PY=$candidate; break; fi
done
[ -n "$PY" ] || { echo "bench_pjrt: no python with torch (apt-get install python3-torch, or --no-torch)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/mtf-bench-pjrt.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$MTF" data synth --task add --output "$tmp/data" --examples 20000 --length 8 --force > /dev/null

echo "bench_pjrt: $config, $rounds round(s) of $warmup warm-up + $(( (steps + rounds - 1) / rounds )) timed steps per setup, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mtf: $("$MTF" --version | head -1); $("$MTF" --version --set backend.kind=pjrt 2>/dev/null | grep -E '^pjrt (plugin|platform)' | tr '\n' ' ')"
[ "$torch" = 1 ] && echo "python: $PY, torch $("$PY" -c 'import torch; print(torch.__version__)')"

ceiling() { # LABEL THREADS RANKS MPIEXEC-OPTIONS...
  local label=$1 threads=$2 ranks=$3; shift 3
  local line
  line=$(OPENBLAS_NUM_THREADS=$threads mpiexec "$@" -n "$ranks" "$SGEMM" 2048 5)
  printf '%s\t%s\t%s\n' "$label" "$(sed -n 's/.*, sum \([0-9.]*\) GFLOP\/s.*/\1/p' <<<"$line")" "$line" >> "$tmp/ceilings.tsv"
}
ceiling "1 process x 2 threads" 2 1 --bind-to none
ceiling "2 processes x 1 thread" 1 2

per_round=$(( (steps + rounds - 1) / rounds ))
total=$((warmup + per_round))
load() { cut -d' ' -f1 /proc/loadavg; }
spread() { # the run's own median and range, from the last line bench_peers.py wrote
  tail -n 1 "$tmp/results.jsonl" | "$PY" -c 'import json, sys; r = json.loads(sys.stdin.read()); s = r["step_ms"]
print("   %s: median %.1f ms of %d steps, range %.1f-%.1f" % (r["setup"], r["median_ms"], len(s), min(s), max(s)))' >&2
}
run_mtf() { # ROUND NAME RANKS THREADS MESH LAYOUT BACKEND-ARGS (one word) MPIEXEC-OPTIONS...
  local round=$1 name=$2 ranks=$3 threads=$4 mesh=$5 layout=$6 backend=$7; shift 7
  local dir="$tmp/run-$round-${name//[^a-z0-9]/_}" before
  before=$(load)
  echo "== round $round: mtf, $name (load $before)" >&2
  local -a extra
  read -r -a extra <<< "$backend"
  if ! OPENBLAS_NUM_THREADS=$threads mpiexec "$@" -n "$ranks" "$MTF" train --fresh "$config" \
        --set "data.train=$tmp/data/train-*.h5" --set "train.steps=$total" "${extra[@]}" \
        --mesh "$mesh" --layout "$layout" --set "run.dir=$dir" > "$dir.log" 2>&1; then
    tail -20 "$dir.log" >&2
    echo "bench_pjrt: mtf failed ($name)" >&2
    exit 1
  fi
  grep -E "^(backend: |pjrt threads: )" "$dir.log" >&2 || true
  "$PY" tools/bench_peers.py mtf "$dir" --config "$config" --name "mtf, $name" --warmup "$warmup" --procs "$ranks" \
    --threads "$threads" --load "$before" >> "$tmp/results.jsonl"
  spread
}
run_torch() { # ROUND PROCS THREADS
  echo "== round $1: PyTorch, $2 process(es) x $3 thread(s) (load $(load))" >&2
  OPENBLAS_NUM_THREADS=$3 OMP_NUM_THREADS=$3 "$PY" tools/bench_peers.py torch --config "$config" --procs "$2" \
    --threads "$3" --steps "$per_round" --warmup "$warmup" --out "$tmp/torch.json"
  cat "$tmp/torch.json" >> "$tmp/results.jsonl"
  spread
}
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
for r in $(seq "$rounds"); do
  order=$(seq 0 $((${#setups[@]} - 1)))
  [ $((r % 2)) = 0 ] && order=$(seq $((${#setups[@]} - 1)) -1 0)
  for i in $order; do eval "${setups[$i]}"; done
done

echo
"$PY" tools/bench_peers.py table --config "$config" "$tmp/results.jsonl" "$tmp/ceilings.tsv"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
