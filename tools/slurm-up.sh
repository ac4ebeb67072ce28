#!/usr/bin/env bash
# Brings up a single-node Slurm cluster on this host for the project's Slurm tests (munge, slurmctld,
# slurmd, MpiDefault=pmix) and prints `export SLURM_CONF=...` on stdout; logs go to stderr.
#   eval "$(bash tools/slurm-up.sh)"     ...     bash tools/slurm-down.sh
# It starts only daemons that are not running, records what it started in pid files, and refuses to start
# over another cluster's ports. Needs root and the packages of tools/install-deps.sh.
# Environment: MTF_SLURM_DIR (default /tmp/mtf-slurm), MTF_SLURM_CPUS (CPUs advertised per node, default 4),
#              MTF_SLURM_PORT (slurmctld port, default 6817; slurmd uses the next one),
#              MTF_SLURM_NODES (default 1): with N > 1, N nodes mtfn1..mtfnN, each a network namespace of its
#              own (10.77.0.1X on a bridge mtfbr0 whose 10.77.0.1 is slurmctld's) with its own host name (a
#              UTS namespace), its slurmd, spool and PMIx directory: jobs span them over TCP as over a real
#              network (OpenMPI needs OMPI_MCA_btl_tcp_if_include=10.77.0.0/24, printed with SLURM_CONF).
#              Needs `ip netns` (CAP_NET_ADMIN, CAP_SYS_ADMIN); exit 77 with the reason where it fails.
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
nodes=${MTF_SLURM_NODES:-1}
case "$nodes" in [1-9]) ;; *) echo "[slurm-up] MTF_SLURM_NODES must be 1 to 9, not '$nodes'" >&2; exit 1 ;; esac
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

# Multi-node: the namespaces and the bridge first (the reason to skip, where this machine cannot make them).
subnet=10.77.0
if [ "$nodes" -gt 1 ]; then
  command -v ip >/dev/null && command -v nsenter >/dev/null && command -v unshare >/dev/null ||
    { log "skip: multi-node needs ip (iproute2), nsenter and unshare (util-linux)"; exit 77; }
  if ip link show mtfbr0 >/dev/null 2>&1; then log "refusing: bridge mtfbr0 exists (another multi-node cluster? run slurm-down.sh)"; exit 1; fi
  if ! ip netns add mtfn-probe 2>/dev/null; then log "skip: cannot create network namespaces here (ip netns add failed: needs CAP_SYS_ADMIN)"; exit 77; fi
  ip netns del mtfn-probe
  ip link add mtfbr0 type bridge && ip addr add "$subnet.1/24" dev mtfbr0 && ip link set mtfbr0 up ||
    { log "skip: cannot create the bridge mtfbr0 (needs CAP_NET_ADMIN)"; ip link del mtfbr0 2>/dev/null; exit 77; }
  for i in $(seq "$nodes"); do
    ip netns add "mtfn$i"
    ip link add "mtfv$i" type veth peer name "mtfh$i"
    ip link set "mtfh$i" master mtfbr0 && ip link set "mtfh$i" up && ip link set "mtfv$i" netns "mtfn$i"
    ip netns exec "mtfn$i" ip addr add "$subnet.1$i/24" dev "mtfv$i"
    ip netns exec "mtfn$i" ip link set "mtfv$i" up
    ip netns exec "mtfn$i" ip link set lo up
  done
fi

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
[ "$nodes" -gt 1 ] && for i in $(seq "$nodes"); do mkdir -p "$short/spool/mtfn$i" "$short/tmp/mtfn$i"; done
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

if [ "$nodes" -gt 1 ]; then
  ctld_addr=$subnet.1 node_names="mtfn[1-$nodes]" spool_dir="$short/spool/%n" slurmd_pid="$dir/run/slurmd-%n.pid"
  slurmd_log="$dir/log/slurmd-%n.log"
  # Each node's own PMIx directory (the nodes share /tmp, where two nodes' directories of one step collide);
  # a lost node is noticed in 10 s, not 5 min.
  node_lines=$(for i in $(seq "$nodes"); do echo "NodeName=mtfn$i NodeAddr=$subnet.1$i CPUs=${cpus} State=UNKNOWN"; done
               echo "TmpFS=$short/tmp/%n"; echo "SlurmdTimeout=10")
else
  ctld_addr=127.0.0.1 node_names=$host spool_dir="$short/spool" slurmd_pid="$dir/run/slurmd.pid"
  slurmd_log="$dir/log/slurmd.log" node_lines="NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} State=UNKNOWN"
fi
cat > "$dir/slurm.conf" <<CONF
ClusterName=mtftest
SlurmctldHost=${host}(${ctld_addr})
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
SlurmdSpoolDir=${spool_dir}
SlurmctldPidFile=${dir}/run/slurmctld.pid
SlurmdPidFile=${slurmd_pid}
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${slurmd_log}
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
${node_lines}
PartitionName=debug Nodes=${node_names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF="$dir/slurm.conf"

for port in "$ctld_port" "$d_port"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then log "port $port is in use (another cluster?): set MTF_SLURM_PORT"; exit 1; fi
done
/usr/sbin/slurmctld -f "$SLURM_CONF" -c
if [ "$nodes" -gt 1 ]; then
  # nsenter, not `ip netns exec`: that remounts /sys, and slurmd needs the host's /sys/fs/cgroup.
  for i in $(seq "$nodes"); do
    nsenter --net="/run/netns/mtfn$i" unshare --uts bash -c "hostname mtfn$i && exec /usr/sbin/slurmd -f '$SLURM_CONF' -N mtfn$i"
  done
else
  /usr/sbin/slurmd -f "$SLURM_CONF"
fi
ready=0
for _ in $(seq 150); do
  ready=$(sinfo -h -N -o '%T' 2>/dev/null | grep -cE '^(idle|mixed|allocated)' || true)
  [ "$ready" -ge "$nodes" ] && break
  sleep 0.2
done
[ "$ready" -ge "$nodes" ] || { log "nodes not ready ($(sinfo -h -N -o '%N %T' 2>/dev/null | tr '\n' ' ')); see $dir/log"; exit 1; }
if [ "$nodes" -gt 1 ]; then
  log "up: slurmctld pid $(cat "$dir/run/slurmctld.pid"), $nodes nodes mtfn1..mtfn$nodes ($subnet.11..), $cpus CPUs each"
  echo "export SLURM_CONF=$SLURM_CONF OMPI_MCA_btl_tcp_if_include=$subnet.0/24 OMPI_MCA_oob_tcp_if_include=$subnet.0/24"
else
  log "up: slurmctld pid $(cat "$dir/run/slurmctld.pid"), slurmd pid $(cat "$dir/run/slurmd.pid"), $cpus CPUs"
  echo "export SLURM_CONF=$SLURM_CONF"
fi
