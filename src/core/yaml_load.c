/* Checked YAML input (see yaml_load.h). */
#define _GNU_SOURCE
#include "core/yaml_load.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mtf_yaml_read_file(const char *path, const char *what, char **text, size_t *length, mtf_error *err) {
  *text = NULL;
  *length = 0;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return mtf_error_set(err, MTF_ERR_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return mtf_error_set(err, MTF_ERR_IO, "cannot read %s '%s': %s", what, path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return mtf_error_set(err, MTF_ERR_IO, "%s '%s' is %s; give a regular YAML file", what, path, kind);
  }
  if (st.st_size > MTF_YAML_MAX_FILE) {
    close(fd);
    return mtf_error_set(err, MTF_ERR_IO, "%s '%s' is %lld bytes; at most %d are accepted", what, path,
                         (long long)st.st_size, MTF_YAML_MAX_FILE);
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size_t capacity = (size_t)st.st_size + 1, used = 0;
  char *buf = malloc(capacity + 1);
  if (!buf) {
    close(fd);
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory reading %s '%s'", what, path);
  }
  for (;;) { /* read to the end: the size may have changed since fstat */
    if (used == capacity) {
      if (capacity > MTF_YAML_MAX_FILE) {
        free(buf);
        close(fd);
        return mtf_error_set(err, MTF_ERR_IO, "%s '%s' is longer than %d bytes", what, path, MTF_YAML_MAX_FILE);
      }
      size_t bigger = capacity * 2 > (size_t)MTF_YAML_MAX_FILE + 1 ? (size_t)MTF_YAML_MAX_FILE + 1 : capacity * 2;
      char *grown = realloc(buf, bigger + 1);
      if (!grown) {
        free(buf);
        close(fd);
        return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory reading %s '%s'", what, path);
      }
      buf = grown;
      capacity = bigger;
    }
    ssize_t got = read(fd, buf + used, capacity - used);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return mtf_error_set(err, MTF_ERR_IO, "cannot read %s '%s': %s", what, path, strerror(e));
    }
    if (got == 0) break;
    used += (size_t)got;
  }
  close(fd);
  buf[used] = '\0';
  *text = buf;
  *length = used;
  return MTF_OK;
}

/* 1-based line and column (in characters) of a byte offset. */
static void offset_position(const char *text, size_t length, size_t offset, size_t *line, size_t *column) {
  *line = 1;
  *column = 1;
  if (offset > length) offset = length;
  for (size_t i = 0; i < offset; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\n' || (c == '\r' && (i + 1 >= length || text[i + 1] != '\n'))) {
      (*line)++;
      *column = 1;
    } else if ((c & 0xC0) != 0x80 && c != '\r') {
      (*column)++;
    }
  }
}

static int parser_error(const yaml_parser_t *parser, const char *text, size_t length, const char *source,
                        mtf_error *err) {
  size_t line, column;
  const char *problem = parser->problem ? parser->problem : "unknown problem";
  if (parser->error == YAML_READER_ERROR) {
    offset_position(text, length, parser->problem_offset, &line, &column);
    if (parser->problem_value >= 0)
      return mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: YAML byte error: %s (byte 0x%02X at offset %zu); the "
                           "file must be UTF-8 text", source, line, column, problem,
                           (unsigned)parser->problem_value & 0xFFu, parser->problem_offset);
    return mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: YAML byte error: %s (at offset %zu); the file must be "
                         "UTF-8 text", source, line, column, problem, parser->problem_offset);
  }
  if (parser->error == YAML_MEMORY_ERROR)
    return mtf_error_set(err, MTF_ERR_NOMEM, "%s: out of memory parsing YAML", source);
  return mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: YAML syntax error: %s%s%s", source,
                       parser->problem_mark.line + 1, parser->problem_mark.column + 1, problem,
                       parser->context ? " " : "", parser->context ? parser->context : "");
}

typedef struct key_seen {
  char *value;
  size_t length;
  size_t order;
  yaml_mark_t mark;
} key_seen;

typedef struct frame {
  int mapping, expect_key;
  key_seen *keys;
  size_t count, capacity;
} frame;

static int compare_keys(const void *pa, const void *pb) {
  const key_seen *a = pa, *b = pb;
  if (a->length != b->length) return a->length < b->length ? -1 : 1;
  int c = memcmp(a->value, b->value, a->length);
  if (c) return c;
  return a->order < b->order ? -1 : a->order > b->order;
}

static void frame_free(frame *f) {
  for (size_t i = 0; i < f->count; i++) free(f->keys[i].value);
  free(f->keys);
  memset(f, 0, sizeof *f);
}

static int same_key(const key_seen *a, const key_seen *b) {
  return a->length == b->length && memcmp(a->value, b->value, a->length) == 0;
}

/* The second occurrence of a repeated key of f (the earliest such in the text), or NULL; *first is the
 * first occurrence. Sorts f's keys. */
static const key_seen *duplicate_key(frame *f, const key_seen **first) {
  if (f->count < 2) return NULL;
  qsort(f->keys, f->count, sizeof *f->keys, compare_keys);
  const key_seen *best = NULL;
  for (size_t i = 1; i < f->count; i++) /* equal keys sort together, by their order in the text */
    if (same_key(&f->keys[i], &f->keys[i - 1]) && (i < 2 || !same_key(&f->keys[i - 1], &f->keys[i - 2])) &&
        (!best || f->keys[i].order < best->order)) {
      best = &f->keys[i];
      *first = &f->keys[i - 1];
    }
  return best;
}

