/* SPDX-License-Identifier: MIT */
/*
 * plan.c - the plan of a collective: everything a device can decide on its
 * own before it meets its group.  The arguments are checked here (an error
 * fails the whole map, naming the device and the call), the group's size
 * and this device's rank found, the result's shape computed, and the
 * descriptor filled that the group's members compare when they arrive.
 */
#include "coll/plan.h"
#include "group.h"
#include "coll/coll.h"
#include "hash.h"

#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bodies name the same axes call after call: keep the last parse. */
static int axes_cached(shmap_ctx *ctx, const char *name, const char *text,
                       int axes[], int *naxes)
{
  struct shmap__dev_plan *d = &ctx->rt->devs[ctx->dev].plan;
  if (text && d->axes_text[0] && strcmp(text, d->axes_text) == 0) {
    memcpy(axes, d->axes_parsed, sizeof d->axes_parsed);
    *naxes = d->axes_n;
    return 0;
  }
  int rc = shmap__axes_parse(ctx->rt->mesh, name, text, axes, naxes);
  d->group_n = 0; /* the group of other axes, or none kept */
  if (rc == 0 && strlen(text) < sizeof d->axes_text) {
    strcpy(d->axes_text, text);
    memcpy(d->axes_parsed, axes, sizeof d->axes_parsed);
    d->axes_n = *naxes;
  } else {
    d->axes_text[0] = '\0';
  }
  return rc;
}

/* Zero a descriptor but for its lists of pairs and group ranks, which
 * are read only as far as their counts say (as shmap__call_copy copies
 * them): the whole descriptor is ten cache lines of the device's stack,
 * written on every call.  The operation's name is zeroed whole: preduce
 * copies a name without its terminator and relies on the zeros after it
 * (one filling the field has none, and is told apart by its hash). */
static void call_clear(shmap__call *a)
{
  const size_t p0 = offsetof(shmap__call, pairs),
               g0 = offsetof(shmap__call, gsize),
               r0 = offsetof(shmap__call, groups),
               s0 = offsetof(shmap__call, source),
               n0 = offsetof(shmap__call, op_name);
  memset(a, 0, p0);
  memset((char *)a + g0, 0, r0 - g0);
  memset((char *)a + s0, 0, n0 - s0);
  memset(a->op_name, 0, sizeof a->op_name);
}

/* What every collective checks first: the context, the axes, the input,
 * the groups. */
int shmap__plan_prepare(shmap_ctx *ctx, int kind, const shmap_block *x,
                        const char *axes, const shmap_groups *groups,
                        shmap__plan *p)
{
  shmap__coll *c = &p->c;
  const char *name = shmap__kind_name(kind);
  p->groups = groups;
  p->gn = 1;
  p->grank = 0;
  p->gmem = NULL;
  c->ctx = ctx;
  c->name = name;
  c->axes_ok = false;
  c->op[0] = '\0';
  c->from = c->to = -1;
  c->one_reader = kind == SHMAP__PPERMUTE;
  p->x = x;
  int rc = shmap__ctx_check(ctx, name);
  if (rc)
    return rc;
  c->comm = ctx->comm;
  call_clear(&c->call);
  c->call.kind = kind;
  if ((rc = axes_cached(ctx, name, axes, c->call.axes, &c->call.naxes)))
    return shmap__dev_fail(ctx, name, rc, "%s", shmap__errbuf());
  if ((rc = shmap__ctx_axes(ctx, name, axes, c->call.axes, c->call.naxes)))
    return rc;
  c->axes_ok = true;
  if (!shmap__block_valid(x))
    return shmap__block_check(ctx, shmap__coll_opname(c), "the input", x);
  c->call.dtype = x->dtype;
  c->call.rank = x->rank;
  memcpy(c->call.shape, x->shape, sizeof c->call.shape);
  c->call.src = x->data;
  c->esize = shmap_dtype_size(x->dtype);
  p->odtype = x->dtype;
  /* The device's group over the axes kept above, found once. */
  struct shmap__dev_plan *dp = &ctx->rt->devs[ctx->dev].plan;
  if (dp->group_n > 0) {
    c->n = dp->group_n;
    c->rank = dp->group_rank;
  } else {
    c->n = shmap__group(ctx->rt->mesh, c->call.axes, c->call.naxes, ctx->dev,
                        NULL, &c->rank);
    if (dp->axes_text[0]) {
      dp->group_n = c->n;
      dp->group_rank = c->rank;
    }
  }
  return shmap__groups_plan(p);
}

