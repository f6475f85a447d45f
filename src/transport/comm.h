/* SPDX-License-Identifier: MIT */
/*
 * comm.h - the transport seam: how the devices of one map find their group,
 * agree on a collective call, move its data and learn of failures.
 *
 * Layers.  A collective is split in three:
 *   plan      (coll/plan.c)  checks the arguments, computes the result's
 *                            shape and fills the call's descriptor;
 *   algorithm (coll/algo.c)  says which pieces of which member's buffers go
 *                            where, using only the operations below;
 *   protocol  (transport/)   rendezvous, agreement, data movement, waking.
 * Algorithms are written once.  A transport implements the operations of
 * struct shmap__transport; shm.c is the one for devices that share an
 * address space (peers' buffers are read and written directly, one copy).
 * A transport between processes (MPI, UCX) or onto a GPU implements the
 * same table and needs no change above it.
 *
 * Objects.
 *   shmap__comm  the communicator of one map: the devices of the mesh, the
 *                transport, and the transport's state for the map.  Every
 *                device's context points to it.
 *   shmap__coll  one collective call of one device, on its stack: the
 *                descriptor (coll/desc.h), the group (size, rank), the call
 *                number, and room for the transport's per-call state.
 *
 * Groups.  A call names mesh axes; the group of a device is the devices
 * that share its coordinates on every other axis.  Ranks run over the
 * named axes in the order named, the first axis major (shmap__group).
 * shmap__comm_member() maps a rank to a device number and
 * shmap__comm_is_local() says whether that device runs in this address
 * space (every device does, for shm).
 *
 * SPMD.  Every member of a group runs the same plan and the same algorithm
 * with the same descriptor (agreement guarantees it), so each can compute
 * not only what it takes from its peers but what each peer takes from it.
 * Algorithms state both: the pull side (get, reduce, allreduce), which a
 * transport with direct access executes alone, and the matching push side
 * (send, recv), which only a two-sided transport needs (it sets the
 * operations; shm leaves them NULL and algorithms skip those loops when
 * shmap__comm_two_sided() is false).
 *
 * One call, as an algorithm sees it:
 *
 *   rc = shmap__comm_arrive(c);        rendezvous and agreement
 *   if two-sided: shmap__comm_send(...) for every piece a peer takes from me
 *   shmap__comm_get / reduce / allreduce ... in the algorithm's order
 *   if two-sided: shmap__comm_recv(...) for every piece a peer puts in me
 *   rc = shmap__comm_depart(c, bytes); completion
 *
 * Matching.  Pieces are matched per ordered pair of members by order: for
 * data moving from member a to member b in one call, the k-th piece a
 * lists for b (a's send(b, ...) calls and, in allreduce, a's result for
 * b, in a's program order) is the k-th piece b lists from a (b's get(a,
 * ...), b's term from a in reduce/allreduce, and b's recv(a, ...), in b's
 * program order).  Both boxes of a matched pair hold the same number of
 * elements in the same (row-major) order.  Algorithms list no piece of
 * zero elements and never send or recv to themselves; a member's own term
 * in get/reduce/allreduce is a local copy.
 *
 * Buffers.  The descriptor's src is the member's buffer its peers read,
 * dst the one its peers write (psum: the same buffer).  Both stay valid
 * and unchanged by the owner from arrive until depart returns.  A piece
 * of dst may be written (allreduce/recv) where the same bytes of src were
 * read for an earlier piece of the same call (in-place psum): a transport
 * must finish reading a region before anything is written to it.
 *
 * Reductions fold the members' terms in rank order (acc = term 0; acc =
 * acc OP term r for r = 1, 2, ...; the fused kernel takes all n terms in
 * one call), so results are bitwise equal to a serial left fold whatever
 * the placement.  A transport may block and stage terms as it likes but
 * may not reassociate.  Results may have a wider element than the terms
 * (psum of bool gives i32): dst offsets and acc are in result elements.
 *
 * Concurrency.  The devices of this address space call the per-call
 * operations concurrently, each with its own shmap__coll; a device makes
 * one call at a time and its calls are numbered in program order.  open,
 * close and destroy run with no device inside a map.
 *
 * Failure.  shmap__fail() records the first failure of a job and calls
 * the transport's failed(); from then on every wait of every member of
 * the job, in every address space, must end: arrive returns
 * ECANCELED/EMISMATCH (shmap__canceled()) instead of waiting for a
 * member that will not come.  Once every member of a group has passed
 * arrive, the call completes: depart waits for the group's data movement
 * to finish (no buffer may change while a peer still reads it), and a
 * transport that can lose a peer there reports the loss from depart.
 * So the members of a group must agree: either every one passes arrive
 * or none does.  A transport whose members decide apart (mpi.c) releases
 * arrive only for a member that will not come, never for the failure
 * alone, lest one member give up while a peer waits for its data.
 * (depart_deferred moves the wait for a ppermute's one reader to the
 * owner's next use of its buffer; allreduce_small does a whole small
 * reduction with the same guarantees as arrive, allreduce and depart;
 * allreduce_whole, between arrive and depart, moves all of one
 * allreduce's data with the guarantees of its pieces.)
 * A transport that learns of a failure in another address space records
 * it here with shmap__fail(rt, failing device, code, message), so that
 * local waiters are released and the map reports that message; failed()
 * is called only for the first failure a job records in this address
 * space.
 *
 * Errors.  The data operations (get, reduce, allreduce, send, recv)
 * return 0 or an error code; a transport that returns one has failed the
 * job with its message (shmap__dev_fail).  The wrappers below keep the
 * call's first error in c->err and the algorithm goes on listing its
 * pieces (peers match them by order); shmap__comm_depart completes the
 * call and returns that error, so an algorithm that returns depart's
 * result propagates it.
 *
 * Lifecycle.  A mesh's runtime gets its transport when the mesh is made
 * (shmap__comm_mesh_init), which may set up state for the mesh
 * (rt->tstate) and, between processes, agree with the other processes;
 * mesh_free undoes it.  Each map opens and closes the communicator
 * (open/close: the map's begin and end) and asks the transport for the
 * verdict every address space returns.  Nobody above calls a transport
 * by name: mesh.c, map.c and the runtime go through this table.
 *
 * Adding a transport: implement struct shmap__transport in a file of
 * its own under transport/ and return it from shmap__transport_for()
 * (comm.c) for the runtimes it serves.  One between processes uses the
 * mesh's communicator of the process engine (proc/pmesh.c).
 */
