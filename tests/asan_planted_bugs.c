/* Built only in the sanitizer configuration: plants a heap overflow or a leak inside an MPI job, to show
 * that the sanitizer pass of tools/test.sh does catch them (the tests expect this program to fail). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  volatile char *leaked = malloc(64);
  leaked[0] = 1;
  if (argc > 1 && strcmp(argv[1], "overflow") == 0) {
    size_t size = (size_t)(argc + 6); /* 8, unknown to the compiler */
    char *buf = malloc(size);
    memset(buf, 0, size + 1);
    leaked[1] = buf[size - 1]; /* read back: at -O1 a buffer written and freed unread is optimised away */
    free(buf);
  }
  if (argc > 1 && strcmp(argv[1], "leak") == 0) leaked = NULL;
  else free((void *)leaked);
  MPI_Finalize();
  return 0;
}
