/* `mtf ckpt verify`: every variable dataset of a checkpoint against its stored checksum, read in one
 * process with HDF5's default driver (no MPI), a bounded block at a time. */
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_attr.h"
#include "io/h5_checked.h"
#include "io/shard.h"

#define BLOCK_ELEMENTS ((uint64_t)1 << 22) /* 16 MiB of float32 per read */

typedef struct verify_ctx {
  const char *path;
  FILE *out;
  int count, bad;
  char first_bad[MTF_CKPT_PATH_MAX];
} verify_ctx;

static void mark_bad(verify_ctx *ctx, const char *link) {
  if (!ctx->bad++) snprintf(ctx->first_bad, sizeof ctx->first_bad, "%s", link);
}

/* Reads dset a block of at most BLOCK_ELEMENTS at a time, summing its checksum and counting non-finite
 * values. A block spans the trailing dimensions from `split` on in whole, a run of indices of dimension
 * `split` and one index of each dimension before it, so its size is bounded whatever the shape (a row alone
 * may be larger than memory; a dataset with a zero dimension has no elements and reads nothing). Returns
 * NULL or what is wrong. */
static const char *checksum_in_blocks(hid_t dset, hid_t space, int rank, const hsize_t *dims, uint64_t *sum,
                                      uint64_t *nonfinite) {
  uint64_t dims64[MTF_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 0) return NULL;
    dims64[d] = dims[d];
  }
  int split = rank > 0 ? rank - 1 : 0;
  uint64_t inner = 1; /* elements of the dimensions after split */
  while (split > 0 && dims64[split] <= BLOCK_ELEMENTS / inner) inner *= dims64[split--];
  uint64_t run = rank > 0 ? (BLOCK_ELEMENTS / inner < dims64[split] ? BLOCK_ELEMENTS / inner : dims64[split]) : 1;
  float *buf = malloc(sizeof(float) * (size_t)(run * inner));
  if (!buf) return "too large to read (out of memory)";
  const char *problem = NULL;
  uint64_t start[MTF_MAX_RANK] = {0}, count[MTF_MAX_RANK];
  for (int more = 1; more && !problem;) {
    hid_t mem = -1, file_space = -1;
    uint64_t n = 1;
    if (rank > 0) {
      hsize_t hstart[MTF_MAX_RANK], hcount[MTF_MAX_RANK];
      for (int d = 0; d < rank; d++) {
        count[d] = d < split ? 1 : d > split ? dims64[d] : (dims64[d] - start[d] < run ? dims64[d] - start[d] : run);
        hstart[d] = start[d], hcount[d] = count[d], n *= count[d];
      }
      mem = H5Screate_simple(rank, hcount, NULL);
      file_space = H5Scopy(space);
      if (file_space < 0 || H5Sselect_hyperslab(file_space, H5S_SELECT_SET, hstart, NULL, hcount, NULL) < 0)
        problem = "unreadable";
    } else {
      mem = H5Screate(H5S_SCALAR);
      file_space = H5Scopy(space);
    }
    if (!problem && (mem < 0 || file_space < 0 || H5Dread(dset, H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT, buf) < 0))
      problem = "unreadable (damaged file)";
    if (!problem) {
      *sum += mtf_ckpt_checksum_slab(buf, rank, dims64, start, count);
      for (uint64_t k = 0; k < n; k++) *nonfinite += !isfinite(buf[k]);
    }
    if (mem >= 0) H5Sclose(mem);
    if (file_space >= 0) H5Sclose(file_space);
    /* The next block: advance dimension split by the run, carrying into the dimensions before it. */
    more = 0;
    for (int d = split; rank > 0 && d >= 0 && !more; d--) {
      start[d] += d == split ? count[d] : 1;
      if (start[d] < dims64[d]) more = 1;
      else start[d] = 0;
    }
  }
  free(buf);
  return problem;
}