#ifndef SHMAP_COMM_H
#define SHMAP_COMM_H

#include "dtype.h"
#include "transport/desc.h"
#include "sched/sched.h"

#include <stdalign.h>

struct shmap_ctx;
struct shmap__transport;

/* A strided box of elements inside one buffer: element (i0, i1, ...) is at
 * byte off + (i0*strides[0] + i1*strides[1] + ...) * element size.  rank 0
 * is one element.  shape and strides belong to the caller and need only
 * live until the operation returns. */
typedef struct shmap__box {
  size_t off;
  int rank;
  const int64_t *shape;
  const int64_t *strides; /* in elements */
} shmap__box;

typedef struct shmap__fold shmap__fold;

/* The communicator of one map. */
typedef struct shmap__comm {
  const struct shmap__transport *tp;
  shmap__runtime *rt;
  const shmap_mesh *mesh;
  void *priv; /* the transport's state for this map */
} shmap__comm;

/* Bytes of per-call state a transport may keep in a shmap__coll. */
#define SHMAP__COLL_PRIV 160

/* One collective call of one device. */
typedef struct shmap__coll {
  /* Filled by the plan before arrive. */
  struct shmap_ctx *ctx;
  shmap__comm *comm;
  shmap__call call;   /* the descriptor; src and dst are this device's */
  int n, rank;        /* group size and this device's rank in it */
  /* ppermute: the ranks this member receives from and sends to (-1: none);
   * -1 for every other collective.  The member of rank `to` is the one
   * peer that reads this device's src. */
  int from, to;
  /* Each member's src has at most one reader, the member of rank `to`
   * (ppermute), and no member waits for the others to leave the call: a
   * transport may then complete the call without waiting for every
   * member (see depart_deferred).  Set by the plan. */
  bool one_reader;
  size_t esize;       /* bytes per element of the call's dtype */
  const char *name;   /* "psum", for messages (set by the plan) */
  bool axes_ok;       /* call.axes hold the parsed axes */
  char op[360];       /* "psum over 'j'", formatted on demand */
  /* Set by shmap__comm_arrive. */
  uint32_t k;         /* this call's number on this device (from 1) */
  int err;            /* the first error of a data operation (see Errors) */
  uint64_t t0;        /* when the device entered the call */
  uint64_t packed;    /* shmap__pack_op() of the call */
  /* The transport's own state for this call. */
  alignas(16) unsigned char priv[SHMAP__COLL_PRIV];
} shmap__coll;

