/* SPDX-License-Identifier: MIT */
/* runtime.c - persistent device threads, parking, waiting and waking. */
#include "sched/sched.h"

#include "device/arena.h"
#include "sched/debug.h"
#include "settings.h"
#include "transport/comm.h"
#include "coll/async.h"
#include "sched/progress.h"

#include <limits.h>
#include <pthread.h>
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
static void waiter_init(shmap__waiter *w, _Atomic uint64_t *flag, uint64_t bit,
                        uint64_t spin_ns)
{
  w->flag = flag ? flag : &w->own;
  w->bit = flag ? bit : 1;
  w->spin_ns = spin_ns;
  sleep_init(w);
}
static void waiter_fini(shmap__waiter *w) { sleep_fini(w); }

void shmap__waiter_init(shmap__waiter *w, uint64_t spin_ns)
{
  waiter_init(w, NULL, 0, spin_ns);
}
void shmap__waiter_fini(shmap__waiter *w) { waiter_fini(w); }

SHMAP__TLS_FAST shmap__dev *shmap__helper_for;

static bool asleep(const shmap__waiter *w)
{
  return (atomic_load_explicit(w->flag, memory_order_relaxed) & w->bit) != 0;
}

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

/* Thread mode: wake the sleeping device threads from device `from` on.
 * Only the devices whose bit is set sleep: a failure, or a device leaving
 * its body, costs a word per 64 devices plus a wake-up per sleeper, not a
 * look at every device. */
static void wake_devices(shmap__runtime *rt, int from)
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

void shmap__wake_all(shmap__runtime *rt)
{
  if (rt->workers) {
    for (int w = 0; w < rt->nworkers; w++)
      shmap__wake(&rt->workers[w].waiter);
    /* Progress helpers sleep on their devices' waiters (sched.h). */
    if (atomic_load_explicit(&rt->helpers, memory_order_relaxed))
      wake_devices(rt, 0);
  } else if (rt->devs && rt->sleepers) {
    wake_devices(rt, 0);
  }
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
 *    cores and 20 us when they do not.
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
#define SPIN_PURE 4000u       /* ns */
#define PREEMPTED 50000u      /* ns */
#define SPIN_CHECK 16         /* pauses between looks at the clock */

typedef bool (*stalled_fn)(const void *arg);

static void adapt(shmap__runtime *rt, shmap__waiter *w, uint64_t len)
{
  uint64_t b = w->spin_ns;
  if (len <= rt->spin_max)
    b = 2 * len > b ? 2 * len : b;
  else
    b -= b / 4;
  w->spin_ns = b > rt->spin_max ? rt->spin_max : b < SPIN_FLOOR ? SPIN_FLOOR : b;
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
                void *arg, _Atomic int *abort, stalled_fn stalled,
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

static int wait_impl(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                     void *arg, _Atomic int *abort, uint64_t deadline,
                     stalled_fn stalled, const void *sarg)
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
    r = pred(arg) ? 1 : -1;
    bool fenced = true;
    if (r < 0 && shmap__fence_light) {
      fenced = heavy_fence();
      r = pred(arg) ? 1 : -1;
    }
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
  return wait_impl(rt, w, pred, arg, abort, deadline, NULL, NULL);
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

int shmap__poll_until(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                      void *arg, _Atomic int *abort)
{
  uint64_t t0 = shmap__now();
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
    r = wait_impl(rt, w, pred, arg, abort, shmap__now() + POLL_NAP, NULL, NULL);
    if (r >= 0)
      return r;
  }
}

bool shmap__wait(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                 void *arg, _Atomic int *abort)
{
  return wait_impl(rt, w, pred, arg, abort, 0, NULL, NULL) == 1;
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
    if (rt->tp && rt->tp->notify)
      rt->tp->notify(rt, dev, code, msg);
    atomic_store(&rt->abort, 1); /* publishes fail_code and fail_msg */
    if (rt->tp)
      rt->tp->failed(rt);
    else
      shmap__wake_all(rt);
  } else {
    /* Another failure came first and is being recorded.  Wait until it is
     * published: otherwise this device could return from its body before
     * the map is seen to have failed, and a peer waiting for it in a
     * collective would take its leaving for a mismatch.  The winner only
     * formats a message before publishing (no waits, no fiber switch). */
    for (int i = 0; !atomic_load(&rt->abort); i++) {
      if (i < 1000)
        cpu_relax();
      else
        sched_yield();
    }
  }
  return code;
}

