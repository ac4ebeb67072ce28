/* mtf ckpt verify reads each dataset in blocks of bounded size whatever its shape. The fuzzer's finding
 * (2026-12-06): a dataset of 0 x 2^33 float32 (no elements, so "stored in full") made verify allocate one
 * 2^33-element row, 32 GiB. Here: that shape verifies without allocating it; a dataset whose rows are
 * longer than a read block, and one of rank 3 whose blocks end mid-row, verify against a checksum summed
 * element by element (mtf_ckpt_element_hash over row-major indices, no blocking), and a flipped value in
 * the last block is found. A dataset whose element count wraps past 2^64 to 0 is refused at once. */
#define _POSIX_C_SOURCE 200809L /* fmemopen */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_attr.h"

/* A float32 dataset of shape dims (values v(i) = (i % 251 - 125) / 8, or no values when a dimension is 0)
 * with the checksum of those values, element by element; `damage` is xor'ed into the last value's bits after
 * the checksum is taken (a flipped bit in the last block read). */
static void add_dataset(hid_t group, const char *name, int rank, const hsize_t *dims, uint64_t damage) {
  uint64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  float *values = malloc(sizeof(float) * (size_t)(n ? n : 1));
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; i++) {
    values[i] = (float)((int)(i % 251) - 125) / 8.0f;
    uint32_t bits;
    memcpy(&bits, &values[i], sizeof bits);
    sum += mtf_ckpt_element_hash(i, bits);
    if (i == n - 1 && damage) {
      bits ^= (uint32_t)damage;
      memcpy(&values[i], &bits, sizeof bits);
    }
  }
  hid_t space = H5Screate_simple(rank, dims, NULL);
  hid_t dset = H5Dcreate2(group, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  CHECK(dset >= 0);
  if (n) CHECK(H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0);
  const char *dim_names[] = {"a", "b", "c"};
  CHECK(mtf_ckpt_attr_write_strings(dset, "dims", rank, dim_names) == 0);
  CHECK(mtf_ckpt_attr_write_string(dset, "variable", name) == 0);
  CHECK(mtf_ckpt_attr_write_string(dset, "kind", "param") == 0);
  CHECK(mtf_ckpt_attr_write_u64(dset, "checksum", sum) == 0);
  H5Dclose(dset);
  H5Sclose(space);
  free(values);
}

/* A chunked dataset of 2^31 x 2^33 float32 with no chunk written: HDF5 counts its elements as 2^64 mod 2^64
 * = 0, so it passed as "no elements, stored in full" and verify read fill values for ever. */
static void add_wrapped_dataset(hid_t group) {
  hsize_t dims[2] = {(hsize_t)1 << 31, (hsize_t)1 << 33}, chunk[2] = {1, 1024};
  hid_t space = H5Screate_simple(2, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 2, chunk);
  hid_t dset = H5Dcreate2(group, "wrapped", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  CHECK(dset >= 0);
  CHECK(mtf_ckpt_attr_write_u64(dset, "checksum", 0) == 0);
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
}

/* Writes a checkpoint with the datasets above (or the wrapped one alone), runs verify, returns its status
 * and its printout in out. */
static int verify_file(const char *path, uint64_t damage, int wrapped, char *out, size_t size) {
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  CHECK(file >= 0);
  CHECK(mtf_ckpt_attr_write_i64(file, "format_version", MTF_CKPT_FORMAT_VERSION) == 0);
  CHECK(mtf_ckpt_attr_write_i64(file, "complete", 1) == 0);
  hid_t group = H5Gcreate2(file, "variables", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t empty[2] = {0, (hsize_t)1 << 33};          /* the fuzzer's shape */
  hsize_t long_rows[2] = {2, ((hsize_t)1 << 22) + 5}; /* each row is longer than one read block */
  hsize_t cube[3] = {3, 1500, 1501};                  /* blocks of whole rows that end mid-matrix */
  if (wrapped) {
    add_wrapped_dataset(group);
  } else {
    add_dataset(group, "empty", 2, empty, 0);
    add_dataset(group, "long_rows", 2, long_rows, 0);
    add_dataset(group, "cube", 3, cube, damage);
  }
  H5Gclose(group);
  H5Fclose(file);
  FILE *f = fmemopen(out, size, "w");
  mtf_error err;
  int rc = mtf_ckpt_verify(path, f, &err);
  fclose(f);
  if (rc != MTF_OK) fprintf(stderr, "verify: %s\n", err.msg);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  char path[4096], out[4096];
  snprintf(path, sizeof path, "%s/verify-blocks.h5", argv[1]);
  CHECK(verify_file(path, 0, 0, out, sizeof out) == MTF_OK);
  CHECK_CONTAINS(out, "ok, 3 datasets match their checksums");
  CHECK(verify_file(path, 1u << 9, 0, out, sizeof out) == MTF_ERR_IO);
  CHECK_CONTAINS(out, "BAD  variables/cube fails its checksum");
  CHECK(verify_file(path, 0, 1, out, sizeof out) == MTF_ERR_IO);
  CHECK_CONTAINS(out, "BAD  variables/wrapped is not stored in full: 'wrapped' has a size that overflows 64 bits");
  remove(path);
  return check_summary();
}
