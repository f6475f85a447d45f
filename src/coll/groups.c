/* SPDX-License-Identifier: MIT */
/*
 * groups.c - JAX's axis_index_groups: collectives within groups of ranks
 * of the named axes.
 *
 * The transport's group stays the whole group of the axes: every member
 * arrives, the descriptors (groups included) are compared, and a call
 * with other groups on another member is a mismatch like any other.  Only
 * the data moves within groups: a member reads its group's members and is
 * read by them.  So the transports need nothing new, and a layout that
 * differs between members is caught before any data moves.
 *
 * Reductions within groups stage their terms: a member fetches each piece
 * of its group's blocks (its own is read where it is) and folds them in
 * the group's order with the same fused kernels as the whole-group
 * reductions, so the results are bitwise equal to a serial left fold over
 * the group's list.  Every member folds the whole block (g times the
 * reads of the fused reduce-scatter + all-gather of the whole group): the
 * price of needing nothing from the transport beyond get.
 */
#include "coll/groups.h"
#include "hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A group as text in a message ("[0, 2]"): a group of many ranks is cut
 * (ranks are data, not a name), so that the rest of the message stays. */
#define GROUP_TEXT_MAX 160

/* "[0, 2]": group gi of the layout. */
static void group_text(const shmap_groups *g, int gi, char *buf, size_t n)
{
  snprintf(buf, n, "[");
  for (int k = 0; k < g->size; k++)
    shmap__cat(buf, n, "%s%d", k ? ", " : "", g->ranks[gi * g->size + k]);
  shmap__cat(buf, n, "]");
}

int shmap__groups_plan(shmap__plan *p)
{
  shmap__coll *c = &p->c;
  const shmap_groups *g = p->groups;
  if (!g) {
    p->gn = c->n;
    p->grank = c->rank;
    p->gmem = NULL;
    return 0;
  }
  int n = c->n;
  const char *op = shmap__coll_opname(c);
  if (g->ngroups < 1 || g->size < 1)
    return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                           "axis_index_groups: %d groups of %d ranks (both "
                           "must be at least 1)",
                           g->ngroups, g->size);
  if (!g->ranks)
    return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                           "axis_index_groups: ranks is NULL");
  if ((int64_t)g->ngroups * g->size != n)
    return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                           "axis_index_groups: %d groups of %d ranks cannot "
                           "cover the %d ranks of the axes exactly once",
                           g->ngroups, g->size, n);
  int *where = shmap__malloc(sizeof(int) * (size_t)n);
  if (!where)
    return shmap__dev_fail(c->ctx, op, SHMAP_ENOMEM, "out of memory");
  for (int r = 0; r < n; r++)
    where[r] = -1;
  uint64_t h = shmap__hash_init();
  for (int gi = 0; gi < g->ngroups; gi++)
    for (int k = 0; k < g->size; k++) {
      int r = g->ranks[gi * g->size + k];
      char gt[GROUP_TEXT_MAX], ot[GROUP_TEXT_MAX];
      if (r < 0 || r >= n || where[r] >= 0) {
        group_text(g, gi, gt, sizeof gt);
        int other = r < 0 || r >= n ? -1 : where[r];
        free(where);
        if (other < 0)
          return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                                 "axis_index_groups: group %d %s has rank %d "
                                 "outside [0, %d)",
                                 gi, gt, r, n);
        if (other == gi)
          return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                                 "axis_index_groups: group %d %s has rank %d "
                                 "twice",
                                 gi, gt, r);
        group_text(g, other, ot, sizeof ot);
        return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                               "axis_index_groups: group %d %s has rank %d, "
                               "which group %d %s has already",
                               gi, gt, r, other, ot);
      }
      where[r] = gi;
      if (r == c->rank) {
        p->gmem = &g->ranks[gi * g->size];
        p->grank = k;
      }
      h = shmap__hash_u64(h, (uint32_t)r);
    }
  free(where);
  p->gn = g->size;
  c->call.gsize = g->size;
  c->call.ngroups = g->ngroups;
  c->call.groups_hash = h;
  if (n <= SHMAP__GROUP_RANKS_LISTED)
    memcpy(c->call.groups, g->ranks, sizeof(int) * (size_t)n);
  return 0;
}

/* ---- reductions within groups ------------------------------------------- */

/* Bytes of one term's piece staged at a time. */
#define STAGE_BYTES 65536

