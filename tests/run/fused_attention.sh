#!/usr/bin/env bash
# Trains the test model for 20 steps with model.fused_attention true and false on the same mesh and
# layout, and checks that every step's loss in metrics.jsonl agrees within 1e-5 relative. That the option
# switches the path at all is checked first: the two plans must count different FLOPs (the fused op
# counts the causal half of the scores; the general path's einsums the whole square).
# usage: fused_attention.sh MTF MPIEXEC CONFIG DATA WORKDIR NPROCS MESH LAYOUT [--set k=v]...
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5 nprocs=$6 mesh=$7 layout=$8
shift 8
name=$(echo "$nprocs-$mesh-$layout-$*" | tr -c 'A-Za-z0-9_-' '_')
mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" "$@")
flops() {
  "$mtf" plan "$config" "${common[@]}" --mesh "$mesh" --layout "$layout" --set "model.fused_attention=$1" --json |
    sed -nE 's/.*"flops_per_step": ([0-9]+).*/\1/p'
}
fused_flops=$(flops true) general_flops=$(flops false)
if [ -z "$fused_flops" ] || [ "$fused_flops" = "$general_flops" ]; then
  echo "model.fused_attention does not change the plan: ${fused_flops:-?} FLOPs both ways"; exit 1
fi
for fused in true false; do
  dir="$work/$name-$fused"
  rm -rf "$dir"
  "$mpiexec" -n "$nprocs" "$mtf" train "$config" --fresh "${common[@]}" --set "run.dir=$dir" --mesh "$mesh" \
    --layout "$layout" --set "model.fused_attention=$fused" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
done
extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
paste -d' ' <(extract "$work/$name-true") <(extract "$work/$name-false") | awk -v what="$mesh $layout $*" '
  { d = $2 - $4; if (d < 0) d = -d; rel = d / ($2 < 0 ? -$2 : $2); if (rel > worst) worst = rel;
    if (rel > 1e-5) { bad++; print "step " $1 ": loss " $2 " (fused) vs " $4 " (general)" } n++; first = (n == 1 ? $2 : first); last = $2 }
  END { printf "fused vs general attention, %s: %d steps, worst relative loss difference %.2e (loss %.4f -> %.4f)\n",
               what, n, worst, first, last;
        if (n != 20 || bad) exit 1 }'
