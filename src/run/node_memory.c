/* The node memory check (see node_memory.h). */
#define _POSIX_C_SOURCE 200809L
#include "run/node_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "MemAvailable:  12345 kB" from /proc/meminfo, in bytes; -1 when absent. */
static int64_t meminfo_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb >= 0 ? (int64_t)kb * 1024 : -1;
}

/* One integer from a file; -1 when absent, unreadable, "max" or 2^60 and above (v1's "no limit"). */
static int64_t read_value(const char *root, const char *dir, const char *name) {
  char path[4352];
  snprintf(path, sizeof path, "%s%s/%s", root, dir, name);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long long v = -1;
  if (fscanf(f, "%lld", &v) != 1 || v >= (1LL << 60)) v = -1;
  fclose(f);
  return v;
}

/* limit - usage of one cgroup directory (its files under root + dir, or under root itself when a container
 * sees its own cgroup as the root), -1 without a limit. */
static int64_t left_in(const char *root, const char *dir, const char *limit, const char *usage) {
  int64_t max = read_value(root, dir, limit), used = read_value(root, dir, usage);
  if (max < 0 && dir[0]) max = read_value(root, "", limit), used = read_value(root, "", usage);
  if (max < 0) return -1;
  return used >= 0 && used < max ? max - used : 0;
}

/* What this process's memory cgroup leaves: v2 ("0::PATH" in /proc/self/cgroup: memory.max - memory.current)
 * or v1 ("N:memory:PATH": memory.limit_in_bytes - memory.usage_in_bytes); -1 without a limit. */
static int64_t cgroup_available(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return -1;
  char line[4096];
  int64_t left = -1;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    const char *v1 = strstr(line, ":memory:"), *path = NULL;
    int64_t here = -1;
    if (strncmp(line, "0::", 3) == 0) {
      path = strcmp(line + 3, "/") == 0 ? "" : line + 3;
      here = left_in("/sys/fs/cgroup", path, "memory.max", "memory.current");
    } else if (v1) {
      path = strcmp(v1 + 8, "/") == 0 ? "" : v1 + 8;
      here = left_in("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes");
    }
    if (here >= 0 && (left < 0 || here < left)) left = here;
  }
  fclose(f);
  return left;
}

int64_t mtf_node_memory_available(char *where, size_t where_size) {
  int64_t mem = meminfo_available(), group = cgroup_available();
  const char *source = "MemAvailable in /proc/meminfo";
  if (group >= 0 && (mem < 0 || group < mem)) {
    mem = group;
    source = "this job's memory cgroup: its limit less its usage";
  }
  if (where && where_size) snprintf(where, where_size, "%s", mem >= 0 ? source : "unknown");
  return mem;
}

int mtf_run_check_memory_fit(const mtf_program *p, const mtf_config *cfg, int ranks_on_node, mtf_error *err) {
  const char *skip = getenv("MTF_MEMORY_CHECK");
  if (skip && strcmp(skip, "0") == 0) return MTF_OK;
  char where[96];
  int64_t available = mtf_node_memory_available(where, sizeof where);
  if (available < 0) return MTF_OK; /* nothing to check against (not Linux) */
  mtf_program_memory m;
  mtf_program_memory_of(p, cfg, &m);
  double GiB = 1024.0 * 1024.0 * 1024.0, need = (double)m.total * (ranks_on_node > 0 ? ranks_on_node : 1);
  if (need <= (double)available) return MTF_OK;
  /* The microbatch count whose activations (about arena / N: a microbatch's arena scales with its rows) would
   * fit beside the rest, among the divisors of the batch. */
  double budget = (double)available / (ranks_on_node > 0 ? ranks_on_node : 1);
  double arena = (double)(m.train_arena + m.apply_arena), rest = (double)m.total - arena;
  int64_t have = cfg->train.microbatches > 0 ? cfg->train.microbatches : 1, fits = 0;
  for (int64_t n = have + 1; budget > rest && n <= cfg->train.batch && !fits; n++)
    if (cfg->train.batch % n == 0 && rest + arena * (double)have / (double)n <= budget) fits = n;
  char hint[160] = "";
  if (fits) snprintf(hint, sizeof hint, " (train.microbatches: %lld would bring it to about %.2f GiB per rank)",
                     (long long)fits, (rest + arena * (double)have / (double)fits) / (1024.0 * 1024.0 * 1024.0));
  else snprintf(hint, sizeof hint, " (no train.microbatches alone fits it)");
  return mtf_error_set(err, MTF_ERR_NOMEM,
                       "this job does not fit in this node's memory: it plans %.2f GiB per rank (of which activations "
                       "%.2f, variables %.2f: `mtf plan` shows the whole estimate) x %d ranks on this node = %.2f GiB, but "
                       "the node has %.2f GiB available (%s), so it would be killed once it allocates. Lower the "
                       "peak with train.microbatches%s, train.recompute: block, or a layout that "
                       "splits the model over more ranks (mesh.shape, mesh.layout), or run fewer ranks per node; "
                       "MTF_MEMORY_CHECK=0 skips this check",
                       m.total / GiB, (m.train_arena + m.apply_arena + (cfg->data_eval[0] ? m.eval_arena : 0)) / GiB,
                       (m.parameters + m.optimizer_state + m.accumulators) / GiB, ranks_on_node, need / GiB,
                       available / GiB, where, hint);
}