/* Normalise a possibly negative dimension into [0, limit). */
static int norm_dim(shmap__plan *p, const char *what, int dim, int limit,
                    int *out)
{
  int d = dim < 0 ? dim + limit : dim;
  if (d < 0 || d >= limit)
    return shmap__dev_fail(p->c.ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                           "%s %d is out of range [%d, %d) for a block of rank "
                           "%d",
                           what, dim, -limit, limit, p->c.call.rank);
  *out = d;
  return 0;
}

static int split_check(shmap__plan *p, const char *what, int d, int tiled)
{
  const shmap__call *call = &p->c.call;
  int n = p->gn;
  int64_t size = call->shape[d];
  if (tiled ? shmap__smod(size, n) == 0 : size == n)
    return 0;
  /* Only a failing call formats its shape: formatting costs more than the
   * rest of a small call's plan. */
  char s[SHMAP__SHAPE_MAX];
  shmap__shape_format((shmap_dtype)call->dtype, call->rank, call->shape, s,
                      sizeof s);
  if (tiled)
    return shmap__dev_fail(p->c.ctx, shmap__coll_opname(&p->c), SHMAP_ESHAPE,
                           "%s %d of the %s block has size %lld, not divisible "
                           "by the group size %d",
                           what, d, s, (long long)size, n);
  return shmap__dev_fail(p->c.ctx, shmap__coll_opname(&p->c), SHMAP_ESHAPE,
                           "untiled: %s %d of the %s block has size %lld but "
                           "must equal the group size %d",
                           what, d, s, (long long)size, n);
}

int shmap__plan_out_null(shmap__plan *p)
{
  return shmap__dev_fail(p->c.ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                         "out is NULL");
}

shmap_block *shmap__plan_result(shmap__plan *p)
{
  shmap_ctx *ctx = p->c.ctx;
  shmap__chunk *c = shmap__arena_alloc(ctx, (shmap_dtype)p->odtype,
                                       p->orank, p->oshape,
                                       SHMAP__CHUNK_SCRATCH, false);
  if (!c) {
    shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ENOMEM, "%s",
                    shmap__errbuf());
    return NULL;
  }
  p->c.call.dst = c->block.data;
  return &c->block;
}

int shmap__into_new_block(shmap__plan *p,
                          int (*algo)(shmap__plan *, shmap_block *),
                          shmap_block **out)
{
  shmap_block *res = shmap__plan_result(p);
  if (!res)
    return p->c.ctx->err;
  int rc = algo(p, res);
  if (rc) {
    shmap__arena_free(p->c.ctx, shmap__arena_find(p->c.ctx, res));
    return rc;
  }
  *out = res;
  return 0;
}

/* ---- queries ---------------------------------------------------------- */

int shmap__plan_group(shmap_ctx *ctx, const char *name, const char *axes,
                      int *rank)
{
  int rc = shmap__ctx_check(ctx, name);
  if (rc)
    return rc;
  int ax[SHMAP_MAX_AXES], nax;
  if ((rc = shmap__axes_parse(ctx->rt->mesh, name, axes, ax, &nax)))
    return shmap__dev_fail(ctx, name, rc, "%s", shmap__errbuf());
  if ((rc = shmap__ctx_axes(ctx, name, axes, ax, nax)))
    return rc;
  return shmap__group(ctx->rt->mesh, ax, nax, ctx->dev, NULL, rank);
}

