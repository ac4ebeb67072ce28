/* Built into mtf only in the sanitizer configuration (MTF_ASAN). LeakSanitizer's check at exit costs about
 * a second per process (it symbolises every allocation MPI leaves behind to match the suppressions), which
 * made it most of the sanitizer pass's time: every test starts mtf on 2-4 ranks again and again. Only rank 0
 * of an MPI job (or a run without MPI) checks; the other ranks run the same code on their own slices. */
#include <stdlib.h>

int __lsan_is_turned_off(void);

int __lsan_is_turned_off(void) {
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMIX_RANK");
  return rank && atoi(rank) > 0;
}
