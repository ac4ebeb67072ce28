/* Saving and restoring checkpoints with parallel HDF5 (see checkpoint.h and docs/CHECKPOINTS.md). */
#define _POSIX_C_SOURCE 200809L
#include "ckpt/checkpoint.h"
#include "core/paths.h"

#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <errno.h>

#include "ckpt/ckpt_attr.h"
#include "comm/agree.h"
#include "comm/mpi_comm.h" /* the communicator parallel HDF5 opens files on */
#include "comm/world.h"
#include "core/clock.h"
#include "io/h5_checked.h"
#include "io/shard.h"

/* Test hook (docs/CHECKPOINTS.md, "Faults"): MTF_CKPT_FAIL_AFTER_BYTES=N makes this rank's part of a
 * dataset write fail as a full disk does (ENOSPC) once it has written N bytes of the current checkpoint;
 * the rank still takes part in the collective H5Dwrite (selecting nothing), as a rank whose write() fails
 * does. Compiled in always; unset, it costs one getenv per save. */
static int64_t fail_after_bytes(void) {
  const char *text = getenv("MTF_CKPT_FAIL_AFTER_BYTES");
  char *end;
  long long n = text && text[0] ? strtoll(text, &end, 10) : -1;
  return text && text[0] && *end == '\0' && n >= 0 ? (int64_t)n : -1;
}

/* The job-wide sums of a few counters (a failure flag, a checksum's partial sums), modulo 2^64. */
static int sum_u64(const mtf_ckpt_model *m, uint64_t *values, int n) {
  mtf_hdf5_unlock(); /* no HDF5 lock while waiting for slower ranks */
  int rc = mtf_comm_mpi_sum_u64(m->comm, values, n);
  mtf_hdf5_lock();
  return rc;
}

static int agree_unlocked(const mtf_ckpt_model *m, int rc, mtf_error *err) {
  mtf_hdf5_unlock();
  rc = mtf_comm_agree(m->comm, rc, err);
  mtf_hdf5_lock();
  return rc;
}

/* The slowest rank's time (every rank of the job takes part). */
static double slowest(double seconds) { return mtf_world_max(seconds); }

/* Elements of the largest slice of a variable this rank holds: the size of the host staging buffer that
 * every variable passes through on its way between the session and the file. */
static int64_t max_slice_elements(const mtf_ckpt_model *m) {
  int64_t most = 1;
  for (int i = 0; i < mtf_graph_num_variables(m->graph); i++) {
    int64_t n = mtf_plan_slice_elements(m->plan, mtf_graph_variable(m->graph, i));
    if (n > most) most = n;
  }
  return most;
}

static int is_param(const mtf_ckpt_model *m, int node) {
  for (int k = 0; k < m->n_params; k++)
    if (m->params[k] == node) return 1;
  return 0;
}

static hid_t mpio_access(const mtf_ckpt_model *m) {
  MPI_Comm world = mtf_comm_mpi_world(m->comm);
  if (world == MPI_COMM_NULL) return -1; /* checkpoints are written through MPI-IO */
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return -1;
  /* Metadata operations are collective anyway (every rank makes every call); saying so lets HDF5 read and
   * write metadata once instead of once per rank. */
  if (H5Pset_fapl_mpio(fapl, world, MPI_INFO_NULL) < 0 || H5Pset_all_coll_metadata_ops(fapl, 1) < 0 ||
      H5Pset_coll_metadata_write(fapl, 1) < 0) {
    H5Pclose(fapl);
    return -1;
  }
  return fapl;
}

/* This rank's hyperslab of variable `node`: start and count per dimension, and whether it writes it (the
 * rank at coordinate 0 on every mesh axis the variable is replicated over). */
static void own_hyperslab(const mtf_ckpt_model *m, const mtf_tensor_layout *layout, hsize_t *start, hsize_t *count,
                          int *writer) {
  const mtf_shape *mesh = mtf_plan_mesh(m->plan);
  int coord[MTF_MAX_MESH_AXES] = {0};
  mtf_mesh_rank_to_coord(mesh, m->comm->rank, coord);
  mtf_shape slice = mtf_layout_slice_shape(layout, mesh);
  int64_t offset[MTF_MAX_RANK] = {0};
  mtf_layout_slice_offset(layout, mesh, coord, offset);
  for (int d = 0; d < slice.rank; d++) {
    start[d] = (hsize_t)offset[d];
    count[d] = (hsize_t)slice.dims[d].size;
  }
  mtf_axis_set split = mtf_layout_split_axes(layout);
  *writer = 1;
  for (int a = 0; a < mesh->rank; a++)
    if (!(split & (1u << a)) && coord[a] != 0) *writer = 0;
}

