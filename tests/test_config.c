/* The config reader: defaults, sections and keys, types and ranges, file:line:column messages, "did you
 * mean", --set overrides, the mesh in both spellings, and a README that documents every key. */
#include <stddef.h>
#include <stdlib.h>

#include "check.h"
#include "config/config.h"

static int load(mtf_config *cfg, const char *text, mtf_error *err) {
  mtf_config_defaults(cfg);
  int rc = mtf_config_load_text(cfg, text, strlen(text), "test.yaml", err);
  return rc ? rc : mtf_config_validate(cfg, err);
}

/* Every text of every enum key reads as its enum value (config.h's enums follow the schema's order of the
 * choices) and prints back as the same text. */
static void check_enum_choices(mtf_config *cfg) {
  static const struct {
    const char *key, *text;
    int value;
    size_t offset;
  } cases[] = {
#define C(key, text, value, field) {key, text, value, offsetof(mtf_config, field)}
      C("model.architecture", "decoder", MTF_ARCHITECTURE_DECODER, model.architecture),
      C("model.architecture", "encoder_decoder", MTF_ARCHITECTURE_ENCODER_DECODER, model.architecture),
      C("model.norm", "rms", MTF_NORM_RMS, model.norm),
      C("model.norm", "layer", MTF_NORM_LAYER, model.norm),
      C("model.activation", "relu", MTF_ACTIVATION_RELU, model.activation),
      C("model.activation", "gelu", MTF_ACTIVATION_GELU, model.activation),
      C("model.activation", "swiglu", MTF_ACTIVATION_SWIGLU, model.activation),
      C("model.activation", "geglu", MTF_ACTIVATION_GEGLU, model.activation),
      C("model.position", "learned", MTF_POSITION_LEARNED, model.position),
      C("model.position", "relative_bias", MTF_POSITION_RELATIVE_BIAS, model.position),
      C("model.position", "rotary", MTF_POSITION_ROTARY, model.position),
      C("model.position", "none", MTF_POSITION_NONE, model.position),
      C("model.moe.gating", "top2", MTF_GATING_TOP2, model.moe.gating),
      C("model.moe.gating", "switch", MTF_GATING_SWITCH, model.moe.gating),
      C("train.allreduce_overlap", "auto", MTF_OVERLAP_AUTO, train.allreduce_overlap),
      C("train.allreduce_overlap", "on", MTF_OVERLAP_ON, train.allreduce_overlap),
      C("train.allreduce_overlap", "off", MTF_OVERLAP_OFF, train.allreduce_overlap),
      C("train.recompute", "none", MTF_RECOMPUTE_NONE, train.recompute),
      C("train.recompute", "block", MTF_RECOMPUTE_BLOCK, train.recompute),
      C("train.optimizer", "adafactor", MTF_OPT_ADAFACTOR, train.optimizer),
      C("train.optimizer", "adamw", MTF_OPT_ADAMW, train.optimizer),
      C("train.optimizer", "sgd", MTF_OPT_SGD, train.optimizer),
      C("train.schedule", "constant", MTF_SCHEDULE_CONSTANT, train.schedule),
      C("train.schedule", "linear_warmup", MTF_SCHEDULE_LINEAR_WARMUP, train.schedule),
      C("train.schedule", "rsqrt", MTF_SCHEDULE_RSQRT, train.schedule),
      C("train.schedule", "cosine", MTF_SCHEDULE_COSINE, train.schedule),
      C("train.schedule", "linear_decay", MTF_SCHEDULE_LINEAR_DECAY, train.schedule),
      C("backend.precision", "fp32", MTF_NUMBERS_FP32, precision),
      C("backend.precision", "bf16", MTF_NUMBERS_BF16, precision),
      C("backend.grad_reduce", "fp32", MTF_NUMBERS_FP32, grad_reduce),
      C("backend.grad_reduce", "bf16", MTF_NUMBERS_BF16, grad_reduce),
      C("backend.comm", "auto", MTF_COMM_AUTO, comm),
      C("backend.comm", "nccl", MTF_COMM_NCCL, comm),
      C("backend.comm", "mpi", MTF_COMM_MPI, comm),
      C("data.pack", "none", MTF_PACK_NONE, model.pack),
      C("data.pack", "eot", MTF_PACK_EOT, model.pack),
      C("data.pack", "segments", MTF_PACK_SEGMENTS, model.pack),
#undef C
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char assignment[128];
    mtf_error err = {0};
    mtf_config_defaults(cfg);
    snprintf(assignment, sizeof assignment, "%s=%s", cases[i].key, cases[i].text);
    int ok = mtf_config_set(cfg, assignment, &err) == MTF_OK;
    int value = *(const int *)((const char *)cfg + cases[i].offset);
    if (!ok || value != cases[i].value || strcmp(mtf_config_choice_text(cases[i].key, value), cases[i].text) != 0)
      fprintf(stderr, "%s: read as %d (expected %d), prints '%s' %s\n", assignment, value, cases[i].value,
              mtf_config_choice_text(cases[i].key, value), err.msg);
    CHECK(ok && value == cases[i].value && strcmp(mtf_config_choice_text(cases[i].key, value), cases[i].text) == 0);
  }
}

