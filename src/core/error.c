#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mtf_error_set(mtf_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
  }
  return code;
}

int mtf_error_prefix(mtf_error *err, const char *fmt, ...) {
  if (!err) return MTF_ERR_INVALID;
  char prefix[MTF_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  /* Shift the message right and put the prefix in front, truncating the message's tail if need be. */
  size_t prefix_len = strlen(prefix), msg_len = strlen(err->msg);
  if (prefix_len > MTF_ERROR_MSG_MAX - 3) prefix_len = MTF_ERROR_MSG_MAX - 3;
  size_t room = MTF_ERROR_MSG_MAX - 3 - prefix_len;
  if (msg_len > room) msg_len = room;
  memmove(err->msg + prefix_len + 2, err->msg, msg_len);
  memcpy(err->msg, prefix, prefix_len);
  err->msg[prefix_len] = ':';
  err->msg[prefix_len + 1] = ' ';
  err->msg[prefix_len + 2 + msg_len] = '\0';
  return err->code;
}

void mtf_error_clear(mtf_error *err) {
  if (!err) return;
  err->code = MTF_OK;
  err->msg[0] = '\0';
}

const char *mtf_error_kind(int code) {
  switch (code) {
    case MTF_OK: return "ok";
    case MTF_ERR_PARSE: return "parse error";
    case MTF_ERR_INVALID: return "invalid value";
    case MTF_ERR_LAYOUT: return "layout error";
    case MTF_ERR_MESH: return "mesh error";
    case MTF_ERR_COMM: return "communication error";
    case MTF_ERR_NOMEM: return "out of memory";
    case MTF_ERR_IO: return "I/O error";
    default: return "error";
  }
}

void mtf_internal_failure(const char *file, int line, const char *what) {
  fprintf(stderr, "mtf: internal error at %s:%d: invariant '%s' does not hold (a bug in mtf; please report it)\n",
          file, line, what);
  abort();
}

void mtf_warn(mtf_warnings *warnings, const char *fmt, ...) {
  if (!warnings) return;
  if (warnings->count < MTF_WARNINGS_MAX) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warnings->msg[warnings->count], MTF_WARNING_MSG_MAX, fmt, ap);
    va_end(ap);
  }
  warnings->count++;
}
