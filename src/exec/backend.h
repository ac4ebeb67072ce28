/* A compute backend is an object: its memory (allocate, free, upload, download, copy, fill, synchronize),
 * the data movement lowering's steps need (slice, concatenating gathered blocks), and one kernel per op
 * kind of the op table. The executor talks to tensor memory only through it, so device memory works the
 * same as host memory. A registry maps `backend.kind` to a constructor; adding a backend is a folder
 * exec/<kind>/ with a constructor and its kernels, and one line in the registry (exec/registry.c). */
#ifndef MTF_EXEC_BACKEND_H
#define MTF_EXEC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm_mode.h"
#include "lower/plan.h"

typedef struct mtf_backend mtf_backend;
struct mtf_comm;

/* What a kernel step runs on: backend memory for out, inputs and the step's planned scratch. */
typedef struct mtf_kernel_args {
  void *out;
  const void *in[MTF_MAX_OP_INPUTS];
  void *scratch;           /* step->scratch's arena buffer, or NULL */
  void *bf16_copy;         /* adam_update: where round(out) goes as well (step->bf16_copy), or NULL */
  const void *moments_grad; /* adam_update with step->fused_moments: the gradient its moving averages read */
  float *squares;           /* adam_update with step->squares_out: where the sum of that gradient's squares goes */
  const float *xent_loss;   /* softmax_cross_entropy_grad with step->xent_loss: the forward's per-row loss */
  float *xent_loss_out;      /* the same with step->xent_writes_loss: where the kernel writes that loss itself */
  const float *scatter_base; /* scatter_add with step->scatter_base: the term its rows are added into */
  uint64_t random_offset;  /* mixed into random ops' keys (mtf_session_set_random_offset) */
  /* mtf_session_set_microbatch: random ops number `microbatch_dim` as rows of the whole batch */
  const char *microbatch_dim;
  int microbatch, microbatches;
} mtf_kernel_args;

/* Where a random op's elements lie in the tensor whose global indices key its counters: the step's slice
 * offsets and global dims, except that under microbatch m of M the microbatch dim (local size n, slice
 * offset o = rank's share) becomes the whole batch's: offset o * M + m * n of a dim M times larger. Every
 * backend's random kernels number elements through this, so masks agree across backends. */
static inline const mtf_shape *mtf_random_extent_shape(const mtf_step *st) {
  return st->extent_of_input0 ? &st->in_shape[0] : &st->out_shape;
}

/* The index in shape of the dim microbatches number as rows of the whole batch, or -1 (none, or 1 microbatch). */
static inline int mtf_random_microbatch_dim(const mtf_shape *shape, const char *microbatch_dim, int microbatches) {
  return microbatches > 1 && microbatch_dim ? mtf_shape_index_of(shape, microbatch_dim) : -1;
}

static inline void mtf_random_extent(const mtf_step *st, const mtf_kernel_args *a, int64_t *offsets, int64_t *dims) {
  const mtf_shape *shape = mtf_random_extent_shape(st);
  for (int d = 0; d < shape->rank; d++) {
    offsets[d] = st->offsets[d];
    dims[d] = st->global_dims[d];
  }
  int d = mtf_random_microbatch_dim(shape, a->microbatch_dim, a->microbatches);
  if (d < 0) return;
  offsets[d] = offsets[d] * a->microbatches + (int64_t)a->microbatch * shape->dims[d].size;
  dims[d] *= a->microbatches;
}

enum {
  MTF_FUSES_MOMENTS = 1u << 0,       /* adam_update with fused_moments: the slots' moving averages in its pass */
  MTF_FUSES_GRAD_NORM = 1u << 1,     /* adam_update with squares_out: its gradient's sum of squares too */
  MTF_FUSES_XENT_LOSS = 1u << 2,     /* softmax_cross_entropy_grad with xent_loss: reads or writes the row loss */
  MTF_FUSES_SCATTER_BASE = 1u << 3,  /* scatter_add with scatter_base: adds its rows into another term */
  MTF_FUSES_PRODUCT_ADD = 1u << 4,   /* accumulate: a kernel adds its result into its output buffer */
  MTF_FUSES_ALL = (1u << 5) - 1
};

/* Runs step->op (in step->phase) on local slices. Returns MTF_OK or an error code. */
typedef int (*mtf_kernel_fn)(mtf_backend *b, const mtf_step *step, const mtf_kernel_args *args);

