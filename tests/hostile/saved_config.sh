#!/usr/bin/env bash
# RUN_DIR/config.yaml must re-load as the same config even when the paths hold quotes, backslashes, a
# newline, '#', ': ', leading spaces and unicode: train once with such paths, train again from the saved
# file, and the second run's saved config must be byte-identical to the first.
# usage: saved_config.sh MTF MPIEXEC TINY_CONFIG REVERSE_DATA_DIR WORK
set -u
mtf=$1 mpiexec=$2 tiny=$3 data=$4 work=$5
odd="$work/odd \"q\" #hash: colon
newline  café €"
rm -rf "$work"
mkdir -p "$odd" || exit 1
for f in "$data"/train-*.h5; do ln -s "$f" "$odd/$(basename "$f")"; done
run="$odd/run"
"$mpiexec" -n 1 "$mtf" train --fresh "$tiny" --set "data.train=$odd/train-*.h5" --set "run.dir=$run" \
  --set train.steps=1 --set train.log_every=1 >"$work/first.log" 2>&1 || { cat "$work/first.log"; echo "first run failed"; exit 1; }
cp "$run/config.yaml" "$work/saved.yaml"
cat "$work/saved.yaml"
"$mpiexec" -n 1 "$mtf" train --fresh "$work/saved.yaml" >"$work/second.log" 2>&1 ||
  { cat "$work/second.log"; echo "saved_config.sh: the saved config does not re-load"; exit 1; }
cmp "$work/saved.yaml" "$run/config.yaml" || { diff "$work/saved.yaml" "$run/config.yaml"; echo "saved_config.sh: re-loads differently"; exit 1; }
echo "saved_config.sh: ok"
