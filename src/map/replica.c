/* SPDX-License-Identifier: MIT */
/* replica.c - the devices of a map over some axes that run no body of
 * their own: they wait for their host's body, join the nested maps it
 * starts over free axes, and copy its outputs. */
#include "map/map.h"

#include "sched/trace.h"

#include <stdlib.h>
#include <string.h>

/*
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

void shmap__release_replicas(shmap__job *job, int dev)
{
  shmap__runtime *rt = job->ctx[dev].rt;
  const shmap_mesh *mesh = job->mesh;
  unsigned free_axes = shmap__mesh_all(mesh) & ~job->manual;
  atomic_store(&job->ctx[dev].body_done, 1);
  int n = shmap__mask_count(mesh, free_axes);
  for (int r = 1; r < n; r++)
    shmap__dev_wake(&rt->devs[shmap__mask_member(mesh, free_axes, dev, r)]);
}

void shmap__offer_leave(shmap__runtime *rt, shmap__offer *of)
{
  /* The offer lives on the poster's stack until the count reaches 0. */
  shmap__dev *poster = &rt->devs[of->poster];
  atomic_fetch_sub(&of->left, 1);
  shmap__dev_wake(poster);
}

bool shmap__offer_done(void *arg)
{
  return atomic_load(&((shmap__offer *)arg)->left) == 0;
}

/* The most outputs a level of a joined nested map keeps on the stack. */
#define SLOTS 8

/* The shadow of the poster's level l for replica `top`: the poster's
 * map, this device.  `slots` (SLOTS) holds its outputs when they fit;
 * else *heap does.  Returns ENOMEM or 0. */
static int shadow_level(shmap_ctx *sh, const shmap_ctx *h, shmap_ctx *top,
                        shmap_ctx *prev, int l, shmap_block **slots,
                        shmap_block ***heap)
{
  memset(sh, 0, sizeof *sh);
  sh->rt = top->rt;
  sh->job = h->job;
  sh->comm = h->comm;
  sh->src_wait = h->src_wait;
  sh->dev = top->dev;
  sh->nin = h->nin;
  sh->nout = h->nout;
  memcpy(sh->coords, top->coords, sizeof sh->coords);
  sh->in = h->in;
  sh->manual = h->manual;
  sh->outer = prev;
  sh->depth = l;
  sh->host = top->dev;
  /* Outputs the inner body might declare on this level stay its own. */
  int nout = h->nout;
  sh->out = slots;
  if (nout > SLOTS && !(sh->out = *heap = shmap__calloc((size_t)nout,
                                                        sizeof *sh->out)))
    return SHMAP_ENOMEM;
  memset(sh->out, 0, (size_t)(nout < SLOTS ? SLOTS : nout) * sizeof *sh->out);
  return 0;
}

/* Run nested map `of` on the innermost shadow level; the assembled
 * outputs are the host's business. */
static int join_run(shmap_ctx *top, shmap_ctx *inner, shmap__offer *of,
                    int rc)
{
  shmap_block *res[64], **resp = res;
  if (of->nout > 64 && !(resp = shmap__calloc((size_t)of->nout, sizeof *resp)))
    rc = SHMAP_ENOMEM;
  if (rc) {
    shmap__dev_fail(top, "shmap_map_nested", rc, "out of memory");
  } else {
    for (int k = 0; k < of->nout; k++)
      resp[k] = NULL;
    rc = shmap__nested_run(inner, of, resp);
    for (int k = 0; !rc && k < of->nout; k++)
      shmap__arena_free(inner, shmap__arena_find(inner, resp[k]));
  }
  if (resp != res)
    free(resp);
  return rc;
}

void shmap__nested_join(shmap_ctx *top, shmap__offer *of)
{
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
  shmap_block *slots[SHMAP_MAX_AXES][SLOTS], **heap[SHMAP_MAX_AXES] = {NULL};
  shmap_ctx *prev = top;
  int rc = 0;
  for (int l = 1; l <= depth && l <= SHMAP_MAX_AXES; l++) {
    if (shadow_level(&shadows[l - 1], hchain[l], top, prev, l, slots[l - 1],
                     &heap[l - 1]))
      rc = SHMAP_ENOMEM;
    prev = &shadows[l - 1];
  }
  prev->seq = seq;
  join_run(top, prev, of, rc);
  for (shmap_ctx *c = prev; c != top;) {
    shmap_ctx *outer = c->outer;
    shmap__nested_fold(top, c);
    free(heap[c->depth - 1]);
    c = outer;
  }
  shmap__offer_leave(top->rt, of);
}

static bool replica_wake(void *arg)
{
  shmap_ctx *ctx = arg;
  return atomic_load(&ctx->offer) != NULL ||
         atomic_load(&ctx->job->ctx[ctx->host].body_done);
}

/* The host returned: its outputs are copied into this replica's. */
static void copy_host_outputs(shmap__job *job, shmap_ctx *ctx,
                              const shmap_ctx *host)
{
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

/* A replica's part of a map: join nested maps of its slice until its host
 * returns, then copy the host's outputs. */
void shmap__map_replica(shmap__job *job, int dev)
{
  shmap_ctx *ctx = &job->ctx[dev];
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[dev];
  const shmap_ctx *host = &job->ctx[ctx->host];
  for (;;) {
    self->ctx = ctx;
    shmap__set_current(ctx);
    atomic_store_explicit(&self->dbg.nest, shmap__nest_push(0, job->manual),
                          memory_order_relaxed);
    shmap__set_state(self, SHMAP__ST_REPLICA, (uint64_t)ctx->host,
                     shmap__now_state());
    if (!shmap__dev_wait(rt, self, replica_wake, ctx, &rt->abort))
      break;
    shmap__offer *of = atomic_exchange(&ctx->offer, NULL);
    if (!of)
      break; /* the host returned */
    shmap__nested_join(ctx, of);
  }
  shmap__offer *of = atomic_exchange(&ctx->offer, SHMAP__OFFER_GONE);
  if (of && of != SHMAP__OFFER_GONE)
    shmap__offer_leave(rt, of);
  if (!atomic_load(&rt->abort) && atomic_load(&host->body_done))
    copy_host_outputs(job, ctx, host);
  shmap__set_state(self, SHMAP__ST_DONE, 0, shmap__now_state());
  shmap__set_current(NULL);
  self->ctx = NULL;
  atomic_store_explicit(&self->dbg.nest, 0, memory_order_relaxed);
  shmap__comm_finish(ctx->comm, dev);
}
