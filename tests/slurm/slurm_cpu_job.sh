#!/usr/bin/env bash
# jobs/transformer-cpu.slurm with the tiny test model on 4 tasks completes and leaves a checkpoint.
# usage: slurm_cpu_job.sh STATE_DIR SOURCE_DIR MTF DATA WORK
set -uo pipefail
source "$(dirname "$0")/slurm_common.sh"
source_dir=$2 mtf=$3 data=$4 work=$5
job=$(submit_training_job "$work" "$source_dir" "$mtf" "--set data.train=$data/train-*.h5 --set data.eval= --set train.steps=30 --set train.checkpoint_every=10 --set train.log_every=10") || exit 1
echo "submitted job $job"
wait_for_state "$job" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" 300
final=$(job_state "$job")
cat "$work/job-$job.out"
[ "$final" = COMPLETED ] || { echo "job $job ended $final"; exit 1; }
grep -q "4 ranks on 1 node" "$work/job-$job.out" || { echo "expected 4 ranks"; exit 1; }
[ -s "$work/run/checkpoints/latest" ] || { echo "no checkpoint in $work/run/checkpoints"; exit 1; }
last=$(tail -1 "$work/run/metrics.jsonl" | sed -E 's/.*"step": ([0-9]+).*/\1/')
[ "$last" = 30 ] || { echo "last logged step $last, expected 30"; exit 1; }
echo "job $job completed on 4 tasks with checkpoint $(cat "$work/run/checkpoints/latest")"