typedef struct mtf_backend_memory {
  void *(*allocate)(mtf_backend *b, size_t bytes); /* NULL when out of memory */
  void (*release)(mtf_backend *b, void *p);
  int (*upload)(mtf_backend *b, void *dst, const void *host_src, size_t bytes);
  int (*download)(mtf_backend *b, void *host_dst, const void *src, size_t bytes);
  int (*copy)(mtf_backend *b, void *dst, const void *src, size_t bytes);
  int (*fill_f32)(mtf_backend *b, void *dst, float value, int64_t count);
  int (*synchronize)(mtf_backend *b);
  /* out = in[offsets + i] for every index i of out (dims matched by position). */
  int (*slice)(mtf_backend *b, const mtf_shape *in_shape, const void *in, const mtf_shape *out_shape,
               const int64_t *offsets, void *out, size_t elem_size);
  /* parts blocks of dims (one after another) -> one tensor concatenated along `axis`. */
  int (*concat_blocks)(mtf_backend *b, const void *blocks, void *out, size_t elem_size, int rank, const int64_t *dims,
                       int axis, int parts);
  /* Its inverse: one tensor of dims (dims[axis] divisible by parts) -> parts blocks, block p its slice p
   * along `axis`, one after another. */
  int (*split_blocks)(mtf_backend *b, const void *in, void *blocks, size_t elem_size, int rank, const int64_t *dims,
                      int axis, int parts);
} mtf_backend_memory;

struct mtf_backend {
  const char *name;
  int threads;
  const mtf_backend_memory *mem;
  mtf_kernel_fn kernels[MTF_OP_COUNT]; /* a copy per instance (a test may wrap one) */
  void (*destroy)(mtf_backend *b);
  /* Optional, for memory the host cannot address: makes the communicator of collectives on this memory from
   * the job's host communicator, for backend.comm `mode` (auto, nccl or mpi); collective over host.
   * The caller destroys it (exec/device_comm.h). NULL: host memory, where the host communicator serves. */
  int (*device_comm)(mtf_backend *b, struct mtf_comm *host, mtf_comm_mode mode, struct mtf_comm **out, mtf_error *err);
  /* NULL, or what the last failed kernel or memory call said (a device backend's driver message), which
   * the executor adds to its own. */
  const char *(*error_text)(mtf_backend *b);
  /* 1 where its kernels read and write bf16-stored activations (mtf_plan_options.bf16_storage) and its
   * adam_update writes the bfloat16 weight copy (mtf_plan_options.bf16_weight_copies, mtf_kernel_args): a
   * session refuses a plan that has them on a backend without. */
  int bf16_storage;
  /* The plan fusions (mtf_plan_options: lower/fuse_*.c) whose fused steps its kernels honour, MTF_FUSES_* bits: a
   * session refuses a plan with a fused step its backend does not (the run layer asks for fuse_optimizer on every
   * kind that runs step by step, and for the others where the registry entry has `host_fusions`). */
  unsigned plan_fusions;
  /* Optional: how it multiplies bfloat16 operands (the backend line of a bf16 run). */
  const char *(*bf16_text)(mtf_backend *b);
  /* Optional, for MTF_PROFILE on a device whose kernels run after their launch returns (the host clock would
   * time launches): profile_mark records mark i (0, 1, ... in a run) on the device's timeline after the work
   * queued so far; once the device has passed mark i + 1 (after synchronize), profile_seconds gives the time
   * between marks i and i + 1. NULL: the executor times steps on the host clock. */
  int (*profile_mark)(mtf_backend *b, int i);
  int (*profile_seconds)(mtf_backend *b, int i, double *seconds);
  void *ctx;
};

/* A backend of options->kind ("cpu"; NULL or "" = "cpu") with its settings. Unknown or unavailable kinds are
 * errors that list the built-in kinds; so is a precision the backend does not have. */
int mtf_backend_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err);
void mtf_backend_destroy(mtf_backend *b);
/* For test programs: one more kind, caps->kind, that mtf_backend_create (and so backend.kind) accepts, with
 * what it does (mtf_backend_caps, copied), e.g. "cuda-emu", the CUDA backend compiled against the host
 * emulator (tests/cuda_emu). Call before any session. */
int mtf_backend_register(const mtf_backend_caps *caps,
                         int (*create)(const mtf_backend_options *options, mtf_backend **out, mtf_error *err));

/* The backend instance a session computes on (for tests that wrap a kernel). */
mtf_backend *mtf_session_backend_instance(mtf_session *s);


/* The CPU backend's constructor (exec/cpu/). */
int mtf_cpu_backend_create(int threads, mtf_backend **out, mtf_error *err);
/* The CUDA backend's (exec/cuda/backend.cu; built when nvcc is found: MTF_HAVE_CUDA), and what it would run
 * on (mtf_backend_describe's text; an error naming what was looked for when there is no usable GPU). */
int mtf_cuda_backend_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err);
int mtf_cuda_probe(const mtf_backend_options *options, char *out, size_t cap, mtf_error *err);

#endif
