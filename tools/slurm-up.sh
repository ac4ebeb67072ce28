#!/usr/bin/env bash
# Brings up a single-node Slurm cluster on this host for the project's Slurm tests (munge, slurmctld,
# slurmd, MpiDefault=pmix) and prints `export SLURM_CONF=...` on stdout; logs go to stderr.
#   eval "$(bash tools/slurm-up.sh)"     ...     bash tools/slurm-down.sh
# It starts only daemons that are not running, records what it started in pid files, and refuses to start
# over another cluster's ports. Needs root and the packages of tools/install-deps.sh.
# Environment: MTF_SLURM_DIR (default /tmp/mtf-slurm), MTF_SLURM_CPUS (CPUs advertised, default 4),
#              MTF_SLURM_PORT (slurmctld port, default 6817; slurmd uses the next one).
# slurmd and PMIx create UNIX sockets under the spool directory, and a socket's path must stay under 108
# bytes ('UNIX socket path is too long' in slurmd.log, and srun's tasks never start). When MTF_SLURM_DIR is
# too long for that (e.g. a deep build directory), the state and spool directories go to a short
# /tmp/mtfs-UID-HASH instead (HASH from MTF_SLURM_DIR), recorded in MTF_SLURM_DIR/short-dir and linked
# from MTF_SLURM_DIR/spool; slurm-down.sh removes it. If even that is too long (a very long host name) this
# script refuses with the lengths.
# Exit status: 0 up; 1 failed (logs shown); 77 this machine cannot run slurmd (the reason is printed).
set -euo pipefail
dir=${MTF_SLURM_DIR:-/tmp/mtf-slurm}
case "$dir" in /*) ;; *) dir=$PWD/$dir ;; esac
cpus=${MTF_SLURM_CPUS:-4}
ctld_port=${MTF_SLURM_PORT:-6817}
d_port=$((ctld_port + 1))
host=$(hostname -s)
log() { echo "[slurm-up] $*" >&2; }

for tool in munged slurmctld slurmd sinfo mungekey; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || { log "skip: $tool is not installed (run tools/install-deps.sh)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { log "skip: starting slurmd needs root"; exit 77; }
# slurmd 22.05 loads its cgroup plugin even with task/none and needs a mounted /sys/fs/cgroup.
grep -qE ' /sys/fs/cgroup(/[^ ]*)? (cgroup|cgroup2) ' /proc/mounts || { log "skip: no cgroup filesystem at /sys/fs/cgroup, which slurmd needs"; exit 77; }

cleanup_on_failure() {
  local rc=$?
  [ $rc = 0 ] || [ $rc = 77 ] && return
  for f in slurmctld slurmd; do [ -f "$dir/log/$f.log" ] && { log "--- $f.log (tail)"; tail -5 "$dir/log/$f.log" >&2; }; done
  MTF_SLURM_DIR=$dir bash "$(dirname "$0")/slurm-down.sh" >&2 || true
  log "failed (status $rc); the daemons this script started were stopped"
}
trap cleanup_on_failure EXIT

# The longest socket path slurmd and PMIx create under SPOOL, with the widest values: job ids up to 8
# digits (MaxJobId 67043328), step ids up to 10, process ids up to 7. They are
#   SPOOL/HOST_JOB.STEP (slurmstepd), SPOOL/stepd.slurm.pmix.JOB.STEP (Slurm's PMIx server),
#   SPOOL/pmix.JOB.STEP/pmix.HOST.tool.NSPACE with NSPACE slurm.pmix.JOB.STEP, .../pmix.HOST.tool.PID,
#   .../pmix.sys.HOST (PMIx's rendezvous files).
max_socket=107   # sun_path is 108 bytes with the terminating NUL
longest_socket() { # spool dir
  local job=12345678 step=1234567890 pid=1234567
  printf '%s\n' "$1/${host}_$job.$step" "$1/stepd.slurm.pmix.$job.$step" \
    "$1/pmix.$job.$step/pmix.$host.tool.slurm.pmix.$job.$step" "$1/pmix.$job.$step/pmix.$host.tool.$pid" \
    "$1/pmix.$job.$step/pmix.sys.$host" | awk '{ if (length($0) > n) { n = length($0); p = $0 } } END { print n, p }'
}
short=$dir
read -r len example < <(longest_socket "$dir/spool")
if [ "$len" -gt "$max_socket" ]; then
  short=/tmp/mtfs-$(id -u)-$(printf '%s' "$dir" | sha256sum | cut -c1-8)
  read -r len2 example2 < <(longest_socket "$short/spool")
  if [ "$len2" -gt "$max_socket" ]; then
    log "refusing: Slurm's sockets would have paths of up to $len2 bytes (e.g. $example2), over the limit of" \
        "$max_socket, even under $short (host name '$host' is ${#host} bytes)"
    exit 1
  fi
  log "MTF_SLURM_DIR is too long for Slurm's sockets ($len bytes, e.g. $example; the limit is $max_socket):" \
      "state and spool go to $short"
  # /tmp is shared: a planted link or another user's directory there is refused, never followed.
  if [ -L "$short" ] || { [ -e "$short" ] && [ "$(stat -c %u "$short")" != "$(id -u)" ]; }; then
    log "refusing: $short exists and is a link or not owned by uid $(id -u)"; exit 1
  fi
fi
mkdir -p "$dir"/{log,run} "$short"/{state,spool}
chmod 755 "$dir" "$short"
if [ "$short" != "$dir" ]; then
  echo "$short" > "$dir/short-dir"
  rm -rf "$dir/state" "$dir/spool"   # a link, or the directories of an earlier run that had a short path
  ln -s "$short/spool" "$dir/spool"
  ln -s "$short/state" "$dir/state"
else
  rm -f "$dir/short-dir"
fi

# munge: a key, then the daemon unless one already answers.
if [ ! -s /etc/munge/munge.key ]; then
  install -d -m 0700 -o munge -g munge /etc/munge
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi
install -d -m 0755 -o munge -g munge /run/munge
install -d -m 0700 -o munge -g munge /var/lib/munge /var/log/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  touch "$dir/run/munged.started"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || { log "munge does not answer"; exit 1; }

cat > "$dir/slurm.conf" <<CONF
ClusterName=mtftest
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${ctld_port}
SlurmdPort=${d_port}
AuthType=auth/munge
# Short credential life: a requeued job may start again after 10 s instead of 120 s.
AuthInfo=cred_expire=10
CryptoType=crypto/munge
MailProg=/bin/true
StateSaveLocation=${short}/state
SlurmdSpoolDir=${short}/spool
SlurmctldPidFile=${dir}/run/slurmctld.pid
SlurmdPidFile=${dir}/run/slurmd.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Trust the CPU count below even on a smaller machine (4 tasks on 2 cores in the tests).
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/backfill
JobRequeue=1
MinJobAge=300
KillWait=10
InactiveLimit=0
Waittime=0
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF="$dir/slurm.conf"

for port in "$ctld_port" "$d_port"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then log "port $port is in use (another cluster?): set MTF_SLURM_PORT"; exit 1; fi
done
/usr/sbin/slurmctld -f "$SLURM_CONF" -c
/usr/sbin/slurmd -f "$SLURM_CONF"
state=
for _ in $(seq 150); do
  state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
  case "$state" in idle*|mixed*|allocated*) break ;; esac
  sleep 0.2
done
case "$state" in idle*|mixed*|allocated*) ;; *) log "node not ready (state '${state}'); see $dir/log"; exit 1 ;; esac
log "up: slurmctld pid $(cat "$dir/run/slurmctld.pid"), slurmd pid $(cat "$dir/run/slurmd.pid"), $cpus CPUs"
echo "export SLURM_CONF=$SLURM_CONF"
