#!/usr/bin/env bash
# Loader benchmark (docs/PERFORMANCE.md): makes two datasets in a scratch directory (the fortunes corpus
# and a synthetic one of ~54M tokens), then runs build/tools... bench_loader on each.
#   usage: tools/bench_loader.sh [BUILD_DIR]      (default build; needs bench_loader built there)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
mtf=$build/src/mtf
bench=$build/src/io/bench_loader
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$mtf" data prepare --input /usr/share/games/fortunes --output "$scratch/fortunes" --val-fraction 0 >/dev/null
"$mtf" data synth --task add --examples 2000000 --length 8 --output "$scratch/add" --val-fraction 0 >/dev/null
echo "== fortunes (byte tokens), batch 64 x 1025"
"$bench" "$scratch/fortunes" 64 1024 200 20
echo "== synthetic add, 2M examples, batch 64 x 1025"
"$bench" "$scratch/add" 64 1024 200 20
echo "== synthetic add, batch 512 x 129"
"$bench" "$scratch/add" 512 128 200 20
