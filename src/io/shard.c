/* The token shard format: writing in one process, checked opening and hyperslab reads per rank. */
#define _GNU_SOURCE
#include "io/shard.h"

#include "core/paths.h"

#include "io/decode_table.h"

#include <errno.h>
#include <stdio.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/h5_checked.h"
#include "io/segments.h"

static pthread_mutex_t hdf5_mutex = PTHREAD_MUTEX_INITIALIZER;

void mtf_hdf5_lock(void) { pthread_mutex_lock(&hdf5_mutex); }
void mtf_hdf5_unlock(void) { pthread_mutex_unlock(&hdf5_mutex); }

/* HDF5 prints its error stack to stderr by default; mtf reports its own messages instead. */
static void quiet_hdf5(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

static int write_int_attr(hid_t loc, const char *name, int64_t value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t status = attr < 0 ? -1 : H5Awrite(attr, H5T_NATIVE_INT64, &value);
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  return status < 0 ? -1 : 0;
}

static int write_string_attr(hid_t loc, const char *name, const char *value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, strlen(value) + 1);
  H5Tset_strpad(type, H5T_STR_NULLTERM);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t status = attr < 0 ? -1 : H5Awrite(attr, type, value);
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  return status < 0 ? -1 : 0;
}

static int write_locked(const char *path, const int32_t *tokens, int64_t count, int64_t vocab_size, int64_t eot_id,
                        const char *tokenizer, mtf_error *err) {
  quiet_hdf5();
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0)
    return mtf_error_set(err, MTF_ERR_IO, "cannot create shard '%s': check that its directory exists and is writable",
                         path);
  int narrow = vocab_size <= 65536;
  hsize_t dims[1] = {(hsize_t)count};
  hid_t space = H5Screate_simple(1, dims, NULL);
  hid_t dataset = H5Dcreate2(file, "tokens", narrow ? H5T_STD_U16LE : H5T_STD_I32LE, space, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT);
  int failed = dataset < 0;
  /* HDF5 converts the int32 buffer to the file's uint16 on the way out. */
  if (!failed && count > 0) failed = H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens) < 0;
  if (dataset >= 0) H5Dclose(dataset);
  H5Sclose(space);
  if (!failed)
    failed = write_int_attr(file, "vocab_size", vocab_size) || write_string_attr(file, "tokenizer", tokenizer) ||
             write_int_attr(file, "eot_id", eot_id) || write_int_attr(file, "num_tokens", count) ||
             write_int_attr(file, "format_version", MTF_SHARD_FORMAT_VERSION);
  if (H5Fclose(file) < 0) failed = 1;
  if (failed)
    return mtf_error_set(err, MTF_ERR_IO, "cannot write shard '%s' (%lld tokens): is the disk full?", path,
                         (long long)count);
  return MTF_OK;
}

int mtf_shard_write(const char *path, const int32_t *tokens, int64_t count, int64_t vocab_size, int64_t eot_id,
                    const char *tokenizer, mtf_error *err) {
  for (int64_t i = 0; i < count; i++)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      return mtf_error_set(err, MTF_ERR_INVALID, "shard '%s': token id %d at offset %lld is outside [0, %lld)", path,
                           tokens[i], (long long)i, (long long)vocab_size);
  mtf_hdf5_lock();
  int rc = write_locked(path, tokens, count, vocab_size, eot_id, tokenizer, err);
  mtf_hdf5_unlock();
  return rc;
}

/* The file under a shard as it was opened: size and modification time (its identity is checked once,
 * at open). A shard truncated or rewritten under a running loader would read zeros or another file's
 * tokens; every read compares these first. */
static int file_changed(const struct stat *now, const mtf_shard_meta *meta) {
  return (int64_t)now->st_size != meta->file_size || (int64_t)now->st_mtim.tv_sec != meta->file_mtime_sec ||
         (int64_t)now->st_mtim.tv_nsec != meta->file_mtime_nsec || (int64_t)now->st_ctim.tv_sec != meta->file_ctime_sec ||
         (int64_t)now->st_ctim.tv_nsec != meta->file_ctime_nsec;
}

