/* SPDX-License-Identifier: MIT */
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
 *
 * ppermute skips step 3 ("Readers" below): each buffer has one reader,
 * whose completion the owner waits for only when it next writes or frees
 * that buffer; in a loop of in-place calls it skips step 2 as well, each
 * member taking its source's buffer ("Handover").  Small reductions take
 * one step ("Small reductions", "Large groups"), in two levels when a
 * large group spreads over several workers ("Two levels").
 */
#include "transport/comm.h"
#include "hash.h"

#include "device/device.h"
#include "sched/trace.h"

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

/* A small reduction's publication (see "Small reductions"): the call
 * number and a hash of the call in one word, then the device's terms,
 * starting on the same cache line. */
typedef struct sbox {
  alignas(SHMAP__CACHELINE) _Atomic uint64_t word;
  unsigned char data[SHMAP__SMALL_BYTES];
} sbox;

/* The group a box was last published to (the owner's own notes). */
typedef struct sgroup {
  uint32_t k; /* 0: none yet in this map */
  int naxes, base, n;
  int axes[SHMAP_MAX_AXES];
  bool chained; /* a result box last written by a sub-leader (Two levels) */
} sgroup;

/* A device's place in a group whose members run on several workers (see
 * "Two levels"): computed once per group and kept. */
typedef struct wchain {
  sgroup key;      /* the group (k 1 once computed) */
  int lo, hi;      /* the ranks on this device's worker */
  int sub;         /* devices: the sub-leader of this worker's ranks, */
  int prev;        /* that of the ranks before them (-1: none), */
  int last;        /* and that of the group's last ranks */
} wchain;

/* What shm keeps per device: written by the device and read by its
 * peers (calls), or shared by a group it leads (slots). */
