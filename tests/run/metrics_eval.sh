#!/usr/bin/env bash
# The evaluation curve and the ETA: 12 steps of the test model, logged every 5 and evaluated every 4 steps.
# metrics.jsonl must have the lines of steps 4, 5, 8, 10, 12, the evaluations (eval_loss, eval_perplexity,
# eval_tokens) on those of steps 4, 8 and 12 only, and every line an eta_s; stdout's step lines end in
# "ETA <duration>", every "eval:" line follows its step's line, and the run evaluates once after step 12.
# usage: metrics_eval.sh MTF MPIEXEC CONFIG DATA WORKDIR
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 data=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
"$mpiexec" -n 1 "$mtf" train "$config" --fresh --set "data.train=$data/train-*.h5" --set "data.eval=$data/val-*.h5" \
  --set train.steps=12 --set train.log_every=5 --set train.eval_every=4 --set train.eval_batches=2 \
  --set "run.dir=$work/run" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
fail() { echo "FAIL: $*"; cat "$work/train.log"; cat "$work/run/metrics.jsonl"; exit 1; }
m="$work/run/metrics.jsonl"
steps=$(sed -E 's/^\{"step": ([0-9]+),.*/\1/' "$m" | tr '\n' ' ')
[ "$steps" = "4 5 8 10 12 " ] || fail "metrics.jsonl steps are '$steps', expected '4 5 8 10 12 '"
evals=$(grep '"eval_loss"' "$m" | sed -E 's/^\{"step": ([0-9]+),.*/\1/' | tr '\n' ' ')
[ "$evals" = "4 8 12 " ] || fail "evaluated steps in metrics.jsonl are '$evals', expected '4 8 12 '"
grep -c '"eval_loss": [0-9.e+-]*, "eval_perplexity": [0-9.e+-]*, "eval_tokens": [0-9]*}$' "$m" | grep -qx 3 \
  || fail "eval fields malformed"
[ "$(grep -c '"eta_s": ' "$m")" = 5 ] || fail "not every metrics line has eta_s"
# The last line's ETA is 0: nothing is left.
tail -1 "$m" | grep -q '"eta_s": 0[,}]' || fail "the last line's eta_s is not 0"
step_lines=$(grep -cE '^step +[0-9]+  loss .*  ETA ([0-9]+s|[0-9]+m[0-9]{2}s|[0-9]+h[0-9]{2}m)$' "$work/train.log")
[ "$step_lines" = 5 ] || fail "$step_lines step lines end in an ETA, expected 5"
grep -qE '^step +12  .*  ETA 0s$' "$work/train.log" || fail "step 12's ETA is not 0s"
[ "$(grep -c '^eval: loss' "$work/train.log")" = 3 ] || fail "expected 3 eval lines (steps 4, 8, 12)"
# Every eval line right after its step's line, with the loss metrics.jsonl has.
order=$(grep -E '^(step|eval:)' "$work/train.log" | sed -E 's/^step +([0-9]+) .*/s\1/; s/^eval: loss ([0-9.]+).*/e/' | tr '\n' ' ')
[ "$order" = "s4 e s5 s8 e s10 s12 e " ] || fail "order of step and eval lines: '$order'"
last_eval=$(grep '^eval: loss' "$work/train.log" | tail -1 | sed -E 's/^eval: loss ([0-9.]+),.*/\1/')
json_eval=$(tail -1 "$m" | sed -E 's/.*"eval_loss": ([^,]+),.*/\1/')
awk -v a="$last_eval" -v b="$json_eval" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-4) }' \
  || fail "eval line says $last_eval, metrics.jsonl $json_eval"
echo "metrics.jsonl steps: $steps; evaluated: $evals; final eval loss $last_eval"
