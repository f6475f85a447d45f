/* SPDX-License-Identifier: MIT */
/* map.c - one map call: validate the specs, hand each device its input
 * blocks, run the bodies, then check and assemble the outputs. */
#include "map/map.h"
#include "hash.h"

#include "coll/async.h"
#include "coll/plan.h"
#include "dtype.h"
#include "proc/proc.h"
#include "sched/debug.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors on a device -------------------------------------------------- */

int shmap__dev_fail(shmap_ctx *ctx, const char *op, int code, const char *fmt,
                    ...)
{
  char me[400], text[SHMAP__MSG_MAX];
  shmap__ctx_devname(ctx, me, sizeof me);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  shmap__err(code, "%s on %s: %s", op, me, text);
  if (!ctx->err)
    ctx->err = code;
  return shmap__fail(ctx->rt, ctx->dev, code, shmap__errbuf());
}

void shmap__ctx_devname(const shmap_ctx *ctx, char *buf, size_t n)
{
  const shmap_mesh *mesh = ctx->rt->mesh;
  shmap__mesh_devname(mesh, ctx->dev, buf, n);
  if (!ctx->depth)
    return;
  char axes[320];
  shmap__mask_format(mesh, ctx->manual, axes, sizeof axes);
  shmap__cat(buf, n, " in a map nested over %s", axes);
  for (const shmap_ctx *o = ctx->outer; o; o = o->outer) {
    shmap__mask_format(mesh, o->manual, axes, sizeof axes);
    shmap__cat(buf, n, " inside a map over %s", axes);
  }
}

int shmap__canceled(shmap_ctx *ctx, const char *op)
{
  shmap__runtime *rt = ctx->rt;
  char me[96];
  shmap__mesh_devname(rt->mesh, ctx->dev, me, sizeof me);
  int code = rt->fail_code == SHMAP_EMISMATCH ? SHMAP_EMISMATCH
                                               : SHMAP_ECANCELED;
  if (!ctx->err)
    ctx->err = code;
  return shmap__err(code, "%s on %s: canceled because another device failed: %s",
                    op, me, rt->fail_msg);
}

/*
 * A body may use the context of the map it is nested in (for collectives
 * over the outer axes) as well as its own.  Collective calls are numbered
 * per device whichever context makes them, so the numbers of the chain of
 * contexts are brought level before each use: the largest is the device's
 * count, and every call numbers itself from the context it is made with.
 */
/* A library call from a shmap_preduce combine function: the device's
 * peers wait for its fold, so the call fails at once. */
static int in_combine(shmap_ctx *cur, const char *op)
{
  struct shmap__dev_plan *dp = &cur->rt->devs[cur->dev].plan;
  const char *name = dp->combine;
  dp->combine_called = true;
  return shmap__dev_fail(cur, op, SHMAP_ESTATE,
                         "called from the combine function of the "
                         "shmap_preduce operation '%.100s', which may not "
                         "call the library",
                         name);
}

int shmap__ctx_check(shmap_ctx *ctx, const char *op)
{
  shmap_ctx *cur = shmap__current();
  if (cur && cur->rt->devs[cur->dev].plan.combine)
    return in_combine(cur, op);
  if (!ctx)
    return shmap__err(SHMAP_EINVAL, "%s: ctx is NULL", op);
  if (ctx == cur && !cur->outer)
    return 0;
  bool found = false;
  uint32_t seq = 0;
  for (shmap_ctx *c = cur; c; c = c->outer) {
    found = found || c == ctx;
    if (c->seq > seq)
      seq = c->seq;
  }
  if (!found)
    return shmap__err(SHMAP_ESTATE,
                      "%s: ctx is not the context of a body running on this "
                      "thread (call it from inside the body it was given to)",
                      op);
  ctx->seq = seq;
  return 0;
}

int shmap__ctx_axes(shmap_ctx *ctx, const char *op, const char *text,
                    const int axes[], int naxes)
{
  if (ctx->manual == shmap__mesh_all(ctx->rt->mesh))
    return 0;
  int rc = shmap__axes_manual(ctx->rt->mesh, ctx->manual, op, text, axes,
                              naxes);
  return rc ? shmap__dev_fail(ctx, op, rc, "%s", shmap__errbuf()) : 0;
}

/* ---- the body's side ----------------------------------------------------- */

SHMAP_EXTERN int shmap_ctx_device(const shmap_ctx *ctx)
{
  int rc = shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_device");
  return rc ? rc : ctx->dev;
}

SHMAP_EXTERN const shmap_mesh *shmap_ctx_mesh(const shmap_ctx *ctx)
{
  if (shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_mesh"))
    return NULL;
  return ctx->rt->mesh;
}

SHMAP_EXTERN const shmap_block *shmap_in(shmap_ctx *ctx, int k)
{
  if (shmap__ctx_check(ctx, "shmap_in"))
    return NULL;
  if (k < 0 || k >= ctx->job->nin) {
    shmap__dev_fail(ctx, "shmap_in", SHMAP_EINVAL,
                    "input %d is out of range: the map has %d input%s", k,
                    ctx->job->nin, ctx->job->nin == 1 ? "" : "s");
    return NULL;
  }
  return ctx->in[k];
}

static int out_check(shmap_ctx *ctx, const char *op, int k)
{
  int rc = shmap__ctx_check(ctx, op);
  if (rc)
    return rc;
  if (k < 0 || k >= ctx->job->nout)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL,
                           "output %d is out of range: the map has %d output%s",
                           k, ctx->job->nout, ctx->job->nout == 1 ? "" : "s");
  if (ctx->out[k])
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL,
                           "output %d is already declared", k);
  return 0;
}

int shmap__block_check(shmap_ctx *ctx, const char *op, const char *name,
                       const shmap_block *b)
{
  if (!b)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL, "%s block is NULL", name);
  if (shmap_dtype_size(b->dtype) == 0)
    return shmap__dev_fail(ctx, op, SHMAP_EDTYPE, "%s block has invalid dtype %d",
                           name, (int)b->dtype);
  if (b->rank < 0 || b->rank > SHMAP_MAX_RANK)
    return shmap__dev_fail(ctx, op, SHMAP_ESHAPE,
                           "%s block has rank %d, outside [0, %d]", name,
                           b->rank, SHMAP_MAX_RANK);
  char what[64];
  snprintf(what, sizeof what, "%s block", name);
  if (shmap__shape_size(what, b->rank, b->shape, shmap_dtype_size(b->dtype),
                        NULL, NULL))
    return shmap__dev_fail(ctx, op, SHMAP_ESHAPE, "%s", shmap__errbuf());
  if (!b->data && shmap__numel(b->rank, b->shape) > 0)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL, "%s block has no data", name);
  return 0;
}

bool shmap__block_valid(const shmap_block *b)
{
  if (!b || shmap_dtype_size(b->dtype) == 0 || b->rank < 0 ||
      b->rank > SHMAP_MAX_RANK)
    return false;
  /* The size check without its message (cheap: no formatting). */
  int64_t prod = (int64_t)shmap_dtype_size(b->dtype);
  bool zero = false;
  for (int d = 0; d < b->rank; d++) {
    if (b->shape[d] < 0)
      return false;
    if (b->shape[d] == 0)
      zero = true;
    else if (!shmap__mul_size(prod, b->shape[d], &prod))
      return false;
  }
  return b->data || zero;
}


static shmap_block *new_block(shmap_ctx *ctx, const char *op, shmap_dtype dtype,
                              int rank, const int64_t shape[], int kind)
{
  int rc = shmap__check_shape(op, dtype, rank, shape);
  if (rc) {
    shmap__dev_fail(ctx, op, rc, "%s", shmap__errbuf());
    return NULL;
  }
  shmap__chunk *c = shmap__arena_alloc(ctx, dtype, rank, shape, kind, true);
  if (!c) {
    shmap__dev_fail(ctx, op, SHMAP_ENOMEM, "%s", shmap__errbuf());
    return NULL;
  }
  return &c->block;
}

SHMAP_EXTERN shmap_block *shmap_out(shmap_ctx *ctx, int k, shmap_dtype dtype,
                                    int rank, const int64_t shape[])
{
  if (out_check(ctx, "shmap_out", k))
    return NULL;
  shmap_block *b = new_block(ctx, "shmap_out", dtype, rank, shape,
                             SHMAP__CHUNK_OUT);
  if (b)
    ctx->out[k] = b;
  return b;
}

SHMAP_EXTERN shmap_block *shmap_out_copy(shmap_ctx *ctx, int k,
                                         const shmap_block *src)
{
  if (out_check(ctx, "shmap_out_copy", k) ||
      shmap__block_check(ctx, "shmap_out_copy", "source", src))
    return NULL;
  shmap_block *b = shmap_out(ctx, k, src->dtype, src->rank, src->shape);
  if (b)
    memcpy(b->data, src->data, shmap_block_nbytes(src));
  return b;
}

SHMAP_EXTERN int shmap_out_set(shmap_ctx *ctx, int k, shmap_block *block)
{
  int rc = out_check(ctx, "shmap_out_set", k);
  if (rc)
    return rc;
  if ((rc = shmap__block_check(ctx, "shmap_out_set", "the", block)))
    return rc;
  shmap__chunk *c = shmap__arena_find(ctx, block);
  if (c && c->kind == SHMAP__CHUNK_SCRATCH) {
    c->kind = SHMAP__CHUNK_OUT; /* taken over, no copy */
    ctx->out[k] = &c->block;
    return 0;
  }
  return shmap_out_copy(ctx, k, block) ? 0 : ctx->err;
}

