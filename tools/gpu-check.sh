#!/usr/bin/env bash
# The CUDA backend's acceptance run (issue 12), for a machine with a GPU: one prepared script that builds,
# checks and measures, finishes in under 8 minutes and writes everything it found to ONE results file.
#
#   tools/gpu-check.sh [--results FILE] [--build-dir DIR] [--no-build] [--budget SECONDS] [--dry-run-cpu]
#
# Phases (each with a time budget; all of them within --budget, 470 s by default):
#   gpu        the GPUs (nvidia-smi): none -> "no GPU", exit 2, before anything is built
#   build      cmake (Release, MTF_WERROR, CUDA on) and the targets mtf + test_backend_conformance;
#              `mtf --version` must list the cuda backend and name GPU, driver, CUDA, cuBLAS, NCCL
#   conformance  test_backend_conformance --backend cuda on 1 rank and on 2 ranks sharing the GPU (every
#              op, value and gradient, against the double reference and finite differences; its bounds
#              are the cpu backend's); the cpu backend's own run beside it
#   train      tests/run/tiny-test.yaml for 20 steps on cpu, cuda fp32 and cuda bf16 (same config, same
#              synthetic data); every step's loss within 1e-4 (fp32) and 2e-2 (bf16) of the cpu run
#   ranks      the same run on cuda with 2 ranks (b:2) and 4 ranks (b:2,m:2, model-parallel layout) on one
#              GPU (backend.comm: mpi, collectives staged through host memory): losses within 1e-4 of 1
#              rank; with 2+ GPUs also 2 ranks over NCCL (backend.comm: nccl)
#   bench      configs/bench/gpt-1b.yaml (1.3B decoder, T 2048) in bf16 on one GPU: tok/s and MFU against
#              the GPU's bf16 dense peak (H100/H200 SXM 989 TFLOP/s; GPU_CHECK_PEAK_TFLOPS overrides);
#              passes at >= 45% MFU by the model-FLOPs formula (6 N + 12 L d T per token)
# Exit status: 0 when every phase passed (a phase that cannot apply, e.g. NCCL with one GPU, is SKIP and
# does not fail), 1 when one failed, 2 when there is no GPU. Logs of every command lie next to the results
# file (FILE.logs/); a failed phase's log tail is copied into the results file, so that file is the record.
#
# --dry-run-cpu runs every phase with the cpu backend standing in for cuda (no GPU needed, smaller
# benchmark model): it checks this script's own logic and measures nothing about GPUs; its results say so.
set -uo pipefail

source_dir=$(cd "$(dirname "$0")/.." && pwd)
results=$source_dir/runs/gpu-check/results.txt
build_dir=$source_dir/build-gpu
do_build=1
budget=470
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --results) results=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --budget) budget=$2; shift 2 ;;
    --dry-run-cpu) dry_run=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$results" in /*) ;; *) results=$PWD/$results ;; esac