/* Selects the hyperslab in file_space and makes the matching memory space (or selects nothing in both). */
static hid_t select_slab(hid_t file_space, int rank, const hsize_t *start, const hsize_t *count, int selected) {
  hid_t mem_space = rank > 0 ? H5Screate_simple(rank, count, NULL) : H5Screate(H5S_SCALAR);
  if (mem_space < 0) return -1;
  herr_t ok = 0;
  if (!selected)
    ok = (H5Sselect_none(file_space) < 0 || H5Sselect_none(mem_space) < 0) ? -1 : 0;
  else if (rank > 0)
    ok = H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL);
  if (ok < 0) {
    H5Sclose(mem_space);
    return -1;
  }
  return mem_space;
}

/* Creates the dataset of variable `node` with its attributes and writes this rank's part, copied out of
 * the session into `staging` first; *dset_out keeps the dataset open for its checksum attribute and
 * *partial gets this rank's share of the checksum. Collective; a failure is this rank's alone, and the
 * caller agrees on it before the next collective call. */
static const char *write_variable(const mtf_ckpt_model *m, hid_t group, hid_t dxpl, mtf_tensor node, float *staging,
                                  int64_t *bytes, int64_t *written, int64_t fail_after, hid_t *dset_out,
                                  uint64_t *partial, int *errno_out) {
  const mtf_shape *shape = mtf_tensor_shape(m->graph, node);
  const char *var_name = mtf_tensor_name(m->graph, node);
  const mtf_tensor_layout *layout = mtf_plan_layout(m->plan, node);
  char name[MTF_CKPT_PATH_MAX];
  mtf_error read_err;
  *dset_out = -1;
  *partial = 0;
  *errno_out = 0;
  if (!layout || !shape) return "a variable is not held by the training plan";
  if (mtf_session_read_slice(m->session, node, staging, &read_err) != MTF_OK)
    return "copying a variable out of the session";
  if (mtf_ckpt_dataset_name(var_name, name, sizeof name) != 0) return "a variable name is empty or contains '.'";
  int rank = shape->rank;
  hsize_t dims[MTF_MAX_RANK], start[MTF_MAX_RANK], count[MTF_MAX_RANK];
  const char *dim_names[MTF_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    dims[d] = (hsize_t)shape->dims[d].size;
    dim_names[d] = shape->dims[d].name;
  }
  int writer;
  own_hyperslab(m, layout, start, count, &writer);
  int64_t mine = 0;
  if (writer) {
    mine = (int64_t)sizeof(float);
    for (int d = 0; d < rank; d++) mine *= (int64_t)count[d];
    if (fail_after >= 0 && *written + mine > fail_after) writer = 0, *errno_out = ENOSPC; /* the test hook */
  }
  hid_t file_space = rank > 0 ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const char *failure = NULL;
  /* Every element is written, so HDF5 need not write fill values first. */
  if (file_space < 0 || dcpl < 0 || H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0) failure = "H5Screate/H5Pcreate";
  hid_t dset = failure ? -1 : H5Dcreate2(group, name, H5T_IEEE_F32LE, file_space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (!failure && dset < 0) failure = "H5Dcreate";
  if (!failure && (mtf_ckpt_attr_write_string(dset, "variable", var_name) ||
                   mtf_ckpt_attr_write_strings(dset, "dims", rank, dim_names) ||
                   mtf_ckpt_attr_write_string(dset, "kind", is_param(m, node) ? "parameter" : "optimizer_slot")))
    failure = "writing dataset attributes";
  hid_t mem_space = failure ? -1 : select_slab(file_space, rank, start, count, writer);
  if (!failure && mem_space < 0) failure = "selecting the hyperslab";
  errno = 0;
  if (!failure && H5Dwrite(dset, H5T_NATIVE_FLOAT, mem_space, file_space, dxpl, staging) < 0) {
    failure = "H5Dwrite";
    if (!*errno_out) *errno_out = errno;
  }
  if (!failure && *errno_out) failure = "H5Dwrite";
  if (!failure && writer) {
    uint64_t dims64[MTF_MAX_RANK], start64[MTF_MAX_RANK], count64[MTF_MAX_RANK];
    for (int d = 0; d < rank; d++) dims64[d] = dims[d], start64[d] = start[d], count64[d] = count[d];
    *partial = mtf_ckpt_checksum_slab(staging, rank, dims64, start64, count64);
    *written += mine;
  }
  *bytes += mtf_shape_num_elements(shape) * (int64_t)sizeof(float);
  if (mem_space >= 0) H5Sclose(mem_space);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (file_space >= 0) H5Sclose(file_space);
  if (failure && dset >= 0) H5Dclose(dset), dset = -1;
  *dset_out = dset;
  return failure;
}

/* This rank's description of a failed write: "disk full" when the file system says so. */
static int write_failure(const char *tmp_path, const char *what, int error_number, mtf_error *err) {
  char dir[2 * MTF_CKPT_PATH_MAX + 8];
  snprintf(dir, sizeof dir, "%s", tmp_path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  struct statvfs fs;
  int full = error_number == ENOSPC || error_number == EDQUOT ||
             (statvfs(dir, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < ((uint64_t)1 << 20));
  if (full)
    return mtf_error_set(err, MTF_ERR_IO, "writing checkpoint '%s' failed (%s): disk full: no space left on the file "
                         "system of '%s'. The partial file is removed and the previous checkpoint is intact; free "
                         "space there or point run.dir elsewhere, then resume", tmp_path, what, dir);
  return mtf_error_set(err, MTF_ERR_IO, "writing checkpoint '%s' failed (%s%s%s). The partial file is removed and the "
                       "previous checkpoint is intact; check free space and permissions of '%s'", tmp_path, what,
                       error_number ? ": " : "", error_number ? strerror(error_number) : "", dir);
}

static char *config_text(const mtf_config *cfg) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) return NULL;
  mtf_config_print(cfg, f);
  fclose(f);
  return text;
}

static const char *write_root_attributes(hid_t file, const mtf_config *cfg, const mtf_ckpt_state *st, int ranks) {
  char mesh[MTF_SHAPE_STR_MAX];
  mtf_shape_format(&cfg->mesh_shape, mesh, sizeof mesh);
  char *yaml = config_text(cfg);
  int bad = !yaml || mtf_ckpt_attr_write_i64(file, "format_version", MTF_CKPT_FORMAT_VERSION) ||
            mtf_ckpt_attr_write_i64(file, "step", st->step) ||
            mtf_ckpt_attr_write_i64(file, "rng_seed", (int64_t)st->rng_seed) ||
            mtf_ckpt_attr_write_i64(file, "rng_offset", (int64_t)st->rng_offset) ||
            mtf_ckpt_attr_write_i64(file, "data_seed", (int64_t)st->cursor.seed) ||
            mtf_ckpt_attr_write_i64(file, "data_epoch", st->cursor.epoch) ||
            mtf_ckpt_attr_write_i64(file, "data_position", st->cursor.position) ||
            mtf_ckpt_attr_write_i64(file, "data_windows", st->cursor.windows) ||
            mtf_ckpt_attr_write_string(file, "mesh", mesh) || mtf_ckpt_attr_write_i64(file, "mesh_ranks", ranks) ||
            mtf_ckpt_attr_write_string(file, "layout", cfg->mesh_layout) ||
            mtf_ckpt_attr_write_string(file, "config", yaml);
  free(yaml);
  return bad ? "writing file attributes" : NULL;
}

/* Test hook (tests/ckpt): MTF_CKPT_TEST_STALL=STEP:SECONDS sleeps halfway through writing step STEP's
 * checkpoint, so that a test can kill the job in the middle of a write. */
static void stall_for_tests(int rank, int64_t step) {
  const char *text = getenv("MTF_CKPT_TEST_STALL");
  long long stall_step = -1, seconds = 0;
  if (!text || sscanf(text, "%lld:%lld", &stall_step, &seconds) != 2 || stall_step != step || seconds <= 0) return;
  if (rank == 0) fprintf(stderr, "mtf: checkpoint: stalling %lld s in the middle of step %lld's write\n", seconds, stall_step);
  fflush(stderr);
  sleep((unsigned)seconds);
}

/* Writes the whole file at tmp_path. A failure on any rank is agreed on after each dataset, so every rank
 * leaves the sequence of collective calls at the same point, closes the file together with the others and
 * returns the same error; rank 0 then removes the partial file (the previous checkpoint is untouched). */
static int write_file(const mtf_ckpt_model *m, const mtf_config *cfg, const mtf_ckpt_state *st, const char *tmp_path,
                      const mtf_ckpt_tokenizer *tok, float *staging, int64_t *bytes, mtf_error *err) {
  hid_t fapl = mpio_access(m);
  /* H5F_ACC_EXCL: rank 0 removed any stale file or planted link of this name, and an exclusive create
   * fails on whatever appears there since (a symlink included) instead of writing through it. */
  hid_t file = fapl >= 0 ? H5Fcreate(tmp_path, H5F_ACC_EXCL, H5P_DEFAULT, fapl) : -1;
  if (fapl >= 0) H5Pclose(fapl);
  int rc = file < 0 ? mtf_error_set(err, MTF_ERR_IO, "cannot create checkpoint file '%s' (is the run directory "
                                    "writable, on a file system all ranks share, and free of a planted file of "
                                    "that name?)", tmp_path)
                    : MTF_OK;
  rc = agree_unlocked(m, rc, err);
  if (rc != MTF_OK) {
    if (file >= 0) H5Fclose(file);
    return rc;
  }
  int64_t fail_after = fail_after_bytes(), written = 0;
  int error_number = 0;
  const char *failure = write_root_attributes(file, cfg, st, m->comm->size);
  hid_t group = failure ? -1 : H5Gcreate2(file, "variables", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (!failure && (group < 0 || dxpl < 0 || H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) < 0))
    failure = "creating /variables";
  if (!failure) failure = mtf_ckpt_tokenizer_write(file, tok, m->comm->rank == 0, dxpl);
  int n_variables = mtf_graph_num_variables(m->graph);
  for (int i = 0; i < n_variables; i++) {
    if (mtf_variable_is_transient(m->graph, mtf_graph_variable(m->graph, i))) continue; /* not model state */
    hid_t dset = -1;
    uint64_t sums[2] = {0, 0}; /* ranks that failed, this rank's part of the checksum */
    if (!failure)
      failure = write_variable(m, group, dxpl, mtf_graph_variable(m->graph, i), staging, bytes, &written, fail_after,
                               &dset, &sums[1], &error_number);
    sums[0] = failure ? 1 : 0;
    if (sum_u64(m, sums, 2) != 0 && !failure) failure = "MPI_Allreduce";
    if (sums[0] > 0 || failure) { /* some rank failed: all leave here */
      if (dset >= 0) H5Dclose(dset);
      break;
    }
    if (mtf_ckpt_attr_write_u64(dset, "checksum", sums[1]) != 0) failure = "writing the checksum attribute";
    H5Dclose(dset);
    if (i + 1 == n_variables / 2) stall_for_tests(m->comm->rank, st->step);
  }
  /* Past a failure HDF5 cannot close the file in step: its close flushes metadata, and a rank whose flush
   * fails skips the synchronisations the others wait in. So a failure every rank has agreed on ends the
   * job here, with the failing rank's reason on every rank, the partial file removed and the previous
   * checkpoint untouched. */
  uint64_t any_failed = failure ? 1 : 0; /* a failure after the last agreement (the last checksum attribute) */
  if (sum_u64(m, &any_failed, 1) != 0) any_failed = 1;
  if (any_failed) {
    int code = failure ? write_failure(tmp_path, failure, error_number, err) : MTF_OK;
    (void)agree_unlocked(m, code, err); /* every rank gets the lowest failing rank's reason */
    if (m->comm->rank == 0) unlink(tmp_path);
    mtf_world_abort(1, NULL, err);
  }
  /* Written last: a file with this attribute got through every dataset. */
  if (mtf_ckpt_attr_write_i64(file, "complete", 1)) failure = "writing the 'complete' attribute";
  if (dxpl >= 0) H5Pclose(dxpl);
  if (group >= 0) H5Gclose(group);
  /* Flushed before the close, so that the close has nothing left to write: a rank whose flush fails ends
   * the job at once (the others may be waiting inside HDF5 for it). */
  if (!failure && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) failure = "H5Fflush", error_number = errno;
  if (failure) {
    write_failure(tmp_path, failure, error_number, err);
    unlink(tmp_path);
    mtf_world_abort(1, NULL, err);
  }
  uint64_t failed = 0;
  if (sum_u64(m, &failed, 1) != 0) {
    mtf_error_set(err, MTF_ERR_COMM, "writing checkpoint '%s': MPI_Allreduce failed", tmp_path);
    mtf_world_abort(1, NULL, err);
  }
  if (H5Fclose(file) < 0) {
    write_failure(tmp_path, "H5Fclose", errno, err);
    unlink(tmp_path);
    mtf_world_abort(1, NULL, err);
  }
  return MTF_OK;
}

/* Refuses a save that cannot fit (before any rank creates the file, so the run ends cleanly): the
 * datasets' bytes plus room for metadata, against the space the file system of dir has left. */
static int check_space(const mtf_ckpt_model *m, const char *dir, mtf_error *err) {
  struct statvfs fs;
  if (statvfs(dir, &fs) != 0) return MTF_OK; /* unknown: the write itself will tell */
  uint64_t need = (uint64_t)32 << 10, have = (uint64_t)fs.f_bavail * fs.f_frsize;
  for (int i = 0; i < mtf_graph_num_variables(m->graph); i++)
    if (!mtf_variable_is_transient(m->graph, mtf_graph_variable(m->graph, i)))
      need += 2048 + (uint64_t)mtf_shape_num_elements(mtf_tensor_shape(m->graph, mtf_graph_variable(m->graph, i))) *
                       sizeof(float);
  if (have >= need) return MTF_OK;
  return mtf_error_set(err, MTF_ERR_IO, "cannot save a checkpoint in '%s': disk full: the file system has %llu bytes "
                       "free and the checkpoint needs about %llu. The previous checkpoint is intact; free space there "
                       "(train.keep_checkpoints keeps fewer) or point run.dir elsewhere, then resume", dir,
                       (unsigned long long)have, (unsigned long long)need);
}

int mtf_ckpt_save(const mtf_ckpt_model *m, const mtf_config *cfg, const mtf_ckpt_state *st, const char *dir, int64_t keep,
                  char *path_out, size_t path_size, mtf_ckpt_stats *stats, mtf_error *err) {
  char name[MTF_CKPT_PATH_MAX] = "";
  int rc = MTF_OK;
  if (m->comm->rank == 0) {
    rc = mtf_ckpt_dir_make(dir, err);
    if (rc == MTF_OK) rc = mtf_ckpt_dir_new_name(dir, st->step, name, sizeof name, err);
    if (rc == MTF_OK) rc = mtf_ckpt_dir_clear_tmp(dir, name, err);
    if (rc == MTF_OK) rc = check_space(m, dir, err);
  }
  float *staging = malloc(sizeof(float) * (size_t)max_slice_elements(m));
  if (rc == MTF_OK && !staging)
    rc = mtf_error_set(err, MTF_ERR_NOMEM, "saving a checkpoint: out of memory for the staging buffer");
  /* The same shards on every rank give the same tokenizer (or the same warning). */
  char warning[MTF_ERROR_MSG_MAX + 128];
  const mtf_ckpt_tokenizer *tok = mtf_ckpt_tokenizer_of_data(cfg->data_train, warning, sizeof warning);
  static int warned;
  if (warning[0] && !warned && m->comm->rank == 0) {
    fprintf(stderr, "mtf: warning: %s\n", warning);
    fflush(stderr);
  }
  warned = warned || warning[0];
  rc = mtf_comm_agree(m->comm, rc, err);
  if (rc == MTF_OK) rc = mtf_world_broadcast(name, sizeof name, 0, err);
  if (rc != MTF_OK) {
    free(staging);
    return rc;
  }
  char path[2 * MTF_CKPT_PATH_MAX], tmp_path[2 * MTF_CKPT_PATH_MAX + 8];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp_path, sizeof tmp_path, "%s.tmp", path);
  double start = mtf_now_seconds();
  int64_t bytes = 0;
  mtf_hdf5_lock();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  rc = write_file(m, cfg, st, tmp_path, tok, staging, &bytes, err);
  mtf_hdf5_unlock();
  free(staging);
  MTF_CHECK(rc);
  if (m->comm->rank == 0) {
    rc = mtf_ckpt_dir_commit(dir, name, err);
    if (rc == MTF_OK) mtf_ckpt_dir_prune(dir, name, keep);
  }
  MTF_CHECK(mtf_comm_agree(m->comm, rc, err));
  double seconds = slowest(mtf_now_seconds() - start);
  if (stats) {
    stats->bytes = bytes;
    stats->seconds = seconds;
  }
  if (path_out) snprintf(path_out, path_size, "%s", path);
  return MTF_OK;
}

