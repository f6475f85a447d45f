/* SPDX-License-Identifier: MIT */
/*
 * async.c - asynchronous collectives: shmap_*_start, shmap_wait,
 * shmap_wait_all and shmap_test.
 *
 * A start is the blocking call cut in two.  The device plans the call as
 * the blocking one does (the same checks, messages and descriptor), takes
 * the call's number in program order, reserves the result, and posts the
 * rest -- rendezvous, agreement, data movement, completion: the algorithm
 * of algo.c through the transport -- to its progress helper
 * (runtime/progress.c), which runs it as the device while the body goes
 * on.  The helper runs the device's calls one at a time, in order, and a
 * blocking collective waits until the helper is idle before it enters the
 * transport itself (shmap__async_drain), so the transport still sees one
 * call at a time per device.  Mismatches and failures are therefore found
 * and released exactly as for blocking calls, and results are the
 * blocking call's bit for bit.
 *
 * The helper carries the call out with a copy of the device's context
 * (the request's `proxy`): the call's number, its error and its byte
 * counts are the request's own until the wait hands them to the device.
 *
 * psum_start is in place: its fold is written into a scratch block of the
 * device (the call's dst) and copied into x by the wait, so x keeps its
 * input until then, as the rules promise.
 *
 * The rules are the caller's: between start and wait the input is not
 * written and the result not read.  With SHMAP_ASYNC_CHECK=1 the start
 * fills the result with a pattern and checksums the input, the helper
 * checksums the result when the transfer is done, and the wait checksums
 * both again: a difference fails the wait (and the map), naming the call.
 *
 * Reads are found by the pages: under the check every block of the arena
 * has whole pages of its own (device/arena.c), so a start whose result is
 * such a block has the algorithm write into a scratch block of the device
 * instead, and takes the result's pages away from the body until the wait
 * (sched/guard.c).  A read (or a write) there faults once: the guard
 * records it and gives the pages back, the body reads the pattern and goes
 * on, and the wait gives the pages back, copies the scratch in and fails,
 * naming the call.  Every way a request ends gives its pages back
 * (release(), and the runtime's destruction).
 */
#include "coll/async.h"
#include "hash.h"

#include "coll/plan.h"
#include "sched/trace.h"
#include "sched/progress.h"
#include "settings.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

enum { R_FREE = 0, R_POSTED, R_RUNNING, R_DONE };

/* The pattern a checked start fills the result with: the 16-bit word
 * 0x7fff, repeated (bytes ff 7f in memory).  Every float dtype reads it
 * as a NaN (f16 and bf16 0x7fff, f32 0x7fff7fff, f64 0x7fff7fff7fff7fff,
 * both parts of c64 and c128), and integers as values no computation of
 * small numbers gives (i16 32767, i32 2147450879, u8 255 and 127 in turn,
 * bool 255 and 127, which are not booleans).  Elements of two bytes or
 * more start at even offsets, so each reads whole words of the pattern. */
static void poison(void *data, size_t bytes)
{
  unsigned char *b = data;
  for (size_t i = 0; i < bytes; i++)
    b[i] = (i & 1) ? 0x7f : 0xff;
}

struct shmap_request {
  _Atomic int state;
  int slot, dev;
  shmap__plan plan;                        /* plan.c.ctx is &proxy */
  int (*algo)(shmap__plan *, shmap_block *);
  shmap_block *res;      /* the call's result */
  shmap_block *work;     /* what the algorithm writes: res, or scratch's */
  shmap__chunk *scratch; /* psum, a watched result: the algorithm's block, */
  shmap_block *inplace;  /* copied into x (psum) or res at the wait */
  int watch;             /* the guard's handle of res's pages (0: none) */
  size_t watch_len;      /* the bytes of res's pages, when watched */
  const shmap_block *in; /* the input the body must not write */
  struct shmap_ctx proxy;
  const char *api;       /* "shmap_ppermute_start" */
  char op[SHMAP__CALLNAME_MAX]; /* "ppermute over 'i'" */
  uint32_t k;            /* the call's number on the device */
  int depth;             /* the nesting depth of the body that started it */
  uint64_t packed;       /* kind, axes and dtype (trace, watchdog) */
  _Atomic uint64_t t_start;
  uint64_t t_done;
  bool check;
  uint64_t in_sum, res_sum;
  int rc;
  char msg[SHMAP__MSG_MAX];
};

/* A device's requests. */
typedef struct shmap__async_dev {
  struct shmap_request req[SHMAP_MAX_REQUESTS];
  int nopen; /* the device's own count */
} adev;

