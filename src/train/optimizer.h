/* Optimizers as graph ops: mtf_optimizer_apply adds, for every variable, the ops computing its new value
 * (and its slots' new values) and mtf_assign's them. Being ordinary graph ops, the updates lower for any
 * mesh and layout: norms and means over split dimensions get their allreduce from the engine, so every
 * layout computes the same update as one process.
 *
 * Notation: w a variable, g its gradient (after clipping), lr and t the scalar learning-rate and 1-based
 * step inputs, rms(x) = sqrt(mean of x^2 over all of x's elements).
 *
 * Global gradient-norm clipping (any optimizer, when clip_grad_norm > 0):
 *   norm = sqrt(sum over all gradients of sum(g^2))       every element counted once, however sharded
 *   g   *= min(1, clip_grad_norm / (norm + 1e-6))
 *
 * SGD (slot "momentum" when momentum > 0; the form of TensorFlow's MomentumOptimizer and PyTorch's SGD):
 *   m = momentum * m + g;  w -= lr * m                    (momentum 0: w -= lr * g, no slot)
 *
 * AdamW (slots "adam_m", "adam_v"; Loshchilov & Hutter's decoupled weight decay, scaled by lr):
 *   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2
 *   w -= lr * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + epsilon) + weight_decay * w )
 *
 * Adafactor (Shazeer & Stern 2018, with Mesh TensorFlow's AdafactorOptimizer defaults):
 *   decay = 1 - t^(-decay_rate)   Mesh TF's 1 - (step + 1)^-0.8 with its 0-based step; the first step has
 *                                 decay 0, so v starts as g^2 + epsilon1
 *   s = g^2 + epsilon1
 *   factored (variables of >= 2 dims with their two largest dims both >= min_dim_size_to_factor, 128 by
 *   default as in Mesh TF): of the two largest dims (ties go to the earlier dims, as Mesh TF's stable sort
 *   by size does) call the earlier one "row" and the later one "col";
 *     vr = decay * vr + (1 - decay) * mean_col(s)        slot "adafactor_vr": w's shape without col
 *     vc = decay * vc + (1 - decay) * mean_row(s)        slot "adafactor_vc": w's shape without row
 *     v  = vr * vc / mean_row(vr)
 *   otherwise (0/1-dim variables, and those whose second largest dim is below min_dim_size_to_factor):
 *     v  = decay * v + (1 - decay) * s                   slot "adafactor_v"
 *   u = g / sqrt(v);   u /= max(1, rms(u) / clipping_threshold)
 *   step_size = lr * max(epsilon2, rms(w))   when multiply_by_parameter_scale, else lr
 *   with beta1 > 0:  m = beta1 * m + (1 - beta1) * step_size * u  (slot "adafactor_m"); w -= m
 *   else:            w -= step_size * u
 *
 * Slots are variables named "<variable>/<slot>", initialised to zero; a slot name longer than the graph's
 * 63-character limit is an error (truncating it could make two variables share a slot). */
#ifndef MTF_TRAIN_OPTIMIZER_H
#define MTF_TRAIN_OPTIMIZER_H

#include "mtf.h"
#include "train/train_kinds.h"

typedef struct mtf_optimizer_config {
  mtf_optimizer_kind kind;
  float momentum;       /* sgd: 0 = plain SGD (default 0) */
  float beta1;          /* adamw first-moment decay (0.9); adafactor: 0 = no first moment (default) */
  float beta2;          /* adamw second-moment decay (0.999) */
  float epsilon;        /* adamw, added to sqrt(v_hat) (1e-8) */
  float weight_decay;   /* adamw, decoupled, multiplied by lr (0.01) */
  float decay_rate;     /* adafactor: second-moment decay 1 - t^-decay_rate (0.8) */
  float clipping_threshold;        /* adafactor update clipping at this RMS (1.0); 0 = off */
  float epsilon1;                  /* adafactor, added to g^2 (1e-30) */
  float epsilon2;                  /* adafactor, floor on the parameter RMS (1e-3) */
  int multiply_by_parameter_scale; /* adafactor (1) */
  int64_t min_dim_size_to_factor;  /* adafactor: factor only when both largest dims are at least this
                                      (128, Mesh TF's default; 0 factors every variable of >= 2 dims) */
  float clip_grad_norm;            /* global gradient-norm clipping threshold; 0 = off (default) */
  int policy_sums;                 /* a bf16 run: the gradient norm's sums of squares are the bf16 policy's
                                      (mtf_graph_set_policy_sums), and without clipping they are built after
                                      the updates, where an update may sum them in its own pass; 0 = fp32's */
} mtf_optimizer_config;

/* Fills cfg with the defaults above for `kind`. */
void mtf_optimizer_defaults(mtf_optimizer_kind kind, mtf_optimizer_config *cfg);

/* "adafactor", "adamw", "sgd" (the config's train.optimizer text); "unknown" for another value. */
const char *mtf_optimizer_kind_name(mtf_optimizer_kind kind);

/* MTF_OK, or MTF_ERR_INVALID naming the setting that is out of range (a beta outside [0, 1), a negative
 * epsilon, momentum, weight decay or clipping threshold, ...). */
int mtf_optimizer_validate(const mtf_optimizer_config *cfg, mtf_error *err);

/* Adds the update of vars[0..n-1] (gradients grads[i], each of its variable's shape) to the graph, creating
 * the slots above. learning_rate and step are scalar (shape []) graph tensors, e.g. inputs fed each run;
 * step is the 1-based step number t. Every optimizer reads both (SGD reads step only nominally), so a
 * training loop feeds both each run whatever the optimizer.
 * *grad_norm (when grad_norm is not NULL) gets the global gradient norm before clipping, a scalar tensor
 * to fetch. Returns MTF_OK, or an error in err: an invalid config, a
 * gradient whose shape differs from its variable's, or the graph's (sticky) error. */
int mtf_optimizer_apply(mtf_graph *g, const mtf_optimizer_config *cfg, int n, const mtf_tensor *vars,
                        const mtf_tensor *grads, mtf_tensor learning_rate, mtf_tensor step, mtf_tensor *grad_norm,
                        mtf_error *err);

#endif
