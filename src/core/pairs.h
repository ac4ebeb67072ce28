/* The `key:value` list syntax shared by shapes, meshes and layout rules (Mesh TensorFlow's strings):
 * items separated by `;`, `,` or whitespace, each item `key:value`. */
#ifndef MTF_CORE_PAIRS_H
#define MTF_CORE_PAIRS_H

#include <stddef.h>

#include "core/error.h"

#define MTF_PAIR_TOKEN_MAX 96

/* Reads the next item at *cursor into key and value and advances *cursor. Returns 1 when an item was
 * read, 0 at the end of the text, or -code on a malformed item (err says which; `what` names the text,
 * e.g. "mesh shape", and `example_value` is shown in the hint for an item without ':'). */
int mtf_next_pair(const char **cursor, const char *text, const char *what, const char *example_value,
                  char key[MTF_PAIR_TOKEN_MAX], char value[MTF_PAIR_TOKEN_MAX], mtf_error *err);

#endif
