/* SPDX-License-Identifier: MIT */
/* runtime.c - the runtime of a mesh: waiting and waking, the failure, the
 * registry of scheduling modes, starting them and running a job. */
#include "sched/sched.h"

#include "sched/hooks.h"
#include "sched/mode.h"
#include "sched/progress.h"
#include "sched/trace.h"
#include "settings.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#ifdef __linux__
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

static SHMAP__TLS_FAST struct shmap_ctx *current;

struct shmap_ctx *shmap__current(void) { return current; }
void shmap__set_current(struct shmap_ctx *ctx) { current = ctx; }

/* The device whose code runs on this thread (guard.c names it). */
SHMAP__TLS_FAST const shmap__dev *shmap__running_dev;

const shmap__dev *shmap__running(void) { return shmap__running_dev; }

/* ---- sleeping and waking ----------------------------------------------- */

#ifdef __linux__
static void sleep_init(shmap__waiter *w) { (void)w; }
static void sleep_fini(shmap__waiter *w) { (void)w; }
static void sleep_on(shmap__waiter *w, uint32_t seen, uint64_t timeout_ns)
{
  struct timespec ts = {(time_t)(timeout_ns / 1000000000u),
                        (long)(timeout_ns % 1000000000u)};
  syscall(SYS_futex, &w->word, FUTEX_WAIT_PRIVATE, seen,
          timeout_ns ? &ts : NULL, NULL, 0);
}
static void wake_one(shmap__waiter *w)
{
  syscall(SYS_futex, &w->word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void sleep_init(shmap__waiter *w)
{
  w->mutex = malloc(sizeof(uv_mutex_t));
  w->cond = malloc(sizeof(uv_cond_t));
  if (!w->mutex || !w->cond)
    abort(); /* fallback platforms only; tiny allocation at startup */
  uv_mutex_init(w->mutex);
  uv_cond_init(w->cond);
}
static void sleep_fini(shmap__waiter *w)
{
  uv_mutex_destroy(w->mutex);
  uv_cond_destroy(w->cond);
  free(w->mutex);
  free(w->cond);
}
static void sleep_on(shmap__waiter *w, uint32_t seen, uint64_t timeout_ns)
{
  uv_mutex_lock(w->mutex);
  if (atomic_load(&w->word) == seen) {
    if (timeout_ns)
      uv_cond_timedwait(w->cond, w->mutex, timeout_ns);
    else
      uv_cond_wait(w->cond, w->mutex);
  }
  uv_mutex_unlock(w->mutex);
}
static void wake_one(shmap__waiter *w)
{
  uv_mutex_lock(w->mutex);
  uv_cond_broadcast(w->cond);
  uv_mutex_unlock(w->mutex);
}
#endif

/* See "Publishing before a wake-up" (sched.h). */
bool shmap__fence_light;
SHMAP__TLS_FAST bool shmap__may_sleep;
static uv_once_t fence_once = UV_ONCE_INIT;

static void fence_init(void)
{
#if defined(__linux__) && defined(SYS_membarrier)
  if (!shmap__setting_membarrier())
    return;
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0,
              0) == 0)
    shmap__fence_light = true;
#endif
}

/* The waiter's side: a full fence on every running thread of the process;
 * false if the kernel refused it (it never has once registered: then a
 * publisher's store may still be on its way, and the caller sleeps only
 * briefly at a time). */
static bool heavy_fence(void)
{
#if defined(__linux__) && defined(SYS_membarrier)
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
    return true;
#endif
  /* The caller's setting of its bit was a full fence already. */
  return false;
}

/* The longest sleep when heavy_fence failed. */
#define UNFENCED_NAP 1000000u /* ns */

/* A waiter whose sleeping bit is `bit` of *flag (a device thread's bit in
 * the runtime's mask), or of its own word. */
