#!/usr/bin/env bash
# Files mtf writes into a run directory never follow a link planted there (config.yaml, metrics.jsonl), and
# a FIFO named as a checkpoint is refused at once by eval, ckpt inspect and ckpt verify (not opened blocking).
# usage: run_dir_links.sh MTF MPIEXEC CONFIG DATA_DIR WORK
set -u
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5/links
rm -rf "$work"; mkdir -p "$work/run" "$work/outside"
echo "precious" > "$work/outside/target"
ln -s "$work/outside/target" "$work/run/config.yaml"
ln -s "$work/outside/target" "$work/run/metrics.jsonl"
failed=0
"$mpiexec" -n 1 "$mtf" train --fresh "$config" --set "data.train=$data/train-*.h5" --set run.dir="$work/run" \
  --set train.steps=2 > "$work/train.log" 2>&1 || { cat "$work/train.log"; echo "run_dir_links.sh: train failed"; failed=1; }
[ "$(cat "$work/outside/target")" = "precious" ] || { echo "run_dir_links.sh: a planted link was followed"; failed=1; }
for f in config.yaml metrics.jsonl; do
  [ -f "$work/run/$f" ] && [ ! -L "$work/run/$f" ] || { echo "run_dir_links.sh: $f is not a regular file"; failed=1; }
done
mkfifo "$work/ckpt.h5"
for cmd in "ckpt inspect $work/ckpt.h5" "ckpt verify $work/ckpt.h5"; do
  out=$(timeout 10 "$mtf" $cmd 2>&1); status=$?
  echo "$out"
  [ "$status" -eq 1 ] && grep -q "is not a regular file (it is a FIFO)" <<<"$out" ||
    { echo "run_dir_links.sh: mtf $cmd: status $status (124 = it blocked)"; failed=1; }
done
out=$(timeout 20 "$mpiexec" -n 1 "$mtf" eval "$config" --set "data.eval=$data/train-*.h5" --checkpoint "$work/ckpt.h5" 2>&1)
status=$?
echo "$out"
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] && grep -q "is not a regular file (it is a FIFO)" <<<"$out" ||
  { echo "run_dir_links.sh: mtf eval --checkpoint FIFO: status $status (124 = it blocked)"; failed=1; }
exit $failed
