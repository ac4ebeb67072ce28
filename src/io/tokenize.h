/* The built-in byte-level tokenizer: a byte b is token b (0..255), the end-of-text id 256 follows every
 * document, and the vocabulary is padded to a multiple of 128 (384) so the vocab dimension splits evenly
 * over common mesh axis sizes. It needs no model files and round-trips any input exactly. */
#ifndef MTF_IO_TOKENIZE_H
#define MTF_IO_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define MTF_BYTES_EOT_ID 256
#define MTF_VOCAB_PAD 128
#define MTF_BYTES_VOCAB_SIZE 384 /* 257 ids rounded up to a multiple of MTF_VOCAB_PAD */
#define MTF_BYTES_TOKENIZER "bytes"

/* Checks a --tokenizer name (only "bytes" is built in) with a message that says what is available. */
int mtf_tokenizer_check(const char *name, mtf_error *err);

/* out[i] = data[i]; returns the number of tokens written (= size). */
size_t mtf_tokenize_bytes(const unsigned char *data, size_t size, int32_t *out);

#endif
