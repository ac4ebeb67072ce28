/* Every collective over every set of mesh axes, on the mesh given as argv[1], checked against values
 * computed here from first principles: each rank q fills element i with value(q, i), and the expected
 * result is derived from the group members found by brute force over all ranks' coordinates. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "comm/mpi_comm.h"

static mtf_comm *comm;
static mtf_shape mesh;
static int world_size, world_rank;

static double value(int q, int64_t i) { return (double)(((q + 1) * 7919 + i * 104729) % 2003) - 1000.0; }

static void coord_of(int rank, int *coord) {
  int stride = world_size;
  for (int a = 0; a < mesh.rank; a++) {
    stride /= (int)mesh.dims[a].size;
    coord[a] = (rank / stride) % (int)mesh.dims[a].size;
  }
}

/* The ranks that share this rank's coordinates outside `axes`, ascending; returns their count and this
 * rank's position among them. */
static int members_of(mtf_axis_set axes, int *members, int *my_position) {
  int mine[MTF_MAX_MESH_AXES], n = 0;
  coord_of(world_rank, mine);
  for (int q = 0; q < world_size; q++) {
    int theirs[MTF_MAX_MESH_AXES], same = 1;
    coord_of(q, theirs);
    for (int a = 0; a < mesh.rank; a++)
      if (!(axes & (1u << a)) && theirs[a] != mine[a]) same = 0;
    if (!same) continue;
    if (q == world_rank) *my_position = n;
    members[n++] = q;
  }
  return n;
}

static void fill(void *buf, mtf_dtype dtype, int q, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double v = value(q, i);
    if (dtype == MTF_F32) ((float *)buf)[i] = (float)v;
    if (dtype == MTF_F64) ((double *)buf)[i] = v;
    if (dtype == MTF_I32) ((int32_t *)buf)[i] = (int32_t)v;
  }
}

static double get(const void *buf, mtf_dtype dtype, int64_t i) {
  if (dtype == MTF_F32) return ((const float *)buf)[i];
  if (dtype == MTF_F64) return ((const double *)buf)[i];
  return ((const int32_t *)buf)[i];
}

static int64_t count_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  return n;
}

static void unflatten(int rank, const int64_t *dims, int64_t flat, int64_t *index) {
  for (int d = rank - 1; d >= 0; d--) {
    index[d] = flat % dims[d];
    flat /= dims[d];
  }
}

static int64_t flatten(int rank, const int64_t *dims, const int64_t *index) {
  int64_t flat = 0;
  for (int d = 0; d < rank; d++) flat = flat * dims[d] + index[d];
  return flat;
}

