/* Checked HDF5 attribute reads and dataset checks (h5_checked.h). */
#define _GNU_SOURCE
#include "io/h5_checked.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIXED_STRING (1 << 20) /* a fixed-length string attribute wider than this is refused unread */

static const char *class_name(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_STRING: return "a string";
    case H5T_COMPOUND: return "a compound type";
    case H5T_ENUM: return "an enum (a bool?)";
    case H5T_ARRAY: return "an array type";
    case H5T_VLEN: return "a variable-length sequence";
    case H5T_REFERENCE: return "a reference";
    case H5T_OPAQUE: return "an opaque type";
    case H5T_BITFIELD: return "a bitfield";
    default: return "an unknown type";
  }
}

/* Opens attribute `name` and checks it holds exactly one element. rc MTF_OK with *attr < 0: absent. */
static int open_scalar(hid_t loc, const char *name, const char *where, hid_t *attr, hid_t *type, mtf_error *err) {
  *attr = *type = -1;
  htri_t exists = H5Aexists(loc, name);
  if (exists < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot look for attribute '%s' (damaged file?)", where, name);
  if (exists == 0) return MTF_OK;
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0) return mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot open attribute '%s' (damaged file?)", where, name);
  hid_t space = H5Aget_space(a), t = H5Aget_type(a);
  int rc = MTF_OK;
  if (space < 0 || t < 0) {
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read the type and shape of attribute '%s' (damaged file?)",
                       where, name);
  } else {
    H5S_class_t kind = H5Sget_simple_extent_type(space);
    hssize_t points = kind == H5S_NULL ? 0 : H5Sget_simple_extent_npoints(space);
    if (kind == H5S_NULL || points != 1)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute '%s' holds %lld elements; it must be a scalar (one value): "
                         "re-create the shard (docs/DATA.md lists its attributes)", where, name, (long long)points);
  }
  if (space >= 0) H5Sclose(space);
  if (rc != MTF_OK) {
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
  }
  *attr = a;
  *type = t;
  return MTF_OK;
}

int mtf_h5_attr_int(int64_t loc, const char *name, const char *where, int64_t *value, int *present, mtf_error *err) {
  *present = 0;
  hid_t attr, type;
  MTF_CHECK(open_scalar((hid_t)loc, name, where, &attr, &type, err));
  if (attr < 0) return MTF_OK;
  int rc = MTF_OK;
  size_t width = H5Tget_size(type);
  if (H5Tget_class(type) != H5T_INTEGER || width < 1 || width > 8) {
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute '%s' must be an integer of at most 8 bytes, but holds %s "
                       "of %zu bytes: write it as an int64", where, name, class_name(type), width);
  } else if (H5Tget_sign(type) == H5T_SGN_NONE && width == 8) {
    uint64_t wide = 0;
    if (H5Aread(attr, H5T_NATIVE_UINT64, &wide) < 0)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read attribute '%s' (damaged file?)", where, name);
    else if (wide > (uint64_t)INT64_MAX)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute '%s' is %llu, out of range (at most %lld)", where, name,
                         (unsigned long long)wide, (long long)INT64_MAX);
    else
      *value = (int64_t)wide;
  } else {
    int64_t v = 0;
    if (H5Aread(attr, H5T_NATIVE_INT64, &v) < 0)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read attribute '%s' (damaged file?)", where, name);
    else
      *value = v;
  }
  H5Tclose(type);
  H5Aclose(attr);
  if (rc == MTF_OK) *present = 1;
  return rc;
}

/* Checks and copies the string text[0, length) to out. */
static int take_string(const char *text, size_t length, const char *where, const char *name, char *out, size_t size,
                       mtf_error *err) {
  if (length >= size)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute '%s' holds %zu bytes; it may hold at most %zu bytes",
                         where, name, length, size - 1);
  for (size_t i = 0; i < length; i++)
    if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f)
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute '%s' holds the control character 0x%02x at byte %zu",
                           where, name, (unsigned char)text[i], i);
  memcpy(out, text, length);
  out[length] = '\0';
  return MTF_OK;
}

int mtf_h5_attr_string(int64_t loc, const char *name, const char *where, char *out, size_t size, int *present,
                       mtf_error *err) {
  *present = 0;
  out[0] = '\0';
  hid_t attr, type;
  MTF_CHECK(open_scalar((hid_t)loc, name, where, &attr, &type, err));
  if (attr < 0) return MTF_OK;
  int rc = MTF_OK;
  htri_t variable = H5Tget_class(type) == H5T_STRING ? H5Tis_variable_str(type) : -1;
  if (H5Tget_class(type) != H5T_STRING || variable < 0) {
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute '%s' must be a string, but holds %s", where, name,
                       class_name(type));
  } else if (variable) {
    /* One element (checked above): HDF5 writes exactly one pointer. */
    char *value = NULL;
    hid_t mem = H5Tcopy(H5T_C_S1);
    int ok = mem >= 0 && H5Tset_size(mem, H5T_VARIABLE) >= 0 && H5Tset_cset(mem, H5Tget_cset(type)) >= 0 &&
             H5Aread(attr, mem, &value) >= 0;
    if (!ok)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read attribute '%s' (damaged file?)", where, name);
    else if (value)
      rc = take_string(value, strlen(value), where, name, out, size, err);
    if (value) H5free_memory(value);
    if (mem >= 0) H5Tclose(mem);
  } else {
    size_t width = H5Tget_size(type);
    char *buf = width >= 1 && width <= MAX_FIXED_STRING ? calloc(width + 1, 1) : NULL;
    hid_t mem = buf ? H5Tcopy(type) : -1; /* the file's own width and padding: the bytes come as stored */
    if (width < 1 || width > MAX_FIXED_STRING)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: attribute '%s' is a fixed-length string of %zu bytes; it may hold "
                         "at most %zu bytes", where, name, width, size - 1);
    else if (!buf || mem < 0)
      rc = mtf_error_set(err, MTF_ERR_NOMEM, "%s: out of memory reading attribute '%s'", where, name);
    else if (H5Aread(attr, mem, buf) < 0)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read attribute '%s' (damaged file?)", where, name);
    else {
      size_t length = strnlen(buf, width); /* NULLPAD fills exactly: the last byte is text, not a NUL */
      if (H5Tget_strpad(type) == H5T_STR_SPACEPAD)
        while (length > 0 && buf[length - 1] == ' ') length--;
      rc = take_string(buf, length, where, name, out, size, err);
    }
    if (mem >= 0) H5Tclose(mem);
    free(buf);
  }
  H5Tclose(type);
  H5Aclose(attr);
  if (rc == MTF_OK) *present = 1;
  else out[0] = '\0';
  return rc;
}

