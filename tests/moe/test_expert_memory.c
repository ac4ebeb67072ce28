/* Expert parallelism holds 1/N of the experts per rank. On N ranks (mesh b:N), with the layout
 * `batch:b;experts:b`: the plan gives every variable with an `experts` dimension (the experts' weights and
 * their optimizer slots) a slice of 1/N of it, and the training session allocates that much. Measured: the
 * session's allocation less its planned arena and inputs is its variables' storage; it must equal the
 * plan's variable bytes, and fall, against the layout `batch:b` (experts replicated), by exactly
 * (N-1)/N of the expert variables' bytes. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "run/program.h"

typedef struct measured {
  int64_t planned_vars;  /* the plan's variable bytes on this rank */
  int64_t allocated_vars; /* the session's allocation less arena and inputs */
  int64_t expert_slice, expert_total; /* bytes of variables with an `experts` dim: this rank's, whole */
  int64_t expert_params;  /* bytes of the expert parameters (no optimizer slots), whole */
  int64_t parameters, optimizer_state; /* what `mtf plan` prints per rank (mtf_program_memory_of) */
  int expert_vars, whole_fraction_ok;
} measured;

static int64_t input_bytes(const mtf_program *p) {
  const mtf_tensor inputs[] = {p->train_model.tokens, p->train_model.targets, p->learning_rate, p->step};
  int64_t bytes = 0;
  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
    bytes += mtf_plan_slice_elements(p->train_plan, inputs[i]) * (int64_t)sizeof(float);
  return bytes;
}

static int measure(mtf_config *cfg, const char *layout, int ranks, measured *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  snprintf(cfg->mesh_layout, sizeof cfg->mesh_layout, "%s", layout);
  MTF_CHECK(mtf_config_validate(cfg, err));
  mtf_comm *comm = NULL;
  mtf_program program;
  mtf_session *session = NULL;
  MTF_CHECK(mtf_comm_mpi_create(MPI_COMM_WORLD, &cfg->mesh_shape, &comm, err));
  int rc = mtf_program_build(cfg, comm->rank, &program, err);
  if (rc == MTF_OK) rc = mtf_session_create(program.train_plan, comm, NULL, &session, err);
  if (rc == MTF_OK) {
    const mtf_graph *g = program.graph;
    out->whole_fraction_ok = 1;
    for (int i = 0; i < mtf_graph_num_variables(g); i++) {
      mtf_tensor v = mtf_graph_variable(g, i);
      const mtf_shape *shape = mtf_tensor_shape(g, v);
      if (!mtf_shape_has(shape, "experts")) continue;
      int64_t slice = mtf_plan_slice_elements(program.train_plan, v), whole = mtf_shape_num_elements(shape);
      out->expert_vars++;
      out->expert_slice += slice * (int64_t)sizeof(float);
      out->expert_total += whole * (int64_t)sizeof(float);
      for (int k = 0; k < program.train_model.n_params; k++)
        if (program.train_model.params[k] == v) out->expert_params += whole * (int64_t)sizeof(float);
      int split = strstr(layout, "experts:") != NULL;
      if (slice * (split ? ranks : 1) != whole) {
        out->whole_fraction_ok = 0;
        printf("variable %s: %lld of %lld elements on this rank\n", mtf_tensor_name(g, v), (long long)slice,
               (long long)whole);
      }
    }
    out->planned_vars = mtf_plan_get_stats(program.train_plan)->variable_bytes;
    mtf_program_memory mem;
    mtf_program_memory_of(&program, cfg, &mem);
    out->parameters = mem.parameters;
    out->optimizer_state = mem.optimizer_state;
    out->allocated_vars = mtf_session_allocated_bytes(session) - mtf_plan_get_stats(program.train_plan)->peak_bytes -
                          input_bytes(&program);
  }
  mtf_session_destroy(session);
  if (rc == MTF_OK) mtf_program_free(&program);
  mtf_comm_destroy(comm);
  return rc;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  mtf_config *cfg = calloc(1, sizeof *cfg);
  mtf_error err;
  mtf_config_defaults(cfg);
  int rc = argc >= 2 ? mtf_config_load_file(cfg, argv[1], &err)
                     : mtf_error_set(&err, MTF_ERR_INVALID, "usage: test_expert_memory CONFIG [key=value]...");
  for (int i = 2; i < argc && rc == MTF_OK; i++) rc = mtf_config_set(cfg, argv[i], &err);
  char mesh[32];
  snprintf(mesh, sizeof mesh, "mesh.shape=b:%d", ranks);
  if (rc == MTF_OK) rc = mtf_config_set(cfg, mesh, &err);
  measured split, replicated;
  if (rc == MTF_OK) rc = measure(cfg, "batch:b;experts:b", ranks, &split, &err);
  if (rc == MTF_OK) rc = measure(cfg, "batch:b", ranks, &replicated, &err);
  if (rc != MTF_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  printf("rank %d: mtf plan's parameters per rank: %lld bytes with experts:b, %lld replicated (expert parameters %lld "
         "bytes in all)\n", rank, (long long)split.parameters, (long long)replicated.parameters,
         (long long)split.expert_params);
  printf("rank %d: experts:b: %d expert variables, %lld of %lld bytes here (1/%.3f); variables planned %lld, "
         "allocated %lld; experts replicated: planned %lld, allocated %lld\n", rank, split.expert_vars,
         (long long)split.expert_slice, (long long)split.expert_total,
         (double)split.expert_total / (double)split.expert_slice, (long long)split.planned_vars,
         (long long)split.allocated_vars, (long long)replicated.planned_vars, (long long)replicated.allocated_vars);
  CHECK(split.expert_vars >= 2);
  CHECK(split.whole_fraction_ok && replicated.whole_fraction_ok);
  CHECK(split.expert_slice * ranks == split.expert_total);
  CHECK(split.allocated_vars == split.planned_vars);
  CHECK(replicated.allocated_vars == replicated.planned_vars);
  CHECK(replicated.allocated_vars - split.allocated_vars == split.expert_total - split.expert_slice);
  /* mtf plan's "per rank: parameters ..., optimizer state ...": the same bytes. */
  CHECK(split.parameters + split.optimizer_state == split.planned_vars);
  CHECK(split.expert_params > 0 && replicated.parameters - split.parameters == split.expert_params / ranks * (ranks - 1));
  int status = check_mpi_summary();
  free(cfg);
  MPI_Finalize();
  return status;
}
