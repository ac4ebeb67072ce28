# Sourced by the Slurm tests: joins the fixture's cluster or exits 77 (skipped) with the reason.
state=$1
if [ -s "$state/skip" ]; then echo "SKIPPED: $(cat "$state/skip")"; exit 77; fi
[ -s "$state/env" ] || { echo "SKIPPED: the Slurm fixture did not start a cluster (see slurm_up's output)"; exit 77; }
source "$state/env"
job_state() { scontrol show job "$1" 2>/dev/null | grep -oP 'JobState=\K\S+'; }
wait_for_state() { # job, state regex, seconds
  local i
  for i in $(seq $(( $3 * 5 ))); do [[ "$(job_state "$1")" =~ ^($2)$ ]] && return 0; sleep 0.2; done
  echo "job $1 is '$(job_state "$1")' after $3 s, expected $2"; return 1
}

# An empty WORK dir to submit from (the current directory after this).
fresh_job_dir() {
  rm -rf "$1" && mkdir -p "$1" && cd "$1" || return 1
  # Under srun (PMIx direct launch) OpenMPI's dlclosed plugins leave start-up allocations that
  # LeakSanitizer cannot attribute to a library, so no suppression matches; the mpiexec tests check leaks.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

# Waits (up to 300 s) for the job to end, prints its output WORK/job-ID.out (less the PJRT plugin's log
# noise) and fails unless the job COMPLETED. usage: finish_job JOB WORK
finish_job() {
  wait_for_state "$1" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" 300
  local final
  final=$(job_state "$1")
  grep -v "^I0000\|^WARNING: All log" "$2/job-$1.out"
  [ "$final" = COMPLETED ] || { echo "job $1 ended $final"; return 1; }
}

# The run in WORK/run left a checkpoint and logged step N last. usage: expect_checkpoint_at WORK N
expect_checkpoint_at() {
  [ -s "$1/run/checkpoints/latest" ] || { echo "no checkpoint in $1/run/checkpoints"; return 1; }
  local last
  last=$(tail -1 "$1/run/metrics.jsonl" | sed -E 's/.*"step": ([0-9]+).*/\1/')
  [ "$last" = "$2" ] || { echo "last logged step $last, expected $2"; return 1; }
}

# Submits jobs/transformer-cpu.slurm with the tiny test model in a fresh WORK dir (run dir WORK/run,
# output WORK/job-ID.out) and prints the job id; more sbatch options may follow.
# usage: submit_training_job WORK SOURCE_DIR MTF "MTF_ARGS" [SBATCH_OPTION...]
submit_training_job() {
  local work=$1 source_dir=$2 mtf=$3 args=$4
  shift 4
  fresh_job_dir "$work" || return 1
  sbatch --parsable --output="$work/job-%j.out" "$@" \
    --export="ALL,MTF=$mtf,MTF_HOME=$source_dir,CONFIG=$source_dir/tests/run/tiny-test.yaml,RUN_DIR=$work/run,MTF_ARGS=$args" \
    "$source_dir/jobs/transformer-cpu.slurm"
}
