/* The /tokenizer group of a checkpoint (checkpoint.h): taken from the training shards, read back by
 * `mtf generate` and `mtf ckpt inspect`. */
#define _GNU_SOURCE
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_attr.h"
#include "io/dataset.h"
#include "io/shard.h"

#define TOKENIZER_GROUP "tokenizer"

void mtf_ckpt_tokenizer_free(mtf_ckpt_tokenizer *tok) {
  mtf_decode_table_free(&tok->table);
  tok->present = 0;
}

/* The data's tokenizer, read once per process (every checkpoint of a run has the same). */
static struct {
  int loaded;
  char spec[MTF_CONFIG_PATH];
  char warning[MTF_ERROR_MSG_MAX + 128];
  mtf_ckpt_tokenizer tok;
} cache;

static void load_from_data(const char *spec) {
  mtf_ckpt_tokenizer *tok = &cache.tok;
  memset(tok, 0, sizeof *tok);
  tok->vocab_size = tok->table.eot_id = -1;
  cache.warning[0] = '\0';
  if (!spec[0]) return;
  mtf_dataset dataset;
  mtf_error err;
  if (mtf_dataset_open(spec, 1, &dataset, &err) != MTF_OK) {
    snprintf(cache.warning, sizeof cache.warning, "the checkpoint names no tokenizer: %s", err.msg);
    return;
  }
  const mtf_shard_meta *first = &dataset.meta[0];
  for (int i = 1; i < dataset.count && !cache.warning[0]; i++) {
    const mtf_shard_meta *m = &dataset.meta[i];
    if (strcmp(m->tokenizer, first->tokenizer) != 0 || m->eot_id != first->eot_id || m->vocab_size != first->vocab_size ||
        m->decode_ids != first->decode_ids || m->decode_bytes != first->decode_bytes)
      snprintf(cache.warning, sizeof cache.warning,
               "the checkpoint names no tokenizer: shards '%s' and '%s' disagree on the tokenizer (name, eot_id, "
               "vocab_size or decode table); make every shard of a dataset with one tokenizer",
               dataset.paths[0], dataset.paths[i]);
  }
  if (!cache.warning[0] && first->tokenizer[0]) {
    if (mtf_shard_read_decode_table(dataset.paths[0], &tok->table, &err) != MTF_OK) {
      snprintf(cache.warning, sizeof cache.warning, "the checkpoint names no tokenizer: %s", err.msg);
    } else {
      tok->present = 1;
      tok->vocab_size = first->vocab_size;
      tok->table.eot_id = first->eot_id;
      snprintf(tok->table.tokenizer, sizeof tok->table.tokenizer, "%s", first->tokenizer);
    }
  }
  mtf_dataset_close(&dataset);
}

const mtf_ckpt_tokenizer *mtf_ckpt_tokenizer_of_data(const char *spec, char *warning, size_t warning_size) {
  if (!cache.loaded || strcmp(cache.spec, spec) != 0) {
    mtf_ckpt_tokenizer_free(&cache.tok);
    snprintf(cache.spec, sizeof cache.spec, "%s", spec);
    load_from_data(spec);
    cache.loaded = 1;
  }
  snprintf(warning, warning_size, "%s", cache.warning);
  return &cache.tok;
}

/* Strict readers for the group's attributes: a scalar (or 1-element) integer of at most 8 bytes, and a
 * fixed-length string of at most MTF_SHARD_TOKENIZER_MAX - 1 characters. */
static int read_int(hid_t loc, const char *name, int64_t *value) {
  if (H5Aexists(loc, name) <= 0) return -1;
  hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
  int ok = type >= 0 && space >= 0 && H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) <= 8 &&
           H5Sget_simple_extent_npoints(space) == 1 && H5Aread(attr, H5T_NATIVE_INT64, value) >= 0;
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  H5Aclose(attr);
  return ok ? 0 : -1;
}

static int read_tokenizer_locked(const char *path, mtf_ckpt_tokenizer *out, mtf_error *err) {
  hid_t file = mtf_ckpt_open_serial(path, err);
  if (file < 0) return err->code;
  int rc = MTF_OK;
  htri_t exists = H5Lexists(file, TOKENIZER_GROUP, H5P_DEFAULT);
  if (exists > 0) {
    char where[MTF_CKPT_PATH_MAX + 64];
    snprintf(where, sizeof where, "checkpoint '%s', group /%s", path, TOKENIZER_GROUP);
    hid_t group = H5Gopen2(file, TOKENIZER_GROUP, H5P_DEFAULT);
    int64_t name_size = group >= 0 ? mtf_ckpt_attr_string_size(group, "tokenizer") : -1;
    if (group < 0 || name_size < 1 || name_size > MTF_SHARD_TOKENIZER_MAX ||
        mtf_ckpt_attr_read_string(group, "tokenizer", out->table.tokenizer, sizeof out->table.tokenizer) != 0 ||
        read_int(group, "eot_id", &out->table.eot_id) != 0 || read_int(group, "vocab_size", &out->vocab_size) != 0)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s must be a group with a string attribute 'tokenizer' (at most %d "
                         "characters) and integer attributes 'eot_id' and 'vocab_size' (damaged checkpoint?)", where,
                         MTF_SHARD_TOKENIZER_MAX - 1);
    if (rc == MTF_OK && (out->table.eot_id < -1 || out->vocab_size < -1 ||
                         (out->vocab_size >= 0 && out->table.eot_id >= out->vocab_size)))
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: eot_id %lld is not an id below vocab_size %lld", where,
                         (long long)out->table.eot_id, (long long)out->vocab_size);
    if (rc == MTF_OK) {
      int present = 0;
      char name[MTF_SHARD_TOKENIZER_MAX];
      int64_t eot = out->table.eot_id;
      snprintf(name, sizeof name, "%s", out->table.tokenizer);
      rc = mtf_decode_table_read(group, where, out->vocab_size, &present, &out->table, err);
      out->table.eot_id = eot; /* the read resets them */
      snprintf(out->table.tokenizer, sizeof out->table.tokenizer, "%s", name);
    }
    if (rc == MTF_OK) out->present = 1;
    if (group >= 0) H5Gclose(group);
  } else if (exists < 0) {
    rc = mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s': cannot look for /%s (damaged?)", path, TOKENIZER_GROUP);
  }
  H5Fclose(file);
  return rc;
}

int mtf_ckpt_read_tokenizer(const char *path, mtf_ckpt_tokenizer *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  out->vocab_size = out->table.eot_id = -1;
  mtf_hdf5_lock();
  int rc = read_tokenizer_locked(path, out, err);
  mtf_hdf5_unlock();
  if (rc != MTF_OK) mtf_ckpt_tokenizer_free(out);
  return rc;
}

const char *mtf_ckpt_tokenizer_write(hid_t file, const mtf_ckpt_tokenizer *tok, int writer, hid_t dxpl) {
  if (!tok->present) return NULL;
  hid_t group = H5Gcreate2(file, TOKENIZER_GROUP, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int bad = group < 0 || mtf_ckpt_attr_write_string(group, "tokenizer", tok->table.tokenizer) ||
            mtf_ckpt_attr_write_i64(group, "eot_id", tok->table.eot_id) ||
            mtf_ckpt_attr_write_i64(group, "vocab_size", tok->vocab_size) ||
            (tok->table.count > 0 && mtf_decode_table_write(group, &tok->table, writer, dxpl));
  if (group >= 0) H5Gclose(group);
  return bad ? "writing the /tokenizer group" : NULL;
}
