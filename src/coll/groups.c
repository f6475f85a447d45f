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

/* The layout of a shmap_groups: where each group starts in ranks and how
 * many ranks it has.  size 0 lists groups of different sizes, each ended
 * by -1. */
typedef struct glayout {
  int *start, *len; /* per group */
  int total;        /* ranks listed, separators not counted */
  bool unequal;
} glayout;

/* "[0, 2]": group gi of the layout. */
static void group_text(const shmap_groups *g, const glayout *l, int gi,
                       char *buf, size_t n)
{
  snprintf(buf, n, "[");
  for (int k = 0; k < l->len[gi]; k++)
    shmap__cat(buf, n, "%s%d", k ? ", " : "", g->ranks[l->start[gi] + k]);
  shmap__cat(buf, n, "]");
}

/* Cut the list into groups: of g->size ranks each, or, with size 0, up to
 * each -1 (reading at most n + ngroups entries, the most a layout of the
 * n ranks can have). */
static int groups_cut(shmap__plan *p, const shmap_groups *g, glayout *l)
{
  shmap__coll *c = &p->c;
  const char *op = shmap__coll_opname(c);
  int n = c->n;
  l->unequal = g->size == 0;
  l->total = 0;
  for (int gi = 0, at = 0; gi < g->ngroups; gi++) {
    l->start[gi] = at;
    int len = g->size;
    if (l->unequal) {
      len = 0;
      while (l->total + len < n + 1 && g->ranks[at + len] != -1)
        len++;
      if (len == 0)
        return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                               "axis_index_groups: group %d of the %d (size "
                               "0: each ended by -1) is empty",
                               gi, g->ngroups);
      if (l->total + len > n)
        return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                               "axis_index_groups: group %d of the %d (size "
                               "0: each ended by -1) has no -1 within the %d "
                               "ranks the axes' %d leave it",
                               gi, g->ngroups, n - l->total, n);
      at += len + 1;
    } else {
      at += len;
    }
    l->len[gi] = len;
    l->total += len;
  }
  if (l->total != n)
    return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                           l->unequal
                               ? "axis_index_groups: %d groups of %d ranks in "
                                 "all cannot cover the %d ranks of the axes "
                                 "exactly once"
                               : "axis_index_groups: %d groups of %d ranks "
                                 "cannot cover the %d ranks of the axes "
                                 "exactly once",
                           g->ngroups, l->unequal ? l->total : g->size, n);
  return 0;
}

/* Every rank exactly once; this member's group found (gmem, grank, gn)
 * and the layout hashed into *h. */
static int groups_locate(shmap__plan *p, const shmap_groups *g,
                         const glayout *l, int *where, uint64_t *h)
{
  shmap__coll *c = &p->c;
  const char *op = shmap__coll_opname(c);
  int n = c->n;
  for (int r = 0; r < n; r++)
    where[r] = -1;
  for (int gi = 0; gi < g->ngroups; gi++) {
    for (int k = 0; k < l->len[gi]; k++) {
      int r = g->ranks[l->start[gi] + k];
      char gt[GROUP_TEXT_MAX], ot[GROUP_TEXT_MAX];
      if (r < 0 || r >= n || where[r] >= 0) {
        group_text(g, l, gi, gt, sizeof gt);
        int other = r < 0 || r >= n ? -1 : where[r];
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
        group_text(g, l, other, ot, sizeof ot);
        return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                               "axis_index_groups: group %d %s has rank %d, "
                               "which group %d %s has already",
                               gi, gt, r, other, ot);
      }
      where[r] = gi;
      if (r == c->rank) {
        p->gmem = &g->ranks[l->start[gi]];
        p->grank = k;
        p->gn = l->len[gi];
      }
      *h = shmap__hash_u64(*h, (uint32_t)r);
    }
    /* The boundaries are part of the layout: [0, 1], [2] is not [0], [1, 2]. */
    *h = shmap__hash_u64(*h, 0xffffffffu);
  }
  return 0;
}

/* Groups of different sizes: JAX's psum, pmax and pmin take them; its
 * pmean divides by the first group's size (psum of a constant), and its
 * gathers, scatters and all-to-alls size their results by one group
 * size, so those are refused. */
static int groups_unequal_ok(shmap__plan *p)
{
  int kind = p->c.call.kind;
  if (kind == SHMAP__PSUM || kind == SHMAP__PMAX || kind == SHMAP__PMIN)
    return 0;
  return shmap__dev_fail(p->c.ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                         "axis_index_groups of different sizes: %s",
                         kind == SHMAP__PMEAN
                             ? "JAX's pmean divides by the first group's size "
                               "in every group; use psum within the groups "
                               "and divide by the member's own group size"
                             : "JAX requires groups of one size here (only "
                               "psum, pmax and pmin take groups of "
                               "different sizes)");
}

/* The descriptor's copy of the layout, for the agreement and messages:
 * the ranks (with -1 after each group when sizes differ) when few, and
 * gsize -1 for groups of different sizes. */
static void groups_describe(shmap__plan *p, const shmap_groups *g,
                            const glayout *l, uint64_t h)
{
  shmap__coll *c = &p->c;
  int listed = l->unequal ? l->total + g->ngroups : l->total;
  c->call.gsize = l->unequal ? -1 : g->size;
  c->call.ngroups = g->ngroups;
  c->call.groups_hash = h;
  if (listed <= SHMAP__GROUP_RANKS_LISTED) {
    memcpy(c->call.groups, g->ranks, sizeof(int) * (size_t)listed);
    /* The rest as zeros, as a descriptor's copy has them (the plan does
     * not clear the list). */
    memset(c->call.groups + listed, 0,
           sizeof(int) * (size_t)(SHMAP__GROUP_RANKS_LISTED - listed));
  } else if (l->unequal)
    c->call.groups[0] = -2; /* too many to list */
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
  if (g->ngroups < 1 || g->size < 0 || (g->size == 0 && g->ngroups > n))
    return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                           "axis_index_groups: %d groups of %d ranks (groups "
                           "at least 1, size at least 0)",
                           g->ngroups, g->size);
  if (!g->ranks)
    return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                           "axis_index_groups: ranks is NULL");
  if (g->size > 0 && (int64_t)g->ngroups * g->size != n)
    return shmap__dev_fail(c->ctx, op, SHMAP_EINVAL,
                           "axis_index_groups: %d groups of %d ranks cannot "
                           "cover the %d ranks of the axes exactly once",
                           g->ngroups, g->size, n);
  size_t ng = (size_t)g->ngroups;
  int *mem = shmap__malloc(sizeof(int) * (2 * ng + (size_t)n));
  if (!mem)
    return shmap__dev_fail(c->ctx, op, SHMAP_ENOMEM, "out of memory");
  glayout l = {mem, mem + ng, 0, false};
  uint64_t h = shmap__hash_init();
  int rc = groups_cut(p, g, &l);
  if (!rc)
    rc = groups_locate(p, g, &l, mem + 2 * ng, &h);
  bool unequal = false;
  for (int gi = 1; !rc && gi < g->ngroups; gi++)
    unequal |= l.len[gi] != l.len[0];
  if (!rc && unequal)
    rc = groups_unequal_ok(p);
  if (!rc) {
    l.unequal = g->size == 0;
    groups_describe(p, g, &l, h);
  }
  free(mem);
  return rc;
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
  shmap__plan p, *pp = &p;
  int rc = shmap__plan_reduce_groups(ctx, x, axes, groups, kind, &pp);
  if (rc)
    return rc;
  return pp->gmem ? shmap__algo_allreduce_groups(pp, x)
                  : shmap__algo_allreduce(pp, x);
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
