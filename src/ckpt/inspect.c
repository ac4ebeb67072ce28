/* `mtf ckpt inspect`: a checkpoint's state, config and datasets, read in one process with HDF5's default
 * driver (no MPI). */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_attr.h"
#include "io/shard.h"

static void json_string(FILE *out, const char *text) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", out);
    else if (*p < 0x20 || *p >= 0x7f) /* control bytes, and bytes that are not ASCII (so not always UTF-8) */
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

typedef struct inspect_ctx {
  FILE *out;
  int json, count, failed;
  int64_t bytes;
} inspect_ctx;

static herr_t print_dataset(hid_t group, const char *link, const H5L_info_t *info, void *data) {
  (void)info;
  inspect_ctx *ctx = data;
  hid_t dset = H5Dopen2(group, link, H5P_DEFAULT);
  hid_t space = dset >= 0 ? H5Dget_space(dset) : -1, type = dset >= 0 ? H5Dget_type(dset) : -1;
  int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1, n_dims = 0;
  hsize_t sizes[MTF_MAX_RANK] = {0};
  char dims[MTF_MAX_RANK][MTF_NAME_MAX], variable[MTF_CKPT_PATH_MAX] = "", kind[32] = "";
  if (rank < 0 || rank > MTF_MAX_RANK || type < 0 ||
      mtf_ckpt_attr_read_strings(dset, "dims", dims, MTF_MAX_RANK, &n_dims) != 0 || n_dims != rank) {
    ctx->failed = 1;
    fprintf(stderr, "mtf ckpt inspect: dataset variables/%s is unreadable or lacks its dims attribute\n", link);
  } else {
    H5Sget_simple_extent_dims(space, sizes, NULL);
    mtf_ckpt_attr_read_string(dset, "variable", variable, sizeof variable);
    mtf_ckpt_attr_read_string(dset, "kind", kind, sizeof kind);
    const char *dtype = H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4 ? "float32" : "other";
    /* Sizes come from the file: a product that overflows is damage, not a number to print. */
    int64_t elements = 1, bytes = 0;
    int overflow = 0;
    for (int d = 0; d < rank && !overflow; d++)
      overflow = sizes[d] > (hsize_t)INT64_MAX || !mtf_checked_product(elements, (int64_t)sizes[d], &elements);
    overflow = overflow || !mtf_checked_product(elements, (int64_t)H5Tget_size(type), &bytes) ||
               bytes > INT64_MAX - ctx->bytes;
    if (overflow) {
      ctx->failed = 1;
      fprintf(stderr, "mtf ckpt inspect: dataset variables/%s has a size that overflows 64 bits (damaged)\n", link);
      elements = bytes = 0;
    }
    ctx->bytes += bytes;
    if (ctx->json) {
      fprintf(ctx->out, "%s\n    {\"dataset\": ", ctx->count ? "," : "");
      json_string(ctx->out, link);
      fprintf(ctx->out, ", \"variable\": ");
      json_string(ctx->out, variable);
      fprintf(ctx->out, ", \"kind\": ");
      json_string(ctx->out, kind);
      fprintf(ctx->out, ", \"dims\": [");
      for (int d = 0; d < rank; d++) {
        fputs(d ? ", " : "", ctx->out);
        json_string(ctx->out, dims[d]);
      }
      fprintf(ctx->out, "], \"shape\": [");
      for (int d = 0; d < rank; d++) fprintf(ctx->out, "%s%llu", d ? ", " : "", (unsigned long long)sizes[d]);
      fprintf(ctx->out, "], \"dtype\": \"%s\"}", dtype);
    } else {
      char shape[MTF_SHAPE_STR_MAX];
      size_t used = (size_t)snprintf(shape, sizeof shape, "[");
      for (int d = 0; d < rank && used < sizeof shape; d++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%s:%llu", d ? ", " : "", dims[d],
                                 (unsigned long long)sizes[d]);
      if (used < sizeof shape) snprintf(shape + used, sizeof shape - used, "]");
      fprintf(ctx->out, "  %-42s %-36s %-8s %s\n", variable, shape, dtype, kind);
    }
    ctx->count++;
  }
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  if (dset >= 0) H5Dclose(dset);
  return 0;
}

