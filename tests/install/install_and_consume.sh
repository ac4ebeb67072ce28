#!/usr/bin/env bash
# `cmake --install` the build into a scratch prefix, then configure, build and run a separate program that
# finds libmtf with find_package(mtf) and links mtf::mtf.
# usage: install_and_consume.sh BUILD_DIR SOURCE_DIR MPIEXEC [C_FLAGS]   (C_FLAGS: e.g. the sanitizer flags)
set -euo pipefail
build=$1 source=$2 mpiexec=$3 cflags=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/mtf/mtf.h" && test -f "$work/prefix/lib/cmake/mtf/mtfConfig.cmake"
cmake -S "$source/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$cflags" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$mpiexec" -n 1 "$work/consumer/consumer"