/* ---- one plan per collective ------------------------------------------ */

/* The kernel of a reduction on the call's dtype (from the dtype table),
 * or an error saying why the dtype does not allow it. */
static int plan_fold(shmap__plan *p, int kind)
{
  int op = shmap__kind_redop(kind);
  shmap__coll *c = &p->c;
  const shmap__dtype_info *t = shmap__dtype((shmap_dtype)c->call.dtype);
  if (t->not_allowed[op])
    return shmap__dev_fail(c->ctx, shmap__coll_opname(c), SHMAP_EDTYPE,
                           "%s on %s: %s", c->name, t->name,
                           t->not_allowed[op]);
  p->odtype = t->result[op];
  p->fold.fn = shmap__kernel(op, (shmap_dtype)c->call.dtype);
  p->fold.count = kind == SHMAP__PMEAN ? p->gn : 0;
  p->fold.out_esize = shmap_dtype_size((shmap_dtype)p->odtype);
  p->fold.partial = op != SHMAP__OP_MEAN && !t->rounds_once;
  p->fold.own = false;
  return 0;
}

static int reduce_new_checked(shmap_ctx *ctx, const shmap_block *x,
                              const char *axes, const shmap_groups *groups,
                              int kind, bool has_out, shmap__plan *p)
{
  int rc = shmap__plan_prepare(ctx, kind, x, axes, groups, p);
  if (rc || (rc = plan_fold(p, kind)))
    return rc;
  if (!has_out)
    return shmap__plan_out_null(p);
  p->orank = x->rank;
  memcpy(p->oshape, x->shape, sizeof p->oshape);
  return 0;
}

static void memo_copy(shmap__plan *p, const shmap__plan *m);

/* A started psum's plan is the request's own: a copy of a kept one. */
int shmap__plan_reduce(shmap_ctx *ctx, shmap_block *x, const char *axes,
                       int kind, shmap__plan *p)
{
  shmap__plan *q = p;
  int rc = shmap__plan_reduce_groups(ctx, x, axes, NULL, kind, &q);
  if (rc == 0 && q != p)
    memo_copy(p, q);
  return rc;
}

static int reduce_checked(shmap_ctx *ctx, shmap_block *x, const char *axes,
                          const shmap_groups *groups, int kind,
                          shmap__plan *p)
{
  int rc = shmap__plan_prepare(ctx, kind, x, axes, groups, p);
  if (rc || (rc = plan_fold(p, kind)))
    return rc;
  if (p->odtype != (int)x->dtype)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_EDTYPE,
                           "%s of %s gives %s (as in JAX), which does not fit "
                           "in place: use shmap_%s_new(), which returns a new "
                           "block",
                           p->c.name, shmap_dtype_name(x->dtype),
                           shmap_dtype_name((shmap_dtype)p->odtype), p->c.name);
  p->c.call.dst = x->data;
  return 0;
}

int shmap__plan_psum_scatter(shmap_ctx *ctx, const shmap_block *x,
                             const char *axes, int scatter_dimension,
                             int tiled, bool has_out, shmap__plan *p)
{
  return shmap__plan_psum_scatter_groups(ctx, x, axes, NULL, scatter_dimension,
                                         tiled, has_out, p);
}

static int psum_scatter_checked(shmap_ctx *ctx, const shmap_block *x,
                                const char *axes, const shmap_groups *groups,
                                int scatter_dimension, int tiled,
                                bool has_out, shmap__plan *p)
{
  int rc = shmap__plan_prepare(ctx, SHMAP__PSUM_SCATTER, x, axes, groups, p);
  if (rc)
    return rc;
  if (!has_out)
    return shmap__plan_out_null(p);
  int d = 0;
  if ((rc = norm_dim(p, "scatter_dimension", scatter_dimension, x->rank, &d)) ||
      (rc = split_check(p, "scatter_dimension", d, tiled)))
    return rc;
  p->c.call.p1 = d;
  p->c.call.tiled = tiled != 0;
  if ((rc = plan_fold(p, SHMAP__PSUM_SCATTER)))
    return rc;
  /* Rank r keeps rows [r*m, (r+1)*m) of dimension d, summed. */
  int64_t m = shmap__sdiv(x->shape[d], p->gn);
  p->orank = 0;
  for (int i = 0; i < x->rank; i++) {
    if (i == d && !tiled)
      continue;
    p->oshape[p->orank++] = i == d ? m : x->shape[i];
  }
  return 0;
}