typedef struct shm_dev {
  alignas(SHMAP__CACHELINE) shmap__call calls[HIST];
  bslot slot[SLOTS];
  int *members; /* scratch: a group's devices in rank order (ndev) */
  const void **srcs; /* scratch: the members' pieces of one fold (ndev) */
  /* Who waits for this device's next arrival, written by peers (see
   * "Waking" below). */
  alignas(SHMAP__CACHELINE) _Atomic uint32_t watch;
  /* How many calls the device has left (completed, or failed out of), and
   * who waits for that (see "Pairs" below). */
  alignas(SHMAP__CACHELINE) _Atomic uint32_t left;
  _Atomic uint32_t lwatch;
  /* Small reductions, by the parity of the call number: the device's
   * terms, and (as a group's rank 0 in a large group) the result. */
  sbox box[2];
  sgroup boxg[2];
  sbox res[2];
  sgroup resg[2];
  /* The last small reduction whose every member this device saw publish
   * it (so every member had left its earlier calls). */
  sgroup done;
  wchain chain;
  /* Descriptors a ppermute's members may still read (see "Readers"):
   * bit i set when calls[i] is one, histg[i] its group and call. */
  unsigned hist_readers;
  sgroup histg[HIST];
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
  uint64_t gkey;      /* kind, axes and claimer, as the leader's slot has it */
  shmap__dev *succ;
  shm_dev *ssucc;     /* the successor's shm state (its watch word) */
  uint32_t me;        /* this device's number + 1, for watch words */
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
  for (int d = 0; d < rt->ndev; d++) {
    shm_dev *sd = &st->devs[d];
    atomic_store_explicit(&sd->left, 0, memory_order_relaxed);
    for (int i = 0; i < 2; i++) {
      atomic_store_explicit(&sd->box[i].word, 0, memory_order_relaxed);
      sd->boxg[i].k = 0;
      atomic_store_explicit(&sd->res[i].word, 0, memory_order_relaxed);
      sd->resg[i].k = 0;
    }
    sd->done.k = 0;
    sd->hist_readers = 0;
    for (int i = 0; i < HIST; i++)
      sd->histg[i].k = 0;
  }
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
static int member_of(const void *c, int r) { return member(c, r); }
static void wake_members(shmap__runtime *rt, const shmap__coll *c)
{
  shmap__wake_group(rt, c->n, c->rank, member_of, c);
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
 *
 * Waking.  A device that waits for its successor writes its number into
 * the successor's watch word first, and every device, on arriving, wakes
 * whoever its watch word names (or everyone, when two devices asked at
 * once).  Waking the predecessor in one's own group would not do: when
 * two devices disagree on the call's axes, the device waiting for us is in
 * another group.  Likewise a call waiting for a slot an earlier call still
 * holds marks the slot, so that its last departure wakes everyone: the
 * earlier call may be another group's.  And a member waiting for the last
 * departures must not take a slot claimed again for the same call number
 * (by a group that disagrees on the axes) for its own call still running.
 *
 * Why a mismatch never hangs, whatever the call sequences.  Let k be the
 * first call number at which some device's call differs from one of its
 * group's (or which a member never makes).  Every call before k is the
 * same on all members of its group, so each completes: its members all
 * arrive (their own earlier calls completed), and a departure waits only
 * for members that arrived.  So every device publishes call k or ends its
 * body, and every device waiting at k for its successor is woken (watch
 * word) and compares.  If every comparison succeeded, every member of
 * every group would make its successor's call, hence, around the ring,
 * every other member's: no call k would differ.  So some device reports
 * SHMAP_EMISMATCH naming its call and its successor's; that sets the
 * map's abort flag, which ends every other wait (for a successor, a slot
 * or arrivals).  The cost per call stays O(1): one load of the watch word
 * on arrival, and one store into the successor's before waiting.
 */
#define TAG(w) ((uint32_t)((w) >> 32))
#define CANCELED ((uint64_t)1 << 31)
#define WAITED ((uint64_t)1 << 30) /* a later call waits for this slot */
#define LEFT(w) ((uint32_t)((w) & (WAITED - 1)))
#define CLAIMING ((uint64_t)1) /* tag 0 (no call has number 0), left 1 */
/* Watch word: the number + 1 of the device waiting for the owner's next
 * arrival, and a bit for "more than one: wake everyone". */
#define WATCH_MANY ((uint32_t)1 << 31)
/* The part of a slot's group key that names the call (kind and axes); the
 * bits above hold the device that claimed the slot. */
#define KEY_CALL (((uint64_t)1 << 48) - 1)

/* Ask the owner of watch word w to wake device me - 1 at its next
 * arrival (or departure, for lwatch). */
static void watch_word(_Atomic uint32_t *w, uint32_t me)
{
  /* Every caller is a wait's condition, which looks again after this:
   * only a look made before sleeping needs to register, not every look
   * of a spin (which would pull the owner's line over on each call). */
  if (!shmap__may_sleep)
    return;
  uint32_t cur = atomic_load(w);
  if (cur == me || (cur & WATCH_MANY))
    return;
  if (cur == 0 && atomic_compare_exchange_strong(w, &cur, me))
    return;
  if (cur != me)
    atomic_fetch_or(w, WATCH_MANY);
}

/* Ask the successor to wake this device at its next arrival. */
static void watch_succ(const shm_call *g) { watch_word(&g->ssucc->watch, g->me); }

/* Wake whoever watch word w names.  Cleared each time, a registration
 * lasts one wake; a waiter whose condition still fails registers again
 * before it sleeps (see succ_arrived).  Whether it woke every sleeping
 * device (the word said "many"). */
static bool wake_word(shmap__runtime *rt, _Atomic uint32_t *word)
{
  if (!atomic_load(word))
    return false;
  uint32_t w = atomic_exchange(word, 0);
  if (w & WATCH_MANY) {
    shmap__wake_all(rt);
    return true;
  }
  if (w)
    shmap__dev_wake(&rt->devs[w - 1]);
  return false;
}

/* This device has arrived: wake whoever waits for it; whether that woke
 * every sleeping device. */
static bool wake_watchers(shmap__runtime *rt, shm_dev *self)
{
  return wake_word(rt, &self->watch);
}

static bool succ_arrived(void *arg)
{
  const shmap__coll *c = arg;
  const shmap__dev *succ = CS(c)->succ;
  if (atomic_load(&succ->coll.arrive) >= c->k ||
      atomic_load(&succ->coll.finished))
    return true;
  /* The wait loops call this after announcing that they may sleep:
   * register, then look again (the successor stores its arrival, then
   * reads the watch word; one of the two sees the other). */
  watch_succ(CS(c));
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
  if (TAG(atomic_load(&CS(c)->slot->word)) != c->k)
    return true;
  /* The slot may have been freed and claimed again for the same call
   * number by another group with this leader (devices that disagree on
   * the axes): then our call is over too.  The claimer writes its key
   * before the tag, and no other group makes our call over our axes. */
  return ((atomic_load(&CS(c)->slot->gkey) ^ CS(c)->gkey) & KEY_CALL) != 0;
}

/* Whether device m made the same call k as this device: if not, the
 * message in `why`. */
static bool member_agrees(const shmap__coll *c, int m, char *why, size_t n)
{
  const shm_call *g = CS(c);
  uint32_t a = atomic_load(&g->devs[m].coll.arrive);
  /* A small call publishes its box (after its descriptor) before its
   * arrival: a member whose box shows call k made it, even when its
   * arrival still reads k - 1 here (it then looked as if it had returned
   * from its body). */
  if (a < c->k &&
      TAG(atomic_load_explicit(&g->sdevs[m].box[c->k & 1].word,
                               memory_order_acquire)) == c->k)
    a = c->k;
  const shmap__call *theirs = &g->sdevs[m].calls[c->k % HIST];
  if (a == c->k && shmap__call_equal(&c->call, theirs))
    return true;
  /* They disagree: only now is it worth describing both. */
  bool known = a >= c->k && a - c->k < HIST;
  shmap__call_mismatch(c->comm->mesh, c->ctx->dev, &c->call, m,
                       known ? theirs : NULL, c->k, a, why, n);
  return false;
}

/* Two groups with the same leader make call k: the slot's key says what
 * the device that claimed it calls (kind and axes). */
static int key_mismatch(shmap__coll *c, uint64_t key)
{
  shmap_ctx *ctx = c->ctx;
  const shmap_mesh *mesh = c->comm->mesh;
  int other = (int)(key >> 48);
  int axes[SHMAP_MAX_AXES] = {0}, naxes = (int)(key >> 8 & 0xf);
  for (int k = 0; k < naxes && k < SHMAP_MAX_AXES; k++)
    axes[k] = (int)(key >> (12 + 4 * k) & 0xf);
  char me[96], them[96], cm[256], ax[320];
  shmap__mesh_devname(mesh, ctx->dev, me, sizeof me);
  shmap__mesh_devname(mesh, other, them, sizeof them);
  shmap__call_format(mesh, &c->call, cm, sizeof cm);
  shmap__axes_format(mesh, axes, naxes, ax, sizeof ax);
  return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH,
                         "collective call #%u differs between devices: %s "
                         "called %s but %s called %s over %s",
                         c->k, me, cm, them,
                         shmap__kind_name((int)(key & 0xff)),
                         naxes ? ax : "()");
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
  for (unsigned looks = 0;; looks++) {
    uint64_t w = atomic_load(&slot->word);
    if (TAG(w) == c->k) {
      if (w & CANCELED)
        return shmap__canceled(ctx, shmap__coll_opname(c));
      uint64_t key = atomic_load(&slot->gkey);
      if ((key ^ g->gkey) & KEY_CALL)
        return key_mismatch(c, key);
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
    } else if (w == CLAIMING) {
      /* Another member is describing the group: two stores away. */
      shmap__backoff(looks);
    } else {
      /* An earlier call still holds the slot: wait for it to leave.  Its
       * members may be another group's, which would not wake us: mark the
       * slot so that its last departure wakes everyone. */
      if (!(w & WAITED) &&
          !atomic_compare_exchange_weak(&slot->word, &w, w | WAITED))
        continue;
      if (!shmap__dev_wait(rt, self, slot_changed, c, &rt->abort))
        return shmap__canceled(ctx, shmap__coll_opname(c));
    }
  }
}

/* Wait until device m has published call k (or left its body), then
 * compare its call with ours.  0, or the error code. */
static int agree_with(shmap__coll *c, int m)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_call *g = S(c);
  g->succ = &rt->devs[m];
  g->ssucc = &g->sdevs[m];
  if (!shmap__dev_wait_on(rt, &rt->devs[ctx->dev], g->succ, succ_arrived, c,
                          &rt->abort))
    return shmap__canceled(ctx, shmap__coll_opname(c));
  char why[SHMAP__MSG_MAX - 200];
  if (!member_agrees(c, m, why, sizeof why)) {
    /* A member that left because the map already failed is a
     * consequence, not a second cause. */
    if (atomic_load(&rt->abort))
      return shmap__canceled(ctx, shmap__coll_opname(c));
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH, "%s",
                           why);
  }
  return 0;
}

