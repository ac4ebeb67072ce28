/* What `mtf train`, `mtf eval` and `mtf generate` share (internal to src/run): the communicator over the
 * job, sessions on the configured backend, the one-line backend report, the data loader and the
 * checkpoint directory. Everything here is collective over the job and fails alike on every rank (a
 * failure on one rank alone is agreed first, so its message, prefixed "rank k: ", reaches every rank). */
#ifndef MTF_RUN_SETUP_H
#define MTF_RUN_SETUP_H

#include <stdint.h>

#include "ckpt/checkpoint.h"
#include "config/config.h"
#include "io/loader.h"
#include "mtf.h"
#include "run/packed_rows.h"
#include "run/program.h"

/* Session options for cfg: backend.kind, and backend.threads resolved for the ranks on this node.
 * Collective the first time (it counts the ranks on the node). */
mtf_session_options mtf_run_session_options(const mtf_config *cfg);
/* The backend section as a backend's options (mtf_backend_describe; threads unresolved; not collective). */
mtf_backend_options mtf_run_backend_options(const mtf_config *cfg);

/* On rank 0, one line "backend: cpu, 2 ranks x 1 threads" on `out` (stdout, or stderr to keep stdout for
 * JSON). */
void mtf_run_print_backend(const mtf_session *session, int to_stderr);

/* Collective over the job (no communicator needed): every rank returns a failure when any rank failed.
 * A rank that failed keeps its own message; the others get the lowest failing rank's, "rank k: ...". */
int mtf_run_agree(int rc, mtf_error *err);

typedef struct mtf_run_state {
  const mtf_config *cfg;
  mtf_comm *comm;
  mtf_program program;
  mtf_session *train, *eval;
  mtf_session *dropless; /* MoE that can drop tokens in evaluation: the dropless evaluation pass; else NULL */
  double dropless_loss;  /* the last mtf_run_evaluate's dropless loss (with `dropless`) */
  double exact_match;    /* encoder_decoder: the last evaluation's fraction of rows with every answer token the
                          * argmax (teacher-forced); -1 otherwise */
  mtf_session *apply; /* train.microbatches > 1: the optimizer update (shares train's variables); else NULL */
  int rank; /* in the job (= the mesh rank) */
  /* backend pjrt (one process owning the mesh's devices): the program and comm above are of a one-rank
   * "host" mesh (host_mesh: cfg's axes, every one of size 1), so the loader and checkpoints see whole
   * tensors; device_plans[r] are mesh rank r's plans of the same graph, which the sessions compile. */
  mtf_shape host_mesh;
  mtf_program_plans *device_plans;
  int n_devices;
} mtf_run_state;

/* backend.kind is built in; for pjrt also that its plugin opens and has as many devices as the mesh needs
 * (processes x backend.local_devices), rank 0 printing the plugin's platform and devices. */
int mtf_run_check_backend(const mtf_config *cfg, mtf_error *err);
/* Builds the program, the communicator and the sessions (the training ones only with_training; the apply
 * and eval sessions share the train session's variables). Collective; on failure every rank returns the
 * same error. */
int mtf_run_setup(mtf_run_state *st, const mtf_config *cfg, int with_training, mtf_error *err);
void mtf_run_teardown(mtf_run_state *st);

/* A loader over `data` for this rank's rows of the model's [batch, length] inputs. Collective. */
int mtf_run_open_loader(const mtf_run_state *st, const char *data, uint64_t seed, int prefetch, mtf_loader **out,
                        mtf_error *err);

/* A loader's batch in host memory: the rows of one next() call and the model's int32 inputs split from
 * them (io/loader.h; encoder_tokens and loss_weights only for an encoder-decoder). */
typedef struct mtf_run_batch {
  int32_t *raw;
  mtf_loader_batch inputs;
  mtf_packed_rows packed; /* data.pack: the segment inputs (run/packed_rows.h); empty otherwise */
  int64_t rows, length;
} mtf_run_batch;
/* Allocates for this rank's rows of `loader` (and their segment inputs when `packed`); MTF_ERR_NOMEM (not
 * agreed) on failure. */
int mtf_run_batch_alloc(mtf_run_batch *batch, const mtf_loader *loader, int64_t length, int packed, mtf_error *err);
void mtf_run_batch_free(mtf_run_batch *batch);
/* The next batch: mtf_loader_next, then split into the inputs. Collective like mtf_loader_next. */
int mtf_run_batch_next(mtf_run_batch *batch, mtf_loader *loader, mtf_error *err);
/* Sets the model's inputs in session from `rows` rows starting at row `first` of the batch (a microbatch). */
int mtf_run_batch_feed(const mtf_run_batch *batch, mtf_session *session, const mtf_transformer *model, int64_t first,
                       mtf_error *err);

/* The training (or evaluation) session's variables as a checkpoint model. */
mtf_ckpt_model mtf_run_checkpoint_model(mtf_run_state *st, int training);
/* RUN_DIR/checkpoints. */
void mtf_run_checkpoint_dir(const mtf_config *cfg, char *dir, size_t size);

/* Ends the job when a step fails inside the session on this rank (other ranks may be waiting in one of its
 * collectives): "mtf: rank k: <what>: <message>", exit status 1. */
MTF_NORETURN void mtf_run_abort(const char *what, const mtf_error *err);

#endif