static void record_file(const struct stat *info, mtf_shard_meta *meta) {
  meta->file_size = (int64_t)info->st_size;
  meta->file_mtime_sec = (int64_t)info->st_mtim.tv_sec;
  meta->file_mtime_nsec = (int64_t)info->st_mtim.tv_nsec;
  meta->file_ctime_sec = (int64_t)info->st_ctim.tv_sec;
  meta->file_ctime_nsec = (int64_t)info->st_ctim.tv_nsec;
}

/* fstat of the descriptor HDF5's sec2 driver reads through. */
static int stat_open_file(hid_t file, struct stat *info) {
  void *handle = NULL;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || !handle) return -1;
  return fstat(*(int *)handle, info);
}

static const char *type_name(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      static const char *names[2][9] = {{"", "uint8", "uint16", "", "uint32", "", "", "", "uint64"},
                                        {"", "int8", "int16", "", "int32", "", "", "", "int64"}};
      size_t size = H5Tget_size(type);
      return size <= 8 && names[H5Tget_sign(type) == H5T_SGN_2][size][0] ? names[H5Tget_sign(type) == H5T_SGN_2][size]
                                                                       : "an integer of unusual size";
    }
    case H5T_FLOAT: return H5Tget_size(type) == 4 ? "float32" : H5Tget_size(type) == 8 ? "float64" : "a float";
    case H5T_STRING: return "a string";
    case H5T_COMPOUND: return "a compound type";
    default: return "a non-numeric type";
  }
}

