/* The programs of `mtf generate` (see generate.c): the cached PREFILL and DECODE of one graph, or the
 * full forward of --no-cache, and what each step feeds them. */
#include "run/generate_engine.h"

#include <stdlib.h>
#include <string.h>

#include "model/encoder_decoder.h"
#include "model/transformer.h"
#include "run/program.h"
#include "run/setup.h"


/* The plan of `rank` for fetch t and the assigns of build m (none for the full forward). */
static int plan_for(mtf_gen_engine *e, const mtf_config *cfg, int rank, const mtf_transformer *m, mtf_tensor t,
                    mtf_plan **out, mtf_error *err) {
  mtf_plan_options options = {.arena_alignment = mtf_run_arena_alignment(cfg)};
  return mtf_plan_create_with_assigns(e->g, &cfg->mesh_shape, &cfg->layout, rank, 1, &t, m->first_assign,
                                      m->n_assigns, &options, out, err);
}

int mtf_gen_engine_open(mtf_gen_engine *e, const mtf_config *cfg, int64_t rows, int cached, mtf_error *err) {
  memset(e, 0, sizeof *e);
  e->cached = cached;
  e->rows = rows;
  e->length = cfg->model.length;
  e->vocab = cfg->model.vocab;
  e->encoder_decoder = mtf_is_encoder_decoder(&cfg->model);
  e->g = mtf_graph_create((uint64_t)cfg->train.seed);
  mtf_session_options options = mtf_run_session_options(cfg);
  int rc = MTF_OK;
  /* A prompt is one document: no segment inputs, whatever data.pack the model was trained with. */
  mtf_model_config model = cfg->model;
  model.pack = MTF_PACK_NONE;
  if (cached) {
    rc = mtf_transformer_build_mode(e->g, &model, rows, 0.0f, MTF_MODE_PREFILL, &e->prefill, err);
    if (rc == MTF_OK) rc = mtf_transformer_build_mode(e->g, &model, rows, 0.0f, MTF_MODE_DECODE, &e->decode, err);
  } else {
    rc = mtf_transformer_build(e->g, &model, rows, 0.0f, &e->full, err);
  }
  /* Rank 0's plans only check the layout, alike on every rank. */
  mtf_plan *check = NULL;
  if (rc == MTF_OK && cached) rc = plan_for(e, cfg, 0, &e->prefill, e->prefill.next_logits, &check, err);
  mtf_plan_destroy(check);
  check = NULL;
  if (rc == MTF_OK && cached) rc = plan_for(e, cfg, 0, &e->decode, e->decode.next_logits, &check, err);
  if (rc == MTF_OK && !cached) rc = plan_for(e, cfg, 0, &e->full, e->full.logits, &check, err);
  mtf_plan_destroy(check);
  rc = mtf_run_agree(rc, err); /* but building the model can run out of memory on one rank alone */
  if (rc == MTF_OK) rc = mtf_comm_world_create(&cfg->mesh_shape, &e->comm, err);
  int rank = e->comm ? e->comm->rank : 0;
  if (rc == MTF_OK && cached) {
    rc = plan_for(e, cfg, rank, &e->prefill, e->prefill.next_logits, &e->prefill_plan, err);
    if (rc == MTF_OK) rc = plan_for(e, cfg, rank, &e->decode, e->decode.next_logits, &e->decode_plan, err);
    if (rc == MTF_OK) rc = mtf_session_create(e->prefill_plan, e->comm, &options, &e->prefill_s, err);
    mtf_session_options shared = options;
    shared.share_variables_with = e->prefill_s;
    if (rc == MTF_OK) rc = mtf_session_create(e->decode_plan, e->comm, &shared, &e->decode_s, err);
  } else if (rc == MTF_OK) {
    rc = plan_for(e, cfg, rank, &e->full, e->full.logits, &e->full_plan, err);
    if (rc == MTF_OK) rc = mtf_session_create(e->full_plan, e->comm, &options, &e->full_s, err);
  }
  int64_t token_count = rows * e->length;
  e->tokens = calloc((size_t)token_count, sizeof(int32_t));
  e->positions = calloc((size_t)rows, sizeof(int32_t));
  e->window = calloc((size_t)rows, sizeof(int64_t));
  e->next = cached ? NULL : malloc(sizeof(float) * (size_t)(rows * e->vocab));
  e->logits = cached ? NULL : malloc(sizeof(float) * (size_t)(token_count * e->vocab));
  if (e->encoder_decoder) {
    e->encoder_tokens = calloc((size_t)token_count, sizeof(int32_t));
    e->zeros = calloc((size_t)token_count, sizeof(int32_t));
  }
  if (rc == MTF_OK && e->encoder_decoder && (!e->encoder_tokens || !e->zeros))
    rc = mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory for %lld rows", (long long)rows);
  if (rc == MTF_OK && (!e->tokens || !e->positions || !e->window || (!cached && (!e->next || !e->logits))))
    rc = mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory for %lld rows", (long long)rows);
  if (e->comm) rc = mtf_comm_agree(e->comm, rc, err);
  return rc;
}

