#!/usr/bin/env bash
# 20 steps straight against 10 steps, stop, resume, 10 steps on the same mesh: every loss and the final
# checkpoint (parameters, optimizer slots, step, RNG state, data cursor) must be identical bit for bit.
# Leaves WORK/split/checkpoints/ckpt-00000010.h5 and WORK/ref/metrics.jsonl for resume_remesh.sh.
# usage: resume_exact.sh MTF MPIEXEC CONFIG DATA WORK NPROCS MESH LAYOUT [--set k=v]...   (MESH '-': one process)
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5 nprocs=$6 mesh=$7 layout=$8
shift 8
here=$(dirname "$0")
mesh_args=(--mesh "$mesh" --layout "$layout"); [ "$mesh" = - ] && mesh_args=()
rm -rf "$work"; mkdir -p "$work"
run() { # run NAME STEPS [args...]
  local name=$1 steps=$2; shift 2
  "$mpiexec" -n "$nprocs" "$mtf" train "$config" --set "data.train=$data/train-*.h5" --set "data.eval=" \
    --set "run.dir=$work/$name" --set train.steps="$steps" --set train.checkpoint_every=10 "${mesh_args[@]}" \
    "$@" >> "$work/$name.log" 2>&1 || { echo "run $name failed:"; cat "$work/$name.log"; exit 1; }
}
run ref 20 "$@"
run split 10 "$@"
cp -r "$work/split" "$work/resumed"
run resumed 20 "$@"
grep -q "checkpoint: resumed from $work/resumed/checkpoints/ckpt-00000010.h5 at step 10" "$work/resumed.log" \
  || { echo "the second run did not resume at step 10:"; cat "$work/resumed.log"; exit 1; }
losses() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
if ! diff <(losses "$work/ref") <(losses "$work/resumed"); then
  echo "losses differ between the straight run (<) and the resumed one (>)"; exit 1
fi
[ "$(losses "$work/resumed" | wc -l)" -eq 20 ] || { echo "expected 20 logged steps"; exit 1; }
/usr/bin/python3 "$here/compare_ckpt.py" "$work/ref/checkpoints/ckpt-00000020.h5" \
  "$work/resumed/checkpoints/ckpt-00000020.h5"
echo "$mesh $layout $*: 20 losses and the final checkpoint identical (straight vs resumed at step 10)"
