/* runtime.c - persistent device threads, parking, waiting and waking. */
#include "runtime/sched.h"

#include "arena.h"
#include "runtime/debug.h"
#include "transport/comm.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#ifdef __linux__
#include <linux/futex.h>
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

static _Thread_local struct shmap_ctx *current;

struct shmap_ctx *shmap__current(void) { return current; }
void shmap__set_current(struct shmap_ctx *ctx) { current = ctx; }

/* ---- sleeping and waking ----------------------------------------------- */

#ifdef __linux__
static void waiter_init(shmap__waiter *w) { (void)w; }
static void waiter_fini(shmap__waiter *w) { (void)w; }
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
static void waiter_init(shmap__waiter *w)
{
  w->mutex = malloc(sizeof(uv_mutex_t));
  w->cond = malloc(sizeof(uv_cond_t));
  if (!w->mutex || !w->cond)
    abort(); /* fallback platforms only; tiny allocation at startup */
  uv_mutex_init(w->mutex);
  uv_cond_init(w->cond);
}
static void waiter_fini(shmap__waiter *w)
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

void shmap__wake(shmap__waiter *w)
{
  /* Paired with the sleeper's store of `sleeping` followed by its re-check
   * of the condition (both sequentially consistent): either it sees our
   * change, or we see that it sleeps and bump its word. */
  if (atomic_load(&w->sleeping)) {
    atomic_fetch_add(&w->word, 1);
    wake_one(w);
  }
}

void shmap__wake_all(shmap__runtime *rt)
{
  if (rt->workers)
    for (int w = 0; w < rt->nworkers; w++)
      shmap__wake(&rt->workers[w].waiter);
  else if (rt->devs)
    for (int d = 0; d < rt->ndev; d++)
      shmap__wake(&rt->devs[d].waiter);
}

int shmap__wait_until(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                      void *arg, _Atomic int *abort, uint64_t deadline)
{
  /* The condition is checked before the abort flag: a condition that holds
   * (e.g. every peer arrived) must win, so that all members of a group take
   * the same branch. */
  /* The map's caller spins only when it has a core to itself (or runs a
   * worker's devices); device and worker threads when they fit the cores. */
  int spin = w == &rt->host ? rt->host_spin : rt->spin;
  for (int i = 0; i < spin; i++) {
    if (pred(arg))
      return 1;
    if (abort && atomic_load(abort))
      return 0;
    cpu_relax();
  }
  for (;;) {
    uint32_t seen = atomic_load(&w->word);
    atomic_store(&w->sleeping, 1);
    int r = pred(arg) ? 1 : abort && atomic_load(abort) ? 0 : -1;
    uint64_t now = deadline ? shmap__now() : 0;
    if (r < 0 && deadline && now >= deadline)
      r = -2;
    if (r != -1) {
      atomic_store(&w->sleeping, 0);
      return r == -2 ? -1 : r;
    }
    sleep_on(w, seen, deadline ? deadline - now : 0);
    atomic_store(&w->sleeping, 0);
  }
}

bool shmap__wait(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                 void *arg, _Atomic int *abort)
{
  return shmap__wait_until(rt, w, pred, arg, abort, 0) == 1;
}

/* ---- failure ----------------------------------------------------------- */

