#!/usr/bin/env bash
# Resuming and starting over as a user does it (issue 29, item 10): raising train.steps on a decaying schedule
# is said (both rates), an unchanged schedule is not; --fresh moves the earlier run's checkpoints aside, so a
# later restart resumes the new run and nothing of the old one is lost.
# usage: resume_journeys.sh MTF MPIEXEC CONFIG DATA_DIR WORK
set -u
MTF=$1 MPIEXEC=$2 CONFIG=$3 DATA=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; [ -f "$WORK/log" ] && cat "$WORK/log"; exit 1; }
train() {
  "$MPIEXEC" -n 1 "$MTF" train "$CONFIG" --set "data.train=$DATA/train-*.h5" --set data.eval= \
    --set run.dir="$WORK/run" --set train.checkpoint_every=2 --set train.warmup_steps=0 "$@" >"$WORK/log" 2>&1
}
lr_of_step() { sed -n "s/^step *$1 .* lr \([0-9.e+-]*\) .*/\1/p" "$WORK/log"; }

# 1. A cosine schedule over 2 steps, resumed with train.steps 4: the rate jumps back up, and the run says so.
train --fresh --set train.schedule=cosine --set train.steps=2 || fail "the first run"
grep -q "moved to" "$WORK/log" && fail "--fresh on an empty run directory moved something"
train --set train.schedule=cosine --set train.steps=4 || fail "the resumed run"
grep -Eq "^checkpoint: warning: the learning-rate schedule is not the checkpoint's \(train.steps 2 -> 4\): step 3 runs at lr [0-9.e+-]+ where the checkpoint's schedule gives 0," "$WORK/log" ||
  fail "no warning of the changed schedule"
said=$(sed -n "s/.*step 3 runs at lr \([0-9.e+-]*\) .*/\1/p" "$WORK/log")
python3 -c "import math,sys; said, ran = float('$said'), float('$(lr_of_step 3)')
want = 0.01 * (1 + math.cos(math.pi * 3 / 4)) / 2  # cosine, T 4, no warmup, min 0: step 3 is p = 3/4
sys.exit(not (abs(said - want) < 1e-3 * want and abs(ran - want) < 1e-3 * want))" ||
  fail "step 3's rate: the warning says $said, the step line $(lr_of_step 3), cosine gives 0.001464"
echo "ok: a raised train.steps on a cosine schedule is said, with the rate step 3 runs at"

# 2. A constant schedule does not depend on train.steps: no warning.
train --fresh --set train.schedule=constant --set train.steps=2 || fail "constant, first run"
train --set train.schedule=constant --set train.steps=4 || fail "constant, resumed"
grep -q "learning-rate schedule is not" "$WORK/log" && fail "a warning for a schedule that did not change"
grep -q "resumed from .* at step 2" "$WORK/log" || fail "constant: not resumed at step 2"
echo "ok: an unchanged schedule resumes without a warning"

# 3. --fresh: the earlier checkpoints (steps 2 and 4 above) move aside, the new run's stand alone.
train --fresh --set train.schedule=constant --set train.steps=2 || fail "--fresh"
aside=$(sed -n "s/^train: --fresh: the earlier run's 2 checkpoints moved to \(.*\) (delete it when no longer needed)$/\1/p" "$WORK/log")
[ -n "$aside" ] || fail "--fresh did not say where the earlier checkpoints went"
case "$aside" in "$WORK/run/checkpoints.previous-"*) ;; *) fail "set aside to '$aside'" ;; esac
[ -f "$aside/ckpt-00000004.h5" ] && [ -f "$aside/ckpt-00000002.h5" ] && [ -e "$aside/latest" ] ||
  fail "the earlier checkpoints are not all in $aside: $(ls "$aside")"
[ "$(ls "$WORK/run/checkpoints" | grep -c '^ckpt-')" -eq 1 ] || fail "checkpoints/ holds $(ls "$WORK/run/checkpoints")"
train --set train.schedule=constant --set train.steps=4 || fail "the restart after --fresh"
grep -q "resumed from $WORK/run/checkpoints/ckpt-00000002.h5 at step 2" "$WORK/log" ||
  fail "the restart after --fresh did not resume the new run's step 2"
echo "ok: --fresh sets the earlier checkpoints aside, and a restart resumes the new run"
