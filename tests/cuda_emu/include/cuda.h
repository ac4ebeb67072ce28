/* The CUDA emulator's cuda.h (tests/cuda_emu): the runtime API is all the code uses. */
#ifndef MTF_CUDA_EMU_CUDA_H
#define MTF_CUDA_EMU_CUDA_H
#include "cuda_runtime.h"
#define CUDA_VERSION 13000
#endif