void shmap__waiter_init_bit(shmap__waiter *w, _Atomic uint64_t *flag,
                            uint64_t bit, uint64_t spin_ns)
{
  w->flag = flag ? flag : &w->own;
  w->bit = flag ? bit : 1;
  w->spin_ns = spin_ns;
  sleep_init(w);
}
static void waiter_fini(shmap__waiter *w) { sleep_fini(w); }

void shmap__waiter_init(shmap__waiter *w, uint64_t spin_ns)
{
  shmap__waiter_init_bit(w, NULL, 0, spin_ns);
}
void shmap__waiter_fini(shmap__waiter *w) { waiter_fini(w); }

SHMAP__TLS_FAST shmap__dev *shmap__helper_for;

void shmap__wake(shmap__waiter *w)
{
  /* Paired with the sleeper's setting of its bit followed by its re-check
   * of the condition (both sequentially consistent): either it sees our
   * change, or we see its bit.  Clearing the bit is the token of this
   * wake-up: of several wakers only one makes the system call, and a
   * thread woken but not yet running costs later wakers a load. */
  if ((atomic_load(w->flag) & w->bit) &&
      (atomic_fetch_and(w->flag, ~w->bit) & w->bit)) {
    atomic_fetch_add(&w->word, 1);
    wake_one(w);
  }
}

/* Wake the sleeping device threads from device `from` on.
 * Only the devices whose bit is set sleep: a failure, or a device leaving
 * its body, costs a word per 64 devices plus a wake-up per sleeper, not a
 * look at every device. */
void shmap__wake_devices(shmap__runtime *rt, int from)
{
  int nwords = (rt->ndev + 63) / 64;
  for (int i = from / 64; i < nwords; i++) {
    uint64_t m = atomic_load(&rt->sleepers[i]);
    if (i == from / 64)
      m &= ~(((uint64_t)1 << (from % 64)) - 1);
    while (m) {
      int b = __builtin_ctzll(m);
      m &= m - 1;
      shmap__wake(&rt->devs[i * 64 + b].waiter);
    }
  }
}

/* Before the first map no mode is chosen and no device waits. */
void shmap__wake_all(shmap__runtime *rt)
{
  if (rt->ops)
    rt->ops->wake_all(rt);
}

/*
 * The waiting policy.  A thread waiting for a condition that another
 * thread makes true (a peer's arrival, the end of a map, the next map)
 * spins for a while, then sleeps in the kernel until a thread that
 * changed the condition wakes it.  A wake-up from sleep costs 5 to 200 us
 * on a virtual machine; a spin costs a core, which on a laptop something
 * else may need.  So:
 *
 *  - The spin is bounded in time, not in iterations (a PAUSE takes from 10
 *    to 140 cycles, depending on the CPU): at most rt->spin_max, which is
 *    SHMAP_SPIN microseconds, by default 200 us when the threads fit the
 *    cores, 20 us when they do not, and none with more than SPIN_CROWD
 *    threads per core: then the thread waited for has to be switched in
 *    almost every time, and a spin only delays it (a psum over 64 to 1024
 *    device threads on 2 cores took 10-20% less time without spinning;
 *    up to 16 the spin made no difference, and at 4 it saved a quarter).
 *  - Each waiter adapts its budget to its recent waits.  A wait that ended
 *    within spin_max (counting the wake-up, when it slept) raises the
 *    budget to twice its length; a longer one shrinks it by a quarter, down
 *    to SPIN_FLOOR.  A device in a loop of collectives spins through its
 *    waits; a thread that waits long sleeps almost at once.
 *  - After SPIN_PURE of plain spinning, the spinner yields its core at every
 *    look at the clock, so that a thread it waits for on the same core
 *    runs.
 *  - It stops spinning when the thread it waits for is known not to run:
 *    the device it waits for sleeps itself (or, in fiber mode, every other
 *    worker sleeps); spinning cannot bring that thread back.
 *  - It stops spinning when it finds that it was descheduled: two looks at
 *    the clock more than PREEMPTED apart mean that the kernel gave its core
 *    to another thread, so the cores are shared (another process, or more
 *    threads than cores) and every further microsecond of spinning is
 *    taken from someone who needs it.  The budget is halved as well.
 */
