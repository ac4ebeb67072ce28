/* backend.kind pjrt in the registry: the checks and the description that `mtf --version` and the start of a
 * run print. The PJRT backend does not run a plan step by step through per-op kernels as cpu does: a
 * session on it compiles the whole program (emit.h) and runs one executable per step, so its
 * mtf_backend constructor only says so (sessions of kind pjrt are built by the whole-program path). */
#include <stdio.h>
#include <string.h>

#include "exec/backend.h"
#include "exec/pjrt/pjrt_backend.h"
#include "exec/pjrt/runtime.h"

int mtf_pjrt_backend_create(int threads, mtf_backend **out, mtf_error *err) {
  *out = NULL;
  return mtf_error_set(err, MTF_ERR_INVALID,
                       "backend.kind pjrt runs whole programs (one compiled executable per step), not plan steps one "
                       "by one: this session was created through the step-by-step path, which only cpu has");
}

/* Several processes cannot form one PJRT client yet. Why differs by plugin, so the message says which case
 * this is. The XLA CPU plugin (xla-cpu-pjrt, API 0.81) was examined for it: its PJRT_Client_Create reads
 * only "cpu_device_count" (other options such as "process_id" or "num_nodes" are accepted and dropped: the
 * client still reports process index 0 and only its own devices), it never calls the key-value callbacks,
 * and the only CPU collectives compiled into it are XLA's in-process ones (no gloo, no MPI), so an
 * all_reduce can never leave the process. libtpu and the CUDA plugin do build multi-process clients through
 * those callbacks; mtf does not pass them yet (issue 13), and with no plugin here that uses them it could
 * not be tested. */
static int refuse_several_processes(const char *platform, const char *path, int processes, long mesh_devices,
                                    mtf_error *err) {
  if (strcmp(platform, "cpu") == 0)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "backend.kind pjrt on %d processes: the XLA CPU plugin '%s' cannot join processes into "
                         "one client: it has only in-process collectives (XLA's gloo and MPI CPU collectives are "
                         "not compiled into %s) and ignores PJRT_Client_Create's key-value callbacks and process "
                         "options, so every process would see only its own devices. Run one process with "
                         "backend.local_devices = the mesh's size (%ld), or use backend.kind cpu for several "
                         "processes (multi-process PJRT clients are a libtpu / CUDA plugin feature, not yet "
                         "wired in mtf: issue 13)",
                         processes, path, MTF_PJRT_CPU_PACKAGE, mesh_devices);
  return mtf_error_set(err, MTF_ERR_INVALID,
                       "backend.kind pjrt on %d processes: PJRT plugin '%s' (platform %s) may form one client over "
                       "several processes through PJRT_Client_Create's key-value callbacks (libtpu and the CUDA "
                       "plugin do), but mtf does not pass them yet (issue 13; the XLA CPU plugin these tests use has in-process collectives only, "
                       "so it could not be built and tested here). Run one process with backend.local_devices = "
                       "the mesh's size (%ld)",
                       processes, path, platform, mesh_devices);
}

int mtf_pjrt_probe(const char *plugin, int local_devices, long mesh_devices, int processes, char *desc, size_t cap,
                   mtf_error *err) {
  mtf_pjrt_options options = {.plugin_path = plugin, .local_devices = local_devices};
  mtf_pjrt_runtime *rt = NULL;
  MTF_CHECK(mtf_pjrt_open(&options, &rt, err));
  if (desc && cap) mtf_pjrt_describe(rt, desc, cap);
  int devices = mtf_pjrt_device_count(rt);
  char platform[64], path[4096];
  snprintf(platform, sizeof platform, "%s", mtf_pjrt_platform_name(rt));
  snprintf(path, sizeof path, "%s", mtf_pjrt_plugin_path(rt));
  mtf_pjrt_close(rt);
  if (processes > 1) return refuse_several_processes(platform, path, processes, mesh_devices, err);
  if (mesh_devices > 0 && mesh_devices != (long)devices * processes)
    return mtf_error_set(err, MTF_ERR_MESH,
                         "the mesh has %ld devices but %d process%s x %d PJRT %s device%s = %ld: %s (set "
                         "backend.local_devices or change mesh.shape)",
                         mesh_devices, processes, processes == 1 ? "" : "es", devices, platform,
                         devices == 1 ? "" : "s", (long)devices * processes,
                         mesh_devices > (long)devices * processes ? "the mesh is larger than the devices"
                                                                  : "the mesh is smaller than the devices");
  return MTF_OK;
}
