/* Quantities as progress and header lines print them: counts, bytes and byte rates with a unit chosen by
 * size, so that a small model or a tiny checkpoint never shows as "0.000 B" or "0 MB/s". */
#ifndef MTF_CORE_UNITS_H
#define MTF_CORE_UNITS_H

#include <stddef.h>

/* A count with an SI multiplier and about four significant digits: "812", "127.3 K", "12.35 M", "1.235 B"
 * (B for billion, as parameter counts are quoted). */
void mtf_format_count(double count, char *out, size_t size);

/* Bytes in decimal units: "812 B", "127.3 kB", "12.35 MB", "1.235 GB", "2.5 TB". */
void mtf_format_bytes(double bytes, char *out, size_t size);

/* A byte rate, the same units per second ("8.4 MB/s"); "-" where the time is too short to measure. */
void mtf_format_rate(double bytes, double seconds, char *out, size_t size);

/* A double as the shortest decimal that reads back as the same double ("0.9", not "0.90000000000000002"). */
void mtf_format_double(double value, char *out, size_t size);

#endif
