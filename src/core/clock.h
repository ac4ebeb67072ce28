/* Wall-clock time for progress lines, throughput and timeouts: one monotonic clock for the whole program. */
#ifndef MTF_CORE_CLOCK_H
#define MTF_CORE_CLOCK_H

/* Seconds on a monotonic clock (differences are meaningful, the origin is not). */
double mtf_now_seconds(void);

#endif
