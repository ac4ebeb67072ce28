#!/usr/bin/env bash
# What each stop signal does (issue 29, item 7; the table in docs/CHECKPOINTS.md): Ctrl-C (SIGINT) to one
# process finishes the step, writes a checkpoint of it and exits 130, and the run resumes there; under
# mpiexec, SIGUSR1 to mpiexec (which OpenMPI forwards to every rank) checkpoints and mpiexec exits 75; SIGINT
# to one rank stops every rank with a checkpoint and mpiexec exits 130.
# usage: stop_signals.sh MTF MPIEXEC CONFIG DATA_DIR WORK
set -u
MTF=$1 MPIEXEC=$2 CONFIG=$3 DATA=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; [ -f "$WORK/log" ] && tail -20 "$WORK/log"; exit 1; }
ARGS=(train "$CONFIG" --set "data.train=$DATA/train-*.h5" --set data.eval= --set train.steps=1000000
      --set train.log_every=1 --set train.checkpoint_every=0)
# wait_steps N: until metrics.jsonl has N lines
wait_steps() {
  for _ in $(seq 600); do
    [ "$(cat "$RUN/metrics.jsonl" 2>/dev/null | wc -l)" -ge "$1" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the run ended before step $1"
    sleep 0.1
  done
  fail "the run did not reach step $1"
}
# stopped_at: the step the stop line names; checks the checkpoint of that step is latest
stopped_at() {
  local step
  step=$(sed -n "s|^train: $1; saving a checkpoint after step \([0-9]*\) and stopping.*|\1|p" "$WORK/log")
  [ -n "$step" ] || fail "no '$1; saving a checkpoint' line"
  [ "$(cat "$RUN/checkpoints/latest")" = "$(printf 'ckpt-%08d.h5' "$step")" ] ||
    fail "latest is $(cat "$RUN/checkpoints/latest" 2>/dev/null), not step $step's checkpoint"
  echo "$step"
}

# 1. Ctrl-C to a single process: checkpoint, exit 130, resume from it.
RUN=$WORK/run1
"$MTF" "${ARGS[@]}" --set run.dir="$RUN" >"$WORK/log" 2>&1 &
pid=$!
wait_steps 5
kill -INT "$pid"
wait "$pid"
status=$?
[ "$status" = 130 ] || fail "Ctrl-C: exit $status, not 130"
step=$(stopped_at "SIGINT (Ctrl-C)") || exit 1
grep -q "stopped by SIGINT after step $step with a checkpoint; run mtf train again to resume" "$WORK/log" ||
  fail "Ctrl-C: no closing line"
"$MTF" "${ARGS[@]}" --set train.steps=$((step + 2)) --set run.dir="$RUN" >"$WORK/log" 2>&1 || fail "resume"
grep -q "resumed from .*ckpt-$(printf %08d "$step").h5 at step $step" "$WORK/log" || fail "did not resume at $step"
echo "ok: Ctrl-C on 1 process: checkpoint at step $step, exit 130, resumed there"

# 2. Under mpiexec: SIGUSR1 to mpiexec is forwarded to every rank: checkpoint, mpiexec exits 75.
RUN=$WORK/run2
"$MPIEXEC" -n 2 "$MTF" "${ARGS[@]}" --set run.dir="$RUN" --mesh b:2 --layout batch:b >"$WORK/log" 2>&1 &
pid=$!
wait_steps 5
kill -USR1 "$pid"
wait "$pid"
status=$?
[ "$status" = 75 ] || fail "SIGUSR1 to mpiexec: exit $status, not 75"
step=$(stopped_at "SIGUSR1/SIGTERM") || exit 1
echo "ok: SIGUSR1 to mpiexec on 2 ranks: checkpoint at step $step, mpiexec exit 75"

# 3. Under mpiexec, SIGINT to one rank (the second mpiexec started): every rank stops with the checkpoint, mpiexec exits 130.
RUN=$WORK/run3
"$MPIEXEC" -n 2 "$MTF" "${ARGS[@]}" --set run.dir="$RUN" --mesh b:2 --layout batch:b >"$WORK/log" 2>&1 &
pid=$!
wait_steps 5
ranks=$(pgrep -P "$pid" | tr '\n' ' ')
[ "$(echo $ranks | wc -w)" = 2 ] || fail "expected 2 rank processes under mpiexec, found '$ranks'"
kill -INT "$(echo $ranks | awk '{print $2}')"
wait "$pid"
status=$?
[ "$status" = 130 ] || fail "SIGINT to one rank: mpiexec exit $status, not 130"
step=$(stopped_at "SIGINT (Ctrl-C)") || exit 1
echo "ok: SIGINT to one of 2 ranks: every rank stopped with the checkpoint of step $step, mpiexec exit 130"
