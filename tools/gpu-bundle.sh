#!/usr/bin/env bash
# What mtf needs at run time, in one compressed file, for a GPU machine that has CUDA but none of mtf's other
# dependencies and no package registry (a borrowed GPU machine): tools/gpu-check.sh --bundle FILE unpacks it
# and runs from it, without building or installing anything.
#
#   bash tools/gpu-bundle.sh [--build-dir DIR] [--output FILE] [--check] [--allow-native]
#
#   --build-dir DIR  a portable build with the cuda backend (default build/): cmake -DMTF_NATIVE=OFF
#                    -DMTF_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 (90: H100/H200). A build for this
#                    machine's CPU (MTF_NATIVE=ON, the default) may use instructions the GPU machine's CPU lacks
#                    (AVX-512, AMX): refused unless --allow-native (gpu-check's dry run, which runs here)
#   --output FILE    the bundle (default gpu-bundle.tar.gz beside the build); at most 60 MiB
#   --check          after making it, unpack it into a temporary directory and run mtf and a 2-rank MPI job from
#                    it, with the system's OpenMPI components and help files hidden (a private mount namespace,
#                    `unshare -m`; skipped with the reason where that is not allowed)
#
# Contents (top directory mtf-gpu-bundle/): bin/ mtf and test_backend_conformance; lib/ every shared library
# they and OpenMPI load, except the C library's own (libc, libm, libdl, libpthread, librt, the loader) and
# the driver's and CUDA's (libcuda, libcudart, libcublas, libcublasLt, libnccl), which the GPU machine has;
# openmpi/ OpenMPI's launcher, daemon, components and help files laid out as under its prefix, so that
# OPAL_PREFIX relocates it; env.sh, which a shell sources to use the bundle (PATH, LD_LIBRARY_PATH with the
# CUDA and NCCL directories it finds, OPAL_PREFIX); MANIFEST.txt (commit, build, libraries, sizes).
# The binaries need a C library at least as new as this machine's (glibc 2.36 on Debian 12).
set -euo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$source_dir/build output="" check=0 allow_native=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
    --output) output=${2:?--output needs a file}; shift 2 ;;
    --check) check=1; shift ;;
    --allow-native) allow_native=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bundle: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$build_dir" in /*) ;; *) build_dir=$PWD/$build_dir ;; esac
[ -n "$output" ] || output=$build_dir/gpu-bundle.tar.gz
case "$output" in /*) ;; *) output=$PWD/$output ;; esac
mtf=$build_dir/src/mtf conformance=$build_dir/tests/engine/test_backend_conformance
for f in "$mtf" "$conformance"; do
  [ -x "$f" ] || { echo "gpu-bundle: $f is missing: build it first (cmake --build $build_dir --target mtf test_backend_conformance)" >&2; exit 1; }
done
if grep -q '^MTF_NATIVE:BOOL=ON' "$build_dir/CMakeCache.txt" 2>/dev/null && [ "$allow_native" = 0 ]; then
  echo "gpu-bundle: $build_dir is built for this machine's CPU (MTF_NATIVE=ON), which the GPU machine's may not run;" \
       "configure a portable build (cmake -S . -B build-portable -DMTF_NATIVE=OFF -DMTF_ENABLE_CUDA=ON" \
       "-DCMAKE_CUDA_ARCHITECTURES=90) and pass --build-dir, or --allow-native to bundle it anyway" >&2
  exit 1
fi
orterun=$(command -v orterun || true)
ompi_pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
ompi_prefix=$(ompi_info --path prefix --parsable 2>/dev/null | sed -n 's/^path:prefix://p')
if [ -z "$orterun" ] || [ ! -d "$ompi_pkglib" ] || [ ! -d "$ompi_pkgdata" ] || [ -z "$ompi_prefix" ]; then
  echo "gpu-bundle: OpenMPI's orterun and ompi_info are needed (bash tools/install-deps.sh installs them)" >&2
  exit 1
fi

stage=$(mktemp -d /tmp/mtf-gpu-bundle.XXXXXX)
trap 'rm -rf "$stage"' EXIT
b=$stage/mtf-gpu-bundle
mkdir -p "$b/bin" "$b/lib" "$b/openmpi/bin"
cp "$mtf" "$conformance" "$b/bin/"
cp "$orterun" "$(dirname "$orterun")/orted" "$b/openmpi/bin/"
ln -s orterun "$b/openmpi/bin/mpiexec"
ln -s orterun "$b/openmpi/bin/mpirun"
# OpenMPI's directories relative to its prefix, so that OPAL_PREFIX=<bundle>/openmpi finds them.
pkglib_rel=${ompi_pkglib#"$ompi_prefix"/} pkgdata_rel=${ompi_pkgdata#"$ompi_prefix"/}
mkdir -p "$b/openmpi/$pkglib_rel" "$b/openmpi/$pkgdata_rel"
cp -a "$ompi_pkglib"/. "$b/openmpi/$pkglib_rel/"
cp -a "$ompi_pkgdata"/. "$b/openmpi/$pkgdata_rel/"

# The libraries: the closure of what the binaries and OpenMPI's components load, less what the GPU machine
# brings (the C library's and the driver's and CUDA's).
skip='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-.*)\.so'
ldd "$b/bin/mtf" "$b/bin/test_backend_conformance" "$b/openmpi/bin/orterun" "$b/openmpi/bin/orted" \
    "$b/openmpi/$pkglib_rel"/*.so 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  while read -r lib; do
    name=$(basename "$lib")
    [[ "$name" =~ $skip ]] && continue
    cp -L "$lib" "$b/lib/$name"
  done

cat > "$b/env.sh" <<'EOF'
# Source this (bash): mtf and OpenMPI from this bundle; CUDA's and NCCL's libraries from this machine.
mtf_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$mtf_bundle/openmpi
export PATH=$mtf_bundle/bin:$mtf_bundle/openmpi/bin:$PATH
mtf_bundle_libs=$mtf_bundle/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/nvidia/lib64; do
  [ -d "$d" ] && mtf_bundle_libs=$mtf_bundle_libs:$d
done
# CUDA's runtime, cuBLAS and NCCL: the system's where the loader or the CUDA directories above have them, else
# those a Python package brought (PyTorch's nvidia-* wheels: nvidia/<name>/lib in its site-packages).
for mtf_bundle_file in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  ldconfig -p 2>/dev/null | grep -q "$mtf_bundle_file " && continue
  mtf_bundle_found=0
  IFS=: read -r -a mtf_bundle_dirs <<< "$mtf_bundle_libs"
  for d in "${mtf_bundle_dirs[@]}"; do [ -e "$d/$mtf_bundle_file" ] && mtf_bundle_found=1; done
  [ "$mtf_bundle_found" = 1 ] && continue
  for f in $(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/"$mtf_bundle_file" \
                   /usr/local/lib/python3*/dist-packages/nvidia/*/lib/"$mtf_bundle_file" \
                   /usr/lib/python3/dist-packages/nvidia/*/lib/"$mtf_bundle_file" 2>/dev/null); do
    mtf_bundle_libs=$mtf_bundle_libs:$(dirname "$f")
    break
  done
