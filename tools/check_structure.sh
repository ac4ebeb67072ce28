#!/usr/bin/env bash
# The layering rules docs/ARCHITECTURE.md states, checked on the sources ("Structure rules, checked"):
#
#   bash tools/check_structure.sh [ROOT]        ROOT: a checkout (default: this one)
#
#   mpi             MPI is called only in src/comm: no MPI_*( call and no <mpi.h> elsewhere in src/ (parallel
#                   HDF5 gets comm's communicator from mtf_comm_mpi_world; sums go through comm's functions)
#   engine-headers  code above the engine (src/cli, src/run, src/model, src/config, src/io, src/ckpt, src/train)
#                   includes none of the engine's private headers (exec/, lower/, graph/, ops/): it uses mtf.h
#   backend-names   no backend kind ("cpu", "cuda", "pjrt", "cuda-emu") is compared as a string outside
#                   src/exec/registry.c: what a kind does is its registry entry (mtf_backend_capabilities)
#   op-switch       `case MTF_OP_` appears only in src/ops/table.c, the one place that dispatches on op kind
#                   (the backends' kernels and the PJRT emitter are op-indexed tables, filled by index)
#
# Prints each violation as FILE:LINE: [rule] the line, then a summary; exits 1 when there is any, 0 otherwise,
# 2 on bad usage. CI runs it through ctest (tests/structure), with a test that plants one violation of each rule
# in a copy of the sources and expects each to be reported.
set -euo pipefail

case "${1:-}" in
  -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[ $# -le 1 ] || { echo "usage: bash tools/check_structure.sh [ROOT]" >&2; exit 2; }
root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
[ -d "$root/src" ] || { echo "check_structure: $root has no src/ folder (give a checkout of mtf)" >&2; exit 2; }
cd "$root"

violations=0
report() { # rule, then grep -n lines "FILE:LINE:text"
  local rule=$1 line
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    local file=${line%%:*} rest=${line#*:}
    printf '%s:%s: [%s] %s\n' "$file" "${rest%%:*}" "$rule" "$(echo "${rest#*:}" | sed 's/^[[:space:]]*//')"
    violations=$((violations + 1))
  done
}

sources() { find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) "$@" | sort; }

# Comments are not code: block comments (over any number of lines) and // comments are removed first.
code_lines() { # files... -> FILE:LINE:text of code lines
  awk 'FNR == 1 { in_comment = 0 }
       { line = $0; code = ""
         while (line != "") {
           if (in_comment) {
             end = index(line, "*/")
             if (end == 0) { line = ""; break }
             line = substr(line, end + 2); in_comment = 0; continue
           }
           start = index(line, "/*")
           if (start == 0) { code = code line; break }
           code = code substr(line, 1, start - 1); line = substr(line, start + 2); in_comment = 1
         }
         sub(/\/\/.*/, "", code)
         if (code ~ /[^[:space:]]/) print FILENAME ":" FNR ":" code }' "$@"
}

text_matches() { # FILE:LINE:text lines whose text (not the file's name) matches the extended regex $1
  awk -v re="$1" '{ i = index($0, ":"); rest = substr($0, i + 1); j = index(rest, ":")
                    if (substr(rest, j + 1) ~ re) print }'
}

mapfile -t not_comm < <(sources -not -path 'src/comm/*')
report mpi < <(code_lines "${not_comm[@]}" |
  text_matches '(^|[^A-Za-z0-9_])MPI_[A-Z][A-Za-z0-9_]*[[:space:]]*\(|#[[:space:]]*include[[:space:]]*[<"]mpi\.h[>"]')

above=()
for d in cli run model config io ckpt train; do
  [ -d "src/$d" ] && mapfile -t -O "${#above[@]}" above < <(sources -path "src/$d/*")
done
if [ ${#above[@]} -gt 0 ]; then
  report engine-headers < <(code_lines "${above[@]}" | text_matches '#[[:space:]]*include[[:space:]]*[<"](exec|lower|graph|ops)/')
fi

mapfile -t not_registry < <(sources -not -path 'src/exec/registry.c')
names='"(cpu|cuda|pjrt|cuda-emu|cpu-staged)"'
report backend-names < <(code_lines "${not_registry[@]}" | text_matches "str(n)?(case)?cmp[[:space:]]*\\(" |
  text_matches "(backend|kind)" | text_matches "$names")

mapfile -t switch_files < <(sources -not -path 'src/ops/table.c')
report op-switch < <(code_lines "${switch_files[@]}" | text_matches 'case[[:space:]]+MTF_OP_')

if [ "$violations" -gt 0 ]; then
  echo "check_structure: $violations violation(s) of the layering rules in docs/ARCHITECTURE.md (\"Structure rules, checked\")" >&2
  exit 1
fi
echo "check_structure: ok (mpi, engine-headers, backend-names, op-switch)"
