/* Sharded HDF5 checkpoints (docs/CHECKPOINTS.md).
 *
 * One HDF5 file per saved step, written collectively by every rank through MPI-IO: each variable and
 * optimizer slot is one float32 dataset at its logical (global) shape under /variables, each rank writes
 * the hyperslab it owns, and a slice replicated over several ranks is written by the one at coordinate 0
 * of every axis it is replicated over. Restoring reads each rank's own hyperslabs, so a checkpoint
 * written on one mesh and layout restores on any other.
 *
 * Atomicity: a checkpoint is written as NAME.tmp, flushed and closed, fsynced, renamed to NAME, and only
 * then does RUN_DIR/checkpoints/latest (a one-line text file, itself replaced by rename) name it. A crash
 * at any moment leaves `latest` naming a complete file.
 *
 * Every function here that takes a comm is collective over all its ranks (which are the whole job's, see comm/world.h) and
 * returns the same code and message on every rank. HDF5 calls hold mtf_hdf5_lock (io/shard.h), so they
 * may run while a loader prefetches. */
#ifndef MTF_CKPT_CHECKPOINT_H
#define MTF_CKPT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "io/decode_table.h"
#include "io/loader.h"
#include "mtf.h"

#define MTF_CKPT_FORMAT_VERSION 1
#define MTF_CKPT_PATH_MAX (MTF_CONFIG_PATH + 64)

/* Everything besides the variables that a resumed run needs to continue exactly. */
typedef struct mtf_ckpt_state {
  int64_t step;             /* steps completed */
  uint64_t rng_seed;        /* dropout masks are keyed on (rng_seed, step, global index) */
  uint64_t rng_offset;      /* the random offset of the last completed step (= step) */
  mtf_loader_cursor cursor; /* the training data's next batch */
} mtf_ckpt_state;

/* The variables to save or restore: every variable of `graph` (mtf_graph_variable) but the transient ones
 * (mtf_transient_variable: gradient accumulators, zero between steps), with this rank's
 * slices in `session` under `plan`'s layouts. Values pass through a host buffer (mtf_session_read_slice,
 * mtf_session_write_variable), so any backend's session can be saved and restored. `params` lists the model parameters; the other variables are
 * optimizer slots (a restore for evaluation needs only the parameters). */
typedef struct mtf_ckpt_model {
  const mtf_graph *graph;
  const mtf_plan *plan;
  mtf_session *session;
  mtf_comm *comm;
  const mtf_tensor *params;
  int n_params;
} mtf_ckpt_model;

/* Byte counts and times of the last save or restore on this rank (for logs and benchmarks). */
typedef struct mtf_ckpt_stats {
  int64_t bytes;  /* logical bytes of all datasets */
  double seconds; /* wall time, from create/open to close (slowest rank) */
} mtf_ckpt_stats;

/* Writes the checkpoint of `state` into dir (created if needed) as ckpt-<step>.h5, points dir/latest at
 * it, and then deletes the oldest checkpoints so that `keep` remain (never one newer than this one).
 * The resolved config is stored with it. path_out and stats (may be NULL) receive its path and timing. */
int mtf_ckpt_save(const mtf_ckpt_model *model, const mtf_config *cfg, const mtf_ckpt_state *state, const char *dir,
                  int64_t keep, char *path_out, size_t path_size, mtf_ckpt_stats *stats, mtf_error *err);

/* Reads the checkpoint at path into the session's variables and state. With `need_slots` every variable
 * of the graph must be in the file and the file may hold no other (training); without, only parameters
 * are needed (evaluation). Returns MTF_ERR_INVALID when the model differs (naming the variable) and
 * MTF_ERR_IO when the file is damaged or incomplete. */
int mtf_ckpt_restore(const mtf_ckpt_model *model, const char *path, int need_slots, mtf_ckpt_state *state,
                     mtf_ckpt_stats *stats, mtf_error *err);

/* Restores the newest good checkpoint of dir: the file `latest` names, else (when it is damaged) the
 * older ones by step. Damaged files are reported on rank 0's stderr and left as they are; when every one
 * is damaged it fails (MTF_ERR_IO). *found is 0 (and MTF_OK returned) when dir holds no checkpoint;
 * path_out and stats (either may be NULL) receive the restored file and its read time. */
int mtf_ckpt_restore_latest(const mtf_ckpt_model *model, const char *dir, int need_slots, mtf_ckpt_state *state,
                            int *found, char *path_out, size_t path_size, mtf_ckpt_stats *stats, mtf_error *err);

