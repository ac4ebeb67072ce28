#!/usr/bin/env bash
# Checkpoints hold float32 masters only, whatever backend.precision trained them: an fp32 checkpoint resumes
# under bf16 and a bf16 one under fp32. Each resumed run's first step (the 6th) is checked against an
# uninterrupted run of the first precision: 10 steps straight vs 5 + 5 across the switch agree on step 6's loss
# to 5e-3 relative (the two differ only by the rounding of one step's products: about 1e-5 seen; a wrong
# restore starts from other weights), and the second run says it resumed at step 5 and logs steps 6-10 only.
# usage: bf16_resume.sh MTF MPIEXEC CONFIG DATA WORKDIR
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" --set train.checkpoint_every=5 --set train.steps=10)
loss_at() { sed -nE "s/.*\"step\": $2, \"loss\": ([^,]+),.*/\1/p" "$1/metrics.jsonl" | tail -1; }
for pair in "fp32 bf16" "bf16 fp32"; do
  read -r first second <<<"$pair"
  dir="$work/$first-then-$second"
  rm -rf "$dir" "$dir-straight"
  "$mpiexec" -n 2 "$mtf" train "$config" --fresh "${common[@]}" --mesh b:2 --layout batch:b --set train.steps=5 \
    --set "backend.precision=$first" --set "run.dir=$dir" > "$dir.1.log" 2>&1 || { cat "$dir.1.log"; exit 1; }
  # the other precision resumes on another mesh too (1 rank): the checkpoint is at global shape
  "$mpiexec" -n 1 "$mtf" train "$config" "${common[@]}" --set "backend.precision=$second" --set "run.dir=$dir" \
    > "$dir.2.log" 2>&1 || { cat "$dir.2.log"; exit 1; }
  grep -q "checkpoint: resumed from .* at step 5 " "$dir.2.log" ||
    { echo "$first -> $second: the second run did not say it resumed at step 5:"; cat "$dir.2.log"; exit 1; }
  steps=$(sed -nE 's/.*"step": ([0-9]+), "loss".*/\1/p' "$dir/metrics.jsonl" | tr '\n' ' ')
  [ "$steps" = "1 2 3 4 5 6 7 8 9 10 " ] || { echo "$first -> $second: steps logged: $steps"; exit 1; }
  "$mpiexec" -n 1 "$mtf" train "$config" --fresh "${common[@]}" --set "backend.precision=$first" \
    --set "run.dir=$dir-straight" > "$dir.3.log" 2>&1 || { cat "$dir.3.log"; exit 1; }
  resumed=$(loss_at "$dir" 6) straight=$(loss_at "$dir-straight" 6)
  [ -n "$resumed" ] && [ -n "$straight" ] || { echo "$first -> $second: no step 6 in metrics.jsonl"; exit 1; }
  awk -v a="$resumed" -v b="$straight" -v what="$first -> $second" -v first="$first" 'BEGIN { d = a - b; if (d < 0) d = -d;
    rel = d / (b < 0 ? -b : b);
    printf "%s: step 6 loss %s after resuming, %s straight through in %s (relative %.2e)\n", what, a, b, first, rel;
    exit !(rel <= 5e-3) }'
done
