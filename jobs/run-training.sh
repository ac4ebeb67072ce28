#!/usr/bin/env bash
# The body of the training job templates (transformer.slurm, transformer-cpu.slurm), run as the batch
# shell inside the allocation. It launches one MPI rank per task with srun --mpi=pmix and handles Slurm's
# warnings: on SIGUSR1 (the templates' --signal=B:USR1@...) or SIGTERM (preemption) it asks mtf to write
# a checkpoint and stop; mtf then exits 75, and this script requeues the job, which resumes from that
# checkpoint when it starts again. `scancel JOBID` sends SIGTERM too, but marks the job CANCELLED first:
# then mtf still checkpoints and stops, and the job is not requeued (it ends CANCELLED; resubmitting the
# template resumes from the checkpoint). A lost node (a multi-node job) ends the job on every node; Slurm
# requeues it itself (--requeue) and it resumes from the last periodic checkpoint. Settings come from the
# template's environment (see the templates).
set -uo pipefail
: "${SLURM_JOB_ID:?submit a template with sbatch (e.g. sbatch jobs/transformer-cpu.slurm)}"
MTF_HOME=${MTF_HOME:-$SLURM_SUBMIT_DIR}
MTF=${MTF:-$MTF_HOME/build/src/mtf}
: "${CONFIG:?CONFIG is not set}" "${RUN_DIR:?RUN_DIR is not set}"
read -r -a extra <<< "${MTF_ARGS:-}"
[ -n "${MESH:-}" ] && extra+=(--mesh "$MESH")
[ -n "${LAYOUT:-}" ] && extra+=(--layout "$LAYOUT")
# A requeued job that finds its run at train.steps (the warning came as the last step ended) has finished;
# a new job started on a finished run has not: mtf says so and exits 3.
[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && extra+=(--done-ok)
threads=${SLURM_CPUS_PER_TASK:-1}
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
# backend.precision bf16 multiplies through oneDNN, whose threads are libgomp's: idle, they would spin and take the
# cores from mtf's own kernel threads (libgomp reads this when it loads, so it is set here, not by mtf).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
say() { echo "[$(date '+%F %T')] job $SLURM_JOB_ID: $*"; }
[ -x "$MTF" ] || { say "no mtf binary at $MTF: build it first (cmake -S . -B build && cmake --build build) or set MTF"; exit 1; }

say "start (restart count ${SLURM_RESTART_COUNT:-0}): $SLURM_NTASKS ranks on ${SLURM_JOB_NUM_NODES:-1} node(s)," \
    "$threads thread(s) each; config $CONFIG, run dir $RUN_DIR ${extra[*]}"
warned=0
warned_at=0
cancelled=0
pid=
# Whether scancel ended this job: slurmctld marks it CANCELLED (shown as COMPLETING while its processes end)
# before it sends the SIGTERM; during a preemption's grace time or a --signal warning the job is still
# RUNNING, and at its time limit COMPLETING with Reason=TimeLimit. Where scontrol cannot answer: not.
cancelled_by_scancel() {
  local info state reason
  info=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null) || return 1
  state=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$info")
  reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<< "$info")
  [ "$state" = CANCELLED ] || { [ "$state" = COMPLETING ] && [ "$reason" != TimeLimit ]; }
}
# This job's nodes that Slurm has found down or not responding (a lost node: Slurm ends the job and, with
# --requeue, queues it again itself).
lost_nodes() { sinfo -h -N -n "$SLURM_JOB_NODELIST" -t down,fail,no_respond -o %N 2>/dev/null | sort -u | tr '\n' ' '; }
node_failed=0
forward() {
  warned=1
  warned_at=$(date +%s)
  local lost=
  [ "$1" = TERM ] && [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ] && lost=$(lost_nodes)
  if [ -n "$lost" ]; then
    node_failed=1
    say "SIGTERM: node(s) ${lost% } of this job failed; Slurm ends the job on every node and requeues it (--requeue):" \
        "it resumes from the last checkpoint in $RUN_DIR/checkpoints"
  elif [ "$1" = TERM ] && cancelled_by_scancel; then
    cancelled=1
    say "SIGTERM from scancel (the job is cancelled): asking mtf to checkpoint and stop; the job will not be requeued"
  else
    say "SIG$1: asking mtf to checkpoint and stop"
  fi
  [ -n "$pid" ] && kill -USR1 "$pid" 2>/dev/null
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
cd "$MTF_HOME" || exit 1
# Evidence that mtf ran: on rank 0 it writes RUN_DIR/config.yaml and creates RUN_DIR/metrics.jsonl anew at
# every start. srun can end without starting a task (e.g. slurmd's PMIx socket could not be created), even
# with status 0; then neither file changes, and the job must fail instead of reporting success.
started() { stat -c '%i %y %s' "$RUN_DIR/config.yaml" "$RUN_DIR/metrics.jsonl" 2>/dev/null; }
before=$(started)
srun --mpi=pmix --kill-on-bad-exit=1 "$MTF" train "$CONFIG" --set "run.dir=$RUN_DIR" "${extra[@]}" &
pid=$!
# `wait` returns early when a trapped signal arrives; keep waiting until srun itself has ended.
while :; do
  wait "$pid"
  status=$?
  kill -0 "$pid" 2>/dev/null || break
done
# mtf exits 75 after its checkpoint. srun may report another status when it ends the slower ranks once
# the first has exited (--kill-on-bad-exit); a checkpoint written since the warning tells the same.
latest=$RUN_DIR/checkpoints/latest
if [ "$node_failed" = 1 ]; then
  say "a node failed (mtf exit status $status): left to Slurm's requeue, not requeued here"
  exit "$status"
fi
if [ "$cancelled" = 1 ]; then
  if [ -f "$latest" ] && [ "$(stat -c %Y "$latest")" -ge "$warned_at" ]; then
    say "cancelled: checkpoint written, not requeued; resubmit the template to resume from $latest"
  else
    say "cancelled before a checkpoint could be written (mtf exit status $status), not requeued"
  fi
  exit 143
fi
if [ "$status" = 75 ] || { [ "$warned" = 1 ] && [ -f "$latest" ] && [ "$(stat -c %Y "$latest")" -ge "$warned_at" ]; }; then
  say "checkpoint written; requeueing to resume from it"
  scontrol requeue "$SLURM_JOB_ID" && exit 0
  say "scontrol requeue failed: resubmit the same template; it resumes from $RUN_DIR/checkpoints/latest"
fi
# 3: the run was at train.steps already (a new job on a finished run): mtf said so and how to go on.
if [ "$status" = 3 ]; then say "nothing to train: $RUN_DIR is at train.steps already (see mtf's message above)"; exit 3; fi
after=$(started)
if [ -z "$after" ] || [ "$after" = "$before" ]; then
  if [ "$status" = 0 ]; then
    say "mtf did not run: srun ended with status 0, but $RUN_DIR/config.yaml and metrics.jsonl were not written" \
        "(srun's tasks never started; see srun's messages above and slurmd's log on ${SLURMD_NODENAME:-the node})"
    status=1
  else
    say "training did not start: srun ended with status $status before $RUN_DIR/config.yaml and metrics.jsonl were" \
        "written (srun could not start the tasks, or mtf stopped during start-up; see the messages above)"
  fi
  say "failed, exit status $status"
  exit "$status"
fi
[ "$status" = 0 ] || { say "failed, exit status $status"; exit "$status"; }
say "done, exit status 0"
exit 0
