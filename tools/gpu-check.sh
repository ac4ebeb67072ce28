#!/usr/bin/env bash
# The CUDA backend's check on a borrowed GPU machine, in one short run (issue 28): probe, set up, check
# correctness, measure, and leave a compact record that fits what such a machine can send back.
#
#   tools/gpu-check.sh [--out DIR] [--bundle FILE | --build-dir DIR [--no-build] [--cmake-args ARGS]]
#                      [--budget SECONDS] [--dry-run-cpu]
#
#   --out DIR          results.txt (the record: every phase's verdict and figures, rewritten after each phase)
#                      and one short log per phase (its last 60 lines): at most 20 small files; default
#                      runs/gpu-check. Work files (data, runs) go to a temporary directory, removed at the end.
#   --bundle FILE      run from a bundle made by tools/gpu-bundle.sh on a machine with the dependencies: the GPU
#                      machine needs CUDA only (no MPI, HDF5, libyaml, OpenBLAS, no package registry, no build)
#   --build-dir DIR    otherwise build there (default build-gpu): cmake Release with the cuda backend, plus
#   --cmake-args ARGS  extra cmake arguments (one string, split on spaces), e.g. "-DCMAKE_CUDA_ARCHITECTURES=90";
#                      warnings are not errors (a newer host compiler may warn where ours does not)
#   --no-build         use DIR's binaries as they are
#   --budget SECONDS   the whole run (default 470); each phase gets its share below, scaled to the budget
#   --dry-run-cpu      everything with the cpu backend standing in for cuda, and, without --bundle, a bundle made
#                      from the build (tools/gpu-bundle.sh --allow-native) and run from: checks this script and the
#                      bundle here; measures nothing about GPUs, and its results say so
#
# Phases and their shares of 470 s (a phase stops at its share; the shares sum to the budget):
#   probe 5        nvidia-smi, the CUDA and NCCL libraries the loader finds, nvcc, cmake, MPI: what this machine has
#   setup 120      unpack the bundle (or build mtf and test_backend_conformance); `mtf --version` lists cuda
#   conform 60     test_backend_conformance --backend cuda on 1 and on 2 ranks (every op against the double
#                  reference; the cpu backend's bounds), and its attention cases under --bf16 (the tensor cores)
#   train 70       tests/run/tiny-test.yaml, 20 steps: cuda fp32 against cpu within 1e-4, cuda bf16 within 2e-2
#   ranks 60       the same on 2 ranks (b:2) and 4 ranks (b:2;m:2) sharing the GPU (backend.comm mpi) within 1e-4
#                  of 1 rank; with 2+ GPUs also 2 ranks over NCCL
#   bench 145      configs/bench/gpt-1b.yaml (1.3B decoder, T 2048, bf16, 2 microbatches: planned about 45 GB per
#                  rank), 6 steps: tokens/s and MFU against the GPU's dense bf16 peak, recorded, not judged
#   report 10      the summary
# A run stopped by its phase's limit gets SIGINT (mtf stops at the next step without a checkpoint), then SIGKILL.
# Exit status: 0 when every phase passed or was skipped, 1 when one failed, 2 when there is no GPU (nothing
# is set up or run then).
set -uo pipefail

