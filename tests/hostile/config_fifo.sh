#!/usr/bin/env bash
# A FIFO as the config is refused at once (it used to block forever waiting for a writer).
set -u
mtf=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/config.yaml"
out=$(timeout 10 "$mtf" plan "$dir/config.yaml" 2>&1); status=$?
echo "$out"
[ "$status" -eq 1 ] || { echo "config_fifo.sh: exit status $status, wanted 1 (124 = it blocked)"; exit 1; }
grep -q "is a FIFO" <<<"$out" || { echo "config_fifo.sh: no FIFO message"; exit 1; }
out=$(timeout 10 "$mtf" layout --config "$dir/config.yaml" --tensor h=a:2 2>&1); status=$?
echo "$out"
[ "$status" -eq 1 ] && grep -q "is a FIFO" <<<"$out" || { echo "config_fifo.sh: mtf layout --config: status $status"; exit 1; }
