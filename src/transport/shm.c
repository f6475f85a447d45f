/*
 * shm.c - the shared-memory transport: the devices of a group share an
 * address space, so each reads (and, for allreduce, writes) its peers'
 * buffers directly, one copy, no staging.
 *
 * A call goes:
 *   1. arrive: publish the descriptor (kind, axes, dtype, shape, dims,
 *      pairs, data pointers) in the device's history and wait until every
 *      member of the group has published its own call with the same
 *      number, then compare: any difference is a mismatch that every
 *      member detects alike;
 *   2. move data by reading the peers' buffers directly (get, reduce), or
 *      folding and writing the result into every peer's dst (allreduce);
 *   3. depart: announce that this device is done reading, and wait until
 *      every member is, so no buffer changes while a peer still reads it.
 */
#include "transport/comm.h"

#include "map.h"
#include "runtime/debug.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Call descriptors each device keeps, indexed by call number. */
#define HIST 8
/* Rendezvous slots a group leader keeps, indexed by call number. */
#define SLOTS 16

/* A rendezvous slot a group leader keeps for one call. */
typedef struct bslot {
  alignas(SHMAP__CACHELINE) _Atomic uint64_t word;
  _Atomic uint64_t gkey;
} bslot;

/* What shm keeps per device: written by the device and read by its
 * peers (calls), or shared by a group it leads (slots). */
typedef struct shm_dev {
  alignas(SHMAP__CACHELINE) shmap__call calls[HIST];
  bslot slot[SLOTS];
  int *members; /* scratch: a group's devices in rank order (ndev) */
  const void **srcs; /* scratch: the members' pieces of one fold (ndev) */
} shm_dev;

/* What shm keeps per mesh (rt->tstate). */
typedef struct shm_state {
  shm_dev *devs;
  int dirty; /* the last map failed: slots need a reset */
} shm_state;

/* Per call (in shmap__coll.priv). */
typedef struct shm_call {
  int base;           /* the rank-0 member's device number */
  bool filled;        /* members[] lists the group */
  int *members;       /* device numbers in rank order, once filled */
  const void **srcs;  /* this device's scratch for one fold's sources */
  shmap__dev *devs;
  shm_dev *sdevs;
  bslot *slot;        /* the leader's slot for this call */
  uint64_t gkey;      /* the group's axes, as the leader's slot records them */
  shmap__dev *succ;
} shm_call;

_Static_assert(sizeof(shm_call) <= SHMAP__COLL_PRIV,
               "shm's per-call state must fit in shmap__coll");

static inline shm_call *S(shmap__coll *c) { return (shm_call *)c->priv; }
static inline const shm_call *CS(const shmap__coll *c)
{
  return (const shm_call *)c->priv;
}

/* ---- a map ---------------------------------------------------------------- */

static void shm_destroy(shmap__runtime *rt)
{
  shm_state *st = rt->tstate;
  if (!st)
    return;
  for (int d = 0; d < rt->ndev; d++) {
    free(st->devs[d].members);
    free(st->devs[d].srcs);
  }
  free(st->devs);
  free(st);
  rt->tstate = NULL;
}

static int shm_open(shmap__comm *comm)
{
  shmap__runtime *rt = comm->rt;
  shm_state *st = rt->tstate;
  if (!st) {
    st = shmap__calloc(1, sizeof *st);
    if (!st || !(st->devs = shmap__alloc(sizeof(shm_dev) * (size_t)rt->ndev,
                                         true))) {
      free(st);
      return shmap__err(SHMAP_ENOMEM, "out of memory for %d devices", rt->ndev);
    }
    rt->tstate = st;
    for (int d = 0; d < rt->ndev; d++)
      if (!(st->devs[d].members = shmap__malloc(sizeof(int) * (size_t)rt->ndev)) ||
          !(st->devs[d].srcs =
                shmap__malloc(sizeof(void *) * (size_t)rt->ndev))) {
        shm_destroy(rt);
        return shmap__err(SHMAP_ENOMEM, "out of memory for %d devices",
                          rt->ndev);
      }
  }
  /* Completed calls free their slots; cancelled ones do not. */
  if (st->dirty)
    for (int d = 0; d < rt->ndev; d++)
      for (int i = 0; i < SLOTS; i++)
        atomic_store(&st->devs[d].slot[i].word, 0);
  st->dirty = 0;
  comm->priv = st;
  return 0;
}

