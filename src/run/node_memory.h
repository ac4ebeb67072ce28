/* Whether a job fits the memory of its nodes, checked before its sessions allocate anything: a job that
 * cannot fit is refused at start with the figures, instead of being killed by the system minutes in. */
#ifndef MTF_RUN_NODE_MEMORY_H
#define MTF_RUN_NODE_MEMORY_H

#include <stdint.h>

#include "run/program.h"

/* Bytes this process may still take on its node: /proc/meminfo's MemAvailable, lowered to what its memory
 * cgroup (v2 or v1, as Slurm's memory limits set them) leaves; `where` says which. -1 when neither can be
 * read. */
int64_t mtf_node_memory_available(char *where, size_t where_size);

/* MTF_OK when p's planned peak per rank (mtf_program_memory_of's total) times ranks_on_node fits in what the
 * node has available; otherwise an error with the planned and available figures and the settings that
 * lower the peak. MTF_MEMORY_CHECK=0 in the environment skips the check (the estimate is an estimate). */
int mtf_run_check_memory_fit(const mtf_program *p, const mtf_config *cfg, int ranks_on_node, mtf_error *err);

#endif