void mtf_gen_engine_close(mtf_gen_engine *e) {
  mtf_session_destroy(e->decode_s); /* before the session whose variables it shares */
  mtf_session_destroy(e->prefill_s);
  mtf_session_destroy(e->full_s);
  mtf_plan_destroy(e->decode_plan);
  mtf_plan_destroy(e->prefill_plan);
  mtf_plan_destroy(e->full_plan);
  mtf_transformer_free(&e->prefill);
  mtf_transformer_free(&e->decode);
  mtf_transformer_free(&e->full);
  mtf_graph_destroy(e->g);
  if (e->comm) mtf_comm_destroy(e->comm);
  free(e->tokens);
  free(e->positions);
  free(e->window);
  free(e->logits);
  free(e->next);
  free(e->slice);
  free(e->encoder_tokens);
  free(e->zeros);
}

void mtf_gen_engine_set_prompts(mtf_gen_engine *e, int32_t *const *prompt, const int64_t *len) {
  for (int64_t r = 0; r < e->rows; r++)
    for (int64_t t = 0; t < e->length; t++) e->encoder_tokens[r * e->length + t] = t < len[r] ? prompt[r][t] : 0;
  e->primed = 0; /* a new memory: the next call prefills */
}

mtf_ckpt_model mtf_gen_engine_checkpoint(mtf_gen_engine *e) {
  const mtf_transformer *m = e->cached ? &e->prefill : &e->full;
  return (mtf_ckpt_model){.graph = e->g, .plan = e->cached ? e->prefill_plan : e->full_plan,
                          .session = e->cached ? e->prefill_s : e->full_s, .comm = e->comm, .params = m->params,
                          .n_params = m->n_params};
}

mtf_comm *mtf_gen_engine_comm(mtf_gen_engine *e) { return e->comm; }

/* Each row's window [start, len) into the tokens input (right padding with id 0). */
static void fill_windows(mtf_gen_engine *e, int32_t *const *context, const int64_t *len) {
  for (int64_t r = 0; r < e->rows; r++) {
    int64_t start = len[r] > e->length ? len[r] - e->length : 0, used = len[r] - start;
    e->window[r] = start;
    for (int64_t t = 0; t < e->length; t++) e->tokens[r * e->length + t] = t < used ? context[r][start + t] : 0;
    e->positions[r] = (int32_t)(used - 1);
  }
}