static void run_ok(int rc, const mtf_error *err) {
  if (rc != MTF_OK) {
    fprintf(stderr, "rank %d: collective failed: %s\n", world_rank, err->msg);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

static void test_allreduce(mtf_axis_set axes) {
  int members[64], me = 0, g = members_of(axes, members, &me);
  const int64_t n = 37;
  mtf_dtype dtypes[3] = {MTF_F32, MTF_F64, MTF_I32};
  for (int t = 0; t < 3; t++)
    for (int op = MTF_REDUCE_SUM; op <= MTF_REDUCE_MIN; op++)
      for (int in_place = 0; in_place < 2; in_place++) {
        double in[64], out[64]; /* big enough for 37 doubles */
        fill(in, dtypes[t], world_rank, n);
        mtf_error err;
        run_ok(mtf_comm_allreduce(comm, axes, in, in_place ? in : out, (size_t)n, dtypes[t], (mtf_reduce_op)op, &err),
               &err);
        const void *result = in_place ? in : out;
        int wrong = 0;
        for (int64_t i = 0; i < n; i++) {
          double expect = value(members[0], i);
          for (int k = 1; k < g; k++) {
            double v = value(members[k], i);
            if (op == MTF_REDUCE_SUM) expect += v;
            if (op == MTF_REDUCE_MAX && v > expect) expect = v;
            if (op == MTF_REDUCE_MIN && v < expect) expect = v;
          }
          wrong += get(result, dtypes[t], i) != expect;
        }
        CHECK(wrong == 0);
      }
}

/* Non-blocking allreduces over every set of axes at once, interleaved with a blocking one, in flight
 * together, finished in reverse order (after tests that let them progress): each gives the sum of its
 * group, and large enough buffers (1 MiB) for MPI to need several rounds. */
static void test_iallreduce(void) {
  enum { SETS = 1 << MTF_MAX_MESH_AXES };
  const int64_t n = 1 << 18;
  unsigned sets = mtf_mesh_all_axes(&mesh) + 1;
  float *bufs[SETS];
  mtf_comm_request requests[SETS];
  mtf_error err;
  int64_t calls = comm->stats.calls[MTF_COLL_ALLREDUCE];
  for (unsigned axes = 0; axes < sets; axes++) {
    bufs[axes] = malloc(sizeof(float) * (size_t)n);
    fill(bufs[axes], MTF_F32, world_rank, n);
    run_ok(mtf_comm_iallreduce(comm, axes, bufs[axes], bufs[axes], (size_t)n, MTF_F32, MTF_REDUCE_SUM,
                               &requests[axes], &err), &err);
    CHECK(requests[axes].active);
    if (axes == 0) { /* a blocking collective while one is in flight */
      double small[5];
      fill(small, MTF_F64, world_rank, 5);
      run_ok(mtf_comm_allreduce(comm, mtf_mesh_all_axes(&mesh), small, small, 5, MTF_F64, MTF_REDUCE_MAX, &err), &err);
    }
  }
  for (int round = 0; round < 3; round++)
    for (unsigned axes = 0; axes < sets; axes++) {
      int done = -1;
      run_ok(mtf_comm_test(comm, &requests[axes], &done, &err), &err);
      CHECK(done == 0 || done == 1);
      CHECK(done == !requests[axes].active);
    }
  for (unsigned axes = sets; axes-- > 0;) {
    run_ok(mtf_comm_wait(comm, &requests[axes], &err), &err);
    CHECK(!requests[axes].active);
    int members[64], me = 0, g = members_of(axes, members, &me), wrong = 0;
    for (int64_t i = 0; i < n; i++) {
      float expect = (float)value(members[0], i);
      for (int k = 1; k < g; k++) expect += (float)value(members[k], i);
      wrong += bufs[axes][i] != expect;
    }
    CHECK(wrong == 0);
    /* Finished requests: wait returns at once, test reports done. */
    int done = 0;
    CHECK(mtf_comm_wait(comm, &requests[axes], &err) == MTF_OK);
    CHECK(mtf_comm_test(comm, &requests[axes], &done, &err) == MTF_OK && done == 1);
    free(bufs[axes]);
  }
  CHECK(comm->stats.calls[MTF_COLL_ALLREDUCE] == calls + sets + 1);
  mtf_comm_request unused;
  CHECK(mtf_comm_iallreduce(comm, 1u << mesh.rank, NULL, NULL, 0, MTF_F32, MTF_REDUCE_SUM, &unused, &err) ==
        MTF_ERR_INVALID);
  CHECK(!unused.active);
}

static void test_allgather(mtf_axis_set axes) {
  int members[64], me = 0, g = members_of(axes, members, &me);
  int64_t dims[3] = {2, 3, 4};
  int64_t n = count_of(3, dims);
  float *in = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)(n * g));
  fill(in, MTF_F32, world_rank, n);
  for (int axis = 0; axis < 3; axis++) {
    mtf_error err;
    run_ok(mtf_comm_allgather(comm, axes, in, out, MTF_F32, 3, dims, axis, &err), &err);
    int64_t out_dims[3] = {dims[0], dims[1], dims[2]};
    out_dims[axis] *= g;
    int wrong = 0;
    for (int64_t e = 0; e < n * g; e++) {
      int64_t index[3];
      unflatten(3, out_dims, e, index);
      int source = (int)(index[axis] / dims[axis]);
      index[axis] %= dims[axis];
      wrong += out[e] != (float)value(members[source], flatten(3, dims, index));
    }
    CHECK(wrong == 0);
  }
  free(in);
  free(out);
}

