/* SPDX-License-Identifier: MIT */
/*
 * debug.h - what helps people see what their devices do (debug.c): the
 * registry of live runtimes (walked by the gdb extension), the watchdog's
 * report, the Chrome trace recorder, and each device's state.
 */
#ifndef SHMAP_DEBUG_H
#define SHMAP_DEBUG_H

#include "sched/sched.h"

/* Every live runtime, for the gdb extension and the trace writer. */
void shmap__registry_add(shmap__runtime *rt);
/* Around fork(): 0 before (take the registry and trace locks), 1 in the
 * parent after, 2 in the child after (release them). */
void shmap__debug_fork(int phase);
void shmap__registry_remove(shmap__runtime *rt);
/* Watchdog period in nanoseconds (0: off). */
uint64_t shmap__watchdog_ns(void);
/* Print every device's state to `out`. */
void shmap__watchdog_report(shmap__runtime *rt, uint64_t running_ns, void *out);
/* A runtime goes away: keep its events for the trace file, free them. */
void shmap__trace_runtime_gone(shmap__runtime *rt);
/* Whether traces are being recorded. */
bool shmap__tracing(void);
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
/* " [map over 'data' > nested over 'model']" for a device in a nested map
 * or a map over some axes, "" otherwise. */
void shmap__nest_format(const shmap_mesh *mesh, uint64_t nest, char *buf,
                        size_t n);
#define SHMAP__NEST_LEVELS 7
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

#endif /* SHMAP_DEBUG_H */
