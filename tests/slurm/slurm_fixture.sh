#!/usr/bin/env bash
# CTest fixture for the Slurm tests: `up STATE_DIR SOURCE_DIR` starts the project's local cluster
# (tools/slurm-up.sh) and records SLURM_CONF in STATE_DIR/env, or, where Slurm cannot run here, the reason
# in STATE_DIR/skip (the tests then report "skipped" with it); `down STATE_DIR SOURCE_DIR` stops it.
set -uo pipefail
action=$1 state=$2 source=$3
export MTF_SLURM_DIR=$state/cluster
case "$action" in
  up)
    rm -rf "$state"; mkdir -p "$state"
    out=$(bash "$source/tools/slurm-up.sh" 2>"$state/up.log"); status=$?
    cat "$state/up.log"
    if [ $status = 77 ]; then grep 'skip:' "$state/up.log" | tail -1 > "$state/skip"; echo "Slurm tests will be skipped: $(cat "$state/skip")"; exit 0; fi
    [ $status = 0 ] || exit 1
    echo "$out" > "$state/env"
    echo "local Slurm is up: $out" ;;
  down) bash "$source/tools/slurm-down.sh" ;;
esac
