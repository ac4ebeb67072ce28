/* Tokens in and out of `mtf generate`: see generate_text.h. */
#define _GNU_SOURCE
#include "run/generate_text.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenize.h"

int mtf_gen_read_lines(const char *path, char ***lines, int64_t *count, mtf_error *err) {
  *lines = NULL;
  *count = 0;
  FILE *f = fopen(path, "r");
  if (!f) return mtf_error_set(err, MTF_ERR_IO, "cannot open '%s' for reading", path);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int64_t have = 0, room = 0;
  char **out = NULL;
  int rc = MTF_OK;
  while (rc == MTF_OK && (n = getline(&line, &cap, f)) >= 0) {
    if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
    if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
    if (have == room) {
      room = room ? 2 * room : 16;
      char **grown = realloc(out, sizeof(char *) * (size_t)room);
      if (!grown) {
        rc = mtf_error_set(err, MTF_ERR_NOMEM, "reading '%s': out of memory", path);
        break;
      }
      out = grown;
    }
    out[have] = strdup(line);
    if (!out[have]) rc = mtf_error_set(err, MTF_ERR_NOMEM, "reading '%s': out of memory", path);
    else have++;
  }
  if (rc == MTF_OK && ferror(f)) rc = mtf_error_set(err, MTF_ERR_IO, "reading '%s' failed", path);
  free(line);
  fclose(f);
  if (rc != MTF_OK) {
    mtf_gen_free_lines(out, have);
    return rc;
  }
  *lines = out;
  *count = have;
  return MTF_OK;
}

void mtf_gen_free_lines(char **lines, int64_t count) {
  for (int64_t i = 0; i < count; i++) free(lines[i]);
  free(lines);
}

int mtf_gen_vocab_load(const char *path, mtf_gen_vocab *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  char **lines;
  int64_t count;
  MTF_CHECK(mtf_gen_read_lines(path, &lines, &count, err));
  for (int64_t i = 0; i < count; i++)
    if (lines[i][0] == '\0') {
      mtf_gen_free_lines(lines, count);
      return mtf_error_set(err, MTF_ERR_INVALID, "vocabulary file '%s': line %lld is empty (one token per line; "
                           "id = line number - 1)", path, (long long)i + 1);
    }
  if (count == 0) {
    mtf_gen_free_lines(lines, count);
    return mtf_error_set(err, MTF_ERR_INVALID, "vocabulary file '%s' is empty (one token per line)", path);
  }
  out->count = count;
  out->tokens = lines;
  return MTF_OK;
}

void mtf_gen_vocab_free(mtf_gen_vocab *v) {
  mtf_gen_free_lines(v->tokens, v->count);
  memset(v, 0, sizeof *v);
}

static int check_ids(const mtf_gen_tokens *t, const int32_t *ids, int64_t n, const char *what, mtf_error *err) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= t->model_vocab)
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: id %d is not in [0, %lld) (model.vocab)%s", what, ids[i],
                           (long long)t->model_vocab,
                           t->mode == MTF_GEN_TABLE ? ": the model is smaller than its tokenizer's vocabulary" : "");
  return MTF_OK;
}

/* Integers separated by spaces or commas, inside [ ] when bracketed. */
static int parse_ids(const char *text, int bracketed, const char *what, int32_t **ids, int64_t *count,
                     mtf_error *err) {
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  if (bracketed) {
    if (*p != '[')
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is not a JSON array of token ids ([15, 496, 11])", what, text);
    p++;
  }
  size_t most = strlen(p) / 2 + 1;
  int32_t *out = malloc(sizeof(int32_t) * most);
  if (!out) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  int64_t n = 0;
  int closed = 0;
  while (*p) {
    if (*p == ' ' || *p == ',' || *p == '\t') {
      p++;
      continue;
    }
    if (bracketed && *p == ']') {
      closed = 1;
      p++;
      while (isspace((unsigned char)*p)) p++;
      break;
    }
    char *end = NULL;
    long long id = strtoll(p, &end, 10);
    if (end == p || id < 0 || id > INT32_MAX || (*end && !strchr(" ,\t]", *end))) {
      free(out);
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s': each id must be a non-negative integer, separated by "
                           "spaces or commas", what, text);
    }
    out[n++] = (int32_t)id;
    p = end;
  }
  if (bracketed && (!closed || *p)) {
    free(out);
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is not a JSON array of token ids ([15, 496, 11])", what, text);
  }
  *ids = out;
  *count = n;
  return MTF_OK;
}

