# What tools/bench_peers.sh and tools/bench_pjrt.sh share (sourced, not run): the build check, the synthetic
# data, the sgemm ceiling, one mtf or PyTorch run of a setup, and the rounds over the setups with the table.
# The caller sets BENCH (its name, for messages), config, steps, warmup, rounds and PY (a python; torch only
# for PyTorch rows, which run in $TORCH_PY where that is set), calls bench_prepare and bench_ceilings, fills
# the array `setups` with run_mtf/run_torch commands, and calls bench_rounds_and_table.

MTF=${MTF:-build/src/mtf}
SGEMM=${MTF_BENCH_SGEMM:-build/src/mtf_bench_sgemm}

bench_check_build() {
  local exe
  for exe in "$MTF" "$SGEMM"; do
    [ -x "$exe" ] || { echo "$BENCH: $exe not found: build first (cmake -S . -B build && cmake --build build -j)" >&2; exit 1; }
  done
}

# A scratch folder (removed at exit), the data, the steps per run and the header lines.
bench_prepare() {
  tmp=$(mktemp -d "/tmp/mtf-$BENCH.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  # Token ids of the synthetic task are far below the vocabulary: the speed does not depend on them.
  "$MTF" data synth --task add --output "$tmp/data" --examples 20000 --length 8 --force > /dev/null
  per_round=$(( (steps + rounds - 1) / rounds ))
  total=$((warmup + per_round))
  echo "$BENCH: $config, $rounds round(s) of $warmup warm-up + $per_round timed steps per setup, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# The ceiling. mpiexec binds each rank to one core unless told not to: 1 rank x 2 threads needs --bind-to none.
ceiling() { # LABEL THREADS RANKS [bf16] MPIEXEC-OPTIONS...: sgemm, or with bf16 the bf16 matmul of backend.precision bf16
  local label=$1 threads=$2 ranks=$3 kind=""; shift 3
  [ "${1:-}" = bf16 ] && { kind=bf16; shift; }
  local line
  line=$(OPENBLAS_NUM_THREADS=$threads mpiexec "$@" -n "$ranks" "$SGEMM" 2048 5 $kind)
  printf '%s\t%s\t%s\n' "$label" "$(sed -n 's/.*, sum \([0-9.]*\) GFLOP\/s.*/\1/p' <<<"$line")" "$line" >> "$tmp/ceilings.tsv"
}
bench_ceilings() { # BF16: also the bf16 matmul's (oneDNN; AMX where there is one), the ceiling of bf16 rows
  ceiling "1 process x 2 threads" 2 1 --bind-to none
  ceiling "2 processes x 1 thread" 1 2
  if [ "${1:-}" = bf16 ]; then
    ceiling "bf16 1 process x 2 threads" 2 1 bf16 --bind-to none
    ceiling "bf16 2 processes x 1 thread" 1 2 bf16
  fi
}

load() { cut -d' ' -f1 /proc/loadavg; }
spread() { # the run's own median and range, from the last line bench_peers.py wrote
  tail -n 1 "$tmp/results.jsonl" | "$PY" -c 'import json, sys; r = json.loads(sys.stdin.read()); s = r["step_ms"]
print("   %s: median %.1f ms of %d steps, range %.1f-%.1f" % (r["setup"], r["median_ms"], len(s), min(s), max(s)))' >&2
}

run_mtf() { # ROUND NAME RANKS THREADS MESH LAYOUT BACKEND-ARGS (one word) MPIEXEC-OPTIONS...
  local round=$1 name=$2 ranks=$3 threads=$4 mesh=$5 layout=$6 backend=$7; shift 7
  local dir="$tmp/run-$round-${name//[^a-z0-9]/_}" before precision=fp32
  [[ "$backend" =~ backend\.precision=([a-z0-9]+) ]] && precision=${BASH_REMATCH[1]}
  before=$(load)
  echo "== round $round: mtf, $name (load $before)" >&2
  local -a extra
  read -r -a extra <<< "$backend"
  if ! OPENBLAS_NUM_THREADS=$threads mpiexec "$@" -n "$ranks" "$MTF" train --fresh "$config" \
        --set "data.train=$tmp/data/train-*.h5" --set "train.steps=$total" "${extra[@]}" \
        --mesh "$mesh" --layout "$layout" --set "run.dir=$dir" > "$dir.log" 2>&1; then
    tail -20 "$dir.log" >&2
    echo "$BENCH: mtf failed ($name)" >&2
    exit 1
  fi
  grep -E "^(backend: |pjrt threads: |train: [0-9]|train: per rank)" "$dir.log" >&2 || true
  "$PY" tools/bench_peers.py mtf "$dir" --config "$config" --name "mtf, $name" --warmup "$warmup" --procs "$ranks" \
    --threads "$threads" --precision "$precision" --load "$before" >> "$tmp/results.jsonl"
  spread
}

run_torch() { # ROUND PROCS THREADS [bench_peers.py torch OPTIONS: --precision bf16, --compile]; in $TORCH_PY or $PY
  local round=$1 procs=$2 threads=$3 py=${TORCH_PY:-$PY} rc=0; shift 3
  echo "== round $round: PyTorch ($py), $procs process(es) x $threads thread(s)${*:+ $*} (load $(load))" >&2
  # OpenBLAS (Debian's torch multiplies with it) has its own threads beside torch's OpenMP ones.
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$py" tools/bench_peers.py torch --config "$config" \
    --procs "$procs" --threads "$threads" --steps "$per_round" --warmup "$warmup" --out "$tmp/torch.json" "$@" || rc=$?
  if [ "$rc" = 3 ]; then  # this torch lacks the setup (bench_peers.py said why): the table lists it as not run
    cat "$tmp/torch.json" >> "$tmp/results.jsonl"
    return
  fi
  [ "$rc" = 0 ] || { echo "$BENCH: PyTorch failed ($py, $procs x $threads${*:+ $*})" >&2; exit 1; }
  cat "$tmp/torch.json" >> "$tmp/results.jsonl"
  spread
}

# Rounds: every setup runs once per round (in reverse order in even rounds) and its timed steps are pooled
# over the rounds, so a load that comes and goes on a shared machine falls on every setup alike.
bench_rounds_and_table() {
  local r i order
  for r in $(seq "$rounds"); do
    order=$(seq 0 $((${#setups[@]} - 1)))
    [ $((r % 2)) = 0 ] && order=$(seq $((${#setups[@]} - 1)) -1 0)
    for i in $order; do eval "${setups[$i]}"; done
  done
  echo
  "$PY" tools/bench_peers.py table --config "$config" "$tmp/results.jsonl" "$tmp/ceilings.tsv"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
}
