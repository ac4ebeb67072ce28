/* check.h for tests run on several MPI ranks: each rank counts its own CHECKs; check_mpi_summary sums
 * them onto rank 0, which prints the closing "N passed, N failed" line for the whole job. A failure
 * that leaves nothing to test (no communicator, a broken graph) ends the job at once with its rank. */
#ifndef MTF_TESTS_CHECK_MPI_H
#define MTF_TESTS_CHECK_MPI_H

#include <mpi.h>
#include <stdio.h>

#include "check.h"
#include "core/error.h"

static inline void fail_job(const char *what, const mtf_error *err) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "rank %d: %s: %s\n", rank, what, err->msg);
  MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Collective: call on every rank before MPI_Finalize. The exit status: on rank 0, 1 when any rank
 * failed a check; elsewhere 0, since rank 0's status speaks for the job: a non-zero exit of another rank
 * makes mpiexec kill the job, often before rank 0 has printed its summary line. */
static inline int check_mpi_summary(void) {
  int rank = 0, counts[2] = {check_passed, check_failed}, totals[2] = {0, 0};
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Reduce(counts, totals, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank != 0) return 0;
  printf("%d passed, %d failed\n", totals[0], totals[1]);
  return totals[1] ? 1 : 0;
}

#endif