/*
 * A transport.  Operations marked "optional" may be NULL.  All per-call
 * operations are called by the calling device's own thread (or fiber),
 * from inside its body.
 */
typedef struct shmap__transport {
  const char *name;

  /* ---- a mesh -------------------------------------------------------- */
  /* A new mesh (its runtime made, no map run yet): set up rt->tstate.
   * Collective over the processes of a transport between processes (every
   * process creates its meshes in the same order).  0, or an error code
   * with the message set.  Optional. */
  int (*mesh_init)(shmap__runtime *rt);
  /* The mesh goes away (before its runtime): free rt->tstate.  Collective
   * like mesh_init: 0, or the error of a process that did not release the
   * mesh at the same point (the state is freed either way).  Optional. */
  int (*mesh_free)(shmap__runtime *rt);

  /* ---- a map --------------------------------------------------------- */
  /* Before a map's devices start (the map's calling thread, the runtime
   * lock held, every device parked): set up comm->priv and reset whatever
   * the previous map left.  0, or an error code with the message set. */
  int (*open)(shmap__comm *comm);
  /* After every device returned from the map; `failed`: the job failed
   * (a call may have been left half done). */
  void (*close)(shmap__comm *comm, bool failed);
  /* The mesh's runtime goes away (its threads stopped): free what
   * rt->tstate still holds.  Optional. */
  void (*destroy)(shmap__runtime *rt);
  /* After close, on the map's calling thread: the map's result `rc`
   * (0, or an error code with the message set) as every address space
   * agrees on it; a transport between processes exchanges the results.
   * Optional: NULL keeps rc. */
  int (*verdict)(shmap__comm *comm, int rc);
  /* Whether device `dev` runs in this address space.  Optional: NULL
   * means every device does. */
  bool (*is_local)(const shmap__comm *comm, int dev);
  /* Device `dev` left its body (returned, failed or was released): peers
   * waiting for it in a collective must learn it.  Departure from the map;
   * called once per device and map, after its last collective. */
  void (*finish)(shmap__comm *comm, int dev);
  /* The job's first failure was just recorded (rt->abort, fail_code,
   * fail_msg): release every waiter of the job, here and, for a transport
   * between processes, in every other process.  May be called from any
   * device's thread, more than once per job. */
  void (*failed)(shmap__runtime *rt);
  /* shmap__fail() is recording the job's first failure in this address
   * space (device dev, code, msg), before waiters here are released:
   * tell the other address spaces, unless the failure came from one of
   * them.  Before failed(), so that no device released here can tell
   * another process it left before that process hears of the failure.
   * Optional. */
  void (*notify)(shmap__runtime *rt, int dev, int code, const char *msg);

  /* ---- a call -------------------------------------------------------- */
  /* Rendezvous and agreement.  Publish c->call as this device's call
   * number c->k and record that it entered k calls (the device's
   * coll.arrive, read by the watchdog); wait until every member of the
   * group has published its call k; compare.  On any difference fail the
   * job with SHMAP_EMISMATCH and the message of shmap__call_mismatch()
   * (shmap__dev_fail(ctx, shmap__coll_opname(c), ...)); a member that
   * returned from its body, or made call k with another group, is a
   * difference too.  Every member must reach the same verdict: either all
   * proceed to move data or none does.  Returns 0, or the error code
   * (shmap__canceled() when released by a failure elsewhere) with the
   * message set.  A group of one returns 0 after publishing. */
  int (*arrive)(shmap__coll *c);
  /* Copy box `from` of member `peer`'s src into this device's memory at
   * `to` (strides in elements, same shape as from).  When this returns,
   * the data is at `to`. */
  int (*get)(shmap__coll *c, int peer, const shmap__box *from, void *to,
             const int64_t to_strides[]);
  /* acc[0..count) = left fold in rank order of every member's
   * src[off..off+count) (elements), with fold->fn.  When this returns the
   * result is in acc (this device's memory, not a published buffer). */
  int (*reduce)(shmap__coll *c, size_t off, size_t count,
                const shmap__fold *fold, void *acc);
  /* The same fold, then (pmean) divided by the group size, and written to
   * every member's dst[off..off+count).  The result is in a member's dst
   * when that member's depart returns. */
  int (*allreduce)(shmap__coll *c, size_t off, size_t count,
                   const shmap__fold *fold);
  /* Optional: the whole of an allreduce of count elements at once (every
   * member's dst[0..count) gets the fold of every member's src), after
   * arrive, where the transport has a route of its own for c's group
   * that beats the algorithm's pieces.  1 when it declines, having moved
   * nothing: every member of the group declines alike (the answer may
   * depend on the agreed call and on where the members run, nothing
   * else).  Otherwise 0 or an error code, as allreduce; the call then
   * lists no other piece. */
  int (*allreduce_whole)(shmap__coll *c, size_t count,
                         const shmap__fold *fold);
  /* Two-sided transports only (both NULL for shm): this device's src box
   * `from` is a piece member `peer` takes (its get, or its term from this
   * device in reduce/allreduce); and box `to` of this device's dst is
   * where member `peer`'s allreduce result for this device lands.  Both
   * only post: they may not wait for the peer (every member lists its
   * sends before its first get/reduce/allreduce). */
  int (*send)(shmap__coll *c, int peer, const shmap__box *from);
  int (*recv)(shmap__coll *c, int peer, const shmap__box *to);
  /* Completion: wait until every piece this device listed has moved and
   * every member of the group is done with this device's buffers (after
   * which the owner may change them).  Not released by a failure
   * elsewhere (every member that passed arrive completes the call), unless
   * the transport lost a peer: then an error code, message set. */
  int (*depart)(shmap__coll *c);

  /* ---- deferred completion (optional, both or neither) ----------------- */
  /* ppermute only: complete the call like depart, except that the member
   * reading this device's src (rank c->to) may still be reading it when
   * this returns.  The caller must then leave src unchanged, and keep it
   * allocated, until src_wait(ctx, that member's device, c->k) returned:
   * the reader's completion rides on this device's next use of the
   * buffer instead of a wait here. */
  int (*depart_deferred)(shmap__coll *c);
  /* Wait until device `reader` has finished call number k (or left its
   * body), after which what it read of this device's src in that call
   * may change.  Called by the device of ctx, inside its body or (map
   * over, every device done) by the map's caller. */
  void (*src_wait)(struct shmap_ctx *ctx, int reader, uint32_t k);

  /* ---- small reductions (optional) ------------------------------------ */
  /* psum, pmax, pmin, pmean of at most small_max_bytes bytes (terms and
   * result) in a group of at most small_max_n members: the whole call in
   * one operation, instead of arrive, allreduce and depart.  Publish the
   * call and this device's src (c->k set, as for arrive), agree with every
   * member exactly as arrive would (same errors, same messages, the same
   * verdict on every member), then write the left fold in rank order of
   * every member's src[0..count) (with fold), or of its elements [off,
   * off + n) (psum_scatter: each member keeps its part), into this
   * device's dst.  0, or an error code with the message set. */
  int (*allreduce_small)(shmap__coll *c, size_t count, const shmap__fold *fold,
                         size_t off, size_t n);
  /* The most bytes of terms or result it takes, and the largest group.
   * A bound above SHMAP__SMALL_BYTES is one on the other members' terms
   * together: a group of n > 2 takes calls of up to small_max_bytes /
   * (n - 1) bytes, and at least SHMAP__SMALL_BYTES. */
  size_t small_max_bytes;
  /* Optional: whether allreduce_small takes c's call with `fold`
   * although it is above small_max_bytes, with `terms` bytes of terms
   * over the members together (`part`: each member keeps a part of the
   * result, as psum_scatter): a transport whose other path for the group
   * costs messages that grow with the square of its size.  Called
   * before the call is entered, with c->comm set; every member of an
   * equal call must get the same answer (one of an unequal call learns
   * of the mismatch whichever path it takes). */
  bool (*small_takes)(shmap__coll *c, const shmap__fold *fold,
                      size_t terms, bool part);
  int small_max_n;
  /* The largest group allreduce_small takes a fold with `own` set for (0:
   * none, such calls then take arrive and depart). */
  int small_own_max_n;

  /* ---- buffer handover (optional) ------------------------------------ */
  /* In-place ppermute, after arrive, when this member published
   * call.hand: the source member's src, which becomes this member's
   * buffer instead of being copied, or NULL to copy.  Every member of a
   * cycle of the permutation gets the same answer, so each buffer passes
   * to exactly the member that takes it; a member that takes one reads
   * and writes nothing of its peers' (and needs no reader to finish). */
  const void *(*handover)(shmap__coll *c);
} shmap__transport;