case "$build_dir" in /*) ;; *) build_dir=$PWD/$build_dir ;; esac

start=$(date +%s)
deadline=$((start + budget))
logs=$results.logs
work=$logs/work
mkdir -p "$(dirname "$results")" && rm -rf "$logs" && mkdir -p "$work" || { echo "gpu-check: cannot write $results" >&2; exit 1; }
: > "$results"
nvidia_smi=${GPU_CHECK_NVIDIA_SMI:-nvidia-smi}
gpu_kind=cuda
[ "$dry_run" = 1 ] && gpu_kind=cpu
export OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpiexec=${MPIEXEC:-mpiexec}

out() { echo "$*" | tee -a "$results"; }
verdicts=()
verdict() { # PHASE PASS|FAIL|SKIP TEXT
  verdicts+=("$(printf '%-12s %-4s %s' "$1" "$2" "$3")")
  out "[$1] $2: $3"
}
elapsed() { echo $(($(date +%s) - start)); }
# run_timed LOG SECONDS CMD...: the command under a timeout that also respects the overall deadline.
run_timed() {
  local log=$1 want=$2; shift 2
  local left=$((deadline - $(date +%s)))
  [ "$want" -gt "$left" ] && want=$left
  if [ "$want" -le 5 ]; then echo "gpu-check: no time left for: $*" > "$log"; return 124; fi
  echo "+ $* (timeout ${want}s)" > "$log"
  timeout --kill-after=10 "$want" "$@" >> "$log" 2>&1
}
log_tail() { out "    --- last lines of $1:"; tail -n "${2:-15}" "$1" | sed 's/^/    | /' | tee -a "$results"; }
finish() {
  out ""
  out "summary ($(elapsed) s of a ${budget} s budget)$([ "$dry_run" = 1 ] && echo ', DRY RUN: cpu stood in for cuda, nothing was measured on a GPU'):"
  local v failed=0
  for v in "${verdicts[@]}"; do
    out "  $v"
    [[ "$v" =~ ^[^\ ]+\ +FAIL ]] && failed=1
  done
  out "logs: $logs"
  if [ "$failed" = 0 ]; then out "gpu-check: PASS"; exit 0; fi
  out "gpu-check: FAIL"
  exit 1
}

out "gpu-check: $(date -u '+%F %T') UTC on $(hostname), source $source_dir ($(git -C "$source_dir" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))"
out "results: $results"

# ---- gpu ----
if [ "$dry_run" = 1 ]; then
  gpu_name="none (dry run)"
  gpu_count=0
  verdict gpu SKIP "dry run: the cpu backend stands in for cuda"
else
  gpus=$("$nvidia_smi" --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | grep -v '^$')
  gpu_count=$(printf '%s' "$gpus" | grep -c . || true)
  if [ "${gpu_count:-0}" -eq 0 ]; then
    out "gpu-check: no GPU on this machine ($nvidia_smi lists none$(command -v "$nvidia_smi" > /dev/null || echo ': not installed')): nothing was built or measured"
    out "gpu-check: NO GPU"
    exit 2
  fi
  gpu_name=$(printf '%s\n' "$gpus" | head -1 | cut -d, -f1 | sed 's/ *$//')
  verdict gpu PASS "$gpu_count GPU(s): $(printf '%s' "$gpus" | paste -sd ';' -)"
fi

# ---- build ----
mtf=$build_dir/src/mtf
conformance=$build_dir/tests/engine/test_backend_conformance
if [ "$do_build" = 1 ]; then
  cuda_flag=-DMTF_ENABLE_CUDA=ON
  [ "$dry_run" = 1 ] && cuda_flag=
  if run_timed "$logs/configure.log" 90 cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DMTF_WERROR=ON $cuda_flag &&
     run_timed "$logs/build.log" 200 cmake --build "$build_dir" -j "$(nproc)" --target mtf test_backend_conformance; then
    built=1
  else
    built=0
  fi
else
  built=1
  [ -x "$mtf" ] && [ -x "$conformance" ] || built=0
fi
version=$("$mtf" --version 2>&1)
printf '%s\n' "$version" > "$logs/version.log"
if [ "$built" = 1 ] && grep -Eq "^ *backends:.*\b$gpu_kind\b" <<< "$version"; then
  verdict build PASS "$(grep -E '^ *CUDA:' <<< "$version" | sed 's/^ *//')"
else
  verdict build FAIL "the build failed or mtf lists no $gpu_kind backend (missing MPI, HDF5, libyaml or OpenBLAS: tools/install-deps.sh; no nvcc: put /usr/local/cuda/bin on PATH)"
  [ -s "$logs/build.log" ] && log_tail "$logs/build.log" 25
  log_tail "$logs/version.log"
  finish
fi

# ---- conformance ----
# "N passed, M failed" and the largest "engine error" of its lines.
conformance_run() { # NAME RANKS KIND
  local log=$logs/conformance-$1.log
  run_timed "$log" 90 "$mpiexec" -n "$2" "$conformance" --backend "$3"
  local status=$? line worst
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  worst=$(grep -oE 'engine error [0-9.e+-]+' "$log" | awk '{ if ($3 + 0 > m) m = $3 + 0 } END { printf "%.2e", m }')
  if [ "$status" = 0 ] && [[ "$line" =~ \ 0\ failed ]] && ! grep -q "^SKIP backend" "$log"; then
    verdict "$1" PASS "$line, largest engine error $worst (exit $status)"
  else
    verdict "$1" FAIL "${line:-no summary line}, exit status $status"
    log_tail "$log"
  fi
}
conformance_run conform-1 1 "$gpu_kind"
conformance_run conform-2 2 "$gpu_kind"
[ "$dry_run" = 1 ] || conformance_run conform-cpu 2 cpu

# ---- train: cpu vs cuda, fp32 and bf16 ----
data=$work/reverse
run_timed "$logs/data.log" 30 "$mtf" data synth --task reverse --output "$data" --examples 2000 --length 16 --seed 1 ||
  { verdict train FAIL "mtf data synth failed"; log_tail "$logs/data.log"; finish; }
