#include "config/config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/mesh.h"
#include "core/mesh_yaml.h"
#include "core/units.h"
#include "core/yaml_load.h"
#include "mtf.h"

/* KEY_BACKEND: a backend kind, which must be built in (mtf_backend_check). */
/* KEY_ENUM: one of `choices`, stored as its position there, an int (the enums config.h includes). */
typedef enum key_type {
  KEY_INT,
  KEY_FLOAT,
  KEY_BOOL,
  KEY_TEXT,
  KEY_ENUM,
  KEY_MESH,
  KEY_PATH,
  KEY_BACKEND
} key_type;

typedef struct key_spec {
  const char *path; /* section.key */
  key_type type;
  size_t offset;
  const char *fallback; /* default, as YAML text */
  double min, max;      /* numbers: inclusive range */
  const char *choices;  /* KEY_ENUM: "a|b|c" */
  const char *help;
} key_spec;

#define F(field) offsetof(mtf_config, field)
#define BIG 1e18

static const key_spec schema[] = {
    {"model.vocab", KEY_INT, F(model.vocab), "256", 2, INT32_MAX, NULL, "vocabulary size (token ids 0..vocab-1)"},
    {"model.d_model", KEY_INT, F(model.d_model), "64", 1, 1 << 20, NULL, "model width"},
    {"model.d_ff", KEY_INT, F(model.d_ff), "256", 1, 1 << 22, NULL, "feed-forward hidden width"},
    {"model.heads", KEY_INT, F(model.heads), "4", 1, 1 << 16, NULL, "attention heads"},
    {"model.d_kv", KEY_INT, F(model.d_kv), "16", 1, 1 << 16, NULL, "width of each head's keys, queries, values"},
    {"model.layers", KEY_INT, F(model.layers), "2", 1, 1000, NULL, "transformer layers"},
    {"model.length", KEY_INT, F(model.length), "64", 1, 1 << 20, NULL, "sequence length (tokens per example)"},
    {"model.architecture", KEY_ENUM, F(model.architecture), "decoder", 0, 0, "decoder|encoder_decoder",
     "decoder: the decoder-only language model; encoder_decoder: a bidirectional encoder over the prompt and a causal "
     "decoder with cross-attention over the answer (T5)"},
    {"model.encoder_layers", KEY_INT, F(model.encoder_layers), "0", 0, 1000, NULL,
     "encoder_decoder: encoder layers (0 = model.layers)"},
    {"model.decoder_layers", KEY_INT, F(model.decoder_layers), "0", 0, 1000, NULL,
     "encoder_decoder: decoder layers (0 = model.layers)"},
    {"model.shared_embeddings", KEY_BOOL, F(model.shared_embeddings), "true", 0, 1, NULL,
     "encoder_decoder: encoder and decoder share embed/wte (false: encoder/embed/wte of their own)"},
    {"model.norm", KEY_ENUM, F(model.norm), "rms", 0, 0, "rms|layer", "normalisation"},
    {"model.activation", KEY_ENUM, F(model.activation), "gelu", 0, 0, "relu|gelu|swiglu|geglu",
     "feed-forward activation; swiglu and geglu are gated (two input projections wi_0, wi_1)"},
    {"model.tie_embeddings", KEY_BOOL, F(model.tie_embeddings), "true", 0, 1, NULL,
     "logits from the embedding (scaled by d_model^-0.5) instead of a separate [d_model, vocab]"},
    {"model.dropout", KEY_FLOAT, F(model.dropout), "0.0", 0, 0.99, NULL, "dropout rate in training"},
    {"model.kv_heads", KEY_INT, F(model.kv_heads), "0", 0, 1 << 16, NULL,
     "key/value heads (0 = model.heads); 1 = multi-query, between = grouped: heads/kv_heads queries share each"},
    {"model.position", KEY_ENUM, F(model.position), "learned", 0, 0, "learned|relative_bias|rotary|none",
     "position signal: learned embedding wpe, T5 relative bias on the logits, rotary q and k, or none"},
    {"model.relative_num_buckets", KEY_INT, F(model.relative_num_buckets), "32", 2, 1 << 16, NULL,
     "relative_bias: buckets of relative distance (T5's num_buckets)"},
    {"model.relative_max_distance", KEY_INT, F(model.relative_max_distance), "128", 2, 1 << 24, NULL,
     "relative_bias: distances from this on share the last bucket (T5's max_distance)"},
    {"model.fused_attention", KEY_BOOL, F(model.fused_attention), "true", 0, 1, NULL,
     "causal self-attention as one fused op (blockwise softmax; dropout, relative bias and the document mask "
     "inside; no [length, length] tensors); false: the general einsum/softmax path"},
    {"model.z_loss", KEY_FLOAT, F(model.z_loss), "0.0001", 0, 1, NULL, "weight of log(Z)^2 in the loss"},
    {"model.moe.experts", KEY_INT, F(model.moe.experts), "0", 0, 1 << 16, NULL,
     "experts of each mixture-of-experts layer (0 = no MoE: every feed-forward layer dense)"},
    {"model.moe.every", KEY_INT, F(model.moe.every), "2", 1, 1000, NULL,
     "every every-th layer's feed-forward is MoE (layers every-1, 2*every-1, ...; 1 = all)"},
    {"model.moe.gating", KEY_ENUM, F(model.moe.gating), "top2", 0, 0, "top2|switch",
     "router: top2 (two experts, gates renormalised) or switch (the top expert alone)"},
    {"model.moe.capacity_factor", KEY_FLOAT, F(model.moe.capacity_factor), "1.25", -1e6, 1e6, NULL,
     "training capacity: each expert takes ceil(group_size * k * capacity_factor / experts) tokens of a group"},
    {"model.moe.eval_capacity_factor", KEY_FLOAT, F(model.moe.eval_capacity_factor), "2.0", -1e6, 1e6, NULL,
     "capacity factor of evaluation"},
    {"model.moe.group_size", KEY_INT, F(model.moe.group_size), "0", 0, 1 << 24, NULL,
     "tokens routed together (capacity is per group); 0 = model.length (one sequence per group)"},
    {"model.moe.aux_loss", KEY_FLOAT, F(model.moe.aux_loss), "0.01", 0, 1e3, NULL,
     "weight of the load-balancing loss (per MoE layer)"},
    {"model.moe.router_z_loss", KEY_FLOAT, F(model.moe.router_z_loss), "0.001", 0, 1e3, NULL,
     "weight of the router's log(Z)^2 loss (per MoE layer)"},
    {"model.moe.dropless", KEY_BOOL, F(model.moe.dropless), "false", 0, 1, NULL,
     "train with capacity for every token (group_size): no token dropped"},
    {"mesh.shape", KEY_MESH, F(mesh_shape), "\"\"", 0, 0, NULL, "mesh axes and sizes: {b: 2, m: 4} or \"b:2;m:4\""},
    {"mesh.layout", KEY_TEXT, F(mesh_layout), "\"\"", 0, 0, NULL, "layout rules: \"batch:b;d_ff:m;heads:m;vocab:m\""},
    {"train.batch", KEY_INT, F(train.batch), "8", 1, 1 << 24, NULL, "global batch (sequences per step)"},
    {"train.steps", KEY_INT, F(train.steps), "100", 0, BIG, NULL, "training steps"},
    {"train.seed", KEY_INT, F(train.seed), "1", 0, BIG, NULL, "seed of initialisation, data order and dropout"},
    {"train.log_every", KEY_INT, F(train.log_every), "10", 1, BIG, NULL, "steps between log lines"},
    {"train.optimizer", KEY_ENUM, F(train.optimizer), "adafactor", 0, 0, "adafactor|adamw|sgd", "optimizer"},
    {"train.learning_rate", KEY_FLOAT, F(train.learning_rate), "0.01", 0, 1e3, NULL, "peak learning rate"},
    {"train.min_learning_rate", KEY_FLOAT, F(train.min_learning_rate), "0.0", 0, 1e3, NULL,
     "floor of the cosine and linear_decay schedules"},
    {"train.schedule", KEY_ENUM, F(train.schedule), "rsqrt", 0, 0, "constant|linear_warmup|rsqrt|cosine|linear_decay",
     "learning-rate schedule"},
    {"train.warmup_steps", KEY_INT, F(train.warmup_steps), "10", 0, BIG, NULL, "warmup steps of the schedule"},
    {"train.clip_grad_norm", KEY_FLOAT, F(train.clip_grad_norm), "0.0", 0, 1e9, NULL,
     "global gradient-norm clipping threshold (0 = off)"},
    {"train.weight_decay", KEY_FLOAT, F(train.weight_decay), "0.0", 0, 10, NULL, "AdamW decoupled weight decay"},
    {"train.beta1", KEY_FLOAT, F(train.beta1), "0.9", 0, 0.999999, NULL, "AdamW first-moment decay"},
    {"train.beta2", KEY_FLOAT, F(train.beta2), "0.999", 0, 0.999999, NULL, "AdamW second-moment decay"},
    {"train.momentum", KEY_FLOAT, F(train.momentum), "0.0", 0, 0.999999, NULL, "SGD momentum"},
    {"train.checkpoint_every", KEY_INT, F(train.checkpoint_every), "0", 0, BIG, NULL, "steps between checkpoints (0 = off)"},
    {"train.keep_checkpoints", KEY_INT, F(train.keep_checkpoints), "3", 1, BIG, NULL, "checkpoints kept"},
    {"train.prefetch", KEY_INT, F(train.prefetch), "2", 0, 64, NULL, "batches the loader reads ahead"},
    {"train.eval_every", KEY_INT, F(train.eval_every), "0", 0, BIG, NULL, "steps between evaluations (0 = at the end)"},
    {"train.eval_batches", KEY_INT, F(train.eval_batches), "4", 1, BIG, NULL, "batches per evaluation"},
    {"train.allreduce_bucket_mb", KEY_FLOAT, F(train.allreduce_bucket_mb), "4", 0, 1024, NULL,
     "MiB of weight gradients per non-blocking allreduce, overlapped with the backward pass (0 = blocking, one each)"},
    {"train.allreduce_overlap", KEY_ENUM, F(train.allreduce_overlap), "auto", 0, 0, "auto|on|off",
     "on: the gradient buckets above; off: one blocking allreduce per gradient; auto: off on the cpu backend when "
     "every rank runs on one node (MPI's shared-memory copies then run on the ranks' own cores, and the "
     "non-blocking ones measured slower), on otherwise and with grad_reduce bf16"},
    {"train.microbatches", KEY_INT, F(train.microbatches), "1", 1, 1 << 24, NULL,
     "forward+backward passes per step over train.batch / microbatches sequences each, gradients accumulated"},
    {"train.recompute", KEY_ENUM, F(train.recompute), "none", 0, 0, "none|block",
     "block: the backward pass recomputes each transformer block's activations instead of keeping them"},
    {"train.label_smoothing", KEY_FLOAT, F(model.label_smoothing), "0.0", 0, 1, NULL,
     "eps in [0, 1): the training loss is (1-eps) * cross-entropy + eps * mean over vocab of -log_softmax"},
    {"train.loss_skip_document_start", KEY_BOOL, F(model.loss_skip_document_start), "false", 0, 1, NULL,
     "with data.pack: leave out of the loss each document's first token (predicted from another document)"},
    {"data.train", KEY_PATH, F(data_train), "\"\"", 0, 0, NULL, "training shards: a directory, a glob or a file"},
    {"data.eval", KEY_PATH, F(data_eval), "\"\"", 0, 0, NULL, "evaluation shards (empty: no evaluation)"},
    {"data.pack", KEY_ENUM, F(model.pack), "none", 0, 0, "none|eot|segments",
     "packed sequences: documents from the shards' segments datasets or split at end-of-text in each row; "
     "attention stays in a document, positions restart, padding (segment 0) is not in the loss"},
    {"run.dir", KEY_PATH, F(run_dir), "runs/default", 0, 0, NULL, "run directory: config, metrics, checkpoints"},
    {"backend.kind", KEY_BACKEND, F(backend), "cpu", 0, 0, NULL, "compute backend (one of those built in)"},
    {"backend.plugin", KEY_PATH, F(plugin), "\"\"", 0, 0, NULL,
     "pjrt: the PJRT plugin .so (empty: $MTF_PJRT_PLUGIN, else the CPU plugin of tools/install-deps.sh --pjrt)"},
    {"backend.local_devices", KEY_INT, F(local_devices), "0", 0, 4096, NULL,
     "pjrt: devices this process uses (the CPU plugin creates that many); 0 = all addressable ones"},
    {"backend.threads", KEY_INT, F(threads), "0", 0, 1024, NULL,
     "compute threads per rank (BLAS and elementwise); 0 = cores of the node / ranks on it"},
    {"backend.peak_gflops", KEY_FLOAT, F(peak_gflops), "0.0", 0, 1e9, NULL,
     "per-rank peak GFLOP/s for MFU; 0 = measure (cblas_sgemm 2048^3 on every rank at start-up; cuda: unknown)"},
    {"backend.device", KEY_INT, F(device), "-1", -1, 4096, NULL,
     "cuda: the GPU of every rank; -1 = the rank's local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) modulo the GPUs"},
    {"backend.tf32", KEY_BOOL, F(tf32), "false", 0, 1, NULL, "cuda: fp32 einsums may use TF32 tensor cores"},
    {"backend.precision", KEY_ENUM, F(precision), "fp32", 0, 0, "fp32|bf16",
     "fp32: everything in float32. bf16: the model's matmuls (einsums, attention's products) take bfloat16 "
     "operands (activations and a bf16 copy of each weight: on cpu and cuda written by the optimizer's update, on "
     "pjrt made once per step) with fp32 accumulation; the activations only products read are also stored as bf16 (half "
     "the memory); parameters, optimizer "
     "slots, checkpoints, gradients of weights and their allreduces, the residual stream, norm and softmax "
     "statistics and the loss stay fp32 (cpu: oneDNN, AMX or AVX512-BF16 where the CPU has them)"},
    {"backend.grad_reduce", KEY_ENUM, F(grad_reduce), "fp32", 0, 0, "fp32|bf16",
     "what the bucketed gradient allreduces (train.allreduce_bucket_mb) send: fp32, or bf16 for half the bytes "
     "(each bucket cast to bf16, summed so, cast back into the fp32 gradients; the sum rounds at every hop)"},
    {"backend.comm", KEY_ENUM, F(comm), "auto", 0, 0, "auto|nccl|mpi",
     "cuda: collectives through NCCL (one GPU per rank) or MPI with host staging; auto = NCCL unless ranks share a GPU"},
};
#define KEYS (sizeof schema / sizeof schema[0])
static const char *sections[] = {"model", "mesh", "train", "data", "run", "backend"};
#define SECTIONS (sizeof sections / sizeof sections[0])

