#!/usr/bin/env bash
# Gradient accumulators are not model state: a run checkpointed with train.microbatches 2 holds no
# grad_accum variable and resumes with microbatches 1 (and back), continuing with the losses of an
# uninterrupted run (1e-5 relative).
# usage: resume_microbatches.sh MTF MPIEXEC CONFIG DATA WORKDIR
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" --set model.dropout=0.1 --mesh b:2 --layout batch:b)
train() { # dir log args...
  local dir=$1 log=$2
  shift 2
  "$mpiexec" -n 2 "$mtf" train "$config" "${common[@]}" --set "run.dir=$dir" "$@" >> "$log" 2>&1 || { cat "$log"; exit 1; }
}
train "$work/whole" "$work/whole.log" --fresh --set train.steps=6
train "$work/split" "$work/split.log" --fresh --set train.steps=3 --set train.checkpoint_every=3 --set train.microbatches=2
"$mtf" ckpt inspect "$work/split/checkpoints/ckpt-00000003.h5" > "$work/inspect.txt" 2>&1 || { cat "$work/inspect.txt"; exit 1; }
if grep -q grad_accum "$work/inspect.txt"; then echo "the checkpoint holds gradient accumulators:"; cat "$work/inspect.txt"; exit 1; fi
grep -q "adafactor" "$work/inspect.txt" || { echo "no optimizer slots in the checkpoint?"; cat "$work/inspect.txt"; exit 1; }
train "$work/split" "$work/split.log" --set train.steps=6 --set train.microbatches=1
grep -q "resumed from .*ckpt-00000003.h5 at step 3" "$work/split.log" || { cat "$work/split.log"; exit 1; }
extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl" | sort -n -k1,1 -u; }
paste -d' ' <(extract "$work/whole") <(extract "$work/split") | awk '
  { d = $2 - $4; if (d < 0) d = -d; rel = d / $2; if (rel > worst) worst = rel; n++
    if ($1 != $3 || rel > 1e-5) { bad++; print "step " $1 ": loss " $2 " (uninterrupted) vs " $4 } }
  END { printf "resumed across microbatch settings: %d steps, worst relative loss difference %.2e\n", n, worst;
        if (n != 6 || bad) exit 1 }'
