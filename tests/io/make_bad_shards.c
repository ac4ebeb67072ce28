/* Writes one directory per kind of bad input under DIR, each holding the shard(s) that show it, for the
 * io tests: DIR/<kind>/.... Bad shards are written with the HDF5 API directly (not with mtf's writer,
 * which refuses to make them). usage: make_bad_shards DIR */
#define _GNU_SOURCE
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* A good 1000-token shard at dir/shard-00000.h5, reopened read-write with attribute `name` deleted, so
 * the caller can put a hostile one in its place. Returns the open file, or -1. */
static hid_t good_shard_without(const char *dir, const char *name, char *path, size_t size) {
  int32_t tokens[1000];
  for (int i = 0; i < 1000; i++) tokens[i] = i % 256;
  mtf_error err;
  snprintf(path, size, "%s/shard-00000.h5", dir);
  if (mtf_shard_write(path, tokens, 1000, 384, 256, "bytes", &err) != MTF_OK) return -1;
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file >= 0 && name && H5Adelete(file, name) < 0) {
    H5Fclose(file);
    return -1;
  }
  return file;
}

/* A good 1000-token shard at dir/shard-00000.h5 with a `segments` dataset of the given type and dims,
 * its ids 1, 1, 2, 2, ... and, when negative_at >= 0, -3 there. (The packed-sequence cases.) */
static int shard_with_segments(const char *root, const char *kind, hid_t type, int rank, const hsize_t *dims,
                               int negative_at) {
  char dir[2048], path[4096];
  make_dir(root, kind, dir, sizeof dir);
  hid_t file = good_shard_without(dir, NULL, path, sizeof path);
  if (file < 0) return -1;
  hsize_t total = 1;
  for (int i = 0; i < rank; i++) total *= dims[i];
  int32_t *ids = malloc(sizeof(int32_t) * total);
  for (hsize_t i = 0; i < total; i++) ids[i] = (int32_t)(i / 2) + 1;
  if (negative_at >= 0) ids[negative_at] = -3;
  hid_t space = H5Screate_simple(rank, dims, NULL);
  hid_t dataset = H5Dcreate2(file, "segments", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t status = dataset < 0 ? -1 : H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids);
  if (dataset >= 0) H5Dclose(dataset);
  H5Sclose(space);
  H5Fclose(file);
  free(ids);
  return status < 0 ? -1 : 0;
}

/* Attribute `name` of the given type and dataspace (rank 0: scalar), with data from buf. */
static int put_attr_as(hid_t file, const char *name, hid_t type, hid_t mem_type, int rank, hsize_t count,
                       const void *buf) {
  hsize_t dims[1] = {count};
  hid_t space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL);
  hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t status = attr < 0 ? -1 : H5Awrite(attr, mem_type, buf);
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  return status < 0 ? -1 : 0;
}

static int put_attr(hid_t file, const char *name, hid_t type, int rank, hsize_t count, const void *buf) {
  return put_attr_as(file, name, type, type, rank, count, buf);
}

/* A fixed-length string type of the given width and padding (h5py writes numpy 'S' strings NULLPAD). */
static hid_t fixed_string(size_t width, H5T_str_t pad) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, width);
  H5Tset_strpad(type, pad);
  return type;
}

