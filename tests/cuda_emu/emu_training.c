#define _POSIX_C_SOURCE 200809L
/* The CUDA backend (on the host emulator, kind "cuda-emu") trains as the cpu backend does: a small
 * transformer (tests/run/tiny-test.yaml, dropout on so that the random masks must agree bit for bit, AdamW
 * or Adafactor) for N steps on the same token batches, on each backend in turn over the same mesh and
 * layout, and the losses must agree within 1e-4 relative at every step.
 *
 * --precision bf16 (or --tf32 1) runs cuda-emu with bf16 einsum inputs (the config's backend.precision bf16:
 * the model's einsums take bfloat16 operands, activations are stored as bfloat16 and the optimizer writes the
 * weights' bfloat16 copies, as a cuda run's plans have them) (TF32 GEMMs) against the fp32 cpu run: then the
 * losses must differ (the reduced precision is in effect) but by less than 2e-2 relative. With --against bf16 the cpu run
 * is bf16 too (the same policy, roundings and weight copies on the other backend's kernels): the losses must
 * then agree within 1e-3 relative (the order of fp32 sums differs, and with it some bfloat16 roundings).
 *
 * --comm nccl runs cuda-emu's collectives through the NCCL communicator (src/comm/nccl_comm.c on the emulator's
 * NCCL over MPI; the ctest gives each process its own emulated GPU, MTF_EMU_GPUS=per-process), which must then
 * have made NCCL calls.
 *
 *   mpiexec -n R test_cuda_emu_training [--steps N] [--mesh SHAPE] [--layout TEXT] [--optimizer NAME]
 *                                       [--config FILE] [--precision fp32|bf16] [--tf32 0|1] [--against bf16]
 *                                       [--comm nccl] */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "../train_steps.h"
#include "lower/plan.h"

enum { MAX_STEPS = 64 };

long mtf_emu_nccl_calls(void); /* tests/cuda_emu/include/nccl.h (C++), given C linkage there */

/* Step s's batch: token and target ids from a hash of (step, position), the same for both backends. */
static void batch_of(int step, int64_t n, int64_t vocab, int32_t *tokens, int32_t *targets) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t h = (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(step + 1) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    tokens[i] = (int32_t)(h % (uint64_t)vocab);
    targets[i] = (int32_t)((h >> 17) % (uint64_t)vocab);
  }
}

static mtf_precision precision = MTF_PRECISION_FP32;
static int tf32, against_bf16;

/* A bf16 run's train plan on backend `kind` stores activations as bfloat16 and keeps weight copies. */
static int bf16_plan_stats(const mtf_config *cfg, const char *kind, int rank, mtf_plan_stats *stats, mtf_error *err) {
  mtf_config c = *cfg;
  snprintf(c.backend, sizeof c.backend, "%s", kind);
  mtf_program p;
  MTF_CHECK(mtf_program_build(&c, rank, &p, err));
  *stats = *mtf_plan_get_stats(p.train_plan);
  mtf_program_free(&p);
  return MTF_OK;
}

/* The cuda plans' arena buffers (train and evaluation) whose offset is not a multiple of 256 bytes
 * (mtf_plan_options.arena_alignment; buffers inside a gradient bucket lie back to back and are not counted);
 * *count gets how many were looked at. */
static int misaligned_buffers(const mtf_config *cfg, int rank, int *count, mtf_error *err) {
  mtf_config c = *cfg;
  snprintf(c.backend, sizeof c.backend, "cuda-emu");
  mtf_program p;
  MTF_CHECK(mtf_program_build(&c, rank, &p, err));
  const mtf_plan *plans[2] = {p.train_plan, p.eval_plan};
  int bad = 0;
  *count = 0;
  for (int k = 0; k < 2; k++)
    for (int b = 0; plans[k] && b < plans[k]->n_buffers; b++) {
      const mtf_buffer *buf = &plans[k]->buffers[b];
      if (buf->kind != MTF_BUF_ARENA || buf->bucket || buf->elements == 0) continue;
      (*count)++;
      bad += (buf->offset * MTF_ARENA_WORD) % 256 != 0;
    }
  mtf_program_free(&p);
  return bad;
}

