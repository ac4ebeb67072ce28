#!/usr/bin/env bash
# backend.precision bf16 against fp32 on one rank, 20 steps of the test model: every step's loss within 2e-2
# relative of fp32's, and not identical to it (the products really took bfloat16 operands).
# usage: bf16_vs_fp32.sh MTF MPIEXEC CONFIG DATA WORKDIR [--set k=v]...
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
shift 5
mkdir -p "$work"
for precision in fp32 bf16; do
  rm -rf "$work/$precision"
  "$mpiexec" -n 1 "$mtf" train "$config" --fresh --set "data.train=$data/train-*.h5" --set "data.eval=" "$@" \
    --set "backend.precision=$precision" --set "run.dir=$work/$precision" > "$work/$precision.log" 2>&1 \
    || { cat "$work/$precision.log"; exit 1; }
done
grep -q "bf16 matmuls" "$work/bf16.log" || { echo "the bf16 run's backend line does not say how it multiplies:"; grep "^backend" "$work/bf16.log"; exit 1; }
grep "^backend" "$work/bf16.log"
source "$(dirname "${BASH_SOURCE[0]}")/losses_close.sh"
losses_close "bf16 vs fp32" 2e-2 "$work/fp32" "$work/bf16"
