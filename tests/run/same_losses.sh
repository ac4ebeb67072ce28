#!/usr/bin/env bash
# Trains the test model for 10 steps (SAME_LOSSES_STEPS) twice, with different options, and checks that every
# step's loss and gradient norm in metrics.jsonl agree within TOLERANCE (relative). For settings that must not
# change the numbers: gradient accumulation (train.microbatches), recomputation (train.recompute), the fused
# attention against the general path.
# usage: same_losses.sh MTF MPIEXEC CONFIG DATA WORKDIR TOLERANCE "NPROCS [ARG]..." "NPROCS [ARG]..."
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5 tolerance=$6 a=$7 b=$8 steps=${SAME_LOSSES_STEPS:-10}
mkdir -p "$work"
train() { # name nprocs args...
  local dir="$work/$1" nprocs=$2
  shift 2
  rm -rf "$dir"
  "$mpiexec" -n "$nprocs" "$mtf" train "$config" --fresh --set "data.train=$data/train-*.h5" --set "data.eval=" \
    --set train.steps="$steps" --set "run.dir=$dir" "$@" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
}
read -r -a args_a <<< "$a"
read -r -a args_b <<< "$b"
train a "${args_a[@]}"
train b "${args_b[@]}"
extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+), "lr": [^,]+, "grad_norm": ([^,]+),.*/\1 \2 \3/' "$1/metrics.jsonl"; }
paste -d' ' <(extract "$work/a") <(extract "$work/b") | awk -v tol="$tolerance" -v steps="$steps" -v what="[$a] vs [$b]" '
  function rel(x, y) { d = x - y; if (d < 0) d = -d; m = x < 0 ? -x : x; return m > 0 ? d / m : d }
  { l = rel($2, $5); g = rel($3, $6); if (l > worst) worst = l; if (g > worst_g) worst_g = g; n++
    if (l > tol || g > 10 * tol) { bad++; print "step " $1 ": loss " $2 " vs " $5 ", grad_norm " $3 " vs " $6 } }
  END { printf "%s: %d steps, worst relative difference: loss %.2e, grad_norm %.2e\n", what, n, worst, worst_g;
        if (n != steps || bad) exit 1 }'
