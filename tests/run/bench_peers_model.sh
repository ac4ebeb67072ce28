#!/usr/bin/env bash
# tools/bench_peers.py builds mtf's model in PyTorch: for each configs/bench config, the parameter count it
# computes (and so its FLOPs per token, 6 N + attention) must be mtf's own, read from `mtf plan --json` on
# one rank (per-rank parameter bytes / 4).
# usage: bench_peers_model.sh MTF REPO
set -euo pipefail
mtf=$1 repo=$2
for config in "$repo"/configs/bench/*.yaml; do
  bytes=$("$mtf" plan "$config" --json | sed -n 's/.*"per_rank_bytes": {"parameters": \([0-9]*\).*/\1/p')
  ours=$(python3 "$repo/tools/bench_peers.py" count --config "$config" | sed -n 's/^parameters \([0-9]*\) .*/\1/p')
  echo "$(basename "$config"): mtf $((bytes / 4)) parameters, bench_peers.py $ours"
  [ -n "$bytes" ] && [ -n "$ours" ] && [ "$((bytes / 4))" = "$ours" ] || { echo "FAIL: they differ" >&2; exit 1; }
done
