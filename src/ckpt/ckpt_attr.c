#include "ckpt/ckpt_attr.h"

#include "core/paths.h"
#include "core/rng.h"

#include <stdlib.h>
#include <string.h>

static hid_t string_type(size_t size) {
  hid_t type = H5Tcopy(H5T_C_S1);
  if (type < 0) return -1;
  if (H5Tset_size(type, size > 0 ? size : 1) < 0 || H5Tset_strpad(type, H5T_STR_NULLTERM) < 0) {
    H5Tclose(type);
    return -1;
  }
  return type;
}

static int write_attr(hid_t object, const char *name, hid_t type, hid_t space, const void *data) {
  if (type < 0 || space < 0) return -1;
  hid_t attr = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  int rc = attr >= 0 && H5Awrite(attr, type, data) >= 0 ? 0 : -1;
  if (attr >= 0) H5Aclose(attr);
  return rc;
}

int mtf_ckpt_attr_write_string(hid_t object, const char *name, const char *value) {
  hid_t type = string_type(strlen(value) + 1), space = H5Screate(H5S_SCALAR);
  int rc = write_attr(object, name, type, space, value);
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  return rc;
}

int mtf_ckpt_attr_write_i64(hid_t object, const char *name, int64_t value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = space >= 0 ? H5Acreate2(object, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT) : -1;
  int rc = attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT64, &value) >= 0 ? 0 : -1;
  if (attr >= 0) H5Aclose(attr);
  if (space >= 0) H5Sclose(space);
  return rc;
}

int mtf_ckpt_attr_write_strings(hid_t object, const char *name, int n, const char *const *values) {
  size_t width = 1;
  for (int i = 0; i < n; i++)
    if (strlen(values[i]) + 1 > width) width = strlen(values[i]) + 1;
  char *packed = calloc((size_t)(n > 0 ? n : 1), width);
  if (!packed) return -1;
  for (int i = 0; i < n; i++) memcpy(packed + (size_t)i * width, values[i], strlen(values[i]));
  hsize_t count = (hsize_t)n;
  hid_t type = string_type(width), space = H5Screate_simple(1, &count, NULL);
  int rc = write_attr(object, name, type, space, packed);
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  free(packed);
  return rc;
}

/* The largest string attribute read (the config YAML is the longest, a few KiB). */
#define MAX_STRING_WIDTH ((size_t)16 << 20)

/* Opens a fixed-length string attribute whose dataspace holds `want` elements (1: a scalar or a
 * one-element array; -1: a 1-D array of any length, whose count goes to *count); *size gets the string
 * width in bytes. Anything else (another class, variable-length strings, another rank or count, an absurd
 * width) is refused, so that no read writes past a buffer sized from these checks. */
static hid_t open_string_attr(hid_t object, const char *name, int want, hid_t *file_type, size_t *size,
                              hssize_t *count) {
  if (H5Aexists(object, name) <= 0) return -1;
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  *file_type = H5Aget_type(attr);
  hid_t space = H5Aget_space(attr);
  int ndims = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
  H5S_class_t sclass = space >= 0 ? H5Sget_simple_extent_type(space) : H5S_NO_CLASS;
  if (space >= 0) H5Sclose(space);
  int ok = *file_type >= 0 && H5Tget_class(*file_type) == H5T_STRING && H5Tis_variable_str(*file_type) == 0;
  if (ok) {
    *size = H5Tget_size(*file_type);
    ok = *size > 0 && *size <= MAX_STRING_WIDTH;
  }
  if (ok && want == 1) ok = (sclass == H5S_SCALAR || (sclass == H5S_SIMPLE && ndims == 1)) && n == 1;
  if (ok && want < 0) ok = sclass == H5S_SIMPLE && ndims == 1 && n >= 0;
  if (!ok) {
    if (*file_type >= 0) H5Tclose(*file_type);
    H5Aclose(attr);
    return -1;
  }
  if (count) *count = n;
  return attr;
}

void mtf_ckpt_attr_string_problem(hid_t object, const char *name, char *why, size_t size) {
  if (H5Aexists(object, name) <= 0) {
    snprintf(why, size, "it is missing");
    return;
  }
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  hid_t type = attr >= 0 ? H5Aget_type(attr) : -1, space = attr >= 0 ? H5Aget_space(attr) : -1;
  hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
  size_t width = type >= 0 ? H5Tget_size(type) : 0;
  if (type < 0 || space < 0) snprintf(why, size, "it cannot be read (damaged)");
  else if (H5Tget_class(type) != H5T_STRING) snprintf(why, size, "it is not a string");
  else if (H5Tis_variable_str(type) != 0) snprintf(why, size, "it is a variable-length string (mtf writes fixed-length)");
  else if (n != 1) snprintf(why, size, "it is an array of %lld strings, not one string", (long long)n);
  else if (width > MAX_STRING_WIDTH)
    snprintf(why, size, "it is %.1f MiB, over the %zu MiB a string attribute may have", (double)width / 1048576.0,
             MAX_STRING_WIDTH >> 20);
  else snprintf(why, size, "it cannot be read");
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  if (attr >= 0) H5Aclose(attr);
}

int64_t mtf_ckpt_attr_string_size(hid_t object, const char *name) {
  hid_t type;
  size_t size;
  hid_t attr = open_string_attr(object, name, 1, &type, &size, NULL);
  if (attr < 0) return -1;
  H5Tclose(type);
  H5Aclose(attr);
  return (int64_t)size + 1;
}

/* Strings are read into a memory type one byte wider than the file's, NUL-terminated: a NULLPAD or
 * SPACEPAD string of the full width (h5py's fixed-length bytes) keeps its last character. */