/* The closest known name (a section or a section.key path), or NULL when nothing is close. */
static const char *closest(const char *name, int want_section) {
  const char *best = NULL;
  int best_distance = 4;
  for (size_t i = 0; i < (want_section ? SECTIONS : KEYS); i++) {
    const char *candidate = want_section ? sections[i] : schema[i].path;
    int d = mtf_edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

static const key_spec *find_key(const char *path) {
  for (size_t i = 0; i < KEYS; i++)
    if (strcmp(schema[i].path, path) == 0) return &schema[i];
  return NULL;
}

/* Choice `index` of a KEY_ENUM key's choices ("a|b|c"); "?" past the end. The text lives in one of a few
 * buffers per thread, used in turn, so that one message may name several choices. */
static const char *choice_text(const key_spec *spec, int index) {
  static _Thread_local char texts[4][MTF_CONFIG_TEXT];
  static _Thread_local unsigned turn;
  const char *c = spec->choices;
  for (int i = 0; c && *c; i++) {
    const char *bar = strchr(c, '|');
    size_t n = bar ? (size_t)(bar - c) : strlen(c);
    if (i == index) {
      char *text = texts[turn++ % 4];
      snprintf(text, MTF_CONFIG_TEXT, "%.*s", (int)n, c);
      return text;
    }
    c = bar ? bar + 1 : NULL;
  }
  return "?";
}

const char *mtf_config_choice_text(const char *key, int value) {
  const key_spec *spec = find_key(key);
  return spec && spec->type == KEY_ENUM ? choice_text(spec, value) : "?";
}

/* Decodes one UTF-8 character at s (n bytes left) into *cp; returns its length, or 0 when the bytes are
 * not UTF-8 (overlong forms, surrogates and values past U+10FFFF included). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  if (n == 0) return 0;
  unsigned char c = s[0];
  size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || len > n) return 0;
  uint32_t v = len == 1 ? c : len == 2 ? c & 0x1Fu : len == 3 ? c & 0x0Fu : c & 0x07u;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3Fu);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < least[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

static int is_utf8(const char *text) {
  size_t n = strlen(text);
  uint32_t cp;
  for (size_t i = 0, len; i < n; i += len)
    if ((len = utf8_decode((const unsigned char *)text + i, n - i, &cp)) == 0) return 0;
  return 1;
}

/* Writes text as a YAML double-quoted scalar that libyaml reads back as exactly text (a UTF-8 string):
 * '"' and '\\' escaped, and every character YAML would fold, strip or refuse (line breaks, tabs, other
 * control characters, NEL, the line and paragraph separators, the BOM, non-characters) as an escape. */
static void print_quoted(FILE *out, const char *text) {
  size_t n = strlen(text);
  fputc('"', out);
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t len = utf8_decode((const unsigned char *)text + i, n - i, &cp);
    if (len == 0) { /* not reachable for values that passed store_scalar; keep the output parseable */
      fprintf(out, "\\x%02X", (unsigned char)text[i]);
      i++;
      continue;
    }
    switch (cp) {
      case '"': fputs("\\\"", out); break;
      case '\\': fputs("\\\\", out); break;
      case '\n': fputs("\\n", out); break;
      case '\r': fputs("\\r", out); break;
      case '\t': fputs("\\t", out); break;
      case 0x85: fputs("\\N", out); break;
      case 0x2028: fputs("\\L", out); break;
      case 0x2029: fputs("\\P", out); break;
      default: {
        int printable = (cp >= 0x20 && cp <= 0x7E) || (cp >= 0xA0 && cp <= 0xD7FF) ||
                        (cp >= 0xE000 && cp <= 0xFFFD && cp != 0xFEFF) || (cp >= 0x10000 && cp <= 0x10FFFF);
        if (printable)
          fwrite(text + i, 1, len, out);
        else if (cp <= 0xFF)
          fprintf(out, "\\x%02X", (unsigned)cp);
        else if (cp <= 0xFFFF)
          fprintf(out, "\\u%04X", (unsigned)cp);
        else
          fprintf(out, "\\U%08X", (unsigned)cp);
      }
    }
    i += len;
  }
  fputc('"', out);
}

/* Stores a scalar's text into the field of `spec`; `where` prefixes errors. */
static int store_scalar(mtf_config *cfg, const key_spec *spec, const char *text, const char *where, mtf_error *err) {
  char *field = (char *)cfg + spec->offset, *end = NULL;
  errno = 0;
  switch (spec->type) {
    case KEY_INT: {
      long long value = strtoll(text, &end, 10);
      if (!*text || *end || errno == ERANGE)
        return mtf_error_set(err, errno == ERANGE ? MTF_ERR_INVALID : MTF_ERR_PARSE, "%s%s: '%s' is not an integer%s",
                             where, spec->path, text, errno == ERANGE ? " of 64 bits" : "");
      if ((double)value < spec->min || (double)value > spec->max)
        return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: %s is out of range; it must be between %.0f and %.0f", where,
                             spec->path, text, spec->min, spec->max);
      *(int64_t *)field = (int64_t)value;
      return MTF_OK;
    }
    case KEY_FLOAT: {
      double value = strtod(text, &end);
      if (!*text || *end || errno || !isfinite(value))
        return mtf_error_set(err, MTF_ERR_PARSE, "%s%s: '%s' is not a number", where, spec->path, text);
      if (value < spec->min || value > spec->max)
        return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: %s is out of range; it must be between %g and %g", where,
                             spec->path, text, spec->min, spec->max);
      *(double *)field = value;
      return MTF_OK;
    }
    case KEY_BOOL:
      if (!strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "on") || !strcmp(text, "1"))
        *(int *)field = 1;
      else if (!strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "off") || !strcmp(text, "0"))
        *(int *)field = 0;
      else
        return mtf_error_set(err, MTF_ERR_PARSE, "%s%s: '%s' is not true or false", where, spec->path, text);
      return MTF_OK;
    case KEY_ENUM: {
      size_t len = strlen(text);
      const char *c = spec->choices;
      for (int index = 0; c && *c; index++) {
        const char *bar = strchr(c, '|');
        size_t n = bar ? (size_t)(bar - c) : strlen(c);
        if (n == len && strncmp(c, text, n) == 0) {
          *(int *)field = index;
          return MTF_OK;
        }
        c = bar ? bar + 1 : NULL;
      }
      return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: '%s' is not one of %s", where, spec->path, text, spec->choices);
    }
    case KEY_TEXT:
    case KEY_PATH:
      if (strlen(text) >= MTF_CONFIG_PATH)
        return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: the value is longer than %d bytes", where, spec->path,
                             MTF_CONFIG_PATH - 1);
      if (!is_utf8(text)) /* a YAML file is UTF-8, and config.yaml must be able to hold the value */
        return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: the value is not UTF-8 text", where, spec->path);
      snprintf(field, MTF_CONFIG_PATH, "%s", text);
      return MTF_OK;
    case KEY_MESH: {
      int rc = mtf_mesh_parse(text, (mtf_shape *)field, err);
      return rc ? mtf_error_prefix(err, "%s%s", where, spec->path) : MTF_OK;
    }
    case KEY_BACKEND: {
      if (strlen(text) >= MTF_CONFIG_TEXT)
        return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: the value is longer than %d characters", where, spec->path,
                             MTF_CONFIG_TEXT - 1);
      int rc = mtf_backend_check(text, err);
      if (rc) return mtf_error_prefix(err, "%s%s", where, spec->path);
      snprintf(field, MTF_CONFIG_TEXT, "%s", *text ? text : "cpu");
      return MTF_OK;
    }
  }
  return MTF_OK;
}