/* The group-wide protocol (every collective but ppermute), after the
 * descriptor is published. */
static void group_done(shmap__coll *c);
static void hist_take(shmap__coll *c, shm_dev *sd, bool readers);

static int slot_arrive(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  shmap__dev *self = &rt->devs[ctx->dev];
  shm_call *g = S(c);
  if (c->n == 1)
    return 0;
  int rc = agree_with(c, member(c, (c->rank + 1) % c->n));
  if (rc)
    return rc;
  g->slot = &st->devs[g->base].slot[c->k % SLOTS];
  /* Kind and axes name the call; the dtype (top byte of packed) is left
   * out, and the claimer goes above them. */
  g->gkey = (c->packed & KEY_CALL) | (uint64_t)ctx->dev << 48;
  rc = join(c);
  if (rc)
    return rc;
  for (;;) {
    if (shmap__dev_wait(rt, self, arrivals_done, c, &rt->abort)) {
      if (atomic_load(&g->slot->word) & CANCELED)
        return shmap__canceled(ctx, shmap__coll_opname(c));
      group_done(c); /* every member arrived: it left its earlier calls */
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

/*
 * Readers.  A ppermute member's buffer is read by one peer (rank c->to),
 * so the call needs no departure rendezvous: after the arrivals (which
 * give every member the same verdict, as for any call) each member copies
 * its piece, counts its departure in the slot without waiting for the
 * others', and records in `left` that it left call k.  depart then waits
 * only until its reader left call k; depart_deferred does not wait at
 * all, and the owner of the buffer waits (src_wait) before it next writes
 * or frees it -- by then, in a loop of calls, the reader long finished.
 *
 * This cannot hang: a reader has passed the arrivals, so it moves its
 * data and leaves without waiting for anything.  Without the departure
 * rendezvous the members of this group stay within one call of each other
 * in this group's calls, since the arrivals of its next call wait for
 * every member; slots (SLOTS) outlast that.  But a member may go on with
 * calls over other groups, which do not wait for this one's readers, and
 * its descriptor of call k (read by its reader for the source, and by
 * every member of its cycle for the handover) is rewritten at call
 * k + HIST.  So before rewriting a ppermute's descriptor a device waits
 * until every member of its group left that call (hist_take), as for a
 * box: nothing to wait for when it has seen every member arrive at a
 * later call of the group, as in a loop of ppermutes.
 */
typedef struct leftw {
  const shmap__dev *d;
  shm_dev *sd;
  uint32_t k, me;
} leftw;

static bool has_left(void *arg)
{
  const leftw *w = arg;
  if (atomic_load(&w->sd->left) >= w->k || atomic_load(&w->d->coll.finished))
    return true;
  watch_word(&w->sd->lwatch, w->me); /* then look again, as succ_arrived */
  return atomic_load(&w->sd->left) >= w->k ||
         atomic_load(&w->d->coll.finished);
}

/* Wait (as device `self`) until device m left its call k or its body. */
static void wait_left(shmap__runtime *rt, int self, int m, uint32_t k)
{
  shm_state *st = rt->tstate;
  leftw w = {&rt->devs[m], &st->devs[m], k, (uint32_t)self + 1};
  if (!has_left(&w))
    shmap__dev_wait_on(rt, &rt->devs[self], w.d, has_left, &w, NULL);
}

/* This device left its call k: publish it (the store orders its reads of
 * the peers' buffers before it), and wake whoever waits for it. */
static void left_call(shmap__runtime *rt, shm_dev *sd, uint32_t k)
{
  shmap__publish(rt, &sd->left, k);
  wake_word(rt, &sd->lwatch);
}

/* The call's per-device state, before its arrival is published: the
 * member tables and the base device of the caller's group. */
static shm_call *call_begin(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  shm_dev *sd = &st->devs[ctx->dev];
  shm_call *g = S(c);
  g->devs = rt->devs;
  g->sdevs = st->devs;
  g->members = sd->members;
  g->srcs = sd->srcs;
  g->filled = false;
  g->me = (uint32_t)ctx->dev + 1;
  g->base = ctx->dev;
  for (int i = 0; i < c->call.naxes; i++) {
    int a = c->call.axes[i];
    g->base -= ctx->coords[a] * rt->mesh->strides[a];
  }
  return g;
}

static int shm_arrive(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  shmap__dev *self = &rt->devs[ctx->dev];
  shm_dev *sd = &st->devs[ctx->dev];
  call_begin(c);
  hist_take(c, sd, c->one_reader);
  shmap__call_copy(&sd->calls[c->k % HIST], &c->call);
  shmap__publish(rt, &self->coll.arrive, c->k);
  /* Whoever waits to compare its call with ours (even for a group of one:
   * a device of another group may count us in its own). */
  wake_watchers(rt, sd);
  int rc = slot_arrive(c);
  if (rc)
    left_call(rt, sd, c->k);
  return rc;
}

/* No abort here: every member that got through arrive() moves data without
 * waiting for anything, so departures always come; leaving early would let
 * a buffer change while a peer still reads it. */
/* Count this device's departure in the slot; the last one frees it.
 * Whether others are still due. */
static bool slot_depart(shmap__coll *c)
{
  shmap__runtime *rt = c->ctx->rt;
  bslot *slot = S(c)->slot;
  uint64_t w = atomic_fetch_sub(&slot->word, 1);
  if (LEFT(w) != 1)
    return true;
  atomic_store(&slot->word, 0); /* free the slot for a later call */
  if (w & WAITED)
    shmap__wake_all(rt);
  else if (!c->one_reader)
    wake_members(rt, c); /* one reader's members do not wait for it */
  return false;
}

/* ppermute (see "Readers"). */
static int shm_depart_deferred(shmap__coll *c)
{
  shm_state *st = c->comm->priv;
  if (c->n > 1)
    slot_depart(c);
  left_call(c->ctx->rt, &st->devs[c->ctx->dev], c->k);
  return 0;
}

/*
 * Handover.  A ppermute loop on arena blocks copies every block once per
 * call, and the copy reads lines the source device just wrote, from its
 * core's cache: the slowest copy there is.  Instead, when every member
 * of this member's cycle of the permutation published `hand` (its data
 * is in a room that may pass to another block, and it takes its
 * source's), each member takes its source's room as is, and nothing is
 * copied.  The cycle is the same for all its members and each walks all
 * of it, so all decide alike, and every room passes to exactly the
 * member that takes it.  Nobody reads another's buffer, so there is no
 * reader to wait for either.  The walk reads one descriptor per member
 * of the cycle, so it stops (and the members copy) when the cycle is
 * longer than the copy is worth: a bound every member computes alike.
 */
static const void *shm_handover(shmap__coll *c)
{
  size_t bytes = c->esize * (size_t)shmap__numel(c->call.rank, c->call.shape);
  size_t limit = 8 + bytes / 2048; /* members of the cycle */
  int r = c->call.hand - 1;
  for (size_t len = 1; r != c->rank;) {
    if (++len > limit)
      return NULL;
    int h = peer(c, r)->hand;
    if (!h)
      return NULL;
    r = h - 1;
  }
  return peer(c, c->call.hand - 1)->src;
}

static void shm_src_wait(shmap_ctx *ctx, int reader, uint32_t k)
{
  wait_left(ctx->rt, ctx->dev, reader, k);
}

static int shm_depart(shmap__coll *c)
{
  if (c->one_reader) {
    shm_depart_deferred(c);
    if (c->n > 1 && c->to >= 0 && c->to != c->rank)
      wait_left(c->ctx->rt, c->ctx->dev, member(c, c->to), c->k);
    return 0;
  }
  if (c->n > 1 && slot_depart(c))
    shmap__dev_wait(c->ctx->rt, &c->ctx->rt->devs[c->ctx->dev],
                    departures_done, c, NULL);
  shm_state *st = c->comm->priv;
  left_call(c->ctx->rt, &st->devs[c->ctx->dev], c->k);
  return 0;
}

/*
 * Small reductions.  A psum of a few floats is all latency: the group-wide
 * protocol costs several dependent round trips between cores (successor,
 * slot, departures).  Here each member writes its terms into a box of its
 * own, then one word holding the call number and a hash of the call (a
 * release store); waits until every member's word shows call k (acquire
 * loads); and folds every member's terms in rank order itself, into its
 * own dst (only its own run of them for psum_scatter; all_gather's "fold"
 * concatenates).  One round trip, no atomic read-modify-write, and the
 * result is the serial left fold bit for bit, like every fold.  Groups of
 * more than SMALL_ALL members take the leader's path ("Large groups").
 *
 * Agreement.  Each member compares every member's hash with its own;
 * only when one differs (or a member published call k by another protocol,
 * or left its body) does it compare the full descriptors, which gives the
 * mismatch message of any other call.  A difference anywhere in the group
 * is seen by every member, so all reach the same verdict.
 *
 * Reuse.  Boxes alternate by the parity of the call number.  A member at
 * call k + 1 has finished reading every box of call k, but a box of call
 * k - 2 may have been read by a group this device has not met since (the
 * calls in between can be over other axes).  So before writing its box
 * for call k the device waits until every member of the group it last
 * published that box to has left that call: in a loop of calls, they
 * long have.
 */
/* Every field shmap__call_equal compares goes in, so that two calls whose
 * hashes agree differ only by a collision. */
static uint32_t call_hash(const shmap__call *a)
{
  uint64_t h = shmap__hash_init();
#define MIX(v) (h = shmap__hash_u64(h, (uint64_t)(v)))
  MIX(a->kind);
  MIX(a->naxes);
  for (int i = 0; i < a->naxes; i++)
    MIX(a->axes[i]);
  MIX(a->dtype);
  MIX(a->rank);
  for (int i = 0; i < a->rank; i++)
    MIX(a->shape[i]);
  MIX(a->p1);
  MIX(a->p2);
  MIX(a->tiled);
  MIX(a->npairs);
  MIX(a->pairs_hash);
  MIX(a->gsize);
  MIX(a->ngroups);
  MIX(a->groups_hash);
  MIX(a->source);
  MIX(a->op_hash);
#undef MIX
  return (uint32_t)(h ^ h >> 32);
}

typedef struct swait {
  shmap__coll *c;
  int next; /* members before this rank have published */
  int end;  /* ... and those from this rank on are not waited for */
} swait;

/* Whether member m has published call k: in its box, by another
 * protocol, or left its body. */
static bool box_ready(const shmap__coll *c, int m)
{
  const shm_call *g = CS(c);
  uint64_t w = atomic_load(&g->sdevs[m].box[c->k & 1].word);
  return (uint32_t)(w >> 32) == c->k ||
         atomic_load(&g->devs[m].coll.arrive) >= c->k ||
         atomic_load(&g->devs[m].coll.finished);
}

static bool boxes_ready(void *arg)
{
  swait *sw = arg;
  shmap__coll *c = sw->c;
  shm_call *g = S(c);
  for (; sw->next < sw->end; sw->next++) {
    if (sw->next == c->rank)
      continue;
    int m = g->members[sw->next];
    if (box_ready(c, m))
      continue;
    watch_word(&g->sdevs[m].watch, g->me); /* then look again */
    if (!box_ready(c, m))
      return false;
  }
  return true;
}

/* Wait until every member of the group a box (or result) was last
 * published to has left that call, then note the group it goes to now:
 * `readers` false when only this call's group rank 0 reads it and has
 * finished when this device leaves the call (nothing to wait for next
 * time). */
static bool same_group(const sgroup *a, const sgroup *b)
{
  return a->n == b->n && a->base == b->base && a->naxes == b->naxes &&
         memcmp(a->axes, b->axes, sizeof(int) * (size_t)a->naxes) == 0;
}

/* Every member published call k of this group: remember it. */
static void group_done(shmap__coll *c)
{
  shm_state *st = c->comm->priv;
  sgroup *d = &st->devs[c->ctx->dev].done;
  d->k = c->k;
  d->naxes = c->call.naxes;
  memcpy(d->axes, c->call.axes, sizeof d->axes);
  d->base = CS(c)->base;
  d->n = c->n;
}

static void box_reuse(shmap__coll *c, sgroup *bg, bool readers)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  const sgroup *done = &st->devs[ctx->dev].done;
  /* In a loop over one group nothing is waited for: every member
   * published a later call of the group, so it left that one. */
  if (bg->k && !(done->k > bg->k && same_group(done, bg)))
    for (int r = 0; r < bg->n; r++) {
      int m = shmap__group_member(rt->mesh, bg->axes, bg->naxes, bg->base, r);
      if (m != ctx->dev)
        wait_left(rt, ctx->dev, m, bg->k);
    }
  bg->k = readers ? c->k : 0;
  bg->naxes = c->call.naxes;
  memcpy(bg->axes, c->call.axes, sizeof bg->axes);
  bg->base = CS(c)->base;
  bg->n = c->n;
}

/* Before writing this device's descriptor of call k: wait for the
 * readers of the ppermute it may hold (see "Readers"), and note whether
 * this call has `readers` after it leaves. */
static void hist_take(shmap__coll *c, shm_dev *sd, bool readers)
{
  unsigned i = c->k % HIST, bit = 1u << i;
  if (!readers && !(sd->hist_readers & bit))
    return;
  box_reuse(c, &sd->histg[i], readers);
  sd->hist_readers = readers ? sd->hist_readers | bit
                             : sd->hist_readers & ~bit;
}

/* Publish this device's terms and call k in its box; the call's hash.
 * With `wake` false the caller wakes those who wait for its arrival
 * itself, later (see "Late wake-up"). */
static uint32_t box_publish_as(shmap__coll *c, size_t count, bool readers,
                               bool wake)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  shm_dev *sd = &st->devs[ctx->dev];
  sbox *box = &sd->box[c->k & 1];
  box_reuse(c, &sd->boxg[c->k & 1], readers);
  shmap__copy(box->data, c->call.src, count * c->esize);
  hist_take(c, sd, false);
  shmap__call_copy(&sd->calls[c->k % HIST], &c->call);
  uint32_t hash = call_hash(&c->call);
  atomic_store_explicit(&box->word, (uint64_t)c->k << 32 | hash,
                        memory_order_release);
  shmap__publish(rt, &rt->devs[ctx->dev].coll.arrive, c->k);
  if (wake)
    wake_watchers(rt, sd);
  return hash;
}

static uint32_t box_publish(shmap__coll *c, size_t count, bool readers)
{
  return box_publish_as(c, count, readers, true);
}

/* Report a mismatch described in `why` (or the abort that came first). */
static int mismatch(shmap__coll *c, const char *why)
{
  shmap_ctx *ctx = c->ctx;
  if (atomic_load(&ctx->rt->abort))
    return shmap__canceled(ctx, shmap__coll_opname(c));
  return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH, "%s",
                         why);
}

