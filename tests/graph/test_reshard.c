/* The resharding step of lowering (lower/reshard.c), from the outside: a reshape that moves a split from
 * one dim to another on the same mesh axis is ONE alltoall (no allgather, no slice), pending partial sums
 * that the consumer wants split become ONE reduce-scatter (no allreduce), a reshape that changes sizes
 * carries a split over without communicating, and a cycle of splits on a 2-axis mesh is one allgather and
 * one alltoall. For each: the plan's calls and bytes per collective kind equal what the communicator
 * counted while the plan ran, the forward bytes equal the ring formula worked out here from the tensor
 * sizes, and every fetched value (the moved tensor, the loss, the gradients, which move back) equals the
 * one-rank run's. argv[1] is the mesh (the job's size). */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "mtf.h"

#define MAX_FETCH 6

static int world_rank;

/* A graph whose first fetch is the resharded tensor, then the loss and the gradients. */
typedef struct reshard_case {
  const char *name;
  mtf_graph *g;
  int n_fetch;
  mtf_tensor fetches[MAX_FETCH];
} reshard_case;

/* Collective calls the forward plan (the resharded tensor alone) must make, by kind; -1: not checked. */
typedef struct expected {
  int calls[MTF_COLL_KINDS];
  double bytes[MTF_COLL_KINDS]; /* per rank, worked out from the sizes */
} expected;

static mtf_shape shape_of(const char *text, const char *what) {
  mtf_shape s;
  mtf_error err;
  if (mtf_shape_parse(text, what, &s, &err)) fail_job("shape", &err);
  return s;
}

/* loss = sum(y^2) and d loss / d vars, after fetches[0] = y. */
static void add_loss(reshard_case *c, mtf_tensor y, int n_vars, mtf_tensor *vars) {
  mtf_shape scalar = {0};
  mtf_tensor loss = mtf_reduce_sum(c->g, mtf_square(c->g, y), &scalar), grads[4];
  mtf_gradients(c->g, loss, n_vars, vars, grads);
  c->fetches[c->n_fetch++] = y;
  c->fetches[c->n_fetch++] = loss;
  for (int i = 0; i < n_vars; i++) c->fetches[c->n_fetch++] = grads[i];
}

/* x [g, e, d] read as new_shape: the same sizes under new names (a multi-dim rename, as MoE layers move
 * the split of their groups to their experts), or other sizes (a true reshape). */
static reshard_case moved(const char *name, const char *new_shape) {
  reshard_case c = {.name = name, .g = mtf_graph_create(7)};
  mtf_shape xs = shape_of("g:8,e:8,d:4", "x"), ys = shape_of(new_shape, "y");
  mtf_tensor x = mtf_variable(c.g, "x", &xs, MTF_INIT_NORMAL, 1.0f);
  add_loss(&c, mtf_reshape(c.g, x, &ys), 1, &x);
  return c;
}

/* y = (a . b) summed over k, read under a new name: the sum is pending where k is split. */
static reshard_case summed(const char *name, const char *new_shape) {
  reshard_case c = {.name = name, .g = mtf_graph_create(11)};
  mtf_shape as = shape_of("i:8,k:8", "a"), bs = shape_of("k:8,j:8", "b"), zs = shape_of("i:8,j:8", "z");
  mtf_shape ys = shape_of(new_shape, "y");
  mtf_tensor vars[2] = {mtf_variable(c.g, "a", &as, MTF_INIT_NORMAL, 1.0f),
                        mtf_variable(c.g, "b", &bs, MTF_INIT_NORMAL, 1.0f)};
  add_loss(&c, mtf_reshape(c.g, mtf_einsum2(c.g, vars[0], vars[1], &zs), &ys), 2, vars);
  return c;
}

static void run(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules, mtf_comm *comm,
                int n_fetch, const mtf_tensor *fetches, float **values, mtf_plan_stats *stats,
                mtf_comm_stats *measured) {
  mtf_plan *plan;
  mtf_session *session;
  mtf_error err;
  if (mtf_plan_create(g, mesh, rules, comm->rank, n_fetch, fetches, &plan, &err)) fail_job("plan", &err);
  if (stats) *stats = *mtf_plan_get_stats(plan);
  mtf_session_options options = {.poison_freed = 1};
  if (mtf_session_create(plan, comm, &options, &session, &err)) fail_job("session", &err);
  mtf_comm_stats before = comm->stats;
  if (mtf_session_run(session, &err)) fail_job("run", &err);
  if (measured)
    for (int k = 0; k < MTF_COLL_KINDS; k++) {
      measured->calls[k] = comm->stats.calls[k] - before.calls[k];
      measured->bytes_sent[k] = comm->stats.bytes_sent[k] - before.bytes_sent[k];
    }
  for (int i = 0; values && i < n_fetch; i++) {
    values[i] = malloc(sizeof(float) * (size_t)mtf_shape_num_elements(mtf_tensor_shape(g, fetches[i])));
    if (mtf_session_fetch(session, fetches[i], values[i], &err)) fail_job("fetch", &err);
  }
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
}

