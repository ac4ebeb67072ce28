/* What the fused optimizer ops (optimizer_ops.c) share with their kernels. */
#ifndef MTF_OPS_OPTIMIZER_OPS_H
#define MTF_OPS_OPTIMIZER_OPS_H

/* AdamW's bias correction 1 - beta^step (1 when beta is 0), in double: the reference and every backend's
 * kernel use this one function, so they agree on it exactly. */
double mtf_adam_bias_correction(double beta, double step);

/* Blocks of the CUDA kernel of adafactor_squares (its partial sums in the step's scratch). */
#define MTF_ADAFACTOR_PARTIALS 256

#endif
