/* The CPU's bfloat16 products (exec/cpu/bf16.c) against a double-precision reference of the same bfloat16
 * values, in every operand order, with a sum over k short enough for one oneDNN call and long enough to run
 * slice by slice (MTF_CPU_BF16_K_SLICE; here also a slice of 16, so small products reach every slice edge),
 * and the sliced result against the whole one. A product of two bfloat16 values is exact in fp32, so the only
 * error is the fp32 accumulation: relative to the sum of |terms|, <= 1e-5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "core/bf16.h"
#include "exec/cpu/bf16.h"

static double worst;

/* c [m, n] = a b with a stored [m, k] or [k, m] (ta), b [k, n] or [n, k] (tb) */
static int check_product(int64_t m, int64_t n, int64_t k, int ta, int tb, int64_t slice) {
  mtf_bf16 *a = malloc(sizeof *a * (size_t)(m * k)), *b = malloc(sizeof *b * (size_t)(k * n));
  float *c = malloc(sizeof *c * (size_t)(m * n)), *whole = malloc(sizeof *whole * (size_t)(m * n));
  for (int64_t i = 0; i < m * k; i++) a[i] = mtf_bf16_from_float((float)(rand() % 2001 - 1000) / 1000.0f);
  for (int64_t i = 0; i < k * n; i++) b[i] = mtf_bf16_from_float((float)(rand() % 2001 - 1000) / 700.0f);
  int64_t before = mtf_cpu_bf16_set_k_slice(slice);
  int rc = mtf_cpu_bf16_product(1, m, n, k, ta, tb, a, b, c);
  mtf_cpu_bf16_set_k_slice(0);
  int rc_whole = mtf_cpu_bf16_product(1, m, n, k, ta, tb, a, b, whole);
  mtf_cpu_bf16_set_k_slice(before);
  int ok = rc == MTF_OK && rc_whole == MTF_OK;
  for (int64_t i = 0; ok && i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double sum = 0.0, size = 0.0;
      for (int64_t p = 0; p < k; p++) {
        double term = (double)mtf_float_from_bf16(a[ta ? p * m + i : i * k + p]) *
                      mtf_float_from_bf16(b[tb ? j * k + p : p * n + j]);
        sum += term;
        size += fabs(term);
      }
      double err = fabs(c[i * n + j] - sum) / (size > 0 ? size : 1.0),
             apart = fabs(c[i * n + j] - whole[i * n + j]) / (size > 0 ? size : 1.0);
      if (err > worst) worst = err;
      if (err > 1e-5 || apart > 1e-5) {
        fprintf(stderr, "  [%lld, %lld] of %lldx%lldx%lld ta %d tb %d slice %lld: %.9g, reference %.9g, whole %.9g\n",
                (long long)i, (long long)j, (long long)m, (long long)n, (long long)k, ta, tb, (long long)slice,
                c[i * n + j], sum, whole[i * n + j]);
        ok = 0;
        break;
      }
    }
  free(a);
  free(b);
  free(c);
  free(whole);
  return ok;
}

int main(void) {
  printf("path: %s\n", mtf_cpu_bf16_path());
  if (strstr(mtf_cpu_bf16_path(), "through conversion")) { /* no oneDNN products here, so no slices to test */
    printf("skipped: this CPU runs bf16 products through conversion to fp32 sgemm\n");
    return 77;
  }
  srand(7);
  int64_t shapes[][4] = {/* m, n, k, slice */
                         {5, 7, 100, 16},  {33, 17, 64, 16},   {5, 7, 40, 16},  {16, 16, 31, 16},
                         {6, 9, 5000, 0},  {6, 9, 5000, MTF_CPU_BF16_K_SLICE}, {3, 300, 4100, 1024}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t *x = shapes[s];
        char name[128];
        snprintf(name, sizeof name, "%lldx%lldx%lld ta %d tb %d, k in slices of %lld", (long long)x[0],
                 (long long)x[1], (long long)x[2], ta, tb, (long long)x[3]);
        int ok = check_product(x[0], x[1], x[2], ta, tb, x[3]);
        if (!ok) fprintf(stderr, "FAIL %s\n", name);
        CHECK(ok);
      }
  printf("worst error relative to the sum of |terms|: %.3g\n", worst);
  return check_summary();
}
