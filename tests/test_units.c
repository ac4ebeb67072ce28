/* Counts, bytes, rates and doubles as header and progress lines print them (core/units.h). */
#include <stdlib.h>

#include "check.h"
#include "core/units.h"

static int is(void (*format)(double, char *, size_t), double value, const char *want) {
  char text[64];
  format(value, text, sizeof text);
  if (strcmp(text, want) != 0) fprintf(stderr, "%g gave '%s', want '%s'\n", value, text, want);
  return strcmp(text, want) == 0;
}

static int rate_is(double bytes, double seconds, const char *want) {
  char text[64];
  mtf_format_rate(bytes, seconds, text, sizeof text);
  if (strcmp(text, want) != 0) fprintf(stderr, "%g B in %g s gave '%s', want '%s'\n", bytes, seconds, text, want);
  return strcmp(text, want) == 0;
}

int main(void) {
  /* A small model is not "0.000 B" parameters. */
  CHECK(is(mtf_format_count, 127296, "127.3 K"));
  CHECK(is(mtf_format_count, 0, "0"));
  CHECK(is(mtf_format_count, 999, "999"));
  CHECK(is(mtf_format_count, 1000, "1.000 K"));
  CHECK(is(mtf_format_count, 999960, "1.000 M"));
  CHECK(is(mtf_format_count, 12345678, "12.35 M"));
  CHECK(is(mtf_format_count, 124439808, "124.4 M"));
  CHECK(is(mtf_format_count, 6.7e9, "6.700 B"));
  CHECK(is(mtf_format_count, 1.8e12, "1.800 T"));
  /* A tiny checkpoint is not "0.0 MB". */
  CHECK(is(mtf_format_bytes, 812, "812 B"));
  CHECK(is(mtf_format_bytes, 523000, "523.0 kB"));
  CHECK(is(mtf_format_bytes, 1.5e6, "1.500 MB"));
  CHECK(is(mtf_format_bytes, 2.25e9, "2.250 GB"));
  /* Nor its rate "0 MB/s"; too short a time to measure says so. */
  CHECK(rate_is(523000, 0.01, "52.30 MB/s"));
  CHECK(rate_is(100, 2, "50 B/s"));
  CHECK(rate_is(1, 4, "0.25 B/s"));
  CHECK(rate_is(1e6, 0, "-"));
  CHECK(rate_is(3e9, 1.5, "2.000 GB/s"));
  /* Doubles as the config prints them: the shortest text that reads back the same. */
  CHECK(is(mtf_format_double, 0.9, "0.9"));
  CHECK(is(mtf_format_double, 0.999, "0.999"));
  CHECK(is(mtf_format_double, 3, "3"));
  CHECK(is(mtf_format_double, 3e-4, "0.0003"));
  CHECK(is(mtf_format_double, 1e-8, "1e-08"));
  CHECK(is(mtf_format_double, 0.1 + 0.2, "0.30000000000000004"));
  double values[] = {0.9, 1.0 / 3, 2.0 / 3e-7, 6.02214076e23, -1.5e-300, 0.1 + 0.2};
  for (int i = 0; i < 6; i++) {
    char text[64];
    mtf_format_double(values[i], text, sizeof text);
    CHECK(strtod(text, NULL) == values[i]);
  }
  return check_summary();
}
