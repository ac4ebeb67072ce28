#!/usr/bin/env bash
# Checkpoints whose values or attributes are wrong in ways a checksum does not catch (issue 16):
#   the checksum definition of docs/CHECKPOINTS.md recomputed in Python agrees with mtf's;
#   NaN weights are reported as such by mtf eval and mtf train --from (exit 1, no learning-rate advice);
#   finite weights whose evaluation overflows make mtf eval exit 1 instead of printing "loss nan";
#   a negative step is refused; a token shard given to --from is named as one;
#   string attributes that are arrays (config, mesh) are refused by inspect and by a resume, without a crash,
#   and a config over the 16 MiB limit is said to be too large (issue 35);
#   a NULLPAD string of full width keeps its last character; inspect --json escapes every string;
#   a variable whose storage was never written (and has no checksum) is refused, not restored as zeros.
# usage: bad_values.sh MTF MPIEXEC CONFIG DATA WORK
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
here=$(dirname "$0")
py=/usr/bin/python3
rm -rf "$work"; mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=$data/val-*.h5")
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -n 12 "$f"; done; exit 1; }
# expect STATUS LOG REGEX [-n REGEX] -- COMMAND...
expect() {
  local want=$1 log=$2 re=$3; shift 3
  local not=""; if [ "$1" = -n ]; then not=$2; shift 2; fi
  shift # --
  local status=0; timeout 60 "$@" > "$work/$log.log" 2>&1 || status=$?
  [ "$status" = "$want" ] || fail "$log: exit $status, wanted $want"
  grep -qE "$re" "$work/$log.log" || fail "$log: no line matching '$re'"
  if [ -n "$not" ] && grep -qE "$not" "$work/$log.log"; then fail "$log: a line matches '$not'"; fi
  return 0
}
"$mtf" train "$config" "${common[@]}" --set "run.dir=$work/run" --set train.steps=5 --set train.checkpoint_every=5 \
  > "$work/train.log" 2>&1 || fail "training failed"
good=$work/run/checkpoints/ckpt-00000005.h5
$py "$here/poison.py" "$good" check > /dev/null || fail "the Python checksum disagrees with mtf's"
crash="Segmentation|AddressSanitizer|MPI_ABORT|core dumped"

cp "$good" "$work/nan.h5"; $py "$here/poison.py" "$work/nan.h5" set embed.wte nan
expect 1 eval-nan "checkpoint '.*nan.h5': variable 'embed/wte' holds [0-9]+ NaN or infinite values" -n "lower train.learning_rate|loss nan" \
  -- "$mtf" eval "$config" "${common[@]}" --set "run.dir=$work/run" --checkpoint "$work/nan.h5"
expect 1 train-nan "variable 'embed/wte' holds [0-9]+ NaN or infinite values" -n "lower train.learning_rate" \
  -- "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/other" --set train.steps=8 --from "$work/nan.h5"

cp "$good" "$work/huge.h5"; $py "$here/poison.py" "$work/huge.h5" set embed.wte 3e38
expect 1 eval-huge "error: the evaluation loss is (NaN|infinite)" -n "loss nan|perplexity" \
  -- "$mtf" eval "$config" "${common[@]}" --set "run.dir=$work/run" --checkpoint "$work/huge.h5"

cp "$good" "$work/negative.h5"; $py "$here/poison.py" "$work/negative.h5" attr step -3
expect 1 negative-step "checkpoint '.*negative.h5' has a negative 'step' \(-3\)" -n "lower train.learning_rate" \
  -- "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/other" --set train.steps=8 --from "$work/negative.h5"

expect 1 token-shard "is a token shard, not a checkpoint" \
  -- "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/other" --set train.steps=8 --from "$data/train-00000.h5"

for attr in config mesh; do
  cp "$good" "$work/array-$attr.h5"
  $py "$here/poison.py" "$work/array-$attr.h5" strings "$attr" "$(printf 'x%.0s' $(seq 300))" b c d e f g h
  expect 1 inspect-array-$attr "its '$attr' attribute cannot be read as one string: it is an array of 8 strings" \
    -n "$crash" -- "$mtf" ckpt inspect "$work/array-$attr.h5"
