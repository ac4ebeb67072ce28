#!/usr/bin/env bash
# jobs/transformer.slurm, the GPU template, on the local CPU-only Slurm: with no GPU on the node it says so,
# trains on the cpu backend (2 tasks, GPUs not requested) and leaves a checkpoint.
# usage: slurm_gpu_job.sh STATE_DIR SOURCE_DIR MTF DATA WORK
set -uo pipefail
source "$(dirname "$0")/slurm_common.sh"
source_dir=$2 mtf=$3 data=$4 work=$5
fresh_job_dir "$work" || exit 1
# The template asks for 4 GPUs per node; this cluster has none, so the command line asks for none.
job=$(sbatch --parsable --nodes=1 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --output="$work/job-%j.out" \
  --export="ALL,MTF=$mtf,MTF_HOME=$source_dir,CONFIG=$source_dir/tests/run/tiny-test.yaml,RUN_DIR=$work/run,MESH=b:2,LAYOUT=batch:b,MTF_ARGS=--set data.train=$data/train-*.h5 --set data.eval= --set train.steps=10 --set train.checkpoint_every=5" \
  "$source_dir/jobs/transformer.slurm") || exit 1
echo "submitted job $job"
finish_job "$job" "$work" || exit 1
grep -q "no GPU on .*backend.kind=cpu, the ranks compute on their CPU cores" "$work/job-$job.out" || { echo "no line saying why cpu"; exit 1; }
grep -q "^backend: cpu, 2 ranks" "$work/job-$job.out" || { echo "expected the cpu backend on 2 ranks"; exit 1; }
[ -s "$work/run/checkpoints/latest" ] || { echo "no checkpoint in $work/run/checkpoints"; exit 1; }
echo "job $job completed on cpu, 2 tasks, checkpoint $(cat "$work/run/checkpoints/latest")"