SHMAP_EXTERN shmap_block *shmap_block_alloc(shmap_ctx *ctx, shmap_dtype dtype,
                                            int rank, const int64_t shape[])
{
  if (shmap__ctx_check(ctx, "shmap_block_alloc"))
    return NULL;
  return new_block(ctx, "shmap_block_alloc", dtype, rank, shape,
                   SHMAP__CHUNK_SCRATCH);
}

SHMAP_EXTERN int shmap_block_free(shmap_ctx *ctx, shmap_block *block)
{
  int rc = shmap__ctx_check(ctx, "shmap_block_free");
  if (rc)
    return rc;
  if (!block)
    return 0;
  shmap__chunk *c = shmap__arena_find(ctx, block);
  if (!c)
    return shmap__dev_fail(ctx, "shmap_block_free", SHMAP_EINVAL,
                           "the block was not allocated by this device "
                           "(shmap_block_alloc or a collective)");
  if (c->kind != SHMAP__CHUNK_SCRATCH)
    return shmap__dev_fail(ctx, "shmap_block_free", SHMAP_EINVAL,
                           "the block is an %s block, which the map owns",
                           c->kind == SHMAP__CHUNK_IN ? "input" : "output");
  if ((rc = shmap__async_block_free(ctx, block, c->block.data, c->cap)))
    return rc;
  shmap__arena_free(ctx, c);
  return 0;
}

SHMAP_EXTERN int shmap_fail(shmap_ctx *ctx, const char *fmt, ...)
{
  int rc = shmap__ctx_check(ctx, "shmap_fail");
  if (rc)
    return rc;
  char me[400], text[SHMAP__MSG_MAX];
  shmap__ctx_devname(ctx, me, sizeof me);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  shmap__err(SHMAP_EBODY, "%s failed: %s", me, text);
  if (!ctx->err)
    ctx->err = SHMAP_EBODY;
  return shmap__fail(ctx->rt, ctx->dev, SHMAP_EBODY, shmap__errbuf());
}

/* ---- replicas ------------------------------------------------------------ *
 *
 * A map over some axes runs its body once per coordinate of its manual
 * axes, as JAX's shard_map with axis_names does: on the device whose
 * coordinates on the free axes are 0 (the slice's host).  The other
 * devices of the slice are its replicas: they run no body, and hold copies
 * of the host's outputs when it returns, so the outputs are laid out
 * replicated along the free axes.  Collectives over manual axes therefore
 * meet hosts only (a group over manual axes keeps the free coordinates).
 *
 * A replica waits for one of two things: its host's body returning, or a
 * nested map that a body instance of its slice starts over free axes and
 * that this device is a member of.  The instance posts an offer into each
 * member's context (shmap__offer), runs its own part, and waits until
 * every member has left the offer.  A member runs the inner body with a
 * chain of contexts that mirrors the poster's (its own device and
 * coordinates at every level), so its collectives over outer axes
 * through shmap_ctx_outer() form the same groups as the poster's do.  Its
 * collective calls are numbered from the poster's count, since the
 * calls it did not make were made by its host on its behalf.
 */

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
#define OFFER_GONE ((shmap__offer *)(uintptr_t)1)

static int mask_member(const shmap_mesh *mesh, unsigned mask, int dev, int r);
static int nested_run(shmap_ctx *octx, const shmap__offer *of,
                      shmap_block **res);

/* The number of devices along the axes in `mask`. */
static int mask_count(const shmap_mesh *mesh, unsigned mask)
{
  int n = 1;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      n *= mesh->sizes[a];
  return n;
}

/* The context a chain of nested contexts starts from (depth 0). */
static shmap_ctx *root_ctx(shmap_ctx *ctx)
{
  while (ctx->outer)
    ctx = ctx->outer;
  return ctx;
}

/* A host's body returned (or never ran): its replicas stop waiting. */
static void release_replicas(shmap__job *job, int dev)
{
  shmap__runtime *rt = job->ctx[dev].rt;
  const shmap_mesh *mesh = job->mesh;
  unsigned free_axes = shmap__mesh_all(mesh) & ~job->manual;
  atomic_store(&job->ctx[dev].body_done, 1);
  int n = mask_count(mesh, free_axes);
  for (int r = 1; r < n; r++)
    shmap__dev_wake(&rt->devs[mask_member(mesh, free_axes, dev, r)]);
}

static void offer_leave(shmap__runtime *rt, shmap__offer *of)
{
  /* The offer lives on the poster's stack until the count reaches 0. */
  shmap__dev *poster = &rt->devs[of->poster];
  atomic_fetch_sub(&of->left, 1);
  shmap__dev_wake(poster);
}

static bool offer_done(void *arg)
{
  return atomic_load(&((shmap__offer *)arg)->left) == 0;
}

/* Run the part of nested map `of` that falls to replica `top`. */
static void nested_join(shmap_ctx *top, shmap__offer *of)
{
  shmap__runtime *rt = top->rt;
  shmap__dev *self = &rt->devs[top->dev];
  int depth = of->octx->depth;
  const shmap_ctx *hchain[SHMAP_MAX_AXES + 1];
  for (const shmap_ctx *c = of->octx; c; c = c->outer)
    hchain[c->depth] = c;
  /* Level 0 is the replica's own context; it reads its host's inputs. */
  const shmap_ctx *host = &top->job->ctx[top->host];
  for (int k = 0; k < top->job->nin; k++)
    top->in[k] = host->in[k];
  uint32_t seq = of->seq > top->seq ? of->seq : top->seq;
  shmap_ctx shadows[SHMAP_MAX_AXES];
  shmap_block *slots[SHMAP_MAX_AXES][8], **heap[SHMAP_MAX_AXES] = {NULL};
  shmap_ctx *prev = top;
  int rc = 0;
  for (int l = 1; l <= depth && l <= SHMAP_MAX_AXES; l++) {
    const shmap_ctx *h = hchain[l];
    shmap_ctx *sh = &shadows[l - 1];
    memset(sh, 0, sizeof *sh);
    sh->rt = rt;
    sh->job = h->job;
    sh->comm = h->comm;
    sh->dev = top->dev;
    memcpy(sh->coords, top->coords, sizeof sh->coords);
    sh->in = h->in;
    /* Outputs the inner body might declare on this level stay its own. */
    int nout = h->job->nout;
    sh->out = slots[l - 1];
    if (nout > 8 && !(sh->out = heap[l - 1] = shmap__calloc((size_t)nout,
                                                             sizeof *sh->out)))
      rc = SHMAP_ENOMEM;
    else
      memset(sh->out, 0, (size_t)(nout < 8 ? 8 : nout) * sizeof *sh->out);
    sh->manual = h->manual;
    sh->outer = prev;
    sh->depth = l;
    sh->host = top->dev;
    prev = sh;
  }
  prev->seq = seq;
  shmap_block *res[64], **resp = res;
  if (of->nout > 64 && !(resp = shmap__calloc((size_t)of->nout, sizeof *resp)))
    rc = SHMAP_ENOMEM;
  if (rc)
    shmap__dev_fail(top, "shmap_map_nested", rc, "out of memory");
  else {
    atomic_store_explicit(&self->dbg.nest, of->nest, memory_order_relaxed);
    for (int k = 0; k < of->nout; k++)
      resp[k] = NULL;
    rc = nested_run(prev, of, resp);
    /* The assembled outputs are the host's business. */
    for (int k = 0; !rc && k < of->nout; k++)
      shmap__arena_free(prev, shmap__arena_find(prev, resp[k]));
  }
  if (resp != res)
    free(resp);
  for (shmap_ctx *c = prev; c != top; c = c->outer) {
    while (c->arena)
      shmap__arena_free(c, c->arena);
    if (c->seq > top->seq)
      top->seq = c->seq;
    top->shared += c->shared;
    top->built += c->built;
    top->moved.local += c->moved.local;
    top->moved.moved += c->moved.moved;
    free(heap[c->depth - 1]);
  }
  offer_leave(rt, of);
}

static bool replica_wake(void *arg)
{
  shmap_ctx *ctx = arg;
  return atomic_load(&ctx->offer) != NULL ||
         atomic_load(&ctx->job->ctx[ctx->host].body_done);
}

/* A replica's part of a map: join nested maps of its slice until its host
 * returns, then copy the host's outputs. */
static void run_replica(shmap__job *job, int dev)
{
  shmap_ctx *ctx = &job->ctx[dev];
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[dev];
  const shmap_ctx *host = &job->ctx[ctx->host];
  for (;;) {
    self->ctx = ctx;
    shmap__set_current(ctx);
    atomic_store_explicit(&self->dbg.nest, (uint64_t)1 << 56 | job->manual,
                          memory_order_relaxed);
    shmap__set_state(self, SHMAP__ST_REPLICA, (uint64_t)ctx->host,
                     shmap__now());
    if (!shmap__dev_wait(rt, self, replica_wake, ctx, &rt->abort))
      break;
    shmap__offer *of = atomic_exchange(&ctx->offer, NULL);
    if (!of)
      break; /* the host returned */
    nested_join(ctx, of);
  }
  shmap__offer *of = atomic_exchange(&ctx->offer, OFFER_GONE);
  if (of && of != OFFER_GONE)
    offer_leave(rt, of);
  if (!atomic_load(&rt->abort) && atomic_load(&host->body_done)) {
    for (int k = 0; k < job->nout; k++) {
      const shmap_block *b = host->out[k];
      if (ctx->out[k])
        shmap__arena_free(ctx, shmap__arena_find(ctx, ctx->out[k]));
      ctx->out[k] = NULL;
      if (!b)
        continue;
      shmap__chunk *c = shmap__arena_alloc(ctx, b->dtype, b->rank, b->shape,
                                           SHMAP__CHUNK_OUT, false);
      if (!c) {
        shmap__dev_fail(ctx, "output", SHMAP_ENOMEM, "%s", shmap__errbuf());
        break;
      }
      memcpy(c->block.data, b->data, shmap_block_nbytes(b));
      ctx->out[k] = &c->block;
    }
  }
  shmap__set_state(self, SHMAP__ST_DONE, 0, shmap__now());
  shmap__set_current(NULL);
  self->ctx = NULL;
  atomic_store_explicit(&self->dbg.nest, 0, memory_order_relaxed);
  shmap__comm_finish(ctx->comm, dev);
}

