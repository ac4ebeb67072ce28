#!/usr/bin/env bash
# Runs `mtf train` on a config made of the test model (BASE) with the sections of BROKEN laid over it.
# The test model needs data, so data.train points at DATA unless BROKEN sets it.
# usage: with_base.sh MPIEXEC NPROCS MTF BASE BROKEN DATA RUN_DIR
set -euo pipefail
mpiexec=$1 nprocs=$2 mtf=$3 base=$4 broken=$5 data=$6 run_dir=$7
sets=(--set "data.train=$data/train-*.h5" --set "run.dir=$run_dir" --set train.steps=2)
grep -q '^data:' "$broken" && sets=(--set "run.dir=$run_dir" --set train.steps=2)
# The broken file is the config; the test model's sizes come as --set overrides unless it sets them.
for kv in model.vocab=384 model.d_model=32 model.d_ff=64 model.heads=4 model.d_kv=8 model.layers=1 model.length=16 \
          train.batch=8; do
  key=${kv%%=*}; leaf=${key#*.}
  grep -qE "^ +$leaf:" "$broken" || sets+=(--set "$kv")
done
# Without a mesh of its own, a multi-rank run is data parallel so that it reaches the part under test.
if [ "$nprocs" -gt 1 ] && ! grep -q '^mesh:' "$broken"; then sets+=(--mesh "b:$nprocs" --layout batch:b); fi
exec "$mpiexec" -n "$nprocs" "$mtf" train "$broken" "${sets[@]}"
