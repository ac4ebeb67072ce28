#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, builds with warnings as errors, runs the whole
# CTest suite (as many tests at once as cores: MPI tests oversubscribe, tests that share a resource lock it), then builds again with AddressSanitizer/UBSan (CPU only) and runs the suite once more (less the
# tests labelled `long`, learning runs whose code paths shorter tests already cover under the sanitizers, and
# `harness`, the tests of the test that plant a wrong kernel; built at -O1, and LeakSanitizer checks rank 0
# of each mtf job: tests/supp/lsan_rank.c says why), then
# builds the libFuzzer targets with clang (ASan/UBSan) and runs each for 30 s (tools/fuzz.sh).
# Exits non-zero if any step or test fails, or a fuzz target finds a crash, leak or sanitizer report.
#   MTF_TEST_ASAN=0  skip the sanitizer pass        MTF_BUILD_DIR=DIR  build directory (default build)
#   MTF_TEST_FUZZ=0  skip the fuzz pass             MTF_TEST_FUZZ_SECONDS=N  seconds per fuzz target (30)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/install-deps.sh --python --pjrt   # --python: .venv with tokenizers (tests/tokenize), tensorboardX;
                                             # --pjrt: the XLA CPU PJRT plugin in .deps/pjrt (the pjrt backend and its tests)

jobs=$(nproc 2>/dev/null || echo 2)
build_dir=${MTF_BUILD_DIR:-build}

run_suite() {
  local dir=$1 ctest_args=$2; shift 2
  echo "== configure $dir ($*)"
  cmake -S . -B "$dir" -DMTF_WERROR=ON "$@"
  echo "== build $dir"
  cmake --build "$dir" -j "$jobs"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" $ctest_args) || rerun_tracer_crashes "$dir"
}

# LeakSanitizer's stop-the-world tracer itself sometimes crashes as a process exits ("Tracer caught signal
# 11 ... LeakSanitizer has encountered a fatal error"; google/sanitizers#1353): a fault of the sanitizer
# runtime under load, not a leak, and the test's own checks had passed. Seen here in 2 of 449 tests of one
# sanitizer pass, and in none of 24 further runs of those two tests. When every failed test's output shows
# that crash, those tests run once more and must pass; any other failure fails the suite as it stands.
rerun_tracer_crashes() {
  local dir=$1 failed="$1/Testing/Temporary/LastTestsFailed.log" log="$1/Testing/Temporary/LastTest.log" n name
  [ -s "$failed" ] && [ -s "$log" ] || return 1
  while IFS=: read -r n name; do
    awk -v t="$name" '/^[0-9]+\/[0-9]+ Testing: / { on = substr($0, index($0, "Testing: ") + 9) == t }
                      on && index($0, "LeakSanitizer has encountered a fatal error") { found = 1 }
                      END { exit !found }' "$log" || return 1
  done < "$failed"
  echo "== $dir: LeakSanitizer's tracer crashed in $(cut -d: -f2 "$failed" | paste -sd' '); running them once more"
  (cd "$dir" && ctest --output-on-failure --rerun-failed)
}

run_suite "$build_dir" ""
if [ "${MTF_TEST_ASAN:-1}" != 0 ]; then
  run_suite "$build_dir-asan" "-LE long|harness" -DMTF_ASAN=ON -DMTF_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
fi
if [ "${MTF_TEST_FUZZ:-1}" != 0 ]; then
  fuzz_seconds=${MTF_TEST_FUZZ_SECONDS:-30}
  echo "== fuzz $build_dir-fuzz: each target for ${fuzz_seconds}s under ASan/UBSan (MTF_TEST_FUZZ=0 skips)"
  if ! MTF_FUZZ_BUILD="$build_dir-fuzz" bash tools/fuzz.sh "$fuzz_seconds"; then
    echo "== fuzz: FAILED: a target found a crash, leak or sanitizer report (or could not be built); the" \
         "input is in $build_dir-fuzz/artifacts/TARGET/, the log in $build_dir-fuzz/fuzz-TARGET.log" >&2
    exit 1
  fi
  echo "== test $build_dir-fuzz (seed corpora, label fuzz)"
  (cd "$build_dir-fuzz" && ctest -L fuzz --output-on-failure)
fi
echo "== all tests passed"
