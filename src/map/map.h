/* SPDX-License-Identifier: MIT */
/*
 * map.h - one map call: the job the runtime runs on every device (the
 * device's context is device/device.h), and what the stages of a map
 * share: validate.c, run.c, replica.c, outputs.c, nested.c.
 */
#ifndef SHMAP_MAP_H
#define SHMAP_MAP_H

#include "device/device.h"
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
   * free-axis slice are its replicas (replica.c).  False for a map
   * over every axis, and under MPI when a slice spans processes (then
   * every device runs the body). */
  bool replicas;
} shmap__job;

/* Library-internal map flag: the outputs are known to be replicated along
 * the axes their specs leave out (no check, no copy). */
#define SHMAP__TRUSTED_REP 0x80000000u

int shmap__map(shmap_mesh *mesh, shmap_body_fn body, void *arg, int nin,
               shmap_array *const in[], const char *const in_specs[],
               int nout, shmap_array *out[], const char *const out_specs[],
               unsigned flags);

/* ---- explore.c: exploring interleavings (shmap_explore(3)) ---------------- */

/* 0 when every device of `mesh` runs in this process, else SHMAP_EINVAL
 * with a message after `api`: an exploring schedule runs every device on
 * the calling thread. */
int shmap__explore_one_process(const shmap_mesh *mesh, const char *api);
/* One map call made again with its arguments (`call`), its outputs into
 * out[]: 0 or the error. */
typedef int (*shmap__map_once_fn)(void *call, shmap_array *out[]);
/* SHMAP_EXPLORE=n: the map under n schedules (SHMAP_REPLAY's alone when
 * set), run 0's outputs in out[]; on a failure, printed with its
 * schedule and critical step, the error and no outputs. */
int shmap__explore_map(shmap_mesh *mesh, int n, shmap__map_once_fn once,
                       void *call, shmap_array *out[], int nout);
/* Mix a map's outputs into the hash of the run under x. */
void shmap__explore_outputs(shmap__explore *x, shmap_array *const out[],
                            int nout);

/* ---- validate.c: a map's arguments ---------------------------------------- */

/* The first nonzero element of opts->reserved, or -1: options from a
 * later version of the header, or options not zero-initialised, are
 * refused rather than half understood. */
int shmap__map_opts_reserved(const shmap_map_opts *opts);
#define SHMAP__OPTS_RESERVED_MSG                                              \
  "opts->reserved[%d] is %llu, not 0 (room for options of later versions; "  \
  "zero-initialise the options)"

/* The checks of this process's arguments to a map (flags_op: the public
 * function whose flags to check, NULL for the library's own map): 0 or
 * the error (message set). */
int shmap__map_check_args(const char *flags_op, const shmap_mesh *mesh,
                          shmap_body_fn body, int nin,
                          shmap_array *const in[],
                          const char *const in_specs[], int nout,
                          shmap_array *out[], const char *const out_specs[],
                          unsigned flags);
/* Whether a map may start here at all: not on the mesh of the parent of a
 * fork, not from inside a body.  0 when it may; else the code to return
 * at once: rc (the arguments' verdict) when set, else the new error. */
int shmap__map_check_caller(shmap_mesh *mesh, int rc);
/* The job's manual axes from manual_text (NULL or empty: every axis). */
int shmap__map_manual(shmap__job *job, const char *manual_text);
/* The inputs' specs against their arrays, and the outputs' specs. */
int shmap__map_check_specs(shmap__job *job, const char *const in_specs[],
                           const char *const out_specs[], shmap__spec *ospec);
/* Under MPI: every process makes this same map and accepts it (rc: this
 * process's verdict); returns the common verdict. */
int shmap__map_agree(shmap__job *job, const shmap__spec *ospec,
                     unsigned flags, int rc);
/* Pieces of another layout that other processes hold come over before the
 * devices start (proc/stage.c). */
int shmap__map_stage_inputs(shmap__job *job);

/* ---- replica.c: the devices that run no body --------------------------------- */

/* A replica's part of a map, and what a host does for its replicas when
 * its body returned (replica.c). */
void shmap__map_replica(shmap__job *job, int dev);
void shmap__release_replicas(shmap__job *job, int dev);
/* Run the part of nested map `of` that falls to replica `top`. */
void shmap__nested_join(shmap_ctx *top, shmap__offer *of);
/* Leave an offer: its poster may return once every member left. */
void shmap__offer_leave(shmap__runtime *rt, shmap__offer *of);
/* Whether every member left the offer (a wait condition). */
bool shmap__offer_done(void *arg);

/* ---- outputs.c: checking and assembling the outputs ------------------------- */

/* After the bodies ran (rc: the run's result): the devices declared the
 * same outputs, every process agrees on the result (MPI), and each output
 * becomes an array in res[]. */
int shmap__map_outputs(shmap__job *job, const char *const out_specs[],
                       const shmap__spec *ospec, unsigned flags,
                       shmap_array *res[], int rc);
/* "[1,2]": the index of element `flat` of a block of `shape`. */
void shmap__format_index(int rank, const int64_t shape[], int64_t flat,
                         char *buf, size_t n);
/* The first element at which two copies of block b (a and x) differ, or
 * -1 when they are equal; with the element, "<index>: <a> vs <x>" into
 * buf. */
int64_t shmap__rep_differs(const shmap_block *b, const void *a, const void *x,
                           char *buf, size_t n);

/* ---- nested.c: a map inside a body ------------------------------------------ */

/* A nested map that a body instance posts into its replicas' contexts. */
struct shmap__offer {
  shmap_ctx *octx; /* the poster's context: the level it maps from */
  shmap_body_fn body;
  void *arg;
  int nin, nout;
  const shmap_block *const *in;
  const char *const *in_specs, *const *out_specs;
  const shmap__spec *specs; /* nin input then nout output specs */
  unsigned manual, flags;
  uint32_t seq;     /* the poster's collective calls when it posted */
  uint64_t nest;    /* the poster's dbg.nest */
  int poster;
  _Atomic int left; /* members that have not left the offer yet */
};

/* What a replica that stopped waiting leaves in its context: a later
 * offer counts it as gone at once. */
#define SHMAP__OFFER_GONE ((shmap__offer *)(uintptr_t)1)

/* One device's part of nested map `of` started from octx (the device's own
 * call, or an offer it joined): the inner context, the agreement, the
 * inputs, the body and the outputs (into res). */
int shmap__nested_run(shmap_ctx *octx, const shmap__offer *of,
                      shmap_block **res);
/* A nested level's context `from` is done: its blocks go, and its counts
 * (collective calls, blocks and bytes) fold into the level around it. */
void shmap__nested_fold(shmap_ctx *into, shmap_ctx *from);
/* The number of devices along the axes in `mask`, and the device number of
 * member r of device dev's group over them (mesh order). */
int shmap__mask_count(const shmap_mesh *mesh, unsigned mask);
int shmap__mask_member(const shmap_mesh *mesh, unsigned mask, int dev, int r);
/* The context a chain of nested contexts starts from (depth 0). */
shmap_ctx *shmap__root_ctx(shmap_ctx *ctx);

#endif /* SHMAP_MAP_H */
