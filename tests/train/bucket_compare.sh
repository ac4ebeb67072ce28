#!/usr/bin/env bash
# Gradient buckets change when gradients are summed, not what is summed: trains the test model for 10 steps
# with train.allreduce_bucket_mb=0 (one blocking allreduce per gradient) and with small buckets (several
# non-blocking ones, overlapped with the backward pass), and requires the same loss and gradient norm at
# every step, bitwise (as metrics.jsonl prints them, %.9g, which round-trips a float): with 2 ranks per
# reduced group each element's sum is a + b in either algorithm. `mtf plan` must show the buckets, so the
# comparison cannot pass by bucketing nothing.
# usage: bucket_compare.sh MTF MPIEXEC CONFIG DATA WORKDIR NPROCS MESH LAYOUT BUCKET_MB [--set k=v]...
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5 nprocs=$6 mesh=$7 layout=$8 bucket_mb=$9
shift 9
name=$(echo "$nprocs-$mesh-$layout" | tr -c 'A-Za-z0-9_-' '_')
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" --set train.steps=10 --mesh "$mesh" --layout "$layout" "$@")
mkdir -p "$work"
plan=$("$mtf" plan "$config" "${common[@]}" --set "train.allreduce_bucket_mb=$bucket_mb")
echo "$plan" | grep "gradient allreduce"
buckets=$(echo "$plan" | sed -nE 's/^gradient allreduce: ([0-9]+) buckets.*/\1/p')
if [ -z "$buckets" ] || [ "$buckets" -lt 2 ]; then echo "expected several gradient buckets"; exit 1; fi
"$mtf" plan "$config" "${common[@]}" --set train.allreduce_bucket_mb=0 | grep -q "gradient allreduce: not bucketed"
# train.allreduce_overlap on: the buckets run even with every rank on this one node (auto would make them
# blocking here; the third run checks that it does, and that its numbers are the same too).
for mb in 0 "$bucket_mb" auto; do
  dir="$work/$name-$mb"
  rm -rf "$dir"
  if [ "$mb" = auto ]; then settings=(--set "train.allreduce_bucket_mb=$bucket_mb")
  else settings=(--set "train.allreduce_bucket_mb=$mb" --set train.allreduce_overlap=on); fi
  "$mpiexec" -n "$nprocs" "$mtf" train "$config" --fresh "${common[@]}" "${settings[@]}" \
    --set "run.dir=$dir" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
done
grep -q "gradient allreduces in [0-9]* non-blocking buckets" "$work/$name-$bucket_mb.log" ||
  { echo "the bucketed run did not report its buckets"; cat "$work/$name-$bucket_mb.log"; exit 1; }
grep -q "gradient allreduces blocking, one each (train.allreduce_overlap auto: every rank on one node" \
  "$work/$name-auto.log" || { echo "auto did not choose blocking allreduces on one node"; cat "$work/$name-auto.log"; exit 1; }
extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*"grad_norm": ([^,]+),.*/\1 \2 \3/' "$1/metrics.jsonl"; }
cmp <(extract "$work/$name-0") <(extract "$work/$name-auto") || { echo "auto's losses differ from blocking's"; exit 1; }
paste -d' ' <(extract "$work/$name-0") <(extract "$work/$name-$bucket_mb") | awk -v what="$mesh $layout" '
  { n++; if (n == 1) first = $2; if ($2 != $5 || $3 != $6) { bad++; print "step " $1 ": loss " $2 " grad_norm " $3 " (blocking) vs " $5 " " $6 " (buckets)" } }
  END { printf "%s: %d steps, %d differ (loss %s -> %s)\n", what, n, bad, first, $2; if (n != 10 || bad) exit 1 }'
