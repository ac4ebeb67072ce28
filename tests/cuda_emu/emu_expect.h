/* The emulator's own tests' check: counts a failure and says where, without stopping (the test prints its
 * count and exits 1 when it is not 0). */
#ifndef MTF_TESTS_CUDA_EMU_EXPECT_H
#define MTF_TESTS_CUDA_EMU_EXPECT_H

#include <stdio.h>

static int failed;
#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) {                                         \
      failed++;                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

#endif