#define SPIN_FLOOR 1000u      /* ns */
#define SPIN_CROWD 8          /* threads per processor beyond which none spins */
#define SPIN_PURE 4000u       /* ns */
#define PREEMPTED 50000u      /* ns */
#define SPIN_CHECK 16         /* pauses between looks at the clock */

static void adapt(shmap__runtime *rt, shmap__waiter *w, uint64_t len)
{
  uint64_t b = w->spin_ns;
  if (len <= rt->spin_max)
    b = 2 * len > b ? 2 * len : b;
  else
    b -= b / 4;
  w->spin_ns = b > rt->spin_max ? rt->spin_max : b < SPIN_FLOOR ? SPIN_FLOOR : b;
}

void shmap__backoff(unsigned i)
{
  if (i < 1000)
    cpu_relax();
  else
    sched_yield();
}

/* SPIN_CHECK looks at the condition, then one at the abort flag: 1
 * condition, 0 abort, -1 neither. */
static int spin_round(shmap__pred pred, void *arg, _Atomic int *abort)
{
  for (int i = 0; i < SPIN_CHECK; i++) {
    if (pred(arg))
      return 1;
    cpu_relax();
  }
  return abort && atomic_load(abort) ? 0 : -1;
}

/* 1 condition, 0 abort, -1 still waiting after the spin. */
static int spin(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                void *arg, _Atomic int *abort, shmap__stalled_fn stalled,
                const void *sarg, uint64_t t0)
{
  uint64_t budget = w->spin_ns > rt->spin_max ? rt->spin_max : w->spin_ns;
  uint64_t last = t0;
  for (;;) {
    int r = spin_round(pred, arg, abort);
    if (r >= 0)
      return r;
    uint64_t now = shmap__now();
    if (now - last > PREEMPTED) {
      w->spin_ns = w->spin_ns / 2 < SPIN_FLOOR ? SPIN_FLOOR : w->spin_ns / 2;
      return -1;
    }
    if (now - t0 >= budget || (stalled && stalled(sarg)))
      return -1;
    if (now - t0 >= SPIN_PURE) {
      sched_yield();
      now = shmap__now();
    }
    last = now;
  }
}

int shmap__wait_full(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                     void *arg, _Atomic int *abort, uint64_t deadline,
                     shmap__stalled_fn stalled, const void *sarg)
{
  /* The condition is checked before the abort flag: a condition that holds
   * (e.g. every peer arrived) must win, so that all members of a group take
   * the same branch. */
  if (pred(arg))
    return 1;
  uint64_t t0 = shmap__now();
  int r = rt->spin_max ? spin(rt, w, pred, arg, abort, stalled, sarg, t0) : -1;
  if (r == 1) {
    adapt(rt, w, shmap__now() - t0);
    return 1;
  }
  if (r == 0)
    return 0;
  for (;;) {
    uint32_t seen = atomic_load(&w->word);
    atomic_fetch_or(w->flag, w->bit);
    /* The first look sets the condition's watch words; after the heavy
     * fence, the second sees every store a waker made before it looked
     * at them or at our bit (see "Publishing before a wake-up"). */
    shmap__may_sleep = true;
    r = pred(arg) ? 1 : -1;
    bool fenced = true;
    if (r < 0 && rt->fence_light) {
      fenced = heavy_fence();
      r = pred(arg) ? 1 : -1;
    }
    shmap__may_sleep = false;
    if (r < 0 && abort && atomic_load(abort))
      r = 0;
    uint64_t now = shmap__now();
    if (r < 0 && deadline && now >= deadline)
      r = -2;
    if (r != -1) {
      atomic_fetch_and(w->flag, ~w->bit);
      if (r == 1 && rt->spin_max)
        adapt(rt, w, now - t0);
      return r == -2 ? -1 : r;
    }
    uint64_t nap = deadline ? deadline - now : 0;
    if (!fenced && (!nap || nap > UNFENCED_NAP))
      nap = UNFENCED_NAP;
    sleep_on(w, seen, nap);
    /* A waker cleared the bit already, unless this was a time-out or a
     * spurious return. */
    atomic_fetch_and(w->flag, ~w->bit);
  }
}

