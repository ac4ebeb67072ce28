/* Writes one directory per kind of bad input under DIR, each holding the shard(s) that show it, for the
 * io tests: DIR/<kind>/.... Bad shards are written with the HDF5 API directly (not with mtf's writer,
 * which refuses to make them). usage: make_bad_shards DIR */
#define _GNU_SOURCE
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/shard.h"

/* mkdir -p root/kind (a fresh build tree has no root's parent yet either). */
static int make_dir(const char *root, const char *kind, char *path, size_t size) {
  snprintf(path, size, "%s/%s", root, kind);
  for (char *p = path + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0777);
      *p = '/';
    }
  mkdir(path, 0777);
  return 0;
}

/* A file whose `name` dataset has the given file type and dims, filled with 1, 2, 3, ... */
static int write_raw(const char *path, const char *name, hid_t file_type, int rank, const hsize_t *dims) {
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) return -1;
  hsize_t total = 1;
  for (int i = 0; i < rank; i++) total *= dims[i];
  int32_t *values = malloc(sizeof(int32_t) * total);
  for (hsize_t i = 0; i < total; i++) values[i] = (int32_t)(i % 200) + 1;
  hid_t space = H5Screate_simple(rank, dims, NULL);
  hid_t dataset = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t status = H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
  H5Dclose(dataset);
  H5Sclose(space);
  H5Fclose(file);
  free(values);
  return status < 0 ? -1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_bad_shards DIR\n");
    return 2;
  }
  const char *root = argv[1];
  char dir[2048], path[4096];
  int failed = 0;
  hsize_t dims1[1] = {1000}, dims2[2] = {10, 100};

  make_dir(root, "no-tokens", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  failed |= write_raw(path, "ids", H5T_STD_U16LE, 1, dims1);

  make_dir(root, "float", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  failed |= write_raw(path, "tokens", H5T_IEEE_F32LE, 1, dims1);

  make_dir(root, "int64", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  failed |= write_raw(path, "tokens", H5T_STD_I64LE, 1, dims1);

  make_dir(root, "rank2", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  failed |= write_raw(path, "tokens", H5T_STD_U16LE, 2, dims2);

  /* A good shard next to a short one: the short one must be named. */
  int32_t tokens[1000];
  for (int i = 0; i < 1000; i++) tokens[i] = i % 256;
  mtf_error err;
  make_dir(root, "short", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  failed |= mtf_shard_write(path, tokens, 1000, 384, 256, "bytes", &err);
  snprintf(path, sizeof path, "%s/shard-00001.h5", dir);
  failed |= mtf_shard_write(path, tokens, 5, 384, 256, "bytes", &err);

  /* One id (700 at offset 613) past the byte vocabulary, in an int32 shard that claims a larger one. */
  make_dir(root, "bad-token", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  tokens[613] = 700;
  failed |= mtf_shard_write(path, tokens, 1000, 70000, 256, "bytes", &err);
  tokens[613] = 613 % 256;

  make_dir(root, "not-hdf5", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  FILE *text = fopen(path, "w");
  if (text) {
    fputs("this is a text file, not an HDF5 shard\n", text);
    fclose(text);
  } else {
    failed = 1;
  }

  make_dir(root, "truncated", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  int32_t many[20000];
  for (int i = 0; i < 20000; i++) many[i] = i % 256;
  failed |= mtf_shard_write(path, many, 20000, 384, 256, "bytes", &err);
  struct stat info;
  failed |= stat(path, &info) != 0 || truncate(path, info.st_size / 2) != 0;

  make_dir(root, "empty", dir, sizeof dir); /* a directory with no shards at all */

  if (failed) fprintf(stderr, "make_bad_shards: could not write every case under %s\n", root);
  return failed ? 1 : 0;
}
