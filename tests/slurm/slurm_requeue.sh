#!/usr/bin/env bash
# A training job sent Slurm's warning signal mid-run checkpoints, requeues itself, resumes and finishes with
# every step logged exactly once and the same final step as an uninterrupted job; the output file holds
# both runs. usage: slurm_requeue.sh STATE_DIR SOURCE_DIR MTF DATA WORK
set -uo pipefail
source "$(dirname "$0")/slurm_common.sh"
source_dir=$2 mtf=$3 data=$4 work=$5 steps=150
job=$(submit_training_job "$work" "$source_dir" "$mtf" "--set data.train=$data/train-*.h5 --set data.eval= --set train.steps=$steps --set train.log_every=1") || exit 1
echo "submitted job $job"
# Wait until training is under way, then warn the batch shell as --signal=B:USR1@... would.
for _ in $(seq 600); do
  n=$(wc -l < "$work/run/metrics.jsonl" 2>/dev/null || echo 0)
  [ "$n" -ge 20 ] && break
  [[ "$(job_state "$job")" =~ ^(COMPLETED|FAILED|CANCELLED)$ ]] && break
  sleep 0.2
done
[ "${n:-0}" -ge 20 ] || { echo "training did not get going"; cat "$work/job-$job.out"; exit 1; }
[ "${n}" -lt "$steps" ] || { echo "the run finished before the signal; raise steps"; exit 1; }
scancel --signal=USR1 --batch "$job"
echo "sent SIGUSR1 to the batch shell at step ~$n"
wait_for_state "$job" "PENDING|REQUEUED|RUNNING" 60 || exit 1
# The requeued run: once the first run's step has fully ended (its ranks gone, a few seconds for slurmd
# to finish the step), skip the begin-time hold Slurm puts on requeued jobs instead of waiting for it.
released=0
for _ in $(seq 240); do
  s=$(job_state "$job")
  if [ "$s" = PENDING ] && [ $released = 0 ] && ! pgrep -f "$mtf train" >/dev/null; then
    sleep 3
    scontrol update JobId="$job" StartTime=now 2>/dev/null && released=1
  fi
  grep -q "restart count 1" "$work/job-$job.out" 2>/dev/null && break
  sleep 0.5
done
finish_job "$job" "$work" || exit 1
grep -q "requeueing to resume" "$work/job-$job.out" || { echo "no requeue in the output"; exit 1; }
grep -q "restart count 1" "$work/job-$job.out" || { echo "the requeued run is not in the output file"; exit 1; }
logged=$(sed -E 's/.*"step": ([0-9]+).*/\1/' "$work/run/metrics.jsonl")
expected=$(seq 1 "$steps")
[ "$logged" = "$expected" ] || { echo "steps logged are not 1..$steps exactly once:"; echo "$logged" | uniq -c | awk '$1 != 1'; exit 1; }
echo "job $job: stopped at step ~$n, requeued, resumed and finished all $steps steps, each logged once"
