/* `mtf generate`: samples text from a trained model on any mesh. The tokenizer comes from the checkpoint's
 * /tokenizer group: with a decode table the prompt is encoded by greedy longest match over it and every
 * new token is printed as its bytes; the byte tokenizer (also assumed for checkpoints without the group)
 * maps bytes to ids 0..255 with end-of-text 256; any other tokenizer prints ids (as --ids does). Each new token re-runs the model on the
 * whole (sliding) context; a cached fast path can come later. The batch holds copies of the context, as
 * many as the mesh axis splitting `batch` needs, and row 0 is used. Every rank fetches the same logits and
 * samples with the same generator, so all ranks agree on every token without extra communication. */
#include "run/generate.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "run/setup.h"

#include "io/tokenize.h"

enum { MODE_BYTES, MODE_TABLE, MODE_IDS };

/* Rows of the generation batch: the size of the mesh axis that splits `batch` (1 when none does). */
static int64_t batch_rows(const mtf_config *cfg) {
  for (int i = 0; i < cfg->layout.count; i++)
    if (strcmp(cfg->layout.rules[i].dim, "batch") == 0) {
      int axis = mtf_shape_index_of(&cfg->mesh_shape, cfg->layout.rules[i].axis);
      if (axis >= 0) return cfg->mesh_shape.dims[axis].size;
    }
  return 1;
}

/* Samples from softmax(logits / temperature) restricted to the top_k largest (0 = all); temperature 0
 * is greedy. */
static int sample(const float *logits, int64_t vocab, double temperature, int64_t top_k, mtf_rng *rng) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; v++)
    if (logits[v] > logits[best]) best = v;
  if (temperature <= 0) return (int)best;
  double threshold = -INFINITY;
  if (top_k > 0 && top_k < vocab) { /* the k-th largest logit, by repeated selection (k is small) */
    double previous = INFINITY;
    for (int64_t k = 0; k < top_k; k++) {
      double next = -INFINITY;
      for (int64_t v = 0; v < vocab; v++)
        if (logits[v] < previous && logits[v] > next) next = logits[v];
      previous = next;
    }
    threshold = previous;
  }
  double total = 0;
  for (int64_t v = 0; v < vocab; v++)
    if (logits[v] >= threshold) total += exp((logits[v] - logits[best]) / temperature);
  double u = (double)(mtf_rng_next(rng) >> 11) / 9007199254740992.0 * total, acc = 0;
  for (int64_t v = 0; v < vocab; v++) {
    if (logits[v] < threshold) continue;
    acc += exp((logits[v] - logits[best]) / temperature);
    if (acc >= u) return (int)v;
  }
  return (int)best;
}

/* Prints one token: its id (after a space unless first), its decode-table bytes, or (byte tokenizer) the
 * byte itself; ids without bytes print nothing. */
static void emit(int as_ids, int mode, const mtf_decode_table *table, int32_t id, int first) {
  if (as_ids) {
    printf(first ? "%d" : " %d", id);
  } else if (mode == MODE_TABLE) {
    size_t size;
    const uint8_t *bytes = mtf_decode_token(table, id, &size);
    if (size) fwrite(bytes, 1, size, stdout);
  } else if (id < 256) {
    putchar(id);
  }
}

