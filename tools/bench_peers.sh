#!/usr/bin/env bash
# mtf against PyTorch on the same model, the same global batch and the same 2 cores, in one run and one table:
#
#   bash tools/bench_peers.sh [small|gpt2] [--steps N] [--warmup W] [--rounds R] [--only NAME,NAME...]
#
#   small  configs/bench/small-gpt.yaml (issue 11's small GPT: 4 layers, d_model 256, batch 8)  [default]
#   gpt2   configs/bench/gpt2-width.yaml (GPT-2-small width: 12 layers, d_model 768, batch 4; slow)
#
# Setups (the --only names that pick each are in brackets; a setup runs when any of its names is listed):
#   mtf fp32 and mtf bf16 (--set backend.precision=bf16), each on 1 rank x 2 threads, 2 ranks x 1 thread b:2
#     (batch:b) and 2 ranks x 1 thread m:2 (heads:m;d_ff:m;vocab:m)          [mtf; mtf-fp32 | mtf-bf16]
#   PyTorch 1.x, Debian's python3-torch 1.13 ($PYTHON_OLD, default /usr/bin/python3): fp32 eager on 1 process
#     x 2 threads, 1 process x 1 thread and DDP 2 x 1 over gloo                 [torch, torch1]
#   PyTorch 2.x, PyPI's torch ($PYTHON_NEW, default .venv-peers/bin/python, or $MTF_PEERS_VENV/bin/python):
#     fp32 eager, bf16 autocast eager (torch.autocast("cpu", dtype=torch.bfloat16)), torch.compile fp32 and
#     torch.compile bf16 autocast, each on 1 process x 2 threads and DDP 2 x 1 over gloo
#     [torch, torch2; torch2-eager | torch2-compile; torch2-fp32 | torch2-bf16]
#   Also all (the default), fp32 and bf16 (both sides). --only mtf,torch2 runs mtf's six and PyTorch 2.x's eight.
# A PyTorch whose python is missing or does not import torch is left out with the reason printed (and listed
# under the table as not run); the rest still run. The header prints each torch's version, the CPU capability
# its kernels dispatch to (AVX2, AVX512, ...) and whether it reports bf16 and AMX support, and the CPU's
# avx512/bf16/amx flags, so a result records which ISA ran.
# Each setup runs once per round (R rounds, default 2), each time W warm-up steps (default 2; a compiled
# setup compiles in its first one) and then its share of the N timed steps (default 10, so 5 per round); a
# setup's ms/step is the median of its N timed steps pooled over the rounds, so a load that comes and goes
# on a shared machine falls on every setup. All 17 setups of `small` take roughly 10 minutes on 2 cores
# (gpt2 far longer): --only picks fewer.
# The same run measures the sgemm ceiling of the 2 cores (mtf_bench_sgemm: cblas_sgemm 2048^3 on 1 process
# x 2 threads and on 2 processes x 1 thread at once, the best of 5 calls each) and prints model FLOPs/s
# (6 N + attention per token, as mtf counts them) as a share of the higher one.
# Needs a build (build/src/mtf, build/src/mtf_bench_sgemm; MTF=... and MTF_BENCH_SGEMM=... pick others) and
# the PyTorch peers: bash tools/install-deps.sh --peers installs both (Debian's python3-torch, and .venv-peers
# with PyPI's torch 2.x). PYTHON is still read as PYTHON_OLD.
# Results: docs/PERFORMANCE.md, "Against PyTorch".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

model=small steps=10 warmup=2 rounds=2 only=all
usage="usage: bash tools/bench_peers.sh [small|gpt2] [--steps N] [--warmup W] [--rounds R] [--only NAME,NAME...]"
while [ $# -gt 0 ]; do
  case "$1" in
    small|gpt2) model=$1; shift ;;
    --steps|--warmup|--rounds)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "bench_peers: $1 needs a number; $usage" >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    --only)
      [ -n "${2:-}" ] || { echo "bench_peers: --only needs a list of names; $usage" >&2; exit 2; }
      only=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[ "$steps" -ge 1 ] && [ "$rounds" -ge 1 ] || { echo "bench_peers: --steps and --rounds must be >= 1" >&2; exit 2; }
case "$model" in
  small) config=configs/bench/small-gpt.yaml ;;
  gpt2) config=configs/bench/gpt2-width.yaml ;;
esac

