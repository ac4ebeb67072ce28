/* The decode table (decode_table.h): checked reads from shards and checkpoints, writes, and greedy
 * encoding of a prompt. */
#define _GNU_SOURCE
#include "io/decode_table.h"

#include <hdf5.h>

#include "io/h5_checked.h"
#include <stdlib.h>
#include <string.h>

/* One of the two datasets: exists, is a 1-D dataset of the wanted integer type. *length gets its size. */
static int check_dataset(hid_t loc, const char *name, const char *where, size_t want_size, int want_signed,
                         const char *want, int64_t *length, mtf_error *err) {
  hid_t dataset = H5Dopen2(loc, name, H5P_DEFAULT);
  if (dataset < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is not a dataset HDF5 can open: the decode table is two 1-D "
                         "datasets, decode_offsets (int64) and decode_bytes (uint8); see docs/DATA.md", where, name);
  hid_t type = H5Dget_type(dataset), space = H5Dget_space(dataset);
  int rc = mtf_h5_check_dataset(loc, name, dataset, where, err);
  if (rc != MTF_OK) {
  } else if (type < 0 || space < 0) {
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read the type and shape of '%s' (damaged file?)", where, name);
  } else {
    int is_int = H5Tget_class(type) == H5T_INTEGER;
    size_t size = H5Tget_size(type);
    int is_signed = is_int && H5Tget_sign(type) == H5T_SGN_2;
    int simple = H5Sget_simple_extent_type(space) == H5S_SIMPLE;
    int rank = H5Sget_simple_extent_ndims(space);
    if (!is_int || size != want_size || is_signed != want_signed)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: dataset '%s' must hold %s, but holds %s of %zu bytes: re-create the "
                         "decode table (tools/prepare_tokenized.py writes it)", where, name, want,
                         !is_int ? "a non-integer type" : is_signed ? "signed integers" : "unsigned integers", size);
    else if (!simple || rank != 1)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: dataset '%s' has %d dimensions; it must be 1-D", where, name,
                         simple ? rank : 0);
    else {
      hsize_t dims[1] = {0};
      if (H5Sget_simple_extent_dims(space, dims, NULL) != 1)
        rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot read the size of '%s'", where, name);
      else
        *length = (int64_t)dims[0];
    }
  }
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  H5Dclose(dataset);
  return rc;
}

int mtf_decode_table_probe(int64_t loc_id, const char *where, int64_t vocab_size, int *present, int64_t *nbytes,
                           mtf_error *err) {
  hid_t loc = (hid_t)loc_id;
  *present = 0;
  *nbytes = 0;
  htri_t has_offsets = H5Lexists(loc, MTF_DECODE_OFFSETS, H5P_DEFAULT);
  htri_t has_bytes = H5Lexists(loc, MTF_DECODE_BYTES, H5P_DEFAULT);
  if (has_offsets < 0 || has_bytes < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: cannot look for the decode table (damaged file?)", where);
  if (!has_offsets && !has_bytes) return MTF_OK;
  if (!has_offsets || !has_bytes)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s has '%s' but no '%s': a decode table is both datasets; re-create it",
                         where, has_offsets ? MTF_DECODE_OFFSETS : MTF_DECODE_BYTES,
                         has_offsets ? MTF_DECODE_BYTES : MTF_DECODE_OFFSETS);
  if (vocab_size < 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s has a decode table but no vocab_size attribute: the table covers ids "
                         "0..vocab_size-1, so vocab_size is required with it", where);
  if (vocab_size > MTF_DECODE_MAX_IDS)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: vocab_size %lld is too large for a decode table (at most %lld ids)",
                         where, (long long)vocab_size, (long long)MTF_DECODE_MAX_IDS);
  int64_t offsets = 0, bytes = 0;
  MTF_CHECK(check_dataset(loc, MTF_DECODE_OFFSETS, where, 8, 1, "int64", &offsets, err));
  MTF_CHECK(check_dataset(loc, MTF_DECODE_BYTES, where, 1, 0, "uint8", &bytes, err));
  if (offsets != vocab_size + 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' holds %lld entries but vocab_size is %lld: it must hold "
                         "vocab_size + 1 = %lld (id i is bytes [offsets[i], offsets[i+1]))", where, MTF_DECODE_OFFSETS,
                         (long long)offsets, (long long)vocab_size, (long long)(vocab_size + 1));
  if (bytes > MTF_DECODE_MAX_BYTES)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' holds %lld bytes, more than a decode table may (%lld)", where,
                         MTF_DECODE_BYTES, (long long)bytes, (long long)MTF_DECODE_MAX_BYTES);
  *present = 1;
  *nbytes = bytes;
  return MTF_OK;
}