source_dir=$(cd "$(dirname "$0")/.." && pwd)
out_dir=$source_dir/runs/gpu-check
bundle="" build_dir=$source_dir/build-gpu do_build=1 cmake_args="" budget=470 dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out_dir=${2:?--out needs a directory}; shift 2 ;;
    --bundle) bundle=${2:?--bundle needs a file}; shift 2 ;;
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
    --cmake-args) cmake_args=${2?--cmake-args needs a string}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --dry-run-cpu) dry_run=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] && [ "$budget" -ge 60 ] || { echo "gpu-check: --budget must be a number of seconds >= 60" >&2; exit 2; }
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
out_dir=$(abs "$out_dir") build_dir=$(abs "$build_dir")
[ -n "$bundle" ] && bundle=$(abs "$bundle")
mkdir -p "$out_dir" || { echo "gpu-check: cannot write $out_dir" >&2; exit 1; }
rm -f "$out_dir"/results.txt "$out_dir"/*.log
results=$out_dir/results.txt
work=$(mktemp -d "${TMPDIR:-/tmp}/mtf-gpu-check.XXXXXX") || { echo "gpu-check: no temporary directory" >&2; exit 1; }
trap 'rm -rf "$work"' EXIT

# The phases' shares of 470 s, scaled to the budget (the last share takes the rounding).
phases=(probe setup conform train ranks bench report)
shares=(5 120 60 70 60 145 10)
declare -A limit
sum=0
for i in "${!phases[@]}"; do
  limit[${phases[$i]}]=$((shares[i] * budget / 470))
  sum=$((sum + limit[${phases[$i]}]))
done
limit[report]=$((limit[report] + budget - sum))
start=$(date +%s)
phase="" phase_end=0
begin_phase() { phase=$1; phase_end=$(($(date +%s) + limit[$1])); }

gpu_kind=cuda
[ "$dry_run" = 1 ] && gpu_kind=cpu
export OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia_smi=${GPU_CHECK_NVIDIA_SMI:-nvidia-smi}

out() { echo "$*" | tee -a "$results"; }
verdicts=()
verdict() { # NAME PASS|FAIL|SKIP TEXT
  verdicts+=("$(printf '%-11s %-4s %s' "$1" "$2" "$3")")
  out "[$1] $2: $3"
}
# run_timed LOG SECONDS CMD...: the command under the smaller of SECONDS and what is left of the phase;
# SIGINT at the limit (mtf stops cleanly, no checkpoint), SIGKILL 10 s later. Appends to the phase's log.
run_timed() {
  local log=$1 want=$2; shift 2
  local left=$((phase_end - $(date +%s)))
  [ "$want" -gt "$left" ] && want=$left
  if [ "$want" -lt 3 ]; then echo "gpu-check: no time left in phase $phase for: $*" >> "$log"; return 124; fi
  echo "+ $* (limit ${want}s)" >> "$log"
  timeout -s INT --kill-after=10 "$want" "$@" >> "$log" 2>&1
}
phase_log() { echo "$work/$1.log"; }
# The phase's log, its last 60 lines, into the output directory (small: what comes back from a device).
keep_log() { [ -s "$(phase_log "$1")" ] && tail -n 60 "$(phase_log "$1")" | cut -c1-400 > "$out_dir/$1.log"; }
log_tail() { out "    --- last lines of $1.log:"; tail -n "${2:-12}" "$(phase_log "$1")" | cut -c1-300 | sed 's/^/    | /' | tee -a "$results"; }
finish() {
  begin_phase report
  out ""
  out "summary ($(($(date +%s) - start)) s of a ${budget} s budget)$([ "$dry_run" = 1 ] && echo ', DRY RUN: cpu stood in for cuda, nothing was measured on a GPU'):"
  local v failed=0
  for v in "${verdicts[@]}"; do
    out "  $v"
    [[ "$v" =~ ^[^\ ]+\ +FAIL ]] && failed=1
  done
  out "files: $out_dir ($(ls "$out_dir" | wc -l) files)"
  if [ "$failed" = 0 ]; then out "gpu-check: PASS"; exit 0; fi
  out "gpu-check: FAIL"
  exit 1
}

out "gpu-check: $(date -u '+%F %T') UTC on $(hostname), source $(git -C "$source_dir" rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)')$([ "$dry_run" = 1 ] && echo ', DRY RUN (cpu stands in for cuda)')"
out "budget ${budget} s: $(for p in "${phases[@]}"; do printf '%s %s, ' "$p" "${limit[$p]}"; done | sed 's/, $//')"

# ---- probe (5 s): what this machine has ----
begin_phase probe
plog=$(phase_log probe)
probe() { # LABEL CMD...: one line, within a second or two
  local v
  v=$(timeout 2 "${@:2}" 2>/dev/null | head -1 | cut -c1-160)
  echo "$1: ${v:-none}" >> "$plog"
}
probe "gpus" "$nvidia_smi" --query-gpu=name,memory.total,driver_version --format=csv,noheader
probe "nvcc" bash -c 'nvcc --version | tail -1'
probe "cmake" cmake --version
probe "mpiexec" bash -c 'command -v mpiexec'
probe "cuda libraries" bash -c "ldconfig -p | grep -oE 'lib(cudart|cublas|cublasLt|nccl)\\.so\\.[0-9]+' | sort -u | paste -sd ' '"
probe "nccl (python)" bash -c 'ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib 2>/dev/null'
probe "cpu" bash -c "lscpu | sed -n 's/^Model name: *//p'"
probe "c library" bash -c 'ldd --version | head -1'
cat "$plog" | sed 's/^/  /' | tee -a "$results" > /dev/null
if [ "$dry_run" = 1 ]; then
  gpu_name="none (dry run)" gpu_count=0
  verdict probe SKIP "dry run: the cpu backend stands in for cuda"
