/* The structure-aware HDF5 generator of the fuzz targets (fuzz_h5gen.h). It only writes files; what it
 * writes is hostile, never damaged (HDF5's own API encodes every byte). */
#define _GNU_SOURCE
#include "fuzz_h5gen.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ATTR_MAX_BYTES ((size_t)256 << 10)     /* an attribute's data: beyond 64 KiB needs dense storage */
#define WRITE_MAX_BYTES ((size_t)4 << 20)      /* a dataset written element by element */
#define EARLY_MAX_BYTES ((size_t)64 << 20)     /* a dataset allocated (not written) up front */
#define FILL_PATTERN 4096                      /* input bytes taken for a buffer; the rest repeats them */

/* ---- reading the recipe ---- */

unsigned gen_u8(gen_in *in) {
  if (in->n == 0) return 0;
  in->n--;
  return *in->p++;
}

uint64_t gen_u64(gen_in *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)gen_u8(in) << (8 * i);
  return v;
}

unsigned gen_below(gen_in *in, unsigned n) { return n ? gen_u8(in) % n : 0; }

int gen_hostile(gen_in *in) { return gen_u8(in) >= GEN_HOSTILE; }

void gen_bytes(gen_in *in, void *out, size_t n) {
  size_t take = n < in->n ? n : in->n;
  if (take) memcpy(out, in->p, take);
  if (n > take) memset((uint8_t *)out + take, 0, n - take);
  in->p += take;
  in->n -= take;
}

/* ---- the working directory ---- */

static char work_dir[256];

static void remove_work_dir(void) {
  DIR *d = opendir(work_dir);
  if (d) {
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(path, sizeof path, "%s/%s", work_dir, e->d_name);
        unlink(path);
      }
    closedir(d);
  }
  rmdir(work_dir);
}

const char *gen_path(const char *name) {
  static char path[512];
  if (!work_dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(work_dir, sizeof work_dir, "%s/mtf-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(work_dir)) {
      perror("fuzz: mkdtemp");
      abort();
    }
    atexit(remove_work_dir);
  }
  snprintf(path, sizeof path, "%s/%s", work_dir, name);
  return path;
}

hid_t gen_file_create(gen_in *in, const char *name) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  char path[512];
  snprintf(path, sizeof path, "%s", gen_path(name));
  unlink(gen_path("external.bin")); /* external raw data of the previous input */
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = H5Pcreate(H5P_FILE_ACCESS);
  unsigned format = gen_u8(in);
  if (format >= GEN_HOSTILE) {
    /* The newest format stores large attributes densely (a fractal heap) and uses v2 object headers. */
    if (format & 1) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    if (format & 2) H5Pset_userblock(fcpl, 512);
    if (format & 4) H5Pset_attr_phase_change(fcpl, 0, 0);
  }
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
  H5Pclose(fcpl);
  H5Pclose(fapl);
  return file;
}

/* ---- types ---- */

enum { RAW, VLEN_STRING, VLEN_SEQUENCE };
enum { CLASS_INT, CLASS_FLOAT, CLASS_OTHER };

typedef struct gen_type {
  hid_t id;    /* used as the file type and as the memory type (no conversion: the bytes are written as given) */
  size_t size;
  int vlen;    /* RAW, VLEN_STRING (char * elements), VLEN_SEQUENCE (hvl_t of int32) */
  int cls;
  int big_endian;
} gen_type;

static const hid_t *integer_types(int index) {
  static hid_t types[16];
  types[0] = H5T_STD_I8LE, types[1] = H5T_STD_U8LE, types[2] = H5T_STD_I16LE, types[3] = H5T_STD_U16LE;
  types[4] = H5T_STD_I32LE, types[5] = H5T_STD_U32LE, types[6] = H5T_STD_I64LE, types[7] = H5T_STD_U64LE;
  types[8] = H5T_STD_I8BE, types[9] = H5T_STD_U8BE, types[10] = H5T_STD_I16BE, types[11] = H5T_STD_U16BE;
  types[12] = H5T_STD_I32BE, types[13] = H5T_STD_U32BE, types[14] = H5T_STD_I64BE, types[15] = H5T_STD_U64BE;
  return &types[index & 15];
}

