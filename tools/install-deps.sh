#!/usr/bin/env bash
# Installs the Debian 12 packages mtf needs to build, test and run, and only those that are missing.
# Safe to run again; never prompts. Needs root (or sudo) only when something is missing.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config          # toolchain (C11, CMake >= 3.25)
  libopenmpi-dev openmpi-bin libpmix-dev    # MPI, one rank per device; PMIx for srun --mpi=pmix
  libhdf5-openmpi-dev hdf5-tools            # parallel HDF5 (checkpoints, token shards), h5dump
  libopenblas-dev libyaml-dev               # CPU sgemm, config parser
  slurm-wlm slurmctld slurmd slurm-client munge   # a real local Slurm for the job-template tests
  python3 python3-numpy python3-h5py        # outside readers of our HDF5 files in tests
  python3-matplotlib                        # tools/plot_metrics.py
  fortunes                                  # default text corpus for the quick start
)

missing=()
for pkg in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages already installed"
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
