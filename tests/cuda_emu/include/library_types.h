/* The CUDA emulator's library_types.h (tests/cuda_emu): the data types of cuBLAS's *Ex calls. */
#ifndef MTF_CUDA_EMU_LIBRARY_TYPES_H
#define MTF_CUDA_EMU_LIBRARY_TYPES_H
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef cudaDataType cudaDataType_t;
#endif
