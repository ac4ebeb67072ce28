/* Hostile and broken config input (issue 16): duplicate keys and sections, deep nesting, byte errors at
 * their real line:column, NUL characters, several documents, FIFOs and directories as the config, sizes
 * whose products overflow, meshes of more ranks than an int holds, and the saved config re-loading to the
 * same values over odd strings. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "config/config.h"
#include "core/mesh.h"
#include "core/mesh_yaml.h"
#include "core/shape.h"

static int load_n(mtf_config *cfg, const char *text, size_t n, mtf_error *err) {
  mtf_config_defaults(cfg);
  int rc = mtf_config_load_text(cfg, text, n, "h.yaml", err);
  return rc ? rc : mtf_config_validate(cfg, err);
}

static int load(mtf_config *cfg, const char *text, mtf_error *err) { return load_n(cfg, text, strlen(text), err); }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* config -> mtf_config_print -> load: the same struct. */
static void check_round_trip(mtf_config *cfg, mtf_config *back, const char *what) {
  char *text = NULL;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  mtf_config_print(cfg, out);
  fclose(out);
  mtf_error err;
  mtf_config_defaults(back);
  int rc = mtf_config_load_text(back, text, size, "saved.yaml", &err);
  if (rc == MTF_OK) rc = mtf_config_validate(back, &err);
  CHECK(rc == MTF_OK);
  if (rc != MTF_OK) fprintf(stderr, "  %s: %s\n--- saved ---\n%s\n", what, err.msg, text);
  memcpy(back->source, cfg->source, sizeof back->source); /* where the keys came from, not what they say */
  memcpy(back->layout_origin, cfg->layout_origin, sizeof back->layout_origin);
  int same = memcmp(cfg, back, sizeof *cfg) == 0;
  CHECK(same);
  if (!same)
    fprintf(stderr, "  %s: re-loads differently: data.train '%s' vs '%s'\n--- saved ---\n%s\n", what, cfg->data_train,
            back->data_train, text);
  free(text);
}

