/* The PJRT runtime: one loaded PJRT plugin (the XLA CPU plugin, libtpu, a GPU plugin) and one client on
 * it. This is the only file of mtf that includes pjrt_c_api.h; everything above it (the backend, the
 * session's whole-program path, the CLI) sees opaque handles and mtf_error values, so a PJRT_Error
 * becomes an mtf_error carrying the plugin's own message.
 *
 * Life cycle: open (dlopen, GetPjrtApi, version check, Plugin_Initialize, Client_Create) -> compile a
 * StableHLO text module for num_replicas x num_partitions devices -> buffers from host per device ->
 * execute with one argument list per device -> buffers to host -> destroy buffers, executables, close.
 *
 * Devices are numbered 0..device_count-1 in the client's addressable-device order; the compiled program's
 * replica r runs on device r (the client's default device assignment, which for one process is that
 * order). One process per client for now: the XLA CPU plugin ignores PJRT_Client_Create's key-value
 * callbacks and has only in-process collectives, so several processes are refused (pjrt backend.c). A
 * multi-process client (libtpu, the CUDA plugin) would add its key-value store over MPI to
 * mtf_pjrt_options; the rest of the API already speaks of "addressable devices" so it does not change. */
#ifndef MTF_EXEC_PJRT_RUNTIME_H
#define MTF_EXEC_PJRT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct mtf_pjrt_runtime mtf_pjrt_runtime;
typedef struct mtf_pjrt_buffer mtf_pjrt_buffer;         /* one array on one device */
typedef struct mtf_pjrt_executable mtf_pjrt_executable; /* a compiled, loaded program */

/* The environment variable that names the plugin when `backend.plugin` is not set. */
#define MTF_PJRT_PLUGIN_ENV "MTF_PJRT_PLUGIN"
/* The PyPI package of the CPU plugin (tools/install-deps.sh --pjrt puts it in .deps/pjrt). */
#define MTF_PJRT_CPU_PACKAGE "xla-cpu-pjrt"

typedef struct mtf_pjrt_options {
  const char *plugin_path; /* NULL or "": $MTF_PJRT_PLUGIN, else the build's default (mtf_pjrt_default_plugin) */
  int local_devices;       /* devices this process asks for (the CPU plugin creates that many); 0 = plugin's default */
  int threads;             /* host threads the programs need (mtf_pjrt_threads_needed); 0 = the plugin's default */
} mtf_pjrt_options;

/* The environment variable through which the XLA CPU plugin sizes its thread pools (read when the client is
 * created; NPROC is its second choice). mtf sets it for the client creation only, and only when neither is
 * set: a value the user exports wins. */
#define MTF_PJRT_THREADS_ENV "PJRT_NPROC"

/* The host threads a module of n_collectives collective ops on n_devices devices of one process needs on
 * the XLA CPU plugin so that it cannot deadlock, given `cores` to compute with. Why: the plugin runs every
 * device's program as tasks on ONE shared pool (max(cores, devices) threads by default) and a task that
 * reaches a collective blocks its thread until the other devices arrive; the thunk executor starts
 * independent collectives of one device concurrently, so on 2 cores device 0 can hold both threads in two
 * all_reduces while device 1, which would complete them, has no thread (the 40 s rendezvous abort). An
 * unfinished collective blocks at most devices-1 threads, so cores + n_collectives * (devices - 1) threads
 * always leave `cores` threads to run the missing device. 1 device: `cores` (nothing waits). */
int mtf_pjrt_threads_needed(int n_devices, int n_collectives, int cores);
/* The pool size mtf set for the client (options.threads), 0 when it set none: options.threads was 0, or the
 * user's $PJRT_NPROC / $NPROC was in force (mtf_pjrt_describe prints that one). */
int mtf_pjrt_threads_set(const mtf_pjrt_runtime *rt);
/* The pool size in force: the user's $PJRT_NPROC / $NPROC, else what mtf set, else 0 (the plugin's default). */
int mtf_pjrt_threads(const mtf_pjrt_runtime *rt);

/* The plugin path the build found (tools/install-deps.sh --pjrt's install), or "" when there was none. */
const char *mtf_pjrt_default_plugin(void);

/* Which plugin `configured` resolves to: itself if set, else $MTF_PJRT_PLUGIN, else the build's default.
 * Writes the path to out; an error naming the package and both settings when none is set. */
int mtf_pjrt_resolve_plugin(const char *configured, char *out, size_t cap, mtf_error *err);

