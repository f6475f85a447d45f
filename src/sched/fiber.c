/* SPDX-License-Identifier: MIT */
/*
 * fiber.c - user-level context switches, so that many simulated devices can
 * share a few worker threads: handing over from one device to another costs
 * a few nanoseconds instead of a kernel wake-up.
 *
 * On x86-64 the switch saves the callee-saved registers and the floating
 * point control words on the current stack and swaps stack pointers; other
 * machines use ucontext.  Each switch is announced to AddressSanitizer and
 * ThreadSanitizer, which otherwise would mistake the stacks for corruption
 * and the hand-overs for races.
 */
#include "sched/sched.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SHMAP_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define SHMAP_TSAN 1
#endif

#if defined(__x86_64__) && !defined(SHMAP_FORCE_UCONTEXT)
/* void shmap__fiber_swap(void **save_sp, void *to_sp) */
__asm__(".text\n"
        ".globl shmap__fiber_swap\n"
        ".hidden shmap__fiber_swap\n"
        ".type shmap__fiber_swap,@function\n"
        "shmap__fiber_swap:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size shmap__fiber_swap,.-shmap__fiber_swap\n"
        /* First switch into a fiber lands here: call fn(arg). */
        ".globl shmap__fiber_start\n"
        ".hidden shmap__fiber_start\n"
        ".type shmap__fiber_start,@function\n"
        "shmap__fiber_start:\n"
        /* The outermost frame of a fiber: debuggers stop unwinding here
         * instead of reading the garbage above the stack's top. */
        "  .cfi_startproc\n"
        "  .cfi_undefined rip\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        "  .cfi_endproc\n"
        ".size shmap__fiber_start,.-shmap__fiber_start\n");

void shmap__fiber_swap(void **save_sp, void *to_sp);
extern char shmap__fiber_start[];

static void *initial_sp(void *stack, size_t size, void (*fn)(void *), void *arg)
{
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  /* After `ret` pops the start address, rsp must be 16-byte aligned so
   * that the call in shmap__fiber_start sees the ABI's alignment. */
  uint64_t *ret = (uint64_t *)(top - 24);
  uint64_t *sp = ret - 7;
  uint32_t mxcsr;
  uint16_t fpucw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fpucw));
  uint64_t csr = mxcsr | (uint64_t)fpucw << 32;
  memcpy(sp, &csr, 8);
  sp[1] = 0;                   /* r15 */
  sp[2] = 0;                   /* r14 */
  sp[3] = (uint64_t)(uintptr_t)fn;  /* r13 */
  sp[4] = (uint64_t)(uintptr_t)arg; /* r12 */
  sp[5] = 0;                   /* rbx */
  sp[6] = 0;                   /* rbp */
  *ret = (uint64_t)(uintptr_t)shmap__fiber_start;
  return sp;
}
#else
#include <ucontext.h>

/* The saved "stack pointer" is a ucontext_t. */
static void shmap__fiber_swap(void **save_sp, void *to_sp)
{
  ucontext_t *from = *save_sp;
  swapcontext(from, to_sp);
}

static void *initial_sp(void *stack, size_t size, void (*fn)(void *), void *arg)
{
  ucontext_t *uc = stack; /* the context lives at the stack's base */
  getcontext(uc);
  uc->uc_stack.ss_sp = (char *)stack + sizeof *uc;
  uc->uc_stack.ss_size = size - sizeof *uc;
  uc->uc_link = NULL;
  makecontext(uc, (void (*)(void))(void (*)(void *))fn, 1, arg);
  return uc;
}
#endif

/*
 * Colouring.  Every device runs the same calls, so the hot frames of all
 * fiber stacks lie at one offset from each stack's top; and the stacks,
 * mapped one after the other with sizes that are multiples of a megabyte,
 * have tops that agree in every address bit below the megabyte.  Caches
 * and TLBs pick a set from those low bits: every fiber's hot lines then
 * compete for the same few sets of the L1 and L2 caches and of the
 * second-level TLB, which hold a dozen or two ways each, and with more
 * fibers per worker than ways each switch misses in all of them.  So each
 * new stack is moved down its mapping by a few pages (the inaccessible gap
 * below it grows by as much) and its first frame down its top page by a
 * few cache lines, a different amount for each: the tops then spread over
 * 64 page colours and 63 line offsets.  The moves cost address space, and
 * under 4 KiB of the stack itself.
 */
#define COLOUR_PAGES 64
#define COLOUR_LINES 63
static _Atomic unsigned colour_next;

