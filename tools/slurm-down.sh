#!/usr/bin/env bash
# Stops the daemons tools/slurm-up.sh started (by their pid files, never by name) and cancels jobs left
# in that cluster; munged only if slurm-up.sh started it; removes the short state/spool directory
# slurm-up.sh recorded in MTF_SLURM_DIR/short-dir. MTF_SLURM_DIR as for slurm-up.sh.
set -u
dir=${MTF_SLURM_DIR:-/tmp/mtf-slurm}
case "$dir" in /*) ;; *) dir=$PWD/$dir ;; esac
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
# The short state/spool directory slurm-up.sh used when MTF_SLURM_DIR was too long for Slurm's sockets.
if [ -s "$dir/short-dir" ]; then
  short=$(cat "$dir/short-dir")
  case "$short" in
    /tmp/mtfs-*) [ -L "$short" ] || rm -rf "$short"; rm -f "$dir/short-dir" "$dir/spool" "$dir/state" ;;
  esac
fi
exit 0