int shmap__wait_until(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                      void *arg, _Atomic int *abort, uint64_t deadline)
{
  return shmap__wait_full(rt, w, pred, arg, abort, deadline, NULL, NULL);
}

/*
 * Waiting for a condition that only polling makes true: MPI requests, which
 * progress only inside MPI_Test, on both sides of a transfer (a large
 * message takes several such steps, each needing the other side to look).
 * Sleeping between looks would add its length to every step, so the waiter
 * spins for SPIN_PURE, then yields its core at every look (what MPI's own
 * blocking calls do when the cores are shared), and only after POLL_YIELD
 * of that (a peer busy elsewhere), or as soon as a few yields show that
 * other threads wait for the cores (more threads than cores: the spinning
 * would take the peer's time), sleeps for POLL_NAP at a time between looks,
 * still woken early by a local failure or wake-up (w NULL: a thread
 * with no waiter, which just sleeps; rt is then unused).
 */
#define POLL_YIELD 5000000u /* ns */
#define POLL_NAP 50000u     /* ns */
#define POLL_TAKEN 3        /* long yields that mean the cores are shared */
/* The longest nap of shmap__poll_until_woken (see there). */
#define POLL_NAP_WOKEN 2000000u /* ns */

/* Poll as above, naps growing from POLL_NAP to nap_max. */
static int poll_full(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                     void *arg, _Atomic int *abort, uint64_t nap_max)
{
  uint64_t t0 = shmap__now(), nap = POLL_NAP;
  int taken = 0; /* yields that gave the core away for long */
  for (;;) {
    int r = spin_round(pred, arg, abort);
    if (r >= 0)
      return r;
    uint64_t now = shmap__now(), el = now - t0;
    if (el < SPIN_PURE)
      continue;
    if (el < POLL_YIELD && taken < POLL_TAKEN) {
      sched_yield();
      /* Yields that give the core away for long: more threads want the
       * cores than there are (more processes, or another program), and
       * the peer may be one of them; napping leaves it the core.  One
       * such yield proves little (a library's service thread woke). */
      taken += shmap__now() - now > PREEMPTED;
      continue;
    }
    if (!w) {
      struct timespec ts = {0, POLL_NAP};
      nanosleep(&ts, NULL);
      continue;
    }
    r = shmap__wait_full(rt, w, pred, arg, abort, shmap__now() + nap, NULL,
                         NULL);
    if (r >= 0)
      return r;
    nap = 2 * nap < nap_max ? 2 * nap : nap_max;
  }
}

int shmap__poll_until(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                      void *arg, _Atomic int *abort)
{
  return poll_full(rt, w, pred, arg, abort, POLL_NAP);
}

/*
 * For a condition that local devices make true and wake the waiter for,
 * polled only as a safety net against a lost wake-up (a spread group's
 * member waiting for its leader's outcome): each nap doubles, up to
 * POLL_NAP_WOKEN.  With 50 us naps,
 * 63 member threads of a process each woke 20,000 times a second with
 * nothing to do, which took both cores: a psum over 2x64 device threads
 * took 40-60 ms a call, 0.74 ms with growing naps.
 */
int shmap__poll_until_woken(shmap__runtime *rt, shmap__waiter *w,
                            shmap__pred pred, void *arg, _Atomic int *abort)
{
  return poll_full(rt, w, pred, arg, abort, POLL_NAP_WOKEN);
}

bool shmap__wait(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                 void *arg, _Atomic int *abort)
{
  return shmap__wait_full(rt, w, pred, arg, abort, 0, NULL, NULL) == 1;
}

/* ---- failure ----------------------------------------------------------- */

