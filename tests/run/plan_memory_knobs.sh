#!/usr/bin/env bash
# `mtf plan --json` of configs/small.yaml on b:2 shows what train.microbatches and train.recompute do to
# each rank's memory: microbatches shrink the forward+backward arena (about 1/N) and add accumulators the
# size of the parameters; recompute shrinks it further and costs FLOPs; neither changes the parameters.
# usage: plan_memory_knobs.sh MTF CONFIG
set -euo pipefail
mtf=$1 config=$2
field() { sed -nE "s/.*\"$1\": ([0-9]+).*/\1/p" <<< "$2" | head -1; }
plan() { "$mtf" plan "$config" --mesh b:2 --layout batch:b --json "$@"; }
base=$(plan) micro=$(plan --set train.microbatches=8) both=$(plan --set train.microbatches=8 --set train.recompute=block)
for name in base micro both; do
  json=${!name}
  printf '%-6s parameters %s accumulators %s train_arena %s apply_arena %s flops %s run_total %s\n' "$name" \
    "$(field parameters "$json")" "$(field gradient_accumulators "$json")" "$(field train_arena "$json")" \
    "$(field apply_arena "$json")" "$(field flops_per_step "$json")" "$(field run_total "$json")"
done
fail() { echo "FAIL: $*"; exit 1; }
[ "$(field parameters "$base")" = "$(field parameters "$micro")" ] || fail "microbatches changed the parameters"
[ "$(field gradient_accumulators "$base")" = 0 ] || fail "accumulators without microbatches"
[ "$(field gradient_accumulators "$micro")" = "$(field parameters "$micro")" ] || fail "accumulators are not the parameters' size"
[ "$(field apply_arena "$base")" = 0 ] || fail "an apply arena without microbatches"
(( $(field train_arena "$micro") * 6 < $(field train_arena "$base") )) || fail "8 microbatches did not shrink the arena 6x"
# With fused attention no [length, memory_length] weights are kept, and the logits (not recomputed) are a
# large part of what is left: recompute halves the arena here (about 4x with model.fused_attention=false).
(( $(field train_arena "$both") * 2 < $(field train_arena "$micro") )) || fail "recompute did not halve the arena"
(( $(field flops_per_step "$both") > $(field flops_per_step "$micro") )) || fail "recompute costs no FLOPs?"
(( $(field run_total "$both") < $(field run_total "$base") )) || fail "the run total did not fall"
grep -q '"microbatches": 8, "recompute": "block"' <<< "$both" || fail "the JSON does not name the settings"
text=$("$mtf" plan "$config" --mesh b:2 --layout batch:b --set train.microbatches=8 --set train.recompute=block)
grep -qE "^step: batch 16 in 8 microbatches of 2 \(gradients accumulated\), recompute block$" <<< "$text" || fail "no step line"
grep -qE "^per rank: .*gradient accumulators [0-9.]+ MiB, .*total [0-9.]+ MiB$" <<< "$text" || fail "no per-rank line"
grep -qE "^per rank in mtf train \(peak resident, estimated\): [0-9.]+ MiB = .* runtime [0-9.]+ .*allreduce scratch [0-9.]+ MiB$" <<< "$text" || fail "no run total line"
echo "ok"