/* ---- one device's part of a map ------------------------------------------ */

static void run_device(shmap__job *job, int dev)
{
  shmap_ctx *ctx = &job->ctx[dev];
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[dev];
  /* Under MPI another process runs this device: nothing to do here. */
  if (!shmap__dev_local(rt->mesh, dev))
    return;
  if (ctx->host != dev) {
    run_replica(job, dev);
    return;
  }
  self->ctx = ctx;
  atomic_store_explicit(&self->dbg.nest, (uint64_t)1 << 56 | job->manual,
                        memory_order_relaxed);
  shmap__set_current(ctx);
  /* One clock read per state change that takes time: the watchdog and the
   * trace show when each began (a read is tens of nanoseconds here, and a
   * device of an empty map made five). */
  uint64_t t = shmap__set_state(self, SHMAP__ST_INPUTS, 0, shmap__now());
  bool ok = true;
  for (int k = 0; k < job->nin && ok; k++) {
    const shmap__in_info *ii = &job->ins[k];
    shmap_array *a = ii->view ? ii->view : job->in[k];
    if (ii->borrow) {
      ctx->in[k] = &a->blocks[dev];
      ctx->shared++;
      continue;
    }
    shmap__chunk *c = shmap__arena_alloc(ctx, a->dtype, a->rank, ii->bshape,
                                         SHMAP__CHUNK_IN, false);
    if (!c) {
      shmap__dev_fail(ctx, "input", SHMAP_ENOMEM, "%s", shmap__errbuf());
      ok = false;
      break;
    }
    shmap__gather_block(a, job->mesh, &ii->spec, ii->bshape, dev,
                        c->block.data, &ctx->moved);
    ctx->built++;
    ctx->in[k] = &c->block;
  }
  if (ok && !atomic_load(&rt->abort)) {
    uint64_t t0 = shmap__set_state(self, SHMAP__ST_BODY, 0,
                                   ctx->built ? shmap__now() : t);
    int rc = job->body(ctx, job->arg);
    uint64_t t1 = t = shmap__set_state(self, SHMAP__ST_DONE, 0, shmap__now());
    if (shmap__tracing())
      shmap__trace_body(self, t0, t1, ctx->seq, ctx->job_name);
    if (rc != 0 && !ctx->err) {
      char me[96], msg[SHMAP__MSG_MAX];
      shmap__mesh_devname(job->mesh, dev, me, sizeof me);
      /* No library call failed on this device, so the number is the
       * body's own (-1 is not SHMAP_EINVAL here). */
      snprintf(msg, sizeof msg, "%s: body returned %d", me, rc);
      ctx->err = SHMAP_EBODY;
      shmap__fail(rt, dev, SHMAP_EBODY, msg);
    }
    /* Requests the body left open fail the map (coll/async.c). */
    shmap__async_body_end(ctx);
  } else {
    t = shmap__now();
  }
  shmap__set_state(self, SHMAP__ST_DONE, 0, t);
  shmap__set_current(NULL);
  self->ctx = NULL;
  atomic_store_explicit(&self->dbg.nest, 0, memory_order_relaxed);
  if (job->replicas)
    release_replicas(job, dev);
  /* Peers waiting for this device in a collective must learn that it
   * left, in this process or another. */
  shmap__comm_finish(ctx->comm, dev);
}

/* ---- the caller's side ----------------------------------------------------- */

static void format_index(int rank, const int64_t shape[], int64_t flat,
                         char *buf, size_t n)
{
  int64_t idx[SHMAP_MAX_RANK];
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  snprintf(buf, n, "[");
  for (int d = 0; d < rank; d++)
    shmap__cat(buf, n, "%s%lld", d ? "," : "", (long long)idx[d]);
  shmap__cat(buf, n, "]");
}

/* An out spec no longer than output k's rank. */
static int check_spec_rank(int k, const char *text, const shmap__spec *spec,
                           const shmap_block *b0)
{
  if (spec->ndims <= b0->rank)
    return 0;
  char s0[128];
  shmap__shape_format(b0->dtype, b0->rank, b0->shape, s0, sizeof s0);
  return shmap__err(SHMAP_ESHAPE,
                    "out_specs[%d] \"%.200s\" has length %d but output %d has "
                    "rank %d (blocks are %s)",
                    k, text, spec->ndims, k, b0->rank, s0);
}

/* Outputs: every device declared the same count, dtypes and shapes. */
static int check_outputs(shmap__job *job, const char *const out_specs[],
                         const shmap__spec *ospec)
{
  shmap_mesh *mesh = job->mesh;
  for (int k = 0; k < job->nout; k++) {
    int first = -1;
    for (int d = 0; d < mesh->ndev && first < 0; d++)
      if (job->ctx[d].out[k] && shmap__dev_local(mesh, d))
        first = d;
    if (first < 0)
      return shmap__err(SHMAP_EINVAL,
                        "output %d was not declared by any device (the map "
                        "has %d outputs; declare each with shmap_out)",
                        k, job->nout);
    const shmap_block *b0 = job->ctx[first].out[k];
    char n0[96], s0[128];
    shmap__mesh_devname(mesh, first, n0, sizeof n0);
    shmap__shape_format(b0->dtype, b0->rank, b0->shape, s0, sizeof s0);
    for (int d = 0; d < mesh->ndev; d++) {
      if (!shmap__dev_local(mesh, d))
        continue;
      const shmap_block *b = job->ctx[d].out[k];
      char nd[96];
      shmap__mesh_devname(mesh, d, nd, sizeof nd);
      if (!b)
        return shmap__err(SHMAP_EMISMATCH,
                          "output %d: %s declared %s but %s declared no "
                          "output %d",
                          k, n0, s0, nd, k);
      if (b->dtype != b0->dtype || b->rank != b0->rank ||
          memcmp(b->shape, b0->shape, (size_t)b->rank * sizeof b->shape[0])) {
        char sd[128];
        shmap__shape_format(b->dtype, b->rank, b->shape, sd, sizeof sd);
        return shmap__err(SHMAP_EMISMATCH,
                          "output %d: %s returned %s but %s returned %s", k,
                          n0, s0, nd, sd);
      }
    }
    int rc;
    if ((rc = check_spec_rank(k, out_specs[k], &ospec[k], b0)))
      return rc;
  }
  return 0;
}

/* Devices along free axes ran the same body on the same blocks; only the
 * manual axes the spec leaves out are promised equal by the body. */
static unsigned rep_mask(const shmap__job *job, const shmap__spec *spec)
{
  return shmap__spec_axes_mask(spec) |
         (shmap__mesh_all(job->mesh) & ~job->manual);
}

/* repdata[d]: the block of d's representative as this process has it
 * (under MPI possibly a copy received from another process), for every
 * device d of this process.  *bad: the first device whose block differs. */
static int check_replicated(shmap__job *job, int k, const char *spec_text,
                            const shmap__spec *spec,
                            const void *const repdata[], int *bad)
{
  shmap_mesh *mesh = job->mesh;
  unsigned mask = rep_mask(job, spec);
  for (int d = 0; d < mesh->ndev; d++) {
    int rep = shmap__representative(mesh, mask, d);
    if (rep == d || !shmap__dev_local(mesh, d))
      continue;
    const shmap_block *b = job->ctx[d].out[k];
    const char *ad = repdata[d];
    size_t es = shmap_dtype_size(b->dtype);
    size_t bytes = shmap_block_nbytes(b);
    if (bytes == 0 || memcmp(ad, b->data, bytes) == 0)
      continue;
    *bad = d;
    int64_t i = 0;
    while (memcmp(ad + i * (int64_t)es, (const char *)b->data + i * (int64_t)es,
                  es) == 0)
      i++;
    const shmap_block *a = b; /* same dtype and shape as the copy */
    char na[96], nb[96], va[64], vb[64], idx[96], axes[160] = "";
    shmap__mesh_devname(mesh, rep, na, sizeof na);
    shmap__mesh_devname(mesh, d, nb, sizeof nb);
    shmap__dtype_format(a->dtype, ad + i * (int64_t)es, va, sizeof va);
    shmap__dtype_format(a->dtype, (const char *)b->data + i * (int64_t)es, vb, sizeof vb);
    format_index(a->rank, a->shape, i, idx, sizeof idx);
    int n = 0;
    for (int ax = 0; ax < mesh->naxes; ax++)
      if (!(mask & (1u << ax)))
        shmap__cat(axes, sizeof axes, "%s'%s'", n++ ? ", " : "", mesh->names[ax]);
    return shmap__err(SHMAP_EREPLICATION,
                      "output %d with out_specs[%d] \"%.200s\" is not "
                      "replicated along %s %s, which the spec leaves out: %s "
                      "and %s differ at block element %s: %s vs %s (name the "
                      "axis in the out spec, or pass SHMAP_NO_CHECK_REP to use "
                      "the block at coordinate 0)",
                      k, k, spec_text, n > 1 ? "axes" : "axis", axes, na, nb,
                      idx, va, vb);
  }
  return 0;
}

