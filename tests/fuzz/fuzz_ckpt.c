/* libFuzzer target: the checkpoint readers that run in one process without MPI: mtf_ckpt_inspect (text
 * and JSON), mtf_ckpt_verify (every dataset against its checksum), mtf_ckpt_read_tokenizer, and the
 * attribute reads a restore makes (ckpt_attr.h: the state integers, config/mesh/layout, each dataset's
 * dims, variable, kind and checksum). mtf_ckpt_restore itself needs MPI and a model and is not run here.
 *
 * fuzz_ckpt (structure-aware): the input is a recipe (fuzz_h5gen.h) for a well-formed HDF5 checkpoint:
 * the root's state attributes, /variables with 0-4 datasets (odd names, ranks, dims names, types, storage,
 * values, checksums right or wrong) and /tokenizer with its decode table, each written as mtf writes it
 * or hostile; sometimes a `tokens` dataset as in a shard. fuzz_ckpt_raw (FUZZ_RAW): the input is the
 * file's bytes (findings there are mostly inside HDF5, tests/fuzz/CMakeLists.txt). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_attr.h"
#include "io/shard.h"

#ifdef FUZZ_RAW
#include "fuzz_tmp.h"
#else
#include "fuzz_h5gen.h"

static const char *pick(gen_in *in, const char *const *list, unsigned n) { return list[gen_below(in, n)]; }

/* One dataset of /variables with its attributes; the checksum is right unless the input says otherwise. */
static void make_variable(gen_in *in, hid_t group, unsigned index) {
  static const char *names[] = {"embed", "layer_000.attn.wq", "layer_000.attn.wq.adafactor_vr", "final_norm.scale",
                                "a/b", "x..y", "%s%n", "embed ",
                                ("a_variable_name_much_longer_than_any_dims_name_and_longer_than_a_line_of_text_"
                                 "in_the_inspector_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")};
  static const char *dim_names[] = {"d_model", "vocab", "heads", "d_kv", "d_ff", "",
                                    "a_dim_name_longer_than_31_chars_x", "bad name", "d_model"};
  static const char *kinds[] = {"param", "slot", "", "accumulator"};
  const char *name = names[(index + gen_below(in, 9)) % 9];
  if (H5Lexists(group, name, H5P_DEFAULT) != 0) return; /* taken, or a path HDF5 cannot look up */
  int rank = (int)(gen_below(in, 4) + 2) % 4; /* all-zero choices: 2-D, 2 x 2 */
  hsize_t dims[4];
  uint64_t dims64[4], start[4] = {0};
  const char *dnames[4];
  size_t n = 1;
  for (int d = 0; d < rank; d++) {
    dims[d] = dims64[d] = (2 + gen_below(in, 6)) % 6 + 1;
    n *= dims[d];
    dnames[d] = pick(in, dim_names, 9);
  }
  float *values = malloc(sizeof(float) * n);
  if (!values) return;
  for (size_t i = 0; i < n; i++) values[i] = (float)(int8_t)gen_u8(in) / 16.0f;
  if (gen_below(in, 16) == 15) values[0] = (float)NAN;
  hid_t dset = gen_dataset(in, group, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, rank, dims, values);
  if (dset >= 0) {
    char variable[256];
    snprintf(variable, sizeof variable, "%s", name);
    for (char *c = variable; *c; c++)
      if (*c == '.') *c = '/';
    gen_attr_strings(in, dset, "dims", rank, dnames);
    gen_attr_string(in, dset, "variable", variable);
    gen_attr_string(in, dset, "kind", pick(in, kinds, 4));
    uint64_t sum = mtf_ckpt_checksum_slab(values, rank, dims64, start, dims64);
    gen_attr_u64(in, dset, "checksum", gen_below(in, 8) != 7 ? sum : sum ^ ((uint64_t)1 << gen_below(in, 64)));
    gen_extra_attrs(in, dset);
    H5Oclose(dset);
  }
  free(values);
}

/* A group `name` at file: canonical, or (hostile) whatever gen_dataset makes instead (absent, a dataset, a
 * link, or a group after all). Returns an open group or -1. */
static hid_t make_group(gen_in *in, hid_t file, const char *name) {
  if (!gen_hostile(in)) return H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  float one = 1;
  hsize_t dims[1] = {1};
  hid_t object = gen_dataset(in, file, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, dims, &one);
  if (object >= 0 && H5Iget_type(object) != H5I_GROUP) {
    H5Oclose(object);
    return -1;
  }
  return object;
}

