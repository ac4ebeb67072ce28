/* A planted breach of the CUDA rules: tests/cuda_rules must find both lines. */
__global__ void k(float *x) { x[0] = __shfl_down_sync(0xffffffff, x[0], 1); }
void launch(float *x) { k<<<1, 32>>>(x); }