/* Report how device m's call k differs from ours (canceled when it turns
 * out not to). */
static int differs_from(shmap__coll *c, int m)
{
  char why[SHMAP__MSG_MAX - 200];
  if (member_agrees(c, m, why, sizeof why))
    return shmap__canceled(c->ctx, shmap__coll_opname(c));
  return mismatch(c, why);
}

/* Once every member of ranks [lo, hi) published call k somehow
 * (boxes_ready; members[] lists them): compare each one's hash with ours,
 * and the full calls where one differs.  0, or the mismatch reported. */
static int boxes_agree_run(shmap__coll *c, uint32_t hash, int lo, int hi)
{
  shm_state *st = c->comm->priv;
  shm_call *g = S(c);
  for (int r = lo; r < hi; r++) {
    int m = g->members[r];
    uint64_t w = atomic_load_explicit(&st->devs[m].box[c->k & 1].word,
                                      memory_order_acquire);
    if (m == c->ctx->dev || w == ((uint64_t)c->k << 32 | hash))
      continue;
    char why[SHMAP__MSG_MAX - 200];
    if (!member_agrees(c, m, why, sizeof why))
      return mismatch(c, why);
  }
  return 0;
}

/* The same over the whole group. */
static int boxes_agree(shmap__coll *c, uint32_t hash)
{
  fill_members(c);
  return boxes_agree_run(c, hash, 0, c->n);
}

