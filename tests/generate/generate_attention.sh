#!/usr/bin/env bash
# mtf generate with the attention options (model.kv_heads, model.position): the cached decode (a KV cache
# of kv_heads heads; rotary and relative bias at each row's position) against --no-cache (the training
# forward re-run per token) on 1 rank and on b:2,m:2: greedy, the same ids and each token's log-probability
# within 1e-4 (a barely trained model's greedy text repeats one token, so the log-probabilities, which
# depend on every position's attention, are what tell a wrong position apart), and seeded sampling, the
# same ids. The prompt plus new tokens outgrow model.length, so the sliding window (PREFILL of the last
# length tokens) is under test too.
# usage: generate_attention.sh MTF MPIEXEC CONFIG WORK
set -u
MTF=$1 MPIEXEC=$2 CONFIG=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
"$MTF" data synth --task reverse --output "$WORK/data" --examples 300 --length 12 --force >/dev/null || fail "data synth"
GREEDY=(--prompt "hello world=" --ids --max-new 24 --temperature 0 --json)
SAMPLED=(--prompt "hello world=" --ids --max-new 24 --temperature 1 --seed 5 --json)
# same A B WHAT: the same ids, log-probabilities within 1e-4 (JSON lines of --json)
same() {
  python3 - "$1" "$2" <<'PY' || fail "$3:\n$2\n--no-cache on 1 rank:\n$1\n$(cat "$WORK/stderr")"
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["ids"] == b["ids"], (a["ids"], b["ids"])
assert len(a["logprobs"]) == 24 and max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"])) <= 1e-4
PY
}
# name;options;layout on b:2,m:2
CASES=("mqa;--set model.kv_heads=1;batch:b,heads:m,vocab:m"
       "mqa_q_group;--set model.kv_heads=1 --set model.dropout=0.1;batch:b,heads:m,q_group:m,vocab:m"
       "gqa;--set model.kv_heads=2;batch:b,heads:m,kv_heads:m,vocab:m"
       "rotary;--set model.position=rotary --set model.kv_heads=2;batch:m,heads:b,kv_heads:b,d_ff:b"
       "relative;--set model.position=relative_bias --set model.fused_attention=false --set model.relative_num_buckets=8 --set model.relative_max_distance=20;batch:b,heads:m,vocab:m"
       "none;--set model.position=none --set model.kv_heads=1;batch:b,d_kv:m")
for c in "${CASES[@]}"; do
  IFS=';' read -r name options layout <<<"$c"
  # shellcheck disable=SC2206
  model=(--set model.length=32 --set run.dir="$WORK/run-$name" $options)
  "$MPIEXEC" -n 1 "$MTF" train --fresh "$CONFIG" "${model[@]}" --set "data.train=$WORK/data/train-*.h5" --set data.eval= \
    --set train.steps=1 --set train.checkpoint_every=1 --set train.warmup_steps=0 --set train.log_every=1 \
    >"$WORK/train-$name.log" 2>&1 || { cat "$WORK/train-$name.log"; fail "train $name"; }
  gen() {
    local n=$1
    shift
    "$MPIEXEC" -n "$n" "$MTF" generate "$CONFIG" "${model[@]}" "$@" 2>"$WORK/stderr" | grep '^{' | tail -1
  }
  ref=$(gen 1 --no-cache "${GREEDY[@]}")
  same "$ref" "$(gen 1 "${GREEDY[@]}")" "$name: cached greedy on 1 rank"
  same "$ref" "$(gen 4 --mesh b:2,m:2 --layout "$layout" "${GREEDY[@]}")" "$name: cached greedy on b:2,m:2 $layout"
  sampled=$(gen 1 --no-cache "${SAMPLED[@]}")
  out=$(gen 4 --mesh b:2,m:2 --layout "$layout" "${SAMPLED[@]}")
  python3 -c 'import json, sys; a, b = (json.loads(x)["ids"] for x in sys.argv[1:]); assert a == b and len(a) >= 5, (a, b)' \
    "$sampled" "$out" || fail "$name: seeded sampling on b:2,m:2 $layout: $out, --no-cache on 1 rank: $sampled"
  echo "ok: $name ($options): cached == --no-cache on 1 rank and b:2,m:2 $layout: greedy ids and log-probabilities (24 tokens after 12, past model.length 32), seeded sampling"
done
