/* SPDX-License-Identifier: MIT */
/*
 * plan.h - the plan of a collective call (plan.c): argument checks, the
 * group, the result's shape and the call's descriptor, before any member
 * waits for another; and the algorithms (algo.c) that carry a plan out
 * through the transport interface (transport/comm.h).
 */
#ifndef SHMAP_PLAN_H
#define SHMAP_PLAN_H

#include "device/device.h"
#include "transport/comm.h"

typedef struct shmap__plan {
  shmap__coll c;                  /* the call, ready for arrive */
  const shmap_block *x;           /* the input block */
  int orank;                      /* the result block's shape */
  int64_t oshape[SHMAP_MAX_RANK]; /*   (shape-changing collectives) */
  int from, to;                   /* ppermute: the ranks this member
                                     receives from and sends to, or -1 */
  int odtype;                     /* the result's dtype (the input's, but
                                     i32 for sums of bool) */
  shmap__fold fold;               /* reductions: kernel, mean, result size */
  /* axis_index_groups (coll/groups.c).  The transport's group stays the
   * whole group of the axes (c.n, c.rank): every member arrives and
   * agrees; data moves only within this member's group of gn ranks, in
   * which it has rank grank.  gmem lists the group's ranks of the axes
   * in order (NULL without groups: rank r is r). */
  const shmap_groups *groups;
  int gn, grank;
  const int *gmem;
} shmap__plan;

/* The transport rank of the member at position k of this member's group. */
static inline int shmap__plan_member(const shmap__plan *p, int k)
{
  return p->gmem ? p->gmem[k] : k;
}

/* What every plan checks first (the context, the axes, the input, the
 * groups; NULL groups for the whole group) and the descriptor's common
 * fields.  0 or an error code (message set). */
int shmap__plan_prepare(shmap_ctx *ctx, int kind, const shmap_block *x,
                        const char *axes, const shmap_groups *groups,
                        shmap__plan *p);
/* Check groups against the plan's group (coll/groups.c) and fill gn, grank,
 * gmem and the descriptor's groups. */
int shmap__groups_plan(shmap__plan *p);

/* Each checks its collective's arguments on this device (an error fails
 * the whole map, message set) and fills the plan.  0 or an error code. */
int shmap__plan_reduce(shmap_ctx *ctx, shmap_block *x, const char *axes,
                       int kind, shmap__plan *p);
int shmap__plan_psum_scatter(shmap_ctx *ctx, const shmap_block *x,
                             const char *axes, int scatter_dimension,
                             int tiled, bool has_out, shmap__plan *p);
int shmap__plan_all_gather(shmap_ctx *ctx, const shmap_block *x,
                           const char *axes, int axis, int tiled,
                           bool has_out, shmap__plan *p);
int shmap__plan_all_to_all(shmap_ctx *ctx, const shmap_block *x,
                           const char *axes, int split_axis, int concat_axis,
                           int tiled, bool has_out, shmap__plan *p);
int shmap__plan_ppermute(shmap_ctx *ctx, const shmap_block *x,
                         const char *axes, int npairs, const int pairs[][2],
                         shmap__plan *p);
/* The same plans within axis_index_groups (NULL: the whole group), and
 * psum, pmax, pmin, pmean into a new block (result dtype: the table's).
 * shmap__plan_reduce_groups plans into *pp, or points *pp at the device's
 * kept plan of an equal call (coll/plan.c, "Repeated calls"), which that
 * call then uses in place: the device's next plan of the kind may
 * replace it. */
int shmap__plan_reduce_groups(shmap_ctx *ctx, shmap_block *x,
                              const char *axes, const shmap_groups *groups,
                              int kind, shmap__plan **pp);
int shmap__plan_reduce_new_groups(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes,
                                  const shmap_groups *groups, int kind,
                                  bool has_out, shmap__plan *p);
int shmap__plan_psum_scatter_groups(shmap_ctx *ctx, const shmap_block *x,
                                    const char *axes,
                                    const shmap_groups *groups,
                                    int scatter_dimension, int tiled,
                                    bool has_out, shmap__plan *p);
int shmap__plan_all_gather_groups(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, const shmap_groups *groups,
                                  int axis, int tiled, bool has_out,
                                  shmap__plan *p);
int shmap__plan_all_to_all_groups(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, const shmap_groups *groups,
                                  int split_axis, int concat_axis, int tiled,
                                  bool has_out, shmap__plan *p);
/* axis_index / axis_size: the group size, and the rank in *rank. */
int shmap__plan_group(shmap_ctx *ctx, const char *name, const char *axes,
                      int *rank);
/* The error of a call into a new block whose out is NULL. */
int shmap__plan_out_null(shmap__plan *p);
/* A new block of the plan's result shape in the device's arena, its data
 * the call's dst; NULL (the map failed, message set) when out of memory. */
shmap_block *shmap__plan_result(shmap__plan *p);
/* Allocate the plan's result block, run algo into it, hand it over (the
 * block goes back to the arena if algo fails). */
int shmap__into_new_block(shmap__plan *p,
                          int (*algo)(shmap__plan *, shmap_block *),
                          shmap_block **out);

/* Algorithms (algo.c): arrive, move the data, depart.  0 or an error
 * code (message set). */
int shmap__algo_allreduce(shmap__plan *p, shmap_block *x);
/* The same into a new block res (the call's dst). */
int shmap__algo_allreduce_new(shmap__plan *p, shmap_block *res);
int shmap__algo_reduce_scatter(shmap__plan *p, shmap_block *res);
int shmap__algo_all_gather(shmap__plan *p, shmap_block *res);
int shmap__algo_all_to_all(shmap__plan *p, shmap_block *res);
int shmap__algo_ppermute(shmap__plan *p, shmap_block *x);
/* ppermute from the input into a new block res. */
int shmap__algo_ppermute_new(shmap__plan *p, shmap_block *res);
/* psum, pmax, pmin, pmean of the API, in place (x) or into *out, within
 * axis_index_groups (coll/groups.c) or, for NULL groups, over the whole
 * group of the axes: plan and algorithm. */
int shmap__reduce_groups(shmap_ctx *ctx, shmap_block *x, const char *axes,
                         const shmap_groups *groups, int kind);
int shmap__reduce_groups_new(shmap_ctx *ctx, const shmap_block *x,
                             const char *axes, const shmap_groups *groups,
                             int kind, shmap_block **out);
/* Within axis_index_groups (coll/groups.c): the reductions in place (x)
 * or into res, the reduction's result staying in a scratch block until
 * every member has read its input; and the shape-changing three. */
int shmap__algo_allreduce_groups(shmap__plan *p, shmap_block *x);
int shmap__algo_allreduce_groups_new(shmap__plan *p, shmap_block *res);
int shmap__algo_reduce_scatter_groups(shmap__plan *p, shmap_block *res);

#endif /* SHMAP_PLAN_H */
