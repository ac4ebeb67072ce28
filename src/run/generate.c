/* `mtf generate`: continues prompts from a checkpoint on any mesh and layout.
 *
 * The cached path (the default) runs two programs of one graph, both built from the one model definition
 * (model/transformer.h): PREFILL runs the prompt windows [batch, length] once and writes every layer's
 * keys and values into the caches; DECODE then runs one token per row at the row's own position, reading
 * the caches. Prompts of different lengths share a batch (right padding, per-row positions), and a row's
 * result is what it gives alone. Once a row's context outgrows model.length, each step re-runs PREFILL
 * on the last `length` tokens (the sliding window of --no-cache). --no-cache re-runs the whole window with
 * the training forward per token and fetches all logits: the reference the cached path is tested against.
 * Either way the next token is chosen on rank (run/generate_sample.h): only ids and scores cross ranks.
 *
 * The batch holds the prompts (beams: beam rows per prompt), padded with copies of the first prompt up to a
 * multiple of the mesh axis splitting `batch`; copies' results are dropped.
 *
 * An encoder-decoder (model/encoder_decoder.h) takes each prompt as the encoder's input, run once by PREFILL;
 * the rows then hold the decoder's tokens (the end-of-text start, not printed, and the answer so far), and
 * DECODE steps them as above; the decoder has model.length positions, so --max-new is capped there. */
#include "run/generate.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "core/clock.h"
#include "io/tokenize.h"
#include "run/generate_beam.h"
#include "run/generate_engine.h"
#include "run/generate_sample.h"
#include "run/generate_text.h"
#include "run/setup.h"

/* The size of the mesh axis that splits `batch` (1 when none does). */
static int64_t batch_split(const mtf_config *cfg) {
  for (int i = 0; i < cfg->layout.count; i++)
    if (strcmp(cfg->layout.rules[i].dim, "batch") == 0) {
      int axis = mtf_shape_index_of(&cfg->mesh_shape, cfg->layout.rules[i].axis);
      if (axis >= 0) return cfg->mesh_shape.dims[axis].size;
    }
  return 1;
}

int mtf_generate_check_options(const mtf_generate_options *opts, mtf_error *err) {
  if (opts->max_new < 0 || opts->max_new > MTF_GENERATE_MAX_NEW)
    return mtf_error_set(err, MTF_ERR_INVALID, "--max-new %lld: it must be between 0 and %lld", (long long)opts->max_new,
                         (long long)MTF_GENERATE_MAX_NEW);
  if (!isfinite(opts->temperature) || opts->temperature < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "--temperature %g: it must be a finite number >= 0 (0 = greedy)",
                         opts->temperature);
  if (opts->top_k < 0 || opts->top_k > INT32_MAX)
    return mtf_error_set(err, MTF_ERR_INVALID, "--top-k %lld: it must be between 0 and %d", (long long)opts->top_k,
                         INT32_MAX);
  if (!(opts->top_p > 0 && opts->top_p <= 1))
    return mtf_error_set(err, MTF_ERR_INVALID, "--top-p %g: it must be in (0, 1] (1 = the whole vocabulary)", opts->top_p);
  if (opts->beam < 0 || opts->beam > 64)
    return mtf_error_set(err, MTF_ERR_INVALID, "--beam %d: it must be between 0 and 64", opts->beam);
  if (!isfinite(opts->length_penalty) || opts->length_penalty < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "--length-penalty %g: it must be a finite number >= 0",
                         opts->length_penalty);
  return MTF_OK;
}


/* One prompt's row (or a beam of it) and what it produced. */
typedef struct gen_row {
  int32_t *ids;     /* prompt, then new tokens */
  int64_t len, prompt_len;
  int done;
  double *logprob;  /* per new token */
  double *ms;       /* per step, rank 0's wall time */
  int64_t produced;
} gen_row;

typedef struct gen_prompts {
  int64_t count;
  char **text;      /* borrowed from opts or owned lines */
  int as_ids;       /* --prompt-ids */
  char **lines;
  int64_t n_lines;
} gen_prompts;

