#!/usr/bin/env bash
# jobs/transformer-tpu.slurm submitted to the local Slurm with the XLA CPU plugin standing in for libtpu:
# one task (a "host") driving 4 plugin devices on mesh b:2;m:2 trains the tiny test model on backend pjrt,
# completes and leaves a checkpoint.
# usage: slurm_tpu_job.sh STATE_DIR SOURCE_DIR MTF DATA WORK PLUGIN
set -uo pipefail
source "$(dirname "$0")/slurm_common.sh"
source_dir=$2 mtf=$3 data=$4 work=$5 plugin=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # as slurm_common.sh's submit_training_job
args="--set data.train=$data/train-*.h5 --set data.eval= --set train.steps=30 --set train.checkpoint_every=10 --set train.log_every=10"
# The template asks for 4 hosts of 8 cores; the local cluster is one small node.
job=$(sbatch --parsable --nodes=1 --ntasks-per-node=1 --cpus-per-task=1 --output="$work/job-%j.out" \
  --export="ALL,MTF=$mtf,MTF_HOME=$source_dir,CONFIG=$source_dir/tests/run/tiny-test.yaml,RUN_DIR=$work/run,MTF_PJRT_PLUGIN=$plugin,CHIPS=4,MESH=b:2;m:2,LAYOUT=batch:b;heads:m;d_ff:m;vocab:m,MTF_ARGS=$args" \
  "$source_dir/jobs/transformer-tpu.slurm") || exit 1
echo "submitted job $job"
wait_for_state "$job" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" 300
final=$(job_state "$job")
grep -v "^I0000\|^WARNING: All log" "$work/job-$job.out"
[ "$final" = COMPLETED ] || { echo "job $job ended $final"; exit 1; }
grep -q "^backend: pjrt, 1 process x 4 devices" "$work/job-$job.out" || { echo "expected pjrt on 4 devices"; exit 1; }
grep -q "^pjrt platform: cpu" "$work/job-$job.out" || { echo "expected the plugin's platform line"; exit 1; }
[ -s "$work/run/checkpoints/latest" ] || { echo "no checkpoint in $work/run/checkpoints"; exit 1; }
last=$(tail -1 "$work/run/metrics.jsonl" | sed -E 's/.*"step": ([0-9]+).*/\1/')
[ "$last" = 30 ] || { echo "last logged step $last, expected 30"; exit 1; }
echo "job $job trained on pjrt (1 task x 4 CPU-plugin devices) with checkpoint $(cat "$work/run/checkpoints/latest")"
