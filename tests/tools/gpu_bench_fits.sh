#!/usr/bin/env bash
# The benchmark of tools/gpu-check.sh, with the settings it runs (configs/bench/gpt-1b.yaml, bf16), plans at most
# 70 GB per rank (mtf plan's estimate of the training process's peak), so it fits an 80 GB H100 with room for
# cuBLAS and the CUDA context. On a build with the cuda backend it plans for cuda; without, for cpu with bf16.
#   gpu_bench_fits.sh MTF
set -uo pipefail
mtf=$1
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
kind=cpu
"$mtf" --version 2>/dev/null | grep -Eq '^ *backends:.*\bcuda\b' && kind=cuda
plan=$("$mtf" plan "$source_dir/configs/bench/gpt-1b.yaml" --set backend.kind=$kind --set backend.precision=bf16) ||
  { echo "gpu_bench_fits: mtf plan failed"; exit 1; }
mib=$(sed -nE 's/^per rank in mtf train \(peak resident, estimated\): ([0-9.]+) MiB.*/\1/p' <<< "$plan")
[ -n "$mib" ] || { echo "gpu_bench_fits: no peak estimate in mtf plan's output"; exit 1; }
awk -v m="$mib" -v k="$kind" 'BEGIN { gb = m * 1048576 / 1e9; printf "gpu_bench_fits: %s, bf16: %.1f GB per rank planned (limit 70 GB)\n", k, gb; exit !(gb <= 70) }'