int mtf_gen_engine_next(mtf_gen_engine *e, int32_t *const *context, const int64_t *len, mtf_gen_slice *out,
                        mtf_error *err) {
  if (!e->cached) { /* the reference: the whole window, all logits to every rank */
    fill_windows(e, context, len);
    if (e->encoder_decoder &&
        (mtf_session_set_input_int(e->full_s, e->full.encoder_tokens, e->encoder_tokens, err) ||
         mtf_session_set_input_int(e->full_s, e->full.targets, e->zeros, err) ||
         mtf_session_set_input_int(e->full_s, e->full.loss_weights, e->zeros, err)))
      mtf_run_abort("generate", err);
    if (mtf_session_set_input_int(e->full_s, e->full.tokens, e->tokens, err) || mtf_session_run(e->full_s, err) ||
        mtf_session_fetch(e->full_s, e->full.logits, e->logits, err))
      mtf_run_abort("generate", err);
    for (int64_t r = 0; r < e->rows; r++)
      memcpy(e->next + r * e->vocab, e->logits + (r * e->length + e->positions[r]) * e->vocab,
             sizeof(float) * (size_t)e->vocab);
    *out = (mtf_gen_slice){.logits = e->next, .row_offset = 0, .rows = e->rows, .vocab_offset = 0,
                           .vocab_count = e->vocab, .total_rows = e->rows, .vocab = e->vocab,
                           .counts = e->comm->rank == 0};
    return MTF_OK;
  }
  /* Decode when the caches hold every row's window but its last token; else (first call, or a window
   * that slides) prefill. The decision depends only on the lengths: alike on every rank. */
  int decode = e->primed;
  for (int64_t r = 0; r < e->rows && decode; r++) {
    int64_t start = len[r] > e->length ? len[r] - e->length : 0;
    if (start != e->window[r]) decode = 0;
  }
  mtf_session *s = decode ? e->decode_s : e->prefill_s;
  const mtf_transformer *m = decode ? &e->decode : &e->prefill;
  if (decode) {
    for (int64_t r = 0; r < e->rows; r++) {
      e->tokens[r] = context[r][len[r] - 1];
      e->positions[r] = (int32_t)(len[r] - 1 - e->window[r]);
    }
  } else {
    fill_windows(e, context, len);
  }
  if ((!decode && e->encoder_decoder && mtf_session_set_input_int(s, m->encoder_tokens, e->encoder_tokens, err)) ||
      mtf_session_set_input_int(s, m->tokens, e->tokens, err) ||
      mtf_session_set_input_int(s, m->positions, e->positions, err) || mtf_session_run(s, err))
    mtf_run_abort("generate", err);
  e->primed = 1;
  return mtf_gen_slice_read(s, decode ? e->decode_plan : e->prefill_plan, m->next_logits, e->comm, &e->slice,
                            &e->slice_capacity, out, err);
}

int mtf_gen_engine_reorder(mtf_gen_engine *e, const int64_t *parent, mtf_error *err) {
  if (!e->cached) return MTF_OK; /* nothing kept between steps */
  for (int i = 0; i < mtf_graph_num_variables(e->g); i++) {
    mtf_tensor v = mtf_graph_variable(e->g, i);
    if (!mtf_variable_is_transient(e->g, v)) continue;
    const mtf_tensor_layout *layout = mtf_plan_layout(e->decode_plan, v);
    mtf_shape slice = mtf_layout_slice_shape(layout, mtf_plan_mesh(e->decode_plan));
    int64_t offset[MTF_MAX_RANK] = {0};
    mtf_layout_slice_offset(layout, mtf_plan_mesh(e->decode_plan), e->comm->coord, offset);
    int64_t n = mtf_shape_num_elements(&slice), rows = slice.dims[0].size, per_row = n / rows;
    float *from = malloc(sizeof(float) * (size_t)n), *to = malloc(sizeof(float) * (size_t)n);
    int rc = from && to ? mtf_session_read_slice(e->decode_s, v, from, err)
                        : mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory reordering the caches");
    for (int64_t r = 0; r < rows && rc == MTF_OK; r++) {
      int64_t source = parent[offset[0] + r] - offset[0];
      if (source < 0 || source >= rows) {
        rc = mtf_error_set(err, MTF_ERR_INVALID, "generate: a beam's parent row is on another rank");
        break;
      }
      memcpy(to + r * per_row, from + source * per_row, sizeof(float) * (size_t)per_row);
    }
    if (rc == MTF_OK) rc = mtf_session_write_variable(e->decode_s, v, to, err);
    free(from);
    free(to);
    MTF_CHECK(rc);
  }
  return MTF_OK;
}