static int collect_prompts(const mtf_generate_options *opts, gen_prompts *p, mtf_error *err) {
  memset(p, 0, sizeof *p);
  if (opts->prompts_file) MTF_CHECK(mtf_gen_read_lines(opts->prompts_file, &p->lines, &p->n_lines, err));
  int64_t total = opts->n_prompts + p->n_lines + (opts->prompt_ids ? 1 : 0);
  if (total == 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s%s holds no prompt: give one per line",
                         opts->prompts_file ? "--prompts " : "no prompt", opts->prompts_file ? opts->prompts_file : "");
  if (total > MTF_GENERATE_MAX_PROMPTS)
    return mtf_error_set(err, MTF_ERR_INVALID, "%lld prompts: at most %d at once", (long long)total,
                         MTF_GENERATE_MAX_PROMPTS);
  p->text = malloc(sizeof(char *) * (size_t)total);
  if (!p->text) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  if (opts->prompt_ids) {
    p->text[p->count++] = (char *)opts->prompt_ids;
    p->as_ids = 1;
  }
  for (int i = 0; i < opts->n_prompts; i++) p->text[p->count++] = (char *)opts->prompts[i];
  for (int64_t i = 0; i < p->n_lines; i++) p->text[p->count++] = p->lines[i];
  return MTF_OK;
}

static void free_prompts(gen_prompts *p) {
  free(p->text);
  mtf_gen_free_lines(p->lines, p->n_lines);
}

/* The rows' buffers: room for the prompt and max_new tokens. */
static int row_alloc(gen_row *row, const int32_t *prompt, int64_t n, int64_t max_new, mtf_error *err) {
  memset(row, 0, sizeof *row);
  row->ids = malloc(sizeof(int32_t) * (size_t)(n + max_new + 1));
  row->logprob = malloc(sizeof(double) * (size_t)(max_new + 1));
  row->ms = malloc(sizeof(double) * (size_t)(max_new + 1));
  if (!row->ids || !row->logprob || !row->ms) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  memcpy(row->ids, prompt, sizeof(int32_t) * (size_t)n);
  row->len = row->prompt_len = n;
  return MTF_OK;
}

static void row_free(gen_row *row) {
  free(row->ids);
  free(row->logprob);
  free(row->ms);
}

static void print_json_row(const mtf_gen_tokens *tok, const gen_row *row, int64_t index, const double *beam_score) {
  printf("{\"row\": %lld, ", (long long)index);
  if (beam_score) printf("\"beam_score\": %.9g, ", *beam_score);
  printf("\"prompt_ids\": ");
  mtf_gen_emit_json_ids(stdout, row->ids, row->prompt_len);
  printf(", \"ids\": ");
  mtf_gen_emit_json_ids(stdout, row->ids + row->prompt_len, row->produced);
  printf(", \"logprobs\": [");
  for (int64_t i = 0; i < row->produced; i++) printf(i ? ", %.6f" : "%.6f", row->logprob[i]);
  printf("], \"step_ms\": [");
  for (int64_t i = 0; i < row->produced; i++) printf(i ? ", %.3f" : "%.3f", row->ms[i]);
  double later = 0;
  for (int64_t i = 1; i < row->produced; i++) later += row->ms[i];
  printf("], \"time_to_first_token_ms\": %.3f, \"ms_per_token\": %.3f", row->produced ? row->ms[0] : 0.0,
         row->produced > 1 ? later / (double)(row->produced - 1) : 0.0);
  if (tok->mode != MTF_GEN_IDS) {
    size_t size = 0;
    char *text = mtf_gen_text(tok, row->ids + row->prompt_len, row->produced, &size);
    printf(", \"text\": ");
    mtf_gen_json_string(stdout, text ? text : "", text ? size : 0);
    free(text);
  }
  printf("}\n");
}