void mtf_config_defaults(mtf_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < KEYS; i++) {
    const char *text = schema[i].fallback;
    if (strcmp(text, "\"\"") == 0) text = "";
    if (store_scalar(cfg, &schema[i], text, "", NULL) != MTF_OK) abort(); /* a broken default is a bug */
  }
}

/* Whether path (section.key) names a group of keys (model.moe for model.moe.experts, ...). */
static int is_group(const char *path) {
  size_t n = strlen(path);
  for (size_t i = 0; i < KEYS; i++)
    if (strncmp(schema[i].path, path, n) == 0 && schema[i].path[n] == '.') return 1;
  return 0;
}

static int node_error(mtf_error *err, int code, const char *source, const yaml_node_t *node, const char *fmt,
                      const char *a, const char *b) {
  char what[600];
  snprintf(what, sizeof what, fmt, a, b);
  return mtf_error_set(err, code, "%s:%zu:%zu: %s", source, node->start_mark.line + 1, node->start_mark.column + 1, what);
}

static int load_section(mtf_config *cfg, yaml_document_t *doc, const char *section, yaml_node_t *mapping,
                        const char *source, mtf_error *err) {
  if (mapping->type != YAML_MAPPING_NODE)
    return node_error(err, MTF_ERR_PARSE, source, mapping, "%s: expected a mapping of keys (e.g. '%s:' then indented 'key: value' lines)",
                      section, section);
  for (yaml_node_pair_t *pair = mapping->data.mapping.pairs.start; pair < mapping->data.mapping.pairs.top; pair++) {
    yaml_node_t *key = yaml_document_get_node(doc, pair->key), *value = yaml_document_get_node(doc, pair->value);
    char path[160];
    snprintf(path, sizeof path, "%s.%s", section, key->type == YAML_SCALAR_NODE ? (const char *)key->data.scalar.value : "?");
    const key_spec *spec = find_key(path);
    if (!spec && is_group(path)) { /* a nested mapping of keys, such as model.moe */
      if (value->type != YAML_MAPPING_NODE)
        return node_error(err, MTF_ERR_PARSE, source, value, "%s: expected a mapping of keys (e.g. '%s: {key: value}')",
                          path, strrchr(path, '.') + 1);
      MTF_CHECK(load_section(cfg, doc, path, value, source, err));
      continue;
    }
    if (!spec) {
      const char *hint = closest(path, 0);
      char suggestion[128] = "";
      if (hint) snprintf(suggestion, sizeof suggestion, "; did you mean '%s'?", hint);
      return node_error(err, MTF_ERR_INVALID, source, key, "%s: unknown key%s (the README's config reference lists every key)",
                        path, suggestion);
    }
    if (spec->type == KEY_MESH) {
      MTF_CHECK(mtf_mesh_from_yaml_node(doc, value, source, spec->path, (mtf_shape *)((char *)cfg + spec->offset), err));
      continue;
    }
    if (value->type != YAML_SCALAR_NODE)
      return node_error(err, MTF_ERR_PARSE, source, value, "%s: expected a single value, not a %s", path,
                        value->type == YAML_MAPPING_NODE ? "mapping" : "list");
    char where[MTF_CONFIG_PATH + 40];
    snprintf(where, sizeof where, "%s:%zu:%zu: ", source, value->start_mark.line + 1, value->start_mark.column + 1);
    const char *scalar = (const char *)value->data.scalar.value;
    int is_null = value->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                  (!strcmp(scalar, "~") || !strcmp(scalar, "null") || !strcmp(scalar, "Null") || !strcmp(scalar, "NULL"));
    if (is_null && (spec->type == KEY_TEXT || spec->type == KEY_PATH)) scalar = ""; /* `data.eval: ~` means none */
    MTF_CHECK(store_scalar(cfg, spec, scalar, where, err));
    if (strcmp(spec->path, "mesh.layout") == 0)
      snprintf(cfg->layout_origin, sizeof cfg->layout_origin, "%s:%zu:%zu", source, value->start_mark.line + 1,
               value->start_mark.column + 1);
  }
  return MTF_OK;
}