int shmap__staged_allreduce(shmap__plan *p, const shmap__stage_fold *sf,
                            void *out)
{
  shmap__coll *c = &p->c;
  const shmap_block *x = p->x;
  int g = p->gn, width = sf->width > 0 ? sf->width : 1;
  size_t es = c->esize, oes = sf->out_esize;
  size_t numel = (size_t)shmap_block_numel(x);
  size_t chunk = STAGE_BYTES / es / (size_t)width * (size_t)width;
  if (chunk == 0)
    chunk = (size_t)width;
  size_t rows = numel < chunk ? numel : chunk;
  /* The staged terms, and their addresses for the kernel. */
  char *stage = rows ? shmap__malloc(rows * es * (size_t)g) : NULL;
  const void **terms = shmap__malloc(sizeof(void *) * (size_t)g);
  if ((rows && !stage) || !terms) {
    free(stage);
    free(terms);
    return shmap__dev_fail(c->ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  }
  int rc = shmap__comm_arrive(c);
  if (rc) {
    free(stage);
    free(terms);
    return rc;
  }
  if (numel && shmap__comm_two_sided(c))
    for (int k = 0; k < g; k++)
      if (k != p->grank)
        for (size_t off = 0; off < numel; off += chunk) {
          size_t cnt = numel - off < chunk ? numel - off : chunk;
          int64_t sh[1] = {(int64_t)cnt}, st[1] = {1};
          shmap__box piece = {off * es, 1, sh, st};
          shmap__comm_send(c, p->gmem[k], &piece);
        }
  for (size_t off = 0; off < numel; off += chunk) {
    size_t cnt = numel - off < chunk ? numel - off : chunk;
    int64_t sh[1] = {(int64_t)cnt}, st[1] = {1};
    shmap__box piece = {off * es, 1, sh, st};
    for (int k = 0; k < g; k++) {
      if (k == p->grank) {
        terms[k] = (const char *)x->data + off * es;
      } else {
        char *to = stage + (size_t)k * rows * es;
        shmap__comm_get(c, p->gmem[k], &piece, to, st);
        terms[k] = to;
      }
    }
    sf->fold(sf, (char *)out + off * oes, terms, g, cnt);
  }
  free(stage);
  free(terms);
  return shmap__comm_depart(c, shmap_block_nbytes(x));
}

/* The table's fused kernel over the group's terms. */
static void fold_kernel(const shmap__stage_fold *sf, void *dst,
                        const void *const terms[], int nterms, size_t count)
{
  sf->p->fold.fn(dst, terms, nterms, count, sf->p->fold.count);
}

static shmap__stage_fold kernel_fold(shmap__plan *p)
{
  shmap__stage_fold sf = {fold_kernel, p, 1, p->fold.out_esize, NULL};
  return sf;
}

int shmap__algo_allreduce_groups_new(shmap__plan *p, shmap_block *res)
{
  shmap__stage_fold sf = kernel_fold(p);
  return shmap__staged_allreduce(p, &sf, res->data);
}

int shmap__staged_inplace(shmap__plan *p, const shmap__stage_fold *sf,
                          shmap_block *x)
{
  /* Peers read x until the call completes: the result waits in scratch. */
  shmap_ctx *ctx = p->c.ctx;
  shmap__chunk *tmp = NULL;
  size_t bytes = shmap_block_nbytes(x);
  if (bytes && !(tmp = shmap__arena_alloc(ctx, x->dtype, x->rank, x->shape,
                                          SHMAP__CHUNK_SCRATCH, false)))
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ENOMEM,
                           "%s", shmap__errbuf());
  int rc = shmap__staged_allreduce(p, sf, tmp ? tmp->block.data : NULL);
  if (tmp) {
    if (!rc)
      memcpy(x->data, tmp->block.data, bytes);
    shmap__arena_free(ctx, tmp);
  }
  return rc;
}

int shmap__algo_allreduce_groups(shmap__plan *p, shmap_block *x)
{
  shmap__stage_fold sf = kernel_fold(p);
  return shmap__staged_inplace(p, &sf, x);
}

/* Rank r of a group keeps rows [r*m, (r+1)*m) of dimension d, folded over
 * the group: each run of m*inner elements is staged from every member. */