/* ---- restore ---- */

static int read_state(hid_t file, const char *path, mtf_ckpt_state *st, mtf_error *err) {
  int64_t version = 0, complete = 0, values[7];
  if (H5Lexists(file, "tokens", H5P_DEFAULT) > 0 && H5Lexists(file, "variables", H5P_DEFAULT) <= 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "'%s' is a token shard, not a checkpoint (it holds a 'tokens' "
                         "dataset and no /variables): name a ckpt-<step>.h5 file of a run's checkpoints directory",
                         path);
  if (mtf_ckpt_attr_read_i64(file, "format_version", &version) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' has no format_version attribute: not an mtf checkpoint, "
                         "or damaged", path);
  if (version != MTF_CKPT_FORMAT_VERSION)
    return mtf_error_set(err, MTF_ERR_INVALID, "checkpoint '%s' has format version %lld; this mtf reads version %d "
                         "(use the mtf that wrote it)", path, (long long)version, MTF_CKPT_FORMAT_VERSION);
  if (mtf_ckpt_attr_read_i64(file, "complete", &complete) != 0 || complete != 1)
    return mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' is incomplete (its writer stopped before the end)", path);
  const char *keys[7] = {"step", "rng_seed", "rng_offset", "data_seed", "data_epoch", "data_position", "data_windows"};
  for (int k = 0; k < 7; k++)
    if (mtf_ckpt_attr_read_i64(file, keys[k], &values[k]) != 0)
      return mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' lacks its '%s' attribute (damaged)", path, keys[k]);
  for (int k = 0; k < 7; k++)
    if (values[k] < 0 && k != 1 && k != 3) /* the two seeds are unsigned, stored bit for bit */
      return mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' has a negative '%s' (%lld): damaged, or not written by "
                           "mtf", path, keys[k], (long long)values[k]);
  st->step = values[0];
  st->rng_seed = (uint64_t)values[1];
  st->rng_offset = (uint64_t)values[2];
  st->cursor = (mtf_loader_cursor){(uint64_t)values[3], values[4], values[5], values[6]};
  return MTF_OK;
}

