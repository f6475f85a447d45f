/* SPDX-License-Identifier: MIT */
/*
 * hooks.h - the runtime's side of the hooks (hooks.c): calling every
 * registered table (the tables and their registration are in sched.h).
 */
#ifndef SHMAP_HOOKS_H
#define SHMAP_HOOKS_H

#include "sched/sched.h"

void shmap__hooks_added(shmap__runtime *rt);
void shmap__hooks_removed(shmap__runtime *rt);
void shmap__hooks_failed(shmap__runtime *rt, int dev, int code,
                         const char *msg);
bool shmap__hooks_release(shmap__runtime *rt);
void shmap__hooks_destroy(shmap__runtime *rt);
/* The watchdog's report. */
void shmap__hooks_watch(shmap__runtime *rt, uint64_t running_ns);

#endif /* SHMAP_HOOKS_H */
