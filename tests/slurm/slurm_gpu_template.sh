#!/usr/bin/env bash
# jobs/transformer.slurm's backend choice without a cluster or a GPU: fake srun/scontrol/mtf on PATH, and a
# fake nvidia-smi where a case has a GPU. The template must pass backend.kind=cuda only when the node has a
# GPU and mtf's --version lists the cuda backend, else backend.kind=cpu with a line saying why; BACKEND
# overrides. usage: slurm_gpu_template.sh SOURCE_DIR WORK
set -uo pipefail
source_dir=$1 work=$2
rm -rf "$work" && mkdir -p "$work/bin" "$work/gpu" || exit 1
cat > "$work/bin/srun" <<'SH'
#!/usr/bin/env bash
while [ $# -gt 0 ] && [[ "$1" == --* ]]; do shift; done
exec "$@"
SH
printf '#!/usr/bin/env bash\necho "$*" >> "$FAKE_LOG"\n' > "$work/bin/scontrol"
# mtf: --version lists FAKE_BACKENDS; train records its arguments and writes what mtf train writes first.
cat > "$work/bin/mtf" <<'SH'
#!/usr/bin/env bash
if [ "$1" = --version ]; then echo "mtf 0.0.0"; echo "  backends: $FAKE_BACKENDS"; exit 0; fi
echo "args: $*" >> "$FAKE_LOG"
for a in "$@"; do case "$a" in run.dir=*) dir=${a#run.dir=} ;; esac; done
mkdir -p "$dir" && echo "fake: true" > "$dir/config.yaml" && : > "$dir/metrics.jsonl"
SH
# nvidia-smi of a node with two GPUs (only on PATH in the cases that have them).
printf '#!/usr/bin/env bash\necho "GPU 0: NVIDIA H200 (UUID: GPU-0)"\necho "GPU 1: NVIDIA H200 (UUID: GPU-1)"\n' > "$work/gpu/nvidia-smi"
chmod +x "$work/bin/"* "$work/gpu/"*
# PATH without any real nvidia-smi: the template's own tools (bash, grep, hostname) and the fakes.
base_path="$work/bin:/usr/bin:/bin"
failures=0
# usage: check NAME GPU(yes|no) BACKENDS BACKEND_ENV EXPECTED_KIND EXPECTED_LINE
check() {
  local name=$1 path=$base_path out=$work/$1/out
  mkdir -p "$work/$name"
  [ "$2" = yes ] && path="$work/gpu:$path"
  (cd "$source_dir" && env PATH="$path" FAKE_LOG="$work/$name/log" FAKE_BACKENDS="$3" BACKEND="$4" SLURM_JOB_ID=9 \
     SLURM_NTASKS=1 SLURM_JOB_NAME=mtf-train SLURM_SUBMIT_DIR="$source_dir" MTF_HOME="$source_dir" MTF="$work/bin/mtf" \
     CONFIG=none.yaml RUN_DIR="$work/$name/run" bash jobs/transformer.slurm) > "$out" 2>&1
  local status=$?
  if [ "$status" = 0 ] && grep -q -- "args: train none.yaml .*--set backend.kind=$5\b" "$work/$name/log" &&
     grep -q -- "$6" "$out"; then
    echo "ok   $name: backend.kind=$5, '$(grep -m1 -- "$6" "$out")'"
  else
    echo "FAIL $name: exit $status, expected backend.kind=$5 and a line with '$6'"; sed 's/^/  /' "$out" "$work/$name/log"
    failures=$((failures + 1))
  fi
}
check no_gpu            no  "cpu, cuda" ""   cpu  "no GPU on .*backend.kind=cpu, the ranks compute on their CPU cores"
check gpu_cpu_only_mtf  yes "cpu"       ""   cpu  "2 GPU(s) on .*built without CUDA.*backend.kind=cpu"
check gpu_cuda_mtf      yes "cpu, cuda" ""   cuda "backend.kind=cuda: 2 GPU(s) on"
check forced_cpu        yes "cpu, cuda" cpu  cpu  "start"
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "all cases passed"