/* Output k becomes a sharded array that keeps each device's block. */
static int adopt_output(shmap__job *job, int k, const shmap__spec *spec,
                        const shmap_block *b0, const void *const repdata[],
                        shmap_array **res)
{
  shmap_mesh *mesh = job->mesh;
  int64_t gshape[SHMAP_MAX_RANK];
  char what[32];
  snprintf(what, sizeof what, "output %d", k);
  int rc = shmap__global_shape(what, mesh, spec, b0->rank, b0->shape, gshape);
  if (rc == 0)
    rc = shmap__check_shape(what, b0->dtype, b0->rank, gshape);
  if (rc)
    return rc;
  shmap_array *a = shmap__calloc(1, sizeof *a);
  if (a) {
    a->blocks = shmap__calloc((size_t)mesh->ndev, sizeof *a->blocks);
    a->mem = shmap__calloc((size_t)mesh->ndev, sizeof *a->mem);
  }
  if (!a || !a->blocks || !a->mem) {
    if (a) {
      free(a->blocks);
      free(a->mem);
    }
    free(a);
    return shmap__err(SHMAP_ENOMEM, "out of memory for output %d", k);
  }
  a->dtype = b0->dtype;
  a->rank = b0->rank;
  memcpy(a->shape, gshape, sizeof gshape);
  memcpy(a->bshape, b0->shape, sizeof a->bshape);
  a->numel = shmap__numel(a->rank, a->shape);
  a->spec = *spec;
  a->mesh = mesh;
  shmap__mesh_retain(mesh);
  for (int d = 0; d < mesh->ndev; d++) {
    shmap_ctx *ctx = &job->ctx[d];
    if (!shmap__dev_local(mesh, d)) {
      /* Another process keeps this block: only its description here. */
      a->blocks[d] = *b0;
      a->blocks[d].data = NULL;
      continue;
    }
    shmap__chunk *c = shmap__arena_find(ctx, ctx->out[k]);
    shmap__arena_unlink(ctx, c);
    c = shmap__arena_settle(ctx, c);
    a->mem[d] = c;
    a->blocks[d] = c->block;
  }
  /* Unchecked outputs: the copy at coordinate 0 of the unnamed axes is the
   * value, so every holder gets that copy (repdata, also from other
   * processes). */
  if (repdata) {
    size_t bytes = shmap_block_nbytes(b0);
    for (int d = 0; d < mesh->ndev; d++)
      if (a->blocks[d].data && repdata[d] && repdata[d] != a->blocks[d].data)
        memcpy(a->blocks[d].data, repdata[d], bytes);
  }
  *res = a;
  return 0;
}

/* Output k: the replication check (or, unchecked, the copy at coordinate
 * 0 for every holder), then the sharded array.  b0 describes every
 * device's block.  Under MPI every process calls this with the same
 * arguments and returns the same result. */
static int finish_output(shmap__job *job, int k, const char *spec_text,
                         const shmap__spec *spec, unsigned flags,
                         const shmap_block *b0, shmap_array **res)
{
  shmap_mesh *mesh = job->mesh;
  bool multi = mesh->place && mesh->place->nproc > 1;
  bool check = !(flags & (SHMAP_NO_CHECK_REP | SHMAP__TRUSTED_REP));
  bool copy = (flags & SHMAP_NO_CHECK_REP) && !(flags & SHMAP__TRUSTED_REP);
  if (!check && !copy)
    return adopt_output(job, k, spec, b0, NULL, res);
  const void **data = shmap__calloc((size_t)mesh->ndev * 2, sizeof *data);
  if (!data) {
    /* Under MPI the others would wait for this process: stop instead. */
    if (multi)
      abort();
    return shmap__err(SHMAP_ENOMEM, "out of memory checking output %d", k);
  }
  const void **repdata = data + mesh->ndev;
  for (int d = 0; d < mesh->ndev; d++)
    if (shmap__dev_local(mesh, d))
      data[d] = job->ctx[d].out[k]->data;
  void *owned = NULL;
  uint64_t received = 0;
  int rc = shmap__proc_rep_blocks(mesh, rep_mask(job, spec), data,
                                  shmap_block_nbytes(b0), repdata, &owned,
                                  &received);
  mesh->stats.bytes_remote += received; /* the runtime lock is held */
  if (rc == 0 && check) {
    int bad = -1;
    rc = check_replicated(job, k, spec_text, spec, repdata, &bad);
    if (multi)
      rc = shmap__proc_agree_first(mesh, bad, rc);
  }
  if (rc == 0)
    rc = adopt_output(job, k, spec, b0, copy ? repdata : NULL, res);
  free(owned);
  free(data);
  return rc;
}

/* The inputs' specs against their arrays; nothing is exchanged yet. */
static int check_inputs(shmap__job *job, const char *const in_specs[])
{
  for (int k = 0; k < job->nin; k++) {
    char what[32];
    snprintf(what, sizeof what, "in_specs[%d]", k);
    const shmap_array *a = job->in[k];
    if (!a)
      return shmap__err(SHMAP_EINVAL, "input %d is NULL", k);
    if (a->mesh && a->mesh != job->mesh)
      return shmap__err(SHMAP_EINVAL,
                        "input %d is sharded on another mesh; move it with "
                        "shmap_array_transfer first", k);
    if (!in_specs[k])
      return shmap__err(SHMAP_EINVAL, "%s is NULL", what);
    shmap__in_info *ii = &job->ins[k];
    int rc = shmap__spec_resolve_manual(job->mesh, job->manual, in_specs[k],
                                        &ii->spec);
    if (rc)
      return shmap__err_prefix(rc, "%s", what);
    rc = shmap__spec_fit(job->mesh, what, in_specs[k], &ii->spec, a->rank,
                         a->shape);
    if (rc)
      return rc;
    shmap__block_shape(job->mesh, &ii->spec, a->rank, a->shape, ii->bshape);
    ii->borrow = a->mesh && shmap__spec_same(&a->spec, &ii->spec, a->rank);
  }
  return 0;
}

/* Pieces of another layout that other processes hold come over before
 * the devices start (stage.c); every process calls this after the map was
 * agreed on. */
static int stage_inputs(shmap__job *job)
{
  for (int k = 0; k < job->nin; k++) {
    char what[32];
    snprintf(what, sizeof what, "in_specs[%d]", k);
    const shmap_array *a = job->in[k];
    shmap__in_info *ii = &job->ins[k];
    int rc;
    if (a->mesh && !ii->borrow && shmap__stage_needed(a, job->mesh) &&
        (rc = shmap__stage(a, job->mesh, &ii->spec, ii->bshape, what,
                           &ii->view)))
      return rc;
  }
  return 0;
}

/* What every process must pass alike to a map, as text (for the
 * agreement between processes, proc.c): counts, flags, manual axes, each
 * input's dtype, shape and spec, each output's spec (resolved, so that
 * spellings of one spec are equal).  NULL when out of memory. */
static char *describe_map(const shmap__job *job, const shmap__spec *ospec,
                          unsigned flags)
{
  const shmap_mesh *mesh = job->mesh;
  size_t n = 256 + ((size_t)job->nin + (size_t)job->nout) * 640;
  char *t = shmap__malloc(n), tmp[400];
  if (!t)
    return NULL;
  shmap__mask_format(mesh, job->manual, tmp, sizeof tmp);
  snprintf(t, n, "nin=%d, nout=%d, flags 0x%x, manual axes %s", job->nin,
           job->nout, flags, tmp);
  for (int k = 0; k < job->nin; k++) {
    const shmap_array *a = job->in[k];
    shmap__shape_format(a->dtype, a->rank, a->shape, tmp, sizeof tmp);
    shmap__cat(t, n, ", in %s ", tmp);
    shmap__spec_format(mesh, &job->ins[k].spec, tmp, sizeof tmp);
    shmap__cat(t, n, "%s", tmp);
  }
  for (int k = 0; k < job->nout; k++) {
    shmap__spec_format(mesh, &ospec[k], tmp, sizeof tmp);
    shmap__cat(t, n, ", out %s", tmp);
  }
  return t;
}

static void free_job(shmap__job *job, const shmap__in_info *ins_local)
{
  if (job->ctx)
    for (int d = 0; d < job->mesh->ndev; d++)
      shmap__arena_clear(&job->ctx[d]);
  shmap__runtime_give(job->mesh->rt, 0, job->ctx);
  if (job->ins)
    for (int k = 0; k < job->nin; k++)
      shmap__stage_free(job->ins[k].view);
  if (job->ins != ins_local)
    free(job->ins);
}

/* A map's tables of inputs and outputs live on the caller's stack when
 * the map has at most this many of each (calloc, unlike malloc, takes the
 * C library's slow path: four per map cost about a quarter of an empty
 * map's instructions). */
#define MAP_FEW 4

/* Zeroed room for n + 1 elements of `size` bytes: `local` (MAP_FEW + 1 of
 * them) when they fit, else the heap (NULL when out of memory). */
static void *map_table(void *local, size_t n, size_t size)
{
  if (n < MAP_FEW + 1) {
    memset(local, 0, (MAP_FEW + 1) * size);
    return local;
  }
  return shmap__calloc(n + 1, size);
}

static void map_table_free(void *p, const void *local)
{
  if (p != local)
    free(p);
}

/* flags_op: the public function whose flags to check (NULL: the
 * library's own map, flags not checked). */
