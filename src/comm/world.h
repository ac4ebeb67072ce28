/* The job as a whole: every rank of the launch (mpiexec / srun), before and beside any mesh. Code above
 * the engine (run/, ckpt/, cli/) reaches MPI only through here and comm.h, so MPI stays in src/comm.
 * Every function that says "collective" must be called by every rank, in the same order. */
#ifndef MTF_COMM_WORLD_H
#define MTF_COMM_WORLD_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/error.h"

/* Starts MPI (thread level FUNNELED) once for the process; later calls do nothing. */
int mtf_world_init(int *argc, char ***argv);
/* Ends MPI when mtf_world_init started it. */
void mtf_world_finalize(void);
int mtf_world_rank(void);
int mtf_world_size(void);
/* Ranks of this job on this rank's node (collective the first time; 1 without MPI). */
int mtf_world_ranks_on_node(void);

/* Collective: copies `bytes` of root's buf to every rank. */
int mtf_world_broadcast(void *buf, size_t bytes, int root, mtf_error *err);
/* Collective: every rank passes its own status; all return MTF_OK, or the same code and message (the
 * lowest failing rank's, prefixed "rank k: "). */
int mtf_world_agree(int rc, mtf_error *err);
/* Collective reductions of one value over all ranks. */
double mtf_world_max(double value);
double mtf_world_sum(double value);
int mtf_world_any(int flag);

/* Prints "mtf: rank k: <what>: <message>" to stderr and ends the whole job at once with exit code `code`
 * (for failures that would otherwise leave other ranks waiting in a collective). */
MTF_NORETURN void mtf_world_abort(int code, const char *what, const mtf_error *err);

/* A communicator over all ranks for `mesh` (whose size must equal the job's). Collective. */
int mtf_comm_world_create(const mtf_shape *mesh, mtf_comm **out, mtf_error *err);
/* A communicator of this rank alone for `mesh` (whose size must be 1), whatever the job's size: for tools
 * that each rank runs on its own (benchmarks). Not collective. */
int mtf_comm_self_create(const mtf_shape *mesh, mtf_comm **out, mtf_error *err);

/* The MPI library's name and version, first line only and up to its first comma ("Open MPI v4.1.6");
 * works before mtf_world_init. */
void mtf_world_library_version(char *buf, size_t size);

#endif
