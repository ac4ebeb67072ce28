/* The built-in backends: `backend.kind` -> constructor. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec/backend.h"
#ifdef MTF_HAVE_PJRT
#include "exec/pjrt/pjrt_backend.h"
#endif

typedef struct backend_entry {
  const char *kind;
  int (*create)(int threads, mtf_backend **out, mtf_error *err);
} backend_entry;

static const backend_entry builtin[] = {
    {"cpu", mtf_cpu_backend_create},
#ifdef MTF_HAVE_PJRT
    {"pjrt", mtf_pjrt_backend_create},
#endif
};

#define N_BUILTIN (sizeof builtin / sizeof builtin[0])

const char *mtf_backend_kinds(void) {
  static char list[128];
  if (!list[0]) {
    size_t used = 0;
    for (size_t i = 0; i < N_BUILTIN; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", builtin[i].kind);
  }
  return list;
}

/* Kinds a test program adds (mtf_backend_register): the emulated CUDA backend, e.g. Not listed among the
 * built-in kinds, since no build of mtf itself has them. */
#define MAX_REGISTERED 4
static backend_entry registered[MAX_REGISTERED];
static int n_registered;

int mtf_backend_register(const char *kind, int (*create)(int threads, mtf_backend **out, mtf_error *err)) {
  if (n_registered == MAX_REGISTERED) return MTF_ERR_INVALID;
  registered[n_registered++] = (backend_entry){kind, create};
  return MTF_OK;
}

static const backend_entry *find(const char *kind, mtf_error *err) {
  if (!kind || !kind[0]) kind = "cpu";
  for (size_t i = 0; i < N_BUILTIN; i++)
    if (strcmp(kind, builtin[i].kind) == 0) return &builtin[i];
  for (int i = 0; i < n_registered; i++)
    if (strcmp(kind, registered[i].kind) == 0) return &registered[i];
  mtf_error_set(err, MTF_ERR_INVALID, "unknown backend '%s' (built in: %s)", kind, mtf_backend_kinds());
  return NULL;
}

int mtf_backend_check(const char *kind, mtf_error *err) { return find(kind, err) ? MTF_OK : MTF_ERR_INVALID; }

int mtf_backend_describe(const char *kind, const char *plugin, int local_devices, long mesh_devices, int processes,
                         char *out, size_t cap, mtf_error *err) {
  if (cap) out[0] = 0;
  MTF_CHECK(mtf_backend_check(kind, err));
#ifdef MTF_HAVE_PJRT
  if (strcmp(kind, "pjrt") == 0) return mtf_pjrt_probe(plugin, local_devices, mesh_devices, processes, out, cap, err);
#endif
  return MTF_OK;
}

int mtf_backend_create(const char *kind, int threads, mtf_backend **out, mtf_error *err) {
  *out = NULL;
  const backend_entry *entry = find(kind, err);
  if (!entry) return MTF_ERR_INVALID;
  return entry->create(threads, out, err);
}

void mtf_backend_destroy(mtf_backend *b) {
  if (b) b->destroy(b);
}

int mtf_backend_resolve_threads(int requested, int ranks_per_node) {
  if (requested > 0) return requested;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  if (ranks_per_node < 1) ranks_per_node = 1;
  long per_rank = cores / ranks_per_node;
  return per_rank < 1 ? 1 : (int)per_rank;
}
