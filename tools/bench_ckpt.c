/* Checkpoint write and read bandwidth (docs/PERFORMANCE.md): builds a config's training program on the
 * ranks of this job, then saves and restores its variables and optimizer slots REPEAT times.
 * usage: mpiexec -n N bench_ckpt CONFIG DIR REPEAT [key.path=value]...
 * MB/s counts the logical bytes of all datasets (each saved once, whatever the replication) over the
 * slowest rank's wall time from file create/open to close, rename and fsync included. */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/checkpoint.h"
#include "run/program.h"
#include "run/setup.h"

/* "mtf: rank k: bench_ckpt: what: message", and the whole job ends. */
static int fail(const char *what, const mtf_error *err) {
  char text[64];
  snprintf(text, sizeof text, "bench_ckpt: %s", what);
  mtf_world_abort(1, text, err);
}

int main(int argc, char **argv) {
  mtf_world_init(&argc, &argv);
  int rank = mtf_world_rank();
  if (argc < 4) {
    if (rank == 0) fprintf(stderr, "usage: mpiexec -n N bench_ckpt CONFIG DIR REPEAT [key.path=value]...\n");
    mtf_world_finalize();
    return 2;
  }
  mtf_config *cfg = calloc(1, sizeof *cfg);
  mtf_error err;
  mtf_config_defaults(cfg);
  if (mtf_config_load_file(cfg, argv[1], &err)) return fail("config", &err);
  for (int i = 4; i < argc; i++)
    if (mtf_config_set(cfg, argv[i], &err)) return fail("config", &err);
  if (mtf_config_validate(cfg, &err)) return fail("config", &err);
  mtf_comm *comm;
  mtf_program program;
  mtf_session *session;
  if (mtf_comm_world_create(&cfg->mesh_shape, &comm, &err)) return fail("mesh", &err);
  if (mtf_program_build(cfg, comm->rank, &program, &err)) return fail("program", &err);
  mtf_session_options options = mtf_run_session_options(cfg);
  if (mtf_session_create(program.train_plan, comm, &options, &session, &err)) return fail("session", &err);
  mtf_ckpt_model model = {program.graph, program.train_plan, session, comm, program.train_model.params,
                          program.train_model.n_params};
  mtf_ckpt_state state = {.step = 1, .rng_seed = (uint64_t)cfg->train.seed, .rng_offset = 1};
  int repeat = atoi(argv[3]);
  double write_best = 0, read_best = 0, write_sum = 0, read_sum = 0;
  int64_t bytes = 0;
  for (int r = 0; r < repeat; r++) {
    char path[2 * MTF_CKPT_PATH_MAX];
    mtf_ckpt_stats stats;
    state.step = r + 1;
    if (mtf_ckpt_save(&model, cfg, &state, argv[2], 1, path, sizeof path, &stats, &err)) return fail("save", &err);
    double write_mbs = stats.bytes / 1e6 / stats.seconds;
    mtf_ckpt_state restored;
    if (mtf_ckpt_restore(&model, path, 1, &restored, &stats, &err)) return fail("restore", &err);
    double read_mbs = stats.bytes / 1e6 / stats.seconds;
    bytes = stats.bytes;
    write_sum += write_mbs;
    read_sum += read_mbs;
    if (write_mbs > write_best) write_best = write_mbs;
    if (read_mbs > read_best) read_best = read_mbs;
  }
  if (rank == 0) {
    char mesh[MTF_SHAPE_STR_MAX];
    printf("bench_ckpt: %s, mesh %s (%d ranks), layout '%s': %.1f MB per checkpoint, %d repeats\n", argv[1],
           mtf_shape_format(&cfg->mesh_shape, mesh, sizeof mesh), comm->size, cfg->mesh_layout, bytes / 1e6, repeat);
    printf("bench_ckpt: write %.0f MB/s mean, %.0f MB/s best; read %.0f MB/s mean, %.0f MB/s best\n",
           write_sum / repeat, write_best, read_sum / repeat, read_best);
  }
  mtf_session_destroy(session);
  mtf_program_free(&program);
  mtf_comm_destroy(comm);
  free(cfg);
  mtf_world_finalize();
  return 0;
}
