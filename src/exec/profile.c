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
  /* device time: the steps of the current run in execution order (step k between marks k and k + 1) */
  const mtf_step **marked;
  int n_marked, cap_marked, device_failed;
  long device_runs; /* runs timed on the device */
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

static int device_timed(const mtf_profile *p, const mtf_backend *be) {
  return p && !p->device_failed && be->profile_mark && be->profile_seconds;
}

static void device_failed(mtf_profile *p, mtf_backend *be) {
  p->device_failed = 1;
  fprintf(stderr, "mtf: MTF_PROFILE: backend '%s' could not time steps on the device%s%s; timing on the host clock\n",
          be->name, be->error_text ? ": " : "", be->error_text ? be->error_text(be) : "");
}

int mtf_profile_device_begin(mtf_profile *p, mtf_backend *be) {
  if (!device_timed(p, be)) return 0;
  p->n_marked = 0;
  if (be->profile_mark(be, 0) != MTF_OK) {
    device_failed(p, be);
    return 0;
  }
  return 1;
}

void mtf_profile_device_step(mtf_profile *p, mtf_backend *be, const mtf_step *st) {
  if (!device_timed(p, be)) return;
  if (p->n_marked == p->cap_marked) {
    int cap = p->cap_marked ? 2 * p->cap_marked : 256;
    const mtf_step **grown = realloc(p->marked, sizeof *grown * (size_t)cap);
    if (!grown) {
      device_failed(p, be);
      return;
    }
    p->marked = grown;
    p->cap_marked = cap;
  }
  p->marked[p->n_marked++] = st;
  if (be->profile_mark(be, p->n_marked) != MTF_OK) device_failed(p, be);
}

void mtf_profile_device_end(mtf_profile *p, mtf_backend *be) {
  if (!device_timed(p, be)) return;
  if (be->mem->synchronize(be) != MTF_OK) {
    device_failed(p, be);
    return;
  }
  for (int k = 0; k < p->n_marked; k++) {
    double seconds = 0.0;
    if (be->profile_seconds(be, k, &seconds) != MTF_OK) {
      device_failed(p, be);
      return;
    }
    mtf_profile_add(p, p->marked[k], seconds);
  }
  p->device_runs++;
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
    case MTF_STEP_ALLREDUCE_START: return "allreduce start";
    case MTF_STEP_ALLREDUCE_WAIT: return "allreduce wait";
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
  fprintf(out, "profile: %s, %ld runs, %.1f ms per run%s\n", title, p->runs, 1e3 * total / (double)runs,
          p->device_runs == 0 ? "" : p->device_runs == p->runs ? " (device time)" : " (device time in some runs)");
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
  free(p->marked);
  free(p->entries);
  free(p);
}