int shmap__fail(shmap__runtime *rt, int dev, int code, const char *msg)
{
  int expected = -1;
  if (atomic_compare_exchange_strong(&rt->failed_dev, &expected, dev)) {
    rt->fail_code = code;
    snprintf(rt->fail_msg, sizeof rt->fail_msg, "%s", msg);
    /* Other processes first: a device released here may tell them it
     * returned, which must not reach them before the failure does. */
    shmap__hooks_failed(rt, dev, code, msg);
    atomic_store(&rt->abort, 1); /* publishes fail_code and fail_msg */
    if (!shmap__hooks_release(rt))
      shmap__wake_all(rt);
  } else {
    /* Another failure came first and is being recorded.  Wait until it is
     * published: otherwise this device could return from its body before
     * the map is seen to have failed, and a peer waiting for it in a
     * collective would take its leaving for a mismatch.  The winner only
     * formats a message before publishing (no waits, no fiber switch). */
    for (unsigned i = 0; !atomic_load(&rt->abort); i++)
      shmap__backoff(i);
  }
  return code;
}

/* ---- choosing how devices run ------------------------------------------ */

static int ncpu(void) { return (int)uv_available_parallelism(); }

/* A debugger attached to the process (Linux: TracerPid in /proc). */
bool shmap__debugger_attached(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return false;
  char line[256];
  bool traced = false;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "TracerPid:", 10) == 0) {
      traced = atoi(line + 10) != 0;
      break;
    }
  fclose(f);
  return traced;
}

/* The scheduling modes, by name. */
static const shmap__sched_ops *const modes[] = {
    &shmap__sched_threads,
    &shmap__sched_fibers,
    &shmap__sched_explore,
};

/* SHMAP_SCHED names a mode, or is auto (unset).  Auto runs the devices as
 * fibers on one worker per core (up to one per device), even when the
 * cores would give each device a thread: a worker can take over the
 * runnable devices of a worker the kernel has descheduled, which a device
 * thread cannot, so a collective stays within a small factor of its idle
 * time when another process shares a core (a thread per device took up to
 * thousands of times longer; BENCHMARKS.md), and idle it costs the same or
 * less.  Under a debugger each device gets a thread, so that gdb shows
 * every device as a thread of its own. */
static const shmap__sched_ops *choose_mode(void)
{
  const char *name = shmap__setting_sched();
  if (!name)
    name = shmap__debugger_attached() ? "threads" : "fibers";
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    if (strcmp(modes[i]->name, name) == 0)
      return modes[i];
  return &shmap__sched_fibers; /* settings.c accepts only the names above */
}

static bool all_done(void *arg)
{
  shmap__runtime *rt = arg;
  return atomic_load(&rt->done) == rt->ndev;
}

int shmap__thread_tid(void)
{
#ifdef __linux__
  static _Thread_local int tid;
  if (!tid)
    tid = (int)syscall(SYS_gettid);
  return tid;
#else
  return 0;
#endif
}

/* ---- scheduler operations (sched.h): the mode's ----------------------------- */

bool shmap__dev_wait_on(shmap__runtime *rt, shmap__dev *d,
                        const shmap__dev *awaited, shmap__pred pred, void *arg,
                        _Atomic int *abort)
{
  return rt->ops->dev_wait_on(rt, d, awaited, pred, arg, abort);
}

bool shmap__dev_wait(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                     void *arg, _Atomic int *abort)
{
  return rt->ops->dev_wait_on(rt, d, NULL, pred, arg, abort);
}

void shmap__dev_yield(shmap__runtime *rt, shmap__dev *d)
{
  rt->ops->dev_yield(rt, d);
}

bool shmap__dev_poll(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                     void *arg, _Atomic int *abort)
{
  return rt->ops->dev_poll(rt, d, pred, arg, abort);
}

