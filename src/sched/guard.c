/* SPDX-License-Identifier: MIT */
/*
 * guard.c - a device that overflows its stack dies with a message naming
 * it.  Fiber stacks (fiber.c) and device threads (runtime.c) have an
 * unmapped gap of SHMAP__STACK_GUARD below them, the map's caller the
 * system's guard below its own stack; a fault there runs this SIGSEGV
 * handler on an alternate signal stack (the overflowed one is unusable),
 * which writes which device overflowed which stack, then puts the previous
 * handler back and returns: the fault repeats and ends the process as it
 * would have without the library (a core dump, or the previous handler).
 *
 * The same handler watches ranges of memory taken away from the program
 * for a while (shmap__guard_watch: an asynchronous collective's result
 * between its start and its wait, coll/async.c).  A fault inside one is
 * recorded, read or write, the range is given back (read and write) and
 * the handler returns, so the access is made again and the program goes
 * on; whoever watches learns of it from shmap__guard_unwatch.  The ranges
 * are slots of a static table, claimed and released with atomics, so the
 * handler reads them on any thread without a lock.
 */
#include "sched/sched.h"

#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How far below a thread's stack a fault still counts as its overflow:
 * the gap below a device thread's stack, as much as the kernel leaves
 * below the main thread's. */
#define THREAD_GUARD ((uintptr_t)SHMAP__STACK_GUARD)
#define ALT_SIZE ((size_t)64 << 10)

static struct sigaction previous;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static pthread_key_t alt_key;
/* The calling thread's stack (thread mode), for the handler. */
static _Thread_local uintptr_t thread_lo;
static _Thread_local bool thread_ready;

/* ---- watched ranges ------------------------------------------------------ */

/* As many as all the requests of 4096 devices at SHMAP_MAX_REQUESTS each
 * would be too many to scan; a request that finds no slot is simply not
 * watched (its checksums still find writes). */
#define WATCH_MAX 4096

enum { W_FREE = 0, W_SETUP, W_ON };

static struct watch {
  _Atomic int state;
  _Atomic uintptr_t lo;
  _Atomic size_t len;
  _Atomic int hit; /* SHMAP__GUARD_READ, _WRITE, _EITHER, or 0 */
} watches[WATCH_MAX];
/* One past the highest slot ever claimed: the handler's scan ends there. */
static _Atomic int watch_top;

static void install(void);

int shmap__guard_watch(void *lo, size_t len)
{
  pthread_once(&install_once, install);
  for (int i = 0; i < WATCH_MAX; i++) {
    int st = W_FREE;
    if (atomic_load_explicit(&watches[i].state, memory_order_relaxed) ||
        !atomic_compare_exchange_strong(&watches[i].state, &st, W_SETUP))
      continue;
    struct watch *w = &watches[i];
    atomic_store(&w->lo, (uintptr_t)lo);
    atomic_store(&w->len, len);
    atomic_store(&w->hit, 0);
    int top = atomic_load(&watch_top);
    while (top < i + 1 &&
           !atomic_compare_exchange_weak(&watch_top, &top, i + 1)) {
    }
    /* Watched before it is taken away: a fault always finds its slot. */
    atomic_store(&w->state, W_ON);
    if (mprotect(lo, len, PROT_NONE) != 0) {
      atomic_store(&w->state, W_FREE);
      return 0;
    }
    return i + 1;
  }
  return 0;
}

int shmap__guard_unwatch(int handle)
{
  if (handle <= 0 || handle > WATCH_MAX)
    return 0;
  struct watch *w = &watches[handle - 1];
  (void)mprotect((void *)atomic_load(&w->lo), atomic_load(&w->len),
                 PROT_READ | PROT_WRITE);
  int hit = atomic_load(&w->hit);
  atomic_store(&w->state, W_FREE);
  return hit;
}

int shmap__guard_watching(void)
{
  int n = 0, top = atomic_load(&watch_top);
  for (int i = 0; i < top; i++)
    n += atomic_load(&watches[i].state) != W_FREE;
  return n;
}

/* Whether the fault was a write: the page-fault error code's bit 1 on
 * x86-64; elsewhere not known. */
static int fault_kind(const void *uc)
{
#if defined(__x86_64__) && defined(REG_ERR)
  const ucontext_t *u = uc;
  return (u->uc_mcontext.gregs[REG_ERR] & 2) ? SHMAP__GUARD_WRITE
                                              : SHMAP__GUARD_READ;
#else
  (void)uc;
  return SHMAP__GUARD_EITHER;
#endif
}

