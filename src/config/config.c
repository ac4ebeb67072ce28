#include "config/config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/mesh.h"
#include "core/mesh_yaml.h"
#include "mtf.h"

/* KEY_BACKEND: a backend kind, which must be built in (mtf_backend_check). */
typedef enum key_type { KEY_INT, KEY_FLOAT, KEY_BOOL, KEY_TEXT, KEY_CHOICE, KEY_MESH, KEY_PATH, KEY_BACKEND } key_type;

typedef struct key_spec {
  const char *path; /* section.key */
  key_type type;
  size_t offset;
  const char *fallback; /* default, as YAML text */
  double min, max;      /* numbers: inclusive range */
  const char *choices;  /* KEY_CHOICE: "a|b|c" */
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
    {"model.norm", KEY_CHOICE, F(model.norm), "rms", 0, 0, "rms|layer", "normalisation"},
    {"model.activation", KEY_CHOICE, F(model.activation), "gelu", 0, 0, "relu|gelu", "feed-forward activation"},
    {"model.tie_embeddings", KEY_BOOL, F(model.tie_embeddings), "true", 0, 1, NULL,
     "logits from the embedding (scaled by d_model^-0.5) instead of a separate [d_model, vocab]"},
    {"model.dropout", KEY_FLOAT, F(model.dropout), "0.0", 0, 0.99, NULL, "dropout rate in training"},
    {"model.z_loss", KEY_FLOAT, F(model.z_loss), "0.0001", 0, 1, NULL, "weight of log(Z)^2 in the loss"},
    {"mesh.shape", KEY_MESH, F(mesh_shape), "\"\"", 0, 0, NULL, "mesh axes and sizes: {b: 2, m: 4} or \"b:2;m:4\""},
    {"mesh.layout", KEY_TEXT, F(mesh_layout), "\"\"", 0, 0, NULL, "layout rules: \"batch:b;d_ff:m;heads:m;vocab:m\""},
    {"train.batch", KEY_INT, F(train.batch), "8", 1, 1 << 24, NULL, "global batch (sequences per step)"},
    {"train.steps", KEY_INT, F(train.steps), "100", 0, BIG, NULL, "training steps"},
    {"train.seed", KEY_INT, F(train.seed), "1", 0, BIG, NULL, "seed of initialisation, data order and dropout"},
    {"train.log_every", KEY_INT, F(train.log_every), "10", 1, BIG, NULL, "steps between log lines"},
    {"train.optimizer", KEY_CHOICE, F(train.optimizer), "adafactor", 0, 0, "adafactor|adamw|sgd", "optimizer"},
    {"train.learning_rate", KEY_FLOAT, F(train.learning_rate), "0.01", 0, 1e3, NULL, "peak learning rate"},
    {"train.min_learning_rate", KEY_FLOAT, F(train.min_learning_rate), "0.0", 0, 1e3, NULL,
     "floor of the cosine and linear_decay schedules"},
    {"train.schedule", KEY_CHOICE, F(train.schedule), "rsqrt", 0, 0, "constant|linear_warmup|rsqrt|cosine|linear_decay",
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
    {"data.train", KEY_PATH, F(data_train), "\"\"", 0, 0, NULL, "training shards: a directory, a glob or a file"},
    {"data.eval", KEY_PATH, F(data_eval), "\"\"", 0, 0, NULL, "evaluation shards (empty: no evaluation)"},
    {"run.dir", KEY_PATH, F(run_dir), "runs/default", 0, 0, NULL, "run directory: config, metrics, checkpoints"},
    {"backend.kind", KEY_BACKEND, F(backend), "cpu", 0, 0, NULL, "compute backend (one of those built in)"},
    {"backend.threads", KEY_INT, F(threads), "0", 0, 1024, NULL,
     "compute threads per rank (BLAS and elementwise); 0 = cores of the node / ranks on it"},
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
    case KEY_CHOICE: {
      size_t len = strlen(text);
      const char *c = spec->choices;
      while (c && *c) {
        const char *bar = strchr(c, '|');
        size_t n = bar ? (size_t)(bar - c) : strlen(c);
        if (n == len && strncmp(c, text, n) == 0) {
          snprintf(field, MTF_CONFIG_TEXT, "%s", text);
          return MTF_OK;
        }
        c = bar ? bar + 1 : NULL;
      }
      return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: '%s' is not one of %s", where, spec->path, text, spec->choices);
    }
    case KEY_TEXT:
    case KEY_PATH:
      if (strlen(text) >= (spec->type == KEY_TEXT ? MTF_CONFIG_PATH : MTF_CONFIG_PATH))
        return mtf_error_set(err, MTF_ERR_INVALID, "%s%s: the value is longer than %d characters", where, spec->path,
                             MTF_CONFIG_PATH - 1);
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
  }
  return MTF_OK;
}