/* rt->async: a pointer per device, set by the device at its first start
 * (a whole mesh's requests are 95 MB at 4096 devices). */
static const shmap__rt_hooks async_hooks = {.destroy = shmap__async_destroy};

static adev *_Atomic *table(shmap__runtime *rt)
{
  adev *_Atomic *t = atomic_load(&rt->async);
  if (t)
    return t;
  shmap__runtime_hooks(&async_hooks); /* frees the table with the runtime */
  /* A device that started a call runs it before its next one. */
  shmap__comm_set_before_call(shmap__async_drain);
  return shmap__progress_table(&rt->async, sizeof *t * (size_t)rt->ndev);
}

/* Device d's requests, NULL while it never started one. */
static adev *dev_requests(shmap__runtime *rt, int d)
{
  adev *_Atomic *t = atomic_load(&rt->async);
  return t ? atomic_load(&t[d]) : NULL;
}

void shmap__async_destroy(shmap__runtime *rt)
{
  adev *_Atomic *t = atomic_load(&rt->async);
  if (!t)
    return;
  for (int d = 0; d < rt->ndev; d++) {
    adev *a = atomic_load(&t[d]);
    /* No page may stay taken away, whatever ended the requests. */
    for (int s = 0; a && s < SHMAP_MAX_REQUESTS; s++)
      if (a->req[s].watch)
        shmap__guard_unwatch(a->req[s].watch);
    free(a);
  }
  free(t);
  atomic_store(&rt->async, NULL);
}

/* The hash of the bytes, eight at a time where it can. */
static uint64_t checksum(const void *data, size_t n)
{
  const unsigned char *p = data;
  uint64_t h = shmap__hash_init();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = shmap__hash_u64(h, w);
  }
  return shmap__hash_bytes(h, p + i, n - i);
}

/* ---- the helper's side ------------------------------------------------- */

static void carry_out(void *arg)
{
  struct shmap_request *r = arg;
  shmap__runtime *rt = r->proxy.rt;
  shmap__dev *d = &rt->devs[r->dev];
  atomic_store(&r->state, R_RUNNING);
  d->dbg.rtrack = r->slot;
  int rc = r->algo(&r->plan, r->work);
  r->rc = rc;
  if (rc)
    snprintf(r->msg, sizeof r->msg, "%s", shmap__errbuf());
  else if (r->check && !r->scratch)
    r->res_sum = checksum(r->res->data, shmap_block_nbytes(r->res));
  r->t_done = shmap__now();
  if (shmap__tracing())
    shmap__trace_request(d, atomic_load(&r->t_start), r->t_done, r->packed,
                         shmap_block_nbytes(r->in), r->k, r->slot);
  atomic_store(&r->state, R_DONE);
}

/* ---- the device's side --------------------------------------------------- */

static bool none_pending(void *arg)
{
  const adev *a = arg;
  for (int s = 0; s < SHMAP_MAX_REQUESTS; s++) {
    int st = atomic_load(&a->req[s].state);
    if (st == R_POSTED || st == R_RUNNING)
      return false;
  }
  return true;
}

bool shmap__async_busy(const shmap_ctx *ctx)
{
  adev *a = dev_requests(ctx->rt, ctx->dev);
  return a && a->nopen && !none_pending(a);
}

void shmap__async_drain(shmap_ctx *ctx)
{
  if (!shmap__async_busy(ctx))
    return;
  adev *a = dev_requests(ctx->rt, ctx->dev);
  shmap__progress_wait(ctx->rt, ctx->dev, none_pending, a);
}

/* A free request slot of the device, with its helper running; NULL when
 * the map failed (message set). */