# Every setup: its --only names, then the command that runs it for round $r. mtf and PyTorch alternate, so a
# load that comes and goes within a round falls on both.
# shellcheck disable=SC2034  # b1, b2 and bf16 are read by the setup commands, which run through eval
b1="--set backend.threads=1" b2="--set backend.threads=2" bf16="--set backend.precision=bf16"
all_setups=(
  'mtf mtf-fp32 fp32|run_mtf $r "fp32, 1 rank x 2 threads" 1 2 "" "" "$b2" --bind-to none'
  'torch torch1 fp32|torch_old $r 1 2'
  'torch torch2 torch2-eager torch2-fp32 fp32|torch_new $r 1 2 --precision fp32'
  'mtf mtf-bf16 bf16|run_mtf $r "bf16, 1 rank x 2 threads" 1 2 "" "" "$b2 $bf16" --bind-to none'
  'torch torch2 torch2-eager torch2-bf16 bf16|torch_new $r 1 2 --precision bf16'
  'torch torch2 torch2-compile torch2-fp32 fp32|torch_new $r 1 2 --precision fp32 --compile'
  'torch torch2 torch2-compile torch2-bf16 bf16|torch_new $r 1 2 --precision bf16 --compile'
  'mtf mtf-fp32 fp32|run_mtf $r "fp32, 2 ranks x 1 thread, b:2 (batch:b)" 2 1 "b:2" "batch:b" "$b1"'
  'torch torch1 fp32|torch_old $r 2 1'
  'torch torch2 torch2-eager torch2-fp32 fp32|torch_new $r 2 1 --precision fp32'
  'mtf mtf-bf16 bf16|run_mtf $r "bf16, 2 ranks x 1 thread, b:2 (batch:b)" 2 1 "b:2" "batch:b" "$b1 $bf16"'
  'torch torch2 torch2-eager torch2-bf16 bf16|torch_new $r 2 1 --precision bf16'
  'mtf mtf-fp32 fp32|run_mtf $r "fp32, 2 ranks x 1 thread, m:2 (heads;d_ff;vocab:m)" 2 1 "m:2" "heads:m;d_ff:m;vocab:m" "$b1"'
  'torch torch2 torch2-compile torch2-fp32 fp32|torch_new $r 2 1 --precision fp32 --compile'
  'mtf mtf-bf16 bf16|run_mtf $r "bf16, 2 ranks x 1 thread, m:2 (heads;d_ff;vocab:m)" 2 1 "m:2" "heads:m;d_ff:m;vocab:m" "$b1 $bf16"'
  'torch torch2 torch2-compile torch2-bf16 bf16|torch_new $r 2 1 --precision bf16 --compile'
  'torch torch1 fp32|torch_old $r 1 1'
)
known=" all "
for s in "${all_setups[@]}"; do
  for name in ${s%%|*}; do [[ "$known" == *" $name "* ]] || known+="$name "; done
done
IFS=, read -r -a wanted <<< "$only"
for name in "${wanted[@]}"; do
  [[ "$known" == *" $name "* ]] || { echo "bench_peers: --only: no setup is called '$name' (names:$known)" >&2; exit 2; }
done
picked() { # TAGS: is a setup with these --only names selected?
  local name
  for name in "${wanted[@]}"; do
    [ "$name" = all ] && return 0
    [[ " $1 " == *" $name "* ]] && return 0
  done
  return 1
}

BENCH=bench_peers
source tools/bench_lib.sh
bench_check_build  # also without mtf rows: the data step and the sgemm ceiling come from the build
wants() { # NAME: is any selected setup called NAME?
  local s
  for s in "${all_setups[@]}"; do picked "${s%%|*}" && [[ " ${s%%|*} " == *" $1 "* ]] && return 0; done
  return 1
}

# The pythons: stdlib-only arithmetic (medians, table) in /usr/bin/python3; the two PyTorch peers.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
PY_OLD=${PYTHON_OLD:-${PYTHON:-/usr/bin/python3}}
PY_NEW=${PYTHON_NEW:-${MTF_PEERS_VENV:-.venv-peers}/bin/python}
torch_version() { "$1" -c 'import torch; print(torch.__version__)' 2>/dev/null; }
skip_old="" skip_new=""
if wants torch1; then
  v_old=$(torch_version "$PY_OLD") ||
    skip_old="$PY_OLD does not import torch (apt-get install python3-torch, or bash tools/install-deps.sh --peers; PYTHON_OLD=... picks another python)"
fi
if wants torch2; then
  if ! v_new=$(torch_version "$PY_NEW"); then
    skip_new="$PY_NEW does not import torch (bash tools/install-deps.sh --peers makes .venv-peers with PyPI's torch 2.x; PYTHON_NEW=... picks another python)"
  elif [ "${v_new%%.*}" -lt 2 ]; then
    skip_new="$PY_NEW has torch $v_new, not 2.x (PYTHON_NEW=... picks another python)"
  elif [ -z "$skip_old" ] && [ "${v_old:-}" = "$v_new" ]; then
    skip_old="$PY_OLD has the same torch $v_new as $PY_NEW (PYTHON_OLD=... picks another python)"
  fi
fi

setups=()
for s in "${all_setups[@]}"; do
  picked "${s%%|*}" || continue
  [[ -n "$skip_old" && " ${s%%|*} " == *" torch1 "* ]] && continue
  [[ -n "$skip_new" && " ${s%%|*} " == *" torch2 "* ]] && continue
  setups+=("${s#*|}")
done
[ ${#setups[@]} -gt 0 ] || { echo "bench_peers: nothing to run (--only $only;${skip_old:+ PyTorch 1.x: $skip_old;}${skip_new:+ PyTorch 2.x: $skip_new})" >&2; exit 1; }

torch_old() { TORCH_PY=$PY_OLD run_torch "$@"; }
torch_new() { TORCH_PY=$PY_NEW run_torch "$@"; }

bench_prepare
echo "mtf: $("$MTF" --version | head -1)"
for peer in old new; do
  py_var=PY_${peer^^} skip_var=skip_$peer
  if [ -n "${!skip_var}" ]; then
    echo "PyTorch ($peer): not run: ${!skip_var}"
    printf '{"setup": "PyTorch %s: all its setups", "side": "pytorch", "skipped": %s}\n' \
      "$([ $peer = old ] && echo 1.x || echo 2.x)" "$("$PY" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "${!skip_var}")" \
      >> "$tmp/results.jsonl"
  elif wants "torch$([ $peer = old ] && echo 1 || echo 2)"; then
    echo "PyTorch ($peer): $("${!py_var}" tools/bench_peers.py info 2>/dev/null || echo "$("${!py_var}" -c 'import torch; print(torch.__version__)') ($py_var=${!py_var})")"
  fi
done
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_fp16|amx_int8|amx_tile)$' | tr '\n' ' ')"
echo "setups: ${#setups[@]} (--only $only)"
bench_ceilings bf16
bench_rounds_and_table