int shmap__plan_all_gather(shmap_ctx *ctx, const shmap_block *x,
                           const char *axes, int axis, int tiled,
                           bool has_out, shmap__plan *p)
{
  return shmap__plan_all_gather_groups(ctx, x, axes, NULL, axis, tiled,
                                       has_out, p);
}

static int all_gather_checked(shmap_ctx *ctx, const shmap_block *x,
                              const char *axes, const shmap_groups *groups,
                              int axis, int tiled, bool has_out,
                              shmap__plan *p)
{
  int rc = shmap__plan_prepare(ctx, SHMAP__ALL_GATHER, x, axes, groups, p);
  if (rc)
    return rc;
  if (!has_out)
    return shmap__plan_out_null(p);
  if (!tiled && x->rank == SHMAP_MAX_RANK)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ESHAPE,
                           "untiled all_gather would make a block of rank %d "
                           "(at most %d)", x->rank + 1, SHMAP_MAX_RANK);
  if (tiled && x->rank == 0)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ESHAPE,
                           "tiled all_gather needs a block of rank >= 1");
  int a = 0;
  if ((rc = norm_dim(p, "axis", axis, tiled ? x->rank : x->rank + 1, &a)))
    return rc;
  p->c.call.p1 = a;
  p->c.call.tiled = tiled != 0;
  int n = p->gn;
  p->orank = tiled ? x->rank : x->rank + 1;
  for (int i = 0, j = 0; i < p->orank; i++) {
    if (!tiled && i == a)
      p->oshape[i] = n;
    else if (!shmap__mul_size(x->shape[j++], tiled && i == a ? n : 1,
                              &p->oshape[i]))
      return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ESHAPE,
                             "the result's dimension %d would exceed 2^62", i);
  }
  if (shmap__shape_size("the result", p->orank, p->oshape,
                        shmap_dtype_size(x->dtype), NULL, NULL))
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ESHAPE, "%s",
                           shmap__errbuf());
  return 0;
}

int shmap__plan_all_to_all(shmap_ctx *ctx, const shmap_block *x,
                           const char *axes, int split_axis, int concat_axis,
                           int tiled, bool has_out, shmap__plan *p)
{
  return shmap__plan_all_to_all_groups(ctx, x, axes, NULL, split_axis,
                                       concat_axis, tiled, has_out, p);
}

static int all_to_all_checked(shmap_ctx *ctx, const shmap_block *x,
                              const char *axes, const shmap_groups *groups,
                              int split_axis, int concat_axis, int tiled,
                              bool has_out, shmap__plan *p)
{
  int rc = shmap__plan_prepare(ctx, SHMAP__ALL_TO_ALL, x, axes, groups, p);
  if (rc)
    return rc;
  if (!has_out)
    return shmap__plan_out_null(p);
  int sa = 0, ca = 0;
  if ((rc = norm_dim(p, "split_axis", split_axis, x->rank, &sa)) ||
      (rc = norm_dim(p, "concat_axis", concat_axis, x->rank, &ca)) ||
      (rc = split_check(p, "split_axis", sa, tiled)))
    return rc;
  p->c.call.p1 = sa;
  p->c.call.p2 = ca;
  p->c.call.tiled = tiled != 0;
  /* The chunk each member sends to each other: tiled, the block with
   * dimension sa divided by n; untiled, the block without dimension sa.
   * The result stacks the chunks along ca. */
  int n = p->gn, rank = x->rank;
  int64_t cshape[SHMAP_MAX_RANK];
  int crank = 0;
  for (int i = 0; i < rank; i++) {
    if (!tiled && i == sa)
      continue;
    cshape[crank++] = i == sa ? shmap__sdiv(x->shape[i], n) : x->shape[i];
  }
  p->orank = rank;
  if (tiled) {
    memcpy(p->oshape, cshape, sizeof(int64_t) * (size_t)rank);
    /* Dimensions only move between axes: the bytes stay those of x. */
    if (!shmap__mul_size(p->oshape[ca], n, &p->oshape[ca]))
      return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ESHAPE,
                             "the result's dimension %d would exceed 2^62", ca);
  } else {
    for (int i = 0, j = 0; i < rank; i++)
      p->oshape[i] = i == ca ? n : cshape[j++];
  }
  return 0;
}

