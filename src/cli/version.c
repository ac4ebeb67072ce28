#include <cblas.h>
#include <hdf5.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "cli/cli.h"
#include "comm/world.h"
#include "config/config.h"
#include "mtf.h"
#include "run/setup.h"

#ifdef MTF_HAVE_CUDA
/* Defined by the CUDA probe (src/exec/cuda), which is linked into mtf only in a CUDA build: runtime, cuBLAS
 * and NCCL versions and the visible devices. Declared here so that cli needs no engine header. */
void mtf_cuda_describe(char *buf, size_t size);
#endif

void mtf_print_version(FILE *out) {
  char mpi_version[512];
  mtf_world_library_version(mpi_version, sizeof mpi_version);
  unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
  H5get_libversion(&h5_major, &h5_minor, &h5_release);

  fprintf(out, "mtf %s\n", MTF_VERSION);
  fprintf(out, "  build:    %s\n", MTF_BUILD_TARGET);
  fprintf(out, "  MPI:      %s\n", mpi_version);
  fprintf(out, "  HDF5:     %u.%u.%u (%s)\n", h5_major, h5_minor, h5_release,
#ifdef H5_HAVE_PARALLEL
          "parallel"
#else
          "serial"
#endif
  );
  const char *chosen = getenv("MTF_OPENBLAS_CORETYPE_CHOSEN");
  fprintf(out, "  BLAS:     %s%s%s%s\n", openblas_get_config(),
          chosen ? " (OPENBLAS_CORETYPE=" : "", chosen ? chosen : "",
          chosen ? " set by mtf: this OpenBLAS does not know the CPU's model)" : "");
  fprintf(out, "  bf16:     %s (cpu, backend.precision bf16)\n", mtf_cpu_bf16_text());
  fprintf(out, "  libyaml:  %s\n", yaml_get_version_string());
#ifdef MTF_HAVE_CUDA
  char cuda[512];
  mtf_cuda_describe(cuda, sizeof cuda);
  fprintf(out, "  CUDA:     built for sm_%s; %s\n", MTF_CUDA_ARCHITECTURES, cuda);
#else
  fprintf(out, "  CUDA:     not built (no nvcc at configure time, or MTF_ENABLE_CUDA=OFF)\n");
#endif
}

int mtf_cmd_version(int argc, char **argv) {
  mtf_config cfg;
  mtf_config_defaults(&cfg);
  mtf_error err = {0};
  for (int i = 1; i < argc; i++) {
    const char *assignment = NULL;
    if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) assignment = argv[++i];
    else if (strncmp(argv[i], "--set=", 6) == 0) assignment = argv[i] + 6;
    if (!assignment || strncmp(assignment, "backend.", 8) != 0) {
      fprintf(stderr, "mtf --version: unexpected '%s' (usage: mtf --version [--set backend.KEY=VALUE ...])\n", argv[i]);
      return MTF_EXIT_USAGE;
    }
    if (mtf_config_set(&cfg, assignment, &err) != MTF_OK) {
      fprintf(stderr, "mtf --version: %s\n", err.msg);
      return MTF_EXIT_FAILURE;
    }
  }
  if (mtf_config_validate(&cfg, &err) != MTF_OK) {
    fprintf(stderr, "mtf --version: %s\n", err.msg);
    return MTF_EXIT_FAILURE;
  }
  mtf_print_version(stdout);
  fprintf(stdout, "  backends: %s\n", mtf_backend_kinds());
  fflush(stdout);
  char desc[4096];
  mtf_backend_options options = mtf_run_backend_options(&cfg);
  if (mtf_backend_describe(&options, 0, 1, desc, sizeof desc, &err) != MTF_OK) {
    fprintf(stderr, "mtf --version: backend %s: %s\n", cfg.backend, err.msg);
    return MTF_EXIT_FAILURE;
  }
  if (desc[0]) fprintf(stdout, "%s\n", desc);
  return MTF_EXIT_OK;
}
