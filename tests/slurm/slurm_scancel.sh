#!/usr/bin/env bash
# scancel cancels; a preemption still checkpoints and requeues (issue 29, item 1). A SIGTERM to the batch shell
# while the job stays RUNNING (scancel --signal=TERM --batch: what a preemption's grace time looks like to the
# job) checkpoints and requeues; a plain `scancel JOBID` (Slurm marks the job CANCELLED, then sends SIGTERM)
# checkpoints and ends the job CANCELLED, not requeued. usage: slurm_scancel.sh STATE_DIR SOURCE_DIR MTF DATA WORK
set -uo pipefail
source "$(dirname "$0")/slurm_common.sh"
source_dir=$2 mtf=$3 data=$4 work=$5
job=$(submit_training_job "$work" "$source_dir" "$mtf" "--set data.train=$data/train-*.h5 --set data.eval= --set train.steps=100000 --set train.log_every=1") || exit 1
out=$work/job-$job.out
fail() { echo "FAIL: $*"; [ -f "$out" ] && cat "$out"; scancel "$job" 2>/dev/null; exit 1; }
restarts() { scontrol show job -o "$job" 2>/dev/null | grep -oP 'Restarts=\K[0-9]+'; }
# Waits until metrics.jsonl holds at least $1 lines while the job runs.
wait_steps() {
  local n=0
  for _ in $(seq 900); do
    n=$(wc -l < "$work/run/metrics.jsonl" 2>/dev/null || echo 0)
    [ "$n" -ge "$1" ] && return 0
    [[ "$(job_state "$job")" =~ ^(COMPLETED|FAILED|CANCELLED)$ ]] && break
    sleep 0.2
  done
  fail "training did not reach $1 logged steps (at $n, job $(job_state "$job"))"
}
echo "submitted job $job"
wait_steps 10

# 1. A preemption's SIGTERM: checkpoint, requeue.
scancel --signal=TERM --batch "$job"
wait_for_state "$job" "PENDING|REQUEUED" 60 || fail "not requeued after a SIGTERM to a running job"
grep -q "SIGTERM: asking mtf to checkpoint and stop" "$out" && grep -q "requeueing to resume" "$out" ||
  fail "the preemption's SIGTERM did not checkpoint and requeue"
resumed_at=$(wc -l < "$work/run/metrics.jsonl")
echo "ok: SIGTERM to the running job at step ~$resumed_at: checkpointed and requeued (restarts $(restarts))"
# Start the requeued job now instead of after Slurm's begin-time hold (as slurm_requeue.sh does).
released=0
for _ in $(seq 240); do
  if [ "$(job_state "$job")" = PENDING ] && [ $released = 0 ] && ! pgrep -f "$mtf train" >/dev/null; then
    sleep 3
    scontrol update JobId="$job" StartTime=now 2>/dev/null && released=1
  fi
  grep -q "restart count 1" "$out" 2>/dev/null && break
  sleep 0.5
done
grep -q "restart count 1" "$out" || fail "the requeued job did not start again"
wait_steps $((resumed_at + 10))

# 2. scancel: the job ends CANCELLED and stays so, with a checkpoint and no requeue.
scancel "$job"
wait_for_state "$job" "CANCELLED" 90 || fail "scancel did not end the job"
sleep 8
[ "$(job_state "$job")" = CANCELLED ] || fail "after scancel the job is $(job_state "$job"), not CANCELLED"
[ "$(restarts)" = 1 ] || fail "after scancel the job restarted (Restarts=$(restarts), expected 1)"
grep -q "SIGTERM from scancel (the job is cancelled)" "$out" || fail "the job script did not see the scancel"
grep -q "cancelled: checkpoint written, not requeued" "$out" || fail "no checkpoint on scancel, or requeued"
[ "$(grep -c "requeueing to resume" "$out")" = 1 ] || fail "requeued after scancel"
echo "ok: scancel ended the job CANCELLED with a checkpoint, not requeued"
