/* Moving a tensor axis to and from the front, so that collectives that split or concatenate along a
 * tensor axis can send contiguous blocks. For a row-major tensor [outer..., axis, inner...]:
 *   split:  [outer][parts*len][inner] -> [parts][outer][len][inner]   (block p = slice p along axis)
 *   concat: [parts][outer][len][inner] -> [outer][parts*len][inner]   (its inverse)
 * Pure memory copies, no communication. */
#ifndef MTF_COMM_TENSOR_PACK_H
#define MTF_COMM_TENSOR_PACK_H

#include <stddef.h>
#include <stdint.h>

/* dims are the dims of the whole input tensor for split (dims[axis] divisible by parts) and of one
 * block for concat. */
void mtf_pack_split(const void *in, void *out, size_t elem_size, int rank, const int64_t *dims, int axis,
                    int parts);
void mtf_pack_concat(const void *in, void *out, size_t elem_size, int rank, const int64_t *dims, int axis,
                     int parts);

int64_t mtf_dims_count(int rank, const int64_t *dims);

#endif
