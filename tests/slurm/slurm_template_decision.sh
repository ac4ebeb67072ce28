#!/usr/bin/env bash
# jobs/run-training.sh's verdict, without Slurm: fake srun and scontrol on PATH and a fake mtf. A job whose
# srun ends without starting mtf (status 0 or not) must fail with a message, never "done, exit status 0";
# a real run's status, and the checkpoint/requeue path (75), are kept; mtf's 3 (a finished run started
# again) is reported as nothing to train. usage: slurm_template_decision.sh SOURCE_DIR WORK
set -uo pipefail
source_dir=$1 work=$2
rm -rf "$work" && mkdir -p "$work/bin" || exit 1
# srun: FAKE_SRUN=skip-N ends with status N without starting the command; run starts it (options dropped).
cat > "$work/bin/srun" <<'SH'
#!/usr/bin/env bash
while [ $# -gt 0 ] && [[ "$1" == --* ]]; do shift; done
case "$FAKE_SRUN" in
  skip-*) echo "srun: error: fake: the tasks did not start" >&2; exit "${FAKE_SRUN#skip-}" ;;
  run) exec "$@" ;;
esac
SH
cat > "$work/bin/scontrol" <<'SH'
#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
SH
# mtf: writes what mtf train writes at start-up on rank 0, then exits FAKE_MTF_STATUS.
cat > "$work/bin/mtf" <<'SH'
#!/usr/bin/env bash
for a in "$@"; do case "$a" in run.dir=*) dir=${a#run.dir=} ;; esac; done
mkdir -p "$dir" && echo "fake: true" > "$dir/config.yaml" && rm -f "$dir/metrics.jsonl" && : > "$dir/metrics.jsonl"
echo "train: fake"
exit "${FAKE_MTF_STATUS:-0}"
SH
chmod +x "$work/bin/"*
failures=0
# usage: check NAME SRUN MTF_STATUS EXPECTED_STATUS EXPECTED_LINE [fresh|stale]
check() {
  local name=$1 run=$work/$1/run out=$work/$1/out status
  mkdir -p "$work/$name"
  if [ "${6:-fresh}" = stale ]; then mkdir -p "$run" && echo old > "$run/config.yaml" && : > "$run/metrics.jsonl"; fi
  (cd "$work/$name" && env PATH="$work/bin:$PATH" FAKE_SRUN=$2 FAKE_MTF_STATUS=$3 FAKE_LOG="$work/$name/scontrol.log" \
     SLURM_JOB_ID=42 SLURM_NTASKS=4 SLURM_SUBMIT_DIR="$source_dir" MTF_HOME="$source_dir" MTF="$work/bin/mtf" \
     CONFIG=none.yaml RUN_DIR="$run" MESH= LAYOUT= bash "$source_dir/jobs/run-training.sh") > "$out" 2>&1
  status=$?
  if [ "$status" != "$4" ] || ! grep -q -- "$5" "$out"; then
    echo "FAIL $name: exit status $status (expected $4), expected a line with '$5'; output:"; sed 's/^/  /' "$out"
    failures=$((failures + 1))
  elif [ "$4" != 0 ] && grep -q "done, exit status 0" "$out"; then
    echo "FAIL $name: reported 'done, exit status 0'"; failures=$((failures + 1))
  else
    echo "ok   $name: exit status $status, '$(grep -m1 -- "$5" "$out" | sed 's/^\[[^]]*\] //')'"
  fi
}
check srun_0_no_tasks        skip-0 0  1 "mtf did not run"
check srun_0_no_tasks_stale  skip-0 0  1 "mtf did not run" stale
check srun_1_no_tasks        skip-1 0  1 "training did not start"
check srun_1_no_tasks_stale  skip-1 0  1 "training did not start" stale
check trained                run    0  0 "done, exit status 0"
check trained_over_old_run   run    0  0 "done, exit status 0" stale
check mtf_failed             run    1  1 "failed, exit status 1"
check nothing_to_train       run    3  3 "nothing to train: .* is at train.steps already"
check checkpoint_requeue     run    75 0 "requeueing to resume"
grep -q "requeue 42" "$work/checkpoint_requeue/scontrol.log" 2>/dev/null || { echo "FAIL checkpoint_requeue: scontrol requeue 42 was not called"; failures=$((failures + 1)); }
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "all cases passed"
