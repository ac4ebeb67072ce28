# Sourced by the precision tests: losses_close LABEL TOL DIR_A DIR_B compares the per-step losses of two runs'
# metrics.jsonl: 20 steps, every one within TOL relative, and at least one not identical (the two settings
# really computed differently). Prints one summary line; returns non-zero otherwise.
losses_close() {
  local label=$1 tol=$2 a=$3 b=$4
  extract() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
  paste -d' ' <(extract "$a") <(extract "$b") | awk -v label="$label" -v tol="$tol" '
    { d = $2 - $4; if (d < 0) d = -d; rel = d / ($2 < 0 ? -$2 : $2); if (rel > worst) worst = rel; if (d > 0) differ++;
      if (rel > tol) { bad++; print "step " $1 ": loss " $2 " vs " $4 } n++ }
    END { printf "%s: %d steps, worst relative loss difference %.2e, %d steps differ\n", label, n, worst, differ;
          if (n != 20 || bad || differ == 0) exit 1 }'
}