/* Sampling (greedy at temperature 0): one token per row per step, until end-of-text or max_new. */
static int sample_rows(mtf_gen_engine *e, const mtf_generate_options *opts, const mtf_gen_tokens *tok, gen_row *rows,
                       int64_t n_rows, int64_t users, int64_t eot, int stream_text, mtf_error *err) {
  int32_t **context = malloc(sizeof(int32_t *) * (size_t)n_rows), *chosen = malloc(sizeof(int32_t) * (size_t)n_rows);
  int64_t *len = malloc(sizeof(int64_t) * (size_t)n_rows), *keys = malloc(sizeof(int64_t) * (size_t)n_rows);
  double *logprob = malloc(sizeof(double) * (size_t)n_rows);
  int rc = context && chosen && len && keys && logprob ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  mtf_gen_sampling sampling = {opts->temperature, opts->top_k, opts->top_p, opts->seed};
  for (int64_t r = 0; r < n_rows && rc == MTF_OK; r++) {
    context[r] = rows[r].ids;
    keys[r] = r < users ? r : 0; /* a padding copy of prompt 0 draws what prompt 0 draws */
  }
  int rank = e->comm->rank;
  for (int64_t step = 0; step < opts->max_new && rc == MTF_OK; step++) {
    int active = 0;
    for (int64_t r = 0; r < users; r++) active |= !rows[r].done;
    if (!active) break;
    double start = mtf_now_seconds();
    for (int64_t r = 0; r < n_rows; r++) len[r] = rows[r].len;
    mtf_gen_slice slice;
    rc = mtf_gen_engine_next(e, context, len, &slice, err);
    if (rc == MTF_OK) rc = mtf_gen_sample(e->comm, &slice, &sampling, step, keys, chosen, logprob, err);
    double ms = (mtf_now_seconds() - start) * 1e3;
    for (int64_t r = 0; r < n_rows && rc == MTF_OK; r++) {
      gen_row *row = &rows[r];
      if (row->done) continue;
      if (chosen[r] == eot) {
        row->done = 1;
        continue;
      }
      row->ids[row->len++] = chosen[r];
      row->logprob[row->produced] = logprob[r];
      row->ms[row->produced++] = ms;
      if (row->produced == opts->max_new) row->done = 1;
      if (r == 0 && rank == 0 && stream_text) {
        mtf_gen_emit(tok, stdout, chosen[r], row->prompt_len == 0 && row->produced == 1); /* space after a prompt */
        fflush(stdout);
      }
      if (r < users && rank == 0 && opts->stream && opts->json) {
        printf("{\"row\": %lld, \"step\": %lld, \"id\": %d, \"logprob\": %.6f, \"ms\": %.3f}\n", (long long)r,
               (long long)step, chosen[r], logprob[r], ms);
        fflush(stdout);
      }
    }
  }
  free(context);
  free(chosen);
  free(len);
  free(keys);
  free(logprob);
  return rc;
}

/* Beam search over every prompt's `beam` rows; row u * beam ends with prompt u's best hypothesis. */
static int beam_rows(mtf_gen_engine *e, const mtf_generate_options *opts, gen_row *rows, int64_t n_rows, int beam,
                     int64_t eot, double *scores, mtf_error *err) {
  int64_t groups = n_rows / beam;
  int32_t **context = malloc(sizeof(int32_t *) * (size_t)n_rows);
  int64_t *len = malloc(sizeof(int64_t) * (size_t)n_rows);
  double **logprob = malloc(sizeof(double *) * (size_t)groups);
  int rc = context && len && logprob ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  for (int64_t r = 0; r < n_rows && rc == MTF_OK; r++) {
    context[r] = rows[r].ids;
    len[r] = rows[r].len;
  }
  for (int64_t q = 0; q < groups && rc == MTF_OK; q++) logprob[q] = rows[q * beam].logprob;
  double start = mtf_now_seconds();
  if (rc == MTF_OK)
    rc = mtf_gen_beam_search(e, groups, beam, opts->max_new, opts->length_penalty, eot, context, len, scores, logprob, err);
  double ms = (mtf_now_seconds() - start) * 1e3;
  for (int64_t q = 0; q < groups && rc == MTF_OK; q++) {
    gen_row *row = &rows[q * beam];
    row->len = len[q * beam];
    row->produced = row->len - (row->prompt_len ? row->prompt_len : 1);
    for (int64_t i = 0; i < row->produced; i++) row->ms[i] = ms / (double)(row->produced ? row->produced : 1);
  }
  free(context);
  free(len);
  free(logprob);
  return rc;
}