static herr_t verify_dataset(hid_t group, const char *link, const H5L_info_t *info, void *data) {
  (void)info;
  verify_ctx *ctx = data;
  hid_t dset = H5Dopen2(group, link, H5P_DEFAULT);
  hid_t space = dset >= 0 ? H5Dget_space(dset) : -1, type = dset >= 0 ? H5Dget_type(dset) : -1;
  int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  hsize_t dims[MTF_MAX_RANK];
  uint64_t stored = 0, sum = 0, nonfinite = 0;
  const char *problem = NULL;
  mtf_error stored_err;
  if (dset < 0 || space < 0 || type < 0 || rank < 0 || rank > MTF_MAX_RANK)
    problem = "unreadable";
  else if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4)
    problem = "not float32";
  /* Only data stored in this file is read: sizes the file merely declares (no storage written, which
   * HDF5 reads as the fill value) could be 2^60 elements, a read for ever. */
  else if (mtf_h5_check_dataset(group, link, dset, "is not stored in full", &stored_err) != MTF_OK)
    problem = stored_err.msg;
  else if (mtf_ckpt_attr_read_u64(dset, "checksum", &stored) != 0)
    problem = "has no checksum attribute (written by an mtf before checksums, or damaged): nothing to verify it "
              "against";
  if (!problem) {
    H5Sget_simple_extent_dims(space, dims, NULL);
    problem = checksum_in_blocks(dset, space, rank, dims, &sum, &nonfinite);
    if (!problem && sum != stored) problem = "fails its checksum: the file is damaged";
  }
  if (problem) {
    mark_bad(ctx, link);
    if (sum != stored && strstr(problem, "checksum"))
      fprintf(ctx->out, "BAD  variables/%s %s (stored %016llx, the data gives %016llx)\n", link, problem,
              (unsigned long long)stored, (unsigned long long)sum);
    else
      fprintf(ctx->out, "BAD  variables/%s %s\n", link, problem);
  } else if (nonfinite) {
    fprintf(ctx->out, "ok   variables/%s (but it holds %llu NaN or infinite values: its run had diverged)\n", link,
            (unsigned long long)nonfinite);
  }
  ctx->count++;
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  if (dset >= 0) H5Dclose(dset);
  return 0;
}

static int verify_locked(const char *path, FILE *out, mtf_error *err) {
  hid_t file = mtf_ckpt_open_serial(path, err);
  if (file < 0) return err->code;
  int rc = MTF_OK;
  int64_t version = 0, complete = 0;
  if (H5Lexists(file, "tokens", H5P_DEFAULT) > 0 && H5Lexists(file, "variables", H5P_DEFAULT) <= 0)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "'%s' is a token shard, not a checkpoint", path);
  else if (mtf_ckpt_attr_read_i64(file, "format_version", &version) != 0 || version != MTF_CKPT_FORMAT_VERSION)
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' has no format_version %d attribute: not an mtf checkpoint "
                       "this build reads, or damaged", path, MTF_CKPT_FORMAT_VERSION);
  else if (mtf_ckpt_attr_read_i64(file, "complete", &complete) != 0 || complete != 1)
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' is incomplete (its writer stopped before the end)", path);
  hid_t group = rc == MTF_OK ? H5Gopen2(file, "variables", H5P_DEFAULT) : -1;
  if (rc == MTF_OK && group < 0) rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' has no /variables group", path);
  verify_ctx ctx = {.path = path, .out = out};
  if (rc == MTF_OK && H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, NULL, verify_dataset, &ctx) < 0)
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': cannot list the datasets of /variables (damaged)", path);
  if (rc == MTF_OK && ctx.bad)
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': %d of %d datasets fail verification, first "
                       "variables/%s", path, ctx.bad, ctx.count, ctx.first_bad);
  if (rc == MTF_OK) fprintf(out, "checkpoint %s: ok, %d datasets match their checksums\n", path, ctx.count);
  if (group >= 0) H5Gclose(group);
  H5Fclose(file);
  return rc;
}

int mtf_ckpt_verify(const char *path, FILE *out, mtf_error *err) {
  mtf_hdf5_lock();
  int rc = verify_locked(path, out, err);
  mtf_hdf5_unlock();
  return rc;
}
