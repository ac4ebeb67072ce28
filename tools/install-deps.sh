#!/usr/bin/env bash
# Installs the Debian 12 packages mtf needs to build, test and run, and only those that are missing.
# Safe to run again; never prompts. Needs root (or sudo) only when something is missing.
#   --python  also make .venv: Debian's /usr/bin/python3 (with its python3-h5py and python3-numpy, through
#             --system-site-packages) plus the PyPI packages of tools/prepare_tokenized.py (tokenizers) and
#             tools/tensorboard_export.py (tensorboardX). Tools and tests use .venv/bin/python.
#             MTF_VENV=DIR puts it elsewhere.
#   --pjrt    also the XLA CPU PJRT plugin (PyPI's xla-cpu-pjrt: xla_cpu_pjrt.so and the pjrt_c_api.h it ships)
#             into .deps/pjrt (git-ignored; MTF_PJRT_DIR=DIR puts it elsewhere): `pip download` of the wheel and
#             an unzip, no Python environment changed. CMake builds the pjrt backend when it finds the header
#             there, and tests load the plugin from there. MTF_PJRT_WHEEL=FILE uses a wheel already downloaded.
#   --peers   also the PyTorch peers of tools/bench_peers.sh, never installed without the flag (they are large
#             and nothing else needs them): Debian's python3-torch (PyTorch 1.13, for /usr/bin/python3), and
#             .venv-peers (git-ignored; MTF_PEERS_VENV=DIR puts it elsewhere), a venv of /usr/bin/python3 with
#             PyPI's current torch 2.x and numpy. PyPI's Linux x86_64 torch is the CUDA build and it links
#             against the nvidia-* CUDA libraries it depends on (it does not import without them, GPU or not; PyPI
#             has no CPU-only torch wheel), so the venv takes about 5.4 GB (torch 1.2, nvidia-* 3.0, triton
#             1.0): pip installs it as is, keeping no download cache. Skipped when the venv already imports
#             torch 2.x.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

with_python=0
with_peers=0
with_pjrt=0
for arg in "$@"; do
  case "$arg" in
    --python) with_python=1 ;;
    --peers) with_peers=1 ;;
    --pjrt) with_pjrt=1 ;;
    *) echo "install-deps: unknown option '$arg' (usage: install-deps.sh [--python] [--pjrt] [--peers])" >&2; exit 2 ;;
  esac
done
VENV=${MTF_VENV:-.venv}
PIP_PKGS=(tokenizers tensorboardX)   # h5py and numpy come from Debian

python_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "install-deps: making $VENV (/usr/bin/python3 with Debian's h5py and numpy)"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
  fi
  local imports="import h5py, numpy, tokenizers, tensorboardX"
  if "$VENV/bin/python" -c "$imports" 2>/dev/null; then
    echo "install-deps: $VENV has h5py, numpy, ${PIP_PKGS[*]}"
    return
  fi
  echo "install-deps: installing ${PIP_PKGS[*]} into $VENV from PyPI"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}"
  "$VENV/bin/python" -c "$imports"
  echo "install-deps: $VENV has h5py, numpy, ${PIP_PKGS[*]}"
}

PEERS_VENV=${MTF_PEERS_VENV:-.venv-peers}

peers_venv() {
  local check="import sys, torch, numpy; sys.exit(int(torch.__version__.split('.')[0]) < 2)"
  if [ -x "$PEERS_VENV/bin/python" ] && "$PEERS_VENV/bin/python" -c "$check" 2>/dev/null; then
    echo "install-deps: $PEERS_VENV has torch $("$PEERS_VENV/bin/python" -c 'import torch; print(torch.__version__)')"
    return
  fi
  if [ ! -x "$PEERS_VENV/bin/python" ]; then
    echo "install-deps: making $PEERS_VENV (/usr/bin/python3, its own site-packages)"
    /usr/bin/python3 -m venv "$PEERS_VENV"
  fi
  echo "install-deps: installing PyPI's torch 2.x (with the nvidia-* libraries it links against: about 5.4 GB" \
       "installed) and numpy into $PEERS_VENV"
  "$PEERS_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir 'torch>=2' numpy
  "$PEERS_VENV/bin/python" -c "$check" ||
    { echo "install-deps: $PEERS_VENV/bin/python does not import torch 2.x after the install" >&2; exit 1; }
  echo "install-deps: $PEERS_VENV has torch $("$PEERS_VENV/bin/python" -c 'import torch; print(torch.__version__)')"
}