int mtf_generate_run(const mtf_config *cfg, const mtf_generate_options *opts, mtf_error *err) {
  MTF_CHECK(mtf_generate_check_options(opts, err)); /* alike on every rank */
  MTF_CHECK(mtf_run_check_backend(cfg, err)); /* alike on every rank */
  if (!mtf_backend_capabilities(cfg->backend)->generate)
    return mtf_error_set(err, MTF_ERR_INVALID, "mtf generate on backend.kind %s is not built yet (its prefill and "
                         "decode programs with the key/value cache); generate with backend.kind cpu: checkpoints "
                         "written on %s restore there", cfg->backend, cfg->backend);
  int rank = mtf_world_rank();
  int64_t vocab = cfg->model.vocab, length = cfg->model.length;
  /* Encoder-decoder: each prompt is the encoder's input (its first `length` tokens, as training reads them);
   * the decoder starts at the end-of-text id and has `length` positions, so at most `length` new tokens. */
  int encdec = cfg->model.architecture == MTF_ARCHITECTURE_ENCODER_DECODER;
  mtf_generate_options clamped = *opts;
  if (encdec && clamped.max_new > length) {
    if (rank == 0)
      fprintf(stderr, "generate: warning: --max-new %lld: the encoder-decoder's decoder has model.length %lld "
              "positions, so it generates at most %lld tokens\n", (long long)clamped.max_new, (long long)length,
              (long long)length);
    clamped.max_new = length;
  }
  opts = &clamped;
  gen_prompts prompts;
  int rc = collect_prompts(opts, &prompts, err); /* every rank reads the same file */
  int beam = opts->beam > 1 ? opts->beam : 1;
  if (rc == MTF_OK && opts->stream && !opts->json && prompts.count > 1)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "--stream prints one prompt's text as it comes: with %lld prompts, add "
                       "--json (one JSON line per token)", (long long)prompts.count);
  /* Rows: the prompts (beam rows each), padded to a multiple of the mesh axis splitting batch, so that
   * each rank holds whole prompts. */
  int64_t split = batch_split(cfg), users = rc == MTF_OK ? prompts.count : 1;
  int64_t slots = (users + split - 1) / split * split, n_rows = slots * beam;
  mtf_gen_engine engine;
  memset(&engine, 0, sizeof engine);
  rc = mtf_run_agree(rc, err);
  if (rc == MTF_OK) rc = mtf_gen_engine_open(&engine, cfg, n_rows, !opts->no_cache, err);
  mtf_ckpt_state state = {0};
  char restored[MTF_CKPT_PATH_MAX] = "";
  if (rc == MTF_OK) {
    mtf_ckpt_model ckpt = mtf_gen_engine_checkpoint(&engine);
    if (opts->checkpoint) {
      rc = mtf_ckpt_restore(&ckpt, opts->checkpoint, 0, &state, NULL, err);
      snprintf(restored, sizeof restored, "%s", opts->checkpoint);
    } else {
      char dir[MTF_CONFIG_PATH + 16];
      int found = 0;
      snprintf(dir, sizeof dir, "%s/checkpoints", cfg->run_dir);
      rc = mtf_ckpt_restore_latest(&ckpt, dir, 0, &state, &found, restored, sizeof restored, NULL, err);
      if (rc == MTF_OK && !found)
        rc = mtf_error_set(err, MTF_ERR_INVALID, "no checkpoint in %s: train first (mtf train %s), or give --checkpoint PATH",
                           dir, cfg->source);
    }
  }
  /* Every rank reads the same files, so all choose the same mode and encode the prompts alike. */
  mtf_ckpt_tokenizer ckpt_tok = {0};
  mtf_gen_vocab vocab_file = {0};
  if (rc == MTF_OK) rc = mtf_ckpt_read_tokenizer(restored, &ckpt_tok, err);
  int mode = opts->vocab_file ? MTF_GEN_VOCAB
             : ckpt_tok.table.count > 0 ? MTF_GEN_TABLE
             : !ckpt_tok.present || strcmp(ckpt_tok.table.tokenizer, MTF_BYTES_TOKENIZER) == 0 ? MTF_GEN_BYTES
                                                                                                : MTF_GEN_IDS;
  int64_t eot = ckpt_tok.present ? ckpt_tok.table.eot_id : mode == MTF_GEN_BYTES ? MTF_BYTES_EOT_ID : -1;
  if (rc == MTF_OK && mode == MTF_GEN_BYTES && vocab < MTF_BYTES_EOT_ID + 1)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: the checkpoint names no tokenizer, so generate speaks the byte "
                       "tokenizer, which needs model.vocab >= 257 (or give --vocab FILE, or --ids)", cfg->source);
  if (rc == MTF_OK && opts->vocab_file) rc = mtf_gen_vocab_load(opts->vocab_file, &vocab_file, err);
  if (rc == MTF_OK && encdec && (eot < 0 || eot >= vocab))
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: an encoder-decoder's decoder starts at the end-of-text id, and the "
                       "checkpoint's tokenizer names none within model.vocab %lld", cfg->source, (long long)vocab);
  if (rc == MTF_OK && opts->vocab_file && vocab_file.count > vocab)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "vocabulary file '%s' has %lld tokens, more than model.vocab %lld",
                       opts->vocab_file, (long long)vocab_file.count, (long long)vocab);
  mtf_gen_tokens tok = {.mode = mode, .json_ids = opts->print_ids, .table = &ckpt_tok.table, .vocab = &vocab_file,
                        .tokenizer = ckpt_tok.table.tokenizer, .model_vocab = vocab};
  gen_row *rows = calloc((size_t)n_rows, sizeof(gen_row));
  double *scores = calloc((size_t)n_rows, sizeof(double));
  /* Encoder-decoder: each row's prompt, the encoder's input (rows hold the decoder's tokens). */
  int32_t **encoder_ids = encdec ? calloc((size_t)n_rows, sizeof(int32_t *)) : NULL;
  int64_t *encoder_len = encdec ? calloc((size_t)n_rows, sizeof(int64_t)) : NULL;
  if (rc == MTF_OK && (!rows || !scores || (encdec && (!encoder_ids || !encoder_len))))
    rc = mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  int64_t allocated = 0;
  for (int64_t u = 0; u < users && rc == MTF_OK; u++) {
    int32_t *ids = NULL, start = (int32_t)eot;
    int64_t n = 0;
    char what[MTF_CKPT_PATH_MAX + 64]; /* names the prompts file, whose path may be long */
    if (prompts.as_ids && u == 0) snprintf(what, sizeof what, "--prompt-ids");
    else if (u < (prompts.as_ids ? 1 : 0) + opts->n_prompts) snprintf(what, sizeof what, "--prompt %lld", (long long)u + 1);
    else snprintf(what, sizeof what, "%s line %lld", opts->prompts_file,
                  (long long)(u - opts->n_prompts - (prompts.as_ids ? 1 : 0)) + 1);
    /* --ids reads the prompts file as JSON arrays; --prompt stays text (--prompt-ids takes ids). */
    int from_file = u >= (prompts.as_ids ? 1 : 0) + opts->n_prompts;
    mtf_gen_tokens line_tok = tok;
    line_tok.json_ids = opts->print_ids && from_file;
    rc = mtf_gen_encode(&line_tok, prompts.text[u], prompts.as_ids && u == 0, what, &ids, &n, err);
    if (rc == MTF_OK && encdec) { /* the prompt goes to the encoder; the decoder starts at end-of-text */
      if (n > length && rank == 0)
        fprintf(stderr, "generate: warning: %s has %lld tokens, more than model.length %lld: the encoder sees its "
                "first %lld\n", what, (long long)n, (long long)length, (long long)length);
      for (int b = 0; b < beam; b++) {
        encoder_ids[u * beam + b] = ids;
        encoder_len[u * beam + b] = n;
      }
      rc = row_alloc(&rows[u * beam], &start, 1, opts->max_new, err);
      allocated = u * beam + 1;
      for (int b = 1; b < beam && rc == MTF_OK; b++) {
        rc = row_alloc(&rows[u * beam + b], &start, 1, opts->max_new, err);
        allocated = u * beam + b + 1;
      }
      for (int b = 0; b < beam; b++) rows[u * beam + b].prompt_len = 0; /* the start token is not printed */
      continue; /* ids stay: encoder_ids owns them */
    }
    if (rc == MTF_OK && n == 0) { /* an empty prompt starts a new document */
      if (eot < 0 || eot >= vocab)
        rc = mtf_error_set(err, MTF_ERR_INVALID, "%s is empty and the tokenizer%s%s has no end-of-text id to start "
                           "from: give a prompt", what, ckpt_tok.present ? " " : "", ckpt_tok.table.tokenizer);
    }
    if (rc == MTF_OK && n > length && rank == 0)
      fprintf(stderr, "generate: warning: %s has %lld tokens, more than model.length %lld: the model sees its last "
              "%lld\n", what, (long long)n, (long long)length, (long long)length);
    for (int b = 0; b < beam && rc == MTF_OK; b++) {
      rc = row_alloc(&rows[u * beam + b], n ? ids : &start, n ? n : 1, opts->max_new, err);
      allocated = u * beam + b + 1;
      if (n == 0) rows[u * beam + b].prompt_len = 0; /* the end-of-text start is not printed */
    }
    free(ids);
  }
  for (int64_t r = users * beam; r < n_rows && rc == MTF_OK; r++) { /* padding: copies of prompt 0 */
    rc = row_alloc(&rows[r], rows[r % beam].ids, rows[r % beam].len, opts->max_new, err);
    rows[r].prompt_len = rows[r % beam].prompt_len;
    if (encdec) {
      encoder_ids[r] = encoder_ids[r % beam];
      encoder_len[r] = encoder_len[r % beam];
    }
    allocated = r + 1;
  }
  if (rc == MTF_OK && encdec) mtf_gen_engine_set_prompts(&engine, encoder_ids, encoder_len);
  if (engine.comm) rc = mtf_comm_agree(engine.comm, rc, err);
  int stream_text = users == 1 && beam == 1 && !opts->json && !opts->print_ids;
  /* The header lines go to stderr: stdout carries only the generated text (or JSON), for files and pipes. */
  if (rc == MTF_OK) mtf_run_print_backend(engine.decode_s ? engine.decode_s : engine.full_s, 1);
  if (rc == MTF_OK && rank == 0) {
    FILE *out = stderr;
    fprintf(out, "generate: checkpoint at step %lld, ", (long long)state.step);
    if (beam > 1) fprintf(out, "beam %d, length penalty %g", beam, opts->length_penalty);
    else fprintf(out, "temperature %g, top-k %lld, top-p %g, seed %llu", opts->temperature, (long long)opts->top_k,
                 opts->top_p, (unsigned long long)opts->seed);
    if (mode == MTF_GEN_VOCAB) fprintf(out, ", vocabulary file '%s'", opts->vocab_file);
    else if (mode != MTF_GEN_BYTES)
      fprintf(out, ", tokenizer '%s'%s", ckpt_tok.table.tokenizer, mode == MTF_GEN_IDS ? " (no decode table: ids)" : "");
    if (users > 1) fprintf(out, ", %lld prompts", (long long)users);
    fprintf(out, "%s\n", opts->no_cache ? ", no cache" : "");
    if (stream_text && !encdec) { /* an encoder-decoder prints its answer alone */
      if (prompts.as_ids || mode != MTF_GEN_BYTES)
        for (int64_t i = 0; i < rows[0].prompt_len; i++) mtf_gen_emit(&tok, stdout, rows[0].ids[i], i == 0);
      else
        printf("%s", prompts.text[0]);
    }
    fflush(stdout);
  }
  if (rc == MTF_OK) {
    if (beam > 1)
      rc = beam_rows(&engine, opts, rows, n_rows, beam, eot, scores, err);
    else
      rc = sample_rows(&engine, opts, &tok, rows, n_rows, users, eot, stream_text, err);
  }
  if (rc == MTF_OK && rank == 0) {
    if (stream_text) {
      printf("\n");
    } else {
      for (int64_t u = 0; u < users; u++) {
        const gen_row *row = &rows[u * beam];
        if (opts->json) {
          print_json_row(&tok, row, u, beam > 1 ? &scores[u] : NULL);
        } else if (opts->print_ids) {
          mtf_gen_emit_json_ids(stdout, row->ids + (row->prompt_len ? 0 : 1), row->len - (row->prompt_len ? 0 : 1));
          printf("\n");
        } else {
          int64_t from = row->prompt_len ? 0 : 1;
          size_t size = 0;
          char *text = mtf_gen_text(&tok, row->ids + from, row->len - from, &size);
          if (!text) rc = mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory for prompt %lld's text", (long long)u + 1);
          else mtf_gen_emit_one_line(stdout, text, size);
          free(text);
        }
      }
    }
    fflush(stdout);
  }
  for (int64_t r = 0; r < allocated; r++) row_free(&rows[r]);
  for (int64_t u = 0; encoder_ids && u < users; u++) free(encoder_ids[u * beam]);
  free(encoder_ids);
  free(encoder_len);
  free(rows);
  free(scores);
  free_prompts(&prompts);
  mtf_gen_vocab_free(&vocab_file);
  mtf_ckpt_tokenizer_free(&ckpt_tok);
  mtf_gen_engine_close(&engine);
  return rc;
}
