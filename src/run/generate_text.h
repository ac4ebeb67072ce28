/* `mtf generate`'s tokens in and out (internal to src/run): prompts as text through the checkpoint's
 * tokenizer (bytes; greedy longest match over its decode table), through a vocabulary file (one token per
 * line, id = line number, the prompt split at whitespace), or as ids (--prompt-ids; --ids reads and writes
 * JSON arrays of ids, one line per prompt); and new tokens printed the same ways. Pure: no MPI. */
#ifndef MTF_RUN_GENERATE_TEXT_H
#define MTF_RUN_GENERATE_TEXT_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "io/decode_table.h"

enum { MTF_GEN_BYTES, MTF_GEN_TABLE, MTF_GEN_VOCAB, MTF_GEN_IDS };

typedef struct mtf_gen_vocab {
  int64_t count;
  char **tokens;
  char *storage;
} mtf_gen_vocab;

typedef struct mtf_gen_tokens {
  int mode;                      /* MTF_GEN_* */
  int json_ids;                  /* --ids: prompts and output as JSON arrays of ids */
  const mtf_decode_table *table; /* MTF_GEN_TABLE */
  const mtf_gen_vocab *vocab;    /* MTF_GEN_VOCAB */
  const char *tokenizer;         /* for messages */
  int64_t model_vocab;
} mtf_gen_tokens;

/* A vocabulary file: one token per line (without its newline); empty lines and duplicates are refused. */
int mtf_gen_vocab_load(const char *path, mtf_gen_vocab *out, mtf_error *err);
void mtf_gen_vocab_free(mtf_gen_vocab *v);

/* One prompt: `text` through the tokens' way in (a JSON array of ids with json_ids; `as_ids` for
 * --prompt-ids: ids separated by spaces or commas). Each id must be below the model's vocabulary. `what`
 * names the prompt in messages ("--prompt", "prompts.txt line 3"). */
int mtf_gen_encode(const mtf_gen_tokens *t, const char *text, int as_ids, const char *what, int32_t **ids,
                   int64_t *count, mtf_error *err);

/* The lines of a prompts file (without newlines; a last line without a newline counts). */
int mtf_gen_read_lines(const char *path, char ***lines, int64_t *count, mtf_error *err);
void mtf_gen_free_lines(char **lines, int64_t count);

/* Writes one token as text (bytes, decode-table bytes, the vocabulary token after a space unless first,
 * or the id after a space unless first). */
void mtf_gen_emit(const mtf_gen_tokens *t, FILE *out, int32_t id, int first);
/* Writes ids as a JSON array (no newline). */
void mtf_gen_emit_json_ids(FILE *out, const int32_t *ids, int64_t n);
/* n bytes of text as one line of out: backslash, newline and carriage return written as \\, \n and \r (so a
 * batch prints exactly one line per prompt), then a newline. */
void mtf_gen_emit_one_line(FILE *out, const char *s, size_t n);
/* Writes s as a JSON string (quoted, escaped). */
void mtf_gen_json_string(FILE *out, const char *s, size_t n);
/* The text of ids, as mtf_gen_emit writes it, into a malloc'd buffer of *size bytes. */
char *mtf_gen_text(const mtf_gen_tokens *t, const int32_t *ids, int64_t n, size_t *size);

#endif