/* Loads the plugin and creates a client. Errors say which step failed: the file is missing or not a
 * shared object, it has no GetPjrtApi, its API version is not one mtf was built for, initialisation or
 * client creation failed (with the plugin's message). */
int mtf_pjrt_open(const mtf_pjrt_options *options, mtf_pjrt_runtime **out, mtf_error *err);
void mtf_pjrt_close(mtf_pjrt_runtime *rt); /* NULL is fine */

/* What the client is: platform ("cpu", "tpu", "cuda"), its version text, the plugin's API version. */
const char *mtf_pjrt_platform_name(const mtf_pjrt_runtime *rt);
const char *mtf_pjrt_platform_version(const mtf_pjrt_runtime *rt);
const char *mtf_pjrt_plugin_path(const mtf_pjrt_runtime *rt);
void mtf_pjrt_api_version(const mtf_pjrt_runtime *rt, int *major, int *minor);
int mtf_pjrt_device_count(const mtf_pjrt_runtime *rt); /* addressable devices */
int mtf_pjrt_device_id(const mtf_pjrt_runtime *rt, int device);        /* the global id */
const char *mtf_pjrt_device_kind(const mtf_pjrt_runtime *rt, int device);
/* Several lines for `mtf --version` and the start of a run: plugin, platform, version, API, devices. */
void mtf_pjrt_describe(const mtf_pjrt_runtime *rt, char *out, size_t cap);

/* Element types of buffers: mtf's tensors (f32), token ids and other integers (s32), and u64 scalars (a
 * plugin-side counter or key; the emitter passes the random offset as two s32 words instead). emit.h uses
 * this type for its parameters and results. */
typedef enum mtf_pjrt_type { MTF_PJRT_F32 = 0, MTF_PJRT_S32 = 1, MTF_PJRT_U64 = 2 } mtf_pjrt_type;
size_t mtf_pjrt_type_size(mtf_pjrt_type type);

/* A buffer of dims[0..rank) (row-major, rank 0 = scalar) on `device`, copied from host `data`, which may
 * be reused as soon as this returns. */
int mtf_pjrt_buffer_from_host(mtf_pjrt_runtime *rt, int device, mtf_pjrt_type type, const int64_t *dims, int rank,
                              const void *data, mtf_pjrt_buffer **out, mtf_error *err);
/* Copies the whole buffer to host `dst` (bytes must be its size exactly); waits for it. */
int mtf_pjrt_buffer_to_host(mtf_pjrt_runtime *rt, mtf_pjrt_buffer *buffer, void *dst, size_t bytes, mtf_error *err);
/* Its size in bytes on the host (element count x element size); 0 after an error. */
size_t mtf_pjrt_buffer_host_bytes(mtf_pjrt_runtime *rt, mtf_pjrt_buffer *buffer, mtf_error *err);
void mtf_pjrt_buffer_destroy(mtf_pjrt_runtime *rt, mtf_pjrt_buffer *buffer); /* NULL is fine */

/* Compiles a StableHLO module given as MLIR text (format "mlir") for num_replicas x num_partitions
 * devices. SPMD partitioning is off: the module is already the per-device program (mtf's lowering decided
 * every slice and collective), and collectives name replica groups. The CPU plugin runs it with
 * num_replicas = devices, num_partitions = 1. */
int mtf_pjrt_compile(mtf_pjrt_runtime *rt, const char *mlir_text, size_t length, int num_replicas,
                     int num_partitions, mtf_pjrt_executable **out, mtf_error *err);
int mtf_pjrt_executable_num_outputs(const mtf_pjrt_executable *exe);
int mtf_pjrt_executable_num_devices(const mtf_pjrt_executable *exe);
void mtf_pjrt_executable_destroy(mtf_pjrt_runtime *rt, mtf_pjrt_executable *exe); /* NULL is fine */

/* Runs exe once on all its devices: args[d * num_args + a] is argument a on device d (devices in the
 * executable's order, which is replica order), outputs[d * num_outputs + o] receives new buffers that the
 * caller destroys. Donation is the module's business (inputs it aliases to outputs, e.g. variables
 * carried from step to step): a donated argument is consumed by the run (its handle must still be
 * destroyed, and never read again); `keep` (length num_args, or NULL) marks arguments that must not be
 * donated even if the module allows it. Waits until every device has finished. */
int mtf_pjrt_execute(mtf_pjrt_runtime *rt, mtf_pjrt_executable *exe, int num_args, mtf_pjrt_buffer *const *args,
                     const unsigned char *keep, mtf_pjrt_buffer **outputs, mtf_error *err);

#endif
