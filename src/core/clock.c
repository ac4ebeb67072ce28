#define _POSIX_C_SOURCE 200809L
#include "core/clock.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

double mtf_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mtf_format_duration(double seconds, char *out, size_t size) {
  long long s = isfinite(seconds) && seconds > 0 ? (long long)(seconds + 0.5) : 0;
  if (s < 60)
    snprintf(out, size, "%llds", s);
  else if (s < 3600)
    snprintf(out, size, "%lldm%02llds", s / 60, s % 60);
  else
    snprintf(out, size, "%lldh%02lldm", s / 3600, s % 3600 / 60);
}