static int map_run(const char *flags_op, shmap_mesh *mesh, shmap_body_fn body,
                   void *arg, int nin, shmap_array *const in[],
                   const char *const in_specs[], int nout, shmap_array *out[],
                   const char *const out_specs[], unsigned flags,
                   const char *manual_text)
{
  /* The checks of this process's arguments: under MPI a process that
   * rejects the call still takes part in the agreement below, so that
   * every process rejects it (proc.c, "Verdicts"); only a NULL mesh, a
   * mesh of the parent of a fork and a call from a body return at once. */
  int rc = 0;
  if (flags_op && (flags & ~SHMAP_NO_CHECK_REP))
    rc = shmap__err(SHMAP_EINVAL, "%s: unknown flags 0x%x", flags_op, flags);
  if (!mesh)
    return rc ? rc : shmap__err(SHMAP_EINVAL, "shmap_map: mesh is NULL");
  if (rc)
    ;
  else if (!body)
    rc = shmap__err(SHMAP_EINVAL, "shmap_map: body is NULL");
  else if (nin < 0 || nout < 0)
    rc = shmap__err(SHMAP_EINVAL, "shmap_map: negative count (nin=%d, nout=%d)",
                    nin, nout);
  else if (nin > 0 && (!in || !in_specs))
    rc = shmap__err(SHMAP_EINVAL, "shmap_map: nin=%d but %s is NULL", nin,
                    in ? "in_specs" : "in");
  else if (nout > 0 && (!out || !out_specs))
    rc = shmap__err(SHMAP_EINVAL, "shmap_map: nout=%d but %s is NULL", nout,
                    out ? "out_specs" : "out");
  unsigned gen = atomic_load(&mesh->rt->forkgen);
  if (gen && gen != shmap__fork_generation() + 1)
    return rc ? rc
              : shmap__err(SHMAP_ESTATE,
                           "shmap_map: the mesh's device threads belong to "
                           "the process that forked this one; create a new "
                           "mesh here");
  shmap_ctx *outer = shmap__current();
  if (outer)
    return rc ? rc
              : shmap__dev_fail(outer, "shmap_map", SHMAP_ESTATE,
                                "called from inside a body; a map inside a "
                                "body is shmap_map_nested, over the outer "
                                "map's free axes");
  if (rc) {
    nin = nout = 0; /* the tables below stay empty, out[] untouched */
    in = NULL;
  }
  for (int k = 0; k < nout; k++)
    out[k] = NULL;

  shmap__job job = {.mesh = mesh, .body = body, .arg = arg, .nin = nin,
                    .nout = nout, .in = in, .manual = shmap__mesh_all(mesh)};
  if (rc == 0 && manual_text && *manual_text) {
    int axes[SHMAP_MAX_AXES], n;
    rc = shmap__axes_parse(mesh, "shmap_map_ex: manual_axes", manual_text,
                           axes, &n);
    if (rc == 0 && n > 0) {
      job.manual = 0;
      for (int i = 0; i < n; i++)
        job.manual |= 1u << axes[i];
    }
  }
  shmap__runtime *rt = mesh->rt;
  bool locked = false;
  shmap__spec *ospec = NULL;
  shmap_block **slots = NULL;
  shmap_array **res = NULL;
  shmap__in_info ins_local[MAP_FEW + 1];
  shmap__spec ospec_local[MAP_FEW + 1];
  shmap_array *res_local[MAP_FEW + 1];
  shmap_block b0_local[MAP_FEW + 1];
  job.ins = map_table(ins_local, (size_t)nin, sizeof *job.ins);
  ospec = map_table(ospec_local, (size_t)nout, sizeof *ospec);
  res = map_table(res_local, (size_t)nout, sizeof *res);
  if (rc == 0 && (!job.ins || !ospec || !res))
    rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
  if (rc == 0)
    rc = check_inputs(&job, in_specs);
  for (int k = 0; rc == 0 && k < nout; k++) {
    if (!out_specs[k])
      rc = shmap__err(SHMAP_EINVAL, "out_specs[%d] is NULL", k);
    else if ((rc = shmap__spec_resolve_manual(mesh, job.manual, out_specs[k],
                                              &ospec[k])))
      rc = shmap__err_prefix(rc, "out_specs[%d]", k);
  }
  /* Under MPI every process makes this same map, with the same arguments,
   * and accepts it, before anything is exchanged (proc.c). */
  if (mesh->place && mesh->place->nproc > 1) {
    char *args = rc ? NULL : describe_map(&job, ospec, flags);
    if (rc == 0 && !args)
      rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
    rc = shmap__host_agree_call("shmap_map", mesh, "shmap_map", args, rc);
    free(args);
  }
  if (rc)
    goto done;
  /* Replicas need each free-axis slice in one process (the host's body
   * and offers are in its memory); under MPI a slice that spans processes
   * makes every device run the body, each process on its own devices. */
  job.replicas = job.manual != shmap__mesh_all(mesh);
  for (int d = 0; job.replicas && mesh->place && d < mesh->ndev; d++)
    job.replicas = mesh->place->owner[d] ==
                   mesh->place->owner[shmap__representative(mesh, job.manual, d)];
  if ((rc = stage_inputs(&job)))
    goto done;

  /* One allocation for the device contexts' block tables; both arrays are
   * kept from one map to the next. */
  size_t per = (size_t)nin + (size_t)nout;
  job.ctx = shmap__runtime_take(mesh->rt, 0, (size_t)mesh->ndev * sizeof *job.ctx);
  slots = shmap__runtime_take(mesh->rt, 1,
                              ((size_t)mesh->ndev * per + 1) * sizeof *slots);
  if (!job.ctx || !slots) {
    rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory for %d devices",
                    mesh->ndev);
    goto done;
  }
  for (int d = 0; d < mesh->ndev; d++) {
    shmap_ctx *ctx = &job.ctx[d];
    ctx->rt = mesh->rt;
    ctx->job = &job;
    ctx->comm = &job.comm;
    ctx->dev = d;
    shmap__mesh_coords(mesh, d, ctx->coords);
    ctx->in = slots + (size_t)d * per;
    ctx->out = ctx->in + nin;
    ctx->manual = job.manual;
    ctx->host = job.replicas ? shmap__representative(mesh, job.manual, d) : d;
    atomic_store(&ctx->offer, NULL);
    atomic_store(&ctx->body_done, 0);
  }

  /* One map at a time per mesh, from the devices' start to the clean-up
   * (outputs and freed blocks go back to the devices' caches): a map from
   * a second application thread waits here for the first.  The map holds
   * a reference to the mesh, so that a destroy from another thread takes
   * effect when the map returns. */
  shmap__mesh_retain(mesh);
  shmap__runtime_lock(rt);
  locked = true;
  rc = shmap__comm_open(&job.comm, rt);
  if (rc == 0) {
    shmap__proc_map_running(1);
    rc = shmap__runtime_run(rt, &job, run_device);
    shmap__proc_map_running(-1);
    shmap__comm_close(&job.comm, rc != 0 || atomic_load(&rt->failed_dev) >= 0);
  }
  if (rc == 0) {
    shmap_stats st = {.maps = 1};
    for (int d = 0; d < mesh->ndev; d++) {
      const shmap_ctx *ctx = &job.ctx[d];
      st.blocks_shared += ctx->shared;
      st.blocks_built += ctx->built;
      st.bytes_host += ctx->moved.host;
      st.bytes_local += ctx->moved.local;
      st.bytes_moved += ctx->moved.moved;
      st.bytes_remote += ctx->remote;
    }
    shmap__mesh_stats_add(mesh, &st);
  }
  if (rc == 0 && atomic_load(&rt->failed_dev) >= 0) {
    rc = rt->fail_code;
    shmap__err_set(rt->fail_msg);
  }
  /* The lock stays held until the clean-up (see above).  Under MPI a
   * process may run no device of a sub-mesh: the others check. */
  const shmap__place *pl = mesh->place;
  bool multi = pl && pl->nproc > 1;
  if (rc == 0 && !multi)
    rc = check_outputs(&job, out_specs, ospec);
  /* Every process of the job returns the same result (proc.c). */
  if ((rc = shmap__comm_verdict(&job.comm, rc)))
    goto done;
  /* Every device's block description: this process's first device's,
   * compared with the other processes' under MPI (spmd.c). */
  shmap_block *b0 = map_table(b0_local, (size_t)nout, sizeof *b0);
  if (!b0) {
    if (multi)
      abort(); /* the others would wait for this process */
    rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
    goto done;
  }
  for (int k = 0; k < nout && !multi; k++)
    b0[k] = *job.ctx[0].out[k];
  if (multi) {
    const shmap_block **tab =
        shmap__calloc((size_t)mesh->ndev * (size_t)nout + 1, sizeof *tab);
    if (!tab)
      abort(); /* the others would wait for this process */
    for (int i = 0; i < pl->nlocal; i++)
      for (int k = 0; k < nout; k++)
        tab[(size_t)pl->local[i] * (size_t)nout + (size_t)k] =
            job.ctx[pl->local[i]].out[k];
    rc = shmap__proc_outputs(mesh, nout, tab, b0);
    free(tab);
    for (int k = 0; k < nout && rc == 0; k++)
      rc = check_spec_rank(k, out_specs[k], &ospec[k], &b0[k]);
  }
  for (int k = 0; k < nout && rc == 0; k++)
    rc = finish_output(&job, k, out_specs[k], &ospec[k], flags, &b0[k],
                       &res[k]);
  map_table_free(b0, b0_local);
  if (rc)
    goto done;
  for (int k = 0; k < nout; k++) {
    out[k] = res[k];
    res[k] = NULL;
  }
done:
  if (res)
    for (int k = 0; k < nout; k++)
      shmap_array_destroy(res[k]);
  free_job(&job, ins_local);
  shmap__runtime_give(mesh->rt, 1, slots);
  if (locked) {
    shmap__runtime_unlock(rt);
    shmap__mesh_release(mesh);
  }
  map_table_free(ospec, ospec_local);
  map_table_free(res, res_local);
  return rc;
}

