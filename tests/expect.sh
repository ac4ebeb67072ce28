#!/usr/bin/env bash
# Runs a command and checks its exit status and output (stdout and stderr together).
# usage: expect.sh STATUS [-e REGEX]... [-n REGEX]... -- COMMAND [ARGS...]
#   -e REGEX  the output must match (grep -E)      -n REGEX  the output must not match
set -u
want_status=$1; shift
must=(); must_not=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    -e) must+=("$2"); shift 2 ;;
    -n) must_not+=("$2"); shift 2 ;;
    *) echo "expect.sh: bad option '$1'" >&2; exit 2 ;;
  esac
done
shift
output=$("$@" 2>&1); status=$?
printf '%s\n' "$output"
failed=0
if [ "$status" -ne "$want_status" ]; then echo "expect.sh: exit status $status, wanted $want_status"; failed=1; fi
for re in "${must[@]+"${must[@]}"}"; do
  grep -Eq -- "$re" <<<"$output" || { echo "expect.sh: output does not match: $re"; failed=1; }
done
for re in "${must_not[@]+"${must_not[@]}"}"; do
  grep -Eq -- "$re" <<<"$output" && { echo "expect.sh: output matches, but must not: $re"; failed=1; }
done
exit $failed
