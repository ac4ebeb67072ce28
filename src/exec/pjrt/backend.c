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

int mtf_pjrt_probe(const char *plugin, int local_devices, long mesh_devices, int processes, char *desc, size_t cap,
                   mtf_error *err) {
  mtf_pjrt_options options = {.plugin_path = plugin, .local_devices = local_devices};
  mtf_pjrt_runtime *rt = NULL;
  MTF_CHECK(mtf_pjrt_open(&options, &rt, err));
  if (desc && cap) mtf_pjrt_describe(rt, desc, cap);
  int devices = mtf_pjrt_device_count(rt);
  char platform[64];
  snprintf(platform, sizeof platform, "%s", mtf_pjrt_platform_name(rt));
  mtf_pjrt_close(rt);
  if (mesh_devices > 0 && mesh_devices != (long)devices * processes)
    return mtf_error_set(err, MTF_ERR_MESH,
                         "the mesh has %ld devices but %d process%s x %d PJRT %s device%s = %ld: %s (set "
                         "backend.local_devices, run mesh-size / local_devices processes, or change mesh.shape)",
                         mesh_devices, processes, processes == 1 ? "" : "es", devices, platform,
                         devices == 1 ? "" : "s", (long)devices * processes,
                         mesh_devices > (long)devices * processes ? "the mesh is larger than the devices"
                                                                  : "the mesh is smaller than the devices");
  return MTF_OK;
}
