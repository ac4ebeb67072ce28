#include "io/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/seq2seq.h"
#include "io/packing.h"
#include "io/shard_sink.h"
#include "io/tokenize.h"

#define MAX_SYNTH_LENGTH 64
#define EXAMPLE_MAX (3 * MAX_SYNTH_LENGTH + 8)

static const char *const task_names[] = {"copy", "reverse", "sort", "add"};

int mtf_synth_task_parse(const char *text, mtf_synth_task *out, mtf_error *err) {
  for (int i = 0; i < 4; i++)
    if (strcmp(text, task_names[i]) == 0) {
      *out = (mtf_synth_task)i;
      return MTF_OK;
    }
  return mtf_error_set(err, MTF_ERR_INVALID, "unknown task '%s': choose copy, reverse, sort or add", text);
}

static int compare_chars(const void *a, const void *b) { return *(const char *)a - *(const char *)b; }

int mtf_synth_example(mtf_synth_task task, int length, uint64_t seed, uint64_t stream, uint64_t index, char *buf,
                      int buf_size) {
  /* Each example has its own generator, so example i is the same however many are written. */
  mtf_rng rng = mtf_rng_make(mtf_hash64(seed, stream), index);
  char a[MAX_SYNTH_LENGTH + 1], b[MAX_SYNTH_LENGTH + 1], out[MAX_SYNTH_LENGTH + 2];
  if (task == MTF_SYNTH_ADD) {
    for (int i = 0; i < length; i++) a[i] = (char)('0' + mtf_rng_below(&rng, 10));
    for (int i = 0; i < length; i++) b[i] = (char)('0' + mtf_rng_below(&rng, 10));
    int carry = 0;
    for (int i = length - 1; i >= 0; i--) {
      int digit = (a[i] - '0') + (b[i] - '0') + carry;
      out[i + 1] = (char)('0' + digit % 10);
      carry = digit / 10;
    }
    out[0] = (char)('0' + carry);
    a[length] = b[length] = out[length + 1] = '\0';
    return snprintf(buf, (size_t)buf_size, "%s+%s=%s", a, b, out);
  }
  for (int i = 0; i < length; i++) a[i] = (char)('a' + mtf_rng_below(&rng, 26));
  a[length] = '\0';
  memcpy(out, a, (size_t)length + 1);
  if (task == MTF_SYNTH_REVERSE)
    for (int i = 0; i < length; i++) out[i] = a[length - 1 - i];
  if (task == MTF_SYNTH_SORT) qsort(out, (size_t)length, 1, compare_chars);
  return snprintf(buf, (size_t)buf_size, "%s=%s", a, out);
}

/* The seq2seq marks of every shard the sink wrote: spans holds (start, answer_start, end) of every example
 * as offsets in the whole stream; each shard gets those that lie wholly in it, as offsets in the shard. */