int mtf_config_load_text(mtf_config *cfg, const char *text, size_t length, const char *source, mtf_error *err) {
  yaml_document_t doc;
  MTF_CHECK(mtf_yaml_load(text, length, source, &doc, err));
  snprintf(cfg->source, sizeof cfg->source, "%s", source);
  int rc = MTF_OK;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root)
    rc = mtf_error_set(err, MTF_ERR_PARSE, "%s: the file is empty; see configs/tiny.yaml for a complete config", source);
  else if (root->type != YAML_MAPPING_NODE)
    rc = node_error(err, MTF_ERR_PARSE, source, root, "the top level must be a mapping of sections (%s%s)",
                    "model, mesh, train, data, run, backend", "");
  for (yaml_node_pair_t *pair = root && root->type == YAML_MAPPING_NODE ? root->data.mapping.pairs.start : NULL;
       rc == MTF_OK && pair && pair < root->data.mapping.pairs.top; pair++) {
    yaml_node_t *key = yaml_document_get_node(&doc, pair->key);
    const char *name = key->type == YAML_SCALAR_NODE ? (const char *)key->data.scalar.value : "?";
    size_t s = 0;
    while (s < SECTIONS && strcmp(sections[s], name) != 0) s++;
    if (s == SECTIONS) {
      const char *hint = closest(name, 1);
      char suggestion[96] = "";
      if (hint) snprintf(suggestion, sizeof suggestion, "; did you mean '%s'?", hint);
      rc = node_error(err, MTF_ERR_INVALID, source, key, "unknown section '%s'%s (sections: model, mesh, train, data, run, backend)",
                      name, suggestion);
      break;
    }
    rc = load_section(cfg, &doc, name, yaml_document_get_node(&doc, pair->value), source, err);
  }
  yaml_document_delete(&doc);
  return rc;
}