/* The tokenizer a checkpoint was trained with, copied from its training shards into the group /tokenizer
 * (attributes tokenizer, eot_id, vocab_size; the decode table's two datasets when the shards carry one),
 * so that `mtf generate` needs no data directory. */
typedef struct mtf_ckpt_tokenizer {
  int present;           /* 0: no /tokenizer group (older checkpoints, or data without a tokenizer name) */
  int64_t vocab_size;    /* -1 when unknown */
  mtf_decode_table table; /* table.count is 0 without a decode table; eot_id and tokenizer are always set */
} mtf_ckpt_tokenizer;

/* One process, no MPI, any rank: reads path's /tokenizer group, checking every attribute's class, width
 * and size and the table as io/decode_table.h does. A checkpoint without the group gives present = 0. */
int mtf_ckpt_read_tokenizer(const char *path, mtf_ckpt_tokenizer *out, mtf_error *err);
void mtf_ckpt_tokenizer_free(mtf_ckpt_tokenizer *tok);

/* What mtf_ckpt_save writes into /tokenizer for a run whose training data is `spec` (cfg data.train): the
 * first shard's tokenizer name, eot_id, vocab_size and decode table, read once per process and kept.
 * Shards that disagree, or data that cannot be read, give present = 0 and a warning in *warning (empty
 * otherwise): a checkpoint is never refused over its tokenizer. */
const mtf_ckpt_tokenizer *mtf_ckpt_tokenizer_of_data(const char *spec, char *warning, size_t warning_size);

/* One process, no MPI: prints a checkpoint's step, state, mesh, layout, config and datasets. */
int mtf_ckpt_inspect(const char *path, int json, FILE *out, mtf_error *err);
/* One process, no MPI: the YAML of the config the checkpoint was written with (*text malloc'ed, freed by the
 * caller; NULL on error). */
int mtf_ckpt_read_config(const char *path, char **text, mtf_error *err);

/* One process, no MPI: reads every dataset of /variables and compares it with its `checksum` attribute;
 * prints a line per bad dataset and a summary to out. MTF_ERR_IO (naming the first bad dataset) when any
 * fails or lacks a checksum, or the file is not a complete checkpoint. */
int mtf_ckpt_verify(const char *path, FILE *out, mtf_error *err);

/* ---- the checkpoint directory (ckpt_dir.c; rank 0 only, plain POSIX) ---- */

/* Checkpoint files of dir, newest first: the file `latest` names, then the others older than it by
 * (step, sequence), however many there are. Returns the count and *names (malloc'ed, freed by the
 * caller; file names inside dir), or -1. */
int mtf_ckpt_dir_candidates(const char *dir, char (**names)[MTF_CKPT_PATH_MAX], mtf_error *err);
/* A checkpoint as a user may name it, as the file it means: a checkpoint file itself; a checkpoints
 * directory's `latest` (the file it names, beside it); a checkpoints directory (the file `latest` names,
 * else its newest); a run directory (the same in its checkpoints/). A path that does not exist is written
 * back as given, for the open to report. MTF_ERR_IO where a directory holds no checkpoint or `latest`
 * names none. */
int mtf_ckpt_resolve(const char *given, char *out, size_t size, mtf_error *err);
/* Removes a stale dir/name.tmp (a file or a planted link, never followed) before a new write of name. */
int mtf_ckpt_dir_clear_tmp(const char *dir, const char *name, mtf_error *err);
/* A name for step's checkpoint that no file in dir has: ckpt-00000010.h5, else ckpt-00000010-1.h5, ... */
int mtf_ckpt_dir_new_name(const char *dir, int64_t step, char *name, size_t size, mtf_error *err);
/* Renames dir/name.tmp to dir/name (fsyncing file and directory) and points dir/latest at it. */
int mtf_ckpt_dir_commit(const char *dir, const char *name, mtf_error *err);
/* Deletes all but the `keep` newest checkpoints that are not newer than `name`. */
void mtf_ckpt_dir_prune(const char *dir, const char *name, int64_t keep);
int mtf_ckpt_dir_make(const char *dir, mtf_error *err);
/* A fresh start's checkpoint directory: where dir holds checkpoints, renames it (with `latest` and everything
 * in it) to dir.previous-YYYYMMDD-HHMMSS (UTC; -1, -2, ... where taken), so that neither a restart nor a
 * fallback past a damaged file can resume the earlier run, and nothing of it is lost. *count: the
 * checkpoints moved (0: nothing done, moved_to ""). */
int mtf_ckpt_dir_set_aside(const char *dir, char *moved_to, size_t size, int *count, mtf_error *err);

#endif
