/* Small HDF5 attribute helpers shared by the checkpoint writer, reader and inspector (internal). Strings
 * are fixed-length, NUL-terminated ASCII, so h5py and h5dump read them without special types. All return
 * 0 on success and -1 on failure; the caller holds mtf_hdf5_lock and reports the error. */
#ifndef MTF_CKPT_ATTR_H
#define MTF_CKPT_ATTR_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "core/shape.h"

int mtf_ckpt_attr_write_string(hid_t object, const char *name, const char *value);
int mtf_ckpt_attr_write_i64(hid_t object, const char *name, int64_t value);
/* A 1-D array of n strings (n may be 0). */
int mtf_ckpt_attr_write_strings(hid_t object, const char *name, int n, const char *const *values);

/* Reads a string attribute into buf (truncated to size - 1). */
int mtf_ckpt_attr_read_string(hid_t object, const char *name, char *buf, size_t size);
/* Why a string attribute cannot be read as one ("it is missing", "it is an array of 1000 strings, not one
 * string", "it is 100.0 MiB, over the 16 MiB a string attribute may have", ...), into why. */
void mtf_ckpt_attr_string_problem(hid_t object, const char *name, char *why, size_t size);
/* The length of a string attribute plus one, for sizing a buffer; -1 when absent. */
int64_t mtf_ckpt_attr_string_size(hid_t object, const char *name);
int mtf_ckpt_attr_read_i64(hid_t object, const char *name, int64_t *value);
/* Reads a 1-D string array of at most max entries of MTF_NAME_MAX chars; *n gets the count. */
int mtf_ckpt_attr_read_strings(hid_t object, const char *name, char (*values)[MTF_NAME_MAX], int max, int *n);

int mtf_ckpt_attr_write_u64(hid_t object, const char *name, uint64_t value);
/* An unsigned 64-bit integer attribute (the checksum); -1 when absent or of another type. */
int mtf_ckpt_attr_read_u64(hid_t object, const char *name, uint64_t *value);

/* Opens a checkpoint file read-only in this process alone (inspect, verify, the tokenizer): refuses a
 * non-regular file before HDF5 opens it; -1 with err set on failure. */
hid_t mtf_ckpt_open_serial(const char *path, mtf_error *err);

/* A variable dataset's checksum (attribute `checksum`, uint64): the sum modulo 2^64 of
 * mtf_ckpt_element_hash(i, bits of element i) over every element, i its global row-major index. A sum
 * combines slices in any order, so each writer hashes its own hyperslab and the job adds them up; and
 * since the hash is a bijection of the bits for a fixed i, any change to one element changes the sum. */
uint64_t mtf_ckpt_element_hash(uint64_t index, uint32_t bits);
/* The partial sum of a hyperslab (start, count) of a dataset of shape dims, data in row-major order. */
uint64_t mtf_ckpt_checksum_slab(const float *data, int rank, const uint64_t *dims, const uint64_t *start,
                                const uint64_t *count);

/* Dataset names: a variable's name with '/' turned into '.' (HDF5 reads '/' as a group separator, and a
 * variable such as layer_000/attn/wq is also the prefix of its slot layer_000/attn/wq/adafactor_vr). */
int mtf_ckpt_dataset_name(const char *variable, char *out, size_t size);

/* Writes a checkpoint's /tokenizer group (ckpt_tokenizer.c; collective under MPI-IO: every rank calls,
 * `writer` selects the data). Returns a failure description or NULL. */
struct mtf_ckpt_tokenizer;
const char *mtf_ckpt_tokenizer_write(hid_t file, const struct mtf_ckpt_tokenizer *tok, int writer, hid_t dxpl);

#endif