static struct shmap_request *take(shmap__plan *p, const char *api)
{
  shmap_ctx *ctx = p->c.ctx;
  shmap__runtime *rt = ctx->rt;
  adev *_Atomic *t = table(rt);
  adev *a = t ? atomic_load(&t[ctx->dev]) : NULL;
  if (t && !a && (a = shmap__alloc(sizeof *a, true))) {
    for (int s = 0; s < SHMAP_MAX_REQUESTS; s++) {
      a->req[s].slot = s;
      a->req[s].dev = ctx->dev;
    }
    atomic_store(&t[ctx->dev], a);
  }
  if (!a) {
    shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ENOMEM,
                    "out of memory for requests");
    return NULL;
  }
  if (a->nopen >= SHMAP_MAX_REQUESTS) {
    char open[SHMAP__MSG_MAX / 2] = "";
    for (int s = 0; s < SHMAP_MAX_REQUESTS; s++)
      shmap__cat(open, sizeof open, "%s#%u %s", s ? ", " : "", a->req[s].k,
                 a->req[s].op);
    shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ESTATE,
                    "%s: a device may have at most SHMAP_MAX_REQUESTS (%d) "
                    "requests open, and these are: %s; wait for one first",
                    api, SHMAP_MAX_REQUESTS, open);
    return NULL;
  }
  int rc = shmap__progress_ensure(rt, ctx->dev);
  if (rc) {
    /* SHMAP_ENOMEM, or SHMAP_ESYS: no thread. */
    shmap__dev_fail(ctx, shmap__coll_opname(&p->c), rc, "%s",
                    shmap__errbuf());
    return NULL;
  }
  for (int s = 0; s < SHMAP_MAX_REQUESTS; s++)
    if (atomic_load(&a->req[s].state) == R_FREE)
      return &a->req[s];
  return NULL; /* not reached: nopen counts the slots in use */
}

/* Post the planned call; its result (or psum's scratch) is res. */
static void launch(struct shmap_request *r, shmap__plan *p, const char *api,
                   int (*algo)(shmap__plan *, shmap_block *),
                   shmap_block *res, const shmap_block *in)
{
  shmap_ctx *ctx = p->c.ctx;
  adev *a = dev_requests(ctx->rt, ctx->dev);
  a->nopen++;
  r->api = api;
  /* The body that started it: the innermost one running (ctx may be the
   * context of an outer map). */
  const shmap_ctx *body = shmap__current();
  r->depth = body ? body->depth : ctx->depth;
  r->algo = algo;
  r->res = res;
  r->in = in;
  r->rc = 0;
  r->msg[0] = '\0';
  snprintf(r->op, sizeof r->op, "%s", shmap__coll_opname(&p->c));
  r->packed = shmap__pack_op(p->c.call.kind, p->c.call.axes, p->c.call.naxes) |
              (uint64_t)(p->c.call.dtype + 1) << 56;
  r->check = ctx->rt->async_check;
  if (r->check) {
    r->in_sum = checksum(in->data, shmap_block_nbytes(in));
    if (!r->inplace)
      if (shmap_block_nbytes(res))
        poison(res->data, shmap_block_nbytes(res));
    /* A watched result keeps the pattern until the wait. */
    if (r->watch_len) {
      r->res_sum = checksum(res->data, shmap_block_nbytes(res));
      r->watch = shmap__guard_watch(res->data, r->watch_len);
    }
  }
  /* The call takes its number now, in program order; the helper's copy of
   * the context numbers it the same (comm.c adds one). */
  r->proxy = *ctx;
  r->proxy.err = 0;
  r->proxy.remote = 0;
  ctx->seq++;
  r->k = ctx->seq;
  r->plan = *p;
  r->plan.c.ctx = &r->proxy;
  atomic_store(&r->t_start, shmap__now());
  atomic_store(&r->state, R_POSTED);
  shmap__progress_post(ctx->rt, ctx->dev, carry_out, r);
}

/* The start of a call whose result is a new block, once its plan holds: a
 * request, the result block, and the call handed to the progress thread.
 * out is not NULL here for the calls whose plan checks it. */
static int start_new(shmap__plan *p, const char *api,
                     int (*algo)(shmap__plan *, shmap_block *),
                     const shmap_block *x, shmap_block **out,
                     shmap_request **req)
{
  shmap_ctx *ctx = p->c.ctx;
  if (!out || !req)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                           "%s is NULL", out ? "req" : "out");
  struct shmap_request *r = take(p, api);
  shmap_block *res = r ? shmap__plan_result(p) : NULL;
  if (!res)
    return ctx->err;
  r->inplace = NULL;
  r->scratch = NULL;
  r->work = res;
  r->watch = 0;
  r->watch_len = 0;
  /* Under the check a result with pages of its own is watched until the
   * wait, while the algorithm writes into a scratch block. */
  size_t len;
  if (ctx->rt->async_check && shmap__arena_own_pages(ctx, res, &len)) {
    shmap__chunk *s = shmap__arena_alloc(ctx, res->dtype, res->rank,
                                         res->shape, SHMAP__CHUNK_SCRATCH,
                                         false);
    if (!s)
      return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_ENOMEM,
                             "%s", shmap__errbuf());
    p->c.call.dst = s->block.data;
    r->scratch = s;
    r->work = &s->block;
    r->watch_len = len;
  }
  launch(r, p, api, algo, res, x);
  *out = res;
  *req = r;
  return 0;
}

