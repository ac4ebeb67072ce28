#!/usr/bin/env bash
# Checksums (docs/CHECKPOINTS.md, "Integrity"): a 4-rank b:2,m:2 checkpoint and a 1-rank one verify clean;
# one flipped bit in any dataset is found by `mtf ckpt verify` (exit 1, naming the dataset), makes a resume
# from the run directory skip that file with a warning for the previous one, and fails `--from FILE`.
# usage: integrity.sh MTF MPIEXEC CONFIG DATA WORK
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
here=$(dirname "$0")
rm -rf "$work"; mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" --set train.steps=10 --set train.checkpoint_every=5)
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -n 20 "$f"; done; exit 1; }
"$mpiexec" -n 4 "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/b2m2" --mesh b:2,m:2 \
  --layout batch:b,heads:m,d_ff:m,vocab:m > "$work/b2m2.log" 2>&1 || fail "the 4-rank run failed"
"$mpiexec" -n 1 "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/one" > "$work/one.log" 2>&1 \
  || fail "the 1-rank run failed"
good=$work/b2m2/checkpoints/ckpt-00000010.h5
"$mtf" ckpt verify "$good" > "$work/verify-good.log" 2>&1 || fail "a fresh 4-rank checkpoint does not verify"
grep -q "ok, 38 datasets" "$work/verify-good.log" || fail "verify did not check 38 datasets"
"$mtf" ckpt verify "$work/one/checkpoints/ckpt-00000010.h5" > "$work/verify-one.log" 2>&1 \
  || fail "a fresh 1-rank checkpoint does not verify"
# The same model on 1 and 4 ranks writes different numbers, but each file's checksums are its own data's;
# the b:2,m:2 file restored on 1 rank checks the sums of another partition of the same datasets.
seed=0
for name in $(/usr/bin/python3 "$here/flip_bit.py" "$good" --list); do
  seed=$((seed + 1))
  cp "$good" "$work/flipped.h5"
  /usr/bin/python3 "$here/flip_bit.py" "$work/flipped.h5" "$name" "$seed" > /dev/null
  if "$mtf" ckpt verify "$work/flipped.h5" > "$work/verify-flip.log" 2>&1; then fail "verify missed a flipped bit in $name"; fi
  grep -q "BAD  variables/$name fails its checksum" "$work/verify-flip.log" || fail "verify did not name $name"
  grep -q "first variables/$name" "$work/verify-flip.log" || fail "verify's error does not name $name"
done
echo "verify: a flipped bit found in each of 38 datasets"
# Restore: the latest file damaged -> warning naming the dataset, the step-5 checkpoint restored instead.
dir=$work/b2m2/checkpoints
cp "$good" "$work/pristine.h5"
/usr/bin/python3 "$here/flip_bit.py" "$good" layer_000.attn.wq 7 > /dev/null
"$mpiexec" -n 2 "$mtf" train "$config" "${common[@]}" --set train.steps=12 --set "run.dir=$work/b2m2" --mesh b:2 \
  --layout batch:b > "$work/resume.log" 2>&1 || fail "the resume did not fall back to step 5"
grep -q "warning: skipping checkpoint: .*ckpt-00000010.h5': dataset variables/layer_000.attn.wq (variable 'layer_000/attn/wq') fails its checksum" \
  "$work/resume.log" || fail "no checksum warning naming the dataset"
grep -q "resumed from $dir/ckpt-00000005.h5 at step 5" "$work/resume.log" || fail "did not resume from step 5"
cmp -s "$good" "$work/pristine.h5" && fail "the flip did not change the file"
# --from the damaged file: an error, exit 1.
set +e
"$mpiexec" -n 2 "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/from" --mesh b:2 --layout batch:b \
  --from "$good" > "$work/from.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "--from a damaged checkpoint exited $rc, not 1"
grep -q "dataset variables/layer_000.attn.wq (variable 'layer_000/attn/wq') fails its checksum" "$work/from.log" \
  || fail "--from: no error naming the dataset"
echo "restore: the damaged latest skipped for step 5 with a warning; --from it fails naming the dataset"