/* A fixed-length string type: width from the input (around `width`), any padding and character set. */
static hid_t fixed_string(gen_in *in, size_t width) {
  static const size_t widths[] = {0, 1, 2, 63, 64, 65, 255, 4096, 70000};
  unsigned pick = gen_below(in, 12);
  size_t w = pick < 9 ? widths[pick] : pick == 9 ? width + 1 : pick == 10 && width > 1 ? width - 1 : width;
  if (w == 0) w = width ? width : 1;
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, w);
  static const H5T_str_t pads[] = {H5T_STR_NULLTERM, H5T_STR_NULLPAD, H5T_STR_SPACEPAD};
  H5Tset_strpad(t, pads[gen_below(in, 3)]);
  H5Tset_cset(t, gen_below(in, 2) ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
  return t;
}

/* Any type but references, chosen by the input. */
static gen_type any_type(gen_in *in, size_t string_width) {
  gen_type t = {.id = -1, .vlen = RAW, .cls = CLASS_OTHER};
  unsigned pick = gen_below(in, 30);
  if (pick < 16) {
    t.id = H5Tcopy(*integer_types((int)pick));
    t.cls = CLASS_INT;
    t.big_endian = pick >= 8;
  } else if (pick < 20) {
    t.id = H5Tcopy(pick == 16 ? H5T_IEEE_F32LE : pick == 17 ? H5T_IEEE_F32BE : pick == 18 ? H5T_IEEE_F64LE
                                                                                          : H5T_IEEE_F64BE);
    t.cls = CLASS_FLOAT;
    t.big_endian = pick & 1;
  } else {
    switch (pick) {
      case 20: t.id = fixed_string(in, string_width); break;
      case 21:
        t.id = H5Tcopy(H5T_C_S1);
        H5Tset_size(t.id, H5T_VARIABLE);
        H5Tset_cset(t.id, gen_below(in, 2) ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
        t.vlen = VLEN_STRING;
        break;
      case 22: /* a compound of an int64 and a double (a record where a number belongs) */
        t.id = H5Tcreate(H5T_COMPOUND, 16);
        H5Tinsert(t.id, "value", 0, H5T_STD_I64LE);
        H5Tinsert(t.id, "scale", 8, H5T_IEEE_F64LE);
        break;
      case 23: { /* an enum over int8 (h5py's bool) */
        t.id = H5Tenum_create(H5T_STD_I8LE);
        int8_t no = 0, yes = 1;
        H5Tenum_insert(t.id, "FALSE", &no);
        H5Tenum_insert(t.id, "TRUE", &yes);
        break;
      }
      case 24: { /* an array type: several numbers in one element */
        hsize_t n = 1 + gen_below(in, 8);
        t.id = H5Tarray_create2(gen_below(in, 2) ? H5T_STD_I64LE : H5T_IEEE_F32LE, 1, &n);
        break;
      }
      case 25:
        t.id = H5Tvlen_create(H5T_STD_I32LE);
        t.vlen = VLEN_SEQUENCE;
        break;
      case 26:
        t.id = H5Tcreate(H5T_OPAQUE, 1 + gen_below(in, 16));
        H5Tset_tag(t.id, "mtf fuzz");
        break;
      case 27: t.id = H5Tcopy(gen_below(in, 2) ? H5T_STD_B32LE : H5T_STD_B8BE); break;
      case 28: /* a 16-bit float (HDF5 converts any IEEE-like layout) */
        t.id = H5Tcopy(H5T_IEEE_F32LE);
        H5Tset_fields(t.id, 15, 10, 5, 0, 10);
        H5Tset_size(t.id, 2);
        H5Tset_ebias(t.id, 15);
        t.cls = CLASS_FLOAT;
        break;
      default: /* an integer of an unusual width: 3, 5, 16 bytes or a 12-bit precision */
        t.id = H5Tcopy(H5T_STD_I32LE);
        switch (gen_below(in, 4)) {
          case 0: H5Tset_size(t.id, 3); break;
          case 1: H5Tset_size(t.id, 5); break;
          case 2: H5Tset_size(t.id, 16); break;
          default: H5Tset_precision(t.id, 12); break;
        }
        t.cls = CLASS_INT;
        break;
    }
  }
  t.size = t.id >= 0 ? H5Tget_size(t.id) : 0;
  return t;
}

static gen_type copy_type(hid_t type) {
  gen_type t = {.id = H5Tcopy(type), .vlen = RAW, .cls = CLASS_OTHER};
  H5T_class_t c = H5Tget_class(type);
  if (c == H5T_INTEGER || c == H5T_FLOAT) {
    t.cls = c == H5T_INTEGER ? CLASS_INT : CLASS_FLOAT;
    t.big_endian = H5Tget_order(type) == H5T_ORDER_BE;
  } else if (c == H5T_STRING && H5Tis_variable_str(type) > 0) {
    t.vlen = VLEN_STRING;
  }
  t.size = H5Tget_size(t.id);
  return t;
}

/* ---- values ---- */

/* A number chosen by the input around `value`: itself, off by one, negative, the int64/uint64 limits,
 * 2^31, 2^32, or 64 bits of the input. */
static uint64_t odd_integer(gen_in *in, int64_t value) {
  switch (gen_below(in, 12)) {
    case 0: return (uint64_t)value;
    case 1: return (uint64_t)value + 1;
    case 2: return (uint64_t)value - 1;
    case 3: return (uint64_t)-value;
    case 4: return 0;
    case 5: return (uint64_t)-1;
    case 6: return (uint64_t)INT64_MIN;
    case 7: return (uint64_t)INT64_MAX;
    case 8: return (uint64_t)1 << 31;
    case 9: return (uint64_t)1 << 32;
    case 10: return (uint64_t)1 << 24;
    default: return gen_u64(in);
  }
}

static double odd_float(gen_in *in, int64_t value) {
  switch (gen_below(in, 10)) {
    case 0: return (double)value;
    case 1: return NAN;
    case 2: return INFINITY;
    case 3: return -INFINITY;
    case 4: return -0.0;
    case 5: return 1e300;
    case 6: return (double)value + 0.5;
    case 7: return 9.3e18; /* past int64 */
    case 8: return 5e-324;
    default: {
      uint64_t bits = gen_u64(in);
      double d;
      memcpy(&d, &bits, sizeof d);
      return d;
    }
  }
}

/* Stores v in the first `size` bytes of out in the type's byte order. */
static void store(uint8_t *out, const void *v, size_t size, int big_endian) {
  const uint8_t *b = v; /* x86: little-endian */
  for (size_t i = 0; i < size; i++) out[big_endian ? size - 1 - i : i] = b[i];
}

/* A buffer of n elements of t: bytes of the input, repeated; the first element, for numbers, an odd value
 * near `value`. Variable-length elements point at strings or sequences of the input. */
typedef struct gen_buffer {
  void *data;
  size_t n;
  int vlen;
} gen_buffer;

static gen_buffer make_buffer(gen_in *in, const gen_type *t, size_t n, int64_t value) {
  gen_buffer b = {.n = n, .vlen = t->vlen};
  if (t->vlen == VLEN_STRING) {
    char **s = calloc(n ? n : 1, sizeof *s);
    for (size_t i = 0; s && i < n; i++) {
      if (gen_below(in, 16) == 0) continue; /* a NULL string */
      size_t len = i < 4 ? gen_below(in, 80) : 2;
      s[i] = calloc(len + 1, 1);
      if (s[i]) gen_bytes(in, s[i], len); /* an embedded NUL ends it early: fine */
    }
    b.data = s;
  } else if (t->vlen == VLEN_SEQUENCE) {
    hvl_t *v = calloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
      v[i].len = i < 4 ? gen_below(in, 6) : 1;
      v[i].p = calloc(v[i].len ? v[i].len : 1, sizeof(int32_t));
      if (v[i].p) gen_bytes(in, v[i].p, v[i].len * sizeof(int32_t));
    }
    b.data = v;
  } else {
    size_t bytes = n * t->size;
    uint8_t *d = malloc(bytes ? bytes : 1);
    if (d && bytes) {
      size_t pattern = bytes < FILL_PATTERN ? bytes : FILL_PATTERN;
      gen_bytes(in, d, pattern);
      for (size_t i = pattern; i < bytes; i++) d[i] = d[i % pattern];
      if (t->cls == CLASS_INT && t->size <= 8) {
        uint64_t v = odd_integer(in, value);
        store(d, &v, t->size, t->big_endian);
      } else if (t->cls == CLASS_FLOAT && (t->size == 4 || t->size == 8)) {
        double v = odd_float(in, value);
        float f = (float)v;
        store(d, t->size == 4 ? (const void *)&f : (const void *)&v, t->size, t->big_endian);
      }
    }
    b.data = d;
  }
  return b;
}

