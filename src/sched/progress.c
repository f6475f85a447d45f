/* SPDX-License-Identifier: MIT */
/*
 * progress.c - progress helpers: one thread per device that uses
 * asynchronous collectives, started on the device's first request and
 * parked between requests until the mesh goes away.
 *
 * Why a thread.  A started transfer must move while the body computes
 * without calling into the library, so something other than the device
 * must run it.  The helper runs the very same algorithm and transport
 * code as a blocking call, as the device: the transport sees one call at a
 * time per device, in program order, whoever executes it, so rendezvous,
 * agreement, mismatch detection and failure release need nothing new.  The
 * helper waits where the device would (shmap__helper_for, sched.h): on the
 * device's own waiter, which every wake aimed at the device reaches, in
 * thread and fiber mode alike.  The device itself never waits there while
 * it has work posted: it waits for its requests on `donew` (thread mode)
 * or as a fiber (fiber mode), and a blocking collective first waits until
 * the helper is idle (coll/async.c).
 *
 * The queue is a ring written by the device and read by the helper (one
 * producer, one consumer), with SHMAP_MAX_REQUESTS places: a device cannot
 * have more requests open.
 *
 * Under a scheduling mode that runs every device on one thread (the
 * exploring mode, whose schedules must replay exactly), no helper thread
 * runs: the work waits in a ring of its own until the device waits for it
 * (its wait, test, next blocking collective or the end of its body), and
 * the device carries it out then, in order, as its helper would, on its
 * own fiber; its waits in the transport are then choices of the schedule
 * like any other.
 */
#include "sched/progress.h"

#include "sched/trace.h"
#include "settings.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

#ifdef HAVE_PTHREAD_SETNAME_NP
#include <pthread.h>
#endif

typedef struct item {
  void (*fn)(void *);
  void *arg;
} item;

typedef struct helper {
  alignas(SHMAP__CACHELINE) _Atomic uint32_t head, tail; /* ring indices */
  item ring[SHMAP_MAX_REQUESTS];
  /* One thread runs every device: the work the device carries out itself
   * (touched by the device only). */
  item iring[SHMAP_MAX_REQUESTS];
  uint32_t ihead, itail;
  shmap__runtime *rt;
  int dev;
  int started;       /* the thread runs (written by the device only) */
  unsigned forkgen;  /* the process that started it */
  _Atomic int stop;
  uintptr_t thread;
  shmap__waiter park;  /* the helper waits for work here */
  shmap__waiter donew; /* thread mode: the device waits for work done */
  char name[16];
} helper;

void *shmap__progress_table(void *_Atomic *slot, size_t size)
{
  /* One lock for every runtime's tables: taken once per table, by the
   * first device to need it, for no longer than an allocation (a fiber
   * holding it does not yield, so nobody waits for a parked fiber). */
  static atomic_flag making = ATOMIC_FLAG_INIT;
  void *t = atomic_load(slot);
  if (t)
    return t;
  while (atomic_flag_test_and_set_explicit(&making, memory_order_acquire))
    sched_yield();
  t = atomic_load(slot);
  if (!t && (t = shmap__alloc(size, true)))
    atomic_store(slot, t);
  atomic_flag_clear_explicit(&making, memory_order_release);
  return t;
}

/* Device dev's helper, NULL until the device started it. */
static helper *helper_of(shmap__runtime *rt, int dev)
{
  helper *_Atomic *all = atomic_load(&rt->progress);
  return all ? atomic_load(&all[dev]) : NULL;
}

static bool has_work(void *arg)
{
  helper *h = arg;
  return atomic_load(&h->tail) != atomic_load(&h->head) ||
         atomic_load(&h->stop);
}

static void helper_main(void *arg)
{
  helper *h = arg;
  shmap__runtime *rt = h->rt;
  shmap__dev *d = &rt->devs[h->dev];
#ifdef HAVE_PTHREAD_SETNAME_NP
  pthread_setname_np(pthread_self(), h->name);
#endif
  shmap__guard_thread();
  for (;;) {
    shmap__wait(rt, &h->park, has_work, h, NULL);
    uint32_t head = atomic_load(&h->head);
    if (head == atomic_load(&h->tail)) {
      if (atomic_load(&h->stop))
        return;
      continue;
    }
    item it = h->ring[head % SHMAP_MAX_REQUESTS];
    shmap__helper_for = d;
    it.fn(it.arg);
    shmap__helper_for = NULL;
    atomic_store(&h->head, head + 1);
    shmap__progress_done(rt, h->dev);
  }
}