int mtf_ckpt_attr_read_string(hid_t object, const char *name, char *buf, size_t size) {
  hid_t type;
  size_t width;
  hid_t attr = open_string_attr(object, name, 1, &type, &width, NULL);
  if (attr < 0) return -1;
  char *tmp = calloc(width + 1, 1);
  hid_t mem_type = string_type(width + 1);
  int rc = tmp && mem_type >= 0 && H5Aread(attr, mem_type, tmp) >= 0 ? 0 : -1;
  if (rc == 0) snprintf(buf, size, "%s", tmp);
  if (mem_type >= 0) H5Tclose(mem_type);
  free(tmp);
  H5Tclose(type);
  H5Aclose(attr);
  return rc;
}

/* A one-element integer attribute read as mem_type; unsigned_u64 asks for exactly an unsigned 64-bit one
 * (the checksums), otherwise any integer of up to 8 bytes. */
static int read_integer(hid_t object, const char *name, hid_t mem_type, int unsigned_u64, void *value) {
  if (H5Aexists(object, name) <= 0) return -1;
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  hid_t space = H5Aget_space(attr), type = H5Aget_type(attr);
  int ok = space >= 0 && type >= 0 && H5Tget_class(type) == H5T_INTEGER && H5Sget_simple_extent_npoints(space) == 1;
  if (ok) ok = unsigned_u64 ? H5Tget_size(type) == 8 && H5Tget_sign(type) == H5T_SGN_NONE : H5Tget_size(type) <= 8;
  int rc = ok && H5Aread(attr, mem_type, value) >= 0 ? 0 : -1;
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  H5Aclose(attr);
  return rc;
}

int mtf_ckpt_attr_read_i64(hid_t object, const char *name, int64_t *value) {
  return read_integer(object, name, H5T_NATIVE_INT64, 0, value);
}

int mtf_ckpt_attr_write_u64(hid_t object, const char *name, uint64_t value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = space >= 0 ? H5Acreate2(object, name, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT) : -1;
  int rc = attr >= 0 && H5Awrite(attr, H5T_NATIVE_UINT64, &value) >= 0 ? 0 : -1;
  if (attr >= 0) H5Aclose(attr);
  if (space >= 0) H5Sclose(space);
  return rc;
}

int mtf_ckpt_attr_read_u64(hid_t object, const char *name, uint64_t *value) {
  return read_integer(object, name, H5T_NATIVE_UINT64, 1, value);
}

int mtf_ckpt_attr_read_strings(hid_t object, const char *name, char (*values)[MTF_NAME_MAX], int max, int *n) {
  hid_t type;
  size_t width;
  hssize_t count = -1;
  hid_t attr = open_string_attr(object, name, -1, &type, &width, &count);
  if (attr < 0) return -1;
  int rc = count >= 0 && count <= max ? 0 : -1;
  char *packed = rc == 0 ? calloc((size_t)(count > 0 ? count : 1), width + 1) : NULL;
  hid_t mem_type = string_type(width + 1);
  if (rc == 0 && (!packed || mem_type < 0 || (count > 0 && H5Aread(attr, mem_type, packed) < 0))) rc = -1;
  for (hssize_t i = 0; rc == 0 && i < count; i++) {
    const char *value = packed + (size_t)i * (width + 1);
    if (strlen(value) >= MTF_NAME_MAX) rc = -1; /* a dim name no shape can hold: refused, not cut */
    else snprintf(values[i], MTF_NAME_MAX, "%s", value);
  }
  if (rc == 0) *n = (int)count;
  free(packed);
  if (mem_type >= 0) H5Tclose(mem_type);
  H5Tclose(type);
  H5Aclose(attr);
  return rc;
}

/* ---- dataset checksums (docs/CHECKPOINTS.md, "Integrity") ---- */

uint64_t mtf_ckpt_element_hash(uint64_t index, uint32_t bits) {
  return mtf_mix64(mtf_mix64(index + 0x9e3779b97f4a7c15ULL) ^ (uint64_t)bits);
}

uint64_t mtf_ckpt_checksum_slab(const float *data, int rank, const uint64_t *dims, const uint64_t *start,
                                const uint64_t *count) {
  uint64_t total = 1, sum = 0;
  for (int d = 0; d < rank; d++) total *= count[d];
  if (total == 0) return 0;
  uint64_t pos[MTF_MAX_RANK] = {0};
  uint64_t inner = rank > 0 ? count[rank - 1] : 1;
  for (uint64_t done = 0; done < total; done += inner) {
    uint64_t base = 0; /* the global row-major index of this row's first element */
    for (int d = 0; d < rank; d++) base = base * dims[d] + start[d] + (d == rank - 1 ? 0 : pos[d]);
    for (uint64_t k = 0; k < inner; k++) {
      uint32_t bits;
      memcpy(&bits, &data[done + k], sizeof bits);
      sum += mtf_ckpt_element_hash(base + k, bits);
    }
    for (int d = rank - 2; d >= 0; d--) { /* the next row */
      if (++pos[d] < count[d]) break;
      pos[d] = 0;
    }
  }
  return sum;
}

int mtf_ckpt_dataset_name(const char *variable, char *out, size_t size) {
  if (!variable[0] || strlen(variable) >= size || strchr(variable, '.')) return -1;
  for (size_t i = 0;; i++) {
    out[i] = variable[i] == '/' ? '.' : variable[i];
    if (!variable[i]) break;
  }
  return 0;
}

hid_t mtf_ckpt_open_serial(const char *path, mtf_error *err) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  if (mtf_require_regular_file(path, "checkpoint", "a checkpoint is an HDF5 file written by mtf train", err)) return -1;
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0)
    mtf_error_set(err, MTF_ERR_IO, "cannot open checkpoint '%s' as HDF5: missing, truncated or damaged", path);
  return file;
}
