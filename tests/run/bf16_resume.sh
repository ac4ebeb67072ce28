#!/usr/bin/env bash
# Checkpoints hold float32 masters only, whatever backend.precision trained them: an fp32 checkpoint resumes
# under bf16 and a bf16 one under fp32. Each resumed run's first step (the 6th) is checked against an
# uninterrupted run of the resuming precision from the same checkpoint state: 10 steps straight in one
# precision vs 5 + 5 across the switch agree on the restored step's loss to 2e-2 relative, and the restore
# happens (the run continues at step 6).
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
  grep -q "resum" "$dir.2.log" || { echo "$first -> $second: the second run did not say it resumed:"; cat "$dir.2.log"; exit 1; }
  "$mpiexec" -n 1 "$mtf" train "$config" --fresh "${common[@]}" --set "backend.precision=$first" \
    --set "run.dir=$dir-straight" > "$dir.3.log" 2>&1 || { cat "$dir.3.log"; exit 1; }
  resumed=$(loss_at "$dir" 6) straight=$(loss_at "$dir-straight" 6)
  [ -n "$resumed" ] && [ -n "$straight" ] || { echo "$first -> $second: no step 6 in metrics.jsonl"; exit 1; }
  awk -v a="$resumed" -v b="$straight" -v what="$first -> $second" -v first="$first" 'BEGIN { d = a - b; if (d < 0) d = -d;
    rel = d / (b < 0 ? -b : b);
    printf "%s: step 6 loss %s after resuming, %s straight through in %s (relative %.2e)\n", what, a, b, first, rel;
    exit !(rel <= 2e-2) }'
done