static int ppermute_checked(shmap_ctx *ctx, const shmap_block *x,
                            const char *axes, int npairs,
                            const int pairs[][2], shmap__plan *p)
{
  int rc = shmap__plan_prepare(ctx, SHMAP__PPERMUTE, x, axes, NULL, p);
  if (rc)
    return rc;
  if (npairs < 0 || (npairs > 0 && !pairs))
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                           npairs < 0 ? "npairs is negative (%d)"
                                      : "pairs is NULL but npairs is %d",
                           npairs);
  int n = p->c.n;
  /* from[dst] = src and to[src] = dst: both uniqueness checks in one pass
   * (a search of the earlier pairs for each source made a ppermute over
   * 1024 devices a million steps per device), and an order-free hash.  On
   * the stack for groups of up to PAIRS_STACK members. */
  enum { PAIRS_STACK = 256 };
  int local[2 * PAIRS_STACK];
  int *from = n <= PAIRS_STACK ? local
                               : shmap__malloc(2 * sizeof(int) * (size_t)n);
  if (!from)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ENOMEM,
                           "out of memory");
  int *to = from + n;
  for (int i = 0; i < 2 * n; i++)
    from[i] = -1;
  p->to = -1;
  for (int i = 0; i < npairs; i++) {
    int s = pairs[i][0], t = pairs[i][1];
    const char *bad = NULL;
    if (s < 0 || s >= n || t < 0 || t >= n)
      bad = "has a rank outside [0, group size)";
    else if (from[t] >= 0)
      bad = "repeats a destination";
    else if (to[s] >= 0)
      bad = "repeats a source";
    if (bad) {
      if (from != local)
        free(from);
      return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                             "pair %d (%d, %d) %s (group size %d)", i, s, t,
                             bad, n);
    }
    from[t] = s;
    to[s] = t;
    if (s == p->c.rank)
      p->to = t;
  }
  uint64_t h = shmap__hash_init();
  for (int i = 0; i < n; i++)
    h = shmap__hash_u64(h, (uint32_t)from[i]);
  p->c.call.npairs = npairs;
  p->c.call.pairs_hash = h;
  if (npairs <= SHMAP__PAIRS_LISTED)
    for (int t = 0, k = 0; t < n; t++)
      if (from[t] >= 0) {
        p->c.call.pairs[k][0] = from[t];
        p->c.call.pairs[k++][1] = t;
      }
  /* In place, the result goes back into x (shmap_ppermute's x is not
   * const); shmap_ppermute_new's result block replaces this. */
  p->c.call.dst = (void *)x->data;
  p->orank = x->rank;
  memcpy(p->oshape, x->shape, sizeof p->oshape);
  p->from = from[p->c.rank];
  p->c.from = p->from;
  p->c.to = p->to;
  if (from != local)
    free(from);
  return 0;
}

/* ---- repeated calls ----------------------------------------------------- */