int shmap__progress_ensure(shmap__runtime *rt, int dev)
{
  /* A pointer per device, and a helper for each device that starts a
   * request, allocated by that device: 4096 devices racing to allocate
   * and fill every device's helper each ran out of memory. */
  helper *_Atomic *all = shmap__progress_table(
      &rt->progress, sizeof *all * (size_t)rt->ndev);
  if (!all)
    return shmap__err(SHMAP_ENOMEM, "out of memory for progress helpers");
  helper *h = atomic_load(&all[dev]);
  if (h && (h->started || rt->ops->one_thread))
    return 0;
  if (!h) {
    if (!(h = shmap__alloc(sizeof *h, true)))
      return shmap__err(SHMAP_ENOMEM, "out of memory for the progress helper "
                                      "of device %d", dev);
    h->rt = rt;
    h->dev = dev;
    atomic_store(&all[dev], h);
  }
  if (rt->ops->one_thread)
    return 0; /* the device carries out its own work (above) */
  shmap__waiter_init(&h->park, rt->spin_max);
  shmap__waiter_init(&h->donew, rt->spin_max);
  snprintf(h->name, sizeof h->name, "shmap-p%d", dev & 0xffff);
  uv_thread_options_t opts = {.flags = UV_THREAD_HAS_STACK_SIZE,
                              .stack_size = (size_t)1 << 20};
  uv_thread_t t;
  int rc = uv_thread_create_ex(&t, &opts, helper_main, h);
  if (rc != 0) {
    shmap__waiter_fini(&h->park);
    shmap__waiter_fini(&h->donew);
    return shmap__err(SHMAP_ESYS, "cannot start the progress helper of "
                                  "device %d: %s", dev, uv_strerror(rc));
  }
  h->thread = (uintptr_t)t;
  h->forkgen = shmap__fork_generation();
  h->started = 1;
  atomic_fetch_add(&rt->helpers, 1);
  return 0;
}

void shmap__progress_post(shmap__runtime *rt, int dev, void (*fn)(void *),
                          void *arg)
{
  helper *h = helper_of(rt, dev);
  if (rt->ops->one_thread) {
    h->iring[h->itail++ % SHMAP_MAX_REQUESTS] = (item){fn, arg};
    return;
  }
  uint32_t tail = atomic_load(&h->tail);
  h->ring[tail % SHMAP_MAX_REQUESTS] = (item){fn, arg};
  atomic_store(&h->tail, tail + 1);
  shmap__wake(&h->park);
}

void shmap__progress_run(shmap__runtime *rt, int dev)
{
  helper *h = rt->ops->one_thread ? helper_of(rt, dev) : NULL;
  if (!h || shmap__helper_for)
    return; /* no work of its own, or carrying out some already */
  shmap__dev *d = &rt->devs[dev];
  while (h->ihead != h->itail) {
    item it = h->iring[h->ihead % SHMAP_MAX_REQUESTS];
    shmap__helper_for = d;
    it.fn(it.arg);
    shmap__helper_for = NULL;
    h->ihead++;
  }
}

void shmap__progress_wait(shmap__runtime *rt, int dev, shmap__pred pred,
                          void *arg)
{
  shmap__dev *d = &rt->devs[dev];
  shmap__progress_run(rt, dev);
  if (shmap__workers(rt) || rt->ops->one_thread) {
    /* The device's worker runs its neighbours meanwhile. */
    while (!shmap__dev_wait(rt, d, pred, arg, NULL))
      ;
    return;
  }
  helper *h = helper_of(rt, dev);
  shmap__wait(rt, &h->donew, pred, arg, NULL);
}

void shmap__progress_done(shmap__runtime *rt, int dev)
{
  shmap__dev *d = &rt->devs[dev];
  if (rt->ops->one_thread)
    return; /* the device itself did the work */
  if (shmap__workers(rt))
    shmap__wake(d->sched.wq);
  else
    shmap__wake(&helper_of(rt, dev)->donew);
}

void shmap__progress_destroy(shmap__runtime *rt)
{
  helper *_Atomic *all = atomic_load(&rt->progress);
  if (!all)
    return;
  for (int d = 0; d < rt->ndev; d++) {
    helper *h = atomic_load(&all[d]);
    if (!h)
      continue;
    if (h->started) {
      /* In a child of fork() the thread stayed in the parent. */
      if (h->forkgen == shmap__fork_generation()) {
        atomic_store(&h->stop, 1);
        shmap__wake(&h->park);
        uv_thread_t t = (uv_thread_t)h->thread;
        uv_thread_join(&t);
      }
      shmap__waiter_fini(&h->park);
      shmap__waiter_fini(&h->donew);
    }
    free(h);
  }
  free(all);
  atomic_store(&rt->progress, NULL);
}