int shmap__fail(shmap__runtime *rt, int dev, int code, const char *msg)
{
  int expected = -1;
  if (atomic_compare_exchange_strong(&rt->failed_dev, &expected, dev)) {
    rt->fail_code = code;
    snprintf(rt->fail_msg, sizeof rt->fail_msg, "%s", msg);
    atomic_store(&rt->abort, 1); /* publishes fail_code and fail_msg */
    if (rt->tp)
      rt->tp->failed(rt);
    else
      shmap__wake_all(rt);
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

/* SHMAP_SCHED=threads|fibers|auto.  Auto gives each device a thread of its
 * own when the cores suffice or a debugger is attached (so gdb shows every
 * device as a thread), and fibers on one worker per core otherwise. */
static int choose_mode(int ndev)
{
  const char *env = getenv("SHMAP_SCHED");
  if (env && strcmp(env, "threads") == 0)
    return SHMAP__THREADS;
  if (env && strcmp(env, "fibers") == 0)
    return SHMAP__FIBERS;
  if (ndev <= ncpu() || debugger_attached())
    return SHMAP__THREADS;
  return SHMAP__FIBERS;
}

static int env_int(const char *name, int dflt)
{
  const char *env = getenv(name);
  return env && *env ? atoi(env) : dflt;
}

static bool all_done(void *arg)
{
  shmap__runtime *rt = arg;
  return atomic_load(&rt->done) == rt->ndev;
}

static int current_tid(void)
{
#ifdef __linux__
  return (int)syscall(SYS_gettid);
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

static void device_main(void *arg)
{
  shmap__dev *d = arg;
  shmap__runtime *rt = d->rt;
  d->tid = current_tid();
#ifdef HAVE_PTHREAD_SETNAME_NP
  pthread_setname_np(pthread_self(), d->name);
#endif
  for (;;) {
    shmap__wait(rt, &d->waiter, epoch_changed, d, NULL);
    d->seen_epoch = atomic_load(&rt->epoch);
    if (atomic_load(&rt->stop))
      return;
    rt->run(rt->job, d->id);
    shmap__set_state(d, SHMAP__ST_PARKED, 0, shmap__now());
    if (atomic_fetch_add(&rt->done, 1) + 1 == rt->ndev)
      shmap__wake(&rt->host);
  }
}

/* ---- fiber mode ----------------------------------------------------------- */

static void fiber_main(void *arg)
{
  shmap__dev *d = arg;
  shmap__worker *w = d->sched.worker;
  shmap__fiber_entered(&d->sched.fiber, &w->self);
  for (;;) {
    d->rt->run(d->rt->job, d->id);
    shmap__set_state(d, SHMAP__ST_PARKED, 0, shmap__now());
    d->sched.fstate = SHMAP__F_DONE;
    shmap__fiber_switch(&d->sched.fiber, &w->self);
  }
}

/* Whether the worker should continue fiber d now (sets d->sched.wres). */
static bool fiber_ready(shmap__dev *d)
{
  if (d->sched.fstate == SHMAP__F_START)
    return true;
  if (d->sched.fstate != SHMAP__F_WAIT)
    return false;
  if (d->sched.wpred(d->sched.warg)) {
    d->sched.wres = 1;
    return true;
  }
  if (d->sched.wabort && atomic_load(d->sched.wabort)) {
    d->sched.wres = 0;
    return true;
  }
  return false;
}

static bool any_ready(void *arg)
{
  shmap__worker *w = arg;
  shmap__runtime *rt = w->rt;
  for (int d = w->id; d < rt->ndev; d += rt->nworkers)
    if (fiber_ready(&rt->devs[d]))
      return true;
  return false;
}

static void worker_job(shmap__worker *w)
{
  shmap__runtime *rt = w->rt;
  /* Whichever thread runs this job (the worker's, or the map's caller for
   * worker 0) is where the devices return to. */
  shmap__fiber_host_init(&w->self);
  int n = 0;
  for (int d = w->id; d < rt->ndev; d += rt->nworkers, n++)
    rt->devs[d].sched.fstate = SHMAP__F_START;
  int left = n;
  while (left > 0) {
    bool ran = false;
    for (int d = w->id; d < rt->ndev; d += rt->nworkers) {
      shmap__dev *dev = &rt->devs[d];
      if (!fiber_ready(dev))
        continue;
      dev->sched.fstate = SHMAP__F_RUN;
      /* The device's context and messages follow it onto this thread. */
      shmap__set_current(dev->ctx);
      shmap__errbuf_use(dev->sched.errbuf);
      shmap__fiber_switch(&w->self, &dev->sched.fiber);
      shmap__errbuf_use(NULL);
      shmap__set_current(NULL);
      ran = true;
      if (dev->sched.fstate == SHMAP__F_DONE)
        left--;
    }
    if (!ran && left > 0)
      shmap__wait(rt, &w->waiter, any_ready, w, NULL);
  }
  if (atomic_fetch_add(&rt->done, n) + n == rt->ndev)
    shmap__wake(&rt->host);
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
    w->seen_epoch = atomic_load(&rt->epoch);
    if (atomic_load(&rt->stop))
      return;
    /* The epoch's low bit says whether the map's caller runs worker 0's
     * devices itself: read with the epoch, it cannot belong to another
     * map. */
    if (w->id == 0 && (w->seen_epoch & 1))
      continue;
    worker_job(w);
  }
}

bool shmap__dev_wait(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                     void *arg, _Atomic int *abort)
{
  if (rt->mode == SHMAP__THREADS)
    return shmap__wait(rt, &d->waiter, pred, arg, abort);
  if (pred(arg))
    return true;
  if (abort && atomic_load(abort))
    return false;
  d->sched.wpred = pred;
  d->sched.warg = arg;
  d->sched.wabort = abort;
  d->sched.fstate = SHMAP__F_WAIT;
  shmap__fiber_switch(&d->sched.fiber, &d->sched.worker->self);
  return d->sched.wres;
}

/* ---- starting and stopping ------------------------------------------------ */

static size_t stack_size(void)
{
  const char *env = getenv("SHMAP_STACK_SIZE");
  long long v = env ? atoll(env) : 0;
  return v > 0 ? (size_t)v : 0;
}

/* Stop and join the first n threads (devices or workers). */
static void join_threads(shmap__runtime *rt, int n)
{
  atomic_store(&rt->stop, 1);
  atomic_store(&rt->epoch, (atomic_load(&rt->epoch) | 1) + 1);
  for (int i = 0; i < n; i++)
    shmap__wake(rt->mode == SHMAP__FIBERS ? &rt->workers[i].park
                                          : &rt->devs[i].waiter);
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
    shmap__fiber_destroy(&rt->devs[d].sched.fiber);
    shmap__arena_cache_free(&rt->devs[d]);
  }
  if (rt->workers)
    for (int w = 0; w < rt->nworkers; w++)
      waiter_fini(&rt->workers[w].waiter), waiter_fini(&rt->workers[w].park);
  free(rt->workers);
  free(rt->devs);
  rt->workers = NULL;
  rt->devs = NULL;
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

static int start(shmap__runtime *rt)
{
  shmap_mesh *mesh = rt->mesh;
  rt->mode = choose_mode(rt->ndev);
  rt->devs = shmap__alloc(sizeof(shmap__dev) * (size_t)rt->ndev, true);
  if (!rt->devs)
    return shmap__err(SHMAP_ENOMEM, "out of memory for %d devices", rt->ndev);
  size_t ss = stack_size();
  for (int d = 0; d < rt->ndev; d++) {
    shmap__dev *dev = &rt->devs[d];
    dev->rt = rt;
    dev->id = d;
    dev->seen_epoch = atomic_load(&rt->epoch);
    dev->sched.wq = &dev->waiter;
    waiter_init(&dev->waiter);
    thread_name(mesh, d, dev->name);
  }
  uv_thread_options_t opts = {0};
  if (ss) {
    opts.flags = UV_THREAD_HAS_STACK_SIZE;
    opts.stack_size = ss;
  }
  int nthreads = rt->ndev;
  if (rt->mode == SHMAP__FIBERS) {
    int nw = env_int("SHMAP_WORKERS", ncpu());
    rt->nworkers = nw < 1 ? 1 : nw > rt->ndev ? rt->ndev : nw;
    nthreads = rt->nworkers;
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
      waiter_init(&wk->waiter);
      waiter_init(&wk->park);
      snprintf(wk->name, sizeof wk->name, "shmap-w%d", w & 0xffff);
    }
    for (int d = 0; d < rt->ndev; d++) {
      shmap__dev *dev = &rt->devs[d];
      dev->sched.worker = &rt->workers[d % rt->nworkers];
      dev->sched.wq = &dev->sched.worker->waiter;
      if (shmap__fiber_create(&dev->sched.fiber, ss ? ss : ((size_t)1 << 20),
                              fiber_main, dev) != 0) {
        free_devices(rt);
        return shmap__err(SHMAP_ESYS, "cannot allocate the stack of device %d", d);
      }
    }
  }
  /* Spinning only pays when every thread (and the caller) has a core. */
  rt->spin = env_int("SHMAP_SPIN", nthreads <= ncpu() ? 10000 : 50);
  if (rt->spin < 0)
    rt->spin = 0;
  /* In fiber mode the caller is worker 0 (worker 0's own thread stays
   * parked), so it may spin like the workers; with a thread per device it
   * would take a core from a device unless one is left over. */
  rt->host_spin = rt->mode == SHMAP__FIBERS || nthreads < ncpu() ? rt->spin : 50;
  for (int i = 0; i < nthreads; i++) {
    uv_thread_t t;
    int rc = rt->mode == SHMAP__FIBERS
                 ? uv_thread_create_ex(&t, &opts, worker_main, &rt->workers[i])
                 : uv_thread_create_ex(&t, &opts, device_main, &rt->devs[i]);
    if (rc != 0) {
      join_threads(rt, i);
      free_devices(rt);
      atomic_store(&rt->stop, 0);
      return shmap__err(SHMAP_ESYS, "cannot start thread %d of %d: %s", i,
                        nthreads, uv_strerror(rc));
    }
    if (rt->mode == SHMAP__FIBERS)
      rt->workers[i].thread = (uintptr_t)t;
    else
      rt->devs[i].thread = (uintptr_t)t;
  }
  rt->started = 1;
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
  rt->mesh = mesh;
  rt->ndev = mesh->ndev;
  rt->lock = lock;
  atomic_init(&rt->failed_dev, -1);
  waiter_init(&rt->host);
  shmap__registry_add(rt);
  *out = rt;
  return 0;
}

void shmap__runtime_destroy(shmap__runtime *rt)
{
  if (!rt)
    return;
  shmap__registry_remove(rt);
  shmap__trace_runtime_gone(rt);
  if (rt->started)
    join_threads(rt, rt->mode == SHMAP__FIBERS ? rt->nworkers : rt->ndev);
  free_devices(rt);
  if (rt->tp && rt->tp->destroy)
    rt->tp->destroy(rt);
  waiter_fini(&rt->host);
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
  /* In fiber mode the caller runs worker 0's devices itself, which saves
   * a wake-up and a thread switch per map -- unless a watchdog must keep
   * watching, which the caller does instead. */
  uint64_t period = shmap__watchdog_ns();
  bool host_runs_w0 = rt->mode == SHMAP__FIBERS && period == 0;
  /* Epochs advance by two; the low bit carries host_runs_w0. */
  atomic_store(&rt->epoch, ((atomic_load(&rt->epoch) | 1) + 1) | host_runs_w0);
  if (host_runs_w0) {
    for (int w = 1; w < rt->nworkers; w++)
      shmap__wake(&rt->workers[w].park);
    worker_job(&rt->workers[0]);
  } else if (rt->workers) {
    for (int w = 0; w < rt->nworkers; w++)
      shmap__wake(&rt->workers[w].park);
  } else {
    shmap__wake_all(rt);
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