static void format_dims(int rank, char (*names)[MTF_NAME_MAX], const hsize_t *sizes, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < rank && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s:%llu", d ? ", " : "", names[d], (unsigned long long)sizes[d]);
  if (used < size) snprintf(buf + used, size - used, "]");
}

/* Checks variable `node` against its dataset and reads this rank's hyperslab into the session. */
static int read_variable(const mtf_ckpt_model *m, hid_t group, hid_t dxpl, mtf_tensor node, int required,
                         const char *path, float *staging, int64_t *bytes, uint64_t sums[2], int *read,
                         uint64_t *stored, int *has_checksum, mtf_error *err) {
  const mtf_shape *var_shape = mtf_tensor_shape(m->graph, node);
  const char *var_name = mtf_tensor_name(m->graph, node);
  char name[MTF_CKPT_PATH_MAX], want[MTF_SHAPE_STR_MAX], have[MTF_SHAPE_STR_MAX];
  if (mtf_ckpt_dataset_name(var_name, name, sizeof name) != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "variable name '%s' cannot be a checkpoint dataset", var_name);
  if (H5Lexists(group, name, H5P_DEFAULT) <= 0)
    return required ? mtf_error_set(err, MTF_ERR_INVALID, "checkpoint '%s' has no variable '%s' (dataset variables/%s): "
                                    "it was written by a different model or optimizer than this config's; restore it "
                                    "with the config it holds (mtf ckpt inspect) or start with --fresh",
                                    path, var_name, name)
                    : MTF_OK;
  hid_t dset = H5Dopen2(group, name, H5P_DEFAULT);
  hid_t space = dset >= 0 ? H5Dget_space(dset) : -1;
  hid_t type = dset >= 0 ? H5Dget_type(dset) : -1;
  char dims[MTF_MAX_RANK][MTF_NAME_MAX], model_dims[MTF_MAX_RANK][MTF_NAME_MAX];
  hsize_t sizes[MTF_MAX_RANK], model_sizes[MTF_MAX_RANK];
  int n_dims = -1, rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  int rc = MTF_OK;
  if (space < 0 || type < 0 || rank < 0 || rank > MTF_MAX_RANK ||
      mtf_ckpt_attr_read_strings(dset, "dims", dims, MTF_MAX_RANK, &n_dims) != 0 || n_dims != rank)
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': dataset variables/%s is unreadable or lacks its dims "
                       "attribute (damaged)", path, name);
  if (rc == MTF_OK && (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4))
    rc = mtf_error_set(err, MTF_ERR_INVALID, "checkpoint '%s': variable '%s' is not float32", path, var_name);
  /* Storage never written reads as the fill value (zeros), which an older checkpoint without checksums
   * would restore silently: only data stored in this file is read (as mtf ckpt verify does). */
  mtf_error why;
  if (rc == MTF_OK && mtf_h5_check_dataset(group, name, dset, "", &why) != MTF_OK)
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': dataset variables/%s is not stored in full (damaged)%s", path,
                       name, why.msg);
  if (rc == MTF_OK) {
    H5Sget_simple_extent_dims(space, sizes, NULL);
    int same = rank == var_shape->rank;
    for (int d = 0; d < var_shape->rank; d++) {
      model_sizes[d] = (hsize_t)var_shape->dims[d].size;
      snprintf(model_dims[d], MTF_NAME_MAX, "%s", var_shape->dims[d].name);
      if (same) same = sizes[d] == model_sizes[d] && strcmp(dims[d], model_dims[d]) == 0;
    }
    if (!same) {
      format_dims(rank, dims, sizes, have, sizeof have);
      format_dims(var_shape->rank, model_dims, model_sizes, want, sizeof want);
      rc = mtf_error_set(err, MTF_ERR_INVALID, "checkpoint '%s': variable '%s' has shape %s in the checkpoint but %s "
                         "in this config's model; restore it with the model it was trained with (mtf ckpt inspect "
                         "shows its config) or start with --fresh", path, var_name, have, want);
    }
  }
  const mtf_tensor_layout *layout = mtf_plan_layout(m->plan, node);
  if (rc == MTF_OK && layout) { /* the same on every rank: the plan holds a variable or not */
    hsize_t start[MTF_MAX_RANK], count[MTF_MAX_RANK];
    int writer;
    own_hyperslab(m, layout, start, count, &writer);
    hid_t mem_space = select_slab(space, rank, start, count, 1);
    if (mem_space < 0 || H5Dread(dset, H5T_NATIVE_FLOAT, mem_space, space, dxpl, staging) < 0)
      rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': reading variable '%s' failed (damaged file)", path, var_name);
    if (mem_space >= 0) H5Sclose(mem_space);
    *read = 1;
    /* The writers under this plan partition the tensor, as they did when it was saved: their partial
     * checksums add up to the dataset's. Non-finite values are counted on the same elements. */
    if (rc == MTF_OK && writer) {
      uint64_t dims64[MTF_MAX_RANK], start64[MTF_MAX_RANK], count64[MTF_MAX_RANK], elements = 1;
      for (int d = 0; d < rank; d++)
        dims64[d] = sizes[d], start64[d] = start[d], count64[d] = count[d], elements *= count[d];
      sums[0] = mtf_ckpt_checksum_slab(staging, rank, dims64, start64, count64);
      for (uint64_t k = 0; k < elements; k++) sums[1] += !isfinite(staging[k]);
    }
    *has_checksum = mtf_ckpt_attr_read_u64(dset, "checksum", stored) == 0; /* absent in older checkpoints */
    /* Into the session through its backend (host memory or a device's). */
    if (rc == MTF_OK && mtf_session_write_variable(m->session, node, staging, err) != MTF_OK)
      mtf_error_prefix(err, "checkpoint '%s': restoring variable '%s'", path, var_name);
    *bytes += mtf_shape_num_elements(var_shape) * (int64_t)sizeof(float);
  }
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  if (dset >= 0) H5Dclose(dset);
  return rc;
}