/* The prompt as ids: --prompt-ids as given, else the text through the checkpoint's tokenizer. */
static int encode_prompt(const mtf_generate_options *opts, int mode, const mtf_decode_table *table, int64_t vocab,
                         int32_t **ids, int64_t *count, mtf_error *err) {
  *ids = NULL;
  *count = 0;
  if (opts->prompt_ids) {
    size_t most = strlen(opts->prompt_ids) / 2 + 1;
    int32_t *out = malloc(sizeof(int32_t) * most);
    if (!out) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
    int64_t n = 0;
    for (const char *p = opts->prompt_ids; *p;) {
      if (*p == ' ' || *p == ',') {
        p++;
        continue;
      }
      char *end = NULL;
      long long id = strtoll(p, &end, 10);
      if (end == p || (*end && *end != ' ' && *end != ',') || id < 0 || id >= vocab) {
        free(out);
        return mtf_error_set(err, MTF_ERR_INVALID, "--prompt-ids '%s': each id must be an integer in [0, %lld) "
                             "(model.vocab), separated by spaces or commas", opts->prompt_ids, (long long)vocab);
      }
      out[n++] = (int32_t)id;
      p = end;
    }
    *ids = out;
    *count = n;
    return MTF_OK;
  }
  size_t length = strlen(opts->prompt);
  if (mode == MODE_TABLE) {
    MTF_CHECK(mtf_decode_table_encode(table, opts->prompt, ids, count, err));
    for (int64_t i = 0; i < *count; i++)
      if ((*ids)[i] >= vocab) {
        int32_t id = (*ids)[i];
        free(*ids);
        *ids = NULL;
        return mtf_error_set(err, MTF_ERR_INVALID, "the prompt encodes to id %d, which is not below model.vocab %lld: "
                             "the model is smaller than its tokenizer's vocabulary", id, (long long)vocab);
      }
    return MTF_OK;
  }
  if (mode == MODE_IDS && length > 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "the checkpoint's tokenizer '%s' has no decode table, so a text prompt "
                         "cannot be encoded: give the prompt as ids with --prompt-ids", table->tokenizer);
  int32_t *out = malloc(sizeof(int32_t) * (length + 1));
  if (!out) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  for (size_t i = 0; i < length; i++) out[i] = (unsigned char)opts->prompt[i];
  *ids = out;
  *count = (int64_t)length;
  return MTF_OK;
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
  return MTF_OK;
}