bool shmap__dev_poll_woken(shmap__runtime *rt, shmap__dev *d,
                           shmap__pred pred, void *arg, _Atomic int *abort)
{
  if (rt->ops->dev_poll_woken)
    return rt->ops->dev_poll_woken(rt, d, pred, arg, abort);
  return rt->ops->dev_poll(rt, d, pred, arg, abort);
}

void shmap__wake_group(shmap__runtime *rt, int n, int self,
                       int (*member)(const void *arg, int i), const void *arg)
{
  rt->ops->wake_group(rt, n, self, member, arg);
}

int shmap__workers(const shmap__runtime *rt)
{
  return rt->ops ? rt->ops->workers(rt) : 0;
}

void shmap__runs_with(const shmap__runtime *rt, int d, int *lo, int *hi)
{
  rt->ops->runs_with(rt, d, lo, hi);
}

/* ---- per-map arrays ------------------------------------------------------- */

/* Each kept array starts with a header holding its size.  Taking and
 * giving back are atomic exchanges, so two threads mapping on one mesh at
 * once each get an array of their own. */
#define KEEP_HDR 64

void *shmap__runtime_take(shmap__runtime *rt, int i, size_t size)
{
  char *p = atomic_exchange(&rt->keep[i], NULL);
  if (p && *(size_t *)p >= size) {
    memset(p + KEEP_HDR, 0, size);
    return p + KEEP_HDR;
  }
  free(p);
  p = shmap__calloc(1, KEEP_HDR + size);
  if (!p)
    return NULL;
  *(size_t *)p = size;
  return p + KEEP_HDR;
}

void shmap__runtime_give(shmap__runtime *rt, int i, void *arr)
{
  if (!arr)
    return;
  free(atomic_exchange(&rt->keep[i], (char *)arr - KEEP_HDR));
}

/* ---- starting and stopping ------------------------------------------------ */

static size_t stack_size(void) { return shmap__setting_stack_size(); }

/* Stop and join the first n threads (devices or workers). */
static void join_threads(shmap__runtime *rt, int n)
{
  atomic_store(&rt->stop, 1);
  atomic_store(&rt->epoch, (atomic_load(&rt->epoch) | 1) + 1);
  rt->ops->join(rt, n);
}

static void free_devices(shmap__runtime *rt)
{
  rt->ops->teardown(rt);
  if (!rt->devs)
    return;
  for (int d = 0; d < rt->ndev; d++) {
    waiter_fini(&rt->devs[d].waiter);
    waiter_fini(&rt->devs[d].park);
    shmap__trace_dev_free(&rt->devs[d]);
    for (int i = 0; i < SHMAP__PLAN_MEMOS; i++)
      free(rt->devs[d].plan.memo[i]);
  }
  free(rt->devs);
  free((void *)rt->sleepers);
  rt->devs = NULL;
  rt->sleepers = NULL;
}

static void thread_name(const shmap_mesh *mesh, int d, char out[16])
{
  /* gdb's "info threads" shows this name: number and coordinates, within
   * the kernel's 15 characters. */
  int c[SHMAP_MAX_AXES];
  shmap__mesh_coords(mesh, d, c);
  char name[64];
  snprintf(name, sizeof name, "d%d(", d);
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(name, sizeof name, "%s%d", a ? "," : "", c[a]);
  shmap__cat(name, sizeof name, ")");
  memcpy(out, name, 15);
  out[15] = '\0';
}

/* The devices, their waiters and the mode's state; 0, or an error code
 * with them freed. */
