#!/usr/bin/env bash
# The MoE metrics of `mtf train` and the dropless evaluation of `mtf train` and `mtf eval`:
#  - every metrics.jsonl line has "moe": [{"layer": 1, "dropped", "max_load", "aux_loss"}] for the one MoE
#    layer, with 0 <= dropped < 1, max_load >= 1 (the busiest expert has at least the mean), aux_loss >= 1
#    (experts * sum_e f_e p_e is 1 when balanced), some routings dropped at capacity factor 1.25;
#  - the last line has eval_dropless_loss next to eval_loss (eval capacity 2.0 can drop), and `mtf eval`
#    of the checkpoint prints both, the same numbers;
#  - model.moe.dropless: true drops nothing, and then evaluation has no separate dropless loss.
# usage: metrics.sh MTF MPIEXEC CONFIG DATA WORKDIR
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
common=(--set "data.train=$data/train-*.h5" --set "data.eval=$data/val-*.h5" --set train.steps=20 --set train.log_every=5
        --set train.checkpoint_every=20)
"$mpiexec" -n 2 "$mtf" train "$config" --fresh "${common[@]}" --set "run.dir=$work/capacity" --mesh b:2 \
  --layout "batch:b;experts:b" > "$work/capacity.log" 2>&1 || { cat "$work/capacity.log"; exit 1; }
"$mpiexec" -n 1 "$mtf" train "$config" --fresh "${common[@]}" --set "run.dir=$work/dropless" \
  --set model.moe.dropless=true > "$work/dropless.log" 2>&1 || { cat "$work/dropless.log"; exit 1; }
check() { # run-dir awk-program
  python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
mode = sys.argv[2]
assert len(lines) == 4, f"{len(lines)} lines"
for l in lines:
    (m,) = l["moe"]
    assert m["layer"] == 1, m
    assert 0 <= m["dropped"] < 1 and m["max_load"] >= 1 and m["aux_loss"] >= 0.999, m
    if mode == "dropless": assert m["dropped"] == 0, m
last = lines[-1]
assert "eval_loss" in last
if mode == "capacity":
    assert max(l["moe"][0]["dropped"] for l in lines) > 0, "nothing dropped at capacity factor 1.25"
    assert "eval_dropless_loss" in last, last
    print(f"capacity: dropped {[l['moe'][0]['dropped'] for l in lines]}, max_load {[l['moe'][0]['max_load'] for l in lines]}, "
          f"eval_loss {last['eval_loss']:.6f}, eval_dropless_loss {last['eval_dropless_loss']:.6f}")
else:
    assert "eval_dropless_loss" not in last, last
    print(f"dropless: dropped 0 at every step, eval_loss {last['eval_loss']:.6f}")
PY
}
check "$work/capacity" capacity
check "$work/dropless" dropless
# mtf eval of the capacity run's checkpoint: both losses, as the last training line has them.
out=$("$mpiexec" -n 1 "$mtf" eval "$config" --json --set "data.eval=$data/val-*.h5" --set "run.dir=$work/capacity" 2>/dev/null)
echo "mtf eval --json: $out"
python3 - "$work/capacity/metrics.jsonl" "$out" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1])][-1]
ev = json.loads(sys.argv[2])
assert abs(ev["loss"] - last["eval_loss"]) < 1e-5 * abs(last["eval_loss"]), (ev, last)
assert abs(ev["dropless_loss"] - last["eval_dropless_loss"]) < 1e-5 * abs(last["eval_dropless_loss"]), (ev, last)
PY
"$mpiexec" -n 1 "$mtf" eval "$config" --set "data.eval=$data/val-*.h5" --set "run.dir=$work/capacity" 2>&1 |
  grep -E "^eval: loss [0-9.]+, perplexity [0-9.]+ over [0-9]+ tokens; dropless loss [0-9.]+ "
