/* SPDX-License-Identifier: MIT */
/* comm.c - the transport-independent part of the seam (comm.h): choosing
 * a transport, a group's members, and the device's state and trace around
 * each call. */
#include "transport/comm.h"

#include "device/device.h"
#include "proc/proc.h"
#include "transport/mpi.h"
#include "sched/trace.h"

const shmap__transport *shmap__transport_for(shmap__runtime *rt)
{
#ifdef SHMAP_HAVE_MPI
  /* Devices in several processes: MPI (transport/mpi.c). */
  if (rt->mesh->place && rt->mesh->place->nproc > 1)
    return &shmap__mpi_transport;
#else
  (void)rt;
#endif
  return &shmap__shm_transport;
}

/* The runtime reaches a mesh's transport through these hooks: the
 * transport tells the other processes of a failure, releases the devices
 * a failure stops, and frees its state. */
static void tp_failed(shmap__runtime *rt, int dev, int code, const char *msg)
{
  if (rt->tp && rt->tp->notify)
    rt->tp->notify(rt, dev, code, msg);
}
static bool tp_release(shmap__runtime *rt)
{
  if (!rt->tp)
    return false;
  rt->tp->failed(rt);
  return true;
}
static void tp_destroy(shmap__runtime *rt)
{
  if (rt->tp && rt->tp->destroy)
    rt->tp->destroy(rt);
}
static const shmap__rt_hooks tp_hooks = {
    .failed = tp_failed, .release = tp_release, .destroy = tp_destroy};

int shmap__comm_mesh_init(shmap__runtime *rt)
{
  shmap__runtime_hooks(&tp_hooks);
  rt->tp = shmap__transport_for(rt);
  return rt->tp->mesh_init ? rt->tp->mesh_init(rt) : 0;
}

int shmap__comm_mesh_free(shmap__runtime *rt)
{
  return rt->tp && rt->tp->mesh_free ? rt->tp->mesh_free(rt) : 0;
}

int shmap__comm_verdict(shmap__comm *comm, int rc)
{
  return comm->tp->verdict ? comm->tp->verdict(comm, rc) : rc;
}

int shmap__comm_open(shmap__comm *comm, shmap__runtime *rt)
{
  comm->tp = rt->tp;
  comm->rt = rt;
  comm->mesh = rt->mesh;
  comm->priv = NULL;
  return comm->tp->open(comm);
}

void shmap__comm_close(shmap__comm *comm, bool failed)
{
  comm->tp->close(comm, failed);
}

const char *shmap__coll_opname(shmap__coll *c)
{
  if (!c->op[0]) {
    char af[SHMAP__AXES_MAX];
    if (c->axes_ok)
      shmap__axes_format(c->ctx->rt->mesh, c->call.axes, c->call.naxes, af,
                         sizeof af);
    snprintf(c->op, sizeof c->op, "%s%s%s", c->name,
             c->axes_ok ? " over " : "", c->axes_ok ? af : "");
  }
  return c->op;
}

/* Calls a device started run first, on its progress helper (coll/async.c);
 * the helper itself makes them through this file.  Set once a device
 * starts one, and looked at only while rt->async says some device did. */
static void (*_Atomic before_call)(shmap_ctx *ctx);

void shmap__comm_set_before_call(void (*fn)(shmap_ctx *ctx))
{
  atomic_store_explicit(&before_call, fn, memory_order_release);
}

static void run_started(shmap_ctx *ctx)
{
  if (shmap__helper_for ||
      !atomic_load_explicit(&ctx->rt->async, memory_order_relaxed))
    return;
  void (*fn)(shmap_ctx *) =
      atomic_load_explicit(&before_call, memory_order_acquire);
  if (fn)
    fn(ctx);
}

int shmap__comm_member(const shmap__coll *c, int r)
{
  const shmap_mesh *mesh = c->comm->mesh;
  const shmap_ctx *ctx = c->ctx;
  int base = ctx->dev;
  for (int k = 0; k < c->call.naxes; k++)
    base -= ctx->coords[c->call.axes[k]] * mesh->strides[c->call.axes[k]];
  return shmap__group_member(mesh, c->call.axes, c->call.naxes, base, r);
}

bool shmap__comm_is_local(const shmap__coll *c, int r)
{
  const shmap__transport *tp = c->comm->tp;
  return !tp->is_local || tp->is_local(c->comm, shmap__comm_member(c, r));
}

