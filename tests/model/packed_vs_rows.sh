#!/usr/bin/env bash
# Packed sequences: the loss of packed rows equals the loss of the same documents one per row. Trains the
# test model (data.pack: segments) for 10 steps on the packed shards, then `mtf eval` of that checkpoint
# over the packed val shard and over the one-per-row val shard (the same documents, from one synth seed),
# every window exactly once, each with NPROCS ranks on MESH/LAYOUT; the two losses and the counted tokens
# must agree (1e-5 relative). The first token of a document is left out (train.loss_skip_document_start),
# since one per row nothing predicts it.
# usage: packed_vs_rows.sh MTF MPIEXEC CONFIG PACKED ROWS WORK NPROCS MESH LAYOUT [--set k=v]...
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 packed=$4 rows=$5 work=$6 nprocs=$7 mesh=$8 layout=$9
shift 9
py=/usr/bin/python3
rm -rf "$work"; mkdir -p "$work"
common=(--set model.length=24 --set data.pack=segments --set model.fused_attention=false
        --set train.loss_skip_document_start=true --set train.microbatches=1 "$@")
"$mpiexec" -n 1 "$mtf" train "$config" --fresh "${common[@]}" --set "data.train=$packed/train-00000.h5" \
  --set data.eval= --set "run.dir=$work/run" --set train.steps=10 --set train.checkpoint_every=10 \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
ckpt="$work/run/checkpoints/ckpt-00000010.h5"
windows() { $py -c "import h5py,sys; print((len(h5py.File(sys.argv[1])['tokens']) - 1) // 24)" "$1"; }
evaluate() { # shard -> the JSON of mtf eval over each of its windows once (batch 8: windows / 8 batches)
  local n; n=$(windows "$1")
  [ $((n % 8)) -eq 0 ] || { echo "$1 holds $n windows, not a multiple of 8"; exit 1; }
  "$mpiexec" -n "$nprocs" "$mtf" eval "$config" "${common[@]}" --mesh "$mesh" --layout "$layout" \
    --set train.batch=8 --set train.eval_batches=$((n / 8)) --set "data.eval=$1" --checkpoint "$ckpt" --json \
    2> "$work/eval.err" || { cat "$work/eval.err"; exit 1; }
}
packed_json=$(evaluate "$packed/val-00000.h5")
rows_json=$(evaluate "$rows/val-00000.h5")
$py - "$packed_json" "$rows_json" "$mesh $layout" <<'PY'
import json, sys
p, r = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rel = abs(p["loss"] - r["loss"]) / abs(r["loss"])
print(f"[{sys.argv[3]}] packed: loss {p['loss']:.8f} over {p['tokens']} tokens; one per row: loss {r['loss']:.8f} "
      f"over {r['tokens']} tokens; relative difference {rel:.2e}")
sys.exit(0 if rel <= 1e-5 and p["tokens"] == r["tokens"] and p["tokens"] > 0 else 1)
PY