else
  # The decisive question, not held to the probe's 5 s: a driver's first nvidia-smi can take several seconds.
  gpus=$(timeout 20 "$nvidia_smi" --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | grep -v '^$')
  gpu_count=$(printf '%s' "$gpus" | grep -c . || true)
  if [ "${gpu_count:-0}" -eq 0 ]; then
    out "gpu-check: no GPU on this machine ($nvidia_smi lists none$(command -v "$nvidia_smi" > /dev/null || echo ': not installed')): nothing was set up or measured"
    out "gpu-check: NO GPU"
    keep_log probe
    exit 2
  fi
  gpu_name=$(printf '%s\n' "$gpus" | head -1 | cut -d, -f1 | sed 's/ *$//')
  verdict probe PASS "$gpu_count GPU(s): $(printf '%s' "$gpus" | paste -sd ';' -)"
fi
keep_log probe

# ---- setup: the bundle, or a build ----
begin_phase setup
slog=$(phase_log setup)
if [ -z "$bundle" ] && [ "$dry_run" = 1 ]; then # the dry run makes a bundle from the build here and runs from it
  if [ "$do_build" = 1 ]; then
    # shellcheck disable=SC2086
    run_timed "$slog" 60 cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release $cmake_args &&
      run_timed "$slog" 100 cmake --build "$build_dir" -j "$(nproc)" --target mtf test_backend_conformance
  fi
  bundle=$work/gpu-bundle.tar.gz
  run_timed "$slog" 60 bash "$source_dir/tools/gpu-bundle.sh" --build-dir "$build_dir" --output "$bundle" --allow-native ||
    bundle=""
fi
if [ -n "$bundle" ]; then
  if [ -f "$bundle" ] && run_timed "$slog" 60 tar -C "$work" -xzf "$bundle" && [ -f "$work/mtf-gpu-bundle/env.sh" ]; then
    # shellcheck disable=SC1091
    source "$work/mtf-gpu-bundle/env.sh"
    mtf=$work/mtf-gpu-bundle/bin/mtf conformance=$work/mtf-gpu-bundle/bin/test_backend_conformance
    how="from the bundle $(basename "$bundle") ($(du -m "$bundle" | cut -f1) MiB; $(sed -n 2p "$work/mtf-gpu-bundle/MANIFEST.txt"))"
  else
    mtf="" how="the bundle ${bundle} could not be unpacked"
  fi
