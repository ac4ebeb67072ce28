#include "core/shape.h"

#include "core/pairs.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool mtf_name_is_valid(const char *name) {
  size_t len = strlen(name);
  if (len == 0 || len >= MTF_NAME_MAX) return false;
  if (!(isalpha((unsigned char)name[0]) || name[0] == '_')) return false;
  for (size_t i = 1; i < len; i++)
    if (!(isalnum((unsigned char)name[i]) || name[i] == '_')) return false;
  return true;
}

mtf_dim mtf_dim_make(const char *name, int64_t size) {
  mtf_dim dim;
  memset(&dim, 0, sizeof dim);
  snprintf(dim.name, sizeof dim.name, "%s", name);
  dim.size = size;
  return dim;
}

int mtf_shape_parse(const char *text, const char *what, mtf_shape *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  const char *cursor = text;
  char name[MTF_PAIR_TOKEN_MAX], size_text[MTF_PAIR_TOKEN_MAX];
  int got;
  while ((got = mtf_next_pair(&cursor, text, what, "4", name, size_text, err)) == 1) {
    if (!mtf_name_is_valid(name))
      return mtf_error_set(err, MTF_ERR_PARSE,
                           "%s '%s': '%s' is not a valid dimension name (letters, digits and '_', not starting "
                           "with a digit, at most %d characters)",
                           what, text, name, MTF_NAME_MAX - 1);
    char *end = NULL;
    errno = 0;
    long long size = strtoll(size_text, &end, 10);
    if (size_text[0] == '\0' || *end != '\0' || errno == ERANGE)
      return mtf_error_set(err, MTF_ERR_PARSE, "%s '%s': size of '%s' is '%s', which is not an integer", what,
                           text, name, size_text);
    if (size < 1)
      return mtf_error_set(err, MTF_ERR_INVALID, "%s '%s': size of '%s' is %lld; sizes must be at least 1", what,
                           text, name, size);
    int rc = mtf_shape_append(out, name, (int64_t)size, err);
    if (rc) return mtf_error_prefix(err, "%s '%s'", what, text);
  }
  return got < 0 ? -got : MTF_OK;
}

const char *mtf_shape_format(const mtf_shape *shape, char *buf, size_t buf_size) {
  size_t used = 0;
  if (buf_size == 0) return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, buf_size, "[");
  for (int i = 0; i < shape->rank && used < buf_size; i++)
    used += (size_t)snprintf(buf + used, buf_size - used, "%s%s:%lld", i ? ", " : "", shape->dims[i].name,
                             (long long)shape->dims[i].size);
  if (used < buf_size) snprintf(buf + used, buf_size - used, "]");
  return buf;
}

int mtf_shape_index_of(const mtf_shape *shape, const char *name) {
  for (int i = 0; i < shape->rank; i++)
    if (strcmp(shape->dims[i].name, name) == 0) return i;
  return -1;
}

bool mtf_shape_has(const mtf_shape *shape, const char *name) { return mtf_shape_index_of(shape, name) >= 0; }

int64_t mtf_shape_num_elements(const mtf_shape *shape) {
  int64_t n = 1;
  for (int i = 0; i < shape->rank; i++) n *= shape->dims[i].size;
  return n;
}

bool mtf_shape_equal(const mtf_shape *a, const mtf_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i].size != b->dims[i].size || strcmp(a->dims[i].name, b->dims[i].name) != 0) return false;
  return true;
}

int mtf_checked_product(int64_t a, int64_t b, int64_t *out) {
  int64_t p;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &p) || p > MTF_MAX_ELEMENTS) {
    *out = INT64_MAX;
    return 0;
  }
  *out = p;
  return 1;
}

int mtf_shape_append(mtf_shape *shape, const char *name, int64_t size, mtf_error *err) {
  if (!mtf_name_is_valid(name))
    return mtf_error_set(err, MTF_ERR_INVALID, "'%s' is not a valid dimension name", name);
  if (size < 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "dimension '%s' has size %lld; sizes must be at least 1", name,
                         (long long)size);
  if (mtf_shape_has(shape, name))
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "dimension '%s' appears twice; each dimension of a shape needs its own name (rename "
                         "one, e.g. 'memory_length' for a second 'length')",
                         name);
  if (shape->rank >= MTF_MAX_RANK)
    return mtf_error_set(err, MTF_ERR_INVALID, "adding '%s' would give more than %d dimensions", name,
                         MTF_MAX_RANK);
  int64_t elements;
  if (!mtf_checked_product(mtf_shape_num_elements(shape), size, &elements)) {
    char buf[MTF_SHAPE_STR_MAX];
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "adding '%s' (size %lld) to %s would give more than 2^60 elements (the product overflows)",
                         name, (long long)size, mtf_shape_format(shape, buf, sizeof buf));
  }
  shape->dims[shape->rank++] = mtf_dim_make(name, size);
  return MTF_OK;
}

int mtf_shape_remove(const mtf_shape *shape, const char *name, mtf_shape *out, mtf_error *err) {
  int index = mtf_shape_index_of(shape, name);
  if (index < 0) {
    char buf[MTF_SHAPE_STR_MAX];
    return mtf_error_set(err, MTF_ERR_INVALID, "cannot remove dimension '%s': shape %s has no such dimension",
                         name, mtf_shape_format(shape, buf, sizeof buf));
  }
  mtf_shape result = *shape;
  for (int i = index; i + 1 < result.rank; i++) result.dims[i] = result.dims[i + 1];
  result.rank--;
  memset(&result.dims[result.rank], 0, sizeof result.dims[0]);
  *out = result;
  return MTF_OK;
}

int mtf_shape_concat(const mtf_shape *a, const mtf_shape *b, mtf_shape *out, mtf_error *err) {
  mtf_shape result = *a;
  for (int i = 0; i < b->rank; i++) {
    int rc = mtf_shape_append(&result, b->dims[i].name, b->dims[i].size, err);
    if (rc) {
      char sa[MTF_SHAPE_STR_MAX], sb[MTF_SHAPE_STR_MAX];
      return mtf_error_prefix(err, "cannot concatenate %s and %s", mtf_shape_format(a, sa, sizeof sa),
                              mtf_shape_format(b, sb, sizeof sb));
    }
  }
  *out = result;
  return MTF_OK;
}

int mtf_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  int row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diagonal = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j], best = diagonal + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diagonal = up;
      row[j] = best;
    }
  }
  return row[lb];
}

const char *mtf_closest_name(const char *name, const char *const *candidates, int n) {
  const char *best = NULL;
  int best_distance = 4;
  for (int i = 0; i < n; i++) {
    int d = mtf_edit_distance(name, candidates[i]);
    if (d < best_distance) {
      best_distance = d;
      best = candidates[i];
    }
  }
  return best;
}