static int start_devices(shmap__runtime *rt, size_t ss)
{
  rt->devs = shmap__alloc(sizeof(shmap__dev) * (size_t)rt->ndev, true);
  rt->sleepers = shmap__calloc((size_t)(rt->ndev + 63) / 64, sizeof(uint64_t));
  if (!rt->devs || !rt->sleepers) {
    free(rt->devs);
    free((void *)rt->sleepers);
    rt->devs = NULL;
    rt->sleepers = NULL;
    return shmap__err(SHMAP_ENOMEM, "out of memory for %d devices", rt->ndev);
  }
  for (int d = 0; d < rt->ndev; d++) {
    shmap__dev *dev = &rt->devs[d];
    dev->rt = rt;
    dev->id = d;
    dev->seen_epoch = atomic_load(&rt->epoch);
    dev->sched.wq = &dev->waiter;
    shmap__waiter_init_bit(&dev->waiter, &rt->sleepers[d / 64],
                           (uint64_t)1 << (d % 64), rt->spin_max);
    shmap__waiter_init(&dev->park, rt->spin_max);
    thread_name(rt->mesh, d, dev->name);
  }
  int rc = rt->ops->setup(rt, ss);
  if (rc)
    free_devices(rt);
  return rc;
}

static int start(shmap__runtime *rt)
{
  rt->ops = choose_mode();
  rt->mode = rt->ops->mode;
  uint64_t seed;
  rt->explore_all = shmap__setting_replay() || shmap__setting_explore_seed(&seed);
  /* How many threads compete for the cores while a map runs: a thread per
   * device, or the workers (the caller running worker 0's devices). */
  rt->nthreads = rt->ops->plan(rt);
  /* SHMAP_SPIN is in microseconds (see the waiting policy above). */
  long spin = shmap__setting_spin();
  int cpus = ncpu();
  int spin_us = spin >= 0                       ? (int)spin
                : rt->nthreads <= cpus          ? 200
                : rt->nthreads <= SPIN_CROWD * cpus ? 20
                                                : 0;
  rt->spin_max = spin_us > 0 ? (uint64_t)spin_us * 1000u : 0;
  /* Light publication where the kernel allows it and the threads fit the
   * processors (see "Publishing before a wake-up" in sched.h). */
  rt->fence_light = shmap__fence_light && rt->nthreads <= cpus;
  size_t ss = stack_size();
  int rc = start_devices(rt, ss);
  if (rc)
    return rc;
  for (int i = 0; i < rt->nthreads; i++) {
    rc = rt->ops->spawn(rt, i, ss);
    if (rc != 0) {
      join_threads(rt, i);
      free_devices(rt);
      atomic_store(&rt->stop, 0);
      return shmap__err(SHMAP_ESYS, "cannot start thread %d of %d: %s", i,
                        rt->nthreads, uv_strerror(rc));
    }
  }
  rt->started = 1;
  atomic_store(&rt->forkgen, shmap__fork_generation() + 1);
  return 0;
}

int shmap__runtime_create(shmap__runtime **out, shmap_mesh *mesh)
{
  shmap__runtime *rt = shmap__calloc(1, sizeof *rt);
  uv_mutex_t *lock = shmap__malloc(sizeof *lock);
  if (!rt || !lock || uv_mutex_init(lock) != 0) {
    free(rt);
    free(lock);
    return shmap__err(SHMAP_ENOMEM, "out of memory creating a mesh runtime");
  }
  uv_once(&fence_once, fence_init);
  rt->mesh = mesh;
  rt->ndev = mesh->ndev;
  rt->lock = lock;
  atomic_init(&rt->failed_dev, -1);
  shmap__waiter_init(&rt->host, 0);
  /* The threads started here must not be joined in a child of fork(). */
  shmap__fork_init();
  shmap__hooks_added(rt);
  *out = rt;
  return 0;
}

void shmap__runtime_destroy(shmap__runtime *rt)
{
  if (!rt)
    return;
  shmap__hooks_removed(rt); /* observers take what they keep of it */
  /* In a child of fork() the threads stayed in the parent (fork.c). */
  if (rt->started && atomic_load(&rt->forkgen) == shmap__fork_generation() + 1)
    join_threads(rt, rt->nthreads);
  shmap__progress_destroy(rt);
  shmap__hooks_destroy(rt);
  if (rt->ops)
    free_devices(rt);
  waiter_fini(&rt->host);
  free(atomic_load(&rt->keep[0]));
  free(atomic_load(&rt->keep[1]));
  uv_mutex_destroy(rt->lock);
  free(rt->lock);
  free(rt);
}