static void test_reduce_scatter(mtf_axis_set axes) {
  int members[64], me = 0, g = members_of(axes, members, &me);
  int64_t dims[3] = {2 * g, g, 3 * g};
  int64_t n = count_of(3, dims);
  double *in = malloc(sizeof(double) * (size_t)n), *out = malloc(sizeof(double) * (size_t)n);
  fill(in, MTF_F64, world_rank, n);
  for (int axis = 0; axis < 3; axis++)
    for (int op = MTF_REDUCE_SUM; op <= MTF_REDUCE_MAX; op++) {
      mtf_error err;
      run_ok(mtf_comm_reduce_scatter(comm, axes, in, out, MTF_F64, (mtf_reduce_op)op, 3, dims, axis, &err), &err);
      int64_t out_dims[3] = {dims[0], dims[1], dims[2]};
      out_dims[axis] /= g;
      int wrong = 0;
      for (int64_t e = 0; e < n / g; e++) {
        int64_t index[3];
        unflatten(3, out_dims, e, index);
        index[axis] += me * out_dims[axis];
        int64_t source = flatten(3, dims, index);
        double expect = value(members[0], source);
        for (int k = 1; k < g; k++) {
          double v = value(members[k], source);
          expect = op == MTF_REDUCE_SUM ? expect + v : (v > expect ? v : expect);
        }
        wrong += out[e] != expect;
      }
      CHECK(wrong == 0);
    }
  if (g > 1) {
    int64_t odd[2] = {g + 1, 2};
    mtf_error err;
    CHECK(mtf_comm_reduce_scatter(comm, axes, in, out, MTF_F64, MTF_REDUCE_SUM, 2, odd, 0, &err) == MTF_ERR_INVALID);
    CHECK_CONTAINS(err.msg, "which the group of");
  }
  free(in);
  free(out);
}

static void test_alltoall(mtf_axis_set axes) {
  int members[64], me = 0, g = members_of(axes, members, &me);
  int64_t dims[3] = {2 * g, g, 3 * g};
  int64_t n = count_of(3, dims);
  int32_t *in = malloc(sizeof(int32_t) * (size_t)n), *out = malloc(sizeof(int32_t) * (size_t)n);
  fill(in, MTF_I32, world_rank, n);
  for (int split = 0; split < 3; split++)
    for (int concat = 0; concat < 3; concat++) {
      mtf_error err;
      run_ok(mtf_comm_alltoall(comm, axes, in, out, MTF_I32, 3, dims, split, concat, &err), &err);
      int64_t block[3] = {dims[0], dims[1], dims[2]}, out_dims[3];
      block[split] /= g;
      memcpy(out_dims, block, sizeof block);
      out_dims[concat] *= g;
      int wrong = 0;
      for (int64_t e = 0; e < n; e++) {
        int64_t index[3];
        unflatten(3, out_dims, e, index);
        int source = (int)(index[concat] / block[concat]);
        index[concat] %= block[concat];
        index[split] += me * block[split]; /* the sender's slice `me` along the split axis */
        wrong += out[e] != (int32_t)value(members[source], flatten(3, dims, index));
      }
      CHECK(wrong == 0);
    }
  free(in);
  free(out);
}

/* Rank of the process that has this rank's coordinates except `position` along mesh axis `axis`. */
static int rank_at(int axis, int position) {
  int coord[MTF_MAX_MESH_AXES];
  coord_of(world_rank, coord);
  coord[axis] = position;
  int rank = 0;
  for (int a = 0; a < mesh.rank; a++) rank = rank * (int)mesh.dims[a].size + coord[a];
  return rank;
}

static void check_received(const float *out, int64_t n, int axis, int source_position) {
  int wrong = 0;
  for (int64_t i = 0; i < n; i++) {
    double expect = source_position < 0 ? 0.0 : value(rank_at(axis, source_position), i);
    wrong += out[i] != (float)expect;
  }
  CHECK(wrong == 0);
}