else
  mtf=$build_dir/src/mtf conformance=$build_dir/tests/engine/test_backend_conformance how="built in $build_dir"
  if [ "$do_build" = 1 ]; then
    # shellcheck disable=SC2086
    run_timed "$slog" 50 cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DMTF_ENABLE_CUDA=ON $cmake_args &&
      run_timed "$slog" 200 cmake --build "$build_dir" -j "$(nproc)" --target mtf test_backend_conformance ||
      how="the build failed (without MPI, HDF5, libyaml or OpenBLAS on this machine, make a bundle elsewhere: tools/gpu-bundle.sh)"
  fi
fi
mpiexec=$(command -v mpiexec || echo mpiexec)
version=$([ -n "$mtf" ] && timeout 20 "$mtf" --version 2>&1)
echo "$version" >> "$slog"
if [ -n "$mtf" ] && [ -x "$conformance" ] && grep -Eq "^ *backends:.*\b$gpu_kind\b" <<< "$version"; then
  verdict setup PASS "$how; $(grep -E '^ *(CUDA|cuda):' <<< "$version" | head -1 | sed 's/^ *//')"
  keep_log setup
else
  verdict setup FAIL "$how; mtf does not run or lists no $gpu_kind backend"
  log_tail setup 20
  keep_log setup
  finish
fi