static int encode_vocab(const mtf_gen_tokens *t, const char *text, const char *what, int32_t **ids, int64_t *count,
                        mtf_error *err) {
  size_t most = strlen(text) / 2 + 1;
  int32_t *out = malloc(sizeof(int32_t) * most);
  if (!out) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  int64_t n = 0;
  for (const char *p = text; *p;) {
    if (isspace((unsigned char)*p)) {
      p++;
      continue;
    }
    size_t len = 0;
    while (p[len] && !isspace((unsigned char)p[len])) len++;
    int64_t id = -1;
    for (int64_t v = 0; v < t->vocab->count && id < 0; v++)
      if (strlen(t->vocab->tokens[v]) == len && memcmp(t->vocab->tokens[v], p, len) == 0) id = v;
    if (id < 0) {
      free(out);
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: unknown token '%.*s': it is not a line of the vocabulary file "
                           "(%lld tokens; the prompt is split at whitespace)", what, (int)len, p,
                           (long long)t->vocab->count);
    }
    out[n++] = (int32_t)id;
    p += len;
  }
  *ids = out;
  *count = n;
  return MTF_OK;
}

int mtf_gen_encode(const mtf_gen_tokens *t, const char *text, int as_ids, const char *what, int32_t **ids,
                   int64_t *count, mtf_error *err) {
  *ids = NULL;
  *count = 0;
  int rc;
  if (as_ids || t->json_ids) {
    rc = parse_ids(text, t->json_ids && !as_ids, what, ids, count, err);
  } else if (t->mode == MTF_GEN_TABLE) {
    rc = mtf_decode_table_encode(t->table, text, ids, count, err);
  } else if (t->mode == MTF_GEN_VOCAB) {
    rc = encode_vocab(t, text, what, ids, count, err);
  } else if (t->mode == MTF_GEN_IDS) {
    if (text[0])
      return mtf_error_set(err, MTF_ERR_INVALID, "the checkpoint's tokenizer '%s' has no decode table, so a text prompt "
                           "cannot be encoded: give the prompt as ids with --prompt-ids", t->tokenizer);
    rc = parse_ids(text, 0, what, ids, count, err);
  } else {
    size_t length = strlen(text);
    int32_t *out = malloc(sizeof(int32_t) * (length + 1));
    if (!out) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
    for (size_t i = 0; i < length; i++) out[i] = (unsigned char)text[i];
    *ids = out;
    *count = (int64_t)length;
    rc = MTF_OK;
  }
  if (rc == MTF_OK) rc = check_ids(t, *ids, *count, what, err);
  if (rc != MTF_OK) {
    free(*ids);
    *ids = NULL;
    *count = 0;
  }
  return rc;
}

void mtf_gen_emit(const mtf_gen_tokens *t, FILE *out, int32_t id, int first) {
  if (t->mode == MTF_GEN_TABLE) {
    size_t size;
    const uint8_t *bytes = mtf_decode_token(t->table, id, &size);
    if (size) fwrite(bytes, 1, size, out);
  } else if (t->mode == MTF_GEN_VOCAB) {
    if (id >= 0 && id < t->vocab->count) fprintf(out, first ? "%s" : " %s", t->vocab->tokens[id]);
  } else if (t->mode == MTF_GEN_IDS) {
    fprintf(out, first ? "%d" : " %d", id);
  } else if (id < 256) {
    fputc(id, out);
  }
}

void mtf_gen_emit_json_ids(FILE *out, const int32_t *ids, int64_t n) {
  fputc('[', out);
  for (int64_t i = 0; i < n; i++) fprintf(out, i ? ", %d" : "%d", ids[i]);
  fputc(']', out);
}

void mtf_gen_json_string(FILE *out, const char *s, size_t n) {
  fputc('"', out);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c == '\n') fputs("\\n", out);
    else if (c < 0x20 || c >= 0x7f) fprintf(out, "\\u%04x", c); /* bytes as code points: lossless, ASCII */
    else fputc(c, out);
  }
  fputc('"', out);
}

char *mtf_gen_text(const mtf_gen_tokens *t, const int32_t *ids, int64_t n, size_t *size) {
  char *buf = NULL;
  FILE *mem = open_memstream(&buf, size);
  if (!mem) return NULL;
  for (int64_t i = 0; i < n; i++) mtf_gen_emit(t, mem, ids[i], i == 0);
  fclose(mem);
  return buf;
}

void mtf_gen_emit_one_line(FILE *out, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\') fputs("\\\\", out);
    else if (s[i] == '\n') fputs("\\n", out);
    else if (s[i] == '\r') fputs("\\r", out);
    else fputc(s[i], out);
  }
  fputc('\n', out);
}