# The XLA CPU PJRT plugin, pinned: the C API version mtf is tested with (0.81) comes from this wheel's header.
PJRT_PACKAGE=xla-cpu-pjrt
PJRT_VERSION=0.0.1
PJRT_DIR=${MTF_PJRT_DIR:-.deps/pjrt}

pjrt_plugin() {
  if [ -f "$PJRT_DIR/xla_cpu_pjrt.so" ] && [ -f "$PJRT_DIR/include/pjrt_c_api.h" ]; then
    echo "install-deps: $PJRT_DIR has $PJRT_PACKAGE (xla_cpu_pjrt.so, include/pjrt_c_api.h)"
    return
  fi
  local tmp wheel
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  if [ -n "${MTF_PJRT_WHEEL:-}" ]; then
    wheel=$MTF_PJRT_WHEEL
  else
    echo "install-deps: downloading $PJRT_PACKAGE==$PJRT_VERSION from PyPI (about 63 MB) into $PJRT_DIR"
    /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$tmp" "$PJRT_PACKAGE==$PJRT_VERSION"
    wheel=$(ls "$tmp"/*.whl)
  fi
  # A wheel is a zip: Python's zipfile unpacks it (no unzip package needed).
  /usr/bin/python3 -m zipfile -e "$wheel" "$tmp/unpacked"
  local src="$tmp/unpacked/xla_plugins/xla_cpu_pjrt"
  if [ ! -f "$src/xla_cpu_pjrt.so" ] || [ ! -f "$src/include/pjrt_c_api.h" ]; then
    echo "install-deps: $wheel has no xla_plugins/xla_cpu_pjrt/{xla_cpu_pjrt.so,include/pjrt_c_api.h}" >&2
    exit 1
  fi
  mkdir -p "$PJRT_DIR/include"
  cp "$src/xla_cpu_pjrt.so" "$PJRT_DIR/"
  cp "$src/include/pjrt_c_api.h" "$PJRT_DIR/include/"
  echo "install-deps: $PJRT_DIR has $PJRT_PACKAGE $PJRT_VERSION (xla_cpu_pjrt.so, include/pjrt_c_api.h)"
}

PKGS=(
  build-essential cmake pkg-config          # toolchain (C11, CMake >= 3.25)
  libopenmpi-dev openmpi-bin libpmix-dev    # MPI, one rank per device; PMIx for srun --mpi=pmix
  libhdf5-openmpi-dev hdf5-tools            # parallel HDF5 (checkpoints, token shards), h5dump
  libopenblas-dev libyaml-dev               # CPU sgemm, config parser
  libdnnl-dev                               # CPU bf16 GEMMs (oneDNN: AMX, AVX512-BF16)
  slurm-wlm slurmctld slurmd slurm-client munge   # a real local Slurm for the job-template tests
  python3 python3-numpy python3-h5py        # outside readers of our HDF5 files in tests
  python3-venv python3-pip                  # .venv for the PyPI packages (--python); pip download (--pjrt)
  python3-matplotlib                        # tools/plot_metrics.py
  fortunes                                  # default text corpus for the quick start
  clang libclang-rt-14-dev                  # tools/fuzz.sh: libFuzzer and the ASan/UBSan runtimes
)
if [ "$with_peers" = 1 ]; then
  PKGS+=(python3-torch)                     # tools/bench_peers.sh: PyTorch 1.13 on the same model (--peers)
fi

missing=()
for pkg in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages already installed"
  if [ "$with_python" = 1 ]; then python_venv; fi
  if [ "$with_pjrt" = 1 ]; then pjrt_plugin; fi
  if [ "$with_peers" = 1 ]; then peers_venv; fi
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${#missing[@]} missing package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: all ${#PKGS[@]} packages installed"
if [ "$with_python" = 1 ]; then python_venv; fi
if [ "$with_pjrt" = 1 ]; then pjrt_plugin; fi
if [ "$with_peers" = 1 ]; then peers_venv; fi
