/* SPDX-License-Identifier: MIT */
/* fibers.c - fiber mode: the devices are fibers (fiber.c) on a few worker
 * threads, each running a range of them; a device that waits hands its
 * worker to the others. */
#include "sched/mode.h"

#include "settings.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

static bool w0_out(void *arg)
{
  shmap__runtime *rt = arg;
  return atomic_load(&rt->w0_in) == 0;
}

static void fiber_main(void *arg)
{
  shmap__dev *d = arg;
  shmap__fiber_entered(&d->sched.fiber, &d->sched.worker->self);
  for (;;) {
    d->rt->run(d->rt->job, d->id);
    shmap__dev_parked(d);
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
/* A worker going through its devices (or a stale worker's) says it is
 * alive after every BEAT_EVERY of them: a round over a few thousand
 * devices takes milliseconds, and a worker that said so only once per
 * round would look stale to the others all the while, which would then
 * take its devices over -- and each device's stack and state would cross
 * between the cores on every call. */
#define BEAT_EVERY 16
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

/*
 * Looking again.  A worker looks at each of its waiting fibers on every
 * round, and in a collective over a large group most of them wait for one
 * device (their leader's result): each look costs an exchange of the
 * fiber's state and a call of its condition.  A condition given with the
 * device it waits for (shmap__dev_wait_on's `awaited`) depends on what
 * that device writes alone, or on the abort flag.  So when the awaited
 * device has not been switched back from since the condition was last
 * found false, and is not running now, the condition is still false: the
 * look is skipped.  A worker counts a device's runs (nrun) before it
 * publishes the state the device left in, so whoever reads that state
 * sees the count of the run that ended there; a device running now may
 * be writing what the condition waits for, so then the condition is
 * evaluated; and what it writes comes with a wake-up, after which the
 * sleeping worker looks again and finds it running or counted.  A
 * progress helper writing for a waiting device, which no count shows,
 * turns the skipping off.
 */
static bool still_waiting(const shmap__dev *d)
{
  const shmap__dev *a =
      atomic_load_explicit(&d->sched.wawait, memory_order_relaxed);
  _Atomic int *ab = atomic_load_explicit(&d->sched.wabort, memory_order_relaxed);
  /* A progress helper (progress.c) writes for its device while the
   * device's fiber waits: once there is one, every look evaluates. */
  if (!a || (ab && atomic_load(ab)) || atomic_load(&d->rt->helpers))
    return false;
  if (atomic_load_explicit(&a->sched.fstate, memory_order_acquire) ==
      SHMAP__F_RUN)
    return false;
  return atomic_load_explicit(&a->sched.nrun, memory_order_relaxed) ==
         atomic_load_explicit(&d->sched.wseen, memory_order_relaxed);
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
  if (s == SHMAP__F_WAIT && still_waiting(d))
    return false;
  if (s != SHMAP__F_WAIT || !fstate_cas(d, SHMAP__F_WAIT, SHMAP__F_CHECK))
    return maybe && fstate(d) == SHMAP__F_CHECK;
  /* The awaited device's count before the condition's reads. */
  const shmap__dev *a =
      atomic_load_explicit(&d->sched.wawait, memory_order_relaxed);
  _Atomic int *ab = atomic_load_explicit(&d->sched.wabort, memory_order_relaxed);
  if (a)
    atomic_store_explicit(&d->sched.wseen,
                          atomic_load_explicit(&a->sched.nrun,
                                               memory_order_acquire),
                          memory_order_relaxed);
  /* The condition may set the device's message (an engine's error that
   * ends its wait): its buffer, whichever thread looks. */
  char *own = shmap__errbuf_use(d->sched.errbuf);
  bool holds = d->sched.wpred(d->sched.warg);
  shmap__errbuf_use(own);
  int res = holds ? 1 : ab && atomic_load(ab) ? 0 : -1;
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
  shmap__running_dev = dev;
  shmap__fiber_switch(&w->self, &dev->sched.fiber);
  shmap__running_dev = NULL;
  shmap__errbuf_use(NULL);
  shmap__set_current(NULL);
  int next = dev->sched.fnext;
  shmap__worker *home = dev->sched.home;
  /* Counted before its state is published (see Looking again). */
  atomic_store_explicit(&dev->sched.nrun,
                        atomic_load_explicit(&dev->sched.nrun,
                                             memory_order_relaxed) + 1,
                        memory_order_release);
  /* Before the home worker's wake-up below. */
  shmap__publish(dev->rt, &dev->sched.fstate, next);
  if (next == SHMAP__F_DONE) {
    atomic_fetch_add(&home->ndone, 1);
    shmap__dev_finished(rt);
  }
  /* A wake-up for a taken-over device goes to its home worker, which may
   * have seen it running and gone to sleep: it looks again. */
  if (home != w)
    shmap__wake(&home->waiter);
  return true;
}

static void beat(shmap__worker *w)
{
  atomic_store_explicit(&w->beat, shmap__now(), memory_order_relaxed);
}

/* Run the runnable devices [lo, hi), saying that the worker is alive
 * every BEAT_EVERY of them; whether one ran. */
static bool run_range(shmap__worker *w, int lo, int hi)
{
  bool ran = false;
  for (int d = lo; d < hi; d++) {
    ran |= run_fiber(w, &w->rt->devs[d]);
    if ((d - lo) % BEAT_EVERY == BEAT_EVERY - 1)
      beat(w);
  }
  return ran;
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
    if (stale(o, now))
      ran |= run_range(w, o->first, o->first + o->count);
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
    if (i != w->id && !shmap__waiter_asleep(&rt->workers[i].waiter))
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
    beat(w);
    bool ran = run_range(w, lo, hi);
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
        shmap__wait_full(rt, &w->waiter, any_ready_or_mpi, w, NULL,
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
  w->tid = shmap__thread_tid();
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

/* The workers, one per core unless SHMAP_WORKERS says (at most one per
 * device); the map's caller runs worker 0's devices. */
static int fibers_plan(shmap__runtime *rt)
{
  int nw = shmap__setting_workers() ? shmap__setting_workers()
                                    : (int)uv_available_parallelism();
  rt->nworkers = nw < 1 ? 1 : nw > rt->ndev ? rt->ndev : nw;
  rt->host_runs = 1;
  return rt->nworkers;
}

static void fibers_teardown(shmap__runtime *rt)
{
  for (int d = 0; rt->devs && d < rt->ndev; d++)
    shmap__fiber_destroy(&rt->devs[d].sched.fiber);
  if (rt->workers)
    for (int w = 0; w < rt->nworkers; w++)
      shmap__waiter_fini(&rt->workers[w].waiter),
          shmap__waiter_fini(&rt->workers[w].park);
  free(rt->workers);
  rt->workers = NULL;
}

/* The workers, each over a range of devices, and the devices' fibers
 * (stacks of ss bytes, 0: the default); on failure the runtime tears down
 * what was set up. */
static int fibers_setup(shmap__runtime *rt, size_t ss)
{
  rt->workers = shmap__alloc(sizeof(shmap__worker) * (size_t)rt->nworkers, true);
  if (!rt->workers)
    return shmap__err(SHMAP_ENOMEM, "out of memory for worker threads");
  for (int w = 0; w < rt->nworkers; w++) {
    shmap__worker *wk = &rt->workers[w];
    wk->rt = rt;
    wk->id = w;
    wk->seen_epoch = atomic_load(&rt->epoch);
    shmap__waiter_init(&wk->waiter, rt->spin_max);
    shmap__waiter_init(&wk->park, rt->spin_max);
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
        return shmap__err(SHMAP_ESYS, "cannot allocate the stack of device %d",
                          d);
      }
    }
  return 0;
}

static int fibers_spawn(shmap__runtime *rt, int i, size_t ss)
{
  uv_thread_options_t opts = {0};
  if (ss) {
    opts.flags = UV_THREAD_HAS_STACK_SIZE;
    opts.stack_size = ss;
  }
  uv_thread_t t;
  int rc = uv_thread_create_ex(&t, &opts, worker_main, &rt->workers[i]);
  if (rc == 0)
    rt->workers[i].thread = (uintptr_t)t;
  return rc;
}

static void fibers_join(shmap__runtime *rt, int n)
{
  for (int i = 0; i < n; i++)
    shmap__wake(&rt->workers[i].park);
  for (int i = 0; i < n; i++) {
    uv_thread_t t = (uv_thread_t)rt->workers[i].thread;
    uv_thread_join(&t);
  }
}

/* After the job, before the epoch: a worker still finishing the last map,
 * or one that took over another's devices (see Workers and stealing), may
 * start a device as soon as it reads START.  A worker counts as stale
 * until it looks for work in this map, so that the devices of one not yet
 * awake are not left waiting for it. */
static void fibers_prepare(shmap__runtime *rt)
{
  for (int w = 0; w < rt->nworkers; w++) {
    atomic_store_explicit(&rt->workers[w].ndone, 0, memory_order_relaxed);
    atomic_store_explicit(&rt->workers[w].beat, 0, memory_order_relaxed);
  }
  for (int d = 0; d < rt->ndev; d++)
    atomic_store_explicit(&rt->devs[d].sched.fstate, SHMAP__F_START,
                          memory_order_release);
}

static void fibers_launch(shmap__runtime *rt, bool host_runs)
{
  for (int w = host_runs ? 1 : 0; w < rt->nworkers; w++)
    shmap__wake(&rt->workers[w].park);
  /* A worker descheduled inside the last map's job may have looked at its
   * devices after their counts were reset and before they became START,
   * and gone to sleep on its waiter (not its park): wake it there too, or
   * it sleeps through this map while the other workers, finding it fresh,
   * sleep as well. */
  for (int w = 0; w < rt->nworkers; w++)
    shmap__wake(&rt->workers[w].waiter);
  if (host_runs) {
    /* The map returns once its last device is done, and a worker thread
     * may still be leaving the job (looking for devices to take over).
     * That is harmless for workers 1.., which run on their own threads
     * only and simply go on with this job; but worker 0's thread runs a
     * job when a watchdog is on, or may have read an old epoch, and it
     * must be out before the caller runs worker 0's devices on the same
     * context and waiter.  It marks itself in before it reads the epoch,
     * so one of the two sees the other. */
    if (atomic_load(&rt->w0_in))
      shmap__wait(rt, &rt->host, w0_out, rt, NULL);
    worker_job(&rt->workers[0]);
  }
}

static bool fibers_dev_wait_on(shmap__runtime *rt, shmap__dev *d,
                               const shmap__dev *awaited, shmap__pred pred,
                               void *arg, _Atomic int *abort)
{
  if (shmap__helper_for == d) {
    /* A progress helper waits like a device thread; nobody wakes it for
     * MPI transfers, so then it polls. */
    if (atomic_load(&rt->mpi_waiters))
      return shmap__poll_until(rt, &d->waiter, pred, arg, abort) == 1;
    return shmap__wait_full(rt, &d->waiter, pred, arg, abort, 0, NULL,
                            NULL) == 1;
  }
  /* A fiber never spins: while it waits its worker runs the others. */
  if (pred(arg))
    return true;
  if (abort && atomic_load(abort))
    return false;
  d->sched.wpred = pred;
  d->sched.warg = arg;
  atomic_store_explicit(&d->sched.wabort, abort, memory_order_relaxed);
  atomic_store_explicit(&d->sched.wawait, awaited, memory_order_relaxed);
  /* The awaited device may have run since pred's look above: the first
   * look of a worker evaluates the condition, since the awaited device's
   * count, which only grows, does not come back to one less than now. */
  if (awaited)
    atomic_store_explicit(&d->sched.wseen,
                          atomic_load_explicit(&awaited->sched.nrun,
                                               memory_order_relaxed) - 1,
                          memory_order_relaxed);
  d->sched.fnext = SHMAP__F_WAIT;
  /* Back to the worker that runs it; whichever worker claims it next
   * resumes it here (see Workers and stealing). */
  shmap__fiber_switch(&d->sched.fiber, &d->sched.worker->self);
  return d->sched.wres;
}

/* A fiber gives its worker to the others once. */
static bool second_look(void *arg) { return (*(int *)arg)++ > 0; }

static void fibers_dev_yield(shmap__runtime *rt, shmap__dev *d)
{
  int looks = 0;
  fibers_dev_wait_on(rt, d, NULL, second_look, &looks, NULL);
}

static bool fibers_dev_poll(shmap__runtime *rt, shmap__dev *d,
                            shmap__pred pred, void *arg, _Atomic int *abort)
{
  /* The worker tests again on its rounds, which stay short while a device
   * waits for such a condition (worker_job). */
  atomic_fetch_add(&rt->mpi_waiters, 1);
  bool r = fibers_dev_wait_on(rt, d, NULL, pred, arg, abort);
  atomic_fetch_sub(&rt->mpi_waiters, 1);
  return r;
}

static void fibers_wake_all(shmap__runtime *rt)
{
  if (!rt->workers)
    return;
  for (int w = 0; w < rt->nworkers; w++)
    shmap__wake(&rt->workers[w].waiter);
  /* Progress helpers sleep on their devices' waiters (sched.h). */
  if (atomic_load_explicit(&rt->helpers, memory_order_relaxed))
    shmap__wake_devices(rt, 0);
}

/* The devices share the places they sleep on: every sleeper is woken. */
static void fibers_wake_group(shmap__runtime *rt, int n, int self,
                              int (*member)(const void *arg, int i),
                              const void *arg)
{
  (void)n;
  (void)self;
  (void)member;
  (void)arg;
  fibers_wake_all(rt);
}

static int fibers_workers(const shmap__runtime *rt)
{
  return rt->workers ? rt->nworkers : 0;
}

static void fibers_runs_with(const shmap__runtime *rt, int d, int *lo, int *hi)
{
  if (!rt->workers) {
    *lo = d;
    *hi = d + 1;
    return;
  }
  const shmap__worker *w = rt->devs[d].sched.home;
  *lo = w->first;
  *hi = w->first + w->count;
}

const shmap__sched_ops shmap__sched_fibers = {
    .name = "fibers",
    .mode = SHMAP__FIBERS,
    .plan = fibers_plan,
    .setup = fibers_setup,
    .spawn = fibers_spawn,
    .join = fibers_join,
    .teardown = fibers_teardown,
    .prepare = fibers_prepare,
    .launch = fibers_launch,
    .dev_wait_on = fibers_dev_wait_on,
    .dev_yield = fibers_dev_yield,
    .dev_poll = fibers_dev_poll,
    .wake_group = fibers_wake_group,
    .wake_all = fibers_wake_all,
    .workers = fibers_workers,
    .runs_with = fibers_runs_with,
};
