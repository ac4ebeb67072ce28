#!/usr/bin/env bash
# Encoder-decoder generation (issue 29, item 9): the prompt is the encoder's input, run once per prompt; the
# decoder starts at end-of-text and decodes with its key/value cache, cross-attention reading the kept
# encoder output. Checked:
#   1. a small encoder-decoder trained on the reverse task (tests/model/reverse-encdec.yaml, 1000 steps; it
#      reaches >= 99% held-out exact match) greedily answers held-out prompts with their reversal, cached and
#      --no-cache, on 1 rank and on b:2,m:2;
#   2. a T5-shaped model (2 + 2 layers, relative position bias, gated GELU, RMS norm, untied output) after 2
#      steps: greedy ids alike cached and --no-cache on 1 rank and on b:2;m:2 under two layouts; seeded
#      sampling and beam search alike on every mesh; a batch of prompts of different lengths gives each
#      prompt's output alone.
# usage: encdec_generate.sh MTF MPIEXEC SOURCE_DIR WORK [quick]
set -u
MTF=$1 MPIEXEC=$2 SRC=$3 WORK=$4 QUICK=${5:-}
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
"$MTF" data synth --task reverse --length 6 --examples 20000 --val-fraction 0.05 --output "$WORK/data" --force \
  >/dev/null || fail "data synth"
DATA=(--set "data.train=$WORK/data/train-*.h5" --set data.eval=)
gen() { # NPROCS CHECKPOINT ARGS...: stdout (the header lines go to stderr)
  local n=$1 ckpt=$2
  shift 2
  "$MPIEXEC" -n "$n" --bind-to none "$MTF" generate --checkpoint "$ckpt" "$@" 2>"$WORK/stderr"
}

# 1. The trained reverse model answers held-out prompts.
"$MPIEXEC" -n 1 --bind-to none "$MTF" train "$SRC/tests/model/reverse-encdec.yaml" --fresh "${DATA[@]}" \
  --set run.dir="$WORK/reverse" >"$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; fail "training the reverse model"; }
# held-out prompts: the first 4 examples of the val split, as `mtf data synth` wrote them (prompt "xyz...=")
PROMPTS=$(/usr/bin/python3 - "$WORK/data" <<'PY'
import glob, sys, h5py
f = h5py.File(sorted(glob.glob(sys.argv[1] + "/val-*.h5"))[0], "r")
tokens, spans = f["tokens"][()], f["seq2seq_examples"][()]
for start, answer, end in spans[:4]:
    print(bytes(int(t) for t in tokens[start:answer]).decode() + "\t" + bytes(int(t) for t in tokens[answer:end - 1]).decode())
PY
) || fail "reading the val prompts"
[ "$(echo "$PROMPTS" | wc -l)" = 4 ] || fail "val prompts: $PROMPTS"
args=()
expected=""
while IFS=$'\t' read -r prompt answer; do
  args+=(--prompt "$prompt")
  expected+="$answer"$'\n'
done <<<"$PROMPTS"
expected=${expected%$'\n'}
for m in "1" "4 --mesh b:2;m:2 --layout batch:b;heads:m;d_ff:m;vocab:m"; do
  for cache in "" --no-cache; do
    read -r n place <<<"$m"
    # shellcheck disable=SC2086
    out=$(gen "$n" "$WORK/reverse" $place "${args[@]}" --temperature 0 --max-new 8 $cache) || fail "generate: $(cat "$WORK/stderr")"
    [ "$out" = "$expected" ] || fail "the reverse model on ${m} ${cache:-cached} answered:\n$out\nexpected:\n$expected"
  done
done
echo "ok: the trained reverse model answers 4 held-out prompts with their reversal (greedy; cached and --no-cache; 1 rank and b:2,m:2)"

