#!/usr/bin/env bash
# Beam search (beam 4) against an exhaustive search (exhaustive_beam) on a tiny model with a tiny
# vocabulary (8 ids, end-of-text 0) trained briefly on a random Markov chain: the same best continuation
# and score for several prompts and length penalties, cached and --no-cache, on 1 rank and on m:2 with the
# vocabulary split.
# usage: beam_test.sh MTF MPIEXEC EXHAUSTIVE CONFIG WORK PYTHON
set -u
MTF=$1 MPIEXEC=$2 EXHAUSTIVE=$3 CONFIG=$4 WORK=$5 PYTHON=$6
rm -rf "$WORK" && mkdir -p "$WORK/data"
fail() { echo "FAIL: $*"; exit 1; }
"$PYTHON" - "$WORK/data" <<'PY' || fail "writing the shards (h5py, numpy)"
import sys, numpy as np, h5py
rng = np.random.default_rng(5)
succ = {i: rng.choice(np.arange(1, 8), size=3, replace=False) for i in range(8)}
ids, cur = [], 0
for _ in range(20000):
    nxt = 0 if rng.random() < 0.15 else int(rng.choice(succ[cur], p=[0.6, 0.3, 0.1]))
    ids.append(nxt)
    cur = nxt
for name, part in (("train-00000.h5", ids[:18000]), ("val-00000.h5", ids[18000:])):
    with h5py.File(f"{sys.argv[1]}/{name}", "w") as f:
        f["tokens"] = np.asarray(part, dtype=np.uint16)
        f.attrs.update(vocab_size=8, tokenizer="markov8", eot_id=0, num_tokens=len(part), format_version=1)
PY
MODEL=(--set model.vocab=8 --set model.d_model=32 --set model.d_ff=64 --set model.heads=2 --set model.d_kv=16
       --set model.layers=2 --set model.length=16 --set run.dir="$WORK/run")
"$MPIEXEC" -n 1 "$MTF" train --fresh "$CONFIG" "${MODEL[@]}" --set "data.train=$WORK/data/train-*.h5" --set data.eval= \
  --set train.steps=60 --set train.checkpoint_every=60 --set train.log_every=60 --set train.warmup_steps=5 \
  >"$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; fail "train"; }
CKPT=$(ls "$WORK"/run/checkpoints/ckpt-*.h5 | tail -1)
SETS=(model.vocab=8 model.d_model=32 model.d_ff=64 model.heads=2 model.d_kv=16 model.layers=2 model.length=16)
checked=0
for prompt in "3" "1 5" "0" "7 2 6"; do
  for alpha in 0 0.6 2; do
    want=$("$MPIEXEC" -n 1 "$EXHAUSTIVE" "$CONFIG" "$CKPT" "$prompt" 4 "$alpha" 0 "${SETS[@]}") || fail "exhaustive search"
    want_ids=${want% *} want_score=${want##* }
    for m in "1;;" "2;m:2;vocab:m,heads:m"; do
      IFS=';' read -r n mesh layout <<<"$m"
      place=()
      [ -n "$mesh" ] && place=(--mesh "$mesh" --layout "$layout")
      for cache in "" --no-cache; do
        got=$("$MPIEXEC" -n "$n" "$MTF" generate "$CONFIG" "${MODEL[@]}" "${place[@]}" --prompt-ids "$prompt" --beam 4 \
              --length-penalty "$alpha" --max-new 4 --json $cache 2>"$WORK/stderr") || fail "generate: $(cat "$WORK/stderr")"
        ids=$(echo "$got" | "$PYTHON" -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps(d['prompt_ids'] + d['ids']).replace(',', ', ').replace(',  ', ', '))")
        score=$(echo "$got" | "$PYTHON" -c "import json,sys; print(json.loads(sys.stdin.read())['beam_score'])")
        [ "$ids" = "$want_ids" ] || fail "prompt '$prompt' alpha $alpha ${mesh:-1 rank} ${cache:-cached}: beam $ids (score $score), exhaustive $want_ids (score $want_score)"
        "$PYTHON" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-4 * max(1, abs(b)))" \
          "$score" "$want_score" || fail "prompt '$prompt' alpha $alpha: beam score $score, exhaustive $want_score"
        checked=$((checked + 1))
      done
    done
    echo "ok: prompt [$prompt] alpha $alpha: $want_ids score $want_score"
  done
done
echo "beam tests: $checked runs agree with the exhaustive search"