int mtf_config_load_file(mtf_config *cfg, const char *path, mtf_error *err) {
  char *text = NULL;
  size_t size = 0;
  MTF_CHECK(mtf_yaml_read_file(path, "config", &text, &size, err));
  int rc = mtf_config_load_text(cfg, text, size, path, err);
  free(text);
  return rc;
}

int mtf_config_set(mtf_config *cfg, const char *assignment, mtf_error *err) {
  const char *equals = strchr(assignment, '=');
  char path[160];
  if (!equals || equals == assignment || (size_t)(equals - assignment) >= sizeof path)
    return mtf_error_set(err, MTF_ERR_PARSE, "--set '%s': write it as key.path=value, e.g. --set train.steps=50", assignment);
  snprintf(path, sizeof path, "%.*s", (int)(equals - assignment), assignment);
  const key_spec *spec = find_key(path);
  if (!spec) {
    const char *hint = closest(path, 0);
    return mtf_error_set(err, MTF_ERR_INVALID, "--set %s: unknown key%s%s%s", path, hint ? "; did you mean '" : "",
                         hint ? hint : "", hint ? "'?" : "");
  }
  MTF_CHECK(store_scalar(cfg, spec, equals + 1, "--set ", err));
  if (strcmp(spec->path, "mesh.layout") == 0) snprintf(cfg->layout_origin, sizeof cfg->layout_origin, "--set mesh.layout");
  return MTF_OK;
}

