/* Packed sequences: the shards' `segments` datasets, segments from end-of-text ids, and a row's model
 * inputs (see segments.h). */
#include "io/segments.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5_checked.h"

int mtf_shard_segments_probe(int64_t file, const char *path, int64_t num_tokens, int64_t *dataset_out,
                             mtf_error *err) {
  *dataset_out = -1;
  if (H5Lexists((hid_t)file, "segments", H5P_DEFAULT) <= 0) return MTF_OK;
  hid_t dataset = H5Dopen2((hid_t)file, "segments", H5P_DEFAULT);
  if (dataset < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "shard '%s': 'segments' is not a dataset that HDF5 can open", path);
  hid_t type = H5Dget_type(dataset);
  int is_int = H5Tget_class(type) == H5T_INTEGER;
  size_t size = H5Tget_size(type);
  int is_signed = is_int && H5Tget_sign(type) == H5T_SGN_2;
  H5Tclose(type);
  hid_t space = H5Dget_space(dataset);
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[H5S_MAX_RANK] = {0};
  if (rank > 0) H5Sget_simple_extent_dims(space, dims, NULL);
  H5Sclose(space);
  int rc = MTF_OK;
  /* Ids are int32 in memory: a wider type could hold ids that do not fit. */
  if (!is_int || size > 4 || (size == 4 && !is_signed))
    rc = mtf_error_set(err, MTF_ERR_INVALID,
                       "shard '%s': dataset 'segments' must hold integers that fit int32 (int32, int16, uint16, "
                       "int8 or uint8), not %s of %zu bytes: write the segment ids as int32",
                       path, !is_int ? "a non-integer type" : is_signed ? "a signed integer" : "an unsigned integer",
                       size);
  else if (rank != 1 || (int64_t)dims[0] != num_tokens)
    rc = mtf_error_set(err, MTF_ERR_INVALID,
                       "shard '%s': dataset 'segments' has shape %s%lld%s, but 'tokens' holds %lld: segments holds "
                       "one id per token (1-D, as long as tokens)",
                       path, rank == 1 ? "[" : "of rank ", rank == 1 ? (long long)dims[0] : (long long)rank,
                       rank == 1 ? "]" : "", (long long)num_tokens);
  else {
    char where[4200];
    snprintf(where, sizeof where, "shard '%s'", path);
    rc = mtf_h5_check_dataset(file, "segments", dataset, where, err);
  }
  if (rc != MTF_OK) {
    H5Dclose(dataset);
    return rc;
  }
  *dataset_out = dataset;
  return MTF_OK;
}

int mtf_shard_read_segments(mtf_shard *shard, int64_t offset, int64_t count, int32_t *out, mtf_error *err) {
  if (shard->segments < 0)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "shard '%s' has no dataset 'segments', but data.pack is segments: add per-token segment ids "
                         "(mtf data synth --pack, docs/DATA.md), or set data.pack: eot or none",
                         shard->path);
  if (offset < 0 || count < 0 || offset + count > shard->meta.num_tokens)
    return mtf_error_set(err, MTF_ERR_INVALID, "shard '%s': segments [%lld, %lld) are past its end (%lld tokens)",
                         shard->path, (long long)offset, (long long)(offset + count), (long long)shard->meta.num_tokens);
  if (count == 0) return MTF_OK;
  mtf_hdf5_lock();
  hsize_t start[1] = {(hsize_t)offset}, size[1] = {(hsize_t)count};
  hid_t file_space = H5Dget_space((hid_t)shard->segments);
  hid_t mem_space = H5Screate_simple(1, size, NULL);
  herr_t status = file_space < 0 ? -1 : H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, size, NULL);
  if (status >= 0) status = H5Dread((hid_t)shard->segments, H5T_NATIVE_INT32, mem_space, file_space, H5P_DEFAULT, out);
  H5Sclose(mem_space);
  if (file_space >= 0) H5Sclose(file_space);
  mtf_hdf5_unlock();
  if (status < 0)
    return mtf_error_set(err, MTF_ERR_IO, "shard '%s': reading segments [%lld, %lld) failed (damaged file?): re-create it",
                         shard->path, (long long)offset, (long long)(offset + count));
  for (int64_t i = 0; i < count; i++)
    if (out[i] < 0)
      return mtf_error_set(err, MTF_ERR_INVALID,
                           "shard '%s': segment id %d at offset %lld is negative: ids are 0 for padding and positive "
                           "for documents; re-create the segments dataset",
                           shard->path, out[i], (long long)(offset + i));
  return MTF_OK;
}

int mtf_shard_write_segments(const char *path, const int32_t *segments, int64_t count, mtf_error *err) {
  for (int64_t i = 0; i < count; i++)
    if (segments[i] < 0)
      return mtf_error_set(err, MTF_ERR_INVALID, "shard '%s': segment id %d at offset %lld is negative", path,
                           segments[i], (long long)i);
  mtf_hdf5_lock();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  int failed = file < 0;
  if (!failed) {
    hsize_t dims[1] = {(hsize_t)count};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t dataset = H5Dcreate2(file, "segments", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    failed = dataset < 0 || (count > 0 && H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, segments) < 0);
    if (dataset >= 0) H5Dclose(dataset);
    H5Sclose(space);
    if (H5Fclose(file) < 0) failed = 1;
  }
  mtf_hdf5_unlock();
  if (failed)
    return mtf_error_set(err, MTF_ERR_IO, "cannot add the segments dataset to shard '%s': is the disk full?", path);
  return MTF_OK;
}

void mtf_segments_from_eot(const int32_t *tokens, int64_t count, int64_t eot_id, int32_t *segments) {
  int32_t id = 1;
  for (int64_t i = 0; i < count; i++) {
    segments[i] = id;
    if (tokens[i] == eot_id) id++; /* the eot ends its document; the next token starts one */
  }
}

void mtf_segments_split_row(const int32_t *row, int64_t length, int32_t *segments, int32_t *target_segments,
                            int32_t *positions) {
  int32_t run = 0;
  int64_t start = 0;
  for (int64_t t = 0; t <= length; t++) {
    int changed = t == 0 || row[t] != row[t - 1];
    if (changed) start = t;
    if (changed && row[t] != 0) run++;
    int32_t id = row[t] == 0 ? 0 : run;
    if (t < length) {
      segments[t] = id;
      positions[t] = (int32_t)(t - start);
    }
    if (t > 0) target_segments[t - 1] = id;
  }
}