/* ---- choosing how devices run ------------------------------------------ */

static int ncpu(void) { return (int)uv_available_parallelism(); }

/* A debugger attached to the process (Linux: TracerPid in /proc). */
static bool debugger_attached(void)
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

/* SHMAP_SCHED=threads|fibers|auto.  Auto runs the devices as fibers on one
 * worker per core (up to one per device), even when the cores would give
 * each device a thread: a worker can take over the runnable devices of a
 * worker the kernel has descheduled, which a device thread cannot, so a
 * collective stays within a small factor of its idle time when another
 * process shares a core (a thread per device took up to thousands of
 * times longer; BENCHMARKS.md), and idle it costs the same or less.  Under
 * a debugger each device gets a thread, so that gdb shows every device as
 * a thread of its own. */
static int choose_mode(void)
{
  int sched = shmap__setting_sched();
  if (sched == SHMAP__SCHED_THREADS)
    return SHMAP__THREADS;
  if (sched == SHMAP__SCHED_FIBERS)
    return SHMAP__FIBERS;
  return debugger_attached() ? SHMAP__THREADS : SHMAP__FIBERS;
}

static bool w0_out(void *arg)
{
  shmap__runtime *rt = arg;
  return atomic_load(&rt->w0_in) == 0;
}

static bool all_done(void *arg)
{
  shmap__runtime *rt = arg;
  return atomic_load(&rt->done) == rt->ndev;
}

static int current_tid(void)
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

/* ---- thread mode ---------------------------------------------------------- */

static bool epoch_changed(void *arg)
{
  shmap__dev *d = arg;
  return atomic_load(&d->rt->epoch) != d->seen_epoch;
}

/* A device thread waiting for device `sarg` spins no longer once that
 * device sleeps. */
static bool dev_asleep(const void *sarg)
{
  return asleep(&((const shmap__dev *)sarg)->waiter);
}

/* A device back from its part of a map is parked since its last state
 * change (run_device's end): no clock read of its own. */
static void park_state(shmap__dev *d)
{
  shmap__set_state(d, SHMAP__ST_PARKED, 0,
                   atomic_load_explicit(&d->dbg.since, memory_order_relaxed));
}

static void device_main(void *arg)
{
  shmap__dev *d = arg;
  shmap__runtime *rt = d->rt;
  int own_tid = current_tid();
  shmap__guard_thread();
  /* Device 0's number belongs to the map's caller while it runs device 0
   * (host_run_device0); this thread takes it only for a map it runs. */
  if (d->id != 0 || !rt->host_runs)
    d->tid = own_tid;
#ifdef HAVE_PTHREAD_SETNAME_NP
  pthread_setname_np(pthread_self(), d->name);
#endif
  for (;;) {
    /* Between maps too the thread spins for its adapted budget first, so
     * that a program making map after map does not put its devices to
     * sleep and wake them through the kernel for each one. */
    shmap__wait(rt, &d->park, epoch_changed, d, NULL);
    d->seen_epoch = atomic_load(&rt->epoch);
    if (atomic_load(&rt->stop))
      return;
    /* The epoch's low bit says whether the map's caller runs device 0
     * itself (see shmap__runtime_run). */
    if (d->id == 0 && (d->seen_epoch & 1))
      continue;
    d->tid = own_tid;
    rt->run(rt->job, d->id);
    park_state(d);
    if (atomic_fetch_add(&rt->done, 1) + 1 == rt->ndev)
      shmap__wake(&rt->host);
  }
}

