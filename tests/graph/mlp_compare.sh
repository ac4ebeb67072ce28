#!/usr/bin/env bash
# Trains the library's MLP example on one rank and on a sharded mesh and checks that the sharded run prints
# the same loss at every step (relative 1e-4) and that it learns (final loss under half the first).
# usage: mlp_compare.sh MPIEXEC EXAMPLE NPROCS MESH LAYOUT
set -euo pipefail
mpiexec=$1 example=$2 nprocs=$3 mesh=$4 layout=$5
one=$("$mpiexec" -n 1 "$example" --steps 40 | grep '^step')
many=$("$mpiexec" -n "$nprocs" "$example" --mesh "$mesh" --layout "$layout" --steps 40 | grep '^step')
paste <(echo "$one") <(echo "$many") | awk -v mesh="$mesh" -v layout="$layout" '
  { a = $4; b = $8; d = a - b; if (d < 0) d = -d; rel = d / (a > 0 ? a : -a);
    if (rel > worst) worst = rel; if (rel > 1e-4) { bad++; print "step " $2 ": " a " (1 rank) vs " b " (" mesh ")" }
    if (NR == 1) first = a; last = a; n = NR }
  END { printf "%d steps on %s with layout %s: worst relative loss difference %.2e; loss %.4f -> %.4f\n",
               n, mesh, layout, worst, first, last;
        if (n != 40) { print "expected 40 steps"; exit 1 }
        if (bad) exit 1;
        if (last > first / 2) { print "the MLP did not learn"; exit 1 } }'
