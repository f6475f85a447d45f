/* SPDX-License-Identifier: MIT */
/*
 * map.h - one map call: the job the runtime runs on every device, and each
 * device's context (map.c), with the errors a device reports during it.
 */
#ifndef SHMAP_MAP_H
#define SHMAP_MAP_H

#include "device/arena.h"
#include "sched/sched.h"
#include "transport/comm.h"

/* What one input of a map needs: its resolved spec and block shape. */
typedef struct shmap__in_info {
  shmap__spec spec;
  int64_t bshape[SHMAP_MAX_RANK];
  bool borrow; /* the array's blocks already have this layout */
  shmap_array *view; /* the array with other processes' pieces (stage.c) */
} shmap__in_info;

/* One map call: the body, its arrays, one context per device, and the
 * communicator its collectives use. */
typedef struct shmap__job {
  shmap_mesh *mesh;
  shmap_body_fn body;
  void *arg;
  int nin, nout;
  shmap_array *const *in;
  shmap__in_info *ins;
  shmap_ctx *ctx; /* one per device */
  shmap__comm comm;
  unsigned manual; /* the map's manual axes (bits of mesh axes) */
  /* A map over some axes runs its body once per manual coordinate, on the
   * device whose free-axis coordinates are 0; the other devices of its
   * free-axis slice are its replicas (map.c, "Replicas").  False for a map
   * over every axis, and under MPI when a slice spans processes (then
   * every device runs the body). */
  bool replicas;
} shmap__job;

/* A nested map that a body instance hands to the replicas that join it
 * (map.c): posted into each one's context, on the poster's stack until
 * every one has left it. */
typedef struct shmap__offer shmap__offer;

/* The context of one device during one map call. */
struct shmap_ctx {
  shmap__runtime *rt;
  struct shmap__job *job;
  shmap__comm *comm;          /* the map's communicator */
  int dev;
  int coords[SHMAP_MAX_AXES];
  shmap_block **in;           /* nin blocks */
  shmap_block **out;          /* nout blocks, NULL until declared */
  struct shmap__chunk *arena; /* every block this device allocated */
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
};

/* Whether a block argument is well formed (cheap; no message). */
bool shmap__block_valid(const shmap_block *b);
/* Check a block argument (`name` describes it in messages). */
int shmap__block_check(shmap_ctx *ctx, const char *op, const char *name,
                       const shmap_block *b);
/* Check that ctx is the context of the body running on this thread, or of
 * a map that body's map is nested in. */
int shmap__ctx_check(shmap_ctx *ctx, const char *op);
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

/* Library-internal map flag: the outputs are known to be replicated along
 * the axes their specs leave out (no check, no copy). */
#define SHMAP__TRUSTED_REP 0x80000000u

int shmap__map(shmap_mesh *mesh, shmap_body_fn body, void *arg, int nin,
               shmap_array *const in[], const char *const in_specs[],
               int nout, shmap_array *out[], const char *const out_specs[],
               unsigned flags);

#endif /* SHMAP_MAP_H */