/*
 * A body makes the same call over and over (a loop of psums, the steps of
 * a collective matmul), and planning it again costs a quarter of a small
 * call.  A plan depends on nothing but the context it is made with (its
 * communicator and manual axes), the kind of call, the axes' text, the
 * input's dtype, rank and shape, the collective's other arguments, and
 * the mesh.  So each device keeps its last successful plan of each kind,
 * and a call equal to it in all of those takes a copy instead of planning
 * again.  What may differ between two such calls is checked on every
 * call as before: the context (shmap__ctx_check: the body still running,
 * no combine function calling, the call numbers of nested contexts
 * brought level) and the input's data pointer; the copy takes the
 * input's data as the call's.  Not kept: plans within axis_index_groups
 * (their ranks are the caller's memory, which may change between two
 * calls with the same pointer), ppermutes of more than
 * SHMAP__PAIRS_LISTED pairs, and axes' texts too long to keep.  A call
 * that fails its plan is never kept, so every error is found and
 * reported by the full plan, word for word as before.
 */
enum { M_REDUCE, M_REDUCE_NEW, M_SCATTER, M_GATHER, M_ALL_TO_ALL, M_PPERMUTE };

/* What a call is planned from, besides its context and input. */
typedef struct memo_key {
  int kind, a1, a2, a3;
  bool has_out;
  int npairs;
  const int (*pairs)[2];
} memo_key;

typedef struct shmap__plan_memo {
  const shmap_ctx *ctx;
  const shmap__comm *comm;
  unsigned manual;
  memo_key key; /* pairs: a copy, in pairs below */
  int dtype, rank;
  bool dst_x; /* the call's dst is the input's data (in place) */
  bool empty; /* the shape has no element: data may be NULL */
  int64_t shape[SHMAP_MAX_RANK];
  char axes[48];
  int pairs[SHMAP__PAIRS_LISTED][2];
  shmap__plan plan;
} shmap__plan_memo;

/* The device's kept plan of this kind equal to this call's, or NULL.  The
 * input is one whose plan passed (dtype, rank and shape the kept plan's),
 * so shmap__block_valid holds for it when its data is there. */
static const shmap__plan_memo *memo_find(shmap_ctx *ctx, int which,
                                         const shmap_block *x,
                                         const char *axes, const memo_key *k)
{
  const shmap__plan_memo *m = ctx->rt->devs[ctx->dev].plan.memo[which];
  if (!m || m->ctx != ctx || m->comm != ctx->comm ||
      m->manual != ctx->manual || m->key.kind != k->kind ||
      m->key.a1 != k->a1 || m->key.a2 != k->a2 || m->key.a3 != k->a3 ||
      m->key.has_out != k->has_out || m->key.npairs != k->npairs || !x ||
      !axes || (int)x->dtype != m->dtype || x->rank != m->rank ||
      (!x->data && !m->empty))
    return NULL;
  for (int d = 0; d < m->rank; d++)
    if (x->shape[d] != m->shape[d])
      return NULL;
  if (strcmp(axes, m->axes) != 0)
    return NULL;
  if (k->npairs &&
      memcmp(k->pairs, m->pairs, sizeof m->pairs[0] * (size_t)k->npairs) != 0)
    return NULL;
  return m;
}

/* The kept plan itself when the call equals it, its fields of one call
 * (the input, the context, src and dst, the message) set for this one:
 * true with *rc the context's check, and *q the plan when that passed;
 * false when the call must be planned. */
static bool memo_take(shmap_ctx *ctx, int which, const shmap_block *x,
                      const char *axes, const memo_key *k, shmap__plan **q,
                      int *rc)
{
  if ((*rc = shmap__ctx_check(ctx, shmap__kind_name(k->kind))))
    return true;
  shmap__plan_memo *m = ctx->rt->devs[ctx->dev].plan.memo[which];
  if (!memo_find(ctx, which, x, axes, k))
    return false;
  shmap__plan *p = &m->plan;
  p->x = x;
  p->c.ctx = ctx;
  p->c.comm = ctx->comm;
  p->c.call.src = x->data;
  p->c.call.dst = m->dst_x ? x->data : NULL;
  p->c.op[0] = '\0';
  *q = p;
  return true;
}