# ---- conform: every op on 1 and 2 ranks ----
begin_phase conform
clog=$(phase_log conform)
conformance_run() { # NAME RANKS KIND SECONDS [ARG]...
  local name=$1 ranks=$2 kind=$3 seconds=$4 before status line worst
  shift 4
  before=$(wc -l < "$clog" 2>/dev/null || echo 0)
  run_timed "$clog" "$seconds" "$mpiexec" -n "$ranks" "$conformance" --backend "$kind" "$@"
  status=$?
  line=$(tail -n +"$((before + 1))" "$clog" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
  worst=$(tail -n +"$((before + 1))" "$clog" | grep -oE 'engine error [0-9.e+-]+' | awk '{ if ($3 + 0 > m) m = $3 + 0 } END { printf "%.2e", m }')
  if [ "$status" = 0 ] && [[ "$line" =~ \ 0\ failed ]]; then
    verdict "$name" PASS "$line, largest engine error $worst"
  else
    verdict "$name" FAIL "${line:-no summary line}, exit status $status"
    log_tail conform
  fi
}
conformance_run conform-1 1 "$gpu_kind" 30
# The attention cases under the bf16 policy: on cuda the tensor-core kernels (depths 64 and 128).
conformance_run conform-bf16 1 "$gpu_kind" 15 --bf16 --only attention
conformance_run conform-2 2 "$gpu_kind" 45
keep_log conform

# ---- train: cpu vs cuda, fp32 and bf16 ----
begin_phase train
tlog=$(phase_log train)
data=$work/reverse
run_timed "$tlog" 20 "$mtf" data synth --task reverse --output "$data" --examples 2000 --length 16 --seed 1 ||
  verdict train FAIL "mtf data synth failed"
tiny=$source_dir/tests/run/tiny-test.yaml
# train_run NAME RANKS SECONDS [--set ...]: 20 steps, losses to NAME.losses (one per line, step order).
train_run() {
  local name=$1 ranks=$2 seconds=$3; shift 3
  local dir=$work/$name
  run_timed "$(phase_log "$phase")" "$seconds" "$mpiexec" -n "$ranks" "$mtf" train "$tiny" --set "data.train=$data/train-*.h5" \
    --set data.eval= --set train.steps=20 --set train.log_every=1 --set train.checkpoint_every=0 --set "run.dir=$dir" "$@"
  local status=$?
  sed -nE 's/.*"loss": ([-0-9.eE+]+).*/\1/p' "$dir/metrics.jsonl" 2>/dev/null > "$work/$name.losses"
  [ "$status" = 0 ] && [ "$(wc -l < "$work/$name.losses")" = 20 ]
}
# compare PHASE NAME REFERENCE BOUND: the largest |a - b| / max(1, |b|) over the steps, and the verdict.
compare() {
  local name=$2 ref=$3 bound=$4 diff
  if ! diff=$(paste "$work/$name.losses" "$work/$ref.losses" |
              awk -v b="$bound" 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; if (s < 1) s = 1;
                                  if (d / s > m) m = d / s; n++ } END { printf "%.2e", m; exit !(n == 20 && m <= b) }'); then
    verdict "$1" FAIL "$name vs $ref: largest relative loss difference ${diff:-?} over $(wc -l < "$work/$name.losses") steps, bound $bound"
    log_tail "$phase"
  else
    verdict "$1" PASS "$name vs $ref: largest relative loss difference $diff over 20 steps (bound $bound; last loss $(tail -1 "$work/$name.losses"))"
  fi
}
train_run cpu 1 20 --set backend.kind=cpu || { verdict train FAIL "the cpu run failed"; log_tail train; }
if train_run gpu-fp32 1 20 --set backend.kind=$gpu_kind; then compare train-fp32 gpu-fp32 cpu 1e-4
else verdict train-fp32 FAIL "the $gpu_kind fp32 run failed"; log_tail train; fi
if train_run gpu-bf16 1 20 --set backend.kind=$gpu_kind --set backend.precision=bf16; then compare train-bf16 gpu-bf16 cpu 2e-2
else verdict train-bf16 FAIL "the $gpu_kind bf16 run failed"; log_tail train; fi
keep_log train

# ---- ranks: 2 and 4 ranks on one GPU (staged through host memory), 2 GPUs over NCCL ----
begin_phase ranks
staged=(--set backend.kind=$gpu_kind)
[ "$dry_run" = 1 ] || staged+=(--set backend.comm=mpi --set backend.device=0)
if train_run ranks-2 2 25 "${staged[@]}" --mesh b:2 --layout batch:b; then compare ranks-2 ranks-2 gpu-fp32 1e-4
else verdict ranks-2 FAIL "2 ranks failed"; log_tail ranks; fi
if train_run ranks-4 4 30 "${staged[@]}" --mesh "b:2;m:2" --layout "batch:b;heads:m;d_ff:m;vocab:m"; then
  compare ranks-4 ranks-4 gpu-fp32 1e-4
else verdict ranks-4 FAIL "4 ranks failed"; log_tail ranks; fi
if [ "$gpu_count" -ge 2 ]; then
  if train_run nccl-2 2 25 --set backend.kind=cuda --set backend.comm=nccl --mesh b:2 --layout batch:b; then
    compare nccl-2 nccl-2 gpu-fp32 1e-4
  else verdict nccl-2 FAIL "2 ranks over NCCL failed"; log_tail ranks; fi
else
  verdict nccl-2 SKIP "$([ "$dry_run" = 1 ] && echo 'dry run' || echo 'one GPU'): NCCL between GPUs not run (the staged path above was; the emulator's tests run nccl_comm.c)"
fi
keep_log ranks

# ---- bench: the 1.3B decoder in bf16, recorded ----
begin_phase bench
blog=$(phase_log bench)
bench_cfg=$source_dir/configs/bench/gpt-1b.yaml
bench_set=(--set backend.kind=cuda --set backend.precision=bf16)
if [ "$dry_run" = 1 ]; then # the same path on a model the CPU runs in seconds
  bench_set=(--set backend.kind=cpu --set backend.precision=bf16 --set model.layers=1 --set model.d_model=64
             --set model.d_ff=128 --set model.heads=2 --set model.d_kv=32 --set model.length=64 --set model.vocab=512
             --set train.batch=4)
fi
peak_tflops=${GPU_CHECK_PEAK_TFLOPS:-}
if [ -z "$peak_tflops" ]; then
  case "$gpu_name" in
    *H200*|*H100*SXM*|*H100*HBM3*) peak_tflops=989.4 ;;
    *H100*NVL*) peak_tflops=835.5 ;;
    *H100*PCIe*) peak_tflops=756.5 ;;
    *A100*) peak_tflops=312 ;;
  esac
