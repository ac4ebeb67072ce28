/* libFuzzer target: the token shard reader. mtf_shard_open (every check), a full read when the shard is
 * small (ids checked against vocab_size), a read at the end and one past it, mtf_shard_stat and
 * mtf_shard_read_decode_table.
 *
 * fuzz_shard (structure-aware): the input is a recipe (fuzz_h5gen.h) for a well-formed HDF5 shard whose
 * `tokens` dataset, attributes (vocab_size, eot_id, num_tokens, format_version, tokenizer) and decode
 * table are each written as mtf writes them or hostile; extra attributes may be added.
 * fuzz_shard_raw (built with FUZZ_RAW): the input is the file's bytes, so most of what it finds is inside
 * HDF5's own parser of damaged files (tests/fuzz/CMakeLists.txt). */
#include <stdint.h>
#include <stdlib.h>

#include "io/decode_table.h"
#include "io/shard.h"

#ifdef FUZZ_RAW
#include "fuzz_tmp.h"
#else
#include "fuzz_h5gen.h"

static const char *make_shard(const uint8_t *data, size_t size) {
  gen_in in = {data, size};
  hid_t file = gen_file_create(&in, "shard.h5");
  if (file < 0) return NULL;
  /* All-zero choices give a plain valid shard: 256 ids (the byte tokenizer), 64 tokens, a decode table. */
  int64_t vocab = 1 + (255 + (int64_t)(gen_u8(&in) | gen_u8(&in) << 8)) % 65536; /* 1 .. 65536 */
  int wide = gen_below(&in, 4) == 3;                              /* int32 ids, as for vocabularies past 65536 */
  if (wide) vocab += (int64_t)gen_u8(&in) << 16;
  int64_t n = (int64_t)((gen_u8(&in) + 64) % 256) * (1 + gen_below(&in, 16));
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  if (!ids) {
    H5Fclose(file);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i < 512 ? gen_u8(&in) | gen_u8(&in) << 8 : i) % vocab);
  hsize_t count = (hsize_t)n;
  hid_t tokens = gen_dataset(&in, file, "tokens", wide ? H5T_STD_I32LE : H5T_STD_U16LE, H5T_NATIVE_INT32, 1, &count, ids);
  free(ids);
  if (tokens >= 0) {
    gen_extra_attrs(&in, tokens);
    H5Oclose(tokens);
  }
  static const char *tokenizers[] = {"byte", "gpt2", "bpe-4096", ""};
  int64_t eot = gen_below(&in, 8) ? (int64_t)gen_u8(&in) % vocab : -1;
  gen_attr_int(&in, file, "vocab_size", vocab);
  gen_attr_int(&in, file, "eot_id", eot);
  gen_attr_int(&in, file, "num_tokens", n);
  gen_attr_int(&in, file, "format_version", MTF_SHARD_FORMAT_VERSION);
  gen_attr_string(&in, file, "tokenizer", tokenizers[gen_below(&in, 4)]);
  gen_extra_attrs(&in, file);
  if (gen_below(&in, 3) == 0) gen_decode_table(&in, file, vocab);
  return H5Fclose(file) >= 0 ? gen_path("shard.h5") : NULL;
}
#endif

#define READ_MAX 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#ifdef FUZZ_RAW
  const char *path = fuzz_tmp_write(data, size, ".h5");
#else
  const char *path = make_shard(data, size);
  gen_save(path);
#endif
  if (!path) return 0;
  mtf_error err;
  mtf_shard shard;
  if (mtf_shard_open(path, &shard, &err) == MTF_OK) {
    int64_t n = shard.meta.num_tokens;
    if (n > 0) {
      int64_t count = n < READ_MAX ? n : READ_MAX;
      int32_t *out = malloc((size_t)count * sizeof *out);
      if (out) {
        mtf_shard_read(&shard, 0, count, out, shard.meta.vocab_size, &err);
        mtf_shard_read(&shard, n - 1, 1, out, 0, &err);
        mtf_shard_read(&shard, n, 1, out, 0, &err); /* past the end: must be refused */
        free(out);
      }
    }
    mtf_shard_close(&shard);
  }
  mtf_shard_meta meta;
  mtf_shard_stat(path, &meta, &err);
  mtf_decode_table table;
  if (mtf_shard_read_decode_table(path, &table, &err) == MTF_OK) {
    size_t len;
    for (int64_t id = -1; id <= table.count && id < 1024; id++) mtf_decode_token(&table, id, &len);
    mtf_decode_table_free(&table);
  }
  return 0;
}