SHMAP_EXTERN int shmap_ppermute_start(shmap_ctx *ctx, const shmap_block *x,
                                      const char *axes, int npairs,
                                      const int pairs[][2], shmap_block **out,
                                      shmap_request **req)
{
  if (out)
    *out = NULL;
  if (req)
    *req = NULL;
  shmap__plan p;
  int rc = shmap__plan_ppermute(ctx, x, axes, npairs, pairs, &p);
  if (rc)
    return rc;
  return start_new(&p, "shmap_ppermute_start", shmap__algo_ppermute_new, x,
                   out, req);
}

SHMAP_EXTERN int shmap_all_gather_start(shmap_ctx *ctx, const shmap_block *x,
                                        const char *axes, int axis, int tiled,
                                        shmap_block **out, shmap_request **req)
{
  if (out)
    *out = NULL;
  if (req)
    *req = NULL;
  shmap__plan p;
  int rc = shmap__plan_all_gather(ctx, x, axes, axis, tiled, out != NULL, &p);
  if (rc)
    return rc;
  return start_new(&p, "shmap_all_gather_start", shmap__algo_all_gather, x,
                   out, req);
}

SHMAP_EXTERN int shmap_psum_scatter_start(shmap_ctx *ctx, const shmap_block *x,
                                          const char *axes,
                                          int scatter_dimension, int tiled,
                                          shmap_block **out,
                                          shmap_request **req)
{
  if (out)
    *out = NULL;
  if (req)
    *req = NULL;
  shmap__plan p;
  int rc = shmap__plan_psum_scatter(ctx, x, axes, scatter_dimension, tiled,
                                    out != NULL, &p);
  if (rc)
    return rc;
  return start_new(&p, "shmap_psum_scatter_start", shmap__algo_reduce_scatter,
                   x, out, req);
}

SHMAP_EXTERN int shmap_psum_start(shmap_ctx *ctx, shmap_block *x,
                                  const char *axes, shmap_request **req)
{
  if (req)
    *req = NULL;
  shmap__plan p;
  int rc = shmap__plan_reduce(ctx, x, axes, SHMAP__PSUM, &p);
  if (rc)
    return rc;
  if (!req)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p.c), SHMAP_EINVAL,
                           "req is NULL");
  struct shmap_request *r = take(&p, "shmap_psum_start");
  if (!r)
    return ctx->err;
  shmap__chunk *scratch = shmap__arena_alloc(ctx, x->dtype, x->rank, x->shape,
                                             SHMAP__CHUNK_SCRATCH, false);
  if (!scratch)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p.c), SHMAP_ENOMEM, "%s",
                           shmap__errbuf());
  p.c.call.dst = scratch->block.data;
  r->inplace = x;
  r->scratch = scratch;
  r->work = x;
  r->watch = 0;
  r->watch_len = 0;
  launch(r, &p, "shmap_psum_start", shmap__algo_allreduce, x, x);
  *req = r;
  return 0;
}

/* ---- completing ------------------------------------------------------------ */

static bool is_done(void *arg)
{
  return atomic_load(&((struct shmap_request *)arg)->state) == R_DONE;
}

/* The request of *req, checked to be an open request of this device; NULL
 * when not (the map failed, message set). */
static struct shmap_request *open_request(shmap_ctx *ctx, const char *api,
                                          shmap_request *const *req)
{
  if (!req) {
    shmap__dev_fail(ctx, api, SHMAP_EINVAL, "req is NULL");
    return NULL;
  }
  if (!*req) {
    shmap__dev_fail(ctx, api, SHMAP_EINVAL,
                    "*req is NULL (a request that was never started, or "
                    "was already waited for)");
    return NULL;
  }
  adev *a = dev_requests(ctx->rt, ctx->dev);
  struct shmap_request *r = *req;
  if (!a || r < a->req || r >= a->req + SHMAP_MAX_REQUESTS ||
      atomic_load(&r->state) == R_FREE) {
    shmap__dev_fail(ctx, api, SHMAP_EINVAL,
                    "*req is not an open request of this device (already "
                    "waited for, or started by another device)");
    return NULL;
  }
  return r;
}

/* Give the result's pages back; what touched them meanwhile (0: nothing,
 * or not watched). */
static int unwatch(struct shmap_request *r)
{
  int hit = shmap__guard_unwatch(r->watch);
  r->watch = 0;
  return hit;
}