fi
plan=$(timeout 30 "$mtf" plan "$bench_cfg" "${bench_set[@]}" 2>> "$blog")
echo "$plan" | grep -E '^per rank' >> "$blog"
planned=$(sed -nE 's/^per rank in mtf train \(peak resident, estimated\): ([0-9.]+) MiB.*/\1/p' <<< "$plan")
params=$(timeout 30 "$mtf" plan "$bench_cfg" "${bench_set[@]}" --json 2>/dev/null | sed -nE 's/.*"parameter_count": ([0-9]+).*/\1/p')
length=$(grep -oE 'length:[0-9]+' <<< "$plan" | head -1 | cut -d: -f2)
length=${length:-2048}
bench_steps=6
run_timed "$blog" 20 "$mtf" data synth --task copy --output "$work/bench-data" --examples 200 --length "$((length / 2))" \
  --seed 2 --val-fraction 0
peak_args=()
[ -n "$peak_tflops" ] && [ "$dry_run" = 0 ] && peak_args=(--set "backend.peak_gflops=$(awk -v t="$peak_tflops" 'BEGIN { print t * 1000 }')")
# One process without mpiexec: SIGINT at the limit reaches mtf itself, which stops without a checkpoint.
run_timed "$blog" 140 "$mtf" train "$bench_cfg" "${bench_set[@]}" "${peak_args[@]}" --set "data.train=$work/bench-data/train-*.h5" \
  --set data.eval= --set train.steps=$bench_steps --set train.checkpoint_every=0 --set "run.dir=$work/bench"
bench_status=$?
metrics=$work/bench/metrics.jsonl
# Steady state: the steps after the first two (start-up, cuBLAS heuristics, allocator warm-up).
tok_s=$(sed -nE 's/.*"step": ([0-9]+).*"tokens_per_s": ([0-9.eE+]+).*/\1 \2/p' "$metrics" 2>/dev/null |
        awk '$1 > 2 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
mfu_mtf=$(sed -nE 's/.*"step": ([0-9]+).*"mfu": ([0-9.eE+-]+).*/\1 \2/p' "$metrics" 2>/dev/null |
          awk '$1 > 2 { s += $2; n++ } END { if (n) printf "%.1f", 100 * s / n }')
steps_done=$(grep -c '"step"' "$metrics" 2>/dev/null || echo 0)
line="planned ${planned:-?} MiB per rank, ${params:-?} parameters, $steps_done of $bench_steps steps"
if [ -n "$tok_s" ]; then
  line+=", $tok_s tok/s (median after step 2), mtf's MFU ${mfu_mtf:-?}%"
  if [ "$dry_run" = 0 ] && [ -n "$peak_tflops" ] && [ -n "$params" ]; then
    layers=$(grep -oE '^ *layers: *[0-9]+' "$bench_cfg" | grep -oE '[0-9]+$')
    d_model=$(grep -oE '^ *d_model: *[0-9]+' "$bench_cfg" | grep -oE '[0-9]+$')
    line+=", MFU $(awk -v n="$params" -v l="$layers" -v d="$d_model" -v t="$length" -v r="$tok_s" -v p="$peak_tflops" \
      'BEGIN { printf "%.1f", 100 * (6 * n + 12 * l * d * t) * r / (p * 1e12) }')% of $peak_tflops TFLOP/s by 6N+12LdT"
  fi
  [ "$dry_run" = 1 ] && line="dry run, nothing about GPUs: $line"
  verdict bench PASS "$line$([ "$bench_status" = 0 ] || echo " (stopped at the phase's limit: status $bench_status)")"
else
  verdict bench FAIL "$line: no steady-state step (exit status $bench_status)"
  log_tail bench
fi
keep_log bench
out "bench command: mtf train configs/bench/gpt-1b.yaml ${bench_set[*]} ${peak_args[*]} --set train.steps=$bench_steps"
finish
