/* MTF_HOST_DEVICE marks the few pure functions of a C header that CUDA kernels call as well (the counter
 * hash of core/rng.h, the row geometry of exec/rows.h), so one definition serves the host and the device
 * and the CPU and CUDA backends cannot drift apart. Empty outside nvcc (C, and the CUDA emulator's g++,
 * where kernels are host code). */
#ifndef MTF_CORE_HOST_DEVICE_H
#define MTF_CORE_HOST_DEVICE_H

#ifdef __CUDACC__
#define MTF_HOST_DEVICE __host__ __device__
#else
#define MTF_HOST_DEVICE
#endif

#endif