/* Wait until every member of ranks [lo, hi) (listed in members[]) published
 * call k somehow.  0, or canceled. */
static int boxes_wait_run(shmap__coll *c, int lo, int hi)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  swait sw = {c, lo, hi};
  if (!boxes_ready(&sw) &&
      !shmap__dev_wait_on(rt, &rt->devs[ctx->dev], NULL, boxes_ready, &sw,
                          &rt->abort))
    return shmap__canceled(ctx, shmap__coll_opname(c));
  return 0;
}

/* The same over the whole group. */
static int boxes_wait(shmap__coll *c)
{
  fill_members(c);
  return boxes_wait_run(c, 0, c->n);
}

/* Fold elements [off, off + n) of `first` (when not NULL: the fold of the
 * ranks before lo) and of the boxes of ranks [lo, hi), in rank order, into
 * out. */
static void boxes_fold(shmap__coll *c, const void *first, int lo, int hi,
                       size_t off, size_t n, const shmap__fold *fold, void *out)
{
  shm_state *st = c->comm->priv;
  shm_call *g = S(c);
  const void **srcs = g->srcs;
  int k = 0;
  if (first)
    srcs[k++] = (const unsigned char *)first + off * c->esize;
  for (int r = lo; r < hi; r++)
    srcs[k++] = st->devs[g->members[r]].box[c->k & 1].data + off * c->esize;
  fold->fn(out, srcs, k, n, fold->count);
}

