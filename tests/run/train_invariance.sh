#!/usr/bin/env bash
# Trains the test model for 20 steps on one rank and on a mesh, and checks that every step's loss in
# metrics.jsonl agrees within 1e-4 relative (MTF_INVARIANCE_TOL overrides: bf16 matmuls round operands whose
# fp32 values differ by the order of partial sums on another layout, so their bound is 1e-2).
# usage: train_invariance.sh MTF MPIEXEC CONFIG DATA WORKDIR NPROCS MESH LAYOUT [--set k=v]...
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5 nprocs=$6 mesh=$7 layout=$8
shift 8
name=$(echo "$nprocs-$mesh-$layout-$*" | tr -c 'A-Za-z0-9_-' '_')
one="$work/one-$(echo "$*" | tr -c 'A-Za-z0-9_-' '_')" many="$work/$name"
mkdir -p "$work"; rm -rf "$many"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" "$@")
# The one-rank reference is shared by the tests with the same options; a new mtf binary invalidates it.
if [ ! -s "$one/metrics.jsonl" ] || [ "$mtf" -nt "$one/metrics.jsonl" ]; then
  rm -rf "$one"
  "$mpiexec" -n 1 "$mtf" train "$config" --fresh "${common[@]}" --set "run.dir=$one" > "$one.log" 2>&1 || { cat "$one.log"; exit 1; }
fi
"$mpiexec" -n "$nprocs" "$mtf" train "$config" --fresh "${common[@]}" --set "run.dir=$many" --mesh "$mesh" --layout "$layout" \
  > "$many.log" 2>&1 || { cat "$many.log"; exit 1; }
extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
paste -d' ' <(extract "$one") <(extract "$many") | awk -v what="$mesh $layout $*" -v tol="${MTF_INVARIANCE_TOL:-1e-4}" '
  { d = $2 - $4; if (d < 0) d = -d; rel = d / ($2 < 0 ? -$2 : $2); if (rel > worst) worst = rel;
    if (rel > tol) { bad++; print "step " $1 ": loss " $2 " (1 rank) vs " $4 } n++; first = (n == 1 ? $2 : first); last = $2 }
  END { printf "%s: %d steps, worst relative loss difference %.2e (loss %.4f -> %.4f)\n", what, n, worst, first, last;
        if (n != 20 || bad) exit 1 }'
