#!/usr/bin/env bash
# The seq2seq acceptance test: a small encoder-decoder (reverse-encdec.yaml) trained for 1000 steps on the
# synthetic `reverse` task of 6 letters (20000 train examples) must get >= 99% of the held-out examples
# (the val split, another random stream: 31 batches of 32 = 992 of its 1000 examples) exactly right, by
# teacher-forced argmax: every answer token (the 6 letters and the end-of-text) is the argmax of its
# logits given the true previous answer tokens (what `mtf eval` reports as exact_match for an
# encoder-decoder). For exact match this is the same number as greedy decoding's: a row whose every answer
# token is the argmax given the true previous tokens decodes greedily to exactly those tokens (each step
# sees the true prefix), and a row decoded right saw the true prefix at every step.
# usage: reverse_learned.sh MTF MPIEXEC CONFIG WORK
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 work=$4
rm -rf "$work"; mkdir -p "$work"
"$mtf" data synth --task reverse --length 6 --examples 20000 --val-fraction 0.05 --output "$work/data" --force \
  > "$work/synth.log" 2>&1 || { cat "$work/synth.log"; exit 1; }
common=(--set "data.train=$work/data/train-*.h5" --set "data.eval=$work/data/val-*.h5" --set "run.dir=$work/run")
"$mpiexec" -n 1 --bind-to none "$mtf" train "$config" --fresh "${common[@]}" > "$work/train.log" 2>&1 \
  || { cat "$work/train.log"; exit 1; }
json=$("$mpiexec" -n 1 --bind-to none "$mtf" eval "$config" "${common[@]}" --json 2> "$work/eval.err") \
  || { cat "$work/eval.err"; exit 1; }
/usr/bin/python3 - "$json" <<'PY'
import json, sys
result = json.loads(sys.argv[1])
print(f"reverse (6 letters), 1000 steps: held-out teacher-forced exact match {100 * result['exact_match']:.2f}% "
      f"(loss {result['loss']:.4f} over {result['tokens']} positions)")
sys.exit(0 if result["exact_match"] >= 0.99 else 1)
PY
