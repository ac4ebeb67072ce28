#!/usr/bin/env bash
# Stops the daemons tools/slurm-up.sh started (by their pid files, never by name) and cancels jobs left
# in that cluster; with several nodes, whatever still runs in their namespaces, then the namespaces and
# the bridge; munged only if slurm-up.sh started it; removes the short state/spool directory
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
for f in "$dir"/run/slurmd-*.pid; do [ -e "$f" ] && stop "$f" "slurmd of $(basename "$f" .pid | sed 's/^slurmd-//')"; done
stop "$dir/run/slurmctld.pid" slurmctld
# Multi-node (MTF_SLURM_NODES > 1): whatever still runs in a node's namespace (a killed node's left-overs),
# then the namespaces and the bridge.
for ns in $(ip netns list 2>/dev/null | awk '/^mtfn[0-9]/ {print $1}'); do
  pids=$(ip netns pids "$ns" 2>/dev/null)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns del "$ns" && echo "[slurm-down] removed network namespace $ns" >&2
done
ip link show mtfbr0 >/dev/null 2>&1 && ip link del mtfbr0 && echo "[slurm-down] removed bridge mtfbr0" >&2
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
