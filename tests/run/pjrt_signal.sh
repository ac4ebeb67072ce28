#!/usr/bin/env bash
# The checkpoint -> requeue path on backend pjrt (1 process x 2 XLA CPU-plugin devices, mesh b:2): SIGUSR1
# to a run mid-training must write a checkpoint of the last finished step and exit 75 (what the Slurm
# templates requeue on); the resumed run must then print the same losses, bit for bit, as an uninterrupted
# pjrt run of as many steps (dropout on, so the random offset must resume too).
# usage: pjrt_signal.sh MTF CONFIG DATA WORKDIR [ARG...] (more mtf options)
set -euo pipefail
mtf=$1 config=$2 data=$3 work=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
common=("$config" --set "data.train=$data/train-*.h5" --set "data.eval=" --set model.dropout=0.1
        --set backend.kind=pjrt --set backend.local_devices=2 --mesh "b:2" --layout "batch:b" "$@")
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -n 30 "$f"; done; exit 1; }
losses() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl" | grep -E '^[0-9]+ '; }
metrics_lines() { [ -s "$1/metrics.jsonl" ] && [ "$(losses "$1" | wc -l)" -ge "$2" ]; }
train() { # NAME [args...]: a run that must succeed
  local name=$1; shift
  "$mtf" train "${common[@]}" --set "run.dir=$work/$name" "$@" >> "$work/$name.log" 2>&1 || fail "run $name exited with $?"
}

"$mtf" train "${common[@]}" --set "run.dir=$work/stopped" --set train.steps=100000 --set train.log_every=1 \
  > "$work/stopped-signal.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do metrics_lines "$work/stopped" 3 && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
metrics_lines "$work/stopped" 3 || { kill -KILL "$pid" 2>/dev/null || true; fail "the pjrt run did not get to step 3"; }
grep -q "^backend: pjrt, 1 process x 2 devices" "$work/stopped-signal.log" || { kill -KILL "$pid"; fail "pjrt did not run"; }
kill -USR1 "$pid"
status=0; wait "$pid" || status=$?
[ "$status" -eq 75 ] || fail "exit status $status after SIGUSR1, expected 75"
grep -q "checkpoint: saved" "$work/stopped-signal.log" || fail "no checkpoint written on SIGUSR1"
step=$(sed -E 's/ckpt-0*([0-9]+)\.h5/\1/' "$work/stopped/checkpoints/latest")
[ "$step" = "$(losses "$work/stopped" | tail -n 1 | cut -d' ' -f1)" ] || fail "checkpoint step $step is not the last logged step"
train ref --fresh --set train.steps=$((step + 4)) --set train.log_every=1
train stopped --set train.steps=$((step + 4)) --set train.log_every=1
grep -q "at step $step " "$work/stopped.log" || fail "did not resume at step $step"
# Every step of the straight run against the signalled run's log (steps 1..step before the signal, the rest
# after the resume), bit for bit.
diff <(losses "$work/ref") <(losses "$work/stopped" | tail -n "$(losses "$work/ref" | wc -l)") \
  || fail "losses differ between the straight run (<) and the signalled + resumed one (>)"
echo "pjrt sigusr1: SIGUSR1 after step $step wrote a checkpoint and exited 75; the resumed steps $((step + 1))-$((step + 4))" \
     "and all before them equal the straight pjrt run's"
