/* SPDX-License-Identifier: MIT */
/*
 * device.h - a device during a map: its context, the errors it reports,
 * and the checks every call from a body makes (ctx.c, checks.c); the
 * public functions a body calls on its own blocks are in body.c.
 *
 * The map (map/) makes the contexts and runs the bodies; everything below
 * it that acts for a device (collectives, transports, the scheduler's
 * failure word) needs only this header.
 */
#ifndef SHMAP_DEVICE_H
#define SHMAP_DEVICE_H

#include "device/arena.h"
#include "sched/sched.h"

/* The map a context belongs to (map/map.h) and its communicator
 * (transport/comm.h): pointers only, at this layer. */
struct shmap__job;
struct shmap__comm;

/* A nested map that a body instance hands to the replicas that join it
 * (map/nested.c): posted into each one's context, on the poster's stack
 * until every one has left it. */
typedef struct shmap__offer shmap__offer;

/* The context of one device during one map call. */
struct shmap_ctx {
  shmap__runtime *rt;
  struct shmap__job *job;
  struct shmap__comm *comm;   /* the map's communicator */
  int dev;
  int coords[SHMAP_MAX_AXES];
  int nin, nout;              /* the map's counts of inputs and outputs */
  shmap_block **in;           /* nin blocks */
  shmap_block **out;          /* nout blocks, NULL until declared */
  struct shmap__chunk *arena; /* every block this device allocated */
  /* Wait until device `reader` finished its collective call number k,
   * which may still read a block's other room (arena.c): the map's
   * transport sets it, so that the arena needs no transport. */
  void (*src_wait)(struct shmap_ctx *ctx, int reader, uint32_t k);
  uint32_t seq;               /* collective calls entered */
  int err;                    /* first error this device reported */
  const char *job_name;       /* a library job's name for the trace, or NULL */
  /* Input blocks shared and built, and the bytes copied to build them. */
  uint64_t shared, built;
  shmap__moved moved;
  uint64_t remote; /* bytes received from other processes (MPI) */
  /* The map's manual axes (bits of mesh axes); a nested map's context
   * points to the context of the body that started it and shares its
   * communicator (its groups are groups of the same mesh). */
  unsigned manual;
  struct shmap_ctx *outer;
  int depth; /* 0 for a map that is not nested */
  /* Replicas (job->replicas): the device whose body this device's values
   * copy (itself when it runs the body), a nested map offered to this
   * device while it waits, and whether this device's body returned. */
  int host;
  _Atomic(shmap__offer *) offer;
  _Atomic int body_done;
  /* A rehearsed map (src/rehearse/) counts the bytes of the device's
   * blocks (arena.c): live now and at their peak, by chunk kind (input,
   * output, scratch), with the number of blocks. */
  struct shmap__memcount {
    bool on;
    uint64_t live, peak;
    int n[3], npeak[3];
    uint64_t bytes[3], bpeak[3];
  } mem;
};

/* ---- ctx.c ---------------------------------------------------------------- */

/* A context's device name (shmap__ctx_devname): the device's name, then a
 * phrase and an axis list per level of nesting; the levels' axes are
 * disjoint, so every list together is at most one list of every axis. */
#define SHMAP__CTXNAME_MAX \
  (SHMAP__DEVNAME_MAX + SHMAP__AXES_MAX + (SHMAP_MAX_AXES + 1) * 32)

/* Check that ctx is the context of the body running on this thread, or of
 * a map that body's map is nested in. */
int shmap__ctx_check(shmap_ctx *ctx, const char *op);
/* Combine functions of shmap_preduce running on this thread (coll/
 * preduce.c counts them): only then does shmap__ctx_check look at the
 * device's plan for one, a chain of loads every call would pay. */
extern SHMAP__TLS_FAST int shmap__combining;
/* Check that the axes a collective names are manual axes of ctx's map. */
int shmap__ctx_axes(shmap_ctx *ctx, const char *op, const char *text,
                    const int axes[], int naxes);
/* "device 3 (i=1, j=1)", followed for a nested map by the map's axes and
 * those of the maps around it. */
void shmap__ctx_devname(const shmap_ctx *ctx, char *buf, size_t n);
/* A library error on a device during its body: message "<op> on device N
 * (coords): <text>", recorded as the job's failure; returns code. */
int shmap__dev_fail(shmap_ctx *ctx, const char *op, int code,
                    const char *fmt, ...) SHMAP__PRINTF(4, 5);
/* What a device released by another's failure returns: ECANCELED (or
 * EMISMATCH when the failure was a mismatch), message set. */
int shmap__canceled(shmap_ctx *ctx, const char *op);
/* A body returned `rc` (not 0): the map fails with SHMAP_EBODY, unless a
 * library call on the device failed first (then with that error).  The
 * message names the device as shmap__ctx_devname does; returns the
 * device's error. */
int shmap__body_returned(shmap_ctx *ctx, int rc);

/* ---- checks.c ------------------------------------------------------------- */

/* Whether a block argument is well formed (cheap; no message). */
bool shmap__block_valid(const shmap_block *b);
/* Check a block argument (`name` describes it in messages). */
int shmap__block_check(shmap_ctx *ctx, const char *op, const char *name,
                       const shmap_block *b);
/* Check output k of ctx's map for a declaration by shmap_out and the like:
 * in range and not yet declared. */
int shmap__out_check(shmap_ctx *ctx, const char *op, int k);

#endif /* SHMAP_DEVICE_H */
