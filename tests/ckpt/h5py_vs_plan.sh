#!/usr/bin/env bash
# Reads a checkpoint with h5py (no mtf code) and checks every dataset's shape and dims against
# `mtf plan --json`'s variable list for the same config; h5dump must read it too.
# usage: h5py_vs_plan.sh MTF CONFIG CKPT OUT_JSON [--set k=v]...
set -euo pipefail
mtf=$1 config=$2 ckpt=$3 out=$4
shift 4
mkdir -p "$(dirname "$out")"
"$mtf" plan "$config" --json "$@" > "$out"
/usr/bin/python3 "$(dirname "$0")/check_ckpt_plan.py" "$ckpt" "$out"
h5dump -H "$ckpt" > "$out.h5dump" || { echo "h5dump cannot read $ckpt"; exit 1; }
datasets=$(grep -c '^ *DATASET "' "$out.h5dump")
variables=$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["variables"]))' "$out")
[ "$datasets" -eq "$variables" ] || { echo "h5dump lists $datasets datasets, the plan $variables variables"; exit 1; }
echo "h5dump: $datasets datasets"
