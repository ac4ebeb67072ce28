/* The MPI communicator backend. Creation checks that the job's size equals the mesh size, duplicates
 * the world communicator, and splits it once into one sub-communicator per set of mesh axes (each rank
 * keeps the one of its own group). Collectives then never create communicators. */
#ifndef MTF_COMM_MPI_COMM_H
#define MTF_COMM_MPI_COMM_H

/* Under C++ (the CUDA sources, which include mtf's headers inside extern "C") mpi.h would pull in MPI's
 * deprecated C++ bindings, templates that may not have C linkage: mtf uses the C API only. */
#if defined(__cplusplus) && !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "comm/comm.h"

/* Collective over `world`. On a size mismatch every rank returns MTF_ERR_MESH with the same message. */
int mtf_comm_mpi_create(MPI_Comm world, const mtf_shape *mesh, mtf_comm **out, mtf_error *err);

/* The sub-communicator of this rank's group for a set of mesh axes (for tests and diagnostics). */
MPI_Comm mtf_comm_mpi_group(const mtf_comm *comm, mtf_axis_set axes);

/* The MPI communicator over all of comm's ranks (comm's own duplicate, in mesh rank order), for libraries
 * that need one, such as parallel HDF5's H5Pset_fapl_mpio; MPI_COMM_NULL when comm is not an MPI
 * communicator. Do not free it: it lives as long as comm. */
MPI_Comm mtf_comm_mpi_world(const mtf_comm *comm);

/* values[0 .. n) summed (modulo 2^64) over all of comm's ranks, in place; 0, or -1 when MPI failed. A comm
 * that is not an MPI communicator (one process) leaves them as they are. Collective over comm. */
int mtf_comm_mpi_sum_u64(const mtf_comm *comm, uint64_t *values, int n);

#endif