/* A fault in a watched range: recorded, the range given back. */
static bool watched(uintptr_t a, const void *uc)
{
  int top = atomic_load(&watch_top);
  for (int i = 0; i < top; i++) {
    struct watch *w = &watches[i];
    if (atomic_load(&w->state) != W_ON)
      continue;
    uintptr_t lo = atomic_load(&w->lo);
    size_t len = atomic_load(&w->len);
    if (a < lo || a - lo >= len)
      continue;
    int none = 0;
    atomic_compare_exchange_strong(&w->hit, &none, fault_kind(uc));
    (void)mprotect((void *)lo, len, PROT_READ | PROT_WRITE);
    return true;
  }
  return false;
}

/* ---- the handler: async-signal-safe formatting only ---------------------- */

static void put(char *buf, size_t *len, size_t cap, const char *s)
{
  while (*s && *len + 1 < cap)
    buf[(*len)++] = *s++;
}

static void put_num(char *buf, size_t *len, size_t cap, uint64_t v)
{
  char d[24];
  int n = 0;
  do
    d[n++] = (char)('0' + v % 10);
  while ((v /= 10) && n < 23);
  while (n > 0 && *len + 1 < cap)
    buf[(*len)++] = d[--n];
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
  uintptr_t a = (uintptr_t)si->si_addr;
  if (watched(a, uc))
    return; /* the access is made again, now allowed */
  const shmap__dev *d = shmap__running();
  if (d) {
    const shmap__runtime *rt = d->rt;
    const shmap__fiber *f = &d->sched.fiber;
    /* A device with a stack of its own (a fiber) overflows into that
     * stack's gap; one without, into its thread's. */
    bool fiber = f->map && a >= (uintptr_t)f->map && a < (uintptr_t)f->stack;
    bool thread = !f->map && thread_lo && a < thread_lo + 4096 &&
                  a + THREAD_GUARD >= thread_lo;
    if (fiber || thread) {
      const shmap_mesh *mesh = rt->mesh;
      char msg[512];
      size_t n = 0;
      put(msg, &n, sizeof msg, "shmap: device ");
      put_num(msg, &n, sizeof msg, (uint64_t)d->id);
      put(msg, &n, sizeof msg, " (");
      int coords[SHMAP_MAX_AXES];
      shmap__mesh_coords(mesh, d->id, coords);
      for (int k = 0; k < mesh->naxes; k++) {
        put(msg, &n, sizeof msg, k ? ", " : "");
        put(msg, &n, sizeof msg, mesh->names[k]);
        put(msg, &n, sizeof msg, "=");
        put_num(msg, &n, sizeof msg, (uint64_t)coords[k]);
      }
      put(msg, &n, sizeof msg, ") overflowed its ");
      if (fiber) {
        put(msg, &n, sizeof msg, "fiber stack of ");
        put_num(msg, &n, sizeof msg, (uint64_t)f->stack_size);
        put(msg, &n, sizeof msg, " bytes");
      } else {
        put(msg, &n, sizeof msg, "thread stack");
      }
      put(msg, &n, sizeof msg, " (segmentation fault in its guard region); "
                               "give devices more with SHMAP_STACK_SIZE, "
                               "see shmap_map(3)\n");
      ssize_t r = write(2, msg, n);
      (void)r;
    }
  }
  /* Back to what was there before; the fault repeats on return. */
  sigaction(sig, &previous, NULL);
}

/* ---- setting up ------------------------------------------------------------ */

static void alt_free(void *p)
{
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == p) {
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
  }
  munmap(p, ALT_SIZE);
}

static void install(void)
{
  pthread_key_create(&alt_key, alt_free);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous);
}

void shmap__guard_thread(void)
{
  if (thread_ready)
    return;
  thread_ready = true;
  pthread_once(&install_once, install);
  /* Where this thread's stack ends, for thread mode's message. */
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void *lo;
    size_t size;
    if (pthread_attr_getstack(&attr, &lo, &size) == 0)
      thread_lo = (uintptr_t)lo;
    pthread_attr_destroy(&attr);
  }
  /* An alternate signal stack, unless the thread has one already (the
   * program's own, on a thread of its own that runs devices). */
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE))
    return;
  void *p = mmap(NULL, ALT_SIZE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return;
  stack_t alt = {.ss_sp = p, .ss_size = ALT_SIZE, .ss_flags = 0};
  if (sigaltstack(&alt, NULL) != 0 || pthread_setspecific(alt_key, p) != 0) {
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    munmap(p, ALT_SIZE);
  }
}
