/* SPDX-License-Identifier: MIT */
/*
 * rehearse.h - the rehearsal of a map on a described cluster
 * (rehearse.c): the map turns it on before its devices start and hands it
 * the devices' recorded events when they are done.
 */
#ifndef SHMAP_REHEARSE_H
#define SHMAP_REHEARSE_H

#include "device/arena.h"
#include "device/device.h"
#include "rehearse/fabric.h"

typedef struct shmap__rehearsal shmap__rehearsal;

/* The fabric a map is rehearsed on: `spec` (the map's option), else
 * SHMAP_REHEARSE, else none (NULL, the usual case, at the cost of one
 * branch).  A bad spec is said once on stderr and the map runs without a
 * rehearsal. */
const char *shmap__rehearse_spec(const char *spec);
/* Start recording for a rehearsal of the next map on `rt` (its runtime
 * lock held, no device running); NULL when the fabric cannot be loaded
 * (said on stderr) or memory is short. */
shmap__rehearsal *shmap__rehearse_begin(shmap__runtime *rt, const char *spec);
/* The devices are done: replay their events on the fabric, keep the
 * report (shmap_rehearse_report), write it where SHMAP_REHEARSE_OUT says
 * (stderr when unset), and free the rehearsal.  ctx: the map's contexts. */
void shmap__rehearse_end(shmap__rehearsal *rh, shmap_ctx *ctx, int rc);

#endif /* SHMAP_REHEARSE_H */
