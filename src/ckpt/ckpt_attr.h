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
/* The length of a string attribute plus one, for sizing a buffer; -1 when absent. */
int64_t mtf_ckpt_attr_string_size(hid_t object, const char *name);
int mtf_ckpt_attr_read_i64(hid_t object, const char *name, int64_t *value);
/* Reads a 1-D string array of at most max entries of MTF_NAME_MAX chars; *n gets the count. */
int mtf_ckpt_attr_read_strings(hid_t object, const char *name, char (*values)[MTF_NAME_MAX], int max, int *n);

/* Dataset names: a variable's name with '/' turned into '.' (HDF5 reads '/' as a group separator, and a
 * variable such as layer_000/attn/wq is also the prefix of its slot layer_000/attn/wq/adafactor_vr). */
int mtf_ckpt_dataset_name(const char *variable, char *out, size_t size);

/* Writes a checkpoint's /tokenizer group (ckpt_tokenizer.c; collective under MPI-IO: every rank calls,
 * `writer` selects the data). Returns a failure description or NULL. */
struct mtf_ckpt_tokenizer;
const char *mtf_ckpt_tokenizer_write(hid_t file, const struct mtf_ckpt_tokenizer *tok, int writer, hid_t dxpl);

#endif
