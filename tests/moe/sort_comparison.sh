#!/usr/bin/env bash
# MoE against dense at the same active parameter count on the synthetic sort task: configs/moe-sort.yaml
# (8 experts of d_ff 8, top-2, every layer) and the same model with one dense feed-forward of d_ff 20,
# trained for the same steps on the same data with seeds 1..SEEDS; prints each eval loss and the means,
# and fails unless the MoE model's mean eval loss is the lower. A recorded comparison (docs/PERFORMANCE.md),
# not a timing test.
# usage: sort_comparison.sh MTF MPIEXEC CONFIG WORKDIR [SEEDS (3)] [--set k=v]...
set -euo pipefail
mtf=$1 mpiexec=$2 config=$3 work=$4 seeds=${5:-3}
shift 4; [ $# -gt 0 ] && shift
mkdir -p "$work"
[ -s "$work/sort/train-00000.h5" ] || "$mtf" data synth --task sort --output "$work/sort" --examples 20000 --length 6 \
  --force > /dev/null
common=(--set "data.train=$work/sort/train-*.h5" --set "data.eval=$work/sort/val-*.h5" --set backend.threads=1 "$@")
eval_loss() { sed -nE 's/^eval: loss ([0-9.]+),.*/\1/p' "$1"; }
for seed in $(seq 1 "$seeds"); do
  for model in moe dense; do
    extra=(); [ $model = dense ] && extra=(--set model.moe.experts=0 --set model.d_ff=20)
    dir="$work/$model-$seed"
    "$mpiexec" -n 1 "$mtf" train "$config" --fresh "${common[@]}" "${extra[@]}" --set train.seed=$seed \
      --set "run.dir=$dir" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
    header=$(grep -m1 '^train: [0-9]* parameters' "$dir.log")
    total=$(sed -E 's/^train: ([0-9]+) parameters.*/\1/' <<< "$header")
    active=$(sed -nE 's/.*\(([0-9]+) active per token.*/\1/p' <<< "$header")
    echo "$model seed $seed: $total parameters, ${active:-$total} active, eval loss $(eval_loss "$dir.log")"
  done
done | tee "$work/results.txt"
awk '{ sum[$1] += $NF; n[$1]++ } END {
  moe = sum["moe"] / n["moe"]; dense = sum["dense"] / n["dense"]
  printf "mean eval loss over %d seeds: moe %.4f, dense %.4f (moe - dense = %+.4f)\n", n["moe"], moe, dense, moe - dense
  exit !(moe < dense) }' "$work/results.txt"
