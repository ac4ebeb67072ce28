/* libFuzzer target: the checkpoint readers that run in one process without MPI. The input is the bytes
 * of a checkpoint file: mtf_ckpt_inspect (text and JSON), mtf_ckpt_verify (every dataset against its
 * checksum) and mtf_ckpt_read_tokenizer. */
#include <stdint.h>
#include <stdio.h>

#include "ckpt/checkpoint.h"
#include "fuzz_tmp.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!sink) sink = fopen("/dev/null", "w");
  if (!sink) return 0;
  const char *path = fuzz_tmp_write(data, size, ".h5");
  if (!path) return 0;
  mtf_error err;
  mtf_ckpt_inspect(path, 0, sink, &err);
  mtf_ckpt_inspect(path, 1, sink, &err);
  mtf_ckpt_verify(path, sink, &err);
  mtf_ckpt_tokenizer tok;
  if (mtf_ckpt_read_tokenizer(path, &tok, &err) == MTF_OK) mtf_ckpt_tokenizer_free(&tok);
  return 0;
}