static void free_buffer(gen_buffer *b) {
  if (b->vlen == VLEN_STRING)
    for (size_t i = 0; b->data && i < b->n; i++) free(((char **)b->data)[i]);
  if (b->vlen == VLEN_SEQUENCE)
    for (size_t i = 0; b->data && i < b->n; i++) free(((hvl_t *)b->data)[i].p);
  free(b->data);
  b->data = NULL;
}

/* ---- dataspaces ---- */

/* A dataspace chosen by the input: `rank`/`dims` themselves, a scalar, null, a short or long 1-D array,
 * 2-D, a rank past MTF_MAX_RANK (8), or (huge) sizes up to 2^62. unlimited: maxdims unlimited (chunked
 * datasets). *points gets the element count (0 for null). */
static hid_t any_space(gen_in *in, int rank, const hsize_t *dims, int huge, int unlimited, hsize_t *points) {
  hsize_t d[H5S_MAX_RANK], max[H5S_MAX_RANK];
  int r = rank;
  for (int i = 0; i < rank; i++) d[i] = dims[i];
  unsigned pick = gen_below(in, huge ? 9 : 8);
  switch (pick) {
    case 0: break;
    case 1: *points = 1; return H5Screate(H5S_SCALAR);
    case 2: *points = 0; return H5Screate(H5S_NULL);
    case 3: r = 1, d[0] = gen_below(in, 5); break;
    case 4: r = 1, d[0] = 1 + gen_u8(in) * 16 + gen_below(in, 16); break;
    case 5: r = 2, d[0] = 1 + gen_below(in, 4), d[1] = 1 + gen_below(in, 4); break;
    case 6: /* another rank, up to 12 */
      r = gen_below(in, 13);
      for (int i = 0; i < r; i++) d[i] = 1 + gen_below(in, 3);
      break;
    case 7: /* the expected rank, one size changed */
      if (r > 0) d[gen_below(in, (unsigned)r)] = gen_below(in, 8);
      break;
    default: /* huge declared sizes: storage for them never exists */
      r = 1 + gen_below(in, 2);
      for (int i = 0; i < r; i++) d[i] = (hsize_t)1 << (20 + gen_below(in, r == 1 ? 43 : 22));
      break;
  }
  if (r == 0) {
    *points = 1;
    return H5Screate(H5S_SCALAR);
  }
  *points = 1;
  for (int i = 0; i < r; i++) {
    max[i] = unlimited ? H5S_UNLIMITED : d[i];
    *points = d[i] && *points > ((hsize_t)1 << 62) / d[i] ? ((hsize_t)1 << 62) : *points * d[i];
  }
  return H5Screate_simple(r, d, max);
}