/* The model's largest tensors, by their dims from the config: each must have at most MTF_MAX_ELEMENTS
 * elements, so that no element or byte count computed from them overflows. */
static int check_model_size(const mtf_config *cfg, const char *src, mtf_error *err) {
  const mtf_model_config *m = &cfg->model;
  struct {
    const char *what;
    int64_t dims[4];
  } tensors[] = {
      {"train.batch x model.length x model.vocab (the logits)", {cfg->train.batch, m->length, m->vocab, 1}},
      {"train.batch x model.heads x model.length x model.length (the attention scores)",
       {cfg->train.batch, m->heads, m->length, m->length}},
      {"train.batch x model.length x model.d_ff (the feed-forward activations)", {cfg->train.batch, m->length, m->d_ff, 1}},
      {"train.batch x model.length x model.heads x model.d_kv", {cfg->train.batch, m->length, m->heads, m->d_kv}},
      {"model.vocab x model.d_model (the embedding)", {m->vocab, m->d_model, 1, 1}},
      {"model.d_model x model.d_ff", {m->d_model, m->d_ff, 1, 1}},
      {"model.heads x model.d_kv x model.d_model", {m->heads, m->d_kv, m->d_model, 1}},
  };
  for (size_t t = 0; t < sizeof tensors / sizeof tensors[0]; t++) {
    int64_t n = 1;
    int ok = 1;
    for (int d = 0; d < 4 && ok; d++) ok = mtf_checked_product(n, tensors[t].dims[d], &n);
    if (!ok)
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: %s is more than 2^60 elements; make the model or batch smaller",
                           src, tensors[t].what);
  }
  return MTF_OK;
}

/* The size of the mesh axis that the layout maps dimension `dim` to (1: not split). */
static int64_t split_of(const mtf_config *cfg, const char *dim, const char **axis) {
  for (int i = 0; i < cfg->layout.count; i++) {
    if (strcmp(cfg->layout.rules[i].dim, dim) != 0) continue;
    int a = mtf_shape_index_of(&cfg->mesh_shape, cfg->layout.rules[i].axis);
    if (a < 0) continue; /* an axis the mesh lacks: the rule is ignored (and warned about) */
    if (axis) *axis = cfg->mesh_shape.dims[a].name;
    return cfg->mesh_shape.dims[a].size;
  }
  return 1;
}

/* model.moe against the model, the batch and the layout (model/moe.h says how the layer is built). */
static int check_moe(const mtf_config *cfg, const char *src, mtf_error *err) {
  const struct mtf_moe_config *moe = &cfg->model.moe;
  if (moe->experts == 0) return MTF_OK;
  if (moe->experts < 2)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.moe.experts is %lld: a mixture needs at least 2 experts "
                         "(set 0 for dense feed-forward layers)", src, (long long)moe->experts);
  if (moe->capacity_factor <= 0 || moe->eval_capacity_factor <= 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.moe.%s is %g: it must be above 0 (each expert takes "
                         "ceil(group_size * k * capacity_factor / experts) tokens of a group; 1.25 for training and 2 "
                         "for evaluation are usual, or set model.moe.dropless: true)", src,
                         moe->capacity_factor <= 0 ? "capacity_factor" : "eval_capacity_factor",
                         moe->capacity_factor <= 0 ? moe->capacity_factor : moe->eval_capacity_factor);
  const char *axis = NULL;
  int64_t split = split_of(cfg, "experts", &axis);
  if (moe->experts % split != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.moe.experts (%lld) is split over mesh axis '%s' (size %lld) "
                         "by the layout rule 'experts:%s', which does not divide it: make the number of experts a "
                         "multiple of %lld, or map experts to another mesh axis", src, (long long)moe->experts, axis,
                         (long long)split, axis, (long long)split);
  /* Tokens are routed in groups of group_size; the groups take the place of the batch dimension, so the
   * tokens of one data shard (one microbatch) must be a whole number of groups, and the number of groups
   * must be divisible by the axis that splits the batch. */
  int64_t group = moe->group_size ? moe->group_size : cfg->model.length;
  const char *batch_axis = NULL;
  int64_t shards = split_of(cfg, "batch", &batch_axis);
  int64_t rows = cfg->train.batch / cfg->train.microbatches, tokens = rows * cfg->model.length;
  if (rows % shards != 0) return MTF_OK; /* the layout check says so, with its own message */
  int64_t per_shard = tokens / shards;
  if (per_shard % group != 0) {
    char split_text[96] = "";
    if (batch_axis)
      snprintf(split_text, sizeof split_text, " / %lld (mesh axis '%s' splits the batch)", (long long)shards, batch_axis);
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.moe.group_size (%lld) does not divide the %lld tokens of a "
                         "data shard (train.batch %lld / train.microbatches %lld%s x model.length %lld): pick a "
                         "divisor of %lld, such as model.length %lld (group_size 0)", src, (long long)group,
                         (long long)per_shard, (long long)cfg->train.batch, (long long)cfg->train.microbatches,
                         split_text, (long long)cfg->model.length, (long long)per_shard, (long long)cfg->model.length);
  }
  return MTF_OK;
}

