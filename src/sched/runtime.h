/* SPDX-License-Identifier: MIT */
/*
 * runtime.h - everything a file that runs code on devices may need, in one
 * include: the scheduler (sched.h), the debugging aids (debug.h), the arena
 * (arena.h), the map's job and context (map.h), collective descriptors
 * (coll/desc.h) and the transport interface (transport/comm.h).  Each
 * concept has its own header; include the narrowest one that suffices.
 */
#ifndef SHMAP_RUNTIME_H
#define SHMAP_RUNTIME_H

#include "device/arena.h"
#include "transport/desc.h"
#include "device/device.h"
#include "sched/debug.h"
#include "sched/sched.h"
#include "transport/comm.h"

#endif /* SHMAP_RUNTIME_H */