static void test_permute_and_shift(void) {
  const int64_t n = 19;
  float in[19], out[19];
  fill(in, MTF_F32, world_rank, n);
  int coord[MTF_MAX_MESH_AXES];
  coord_of(world_rank, coord);
  for (int axis = 0; axis < mesh.rank; axis++) {
    int len = (int)mesh.dims[axis].size, pos = coord[axis];
    int offsets[4] = {1, -1, 2, len + 1};
    for (int k = 0; k < 4; k++)
      for (int fill_mode = MTF_SHIFT_WRAP; fill_mode <= MTF_SHIFT_ZERO; fill_mode++) {
        mtf_error err;
        run_ok(mtf_comm_shift(comm, axis, in, out, (size_t)n, MTF_F32, offsets[k], (mtf_shift_fill)fill_mode, &err),
               &err);
        int src = pos - offsets[k];
        if (fill_mode == MTF_SHIFT_WRAP)
          src = ((src % len) + len) % len;
        else if (src < 0 || src >= len)
          src = -1;
        check_received(out, n, axis, src);
      }
    /* Reversal with position 0 receiving zeros. */
    int source_of[64];
    for (int j = 0; j < len; j++) source_of[j] = len - 1 - j;
    source_of[0] = -1;
    mtf_error err;
    run_ok(mtf_comm_permute(comm, axis, in, out, (size_t)n, MTF_F32, source_of, &err), &err);
    check_received(out, n, axis, source_of[pos]);
    if (len > 1) {
      for (int j = 0; j < len; j++) source_of[j] = 0;
      CHECK(mtf_comm_permute(comm, axis, in, out, (size_t)n, MTF_F32, source_of, &err) == MTF_ERR_INVALID);
      CHECK_CONTAINS(err.msg, "position 0 is the source of both");
    }
  }
  mtf_error err;
  CHECK(mtf_comm_shift(comm, mesh.rank, in, out, (size_t)n, MTF_F32, 1, MTF_SHIFT_WRAP, &err) == MTF_ERR_INVALID);
}

static void test_broadcast(mtf_axis_set axes) {
  int members[64], me = 0, g = members_of(axes, members, &me);
  const int64_t n = 23;
  for (int root = 0; root < g; root++) {
    double buf[23];
    fill(buf, MTF_F64, world_rank, n);
    mtf_error err;
    run_ok(mtf_comm_broadcast(comm, axes, buf, (size_t)n, MTF_F64, root, &err), &err);
    int wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += buf[i] != value(members[root], i);
    CHECK(wrong == 0);
  }
  double x = 0;
  mtf_error err;
  CHECK(mtf_comm_broadcast(comm, axes, &x, 1, MTF_F64, g, &err) == MTF_ERR_INVALID);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  mtf_error err;
  if (argc != 2 || mtf_mesh_parse(argv[1], &mesh, &err) != MTF_OK) {
    if (world_rank == 0) fprintf(stderr, "usage: test_comm MESH (%s)\n", argc == 2 ? err.msg : "no mesh given");
    MPI_Finalize();
    return 2;
  }
  run_ok(mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err), &err);
  CHECK(comm->rank == world_rank && comm->size == world_size);

  for (mtf_axis_set axes = 0; axes <= mtf_mesh_all_axes(&mesh); axes++) {
    /* The sub-communicator must hold exactly the brute-force group, in member order. */
    int members[64], me = 0, g = members_of(axes, members, &me);
    MPI_Comm group = mtf_comm_mpi_group(comm, axes);
    int group_size = 0, group_rank = -1;
    MPI_Comm_size(group, &group_size);
    MPI_Comm_rank(group, &group_rank);
    CHECK(group_size == g && group_rank == me);
    CHECK(mtf_comm_group_size(comm, axes) == g && mtf_comm_group_position(comm, axes) == me);

    test_allreduce(axes);
    test_allgather(axes);
    test_reduce_scatter(axes);
    test_alltoall(axes);
    test_broadcast(axes);
  }
  test_permute_and_shift();
  test_iallreduce();
  CHECK(mtf_comm_allreduce(comm, 1u << mesh.rank, NULL, NULL, 0, MTF_F32, MTF_REDUCE_SUM, &err) == MTF_ERR_INVALID);
  CHECK(comm->stats.calls[MTF_COLL_ALLREDUCE] > 0 && comm->stats.calls[MTF_COLL_ALLTOALL] > 0);

  int counts[2] = {check_passed, check_failed}, totals[2];
  MPI_Reduce(counts, totals, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  mtf_comm_destroy(comm);
  MPI_Finalize();
  if (world_rank == 0) {
    printf("mesh %s on %d ranks: ", argv[1], world_size);
    printf("%d passed, %d failed\n", totals[0], totals[1]);
    return totals[1] ? 1 : 0;
  }
  return check_failed ? 1 : 0;
}