/* Training restores every variable, so a dataset the model lacks means the model changed. */
static int check_no_extra(const mtf_ckpt_model *m, hid_t group, const char *path, mtf_error *err) {
  H5G_info_t info;
  if (H5Gget_info(group, &info) < 0)
    return mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': cannot list /variables (damaged)", path);
  for (hsize_t i = 0; i < info.nlinks; i++) {
    char link[MTF_CKPT_PATH_MAX], name[MTF_CKPT_PATH_MAX];
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, link, sizeof link, H5P_DEFAULT) < 0)
      return mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': cannot list /variables (damaged)", path);
    int known = 0;
    for (int n = 0; n < mtf_graph_num_variables(m->graph) && !known; n++)
      known = mtf_ckpt_dataset_name(mtf_tensor_name(m->graph, mtf_graph_variable(m->graph, n)), name, sizeof name) == 0 &&
              strcmp(name, link) == 0;
    if (!known) {
      for (char *c = name + snprintf(name, sizeof name, "%s", link) - 1; c >= name; c--) /* back to '/' names */
        if (*c == '.') *c = '/';
      return mtf_error_set(err, MTF_ERR_INVALID, "checkpoint '%s' holds variable '%s' (dataset variables/%s), which "
                           "this config's model does not have: it was written by a different model or optimizer; "
                           "restore it with the config it holds (mtf ckpt inspect) or start with --fresh",
                           path, name, link);
    }
  }
  return MTF_OK;
}

