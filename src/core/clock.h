/* Wall-clock time for progress lines, throughput and timeouts: one monotonic clock for the whole program. */
#ifndef MTF_CORE_CLOCK_H
#define MTF_CORE_CLOCK_H

#include <stddef.h>

/* Seconds on a monotonic clock (differences are meaningful, the origin is not). */
double mtf_now_seconds(void);

/* A duration as every progress line prints it (mtf train's ETA, mtf data prepare's): "42s", "3m07s",
 * "2h05m". */
void mtf_format_duration(double seconds, char *out, size_t size);

#endif
