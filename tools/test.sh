#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, builds with warnings as errors, runs the whole
# CTest suite, then builds again with AddressSanitizer/UBSan (CPU only) and runs the suite once more.
# Exits non-zero if any step or test fails.
#   MTF_TEST_ASAN=0  skip the sanitizer pass        MTF_BUILD_DIR=DIR  build directory (default build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/install-deps.sh --python   # --python: .venv with tokenizers (tests/tokenize), tensorboardX

jobs=$(nproc 2>/dev/null || echo 2)
build_dir=${MTF_BUILD_DIR:-build}

run_suite() {
  local dir=$1; shift
  echo "== configure $dir ($*)"
  cmake -S . -B "$dir" -DMTF_WERROR=ON "$@"
  echo "== build $dir"
  cmake --build "$dir" -j "$jobs"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure)
}

run_suite "$build_dir"
if [ "${MTF_TEST_ASAN:-1}" != 0 ]; then
  run_suite "$build_dir-asan" -DMTF_ASAN=ON -DMTF_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
fi
echo "== all tests passed"
