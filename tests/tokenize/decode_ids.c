/* mtf's decode table from outside: `decode_ids shard|ckpt PATH decode` reads ids (whitespace-separated)
 * from stdin and writes their bytes; `... encode` reads text and writes the ids of mtf's greedy encoding.
 * The tokenize tests compare both with the tokenizer's own decode (tests/tokenize/check_tokenize.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "io/decode_table.h"

int main(int argc, char **argv) {
  if (argc != 4 || (strcmp(argv[1], "shard") && strcmp(argv[1], "ckpt")) ||
      (strcmp(argv[3], "decode") && strcmp(argv[3], "encode"))) {
    fprintf(stderr, "usage: decode_ids shard|ckpt PATH decode|encode < input\n");
    return 2;
  }
  mtf_error err;
  mtf_ckpt_tokenizer tok = {0};
  int rc = strcmp(argv[1], "shard") == 0 ? mtf_shard_read_decode_table(argv[2], &tok.table, &err)
                                         : mtf_ckpt_read_tokenizer(argv[2], &tok, &err);
  if (rc != MTF_OK) {
    fprintf(stderr, "decode_ids: %s\n", err.msg);
    return 1;
  }
  if (tok.table.count == 0) {
    fprintf(stderr, "decode_ids: %s has no decode table\n", argv[2]);
    return 1;
  }
  if (strcmp(argv[3], "decode") == 0) {
    long long id;
    while (scanf("%lld", &id) == 1) {
      size_t size;
      const uint8_t *bytes = mtf_decode_token(&tok.table, id, &size);
      if (size) fwrite(bytes, 1, size, stdout);
    }
  } else {
    size_t capacity = 1 << 16, length = 0, got;
    char *text = malloc(capacity + 1);
    while (text && (got = fread(text + length, 1, capacity - length, stdin)) > 0) {
      length += got;
      if (length == capacity) text = realloc(text, (capacity *= 2) + 1);
    }
    if (!text) return 1;
    text[length] = '\0';
    int32_t *ids;
    int64_t count;
    if (mtf_decode_table_encode(&tok.table, text, &ids, &count, &err) != MTF_OK) {
      fprintf(stderr, "decode_ids: %s\n", err.msg);
      return 1;
    }
    for (int64_t i = 0; i < count; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    free(ids);
    free(text);
  }
  mtf_ckpt_tokenizer_free(&tok);
  return 0;
}