int mtf_h5_check_dataset(int64_t loc, const char *name, int64_t dataset_id, const char *where, mtf_error *err) {
  hid_t dataset = (hid_t)dataset_id;
  H5L_info_t link;
  if (H5Lget_info((hid_t)loc, name, &link, H5P_DEFAULT) < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read the link '%s' (damaged file?)", where, name);
  if (link.type != H5L_TYPE_HARD)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is a %s link; it must be the dataset itself, stored in this "
                         "file: copy the data in when writing the shard", where, name,
                         link.type == H5L_TYPE_SOFT ? "soft" : link.type == H5L_TYPE_EXTERNAL ? "external" : "user-defined");
  hid_t plist = H5Dget_create_plist(dataset);
  if (plist < 0) return mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read how '%s' is stored", where, name);
  int rc = MTF_OK;
  H5D_layout_t layout = H5Pget_layout(plist);
  int externals = H5Pget_external_count(plist), filters = H5Pget_nfilters(plist);
  hsize_t chunk[H5S_MAX_RANK];
  int chunk_rank = layout == H5D_CHUNKED ? H5Pget_chunk(plist, H5S_MAX_RANK, chunk) : 0;
  if (layout == H5D_VIRTUAL || layout < 0)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is a virtual dataset (its data lives in other files); it must "
                       "hold its data in this file", where, name);
  else if (externals != 0)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' keeps its data in %d external file(s); it must hold its data in "
                       "this file", where, name, externals);
  for (int i = 0; rc == MTF_OK && i < filters; i++) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 0;
    char filter_name[64] = "";
    H5Z_filter_t id = H5Pget_filter2(plist, (unsigned)i, &flags, &nvalues, NULL, sizeof filter_name, filter_name,
                                     &config);
    if (id < 0 || H5Zfilter_avail(id) <= 0)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is stored with HDF5 filter %d (%s), which this HDF5 "
                         "lacks: write it uncompressed or with gzip", where, name, (int)id,
                         filter_name[0] ? filter_name : "unnamed");
  }
  if (rc == MTF_OK && filters < 0) rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read '%s''s filters", where, name);
  H5Pclose(plist);
  if (rc != MTF_OK) return rc;
  /* The element count from the sizes, checked: HDF5's own count wraps past 2^64 (2^31 x 2^33 gives 0, which
   * would pass as "no elements, nothing to store"). */
  hid_t space = H5Dget_space(dataset);
  int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  hsize_t dims[H5S_MAX_RANK];
  uint64_t points = 1;
  int overflow = rank < 0 || H5Sget_simple_extent_dims(space, dims, NULL) < 0;
  for (int d = 0; !overflow && d < rank; d++) {
    if (dims[d] && points > ((uint64_t)1 << 62) / dims[d]) overflow = 1;
    else points *= dims[d];
  }
  if (space >= 0 && H5Sget_simple_extent_type(space) == H5S_NULL) points = 0;
  if (space >= 0) H5Sclose(space);
  if (overflow)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' has a size that overflows 64 bits or cannot be read "
                         "(damaged file)", where, name);
  /* Every element stored: contiguous storage allocated in full, or every chunk of a chunked layout written.
   * For chunks HDF5's space status compares stored bytes with the raw size, which compressed (gzip, shuffle)
   * chunks never reach, so the chunks are counted instead. */
  int written = 1;
  if (points > 0 && layout == H5D_CHUNKED) {
    hsize_t expected = 1, have = 0;
    int ok = chunk_rank == rank;
    for (int d = 0; ok && d < rank; d++) {
      ok = chunk[d] > 0;
      if (ok) expected *= (dims[d] + chunk[d] - 1) / chunk[d];
    }
    hid_t all = H5Dget_space(dataset); /* its whole extent selected (H5S_ALL is refused by HDF5 1.10) */
    written = ok && all >= 0 && H5Dget_num_chunks(dataset, all, &have) >= 0 && have == expected;
    if (all >= 0) H5Sclose(all);
  } else if (points > 0) {
    H5D_space_status_t status;
    written = H5Dget_space_status(dataset, &status) >= 0 && status == H5D_SPACE_STATUS_ALLOCATED;
  }
  if (!written)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' has no storage written for some of its %llu elements (they "
                         "would read as the fill value): write every element", where, name, (unsigned long long)points);
  return MTF_OK;
}