/* A copy of kept plan m in p, as far as a call reads it. */
static void memo_copy(shmap__plan *p, const shmap__plan *m)
{
  /* The call up to its message (formatted on demand), its lists of
   * pairs and group ranks as far as their counts say (as call_clear and
   * shmap__call_copy treat them), then the plan's own fields; the
   * transport's part of the call is arrive's. */
  const shmap__call *mc = &m->c.call;
  memcpy(p, m, offsetof(shmap__plan, c.call.pairs));
  if (mc->npairs > 0 && mc->npairs <= SHMAP__PAIRS_LISTED)
    memcpy(p->c.call.pairs, mc->pairs, sizeof mc->pairs[0] * (size_t)mc->npairs);
  memcpy(&p->c.call.gsize, &mc->gsize,
         offsetof(shmap__call, groups) - offsetof(shmap__call, gsize));
  memcpy(&p->c.call.source, &mc->source,
         offsetof(shmap__plan, c.op) - offsetof(shmap__plan, c.call.source));
  p->c.op[0] = '\0';
  memcpy(&p->x, &m->x, sizeof *p - offsetof(shmap__plan, x));
}

/* Plan from the kept plan when the call equals it: true with *rc the
 * context's check or 0 (*p filled), false when it must be planned. */
static bool memo_try(shmap_ctx *ctx, int which, const shmap_block *x,
                     const char *axes, const memo_key *k, shmap__plan *p,
                     int *rc)
{
  shmap__plan *m = NULL;
  if (!memo_take(ctx, which, x, axes, k, &m, rc))
    return false;
  if (*rc == 0)
    memo_copy(p, m);
  return true;
}

/* Keep a plan that passed (rc 0) as the device's last of its kind. */
static int memo_keep(int rc, shmap_ctx *ctx, int which, const shmap_block *x,
                     const char *axes, const memo_key *k, const shmap__plan *p)
{
  if (rc || !axes || strlen(axes) >= sizeof(((shmap__plan_memo *)0)->axes) ||
      k->npairs > SHMAP__PAIRS_LISTED)
    return rc;
  shmap__plan_memo **slot = &ctx->rt->devs[ctx->dev].plan.memo[which];
  /* Without memory the next call plans in full again. */
  if (!*slot && !(*slot = malloc(sizeof **slot)))
    return 0;
  shmap__plan_memo *m = *slot;
  m->ctx = ctx;
  m->comm = ctx->comm;
  m->manual = ctx->manual;
  m->key = *k;
  m->key.pairs = NULL;
  if (k->npairs)
    memcpy(m->pairs, k->pairs, sizeof m->pairs[0] * (size_t)k->npairs);
  m->dtype = (int)x->dtype;
  m->rank = x->rank;
  m->dst_x = p->c.call.dst == x->data;
  m->empty = false;
  for (int d = 0; d < x->rank; d++) {
    m->shape[d] = x->shape[d];
    m->empty |= x->shape[d] == 0;
  }
  strcpy(m->axes, axes);
  m->plan = *p;
  return 0;
}

int shmap__plan_reduce_groups(shmap_ctx *ctx, shmap_block *x,
                              const char *axes, const shmap_groups *groups,
                              int kind, shmap__plan **pp)
{
  if (groups)
    return reduce_checked(ctx, x, axes, groups, kind, *pp);
  memo_key k = {.kind = kind};
  int rc;
  /* The kept plan serves the call in place: no copy of it to write and
   * read again (at a thousand devices, nine of the 76 lines a device's
   * psum misses in the last-level cache, and 58 instructions).  An
   * in-place reduction changes none of its fields for good. */
  if (memo_take(ctx, M_REDUCE, x, axes, &k, pp, &rc))
    return rc;
  return memo_keep(reduce_checked(ctx, x, axes, NULL, kind, *pp), ctx,
                   M_REDUCE, x, axes, &k, *pp);
}