int shmap__fiber_create(shmap__fiber *f, size_t stack_size,
                        void (*fn)(void *), void *arg)
{
  unsigned colour = atomic_fetch_add_explicit(&colour_next, 1,
                                              memory_order_relaxed);
  long page = sysconf(_SC_PAGESIZE);
  size_t size = (stack_size + (size_t)page - 1) & ~((size_t)page - 1);
  /* The stack sits on top of an inaccessible gap of its own, so that an
   * overflow faults there (guard.c names the device) instead of writing
   * into whatever was mapped below -- another device's stack, as a rule,
   * since the stacks are mapped one after the other.  The gap costs
   * address space only: it is reserved with PROT_NONE and never backed. */
  size_t guard = SHMAP__STACK_GUARD > (size_t)page ? SHMAP__STACK_GUARD
                                                   : (size_t)page;
  guard += (size_t)page * (colour % COLOUR_PAGES);
  size_t line = SHMAP__CACHELINE * (colour % COLOUR_LINES);
  if (line > size / 2)
    line = 0;
  char *base = mmap(NULL, size + guard, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED)
    return -1;
  if (mprotect(base + guard, size, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, size + guard);
    return -1;
  }
  f->map = base;
  f->map_size = size + guard;
  f->stack = base + guard;
  f->stack_size = size;
  f->sp = initial_sp(f->stack, size - line, fn, arg);
#ifdef SHMAP_TSAN
  f->tsan = __tsan_create_fiber(0);
#endif
  return 0;
}

#ifdef SHMAP_ASAN
/* Clear AddressSanitizer's shadow of a stack about to be unmapped: frames
 * still on it (and any the fiber left without returning) poisoned parts of
 * it, which would make later reports on whatever reuses the addresses.
 * __asan_unpoison_memory_region writes every shadow byte, an eighth of the
 * stack (512 KiB per 4 MiB fiber, gigabytes for a large mesh), most of it
 * never touched; the shadow pages wholly inside the stack's shadow are
 * instead given back to the kernel, which then reads them as zeros
 * (unpoisoned), at a cost proportional to what the stack used -- as the
 * sanitizer itself does for large regions.  The two partial pages at the
 * ends are written. */
static void unpoison_stack(char *lo, size_t size)
{
  size_t scale = 0, offset = 0;
  __asan_get_shadow_mapping(&scale, &offset);
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t s_lo = ((uintptr_t)lo >> scale) + offset;
  uintptr_t s_hi = (((uintptr_t)lo + size) >> scale) + offset;
  uintptr_t p_lo = (s_lo + page - 1) & ~(page - 1);
  uintptr_t p_hi = s_hi & ~(page - 1);
  if (p_lo >= p_hi ||
      madvise((void *)p_lo, p_hi - p_lo, MADV_DONTNEED) != 0) {
    __asan_unpoison_memory_region(lo, size);
    return;
  }
  /* The stack's bytes whose shadow lies in the partial pages. */
  char *mid_lo = (char *)((p_lo - offset) << scale);
  char *mid_hi = (char *)((p_hi - offset) << scale);
  __asan_unpoison_memory_region(lo, (size_t)(mid_lo - lo));
  __asan_unpoison_memory_region(mid_hi, (size_t)(lo + size - mid_hi));
}
#endif

void shmap__fiber_destroy(shmap__fiber *f)
{
  if (!f->map)
    return;
#ifdef SHMAP_TSAN
  __tsan_destroy_fiber(f->tsan);
#endif
#ifdef SHMAP_ASAN
  unpoison_stack(f->stack, f->stack_size);
#endif
  munmap(f->map, f->map_size);
  memset(f, 0, sizeof *f);
}

#ifndef SHMAP_TSAN
void shmap__fiber_host_init(shmap__fiber *host) { memset(host, 0, sizeof *host); }
#else
void shmap__fiber_host_init(shmap__fiber *host)
{
  memset(host, 0, sizeof *host);
  host->tsan = __tsan_get_current_fiber();
}
#endif

void shmap__fiber_switch(shmap__fiber *from, shmap__fiber *to)
{
  to->resumer = from;
#ifdef SHMAP_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber(&fake, to->stack, to->stack_size);
#endif
#ifdef SHMAP_TSAN
  __tsan_switch_to_fiber(to->tsan, 0);
#endif
#if defined(__x86_64__) && !defined(SHMAP_FORCE_UCONTEXT)
  shmap__fiber_swap(&from->sp, to->sp);
#else
  if (!from->sp) {
    static _Thread_local ucontext_t host_uc;
    from->sp = &host_uc;
  }
  shmap__fiber_swap(&from->sp, to->sp);
#endif
#ifdef SHMAP_ASAN
  const void *bottom;
  size_t size;
  __sanitizer_finish_switch_fiber(fake, &bottom, &size);
  /* Back in `from`: whoever resumed it may be a thread context other than
   * `to` (a worker that took the device over), and the thread behind a
   * context may differ from map to map (the map's caller runs worker 0's
   * devices), so learn the resumer's stack every time.  Without it
   * LeakSanitizer would scan the wrong range for that thread. */
  shmap__fiber *r = from->resumer;
  if (r && !r->map) {
    r->stack = (void *)bottom;
    r->stack_size = size;
  }
#endif
}

void shmap__fiber_entered(shmap__fiber *self, shmap__fiber *from)
{
  (void)from; /* the resumer is known: self->resumer */
#ifdef SHMAP_ASAN
  const void *bottom;
  size_t size;
  __sanitizer_finish_switch_fiber(NULL, &bottom, &size);
  shmap__fiber *r = self->resumer;
  if (r && !r->map) {
    r->stack = (void *)bottom;
    r->stack_size = size;
  }
#else
  (void)self;
#endif
}
