#!/usr/bin/env bash
# Stops the daemons tools/slurm-up.sh started (by their pid files, never by name) and cancels jobs left
# in that cluster; munged only if slurm-up.sh started it. MTF_SLURM_DIR as for slurm-up.sh.
set -u
dir=${MTF_SLURM_DIR:-/tmp/mtf-slurm}
stop() { # pid file, label
  [ -s "$1" ] || return 0
  local pid
  pid=$(cat "$1")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  echo "[slurm-down] stopped $2 (pid $pid)" >&2
  rm -f "$1"
}
[ -f "$dir/slurm.conf" ] && SLURM_CONF="$dir/slurm.conf" scancel --quiet --user=root 2>/dev/null
stop "$dir/run/slurmd.pid" slurmd
stop "$dir/run/slurmctld.pid" slurmctld
if [ -f "$dir/run/munged.started" ]; then
  stop /run/munge/munged.pid munged
  rm -f "$dir/run/munged.started"
fi
exit 0