/* ---- attributes ---- */

static void write_attribute(hid_t loc, const char *name, const gen_type *t, hid_t space, const gen_buffer *b) {
  if (t->id < 0 || space < 0) return;
  hid_t attr = H5Acreate2(loc, name, t->id, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr >= 0) {
    if (b->data && H5Sget_simple_extent_type(space) != H5S_NULL) H5Awrite(attr, t->id, b->data);
    H5Aclose(attr);
  }
}

/* A hostile version of attribute `name` whose canonical form is canon (a type) over canon_space, with
 * value near `value` or text near `text`. */
static void hostile_attr(gen_in *in, hid_t loc, const char *name, hid_t canon, int rank, const hsize_t *dims,
                         int64_t value, const char *text) {
  /* 0 absent; 1 the expected type and dataspace, an odd value; 2 the expected type, another dataspace;
   * 3 another type and dataspace; 4 another type; 5 a string of another form (padding, width, set, vlen) */
  unsigned what = gen_below(in, 6);
  if (what == 0) return;
  size_t width = text ? strlen(text) + 1 : 8;
  gen_type t;
  if (what <= 2) {
    t = copy_type(canon);
  } else if (what <= 4) {
    t = any_type(in, width);
  } else {
    t = gen_below(in, 4) ? (gen_type){.id = fixed_string(in, width), .vlen = RAW, .cls = CLASS_OTHER} : any_type(in, width);
    if (t.id >= 0 && t.vlen == RAW && H5Tget_class(t.id) != H5T_STRING) {
      H5Tclose(t.id);
      t = copy_type(canon);
    }
    t.size = t.id >= 0 ? H5Tget_size(t.id) : 0;
  }
  hsize_t points = 1;
  hid_t space = what == 2 || what == 3 ? any_space(in, rank, dims, 0, 0, &points)
                                       : rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
  hssize_t n = space < 0 ? 0 : H5Sget_simple_extent_type(space) == H5S_NULL ? 0 : H5Sget_simple_extent_npoints(space);
  points = n > 0 ? (hsize_t)n : 0;
  if (points * (t.size ? t.size : 1) > ATTR_MAX_BYTES) {
    if (space >= 0) H5Sclose(space);
    space = H5Screate(H5S_SCALAR);
    points = 1;
  }
  gen_buffer b = make_buffer(in, &t, (size_t)points, value);
  /* A string keeps the expected text in front (so only its form is odd), unless the input says otherwise. */
  if (text && b.data && points > 0 && gen_below(in, 2)) {
    if (t.vlen == VLEN_STRING) {
      free(((char **)b.data)[0]);
      ((char **)b.data)[0] = strdup(text);
    } else if (t.vlen == RAW && t.id >= 0 && H5Tget_class(t.id) == H5T_STRING) {
      size_t len = strlen(text) < t.size ? strlen(text) : t.size;
      memcpy(b.data, text, len);
      if (len < t.size) memset((char *)b.data + len, H5Tget_strpad(t.id) == H5T_STR_SPACEPAD ? ' ' : 0, t.size - len);
    }
  }
  write_attribute(loc, name, &t, space, &b);
  free_buffer(&b);
  if (space >= 0) H5Sclose(space);
  if (t.id >= 0) H5Tclose(t.id);
}

