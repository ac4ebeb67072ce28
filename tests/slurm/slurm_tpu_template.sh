#!/usr/bin/env bash
# jobs/transformer-tpu.slurm without a cluster or a TPU: fake srun/scontrol on PATH, the XLA CPU plugin
# standing in for libtpu. Checks that the template refuses a missing plugin with a message, passes
# backend.kind=pjrt, backend.local_devices=CHIPS and MTF_PJRT_PLUGIN to mtf train, and that the real mtf
# then opens the plugin (its platform and devices in the output) and checks the mesh against the devices.
# usage: slurm_tpu_template.sh SOURCE_DIR WORK MTF PLUGIN
set -uo pipefail
source_dir=$1 work=$2 mtf=$3 plugin=$4
rm -rf "$work" && mkdir -p "$work/bin" || exit 1
cat > "$work/bin/srun" <<'SH'
#!/usr/bin/env bash
while [ $# -gt 0 ] && [[ "$1" == --* ]]; do shift; done
exec "$@"
SH
printf '#!/usr/bin/env bash\necho "$*" >> "$FAKE_LOG"\n' > "$work/bin/scontrol"
# A fake mtf that records its arguments and MTF_PJRT_PLUGIN, then does what mtf train does at start-up.
cat > "$work/bin/mtf" <<'SH'
#!/usr/bin/env bash
echo "args: $* plugin=$MTF_PJRT_PLUGIN" >> "$FAKE_LOG"
for a in "$@"; do case "$a" in run.dir=*) dir=${a#run.dir=} ;; esac; done
mkdir -p "$dir" && echo "fake: true" > "$dir/config.yaml" && : > "$dir/metrics.jsonl"
SH
chmod +x "$work/bin/"*
failures=0
fail() { echo "FAIL $1"; sed 's/^/  /' "$2"; failures=$((failures + 1)); }
job() { # NAME MTF [VAR=VALUE...]: runs the template as sbatch would, from the source dir
  local name=$1 bin=$2; shift 2
  mkdir -p "$work/$name"
  (cd "$source_dir" && env PATH="$work/bin:$PATH" FAKE_LOG="$work/$name/log" SLURM_JOB_ID=7 SLURM_NTASKS=1 \
     SLURM_JOB_NAME=mtf-train-tpu SLURM_SUBMIT_DIR="$source_dir" MTF_HOME="$source_dir" MTF="$bin" \
     RUN_DIR="$work/$name/run" "$@" bash jobs/transformer-tpu.slurm) > "$work/$name/out" 2>&1
}
job missing "$work/bin/mtf" MTF_PJRT_PLUGIN=/nonexistent/libtpu.so CONFIG=none.yaml
status=$?
if [ "$status" = 1 ] && grep -q "no PJRT plugin at /nonexistent/libtpu.so" "$work/missing/out"; then
  echo "ok   missing plugin: exit 1, message"
else fail "missing plugin (exit $status)" "$work/missing/out"; fi
job args "$work/bin/mtf" MTF_PJRT_PLUGIN="$plugin" CHIPS=2 CONFIG=none.yaml MESH="b:2"
status=$?
if [ "$status" = 0 ] && grep -q -- "--set backend.kind=pjrt --set backend.local_devices=2 .*--mesh b:2 plugin=$plugin" "$work/args/log"; then
  echo "ok   arguments: backend.kind=pjrt, backend.local_devices=2, MTF_PJRT_PLUGIN"
else fail "arguments (exit $status)" "$work/args/log"; fi
# The real mtf on a mesh of 4 with 1 host x 2 devices: the plugin opens, the mesh check refuses it.
job mesh "$mtf" MTF_PJRT_PLUGIN="$plugin" CHIPS=2 CONFIG=configs/tiny.yaml MESH="b:2;m:2"
status=$?
if [ "$status" != 0 ] && grep -q "^pjrt devices: 2 - id 0 (cpu), id 1 (cpu)" "$work/mesh/out" &&
   grep -q "the mesh has 4 devices but 1 process x 2 PJRT cpu devices = 2" "$work/mesh/out" &&
   ! grep -q "done, exit status 0" "$work/mesh/out"; then
  echo "ok   real mtf: plugin's devices listed, mesh larger than the devices refused"
else fail "real mtf (exit $status)" "$work/mesh/out"; fi
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "all cases passed"
