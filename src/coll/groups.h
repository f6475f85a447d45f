/* SPDX-License-Identifier: MIT */
/*
 * groups.h - what groups.c (axis_index_groups and the staged reductions)
 * shares with ragged.c and preduce.c.
 */
#ifndef SHMAP_GROUPS_H
#define SHMAP_GROUPS_H

#include "coll/plan.h"

/* How a staged reduction folds nterms terms of `count` elements (the
 * group's, in its order) into dst.  width: elements per record (pieces are
 * cut on record boundaries); out_esize: bytes per result element. */
typedef struct shmap__stage_fold shmap__stage_fold;
struct shmap__stage_fold {
  void (*fold)(const shmap__stage_fold *sf, void *dst,
               const void *const terms[], int nterms, size_t count);
  shmap__plan *p;
  int width;
  size_t out_esize;
  const void *arg; /* the fold's own (preduce: the user's operation) */
};

/* Arrive, fold the whole input block over the plan's group (the ranks
 * p->gmem lists, which must be set) piece by piece into out, depart. */
int shmap__staged_allreduce(shmap__plan *p, const shmap__stage_fold *sf,
                            void *out);
/* The same in place: the result goes to x once the call completes. */
int shmap__staged_inplace(shmap__plan *p, const shmap__stage_fold *sf,
                          shmap_block *x);

#endif /* SHMAP_GROUPS_H */
