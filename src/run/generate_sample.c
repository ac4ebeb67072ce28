/* On-rank token choice: see generate_sample.h. Every function here makes the same collectives in the same
 * order on every rank (the counts depend only on the global row count and the options). */
#include "run/generate_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

int mtf_gen_slice_read(const mtf_session *s, const mtf_plan *plan, mtf_tensor t, const mtf_comm *comm,
                       float **buffer, int64_t *capacity, mtf_gen_slice *out, mtf_error *err) {
  const mtf_tensor_layout *layout = mtf_plan_layout(plan, t);
  const mtf_shape *mesh = mtf_plan_mesh(plan);
  if (!layout || layout->shape.rank != 2)
    return mtf_error_set(err, MTF_ERR_INVALID, "generate: the next-token logits are not a [batch, vocab] tensor of the plan");
  mtf_shape slice = mtf_layout_slice_shape(layout, mesh);
  int64_t offset[MTF_MAX_RANK] = {0};
  mtf_layout_slice_offset(layout, mesh, comm->coord, offset);
  int64_t elements = mtf_shape_num_elements(&slice);
  if (elements > *capacity) {
    float *grown = realloc(*buffer, sizeof(float) * (size_t)elements);
    if (!grown) return mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory for the logits slice");
    *buffer = grown;
    *capacity = elements;
  }
  MTF_CHECK(mtf_session_read_slice(s, t, *buffer, err));
  mtf_axis_set split = mtf_layout_split_axes(layout);
  int counts = 1;
  for (int a = 0; a < mesh->rank; a++)
    if (!(split & (1u << a)) && comm->coord[a] != 0) counts = 0;
  *out = (mtf_gen_slice){.logits = *buffer, .row_offset = offset[0], .rows = slice.dims[0].size,
                         .vocab_offset = offset[1], .vocab_count = slice.dims[1].size,
                         .total_rows = layout->shape.dims[0].size, .vocab = layout->shape.dims[1].size,
                         .counts = counts};
  return MTF_OK;
}