/* The map's caller runs device 0 on its own thread. */
static void host_run_device0(shmap__runtime *rt)
{
  shmap__dev *d = &rt->devs[0];
  d->tid = current_tid(); /* debuggers find device 0 on this thread */
  shmap__errbuf_use(d->sched.errbuf);
  rt->run(rt->job, 0);
  shmap__errbuf_use(NULL);
  park_state(d);
  if (atomic_fetch_add(&rt->done, 1) + 1 == rt->ndev)
    shmap__wake(&rt->host);
}

/* ---- fiber mode ----------------------------------------------------------- */

static void fiber_main(void *arg)
{
  shmap__dev *d = arg;
  shmap__fiber_entered(&d->sched.fiber, &d->sched.worker->self);
  for (;;) {
    d->rt->run(d->rt->job, d->id);
    park_state(d);
    d->sched.fnext = SHMAP__F_DONE;
    /* Whichever worker runs it now (it may have moved, see below). */
    shmap__fiber_switch(&d->sched.fiber, &d->sched.worker->self);
  }
}

/*
 * Workers and stealing.  Each worker runs a contiguous range of devices,
 * its home range: neighbouring ranks share a core.  When the cores are
 * shared with another process, the kernel deschedules a worker for
 * milliseconds at a time; every collective then waits for the devices of
 * that worker, and a loop of collectives crawls (1000 times slower here).
 * So a worker with nothing of its own to run takes over the runnable
 * devices of a worker that has not looked for work for STEAL_AFTER: a
 * descheduled one, or one busy in a long body.  Fibers are resumed by
 * whichever worker claims them; a device waits and returns to the worker
 * that runs it (sched.worker).
 *
 * A device's state changes hands by compare-and-swap, so that exactly one
 * worker checks its wait condition (F_WAIT -> F_CHECK) and one runs it
 * (F_START or F_READY -> F_RUN).  A running fiber cannot be claimed; it
 * says in fnext how it leaves, and its worker publishes that state (a
 * release) only once the switch back is complete, so no other worker
 * resumes a fiber whose registers are still being saved.
 */
#define STEAL_AFTER 50000u /* ns */
#define WORKER_RECHECK 100000000u /* ns: see worker_job */

static int fstate(const shmap__dev *d)
{
  return atomic_load_explicit(&d->sched.fstate, memory_order_acquire);
}

static bool fstate_cas(shmap__dev *d, int from, int to)
{
  return atomic_compare_exchange_strong_explicit(
      &d->sched.fstate, &from, to, memory_order_acq_rel, memory_order_relaxed);
}

/* Whether fiber d may continue now; a waiting one whose wait is over
 * becomes READY (with wres set).  Only the worker that moved it to CHECK
 * evaluates its condition.  With `maybe`, a fiber another worker is
 * checking counts as ready: its condition may have become true after that
 * worker evaluated it, and the wake-up for it went to this worker, which
 * must then not go to sleep (it looks again instead). */
static bool fiber_ready_or(shmap__dev *d, bool maybe)
{
  int s = fstate(d);
  if (s == SHMAP__F_START || s == SHMAP__F_READY)
    return true;
  if (s == SHMAP__F_CHECK)
    return maybe;
  if (s != SHMAP__F_WAIT || !fstate_cas(d, SHMAP__F_WAIT, SHMAP__F_CHECK))
    return maybe && fstate(d) == SHMAP__F_CHECK;
  int res = d->sched.wpred(d->sched.warg)                              ? 1
            : d->sched.wabort && atomic_load(d->sched.wabort) ? 0
                                                                       : -1;
  if (res >= 0)
    d->sched.wres = res;
  atomic_store_explicit(&d->sched.fstate,
                        res >= 0 ? SHMAP__F_READY : SHMAP__F_WAIT,
                        memory_order_release);
  return res >= 0;
}

static bool fiber_ready(shmap__dev *d) { return fiber_ready_or(d, false); }

