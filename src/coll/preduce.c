/* SPDX-License-Identifier: MIT */
/*
 * preduce.c - user-defined reductions (shmap_preduce): a psum whose
 * elementwise combine is the caller's, like MPI_Op_create.
 *
 * The combine is a function of this address space, so it cannot run where
 * a transport folds (another process, under MPI): every member stages its
 * group's blocks and folds them itself, in rank order, with the staged
 * reduction of groups.c.  Members compare the operation by its name and
 * width (function addresses differ between processes).
 */
#include "coll/groups.h"
#include "hash.h"

#include <stdlib.h>
#include <string.h>

/* acc = term 0, then acc = acc (+) term r for r = 1, 2, ...  While the
 * combine runs, the device's plan.combine names the operation: a library
 * call from it fails (shmap__ctx_check) instead of waiting for peers that
 * wait for this device's fold. */
static void fold_user(const shmap__stage_fold *sf, void *dst,
                      const void *const terms[], int nterms, size_t count)
{
  const shmap_reduce_op *op = sf->arg;
  shmap_ctx *ctx = sf->p->c.ctx;
  struct shmap__dev_plan *dp = &ctx->rt->devs[ctx->dev].plan;
  size_t es = sf->out_esize;
  shmap__copy(dst, terms[0], count * es);
  int64_t records = (int64_t)(count / (size_t)sf->width);
  for (int r = 1; r < nterms && !dp->combine_called; r++) {
    dp->combine = op->name;
    shmap__combining++;
    op->combine(dst, terms[r], records, op->arg);
    shmap__combining--;
    dp->combine = NULL;
  }
}

/* The verdict on the combine's calls: SHMAP_ESTATE if it called the
 * library (the map failed then, message set), else rc. */
static int combine_verdict(shmap_ctx *ctx, int rc)
{
  struct shmap__dev_plan *dp = &ctx->rt->devs[ctx->dev].plan;
  if (!dp->combine_called)
    return rc;
  dp->combine_called = false;
  return SHMAP_ESTATE;
}

static int plan_preduce(shmap_ctx *ctx, const shmap_block *x,
                        const char *axes, const shmap_reduce_op *op,
                        shmap__plan *p, shmap__stage_fold *sf)
{
  int rc = shmap__plan_prepare(ctx, SHMAP__PREDUCE, x, axes, NULL, p);
  if (rc)
    return rc;
  shmap__coll *c = &p->c;
  const char *name = shmap__coll_opname(c);
  if (!op || !op->combine || !op->name || !op->name[0])
    return shmap__dev_fail(ctx, name, SHMAP_EINVAL,
                           !op             ? "op is NULL"
                           : !op->combine ? "op->combine is NULL"
                                           : "op->name is NULL or empty");
  int width = op->width ? op->width : 1;
  if (width < 0)
    return shmap__dev_fail(ctx, name, SHMAP_EINVAL,
                           "op->width is negative (%d)", op->width);
  int64_t numel = shmap_block_numel(x);
  if (numel % width != 0)
    return shmap__dev_fail(ctx, name, SHMAP_ESHAPE,
                           "the block's %lld elements are not a whole number "
                           "of records of width %d",
                           (long long)numel, width);
  c->call.op_hash = shmap__hash_str(shmap__hash_init(), op->name);
  c->call.p1 = width;
  /* The name for messages, without its end when too long (no NUL then). */
  size_t len = strlen(op->name);
  memcpy(c->call.op_name, op->name,
         len < sizeof c->call.op_name ? len : sizeof c->call.op_name);
  p->orank = x->rank;
  memcpy(p->oshape, x->shape, sizeof p->oshape);
  /* The staged fold reads the group by its ranks: the whole group here. */
  p->gmem = NULL;
  sf->fold = fold_user;
  sf->p = p;
  sf->width = width;
  sf->out_esize = c->esize;
  sf->arg = op;
  return 0;
}

/* The staged fold lists its group's ranks: 0 .. n-1 for the whole group. */
static int with_ranks(shmap__plan *p, const shmap__stage_fold *sf,
                      shmap_block *x, void *out)
{
  int n = p->c.n;
  int *ranks = shmap__malloc(sizeof(int) * (size_t)n);
  if (!ranks)
    return shmap__dev_fail(p->c.ctx, shmap__coll_opname(&p->c), SHMAP_ENOMEM,
                           "out of memory");
  for (int r = 0; r < n; r++)
    ranks[r] = r;
  p->gmem = ranks;
  int rc = x ? shmap__staged_inplace(p, sf, x)
             : shmap__staged_allreduce(p, sf, out);
  p->gmem = NULL;
  free(ranks);
  return rc;
}

SHMAP_EXTERN int shmap_preduce(shmap_ctx *ctx, shmap_block *x,
                               const char *axes, const shmap_reduce_op *op)
{
  shmap__plan p;
  shmap__stage_fold sf;
  int rc = plan_preduce(ctx, x, axes, op, &p, &sf);
  if (rc)
    return rc;
  p.c.call.dst = x->data;
  return combine_verdict(ctx, with_ranks(&p, &sf, x, NULL));
}

SHMAP_EXTERN int shmap_preduce_new(shmap_ctx *ctx, const shmap_block *x,
                                   const char *axes,
                                   const shmap_reduce_op *op,
                                   shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  shmap__stage_fold sf;
  int rc = plan_preduce(ctx, x, axes, op, &p, &sf);
  if (rc)
    return rc;
  if (!out)
    return shmap__plan_out_null(&p);
  shmap_block *res = shmap__plan_result(&p);
  if (!res)
    return ctx->err;
  rc = combine_verdict(ctx, with_ranks(&p, &sf, NULL, res->data));
  if (rc) {
    shmap__arena_free(ctx, shmap__arena_find(ctx, res));
    return rc;
  }
  *out = res;
  return 0;
}