int shmap__algo_reduce_scatter_groups(shmap__plan *p, shmap_block *res)
{
  shmap__coll *c = &p->c;
  const shmap_block *x = p->x;
  int g = p->gn, d = c->call.p1;
  size_t es = c->esize;
  int64_t m = x->shape[d] / g;
  int64_t outer = shmap__numel(d, x->shape);
  int64_t inner = shmap__numel(x->rank - d - 1, x->shape + d + 1);
  size_t run = (size_t)(m * inner);
  char *stage = run ? shmap__malloc(run * es * (size_t)g) : NULL;
  const void **terms = shmap__malloc(sizeof(void *) * (size_t)g);
  if ((run && !stage) || !terms) {
    free(stage);
    free(terms);
    return shmap__dev_fail(c->ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  }
  int rc = shmap__comm_arrive(c);
  if (rc) {
    free(stage);
    free(terms);
    return rc;
  }
  int64_t sh[1] = {(int64_t)run}, st[1] = {1};
  if (run && shmap__comm_two_sided(c))
    for (int64_t o = 0; o < outer; o++)
      for (int k = 0; k < g; k++)
        if (k != p->grank) {
          shmap__box piece = {((size_t)o * (size_t)x->shape[d] +
                               (size_t)(k * m)) * (size_t)inner * es,
                              1, sh, st};
          shmap__comm_send(c, p->gmem[k], &piece);
        }
  if (run)
    for (int64_t o = 0; o < outer; o++) {
      size_t off = ((size_t)o * (size_t)x->shape[d] +
                    (size_t)(p->grank * m)) * (size_t)inner;
      shmap__box piece = {off * es, 1, sh, st};
      for (int k = 0; k < g; k++) {
        if (k == p->grank) {
          terms[k] = (const char *)x->data + off * es;
        } else {
          char *to = stage + (size_t)k * run * es;
          shmap__comm_get(c, p->gmem[k], &piece, to, st);
          terms[k] = to;
        }
      }
      p->fold.fn((char *)res->data + (size_t)o * run * p->fold.out_esize,
                 terms, g, run, p->fold.count);
    }
  free(stage);
  free(terms);
  return shmap__comm_depart(c, shmap_block_nbytes(x));
}

/* ---- entry points ---------------------------------------------------------- */

int shmap__reduce_groups(shmap_ctx *ctx, shmap_block *x, const char *axes,
                         const shmap_groups *groups, int kind)
{
  shmap__plan p;
  int rc = shmap__plan_reduce_groups(ctx, x, axes, groups, kind, &p);
  if (rc)
    return rc;
  return p.gmem ? shmap__algo_allreduce_groups(&p, x)
                : shmap__algo_allreduce(&p, x);
}

SHMAP_EXTERN int shmap_psum_groups(shmap_ctx *ctx, shmap_block *x,
                                   const char *axes,
                                   const shmap_groups *groups)
{
  return shmap__reduce_groups(ctx, x, axes, groups, SHMAP__PSUM);
}

SHMAP_EXTERN int shmap_pmax_groups(shmap_ctx *ctx, shmap_block *x,
                                   const char *axes,
                                   const shmap_groups *groups)
{
  return shmap__reduce_groups(ctx, x, axes, groups, SHMAP__PMAX);
}

SHMAP_EXTERN int shmap_pmin_groups(shmap_ctx *ctx, shmap_block *x,
                                   const char *axes,
                                   const shmap_groups *groups)
{
  return shmap__reduce_groups(ctx, x, axes, groups, SHMAP__PMIN);
}

SHMAP_EXTERN int shmap_pmean_groups(shmap_ctx *ctx, shmap_block *x,
                                    const char *axes,
                                    const shmap_groups *groups)
{
  return shmap__reduce_groups(ctx, x, axes, groups, SHMAP__PMEAN);
}

int shmap__reduce_groups_new(shmap_ctx *ctx, const shmap_block *x,
                             const char *axes, const shmap_groups *groups,
                             int kind, shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_reduce_new_groups(ctx, x, axes, groups, kind,
                                         out != NULL, &p);
  if (rc)
    return rc;
  return shmap__into_new_block(&p,
                               p.gmem ? shmap__algo_allreduce_groups_new
                                      : shmap__algo_allreduce_new,
                               out);
}

SHMAP_EXTERN int shmap_psum_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                       const char *axes,
                                       const shmap_groups *groups,
                                       shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, groups, SHMAP__PSUM, out);
}

SHMAP_EXTERN int shmap_pmax_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                       const char *axes,
                                       const shmap_groups *groups,
                                       shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, groups, SHMAP__PMAX, out);
}

SHMAP_EXTERN int shmap_pmin_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                       const char *axes,
                                       const shmap_groups *groups,
                                       shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, groups, SHMAP__PMIN, out);
}

SHMAP_EXTERN int shmap_pmean_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                        const char *axes,
                                        const shmap_groups *groups,
                                        shmap_block **out)
{
  return shmap__reduce_groups_new(ctx, x, axes, groups, SHMAP__PMEAN, out);
}

SHMAP_EXTERN int shmap_all_gather_groups(shmap_ctx *ctx, const shmap_block *x,
                                         const char *axes,
                                         const shmap_groups *groups, int axis,
                                         int tiled, shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_all_gather_groups(ctx, x, axes, groups, axis, tiled,
                                         out != NULL, &p);
  if (rc)
    return rc;
  return shmap__into_new_block(&p, shmap__algo_all_gather, out);
}

SHMAP_EXTERN int shmap_psum_scatter_groups(shmap_ctx *ctx,
                                           const shmap_block *x,
                                           const char *axes,
                                           const shmap_groups *groups,
                                           int scatter_dimension, int tiled,
                                           shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_psum_scatter_groups(ctx, x, axes, groups,
                                           scatter_dimension, tiled,
                                           out != NULL, &p);
  if (rc)
    return rc;
  return shmap__into_new_block(&p,
                               p.gmem ? shmap__algo_reduce_scatter_groups
                                      : shmap__algo_reduce_scatter,
                               out);
}

SHMAP_EXTERN int shmap_all_to_all_groups(shmap_ctx *ctx, const shmap_block *x,
                                         const char *axes,
                                         const shmap_groups *groups,
                                         int split_axis, int concat_axis,
                                         int tiled, shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = shmap__plan_all_to_all_groups(ctx, x, axes, groups, split_axis,
                                         concat_axis, tiled, out != NULL, &p);
  if (rc)
    return rc;
  return shmap__into_new_block(&p, shmap__algo_all_to_all, out);
}
