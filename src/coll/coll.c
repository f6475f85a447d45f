/* SPDX-License-Identifier: MIT */
/*
 * coll.c - the collectives' public entry points.  Each is a plan (plan.c:
 * checks, shapes, the call's descriptor) followed by an algorithm (algo.c,
 * written against the transport interface in transport/comm.h); the
 * rendezvous, the agreement between the members of a group and the data
 * movement itself are the transport's (transport/shm.c).
 */
#include "coll/plan.h"

SHMAP_EXTERN int shmap_axis_index(shmap_ctx *ctx, const char *axes)
{
  int rank = 0;
  int rc = shmap__plan_group(ctx, "axis_index", axes, &rank);
  return rc < 0 ? rc : rank;
}

SHMAP_EXTERN int shmap_axis_size(shmap_ctx *ctx, const char *axes)
{
  int rank;
  return shmap__plan_group(ctx, "axis_size", axes, &rank);
}

/* ---- reductions in place -------------------------------------------------- */

/* The whole group's reductions, here and into a new block, are the grouped
 * ones (coll/groups.c) without groups: the same plan, the same algorithm. */

SHMAP_EXTERN int shmap_psum(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return shmap__reduce_groups(ctx, x, axes, NULL, SHMAP__PSUM);
}

SHMAP_EXTERN int shmap_pmax(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return shmap__reduce_groups(ctx, x, axes, NULL, SHMAP__PMAX);
}

SHMAP_EXTERN int shmap_pmin(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return shmap__reduce_groups(ctx, x, axes, NULL, SHMAP__PMIN);
}

SHMAP_EXTERN int shmap_pmean(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return shmap__reduce_groups(ctx, x, axes, NULL, SHMAP__PMEAN);
}

/* ---- reductions into a new block -------------------------------------------- */

SHMAP_EXTERN int shmap_psum_new(shmap_ctx *ctx, const shmap_block *x,
                                const char *axes, shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, NULL, SHMAP__PSUM, out);
}

SHMAP_EXTERN int shmap_pmax_new(shmap_ctx *ctx, const shmap_block *x,
                                const char *axes, shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, NULL, SHMAP__PMAX, out);
}

SHMAP_EXTERN int shmap_pmin_new(shmap_ctx *ctx, const shmap_block *x,
                                const char *axes, shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, NULL, SHMAP__PMIN, out);
}

SHMAP_EXTERN int shmap_pmean_new(shmap_ctx *ctx, const shmap_block *x,
                                 const char *axes, shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, NULL, SHMAP__PMEAN, out);
}

SHMAP_EXTERN int shmap_ppermute_new(shmap_ctx *ctx, const shmap_block *x,
                                    const char *axes, int npairs,
                                    const int pairs[][2], shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_ppermute(ctx, x, axes, npairs, pairs, &p);
  if (rc)
    return rc;
  if (!out)
    return shmap__plan_out_null(&p);
  return shmap__into_new_block(&p, shmap__algo_ppermute_new, out);
}

/* ---- shape-changing collectives ------------------------------------------- */

SHMAP_EXTERN int shmap_psum_scatter(shmap_ctx *ctx, const shmap_block *x,
                                    const char *axes, int scatter_dimension,
                                    int tiled, shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_psum_scatter(ctx, x, axes, scatter_dimension, tiled,
                                    out != NULL, &p);
  return rc ? rc : shmap__into_new_block(&p, shmap__algo_reduce_scatter, out);
}

SHMAP_EXTERN int shmap_all_gather(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, int axis, int tiled,
                                  shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_all_gather(ctx, x, axes, axis, tiled, out != NULL, &p);
  return rc ? rc : shmap__into_new_block(&p, shmap__algo_all_gather, out);
}

SHMAP_EXTERN int shmap_all_to_all(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, int split_axis,
                                  int concat_axis, int tiled,
                                  shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_all_to_all(ctx, x, axes, split_axis, concat_axis, tiled,
                                  out != NULL, &p);
  return rc ? rc : shmap__into_new_block(&p, shmap__algo_all_to_all, out);
}

SHMAP_EXTERN int shmap_ppermute(shmap_ctx *ctx, shmap_block *x,
                                const char *axes, int npairs,
                                const int pairs[][2])
{
  shmap__plan p;
  int rc = shmap__plan_ppermute(ctx, x, axes, npairs, pairs, &p);
  return rc ? rc : shmap__algo_ppermute(&p, x);
}