/* Run fiber d on worker w until it waits or is done, if w can claim it. */
static bool run_fiber(shmap__worker *w, shmap__dev *dev)
{
  shmap__runtime *rt = w->rt;
  if (!fiber_ready(dev) || !(fstate_cas(dev, SHMAP__F_START, SHMAP__F_RUN) ||
                             fstate_cas(dev, SHMAP__F_READY, SHMAP__F_RUN)))
    return false;
  dev->sched.worker = w;
  /* The device's context and messages follow it onto this thread. */
  shmap__set_current(dev->ctx);
  shmap__errbuf_use(dev->sched.errbuf);
  shmap__fiber_switch(&w->self, &dev->sched.fiber);
  shmap__errbuf_use(NULL);
  shmap__set_current(NULL);
  int next = dev->sched.fnext;
  shmap__worker *home = dev->sched.home;
  /* Before the home worker's wake-up below. */
  shmap__publish(&dev->sched.fstate, next);
  if (next == SHMAP__F_DONE) {
    atomic_fetch_add(&home->ndone, 1);
    if (atomic_fetch_add(&rt->done, 1) + 1 == rt->ndev)
      shmap__wake(&rt->host);
  }
  /* A wake-up for a taken-over device goes to its home worker, which may
   * have seen it running and gone to sleep: it looks again. */
  if (home != w)
    shmap__wake(&home->waiter);
  return true;
}

/* Workers that have not looked for work lately. */
static bool stale(const shmap__worker *o, uint64_t now)
{
  return atomic_load(&o->ndone) < o->count &&
         now - atomic_load_explicit(&o->beat, memory_order_relaxed) > STEAL_AFTER;
}

/* Run the runnable devices of stale workers, in one pass over each;
 * whether one ran.  (Returning after the first made a worker look at all
 * its own devices and then at the stale worker's from the start again for
 * every device it took over: O(n^2) looks per collective when a worker
 * whose core is taken holds hundreds of devices.) */
static bool steal(shmap__worker *w)
{
  shmap__runtime *rt = w->rt;
  uint64_t now = shmap__now();
  bool ran = false;
  for (int i = 1; i < rt->nworkers; i++) {
    shmap__worker *o = &rt->workers[(w->id + i) % rt->nworkers];
    if (!stale(o, now))
      continue;
    for (int d = o->first; d < o->first + o->count; d++)
      ran |= run_fiber(w, &rt->devs[d]);
  }
  return ran;
}

/* The wait condition of an idle worker: one of its devices can go on, all
 * are done, or a stale worker has one that can. */
static bool any_ready(void *arg)
{
  shmap__worker *w = arg;
  shmap__runtime *rt = w->rt;
  uint64_t now = shmap__now();
  atomic_store_explicit(&w->beat, now, memory_order_relaxed);
  if (atomic_load(&w->ndone) == w->count)
    return true;
  for (int d = w->first; d < w->first + w->count; d++)
    if (fiber_ready_or(&rt->devs[d], true))
      return true;
  for (int i = 1; i < rt->nworkers; i++) {
    shmap__worker *o = &rt->workers[(w->id + i) % rt->nworkers];
    if (!stale(o, now))
      continue;
    for (int d = o->first; d < o->first + o->count; d++)
      if (fiber_ready(&rt->devs[d]))
        return true;
  }
  return false;
}

/* The same, or a device started waiting for MPI (perhaps one of ours that
 * another worker ran): then the worker must poll instead of sleeping. */
static bool any_ready_or_mpi(void *arg)
{
  shmap__worker *w = arg;
  return atomic_load(&w->rt->mpi_waiters) || any_ready(arg);
}

/* A worker whose fibers all wait spins only while another worker runs:
 * only a running device can make theirs ready. */
static bool others_asleep(const void *sarg)
{
  const shmap__worker *w = sarg;
  const shmap__runtime *rt = w->rt;
  for (int i = 0; i < rt->nworkers; i++)
    if (i != w->id && !asleep(&rt->workers[i].waiter))
      return false;
  return true;
}