void shmap__runtime_lock(shmap__runtime *rt) { uv_mutex_lock(rt->lock); }
void shmap__runtime_unlock(shmap__runtime *rt) { uv_mutex_unlock(rt->lock); }
bool shmap__runtime_trylock(shmap__runtime *rt) { return uv_mutex_trylock(rt->lock) == 0; }

/*
 * The map's start.  The caller resets the devices' and workers' state of
 * the last map, then publishes the new epoch, which the workers (or
 * device threads) spin on between maps.  Every reset is a store to a line
 * that another core wrote last; a sequentially consistent store (an xchg
 * on x86) waits until it owns that line, so a series of them costs one
 * transfer between the cores each.  The resets are relaxed: the epoch's
 * store, which orders them before itself, is the only one that waits, and
 * the devices' state is read only after the epoch (or a START state
 * released after the resets).  The epoch has a cache line of its own: the
 * caller writes the job's fields for every map, and a worker spinning on
 * a line those share would take it back between any two of those stores.
 * An empty map at P=2 in fiber mode took 2.45 us with both, 1.3 with the
 * line alone and 0.74 with the relaxed resets as well.
 */
int shmap__runtime_ready(shmap__runtime *rt)
{
  shmap__runtime_lock(rt);
  int rc = rt->started ? 0 : start(rt);
  shmap__runtime_unlock(rt);
  return rc;
}

int shmap__runtime_run(shmap__runtime *rt, struct shmap__job *job,
                       shmap__run_fn run)
{
  if (!rt->started) {
    int rc = start(rt);
    if (rc)
      return rc;
  }
  /* The caller runs some devices itself (the mode says which), which saves
   * a wake-up and a thread switch per map -- unless a watchdog must keep
   * watching, which the caller does instead. */
  uint64_t period = shmap__watchdog_ns();
  bool host_runs = period == 0 && rt->host_runs;
  /* The devices are parked: reset their collective state before any of
   * them can look at a peer's. */
  for (int d = 0; d < rt->ndev; d++) {
    shmap__dev *dev = &rt->devs[d];
    atomic_store_explicit(&dev->coll.arrive, 0, memory_order_relaxed);
    atomic_store_explicit(&dev->coll.finished, 0, memory_order_relaxed);
  }
  atomic_store_explicit(&rt->abort, 0, memory_order_relaxed);
  atomic_store_explicit(&rt->failed_dev, -1, memory_order_relaxed);
  rt->fail_code = 0;
  rt->fail_msg[0] = '\0';
  atomic_store_explicit(&rt->done, 0, memory_order_relaxed);
  rt->job = job;
  rt->run = run;
  /* A map its caller wants explored, on a runtime of another mode: the
   * exploring mode runs it on this thread, and the mode's threads stay
   * parked (no new epoch wakes them). */
  const shmap__sched_ops *base = rt->ops;
  if ((rt->explore || rt->explore_all) && base != &shmap__sched_explore) {
    rt->ops = &shmap__sched_explore;
    rt->ops->launch(rt, true);
    rt->ops = base;
    rt->job = NULL;
    return 0;
  }
  rt->ops->prepare(rt);
  /* Epochs advance by two; the low bit carries host_runs. */
  atomic_store(&rt->epoch, ((atomic_load(&rt->epoch) | 1) + 1) | host_runs);
  rt->ops->launch(rt, host_runs);
  /* With a watchdog, wake up every period and report what each device
   * does; the map still waits for them (a body cannot be interrupted). */
  uint64_t start = period ? shmap__now() : 0;
  uint64_t deadline = start + period;
  while (shmap__wait_until(rt, &rt->host, all_done, rt, NULL,
                           period ? deadline : 0) != 1) {
    shmap__hooks_watch(rt, shmap__now() - start);
    deadline += period;
  }
  rt->job = NULL; /* no map running (debuggers look at this) */
  return 0;
}
