#include "io/tokenize.h"

#include <string.h>

_Static_assert(MTF_BYTES_VOCAB_SIZE % MTF_VOCAB_PAD == 0 && MTF_BYTES_VOCAB_SIZE > MTF_BYTES_EOT_ID,
               "the byte vocabulary must hold the end-of-text id and be padded");

int mtf_tokenizer_check(const char *name, mtf_error *err) {
  if (strcmp(name, MTF_BYTES_TOKENIZER) == 0) return MTF_OK;
  return mtf_error_set(err, MTF_ERR_INVALID,
                       "unknown tokenizer '%s': the built-in tokenizer is 'bytes'; for BPE or a Hugging Face "
                       "tokenizer.json use tools/prepare_tokenized.py (docs/DATA.md)",
                       name);
}

size_t mtf_tokenize_bytes(const unsigned char *data, size_t size, int32_t *out) {
  for (size_t i = 0; i < size; i++) out[i] = data[i];
  return size;
}