int mtf_generate_run(const mtf_config *cfg, const mtf_generate_options *opts, mtf_error *err) {
  MTF_CHECK(mtf_generate_check_options(opts, err)); /* alike on every rank */
  int rank = mtf_world_rank();
  mtf_session_options options = mtf_run_session_options(cfg);
  MTF_CHECK(mtf_backend_check(cfg->backend, err)); /* alike on every rank */
  int64_t rows = batch_rows(cfg), length = cfg->model.length, vocab = cfg->model.vocab;
  mtf_graph *g = mtf_graph_create((uint64_t)cfg->train.seed);
  mtf_transformer model;
  mtf_comm *comm = NULL;
  mtf_plan *plan = NULL;
  mtf_session *session = NULL;
  int rc = mtf_transformer_build(g, &cfg->model, rows, 0.0f, &model, err);
  if (rc == MTF_OK) rc = mtf_plan_create(g, &cfg->mesh_shape, &cfg->layout, 0, 1, &model.logits, &plan, err);
  mtf_plan_destroy(plan); /* rank 0's plan only checked the layout, alike on every rank */
  plan = NULL;
  rc = mtf_run_agree(rc, err); /* but building the model can run out of memory on one rank alone */
  if (rc == MTF_OK) rc = mtf_comm_world_create(&cfg->mesh_shape, &comm, err);
  if (rc == MTF_OK) rc = mtf_plan_create(g, &cfg->mesh_shape, &cfg->layout, comm->rank, 1, &model.logits, &plan, err);
  if (rc == MTF_OK) rc = mtf_session_create(plan, comm, &options, &session, err);
  if (comm) rc = mtf_comm_agree(comm, rc, err); /* a rank that failed alone must not skip the restore below */
  mtf_ckpt_state state = {0};
  char restored[MTF_CKPT_PATH_MAX] = "";
  if (rc == MTF_OK) {
    mtf_ckpt_model ckpt = {.graph = g, .plan = plan, .session = session, .comm = comm, .params = model.params,
                           .n_params = model.n_params};
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
  /* Every rank reads the same file, so all choose the same mode and encode the prompt alike. */
  mtf_ckpt_tokenizer tok = {0};
  if (rc == MTF_OK) rc = mtf_ckpt_read_tokenizer(restored, &tok, err);
  int mode = tok.table.count > 0 ? MODE_TABLE
             : !tok.present || strcmp(tok.table.tokenizer, MTF_BYTES_TOKENIZER) == 0 ? MODE_BYTES : MODE_IDS;
  int64_t eot = mode == MODE_BYTES ? MTF_BYTES_EOT_ID : tok.table.eot_id;
  if (rc == MTF_OK && mode == MODE_BYTES && vocab < MTF_BYTES_EOT_ID + 1)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "%s: the checkpoint names no tokenizer, so generate speaks the byte "
                       "tokenizer, which needs model.vocab >= 257", cfg->source);
  int32_t *prompt = NULL;
  int64_t prompt_len = 0;
  if (rc == MTF_OK) rc = encode_prompt(opts, mode, &tok.table, vocab, &prompt, &prompt_len, err);
  int64_t step = state.step;
  /* Sizes from the config and the command line: checked (the config bounds rows x length x vocab, the
   * options max_new), so none of these products can wrap. */
  int64_t token_count, logit_count, capacity = 0, n = 0;
  int sizes_ok = mtf_checked_product(rows, length, &token_count) && mtf_checked_product(token_count, vocab, &logit_count) &&
                 prompt_len >= 0 && prompt_len <= MTF_MAX_ELEMENTS && opts->max_new <= MTF_GENERATE_MAX_NEW;
  if (sizes_ok) capacity = prompt_len + opts->max_new + 1;
  if (rc == MTF_OK && !sizes_ok) rc = mtf_error_set(err, MTF_ERR_INVALID, "generate: the buffers would overflow");
  int32_t *tokens = sizes_ok ? calloc((size_t)token_count, sizeof(int32_t)) : NULL;
  float *logits = sizes_ok ? malloc(sizeof(float) * (size_t)logit_count) : NULL;
  int32_t *context = sizes_ok ? malloc(sizeof(int32_t) * (size_t)capacity) : NULL;
  if (rc == MTF_OK && (!tokens || !logits || !context)) rc = mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  /* Session creation, the restore and the buffers above can fail on one rank alone: agree before the
   * collective loop. */
  if (comm) rc = mtf_comm_agree(comm, rc, err);
  for (int64_t i = 0; i < prompt_len && rc == MTF_OK; i++) context[n++] = prompt[i];
  if (rc == MTF_OK && n == 0) { /* an empty prompt starts a new document */
    if (eot < 0 || eot >= vocab)
      rc = mtf_error_set(err, MTF_ERR_INVALID, "the prompt is empty and tokenizer '%s' has no end-of-text id to start "
                         "from: give a prompt", tok.table.tokenizer);
    else
      context[n++] = (int32_t)eot;
  }
  if (comm) rc = mtf_comm_agree(comm, rc, err);
  int as_ids = opts->print_ids || mode == MODE_IDS;
  int64_t printed = 0; /* ids printed so far: the first has no space before it */
  if (rc == MTF_OK) mtf_run_print_backend(session, 0);
  if (rc == MTF_OK && rank == 0) {
    printf("generate: checkpoint at step %lld, temperature %g, top-k %lld, seed %llu", (long long)step,
           opts->temperature, (long long)opts->top_k, (unsigned long long)opts->seed);
    if (mode != MODE_BYTES)
      printf(", tokenizer '%s'%s", tok.table.tokenizer, mode == MODE_IDS ? " (no decode table: ids)" : "");
    printf("\n");
    if (as_ids || opts->prompt_ids)
      for (int64_t i = 0; i < prompt_len; i++) emit(as_ids, mode, &tok.table, prompt[i], printed++ == 0);
    else
      printf("%s", opts->prompt);
    fflush(stdout);
  }
  mtf_rng rng = mtf_rng_make(opts->seed, 0);
  for (int64_t produced = 0; produced < opts->max_new && rc == MTF_OK; produced++) {
    int64_t start = n > length ? n - length : 0, used = n - start;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t t = 0; t < length; t++) tokens[r * length + t] = t < used ? context[start + t] : 0;
    if (mtf_session_set_input_int(session, model.tokens, tokens, err) || mtf_session_run(session, err) ||
        mtf_session_fetch(session, model.logits, logits, err))
      mtf_run_abort("generate", err);
    int next = sample(logits + (used - 1) * vocab, vocab, opts->temperature, opts->top_k, &rng);
    if (next == eot) break;
    context[n++] = next;
    if (rank == 0) {
      emit(as_ids, mode, &tok.table, next, printed++ == 0);
      fflush(stdout);
    }
  }
  if (rc == MTF_OK && rank == 0) printf("\n");
  free(tokens);
  free(logits);
  free(context);
  free(prompt);
  mtf_ckpt_tokenizer_free(&tok);
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  mtf_transformer_free(&model);
  mtf_graph_destroy(g);
  if (comm) mtf_comm_destroy(comm);
  return rc;
}
