/* OpenBLAS picks its kernels once, when the library loads, from the CPU's model number. A build older than the
 * CPU (Debian 12's 0.3.21 on an Emerald Rapids Xeon, family 6 model 207) does not know the model and falls back
 * to its generic "Prescott" (SSE3) kernels: float32 products at about a fifth of the CPU's speed, and results
 * that differ from the AVX-512 kernels' enough to move a training run (tests/model/reverse_learned.sh reached
 * 97.3% there against 99.8%). Only OPENBLAS_CORETYPE, read at load, changes the choice, so mtf executes itself
 * again once with it naming the kernels of the instructions the CPU has. A user's own OPENBLAS_CORETYPE is
 * left alone. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"

/* The OpenBLAS kernels for this CPU's instructions, or NULL (none better than the generic ones, or not x86). */
static const char *kernels_for_this_cpu(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return NULL;
}

void mtf_cli_choose_blas_kernels(char **argv) {
  if (getenv("OPENBLAS_CORETYPE")) return; /* the user's choice, or ours after the re-execution */
  const char *loaded = openblas_get_corename();
  if (!loaded || strcasecmp(loaded, "prescott") != 0) return;
  const char *better = kernels_for_this_cpu();
  if (!better) return;
  if (setenv("OPENBLAS_CORETYPE", better, 1) != 0 || setenv("MTF_OPENBLAS_CORETYPE_CHOSEN", better, 1) != 0) return;
  execv("/proc/self/exe", argv);
  /* Not executed again (no /proc): the generic kernels stay; say so once, as the environment now claims otherwise. */
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("MTF_OPENBLAS_CORETYPE_CHOSEN");
  fprintf(stderr, "mtf: warning: OpenBLAS runs its generic Prescott kernels on this CPU (its build does not know "
                  "the model); set OPENBLAS_CORETYPE=%s for its %s kernels\n", better, better);
}