int shmap__map(shmap_mesh *mesh, shmap_body_fn body, void *arg, int nin,
               shmap_array *const in[], const char *const in_specs[],
               int nout, shmap_array *out[], const char *const out_specs[],
               unsigned flags)
{
  return map_run(NULL, mesh, body, arg, nin, in, in_specs, nout, out,
                 out_specs, flags, NULL);
}

SHMAP_EXTERN int shmap_map_flags(shmap_mesh *mesh, shmap_body_fn body,
                                 void *arg, int nin, shmap_array *const in[],
                                 const char *const in_specs[], int nout,
                                 shmap_array *out[],
                                 const char *const out_specs[], unsigned flags)
{
  return map_run("shmap_map", mesh, body, arg, nin, in, in_specs, nout, out,
                 out_specs, flags, NULL);
}

SHMAP_EXTERN int shmap_map_ex(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                              int nin, shmap_array *const in[],
                              const char *const in_specs[], int nout,
                              shmap_array *out[],
                              const char *const out_specs[],
                              const shmap_map_opts *opts)
{
  static const shmap_map_opts defaults;
  if (!opts)
    opts = &defaults;
  return map_run("shmap_map_ex", mesh, body, arg, nin, in, in_specs, nout,
                 out, out_specs, opts->flags, opts->manual_axes);
}

SHMAP_EXTERN int shmap_map(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                           int nin, shmap_array *const in[],
                           const char *const in_specs[], int nout,
                           shmap_array *out[], const char *const out_specs[])
{
  return shmap_map_flags(mesh, body, arg, nin, in, in_specs, nout, out,
                         out_specs, 0);
}

/* ---- nested maps ------------------------------------------------------------ *
 *
 * A map over some axes runs its body on every device: devices along the free
 * axes run the same instance on equal blocks, as XLA runs a partially
 * manual computation.  So when a body starts a nested map over free axes,
 * every device of the mesh is already there to run its part: the nested map
 * runs inline, on the device's own thread or fiber, with a second context
 * chained to the first.  No device set changes hands and no thread is
 * woken; the inner map's groups are groups of the same mesh over the inner
 * axes, so whatever the map's communicator does for a collective (shared
 * memory here; another transport for devices in other processes) it does
 * for the nested map's collectives, and for those the inner body makes
 * over the outer axes through the outer context.  Before it starts, the
 * body instances of every slice agree on the nested call over the axes of
 * the whole chain (instances_agree), so that slices nesting differently
 * fail instead of meeting in groups over outer axes that a slice nested
 * otherwise cannot fill.  The inner body's inputs are cut from the outer
 * blocks locally; its outputs are assembled with all_gathers over the
 * inner axes, after an agreement (an all_gather of a small descriptor)
 * that turns devices making different nested calls or returning different
 * shapes into an error naming two of them.
 */

