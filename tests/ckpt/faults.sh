#!/usr/bin/env bash
# Checkpoints under faults of the file system (docs/CHECKPOINTS.md, "Faults"):
#   diskfull1, diskfull2  a write failing as a full disk does (the test hook MTF_CKPT_FAIL_AFTER_BYTES) in
#             the step-10 save of a 1- or 2-rank run: every rank stops within 60 s saying "disk full" and
#             where, no partial file is left, and the step-5 checkpoint restores
#   tmpfs     the same on a real 600 KiB tmpfs (skipped, exit 77, where mount is not allowed)
#   links     symlinks planted as ckpt-N.h5.tmp and latest.tmp are replaced, never written through
#   many      70 damaged checkpoints newer than a good one do not hide it
# usage: faults.sh MODE MTF MPIEXEC CONFIG DATA WORK
set -euo pipefail
mode=$1 mtf=$2 mpiexec=$3 config=$4 data=$5 work=$6
rm -rf "$work"; mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" --set train.checkpoint_every=5)
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -n 20 "$f"; done; exit 1; }
# train NPROCS RUN_DIR LOG [args...]
train() {
  local n=$1 dir=$2 log=$3; shift 3
  local mesh=(); [ "$n" -gt 1 ] && mesh=(--mesh "b:$n" --layout batch:b)
  timeout 60 "$mpiexec" -n "$n" "$mtf" train "$config" "${common[@]}" --set "run.dir=$dir" "${mesh[@]}" "$@" \
    > "$work/$log.log" 2>&1
}
# disk_full NPROCS RUN_DIR [env...]: step 5 saved, the step-10 save fails, then a resume from step 5
disk_full() {
  local n=$1 dir=$2; shift 2
  train "$n" "$dir" first --set train.steps=5 || fail "the first run failed"
  local start=$SECONDS status=0
  env "$@" timeout 60 "$mpiexec" -n "$n" "$mtf" train "$config" "${common[@]}" --set "run.dir=$dir" \
    $([ "$n" -gt 1 ] && echo "--mesh b:$n --layout batch:b") --set train.steps=10 > "$work/full.log" 2>&1 || status=$?
  [ "$status" != 0 ] || fail "the save on a full disk succeeded"
  [ "$status" != 124 ] || fail "the job hung on a full disk (killed after 60 s)"
  # Either a clean agreed error (exit 1; rank 0 prints it for all) or, past the file's creation, a stop
  # of the whole job in which every rank prints the reason.
  if ! grep -q "mtf train: error: .*disk full" "$work/full.log"; then
    for r in $(seq 0 $((n - 1))); do
      grep -qE "mtf: rank $r: .*disk full" "$work/full.log" || fail "rank $r did not say 'disk full'"
    done
  fi
  grep -q "$dir/checkpoints" "$work/full.log" || fail "the message does not say where"
  ls "$dir/checkpoints" | grep -q '\.tmp$' && fail "a partial file was left: $(ls "$dir/checkpoints")"
  [ "$(cat "$dir/checkpoints/latest")" = ckpt-00000005.h5 ] || fail "latest no longer names step 5"
  train "$n" "$dir" resume --set train.steps=7 --set train.checkpoint_every=0 || fail "the resume after the failed save failed"
  grep -q "resumed from $dir/checkpoints/ckpt-00000005.h5 at step 5" "$work/resume.log" || fail "did not resume from step 5"
  echo "$mode: stopped in $((SECONDS - start)) s with 'disk full' on every rank; step 5 restored"
}

case $mode in
diskfull1) disk_full 1 "$work/run" MTF_CKPT_FAIL_AFTER_BYTES=20000 ;;
diskfull2) disk_full 2 "$work/run" MTF_CKPT_FAIL_AFTER_BYTES=20000 ;;
tmpfs)
  mkdir -p "$work/fs"
  mount -t tmpfs -o size=600k tmpfs "$work/fs" 2>/dev/null || { echo "tmpfs: cannot mount (not root?): skipped"; exit 77; }
  trap 'umount "$work/fs"' EXIT
  disk_full 2 "$work/fs/run" X=1
  ;;
links)
  dir=$work/run/checkpoints
  train 1 "$work/run" first --set train.steps=5 || fail "the first run failed"
  echo "outside" > "$work/outside-ckpt"; echo "outside" > "$work/outside-latest"
  ln -s "$work/outside-ckpt" "$dir/ckpt-00000010.h5.tmp"
  ln -s "$work/outside-latest" "$dir/latest.tmp"
  ln -s "$work/missing-target" "$dir/ckpt-00000015.h5.tmp" # dangling: following it would create the target
  train 1 "$work/run" second --set train.steps=15 || fail "the run with planted links failed"
  [ "$(cat "$work/outside-ckpt")" = outside ] || fail "the checkpoint was written through a planted link"
  [ "$(cat "$work/outside-latest")" = outside ] || fail "latest was written through a planted link"
  [ ! -e "$work/missing-target" ] || fail "a dangling planted link was followed"
  [ -f "$dir/ckpt-00000010.h5" ] && [ ! -L "$dir/ckpt-00000010.h5" ] || fail "no regular ckpt-00000010.h5"
  [ "$(cat "$dir/latest")" = ckpt-00000015.h5 ] && [ ! -L "$dir/latest" ] || fail "latest is not a regular file naming step 15"
  "$mtf" ckpt verify "$dir/ckpt-00000015.h5" > "$work/verify.log" 2>&1 || fail "the step-15 checkpoint does not verify"
  echo "links: planted ckpt .tmp and latest.tmp links replaced, their targets untouched"
  ;;
many)
  dir=$work/run/checkpoints
  train 1 "$work/run" first --set train.steps=10 --set train.checkpoint_every=10 || fail "the first run failed"
  for s in $(seq 11 80); do printf 'damaged' > "$dir/$(printf 'ckpt-%08d.h5' "$s")"; done
  echo ckpt-00000080.h5 > "$dir/latest"
  train 1 "$work/run" resume --set train.steps=12 --set train.checkpoint_every=0 || fail "the resume failed"
  [ "$(grep -c "warning: skipping checkpoint" "$work/resume.log")" = 70 ] || fail "not 70 warnings"
  grep -q "resumed from $dir/ckpt-00000010.h5 at step 10" "$work/resume.log" || fail "the good step-10 file was not found"
  echo "many: 70 damaged newer checkpoints skipped, the good step 10 restored"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
