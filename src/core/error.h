/* Errors are values: a function returns an int code (MTF_OK on success) and, on failure, fills an
 * mtf_error with a message that says what was wrong, where, and how to fix it. Callers that cannot add
 * context pass the code straight back with MTF_CHECK; the place that can report it prints err.msg. */
#ifndef MTF_CORE_ERROR_H
#define MTF_CORE_ERROR_H

#include <stddef.h>

/* C11's _Noreturn, spelled so that C++ (the CUDA sources, nvcc and the emulator's g++) can include this. */
#ifdef __cplusplus
#define MTF_NORETURN [[noreturn]]
#else
#define MTF_NORETURN _Noreturn
#endif

enum {
  MTF_OK = 0,
  MTF_ERR_PARSE = 1,   /* text that does not follow its syntax */
  MTF_ERR_INVALID = 2, /* well-formed but impossible values */
  MTF_ERR_LAYOUT = 3,  /* a layout that cannot be applied to a tensor */
  MTF_ERR_MESH = 4,    /* the processes do not match the mesh */
  MTF_ERR_COMM = 5,    /* a communication library call failed */
  MTF_ERR_NOMEM = 6,
  MTF_ERR_IO = 7
};

#define MTF_ERROR_MSG_MAX 1024

typedef struct mtf_error {
  int code;
  char msg[MTF_ERROR_MSG_MAX];
} mtf_error;

/* Records code and a printf-style message in err (which may be NULL) and returns code. */
int mtf_error_set(mtf_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts "context: " in front of an existing message, keeping its code; returns the code. */
int mtf_error_prefix(mtf_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void mtf_error_clear(mtf_error *err);

/* Short name of an error code, for logs ("parse error", "layout error", ...). */
const char *mtf_error_kind(int code);

#define MTF_CHECK(expr)                                                                              \
  do {                                                                                               \
    int mtf_check_rc_ = (expr);                                                                      \
    if (mtf_check_rc_ != MTF_OK) return mtf_check_rc_;                                               \
  } while (0)

/* Internal invariants: a broken one is a bug in mtf, not bad input, so it aborts with a message. */
#define MTF_ASSERT(cond)                                                                             \
  do {                                                                                               \
    if (!(cond)) mtf_internal_failure(__FILE__, __LINE__, #cond);                                    \
  } while (0)

MTF_NORETURN void mtf_internal_failure(const char *file, int line, const char *what);

/* Non-fatal findings (a layout rule for a mesh axis that does not exist, ...). The caller decides
 * where they go; tests read the text. Messages past MTF_WARNINGS_MAX are counted but dropped. */
#define MTF_WARNINGS_MAX 16
#define MTF_WARNING_MSG_MAX 512

typedef struct mtf_warnings {
  int count;
  char msg[MTF_WARNINGS_MAX][MTF_WARNING_MSG_MAX];
} mtf_warnings;

void mtf_warn(mtf_warnings *warnings, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
