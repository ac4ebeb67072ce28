#!/usr/bin/env bash
# backend.grad_reduce bf16 against fp32 on b:2 (data parallel: every weight gradient is summed over b), 20 steps:
# every step's loss within 1e-2 relative and not identical (the buckets really travelled as bfloat16), and
# mtf plan's allreduce bytes halved.
# usage: grad_reduce_bf16.sh MTF MPIEXEC CONFIG DATA WORKDIR
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
mkdir -p "$work"
common=(--mesh b:2 --layout batch:b --set "data.train=$data/train-*.h5" --set "data.eval=" --set train.allreduce_bucket_mb=0.01)
for wire in fp32 bf16; do
  rm -rf "$work/$wire"
  "$mpiexec" -n 2 "$mtf" train "$config" --fresh "${common[@]}" --set "backend.grad_reduce=$wire" \
    --set "run.dir=$work/$wire" > "$work/$wire.log" 2>&1 || { cat "$work/$wire.log"; exit 1; }
  "$mtf" plan "$config" "${common[@]}" --set "backend.grad_reduce=$wire" > "$work/$wire.plan" 2>&1 || { cat "$work/$wire.plan"; exit 1; }
  "$mtf" plan "$config" "${common[@]}" --set "backend.grad_reduce=$wire" --json > "$work/$wire.json" 2>&1 || { cat "$work/$wire.json"; exit 1; }
done
grep -q "sent as bf16" "$work/bf16.plan" || { echo "mtf plan does not say the buckets go as bf16"; exit 1; }
sent() { /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["collectives"]["allreduce"]["bytes"])' "$1"; }
a=$(sent "$work/fp32.json") b=$(sent "$work/bf16.json")
echo "plan, allreduce bytes sent per step: fp32 wire $a, bf16 wire $b"
awk -v a="$a" -v b="$b" 'BEGIN { exit !(b <= 0.5 * a + 64 && b >= 0.5 * a - 64) }' || { echo "allreduce bytes not halved"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/losses_close.sh"
losses_close "grad_reduce bf16 vs fp32" 1e-2 "$work/fp32" "$work/bf16"
