/* The CUDA emulator's grid runner (tests/cuda_emu): blocks in turn, a block's threads as fibers.
 *
 * A fiber switch is a handful of register saves (x86-64 and aarch64 below; ucontext elsewhere, which is ~20x
 * slower as glibc's swapcontext makes a signal-mask system call): reduction kernels meet at a barrier a few
 * times per row, and the conformance and training tests launch many of them.
 *
 * Most kernels never call __syncthreads. A block's thread 0 runs first as a fiber; when it finishes without
 * reaching a barrier, the block's other threads are called directly, one after another (no fiber), and one
 * of them reaching a barrier there is reported (its thread 0 did not: a divergent barrier). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_runtime.h"

/* Under AddressSanitizer every stack switch is announced, so that it knows which stack is live. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define START_SWITCH(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define FINISH_SWITCH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define START_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define FINISH_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

/* ---- context switch: save the callee-saved registers on the current stack, switch stacks, restore ---- */
#if defined(__x86_64__)
extern "C" void mtf_emu_switch(void **save_sp, void *next_sp);
asm(".text\n"
    ".globl mtf_emu_switch\n"
    ".type mtf_emu_switch,@function\n"
    "mtf_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size mtf_emu_switch,.-mtf_emu_switch\n");
#define MTF_EMU_FAST_SWITCH 1
#elif defined(__aarch64__)
extern "C" void mtf_emu_switch(void **save_sp, void *next_sp);
asm(".text\n"
    ".globl mtf_emu_switch\n"
    ".type mtf_emu_switch,%function\n"
    "mtf_emu_switch:\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #176\n"
    "  ret\n"
    ".size mtf_emu_switch,.-mtf_emu_switch\n");
#define MTF_EMU_FAST_SWITCH 1
#else
#include <ucontext.h>
#endif

enum { STACK_BYTES = 256 * 1024, MAX_THREADS = 1024, MAX_SHARED = 228 * 1024 };
enum thread_state { READY, AT_BARRIER, DONE };

struct fiber {
#ifdef MTF_EMU_FAST_SWITCH
  void *sp;
#else
  ucontext_t context;
#endif
  char *stack;
  thread_state state;
  void *sanitizer_fake_stack;
};

struct grid_run {
  void (*body)(void *);
  void *closure;
  fiber fibers[MAX_THREADS];
  unsigned current;      /* the fiber running, when on_fiber */
  int on_fiber;          /* 0: threads are called directly (no barrier expected) */
  int divergent_barrier; /* a direct-called thread reached __syncthreads */
  int barriers;          /* barriers thread 0 of the block reached */
#ifdef MTF_EMU_FAST_SWITCH
  void *scheduler_sp;
#else
  ucontext_t scheduler;
#endif
};

grid_run run;
const void *scheduler_stack_bottom; /* the scheduler's stack, for the sanitizer's switch announcements */
size_t scheduler_stack_size;
/* 128-byte aligned: a GPU's dynamic shared memory starts at the block's shared window when the kernel has no
 * static shared memory, and wmma tiles in it need 32 bytes. */
alignas(128) unsigned char dynamic_shared[MAX_SHARED];

void set_thread(unsigned linear) {
  threadIdx.x = linear % blockDim.x;
  threadIdx.y = (linear / blockDim.x) % blockDim.y;
  threadIdx.z = linear / (blockDim.x * blockDim.y);
}