/*
 * Large groups.  When every member folds every box, a call costs each
 * member O(n) reads (and, as fibers, O(n) looks per wait): O(n^2) in all.
 * Above SMALL_ALL members, only the group's rank 0 (the leader) waits for
 * the boxes, compares the hashes and folds them, once, in rank order, into
 * a result box of its own; it publishes that with the call number (and
 * a bit saying the call failed), and every other member waits for that
 * one word and copies the result (its part of it, for psum_scatter).  So
 * a member does O(1) work and a fiber waits once.
 *
 * The second step costs a dependent round trip, which pays from 8
 * members on: psum of 256 bytes at 8, 16, 32 and 64 devices took 1.7,
 * 3.3, 6.1 and 12 us this way against 2.4, 5.8, 15 and 40 us with every
 * member folding (4 devices: 1.0 against 0.9 us; 32 bytes at 8: 1.5
 * against 1.7 us).
 *
 * Agreement.  The leader compares every member's hash with its own as
 * above.  A member compares only with the leader: when the leader's box
 * shows call k with another hash, or the leader made call k by another
 * protocol or left its body, the member reports the mismatch with the
 * leader; when the leader reports a failed call, every member compares
 * with every member, as above, and reports the first that differs (every
 * member published call k: the leader saw it).  So either every member
 * gets the result, or none does.
 *
 * Reuse.  A member's box is read only by the leader, which is done with it
 * when it publishes the result, before the member leaves the call.  The
 * leader's result box is read by every member; when the leader next writes
 * it (call k + 2 or later) for the same group, every member has published
 * that call, so has left call k; for another group it waits as for a box.
 *
 * Two levels.  In fiber mode a large group's members run on a few
 * workers, each over a range of devices.  With one leader, the box of
 * every member on another worker crosses between cores on every call, and
 * the leader folds them from there.  Instead each worker's first member of
 * the group (its sub-leader) waits for, checks and folds only the boxes
 * of the members on its worker, in its core's cache, and those members
 * wait for its result.  A fold is a left fold in rank order, so the
 * sub-leaders chain: the first folds its members' terms and publishes
 * that as a partial result (a bit in its word); each next one folds the
 * partial result before its members' terms and publishes its own; the
 * last one's result is the whole fold, bit for bit the serial one, and
 * every other sub-leader copies it into its own result box.  Between
 * cores move one partial result per pair of workers and one result per
 * worker.  This needs each worker's members to hold a run of ranks (the
 * call's axes in the mesh's order, so that ranks follow device numbers)
 * and a fold whose partial result is a term (fold->partial, which the
 * plan sets for psum, pmax, pmin and psum_scatter of every dtype but bf16
 * and f16, which round once, at the end) and no wider (a bool sum is);
 * pmean divides at the end.  Other calls take one leader.  So does thread
 * mode, each device on a thread of its own: a chain over teams of ranks
 * there was measured slower (BENCHMARKS.md), since every link waits for
 * one more thread to be switched in when the threads outnumber the cores.
 *
 * A sub-leader compares its members' hashes and its predecessor's with
 * its own, and compares with the last sub-leader when it takes the
 * result.  Failure flows down the chain and back: a sub-leader that finds
 * a difference, or is told of one, publishes a failed result, so every
 * member gets the result or none does; told of a failure, a member waits
 * for every member's box and compares with each, as above.  Reuse is as
 * for one leader: a sub-leader writes its result box of call k + 2 only
 * after the last sub-leader's result of call k, which every reader of
 * its box had read by then (the next sub-leader before it published its
 * own result; its members before they published call k + 2).  That holds
 * only when call k of the group was chained too: the group's first
 * device, one leader of call k (a pmean, say) and first sub-leader of call
 * k + 2, does not wait for the members on other workers, which may still
 * be reading its call k result; it waits for them to leave call k as for
 * another group.
 *
 * Late wake-up.  Members that come before their leader wait for its
 * arrival (lead_ready) as well as for its result: its arrival is what
 * shows a leader making another call.  Woken at its arrival, they would
 * find no result yet and sleep again (in thread mode, a thread switched
 * in for nothing per member and call), so the one leader wakes those who wait for
 * its arrival only once its result is out, and before its members, who
 * then mostly find themselves woken already.  Whoever waits in vain for
 * its arrival waits no longer than that: the leader's call completes
 * whatever the others do (a member that made another call has published
 * call k by another protocol, which boxes_wait takes; an earlier mismatch
 * set the abort flag), and one that waits for its call k from another
 * group has found a mismatch by then.
 *
 * A result word carries the leader's call hash as well as the call
 * number: a member whose own call differs (another group, with the same
 * leader) sees the difference instead of taking the other call's result.
 */
#define SMALL_ALL 4
#define RES_FAILED ((uint64_t)1)
#define RES_PARTIAL ((uint64_t)2)
/* A result word: the call number, the call's hash but its two low bits,
 * and the flags above.  A member takes a result only from a leader that
 * made the same call: of the same number, another group's result would
 * do otherwise. */
#define RES_HASH(h) ((uint64_t)((h) & ~(uint32_t)3))
/* Whether result word r is for call k with hash h, in full (or, with
 * `partial`, maybe partial). */
#define RES_FOR(r, k, h, partial)                                              \
  (TAG(r) == (k) && ((r) & 0xfffffffcu) == RES_HASH(h) &&                      \
   ((partial) || !((r) & RES_PARTIAL)))

/* What a member waits on, in one line of its stack: a worker looks at
 * every waiting fiber's over and over. */
typedef struct rwait {
  const _Atomic uint64_t *res, *box; /* the leader's result and box words */
  const shmap__coll *c;
  uint32_t k, hash;
  int lead;
  bool partial; /* a partial result will do */
} rwait;

/* Whether the leader published the result of call k, or showed that it
 * makes another call (then the caller compares). */
static bool lead_ready(void *arg)
{
  const rwait *rw = arg;
  for (int pass = 0;; pass++) {
    uint64_t r = atomic_load(rw->res);
    if (TAG(r) == rw->k &&
        (RES_FOR(r, rw->k, rw->hash, rw->partial) ||
         (r & 0xfffffffcu) != RES_HASH(rw->hash)))
      return true; /* the result, or another call's (the caller compares) */
    /* The usual wait: the leader shows the same call k. */
    uint64_t w = atomic_load(rw->box);
    if (TAG(w) == rw->k)
      return (uint32_t)w != rw->hash;
    /* Its arrival is published after its box: look at the box again. */
    const shm_call *g = CS(rw->c);
    bool other = atomic_load(&g->devs[rw->lead].coll.arrive) >= rw->k ||
                 atomic_load(&g->devs[rw->lead].coll.finished);
    w = atomic_load(rw->box);
    if (TAG(w) == rw->k)
      return (uint32_t)w != rw->hash;
    if (other || pass)
      return other;
    /* Register, then look again (as succ_arrived). */
    watch_word(&g->sdevs[rw->lead].watch, g->me);
  }
}

/* Wait for device lead's result of call k (or its partial result, with
 * `partial`).  0 with *word its result word; or the mismatch with lead
 * reported, or canceled. */
