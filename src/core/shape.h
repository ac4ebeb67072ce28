/* Named dimensions and shapes: `batch:8`, `d_model:512`. A shape is an ordered list of dimensions with
 * distinct names. The same type describes a processor mesh (named axes with sizes), so shape algebra and
 * parsing serve both. Shapes are small fixed-size values: copy them freely, no allocation. */
#ifndef MTF_CORE_SHAPE_H
#define MTF_CORE_SHAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define MTF_MAX_RANK 8
#define MTF_NAME_MAX 32 /* including the terminating NUL */

typedef struct mtf_dim {
  char name[MTF_NAME_MAX];
  int64_t size;
} mtf_dim;

typedef struct mtf_shape {
  int rank;
  mtf_dim dims[MTF_MAX_RANK];
} mtf_shape;

/* True when name is a valid identifier ([A-Za-z_][A-Za-z0-9_]*, shorter than MTF_NAME_MAX). */
bool mtf_name_is_valid(const char *name);

mtf_dim mtf_dim_make(const char *name, int64_t size);

/* Parses `name:size` items separated by `;`, `,` or whitespace (Mesh TensorFlow's syntax). An empty
 * string is the scalar shape. `what` names the text in error messages ("mesh shape", "tensor shape"). */
int mtf_shape_parse(const char *text, const char *what, mtf_shape *out, mtf_error *err);

/* Writes `[batch:8, d_model:512]` into buf (always NUL-terminated); returns buf for use in printf. */
const char *mtf_shape_format(const mtf_shape *shape, char *buf, size_t buf_size);
#define MTF_SHAPE_STR_MAX (MTF_MAX_RANK * (MTF_NAME_MAX + 24) + 4)

/* Index of the dimension called name, or -1. */
int mtf_shape_index_of(const mtf_shape *shape, const char *name);
bool mtf_shape_has(const mtf_shape *shape, const char *name);
int64_t mtf_shape_num_elements(const mtf_shape *shape);
bool mtf_shape_equal(const mtf_shape *a, const mtf_shape *b);

/* The most elements a shape may have (2^60): element counts, and their sizes in bytes (up to 8 per element),
 * then fit an int64 with room to spare. mtf_shape_append refuses a dimension that would pass it. */
#define MTF_MAX_ELEMENTS ((int64_t)1 << 60)
/* *out = a * b for a, b >= 0; returns 1, or 0 (leaving *out as INT64_MAX) when the product passes
 * MTF_MAX_ELEMENTS. For sizes from outside input. */
int mtf_checked_product(int64_t a, int64_t b, int64_t *out);

/* Algebra. Each returns MTF_OK or an error naming the dimension (duplicate, missing, rank too high, more
 * than MTF_MAX_ELEMENTS elements). */
int mtf_shape_append(mtf_shape *shape, const char *name, int64_t size, mtf_error *err);
int mtf_shape_remove(const mtf_shape *shape, const char *name, mtf_shape *out, mtf_error *err);
int mtf_shape_concat(const mtf_shape *a, const mtf_shape *b, mtf_shape *out, mtf_error *err);

/* Levenshtein distance of two names (99 when either is longer than 63 characters). */
int mtf_edit_distance(const char *a, const char *b);
/* The candidate closest to name (distance below 4), for "did you mean" hints; NULL when none is close. */
const char *mtf_closest_name(const char *name, const char *const *candidates, int n);

#endif
