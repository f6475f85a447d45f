/* SPDX-License-Identifier: MIT */
/*
 * trace.h - what devices record about themselves while they run: each
 * device's state (read by the watchdog and the gdb extension), the events
 * of a Chrome trace (trace.c; the trace writer in src/debug/ turns them
 * into a file), and the clock (clock.c).
 */
#ifndef SHMAP_TRACE_H
#define SHMAP_TRACE_H

#include "sched/sched.h"

/* Whether events are being recorded (for a trace, a rehearsal or both). */
bool shmap__tracing(void);
/* Start or stop recording for the trace writer. */
void shmap__trace_record(bool on);
/* Whether the trace writer records (a rehearsal may record alone). */
bool shmap__trace_writing(void);
/* Start or stop recording for a rehearsal (counted: each rehearsed map
 * turns it on at its start and off at its end). */
void shmap__rehearse_record(bool on);
/* Record an event of the predicted schedule of device `d` (a
 * rehearsal's, written as a second timeline beside the measured one). */
void shmap__trace_predicted(shmap__dev *d, const shmap__tev *e);
/* Record a collective's event with its rehearsal fields, or an event of
 * the body (a cost annotation, a wait) named by e->job. */
void shmap__trace_full(shmap__dev *d, const shmap__tev *e);
/* Free a device's recorded events (the runtime goes away). */
void shmap__trace_dev_free(shmap__dev *d);
/* Record an event of device `d` (when tracing). */
void shmap__trace_event(shmap__dev *d, uint64_t t0, uint64_t t1, uint64_t op,
                        uint64_t bytes, uint32_t seq);
/* Record an asynchronous request of device `d`, from its start to its
 * completion, on the track of its request slot (its helper's thread). */
void shmap__trace_request(shmap__dev *d, uint64_t t0, uint64_t t1, uint64_t op,
                          uint64_t bytes, uint32_t seq, int track);
/* Record a body of device `d`; `job` names a job of the library's own (it
 * shows under that name in the trace), NULL for a user's body. */
void shmap__trace_body(shmap__dev *d, uint64_t t0, uint64_t t1, uint32_t seq,
                       const char *job);
uint64_t shmap__now(void);
/* The same clock read cheaply, to within a few milliseconds (the kernel's
 * tick): for the states the watchdog and the gdb extension show in
 * tenths of seconds, on every collective call, where the precise clock
 * costs as much as a small reduction's own work. */
uint64_t shmap__now_coarse(void);
/* The clock of a device's state change: precise while events are
 * recorded (a trace or a rehearsal times them), else the coarse one. */
uint64_t shmap__now_state(void);
/* Nesting levels recorded in a device's `nest` word (sched.h). */
#define SHMAP__NEST_LEVELS 7
/* The nesting word of a device one level into a map over the axes in
 * `manual`, from the word of the level it starts from (0: none). */
static inline uint64_t shmap__nest_push(uint64_t nest, unsigned manual)
{
  int levels = (int)(nest >> 56);
  if (levels >= SHMAP__NEST_LEVELS)
    return nest;
  return (nest & ~((uint64_t)0xff << 56)) | (uint64_t)manual << (8 * levels) |
         (uint64_t)(levels + 1) << 56;
}
/* A nested map's body in a trace: a body "kind" of 0 with its axes. */
#define SHMAP__NESTED_BODY 0
/* The device changes state (and the time it did). */
static inline uint64_t shmap__set_state(shmap__dev *d, int state, uint64_t op,
                                        uint64_t now)
{
  atomic_store_explicit(&d->dbg.op, op, memory_order_relaxed);
  atomic_store_explicit(&d->dbg.since, now, memory_order_relaxed);
  atomic_store_explicit(&d->dbg.state, state, memory_order_release);
  return now;
}

#endif /* SHMAP_TRACE_H */