tiny=$source_dir/tests/run/tiny-test.yaml
# train_run NAME RANKS [--set ...]: 20 steps, losses to NAME.losses (one per line, step order).
train_run() {
  local name=$1 ranks=$2; shift 2
  local dir=$work/$name
  run_timed "$logs/train-$name.log" 60 "$mpiexec" -n "$ranks" "$mtf" train "$tiny" --set "data.train=$data/train-*.h5" \
    --set data.eval= --set train.steps=20 --set train.log_every=1 --set "run.dir=$dir" "$@"
  local status=$?
  sed -nE 's/.*"loss": ([-0-9.eE+]+).*/\1/p' "$dir/metrics.jsonl" 2>/dev/null > "$work/$name.losses"
  [ "$status" = 0 ] && [ "$(wc -l < "$work/$name.losses")" = 20 ]
}
# compare NAME REFERENCE TOLERANCE: largest |a - b| / max(1, |b|) over the steps, and the verdict.
compare() {
  local phase=$1 name=$2 ref=$3 tol=$4 diff
  if ! diff=$(paste "$work/$name.losses" "$work/$ref.losses" |
              awk -v tol="$tol" 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; if (s < 1) s = 1;
                                  if (d / s > m) m = d / s; n++ } END { printf "%.2e", m; exit !(n == 20 && m <= tol) }'); then
    verdict "$phase" FAIL "$name vs $ref: largest relative loss difference ${diff:-?} over $(wc -l < "$work/$name.losses") steps, bound $tol"
    log_tail "$logs/train-$name.log"
  else
    verdict "$phase" PASS "$name vs $ref: largest relative loss difference $diff over 20 steps (bound $tol; last loss $(tail -1 "$work/$name.losses"); $(grep -m1 -E '^backend: [a-z]' "$logs/train-$name.log"))"
  fi
}
train_run cpu 1 --set backend.kind=cpu || { verdict train FAIL "the cpu run failed"; log_tail "$logs/train-cpu.log"; }
if train_run gpu-fp32 1 --set backend.kind=$gpu_kind; then compare train-fp32 gpu-fp32 cpu 1e-4
else verdict train-fp32 FAIL "the $gpu_kind fp32 run failed"; log_tail "$logs/train-gpu-fp32.log"; fi
if [ "$dry_run" = 1 ]; then
  verdict train-bf16 SKIP "dry run: bf16 is cuda only"
elif train_run gpu-bf16 1 --set backend.kind=cuda --set backend.precision=bf16; then compare train-bf16 gpu-bf16 cpu 2e-2
else verdict train-bf16 FAIL "the cuda bf16 run failed"; log_tail "$logs/train-gpu-bf16.log"; fi

# ---- ranks: 2 and 4 ranks on one GPU (staged MPI), 2 GPUs over NCCL ----
staged=(--set backend.kind=$gpu_kind)
[ "$dry_run" = 1 ] || staged+=(--set backend.comm=mpi --set backend.device=0)
if train_run ranks-2 2 "${staged[@]}" --mesh b:2 --layout batch:b; then compare ranks-2 ranks-2 gpu-fp32 1e-4
else verdict ranks-2 FAIL "2 ranks failed"; log_tail "$logs/train-ranks-2.log"; fi
if train_run ranks-4 4 "${staged[@]}" --mesh "b:2;m:2" --layout "batch:b;heads:m;d_ff:m;vocab:m"; then
  compare ranks-4 ranks-4 gpu-fp32 1e-4
else verdict ranks-4 FAIL "4 ranks failed"; log_tail "$logs/train-ranks-4.log"; fi
if [ "$gpu_count" -ge 2 ]; then
  if train_run nccl-2 2 --set backend.kind=cuda --set backend.comm=nccl --mesh b:2 --layout batch:b; then
    compare nccl-2 nccl-2 gpu-fp32 1e-4
  else verdict nccl-2 FAIL "2 ranks over NCCL failed"; log_tail "$logs/train-nccl-2.log"; fi
else
  verdict nccl-2 SKIP "one GPU: NCCL between GPUs not run (the staged MPI path above was)"
fi

# ---- bench: the 1.3B decoder in bf16 ----
bench_cfg=$source_dir/configs/bench/gpt-1b.yaml
bench_set=(--set backend.kind=cuda --set backend.precision=bf16)
shrink=()
if [ "$dry_run" = 1 ]; then # the same script path on a model the CPU runs in seconds
  shrink=(--set model.layers=1 --set model.d_model=64 --set model.d_ff=128 --set model.heads=2 --set model.d_kv=32
          --set model.length=64 --set model.vocab=512 --set train.batch=2)
  bench_set=(--set backend.kind=cpu)