/* A printable excerpt of a key for messages. */
static void excerpt(const char *value, size_t length, char *out, size_t size) {
  size_t j = 0;
  for (size_t i = 0; i < length && j + 8 < size; i++) {
    unsigned char c = (unsigned char)value[i];
    if (c < 0x20 || c == 0x7F)
      j += (size_t)snprintf(out + j, size - j, "\\x%02X", c);
    else
      out[j++] = (char)c;
  }
  out[j] = '\0';
}

/* The event pass: depth, duplicate keys, NUL in scalars, one document. */
static int check_events(const char *text, size_t length, const char *source, mtf_error *err) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return mtf_error_set(err, MTF_ERR_NOMEM, "cannot start the YAML parser");
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, length);
  frame stack[MTF_YAML_MAX_DEPTH + 1];
  int depth = 0, documents = 0, rc = MTF_OK, done = 0;
  size_t order = 0;
  memset(stack, 0, sizeof stack);
  while (!done && rc == MTF_OK) {
    yaml_event_t event;
    if (!yaml_parser_parse(&parser, &event)) {
      rc = parser_error(&parser, text, length, source, err);
      break;
    }
    yaml_mark_t mark = event.start_mark;
    frame *top = depth > 0 ? &stack[depth - 1] : NULL;
    int is_key = top && top->mapping && top->expect_key;
    if (top && top->mapping &&
        (event.type == YAML_SCALAR_EVENT || event.type == YAML_ALIAS_EVENT || event.type == YAML_SEQUENCE_START_EVENT ||
         event.type == YAML_MAPPING_START_EVENT))
      top->expect_key = !top->expect_key;
    switch (event.type) {
      case YAML_STREAM_END_EVENT: done = 1; break;
      case YAML_DOCUMENT_START_EVENT:
        if (++documents > 1)
          rc = mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: a second YAML document ('---') starts here; the file "
                             "must hold exactly one", source, mark.line + 1, mark.column + 1);
        break;
      case YAML_SCALAR_EVENT: {
        const char *value = (const char *)event.data.scalar.value;
        size_t n = event.data.scalar.length;
        if (memchr(value, '\0', n)) {
          rc = mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: this %s holds a NUL character ('\\0'), which no "
                             "config text may contain", source, mark.line + 1, mark.column + 1, is_key ? "key" : "value");
          break;
        }
        if (is_key) {
          if (top->count == top->capacity) {
            size_t bigger = top->capacity ? top->capacity * 2 : 16;
            key_seen *grown = realloc(top->keys, bigger * sizeof *grown);
            if (!grown) {
              rc = mtf_error_set(err, MTF_ERR_NOMEM, "%s: out of memory parsing YAML", source);
              break;
            }
            top->keys = grown;
            top->capacity = bigger;
          }
          key_seen *k = &top->keys[top->count];
          k->value = malloc(n + 1);
          if (!k->value) {
            rc = mtf_error_set(err, MTF_ERR_NOMEM, "%s: out of memory parsing YAML", source);
            break;
          }
          memcpy(k->value, value, n);
          k->value[n] = '\0';
          k->length = n;
          k->order = order++;
          k->mark = mark;
          top->count++;
        }
        break;
      }
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT:
        if (depth == MTF_YAML_MAX_DEPTH) {
          rc = mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: the YAML nests deeper than %d levels of mappings and "
                             "lists; no config needs that many", source, mark.line + 1, mark.column + 1,
                             MTF_YAML_MAX_DEPTH);
          break;
        }
        memset(&stack[depth], 0, sizeof stack[depth]);
        stack[depth].mapping = event.type == YAML_MAPPING_START_EVENT;
        stack[depth].expect_key = 1;
        depth++;
        break;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        if (!top) break;
        const key_seen *first = NULL, *dup = top->mapping ? duplicate_key(top, &first) : NULL;
        if (dup) {
          char name[96];
          excerpt(dup->value, dup->length, name, sizeof name);
          rc = mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: duplicate key '%s' (first at line %zu, column %zu); "
                             "YAML does not allow a key twice in one mapping: remove one", source, dup->mark.line + 1,
                             dup->mark.column + 1, name, first->mark.line + 1, first->mark.column + 1);
        }
        frame_free(top);
        depth--;
        break;
      }
      default: break;
    }
    yaml_event_delete(&event);
  }
  for (int i = 0; i < depth; i++) frame_free(&stack[i]);
  yaml_parser_delete(&parser);
  return rc;
}

int mtf_yaml_load(const char *text, size_t length, const char *source, yaml_document_t *doc, mtf_error *err) {
  MTF_CHECK(check_events(text, length, source, err));
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return mtf_error_set(err, MTF_ERR_NOMEM, "cannot start the YAML parser");
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, length);
  int rc = MTF_OK;
  if (!yaml_parser_load(&parser, doc)) rc = parser_error(&parser, text, length, source, err);
  yaml_parser_delete(&parser);
  return rc;
}