/* The most bytes of a small reduction (allreduce_small) within a process
 * (shm's boxes), and over MPI, where one message carries the terms with
 * the call's description (packed: about 20 bytes for a psum, at most
 * SHMAP__CALL_PACKED_MAX) and stays under Open MPI's eager limit for
 * shared memory (4 KiB with its header), above which a message takes a
 * rendezvous of its own. */
#define SHMAP__SMALL_BYTES 512
#define SHMAP__SMALL_BYTES_MPI 3072

/* How a reduction combines: fn is the fused kernel of the operation and
 * dtype (dtype.h, coll/ops.c).  It takes every member's term at once, in
 * rank order, and folds them in one pass; a transport passes it all n
 * terms of a piece (bf16 and f16 accumulate in f32 across the terms and
 * round once, so folding in pairs would round too often). */
struct shmap__fold {
  shmap__fold_fn fn;
  int count;        /* pmean: the group size to divide by, else 0 */
  size_t out_esize; /* bytes per result element (i32 for a bool sum) */
  /* The fold of a run of terms is itself a term, bit for bit (psum, pmax,
   * pmin of a dtype that rounds at every step): the fold may then go in
   * two levels.  Set by the plan from the operation and the dtype table
   * (shmap__dtype_info.rounds_once). */
  bool partial;
  /* The result depends on the member beyond off and n: the fold picks a
   * term by the calling member's own place (ppermute's source).  A
   * transport then folds for each member itself, all n terms at off into
   * its own dst, never through another member's result (comm.c offers
   * such folds only to groups of at most small_own_max_n members). */
  bool own;
};