static void shm_close(shmap__comm *comm, bool failed)
{
  shm_state *st = comm->priv;
  if (failed)
    st->dirty = 1;
}

static void shm_finish(shmap__comm *comm, int dev)
{
  shmap__runtime *rt = comm->rt;
  atomic_store(&rt->devs[dev].coll.finished, 1);
  /* Any device may be waiting for this one. */
  shmap__wake_all(rt);
}

static void shm_failed(shmap__runtime *rt) { shmap__wake_all(rt); }

/* ---- the group ------------------------------------------------------------ */

/* Device number of the member of rank r (O(number of axes)). */
static int member(const shmap__coll *c, int r)
{
  const shm_call *g = CS(c);
  if (g->filled)
    return g->members[r];
  return shmap__group_member(c->comm->mesh, c->call.axes, c->call.naxes,
                             g->base, r);
}

/* Before touching every member's data: list them all once. */
static void fill_members(shmap__coll *c)
{
  shm_call *g = S(c);
  if (!g->filled) {
    for (int r = 0; r < c->n; r++)
      g->members[r] = member(c, r);
    g->filled = true;
  }
}

/* Member r's call, with its data pointers. */
static const shmap__call *peer(const shmap__coll *c, int r)
{
  const shm_call *g = CS(c);
  return &g->sdevs[member(c, r)].calls[c->k % HIST];
}

/* Wake every member that may wait on this group's slot. */
static void wake_members(shmap__runtime *rt, const shmap__coll *c)
{
  if (rt->workers) {
    shmap__wake_all(rt);
    return;
  }
  const shm_call *g = CS(c);
  for (int i = 0; i < c->n; i++)
    if (i != c->rank)
      shmap__dev_wake(&g->devs[member(c, i)]);
}

/* ---- arrive and depart ------------------------------------------------- */

/*
 * Two mechanisms keep each call O(1) per member, whatever the group size:
 *
 * Agreement.  Each member compares its call with its successor's (rank + 1
 * around the group).  If every member agrees with its successor, then by
 * induction around each ring every member of every group makes the same
 * call; if any two disagree, some member sees its successor disagree (or
 * leave its body, or pass the call with another group) and fails the map.
 *
 * Rendezvous.  The group's rank-0 member (its leader) keeps a slot per call
 * number (mod SLOTS).  One word holds the call number, a cancelled bit and
 * how many arrivals plus departures are still due (2n at first).  Arriving
 * and cancelling are both compare-and-swaps on that word, so either every
 * member sees the arrivals complete or every member sees the call
 * cancelled: never a mix, which would leave someone waiting for a
 * departure that never comes.
 */
#define TAG(w) ((uint32_t)((w) >> 32))
#define CANCELED ((uint64_t)1 << 31)
#define LEFT(w) ((uint32_t)((w) & (CANCELED - 1)))
#define CLAIMING ((uint64_t)1) /* tag 0 (no call has number 0), left 1 */

static bool succ_arrived(void *arg)
{
  const shmap__coll *c = arg;
  const shmap__dev *succ = CS(c)->succ;
  return atomic_load(&succ->coll.arrive) >= c->k ||
         atomic_load(&succ->coll.finished);
}

static bool slot_changed(void *arg)
{
  const shmap__coll *c = arg;
  uint64_t w = atomic_load(&CS(c)->slot->word);
  return w == 0 || TAG(w) == c->k;
}

static bool arrivals_done(void *arg)
{
  const shmap__coll *c = arg;
  uint64_t w = atomic_load(&CS(c)->slot->word);
  return (w & CANCELED) || LEFT(w) <= (uint32_t)c->n;
}

