#!/usr/bin/env bash
# `mtf plan` of configs/small.yaml for model axes of 1 to 64 ranks (and 2-D meshes): the memory per rank
# must fall as the model axis grows, and every plan must succeed in one process.
# usage: plan_scaling.sh MTF CONFIG
set -euo pipefail
mtf=$1 config=$2
layout="d_ff:m;vocab:m;d_kv:m"
previous=
for m in 1 2 4 8 16 32 64; do
  total=$("$mtf" plan "$config" --mesh "m:$m" --layout "$layout" | sed -nE 's/.*total ([0-9.]+) MiB.*/\1/p')
  echo "m:$m  $layout  per-rank total ${total} MiB"
  [ -n "$total" ] || { echo "no total for m:$m"; exit 1; }
  if [ -n "$previous" ] && ! awk -v a="$total" -v b="$previous" 'BEGIN { exit !(a < b) }'; then
    echo "memory per rank did not fall from $previous to $total MiB at m:$m"; exit 1
  fi
  previous=$total
done
for mesh in "b:2;m:4" "b:4;m:4" "b:16;m:4"; do
  "$mtf" plan "$config" --mesh "$mesh" --layout "batch:b;heads:m;d_ff:m;vocab:m" | grep -E "^per rank:" | sed "s/^/$mesh  /"
done