int mtf_decode_table_read(int64_t loc_id, const char *where, int64_t vocab_size, int *present, mtf_decode_table *table,
                          mtf_error *err) {
  hid_t loc = (hid_t)loc_id;
  memset(table, 0, sizeof *table);
  table->eot_id = -1;
  int64_t nbytes = 0;
  MTF_CHECK(mtf_decode_table_probe(loc_id, where, vocab_size, present, &nbytes, err));
  if (!*present) return MTF_OK;
  table->offsets = malloc(sizeof(int64_t) * (size_t)(vocab_size + 1));
  table->bytes = malloc(nbytes > 0 ? (size_t)nbytes : 1);
  if (!table->offsets || !table->bytes) {
    mtf_decode_table_free(table);
    return mtf_error_set(err, MTF_ERR_NOMEM, "%s: out of memory reading the decode table", where);
  }
  hid_t offsets = H5Dopen2(loc, MTF_DECODE_OFFSETS, H5P_DEFAULT), bytes = H5Dopen2(loc, MTF_DECODE_BYTES, H5P_DEFAULT);
  int ok = offsets >= 0 && bytes >= 0 &&
           H5Dread(offsets, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, table->offsets) >= 0 &&
           (nbytes == 0 || H5Dread(bytes, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, table->bytes) >= 0);
  if (offsets >= 0) H5Dclose(offsets);
  if (bytes >= 0) H5Dclose(bytes);
  int rc = ok ? MTF_OK
              : mtf_error_set(err, MTF_ERR_IO, "%s: reading the decode table failed (truncated or damaged file?)", where);
  if (rc == MTF_OK && table->offsets[0] != 0)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: %s[0] is %lld; it must be 0", where, MTF_DECODE_OFFSETS,
                       (long long)table->offsets[0]);
  for (int64_t i = 0; rc == MTF_OK && i < vocab_size; i++) {
    int64_t size = table->offsets[i + 1] - table->offsets[i];
    if (table->offsets[i + 1] < table->offsets[i] || table->offsets[i + 1] > nbytes || size > MTF_DECODE_MAX_TOKEN_BYTES)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: %s[%lld..%lld] = %lld, %lld: offsets must not decrease, stay within "
                         "the %lld bytes of %s, and give no token more than %lld bytes", where, MTF_DECODE_OFFSETS,
                         (long long)i, (long long)(i + 1), (long long)table->offsets[i], (long long)table->offsets[i + 1],
                         (long long)nbytes, MTF_DECODE_BYTES, (long long)MTF_DECODE_MAX_TOKEN_BYTES);
  }
  if (rc == MTF_OK && table->offsets[vocab_size] != nbytes)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: the last entry of %s is %lld, but %s holds %lld bytes: they must agree",
                       where, MTF_DECODE_OFFSETS, (long long)table->offsets[vocab_size], MTF_DECODE_BYTES,
                       (long long)nbytes);
  if (rc != MTF_OK) {
    mtf_decode_table_free(table);
    return rc;
  }
  table->count = vocab_size;
  return MTF_OK;
}

int mtf_shard_read_decode_table(const char *path, mtf_decode_table *table, mtf_error *err) {
  mtf_shard shard;
  memset(table, 0, sizeof *table);
  table->eot_id = -1;
  MTF_CHECK(mtf_shard_open(path, &shard, err)); /* checks the table's shape too */
  char where[4200];
  snprintf(where, sizeof where, "shard '%s'", path);
  int present = 0;
  mtf_hdf5_lock();
  int rc = mtf_decode_table_read(shard.file, where, shard.meta.vocab_size, &present, table, err);
  mtf_hdf5_unlock();
  if (rc == MTF_OK) {
    table->eot_id = shard.meta.eot_id;
    snprintf(table->tokenizer, sizeof table->tokenizer, "%s", shard.meta.tokenizer);
  }
  mtf_shard_close(&shard);
  return rc;
}

static int write_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, int64_t length, const void *data,
                         int writer, hid_t dxpl) {
  hsize_t dims[1] = {(hsize_t)length};
  hid_t space = H5Screate_simple(1, dims, NULL), mem = H5Screate_simple(1, dims, NULL);
  hid_t dataset = space >= 0 ? H5Dcreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
  int ok = space >= 0 && mem >= 0 && dataset >= 0;
  if (ok && !writer) ok = H5Sselect_none(space) >= 0 && H5Sselect_none(mem) >= 0;
  if (ok && length > 0) ok = H5Dwrite(dataset, mem_type, mem, space, dxpl, data) >= 0;
  if (dataset >= 0) H5Dclose(dataset);
  if (mem >= 0) H5Sclose(mem);
  if (space >= 0) H5Sclose(space);
  return ok ? 0 : -1;
}

