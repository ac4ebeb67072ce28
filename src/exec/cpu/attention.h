/* The CPU kernels of fused causal attention (forward, backward) and of take (exec/cpu/attention.c). */
#ifndef MTF_EXEC_CPU_ATTENTION_H
#define MTF_EXEC_CPU_ATTENTION_H

#include "exec/backend.h"

void mtf_cpu_register_attention(mtf_kernel_fn *kernels);

#endif
