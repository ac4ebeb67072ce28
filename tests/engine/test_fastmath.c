/* The CPU kernels' exp, tanh, sigmoid and gelu (src/exec/cpu/fastmath.h) against libm in double precision:
 * a dense sweep of each function's range (evenly spaced points, every float near the edges and the
 * polynomial switch, and magnitudes from 2^-40 up) and the special values (+-0, +-inf, NaN, overflow,
 * underflow to subnormals and 0). The bounds, as measured ulp-level errors with some margin:
 *   exp      relative error <= 1.5e-7 where the result is a normal float; <= 1 ulp of 2^-149 absolute
 *            where it is subnormal; +inf exactly where exp overflows float, 0 for x < -104
 *   tanh     absolute error <= 1e-6 and relative error <= 3e-7 (x != 0)
 *   sigmoid  relative error <= 3e-7 (x > -87, where it is a normal float)
 *   gelu, gelu' absolute error <= 1e-6 * max(1, |x|)
 * (measured: 8.2e-8, 0.75 ulp, 7.7e-8 / 1.4e-7, 1.5e-7, 1.1e-7 / 1.3e-7). The test of the test: each
 * checker is also run on a slightly wrong function (the right one times 1 + 2e-7, or plus 2e-6) and must
 * reject it. Built twice by CTest: as configured, and without FMA
 * (the portable build's code path) where the compiler allows. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "../check.h"
#include "exec/cpu/fastmath.h"

typedef float (*fn32)(float);

typedef struct worst {
  double rel, abs;
  float at_rel, at_abs;
  int64_t bad_special;
} worst;

/* Points of the sweep: calls visit(x) for each. */
typedef void (*visit_fn)(float x, void *ctx);

static void sweep(float lo, float hi, visit_fn visit, void *ctx) {
  const int64_t n = 2000000;
  for (int64_t i = 0; i <= n; i++) visit(lo + (float)((double)(hi - lo) * (double)i / (double)n), ctx);
  /* every float around a few points: the ends, zero, and given interior points */
  const float around[] = {lo, hi, 0.0f, -0.625f, 0.625f, -87.33654f, 88.72283f, -103.27893f, 0.3125f, -0.3125f};
  for (size_t k = 0; k < sizeof around / sizeof around[0]; k++) {
    float x = around[k];
    for (int i = 0; i < 20000; i++) x = nextafterf(x, -INFINITY);
    for (int i = 0; i < 40000; i++, x = nextafterf(x, INFINITY))
      if (x >= lo && x <= hi) visit(x, ctx);
  }
  for (int e = -40; e <= 7; e++) /* magnitudes */
    for (int m = 0; m < 4096; m++) {
      float x = ldexpf(1.0f + (float)m / 4096.0f, e);
      if (x <= hi) visit(x, ctx);
      if (-x >= lo) visit(-x, ctx);
    }
}

/* exp: relative error in the normal range, absolute below, inf where it overflows. */
typedef struct exp_ctx {
  fn32 f;
  worst w;
} exp_ctx;

static void visit_exp(float x, void *p) {
  exp_ctx *c = p;
  double want = exp((double)x);
  float got = c->f(x);
  if ((float)want == INFINITY) { /* beyond FLT_MAX after rounding */
    if (got != INFINITY && !(want < (double)FLT_MAX * (1 + 2e-7))) c->w.bad_special++;
    return;
  }
  if (want >= FLT_MIN) {
    double rel = fabs((double)got - want) / want;
    if (!(rel <= c->w.rel)) c->w.rel = isnan(rel) ? INFINITY : rel, c->w.at_rel = x;
  } else {
    double abs_err = fabs((double)got - want) / ldexp(1.0, -149); /* in subnormal ulps */
    if (!(abs_err <= c->w.abs)) c->w.abs = isnan(abs_err) ? INFINITY : abs_err, c->w.at_abs = x;
  }
}

static worst check_exp(fn32 f) {
  exp_ctx c = {.f = f};
  sweep(-110.0f, 89.0f, visit_exp, &c);
  return c.w;
}

/* The other functions: relative and absolute error against a double reference. */
typedef struct gen_ctx {
  fn32 f;
  double (*ref)(double);
  double abs_scale_with_x; /* 1: absolute error is divided by max(1, |x|) */
  double rel_floor;        /* relative error only where |want| >= this */
  worst w;
} gen_ctx;