/* The device is back in its body (after a call or a failed one). */
static int leave(shmap__coll *c, uint64_t bytes, int rc)
{
  shmap_ctx *ctx = c->ctx;
  shmap__dev *self = &ctx->rt->devs[ctx->dev];
  /* A progress helper leaves the device's state alone: the device runs
   * its body meanwhile (coll/async.c). */
  bool tracing = shmap__tracing();
  uint64_t t1 = tracing ? shmap__now() : shmap__now_coarse();
  if (!shmap__helper_for)
    shmap__set_state(self, SHMAP__ST_BODY, 0, t1);
  if (tracing) {
    /* What a rehearsal prices: the input's bytes, the members data moves
     * among, a ppermute's destination device. */
    uint64_t v = c->esize;
    for (int i = 0; i < c->call.rank; i++)
      v *= (uint64_t)c->call.shape[i];
    shmap__trace_full(self, &(shmap__tev){
        c->t0 < t1 ? c->t0 : t1, t1, c->packed, bytes, c->k, NULL, 0, v,
        c->call.gsize, c->to >= 0 ? shmap__comm_member(c, c->to) : -1});
  }
  return rc;
}

/* Entering a call: the device's state, trace and call number. */
static void enter(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  /* Calls the device started run first (see run_started). */
  run_started(ctx);
  shmap__dev *self = &rt->devs[ctx->dev];
  c->comm = ctx->comm;
  /* The dtype rides in the top byte, for traces. */
  c->packed = shmap__pack_op(c->call.kind, c->call.axes, c->call.naxes) |
              (uint64_t)(c->call.dtype + 1) << 56;
  c->t0 = shmap__now_state();
  if (!shmap__helper_for)
    shmap__set_state(self, SHMAP__ST_COLL, c->packed, c->t0);
  c->k = ++ctx->seq;
  c->err = 0;
}

int shmap__comm_allreduce_small(shmap__coll *c, size_t count,
                                const shmap__fold *fold, size_t off, size_t n,
                                uint64_t bytes)
{
  const shmap__transport *tp = c->ctx->comm->tp;
  size_t es = c->esize > fold->out_esize ? c->esize : fold->out_esize;
  /* Above SHMAP__SMALL_BYTES, the other members' terms together stay
   * within the transport's bound (see small_max_bytes); a product, not a
   * division, on every call. */
  size_t bytes_in = count * es;
  shmap_ctx *ctx = c->ctx;
  if (!tp->allreduce_small || c->n > tp->small_max_n ||
      (fold->own && c->n > tp->small_own_max_n))
    return 1;
  if (bytes_in > SHMAP__SMALL_BYTES &&
      bytes_in * (size_t)(c->n > 2 ? c->n - 1 : 1) > tp->small_max_bytes) {
    /* The transport's answer may read the device's state of earlier
     * calls, which its progress helper may still be making. */
    run_started(ctx);
    c->comm = ctx->comm;
    if (!tp->small_takes ||
        !tp->small_takes(c, fold, count * c->esize * (size_t)c->n,
                         n < count))
      return 1;
  }
  if (atomic_load(&ctx->rt->abort))
    return shmap__canceled(ctx, shmap__coll_opname(c));
  enter(c);
  int rc = tp->allreduce_small(c, count, fold, off, n);
  return leave(c, rc ? 0 : bytes, rc);
}

int shmap__comm_arrive(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  if (atomic_load(&rt->abort))
    return shmap__canceled(ctx, shmap__coll_opname(c));
  enter(c);
  int rc = c->comm->tp->arrive(c);
  return rc ? leave(c, 0, rc) : 0;
}

int shmap__comm_depart(shmap__coll *c, uint64_t bytes)
{
  int rc = c->comm->tp->depart(c);
  rc = c->err ? c->err : rc;
  return leave(c, rc ? 0 : bytes, rc);
}

int shmap__comm_depart_deferred(shmap__coll *c, uint64_t bytes, bool *deferred)
{
  const shmap__transport *tp = c->comm->tp;
  *deferred = tp->depart_deferred != NULL;
  int rc = *deferred ? tp->depart_deferred(c) : tp->depart(c);
  rc = c->err ? c->err : rc;
  return leave(c, rc ? 0 : bytes, rc);
}

void shmap__comm_src_wait(shmap_ctx *ctx, int reader, uint32_t k)
{
  const shmap__transport *tp = ctx->comm ? ctx->comm->tp : NULL;
  if (!tp || !tp->src_wait)
    return;
  /* The wait may sleep on the device's waiter, where its progress helper
   * sleeps while it carries out a started call, and a waiter has one
   * sleeper: the calls the device started finish first. */
  run_started(ctx);
  tp->src_wait(ctx, reader, k);
}