int mtf_config_load_text(mtf_config *cfg, const char *text, size_t length, const char *source, mtf_error *err) {
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return mtf_error_set(err, MTF_ERR_NOMEM, "cannot start the YAML parser");
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, length);
  if (!yaml_parser_load(&parser, &doc)) {
    int rc = mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: YAML syntax error: %s%s%s", source,
                           parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                           parser.problem ? parser.problem : "unknown problem", parser.context ? " " : "",
                           parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    return rc;
  }
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
  yaml_parser_delete(&parser);
  return rc;
}

int mtf_config_load_file(mtf_config *cfg, const char *path, mtf_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return mtf_error_set(err, MTF_ERR_IO, "cannot open config '%s': %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (size < 0 || size > (1 << 24)) {
    fclose(f);
    return mtf_error_set(err, MTF_ERR_IO, "config '%s' is not a readable file of at most 16 MiB", path);
  }
  char *text = malloc((size_t)size + 1);
  size_t got = text ? fread(text, 1, (size_t)size, f) : 0;
  fclose(f);
  if (!text || got != (size_t)size) {
    free(text);
    return mtf_error_set(err, MTF_ERR_IO, "cannot read config '%s'", path);
  }
  text[size] = '\0';
  int rc = mtf_config_load_text(cfg, text, (size_t)size, path, err);
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
  return store_scalar(cfg, spec, equals + 1, "--set ", err);
}

int mtf_config_validate(mtf_config *cfg, mtf_error *err) {
  const char *src = cfg->source[0] ? cfg->source : "config";
  int rc = mtf_layout_rules_parse(cfg->mesh_layout, &cfg->layout, err);
  if (rc) return mtf_error_prefix(err, "%s: mesh.layout", src);
  if (cfg->train.warmup_steps > 0 && !strcmp(cfg->train.schedule, "constant")) cfg->train.warmup_steps = 0;
  if (cfg->train.min_learning_rate > cfg->train.learning_rate)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: train.min_learning_rate (%g) is above train.learning_rate (%g)", src,
                         cfg->train.min_learning_rate, cfg->train.learning_rate);
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
      case KEY_FLOAT: fprintf(out, "%.17g", *(const double *)field); break;
      case KEY_BOOL: fprintf(out, "%s", *(const int *)field ? "true" : "false"); break;
      case KEY_CHOICE:
      case KEY_BACKEND: fprintf(out, "%s", field); break;
      case KEY_TEXT:
      case KEY_PATH: fprintf(out, "\"%s\"", field); break;
      case KEY_MESH: {
        const mtf_shape *mesh = (const mtf_shape *)field;
        size_t used = 0;
        mesh_text[0] = '\0';
        for (int a = 0; a < mesh->rank; a++)
          used += (size_t)snprintf(mesh_text + used, sizeof mesh_text - used, "%s%s:%lld", a ? ";" : "",
                                   mesh->dims[a].name, (long long)mesh->dims[a].size);
        fprintf(out, "\"%s\"", mesh_text);
        break;
      }
    }
    fprintf(out, "    # %s\n", spec->help);
  }
}

int mtf_config_key_count(void) { return (int)KEYS; }

const char *mtf_config_key_path(int index) { return index >= 0 && index < (int)KEYS ? schema[index].path : NULL; }
