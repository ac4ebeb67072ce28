/* Running sums (cumsum) over a dim, one definition for every backend's kernel: the spec of a step and one
 * row's scan (MTF_HOST_DEVICE: a CUDA thread runs a row). A whole dim is scanned in one pass. A split dim
 * takes two: STATS writes each row's total of this rank's slice into slot `slot` of out [parts, count];
 * APPLY scans the slice starting from `totals` ([parts, count], every slice's totals, allreduced) of the
 * slices before this one (after it, when `reverse`). */
#ifndef MTF_EXEC_SCAN_H
#define MTF_EXEC_SCAN_H

#include "exec/rows.h"
#include "lower/plan.h"

typedef struct mtf_scan_spec {
  mtf_rows r;
  int stats, exclusive, reverse;
  int64_t slot, parts; /* this rank's slice among parts (parts: APPLY only) */
} mtf_scan_spec;

static inline mtf_scan_spec mtf_scan_spec_of(const mtf_step *st) {
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.scan.dim);
  mtf_scan_spec sp = {r, st->phase == MTF_PHASE_STATS, st->params.scan.exclusive, st->params.scan.reverse,
                      st->dim_offset / (r.len ? r.len : 1),
                      st->phase == MTF_PHASE_APPLY ? st->in_shape[1].dims[0].size : 0};
  return sp;
}

/* One row, in double (counts of routed tokens stay exact far beyond float's 2^24); totals NULL: the dim
 * is whole. */
static inline MTF_HOST_DEVICE void mtf_scan_row(const mtf_scan_spec *sp, int64_t row, const float *in,
                                                const float *totals, float *out) {
  const mtf_rows *r = &sp->r;
  int64_t s = r->inner;
  const float *x = in + mtf_row_base(r, row);
  double sum = 0;
  if (sp->stats) {
    for (int64_t j = 0; j < r->len; j++) sum += x[j * s];
    out[sp->slot * r->count + row] = (float)sum;
    return;
  }
  if (totals)
    for (int64_t q = 0; q < sp->parts; q++)
      if (sp->reverse ? q > sp->slot : q < sp->slot) sum += totals[q * r->count + row];
  float *y = out + mtf_row_base(r, row);
  for (int64_t t = 0; t < r->len; t++) {
    int64_t j = sp->reverse ? r->len - 1 - t : t;
    if (sp->exclusive) {
      y[j * s] = (float)sum;
      sum += x[j * s];
    } else {
      sum += x[j * s];
      y[j * s] = (float)sum;
    }
  }
}

#endif
