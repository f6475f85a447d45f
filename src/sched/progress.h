/* SPDX-License-Identifier: MIT */
/*
 * progress.h - progress helpers (progress.c): a thread per device that
 * carries out work the device posted, in order, while the device goes on
 * with its body.  The asynchronous collectives (coll/async.c) post their
 * transfers to it.
 */
#ifndef SHMAP_PROGRESS_H
#define SHMAP_PROGRESS_H

#include "sched/sched.h"

/* The table in *slot (zeroed, `size` bytes), allocated by the first
 * caller while the others wait for it; NULL when out of memory. */
void *shmap__progress_table(void *_Atomic *slot, size_t size);
/* Start device dev's helper if it does not run yet (called by the device).
 * 0, or an error code with the message set. */
int shmap__progress_ensure(shmap__runtime *rt, int dev);
/* Queue fn(arg) on device dev's helper (started; at most
 * SHMAP_MAX_REQUESTS items queued).  The helper runs it with
 * shmap__helper_for set to the device, so that the transport waits on the
 * device's behalf. */
void shmap__progress_post(shmap__runtime *rt, int dev, void (*fn)(void *),
                          void *arg);
/* Under a mode that runs every device on one thread: carry out the work
 * device dev posted, in order, on the calling device (no-op otherwise). */
void shmap__progress_run(shmap__runtime *rt, int dev);
/* The device waits until pred(arg) holds; the helper calls
 * shmap__progress_done() after each change that may make it hold. */
void shmap__progress_wait(shmap__runtime *rt, int dev, shmap__pred pred,
                          void *arg);
void shmap__progress_done(shmap__runtime *rt, int dev);
/* Stop and join every helper (the runtime goes away). */
void shmap__progress_destroy(shmap__runtime *rt);

#endif /* SHMAP_PROGRESS_H */
