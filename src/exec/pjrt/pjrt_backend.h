/* The pjrt entries of the backend registry (exec/registry.c), built when MTF_HAVE_PJRT. */
#ifndef MTF_EXEC_PJRT_PJRT_BACKEND_H
#define MTF_EXEC_PJRT_PJRT_BACKEND_H

#include <stddef.h>

#include "exec/backend.h"

int mtf_pjrt_backend_create(int threads, mtf_backend **out, mtf_error *err);

/* Opens the plugin (backend.plugin, backend.local_devices), writes its description (mtf_pjrt_describe) to
 * desc, closes it, and checks that mesh_devices (0: no check) = processes x its devices. More than one
 * process is refused with the reason for this plugin (see backend.c). */
int mtf_pjrt_probe(const char *plugin, int local_devices, long mesh_devices, int processes, char *desc, size_t cap,
                   mtf_error *err);

#endif