/* The experts of an MoE layer have one input projection: a gated activation would need two. */
static int check_gated(const mtf_config *cfg, const char *src, mtf_error *err) {
  const char *act = mtf_config_choice_text("model.activation", (int)cfg->model.activation);
  if (cfg->model.moe.experts > 0 &&
      (cfg->model.activation == MTF_ACTIVATION_SWIGLU || cfg->model.activation == MTF_ACTIVATION_GEGLU))
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.activation '%s' is gated, which the mixture-of-experts layers "
                         "(model.moe.experts %lld) do not support: use relu or gelu with MoE, or set model.moe.experts: 0",
                         src, act, (long long)cfg->model.moe.experts);
  return MTF_OK;
}

/* The encoder-decoder's keys against the architecture and what it does not support. */
static int check_architecture(const mtf_config *cfg, const char *src, mtf_error *err) {
  const mtf_model_config *m = &cfg->model;
  if (m->architecture != MTF_ARCHITECTURE_ENCODER_DECODER) {
    const char *key = m->encoder_layers ? "model.encoder_layers" : m->decoder_layers ? "model.decoder_layers"
                      : !m->shared_embeddings ? "model.shared_embeddings" : NULL;
    if (key)
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: %s is set, but model.architecture is '%s': it applies to "
                           "model.architecture: encoder_decoder only (the decoder-only model has model.layers "
                           "layers); set the architecture or drop the key", src, key,
                           mtf_config_choice_text("model.architecture", (int)m->architecture));
    return MTF_OK;
  }
  if (m->moe.experts > 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.moe.experts is %lld, but the encoder-decoder "
                         "(model.architecture: encoder_decoder) has dense feed-forward layers only: set "
                         "model.moe.experts: 0 or use model.architecture: decoder", src, (long long)m->moe.experts);
  if (m->pack != MTF_PACK_NONE)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: data.pack is '%s', but the encoder-decoder (model.architecture: "
                         "encoder_decoder) takes one example per row (docs/DATA.md, \"Seq2seq rows\"): set data.pack: "
                         "none", src, mtf_config_choice_text("data.pack", m->pack));
  if (m->length < 2)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.length is %lld, but an encoder-decoder needs at least 2 "
                         "positions (a prompt and an answer token)", src, (long long)m->length);
  return MTF_OK;
}

static int check_pack(const mtf_config *cfg, const char *src, mtf_error *err) {
  int packed = cfg->model.pack != MTF_PACK_NONE;
  if (!packed && cfg->model.loss_skip_document_start)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: train.loss_skip_document_start needs documents: set data.pack to "
                         "eot or segments, or train.loss_skip_document_start: false", src);
  return MTF_OK;
}

/* model.kv_heads and model.position against the model and the layout (model/attention_block.h). */
static int check_attention(mtf_config *cfg, const char *src, mtf_error *err) {
  mtf_model_config *m = &cfg->model;
  if (m->kv_heads == 0) m->kv_heads = m->heads;
  if (m->heads % m->kv_heads != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.kv_heads (%lld) does not divide model.heads (%lld): each "
                         "key/value head serves heads/kv_heads query heads; pick a divisor of %lld (1 = multi-query)",
                         src, (long long)m->kv_heads, (long long)m->heads, (long long)m->heads);
  const char *axis = NULL;
  int64_t split = split_of(cfg, "kv_heads", &axis);
  if (m->kv_heads < m->heads && m->kv_heads % split != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.kv_heads (%lld) is split over mesh axis '%s' (size %lld) by "
                         "the layout rule 'kv_heads:%s', which does not divide it: drop the rule (the key/value heads "
                         "are then replicated on every rank of '%s' while heads stay split: the multi-query way), or "
                         "use kv_heads divisible by %s's size %lld", src, (long long)m->kv_heads, axis,
                         (long long)split, axis, axis, axis, (long long)split);
  if (m->position == MTF_POSITION_ROTARY && m->d_kv % 2 != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.position rotary rotates pairs of key/query components, so "
                         "model.d_kv must be even (it is %lld): use d_kv %lld or %lld", src, (long long)m->d_kv,
                         (long long)(m->d_kv - 1), (long long)(m->d_kv + 1));
  if (m->position == MTF_POSITION_RELATIVE_BIAS) {
    if (m->relative_max_distance <= m->relative_num_buckets / 2)
      return mtf_error_set(err, MTF_ERR_INVALID, "%s: model.relative_max_distance (%lld) must be above half of "
                           "model.relative_num_buckets (%lld): the first half of the buckets are exact distances, "
                           "the rest cover distances up to max_distance logarithmically (T5: 32 buckets, 128)", src,
                           (long long)m->relative_max_distance, (long long)m->relative_num_buckets);
  }
  return MTF_OK;
}