static void worker_job(shmap__worker *w)
{
  shmap__runtime *rt = w->rt;
  /* Whichever thread runs this job (the worker's, or the map's caller for
   * worker 0) is where the devices return to. */
  shmap__fiber_host_init(&w->self);
  shmap__guard_thread();
  int lo = w->first, hi = w->first + w->count;
  while (atomic_load(&w->ndone) < w->count) {
    atomic_store_explicit(&w->beat, shmap__now(), memory_order_relaxed);
    bool ran = false;
    for (int d = lo; d < hi; d++)
      ran |= run_fiber(w, &rt->devs[d]);
    if (!ran)
      ran = steal(w);
    if (!ran && atomic_load(&w->ndone) < w->count) {
      /* Nobody wakes a device waiting for MPI: poll for it. */
      /* The deadline is a safety net, not a schedule: every change a
       * worker waits for wakes it, but should one wake-up ever be lost,
       * the map goes on WORKER_RECHECK later instead of hanging. */
      if (atomic_load(&rt->mpi_waiters))
        shmap__poll_until(rt, &w->waiter, any_ready, w, NULL);
      else
        wait_impl(rt, &w->waiter, any_ready_or_mpi, w, NULL,
                  shmap__now() + WORKER_RECHECK, others_asleep, w);
    }
  }
  /* Its own are done: help a stale worker finish, rather than wait for it
   * to be scheduled. */
  while (atomic_load(&rt->done) < rt->ndev && steal(w))
    ;
}

static bool worker_epoch(void *arg)
{
  shmap__worker *w = arg;
  return atomic_load(&w->rt->epoch) != w->seen_epoch;
}

static void worker_main(void *arg)
{
  shmap__worker *w = arg;
  shmap__runtime *rt = w->rt;
  w->tid = current_tid();
#ifdef HAVE_PTHREAD_SETNAME_NP
  pthread_setname_np(pthread_self(), w->name);
#endif
  for (;;) {
    shmap__wait(rt, &w->park, worker_epoch, w, NULL);
    if (w->id == 0)
      atomic_store(&rt->w0_in, 1);
    w->seen_epoch = atomic_load(&rt->epoch);
    /* The epoch's low bit says whether the map's caller runs worker 0's
     * devices itself: read with the epoch, it cannot belong to another
     * map. */
    bool skip = atomic_load(&rt->stop) || (w->id == 0 && (w->seen_epoch & 1));
    if (!skip)
      worker_job(w);
    /* Out of the job: the map's caller may now run worker 0's devices,
     * see shmap__runtime_run. */
    if (w->id == 0) {
      atomic_store(&rt->w0_in, 0);
      shmap__wake(&rt->host);
    }
    if (atomic_load(&rt->stop))
      return;
  }
}

bool shmap__dev_wait_on(shmap__runtime *rt, shmap__dev *d,
                        const shmap__dev *awaited, shmap__pred pred, void *arg,
                        _Atomic int *abort)
{
  if (rt->mode == SHMAP__THREADS)
    return wait_impl(rt, &d->waiter, pred, arg, abort, 0,
                     awaited ? dev_asleep : NULL, awaited) == 1;
  if (shmap__helper_for == d) {
    /* A progress helper in fiber mode waits like a device thread; nobody
     * wakes it for MPI transfers, so then it polls. */
    if (atomic_load(&rt->mpi_waiters))
      return shmap__poll_until(rt, &d->waiter, pred, arg, abort) == 1;
    return wait_impl(rt, &d->waiter, pred, arg, abort, 0, NULL, NULL) == 1;
  }
  /* A fiber never spins: while it waits its worker runs the others. */
  if (pred(arg))
    return true;
  if (abort && atomic_load(abort))
    return false;
  d->sched.wpred = pred;
  d->sched.warg = arg;
  d->sched.wabort = abort;
  d->sched.fnext = SHMAP__F_WAIT;
  /* Back to the worker that runs it; whichever worker claims it next
   * resumes it here (see Workers and stealing). */
  shmap__fiber_switch(&d->sched.fiber, &d->sched.worker->self);
  return d->sched.wres;
}

