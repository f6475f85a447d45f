/* SPDX-License-Identifier: MIT */
/*
 * spread.h - what a rehearsal knows of each device, as records that the
 * processes of a job exchange (spread.c), so that every process replays
 * every device and prints the same report.
 */
#ifndef SHMAP_SPREAD_H
#define SHMAP_SPREAD_H

#include "internal.h"

/* One event of one device (what: the replay's item kinds, rehearse.c),
 * or its memory at its peak (what IT_MEM: the counts by chunk kind in gn,
 * peer and k, the bytes in t0, t1 and op, the total in vbytes).  Plain
 * data of a fixed size: it travels as bytes between processes of one
 * machine type. */
typedef struct shmap__rrec {
  int32_t dev, what, gn, peer;
  uint32_t k, pad;
  uint64_t t0, t1, op, bytes, vbytes;
  double flops, mbytes;
} shmap__rrec;

/* Every process's records of the mesh's devices, in *all (malloc'ed; the
 * caller frees it), *nall of them; without processes, a copy of mine.  0
 * or an error code (message set).  Collective over the mesh's
 * processes. */
int shmap__rehearse_gather(const shmap_mesh *mesh, const shmap__rrec *mine,
                           size_t n, shmap__rrec **all, size_t *nall);

#endif /* SHMAP_SPREAD_H */