static int wait_lead(shmap__coll *c, int lead, uint32_t hash, bool partial,
                     uint64_t *word)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  shm_dev *ld = &st->devs[lead];
  rwait rw = {&ld->res[c->k & 1].word, &ld->box[c->k & 1].word, c, c->k,
              hash, lead, partial};
  if (!lead_ready(&rw) &&
      !shmap__dev_wait_on(rt, &rt->devs[ctx->dev], &rt->devs[lead], lead_ready,
                          &rw, &rt->abort))
    return shmap__canceled(ctx, shmap__coll_opname(c));
  uint64_t w = atomic_load_explicit(rw.res, memory_order_acquire);
  if (RES_FOR(w, c->k, hash, partial)) {
    *word = w;
    return 0;
  }
  return differs_from(c, lead); /* another call, or another hash */
}

/* Publish this device's result word for call k (with the call's hash
 * and `flags`) and wake whoever waits. */
static void res_publish(shmap__coll *c, sbox *res, uint32_t hash,
                        uint64_t flags)
{
  shmap__publish(c->ctx->rt, &res->word,
                 (uint64_t)c->k << 32 | RES_HASH(hash) | flags);
  wake_members(c->ctx->rt, c);
}

/* Before writing this device's result box for call k: wait for the
 * readers of its last result (see Reuse), as a group's one leader or
 * (`chained`) as a sub-leader. */
static sbox *res_take(shmap__coll *c, bool chained)
{
  shm_state *st = c->comm->priv;
  shm_dev *sd = &st->devs[c->ctx->dev];
  sgroup *rg = &sd->resg[c->k & 1];
  sgroup now = {c->k, c->call.naxes, CS(c)->base, c->n, {0}, false};
  memcpy(now.axes, c->call.axes, sizeof now.axes);
  if (rg->k && same_group(rg, &now) && (!chained || rg->chained))
    rg->k = c->k;
  else
    box_reuse(c, rg, true);
  rg->chained = chained;
  return &sd->res[c->k & 1];
}

static int allreduce_lead(shmap__coll *c, size_t count, const shmap__fold *fold,
                          size_t off, size_t n)
{
  shm_state *st = c->comm->priv;
  shm_dev *sd = &st->devs[c->ctx->dev];
  uint32_t hash = box_publish_as(c, count, false, false);
  int rc = boxes_wait(c);
  if (!rc)
    rc = boxes_agree(c, hash);
  sbox *res = &sd->res[c->k & 1];
  if (!rc) {
    res = res_take(c, false);
    boxes_fold(c, NULL, 0, c->n, 0, count, fold, res->data);
    shmap__copy(c->call.dst, res->data + off * fold->out_esize,
                n * fold->out_esize);
    group_done(c);
  }
  /* The result, then the late wake-up (see above), then the members --
   * unless the late wake-up woke every sleeping device.  Waking a member
   * twice is not free: in thread mode, with more threads than cores, a
   * member woken first runs on, makes its next call and sleeps again
   * before the second wake-up comes, which wakes it for nothing (at 64
   * devices every member slept twice per psum). */
  shmap__publish(c->ctx->rt, &res->word,
                 (uint64_t)c->k << 32 | RES_HASH(hash) | (rc ? RES_FAILED : 0));
  if (!wake_watchers(c->ctx->rt, sd))
    wake_members(c->ctx->rt, c);
  left_call(c->ctx->rt, sd, c->k);
  return rc;
}

/* The verdict on a call another (sub-)leader reported failed: compare with
 * every member, once every member published it. */
static int failed_verdict(shmap__coll *c, uint32_t hash)
{
  int rc = boxes_wait(c);
  if (!rc)
    rc = boxes_agree(c, hash);
  return rc ? rc : shmap__canceled(c->ctx, shmap__coll_opname(c));
}

/* A member of a large group: publish, wait for the result of device lead
 * (the group's leader, or this worker's sub-leader when `chained`) and
 * copy this member's part of it. */
static int allreduce_member(shmap__coll *c, size_t count,
                            const shmap__fold *fold, size_t off, size_t n,
                            int lead, bool chained)
{
  shm_state *st = c->comm->priv;
  shm_dev *sd = &st->devs[c->ctx->dev];
  uint32_t hash = box_publish(c, count, false);
  uint64_t w;
  int rc = wait_lead(c, lead, hash, false, &w);
  if (!rc && !(w & RES_FAILED)) {
    shmap__copy(c->call.dst, st->devs[lead].res[c->k & 1].data +
                                 off * fold->out_esize,
                n * fold->out_esize);
    group_done(c);
  } else if (!rc && chained) {
    rc = failed_verdict(c, hash);
  } else if (!rc) { /* the leader saw every box */
    rc = boxes_agree(c, hash);
    if (!rc) /* cannot happen: the leader saw a difference */
      rc = shmap__canceled(c->ctx, shmap__coll_opname(c));
  }
  left_call(c->ctx->rt, sd, c->k);
  return rc;
}

/* Whether c's fold may go in two levels: see "Two levels". */
static bool chainable(const shmap__coll *c, const shmap__fold *fold)
{
  const shmap__call *a = &c->call;
  const shmap__runtime *rt = c->ctx->rt;
  if (shmap__workers(rt) < 2 || a->ngroups || fold->count ||
      fold->out_esize != c->esize || !fold->partial)
    return false;
  for (int i = 1; i < a->naxes; i++)
    if (a->axes[i] <= a->axes[i - 1])
      return false;
  return true;
}

/* The lowest rank whose device number is at least d (device numbers grow
 * with the rank: chainable). */
