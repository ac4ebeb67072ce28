#!/usr/bin/env bash
# Fuzzing (issue 16): builds the libFuzzer targets of tests/fuzz with clang, ASan and UBSan in build-fuzz
# (its own build: CC=clang, -DMTF_FUZZ=ON, no CUDA), then runs each for SECONDS (default 60) starting from
# its seed corpus tests/fuzz/<name>/. New inputs go to build-fuzz/corpus/<name>/ (the seeds in git are
# never written), crashes to build-fuzz/artifacts/<name>/. Exits non-zero when any target crashes, times
# out, runs out of memory or reports a sanitizer error.
#   tools/fuzz.sh [SECONDS] [TARGET...]      TARGET: config layout shard ckpt (the default: these four),
#                                             shard_raw ckpt_raw (file bytes: findings are mostly HDF5's)
# Reproduce a crash: build-fuzz/tests/fuzz/fuzz_NAME build-fuzz/artifacts/NAME/crash-...
# Needs clang and its libFuzzer/sanitizer runtime (Debian: clang, libclang-rt-14-dev; tools/install-deps.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-60}
case "$seconds" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;; esac
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config layout shard ckpt)
for t in "${targets[@]}"; do
  [ -d "tests/fuzz/$t" ] || { echo "fuzz.sh: no target '$t' (config, layout, shard, ckpt, shard_raw, ckpt_raw)" >&2; exit 2; }
done

CC_FUZZ=${CC_FUZZ:-clang}
command -v "$CC_FUZZ" >/dev/null || { echo "fuzz.sh: $CC_FUZZ not found: apt-get install clang libclang-rt-14-dev (tools/install-deps.sh)" >&2; exit 2; }
BUILD=${MTF_FUZZ_BUILD:-build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)

mkdir -p "$BUILD"
CC="$CC_FUZZ" cmake -S . -B "$BUILD" -DMTF_FUZZ=ON -DMTF_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log" >&2; echo "fuzz.sh: configure failed" >&2; exit 1; }
cmake --build "$BUILD" -j "$jobs" --target fuzz_targets

# Leaks are detected (no -detect_leaks=0): HDF5's and libyaml's global state stays reachable, so LSan
# does not count it. One HDF5-internal leak on corrupt object headers is suppressed by name
# (tests/fuzz/lsan-hdf5.supp); matching it needs the slow unwinder, since Debian's libhdf5 has no frame
# pointers, so the raw-bytes targets (the only ones that give HDF5 corrupt headers) run with it and are
# several times slower; the others keep the fast one. Every UBSan finding stops the target
# (-fno-sanitize-recover=undefined); print its stack.
asan_base=${ASAN_OPTIONS:-detect_stack_use_after_return=1:strict_string_checks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan-hdf5.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TMPDIR=${TMPDIR:-/tmp}

failed=()
summary=()
for t in "${targets[@]}"; do
  corpus="$BUILD/corpus/$t" artifacts="$BUILD/artifacts/$t" log="$BUILD/fuzz-$t.log"
  mkdir -p "$corpus" "$artifacts"
  echo "fuzz.sh: fuzz_$t for ${seconds}s (log $log)"
  asan=$asan_base
  case "$t" in *_raw) asan="$asan_base:fast_unwind_on_malloc=0" ;; esac
  rc=0
  ASAN_OPTIONS=$asan "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" "tests/fuzz/$t" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)
  line="fuzz_$t: ${runs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l) new inputs"
  if [ "$rc" -ne 0 ]; then
    line="$line: FAILED (exit $rc), input in $artifacts/"
    failed+=("$t")
    grep -E 'ERROR: |runtime error|SUMMARY|Test unit written' "$log" | head -5 >&2 || true
  fi
  echo "$line"
  summary+=("$line")
done
echo "fuzz.sh: summary"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]} (logs $BUILD/fuzz-*.log)" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${#targets[@]} target(s)"