/* A monotone map of floats to unsigned keys: a < b exactly when key(a) < key(b) (no NaNs here). */
static uint32_t order_key(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

static int all_reduce(mtf_comm *comm, double *values, int64_t n, mtf_reduce_op op, mtf_error *err) {
  return mtf_comm_allreduce(comm, mtf_mesh_all_axes(&comm->mesh), values, values, (size_t)n, MTF_F64, op, err);
}

static const float *row_of(const mtf_gen_slice *s, int64_t local) { return s->logits + local * s->vocab_count; }

/* Row maxima M and partition sums Z = sum exp((l - M) / temperature) over the whole vocabulary. */
static int max_and_sum(mtf_comm *comm, const mtf_gen_slice *s, double temperature, double *max, double *sum,
                       mtf_error *err) {
  int64_t R = s->total_rows;
  for (int64_t r = 0; r < R; r++) max[r] = -INFINITY, sum[r] = 0;
  for (int64_t i = 0; i < s->rows; i++) {
    const float *l = row_of(s, i);
    double m = -INFINITY;
    for (int64_t v = 0; v < s->vocab_count; v++)
      if (l[v] > m) m = l[v];
    max[s->row_offset + i] = m;
  }
  MTF_CHECK(all_reduce(comm, max, R, MTF_REDUCE_MAX, err));
  if (s->counts)
    for (int64_t i = 0; i < s->rows; i++) {
      const float *l = row_of(s, i);
      double z = 0, m = max[s->row_offset + i];
      for (int64_t v = 0; v < s->vocab_count; v++) z += exp((l[v] - m) / temperature);
      sum[s->row_offset + i] = z;
    }
  return all_reduce(comm, sum, R, MTF_REDUCE_SUM, err);
}

/* For each row, the largest key t with sum over {v : key(l_v) >= t} of weight(v) >= target[r], where
 * weight is 1 (mass 0) or exp((l - max) / temperature) (mass 1): bisection over the 32-bit keys. */
static int threshold(mtf_comm *comm, const mtf_gen_slice *s, int mass, const double *max, double temperature,
                     const double *target, uint32_t *out, mtf_error *err) {
  int64_t R = s->total_rows;
  uint64_t *lo = malloc(sizeof(uint64_t) * (size_t)R), *hi = malloc(sizeof(uint64_t) * (size_t)R);
  double *f = malloc(sizeof(double) * (size_t)R);
  int rc = lo && hi && f ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  for (int64_t r = 0; r < R && rc == MTF_OK; r++) lo[r] = 0, hi[r] = UINT32_MAX; /* F(lo) >= target always */
  for (int iteration = 0; iteration < 32 && rc == MTF_OK; iteration++) {
    for (int64_t r = 0; r < R; r++) f[r] = 0;
    if (s->counts)
      for (int64_t i = 0; i < s->rows; i++) {
        int64_t r = s->row_offset + i;
        uint64_t mid = (lo[r] + hi[r] + 1) / 2;
        const float *l = row_of(s, i);
        double acc = 0;
        for (int64_t v = 0; v < s->vocab_count; v++)
          if (order_key(l[v]) >= mid) acc += mass ? exp((l[v] - max[r]) / temperature) : 1.0;
        f[r] = acc;
      }
    rc = all_reduce(comm, f, R, MTF_REDUCE_SUM, err);
    for (int64_t r = 0; r < R && rc == MTF_OK; r++) {
      uint64_t mid = (lo[r] + hi[r] + 1) / 2;
      if (lo[r] == hi[r]) continue;
      if (f[r] >= target[r]) lo[r] = mid;
      else hi[r] = mid - 1;
    }
  }
  for (int64_t r = 0; r < R && rc == MTF_OK; r++) out[r] = (uint32_t)lo[r];
  free(lo);
  free(hi);
  free(f);
  return rc;
}

static double gumbel(uint64_t seed, int64_t row_key, int64_t step, int64_t id) {
  double u = mtf_uniform01(seed, mtf_hash64((uint64_t)row_key + 1, (uint64_t)step), (uint64_t)id);
  return -log(-log(u));
}

int mtf_gen_sample(mtf_comm *comm, const mtf_gen_slice *s, const mtf_gen_sampling *opt, int64_t step,
                   const int64_t *row_keys, int32_t *ids, double *logprobs, mtf_error *err) {
  int64_t R = s->total_rows, vocab_total = s->vocab;
  double *max = malloc(sizeof(double) * (size_t)R), *sum = malloc(sizeof(double) * (size_t)R);
  double *best = malloc(sizeof(double) * (size_t)R), *work = malloc(sizeof(double) * (size_t)R);
  uint32_t *cut = malloc(sizeof(uint32_t) * (size_t)R), *cut2 = malloc(sizeof(uint32_t) * (size_t)R);
  int rc = max && sum && best && work && cut && cut2 ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  int greedy = opt->temperature <= 0;
  if (rc == MTF_OK) rc = max_and_sum(comm, s, 1.0, max, sum, err);
  for (int64_t r = 0; r < R && rc == MTF_OK; r++) cut[r] = 0;
  if (rc == MTF_OK && !greedy && opt->top_k > 0 && opt->top_k < vocab_total) {
    for (int64_t r = 0; r < R; r++) work[r] = (double)opt->top_k;
    rc = threshold(comm, s, 0, max, 1.0, work, cut, err);
  }
  if (rc == MTF_OK && !greedy && opt->top_p < 1.0) {
    double *sum_t = best; /* reused: the partition sums at the temperature */
    rc = max_and_sum(comm, s, opt->temperature, work, sum_t, err);
    for (int64_t r = 0; r < R && rc == MTF_OK; r++) sum_t[r] *= opt->top_p;
    if (rc == MTF_OK) rc = threshold(comm, s, 1, work, opt->temperature, sum_t, cut2, err);
    for (int64_t r = 0; r < R && rc == MTF_OK; r++)
      if (cut2[r] > cut[r]) cut[r] = cut2[r];
  }
  /* The best score per row, then the smallest id reaching it, then its logit. Greedy's best score is the
   * row maximum, already agreed (two allreduces fewer per token). */
  for (int64_t r = 0; r < R; r++) best[r] = greedy ? max[r] : -INFINITY;
  for (int64_t i = 0; i < s->rows && rc == MTF_OK && !greedy; i++) {
    int64_t r = s->row_offset + i;
    const float *l = row_of(s, i);
    for (int64_t v = 0; v < s->vocab_count; v++) {
      if (order_key(l[v]) < cut[r]) continue;
      double score = greedy ? l[v] : l[v] / opt->temperature + gumbel(opt->seed, row_keys[r], step, s->vocab_offset + v);
      if (score > best[r]) best[r] = score;
    }
  }
  if (rc == MTF_OK && !greedy) rc = all_reduce(comm, best, R, MTF_REDUCE_MAX, err);
  for (int64_t r = 0; r < R; r++) work[r] = -INFINITY;
  for (int64_t i = 0; i < s->rows && rc == MTF_OK; i++) {
    int64_t r = s->row_offset + i;
    const float *l = row_of(s, i);
    for (int64_t v = 0; v < s->vocab_count; v++) {
      if (order_key(l[v]) < cut[r]) continue;
      double score = greedy ? l[v] : l[v] / opt->temperature + gumbel(opt->seed, row_keys[r], step, s->vocab_offset + v);
      if (score == best[r]) {
        work[r] = fmax(work[r], -(double)(s->vocab_offset + v));
        break;
      }
    }
  }
  if (rc == MTF_OK) rc = all_reduce(comm, work, R, MTF_REDUCE_MAX, err);
  for (int64_t r = 0; r < R && rc == MTF_OK; r++) ids[r] = (int32_t)(-work[r]);
  for (int64_t r = 0; r < R; r++) work[r] = greedy ? max[r] : -INFINITY;
  for (int64_t i = 0; i < s->rows && rc == MTF_OK && !greedy; i++) {
    int64_t r = s->row_offset + i, v = ids[r] - s->vocab_offset;
    if (v >= 0 && v < s->vocab_count) work[r] = row_of(s, i)[v];
  }
  if (rc == MTF_OK && !greedy) rc = all_reduce(comm, work, R, MTF_REDUCE_MAX, err);
  for (int64_t r = 0; r < R && rc == MTF_OK; r++) logprobs[r] = work[r] - max[r] - log(sum[r]);
  free(max);
  free(sum);
  free(best);
  free(work);
  free(cut);
  free(cut2);
  return rc;
}

int mtf_gen_top_candidates(mtf_comm *comm, const mtf_gen_slice *s, const double *base, int64_t group, int n,
                           double *out_score, int64_t *out_row, int32_t *out_id, mtf_error *err) {
  int64_t R = s->total_rows, groups = R / group;
  double *max = malloc(sizeof(double) * (size_t)R), *sum = malloc(sizeof(double) * (size_t)R);
  double *work = malloc(sizeof(double) * (size_t)groups);
  int rc = max && sum && work ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory");
  if (rc == MTF_OK) rc = max_and_sum(comm, s, 1.0, max, sum, err);
  for (int k = 0; k < n && rc == MTF_OK; k++) {
    /* Round k: the best candidate not taken in rounds 0..k-1, by score then by (row, id). */
    for (int pass = 0; pass < 2 && rc == MTF_OK; pass++) {
      for (int64_t q = 0; q < groups; q++) work[q] = -INFINITY;
      for (int64_t i = 0; i < s->rows; i++) {
        int64_t r = s->row_offset + i, q = r / group;
        double lse = max[r] + log(sum[r]);
        const float *l = row_of(s, i);
        for (int64_t v = 0; v < s->vocab_count; v++) {
          int64_t id = s->vocab_offset + v;
          double score = base[r] + (l[v] - lse);
          int taken = 0;
          for (int j = 0; j < k && !taken; j++) taken = out_row[q * n + j] == r && out_id[q * n + j] == id;
          if (taken) continue;
          if (pass == 0) {
            if (score > work[q]) work[q] = score;
          } else if (score == out_score[q * n + k]) {
            work[q] = fmax(work[q], -((double)r * 4294967296.0 + (double)id)); /* smallest (row, id) */
          }
        }
      }
      rc = all_reduce(comm, work, groups, MTF_REDUCE_MAX, err);
      for (int64_t q = 0; q < groups && rc == MTF_OK; q++) {
        if (pass == 0) {
          out_score[q * n + k] = work[q];
        } else {
          double code = -work[q];
          out_row[q * n + k] = (int64_t)floor(code / 4294967296.0);
          out_id[q * n + k] = (int32_t)(code - (double)out_row[q * n + k] * 4294967296.0);
        }
      }
    }
  }
  free(max);
  free(sum);
  free(work);
  return rc;
}
