/* SPDX-License-Identifier: MIT */
/*
 * debug.h - the observers of the runtime: the registry of live runtimes
 * and the trace writer (debug.c), the watchdog (watchdog.c).  Nothing
 * below calls them: they register hooks with the runtime (sched.h), from
 * shmap__debug_init, which creating a mesh calls (the map layer is above
 * this one).
 */
#ifndef SHMAP_DEBUG_H
#define SHMAP_DEBUG_H

#include "sched/sched.h"

/* Register the observers' hooks, once per process. */
void shmap__debug_init(void);
void shmap__watchdog_register(void);
/* Every live runtime, for the gdb extension and the trace writer. */
void shmap__registry_add(shmap__runtime *rt);
/* Also hands the runtime's trace events to a trace being recorded. */
void shmap__registry_remove(shmap__runtime *rt);
/* Print every device's state to `out` (a FILE *). */
void shmap__watchdog_report(shmap__runtime *rt, uint64_t running_ns, void *out);
/* "psum over 'i'" for a packed collective (shmap__pack_op). */
void shmap__op_format(const shmap_mesh *mesh, uint64_t op, char *buf,
                      size_t n);
/* " [map over 'data' > nested over 'model']" for a device in a nested map
 * or a map over some axes, "" otherwise. */
void shmap__nest_format(const shmap_mesh *mesh, uint64_t nest, char *buf,
                        size_t n);

#endif /* SHMAP_DEBUG_H */