static int rank_from(const shmap__coll *c, int d)
{
  int lo = 0, hi = c->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (member(c, mid) < d)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The ranks [*lo, *hi) on the worker of member r's device. */
static void worker_run(const shmap__coll *c, int r, int *lo, int *hi)
{
  int first, end;
  shmap__runs_with(c->ctx->rt, member(c, r), &first, &end);
  *lo = rank_from(c, first);
  *hi = rank_from(c, end);
}

/* This device's place in the chain of c's group, or NULL when the whole
 * group runs on one worker. */
static const wchain *chain_of(shmap__coll *c)
{
  shm_state *st = c->comm->priv;
  wchain *ch = &st->devs[c->ctx->dev].chain;
  sgroup key = {1, c->call.naxes, CS(c)->base, c->n, {0}, false};
  memcpy(key.axes, c->call.axes, sizeof key.axes);
  if (!ch->key.k || !same_group(&ch->key, &key)) {
    int lo, hi;
    worker_run(c, c->rank, &ch->lo, &ch->hi);
    ch->sub = member(c, ch->lo);
    ch->prev = -1;
    if (ch->lo > 0) {
      worker_run(c, ch->lo - 1, &lo, &hi);
      ch->prev = member(c, lo);
    }
    worker_run(c, c->n - 1, &lo, &hi);
    ch->last = member(c, lo);
    ch->key = key;
  }
  return ch->lo == 0 && ch->hi == c->n ? NULL : ch;
}

/* A sub-leader: fold its worker's members after its predecessor's partial
 * result, publish, and (unless last) take the last one's result. */
static int allreduce_sub(shmap__coll *c, const wchain *ch, size_t count,
                         const shmap__fold *fold, size_t off, size_t n)
{
  shmap_ctx *ctx = c->ctx;
  shm_state *st = c->comm->priv;
  shm_dev *sd = &st->devs[ctx->dev];
  shm_call *g = S(c);
  uint32_t hash = box_publish(c, count, false);
  for (int r = ch->lo; r < ch->hi; r++)
    g->members[r] = member(c, r);
  int rc = boxes_wait_run(c, ch->lo, ch->hi);
  if (!rc)
    rc = boxes_agree_run(c, hash, ch->lo, ch->hi);
  bool told = false; /* of a failure, by another sub-leader */
  const void *partial = NULL;
  uint64_t w;
  if (!rc && ch->prev >= 0 && !(rc = wait_lead(c, ch->prev, hash, true, &w))) {
    const shm_dev *pd = &st->devs[ch->prev];
    if (w & RES_FAILED)
      told = true;
    else if (atomic_load_explicit(&pd->box[c->k & 1].word,
                                  memory_order_acquire) !=
             ((uint64_t)c->k << 32 | hash))
      rc = differs_from(c, ch->prev);
    else
      partial = pd->res[c->k & 1].data;
  }
  sbox *res = &sd->res[c->k & 1];
  if (!rc && !told) {
    res = res_take(c, true);
    boxes_fold(c, partial, ch->lo, ch->hi, 0, count, fold, res->data);
  }
  bool last = ch->last == ctx->dev;
  res_publish(c, res, hash, rc || told ? RES_FAILED : last ? 0 : RES_PARTIAL);
  if (!last && !rc && !told) {
    if (!(rc = wait_lead(c, ch->last, hash, false, &w))) {
      if (w & RES_FAILED)
        told = true;
      else
        shmap__copy(res->data, st->devs[ch->last].res[c->k & 1].data,
                    count * fold->out_esize);
    }
    res_publish(c, res, hash, rc || told ? RES_FAILED : 0);
  }
  if (!rc && !told) {
    shmap__copy(c->call.dst, res->data + off * fold->out_esize,
                n * fold->out_esize);
    group_done(c);
  } else if (!rc) {
    rc = failed_verdict(c, hash);
  }
  left_call(ctx->rt, sd, c->k);
  return rc;
}

static int shm_allreduce_small(shmap__coll *c, size_t count,
                               const shmap__fold *fold, size_t off, size_t n)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shm_state *st = c->comm->priv;
  shm_dev *sd = &st->devs[ctx->dev];
  shmap__dev *self = &rt->devs[ctx->dev];
  shm_call *g = call_begin(c);
  if (c->n > SMALL_ALL) {
    const wchain *ch = chainable(c, fold) ? chain_of(c) : NULL;
    if (ch)
      return ctx->dev == ch->sub
                 ? allreduce_sub(c, ch, count, fold, off, n)
                 : allreduce_member(c, count, fold, off, n, ch->sub, true);
    return ctx->dev == g->base
               ? allreduce_lead(c, count, fold, off, n)
               : allreduce_member(c, count, fold, off, n, g->base, false);
  }
  uint32_t hash = box_publish(c, count, true);
  /* The wait is made here, as the gdb transcripts in README.md show it. */
  fill_members(c);
  swait sw = {c, 0, c->n};
  int rc = 0;
  if (!boxes_ready(&sw) &&
      !shmap__dev_wait_on(rt, self, NULL, boxes_ready, &sw, &rt->abort))
    rc = shmap__canceled(ctx, shmap__coll_opname(c));
  if (!rc)
    rc = boxes_agree(c, hash);
  if (!rc) {
    boxes_fold(c, NULL, 0, c->n, off, n, fold, c->call.dst);
    group_done(c);
  }
  left_call(rt, sd, c->k);
  return rc;
}

/* ---- data -------------------------------------------------------------- */

/* Bytes of the stack buffer allreduce folds one piece into. */
#define PIECE_BYTES 8192

/* The data operations read and write memory only: they cannot fail. */
static int shm_get(shmap__coll *c, int r, const shmap__box *from, void *to,
                   const int64_t to_strides[])
{
  shmap__copy_box(to, to_strides, (const char *)peer(c, r)->src + from->off,
                  from->strides, from->rank, from->shape, c->esize);
  return 0;
}

/* The members' terms are folded in one pass by the fused kernel (every
 * member's piece at once, partial results in registers), straight into
 * acc. */
static int shm_reduce(shmap__coll *c, size_t off, size_t count,
                      const shmap__fold *fold, void *acc)
{
  fill_members(c);
  const void **srcs = S(c)->srcs;
  size_t es = c->esize;
  for (int r = 0; r < c->n; r++)
    srcs[r] = (const char *)peer(c, r)->src + off * es;
  fold->fn(acc, srcs, c->n, count, fold->count);
  return 0;
}

/* Fold one piece at a time into a buffer that stays in cache, then write
 * it to every member. */
static int shm_allreduce(shmap__coll *c, size_t off, size_t count,
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
      shmap__copy((char *)peer(c, r)->dst + o * des, tmp, len * des);
  }
  return 0;
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
    .depart_deferred = shm_depart_deferred,
    .src_wait = shm_src_wait,
    .allreduce_small = shm_allreduce_small,
    .small_max_bytes = SHMAP__SMALL_BYTES,
    .small_max_n = SHMAP_MAX_DEVICES,
    /* Every member folds for itself up to SMALL_ALL members only. */
    .small_own_max_n = SMALL_ALL,
    .handover = shm_handover,
};
