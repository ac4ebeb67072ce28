#!/usr/bin/env bash
# Throughput of configs/small.yaml (GPT-2 small, sequence length reduced to 128, batch 4) on this machine:
# 1 rank x 2 BLAS threads, and 2 ranks x 1 thread data parallel (b:2) and model parallel (m:2).
# Synthetic data (mtf data synth) stands in for GPT-2-tokenised shards. Numbers: docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p /tmp/perf && build/src/mtf data synth --task add --output /tmp/perf/data --examples 20000 --length 8 --force > /dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(configs/small.yaml --set "data.train=/tmp/perf/data/train-*.h5" --set data.eval= --set model.length=128 --set train.batch=4 --set train.steps=4 --set train.log_every=1)
echo "== 1 rank x 2 threads"
OPENBLAS_NUM_THREADS=2 mpiexec -n 1 build/src/mtf train --fresh "${common[@]}" --mesh "" --layout "" --set run.dir=/tmp/perf/r1 2>&1 | grep -E "^step|^train:"
echo "== 2 ranks x 1 thread, b:2 batch:b"
OPENBLAS_NUM_THREADS=1 mpiexec -n 2 build/src/mtf train --fresh "${common[@]}" --mesh "b:2" --layout "batch:b" --set run.dir=/tmp/perf/r2 2>&1 | grep -E "^step|^train:"
echo "== 2 ranks x 1 thread, m:2 heads:m;d_ff:m;vocab:m"
OPENBLAS_NUM_THREADS=1 mpiexec -n 2 build/src/mtf train --fresh "${common[@]}" --mesh "m:2" --layout "heads:m;d_ff:m;vocab:m" --set run.dir=/tmp/perf/r3 2>&1 | grep -E "^step|^train:"