static bool departures_done(void *arg)
{
  const shmap__coll *c = arg;
  return TAG(atomic_load(&CS(c)->slot->word)) != c->k;
}

/* Whether device m made the same call k as this device: if not, the
 * message in `why`. */
static bool member_agrees(const shmap__coll *c, int m, char *why, size_t n)
{
  const shm_call *g = CS(c);
  uint32_t a = atomic_load(&g->devs[m].coll.arrive);
  const shmap__call *theirs = &g->sdevs[m].calls[c->k % HIST];
  if (a == c->k && shmap__call_equal(&c->call, theirs))
    return true;
  /* They disagree: only now is it worth describing both. */
  bool known = a >= c->k && a - c->k < HIST;
  shmap__call_mismatch(c->comm->mesh, c->ctx->dev, &c->call, m,
                       known ? theirs : NULL, c->k, a, why, n);
  return false;
}

/* Join the leader's slot for call k.  0, or an error code. */
static int join(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[ctx->dev];
  shm_call *g = S(c);
  bslot *slot = g->slot;
  uint32_t n = (uint32_t)c->n;
  for (;;) {
    uint64_t w = atomic_load(&slot->word);
    if (TAG(w) == c->k) {
      if (w & CANCELED)
        return shmap__canceled(ctx, shmap__coll_opname(c));
      if (atomic_load(&slot->gkey) != g->gkey)
        return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH,
                               "collective call #%u differs between devices: "
                               "another group led by device %d makes the same "
                               "call over different axes",
                               c->k, g->base);
      if (atomic_compare_exchange_weak(&slot->word, &w, w - 1)) {
        if (LEFT(w) - 1 == n)
          wake_members(rt, c); /* the last arrival */
        return 0;
      }
    } else if (w == 0) {
      /* Claim the free slot, describe the group, then open it. */
      if (atomic_compare_exchange_weak(&slot->word, &w, CLAIMING)) {
        atomic_store(&slot->gkey, g->gkey);
        atomic_store(&slot->word, (uint64_t)c->k << 32 | (2 * n - 1));
        wake_members(rt, c);
        return 0;
      }
    } else if (w != CLAIMING) {
      /* An earlier call still holds the slot: wait for it to leave. */
      if (!shmap__dev_wait(rt, self, slot_changed, c, &rt->abort))
        return shmap__canceled(ctx, shmap__coll_opname(c));
    }
  }
}

static int shm_arrive(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  shmap__dev *self = &rt->devs[ctx->dev];
  shm_call *g = S(c);
  g->devs = rt->devs;
  g->sdevs = st->devs;
  g->members = st->devs[ctx->dev].members;
  g->srcs = st->devs[ctx->dev].srcs;
  g->filled = false;
  g->base = ctx->dev;
  for (int i = 0; i < c->call.naxes; i++) {
    int a = c->call.axes[i];
    g->base -= ctx->coords[a] * rt->mesh->strides[a];
  }
  st->devs[ctx->dev].calls[c->k % HIST] = c->call;
  atomic_store(&self->coll.arrive, c->k);
  if (c->n == 1)
    return 0;
  /* The predecessor may be waiting to compare its call with ours. */
  shmap__dev_wake(&rt->devs[member(c, (c->rank + c->n - 1) % c->n)]);
  g->succ = &rt->devs[member(c, (c->rank + 1) % c->n)];
  if (!shmap__dev_wait_on(rt, self, g->succ, succ_arrived, c, &rt->abort))
    return shmap__canceled(ctx, shmap__coll_opname(c));
  char why[SHMAP__MSG_MAX - 200];
  if (!member_agrees(c, (int)(g->succ - rt->devs), why, sizeof why)) {
    /* A successor that left because the map already failed is a
     * consequence, not a second cause. */
    if (atomic_load(&rt->abort))
      return shmap__canceled(ctx, shmap__coll_opname(c));
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH, "%s",
                           why);
  }
  g->slot = &st->devs[g->base].slot[c->k % SLOTS];
  g->gkey = c->packed >> 8 & (((uint64_t)1 << 36) - 1); /* axes, count */
  int rc = join(c);
  if (rc)
    return rc;
  for (;;) {
    if (shmap__dev_wait(rt, self, arrivals_done, c, &rt->abort)) {
      if (atomic_load(&g->slot->word) & CANCELED)
        return shmap__canceled(ctx, shmap__coll_opname(c));
      return 0;
    }
    /* The map failed while we wait: cancel the call for all members,
     * unless the last arrival got there first. */
    uint64_t w = atomic_load(&g->slot->word);
    if (!(w & CANCELED) && LEFT(w) > (uint32_t)c->n &&
        !atomic_compare_exchange_strong(&g->slot->word, &w, w | CANCELED))
      continue;
    if (w & CANCELED || LEFT(w) > (uint32_t)c->n) {
      wake_members(rt, c);
      return shmap__canceled(ctx, shmap__coll_opname(c));
    }
  }
}

