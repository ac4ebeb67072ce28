#!/usr/bin/env bash
# jobs/transformer-cpu.slurm with the tiny test model on 4 tasks completes and leaves a checkpoint.
# usage: slurm_cpu_job.sh STATE_DIR SOURCE_DIR MTF DATA WORK
set -uo pipefail
source "$(dirname "$0")/slurm_common.sh"
source_dir=$2 mtf=$3 data=$4 work=$5
job=$(submit_training_job "$work" "$source_dir" "$mtf" "--set data.train=$data/train-*.h5 --set data.eval= --set train.steps=30 --set train.checkpoint_every=10 --set train.log_every=10") || exit 1
echo "submitted job $job"
finish_job "$job" "$work" || exit 1
grep -q "4 ranks on 1 node" "$work/job-$job.out" || { echo "expected 4 ranks"; exit 1; }
expect_checkpoint_at "$work" 30 || exit 1
echo "job $job completed on 4 tasks with checkpoint $(cat "$work/run/checkpoints/latest")"