/* The innermost message of HDF5's error stack ("truncated file: eof = ..."), for reports. */
static herr_t keep_first_message(unsigned n, const H5E_error2_t *entry, void *data) {
  if (n == 0 && entry->desc) snprintf((char *)data, MTF_ERROR_MSG_MAX / 4, "%s", entry->desc);
  return 0;
}

static void hdf5_reason(char *buf) {
  buf[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_first_message, buf);
  if (!buf[0]) snprintf(buf, MTF_ERROR_MSG_MAX / 4, "not an HDF5 file");
}

static const char *dataset_name_of(const char *variable) {
  static char name[MTF_CKPT_PATH_MAX];
  if (mtf_ckpt_dataset_name(variable, name, sizeof name) != 0) snprintf(name, sizeof name, "%s", variable);
  return name;
}

static int restore_locked(const mtf_ckpt_model *m, const char *path, int need_slots, mtf_ckpt_state *st,
                          int64_t *bytes, mtf_error *err) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  MTF_CHECK(mtf_require_regular_file(path, "checkpoint", "a checkpoint is an HDF5 file written by mtf train", err));
  hid_t fapl = mpio_access(m);
  hid_t file = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
  char reason[MTF_ERROR_MSG_MAX / 4];
  if (file < 0) hdf5_reason(reason); /* before the next HDF5 call clears the error stack */
  if (fapl >= 0) H5Pclose(fapl);
  int rc = file < 0 ? mtf_error_set(err, MTF_ERR_IO, "cannot open checkpoint '%s' as HDF5 (%s): missing, truncated "
                                    "or damaged", path, reason)
                    : read_state(file, path, st, err);
  hid_t group = rc == MTF_OK ? H5Gopen2(file, "variables", H5P_DEFAULT) : -1;
  if (rc == MTF_OK && group < 0)
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' has no /variables group (damaged)", path);
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (rc == MTF_OK && (dxpl < 0 || H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) < 0))
    rc = mtf_error_set(err, MTF_ERR_IO, "cannot set up collective reads");
  float *staging = malloc(sizeof(float) * (size_t)max_slice_elements(m));
  if (rc == MTF_OK && !staging)
    rc = mtf_error_set(err, MTF_ERR_NOMEM, "restoring checkpoint '%s': out of memory for the staging buffer", path);
  rc = mtf_comm_agree(m->comm, rc, err);
  for (int i = 0; i < mtf_graph_num_variables(m->graph) && rc == MTF_OK; i++) {
    mtf_tensor var = mtf_graph_variable(m->graph, i);
    if (mtf_variable_is_transient(m->graph, var)) continue; /* not saved: zero between steps */
    uint64_t sums[2] = {0, 0}, stored = 0; /* checksum, non-finite values */
    int read = 0, has_checksum = 0;
    rc = read_variable(m, group, dxpl, var, need_slots || is_param(m, var), path, staging, bytes, sums, &read,
                       &stored, &has_checksum, err);
    /* Every rank leaves the loop at the same variable, so no rank waits in a read the others skip. */
    rc = mtf_comm_agree(m->comm, rc, err);
    if (rc != MTF_OK || !read) continue; /* read or not: the same on every rank */
    if (sum_u64(m, sums, 2) != 0) rc = mtf_error_set(err, MTF_ERR_COMM, "restoring '%s': MPI_Allreduce failed", path);
    else if (has_checksum && sums[0] != stored)
      rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': dataset variables/%s (variable '%s') fails its checksum "
                         "(stored %016llx, the data gives %016llx): the file is damaged", path,
                         dataset_name_of(mtf_tensor_name(m->graph, var)), mtf_tensor_name(m->graph, var),
                         (unsigned long long)stored, (unsigned long long)sums[0]);
    else if (sums[1] > 0)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "checkpoint '%s': variable '%s' holds %llu NaN or infinite values: the "
                         "run that wrote it had diverged before this save (not a learning-rate problem of this run); "
                         "restore an earlier checkpoint with --from PATH, or start with --fresh", path,
                         mtf_tensor_name(m->graph, var), (unsigned long long)sums[1]);
    rc = mtf_comm_agree(m->comm, rc, err);
  }
  free(staging);
  if (rc == MTF_OK && need_slots) rc = mtf_comm_agree(m->comm, check_no_extra(m, group, path, err), err);
  if (dxpl >= 0) H5Pclose(dxpl);
  if (group >= 0) H5Gclose(group);
  int closed = file < 0 || H5Fclose(file) >= 0;
  /* rc has been agreed on already; only the close is left to agree on. */
  if (rc == MTF_OK)
    rc = mtf_comm_agree(m->comm, closed ? MTF_OK : mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': closing failed", path),
                      err);
  return rc;
}