void gen_attr_int(gen_in *in, hid_t loc, const char *name, int64_t value) {
  if (gen_hostile(in)) {
    hostile_attr(in, loc, name, H5T_STD_I64LE, 0, NULL, value, NULL);
    return;
  }
  hid_t space = H5Screate(H5S_SCALAR), attr = H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr >= 0) H5Awrite(attr, H5T_NATIVE_INT64, &value), H5Aclose(attr);
  H5Sclose(space);
}

void gen_attr_u64(gen_in *in, hid_t loc, const char *name, uint64_t value) {
  if (gen_hostile(in)) {
    hostile_attr(in, loc, name, H5T_STD_U64LE, 0, NULL, (int64_t)value, NULL);
    return;
  }
  hid_t space = H5Screate(H5S_SCALAR), attr = H5Acreate2(loc, name, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr >= 0) H5Awrite(attr, H5T_NATIVE_UINT64, &value), H5Aclose(attr);
  H5Sclose(space);
}

static hid_t nullterm(size_t width) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, width ? width : 1);
  H5Tset_strpad(t, H5T_STR_NULLTERM);
  return t;
}

void gen_attr_string(gen_in *in, hid_t loc, const char *name, const char *text) {
  hid_t type = nullterm(strlen(text) + 1);
  if (gen_hostile(in)) {
    hostile_attr(in, loc, name, type, 0, NULL, (int64_t)strlen(text), text);
  } else {
    hid_t space = H5Screate(H5S_SCALAR), attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr >= 0) H5Awrite(attr, type, text), H5Aclose(attr);
    H5Sclose(space);
  }
  H5Tclose(type);
}