/* Checks the file and the `tokens` dataset; on success shard->file and shard->dataset are open. */
static int open_locked(const char *path, mtf_shard *shard, mtf_error *err) {
  quiet_hdf5();
  /* stat first: a FIFO or device opened for reading would block, or read something that is no file. */
  MTF_CHECK(mtf_require_regular_file(path, "shard", "a shard is an HDF5 file; remove it from the dataset", err));
  struct stat before;
  if (stat(path, &before) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "shard '%s': cannot open it (%s)", path, strerror(errno));
  if (H5Fis_hdf5(path) <= 0)
    return mtf_error_set(err, MTF_ERR_IO,
                         "shard '%s' is not a readable HDF5 file (not HDF5, or truncated or damaged): re-create it "
                         "with 'mtf data prepare' or remove it from the dataset",
                         path);
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0)
    return mtf_error_set(err, MTF_ERR_IO,
                         "shard '%s' cannot be opened by HDF5 (truncated or damaged?): re-create it with "
                         "'mtf data prepare' or remove it from the dataset",
                         path);
  shard->file = file;
  struct stat opened;
  if (stat_open_file(file, &opened) != 0 || opened.st_dev != before.st_dev || opened.st_ino != before.st_ino ||
      !S_ISREG(opened.st_mode))
    return mtf_error_set(err, MTF_ERR_IO, "shard '%s' was replaced while it was being opened: try again once it is "
                         "written", path);
  record_file(&opened, &shard->meta);
  char where[4200];
  snprintf(where, sizeof where, "shard '%s'", path);
  if (H5Lexists(file, "tokens", H5P_DEFAULT) <= 0)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "shard '%s' has no dataset 'tokens': a shard holds its token ids in a 1-D dataset named "
                         "'tokens' (see docs/DATA.md)",
                         path);
  hid_t dataset = H5Dopen2(file, "tokens", H5P_DEFAULT);
  if (dataset < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "shard '%s': 'tokens' is not a dataset that HDF5 can open", path);
  shard->dataset = dataset;

  hid_t type = H5Dget_type(dataset);
  int is_int = H5Tget_class(type) == H5T_INTEGER, size = (int)H5Tget_size(type);
  int is_signed = is_int && H5Tget_sign(type) == H5T_SGN_2;
  const char *found = type_name(type);
  H5Tclose(type);
  if (!(is_int && ((size == 2 && !is_signed) || (size == 4 && is_signed))))
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "shard '%s': dataset 'tokens' holds %s; it must be uint16 (vocabularies up to 65536) or "
                         "int32: convert the token ids when writing the shard",
                         path, found);
  shard->meta.token_bytes = size;

  hid_t space = H5Dget_space(dataset);
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[H5S_MAX_RANK] = {0};
  if (rank > 0) H5Sget_simple_extent_dims(space, dims, NULL);
  H5Sclose(space);
  if (rank != 1)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "shard '%s': dataset 'tokens' has %d dimensions; it must be 1-D (one stream of token ids, "
                         "documents separated by the end-of-text id): flatten it when writing the shard",
                         path, rank);
  shard->meta.num_tokens = (int64_t)dims[0];
  MTF_CHECK(mtf_h5_check_dataset(file, "tokens", dataset, where, err));

  int64_t attr_tokens = -1;
  int has_vocab, has_eot, has_tokens, has_version, has_tokenizer;
  MTF_CHECK(mtf_h5_attr_int(file, "vocab_size", where, &shard->meta.vocab_size, &has_vocab, err));
  MTF_CHECK(mtf_h5_attr_int(file, "eot_id", where, &shard->meta.eot_id, &has_eot, err));
  MTF_CHECK(mtf_h5_attr_int(file, "num_tokens", where, &attr_tokens, &has_tokens, err));
  MTF_CHECK(mtf_h5_attr_int(file, "format_version", where, &shard->meta.format_version, &has_version, err));
  MTF_CHECK(mtf_h5_attr_string(file, "tokenizer", where, shard->meta.tokenizer, sizeof shard->meta.tokenizer,
                               &has_tokenizer, err));
  if (has_vocab && (shard->meta.vocab_size < 1 || shard->meta.vocab_size > INT32_MAX))
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute 'vocab_size' is %lld, out of range: it must be in [1, %d] "
                         "(token ids are int32)", where, (long long)shard->meta.vocab_size, INT32_MAX);
  if (has_eot && (shard->meta.eot_id < -1 || shard->meta.eot_id > INT32_MAX ||
                  (has_vocab && shard->meta.eot_id >= shard->meta.vocab_size)))
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute 'eot_id' is %lld, out of range: it must be an id below "
                         "vocab_size (or -1 for none)", where, (long long)shard->meta.eot_id);
  if (has_version && shard->meta.format_version < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute 'format_version' is %lld; it must not be negative", where,
                         (long long)shard->meta.format_version);
  if (!has_tokens) attr_tokens = -1;
  else if (attr_tokens < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute 'num_tokens' is %lld; it must not be negative", where,
                         (long long)attr_tokens);
  if (attr_tokens >= 0 && attr_tokens != shard->meta.num_tokens)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "shard '%s': attribute num_tokens is %lld but dataset 'tokens' holds %lld: the file is "
                         "inconsistent; re-create it",
                         path, (long long)attr_tokens, (long long)shard->meta.num_tokens);
  if (shard->meta.format_version > MTF_SHARD_FORMAT_VERSION)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "shard '%s' has format_version %lld, newer than this mtf reads (%d): update mtf", path,
                         (long long)shard->meta.format_version, MTF_SHARD_FORMAT_VERSION);
  int present = 0;
  MTF_CHECK(mtf_decode_table_probe(file, where, shard->meta.vocab_size, &present, &shard->meta.decode_bytes, err));
  shard->meta.decode_ids = present ? shard->meta.vocab_size : 0;
  MTF_CHECK(mtf_shard_segments_probe(file, path, shard->meta.num_tokens, &shard->segments, err));
  shard->meta.has_segments = shard->segments >= 0;
  return MTF_OK;
}

static void close_locked(mtf_shard *shard) {
  if (shard->file_space >= 0) H5Sclose((hid_t)shard->file_space);
  if (shard->segments >= 0) H5Dclose((hid_t)shard->segments);
  if (shard->dataset >= 0) H5Dclose((hid_t)shard->dataset);
  if (shard->file >= 0) H5Fclose((hid_t)shard->file);
  shard->dataset = shard->file = shard->file_space = shard->segments = -1;
}