int main(int argc, char **argv) {
  mtf_config *cfg = calloc(1, sizeof *cfg);
  mtf_error err;
  CHECK(load(cfg, "model:\n  d_model: 128\n  norm: layer\nmesh:\n  shape: {b: 2, m: 4}\n  layout: \"batch:b;d_ff:m\"\n"
                  "train: {batch: 32, learning_rate: 3e-4, optimizer: adamw}\nrun: {dir: /tmp/x}\n", &err) == MTF_OK);
  CHECK(cfg->model.d_model == 128 && cfg->model.norm == MTF_NORM_LAYER && cfg->model.d_ff == 256);
  CHECK(cfg->mesh_shape.rank == 2 && cfg->mesh_shape.dims[1].size == 4 && cfg->layout.count == 2);
  CHECK(cfg->train.batch == 32 && cfg->train.learning_rate == 3e-4 && cfg->train.optimizer == MTF_OPT_ADAMW);
  CHECK(load(cfg, "mesh: {shape: \"b:2;m:2\"}\n", &err) == MTF_OK && cfg->mesh_shape.rank == 2);
  check_enum_choices(cfg);

  CHECK(load(cfg, "model:\n  d_modle: 3\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "test.yaml:2:3: model.d_modle: unknown key; did you mean 'model.d_model'?");
  CHECK(load(cfg, "modle:\n  d_model: 3\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "test.yaml:1:1: unknown section 'modle'; did you mean 'model'?");
  CHECK(load(cfg, "train:\n  steps: -1\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "test.yaml:2:10: train.steps: -1 is out of range");
  CHECK(load(cfg, "train:\n  seed: 12345678901234567\n", &err) == MTF_OK && cfg->train.seed == 12345678901234567LL);
  CHECK(load(cfg, "data:\n  eval: ~\n  train: null\n", &err) == MTF_OK && cfg->data_eval[0] == '\0' && cfg->data_train[0] == '\0');
  CHECK(load(cfg, "data:\n  eval: \"null\"\n", &err) == MTF_OK && strcmp(cfg->data_eval, "null") == 0);
  CHECK(load(cfg, "train:\n  seed: 1.5\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "train.seed: '1.5' is not an integer");
  CHECK(load(cfg, "model:\n  tie_embeddings: maybe\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "model.tie_embeddings: 'maybe' is not true or false");
  CHECK(load(cfg, "model:\n  activation: swish\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "model.activation: 'swish' is not one of relu|gelu");
  CHECK(load(cfg, "model:\n  layers: [1, 2]\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "test.yaml:2:11: model.layers: expected a single value, not a list");
  CHECK(load(cfg, "mesh:\n  layout: \"batch\"\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "mesh.layout", "item 'batch' has no ':'");
  CHECK(load(cfg, "train: {learning_rate: 0.001, min_learning_rate: 0.01}\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "train.min_learning_rate (0.01) is above train.learning_rate (0.001)");
  /* backend.comm: a choice; nccl only with the cuda backend (the cpu backend's collectives are MPI's). */
  CHECK(load(cfg, "backend: {comm: mpi}\n", &err) == MTF_OK && cfg->comm == MTF_COMM_MPI);
  CHECK(load(cfg, "backend: {}\n", &err) == MTF_OK && cfg->comm == MTF_COMM_AUTO);
  CHECK(load(cfg, "backend: {comm: gloo}\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "backend.comm: 'gloo' is not one of auto|nccl|mpi");
  CHECK(load(cfg, "backend: {comm: nccl}\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "backend.comm is nccl but backend.kind is 'cpu'", "backend.kind: cuda");
  CHECK(load(cfg, "", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "the file is empty");

  mtf_config_defaults(cfg);
  CHECK(mtf_config_set(cfg, "train.steps=7", &err) == MTF_OK && cfg->train.steps == 7);
  CHECK(mtf_config_set(cfg, "mesh.shape=b:2,m:2", &err) == MTF_OK && cfg->mesh_shape.rank == 2);
  CHECK(mtf_config_set(cfg, "train.stepz=7", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "--set train.stepz: unknown key; did you mean 'train.steps'?");
  CHECK(mtf_config_set(cfg, "train.steps", &err) == MTF_ERR_PARSE);
  CHECK(mtf_config_set(cfg, "train.steps=many", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "--set train.steps: 'many' is not an integer");
  CHECK(mtf_config_load_file(cfg, "/nonexistent/x.yaml", &err) == MTF_ERR_IO);

  /* The printed config reads back to the same values. */
  FILE *tmp = tmpfile();
  mtf_config_defaults(cfg);
  mtf_config_set(cfg, "train.learning_rate=0.123", &err);
  mtf_config_set(cfg, "mesh.shape=b:2;m:2", &err);
  mtf_config_print(cfg, tmp);
  long size = ftell(tmp);
  rewind(tmp);
  char *text = calloc((size_t)size + 1, 1);
  CHECK(fread(text, 1, (size_t)size, tmp) == (size_t)size);
  fclose(tmp);
  mtf_config *again = calloc(1, sizeof *again);
  CHECK(load(again, text, &err) == MTF_OK);
  CHECK(again->train.learning_rate == 0.123 && again->mesh_shape.rank == 2);
  free(text);
  free(again);

  /* The README's config reference names every key. */
  if (argc > 1) {
    FILE *readme = fopen(argv[1], "rb");
    CHECK(readme != NULL);
    char *doc = calloc(1 << 20, 1);
    if (readme) {
      size_t n = fread(doc, 1, (1 << 20) - 1, readme);
      doc[n] = '\0';
      fclose(readme);
    }
    for (int i = 0; i < mtf_config_key_count(); i++) {
      char quoted[96];
      snprintf(quoted, sizeof quoted, "`%s`", mtf_config_key_path(i));
      CHECK_CONTAINS(doc, quoted);
    }
    free(doc);
  }
  free(cfg);
  return check_summary();
}