/* Hostile and unusual attributes, one directory each (attr-*): the shard is otherwise good. */
static int write_attr_cases(const char *root) {
  char dir[2048], path[4096];
  int failed = 0;
  hid_t file;

  /* vocab_size as an array of 4096 integers (read into one int64, it overflowed the stack). */
  static int64_t many[4096];
  for (int i = 0; i < 4096; i++) many[i] = 384 + i;
  make_dir(root, "attr-int-array", dir, sizeof dir);
  file = good_shard_without(dir, "vocab_size", path, sizeof path);
  failed |= file < 0 || put_attr(file, "vocab_size", H5T_STD_I64LE, 1, 4096, many);
  if (file >= 0) H5Fclose(file);

  /* vocab_size as a float. */
  double vocab = 384;
  make_dir(root, "attr-int-float", dir, sizeof dir);
  file = good_shard_without(dir, "vocab_size", path, sizeof path);
  failed |= file < 0 || put_attr(file, "vocab_size", H5T_IEEE_F64LE, 0, 1, &vocab);
  if (file >= 0) H5Fclose(file);

  /* vocab_size as a uint64 past int64's range. */
  uint64_t huge = UINT64_MAX - 5;
  make_dir(root, "attr-int-huge", dir, sizeof dir);
  file = good_shard_without(dir, "vocab_size", path, sizeof path);
  failed |= file < 0 || put_attr(file, "vocab_size", H5T_STD_U64LE, 0, 1, &huge);
  if (file >= 0) H5Fclose(file);

  /* A vocab_size below the ids the shard holds (ids 0..255, vocab_size 200, no eot): data inspect reads every
   * id. */
  int64_t small_vocab = 200, no_eot = -1;
  make_dir(root, "ids-over-vocab", dir, sizeof dir);
  file = good_shard_without(dir, "vocab_size", path, sizeof path);
  failed |= file < 0 || put_attr(file, "vocab_size", H5T_STD_I64LE, 0, 1, &small_vocab) ||
            H5Adelete(file, "eot_id") < 0 || put_attr(file, "eot_id", H5T_STD_I64LE, 0, 1, &no_eot);
  if (file >= 0) H5Fclose(file);

  /* tokenizer as an array of 64 variable-length strings (read into one pointer: a heap overflow). */
  const char *names[64];
  for (int i = 0; i < 64; i++) names[i] = "bytes";
  hid_t vlen = H5Tcopy(H5T_C_S1);
  H5Tset_size(vlen, H5T_VARIABLE);
  make_dir(root, "attr-str-vlen-array", dir, sizeof dir);
  file = good_shard_without(dir, "tokenizer", path, sizeof path);
  failed |= file < 0 || put_attr(file, "tokenizer", vlen, 1, 64, names);
  if (file >= 0) H5Fclose(file);

  /* tokenizer as an array of 64 fixed-length strings of 100 bytes (read into one: a heap overflow). */
  static char fixed[64][100];
  for (int i = 0; i < 64; i++) snprintf(fixed[i], sizeof fixed[i], "bytes");
  hid_t wide = fixed_string(100, H5T_STR_NULLTERM);
  make_dir(root, "attr-str-fixed-array", dir, sizeof dir);
  file = good_shard_without(dir, "tokenizer", path, sizeof path);
  failed |= file < 0 || put_attr(file, "tokenizer", wide, 1, 64, fixed);
  if (file >= 0) H5Fclose(file);
  H5Tclose(wide);

  /* tokenizer longer than a tokenizer name may be (MTF_SHARD_TOKENIZER_MAX - 1 bytes). */
  static char longname[300];
  memset(longname, 'x', sizeof longname - 1);
  make_dir(root, "attr-str-long", dir, sizeof dir);
  file = good_shard_without(dir, "tokenizer", path, sizeof path);
  failed |= file < 0 || put_attr(file, "tokenizer", vlen, 0, 1, (const char *[]){longname});
  if (file >= 0) H5Fclose(file);

  /* tokenizer as an integer. */
  int64_t seven = 7;
  make_dir(root, "attr-str-int", dir, sizeof dir);
  file = good_shard_without(dir, "tokenizer", path, sizeof path);
  failed |= file < 0 || put_attr(file, "tokenizer", H5T_STD_I64LE, 0, 1, &seven);
  if (file >= 0) H5Fclose(file);

  /* Good shards: tokenizer as h5py writes it, NULLPAD "bytes" in exactly 5 bytes (no terminator: the
   * last character must survive), a scalar variable-length string, and a 1-element array of int. */
  hid_t pad = fixed_string(5, H5T_STR_NULLPAD);
  make_dir(root, "attr-ok-nullpad", dir, sizeof dir);
  file = good_shard_without(dir, "tokenizer", path, sizeof path);
  failed |= file < 0 || put_attr(file, "tokenizer", pad, 0, 1, "bytes");
  if (file >= 0) H5Fclose(file);
  H5Tclose(pad);
  make_dir(root, "attr-ok-vlen", dir, sizeof dir);
  file = good_shard_without(dir, "tokenizer", path, sizeof path);
  failed |= file < 0 || put_attr(file, "tokenizer", vlen, 0, 1, (const char *[]){"bytes"});
  if (file >= 0) H5Fclose(file);
  int32_t one_vocab = 384;
  make_dir(root, "attr-ok-int-1elem", dir, sizeof dir);
  file = good_shard_without(dir, "vocab_size", path, sizeof path);
  failed |= file < 0 || put_attr_as(file, "vocab_size", H5T_STD_I32BE, H5T_NATIVE_INT32, 1, 1, &one_vocab);
  if (file >= 0) H5Fclose(file);
  H5Tclose(vlen);
  return failed;
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

  failed |= write_attr_cases(root);

  /* Bad `segments` datasets next to good tokens: float, 2-D, one id short, uint32, a negative id. */
  hsize_t short_dims[1] = {999};
  failed |= shard_with_segments(root, "segments-float", H5T_IEEE_F32LE, 1, dims1, -1);
  failed |= shard_with_segments(root, "segments-rank2", H5T_STD_I32LE, 2, dims2, -1);
  failed |= shard_with_segments(root, "segments-short", H5T_STD_I32LE, 1, short_dims, -1);
  failed |= shard_with_segments(root, "segments-uint32", H5T_STD_U32LE, 1, dims1, -1);
  failed |= shard_with_segments(root, "segments-negative", H5T_STD_I32LE, 1, dims1, 417);
  failed |= shard_with_segments(root, "segments-good", H5T_STD_I16LE, 1, dims1, -1);

  /* A FIFO named like a shard (opening it blocking would hang), next to nothing else. */
  make_dir(root, "fifo", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  unlink(path);
  failed |= mkfifo(path, 0666) != 0;

  /* A good shard in a directory whose name holds glob characters. */
  make_dir(root, "odd[1]*?dir", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  failed |= mtf_shard_write(path, many, 1000, 384, 256, "bytes", &err);
  make_dir(root, "odd1xydir", dir, sizeof dir); /* what the unescaped pattern odd[1]*?dir would match */
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  failed |= mtf_shard_write(path, many, 3, 384, 256, "bytes", &err);

  if (failed) fprintf(stderr, "make_bad_shards: could not write every case under %s\n", root);
  return failed ? 1 : 0;
}