static const char *make_checkpoint(const uint8_t *data, size_t size) {
  gen_in in = {data, size};
  hid_t file = gen_file_create(&in, "ckpt.h5");
  if (file < 0) return NULL;
  static const char *configs[] = {"model:\n  vocab: 384\n  d_model: 8\n", "", "model: [1, 2\n", "\"\\\n\t: :"};
  static const char *meshes[] = {"b:1", "", "b:2;m:4", "b:-1"};
  int64_t step = gen_u8(&in);
  gen_attr_int(&in, file, "format_version", MTF_CKPT_FORMAT_VERSION);
  gen_attr_int(&in, file, "step", step);
  gen_attr_int(&in, file, "rng_seed", (int64_t)gen_u64(&in));
  gen_attr_int(&in, file, "rng_offset", step);
  gen_attr_int(&in, file, "data_seed", (int64_t)gen_u64(&in));
  gen_attr_int(&in, file, "data_epoch", gen_u8(&in));
  gen_attr_int(&in, file, "data_position", gen_u8(&in));
  gen_attr_int(&in, file, "data_windows", 1 + gen_u8(&in));
  gen_attr_int(&in, file, "mesh_ranks", 1 + gen_below(&in, 8));
  gen_attr_int(&in, file, "complete", 1);
  gen_attr_string(&in, file, "config", pick(&in, configs, 4));
  gen_attr_string(&in, file, "mesh", pick(&in, meshes, 4));
  gen_attr_string(&in, file, "layout", gen_below(&in, 2) ? "" : "batch:b;vocab:m");
  gen_extra_attrs(&in, file);
  if (gen_below(&in, 8) == 7) { /* a shard's dataset as well (or instead, when /variables is missing) */
    int32_t ids[4] = {1, 2, 3, 4};
    hsize_t four = 4;
    hid_t tokens = gen_dataset(&in, file, "tokens", H5T_STD_U16LE, H5T_NATIVE_INT32, 1, &four, ids);
    if (tokens >= 0) H5Oclose(tokens);
  }
  hid_t variables = make_group(&in, file, "variables");
  if (variables >= 0) {
    for (unsigned i = 0, n = (gen_below(&in, 5) + 2) % 5; i < n; i++) make_variable(&in, variables, i);
    H5Gclose(variables);
  }
  if (gen_below(&in, 2) == 0) {
    hid_t tok = make_group(&in, file, "tokenizer");
    if (tok >= 0) {
      int64_t vocab = 1 + gen_u8(&in) + ((int64_t)gen_below(&in, 4) << 8);
      gen_attr_string(&in, tok, "tokenizer", gen_below(&in, 2) ? "byte" : "bpe-1024");
      gen_attr_int(&in, tok, "eot_id", gen_below(&in, 4) ? (int64_t)gen_u8(&in) % vocab : -1);
      gen_attr_int(&in, tok, "vocab_size", vocab);
      if (gen_below(&in, 2) == 0) gen_decode_table(&in, tok, vocab);
      H5Gclose(tok);
    }
  }
  return H5Fclose(file) >= 0 ? gen_path("ckpt.h5") : NULL;
}
#endif

/* The attribute reads of mtf_ckpt_restore (read_state, read_variable), made the same way. */
static herr_t restore_variable_attributes(hid_t group, const char *link, const H5L_info_t *info, void *data) {
  (void)info, (void)data;
  hid_t dset = H5Dopen2(group, link, H5P_DEFAULT);
  if (dset < 0) return 0;
  char dims[MTF_MAX_RANK][MTF_NAME_MAX], variable[MTF_CKPT_PATH_MAX], kind[32];
  int n_dims = -1;
  uint64_t checksum;
  mtf_ckpt_attr_read_strings(dset, "dims", dims, MTF_MAX_RANK, &n_dims);
  mtf_ckpt_attr_read_u64(dset, "checksum", &checksum);
  mtf_ckpt_attr_read_string(dset, "variable", variable, sizeof variable);
  mtf_ckpt_attr_read_string(dset, "kind", kind, sizeof kind);
  H5Dclose(dset);
  return 0;
}

static void restore_attributes(const char *path) {
  mtf_error err;
  mtf_hdf5_lock();
  hid_t file = mtf_ckpt_open_serial(path, &err);
  if (file >= 0) {
    const char *keys[] = {"format_version", "complete", "step", "rng_seed", "rng_offset", "data_seed",
                          "data_epoch", "data_position", "data_windows", "mesh_ranks"};
    int64_t value;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) mtf_ckpt_attr_read_i64(file, keys[k], &value);
    int64_t config_size = mtf_ckpt_attr_string_size(file, "config");
    char *config = config_size > 0 ? calloc((size_t)config_size, 1) : NULL;
    if (config) mtf_ckpt_attr_read_string(file, "config", config, (size_t)config_size);
    free(config);
    char mesh[MTF_SHAPE_STR_MAX];
    mtf_ckpt_attr_read_string(file, "mesh", mesh, sizeof mesh);
    hid_t group = H5Gopen2(file, "variables", H5P_DEFAULT);
    if (group >= 0) {
      H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, NULL, restore_variable_attributes, NULL);
      H5Gclose(group);
    }
    H5Fclose(file);
  }
  mtf_hdf5_unlock();
}

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!sink) sink = fopen("/dev/null", "w");
  if (!sink) return 0;
#ifdef FUZZ_RAW
  const char *path = fuzz_tmp_write(data, size, ".h5");
#else
  const char *path = make_checkpoint(data, size);
  gen_save(path);
#endif
  if (!path) return 0;
  mtf_error err;
  mtf_ckpt_inspect(path, 0, sink, &err);
  mtf_ckpt_inspect(path, 1, sink, &err);
  mtf_ckpt_verify(path, sink, &err);
  mtf_ckpt_tokenizer tok;
  if (mtf_ckpt_read_tokenizer(path, &tok, &err) == MTF_OK) mtf_ckpt_tokenizer_free(&tok);
  restore_attributes(path);
  return 0;
}
