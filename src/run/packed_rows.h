/* The segment inputs of packed sequences (data.pack, io/segments.h, model/segments.h) on their way from
 * the loader to a session: this rank's rows of segments, target segments and positions, [rows][T] each
 * like the tokens, handed to the session slice by slice as the tokens are (microbatch m: offset m * chunk). */
#ifndef MTF_RUN_PACKED_ROWS_H
#define MTF_RUN_PACKED_ROWS_H

#include <stdint.h>

#include "io/loader.h"
#include "model/transformer.h"
#include "mtf.h"

typedef struct mtf_packed_rows {
  int32_t *segments, *target_segments, *positions; /* NULL without data.pack */
} mtf_packed_rows;

/* Room for `elements` (rows x T) of each when `packed`; nothing otherwise. */
int mtf_packed_rows_alloc(mtf_packed_rows *rows, int packed, int64_t elements, mtf_error *err);
/* The batch the loader's last next() returned (nothing without data.pack). */
void mtf_packed_rows_fill(mtf_packed_rows *rows, const mtf_loader *loader);
/* Sets the model's segment inputs from the rows at `offset` (nothing when the model has none). */
int mtf_packed_rows_set(mtf_session *s, const mtf_transformer *model, const mtf_packed_rows *rows, int64_t offset,
                        mtf_error *err);
void mtf_packed_rows_free(mtf_packed_rows *rows);

#endif