int mtf_decode_table_write(int64_t loc, const mtf_decode_table *table, int writer, int64_t dxpl) {
  hid_t transfer = dxpl ? (hid_t)dxpl : H5P_DEFAULT;
  if (write_dataset((hid_t)loc, MTF_DECODE_OFFSETS, H5T_STD_I64LE, H5T_NATIVE_INT64, table->count + 1, table->offsets,
                    writer, transfer))
    return -1;
  return write_dataset((hid_t)loc, MTF_DECODE_BYTES, H5T_STD_U8LE, H5T_NATIVE_UINT8, table->offsets[table->count],
                       table->bytes, writer, transfer);
}

const uint8_t *mtf_decode_token(const mtf_decode_table *table, int64_t id, size_t *size) {
  *size = 0;
  if (id < 0 || id >= table->count) return NULL;
  *size = (size_t)(table->offsets[id + 1] - table->offsets[id]);
  return table->bytes + table->offsets[id];
}

static uint64_t hash_bytes(const uint8_t *data, size_t size) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

int mtf_decode_table_encode(const mtf_decode_table *table, const char *text, int32_t **ids_out, int64_t *count,
                            mtf_error *err) {
  const uint8_t *input = (const uint8_t *)text;
  size_t length = strlen(text), slots = 16, longest = 0;
  while (slots < 2 * (size_t)table->count) slots *= 2;
  int32_t *slot = calloc(slots, sizeof(int32_t)); /* id + 1, 0 = empty */
  int32_t *ids = malloc(sizeof(int32_t) * (length + 1));
  if (!slot || !ids) {
    free(slot);
    free(ids);
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory encoding the prompt");
  }
  for (int64_t id = 0; id < table->count; id++) { /* the lowest id of equal byte strings wins */
    size_t size;
    const uint8_t *bytes = mtf_decode_token(table, id, &size);
    if (size == 0) continue;
    if (size > longest) longest = size;
    for (size_t s = hash_bytes(bytes, size) & (slots - 1);; s = (s + 1) & (slots - 1)) {
      if (!slot[s]) {
        slot[s] = (int32_t)(id + 1);
        break;
      }
      size_t other_size;
      const uint8_t *other = mtf_decode_token(table, slot[s] - 1, &other_size);
      if (other_size == size && memcmp(other, bytes, size) == 0) break;
    }
  }
  int64_t n = 0;
  int rc = MTF_OK;
  for (size_t at = 0; at < length && rc == MTF_OK;) {
    size_t take = length - at < longest ? length - at : longest;
    int32_t found = -1;
    for (; take > 0 && found < 0; take--)
      for (size_t s = hash_bytes(input + at, take) & (slots - 1); slot[s]; s = (s + 1) & (slots - 1)) {
        size_t size;
        const uint8_t *bytes = mtf_decode_token(table, slot[s] - 1, &size);
        if (size == take && memcmp(bytes, input + at, take) == 0) {
          found = slot[s] - 1;
          break;
        }
      }
    if (found < 0) {
      rc = mtf_error_set(err, MTF_ERR_INVALID, "the prompt's byte 0x%02x at offset %zu is no token of the decode table "
                         "(tokenizer '%s'): give the prompt as ids with --prompt-ids", input[at], at, table->tokenizer);
      break;
    }
    size_t size;
    mtf_decode_token(table, found, &size);
    ids[n++] = found;
    at += size;
  }
  free(slot);
  if (rc != MTF_OK) {
    free(ids);
    return rc;
  }
  *ids_out = ids;
  *count = n;
  return MTF_OK;
}

int mtf_decode_table_copy(const mtf_decode_table *from, mtf_decode_table *to, mtf_error *err) {
  *to = *from;
  to->offsets = NULL;
  to->bytes = NULL;
  if (from->count == 0) return MTF_OK;
  size_t nbytes = (size_t)from->offsets[from->count];
  to->offsets = malloc(sizeof(int64_t) * (size_t)(from->count + 1));
  to->bytes = malloc(nbytes ? nbytes : 1);
  if (!to->offsets || !to->bytes) {
    mtf_decode_table_free(to);
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory copying the decode table");
  }
  memcpy(to->offsets, from->offsets, sizeof(int64_t) * (size_t)(from->count + 1));
  memcpy(to->bytes, from->bytes, nbytes);
  return MTF_OK;
}

void mtf_decode_table_free(mtf_decode_table *table) {
  free(table->offsets);
  free(table->bytes);
  table->offsets = NULL;
  table->bytes = NULL;
  table->count = 0;
}