void gen_attr_strings(gen_in *in, hid_t loc, const char *name, int n, const char *const *texts) {
  size_t width = 1;
  for (int i = 0; i < n; i++)
    if (strlen(texts[i]) + 1 > width) width = strlen(texts[i]) + 1;
  hid_t type = nullterm(width);
  hsize_t count = (hsize_t)n;
  if (gen_hostile(in)) {
    hostile_attr(in, loc, name, type, 1, &count, n, n > 0 ? texts[0] : "");
  } else {
    char *packed = calloc((size_t)(n ? n : 1), width);
    for (int i = 0; packed && i < n; i++) memcpy(packed + (size_t)i * width, texts[i], strlen(texts[i]));
    hid_t space = H5Screate_simple(1, &count, NULL), attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr >= 0 && packed) H5Awrite(attr, type, packed);
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    free(packed);
  }
  H5Tclose(type);
}

void gen_extra_attrs(gen_in *in, hid_t loc) {
  static const char *names[] = {"Vocab_size", "vocab_size ", "step\n", "", "dims", "checksum", "x", "complete"};
  unsigned n = gen_hostile(in) ? 1 + gen_below(in, 3) : 0;
  for (unsigned i = 0; i < n; i++) {
    char name[64];
    unsigned pick = gen_below(in, 9);
    if (pick < 8) snprintf(name, sizeof name, "%s", names[pick]);
    else snprintf(name, sizeof name, "extra_%u", gen_u8(in));
    if (!name[0] || H5Aexists(loc, name) > 0) continue; /* HDF5 refuses both */
    hostile_attr(in, loc, name, H5T_STD_I64LE, 0, NULL, 1, NULL);
  }
}

/* ---- datasets ---- */

