#!/usr/bin/env bash
# tools/gpu-check.sh --dry-run-cpu --out DIR on a build here: every phase passes with cpu standing in for cuda,
# the setup runs from a bundle that tools/gpu-bundle.sh made from the build (the bundle step included), and
# DIR holds at most 20 files of at most 1 MB in all (what a borrowed GPU machine can send back).
#   gpu_check_dry_run.sh BUILD_DIR WORK_DIR
set -uo pipefail
build=$1 out=$2/gpu-check-dry
rm -rf "$out"
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
bash "$source_dir/tools/gpu-check.sh" --dry-run-cpu --no-build --build-dir "$build" --out "$out" --budget 470
status=$?
fail=0
[ "$status" = 0 ] || { echo "gpu_check_dry_run: gpu-check exited $status, wanted 0"; fail=1; }
results=$out/results.txt
for want in '^\[setup\] PASS: from the bundle gpu-bundle\.tar\.gz' '^\[conform-2\] PASS: [0-9]+ passed, 0 failed' \
            '^\[conform-bf16\] PASS: [0-9]+ passed, 0 failed' \
            '^\[train-fp32\] PASS' '^\[train-bf16\] PASS' '^\[ranks-4\] PASS: ranks-4 vs gpu-fp32' \
            '^\[bench\] PASS: dry run' 'DRY RUN: cpu stood in for cuda' '^gpu-check: PASS'; do
  grep -Eq -- "$want" "$results" 2>/dev/null || { echo "gpu_check_dry_run: results.txt lacks: $want"; fail=1; }
done
files=$(find "$out" -type f | wc -l) bytes=$(du -sb "$out" | cut -f1)
echo "gpu_check_dry_run: $out holds $files files, $bytes bytes"
[ "$files" -le 20 ] || { echo "gpu_check_dry_run: more than 20 files"; fail=1; }
[ "$bytes" -le 1048576 ] || { echo "gpu_check_dry_run: more than 1 MB"; fail=1; }
[ -z "$(find "$out" -mindepth 2)" ] || { echo "gpu_check_dry_run: subdirectories in $out"; fail=1; }
[ "$fail" = 0 ] && echo "gpu_check_dry_run: PASS"
exit "$fail"