int main(void) {
  mtf_config *cfg = calloc(1, sizeof *cfg), *back = calloc(1, sizeof *back);
  mtf_error err;

  /* 2. duplicate keys and sections: an error at the second occurrence */
  CHECK(load(cfg, "model:\n  vocab: 300\n  d_model: 32\n  vocab: 500\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "h.yaml:4:3: duplicate key 'vocab' (first at line 2, column 3)");
  CHECK(load(cfg, "model:\n  vocab: 300\ntrain:\n  steps: 3\nmodel:\n  d_model: 32\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "h.yaml:5:1: duplicate key 'model'");
  CHECK(load(cfg, "train: {steps: 3, \"steps\": 4}\n", &err) == MTF_ERR_PARSE); /* quoting does not make it new */
  CHECK_CONTAINS(err.msg, "h.yaml:1:19: duplicate key 'steps'");
  CHECK(load(cfg, "mesh:\n  shape: {b: 2, b: 4}\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "h.yaml:2:17: duplicate key 'b'");
  mtf_shape mesh;
  CHECK(mtf_mesh_parse_yaml("{m: 2, m: 2}", 12, "m.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "m.yaml:1:8: duplicate key 'm'");
  CHECK(load(cfg, "model: {vocab: 300}\ntrain: {vocab: 300}\n", &err) == MTF_ERR_INVALID); /* same name, other maps */
  CHECK_CONTAINS(err.msg, "train.vocab: unknown key");

  /* 3. pathological nesting: refused at once with a depth limit */
  size_t deep = 200000;
  char *text = malloc(deep * 2 + 16);
  memcpy(text, "model: ", 7);
  memset(text + 7, '[', deep);
  text[7 + deep] = '\0';
  double t0 = now();
  CHECK(load(cfg, text, &err) == MTF_ERR_PARSE);
  CHECK(now() - t0 < 2.0);
  CHECK_CONTAINS(err.msg, "h.yaml:1:", "nests deeper than");
  size_t n = 0;
  for (size_t i = 0; i < 5000; i++) n += (size_t)sprintf(text + n, "{a: ");
  t0 = now();
  CHECK(load(cfg, text, &err) == MTF_ERR_PARSE);
  CHECK(now() - t0 < 2.0);
  CHECK_CONTAINS(err.msg, "nests deeper than");
  free(text);

  /* 5. byte errors at their real line:column */
  const char bad_utf8[] = "model:\n  vocab: 300\n  norm: \"r\xffms\"\n";
  CHECK(load(cfg, bad_utf8, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "h.yaml:3:11: YAML byte error", "0xFF");
  const char nul[] = "model:\n  vocab: 300\n  no\0rm: rms\n";
  CHECK(load_n(cfg, nul, sizeof nul - 1, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "h.yaml:3:5: YAML byte error", "0x00");
  const char after_unicode[] = "run:\n  dir: \"\xc3\xa9\xc3\xa9\x01\"\n";
  CHECK(load(cfg, after_unicode, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "h.yaml:2:11:"); /* columns count characters, not bytes */
  CHECK(load(cfg, "run:\n  dir: \"a\\0b\"\n", &err) == MTF_ERR_PARSE); /* a NUL by escape would cut the path */
  CHECK_CONTAINS(err.msg, "h.yaml:2:8:", "NUL");
  CHECK(load(cfg, "model: {vocab: 300}\n---\nmodel: {vocab: 500}\n", &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "h.yaml:2:1: a second YAML document");

  /* 4. a FIFO or a directory as the config: refused at once, not opened blocking */
  char fifo[] = "/tmp/mtf-hostile-XXXXXX";
  CHECK(mkdtemp(fifo) != NULL);
  char path[64];
  snprintf(path, sizeof path, "%s/fifo.yaml", fifo);
  CHECK(mkfifo(path, 0600) == 0);
  mtf_config_defaults(cfg);
  CHECK(mtf_config_load_file(cfg, path, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "FIFO");
  mtf_layout_rules rules;
  CHECK(mtf_mesh_config_load(path, &mesh, &rules, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "FIFO");
  unlink(path);
  CHECK(mtf_config_load_file(cfg, fifo, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "directory");
  rmdir(fifo);

  /* 1. sizes: meshes of more ranks than an int holds, shapes whose product overflows, model sizes */
  CHECK(mtf_mesh_parse("a:65537;b:65537", &mesh, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "more than 16777216 ranks");
  CHECK(mtf_mesh_parse("a:4096;b:4096", &mesh, &err) == MTF_OK && mtf_mesh_size(&mesh) == 1 << 24);
  CHECK(load(cfg, "mesh:\n  shape: {a: 65537, b: 65537}\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "h.yaml:2:10: mesh.shape", "more than 16777216 ranks");
  mtf_config_defaults(cfg);
  CHECK(mtf_config_set(cfg, "mesh.shape=a:2;b:4611686018427387904", &err) == MTF_ERR_INVALID);
  mtf_shape shape;
  CHECK(mtf_shape_parse("a:4294967296,b:4294967296", "shape", &shape, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "overflows");
  CHECK(mtf_shape_parse("a:1073741824,b:1073741824", "shape", &shape, &err) == MTF_OK);
  int64_t product = 0;
  CHECK(!mtf_checked_product(INT64_MAX / 2, 3, &product) && product == INT64_MAX);
  CHECK(mtf_checked_product(1 << 30, 1 << 30, &product) && product == (int64_t)1 << 60);
  CHECK(load(cfg, "model: {vocab: 2000000000, length: 1048576}\ntrain: {batch: 16777216}\n", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "the logits", "2^60");
  CHECK(load(cfg, "model: {heads: 65536, length: 1048576}\ntrain: {batch: 16777216}\n", &err) == MTF_ERR_INVALID);

  /* 6. floats must be finite */
  const char *not_finite[] = {"nan", "NaN", "inf", "-inf", ".nan", "1e999", "-0.5"};
  for (size_t i = 0; i < sizeof not_finite / sizeof not_finite[0]; i++) {
    char set[64];
    snprintf(set, sizeof set, "train.learning_rate=%s", not_finite[i]);
    mtf_config_defaults(cfg);
    CHECK(mtf_config_set(cfg, set, &err) != MTF_OK);
  }

  /* 7. the saved config re-loads to the same values, over odd strings */
  const char *odd[] = {"plain/path", "with \"quotes\"", "back\\slash\\", "new\nline", "cr\rlf\r\n", "tab\there",
                       "colon: space", "hash # comment", "#start", "  leading and trailing  ", "- dash", "[bracket",
                       "{brace}", "'single'", "~", "null", "true", "123", "0x1F", "&anchor", "*alias", "!tag", "%percent",
                       "@at", "`back`", "|pipe", ">fold", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\xc2\x85nel",
                       "\xe2\x80\xa8line sep", "\xef\xbb\xbf" "bom", "\x01\x1f\x7f controls", "\xc2\x80\xc2\x9f c1",
                       "\xef\xbf\xbe nonchar", "", " ", "a:b;c", "---", "...", "\\x41 not an escape", "\"", "\\"};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    mtf_config_defaults(cfg);
    char set[600];
    snprintf(set, sizeof set, "data.train=%s", odd[i]);
    CHECK(mtf_config_set(cfg, set, &err) == MTF_OK);
    snprintf(set, sizeof set, "data.eval=x%sy", odd[i]);
    CHECK(mtf_config_set(cfg, set, &err) == MTF_OK);
    snprintf(set, sizeof set, "run.dir=%s/run", odd[i]);
    CHECK(mtf_config_set(cfg, set, &err) == MTF_OK);
    CHECK(mtf_config_set(cfg, "mesh.shape=b:2;m:3", &err) == MTF_OK);
    CHECK(mtf_config_set(cfg, "mesh.layout=batch:b;d_ff:m", &err) == MTF_OK);
    CHECK(mtf_config_set(cfg, "train.learning_rate=0.1", &err) == MTF_OK);
    CHECK(mtf_config_validate(cfg, &err) == MTF_OK);
    check_round_trip(cfg, back, odd[i]);
  }
  mtf_config_defaults(cfg);
  CHECK(mtf_config_set(cfg, "data.train=bad\xff" "byte", &err) == MTF_ERR_INVALID); /* cannot be saved as YAML */
  CHECK_CONTAINS(err.msg, "not UTF-8");
  CHECK(mtf_config_set(cfg, "data.train=\xed\xa0\x80surrogate", &err) == MTF_ERR_INVALID);

  free(cfg);
  free(back);
  return check_summary();
}
