/* The built-in backends: `backend.kind` -> constructor. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec/backend.h"
#include "exec/cpu/bf16.h"
#include "exec/session_impl.h"
#ifdef MTF_HAVE_PJRT
#include "exec/pjrt/pjrt_backend.h"
#include "exec/pjrt/session.h"
#endif

/* A kind: what it does (mtf_backend_caps), how to make one, and what it would run on (optional: the
 * `mtf --version` and start-of-run lines; NULL = nothing to say). */
typedef struct backend_entry {
  mtf_backend_caps caps;
  int (*create)(const mtf_backend_options *options, mtf_backend **out, mtf_error *err);
  int (*describe)(const mtf_backend_options *o, long mesh_devices, int processes, char *out, size_t cap,
                  mtf_error *err);
  mtf_program_session_create_fn program_session; /* caps.one_program: its sessions (exec/session_impl.h) */
} backend_entry;

static int create_cpu(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  return mtf_cpu_backend_create(options->threads, out, err);
}

#ifdef MTF_HAVE_PJRT
static int create_pjrt(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  return mtf_pjrt_backend_create(options->threads, out, err);
}

static int describe_pjrt(const mtf_backend_options *o, long mesh_devices, int processes, char *out, size_t cap,
                         mtf_error *err) {
  return mtf_pjrt_probe(o->plugin, o->local_devices, mesh_devices, processes, out, cap, err);
}
#endif

#ifdef MTF_HAVE_CUDA
static int describe_cuda(const mtf_backend_options *o, long mesh_devices, int processes, char *out, size_t cap,
                         mtf_error *err) {
  (void)mesh_devices, (void)processes;
  return mtf_cuda_probe(o, out, cap, err);
}
#endif

static const backend_entry builtin[] = {
    {{.kind = "cpu", .bf16 = 1, .bf16_grad_reduce = 1, .microbatches = 1, .generate = 1, .host_memory = 1,
      .host_fusions = 1, .host_peak = 1, .host_bf16_matmul = 1},
     create_cpu, NULL, NULL},
#ifdef MTF_HAVE_PJRT
    {{.kind = "pjrt", .bf16 = 1, .one_program = 1, .host_peak = 1, .plugin = 1}, create_pjrt, describe_pjrt,
     mtf_pjrt_program_session_create},
#endif
#ifdef MTF_HAVE_CUDA
    {{.kind = "cuda", .bf16 = 1, .bf16_grad_reduce = 1, .microbatches = 1, .generate = 1, .arena_alignment = 256,
      .gpu = 1},
     mtf_cuda_backend_create, describe_cuda, NULL},
#endif
};

#define N_BUILTIN (sizeof builtin / sizeof builtin[0])

const char *mtf_backend_kinds(void) {
  static char list[128];
  if (!list[0]) {
    size_t used = 0;
    for (size_t i = 0; i < N_BUILTIN; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", builtin[i].caps.kind);
  }
  return list;
}

/* Kinds a test program adds (mtf_backend_register): the emulated CUDA backend, e.g. Not listed among the
 * built-in kinds, since no build of mtf itself has them. */
#define MAX_REGISTERED 4
static backend_entry registered[MAX_REGISTERED];
static int n_registered;

int mtf_backend_register(const mtf_backend_caps *caps,
                         int (*create)(const mtf_backend_options *options, mtf_backend **out, mtf_error *err)) {
  if (n_registered == MAX_REGISTERED) return MTF_ERR_INVALID;
  registered[n_registered++] = (backend_entry){*caps, create, NULL, NULL};
  return MTF_OK;
}

static const backend_entry *find(const char *kind, mtf_error *err) {
  if (!kind || !kind[0]) kind = "cpu";
  for (size_t i = 0; i < N_BUILTIN; i++)
    if (strcmp(kind, builtin[i].caps.kind) == 0) return &builtin[i];
  for (int i = 0; i < n_registered; i++)
    if (strcmp(kind, registered[i].caps.kind) == 0) return &registered[i];
  mtf_error_set(err, MTF_ERR_INVALID, "unknown backend '%s' (built in: %s)%s", kind, mtf_backend_kinds(),
                strcmp(kind, "cuda") == 0 ? ": this build has no CUDA (configure where nvcc is on PATH, or set "
                                            "CUDACXX, with MTF_ENABLE_CUDA=ON)" : "");
  return NULL;
}

const char *mtf_cpu_bf16_text(void) { return mtf_cpu_bf16_path(); }

int mtf_backend_check(const char *kind, mtf_error *err) { return find(kind, err) ? MTF_OK : MTF_ERR_INVALID; }

const mtf_backend_caps *mtf_backend_capabilities(const char *kind) {
  mtf_error ignored;
  const backend_entry *entry = find(kind, &ignored);
  return entry ? &entry->caps : NULL;
}

/* bf16 exists on the backends that implement it; the others refuse it rather than compute in fp32 and let
 * the run believe otherwise. */
static int check_precision(const backend_entry *entry, const mtf_backend_options *o, mtf_error *err) {
  if (o->precision == MTF_PRECISION_FP32 || entry->caps.bf16) return MTF_OK;
  return mtf_error_set(err, MTF_ERR_INVALID, "backend.precision: bf16 is not implemented by the %s backend, which "
                       "computes in fp32 only: set backend.precision: fp32, or use backend.kind: cuda", entry->caps.kind);
}

int mtf_backend_describe(const mtf_backend_options *o, long mesh_devices, int processes, char *out, size_t cap,
                         mtf_error *err) {
  if (cap) out[0] = 0;
  const backend_entry *entry = find(o->kind, err);
  if (!entry) return MTF_ERR_INVALID;
  MTF_CHECK(check_precision(entry, o, err));
  return entry->describe ? entry->describe(o, mesh_devices, processes, out, cap, err) : MTF_OK;
}

int mtf_backend_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  *out = NULL;
  const backend_entry *entry = find(options->kind, err);
  if (!entry) return MTF_ERR_INVALID;
  MTF_CHECK(check_precision(entry, options, err));
  return entry->create(options, out, err);
}

int mtf_backend_program_session_create(const char *kind, mtf_plan *const *device_plans, int n_devices,
                                       const mtf_program_session_options *options, mtf_session_impl **out,
                                       mtf_error *err) {
  *out = NULL;
  const backend_entry *entry = find(kind, err);
  if (!entry) return MTF_ERR_INVALID;
  if (!entry->program_session)
    return mtf_error_set(err, MTF_ERR_INVALID, "session: backend '%s' runs plans step by step, not as one program over "
                         "the mesh's devices: make its sessions with mtf_session_create", entry->caps.kind);
  return entry->program_session(device_plans, n_devices, options, out, err);
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