done
# A config attribute past the 16 MiB a string attribute may have (dense attribute storage, HDF5 1.8+ files):
# said so, with the limit, not "missing".
$py - "$good" "$work/huge-config.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as src, h5py.File(sys.argv[2], "w", libver="latest") as dst:
    for key in src:
        src.copy(src[key], dst, name=key)
    for key, value in src.attrs.items():
        if key != "config":
            dst.attrs[key] = value
    dst.attrs["config"] = np.bytes_(b"y" * (17 << 20))
PY
expect 1 inspect-huge-config "its 'config' attribute cannot be read as one string: it is 17.0 MiB, over the 16 MiB" \
  -n "$crash" -- "$mtf" ckpt inspect "$work/huge-config.h5"
# A resume whose only checkpoint has an array as its config: the restore does not read the (informative)
# config, so it resumes, without a crash.
mkdir -p "$work/array-run/checkpoints"
cp "$work/array-config.h5" "$work/array-run/checkpoints/ckpt-00000005.h5"
echo ckpt-00000005.h5 > "$work/array-run/checkpoints/latest"
expect 0 resume-array-config "resumed from .*ckpt-00000005.h5 at step 5" -n "$crash" \
  -- "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/array-run" --set train.steps=8
cp "$good" "$work/array-variable.h5"
$py - "$work/array-variable.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    d = f["variables/embed.wte"]
    del d.attrs["variable"]
    d.attrs["variable"] = np.array([b"x" * 200] * 50)
    del d.attrs["dims"]
    d.attrs["dims"] = np.array([b"d_model" * 10, b"vocab"])
PY
expect 1 inspect-array-variable "dataset variables/embed.wte is unreadable or lacks its dims attribute" -n "$crash" \
  -- "$mtf" ckpt inspect "$work/array-variable.h5"
expect 1 train-array-variable "dataset variables/embed.wte is unreadable or lacks its dims attribute" -n "$crash" \
  -- "$mtf" train "$config" "${common[@]}" --set "run.dir=$work/other" --set train.steps=8 --from "$work/array-variable.h5"

cp "$good" "$work/nullpad.h5"; $py "$here/poison.py" "$work/nullpad.h5" nullpad layout 'quo"te\back'
expect 0 inspect-nullpad "layout 'quo\"te\\\\back'" -- "$mtf" ckpt inspect "$work/nullpad.h5"
$py - "$work/nullpad.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    d = f["variables/embed.wte"]
    del d.attrs["kind"]
    d.attrs["kind"] = np.bytes_(b'para"m\\eter\x01')
PY
"$mtf" ckpt inspect "$work/nullpad.h5" --json > "$work/inspect.json" 2> "$work/inspect-json.log" || fail "inspect --json failed"
$py - "$work/inspect.json" <<'PY' || fail "inspect --json is not valid JSON or lost characters"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["layout"] == 'quo"te\\back', j["layout"]
kinds = {d["dataset"]: d["kind"] for d in j["datasets"]}
assert kinds["embed.wte"] == 'para"m\\eter\x01', kinds["embed.wte"]
PY
# A variable whose storage was never written (HDF5 reads its fill value, zeros) and that has no checksum
# (as in checkpoints older than checksums) is damage, not zeros restored in silence.
cp "$good" "$work/unstored.h5"
$py - "$work/unstored.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    g = f["variables"]
    attrs = {k: v for k, v in g["embed.wte"].attrs.items() if k != "checksum"}
    shape = g["embed.wte"].shape
    del g["embed.wte"]
    d = g.create_dataset("embed.wte", shape=shape, dtype="<f4", chunks=True)  # no chunk is ever written
    for k, v in attrs.items():
        d.attrs[k] = v
PY
expect 1 eval-unstored "dataset variables/embed.wte is not stored in full \(damaged\)" -n "$crash" \
  -- "$mtf" eval "$config" "${common[@]}" --set "run.dir=$work/run" --checkpoint "$work/unstored.h5"
echo "bad values: NaN weights, overflowing eval, negative step, token shard, array and NULLPAD attributes, JSON escapes, unstored data"
