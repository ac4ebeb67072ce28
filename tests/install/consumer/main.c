/* Builds y = x . w with the installed library on one rank and checks one value by hand. */
#include <mpi.h>
#include <stdio.h>

#include "comm/mpi_comm.h"
#include "mtf.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape xs, ws, ys, one = {0};
  mtf_shape_parse("batch:2,d:3", "x", &xs, NULL);
  mtf_shape_parse("d:3,e:2", "w", &ws, NULL);
  mtf_shape_parse("batch:2,e:2", "y", &ys, NULL);
  mtf_tensor x = mtf_input(g, "x", &xs), w = mtf_variable(g, "w", &ws, MTF_INIT_ONES, 1.0f);
  mtf_tensor y = mtf_einsum2(g, x, w, &ys);
  mtf_layout_rules rules = {0};
  mtf_comm *comm;
  mtf_plan *plan;
  mtf_session *s;
  mtf_error err;
  float xv[6] = {1, 2, 3, 4, 5, 6}, yv[4];
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &one, &comm, &err) || mtf_plan_create(g, &one, &rules, 0, 1, &y, &plan, &err) ||
      mtf_session_create(plan, comm, NULL, &s, &err) || mtf_session_set_input(s, x, xv, &err) ||
      mtf_session_run(s, &err) || mtf_session_fetch(s, y, yv, &err)) {
    fprintf(stderr, "consumer: %s\n", err.msg);
    return 1;
  }
  printf("consumer: y = [%g %g; %g %g]\n", yv[0], yv[1], yv[2], yv[3]);
  int ok = yv[0] == 6 && yv[1] == 6 && yv[2] == 15 && yv[3] == 15;
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
  mtf_comm_destroy(comm);
  MPI_Finalize();
  return ok ? 0 : 1;
}
