#!/usr/bin/env bash
# Checkpoints under failure, each case against an uninterrupted run of the same mesh (bit-for-bit losses):
#   kill      SIGKILL while step 10's checkpoint is being written (2 ranks): `latest` still names step 5's
#             complete file, and the next run resumes from it
#   truncated the latest file cut in half: skipped with a warning, left untouched, the previous one used;
#             with every file damaged the run refuses to start (exit 1) instead of starting over
#   sigusr1   SIGUSR1 to mpiexec mid-run (2 ranks): a checkpoint, exit 75, and an exact resume
#   sigterm   SIGTERM to a 1-rank run: the same
# usage: recovery.sh MODE MTF MPIEXEC CONFIG DATA WORK
set -euo pipefail
mode=$1 mtf=$2 mpiexec=$3 config=$4 data=$5 work=$6
here=$(dirname "$0")
rm -rf "$work"; mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=" --set model.dropout=0.1)
mesh2=(--mesh b:2 --layout batch:b)
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -n 30 "$f"; done; exit 1; }
losses() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
# train NPROCS NAME [args...]: a run that must succeed
train() {
  local n=$1 name=$2; shift 2
  "$mpiexec" -n "$n" "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/$name" "$@" >> "$work/$name.log" 2>&1 \
    || fail "run $name exited with $?"
}
wait_for() { # wait_for SECONDS COMMAND...: polls until COMMAND succeeds
  local limit=$1; shift
  for _ in $(seq $((limit * 10))); do "$@" && return 0; sleep 0.1; done
  return 1
}
# The loss lines of run A from step FIRST on must equal the last lines of run B (the resumed run; a killed
# run before it may have logged steps past its checkpoint, which metrics.jsonl keeps), bit for bit.
same_losses_from() { # same_losses_from FIRST A B
  local expected; expected=$(losses "$work/$2" | awk -v f="$1" '$1 >= f')
  diff <(echo "$expected") <(losses "$work/$3" | tail -n "$(echo "$expected" | wc -l)") \
    || fail "losses from step $1 differ between $2 (<) and $3 (>)"
}
metrics_lines() { [ -s "$1/metrics.jsonl" ] && [ "$(wc -l < "$1/metrics.jsonl")" -ge "$2" ]; }

case $mode in
kill)
  train 2 ref "${mesh2[@]}" --set train.steps=20 --set train.checkpoint_every=5
  MTF_CKPT_TEST_STALL=10:60 "$mpiexec" -n 2 "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/victim" \
    "${mesh2[@]}" --set train.steps=20 --set train.checkpoint_every=5 > "$work/victim-killed.log" 2>&1 &
  pid=$!
  wait_for 60 grep -q "stalling" "$work/victim-killed.log" || fail "the checkpoint of step 10 never started"
  ranks=$(pgrep -P "$pid" || true)
  kill -KILL $ranks "$pid"
  wait "$pid" 2>/dev/null || true
  dir=$work/victim/checkpoints
  [ -f "$dir/ckpt-00000010.h5.tmp" ] || fail "no partial file of step 10: the kill came too late"
  [ ! -e "$dir/ckpt-00000010.h5" ] || fail "a killed write left a file under the final name"
  [ "$(cat "$dir/latest")" = ckpt-00000005.h5 ] || fail "latest is '$(cat "$dir/latest")', not ckpt-00000005.h5"
  train 2 victim "${mesh2[@]}" --set train.steps=20 --set train.checkpoint_every=5
  grep -q "resumed from $dir/ckpt-00000005.h5 at step 5" "$work/victim.log" || fail "did not resume from step 5"
  same_losses_from 6 ref victim
  /usr/bin/python3 "$here/compare_ckpt.py" "$work/ref/checkpoints/ckpt-00000020.h5" "$dir/ckpt-00000020.h5" \
    || fail "final checkpoints differ"
  echo "kill: SIGKILL mid-write left latest at step 5; resumed from it, steps 6-20 identical to the straight run"
  ;;
