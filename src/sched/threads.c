/* SPDX-License-Identifier: MIT */
/* threads.c - thread mode: every device is a persistent thread of its own,
 * parked between maps; a device that waits sleeps its thread. */
#include "sched/mode.h"

#include <pthread.h>
#include <sched.h>
#include <uv.h>

static bool epoch_changed(void *arg)
{
  shmap__dev *d = arg;
  return atomic_load(&d->rt->epoch) != d->seen_epoch;
}

/* A device thread waiting for device `sarg` spins no longer once that
 * device sleeps. */
static bool dev_asleep(const void *sarg)
{
  return shmap__waiter_asleep(&((const shmap__dev *)sarg)->waiter);
}

static void device_main(shmap__dev *d)
{
  shmap__runtime *rt = d->rt;
  int own_tid = shmap__thread_tid();
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
    shmap__running_dev = d;
    rt->run(rt->job, d->id);
    shmap__running_dev = NULL;
    shmap__dev_parked(d);
    shmap__dev_finished(rt);
  }
}

/* The map's caller runs device 0 on its own thread. */
static void host_run_device0(shmap__runtime *rt)
{
  shmap__dev *d = &rt->devs[0];
  d->tid = shmap__thread_tid(); /* debuggers find device 0 on this thread */
  shmap__errbuf_use(d->sched.errbuf);
  shmap__running_dev = d;
  rt->run(rt->job, 0);
  shmap__running_dev = NULL;
  shmap__errbuf_use(NULL);
  shmap__dev_parked(d);
  shmap__dev_finished(rt);
}

static void *device_thread(void *arg)
{
  device_main(arg);
  return NULL;
}

/* In thread mode the map's caller runs device 0 itself (no wake-up and no
 * thread switch for it per map) -- but not under a debugger, which should
 * see device 0 in the thread named for it. */
static int threads_plan(shmap__runtime *rt)
{
  rt->host_runs = !shmap__debugger_attached();
  return rt->ndev;
}

static int threads_setup(shmap__runtime *rt, size_t ss)
{
  (void)rt;
  (void)ss;
  return 0;
}

/* A device thread, whose stack (ss bytes, or the system's default size for
 * 0) has the same unmapped gap below it as a fiber stack, rather than
 * glibc's one guard page: an overflow by a large frame faults there instead
 * of writing into the stack of the thread mapped below (shmap_map(3)). */
static int threads_spawn(shmap__runtime *rt, int i, size_t ss)
{
  pthread_t t;
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc == 0 && ss)
    rc = pthread_attr_setstacksize(&attr, ss);
  if (rc == 0)
    rc = pthread_attr_setguardsize(&attr, SHMAP__STACK_GUARD);
  if (rc == 0)
    rc = pthread_create(&t, &attr, device_thread, &rt->devs[i]);
  pthread_attr_destroy(&attr);
  if (rc == 0)
    rt->devs[i].thread = (uintptr_t)t;
  return -rc; /* libuv's error codes, as uv_thread_create_ex's: -errno */
}

static void threads_join(shmap__runtime *rt, int n)
{
  for (int i = 0; i < n; i++)
    shmap__wake(&rt->devs[i].park);
  for (int i = 0; i < n; i++) {
    uv_thread_t t = (uv_thread_t)rt->devs[i].thread;
    uv_thread_join(&t);
  }
}

static void threads_teardown(shmap__runtime *rt) { (void)rt; }

static void threads_prepare(shmap__runtime *rt) { (void)rt; }

static void threads_launch(shmap__runtime *rt, bool host_runs)
{
  for (int d = host_runs ? 1 : 0; d < rt->ndev; d++)
    shmap__wake(&rt->devs[d].park);
  if (host_runs)
    host_run_device0(rt);
}

static bool threads_dev_wait_on(shmap__runtime *rt, shmap__dev *d,
                                const shmap__dev *awaited, shmap__pred pred,
                                void *arg, _Atomic int *abort)
{
  return shmap__wait_full(rt, &d->waiter, pred, arg, abort, 0,
                          awaited ? dev_asleep : NULL, awaited) == 1;
}

/* A thread gives its core to the others. */
static void threads_dev_yield(shmap__runtime *rt, shmap__dev *d)
{
  (void)rt;
  (void)d;
  sched_yield();
}

static bool threads_dev_poll(shmap__runtime *rt, shmap__dev *d,
                             shmap__pred pred, void *arg, _Atomic int *abort)
{
  return shmap__poll_until(rt, &d->waiter, pred, arg, abort) == 1;
}

static bool threads_dev_poll_woken(shmap__runtime *rt, shmap__dev *d,
                                   shmap__pred pred, void *arg,
                                   _Atomic int *abort)
{
  return shmap__poll_until_woken(rt, &d->waiter, pred, arg, abort) == 1;
}

static void threads_wake_group(shmap__runtime *rt, int n, int self,
                               int (*member)(const void *arg, int i),
                               const void *arg)
{
  for (int i = 0; i < n; i++)
    if (i != self)
      shmap__dev_wake(&rt->devs[member(arg, i)]);
}

static void threads_wake_all(shmap__runtime *rt)
{
  if (rt->devs && rt->sleepers)
    shmap__wake_devices(rt, 0);
}

static int threads_workers(const shmap__runtime *rt)
{
  (void)rt;
  return 0;
}

static void threads_runs_with(const shmap__runtime *rt, int d, int *lo,
                              int *hi)
{
  (void)rt;
  *lo = d;
  *hi = d + 1;
}

const shmap__sched_ops shmap__sched_threads = {
    .name = "threads",
    .mode = SHMAP__THREADS,
    .plan = threads_plan,
    .setup = threads_setup,
    .spawn = threads_spawn,
    .join = threads_join,
    .teardown = threads_teardown,
    .prepare = threads_prepare,
    .launch = threads_launch,
    .dev_wait_on = threads_dev_wait_on,
    .dev_yield = threads_dev_yield,
    .dev_poll = threads_dev_poll,
    .dev_poll_woken = threads_dev_poll_woken,
    .wake_group = threads_wake_group,
    .wake_all = threads_wake_all,
    .workers = threads_workers,
    .runs_with = threads_runs_with,
};
