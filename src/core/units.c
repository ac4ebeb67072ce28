/* Quantities with units for humans (units.h). */
#include "core/units.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* value / scale with four significant digits, no trailing exponent. */
static void scaled(double value, double scale, const char *unit, char *out, size_t size) {
  double v = value / scale;
  int decimals = fabs(v) >= 100 ? 1 : fabs(v) >= 10 ? 2 : 3;
  snprintf(out, size, "%.*f %s", decimals, v, unit);
}

static void with_prefix(double value, const char *const units[5], int plain_integer, char *out, size_t size) {
  double a = fabs(value);
  if (!isfinite(value)) snprintf(out, size, "%g", value);
  else if (a < 1e3) {
    if (plain_integer) snprintf(out, size, "%.0f%s%s", value, units[0][0] ? " " : "", units[0]);
    else snprintf(out, size, "%.3g%s%s", value, units[0][0] ? " " : "", units[0]);
  } else if (a < 999.95e3) scaled(value, 1e3, units[1], out, size);
  else if (a < 999.95e6) scaled(value, 1e6, units[2], out, size);
  else if (a < 999.95e9) scaled(value, 1e9, units[3], out, size);
  else scaled(value, 1e12, units[4], out, size);
}

void mtf_format_count(double count, char *out, size_t size) {
  static const char *const units[5] = {"", "K", "M", "B", "T"};
  with_prefix(count, units, 1, out, size);
}

void mtf_format_bytes(double bytes, char *out, size_t size) {
  static const char *const units[5] = {"B", "kB", "MB", "GB", "TB"};
  with_prefix(bytes, units, 1, out, size);
}

void mtf_format_rate(double bytes, double seconds, char *out, size_t size) {
  static const char *const units[5] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  if (!(seconds > 1e-6)) {
    snprintf(out, size, "-");
    return;
  }
  with_prefix(bytes / seconds, units, 0, out, size);
}

void mtf_format_double(double value, char *out, size_t size) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(out, size, "%.*g", digits, value);
    if (strtod(out, NULL) == value) return;
  }
}