void to_scheduler(fiber *f) {
  START_SWITCH(&f->sanitizer_fake_stack, scheduler_stack_bottom, scheduler_stack_size);
#ifdef MTF_EMU_FAST_SWITCH
  mtf_emu_switch(&f->sp, run.scheduler_sp);
#else
  swapcontext(&f->context, &run.scheduler);
#endif
  FINISH_SWITCH(f->sanitizer_fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
}

void resume(fiber *f) {
  void *fake_stack = nullptr;
  START_SWITCH(&fake_stack, f->stack, STACK_BYTES);
#ifdef MTF_EMU_FAST_SWITCH
  mtf_emu_switch(&run.scheduler_sp, f->sp);
#else
  swapcontext(&run.scheduler, &f->context);
#endif
  FINISH_SWITCH(fake_stack, nullptr, nullptr);
}

extern "C" void fiber_entry(void) {
  FINISH_SWITCH(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
  fiber *f = &run.fibers[run.current];
  run.body(run.closure);
  f->state = DONE;
  /* Never resumed: no fake stack to keep (nullptr), and no return from the switch. */
  START_SWITCH(nullptr, scheduler_stack_bottom, scheduler_stack_size);
#ifdef MTF_EMU_FAST_SWITCH
  mtf_emu_switch(&f->sp, run.scheduler_sp);
#else
  swapcontext(&f->context, &run.scheduler);
#endif
  abort();
}

void start(fiber *f) {
  if (!f->stack) {
    f->stack = static_cast<char *>(
        mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (f->stack == MAP_FAILED) {
      fprintf(stderr, "cuda emulator: no memory for a fiber stack\n");
      abort();
    }
  }
  f->state = READY;
#ifdef MTF_EMU_FAST_SWITCH
  /* The new stack as mtf_emu_switch leaves a suspended one: saved registers (zero), the FP control words of
   * now, then fiber_entry as the return address, 16-byte aligned as a call would leave it. */
  uintptr_t top = (reinterpret_cast<uintptr_t>(f->stack) + STACK_BYTES) & ~static_cast<uintptr_t>(15);
  void **sp = reinterpret_cast<void **>(top);
  *--sp = nullptr; /* alignment: fiber_entry starts as if called */
  *--sp = reinterpret_cast<void *>(&fiber_entry);
#if defined(__x86_64__)
  for (int i = 0; i < 6; i++) *--sp = nullptr;
  uint32_t control[2];
  asm volatile("stmxcsr %0\n fnstcw %1" : "=m"(control[0]), "=m"(control[1]));
  *--sp = nullptr;
  memcpy(sp, control, sizeof control);
#else
  /* aarch64: x19..x28, x29 = 0, x30 = fiber_entry (ret jumps to it), d8..d15; 176 bytes */
  sp += 2;
  sp -= 22;
  memset(sp, 0, 22 * sizeof(void *));
  sp[11] = reinterpret_cast<void *>(&fiber_entry);
#endif
  f->sp = sp;
#else
  getcontext(&f->context);
  f->context.uc_stack.ss_sp = f->stack;
  f->context.uc_stack.ss_size = STACK_BYTES;
  f->context.uc_link = nullptr;
  makecontext(&f->context, fiber_entry, 0);
#endif
}

/* One block with fibers: sweep the threads until each has finished or waits at the barrier; all waiting ->
 * release them; some finished while others wait -> the barrier can never complete. Returns 0 or -1.
 * Between barriers the sweeps alternate in direction (thread 0 first, then the last first, ...): a kernel that
 * reads what another thread writes without a barrier between them then reads it too early in one of the two
 * orders, whichever thread writes. */
int run_block_fibers(unsigned threads, unsigned first_started) {
  for (unsigned t = first_started; t < threads; t++) start(&run.fibers[t]);
  for (unsigned phase = 0;; phase++) {
    unsigned done = 0, waiting = 0;
    for (unsigned i = 0; i < threads; i++) {
      unsigned t = phase % 2 ? threads - 1 - i : i;
      fiber *f = &run.fibers[t];
      if (f->state == READY) {
        run.current = t;
        set_thread(t);
        resume(f);
      }
      done += f->state == DONE;
      waiting += f->state == AT_BARRIER;
    }
    if (done == threads) return 0;
    if (done > 0) return -1;
    for (unsigned t = 0; t < threads; t++) run.fibers[t].state = READY;
  }
}

}  // namespace

void mtf_emu_syncthreads(void) {
  if (!run.on_fiber) {
    run.divergent_barrier = 1;
    return;
  }
  fiber *f = &run.fibers[run.current];
  if (run.current == 0) run.barriers++;
  f->state = AT_BARRIER;
  to_scheduler(f);
}

void *mtf_emu_dynamic_shared(void) { return dynamic_shared; }

namespace {
/* MTF_CUDA_EMU_STATS=1: at exit, how many launches ran and how many of their blocks met at barriers (to see
 * that a test ran kernels at all, and which path). */
unsigned long long launches, blocks_direct, blocks_fibers;
void print_stats(void) {
  fprintf(stderr, "cuda emulator: %llu launches, %llu blocks without barriers, %llu blocks of fibers\n", launches,
          blocks_direct, blocks_fibers);
}
}  // namespace

cudaError_t mtf_emu_run_grid(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, void (*body)(void *),
                             void *closure) {
  (void)stream;
  unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  char detail[320]; /* the message with ten %u fields at their widest */
  if (threads == 0 || threads > MAX_THREADS || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535) {
    snprintf(detail, sizeof detail, "launch of grid (%u, %u, %u) x block (%u, %u, %u): invalid configuration", grid.x,
             grid.y, grid.z, block.x, block.y, block.z);
    mtf_emu_set_error(cudaErrorInvalidConfiguration, detail);
    return cudaErrorInvalidConfiguration;
  }
  if (shared_bytes > MAX_SHARED) {
    snprintf(detail, sizeof detail, "launch asks %zu bytes of dynamic shared memory (at most %d)", shared_bytes,
             (int)MAX_SHARED);
    mtf_emu_set_error(cudaErrorLaunchOutOfResources, detail);
    return cudaErrorLaunchOutOfResources;
  }
  static int stats = getenv("MTF_CUDA_EMU_STATS") && atexit(print_stats) == 0;
  (void)stats;
  launches++;
  memset(dynamic_shared, 0xff, shared_bytes); /* uninitialised on a GPU: NaN here, not zeros that would pass */
  run.body = body;
  run.closure = closure;
  run.divergent_barrier = 0;
  gridDim = grid;
  blockDim = block;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        blockIdx = uint3{bx, by, bz};
        /* Thread 0 as a fiber: does this kernel meet at barriers? */
        run.on_fiber = 1;
        run.barriers = 0;
        start(&run.fibers[0]);
        run.current = 0;
        set_thread(0);
        resume(&run.fibers[0]);
        int failed = 0;
        if (run.fibers[0].state == DONE && run.barriers == 0) {
          run.on_fiber = 0;
          blocks_direct++;
          for (unsigned t = 1; t < threads; t++) {
            set_thread(t);
            body(closure);
          }
          failed = run.divergent_barrier;
        } else {
          blocks_fibers++;
          failed = run_block_fibers((unsigned)threads, 1);
        }
        if (failed) {
          snprintf(detail, sizeof detail,
                   "block (%u, %u, %u) of a launch of grid (%u, %u, %u) x block (%u, %u, %u): __syncthreads not "
                   "reached by every thread of the block (some returned or took another branch)",
                   bx, by, bz, grid.x, grid.y, grid.z, block.x, block.y, block.z);
          mtf_emu_set_error(cudaErrorLaunchFailure, detail);
          run.on_fiber = 0;
          return cudaErrorLaunchFailure;
        }
      }
  run.on_fiber = 0;
  return cudaSuccess;
}
