#!/usr/bin/env bash
# mtf generate end to end on a nearly untrained model (one training step: its greedy and sampled
# continuations are long and varied, and it never stops early): the cached path against --no-cache (the
# reference: the training forward re-run per token), on 1 rank and on a 2x2 mesh with two layouts;
# seeded sampling alike on every mesh; batched prompts of different lengths against each run alone;
# --ids round trips; bad inputs give clear errors or the documented behaviour.
# usage: generate_test.sh MTF MPIEXEC CONFIG WORK [quick]
#   quick (the sanitizer pass): every section, on 1 rank and one 2x2 layout, 16 new tokens, one sampling
#   setting, greedy batches: the same code paths in about half the runs
set -u
MTF=$1 MPIEXEC=$2 CONFIG=$3 WORK=$4 QUICK=${5:-}
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
"$MTF" data synth --task reverse --output "$WORK/data" --examples 500 --length 12 --force >/dev/null || fail "data synth"
MODEL=(--set model.length=128 --set run.dir="$WORK/run")
"$MPIEXEC" -n 1 "$MTF" train --fresh "$CONFIG" "${MODEL[@]}" --set "data.train=$WORK/data/train-*.h5" --set data.eval= \
  --set train.steps=1 --set train.checkpoint_every=1 --set train.warmup_steps=0 --set train.log_every=1 \
  >"$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; fail "train"; }

# gen NPROCS MESH LAYOUT ARGS...: stdout, which holds only the output (the header lines go to stderr)
gen() {
  local n=$1 mesh=$2 layout=$3
  shift 3
  local place=()
  [ -n "$mesh" ] && place=(--mesh "$mesh" --layout "$layout")
  "$MPIEXEC" -n "$n" "$MTF" generate "$CONFIG" "${MODEL[@]}" "${place[@]}" "$@" 2>"$WORK/stderr"
}
# the same on 1 rank
gen_raw() { gen 1 "" "" "$@"; }
MESHES=("1;;" "4;b:2,m:2;batch:b,heads:m,vocab:m" "4;b:2,m:2;batch:m,heads:b,d_ff:b,vocab:b")
NEW=64
SAMPLINGS=("--temperature 1" "--temperature 0.8 --top-k 20" "--temperature 1.2 --top-p 0.9")
BATCH_SAMPLINGS=("--temperature 0" "--temperature 1 --seed 3")
if [ "$QUICK" = quick ]; then
  MESHES=("${MESHES[@]:0:2}") NEW=16 SAMPLINGS=("${SAMPLINGS[2]}") BATCH_SAMPLINGS=("--temperature 0")
fi

# 1. Cached greedy == --no-cache greedy, 64 new tokens (16 quick), every mesh.
GREEDY=(--prompt "hello world=" --ids --max-new "$NEW" --temperature 0)
ref=$(gen 1 "" "" "${GREEDY[@]}" --no-cache)
count=$(echo "$ref" | tr -cd , | wc -c)
[ "$count" -eq $((12 + NEW - 1)) ] || fail "the reference has $((count + 1)) ids, not 12 + $NEW: $ref"
for m in "${MESHES[@]}"; do
  IFS=';' read -r n mesh layout <<<"$m"
  for cache in "" --no-cache; do
    out=$(gen "$n" "$mesh" "$layout" "${GREEDY[@]}" $cache)
    [ "$out" = "$ref" ] || fail "greedy on ${mesh:-1 rank} ${layout} ${cache:-cached}:\n$out\nreference:\n$ref\n$(cat "$WORK/stderr")"
  done
done
echo "ok: cached greedy == --no-cache greedy for $NEW tokens on 1 rank and b:2,m:2 (${#MESHES[@]} meshes)"