static void print_config_indented(FILE *out, const char *yaml) {
  for (const char *line = yaml; *line;) {
    const char *end = strchr(line, '\n');
    int length = end ? (int)(end - line) : (int)strlen(line);
    fprintf(out, "    %.*s\n", length, line);
    line += length + (end ? 1 : 0);
  }
}

static void print_tokenizer(FILE *out, int json, const mtf_ckpt_tokenizer *tok) {
  const mtf_decode_table *t = &tok->table;
  int64_t table_bytes = t->count > 0 ? t->offsets[t->count] : 0;
  if (json) {
    if (!tok->present) {
      fprintf(out, ", \"tokenizer\": null");
      return;
    }
    fprintf(out, ", \"tokenizer\": {\"name\": ");
    json_string(out, t->tokenizer);
    fprintf(out, ", \"vocab_size\": %lld, \"eot_id\": %lld, \"decode_table_ids\": %lld, \"decode_table_bytes\": %lld}",
            (long long)tok->vocab_size, (long long)t->eot_id, (long long)t->count, (long long)table_bytes);
  } else if (!tok->present) {
    fprintf(out, "tokenizer: none recorded (mtf generate assumes the byte tokenizer)\n");
  } else if (t->count > 0) {
    fprintf(out, "tokenizer: '%s', vocab_size %lld, eot_id %lld; decode table of %lld ids, %lld bytes\n", t->tokenizer,
            (long long)tok->vocab_size, (long long)t->eot_id, (long long)t->count, (long long)table_bytes);
  } else {
    fprintf(out, "tokenizer: '%s', vocab_size %lld, eot_id %lld; no decode table\n", t->tokenizer,
            (long long)tok->vocab_size, (long long)t->eot_id);
  }
}

