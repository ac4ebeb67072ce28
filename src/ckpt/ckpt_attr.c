#include "ckpt/ckpt_attr.h"

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

/* Opens a fixed-length string attribute; *size gets the string width in bytes. */
static hid_t open_string_attr(hid_t object, const char *name, hid_t *file_type, size_t *size) {
  if (H5Aexists(object, name) <= 0) return -1;
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  *file_type = H5Aget_type(attr);
  if (*file_type < 0 || H5Tget_class(*file_type) != H5T_STRING || H5Tis_variable_str(*file_type) != 0) {
    if (*file_type >= 0) H5Tclose(*file_type);
    H5Aclose(attr);
    return -1;
  }
  *size = H5Tget_size(*file_type);
  return attr;
}

int64_t mtf_ckpt_attr_string_size(hid_t object, const char *name) {
  hid_t type;
  size_t size;
  hid_t attr = open_string_attr(object, name, &type, &size);
  if (attr < 0) return -1;
  H5Tclose(type);
  H5Aclose(attr);
  return (int64_t)size + 1;
}

int mtf_ckpt_attr_read_string(hid_t object, const char *name, char *buf, size_t size) {
  hid_t type;
  size_t width;
  hid_t attr = open_string_attr(object, name, &type, &width);
  if (attr < 0) return -1;
  char *tmp = calloc(width + 1, 1);
  hid_t mem_type = string_type(width);
  int rc = tmp && mem_type >= 0 && H5Aread(attr, mem_type, tmp) >= 0 ? 0 : -1;
  if (rc == 0) snprintf(buf, size, "%s", tmp);
  if (mem_type >= 0) H5Tclose(mem_type);
  free(tmp);
  H5Tclose(type);
  H5Aclose(attr);
  return rc;
}

int mtf_ckpt_attr_read_i64(hid_t object, const char *name, int64_t *value) {
  if (H5Aexists(object, name) <= 0) return -1;
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  hid_t space = H5Aget_space(attr);
  int rc = space >= 0 && H5Sget_simple_extent_npoints(space) == 1 && H5Aread(attr, H5T_NATIVE_INT64, value) >= 0 ? 0 : -1;
  if (space >= 0) H5Sclose(space);
  H5Aclose(attr);
  return rc;
}

int mtf_ckpt_attr_read_strings(hid_t object, const char *name, char (*values)[MTF_NAME_MAX], int max, int *n) {
  hid_t type;
  size_t width;
  hid_t attr = open_string_attr(object, name, &type, &width);
  if (attr < 0) return -1;
  hid_t space = H5Aget_space(attr);
  hssize_t count = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
  int rc = count >= 0 && count <= max ? 0 : -1;
  char *packed = rc == 0 ? calloc((size_t)(count > 0 ? count : 1), width + 1) : NULL;
  hid_t mem_type = string_type(width + 1);
  if (rc == 0 && (!packed || mem_type < 0 || (count > 0 && H5Aread(attr, mem_type, packed) < 0))) rc = -1;
  for (hssize_t i = 0; rc == 0 && i < count; i++) snprintf(values[i], MTF_NAME_MAX, "%s", packed + (size_t)i * (width + 1));
  if (rc == 0) *n = (int)count;
  free(packed);
  if (mem_type >= 0) H5Tclose(mem_type);
  if (space >= 0) H5Sclose(space);
  H5Tclose(type);
  H5Aclose(attr);
  return rc;
}

int mtf_ckpt_dataset_name(const char *variable, char *out, size_t size) {
  if (!variable[0] || strlen(variable) >= size || strchr(variable, '.')) return -1;
  for (size_t i = 0;; i++) {
    out[i] = variable[i] == '/' ? '.' : variable[i];
    if (!variable[i]) break;
  }
  return 0;
}