/* No abort here: every member that got through arrive() moves data without
 * waiting for anything, so departures always come; leaving early would let
 * a buffer change while a peer still reads it. */
static int shm_depart(shmap__coll *c)
{
  if (c->n > 1) {
    shmap__runtime *rt = c->ctx->rt;
    bslot *slot = S(c)->slot;
    uint64_t w = atomic_fetch_sub(&slot->word, 1);
    if (LEFT(w) == 1) {
      atomic_store(&slot->word, 0); /* free the slot for a later call */
      wake_members(rt, c);
    } else {
      shmap__dev_wait(rt, &rt->devs[c->ctx->dev], departures_done, c, NULL);
    }
  }
  return 0;
}

/* ---- data -------------------------------------------------------------- */

/* Bytes of the stack buffer allreduce folds one piece into. */
#define PIECE_BYTES 8192

static void shm_get(shmap__coll *c, int r, const shmap__box *from, void *to,
                    const int64_t to_strides[])
{
  shmap__copy_box(to, to_strides, (const char *)peer(c, r)->src + from->off,
                  from->strides, from->rank, from->shape, c->esize);
}

/* The members' terms are folded in one pass by the fused kernel (every
 * member's piece at once, partial results in registers), straight into
 * acc. */
static void shm_reduce(shmap__coll *c, size_t off, size_t count,
                       const shmap__fold *fold, void *acc)
{
  fill_members(c);
  const void **srcs = S(c)->srcs;
  size_t es = c->esize;
  for (int r = 0; r < c->n; r++)
    srcs[r] = (const char *)peer(c, r)->src + off * es;
  fold->fn(acc, srcs, c->n, count, fold->count);
}

/* Fold one piece at a time into a buffer that stays in cache, then write
 * it to every member. */
static void shm_allreduce(shmap__coll *c, size_t off, size_t count,
                          const shmap__fold *fold)
{
  fill_members(c);
  const void **srcs = S(c)->srcs;
  size_t es = c->esize, des = fold->out_esize;
  size_t piece = PIECE_BYTES / (es > des ? es : des);
  _Alignas(64) unsigned char tmp[PIECE_BYTES];
  for (size_t o = off; o < off + count; o += piece) {
    size_t len = off + count - o < piece ? off + count - o : piece;
    for (int r = 0; r < c->n; r++)
      srcs[r] = (const char *)peer(c, r)->src + o * es;
    fold->fn(tmp, srcs, c->n, len, fold->count);
    for (int r = 0; r < c->n; r++)
      memcpy((char *)peer(c, r)->dst + o * des, tmp, len * des);
  }
}

const shmap__transport shmap__shm_transport = {
    .name = "shm",
    .open = shm_open,
    .close = shm_close,
    .destroy = shm_destroy,
    .is_local = NULL,
    .finish = shm_finish,
    .failed = shm_failed,
    .arrive = shm_arrive,
    .get = shm_get,
    .reduce = shm_reduce,
    .allreduce = shm_allreduce,
    .send = NULL,
    .recv = NULL,
    .depart = shm_depart,
};
