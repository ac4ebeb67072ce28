#include "core/pairs.h"

#include <ctype.h>
#include <string.h>

static int is_separator(char c) { return c == ';' || c == ',' || isspace((unsigned char)c); }

int mtf_next_pair(const char **cursor, const char *text, const char *what, const char *example_value,
                  char key[MTF_PAIR_TOKEN_MAX], char value[MTF_PAIR_TOKEN_MAX], mtf_error *err) {
  const char *p = *cursor;
  while (*p && is_separator(*p)) p++;
  if (!*p) {
    *cursor = p;
    return 0;
  }
  const char *item = p;
  while (*p && !is_separator(*p)) p++;
  *cursor = p;
  size_t item_len = (size_t)(p - item);
  if (item_len >= MTF_PAIR_TOKEN_MAX)
    return -mtf_error_set(err, MTF_ERR_PARSE, "%s '%s': item '%.32s...' is too long", what, text, item);
  char token[MTF_PAIR_TOKEN_MAX];
  memcpy(token, item, item_len);
  token[item_len] = '\0';
  char *colon = strchr(token, ':');
  if (!colon)
    return -mtf_error_set(err, MTF_ERR_PARSE, "%s '%s': item '%s' has no ':'; write it as '%s:%s'", what, text,
                          token, token, example_value);
  *colon = '\0';
  memcpy(key, token, (size_t)(colon - token) + 1);
  memcpy(value, colon + 1, strlen(colon + 1) + 1);
  return 1;
}
