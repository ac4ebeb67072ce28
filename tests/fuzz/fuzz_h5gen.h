/* A structure-aware generator for the HDF5 fuzz targets (fuzz_shard, fuzz_ckpt). The fuzz input is not
 * the bytes of an HDF5 file: it is a recipe that drives HDF5's own API to write a WELL-FORMED file whose
 * attributes and datasets are hostile (wrong classes, ranks, dataspaces, widths, byte orders, string
 * padding, values, missing or extra objects, sizes that disagree). So the fuzzer exercises mtf's checks of
 * what HDF5 returns, not HDF5's parser of damaged bytes (the *_raw targets do that; findings there are
 * HDF5-internal, see tests/fuzz/CMakeLists.txt).
 *
 * Every "site" (an attribute, a dataset) reads a mode byte first: below GEN_HOSTILE it is written as mtf
 * writes it (the canonical value the caller passes), otherwise the next bytes choose a hostile variant.
 * An empty or all-zero input therefore gives a valid file, and the seeds in tests/fuzz/{shard,ckpt} are
 * short recipes. Reading past the end of the input gives zeros. */
#ifndef MTF_FUZZ_H5GEN_H
#define MTF_FUZZ_H5GEN_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#define GEN_HOSTILE 0xa0 /* a mode byte at or above this makes a site hostile (about 3 in 8) */

typedef struct gen_in {
  const uint8_t *p;
  size_t n;
} gen_in;

unsigned gen_u8(gen_in *in);
uint64_t gen_u64(gen_in *in);
unsigned gen_below(gen_in *in, unsigned n); /* in [0, n), n <= 256 */
int gen_hostile(gen_in *in);                /* reads a mode byte */
/* n bytes of the input (fewer when it ends; zeros after), for strings and data. */
void gen_bytes(gen_in *in, void *out, size_t n);

/* The working directory of this process (made once, removed at exit) and a path in it. */
const char *gen_path(const char *name);

/* Creates the file `name` in the working directory, the format (library version bounds, a user block)
 * chosen by the input. Returns the file or -1. */
hid_t gen_file_create(gen_in *in, const char *name);

/* Attributes on loc, each canonical or hostile (see above). A hostile one may be absent, of another
 * class/width/order, of another dataspace (null, an array, 2-D), or hold another value (negative, huge,
 * NaN, strings with control characters, NULLPAD or SPACEPAD, variable-length, too long). */
void gen_attr_int(gen_in *in, hid_t loc, const char *name, int64_t value);       /* canonical: int64 LE scalar */
void gen_attr_u64(gen_in *in, hid_t loc, const char *name, uint64_t value);      /* canonical: uint64 LE scalar */
void gen_attr_string(gen_in *in, hid_t loc, const char *name, const char *text); /* canonical: NULLTERM scalar */
/* canonical: a 1-D array of n NULLTERM strings of one width */
void gen_attr_strings(gen_in *in, hid_t loc, const char *name, int n, const char *const *texts);
/* 0 to 3 extra attributes of any kind, some named like the expected ones with a case or space changed. */
void gen_extra_attrs(gen_in *in, hid_t loc);

/* A dataset `name` on loc. Canonical: type `type` (a file type such as H5T_STD_U16LE), rank and dims as
 * given, contiguous, every element written from `data` (in `mem_type`). Hostile: absent, a group, a soft
 * or external link, a committed datatype, another type (any class, either byte order), another rank or
 * dataspace (scalar, null, huge declared sizes), chunked/compact/external/filtered storage, storage written
 * in part or not at all, values from the input. Returns an open object to put attributes on (the dataset,
 * or a group standing in for it), or -1; the caller closes it with H5Oclose. */
hid_t gen_dataset(gen_in *in, hid_t loc, const char *name, hid_t type, hid_t mem_type, int rank, const hsize_t *dims,
                  const void *data);

/* With MTF_FUZZ_SAVE=PATH in the environment, copies the generated file to PATH (to look at a finding
 * with h5dump, or to keep it as a regression test's input). */
void gen_save(const char *path);

/* mtf's decode table (io/decode_table.h) for ids 0..vocab-1 at loc: decode_offsets (int64, vocab + 1)
 * and decode_bytes (uint8), each canonical or hostile; token lengths 0 to 3 bytes of the input. */
void gen_decode_table(gen_in *in, hid_t loc, int64_t vocab);

#endif
