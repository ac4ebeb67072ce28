/* libFuzzer target: the token shard reader. The input is the bytes of a file, opened as a shard
 * (mtf_shard_open: every check), read in full when it is small (ids checked against vocab_size), its
 * metadata read again (mtf_shard_stat) and its decode table read (mtf_shard_read_decode_table). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_tmp.h"
#include "io/decode_table.h"
#include "io/shard.h"

#define READ_MAX 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_tmp_write(data, size, ".h5");
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