fi
steps=8
peak_tflops=${GPU_CHECK_PEAK_TFLOPS:-}
if [ -z "$peak_tflops" ]; then
  case "$gpu_name" in
    *H200*|*H100*SXM*|*H100*HBM3*|"NVIDIA H100 80GB HBM3") peak_tflops=989.4 ;;
    *H100*NVL*) peak_tflops=835.5 ;;
    *H100*PCIe*) peak_tflops=756.5 ;;
    *A100*) peak_tflops=312 ;;
    *) peak_tflops= ;;
  esac
fi
plan_json=$("$mtf" plan "$bench_cfg" --json "${shrink[@]}" 2> "$logs/bench-plan.log")
params=$(sed -nE 's/.*"parameter_count": ([0-9]+).*/\1/p' <<< "$plan_json")
bench_data=$work/bench-data
length=$("$mtf" plan "$bench_cfg" "${shrink[@]}" 2>/dev/null | grep -oE 'length:[0-9]+' | head -1 | cut -d: -f2)
length=${length:-2048}
run_timed "$logs/bench-data.log" 30 "$mtf" data synth --task copy --output "$bench_data" --examples 400 \
  --length "$((length / 2))" --seed 2 --val-fraction 0
peak_args=()
[ -n "$peak_tflops" ] && [ "$dry_run" = 0 ] && peak_args=(--set "backend.peak_gflops=$(awk -v t="$peak_tflops" 'BEGIN { print t * 1000 }')")
if [ -z "$peak_tflops" ] && [ "$dry_run" = 0 ]; then
  verdict bench FAIL "no bf16 peak known for '$gpu_name': set GPU_CHECK_PEAK_TFLOPS (dense bf16 TFLOP/s)"
elif run_timed "$logs/bench.log" 150 "$mtf" train "$bench_cfg" "${bench_set[@]}" "${shrink[@]}" "${peak_args[@]}" \
       --set "data.train=$bench_data/train-*.h5" --set data.eval= --set train.steps=$steps --set "run.dir=$work/bench"; then
  metrics=$work/bench/metrics.jsonl
  # Steady state: the steps after the first two (start-up, cuBLAS heuristics, allocator warm-up).
  tok_s=$(sed -nE 's/.*"step": ([0-9]+).*"tokens_per_s": ([0-9.eE+]+).*/\1 \2/p' "$metrics" |
          awk '$1 > 2 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
  mfu_mtf=$(sed -nE 's/.*"step": ([0-9]+).*"mfu": ([0-9.eE+-]+).*/\1 \2/p' "$metrics" |
            awk '$1 > 2 { s += $2; n++ } END { if (n) printf "%.1f", 100 * s / n }')
  layers=$(grep -oE '^ *layers: *[0-9]+' "$bench_cfg" | grep -oE '[0-9]+$')
  d_model=$(grep -oE '^ *d_model: *[0-9]+' "$bench_cfg" | grep -oE '[0-9]+$')
  if [ "$dry_run" = 1 ]; then layers=1 d_model=64; fi
  if [ -n "$tok_s" ] && [ -n "$params" ]; then
    flops_tok=$(awk -v n="$params" -v l="$layers" -v d="$d_model" -v t="$length" 'BEGIN { printf "%.6g", 6 * n + 12 * l * d * t }')
    if [ "$dry_run" = 1 ]; then
      verdict bench PASS "dry run: $params parameters, $tok_s tok/s on cpu, mtf's MFU ${mfu_mtf:-?}% (nothing about GPUs)"
    else
      mfu=$(awk -v f="$flops_tok" -v r="$tok_s" -v p="$peak_tflops" 'BEGIN { printf "%.1f", 100 * f * r / (p * 1e12) }')
      line="$params parameters, bf16, batch $(grep -oE '^ *batch: *[0-9]+' "$bench_cfg" | grep -oE '[0-9]+$') x T $length: $tok_s tok/s, MFU $mfu% of $peak_tflops TFLOP/s by 6N+12LdT ($flops_tok FLOP/token), mtf's own MFU ${mfu_mtf:-?}%"
      if awk -v m="$mfu" 'BEGIN { exit !(m >= 45) }'; then verdict bench PASS "$line"
      else verdict bench FAIL "$line: below 45%"; fi
    fi
  else
    verdict bench FAIL "no steady-state tok/s in $metrics (parameters ${params:-?})"
    log_tail "$logs/bench.log"
  fi
else
  verdict bench FAIL "the benchmark run failed or ran out of time"
  log_tail "$logs/bench.log"
fi
out "command: tools/gpu-check.sh $([ "$dry_run" = 1 ] && echo --dry-run-cpu) (bench: mtf train $bench_cfg ${bench_set[*]} ${peak_args[*]} --set train.steps=$steps)"
finish
