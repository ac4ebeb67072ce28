#include "exec/profile.h"

#include <stdlib.h>
#include <string.h>

#include "ops/op_def.h"

typedef struct entry {
  int kind, op, phase; /* op and phase only for kernels */
  long calls;
  double seconds;
} entry;

struct mtf_profile {
  entry *entries;
  int n, cap;
  long runs;
};

mtf_profile *mtf_profile_from_env(void) {
  const char *v = getenv("MTF_PROFILE");
  if (!v || !v[0] || strcmp(v, "0") == 0) return NULL;
  return calloc(1, sizeof(mtf_profile));
}

void mtf_profile_add(mtf_profile *p, const mtf_step *st, double seconds) {
  int kernel = st->kind == MTF_STEP_KERNEL, op = kernel ? (int)st->op : -1, phase = kernel ? (int)st->phase : -1;
  entry *e = NULL;
  for (int i = 0; i < p->n && !e; i++)
    if (p->entries[i].kind == (int)st->kind && p->entries[i].op == op && p->entries[i].phase == phase) e = &p->entries[i];
  if (!e) {
    if (p->n == p->cap) {
      int cap = p->cap ? 2 * p->cap : 32;
      entry *grown = realloc(p->entries, sizeof(entry) * (size_t)cap);
      if (!grown) return; /* a profile is best effort */
      p->entries = grown;
      p->cap = cap;
    }
    e = &p->entries[p->n++];
    *e = (entry){(int)st->kind, op, phase, 0, 0.0};
  }
  e->calls++;
  e->seconds += seconds;
}

void mtf_profile_run(mtf_profile *p) { p->runs++; }

static int by_time(const void *a, const void *b) {
  double x = ((const entry *)a)->seconds, y = ((const entry *)b)->seconds;
  return (x < y) - (x > y);
}

static const char *phase_name(int phase) {
  switch ((mtf_phase)phase) {
    case MTF_PHASE_WHOLE: return "";
    case MTF_PHASE_MAX: return " (max)";
    case MTF_PHASE_SUM: return " (sum)";
    case MTF_PHASE_STATS: return " (stats)";
    case MTF_PHASE_APPLY: return " (apply)";
    default: return " (phase)";
  }
}

static const char *step_name(int kind) {
  switch ((mtf_step_kind)kind) {
    case MTF_STEP_KERNEL: return "kernel";
    case MTF_STEP_ALLREDUCE: return "allreduce";
    case MTF_STEP_ALLGATHER: return "allgather";
    case MTF_STEP_SLICE: return "slice";
    case MTF_STEP_COPY: return "copy";
    case MTF_STEP_ALLTOALL: return "alltoall";
    case MTF_STEP_REDUCE_SCATTER: return "reduce_scatter";
    default: return "step";
  }
}

void mtf_profile_print(const mtf_profile *p, FILE *out, const char *title) {
  if (!p || p->n == 0) return;
  entry *sorted = malloc(sizeof(entry) * (size_t)p->n);
  if (!sorted) return;
  memcpy(sorted, p->entries, sizeof(entry) * (size_t)p->n);
  qsort(sorted, (size_t)p->n, sizeof(entry), by_time);
  double total = 0;
  for (int i = 0; i < p->n; i++) total += sorted[i].seconds;
  long runs = p->runs > 0 ? p->runs : 1;
  fprintf(out, "profile: %s, %ld runs, %.1f ms per run\n", title, p->runs, 1e3 * total / (double)runs);
  fprintf(out, "profile:   %-32s %10s %8s %6s\n", "op", "ms/run", "calls/run", "share");
  for (int i = 0; i < p->n; i++) {
    char name[64];
    if (sorted[i].kind == MTF_STEP_KERNEL)
      snprintf(name, sizeof name, "%s%s", mtf_op((mtf_op_kind)sorted[i].op)->name, phase_name(sorted[i].phase));
    else
      snprintf(name, sizeof name, "[%s]", step_name(sorted[i].kind));
    fprintf(out, "profile:   %-32s %10.2f %8.1f %5.1f%%\n", name, 1e3 * sorted[i].seconds / (double)runs,
            (double)sorted[i].calls / (double)runs, total > 0 ? 100.0 * sorted[i].seconds / total : 0.0);
  }
  free(sorted);
}

void mtf_profile_destroy(mtf_profile *p) {
  if (!p) return;
  free(p->entries);
  free(p);
}
