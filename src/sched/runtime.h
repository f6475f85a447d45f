/* SPDX-License-Identifier: MIT */
/*
 * runtime.h - the scheduler's interfaces in one include: the runtime,
 * waiting and waking (sched.h), what devices record (trace.h) and the
 * progress helpers (progress.h).  What lies above the scheduler has
 * headers of its own.
 */
#ifndef SHMAP_RUNTIME_H
#define SHMAP_RUNTIME_H

#include "sched/progress.h"
#include "sched/sched.h"
#include "sched/trace.h"

#endif /* SHMAP_RUNTIME_H */
