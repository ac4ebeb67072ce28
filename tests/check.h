/* A tiny test harness: CHECK records a failure with file:line and goes on; check_summary prints the
 * closing "N passed, N failed" line and gives the exit status. */
#ifndef MTF_TESTS_CHECK_H
#define MTF_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                                          \
  do {                                                                                                       \
    if (cond) {                                                                                              \
      check_passed++;                                                                                        \
    } else {                                                                                                 \
      check_failed++;                                                                                        \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                              \
    }                                                                                                        \
  } while (0)

/* Checks that text contains every one of the given fragments (NULL-terminated list). */
#define CHECK_CONTAINS(text, ...)                                                                            \
  do {                                                                                                       \
    const char *check_fragments_[] = {__VA_ARGS__, NULL};                                                    \
    for (int check_i_ = 0; check_fragments_[check_i_]; check_i_++) {                                        \
      if (strstr((text), check_fragments_[check_i_])) {                                                      \
        check_passed++;                                                                                      \
      } else {                                                                                               \
        check_failed++;                                                                                      \
        fprintf(stderr, "%s:%d: text does not contain \"%s\":\n  %s\n", __FILE__, __LINE__,                  \
                check_fragments_[check_i_], (text));                                                         \
      }                                                                                                      \
    }                                                                                                        \
  } while (0)

static inline int check_summary(void) {
  printf("%d passed, %d failed\n", check_passed, check_failed);
  return check_failed ? 1 : 0;
}

#endif
