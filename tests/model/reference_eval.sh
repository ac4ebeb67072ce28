#!/usr/bin/env bash
# A saved checkpoint against tests/model/reference_model.py (double-precision PyTorch from the README's
# model description): trains CONFIG with the options for 11 steps on a shard of exactly one batch (8
# windows, so each step's loss covers every window whatever the order), checkpointing at step 10; then
#   - `mtf eval --checkpoint` of step 10 over a shard of exactly train.eval_batches batches (32 windows,
#     each once) against the reference's mean cross-entropy over that shard, and
#   - the training loss that metrics.jsonl records at step 11 (computed with step 10's parameters) against
#     the reference's training loss (label smoothing and z-loss included) over the training shard;
# each within 1e-5 (absolute; the losses are about 3-6). An encoder-decoder's losses are over its answer
# tokens (tests/model/reference_encoder_decoder.py), and its teacher-forced exact match must agree too.
# usage: reference_eval.sh MTF MPIEXEC CONFIG DATA WORK [--set k=v]...
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
shift 5
py=/usr/bin/python3
rm -rf "$work"; mkdir -p "$work"
# Shards of 8 and 32 windows of 16 + 1 tokens (model.length is set to 16 below) from the synthetic data;
# for an encoder-decoder (--set model.architecture=encoder_decoder), of 8 and 32 marked examples.
seq2seq=0; case " $* " in *model.architecture=encoder_decoder*) seq2seq=1;; esac
$py - "$data/train-00000.h5" "$work" "$seq2seq" <<'PY'
import sys, h5py, numpy as np
source, work, seq2seq = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
with h5py.File(source, "r") as f:
    tokens, attrs = f["tokens"][()], dict(f.attrs)
    spans = f["seq2seq_examples"][()] if seq2seq else None
    segments = f["segments"][()] if "segments" in f else None  # packed shards (data.pack: segments)
attrs.pop("seq2seq", None)
first = 0
for name, windows in (("train", 8), ("eval", 32)):
    if seq2seq:  # whole examples from the 40th on, their marks rebased to the new shard
        rows = spans[40 + first:40 + first + windows]
        first += windows
        begin, end = rows[0][0], rows[-1][2]
        part, marks = tokens[begin:end], rows - begin
    else:
        part = tokens[1000:1000 + windows * 16 + 1]
    with h5py.File(f"{work}/{name}-00000.h5", "w") as g:
        g.create_dataset("tokens", data=part.astype(np.uint16))
        if segments is not None:
            g.create_dataset("segments", data=segments[1000:1000 + windows * 16 + 1].astype(np.int32))
        for k, v in attrs.items():
            g.attrs[k] = v
        g.attrs["num_tokens"] = len(part)
        if seq2seq:
            g.attrs["seq2seq"] = np.int64(1)
            g.create_dataset("seq2seq_examples", data=marks.astype(np.int64))
PY
set_common=(--set model.length=16 --set train.batch=8 --set train.eval_batches=4 --set train.microbatches=1)
"$mpiexec" -n 1 --bind-to none "$mtf" train "$config" --fresh "${set_common[@]}" --set "data.train=$work/train-00000.h5" \
  --set data.eval= --set "run.dir=$work/run" --set train.steps=11 --set train.checkpoint_every=10 \
  --set train.log_every=1 "$@" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
ckpt="$work/run/checkpoints/ckpt-00000010.h5"
eval_json=$("$mpiexec" -n 1 --bind-to none "$mtf" eval "$config" "${set_common[@]}" "$@" \
  --set "data.eval=$work/eval-00000.h5" --checkpoint "$ckpt" --json 2> "$work/eval.err") \
  || { cat "$work/eval.err"; exit 1; }
step11=$(sed -nE 's/.*"step": 11, "loss": ([^,]+),.*/\1/p' "$work/run/metrics.jsonl")
ref_eval=$($py "$(dirname "$0")/reference_model.py" "$ckpt" "$work/eval-00000.h5")
ref_train=$($py "$(dirname "$0")/reference_model.py" "$ckpt" "$work/train-00000.h5")
$py - "$eval_json" "$step11" "$ref_eval" "$ref_train" "$*" <<'PY'
import json, sys
mtf_eval, step11 = json.loads(sys.argv[1])["loss"], float(sys.argv[2])
ref_eval, ref_train = json.loads(sys.argv[3]), json.loads(sys.argv[4])
assert ref_eval["windows"] == 32 and ref_train["windows"] == 8, (ref_eval, ref_train)
d_eval, d_train = abs(mtf_eval - ref_eval["xent"]), abs(step11 - ref_train["train"])
print(f"[{sys.argv[5]}] eval loss: mtf {mtf_eval:.8f}, reference {ref_eval['xent']:.8f} (difference {d_eval:.2e}); "
      f"training loss at step 10's parameters: mtf {step11:.8f}, reference {ref_train['train']:.8f} "
      f"(difference {d_train:.2e}; reference cross-entropy alone {ref_train['xent']:.8f})")
ok = d_eval <= 1e-5 and d_train <= 1e-5
if "exact_match" in ref_eval:
    mtf_exact = json.loads(sys.argv[1])["exact_match"]
    print(f"teacher-forced exact match: mtf {mtf_exact:.6f}, reference {ref_eval['exact_match']:.6f}")
    ok = ok and abs(mtf_exact - ref_eval["exact_match"]) < 1e-9
sys.exit(0 if ok else 1)
PY
