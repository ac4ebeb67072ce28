/* comm/nccl_comm.c, the NCCL communicator, compiled as C++ against the emulator's cuda_runtime.h and nccl.h
 * (whose calls have C++ linkage) so that its own code runs in CI: comm/nccl_comm.h gives its entry points
 * the emulator's names under MTF_CUDA_EMU. The C headers it includes are C functions of the engine. */
extern "C" {
#include "comm/comm.h"
#include "comm/world.h"
#include "core/error.h"
}
#include "comm/nccl_comm.c"