# 2. Seeded sampling (temperature, top-k, top-p) gives the same text on every mesh, cached or not.
for s in "${SAMPLINGS[@]}"; do
  ref=$(gen 1 "" "" --prompt "abc=" --max-new "$NEW" --seed 11 $s --no-cache)
  [ ${#ref} -gt $((NEW * 5 / 8)) ] || fail "sampling $s gave too little text: '$ref'"
  for m in "${MESHES[@]}"; do
    IFS=';' read -r n mesh layout <<<"$m"
    for cache in "" --no-cache; do
      out=$(gen "$n" "$mesh" "$layout" --prompt "abc=" --max-new "$NEW" --seed 11 $s $cache)
      [ "$out" = "$ref" ] || fail "sampling $s on ${mesh:-1 rank} $layout ${cache:-cached}: '$out', reference '$ref'"
    done
  done
  other=$(gen 1 "" "" --prompt "abc=" --max-new "$NEW" --seed 12 $s)
  [ "$other" != "$ref" ] || fail "seeds 11 and 12 give the same text: the seed is not used"
done
echo "ok: seeded sampling gives the same text on every mesh"

# 3. Batched prompts of different lengths: each row is what the prompt gives alone (greedy and sampled).
printf '%s\n' "[1, 2, 3]" "[104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 61, 9, 10]" "[200]" >"$WORK/prompts.jsonl"
for s in "${BATCH_SAMPLINGS[@]}"; do
  for m in "1;;" "2;b:2;batch:b"; do
    IFS=';' read -r n mesh layout <<<"$m"
    batch=$(gen "$n" "$mesh" "$layout" --prompts "$WORK/prompts.jsonl" --ids --max-new 20 $s)
    [ "$(echo "$batch" | wc -l)" -eq 3 ] || fail "3 prompts gave: $batch"
    i=0
    while read -r line; do
      i=$((i + 1))
      echo "$line" >"$WORK/one.jsonl"
      alone=$(gen 1 "" "" --prompts "$WORK/one.jsonl" --ids --max-new 20 $s --no-cache)
      # sampling keys each row's noise by its index in the batch: alone, row i is row 0
      [ "$i" -gt 1 ] && [ "$s" != "--temperature 0" ] && continue
      [ "$(echo "$batch" | sed -n "${i}p")" = "$alone" ] || fail "row $i of the batch ($s, ${mesh:-1 rank}): $(echo "$batch" | sed -n "${i}p"), alone: $alone"
    done <"$WORK/prompts.jsonl"
  done
done
echo "ok: batched prompts of different lengths give each row's output alone"

# 4. --ids round-trips: the output lines, read back with --max-new 0, are printed unchanged.
gen 1 "" "" --prompts "$WORK/prompts.jsonl" --ids --max-new 5 --temperature 0 >"$WORK/out.jsonl"
again=$(gen 1 "" "" --prompts "$WORK/out.jsonl" --ids --max-new 0)
[ "$again" = "$(cat "$WORK/out.jsonl")" ] || fail "--ids does not round-trip: $again vs $(cat "$WORK/out.jsonl")"
echo "ok: --ids round-trips"

# 5. --json: per-token ids, log-probs (<= 0) and timings; --stream --json: a line per token.
gen_raw --prompt "ab" --max-new 4 --temperature 0 --json >"$WORK/out.json"
python3 - "$WORK/out.json" <<'PY' || fail "--json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 1 and len(rows[0]["ids"]) == 4 and len(rows[0]["logprobs"]) == 4, rows
assert all(lp <= 0 for lp in rows[0]["logprobs"]) and rows[0]["time_to_first_token_ms"] > 0, rows
assert rows[0]["prompt_ids"] == [97, 98], rows
PY
lines=$(gen_raw --prompt "ab" --max-new 4 --temperature 0 --json --stream | grep -c '"step"')
[ "$lines" -eq 4 ] || fail "--stream --json gave $lines token lines"
echo "ok: --json and --stream"

# 6. A vocabulary file: words in, words out; an unknown word is refused.
for i in $(seq 0 383); do echo "w$i"; done >"$WORK/vocab.txt"
out=$(gen 1 "" "" --vocab "$WORK/vocab.txt" --prompt "w104 w105" --max-new 6 --temperature 0)
echo "$out" | grep -Eq '^w104 w105( w[0-9]+){6}$' || fail "vocab file output: '$out'"
ids=$(gen 1 "" "" --prompt-ids "104 105" --ids --max-new 6 --temperature 0)
[ "$(echo "$out" | sed 's/w//g; s/ /, /g; s/^/[/; s/$/]/')" = "$ids" ] || fail "vocab file words $out vs ids $ids"
gen 1 "" "" --vocab "$WORK/vocab.txt" --prompt "w1 what" --max-new 2 >/dev/null
grep -q "unknown token 'what': it is not a line of the vocabulary file" "$WORK/stderr" || fail "unknown token: $(cat "$WORK/stderr")"
echo "ok: vocabulary file"

# 7. Bad inputs and edge cases.
out=$(gen 1 "" "" --prompt "xyz" --max-new 0)
[ "$out" = "xyz" ] || fail "--max-new 0 must print the prompt alone: '$out'"
# an empty prompt starts a new document after end-of-text (not printed)
out=$(gen 1 "" "" --prompt "" --max-new 8 --temperature 1 --seed 3 --ids)
ref=$(gen 1 "" "" --prompt-ids 256 --max-new 8 --temperature 1 --seed 3 --ids)
[ -n "$out" ] && [ "[256, ${out#[}" = "$ref" ] || fail "an empty prompt: '$out', after end-of-text: '$ref'"
long=$(printf 'a%.0s' $(seq 1 140))
out=$(gen 1 "" "" --prompt "$long" --max-new 3 --temperature 0)
grep -q "has 140 tokens, more than model.length 128: the model sees its last 128" "$WORK/stderr" || fail "long prompt: $(cat "$WORK/stderr")"
ref=$(gen 1 "" "" --prompt "$long" --max-new 3 --temperature 0 --no-cache)
[ "$out" = "$ref" ] || fail "a prompt longer than length: cached '$out', --no-cache '$ref'"
printf '[1, x]\n' >"$WORK/bad.jsonl"
gen 1 "" "" --prompts "$WORK/bad.jsonl" --ids --max-new 2 >/dev/null
grep -q "line 1: '\[1, x\]': each id must be a non-negative integer" "$WORK/stderr" || fail "bad ids: $(cat "$WORK/stderr")"
gen 1 "" "" --prompt-ids "5 9999" --max-new 2 >/dev/null
grep -q "id 9999 is not in \[0, 384) (model.vocab)" "$WORK/stderr" || fail "id outside vocab: $(cat "$WORK/stderr")"
: >"$WORK/empty.txt"
gen 1 "" "" --prompts "$WORK/empty.txt" --max-new 2 >/dev/null
grep -q "holds no prompt" "$WORK/stderr" || fail "empty prompts file: $(cat "$WORK/stderr")"
echo "ok: bad inputs"

# 8. stdout holds the output alone (header lines on stderr); a batch prints one line per prompt whatever the
# text holds; without CONFIG the checkpoint's stored config is used.
out=$(gen 1 "" "" --prompt "xyz" --max-new 0)
[ "$out" = "xyz" ] || fail "stdout must hold only the text: '$out'"
grep -q "^backend: " "$WORK/stderr" && grep -q "^generate: checkpoint at step 1" "$WORK/stderr" ||
  fail "the header lines must be on stderr: $(cat "$WORK/stderr")"
out=$(gen 1 "" "" --prompt $'one\ntwo' --prompt 'back\slash' --prompt $'cr\r' --max-new 0)
expected=$(printf '%s\n' 'one\ntwo' 'back\\slash' 'cr\r')
[ "$out" = "$expected" ] || fail "a batch must print one escaped line per prompt: '$out', expected '$expected'"
ref=$(gen 1 "" "" --prompt "hello world=" --ids --max-new 8 --temperature 0)
for ckpt in "$WORK/run" "$WORK/run/checkpoints/latest"; do
  out=$("$MPIEXEC" -n 1 "$MTF" generate --checkpoint "$ckpt" --prompt "hello world=" --ids --max-new 8 --temperature 0 \
    2>"$WORK/stderr")
  [ "$out" = "$ref" ] || fail "without CONFIG (--checkpoint $ckpt): '$out', with it: '$ref'; $(cat "$WORK/stderr")"
done
out=$("$MPIEXEC" -n 2 "$MTF" generate --checkpoint "$WORK/run" --mesh b:2 --layout batch:b --prompt "hello world=" \
  --ids --max-new 8 --temperature 0 2>"$WORK/stderr")
[ "$out" = "$ref" ] || fail "without CONFIG on b:2: '$out', reference '$ref'; $(cat "$WORK/stderr")"
"$MTF" generate --prompt x >/dev/null 2>"$WORK/stderr"
rc=$?
[ "$rc" -eq 2 ] && grep -q "give a CONFIG, or --checkpoint PATH" "$WORK/stderr" ||
  fail "neither CONFIG nor --checkpoint: exit $rc, $(cat "$WORK/stderr")"
echo "ok: stdout and stderr, one line per prompt, the config from the checkpoint"
echo "generate tests: all ok"
