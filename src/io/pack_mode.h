/* data.pack: where a row's segment ids come from (io/segments.h, docs/DATA.md "Packed sequences"). Its own
 * header so the config (which reads it as an enum) and the loader share it without the shard reader. */
#ifndef MTF_IO_PACK_MODE_H
#define MTF_IO_PACK_MODE_H

typedef enum mtf_pack_mode {
  MTF_PACK_NONE = 0, /* windows of the token stream, no segments (a `segments` dataset is not read) */
  MTF_PACK_EOT,      /* segments from the end-of-text ids of each row */
  MTF_PACK_SEGMENTS  /* the shards' `segments` datasets (every shard must have one) */
} mtf_pack_mode;

#endif
