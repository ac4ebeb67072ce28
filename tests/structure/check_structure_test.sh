#!/usr/bin/env bash
# tools/check_structure.sh passes on the sources as they are, and reports a planted violation of each of its
# rules (in a copy of src/), naming the rule and the file, while a comment that mentions the same words is not
# a violation.  usage: check_structure_test.sh SOURCE_DIR
set -uo pipefail
src_root=$1
script=$src_root/tools/check_structure.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

out=$(bash "$script" "$src_root" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "the sources pass ($out)"; else bad "the sources fail (rc $rc):"; echo "$out"; fi

cp -r "$src_root/src" "$tmp/src"
cat > "$tmp/src/run/planted_comment.c" <<'C'
/* Mentions only: MPI_Allreduce( in a comment, strcmp(backend, "cpu") and case MTF_OP_ADD: are not code. */
int planted_a; /* a comment that goes on: MPI_Barrier(MPI_COMM_WORLD);
 * strcmp(kind, "pjrt") == 0
   case MTF_OP_ADD: #include "exec/backend.h" */
int planted_b; // MPI_Send(
C
cp "$tmp/src/run/planted_comment.c" "$tmp/src/cli/planted_comment.c"
out=$(bash "$script" "$tmp" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "comments are not violations" || { bad "a comment was reported (rc $rc):"; echo "$out"; }

plant() { # rule, file (under src/), its text
  rm -rf "$tmp/src" && cp -r "$src_root/src" "$tmp/src"
  printf '%s\n' "$3" > "$tmp/src/$2"
  out=$(bash "$script" "$tmp" 2>&1); rc=$?
  if [ $rc -eq 1 ] && grep -q "^src/$2:[0-9]*: \[$1\]" <<<"$out" && [ "$(grep -c '\[' <<<"$out")" -eq 1 ]; then
    ok "$1: a planted violation in src/$2 is reported"
  else
    bad "$1: planted in src/$2, got rc $rc:"; echo "$out"
  fi
}
plant mpi run/planted_mpi.c 'void planted(void) { MPI_Barrier(MPI_COMM_WORLD); }'
plant mpi model/planted_include.c '#include <mpi.h>'
plant engine-headers cli/planted_header.c '#include "exec/backend.h"'
plant engine-headers ckpt/planted_header.c '#include "lower/plan.h"'
plant backend-names run/planted_name.c 'int planted(const char *backend) { return strcmp(backend, "cuda") == 0; }'
plant backend-names config/planted_kind.c 'int planted(const char *kind) { return !strncmp(kind, "pjrt", 4); }'
plant op-switch model/planted_switch.c 'void planted(int k) { switch (k) { case MTF_OP_ADD: break; } }'
# code on a line that starts with "*" is code, and code after a comment that closes on the same line too
plant mpi run/planted_star.c 'void planted(double *x) {
  *x = MPI_Wtime();
}'
plant backend-names run/planted_after_comment.c 'int planted(const char *kind) { /* x */ return strcmp(kind, "cpu-staged"); }'
plant mpi io/planted_quoted_include.c '#include "mpi.h"'

out=$(bash "$script" "$tmp" extra 2>&1); rc=$?
[ $rc -eq 2 ] && ok "bad usage exits 2" || bad "bad usage: rc $rc"
exit $fail
