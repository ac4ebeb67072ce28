#include "comm/world.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/agree.h"
#include "comm/mpi_comm.h"

static int started_here;
/* The job as a one-axis mesh, made on the first agreement (a collective call, so on every rank at once),
 * so that agreement before any mesh exists is the one of comm/agree.h. */
static mtf_comm *world_comm;

int mtf_world_init(int *argc, char ***argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return MTF_OK;
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return MTF_ERR_COMM;
  started_here = 1;
  return MTF_OK;
}

void mtf_world_finalize(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (world_comm && !finalized) mtf_comm_destroy(world_comm);
  world_comm = NULL;
  if (started_here && !finalized) MPI_Finalize();
}

static int mpi_running(void) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int mtf_world_rank(void) {
  int rank = 0;
  if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mtf_world_size(void) {
  int size = 1;
  if (mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int mtf_world_ranks_on_node(void) {
  static int cached;
  if (cached) return cached;
  if (!mpi_running()) return 1;
  MPI_Comm node;
  int size = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &size);
    MPI_Comm_free(&node);
  }
  cached = size;
  return size;
}

int mtf_world_broadcast(void *buf, size_t bytes, int root, mtf_error *err) {
  if (!mpi_running()) return MTF_OK;
  for (size_t done = 0; done < bytes;) {
    size_t part = bytes - done > (1u << 30) ? (1u << 30) : bytes - done;
    if (MPI_Bcast((char *)buf + done, (int)part, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
      return mtf_error_set(err, MTF_ERR_COMM, "broadcast of %zu bytes failed", bytes);
    done += part;
  }
  return MTF_OK;
}

int mtf_world_agree(int rc, mtf_error *err) {
  if (!mpi_running() || mtf_world_size() == 1) return rc;
  if (!world_comm) {
    mtf_shape mesh = {0};
    mtf_error create_err;
    if (mtf_shape_append(&mesh, "world", mtf_world_size(), &create_err) ||
        mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &world_comm, &create_err)) {
      if (err) *err = create_err;
      return create_err.code;
    }
  }
  return mtf_comm_agree(world_comm, rc, err);
}

static double reduce_double(double value, MPI_Op op) {
  if (!mpi_running()) return value;
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return value;
}

double mtf_world_max(double value) { return reduce_double(value, MPI_MAX); }
double mtf_world_sum(double value) { return reduce_double(value, MPI_SUM); }

int mtf_world_any(int flag) {
  if (!mpi_running()) return flag != 0;
  int any = flag != 0;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  return any;
}

_Noreturn void mtf_world_abort(int code, const char *what, const mtf_error *err) {
  fprintf(stderr, "mtf: rank %d: %s%s%s\n", mtf_world_rank(), what ? what : "", what && err ? ": " : "",
          err ? err->msg : "");
  fflush(stderr);
  fflush(stdout);
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

int mtf_comm_world_create(const mtf_shape *mesh, mtf_comm **out, mtf_error *err) {
  return mtf_comm_mpi_create(MPI_COMM_WORLD, mesh, out, err);
}

int mtf_comm_self_create(const mtf_shape *mesh, mtf_comm **out, mtf_error *err) {
  return mtf_comm_mpi_create(MPI_COMM_SELF, mesh, out, err);
}

void mtf_world_library_version(char *buf, size_t size) {
  if (!buf || size == 0) return;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  version[0] = '\0';
  MPI_Get_library_version(version, &len);
  version[MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
  version[strcspn(version, "\n,")] = '\0';
  snprintf(buf, size, "%s", version);
}
