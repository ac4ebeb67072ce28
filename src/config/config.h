/* The run configuration: one YAML file with sections model, mesh, train, data, run, backend (README,
 * "Config reference"). Every key is declared once in a schema (config.c) with its type, default, range
 * and help; parsing, `--set key.path=value` overrides, validation and printing the resolved config all
 * follow that table. Errors say file:line:column, the key, what is wrong and how to fix it; an unknown
 * key gets a "did you mean"; backend.kind must name a backend built in (mtf_backend_check). Pure C +
 * libyaml, no MPI calls (callers parse on rank 0 and broadcast the struct, which holds no pointers). */
#ifndef MTF_CONFIG_CONFIG_H
#define MTF_CONFIG_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/layout.h"
#include "comm/comm_mode.h"
#include "core/shape.h"
#include "io/pack_mode.h"
#include "train/train_kinds.h"

#define MTF_CONFIG_TEXT 256
#define MTF_CONFIG_PATH 512

/* YAML choices that code branches on, read as enums (config.c's KEY_ENUM keys; each enum lists its values in
 * the order of the key's choices there, which tests/test_config.c checks text by text). */
typedef enum mtf_norm_kind { MTF_NORM_RMS, MTF_NORM_LAYER } mtf_norm_kind;
typedef enum mtf_activation_kind {
  MTF_ACTIVATION_RELU,
  MTF_ACTIVATION_GELU,
  MTF_ACTIVATION_SWIGLU,
  MTF_ACTIVATION_GEGLU
} mtf_activation_kind;
typedef enum mtf_position_kind {
  MTF_POSITION_LEARNED,
  MTF_POSITION_RELATIVE_BIAS,
  MTF_POSITION_ROTARY,
  MTF_POSITION_NONE
} mtf_position_kind;
typedef enum mtf_gating_kind { MTF_GATING_TOP2, MTF_GATING_SWITCH } mtf_gating_kind;
typedef enum mtf_architecture_kind { MTF_ARCHITECTURE_DECODER, MTF_ARCHITECTURE_ENCODER_DECODER } mtf_architecture_kind;
typedef enum mtf_overlap_kind { MTF_OVERLAP_AUTO, MTF_OVERLAP_ON, MTF_OVERLAP_OFF } mtf_overlap_kind;
typedef enum mtf_recompute_kind { MTF_RECOMPUTE_NONE, MTF_RECOMPUTE_BLOCK } mtf_recompute_kind;
/* backend.precision and backend.grad_reduce */
typedef enum mtf_number_kind { MTF_NUMBERS_FP32, MTF_NUMBERS_BF16 } mtf_number_kind;

typedef struct mtf_model_config {
  int64_t vocab, d_model, d_ff, heads, d_kv, layers, length;
  mtf_norm_kind norm;               /* rms | layer */
  mtf_activation_kind activation;   /* relu | gelu | swiglu | geglu (gated: wi_0, wi_1) */
  int tie_embeddings;
  double dropout, z_loss;
  int fused_attention;              /* attention as one fused op (ops/attention.c) */
  int bf16_matmuls;                 /* backend.precision bf16 (validation sets it): the model's einsums take
                                     * bfloat16 operands (mtf_graph_set_matmul_dtype) */
  int64_t kv_heads;                 /* key/value heads (validation sets 0 to heads); divides heads */
  mtf_position_kind position;       /* learned | relative_bias | rotary | none (model/position.h) */
  int64_t relative_num_buckets, relative_max_distance; /* relative_bias: T5's bucketing */
  struct mtf_moe_config {           /* model.moe: mixture-of-experts feed-forward layers (model/moe.h) */
    int64_t experts;                /* 0: every layer dense */
    int64_t every;                  /* layers every-1, 2*every-1, ... are MoE */
    mtf_gating_kind gating;         /* top2 | switch */
    double capacity_factor, eval_capacity_factor;
    int64_t group_size;             /* tokens routed together; 0 = model.length */
    double aux_loss, router_z_loss; /* loss weights */
    int dropless;                   /* capacity for every token (no drops) in training too */
  } moe;
  double label_smoothing;           /* train.label_smoothing: set here because the model builds the loss */
  mtf_architecture_kind architecture; /* decoder | encoder_decoder (model/encoder_decoder.h) */
  int64_t encoder_layers, decoder_layers; /* encoder_decoder only; 0 = model.layers */
  int shared_embeddings;            /* encoder_decoder: one embed/wte for encoder, decoder (and tied output) */
  /* data.pack (none | eot | segments) and train.loss_skip_document_start: set here because the model
   * builds the segment inputs, the attention mask and the loss from them (model/segments.h). */
  mtf_pack_mode pack;
  int loss_skip_document_start;
} mtf_model_config;

