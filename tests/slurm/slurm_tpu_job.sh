#!/usr/bin/env bash
# jobs/transformer-tpu.slurm submitted to the local Slurm with the XLA CPU plugin standing in for libtpu:
# one task (a "host") driving 4 plugin devices on mesh b:2;m:2 trains the tiny test model on backend pjrt,
# completes and leaves a checkpoint.
# usage: slurm_tpu_job.sh STATE_DIR SOURCE_DIR MTF DATA WORK PLUGIN
set -uo pipefail
source "$(dirname "$0")/slurm_common.sh"
source_dir=$2 mtf=$3 data=$4 work=$5 plugin=$6
fresh_job_dir "$work" || exit 1
args="--set data.train=$data/train-*.h5 --set data.eval= --set train.steps=30 --set train.checkpoint_every=10 --set train.log_every=10"
# The template asks for 4 hosts of 8 cores; the local cluster is one small node.
job=$(sbatch --parsable --nodes=1 --ntasks-per-node=1 --cpus-per-task=1 --output="$work/job-%j.out" \
  --export="ALL,MTF=$mtf,MTF_HOME=$source_dir,CONFIG=$source_dir/tests/run/tiny-test.yaml,RUN_DIR=$work/run,MTF_PJRT_PLUGIN=$plugin,CHIPS=4,MESH=b:2;m:2,LAYOUT=batch:b;heads:m;d_ff:m;vocab:m,MTF_ARGS=$args" \
  "$source_dir/jobs/transformer-tpu.slurm") || exit 1
echo "submitted job $job"
finish_job "$job" "$work" || exit 1
grep -q "^backend: pjrt, 1 process x 4 devices" "$work/job-$job.out" || { echo "expected pjrt on 4 devices"; exit 1; }
grep -q "^pjrt platform: cpu" "$work/job-$job.out" || { echo "expected the plugin's platform line"; exit 1; }
expect_checkpoint_at "$work" 30 || exit 1
echo "job $job trained on pjrt (1 task x 4 CPU-plugin devices) with checkpoint $(cat "$work/run/checkpoints/latest")"
