/* Checked reads of HDF5 attributes and checks of datasets, for files mtf did not write (shards from any
 * tool, hostile ones included). Every attribute read checks the attribute's dataspace (a scalar, or one
 * element), its class and its width before anything is read into the caller's buffer; every failure is
 * an MTF_ERR_INVALID message that starts with `where` (e.g. "shard 'x.h5'") and names the attribute.
 *
 * The caller holds mtf_hdf5_lock() (io/shard.h). loc and dataset are hid_t values. */
#ifndef MTF_IO_H5_CHECKED_H
#define MTF_IO_H5_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* An integer attribute (any signed or unsigned integer type of 1 to 8 bytes, any byte order) that fits
 * in int64. *present is 0 and *value untouched when loc has no attribute `name`. */
int mtf_h5_attr_int(int64_t loc, const char *name, const char *where, int64_t *value, int *present, mtf_error *err);

/* A string attribute, fixed-length (NULLTERM, NULLPAD as h5py writes numpy bytes, or SPACEPAD, which
 * is trimmed) or variable-length, of at most size - 1 bytes and no control characters, copied to out
 * with its terminating NUL. *present is 0 and out "" when loc has no attribute `name`. */
int mtf_h5_attr_string(int64_t loc, const char *name, const char *where, char *out, size_t size, int *present,
                       mtf_error *err);

/* Checks that `name` in loc is a hard link (not a soft or external link to another object or file) to
 * a dataset whose storage this process reads from this file alone: not a virtual dataset, no external
 * raw-data files, only filters this HDF5 has, and (when it holds elements) storage allocated for all of
 * them (a chunked dataset with missing chunks would read its fill value). */
int mtf_h5_check_dataset(int64_t loc, const char *name, int64_t dataset, const char *where, mtf_error *err);

#endif