int mtf_config_validate(mtf_config *cfg, mtf_error *err) {
  const char *src = cfg->source[0] ? cfg->source : "config";
  MTF_CHECK(mtf_mesh_validate(&cfg->mesh_shape, err));
  MTF_CHECK(check_model_size(cfg, src, err));
  int rc = mtf_layout_rules_parse(cfg->mesh_layout, &cfg->layout, err);
  if (rc) return mtf_error_prefix(err, "%s: mesh.layout", src);
  if (cfg->train.warmup_steps > 0 && cfg->train.schedule == MTF_SCHEDULE_CONSTANT) cfg->train.warmup_steps = 0;
  if (cfg->train.batch % cfg->train.microbatches != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: train.microbatches (%lld) does not divide train.batch (%lld): every "
                         "microbatch must hold the same number of sequences; pick a divisor of %lld", src,
                         (long long)cfg->train.microbatches, (long long)cfg->train.batch, (long long)cfg->train.batch);
  MTF_CHECK(check_moe(cfg, src, err));
  MTF_CHECK(check_gated(cfg, src, err));
  MTF_CHECK(check_architecture(cfg, src, err));
  MTF_CHECK(check_attention(cfg, src, err));
  if (cfg->model.label_smoothing >= 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: train.label_smoothing is %g: it must be below 1 (at 1 the loss "
                         "ignores the labels); 0.1 is usual, 0 turns smoothing off", src, cfg->model.label_smoothing);
  MTF_CHECK(check_pack(cfg, src, err));
  if (cfg->train.min_learning_rate > cfg->train.learning_rate)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: train.min_learning_rate (%g) is above train.learning_rate (%g)", src,
                         cfg->train.min_learning_rate, cfg->train.learning_rate);
  /* The CUDA keys likewise; bf16 is refused where it is not implemented rather than silently fp32. What each
   * kind does is its registry entry's (mtf_backend_capabilities; backend.kind was checked when it was read). */
  mtf_backend_caps no_caps = {.kind = cfg->backend};
  const mtf_backend_caps *caps = mtf_backend_capabilities(cfg->backend);
  if (!caps) caps = &no_caps;
  if (!caps->gpu && (cfg->device != -1 || cfg->tf32))
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: %s is set but backend.kind is '%s': it only applies to backend.kind "
                         "cuda (set that, or remove the key)", src, cfg->tf32 ? "backend.tf32" : "backend.device",
                         cfg->backend);
  cfg->model.bf16_matmuls = cfg->precision == MTF_NUMBERS_BF16;
  if (cfg->grad_reduce == MTF_NUMBERS_BF16 && cfg->train.allreduce_bucket_mb <= 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: backend.grad_reduce: bf16 sends the gradient buckets in bfloat16, "
                         "but train.allreduce_bucket_mb is 0 (no buckets): set it above 0 (4 is the default), or "
                         "grad_reduce: fp32", src);
  if (cfg->grad_reduce == MTF_NUMBERS_BF16 && cfg->train.allreduce_overlap == MTF_OVERLAP_OFF)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: backend.grad_reduce: bf16 sends the gradient buckets in bfloat16, "
                         "but train.allreduce_overlap is off (no buckets): set it to auto or on, or grad_reduce: fp32",
                         src);
  if (cfg->grad_reduce == MTF_NUMBERS_BF16 && !caps->bf16_grad_reduce)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: backend.grad_reduce: bf16 is not implemented by the %s backend "
                         "(it sums gradients in fp32): use grad_reduce: fp32", src, cfg->backend);
  /* NCCL moves GPU memory; the host-memory backends' collectives are MPI's already. */
  if (cfg->comm == MTF_COMM_NCCL && !caps->gpu)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: backend.comm is nccl but backend.kind is '%s': NCCL needs "
                         "backend.kind: cuda (one GPU per rank); with %s use auto or mpi", src, cfg->backend, cfg->backend);
  /* The PJRT keys mean nothing to another backend: a config that sets them most likely meant pjrt. */
  if (!caps->plugin && (cfg->plugin[0] || cfg->local_devices != 0))
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: %s is set but backend.kind is '%s': it only applies to backend.kind "
                         "pjrt (set that, or remove the key)", src, cfg->plugin[0] ? "backend.plugin" : "backend.local_devices",
                         cfg->backend);
  return MTF_OK;
}

void mtf_config_print(const mtf_config *cfg, FILE *out) {
  char section[32] = "";
  for (size_t i = 0; i < KEYS; i++) {
    const key_spec *spec = &schema[i];
    const char *dot = strchr(spec->path, '.');
    int n = (int)(dot - spec->path);
    if ((int)strlen(section) != n || strncmp(section, spec->path, (size_t)n) != 0) {
      snprintf(section, sizeof section, "%.*s", n, spec->path);
      fprintf(out, "%s:\n", section);
    }
    const char *field = (const char *)cfg + spec->offset;
    fprintf(out, "  %s: ", dot + 1);
    char mesh_text[MTF_SHAPE_STR_MAX];
    switch (spec->type) {
      case KEY_INT: fprintf(out, "%lld", (long long)*(const int64_t *)field); break;
      case KEY_FLOAT: { /* the shortest text that reads back as the same double: 0.9, not 0.90000000000000002 */
        char number[32];
        mtf_format_double(*(const double *)field, number, sizeof number);
        fprintf(out, "%s", number);
        break;
      }
      case KEY_BOOL: fprintf(out, "%s", *(const int *)field ? "true" : "false"); break;
      case KEY_BACKEND: fprintf(out, "%s", field); break;
      case KEY_ENUM: fprintf(out, "%s", choice_text(spec, *(const int *)field)); break;
      case KEY_TEXT:
      case KEY_PATH: print_quoted(out, field); break;
      case KEY_MESH: {
        const mtf_shape *mesh = (const mtf_shape *)field;
        size_t used = 0;
        mesh_text[0] = '\0';
        for (int a = 0; a < mesh->rank; a++)
          used += (size_t)snprintf(mesh_text + used, sizeof mesh_text - used, "%s%s:%lld", a ? ";" : "",
                                   mesh->dims[a].name, (long long)mesh->dims[a].size);
        print_quoted(out, mesh_text);
        break;
      }
    }
    fprintf(out, "    # %s\n", spec->help);
  }
}

int mtf_config_key_count(void) { return (int)KEYS; }

const char *mtf_config_key_path(int index) { return index >= 0 && index < (int)KEYS ? schema[index].path : NULL; }