/* The transport of a mesh's runtime (shm, unless the process was started
 * as one of several). */
const shmap__transport *shmap__transport_for(shmap__runtime *rt);
extern const shmap__transport shmap__shm_transport;

/* ---- a mesh's lifecycle (mesh.c) ------------------------------------ */

/* Choose the transport of a new mesh's runtime and let it set up (its
 * mesh_init).  0 or an error code with the message set. */
int shmap__comm_mesh_init(shmap__runtime *rt);
/* The mesh goes away: its transport's mesh_free (0 or an error). */
int shmap__comm_mesh_free(shmap__runtime *rt);

/* ---- used by map.c -------------------------------------------------- */

/* Set up the communicator of a map on rt (runtime lock held). */
int shmap__comm_open(shmap__comm *comm, shmap__runtime *rt);
void shmap__comm_close(shmap__comm *comm, bool failed);
/* The map's result as every address space agrees on it (see verdict). */
int shmap__comm_verdict(shmap__comm *comm, int rc);
static inline void shmap__comm_finish(shmap__comm *comm, int dev)
{
  comm->tp->finish(comm, dev);
}

/* ---- used by algorithms --------------------------------------------- */

/* The device number of member r of c's group. */
int shmap__comm_member(const shmap__coll *c, int r);
/* Whether member r runs in this address space. */
bool shmap__comm_is_local(const shmap__coll *c, int r);
/* Enter the call: the device's state and trace, then the transport's
 * arrive.  0, or an error code (the device is back in its body). */