int mtf_shard_open(const char *path, mtf_shard *shard, mtf_error *err) {
  memset(shard, 0, sizeof *shard);
  shard->file = shard->dataset = shard->file_space = shard->segments = -1;
  shard->meta.vocab_size = shard->meta.eot_id = shard->meta.format_version = -1;
  mtf_hdf5_lock();
  int rc = open_locked(path, shard, err);
  if (rc == MTF_OK) {
    shard->file_space = H5Dget_space((hid_t)shard->dataset);
    if (shard->file_space < 0) rc = mtf_error_set(err, MTF_ERR_IO, "shard '%s': cannot read the shape of 'tokens'", path);
  }
  if (rc != MTF_OK) close_locked(shard);
  mtf_hdf5_unlock();
  if (rc != MTF_OK) return rc;
  shard->path = strdup(path);
  if (!shard->path) {
    mtf_shard_close(shard);
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory opening shard '%s'", path);
  }
  return MTF_OK;
}

void mtf_shard_close(mtf_shard *shard) {
  mtf_hdf5_lock();
  close_locked(shard);
  mtf_hdf5_unlock();
  free(shard->path);
  free(shard->narrow);
  shard->path = NULL;
  shard->narrow = NULL;
  shard->narrow_capacity = 0;
}

int mtf_shard_read(mtf_shard *shard, int64_t offset, int64_t count, int32_t *out, int64_t vocab_limit,
                   mtf_error *err) {
  if (offset < 0 || count < 0 || offset + count > shard->meta.num_tokens)
    return mtf_error_set(err, MTF_ERR_INVALID, "shard '%s': tokens [%lld, %lld) are past its end (%lld tokens)",
                         shard->path, (long long)offset, (long long)(offset + count),
                         (long long)shard->meta.num_tokens);
  if (count == 0) return MTF_OK;
  int narrow = shard->meta.token_bytes == 2;
  if (narrow && count > shard->narrow_capacity) {
    uint16_t *grown = realloc(shard->narrow, sizeof(uint16_t) * (size_t)count);
    if (!grown) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory reading shard '%s'", shard->path);
    shard->narrow = grown;
    shard->narrow_capacity = count;
  }
  mtf_hdf5_lock();
  hsize_t start[1] = {(hsize_t)offset}, size[1] = {(hsize_t)count};
  hid_t file_space = (hid_t)shard->file_space;
  hid_t mem_space = H5Screate_simple(1, size, NULL);
  herr_t status = H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, size, NULL);
  /* Read in the file's own type: no HDF5 type conversion, which costs more than the read for short rows. */
  if (status >= 0)
    status = H5Dread((hid_t)shard->dataset, narrow ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT32, mem_space, file_space,
                     H5P_DEFAULT, narrow ? (void *)shard->narrow : (void *)out);
  H5Sclose(mem_space);
  struct stat now = {0};
  int changed = stat_open_file((hid_t)shard->file, &now) != 0 || file_changed(&now, &shard->meta);
  mtf_hdf5_unlock();
  if (changed)
    return mtf_error_set(err, MTF_ERR_IO,
                         "shard '%s' changed since it was opened (was %lld bytes, now %lld, or rewritten): a shard "
                         "must not be modified while it is read; restart once it is written",
                         shard->path, (long long)shard->meta.file_size, (long long)now.st_size);
  if (status >= 0 && narrow)
    for (int64_t i = 0; i < count; i++) out[i] = shard->narrow[i];
  if (status < 0)
    return mtf_error_set(err, MTF_ERR_IO,
                         "shard '%s': reading tokens [%lld, %lld) failed (truncated or damaged file?): re-create it",
                         shard->path, (long long)offset, (long long)(offset + count));
  if (vocab_limit > 0)
    for (int64_t i = 0; i < count; i++)
      if (out[i] < 0 || out[i] >= vocab_limit)
        return mtf_error_set(err, MTF_ERR_INVALID,
                             "shard '%s': token id %d at offset %lld is not below the model's vocabulary size %lld: "
                             "the shard was made with a larger vocabulary; use a model vocabulary of at least %d or "
                             "re-tokenise",
                             shard->path, out[i], (long long)(offset + i), (long long)vocab_limit,
                             out[i] < 0 ? 0 : out[i] + 1);
  return MTF_OK;
}

int mtf_shard_stat(const char *path, mtf_shard_meta *meta, mtf_error *err) {
  mtf_shard shard;
  MTF_CHECK(mtf_shard_open(path, &shard, err));
  *meta = shard.meta;
  mtf_shard_close(&shard);
  return MTF_OK;
}