/* The plan's statistics against what the communicator counted, kind by kind. */
static void check_counted(const char *what, const mtf_plan_stats *plan, const mtf_comm_stats *measured) {
  for (int k = 0; k < MTF_COLL_KINDS; k++) {
    int ok = plan->comm_calls[k] == measured->calls[k] && plan->comm_bytes[k] == measured->bytes_sent[k];
    if (!ok)
      fprintf(stderr, "rank %d: %s: %s planned %lld calls %lld bytes, communicator counted %lld calls %lld bytes\n",
              world_rank, what, mtf_collective_name((mtf_collective_kind)k), (long long)plan->comm_calls[k],
              (long long)plan->comm_bytes[k], (long long)measured->calls[k], (long long)measured->bytes_sent[k]);
    CHECK(ok);
  }
}

static void check_case(reshard_case *c, const mtf_shape *mesh, const char *layout, mtf_comm *comm, mtf_comm *self,
                       const expected *want) {
  mtf_layout_rules rules, none = {0};
  mtf_error err;
  mtf_shape one = {0};
  if (mtf_layout_rules_parse(layout, &rules, &err)) fail_job("layout", &err);
  float *ref[MAX_FETCH], *got[MAX_FETCH];
  run(c->g, &one, &none, self, c->n_fetch, c->fetches, ref, NULL, NULL);

  /* The resharded tensor alone: exactly the expected collectives, with the expected bytes. */
  mtf_plan_stats stats;
  mtf_comm_stats measured;
  run(c->g, mesh, &rules, comm, 1, c->fetches, NULL, &stats, &measured);
  check_counted(c->name, &stats, &measured);
  for (int k = 0; k < MTF_COLL_KINDS; k++) {
    if (want->calls[k] < 0) continue;
    int ok = stats.comm_calls[k] == want->calls[k] && llabs(stats.comm_bytes[k] - (int64_t)want->bytes[k]) <= 1;
    if (!ok)
      fprintf(stderr, "rank %d: %s: %s %lld calls %lld bytes, expected %d calls %.0f bytes\n", world_rank, c->name,
              mtf_collective_name((mtf_collective_kind)k), (long long)stats.comm_calls[k],
              (long long)stats.comm_bytes[k], want->calls[k], want->bytes[k]);
    CHECK(ok);
  }

  /* With the loss and the gradients (the moves back): values as on one rank, plan == communicator. */
  mtf_plan_stats full;
  run(c->g, mesh, &rules, comm, c->n_fetch, c->fetches, got, &full, &measured);
  check_counted(c->name, &full, &measured);
  double worst = 0;
  for (int i = 0; i < c->n_fetch; i++) {
    int64_t n = mtf_shape_num_elements(mtf_tensor_shape(c->g, c->fetches[i]));
    double scale = 1e-30, diff = 0;
    for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(ref[i][e]));
    for (int64_t e = 0; e < n; e++) diff = fmax(diff, fabs((double)got[i][e] - ref[i][e]));
    worst = fmax(worst, diff / scale);
    free(ref[i]);
    free(got[i]);
  }
  CHECK(worst <= 1e-5);
  if (world_rank == 0) {
    printf("%-10s %-26s max relative error %.1e; forward:", c->name, layout, worst);
    for (int k = 0; k < MTF_COLL_KINDS; k++)
      if (stats.comm_calls[k])
        printf(" %s %lld x %lld bytes", mtf_collective_name((mtf_collective_kind)k), (long long)stats.comm_calls[k],
               (long long)stats.comm_bytes[k]);
    printf("; with gradients:");
    for (int k = 0; k < MTF_COLL_KINDS; k++)
      if (full.comm_calls[k])
        printf(" %s %lld", mtf_collective_name((mtf_collective_kind)k), (long long)full.comm_calls[k]);
    printf("\n");
  }
}