bool shmap__dev_wait(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                     void *arg, _Atomic int *abort)
{
  return shmap__dev_wait_on(rt, d, NULL, pred, arg, abort);
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
  for (int i = 0; i < n; i++)
    shmap__wake(rt->mode == SHMAP__FIBERS ? &rt->workers[i].park
                                          : &rt->devs[i].park);
  for (int i = 0; i < n; i++) {
    uv_thread_t t = (uv_thread_t)(rt->mode == SHMAP__FIBERS
                                      ? rt->workers[i].thread
                                      : rt->devs[i].thread);
    uv_thread_join(&t);
  }
}

static void free_devices(shmap__runtime *rt)
{
  if (!rt->devs)
    return;
  for (int d = 0; d < rt->ndev; d++) {
    waiter_fini(&rt->devs[d].waiter);
    waiter_fini(&rt->devs[d].park);
    shmap__fiber_destroy(&rt->devs[d].sched.fiber);
    shmap__arena_cache_free(&rt->devs[d]);
  }
  if (rt->workers)
    for (int w = 0; w < rt->nworkers; w++)
      waiter_fini(&rt->workers[w].waiter), waiter_fini(&rt->workers[w].park);
  free(rt->workers);
  free(rt->devs);
  free((void *)rt->sleepers);
  rt->workers = NULL;
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

static void *device_thread(void *arg)
{
  device_main(arg);
  return NULL;
}

/* A device thread, whose stack (ss bytes, or the system's default size for
 * 0) has the same unmapped gap below it as a fiber stack, rather than
 * glibc's one guard page: an overflow by a large frame faults there instead
 * of writing into the stack of the thread mapped below (shmap_map(3)). */
static int start_device_thread(uv_thread_t *t, size_t ss, shmap__dev *dev)
{
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc == 0 && ss)
    rc = pthread_attr_setstacksize(&attr, ss);
  if (rc == 0)
    rc = pthread_attr_setguardsize(&attr, SHMAP__STACK_GUARD);
  if (rc == 0)
    rc = pthread_create(t, &attr, device_thread, dev);
  pthread_attr_destroy(&attr);
  return -rc; /* libuv's error codes, as uv_thread_create_ex's: -errno */
}