/* Creates and writes the dataset; -1 when HDF5 refuses the combination (the input just gives no object). */
static hid_t make_dataset(gen_in *in, hid_t loc, const char *name, const gen_type *t, int rank, const hsize_t *dims,
                          int odd_space, int odd_storage, const void *data, hid_t mem_type, int64_t value) {
  unsigned layout = odd_storage ? gen_below(in, 8) : 0; /* 0 contiguous 1-3 chunked 4 compact 5 external */
  unsigned write = odd_storage ? gen_below(in, 5) : 0;  /* 0 all, 1 none, 2 first element, 3 early, 4 all */
  int chunked = layout >= 1 && layout <= 3;
  hsize_t points = 1;
  hid_t space;
  if (odd_space) {
    space = any_space(in, rank, dims, 1, chunked, &points);
  } else {
    hsize_t max[H5S_MAX_RANK];
    for (int i = 0; i < rank; i++) max[i] = chunked ? H5S_UNLIMITED : dims[i], points *= dims[i];
    space = rank ? H5Screate_simple(rank, dims, max) : H5Screate(H5S_SCALAR);
  }
  if (space < 0 || t->id < 0) {
    if (space >= 0) H5Sclose(space);
    return -1;
  }
  int srank = H5Sget_simple_extent_ndims(space);
  if (H5Sget_simple_extent_type(space) != H5S_SIMPLE) chunked = 0, layout = layout == 4 ? 4 : 0;
  if (H5Sget_simple_extent_type(space) == H5S_NULL) points = 0;
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunked) {
    hsize_t cdims[H5S_MAX_RANK], sdims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(space, sdims, NULL);
    for (int i = 0; i < srank; i++) cdims[i] = 1 + gen_below(in, 16);
    H5Pset_chunk(dcpl, srank, cdims);
    if (layout == 2) {
      if (gen_below(in, 2)) H5Pset_shuffle(dcpl);
      H5Pset_deflate(dcpl, gen_below(in, 10));
    }
    if (layout == 3) {
      if (gen_below(in, 2)) H5Pset_fletcher32(dcpl);
      else if (t->cls != CLASS_OTHER) H5Pset_scaleoffset(dcpl, t->cls == CLASS_INT ? H5Z_SO_INT : H5Z_SO_FLOAT_DSCALE, 2);
    }
  } else if (layout == 4) {
    H5Pset_layout(dcpl, H5D_COMPACT);
  } else if (layout == 5 && points <= WRITE_MAX_BYTES && points * t->size <= WRITE_MAX_BYTES) {
    H5Pset_external(dcpl, gen_path("external.bin"), 0, (hsize_t)(points * t->size));
  }
  if (gen_below(in, 8) == 0 && t->vlen == RAW) { /* a fill value of the input's bytes */
    uint8_t fill[64];
    gen_bytes(in, fill, sizeof fill);
    if (t->size <= sizeof fill) H5Pset_fill_value(dcpl, t->id, fill);
  }
  /* points is at most 2^62 and a type at most 70000 bytes: compare before multiplying */
  int writable = points <= WRITE_MAX_BYTES && points * t->size <= WRITE_MAX_BYTES;
  if (write == 3 && !chunked && layout != 4 && points <= EARLY_MAX_BYTES && points * t->size <= EARLY_MAX_BYTES) {
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY); /* storage for every element, none written */
    H5Pset_fill_time(dcpl, gen_below(in, 2) ? H5D_FILL_TIME_NEVER : H5D_FILL_TIME_ALLOC);
  }
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1); /* a name with '/' makes groups on the way */
  hid_t dset = H5Dcreate2(loc, name, t->id, space, lcpl, dcpl, H5P_DEFAULT);
  H5Pclose(lcpl);
  H5Pclose(dcpl);
  if (dset >= 0 && points > 0 && writable && (write == 0 || write == 2 || write == 4)) {
    if (write == 2 && srank > 0) { /* only the first element: the rest has no storage (chunked) or fill */
      hsize_t start[H5S_MAX_RANK] = {0}, one[H5S_MAX_RANK];
      for (int i = 0; i < srank; i++) one[i] = 1;
      hid_t mem = H5Screate_simple(srank, one, NULL);
      H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, one, NULL);
      gen_buffer b = make_buffer(in, t, 1, value);
      if (b.data) H5Dwrite(dset, t->id, mem, space, H5P_DEFAULT, b.data);
      free_buffer(&b);
      H5Sclose(mem);
    } else if (data && !odd_space && write == 0) {
      H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    } else {
      gen_buffer b = make_buffer(in, t, (size_t)points, value);
      if (b.data) H5Dwrite(dset, t->id, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data);
      free_buffer(&b);
    }
  }
  H5Sclose(space);
  return dset;
}