SHMAP_EXTERN shmap_ctx *shmap_ctx_outer(const shmap_ctx *ctx)
{
  if (shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_outer"))
    return NULL;
  return ctx->outer;
}

SHMAP_EXTERN int shmap_ctx_manual_axes(const shmap_ctx *ctx, char *buf,
                                       size_t len)
{
  int rc = shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_manual_axes");
  if (rc)
    return rc;
  if (!buf && len)
    return shmap__err(SHMAP_EINVAL, "shmap_ctx_manual_axes: buf is NULL");
  const shmap_mesh *mesh = ctx->rt->mesh;
  int axes[SHMAP_MAX_AXES], n = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (ctx->manual & (1u << a))
      axes[n++] = a;
  char tmp[320];
  shmap__axes_format(mesh, axes, n, tmp, sizeof tmp);
  if (len)
    snprintf(buf, len, "%s", tmp);
  return (int)strlen(tmp);
}

/* The axes whose bits are set, as the axes text of a collective. */
static void mask_axes_text(const shmap_mesh *mesh, unsigned mask, char *buf,
                           size_t n)
{
  int axes[SHMAP_MAX_AXES], k = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      axes[k++] = a;
  shmap__axes_format(mesh, axes, k, buf, n);
}

/* A string mixed into `h`, then an end mark, so that "ab", "" differs from
 * "a", "b". */
static uint64_t hash_str(uint64_t h, const char *s)
{
  return shmap__hash_u64(shmap__hash_str(h, s), 0xff);
}

/*
 * Every member of the inner group gathers a word from every other and
 * compares.  Used for the agreement on the nested call itself and on each
 * output's dtype and shape, so that devices that disagree fail with a
 * message naming both instead of meeting in mismatched collectives.
 * Returns 0, or the index of the first member that differs (+1) in *diff.
 */
static int agree(shmap_ctx *ictx, const char *axes, const int64_t *mine,
                 int nwords, int *diff, int64_t *theirs)
{
  shmap_block b = {.data = (void *)mine, .dtype = SHMAP_I64, .rank = 1,
                   .shape = {nwords}};
  shmap_block *all;
  int rc = shmap_all_gather(ictx, &b, axes, 0, 0, &all);
  if (rc)
    return rc;
  const int64_t *w = all->data;
  *diff = 0;
  for (int64_t r = 0; r < all->shape[0] && !*diff; r++)
    if (memcmp(w + r * nwords, mine, (size_t)nwords * sizeof *mine)) {
      *diff = (int)r + 1;
      memcpy(theirs, w + r * nwords, (size_t)nwords * sizeof *mine);
    }
  shmap_block_free(ictx, all);
  return 0;
}

/*
 * Every body instance of the map of octx (the devices that run its body:
 * one for each coordinate of `used`, the manual axes of the whole chain of
 * maps) must start the same nested map.  They agree on it before any
 * replica joins, over `used`, with a call whose descriptor describes the
 * nested map (SHMAP__NESTED: an all_gather of one word), so that
 * instances nesting over other axes, with other counts or specs, or a
 * different number of times or not at all, fail with SHMAP_EMISMATCH
 * naming two devices and their calls (the transport's mismatch message)
 * instead of starting inner maps whose groups over the outer axes meet
 * no one.  An instance that is a replica (it joined an offer) goes back
 * to waiting when its inner body returns, unseen by the transport, so
 * with replicas the instances of an inner body also agree when it
 * returns (`end`): an instance still calling, or nesting, meets that
 * call and fails instead of waiting for it.
 */
static int instances_agree(shmap_ctx *octx, unsigned used, unsigned manual,
                           int nin, int nout, uint64_t h, bool end)
{
  char axes[320];
  mask_axes_text(octx->rt->mesh, used, axes, sizeof axes);
  int64_t word = 0;
  shmap_block b = {.data = &word, .dtype = SHMAP_I64, .rank = 1,
                   .shape = {1}};
  shmap__plan p;
  /* The call is over every axis of the chain, not only octx's own. */
  unsigned own = octx->manual;
  octx->manual = used;
  int rc = shmap__plan_all_gather(octx, &b, axes, 0, 0, true, &p);
  octx->manual = own;
  if (rc)
    return rc;
  p.c.name = "shmap_map_nested";
  snprintf(p.c.op, sizeof p.c.op, "%s", p.c.name);
  p.c.call.kind = SHMAP__NESTED;
  p.c.call.source = (int)manual;
  p.c.call.p2 = end;
  p.c.call.op_hash = (uint64_t)(nin > 0xffff ? 0xffff : nin) << 48 |
                     (uint64_t)(nout > 0xffff ? 0xffff : nout) << 32 |
                     (h & 0xffffffffu);
  shmap_block *all = NULL;
  if ((rc = shmap__into_new_block(&p, shmap__algo_all_gather, &all)))
    return rc;
  shmap_block_free(octx, all);
  return 0;
}

/* The device number of member r of this device's group over the axes in
 * `mask` (mesh order). */
static int mask_member(const shmap_mesh *mesh, unsigned mask, int dev, int r)
{
  int axes[SHMAP_MAX_AXES], k = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      axes[k++] = a;
  int id = dev;
  for (int i = k - 1; i >= 0; i--) {
    int a = axes[i];
    id -= (dev / mesh->strides[a] % mesh->sizes[a]) * mesh->strides[a];
    id += r % mesh->sizes[a] * mesh->strides[a];
    r /= mesh->sizes[a];
  }
  return id;
}

/* Output k of a nested map: check that the members agree on it, that it is
 * replicated along the inner axes its spec leaves out, and assemble it over
 * the axes it names into a new block of the outer body. */
static int nested_output(shmap_ctx *ictx, shmap_ctx *octx, int k,
                         const char *spec_text, const shmap__spec *spec,
                         unsigned flags, shmap_block **res)
{
  const char *op = "shmap_map_nested";
  const shmap_mesh *mesh = ictx->rt->mesh;
  char all_axes[320];
  mask_axes_text(mesh, ictx->manual, all_axes, sizeof all_axes);
  const shmap_block *b = ictx->out[k];
  int64_t desc[2 + SHMAP_MAX_RANK] = {-1, -1};
  if (b) {
    desc[0] = b->dtype;
    desc[1] = b->rank;
    memcpy(desc + 2, b->shape, (size_t)b->rank * sizeof b->shape[0]);
  }
  int diff;
  int64_t theirs[2 + SHMAP_MAX_RANK];
  int rc = agree(ictx, all_axes, desc, 2 + SHMAP_MAX_RANK, &diff, theirs);
  if (rc)
    return rc;
  char me[96], s0[128] = "no output", s1[128] = "no output";
  if (diff) {
    int other = mask_member(mesh, ictx->manual, ictx->dev, diff - 1);
    char them[96];
    shmap__mesh_devname(mesh, ictx->dev, me, sizeof me);
    shmap__mesh_devname(mesh, other, them, sizeof them);
    if (b)
      shmap__shape_format(b->dtype, b->rank, b->shape, s0, sizeof s0);
    if (theirs[0] >= 0)
      shmap__shape_format((shmap_dtype)theirs[0], (int)theirs[1], theirs + 2,
                          s1, sizeof s1);
    return shmap__dev_fail(ictx, op, SHMAP_EMISMATCH,
                           "output %d: %s returned %s but %s returned %s", k,
                           me, s0, them, s1);
  }
  if (!b)
    return shmap__dev_fail(ictx, op, SHMAP_EINVAL,
                           "output %d was not declared by any device (declare "
                           "each with shmap_out)", k);
  if (spec->ndims > b->rank) {
    shmap__shape_format(b->dtype, b->rank, b->shape, s0, sizeof s0);
    return shmap__dev_fail(ictx, op, SHMAP_ESHAPE,
                           "out_specs[%d] \"%.200s\" has length %d but output "
                           "%d has rank %d (blocks are %s)",
                           k, spec_text, spec->ndims, k, b->rank, s0);
  }
  unsigned named = shmap__spec_axes_mask(spec);
  unsigned unnamed = ictx->manual & ~named;
  size_t bytes = shmap_block_nbytes(b);
  size_t es = shmap_dtype_size(b->dtype);
  const void *val = b->data;
  shmap_block *ug = NULL;
  if (unnamed) {
    /* The copy at coordinate 0 of the unnamed axes is the value; with the
     * check on, every copy must equal it bit for bit. */
    char axes[320];
    mask_axes_text(mesh, unnamed, axes, sizeof axes);
    if ((rc = shmap_all_gather(ictx, b, axes, 0, 0, &ug)))
      return rc;
    val = ug->data;
    for (int64_t r = 1; !(flags & SHMAP_NO_CHECK_REP) && r < ug->shape[0];
         r++) {
      const char *x = (const char *)ug->data + (size_t)r * bytes;
      if (memcmp(val, x, bytes) == 0)
        continue;
      int64_t i = 0;
      while (memcmp((const char *)val + i * (int64_t)es, x + i * (int64_t)es,
                    es) == 0)
        i++;
      char na[96], nb[96], va[64], vb[64], idx[96], list[320];
      shmap__mesh_devname(mesh, mask_member(mesh, unnamed, ictx->dev, 0), na,
                          sizeof na);
      shmap__mesh_devname(mesh, mask_member(mesh, unnamed, ictx->dev, (int)r),
                          nb, sizeof nb);
      shmap__dtype_format(b->dtype, (const char *)val + i * (int64_t)es, va,
                          sizeof va);
      shmap__dtype_format(b->dtype, x + i * (int64_t)es, vb, sizeof vb);
      format_index(b->rank, b->shape, i, idx, sizeof idx);
      shmap__mask_format(mesh, unnamed, list, sizeof list);
      return shmap__dev_fail(ictx, op, SHMAP_EREPLICATION,
                             "output %d with out_specs[%d] \"%.200s\" is not "
                             "replicated along %s, which the spec leaves out: "
                             "%s and %s differ at block element %s: %s vs %s",
                             k, k, spec_text, list, na, nb, idx, va, vb);
    }
  }
  int64_t gshape[SHMAP_MAX_RANK];
  if ((rc = shmap__global_shape("nested output", mesh, spec, b->rank, b->shape,
                                gshape)))
    return shmap__dev_fail(ictx, op, rc, "%s", shmap__errbuf());
  shmap__chunk *c = shmap__arena_alloc(octx, b->dtype, b->rank, gshape,
                                       SHMAP__CHUNK_SCRATCH, false);
  if (!c)
    return shmap__dev_fail(ictx, op, SHMAP_ENOMEM, "%s", shmap__errbuf());
  if (!named) {
    memcpy(c->block.data, val, bytes);
  } else {
    char axes[320];
    mask_axes_text(mesh, named, axes, sizeof axes);
    shmap_block v = *b;
    v.data = (void *)val;
    shmap_block *ng;
    if ((rc = shmap_all_gather(ictx, &v, axes, 0, 0, &ng))) {
      shmap__arena_free(octx, c);
      return rc;
    }
    int64_t gstr[SHMAP_MAX_RANK], bstr[SHMAP_MAX_RANK];
    shmap__strides(b->rank, gshape, gstr);
    shmap__strides(b->rank, b->shape, bstr);
    for (int64_t r = 0; r < ng->shape[0]; r++) {
      int coords[SHMAP_MAX_AXES];
      shmap__mesh_coords(mesh, mask_member(mesh, named, ictx->dev, (int)r),
                         coords);
      int64_t off[SHMAP_MAX_RANK];
      shmap__block_offset(mesh, spec, b->rank, b->shape, coords, off);
      char *dst = c->block.data;
      for (int d = 0; d < b->rank; d++)
        dst += off[d] * gstr[d] * (int64_t)es;
      shmap__copy_box(dst, gstr, (const char *)ng->data + (size_t)r * bytes,
                      bstr, b->rank, b->shape, es);
    }
  }
  *res = &c->block;
  return 0;
}

/* Split an outer block into this device's inner block under `spec`. */
static int nested_input(shmap_ctx *ictx, int k, const shmap_block *src,
                        const shmap__spec *spec)
{
  const shmap_mesh *mesh = ictx->rt->mesh;
  if (shmap__spec_axes_mask(spec) == 0) {
    ictx->in[k] = (shmap_block *)src; /* read-only, so shared */
    ictx->shared++;
    return 0;
  }
  int64_t bshape[SHMAP_MAX_RANK], off[SHMAP_MAX_RANK];
  shmap__block_shape(mesh, spec, src->rank, src->shape, bshape);
  shmap__block_offset(mesh, spec, src->rank, bshape, ictx->coords, off);
  shmap__chunk *c = shmap__arena_alloc(ictx, src->dtype, src->rank, bshape,
                                       SHMAP__CHUNK_IN, false);
  if (!c)
    return shmap__dev_fail(ictx, "shmap_map_nested", SHMAP_ENOMEM, "%s",
                           shmap__errbuf());
  size_t es = shmap_dtype_size(src->dtype);
  int64_t sstr[SHMAP_MAX_RANK], dstr[SHMAP_MAX_RANK];
  shmap__strides(src->rank, src->shape, sstr);
  shmap__strides(src->rank, bshape, dstr);
  const char *from = src->data;
  for (int d = 0; d < src->rank; d++)
    from += off[d] * sstr[d] * (int64_t)es;
  shmap__copy_box(c->block.data, dstr, from, sstr, src->rank, bshape, es);
  ictx->built++;
  ictx->moved.local += shmap_block_nbytes(&c->block);
  ictx->in[k] = &c->block;
  return 0;
}

SHMAP_EXTERN int shmap_map_nested(shmap_ctx *octx, shmap_body_fn body,
                                  void *arg, int nin,
                                  const shmap_block *const in[],
                                  const char *const in_specs[], int nout,
                                  shmap_block *out[],
                                  const char *const out_specs[],
                                  const shmap_map_opts *opts)
{
  const char *op = "shmap_map_nested";
  int rc = shmap__ctx_check(octx, op);
  if (rc)
    return rc;
  if (octx != shmap__current())
    return shmap__dev_fail(octx, op, SHMAP_ESTATE,
                           "ctx is the context of an outer map; start a "
                           "nested map from the innermost body's context");
  static const shmap_map_opts defaults;
  if (!opts)
    opts = &defaults;
  if (!body)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL, "body is NULL");
  if (nin < 0 || nout < 0)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL,
                           "negative count (nin=%d, nout=%d)", nin, nout);
  if ((nin > 0 && (!in || !in_specs)) || (nout > 0 && (!out || !out_specs)))
    return shmap__dev_fail(octx, op, SHMAP_EINVAL,
                           "nin=%d, nout=%d but an array of blocks or specs "
                           "is NULL", nin, nout);
  if (opts->flags & ~SHMAP_NO_CHECK_REP)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL, "unknown flags 0x%x",
                           opts->flags);
  for (int k = 0; k < nout; k++)
    out[k] = NULL;
  shmap__runtime *rt = octx->rt;
  const shmap_mesh *mesh = rt->mesh;
  unsigned used = 0;
  for (const shmap_ctx *c = octx; c; c = c->outer)
    used |= c->manual;
  unsigned free_axes = shmap__mesh_all(mesh) & ~used;
  char usedl[320], freel[320];
  shmap__mask_format(mesh, used, usedl, sizeof usedl);
  shmap__mask_format(mesh, free_axes, freel, sizeof freel);
  unsigned manual = free_axes;
  if (opts->manual_axes && *opts->manual_axes) {
    int axes[SHMAP_MAX_AXES], n;
    if ((rc = shmap__axes_parse(mesh, "shmap_map_nested: manual_axes",
                                opts->manual_axes, axes, &n)))
      return shmap__dev_fail(octx, op, rc, "%s", shmap__errbuf());
    if (n > 0)
      manual = 0;
    for (int i = 0; i < n; i++) {
      if (used & (1u << axes[i]))
        return shmap__dev_fail(octx, op, SHMAP_EAXIS,
                               "axis '%s' is already manual in an enclosing "
                               "map (manual there: %s; free axes: %s)",
                               mesh->names[axes[i]], usedl, freel);
      manual |= 1u << axes[i];
    }
  }
  if (!manual)
    return shmap__dev_fail(octx, op, SHMAP_EAXIS,
                           "no free axis is left to map over (every axis is "
                           "manual in an enclosing map: %s)", usedl);

  shmap__spec *specs = shmap__calloc((size_t)nin + (size_t)nout + 1,
                                     sizeof *specs);
  shmap_block **res = shmap__calloc((size_t)nout + 1, sizeof *res);
  if (!specs || !res) {
    free(specs);
    free(res);
    return shmap__dev_fail(octx, op, SHMAP_ENOMEM, "out of memory");
  }
  for (int k = 0; k < nin + nout && !rc; k++) {
    bool isin = k < nin;
    int j = isin ? k : k - nin;
    const char *text = isin ? in_specs[j] : out_specs[j];
    const char *what = isin ? "in_specs" : "out_specs";
    if (!text) {
      rc = shmap__dev_fail(octx, op, SHMAP_EINVAL, "%s[%d] is NULL", what, j);
      break;
    }
    if ((rc = shmap__spec_resolve_manual(mesh, manual, text, &specs[k]))) {
      rc = shmap__dev_fail(octx, op, rc, "%s[%d]: %s", what, j,
                           shmap__errbuf());
      break;
    }
    if (!isin)
      continue;
    char w[32];
    snprintf(w, sizeof w, "in_specs[%d]", j);
    if (!shmap__block_valid(in[j]))
      rc = shmap__block_check(octx, op, w, in[j]);
    else if ((rc = shmap__spec_fit(mesh, w, text, &specs[k], in[j]->rank,
                                   in[j]->shape)))
      rc = shmap__dev_fail(octx, op, rc, "%s", shmap__errbuf());
  }
  uint64_t h = shmap__hash_init();
  for (int k = 0; k < nin && !rc; k++)
    h = hash_str(h, in_specs[k]);
  for (int k = 0; k < nout && !rc; k++)
    h = hash_str(h, out_specs[k]);
  h = shmap__hash_u64(h, (uint64_t)nin);
  h = shmap__hash_u64(h, (uint64_t)nout);
  if (!rc)
    rc = instances_agree(octx, used, manual, nin, nout, h, false);
  if (rc) {
    free(specs);
    free(res);
    return rc;
  }

  /* In a map with replicas, the other members of this instance's group
   * over the inner axes are replicas waiting in its slice: each gets the
   * call as an offer and runs its part (nested_join). */
  shmap__offer of = {.octx = octx, .body = body, .arg = arg, .nin = nin,
                     .nout = nout, .in = in, .in_specs = in_specs,
                     .out_specs = out_specs, .specs = specs,
                     .manual = manual, .flags = opts->flags, .seq = octx->seq,
                     .poster = octx->dev};
  shmap__dev *self = &rt->devs[octx->dev];
  of.nest = atomic_load_explicit(&self->dbg.nest, memory_order_relaxed);
  shmap_ctx *root = root_ctx(octx);
  if (root->job->replicas) {
    int n = mask_count(mesh, manual);
    atomic_store(&of.left, n - 1);
    for (int r = 1; r < n; r++) {
      int m = mask_member(mesh, manual, octx->dev, r);
      shmap__offer *none = NULL;
      if (atomic_compare_exchange_strong(&root->job->ctx[m].offer, &none,
                                         &of))
        shmap__dev_wake(&rt->devs[m]);
      else
        atomic_fetch_sub(&of.left, 1); /* it stopped waiting (a failure) */
    }
  }
  rc = nested_run(octx, &of, res);
  if (root->job->replicas)
    shmap__dev_wait(rt, self, offer_done, &of, NULL);
  if (!rc)
    for (int k = 0; k < nout; k++)
      out[k] = res[k];
  free(specs);
  free(res);
  return rc;
}