truncated)
  train 2 ref "${mesh2[@]}" --set train.steps=20 --set train.checkpoint_every=10
  cp -r "$work/ref" "$work/all-damaged"
  cp -r "$work/ref" "$work/damaged"
  dir=$work/damaged/checkpoints
  truncate -s $(($(stat -c %s "$dir/ckpt-00000020.h5") / 2)) "$dir/ckpt-00000020.h5"
  before=$(sha256sum < "$dir/ckpt-00000020.h5")
  train 2 damaged "${mesh2[@]}" --set train.steps=20 --set train.checkpoint_every=10
  grep -q "warning: skipping checkpoint: .*cannot open checkpoint '$dir/ckpt-00000020.h5' as HDF5 (truncated file" "$work/damaged.log" \
    || fail "no warning about the truncated file"
  grep -q "resumed from $dir/ckpt-00000010.h5 at step 10" "$work/damaged.log" || fail "did not fall back to step 10"
  [ "$(sha256sum < "$dir/ckpt-00000020.h5")" = "$before" ] || fail "the damaged file was changed"
  [ "$(cat "$dir/latest")" = ckpt-00000020-1.h5 ] || fail "the new step-20 checkpoint is not ckpt-00000020-1.h5"
  same_losses_from 11 ref damaged
  /usr/bin/python3 "$here/compare_ckpt.py" "$work/ref/checkpoints/ckpt-00000020.h5" "$dir/ckpt-00000020-1.h5" \
    || fail "the rewritten step-20 checkpoint differs"
  for f in "$work"/all-damaged/checkpoints/ckpt-*.h5; do truncate -s 1000 "$f"; done
  if "$mpiexec" -n 2 "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/all-damaged" "${mesh2[@]}" \
       --set train.steps=20 > "$work/all-damaged.log" 2>&1; then
    fail "a run whose checkpoints are all damaged started anyway"
  fi
  grep -q "no good checkpoint in '$work/all-damaged/checkpoints'" "$work/all-damaged.log" \
    || fail "no 'no good checkpoint' message"
  echo "truncated: skipped with a warning and left in place; resumed from step 10, steps 11-20 identical"
  ;;
sigusr1|sigterm)
  if [ "$mode" = sigusr1 ]; then
    "$mpiexec" -n 2 "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/stopped" "${mesh2[@]}" \
      --set train.steps=100000 --set train.log_every=1 > "$work/stopped-signal.log" 2>&1 &
    args=("${mesh2[@]}") n=2 signal=USR1
  else
    "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/stopped" --set train.steps=100000 \
      --set train.log_every=1 > "$work/stopped-signal.log" 2>&1 &
    args=() n=1 signal=TERM
  fi
  pid=$!
  wait_for 60 metrics_lines "$work/stopped" 5 || fail "the run did not get to step 5"
  kill -"$signal" "$pid"
  status=0; wait "$pid" || status=$?
  [ "$status" -eq 75 ] || fail "exit status $status after SIG$signal, expected 75"
  grep -q "checkpoint: saved" "$work/stopped-signal.log" || fail "no checkpoint written on SIG$signal"
  step=$(sed -E 's/ckpt-0*([0-9]+)\.h5/\1/' "$work/stopped/checkpoints/latest")
  [ "$step" = "$(losses "$work/stopped" | tail -n 1 | cut -d' ' -f1)" ] || fail "checkpoint step $step is not the last logged step"
  train "$n" ref "${args[@]}" --set train.steps=$((step + 5)) --set train.log_every=1
  train "$n" stopped "${args[@]}" --set train.steps=$((step + 5)) --set train.log_every=1
  grep -q "at step $step " "$work/stopped.log" || fail "did not resume at step $step"
  same_losses_from 1 ref stopped
  echo "$mode: SIG$signal after step $step wrote a checkpoint and exited 75; steps $((step + 1))-$((step + 5)) identical"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