static int mark_shards(const mtf_synth_options *opts, const char *prefix, const mtf_shard_sink *sink,
                       const int64_t *spans, int64_t examples, mtf_error *err) {
  int64_t next = 0;
  for (int s = 0; s < sink->shards; s++) {
    int64_t first = (int64_t)s * opts->shard_tokens;
    int64_t tokens = s + 1 < sink->shards ? opts->shard_tokens : sink->total - first;
    int64_t begin = next;
    while (next < examples && spans[3 * next + 2] <= first + tokens) next++;
    int64_t count = 0;
    int64_t *local = malloc(sizeof(int64_t) * 3 * (size_t)(next - begin + 1));
    if (!local) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory marking shards");
    for (int64_t i = begin; i < next; i++) {
      if (spans[3 * i] < first) continue; /* begun in the previous shard: cut in two, in neither's marks */
      for (int j = 0; j < 3; j++) local[3 * count + j] = spans[3 * i + j] - first;
      count++;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%05d.h5", opts->output_dir, prefix, s);
    int rc = mtf_seq2seq_mark_shard(path, local, count, tokens, err);
    free(local);
    MTF_CHECK(rc);
  }
  return MTF_OK;
}

/* --pack: the split's examples, each with its end-of-text, as whole documents in rows (io/packing.h). */
static int write_packed_split(const mtf_synth_options *opts, const char *prefix, uint64_t stream, int64_t examples,
                              int64_t *tokens_out, int *shards_out, mtf_error *err) {
  char path[4096], text[EXAMPLE_MAX];
  snprintf(path, sizeof path, "%s/%s-00000.h5", opts->output_dir, prefix);
  mtf_packer packer;
  mtf_packer_init(&packer, path, opts->pack, opts->one_per_row, MTF_BYTES_VOCAB_SIZE, MTF_BYTES_EOT_ID,
                  MTF_BYTES_TOKENIZER);
  int32_t tokens[EXAMPLE_MAX + 1];
  int rc = MTF_OK;
  for (int64_t i = 0; rc == MTF_OK && i < examples; i++) {
    int length = mtf_synth_example(opts->task, opts->length, opts->seed, stream, (uint64_t)i, text, sizeof text);
    size_t count = mtf_tokenize_bytes((const unsigned char *)text, (size_t)length, tokens);
    tokens[count++] = MTF_BYTES_EOT_ID;
    rc = mtf_packer_push(&packer, tokens, (int64_t)count, err);
  }
  int finish_rc = mtf_packer_finish(&packer, rc == MTF_OK ? err : NULL);
  *tokens_out = packer.count;
  *shards_out = 1;
  return rc == MTF_OK ? finish_rc : rc;
}

static int write_split(const mtf_synth_options *opts, const char *prefix, uint64_t stream, int64_t examples,
                       int64_t *tokens_out, int *shards_out, mtf_error *err) {
  if (opts->pack > 0) return write_packed_split(opts, prefix, stream, examples, tokens_out, shards_out, err);
  mtf_shard_sink sink;
  mtf_shard_sink_init(&sink, opts->output_dir, prefix, opts->shard_tokens, MTF_BYTES_VOCAB_SIZE, MTF_BYTES_EOT_ID,
                      MTF_BYTES_TOKENIZER);
  char text[EXAMPLE_MAX];
  int32_t tokens[EXAMPLE_MAX + 1];
  int64_t *spans = malloc(sizeof(int64_t) * 3 * (size_t)examples);
  int rc = spans ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "out of memory for %lld examples", (long long)examples);
  for (int64_t i = 0; rc == MTF_OK && i < examples; i++) {
    int length = mtf_synth_example(opts->task, opts->length, opts->seed, stream, (uint64_t)i, text, sizeof text);
    size_t count = mtf_tokenize_bytes((const unsigned char *)text, (size_t)length, tokens);
    tokens[count++] = MTF_BYTES_EOT_ID;
    /* The answer begins after '=' (the byte tokenizer maps a byte to its own id). */
    const char *equals = strchr(text, '=');
    spans[3 * i] = sink.total;
    spans[3 * i + 1] = sink.total + (equals - text) + 1;
    spans[3 * i + 2] = sink.total + (int64_t)count;
    rc = mtf_shard_sink_push(&sink, tokens, (int64_t)count, err);
  }
  int finish_rc = mtf_shard_sink_finish(&sink, rc == MTF_OK ? err : NULL);
  *tokens_out = sink.total;
  *shards_out = sink.shards;
  if (rc == MTF_OK) rc = finish_rc;
  if (rc == MTF_OK) rc = mark_shards(opts, prefix, &sink, spans, examples, err);
  free(spans);
  return rc;
}

int mtf_data_synth(const mtf_synth_options *opts, mtf_synth_stats *stats, mtf_error *err) {
  memset(stats, 0, sizeof *stats);
  if (opts->examples < 1) return mtf_error_set(err, MTF_ERR_INVALID, "--examples must be at least 1");
  if (opts->length < 1 || opts->length > MAX_SYNTH_LENGTH)
    return mtf_error_set(err, MTF_ERR_INVALID, "--length must be in [1, %d], not %d", MAX_SYNTH_LENGTH, opts->length);
  if (opts->shard_tokens < 1) return mtf_error_set(err, MTF_ERR_INVALID, "--shard-tokens must be at least 1");
  if (!(opts->val_fraction >= 0 && opts->val_fraction < 1))
    return mtf_error_set(err, MTF_ERR_INVALID, "--val-fraction must be in [0, 1), not %g", opts->val_fraction);
  MTF_CHECK(mtf_output_dir_prepare(opts->output_dir, opts->force, err));
  stats->train_examples = opts->examples;
  stats->val_examples = (int64_t)((double)opts->examples * opts->val_fraction);
  if (opts->val_fraction > 0 && stats->val_examples == 0) stats->val_examples = 1;
  MTF_CHECK(write_split(opts, "train", 0, stats->train_examples, &stats->train_tokens, &stats->train_shards, err));
  if (stats->val_examples > 0)
    MTF_CHECK(write_split(opts, "val", 1, stats->val_examples, &stats->val_tokens, &stats->val_shards, err));
  return MTF_OK;
}