hid_t gen_dataset(gen_in *in, hid_t loc, const char *name, hid_t type, hid_t mem_type, int rank, const hsize_t *dims,
                  const void *data) {
  gen_type canon = copy_type(type);
  hid_t object = -1;
  int64_t value = rank > 0 ? (int64_t)dims[0] : 1;
  if (!gen_hostile(in)) {
    object = make_dataset(in, loc, name, &canon, rank, dims, 0, 0, data, mem_type, value);
    H5Tclose(canon.id);
    return object;
  }
  unsigned what = gen_below(in, 6);
  if (what == 0) { /* not a dataset: absent, a group, a link, a named datatype, a cycle */
    switch (gen_below(in, 7)) {
      case 0: break;
      case 1: object = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT); break;
      case 2: H5Lcreate_soft("/", loc, name, H5P_DEFAULT, H5P_DEFAULT); break;
      case 3: H5Lcreate_soft("/no/such/object", loc, name, H5P_DEFAULT, H5P_DEFAULT); break;
      case 4: H5Lcreate_external(gen_path("missing.h5"), "/tokens", loc, name, H5P_DEFAULT, H5P_DEFAULT); break;
      case 5: {
        hid_t t = H5Tcopy(type);
        if (H5Tcommit2(loc, name, t, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) >= 0) object = H5Oopen(loc, name, H5P_DEFAULT);
        H5Tclose(t);
        break;
      }
      default: H5Lcreate_hard(loc, ".", loc, name, H5P_DEFAULT, H5P_DEFAULT); break;
    }
  } else if (what == 1) { /* another type, the expected shape, values from the input */
    gen_type t = any_type(in, 8);
    object = make_dataset(in, loc, name, &t, rank, dims, 0, gen_below(in, 2), NULL, -1, value);
    if (t.id >= 0) H5Tclose(t.id);
  } else if (what == 2) { /* the expected type, another shape or size */
    object = make_dataset(in, loc, name, &canon, rank, dims, 1, gen_below(in, 2), NULL, -1, value);
  } else if (what == 3) { /* the expected type and shape, stored oddly or in part */
    object = make_dataset(in, loc, name, &canon, rank, dims, 0, 1, data, mem_type, value);
  } else { /* the expected type and shape, values from the input (ids past the vocabulary, NaN) */
    object = make_dataset(in, loc, name, &canon, rank, dims, 0, 0, NULL, -1, value);
  }
  H5Tclose(canon.id);
  return object;
}

void gen_decode_table(gen_in *in, hid_t loc, int64_t vocab) {
  if (vocab < 1 || vocab > 4096) return; /* larger tables cost time, not coverage */
  int64_t *offsets = malloc(sizeof(int64_t) * (size_t)(vocab + 1));
  uint8_t *bytes = malloc((size_t)vocab * 3 + 1);
  if (offsets && bytes) {
    offsets[0] = 0;
    for (int64_t i = 0; i < vocab; i++) {
      unsigned len = i < 64 ? gen_below(in, 4) : 1;
      gen_bytes(in, bytes + offsets[i], len);
      offsets[i + 1] = offsets[i] + len;
    }
    hsize_t n_offsets = (hsize_t)vocab + 1, n_bytes = (hsize_t)offsets[vocab];
    hid_t a = gen_dataset(in, loc, "decode_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n_offsets, offsets);
    hid_t b = gen_dataset(in, loc, "decode_bytes", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, &n_bytes, bytes);
    if (a >= 0) H5Oclose(a);
    if (b >= 0) H5Oclose(b);
  }
  free(offsets);
  free(bytes);
}

void gen_save(const char *path) {
  const char *to = getenv("MTF_FUZZ_SAVE");
  if (!to || !*to || !path) return;
  FILE *in = fopen(path, "rb"), *out = fopen(to, "wb");
  char buf[65536];
  size_t n;
  while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  if (in) fclose(in);
  if (out) fclose(out);
}
