#!/usr/bin/env bash
# The quick start, from a fresh clone on a fresh machine: installs the Debian packages, builds mtf,
# prepares the default corpus (Debian's fortunes), trains configs/tiny.yaml on this machine's cores with
# progress lines and checkpoints, evaluates before and after, and prints a generated sample.
#   bash tools/quickstart.sh                 (MTF_RANKS=N to choose the number of ranks; default: cores, at most 4)
#   bash tools/quickstart.sh --set backend.precision=bf16     (--set KEY=VALUE ... go to every mtf command)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --set) [ $# -ge 2 ] || { echo "quickstart: --set needs KEY=VALUE" >&2; exit 2; }; extra+=(--set "$2"); shift 2 ;;
    *) echo "quickstart: unknown argument '$1' (usage: bash tools/quickstart.sh [--set KEY=VALUE ...])" >&2; exit 2 ;;
  esac
done
say() { printf '\n== %s\n' "$*"; }
t0=$SECONDS

say "installing what is missing (Debian packages)"
bash tools/install-deps.sh

say "building mtf (build/)"
cmake -S . -B build > build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
rm -f build-configure.log
cmake --build build -j "$(nproc)" --target mtf
t_built=$SECONDS

mtf=build/src/mtf
if [ ! -s data/fortunes/train-00000.h5 ]; then
  say "preparing the default corpus: /usr/share/games/fortunes -> data/fortunes"
  "$mtf" data prepare --input /usr/share/games/fortunes --output data/fortunes --force
fi

cores=$(nproc)
ranks=${MTF_RANKS:-$(( cores < 4 ? cores : 4 ))}
[ $(( 16 % ranks )) = 0 ] || ranks=1   # tiny.yaml's batch of 16 must split evenly
export OPENBLAS_NUM_THREADS=$(( cores / ranks > 0 ? cores / ranks : 1 ))
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}   # oneDNN's idle OpenMP threads sleep (bf16 runs)
run=(mpiexec -n "$ranks" "$mtf")
mesh=(--mesh "b:$ranks" --layout batch:b)
[ "$ranks" = 1 ] && mesh=()
mesh+=(${extra[@]+"${extra[@]}"})
run_dir=runs/quickstart

say "evaluating the untrained model ($ranks rank(s) x $OPENBLAS_NUM_THREADS thread(s))"
# Zero training steps: mtf train only evaluates the freshly initialised model.
untrained=$("${run[@]}" train configs/tiny.yaml "${mesh[@]}" --fresh --set train.steps=0 --set run.dir="$run_dir-untrained" \
            | sed -nE 's/^eval: loss ([0-9.]+).*/\1/p')
echo "untrained eval loss: $untrained"

say "training configs/tiny.yaml"
t_train=$SECONDS
"${run[@]}" train configs/tiny.yaml "${mesh[@]}" --fresh --set run.dir="$run_dir" --set train.checkpoint_every=100 \
  | grep -vE '^(  |[a-z]+:$|#)'
t_trained=$SECONDS

say "evaluating the trained model (latest checkpoint of $run_dir)"
trained=$("${run[@]}" eval configs/tiny.yaml "${mesh[@]}" --set run.dir="$run_dir" --json | sed -E 's/.*"loss": ([0-9.]+).*/\1/')
echo "eval loss: untrained $untrained -> trained $trained"
# The curves from metrics.jsonl: training loss at step 100 and at the end, the evaluations, the mean speed.
awk -F'[:,] *' '{ for (i = 1; i < NF; i++) v[$i] = $(i + 1); step = v["{\"step\""] + 0
                   if (step == 100) at100 = v["\"loss\""]; last = v["\"loss\""]; last_step = step
                   if ("\"eval_loss\"" in v) curve = curve sprintf(" %d:%.3f", step, v["\"eval_loss\""])
                   tps += v["\"tokens_per_s\""]; n++; delete v }
     END { printf "training loss: step 100 %.3f -> step %d %.3f; eval loss by step:%s; mean %.0f tokens/s\n",
                  at100, last_step, last, curve, n ? tps / n : 0 }' "$run_dir/metrics.jsonl"

say "a sample from the trained model"
"${run[@]}" generate configs/tiny.yaml "${mesh[@]}" --set run.dir="$run_dir" --prompt "The " --max-new 200 \
  --temperature 0.8 --top-k 20 --seed 7
t_end=$SECONDS
say "time: $((t_end - t0)) s in all (install + build $((t_built - t0)) s, training $((t_trained - t_train)) s)"
say "done: metrics in $run_dir/metrics.jsonl (plot: /usr/bin/python3 tools/plot_metrics.py $run_dir), checkpoints in $run_dir/checkpoints"