int shmap__plan_reduce_new_groups(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes,
                                  const shmap_groups *groups, int kind,
                                  bool has_out, shmap__plan *p)
{
  if (groups)
    return reduce_new_checked(ctx, x, axes, groups, kind, has_out, p);
  memo_key k = {.kind = kind, .has_out = has_out};
  int rc;
  if (memo_try(ctx, M_REDUCE_NEW, x, axes, &k, p, &rc))
    return rc;
  return memo_keep(reduce_new_checked(ctx, x, axes, NULL, kind, has_out, p),
                   ctx, M_REDUCE_NEW, x, axes, &k, p);
}

int shmap__plan_psum_scatter_groups(shmap_ctx *ctx, const shmap_block *x,
                                    const char *axes,
                                    const shmap_groups *groups,
                                    int scatter_dimension, int tiled,
                                    bool has_out, shmap__plan *p)
{
  if (groups)
    return psum_scatter_checked(ctx, x, axes, groups, scatter_dimension,
                                tiled, has_out, p);
  memo_key k = {.kind = SHMAP__PSUM_SCATTER, .a1 = scatter_dimension,
                .a2 = tiled, .has_out = has_out};
  int rc;
  if (memo_try(ctx, M_SCATTER, x, axes, &k, p, &rc))
    return rc;
  return memo_keep(psum_scatter_checked(ctx, x, axes, NULL, scatter_dimension,
                                        tiled, has_out, p),
                   ctx, M_SCATTER, x, axes, &k, p);
}

int shmap__plan_all_gather_groups(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, const shmap_groups *groups,
                                  int axis, int tiled, bool has_out,
                                  shmap__plan *p)
{
  if (groups)
    return all_gather_checked(ctx, x, axes, groups, axis, tiled, has_out, p);
  memo_key k = {.kind = SHMAP__ALL_GATHER, .a1 = axis, .a2 = tiled,
                .has_out = has_out};
  int rc;
  if (memo_try(ctx, M_GATHER, x, axes, &k, p, &rc))
    return rc;
  return memo_keep(
      all_gather_checked(ctx, x, axes, NULL, axis, tiled, has_out, p), ctx,
      M_GATHER, x, axes, &k, p);
}

int shmap__plan_all_to_all_groups(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, const shmap_groups *groups,
                                  int split_axis, int concat_axis, int tiled,
                                  bool has_out, shmap__plan *p)
{
  if (groups)
    return all_to_all_checked(ctx, x, axes, groups, split_axis, concat_axis,
                              tiled, has_out, p);
  memo_key k = {.kind = SHMAP__ALL_TO_ALL, .a1 = split_axis,
                .a2 = concat_axis, .a3 = tiled, .has_out = has_out};
  int rc;
  if (memo_try(ctx, M_ALL_TO_ALL, x, axes, &k, p, &rc))
    return rc;
  return memo_keep(all_to_all_checked(ctx, x, axes, NULL, split_axis,
                                      concat_axis, tiled, has_out, p),
                   ctx, M_ALL_TO_ALL, x, axes, &k, p);
}

int shmap__plan_ppermute(shmap_ctx *ctx, const shmap_block *x,
                         const char *axes, int npairs, const int pairs[][2],
                         shmap__plan *p)
{
  if (npairs < 0 || npairs > SHMAP__PAIRS_LISTED || (npairs && !pairs))
    return ppermute_checked(ctx, x, axes, npairs, pairs, p);
  memo_key k = {.kind = SHMAP__PPERMUTE, .npairs = npairs, .pairs = pairs};
  int rc;
  if (memo_try(ctx, M_PPERMUTE, x, axes, &k, p, &rc))
    return rc;
  return memo_keep(ppermute_checked(ctx, x, axes, npairs, pairs, p), ctx,
                   M_PPERMUTE, x, axes, &k, p);
}
