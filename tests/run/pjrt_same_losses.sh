#!/usr/bin/env bash
# backend pjrt (1 process x 4 XLA CPU-plugin devices) against backend cpu (4 MPI ranks) on mesh b:2;m:2:
# trains the test model 20 steps on each under one layout and optimizer, checks every step's loss and
# gradient norm in metrics.jsonl agree within 1e-4 and 1e-3 (relative), then evaluates each run's checkpoint on
# both backends: the same eval loss within 1e-5 (a checkpoint written on pjrt restores on cpu, and the reverse).
# BOUNDS="LOSS GRAD_NORM EVAL" replaces the three bounds (a bf16 run: its roundings follow each backend's order
# of fp32 sums).
# usage: pjrt_same_losses.sh MTF MPIEXEC CONFIG DATA WORKDIR LAYOUT OPTIMIZER [ARG...] (more mtf options)
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5 layout=$6 optimizer=$7
shift 7
rm -rf "$work" && mkdir -p "$work"
common=("$config" --set "data.train=$data/train-*.h5" --set "data.eval=$data/val-*.h5" --set train.eval_batches=2
        --mesh "b:2;m:2" --layout "$layout" --set "train.optimizer=$optimizer" "$@")
pjrt=(--set backend.kind=pjrt --set backend.local_devices=4)
# The test of the test: PJRT_EXTRA="--set ..." changes the pjrt runs alone, which must then fail.
read -r -a extra <<< "${PJRT_EXTRA:-}"
read -r loss_bound grad_bound eval_bound <<< "${BOUNDS:-1e-4 1e-3 1e-5}"
pjrt+=("${extra[@]+"${extra[@]}"}")
run() { # name command...
  local name=$1; shift
  "$@" > "$work/$name.log" 2>&1 || { echo "FAIL $name:"; cat "$work/$name.log"; exit 1; }
}
train_args=(--fresh --set train.steps=20 --set train.checkpoint_every=20)
run train-cpu "$mpiexec" -n 4 "$mtf" train "${common[@]}" "${train_args[@]}" --set "run.dir=$work/cpu"
run train-pjrt "$mpiexec" -n 1 "$mtf" train "${common[@]}" "${train_args[@]}" --set "run.dir=$work/pjrt" "${pjrt[@]}"
grep -q "^backend: pjrt, 1 process x 4 devices" "$work/train-pjrt.log" || { echo "FAIL: pjrt did not run"; cat "$work/train-pjrt.log"; exit 1; }
extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+), "lr": [^,]+, "grad_norm": ([^,]+),.*/\1 \2 \3/' "$1/metrics.jsonl" | grep -E '^[0-9]+ '; }
paste -d' ' <(extract "$work/cpu") <(extract "$work/pjrt") |
  awk -v what="cpu vs pjrt, $layout, $optimizer" -v lb="$loss_bound" -v gb="$grad_bound" '
  function rel(x, y) { d = x - y; if (d < 0) d = -d; m = x < 0 ? -x : x; return m > 0 ? d / m : d }
  { l = rel($2, $5); g = rel($3, $6); if (l > worst) worst = l; if (g > worst_g) worst_g = g; n++
    if (l > lb + 0 || g > gb + 0) { bad++; print "step " $1 ": loss " $2 " vs " $5 ", grad_norm " $3 " vs " $6 } }
  END { printf "%s: %d steps, worst relative difference: loss %.2e, grad_norm %.2e\n", what, n, worst, worst_g;
        if (n != 20 || bad) exit 1 }'
# Each run's checkpoint evaluated on both backends.
evaluate() { # run-dir name backend-args...
  local dir=$1 name=$2; shift 2
  run "$name" "$mpiexec" -n "$([ $# -gt 0 ] && echo 1 || echo 4)" "$mtf" eval "${common[@]}" --set "run.dir=$dir" --json "$@"
  grep -E '^\{"loss"' "$work/$name.log" | sed -E 's/\{"loss": ([^,]+),.*/\1/'
}
for ckpt in cpu pjrt; do
  on_cpu=$(evaluate "$work/$ckpt" "eval-$ckpt-on-cpu")
  on_pjrt=$(evaluate "$work/$ckpt" "eval-$ckpt-on-pjrt" "${pjrt[@]}")
  awk -v a="$on_cpu" -v b="$on_pjrt" -v what="checkpoint of the $ckpt run" -v eb="$eval_bound" 'BEGIN {
    d = a - b; if (d < 0) d = -d; r = d / (a < 0 ? -a : a)
    printf "%s: eval loss %s on cpu, %s on pjrt (relative difference %.2e)\n", what, a, b, r; exit r > eb + 0 }'
done
echo "all checks passed"
