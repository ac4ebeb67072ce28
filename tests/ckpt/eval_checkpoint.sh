#!/usr/bin/env bash
# `mtf eval` of a checkpoint against the evaluation the training process itself printed with the same
# parameters: on 1 rank with --checkpoint PATH and on b:2,m:2 from the run directory's latest (within 1e-4
# relative).
# usage: eval_checkpoint.sh MTF MPIEXEC CONFIG DATA WORK
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=$data/val-*.h5" --set "run.dir=$work/run")
"$mpiexec" -n 1 "$mtf" train "$config" "${common[@]}" --set train.steps=10 --set train.checkpoint_every=10 \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
reference=$(sed -nE 's/^eval: loss ([0-9.]+),.*/\1/p' "$work/train.log")
[ -n "$reference" ] || { echo "no eval line in the training log"; cat "$work/train.log"; exit 1; }
one=$("$mpiexec" -n 1 "$mtf" eval "$config" "${common[@]}" --checkpoint "$work/run/checkpoints/ckpt-00000010.h5" \
        --json 2> "$work/eval1.err")
four=$("$mpiexec" -n 4 "$mtf" eval "$config" "${common[@]}" --mesh b:2,m:2 --layout batch:b,heads:m,d_ff:m,vocab:m \
         --json 2> "$work/eval4.err")
grep -q "eval: checkpoint $work/run/checkpoints/ckpt-00000010.h5 (step 10)" "$work/eval4.err" \
  || { echo "eval did not use the latest checkpoint:"; cat "$work/eval4.err"; exit 1; }
loss() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["loss"])' "$1"; }
echo "training process: $reference; mtf eval 1 rank: $(loss "$one"); mtf eval b:2,m:2: $(loss "$four")"
# train prints 4 decimals: allow their rounding (5e-5) on top of 1e-4 relative.
/usr/bin/python3 -c '
import sys
ref = float(sys.argv[1])
bad = [x for x in map(float, sys.argv[2:]) if abs(x - ref) > 1e-4 * ref + 5e-5]
sys.exit(1 if bad else 0)' "$reference" "$(loss "$one")" "$(loss "$four")" || { echo "the evaluations differ"; exit 1; }