/* Only the listed kinds may appear, with these calls and bytes. */
static expected only(void) {
  expected e;
  for (int k = 0; k < MTF_COLL_KINDS; k++) {
    e.calls[k] = 0;
    e.bytes[k] = 0;
  }
  return e;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  mtf_error err;
  mtf_shape mesh, one = {0};
  if (argc != 2 || mtf_mesh_parse(argv[1], &mesh, &err)) {
    fprintf(stderr, "usage: test_reshard MESH\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  mtf_comm *comm, *self;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err) || mtf_comm_mpi_create(MPI_COMM_SELF, &one, &self, &err))
    fail_job("communicator", &err);
  const char *A = mesh.dims[0].name;
  double G = (double)mesh.dims[0].size, F = 4.0; /* bytes per element */
  char layout[8 * MTF_NAME_MAX + 32];

  /* x [g:8, e:8, d:4] (256 elements), split on g, read as [gg, ee, d] split on ee: one alltoall of this
   * rank's 256 / G elements, (G-1)/G of it sent; both directions (split along dim 1 or 0) are packed. */
  reshard_case c = moved("alltoall", "gg:8,ee:8,d:4");
  expected e = only();
  e.calls[MTF_COLL_ALLTOALL] = 1;
  e.bytes[MTF_COLL_ALLTOALL] = (G - 1) / G * 256 / G * F;
  snprintf(layout, sizeof layout, "g:%s;ee:%s", A, A);
  check_case(&c, &mesh, layout, comm, self, &e);
  mtf_graph_destroy(c.g);

  /* A reshape of other sizes: g's split carries over to gq (both start at flat offset 0) and then moves to
   * r: one alltoall, as above, where gathering and slicing sent (G-1) * 256 / G * 4 bytes. */
  c = moved("reshape", "gq:4,r:16,d:4");
  snprintf(layout, sizeof layout, "g:%s;r:%s", A, A);
  check_case(&c, &mesh, layout, comm, self, &e);
  /* ... or stays on gq: no communication at all. */
  snprintf(layout, sizeof layout, "g:%s;gq:%s", A, A);
  expected nothing = only();
  check_case(&c, &mesh, layout, comm, self, &nothing);
  mtf_graph_destroy(c.g);

  /* z [i:8, j:8] = a . b summed over k split on A: partial sums of 64 elements; wanted split on jj (dim 1,
   * packed) or ii (dim 0): one reduce-scatter sending (G-1)/G of them, and no allreduce. */
  e = only();
  e.calls[MTF_COLL_REDUCE_SCATTER] = 1;
  e.bytes[MTF_COLL_REDUCE_SCATTER] = (G - 1) / G * 64 * F;
  c = summed("scatter", "i:8,jj:8");
  snprintf(layout, sizeof layout, "k:%s;jj:%s", A, A);
  check_case(&c, &mesh, layout, comm, self, &e);
  mtf_graph_destroy(c.g);
  c = summed("scatter", "ii:8,j:8");
  snprintf(layout, sizeof layout, "k:%s;ii:%s", A, A);
  check_case(&c, &mesh, layout, comm, self, &e);
  mtf_graph_destroy(c.g);

  if (mesh.rank == 2) {
    const char *B = mesh.dims[1].name;
    double H = (double)mesh.dims[1].size;
    /* The alltoall over A of a tensor also split on B: groups of the A axis only, 256 / (G H) elements. */
    c = moved("alltoall", "gg:8,ee:8,d:4");
    e = only();
    e.calls[MTF_COLL_ALLTOALL] = 1;
    e.bytes[MTF_COLL_ALLTOALL] = (G - 1) / G * 256 / (G * H) * F;
    snprintf(layout, sizeof layout, "g:%s;ee:%s;d:%s", A, A, B);
    check_case(&c, &mesh, layout, comm, self, &e);
    /* A cycle: g on A and e on B become gg on B and ee on A. Gathering A off g (256 / (G H) elements
     * in) frees g for B's alltoall (256 / H elements), and ee is then sliced for A. */
    e = only();
    e.calls[MTF_COLL_ALLGATHER] = 1;
    e.bytes[MTF_COLL_ALLGATHER] = (G - 1) * 256 / (G * H) * F;
    e.calls[MTF_COLL_ALLTOALL] = 1;
    e.bytes[MTF_COLL_ALLTOALL] = (H - 1) / H * 256 / H * F;
    snprintf(layout, sizeof layout, "g:%s;e:%s;gg:%s;ee:%s", A, B, B, A);
    check_case(&c, &mesh, layout, comm, self, &e);
    mtf_graph_destroy(c.g);
    /* Partial sums over A wanted split on B and A: the slice on B first, then the reduce-scatter of the
     * smaller sums. */
    c = summed("scatter", "ii:8,jj:8");
    e = only();
    e.calls[MTF_COLL_REDUCE_SCATTER] = 1;
    e.bytes[MTF_COLL_REDUCE_SCATTER] = (G - 1) / G * 64 / H * F;
    snprintf(layout, sizeof layout, "k:%s;jj:%s;ii:%s", A, A, B);
    check_case(&c, &mesh, layout, comm, self, &e);
    mtf_graph_destroy(c.g);
  }

  int status = check_mpi_summary();
  mtf_comm_destroy(comm);
  mtf_comm_destroy(self);
  MPI_Finalize();
  return status;
}
