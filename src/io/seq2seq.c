/* Seq2seq marks of a shard: written after the tokens by mtf data synth, read and checked by the loader. */
#include "io/seq2seq.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5_checked.h"
#include "io/shard.h"

/* The rules of seq2seq.h on rows [0, examples). */
static int check_spans(const char *path, const int64_t *spans, int64_t examples, int64_t num_tokens, mtf_error *err) {
  int64_t previous_end = 0;
  for (int64_t i = 0; i < examples; i++) {
    int64_t start = spans[3 * i], answer = spans[3 * i + 1], end = spans[3 * i + 2];
    if (!(start >= previous_end && start < answer && answer < end && end <= num_tokens))
      return mtf_error_set(err, MTF_ERR_INVALID,
                           "shard '%s': %s row %lld is (start %lld, answer_start %lld, end %lld), which breaks the "
                           "rule %lld <= start < answer_start < end <= num_tokens %lld (examples in order, each with "
                           "a prompt and an answer): re-create the shard with 'mtf data synth' or drop the marks",
                           path, MTF_SEQ2SEQ_DATASET, (long long)i, (long long)start, (long long)answer,
                           (long long)end, (long long)previous_end, (long long)num_tokens);
    previous_end = end;
  }
  return MTF_OK;
}

static int mark_locked(const char *path, const int64_t *spans, int64_t examples, mtf_error *err) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return mtf_error_set(err, MTF_ERR_IO, "cannot reopen shard '%s' to add its seq2seq marks", path);
  int failed = 0;
  hid_t scalar = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, "seq2seq", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
  int64_t one = 1;
  failed |= attr < 0 || H5Awrite(attr, H5T_NATIVE_INT64, &one) < 0;
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(scalar);
  hsize_t dims[2] = {(hsize_t)examples, 3};
  hid_t space = H5Screate_simple(2, dims, NULL);
  hid_t dataset = H5Dcreate2(file, MTF_SEQ2SEQ_DATASET, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  failed |= dataset < 0;
  if (!failed && examples > 0) failed = H5Dwrite(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, spans) < 0;
  if (dataset >= 0) H5Dclose(dataset);
  H5Sclose(space);
  if (H5Fclose(file) < 0) failed = 1;
  if (failed) return mtf_error_set(err, MTF_ERR_IO, "cannot write the seq2seq marks of shard '%s': is the disk full?", path);
  return MTF_OK;
}

int mtf_seq2seq_mark_shard(const char *path, const int64_t *spans, int64_t examples, int64_t num_tokens,
                           mtf_error *err) {
  MTF_CHECK(check_spans(path, spans, examples, num_tokens, err));
  mtf_hdf5_lock();
  int rc = mark_locked(path, spans, examples, err);
  mtf_hdf5_unlock();
  return rc;
}

static int read_locked(hid_t file, const char *path, int64_t num_tokens, mtf_seq2seq_marks *out, mtf_error *err) {
  char where[4200];
  snprintf(where, sizeof where, "shard '%s'", path);
  int64_t flag = 0;
  int present = 0;
  MTF_CHECK(mtf_h5_attr_int(file, "seq2seq", where, &flag, &present, err));
  int has_dataset = H5Lexists(file, MTF_SEQ2SEQ_DATASET, H5P_DEFAULT) > 0;
  if (!present) {
    if (has_dataset)
      return mtf_error_set(err, MTF_ERR_INVALID, "%s has a dataset '%s' but no attribute 'seq2seq': a marked shard has "
                           "both (seq2seq = 1); add the attribute or remove the dataset", where, MTF_SEQ2SEQ_DATASET);
    return MTF_OK;
  }
  if (flag != 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute 'seq2seq' is %lld; it must be 1 (a shard of "
                         "prompt/answer examples) or absent", where, (long long)flag);
  if (!has_dataset)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s has the attribute seq2seq = 1 but no dataset '%s' [examples, 3] of "
                         "(start, answer_start, end): re-create it with 'mtf data synth'", where, MTF_SEQ2SEQ_DATASET);
  hid_t dataset = H5Dopen2(file, MTF_SEQ2SEQ_DATASET, H5P_DEFAULT);
  if (dataset < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is not a dataset that HDF5 can open", where, MTF_SEQ2SEQ_DATASET);
  hid_t type = H5Dget_type(dataset), space = H5Dget_space(dataset);
  int is_int64 = H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 8 && H5Tget_sign(type) == H5T_SGN_2;
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[H5S_MAX_RANK] = {0};
  if (rank > 0) H5Sget_simple_extent_dims(space, dims, NULL);
  H5Tclose(type);
  H5Sclose(space);
  int rc = MTF_OK;
  if (!is_int64)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: dataset '%s' must hold int64 (token offsets)", where, MTF_SEQ2SEQ_DATASET);
  else if (rank != 2 || dims[1] != 3)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: dataset '%s' must be 2-D [examples, 3] (start, answer_start, end), "
                       "but has %d dimensions%s", where, MTF_SEQ2SEQ_DATASET, rank, rank == 2 ? " of which the second is not 3" : "");
  if (rc == MTF_OK) rc = mtf_h5_check_dataset(file, MTF_SEQ2SEQ_DATASET, dataset, where, err);
  if (rc == MTF_OK) {
    out->examples = (int64_t)dims[0];
    out->spans = out->examples ? malloc(sizeof(int64_t) * 3 * (size_t)out->examples) : NULL;
    if (out->examples && !out->spans) rc = mtf_error_set(err, MTF_ERR_NOMEM, "%s: out of memory for its seq2seq marks", where);
    else if (out->examples &&
             H5Dread(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->spans) < 0)
      rc = mtf_error_set(err, MTF_ERR_IO, "%s: reading dataset '%s' failed (damaged file?)", where, MTF_SEQ2SEQ_DATASET);
  }
  H5Dclose(dataset);
  if (rc == MTF_OK) rc = check_spans(path, out->spans, out->examples, num_tokens, err);
  if (rc == MTF_OK) out->marked = 1;
  return rc;
}

int mtf_seq2seq_read_marks(const char *path, int64_t num_tokens, mtf_seq2seq_marks *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  mtf_hdf5_lock();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  int rc = file < 0 ? mtf_error_set(err, MTF_ERR_IO, "shard '%s' cannot be opened by HDF5 to read its seq2seq marks", path)
                    : read_locked(file, path, num_tokens, out, err);
  if (file >= 0) H5Fclose(file);
  mtf_hdf5_unlock();
  if (rc != MTF_OK) mtf_seq2seq_marks_free(out);
  return rc;
}

void mtf_seq2seq_marks_free(mtf_seq2seq_marks *marks) {
  free(marks->spans);
  marks->spans = NULL;
  marks->examples = 0;
  marks->marked = 0;
}