typedef struct mtf_train_config {
  int64_t batch, steps, seed, log_every;
  mtf_optimizer_kind optimizer;    /* adafactor | adamw | sgd */
  double learning_rate, min_learning_rate;
  mtf_schedule_kind schedule;      /* constant | linear_warmup | rsqrt | cosine | linear_decay */
  int64_t warmup_steps;
  double clip_grad_norm, weight_decay, beta1, beta2, momentum;
  int64_t checkpoint_every, keep_checkpoints, prefetch, eval_every, eval_batches;
  double allreduce_bucket_mb; /* gradient bucket size; 0 = a blocking allreduce per gradient */
  mtf_overlap_kind allreduce_overlap; /* auto | on | off: the buckets overlapped, or blocking allreduces */
  int64_t microbatches;            /* gradient accumulation: forward+backward passes per step (divides batch) */
  mtf_recompute_kind recompute;    /* none | block: recompute each transformer block in the backward pass */
} mtf_train_config;

typedef struct mtf_config {
  char source[MTF_CONFIG_PATH]; /* the file it came from */
  mtf_model_config model;
  mtf_shape mesh_shape;
  char mesh_layout[MTF_CONFIG_PATH];
  mtf_layout_rules layout;      /* parsed mesh_layout */
  char layout_origin[MTF_CONFIG_PATH + 48]; /* where mesh_layout was set: FILE:LINE:COL, "--set mesh.layout", "--layout" */
  mtf_train_config train;
  char data_train[MTF_CONFIG_PATH], data_eval[MTF_CONFIG_PATH];
  char run_dir[MTF_CONFIG_PATH];
  char backend[MTF_CONFIG_TEXT]; /* backend.kind: cpu (mtf_backend_kinds()) */
  char plugin[MTF_CONFIG_PATH];  /* backend.plugin: the PJRT plugin .so; "" = $MTF_PJRT_PLUGIN or the installed one */
  int64_t local_devices;         /* backend.local_devices: PJRT devices per process; 0 = all addressable */
  int64_t threads;               /* compute threads per rank (BLAS and elementwise); 0 = cores of the node / ranks on it */
  double peak_gflops;            /* backend.peak_gflops: per-rank peak for MFU; 0 = measured at start-up */
  int64_t device;                /* backend.device: cuda GPU ordinal; -1 = from the rank's local rank */
  int tf32;                      /* backend.tf32: cuda fp32 GEMMs may use TF32 tensor cores */
  mtf_number_kind precision;     /* backend.precision: fp32 | bf16 (the model's matmul operands) */
  mtf_number_kind grad_reduce;   /* backend.grad_reduce: fp32 | bf16 (the gradient buckets on the wire) */
  mtf_comm_mode comm;            /* backend.comm: auto|nccl|mpi, the collectives on device memory */
} mtf_config;

/* The text of an enum key's value (e.g. "model.activation", MTF_ACTIVATION_GELU -> "gelu"), for messages. */
const char *mtf_config_choice_text(const char *key, int value);

/* Defaults for every key. */
void mtf_config_defaults(mtf_config *cfg);
/* Reads a YAML file over the current values. */
int mtf_config_load_file(mtf_config *cfg, const char *path, mtf_error *err);
/* Parses YAML text (source names it in messages). */
int mtf_config_load_text(mtf_config *cfg, const char *text, size_t length, const char *source, mtf_error *err);
/* Applies one `key.path=value` override. */
int mtf_config_set(mtf_config *cfg, const char *assignment, mtf_error *err);
/* Range and cross-key checks after all sources are applied (the layout is parsed here). */
int mtf_config_validate(mtf_config *cfg, mtf_error *err);
/* The schema's keys ("model.d_model", ...), for documentation checks. */
int mtf_config_key_count(void);
const char *mtf_config_key_path(int index);
/* Writes the resolved config as YAML (every key, in schema order). */
void mtf_config_print(const mtf_config *cfg, FILE *out);

#endif