static void release(shmap_ctx *ctx, struct shmap_request *r)
{
  unwatch(r);
  if (r->scratch)
    shmap__arena_free(ctx, r->scratch);
  r->scratch = NULL;
  r->inplace = NULL;
  atomic_store(&r->state, R_FREE);
  dev_requests(ctx->rt, ctx->dev)->nopen--;
}

/* The request is done: hand its outcome to the device. */
static int complete(shmap_ctx *ctx, struct shmap_request *r)
{
  int hit = unwatch(r);
  int rc = r->rc;
  ctx->remote += r->proxy.remote;
  if (rc) {
    shmap__err_set(r->msg);
    if (!ctx->err)
      ctx->err = rc;
  } else if (r->check &&
             checksum(r->in->data, shmap_block_nbytes(r->in)) != r->in_sum) {
    rc = shmap__dev_fail(ctx, r->op, SHMAP_ESTATE,
                         "the input was written between %s and shmap_wait "
                         "(call #%u); it must stay unchanged until the wait "
                         "returns", r->api, r->k);
  } else if (r->check && !r->inplace &&
             (hit == SHMAP__GUARD_WRITE ||
              checksum(r->res->data, shmap_block_nbytes(r->res)) !=
                  r->res_sum)) {
    rc = shmap__dev_fail(ctx, r->op, SHMAP_ESTATE,
                         "the result was written between %s and shmap_wait "
                         "(call #%u); it belongs to the transfer until the "
                         "wait returns", r->api, r->k);
  } else if (hit) {
    /* The pattern is intact: the fault was a read (or, where the
     * processor does not say, a write of the pattern itself). */
    rc = shmap__dev_fail(ctx, r->op, SHMAP_ESTATE,
                         "the result was %s between %s and shmap_wait "
                         "(call #%u); it belongs to the transfer until the "
                         "wait returns",
                         hit == SHMAP__GUARD_READ ? "read" : "read or written",
                         r->api, r->k);
  }
  if (!rc && r->scratch)
    shmap__copy(r->inplace ? r->inplace->data : r->res->data,
                r->scratch->block.data, shmap_block_nbytes(r->work));
  release(ctx, r);
  return rc;
}

SHMAP_EXTERN int shmap_wait(shmap_ctx *ctx, shmap_request **req)
{
  int rc = shmap__ctx_check(ctx, "shmap_wait");
  if (rc)
    return rc;
  struct shmap_request *r = open_request(ctx, "shmap_wait", req);
  if (!r)
    return ctx->err;
  /* A rehearsal replays the wait where the body made it (src/rehearse/). */
  uint64_t t0 = shmap__tracing() ? shmap__now() : 0;
  if (!is_done(r))
    shmap__progress_wait(ctx->rt, ctx->dev, is_done, r);
  if (t0)
    shmap__trace_full(&ctx->rt->devs[ctx->dev],
                      &(shmap__tev){t0, shmap__now(), 0, 0, r->k,
                                    "shmap_wait", 0, 0, 0, -1});
  *req = NULL;
  return complete(ctx, r);
}

SHMAP_EXTERN int shmap_wait_all(shmap_ctx *ctx, int n, shmap_request *reqs[])
{
  int rc = shmap__ctx_check(ctx, "shmap_wait_all");
  if (rc)
    return rc;
  if (n < 0 || (n > 0 && !reqs))
    return shmap__dev_fail(ctx, "shmap_wait_all", SHMAP_EINVAL,
                           n < 0 ? "n is negative (%d)" : "reqs is NULL (n=%d)",
                           n);
  int first = 0;
  for (int i = 0; i < n; i++) {
    if (!reqs[i])
      continue;
    if (!open_request(ctx, "shmap_wait_all", &reqs[i]))
      return ctx->err;
  }
  /* In the order started: each request finishes after the ones before. */
  for (int i = 0; i < n; i++) {
    if (!reqs[i])
      continue;
    int r = shmap_wait(ctx, &reqs[i]);
    if (r && !first)
      first = r;
  }
  return first;
}

static void yield(shmap_ctx *ctx)
{
  shmap__dev_yield(ctx->rt, &ctx->rt->devs[ctx->dev]);
}