done
export LD_LIBRARY_PATH=$mtf_bundle_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Components whose own libraries (InfiniBand, UCX, ...) are absent are skipped quietly; shared memory and TCP
# are in the bundle.
export OMPI_MCA_mca_base_component_show_load_errors=0
unset mtf_bundle_libs mtf_bundle_file mtf_bundle_found mtf_bundle_dirs d f
EOF

{
  echo "mtf GPU bundle, made $(date -u '+%F %T') UTC on $(hostname) by tools/gpu-bundle.sh"
  echo "source: $(git -C "$source_dir" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "build: $build_dir ($(grep -E '^CMAKE_CUDA_ARCHITECTURES:' "$build_dir/CMakeCache.txt" 2>/dev/null || echo 'no CUDA architectures recorded'))"
  echo "C library of the build machine: $(ldd --version 2>&1 | head -1)"
  echo "mtf --version:"
  "$mtf" --version 2>&1 | sed 's/^/  /'
  echo "libraries:"
  (cd "$b/lib" && ls | sed 's/^/  /')
} > "$b/MANIFEST.txt"

tar -C "$stage" -czf "$output.part" mtf-gpu-bundle
mv "$output.part" "$output"
size=$(stat -c %s "$output")
limit=$((60 * 1024 * 1024))
echo "gpu-bundle: $output, $((size / 1024 / 1024)) MiB ($(find "$b" -type f | wc -l) files; limit 60 MiB)"
[ "$size" -le "$limit" ] || { echo "gpu-bundle: larger than 60 MiB" >&2; exit 1; }

[ "$check" = 1 ] || exit 0
# ---- check: run from the unpacked bundle with the system's OpenMPI components hidden ----
unpacked=$(mktemp -d /tmp/mtf-gpu-bundle-check.XXXXXX)
trap 'rm -rf "$stage" "$unpacked"' EXIT
tar -C "$unpacked" -xzf "$output"
probe="source '$unpacked/mtf-gpu-bundle/env.sh' && mtf --version | head -3 &&
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec --oversubscribe -n 2 mtf --version | grep -c '^mtf '"
hide="mount -t tmpfs none '$ompi_pkglib' && mount -t tmpfs none '$ompi_pkgdata'"
if unshare -m true 2>/dev/null; then
  out=$(unshare -m bash -c "$hide && $probe" 2>&1) || { echo "$out"; echo "gpu-bundle: check FAILED: the bundle does not run on its own" >&2; exit 1; }
  echo "$out"
  [ "$(tail -1 <<< "$out")" = 2 ] || { echo "gpu-bundle: check FAILED: the 2-rank job did not run" >&2; exit 1; }
  echo "gpu-bundle: check passed: mtf and a 2-rank job ran from the bundle with the system's OpenMPI components and help files hidden"
else
  out=$(bash -c "$probe" 2>&1) || { echo "$out"; echo "gpu-bundle: check FAILED" >&2; exit 1; }
  echo "$out"
  echo "gpu-bundle: check passed without hiding the system's OpenMPI (unshare -m is not allowed here)"
fi