static void visit_gen(float x, void *p) {
  gen_ctx *c = p;
  double want = c->ref((double)x), got = c->f(x);
  double abs_err = fabs(got - want) / (c->abs_scale_with_x ? fmax(1.0, fabs((double)x)) : 1.0);
  if (!(abs_err <= c->w.abs)) c->w.abs = isnan(abs_err) ? INFINITY : abs_err, c->w.at_abs = x;
  if (fabs(want) >= c->rel_floor && want != 0) {
    double rel = fabs(got - want) / fabs(want);
    if (!(rel <= c->w.rel)) c->w.rel = isnan(rel) ? INFINITY : rel, c->w.at_rel = x;
  }
}

static worst check_gen(fn32 f, double (*ref)(double), float lo, float hi, int scale_with_x, double rel_floor) {
  gen_ctx c = {.f = f, .ref = ref, .abs_scale_with_x = scale_with_x, .rel_floor = rel_floor};
  sweep(lo, hi, visit_gen, &c);
  return c.w;
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double ref_gelu_grad(double x) {
  double c = 0.7978845608028654, t = tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

static float f_exp(float x) { return mtf_expf(x); }
static float f_tanh(float x) { return mtf_tanhf(x); }
static float f_sigmoid(float x) { return mtf_sigmoidf(x); }
static float f_gelu(float x) { return mtf_geluf(x); }
static float f_gelu_grad(float x) { return mtf_gelu_gradf(x); }
static float f_gelu_sigmoid(float x) { return mtf_gelu_sigmoid_formf(x); }
static float f_gelu_grad_sigmoid(float x) { return mtf_gelu_grad_sigmoid_formf(x); }
/* Slightly wrong versions, which the checks must reject. */
static float bad_exp(float x) { return mtf_expf(x) * (1.0f + 2.4e-7f); }
static float bad_tanh(float x) { return mtf_tanhf(x) + (x > 3.0f ? -2e-6f : 0.0f); }
static float bad_sigmoid(float x) { return mtf_sigmoidf(x) * (1.0f + 2.4e-7f); }
static float bad_gelu(float x) { return mtf_geluf(x) + 2e-6f; }

static int is_neg_zero(float x) { return x == 0.0f && signbit(x); }

static void special_values(void) {
  CHECK(mtf_expf(-INFINITY) == 0.0f);
  CHECK(mtf_expf(INFINITY) == INFINITY);
  CHECK(isnan(mtf_expf(NAN)) && isnan(mtf_expf(-NAN)));
  CHECK(mtf_expf(0.0f) == 1.0f && mtf_expf(-0.0f) == 1.0f);
  CHECK(mtf_expf(88.72283f) < INFINITY && mtf_expf(88.72284f) == INFINITY && mtf_expf(1000.0f) == INFINITY);
  CHECK(mtf_expf(-87.3f) >= FLT_MIN);                               /* still normal */
  CHECK(mtf_expf(-100.0f) > 0.0f && mtf_expf(-100.0f) < FLT_MIN);   /* subnormal, not flushed */
  CHECK(mtf_expf(-104.0f) == 0.0f && mtf_expf(-1e30f) == 0.0f);
  CHECK(mtf_expf(1.0f) == 2.71828182845904523536f);
  CHECK(mtf_tanhf(INFINITY) == 1.0f && mtf_tanhf(-INFINITY) == -1.0f);
  CHECK(mtf_tanhf(30.0f) == 1.0f && mtf_tanhf(-30.0f) == -1.0f && mtf_tanhf(1e30f) == 1.0f);
  CHECK(isnan(mtf_tanhf(NAN)));
  CHECK(mtf_tanhf(0.0f) == 0.0f && is_neg_zero(mtf_tanhf(-0.0f)));
  CHECK(mtf_tanhf(1e-30f) == 1e-30f && mtf_tanhf(-1e-30f) == -1e-30f); /* tanh x = x below ulp level */
  CHECK(mtf_sigmoidf(-INFINITY) == 0.0f && mtf_sigmoidf(INFINITY) == 1.0f && isnan(mtf_sigmoidf(NAN)));
  CHECK(mtf_sigmoidf(0.0f) == 0.5f && mtf_sigmoidf(200.0f) == 1.0f && mtf_sigmoidf(-200.0f) == 0.0f);
  CHECK(isnan(mtf_geluf(NAN)) && mtf_geluf(0.0f) == 0.0f && mtf_geluf(50.0f) == 50.0f && mtf_geluf(-50.0f) == 0.0f);
  CHECK(isnan(mtf_gelu_gradf(NAN)) && mtf_gelu_gradf(50.0f) == 1.0f && mtf_gelu_gradf(-50.0f) == 0.0f);
  CHECK(isnan(mtf_gelu_sigmoid_formf(NAN)) && mtf_gelu_sigmoid_formf(0.0f) == 0.0f &&
        mtf_gelu_sigmoid_formf(50.0f) == 50.0f && mtf_gelu_sigmoid_formf(-50.0f) == 0.0f);
  CHECK(isnan(mtf_gelu_grad_sigmoid_formf(NAN)) && mtf_gelu_grad_sigmoid_formf(50.0f) == 1.0f &&
        mtf_gelu_grad_sigmoid_formf(-50.0f) == 0.0f);
  /* odd symmetry of tanh, exactly */
  int odd = 1;
  for (float x = 1e-3f; x < 12.0f; x *= 1.001f) odd &= mtf_tanhf(-x) == -mtf_tanhf(x);
  CHECK(odd);
}

static void report(const char *name, worst w) {
  printf("%-9s max relative error %.3e (x = %.9g), max absolute %.3e (x = %.9g), special-value failures %lld\n",
         name, w.rel, (double)w.at_rel, w.abs, (double)w.at_abs, (long long)w.bad_special);
}

int main(void) {
#ifdef __FMA__
  printf("fastmath with FMA\n");
#else
  printf("fastmath without FMA\n");
#endif
  special_values();

  worst e = check_exp(f_exp);
  report("exp", e);
  CHECK(e.rel <= 1.5e-7);
  CHECK(e.abs <= 1.0); /* subnormal ulps */
  CHECK(e.bad_special == 0);

  worst t = check_gen(f_tanh, tanh, -20.0f, 20.0f, 0, 0.0);
  report("tanh", t);
  CHECK(t.abs <= 1e-6);
  CHECK(t.rel <= 3e-7);

  worst s = check_gen(f_sigmoid, ref_sigmoid, -87.0f, 40.0f, 0, 0.0);
  report("sigmoid", s);
  CHECK(s.rel <= 3e-7);

  worst g = check_gen(f_gelu, ref_gelu, -20.0f, 20.0f, 1, INFINITY);
  report("gelu", g);
  CHECK(g.abs <= 1e-6);
  worst gg = check_gen(f_gelu_grad, ref_gelu_grad, -20.0f, 20.0f, 1, INFINITY);
  report("gelu'", gg);
  CHECK(gg.abs <= 1e-6);
  worst gs = check_gen(f_gelu_sigmoid, ref_gelu, -20.0f, 20.0f, 1, INFINITY);
  report("gelu (sigmoid form)", gs);
  CHECK(gs.abs <= 1e-6);
  worst ggs = check_gen(f_gelu_grad_sigmoid, ref_gelu_grad, -20.0f, 20.0f, 1, INFINITY);
  report("gelu' (sigmoid form)", ggs);
  CHECK(ggs.abs <= 1e-6);

  /* the checks reject slightly wrong functions */
  worst be = check_exp(bad_exp), bt = check_gen(bad_tanh, tanh, -20.0f, 20.0f, 0, 0.0);
  worst bs = check_gen(bad_sigmoid, ref_sigmoid, -87.0f, 40.0f, 0, 0.0);
  worst bg = check_gen(bad_gelu, ref_gelu, -20.0f, 20.0f, 1, INFINITY);
  printf("test of the test: a wrong exp has relative error %.2e, tanh absolute %.2e, sigmoid relative %.2e, "
         "gelu absolute %.2e\n", be.rel, bt.abs, bs.rel, bg.abs);
  CHECK(be.rel > 1.5e-7);
  CHECK(bt.abs > 1e-6);
  CHECK(bs.rel > 3e-7);
  CHECK(bg.abs > 1e-6);
  return check_summary();
}