static int train(const mtf_config *cfg, const char *backend, int steps, double *losses, mtf_error *err) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int reduced = strcmp(backend, "cpu") != 0 || against_bf16;
  mtf_session_options options = {.backend = backend,
                                 .poison_freed = 1,
                                 .precision = reduced ? precision : MTF_PRECISION_FP32,
                                 .tf32 = reduced && tf32};
  return test_train_steps(cfg, rank, &options, 3e-3f, batch_of, steps, losses, err);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int steps = 20;
  const char *config = "tests/run/tiny-test.yaml", *mesh = "m:1", *layout = "", *optimizer = "adamw", *comm = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--config") == 0) config = argv[i + 1];
    else if (strcmp(argv[i], "--mesh") == 0) mesh = argv[i + 1];
    else if (strcmp(argv[i], "--layout") == 0) layout = argv[i + 1];
    else if (strcmp(argv[i], "--optimizer") == 0) optimizer = argv[i + 1];
    else if (strcmp(argv[i], "--precision") == 0) precision = strcmp(argv[i + 1], "bf16") == 0 ? MTF_PRECISION_BF16 : MTF_PRECISION_FP32;
    else if (strcmp(argv[i], "--tf32") == 0) tf32 = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--against") == 0) against_bf16 = strcmp(argv[i + 1], "bf16") == 0;
    else if (strcmp(argv[i], "--comm") == 0) comm = argv[i + 1];
  }
  if (against_bf16 && precision != MTF_PRECISION_BF16) {
    fprintf(stderr, "--against bf16 needs --precision bf16\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int exact = precision == MTF_PRECISION_FP32 && !tf32;
  if (steps < 1 || steps > MAX_STEPS) steps = 20;
  mtf_config cfg, reduced_cfg; /* the cpu run's, and cuda-emu's (bf16 matmuls in the model with --precision bf16) */
  mtf_error err = {0};
  int rc = test_train_configure(&cfg, config, mesh, layout, optimizer, NULL, &err);
  if (rc == MTF_OK)
    rc = test_train_configure(&reduced_cfg, config, mesh, layout, optimizer,
                              precision == MTF_PRECISION_BF16 ? "backend.precision=bf16" : NULL, &err);
  if (rc == MTF_OK && comm) {
    char set_comm[64];
    snprintf(set_comm, sizeof set_comm, "backend.comm=%s", comm);
    rc = mtf_config_set(&reduced_cfg, set_comm, &err);
  }
  if (rc != MTF_OK) fprintf(stderr, "config: %s\n", err.msg);
  CHECK(rc == MTF_OK);
  if (rc == MTF_OK && precision == MTF_PRECISION_BF16) {
    mtf_plan_stats stats;
    rc = bf16_plan_stats(&reduced_cfg, "cuda-emu", rank, &stats, &err);
    if (rc != MTF_OK) fprintf(stderr, "plan: %s\n", err.msg);
    CHECK(rc == MTF_OK);
    if (rc == MTF_OK && rank == 0)
      printf("cuda-emu bf16 train plan: %d activations stored as bfloat16, %d weights' bfloat16 copies\n",
             stats.bf16_values, stats.bf16_weight_copies);
    CHECK(rc != MTF_OK || (stats.bf16_values > 0 && stats.bf16_weight_copies > 0));
  }
  if (rc == MTF_OK) {
    int looked = 0, bad = misaligned_buffers(&reduced_cfg, rank, &looked, &err);
    if (rank == 0) printf("cuda-emu plans: %d of %d arena buffers off a 256-byte boundary\n", bad, looked);
    CHECK(bad == 0 && looked > 0);
  }
  double want[MAX_STEPS], got[MAX_STEPS];
  if (rc == MTF_OK) {
    rc = train(against_bf16 ? &reduced_cfg : &cfg, "cpu", steps, want, &err);
    if (rc != MTF_OK) fprintf(stderr, "cpu: %s\n", err.msg);
    CHECK(rc == MTF_OK);
  }
  if (rc == MTF_OK) {
    long nccl_before = mtf_emu_nccl_calls();
    rc = train(&reduced_cfg, "cuda-emu", steps, got, &err);
    if (rc != MTF_OK) fprintf(stderr, "cuda-emu: %s\n", err.msg);
    CHECK(rc == MTF_OK);
    if (comm && strcmp(comm, "nccl") == 0) {
      long calls = mtf_emu_nccl_calls() - nccl_before;
      if (rank == 0) printf("cuda-emu: %ld collective calls through NCCL on rank 0\n", calls);
      CHECK(calls > steps);
    }
  }
  if (rc == MTF_OK && rank == 0) {
    double worst = 0;
    for (int s = 0; s < steps; s++) {
      double e = fabs(got[s] - want[s]) / fmax(1e-12, fabs(want[s]));
      if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
      printf("  step %2d: cpu %.7f cuda-emu %.7f\n", s + 1, want[s], got[s]);
    }
    int learned = want[steps - 1] < want[0]; /* the comparison is of a run that trains */
    int pass = learned && (exact ? worst <= 1e-4 : against_bf16 ? worst <= 1e-3 : worst > 1e-6 && worst <= 2e-2);
    printf("%s cuda-emu %s%s%s mesh '%s' layout '%s': %d steps, loss %.4f -> %.4f, largest relative difference to "
           "cpu%s %.2e (bound %s)\n",
           pass ? "ok  " : "FAIL", optimizer, precision == MTF_PRECISION_BF16 ? " bf16" : "", tf32 ? " tf32" : "", mesh,
           layout, steps, want[0], want[steps - 1], against_bf16 ? " bf16" : "", worst,
           exact ? "1e-4" : against_bf16 ? "1e-3" : "(1e-6, 2e-2]");
    CHECK(pass);
  }
  MPI_Finalize();
  return rank == 0 ? check_summary() : 0;
}