static int start(shmap__runtime *rt)
{
  shmap_mesh *mesh = rt->mesh;
  rt->mode = choose_mode();
  /* How many threads compete for the cores while a map runs: a thread per
   * device, or the workers (the caller running worker 0's devices). */
  int nthreads = rt->ndev;
  if (rt->mode == SHMAP__FIBERS) {
    int nw = shmap__setting_workers() ? shmap__setting_workers() : ncpu();
    rt->nworkers = nw < 1 ? 1 : nw > rt->ndev ? rt->ndev : nw;
    nthreads = rt->nworkers;
  }
  /* SHMAP_SPIN is in microseconds (see the waiting policy above). */
  long spin = shmap__setting_spin();
  int spin_us = spin >= 0 ? (int)spin : nthreads <= ncpu() ? 200 : 20;
  rt->spin_max = spin_us > 0 ? (uint64_t)spin_us * 1000u : 0;
  rt->devs = shmap__alloc(sizeof(shmap__dev) * (size_t)rt->ndev, true);
  rt->sleepers = shmap__calloc((size_t)(rt->ndev + 63) / 64, sizeof(uint64_t));
  if (!rt->devs || !rt->sleepers) {
    free(rt->devs);
    free((void *)rt->sleepers);
    rt->devs = NULL;
    rt->sleepers = NULL;
    return shmap__err(SHMAP_ENOMEM, "out of memory for %d devices", rt->ndev);
  }
  size_t ss = stack_size();
  for (int d = 0; d < rt->ndev; d++) {
    shmap__dev *dev = &rt->devs[d];
    dev->rt = rt;
    dev->id = d;
    dev->seen_epoch = atomic_load(&rt->epoch);
    dev->sched.wq = &dev->waiter;
    waiter_init(&dev->waiter, &rt->sleepers[d / 64], (uint64_t)1 << (d % 64),
                rt->spin_max);
    waiter_init(&dev->park, NULL, 0, rt->spin_max);
    thread_name(mesh, d, dev->name);
  }
  uv_thread_options_t opts = {0};
  if (ss) {
    opts.flags = UV_THREAD_HAS_STACK_SIZE;
    opts.stack_size = ss;
  }
  if (rt->mode == SHMAP__FIBERS) {
    rt->workers = shmap__alloc(sizeof(shmap__worker) * (size_t)rt->nworkers, true);
    if (!rt->workers) {
      free_devices(rt);
      return shmap__err(SHMAP_ENOMEM, "out of memory for worker threads");
    }
    for (int w = 0; w < rt->nworkers; w++) {
      shmap__worker *wk = &rt->workers[w];
      wk->rt = rt;
      wk->id = w;
      wk->seen_epoch = atomic_load(&rt->epoch);
      waiter_init(&wk->waiter, NULL, 0, rt->spin_max);
      waiter_init(&wk->park, NULL, 0, rt->spin_max);
      snprintf(wk->name, sizeof wk->name, "shmap-w%d", w & 0xffff);
      /* Contiguous ranges of devices: the ranks next to each other in the
       * mesh's last axes, which rings and neighbour exchanges pair up,
       * mostly share a worker and hand over without crossing cores. */
      wk->first = (int)((int64_t)rt->ndev * w / rt->nworkers);
      wk->count = (int)((int64_t)rt->ndev * (w + 1) / rt->nworkers) - wk->first;
    }
    for (int w = 0; w < rt->nworkers; w++)
      for (int d = rt->workers[w].first;
           d < rt->workers[w].first + rt->workers[w].count; d++) {
        shmap__dev *dev = &rt->devs[d];
        dev->sched.worker = &rt->workers[w];
        dev->sched.home = &rt->workers[w];
        dev->sched.wq = &dev->sched.worker->waiter;
        atomic_init(&dev->sched.fstate, SHMAP__F_DONE);
        if (shmap__fiber_create(&dev->sched.fiber,
                                ss ? ss : SHMAP__FIBER_STACK_DEFAULT,
                                fiber_main, dev) != 0) {
          free_devices(rt);
          return shmap__err(SHMAP_ESYS, "cannot allocate the stack of device %d",
                            d);
        }
      }
  }
  /* In thread mode the map's caller runs device 0 itself (no wake-up and
   * no thread switch for it per map) -- but not under a debugger, which
   * should see device 0 in the thread named for it. */
  rt->host_runs = rt->mode == SHMAP__THREADS && !debugger_attached();
  int nstart = rt->mode == SHMAP__FIBERS ? rt->nworkers : rt->ndev;
  for (int i = 0; i < nstart; i++) {
    uv_thread_t t;
    int rc = rt->mode == SHMAP__FIBERS
                 ? uv_thread_create_ex(&t, &opts, worker_main, &rt->workers[i])
                 : start_device_thread(&t, ss, &rt->devs[i]);
    if (rc != 0) {
      join_threads(rt, i);
      free_devices(rt);
      atomic_store(&rt->stop, 0);
      return shmap__err(SHMAP_ESYS, "cannot start thread %d of %d: %s", i,
                        nstart, uv_strerror(rc));
    }
    if (rt->mode == SHMAP__FIBERS)
      rt->workers[i].thread = (uintptr_t)t;
    else
      rt->devs[i].thread = (uintptr_t)t;
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
  waiter_init(&rt->host, NULL, 0, 0);
  shmap__registry_add(rt);
  *out = rt;
  return 0;
}

void shmap__runtime_destroy(shmap__runtime *rt)
{
  if (!rt)
    return;
  shmap__registry_remove(rt); /* takes its trace events */
  shmap__trace_runtime_gone(rt);
  /* In a child of fork() the threads stayed in the parent (fork.c). */
  if (rt->started && atomic_load(&rt->forkgen) == shmap__fork_generation() + 1)
    join_threads(rt, rt->mode == SHMAP__FIBERS ? rt->nworkers : rt->ndev);
  shmap__progress_destroy(rt);
  shmap__async_destroy(rt);
  free_devices(rt);
  if (rt->tp && rt->tp->destroy)
    rt->tp->destroy(rt);
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

int shmap__runtime_run(shmap__runtime *rt, struct shmap__job *job,
                       shmap__run_fn run)
{
  if (!rt->started) {
    int rc = start(rt);
    if (rc)
      return rc;
  }
  /* The caller runs worker 0's devices (fiber mode) or device 0 (thread
   * mode) itself, which saves a wake-up and a thread switch per map --
   * unless a watchdog must keep watching, which the caller does instead. */
  uint64_t period = shmap__watchdog_ns();
  bool host_runs = period == 0 && (rt->mode == SHMAP__FIBERS || rt->host_runs);
  /* The devices are parked: reset their collective state before any of
   * them can look at a peer's. */
  for (int d = 0; d < rt->ndev; d++) {
    shmap__dev *dev = &rt->devs[d];
    atomic_store(&dev->coll.arrive, 0);
    atomic_store(&dev->coll.finished, 0);
  }
  atomic_store(&rt->abort, 0);
  atomic_store(&rt->failed_dev, -1);
  rt->fail_code = 0;
  rt->fail_msg[0] = '\0';
  atomic_store(&rt->done, 0);
  rt->job = job;
  rt->run = run;
  if (rt->mode == SHMAP__FIBERS) {
    /* After the job, before the epoch: a worker still finishing the last
     * map, or one that took over another's devices (see Workers and
     * stealing), may start a device as soon as it reads START.  A worker
     * counts as stale until it looks for work in this map, so that the
     * devices of one not yet awake are not left waiting for it. */
    for (int w = 0; w < rt->nworkers; w++) {
      atomic_store(&rt->workers[w].ndone, 0);
      atomic_store(&rt->workers[w].beat, 0);
    }
    for (int d = 0; d < rt->ndev; d++)
      atomic_store_explicit(&rt->devs[d].sched.fstate, SHMAP__F_START,
                            memory_order_release);
  }
  /* Epochs advance by two; the low bit carries host_runs. */
  atomic_store(&rt->epoch, ((atomic_load(&rt->epoch) | 1) + 1) | host_runs);
  if (rt->workers) {
    for (int w = host_runs ? 1 : 0; w < rt->nworkers; w++)
      shmap__wake(&rt->workers[w].park);
    /* A worker descheduled inside the last map's job may have looked at
     * its devices after their counts were reset above and before they
     * became START, and gone to sleep on its waiter (not its park): wake
     * it there too, or it sleeps through this map while the other
     * workers, finding it fresh, sleep as well. */
    for (int w = 0; w < rt->nworkers; w++)
      shmap__wake(&rt->workers[w].waiter);
    if (host_runs) {
      /* In fiber mode the map returns once its last device is done, and a
       * worker thread may still be leaving the job (looking for devices to
       * take over).  That is harmless for workers 1.., which run on their
       * own threads only and simply go on with this job; but worker 0's
       * thread runs a job when a watchdog is on, or may have read an old
       * epoch, and it must be out before the caller runs worker 0's devices
       * on the same context and waiter.  It marks itself in before it reads
       * the epoch, so one of the two sees the other. */
      if (atomic_load(&rt->w0_in))
        shmap__wait(rt, &rt->host, w0_out, rt, NULL);
      worker_job(&rt->workers[0]);
    }
  } else {
    for (int d = host_runs ? 1 : 0; d < rt->ndev; d++)
      shmap__wake(&rt->devs[d].park);
    if (host_runs)
      host_run_device0(rt);
  }
  /* With a watchdog, wake up every period and report what each device
   * does; the map still waits for them (a body cannot be interrupted). */
  uint64_t start = period ? shmap__now() : 0;
  uint64_t deadline = start + period;
  while (shmap__wait_until(rt, &rt->host, all_done, rt, NULL,
                           period ? deadline : 0) != 1) {
    shmap__watchdog_report(rt, shmap__now() - start, stderr);
    deadline += period;
  }
  rt->job = NULL; /* no map running (debuggers look at this) */
  return 0;
}
