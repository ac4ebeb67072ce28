# Sourced by the Slurm tests: joins the fixture's cluster or exits 77 (skipped) with the reason.
state=$1
if [ -s "$state/skip" ]; then echo "SKIPPED: $(cat "$state/skip")"; exit 77; fi
[ -s "$state/env" ] || { echo "SKIPPED: the Slurm fixture did not start a cluster (see slurm_up's output)"; exit 77; }
source "$state/env"
job_state() { scontrol show job "$1" 2>/dev/null | grep -oP 'JobState=\K\S+'; }
wait_for_state() { # job, state regex, seconds
  local i
  for i in $(seq $(( $3 * 5 ))); do [[ "$(job_state "$1")" =~ ^($2)$ ]] && return 0; sleep 0.2; done
  echo "job $1 is '$(job_state "$1")' after $3 s, expected $2"; return 1
}