int shmap__comm_arrive(shmap__coll *c);
/* Leave the call: the transport's depart, then the device's state and
 * trace (`bytes` moved, for the trace).  0 or an error code: the first
 * of the call's data operations (c->err), else depart's. */
int shmap__comm_depart(shmap__coll *c, uint64_t bytes);
/* A small reduction in one operation when the transport has one for this
 * size and group (0 or an error code, the call entered and left as by
 * arrive and depart), or 1 when it has not: then use arrive/depart.  This
 * member's dst gets elements [off, off + n) of the fold of count. */
int shmap__comm_allreduce_small(shmap__coll *c, size_t count,
                                const shmap__fold *fold, size_t off, size_t n,
                                uint64_t bytes);
/* Leave the call like shmap__comm_depart, but without waiting for the
 * member reading this device's src when the transport can defer that:
 * *deferred is then true, and the caller calls shmap__comm_src_wait(ctx,
 * that member's device, c->k) before it changes or frees src. */
int shmap__comm_depart_deferred(shmap__coll *c, uint64_t bytes, bool *deferred);
/* Wait until device `reader` finished its call number k (see
 * depart_deferred); returns at once for a transport that never defers. */
void shmap__comm_src_wait(struct shmap_ctx *ctx, int reader, uint32_t k);
/* In-place ppermute after arrive: the buffer this member takes over from
 * its source instead of copying it, or NULL (see the transport's
 * handover). */
static inline const void *shmap__comm_handover(shmap__coll *c)
{
  return c->call.hand && c->comm->tp->handover ? c->comm->tp->handover(c)
                                               : NULL;
}
/* The call's name for messages: "psum over ('i', 'j')", from the name
 * and axes the plan set, formatted on first use (comm.c). */
const char *shmap__coll_opname(shmap__coll *c);
/* What a device does before each call it makes: coll/async.c sets it when
 * a device first starts a call that runs on (runs the device's started
 * calls first, see comm.c).  Process-wide; setting it again is harmless. */
void shmap__comm_set_before_call(void (*fn)(struct shmap_ctx *ctx));

/* Whether the transport wants the push side (send, recv) listed. */
static inline bool shmap__comm_two_sided(const shmap__coll *c)
{
  return c->comm->tp->send != NULL;
}

/* Keep the first error of the call's data operations (see Errors). */
static inline int shmap__comm_keep(shmap__coll *c, int rc)
{
  if (rc && !c->err)
    c->err = rc;
  return rc;
}

static inline int shmap__comm_get(shmap__coll *c, int peer,
                                  const shmap__box *from, void *to,
                                  const int64_t to_strides[])
{
  return shmap__comm_keep(c, c->comm->tp->get(c, peer, from, to, to_strides));
}

static inline int shmap__comm_reduce(shmap__coll *c, size_t off, size_t count,
                                     const shmap__fold *fold, void *acc)
{
  return shmap__comm_keep(c, c->comm->tp->reduce(c, off, count, fold, acc));
}

static inline int shmap__comm_allreduce(shmap__coll *c, size_t off,
                                        size_t count, const shmap__fold *fold)
{
  return shmap__comm_keep(c, c->comm->tp->allreduce(c, off, count, fold));
}

/* The transport's own route for a whole allreduce (see allreduce_whole):
 * 1 when it has none for this call, else 0 or an error code (kept). */
static inline int shmap__comm_allreduce_whole(shmap__coll *c, size_t count,
                                              const shmap__fold *fold)
{
  if (!c->comm->tp->allreduce_whole)
    return 1;
  int rc = c->comm->tp->allreduce_whole(c, count, fold);
  return rc == 1 ? 1 : shmap__comm_keep(c, rc);
}

static inline int shmap__comm_send(shmap__coll *c, int peer,
                                   const shmap__box *from)
{
  return shmap__comm_keep(c, c->comm->tp->send(c, peer, from));
}

static inline int shmap__comm_recv(shmap__coll *c, int peer,
                                   const shmap__box *to)
{
  return shmap__comm_keep(c, c->comm->tp->recv(c, peer, to));
}

#endif /* SHMAP_COMM_H */