SHMAP_EXTERN int shmap_test(shmap_ctx *ctx, shmap_request *const *req,
                            int *done)
{
  if (done)
    *done = 0;
  int rc = shmap__ctx_check(ctx, "shmap_test");
  if (rc)
    return rc;
  if (!done)
    return shmap__dev_fail(ctx, "shmap_test", SHMAP_EINVAL, "done is NULL");
  struct shmap_request *r = open_request(ctx, "shmap_test", req);
  if (!r)
    return ctx->err;
  /* Where no helper runs, the device carries its requests out now. */
  shmap__progress_run(ctx->rt, ctx->dev);
  *done = is_done(r);
  /* A body may poll in a loop: let the devices it may be waiting for run
   * (in fiber mode they may share its worker). */
  if (!*done)
    yield(ctx);
  return 0;
}

/* ---- the end of a body, the watchdog ---------------------------------------- */

void shmap__async_body_end(shmap_ctx *ctx)
{
  adev *a = dev_requests(ctx->rt, ctx->dev);
  if (!a || !a->nopen)
    return;
  /* The requests this body started (a nested body's end leaves those of
   * the bodies around it); the first in program order is the one named. */
  struct shmap_request *first = NULL;
  int n = 0;
  for (int s = 0; s < SHMAP_MAX_REQUESTS; s++) {
    struct shmap_request *r = &a->req[s];
    if (atomic_load(&r->state) == R_FREE || r->depth < ctx->depth)
      continue;
    n++;
    if (!first || r->k < first->k)
      first = r;
  }
  if (!first)
    return;
  shmap__dev_fail(ctx, first->op, SHMAP_ESTATE,
                  "the body returned with this request open (call #%u, "
                  "started by %s and never waited for; %d request%s open)",
                  first->k, first->api, n, n == 1 ? "" : "s");
  /* The failure releases every transfer still waiting for its group; none
   * writes after this wait, so the blocks the body leaves may go. */
  shmap__progress_wait(ctx->rt, ctx->dev, none_pending, a);
  for (int s = 0; s < SHMAP_MAX_REQUESTS; s++)
    if (atomic_load(&a->req[s].state) != R_FREE &&
        a->req[s].depth >= ctx->depth)
      release(ctx, &a->req[s]);
}

int shmap__async_block_free(shmap_ctx *ctx, const shmap_block *b,
                            const void *data, size_t cap)
{
  adev *a = dev_requests(ctx->rt, ctx->dev);
  if (!a || !a->nopen)
    return 0;
  const char *lo = data, *hi = lo + cap;
  for (int s = 0; s < SHMAP_MAX_REQUESTS; s++) {
    struct shmap_request *r = &a->req[s];
    if (atomic_load(&r->state) == R_FREE)
      continue;
    /* psum_start's block is its input and its result. */
    const shmap_block *blk[2] = {r->in, r->inplace ? NULL : r->res};
    for (int i = 0; i < 2; i++) {
      const shmap_block *x = blk[i];
      if (!x)
        continue;
      const char *p = x->data;
      size_t nb = shmap_block_nbytes(x);
      if (x != b && !(nb && p < hi && p + nb > lo))
        continue;
      return shmap__dev_fail(ctx, "shmap_block_free", SHMAP_ESTATE,
                             "the block is the %s of the open %s request "
                             "(call #%u, %s); wait for it first",
                             r->inplace ? "input and result"
                             : i ? "result" : "input",
                             r->api, r->k, r->op);
    }
  }
  return 0;
}

size_t shmap__async_table_bytes(shmap__runtime *rt, size_t *per_device)
{
  *per_device = sizeof(adev);
  adev *_Atomic *t = atomic_load(&rt->async);
  if (!t)
    return 0;
  size_t n = sizeof *t * (size_t)rt->ndev;
  for (int d = 0; d < rt->ndev; d++)
    if (atomic_load(&t[d]))
      n += sizeof(adev);
  return n;
}

void shmap__async_report(shmap__runtime *rt, int d, uint64_t now, FILE *out)
{
  adev *a = dev_requests(rt, d);
  if (!a)
    return;
  for (int s = 0; s < SHMAP_MAX_REQUESTS; s++) {
    struct shmap_request *r = &a->req[s];
    int st = atomic_load(&r->state);
    if (st == R_FREE)
      continue;
    uint64_t t0 = atomic_load(&r->t_start);
    double secs = t0 && now > t0 ? (double)(now - t0) / 1e9 : 0;
    fprintf(out, "    request %d: %s (call #%u, %s), started %.1f s ago: %s\n",
            s, r->op, r->k, r->api, secs,
            st == R_POSTED    ? "queued behind earlier requests"
            : st == R_RUNNING ? "in transfer (waiting for its group or data)"
                              : "done, not yet waited for");
  }
}
