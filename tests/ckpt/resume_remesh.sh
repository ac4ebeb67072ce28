#!/usr/bin/env bash
# Restores resume_exact.sh's step-10 checkpoint on another mesh and layout and checks that every following
# loss is within 1e-4 relative of the uninterrupted run on the original mesh.
# usage: resume_remesh.sh MTF MPIEXEC CONFIG DATA REF_WORK WORK NPROCS MESH LAYOUT [--set k=v]...   (MESH '-': 1 process)
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 ref=$5 work=$6 nprocs=$7 mesh=$8 layout=$9
shift 9
rm -rf "$work"; mkdir -p "$(dirname "$work")"
mesh_args=(--mesh "$mesh" --layout "$layout"); [ "$mesh" = - ] && mesh_args=()
"$mpiexec" -n "$nprocs" "$mtf" train "$config" --set "data.train=$data/train-*.h5" --set "data.eval=" \
  --set "run.dir=$work" --set train.steps=20 "${mesh_args[@]}" --from "$ref/split/checkpoints/ckpt-00000010.h5" "$@" \
  > "$work.log" 2>&1 || { cat "$work.log"; exit 1; }
grep -q "resumed from .* at step 10" "$work.log" || { echo "did not resume at step 10"; cat "$work.log"; exit 1; }
extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
join <(extract "$ref/ref" | sort -k1,1) <(extract "$work" | sort -k1,1) | sort -n | awk -v what="$mesh $layout" '
  { d = $2 - $3; if (d < 0) d = -d; rel = d / ($2 < 0 ? -$2 : $2); if (rel > worst) worst = rel; n++
    if (rel > 1e-4) { bad++; print "step " $1 ": loss " $2 " (original mesh, uninterrupted) vs " $3 } }
  END { printf "%s: steps 11-20 after restoring, %d steps, worst relative loss difference %.2e\n", what, n, worst
        if (n != 10 || bad) exit 1 }'
