/* SPDX-License-Identifier: MIT */
/*
 * mode.h - what the scheduling modes (threads.c, fibers.c) share with the
 * runtime (runtime.c): the waiting policy with its stall test, the waiters'
 * sleeping bits, the device running on the calling thread, and the end of
 * a device's part of a job.  Only the scheduler includes it.
 */
#ifndef SHMAP_SCHED_MODE_H
#define SHMAP_SCHED_MODE_H

#include "sched/sched.h"
#include "sched/trace.h"

/* The modes, in the registry of runtime.c. */
extern const shmap__sched_ops shmap__sched_threads;
extern const shmap__sched_ops shmap__sched_fibers;
extern const shmap__sched_ops shmap__sched_explore;

/* The device whose code runs on this thread (shmap__running()). */
extern SHMAP__TLS_FAST const shmap__dev *shmap__running_dev;

/* Whether a waiter that waits for `sarg` may stop spinning early: what it
 * waits for is known not to run. */
typedef bool (*shmap__stalled_fn)(const void *sarg);

/* The waiting policy (runtime.c): 1 condition, 0 abort, -1 deadline
 * (shmap__now() time, 0: none) passed; spinning stops early once
 * stalled(sarg) holds (stalled may be NULL). */
int shmap__wait_full(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                     void *arg, _Atomic int *abort, uint64_t deadline,
                     shmap__stalled_fn stalled, const void *sarg);
/* A waiter whose sleeping bit is `bit` of *flag (flag NULL: of its own
 * word), and whether it announced that it sleeps. */
void shmap__waiter_init_bit(shmap__waiter *w, _Atomic uint64_t *flag,
                            uint64_t bit, uint64_t spin_ns);
static inline bool shmap__waiter_asleep(const shmap__waiter *w)
{
  return (atomic_load_explicit(w->flag, memory_order_relaxed) & w->bit) != 0;
}
/* Wake the device threads whose bit in rt->sleepers is set, from device
 * `from` on (devices and progress helpers sleep on d->waiter). */
void shmap__wake_devices(shmap__runtime *rt, int from);
/* A debugger attached to the process. */
bool shmap__debugger_attached(void);
/* The kernel's number of the calling thread, for debuggers (0: unknown). */
int shmap__thread_tid(void);

/* A device back from its part of a map is parked since its last state
 * change (run_device's end): no clock read of its own. */
static inline void shmap__dev_parked(shmap__dev *d)
{
  shmap__set_state(d, SHMAP__ST_PARKED, 0,
                   atomic_load_explicit(&d->dbg.since, memory_order_relaxed));
}

/* A device finished the job; the last one wakes the map's caller. */
static inline void shmap__dev_finished(shmap__runtime *rt)
{
  if (atomic_fetch_add(&rt->done, 1) + 1 == rt->ndev)
    shmap__wake(&rt->host);
}

#endif /* SHMAP_SCHED_MODE_H */