static int inspect_locked(const char *path, int json, const mtf_ckpt_tokenizer *tok, FILE *out, mtf_error *err) {
  hid_t file = mtf_ckpt_open_serial(path, err);
  if (file < 0) return err->code;
  const char *keys[] = {"format_version", "step", "rng_seed", "rng_offset", "data_seed", "data_epoch",
                        "data_position", "data_windows", "mesh_ranks", "complete"};
  enum { N_KEYS = sizeof keys / sizeof keys[0] };
  int64_t values[N_KEYS];
  char mesh[MTF_SHAPE_STR_MAX] = "", layout[MTF_CONFIG_PATH] = "";
  int rc = MTF_OK;
  for (int k = 0; k < N_KEYS && rc == MTF_OK; k++)
    if (mtf_ckpt_attr_read_i64(file, keys[k], &values[k]) != 0)
      rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' lacks its '%s' attribute (not an mtf checkpoint, or "
                         "incomplete)", path, keys[k]);
  int64_t config_size = mtf_ckpt_attr_string_size(file, "config");
  char *config = config_size > 0 ? calloc((size_t)config_size, 1) : NULL;
  const char *unread = NULL;
  if (rc == MTF_OK && (config_size > 0 && !config)) rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  if (rc == MTF_OK && (!config || mtf_ckpt_attr_read_string(file, "config", config, (size_t)config_size) != 0))
    unread = "config";
  else if (rc == MTF_OK && mtf_ckpt_attr_read_string(file, "mesh", mesh, sizeof mesh) != 0) unread = "mesh";
  else if (rc == MTF_OK && mtf_ckpt_attr_read_string(file, "layout", layout, sizeof layout) != 0) unread = "layout";
  if (unread) {
    char why[160];
    mtf_ckpt_attr_string_problem(file, unread, why, sizeof why);
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': its '%s' attribute cannot be read as one string: %s (not "
                       "an mtf checkpoint, or damaged)", path, unread, why);
  }
  hid_t group = rc == MTF_OK ? H5Gopen2(file, "variables", H5P_DEFAULT) : -1;
  if (rc == MTF_OK && group < 0) rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' has no /variables group", path);
  inspect_ctx ctx = {.out = out, .json = json};
  if (rc == MTF_OK) {
    if (json) {
      fprintf(out, "{\"path\": ");
      json_string(out, path);
      fprintf(out, ", \"format_version\": %lld, \"step\": %lld, \"rng\": {\"seed\": %lld, \"offset\": %lld}, "
                   "\"data_cursor\": {\"seed\": %lld, \"epoch\": %lld, \"position\": %lld, \"windows\": %lld}, "
                   "\"mesh\": ", (long long)values[0], (long long)values[1], (long long)values[2],
              (long long)values[3], (long long)values[4], (long long)values[5], (long long)values[6],
              (long long)values[7]);
      json_string(out, mesh);
      fprintf(out, ", \"mesh_ranks\": %lld, \"layout\": ", (long long)values[8]);
      json_string(out, layout);
      fprintf(out, ", \"config\": ");
      json_string(out, config);
      print_tokenizer(out, 1, tok);
      fprintf(out, ",\n  \"datasets\": [");
    } else {
      fprintf(out, "checkpoint %s: format version %lld, step %lld\n", path, (long long)values[0], (long long)values[1]);
      fprintf(out, "written on mesh %s (%lld ranks), layout '%s'\n", mesh, (long long)values[8], layout);
      fprintf(out, "rng: seed %lld, offset %lld; data cursor: seed %lld, epoch %lld, position %lld of %lld windows\n",
              (long long)values[2], (long long)values[3], (long long)values[4], (long long)values[5],
              (long long)values[6], (long long)values[7]);
      print_tokenizer(out, 0, tok);
      fprintf(out, "datasets (under /variables, '/' in names written as '.'):\n");
      fprintf(out, "  %-42s %-36s %-8s %s\n", "variable", "dims and shape", "dtype", "kind");
    }
    if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, NULL, print_dataset, &ctx) < 0 || ctx.failed)
      rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': cannot list every dataset of /variables (damaged)", path);
    if (json) {
      fprintf(out, "\n  ], \"datasets_count\": %d, \"bytes\": %lld}\n", ctx.count, (long long)ctx.bytes);
    } else {
      fprintf(out, "%d datasets, %.2f MiB\nconfig:\n", ctx.count, ctx.bytes / 1048576.0);
      print_config_indented(out, config);
    }
  }
  free(config);
  if (group >= 0) H5Gclose(group);
  H5Fclose(file);
  return rc;
}

int mtf_ckpt_inspect(const char *path, int json, FILE *out, mtf_error *err) {
  mtf_ckpt_tokenizer tok;
  MTF_CHECK(mtf_ckpt_read_tokenizer(path, &tok, err));
  mtf_hdf5_lock();
  int rc = inspect_locked(path, json, &tok, out, err);
  mtf_hdf5_unlock();
  mtf_ckpt_tokenizer_free(&tok);
  return rc;
}

static int read_config_locked(const char *path, char **text, mtf_error *err) {
  hid_t file = mtf_ckpt_open_serial(path, err);
  if (file < 0) return err->code;
  int64_t size = mtf_ckpt_attr_string_size(file, "config");
  char *config = size > 0 ? calloc((size_t)size, 1) : NULL;
  int rc = MTF_OK;
  if (size > 0 && !config) rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory for the config of '%s'", path);
  else if (!config || mtf_ckpt_attr_read_string(file, "config", config, (size_t)size) != 0) {
    char why[160];
    mtf_ckpt_attr_string_problem(file, "config", why, sizeof why);
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': its 'config' attribute cannot be read as one string: %s "
                       "(not an mtf checkpoint, or damaged): give the CONFIG the run was trained with", path, why);
  }
  H5Fclose(file);
  if (rc != MTF_OK) {
    free(config);
    config = NULL;
  }
  *text = config;
  return rc;
}

int mtf_ckpt_read_config(const char *path, char **text, mtf_error *err) {
  mtf_hdf5_lock();
  int rc = read_config_locked(path, text, err);
  mtf_hdf5_unlock();
  return rc;
}