int mtf_ckpt_restore(const mtf_ckpt_model *m, const char *path, int need_slots, mtf_ckpt_state *st,
                     mtf_ckpt_stats *stats, mtf_error *err) {
  double start = mtf_now_seconds();
  int64_t bytes = 0;
  mtf_hdf5_lock();
  int rc = restore_locked(m, path, need_slots, st, &bytes, err);
  mtf_hdf5_unlock();
  double seconds = slowest(mtf_now_seconds() - start);
  if (stats) {
    stats->bytes = bytes;
    stats->seconds = seconds;
  }
  return rc;
}

int mtf_ckpt_restore_latest(const mtf_ckpt_model *m, const char *dir, int need_slots, mtf_ckpt_state *st, int *found,
                            char *path_out, size_t path_size, mtf_ckpt_stats *stats_out, mtf_error *err) {
  char(*names)[MTF_CKPT_PATH_MAX] = NULL;
  int n = 0, rc = MTF_OK;
  if (m->comm->rank == 0) {
    n = mtf_ckpt_dir_candidates(dir, &names, err);
    if (n < 0) rc = err->code, n = 0;
  }
  rc = mtf_comm_agree(m->comm, rc, err);
  *found = 0;
  if (rc == MTF_OK) rc = mtf_world_broadcast(&n, sizeof n, 0, err);
  if (rc == MTF_OK && m->comm->rank != 0) {
    names = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    if (!names) rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  }
  rc = mtf_comm_agree(m->comm, rc, err);
  if (rc == MTF_OK && n > 0) rc = mtf_world_broadcast(names, (size_t)n * MTF_CKPT_PATH_MAX, 0, err);
  for (int i = 0; i < n && rc == MTF_OK; i++) {
    char path[2 * MTF_CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    mtf_ckpt_stats stats;
    rc = mtf_ckpt_restore(m, path, need_slots, st, &stats, err);
    if (rc == MTF_ERR_IO) { /* damaged: report it, leave it, and try the one before */
      if (m->comm->rank == 0) {
        fprintf(stderr, "mtf: warning: skipping checkpoint: %s. It is left in place%s\n", err->msg,
                i + 1 < n ? "; trying the previous one" : "");
        fflush(stderr);
      }
      /* Variables may hold part of the damaged file now: only a good checkpoint may follow. */
      rc = i + 1 < n ? MTF_OK
                     : mtf_error_set(err, MTF_ERR_IO, "no good checkpoint in '%s' (every one is damaged, see the "
                                     "warnings above); resume from another with --from PATH or start over with "
                                     "--fresh", dir);
      continue;
    }
    if (rc == MTF_OK) {
      *found = 1;
      if (path_out) snprintf(path_out, path_size, "%s", path);
      if (stats_out) *stats_out = stats;
      break;
    }
  }
  free(names);
  return rc;
}