/* One device's part of nested map `of` started from octx (the device's own
 * call, or an offer it joined): the inner context, the agreement, the
 * inputs, the body and the outputs (into res). */
static int nested_run(shmap_ctx *octx, const shmap__offer *of,
                      shmap_block **res)
{
  const char *op = "shmap_map_nested";
  shmap__runtime *rt = octx->rt;
  const shmap_mesh *mesh = rt->mesh;
  int nin = of->nin, nout = of->nout, rc = 0;
  unsigned manual = of->manual;
  const shmap__spec *specs = of->specs, *ospec = specs + nin;
  shmap_block **slots = shmap__calloc((size_t)nin + (size_t)nout + 1,
                                      sizeof *slots);
  if (!slots)
    return shmap__dev_fail(octx, op, SHMAP_ENOMEM, "out of memory");
  /* The inner map: one more context on this device, a job of one. */
  shmap__job job = {.mesh = rt->mesh, .body = of->body, .arg = of->arg,
                    .nin = nin, .nout = nout, .manual = manual};
  shmap_ctx ictx = {.rt = rt, .job = &job, .comm = octx->comm,
                    .dev = octx->dev, .seq = octx->seq,
                    .manual = manual, .outer = octx,
                    .depth = octx->depth + 1, .host = octx->dev};
  memcpy(ictx.coords, octx->coords, sizeof ictx.coords);
  ictx.in = slots;
  ictx.out = slots + nin;
  job.ctx = &ictx;
  shmap__dev *self = &rt->devs[octx->dev];
  self->ctx = &ictx;
  shmap__set_current(&ictx);
  /* The watchdog and the gdb extension show every level of nesting. */
  uint64_t nest = atomic_load_explicit(&self->dbg.nest, memory_order_relaxed);
  int levels = (int)(nest >> 56);
  if (levels < SHMAP__NEST_LEVELS)
    atomic_store_explicit(&self->dbg.nest,
                          ((nest & ~((uint64_t)0xff << 56)) |
                           (uint64_t)manual << (8 * levels) |
                           (uint64_t)(levels + 1) << 56),
                          memory_order_relaxed);

  /* Agree on the call: same axes, specs and counts on every member.  With
   * replicas the members run the offer of one body instance, which agreed
   * with the others already (instances_agree); without, every device made
   * the call itself. */
  bool replicas = root_ctx(octx)->job->replicas;
  char all_axes[320];
  mask_axes_text(mesh, manual, all_axes, sizeof all_axes);
  uint64_t h = shmap__hash_init();
  for (int k = 0; k < nin; k++)
    h = hash_str(h, of->in_specs[k]);
  for (int k = 0; k < nout; k++)
    h = hash_str(h, of->out_specs[k]);
  int64_t desc[4] = {(int64_t)manual, nin, nout, (int64_t)(h >> 1)};
  int64_t theirs[4];
  int diff = 0;
  if (!replicas)
    rc = agree(&ictx, all_axes, desc, 4, &diff, theirs);
  if (!rc && diff) {
    char them[96];
    shmap__mesh_devname(mesh, mask_member(mesh, manual, ictx.dev, diff - 1),
                        them, sizeof them);
    rc = shmap__dev_fail(&ictx, op, SHMAP_EMISMATCH,
                         "nested maps differ between devices: this device "
                         "maps %d input%s to %d output%s, %s maps %d to %d%s",
                         nin, nin == 1 ? "" : "s", nout, nout == 1 ? "" : "s",
                         them, (int)theirs[1], (int)theirs[2],
                         theirs[0] != desc[0] ? " over other axes"
                         : theirs[3] != desc[3] ? " with other specs" : "");
  }
  for (int k = 0; k < nin && !rc; k++)
    rc = nested_input(&ictx, k, of->in[k], &specs[k]);
  if (!rc) {
    uint64_t t0 = shmap__set_state(self, SHMAP__ST_BODY, 0, shmap__now());
    int brc = of->body(&ictx, of->arg);
    uint64_t t1 = shmap__now();
    if (shmap__tracing()) {
      int axes[SHMAP_MAX_AXES], na = 0;
      for (int a = 0; a < mesh->naxes; a++)
        if (manual & (1u << a))
          axes[na++] = a;
      shmap__trace_event(self, t0, t1,
                         shmap__pack_op(SHMAP__NESTED_BODY, axes, na), 0,
                         ictx.seq);
    }
    if (brc != 0) {
      if (ictx.err)
        rc = ictx.err;
      else {
        char me[400], msg[SHMAP__MSG_MAX];
        shmap__ctx_devname(&ictx, me, sizeof me);
        snprintf(msg, sizeof msg, "%s: body returned %d", me, brc);
        ictx.err = SHMAP_EBODY;
        rc = shmap__fail(rt, ictx.dev, SHMAP_EBODY, msg);
        shmap__err_set(msg);
      }
    } else if (ictx.err) {
      rc = ictx.err;
    } else if (replicas) {
      unsigned used = 0;
      for (const shmap_ctx *c = &ictx; c; c = c->outer)
        used |= c->manual;
      rc = instances_agree(&ictx, used, manual, nin, nout, 0, true);
    }
    /* Requests the inner body left open fail the map and are finished
     * before its blocks go (coll/async.c). */
    shmap__async_body_end(&ictx);
    if (!rc)
      rc = ictx.err;
  }
  for (int k = 0; k < nout && !rc; k++)
    rc = nested_output(&ictx, octx, k, of->out_specs[k], &ospec[k], of->flags,
                       &res[k]);
  /* Back in the outer body: it counts the calls made inside. */
  while (ictx.arena)
    shmap__arena_free(&ictx, ictx.arena);
  if (ictx.seq > octx->seq)
    octx->seq = ictx.seq;
  octx->shared += ictx.shared;
  octx->built += ictx.built;
  octx->moved.local += ictx.moved.local;
  octx->moved.moved += ictx.moved.moved;
  self->ctx = octx;
  shmap__set_current(octx);
  atomic_store_explicit(&self->dbg.nest, nest, memory_order_relaxed);
  shmap__set_state(self, SHMAP__ST_BODY, 0, shmap__now());
  if (rc) {
    if (!octx->err)
      octx->err = rc;
    for (int k = 0; k < nout; k++)
      if (res[k]) {
        shmap__arena_free(octx, shmap__arena_find(octx, res[k]));
        res[k] = NULL;
      }
  }
  free(slots);
  return rc;
}