# 2. A T5-shaped model, 2 + 2 layers, after 2 steps: every path gives the same ids.
T5=(--set model.encoder_layers=2 --set model.decoder_layers=2 --set model.d_model=64 --set model.d_ff=128
    --set model.heads=4 --set model.d_kv=16 --set model.length=16 --set model.relative_num_buckets=8 --set model.relative_max_distance=16
    --set train.batch=8)
"$MPIEXEC" -n 1 --bind-to none "$MTF" train "$SRC/configs/t5-small.yaml" --fresh "${DATA[@]}" "${T5[@]}" --mesh m:1 \
  --layout "" --set train.steps=2 --set train.warmup_steps=1 --set train.checkpoint_every=2 --set run.dir="$WORK/t5" \
  >"$WORK/train-t5.log" 2>&1 || { cat "$WORK/train-t5.log"; fail "training the T5-shaped model"; }
MESHES=("1" "4 --mesh b:2;m:2 --layout batch:b;heads:m;d_ff:m;vocab:m" "4 --mesh b:2;m:2 --layout batch:m;d_model:b")
[ "$QUICK" = quick ] && MESHES=("${MESHES[@]:0:2}")
ref=$(gen 1 "$WORK/t5" --prompt "abcdefg=" --ids --temperature 0 --max-new 12 --no-cache) || fail "$(cat "$WORK/stderr")"
[ "$(echo "$ref" | tr -cd , | wc -c)" -ge 1 ] || fail "the reference greedy output is too short: $ref"
for m in "${MESHES[@]}"; do
  for cache in "" --no-cache; do
    read -r n place <<<"$m"
    # shellcheck disable=SC2086
    out=$(gen "$n" "$WORK/t5" $place --prompt "abcdefg=" --ids --temperature 0 --max-new 12 $cache) || fail "$(cat "$WORK/stderr")"
    [ "$out" = "$ref" ] || fail "greedy on $m ${cache:-cached}: $out, reference (1 rank, --no-cache) $ref"
  done
done
echo "ok: T5-shaped 2+2: greedy ids alike cached and --no-cache on 1 rank and b:2,m:2 (${#MESHES[@]} meshes): $ref"
for s in "--temperature 1 --seed 5" "--beam 3"; do
  ref=$(gen 1 "$WORK/t5" --prompt "xyz=" --ids --max-new 10 $s --no-cache) || fail "$(cat "$WORK/stderr")"
  for m in "${MESHES[@]}"; do
    read -r n place <<<"$m"
    # shellcheck disable=SC2086
    out=$(gen "$n" "$WORK/t5" $place --prompt "xyz=" --ids --max-new 10 $s) || fail "$(cat "$WORK/stderr")"
    [ "$out" = "$ref" ] || fail "$s on $m: $out, reference $ref"
  done
done
echo "ok: T5-shaped 2+2: seeded sampling and beam search alike on every mesh"
# "ab=", "abcdefgh=", "q=" as byte ids
printf '%s\n' "[97, 98, 61]" "[97, 98, 99, 100, 101, 102, 103, 104, 61]" "[113, 61]" >"$WORK/prompts.jsonl"
batch=$(gen 2 "$WORK/t5" --mesh b:2 --layout batch:b --prompts "$WORK/prompts.jsonl" --ids --temperature 0 --max-new 6) ||
  fail "$(cat "$WORK/stderr")"
[ "$(echo "$batch" | wc -l)" = 3 ] || fail "3 prompts gave: $batch"
i=0
while read -r line; do
  i=$((i + 1))
  alone=$(gen 1 "$WORK/t5" --prompt-ids "$(echo "$line" | tr -d '[],')" --ids --temperature 0 --max-new 6 --no-cache) ||
    fail "$(cat "$WORK/stderr")"
  [ "$(echo "$batch" | sed -n "${i}p")" = "$alone" ] || fail "row $i of the batch: $(echo "$batch" | sed -n "${i}p"), alone: $alone"
done <"$WORK/prompts.jsonl"
echo "ok: T5-shaped 2+2: a batch of prompts of different lengths gives each prompt's output alone"
