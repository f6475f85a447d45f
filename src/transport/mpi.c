/* SPDX-License-Identifier: MIT */
/*
 * transport/mpi.c - collectives between processes, failure notices, and the
 * end of a map, over MPI.
 *
 * Messages.  Each mesh spread over several processes has its own
 * communicator.  Tag 0 carries notices between processes; every other tag
 * names one ordered pair of devices within one map,
 *     1 + ((epoch mod K) * ndev + from) * ndev + to,
 * so the messages of a map that failed half-way can never match a receive
 * of a later map, and the messages between two devices arrive in the order
 * they were sent (MPI does not reorder messages with one source and tag).
 *
 * Waiting.  A device never makes a blocking MPI call: it posts non-blocking
 * sends and receives and waits for them with the runtime's own waiting
 * (its thread sleeps briefly between tests; in fiber mode its worker runs
 * other devices and tests again), checking meanwhile for the map's failure
 * and for notices from the other processes:
 *   FAIL - a device of that process failed: this process's map fails too,
 *          with the same message;
 *   DONE - a device of that process returned from its body after this
 *          many collective calls: a device waiting for it in a later call
 *          would wait forever, which is a mismatch.
 * A process that dies is the launcher's business: Open MPI's mpirun and
 * MPICH's mpiexec kill the job when one of its processes dies.
 *
 * Quiescence.  Notices are never awaited one by one, and a failed map
 * leaves sends nobody receives.  MPI may give a freed communicator's
 * context to the next one made (MPICH does), where such leftovers would
 * match the receives of a new mesh.  So each process counts the messages
 * it sends to and receives from each process on a mesh's communicator;
 * destroying the mesh (collective, like MPI_Comm_free) exchanges the
 * counts, receives whatever is still on its way, and only then frees the
 * communicator.
 */
#include "transport/mpi.h"

#include "coll/coll.h"
#include "map.h"
#include "proc.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#ifdef SHMAP_HAVE_MPI
#include <mpi.h>

enum { N_FAIL = 1, N_DONE = 2 };
#define TAG_NOTICE 0

/* A notice as sent; a DONE notice is the first 16 bytes, its code the
 * device's number of collective calls. */
#define DONE_LEN 16
typedef struct notice {
  uint32_t kind, epoch;
  int32_t dev, code;
  char msg[SHMAP__MSG_MAX];
} notice;

/* What this process learnt about one map (two kept: a faster process may
 * already send notices of the next map). */
typedef struct eslot {
  uint32_t epoch;
  char *done;        /* ndev: the device returned from its body ... */
  uint32_t *counts;  /* ... after this many collective calls */
  int fail_dev;      /* first FAIL notice, -1: none */
  int fail_code;
  char fail_msg[SHMAP__MSG_MAX];
} eslot;

typedef struct shmap__mpimesh {
  MPI_Comm comm;
  int nproc, self, ndev;
  int tagk;                 /* epochs the tags tell apart */
  uint32_t epoch;           /* the current map */
  uv_mutex_t lock;          /* receiving notices, the slots */
  eslot slot[2];
  char *in;                 /* a received notice */
  char *out[2];             /* our FAIL notice of a map, per slot */
  notice *dout[2];          /* our DONE notices of a map, per slot and device */
  _Atomic int remote_fail;  /* the map's failure came from another process */
  _Atomic int64_t *sent;    /* nproc: messages sent to each process */
  _Atomic int64_t *got;     /* nproc: messages received (or posted to be)
                               from each process */
  uv_mutex_t orphan_lock;
  void **orphans;           /* buffers of sends a failed call left behind */
  int norphans, caporphans;
} shmap__mpimesh;

static _Thread_local bool applying_remote;

static shmap__mpimesh *mm_of(const shmap_mesh *mesh)
{
  return mesh->place ? mesh->place->mpi : NULL;
}

int shmap__mpi_mesh_init(shmap_mesh *mesh)
{
  shmap__place *pl = mesh->place;
  if (!pl || pl->nproc == 1)
    return 0;
  shmap__mpimesh *m = shmap__calloc(1, sizeof *m);
  if (!m)
    return shmap__err(SHMAP_ENOMEM, "out of memory for a mesh's MPI state");
  m->nproc = pl->nproc;
  m->self = pl->self;
  m->ndev = mesh->ndev;
  bool ok = true;
  for (int s = 0; s < 2; s++) {
    m->slot[s].done = shmap__calloc((size_t)mesh->ndev, 1);
    m->slot[s].counts = shmap__calloc((size_t)mesh->ndev, sizeof(uint32_t));
    m->slot[s].fail_dev = -1;
    m->slot[s].epoch = s ? 1 : 2; /* maps are numbered from 1 */
    m->out[s] = shmap__calloc(1, sizeof(notice));
    m->dout[s] = shmap__calloc((size_t)mesh->ndev, sizeof(notice));
    ok = ok && m->slot[s].done && m->slot[s].counts && m->out[s] && m->dout[s];
  }
  m->in = shmap__malloc(sizeof(notice));
  m->sent = shmap__calloc((size_t)m->nproc, sizeof *m->sent);
  m->got = shmap__calloc((size_t)m->nproc, sizeof *m->got);
  int *ub = NULL, flag = 0;
  MPI_Comm world = *(MPI_Comm *)shmap__proc_comm();
  MPI_Comm_get_attr(world, MPI_TAG_UB, &ub, &flag);
  long long pairs = (long long)mesh->ndev * mesh->ndev;
  m->tagk = flag && ub ? (int)((*ub - 1LL) / pairs) : 0;
  int rc = 0;
  if (!ok || !m->in || !m->sent || !m->got)
    rc = shmap__err(SHMAP_ENOMEM, "out of memory for a mesh's MPI state");
  else if (m->tagk < 2)
    rc = shmap__err(SHMAP_EINVAL,
                    "a mesh of %d devices over several processes needs MPI "
                    "tags up to %lld; this MPI offers %d",
                    mesh->ndev, 2 * pairs, flag && ub ? *ub : 0);
  else if (MPI_Comm_dup(world, &m->comm) != MPI_SUCCESS)
    rc = shmap__err(SHMAP_ESYS, "MPI_Comm_dup failed for a new mesh");
  if (rc == 0) {
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    uv_mutex_init(&m->lock);
    uv_mutex_init(&m->orphan_lock);
    atomic_init(&m->remote_fail, 0);
    pl->mpi = m;
    return 0;
  }
  for (int s = 0; s < 2; s++) {
    free(m->slot[s].done);
    free(m->slot[s].counts);
    free(m->out[s]);
    free(m->dout[s]);
  }
  free(m->in);
  free(m->sent);
  free(m->got);
  free(m);
  return rc;
}

/* Receive every message still addressed to this process on the mesh's
 * communicator (see Quiescence above); every process calls it. */
static void quiesce(shmap__mpimesh *m)
{
  int64_t *mine = shmap__malloc(sizeof *mine * (size_t)m->nproc);
  int64_t *theirs = shmap__malloc(sizeof *theirs * (size_t)m->nproc);
  if (!mine || !theirs)
    MPI_Abort(m->comm, 1); /* cannot take part: stop rather than hang */
  for (int p = 0; p < m->nproc; p++)
    mine[p] = atomic_load(&m->sent[p]);
  MPI_Alltoall(mine, 1, MPI_INT64_T, theirs, 1, MPI_INT64_T, m->comm);
  for (int p = 0; p < m->nproc; p++)
    while (atomic_load(&m->got[p]) < theirs[p]) {
      MPI_Message msg;
      MPI_Status st;
      int len = 0;
      MPI_Mprobe(p, MPI_ANY_TAG, m->comm, &msg, &st);
      MPI_Get_count(&st, MPI_BYTE, &len);
      char *buf = shmap__malloc(len > 0 ? (size_t)len : 1);
      if (!buf)
        MPI_Abort(m->comm, 1);
      MPI_Mrecv(buf, len, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      free(buf);
      atomic_fetch_add(&m->got[p], 1);
    }
  /* Until every process has its messages, senders keep theirs moving. */
  MPI_Barrier(m->comm);
  free(mine);
  free(theirs);
}

void shmap__mpi_mesh_free(shmap_mesh *mesh)
{
  shmap__mpimesh *m = mm_of(mesh);
  if (!m)
    return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) {
    quiesce(m);
    MPI_Comm_free(&m->comm);
  }
  for (int i = 0; i < m->norphans; i++)
    free(m->orphans[i]);
  free(m->orphans);
  uv_mutex_destroy(&m->orphan_lock);
  uv_mutex_destroy(&m->lock);
  for (int s = 0; s < 2; s++) {
    free(m->slot[s].done);
    free(m->slot[s].counts);
    free(m->out[s]);
    free(m->dout[s]);
  }
  free(m->in);
  free(m->sent);
  free(m->got);
  free(m);
  mesh->place->mpi = NULL;
}

/* ---- notices -------------------------------------------------------------- */

static void send_notice(shmap__mpimesh *m, const void *buf, size_t len)
{
  /* Notices are small and every process receives them before it can end
   * the map, so the sends are left to complete on their own; the buffer
   * lives until two maps later. */
  for (int p = 0; p < m->nproc; p++) {
    if (p == m->self)
      continue;
    MPI_Request r;
    if (MPI_Isend(buf, (int)len, MPI_BYTE, p, TAG_NOTICE, m->comm, &r) ==
        MPI_SUCCESS) {
      atomic_fetch_add(&m->sent[p], 1);
      MPI_Request_free(&r);
    }
  }
}

/* Receive every notice that has arrived (caller holds the lock). */
static void drain(shmap__mpimesh *m)
{
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, TAG_NOTICE, m->comm, &flag, &msg, &st) !=
            MPI_SUCCESS ||
        !flag)
      return;
    int len = 0;
    MPI_Get_count(&st, MPI_BYTE, &len);
    if (MPI_Mrecv(m->in, (int)sizeof(notice), MPI_BYTE, &msg, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      return;
    atomic_fetch_add(&m->got[st.MPI_SOURCE], 1);
    const notice *n = (const notice *)m->in;
    eslot *s = &m->slot[n->epoch & 1];
    if (len < DONE_LEN || n->epoch != s->epoch || n->dev < 0 ||
        n->dev >= m->ndev)
      continue; /* a map that already ended */
    if (n->kind == N_FAIL && s->fail_dev < 0 && (size_t)len == sizeof *n) {
      s->fail_dev = n->dev;
      s->fail_code = n->code;
      memcpy(s->fail_msg, n->msg, sizeof s->fail_msg);
      s->fail_msg[sizeof s->fail_msg - 1] = '\0';
    } else if (n->kind == N_DONE) {
      s->counts[n->dev] = (uint32_t)n->code;
      s->done[n->dev] = 1;
    }
  }
}

/* Take in notices and apply a failure of the current map (any thread). */
static void poll_notices(shmap__runtime *rt, shmap__mpimesh *m)
{
  if (uv_mutex_trylock(&m->lock) != 0)
    return; /* someone else is receiving them */
  drain(m);
  eslot *s = &m->slot[m->epoch & 1];
  int dev = s->fail_dev, code = s->fail_code;
  char msg[SHMAP__MSG_MAX];
  if (dev >= 0)
    memcpy(msg, s->fail_msg, sizeof msg);
  uv_mutex_unlock(&m->lock);
  if (dev >= 0 && !atomic_load(&rt->abort)) {
    applying_remote = true;
    shmap__fail(rt, dev, code, msg);
    applying_remote = false;
  }
}

void shmap__mpi_on_fail(shmap__runtime *rt, int dev, int code,
                        const char *msg)
{
  shmap__mpimesh *m = mm_of(rt->mesh);
  if (!m)
    return;
  if (applying_remote) {
    atomic_store(&m->remote_fail, 1);
    return;
  }
  notice *n = (notice *)m->out[m->epoch & 1];
  n->kind = N_FAIL;
  n->epoch = m->epoch;
  n->dev = dev;
  n->code = code;
  snprintf(n->msg, sizeof n->msg, "%s", msg);
  send_notice(m, n, sizeof *n);
}

void shmap__mpi_dev_done(shmap__runtime *rt, int dev, uint32_t calls)
{
  shmap__mpimesh *m = mm_of(rt->mesh);
  if (!m)
    return;
  /* A send buffer must not change before its send completes.  One buffer
   * per device and map slot: a process begins the map after next only once
   * every process has received this map's notices (it ended this map, and
   * the next, which needed them), so the buffer is idle by then. */
  notice *n = &m->dout[m->epoch & 1][dev];
  n->kind = N_DONE;
  n->epoch = m->epoch;
  n->dev = dev;
  n->code = (int32_t)calls;
  send_notice(m, n, DONE_LEN);
}

void shmap__mpi_map_begin(shmap_mesh *mesh)
{
  shmap__mpimesh *m = mm_of(mesh);
  if (!m)
    return;
  m->epoch++;
  atomic_store(&m->remote_fail, 0);
}

/* ---- waiting ---------------------------------------------------------------- */

typedef struct waitarg {
  shmap__runtime *rt;
  shmap__mpimesh *m;
  MPI_Request *reqs;
  int nreq;
  const int *watch;   /* remote members to watch for an early return */
  int nwatch;
  uint32_t k;
  int short_dev;
  uint32_t short_calls;
  int polls;
  bool done;
} waitarg;

static bool requests_done(void *arg)
{
  waitarg *w = arg;
  /* One MPI_Test per request rather than MPI_Testall: MPICH declares
   * MPI_STATUSES_IGNORE as a zero-length array, which GCC's
   * -Wstringop-overflow takes for a too-small status buffer.  A completed
   * request becomes MPI_REQUEST_NULL, which tests as complete again. */
  int flag = 1;
  for (int i = 0; i < w->nreq; i++) {
    int one = 0;
    MPI_Test(&w->reqs[i], &one, MPI_STATUS_IGNORE);
    flag &= one;
  }
  if (flag) {
    w->done = true;
    return true;
  }
  if ((w->polls++ & 7) == 0) {
    poll_notices(w->rt, w->m);
    eslot *s = &w->m->slot[w->m->epoch & 1];
    const shmap__place *pl = w->rt->mesh->place;
    for (int i = 0; i < w->nwatch; i++) {
      int d = w->watch[i];
      bool local = pl->owner[d] == pl->self;
      const shmap__dev *dv = &w->rt->devs[d];
      bool gone = local ? atomic_load(&dv->coll.finished) != 0 : s->done[d];
      uint32_t calls = local ? atomic_load(&dv->coll.arrive) : s->counts[d];
      if (gone && calls < w->k && !atomic_load(&w->rt->abort)) {
        w->short_dev = d;
        w->short_calls = calls;
        return true;
      }
    }
  }
  return false;
}

/* Leave the requests of a call that failed while exchanging descriptors:
 * reqs[2i] receives from process procs[i], reqs[2i+1] sends to it.  A
 * receive is cancelled and completed (it may have matched already, and its
 * buffer is about to go); one that was cancelled no longer counts as
 * received.  A send is left to finish, its tag belongs to this map only;
 * whether its buffer (*buf) must outlive the call is returned. */
static bool abandon(shmap__mpimesh *m, MPI_Request *reqs, int n,
                    const int *procs)
{
  bool orphan = false;
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL)
      continue;
    int flag = 0;
    MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
    if (flag)
      continue;
    if (i % 2 == 0) {
      MPI_Status st;
      int cancelled = 0;
      MPI_Cancel(&reqs[i]);
      MPI_Wait(&reqs[i], &st);
      MPI_Test_cancelled(&st, &cancelled);
      if (cancelled)
        atomic_fetch_sub(&m->got[procs[i / 2]], 1);
    } else {
      MPI_Request_free(&reqs[i]);
      orphan = true;
    }
  }
  return orphan;
}

/* Keep a send buffer until the mesh goes (see abandon). */
static void orphan(shmap__mpimesh *m, void *buf)
{
  uv_mutex_lock(&m->orphan_lock);
  if (m->norphans == m->caporphans) {
    int cap = m->caporphans ? 2 * m->caporphans : 8;
    void **n = shmap__realloc(m->orphans, sizeof *n * (size_t)cap);
    if (!n)
      abort(); /* a few pointers: the allocator is gone */
    m->orphans = n;
    m->caporphans = cap;
  }
  m->orphans[m->norphans++] = buf;
  uv_mutex_unlock(&m->orphan_lock);
}

/* 0: every request completed; SHMAP_ECANCELED; SHMAP_EMISMATCH (a watched
 * member returned early, *w set).  On an error the requests are the
 * caller's to abandon. */
static int wait_all(shmap_ctx *ctx, waitarg *w)
{
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[ctx->dev];
  w->rt = rt;
  w->short_dev = -1;
  w->done = false;
  bool ok;
  if (rt->mode == SHMAP__FIBERS) {
    /* The worker tests again on its rounds, which stay short while a
     * device waits for MPI (runtime.c). */
    atomic_fetch_add(&rt->mpi_waiters, 1);
    ok = shmap__dev_wait(rt, self, requests_done, w, &rt->abort);
    atomic_fetch_sub(&rt->mpi_waiters, 1);
  } else {
    uint64_t nap = 20000; /* 20 us, doubling up to 1 ms */
    int r;
    while ((r = shmap__wait_until(rt, &self->waiter, requests_done, w,
                                  &rt->abort, shmap__now() + nap)) < 0)
      if (nap < 1000000)
        nap *= 2;
    ok = r == 1;
  }
  if (ok && w->done)
    return 0;
  return ok ? SHMAP_EMISMATCH : SHMAP_ECANCELED;
}

static int tag_of(const shmap__mpimesh *m, int from, int to)
{
  long long e = m->epoch % (uint32_t)m->tagk;
  return (int)(1 + (e * m->ndev + from) * m->ndev + to);
}

/* ---- the transport (transport/comm.h) ---------------------------------------- */

/* Per call: the requests this device posted, and buffers that must live
 * until depart (allreduce results being sent). */
typedef struct mcall {
  MPI_Request *reqs;
  int nreq, cap;
  void **keep;
  int nkeep, capkeep;
} mcall;

static mcall *MC(shmap__coll *c) { return *(mcall **)c->priv; }

static void add_req(shmap__coll *c, MPI_Request r)
{
  mcall *mc = MC(c);
  if (mc->nreq == mc->cap) {
    int cap = mc->cap ? 2 * mc->cap : 16;
    MPI_Request *n = shmap__realloc(mc->reqs, sizeof *n * (size_t)cap);
    if (!n) /* cannot track it: wait for it now instead */
      { MPI_Wait(&r, MPI_STATUS_IGNORE); return; }
    mc->reqs = n;
    mc->cap = cap;
  }
  mc->reqs[mc->nreq++] = r;
}

static void keep(shmap__coll *c, void *p)
{
  mcall *mc = MC(c);
  if (mc->nkeep == mc->capkeep) {
    int cap = mc->capkeep ? 2 * mc->capkeep : 8;
    void **n = shmap__realloc(mc->keep, sizeof *n * (size_t)cap);
    if (!n)
      abort(); /* a few pointers: the allocator is gone */
    mc->keep = n;
    mc->capkeep = cap;
  }
  mc->keep[mc->nkeep++] = p;
}

/* The MPI type of a strided box of elements of `es` bytes. */
static MPI_Datatype box_type(int rank, const int64_t shape[],
                             const int64_t strides[], size_t es)
{
  MPI_Datatype t, nt;
  MPI_Type_contiguous((int)es, MPI_BYTE, &t);
  for (int d = rank - 1; d >= 0; d--) {
    MPI_Type_create_hvector((int)shape[d], 1, (MPI_Aint)(strides[d] * (int64_t)es),
                            t, &nt);
    MPI_Type_free(&t);
    t = nt;
  }
  MPI_Type_commit(&t);
  return t;
}

static int peer_proc(shmap__coll *c, int r, int *dev)
{
  *dev = shmap__comm_member(c, r);
  return c->comm->mesh->place->owner[*dev];
}

/* Wait for requests that must complete (data of a call every member
 * entered): no release by failures, as comm.h requires. */
static void wait_must(shmap__coll *c, MPI_Request *reqs, int n)
{
  shmap_ctx *ctx = c->ctx;
  waitarg w = {.m = c->comm->priv, .reqs = reqs, .nreq = n};
  w.rt = ctx->rt;
  w.short_dev = -1;
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[ctx->dev];
  if (rt->mode == SHMAP__FIBERS) {
    atomic_fetch_add(&rt->mpi_waiters, 1);
    while (!shmap__dev_wait(rt, self, requests_done, &w, NULL) || !w.done)
      ;
    atomic_fetch_sub(&rt->mpi_waiters, 1);
  } else {
    uint64_t nap = 20000;
    while (shmap__wait_until(rt, &self->waiter, requests_done, &w, NULL,
                             shmap__now() + nap) != 1 || !w.done)
      if (nap < 1000000)
        nap *= 2;
  }
}

static int mpi_open(shmap__comm *comm)
{
  shmap__mpimesh *m = mm_of(comm->mesh);
  shmap__mpi_map_begin((shmap_mesh *)comm->mesh);
  comm->priv = m;
  return 0;
}

static void mpi_close(shmap__comm *comm, bool failed)
{
  (void)comm;
  (void)failed;
}

static bool mpi_is_local(const shmap__comm *comm, int dev)
{
  return shmap__dev_local(comm->mesh, dev);
}

static void mpi_finish(shmap__comm *comm, int dev)
{
  shmap__runtime *rt = comm->rt;
  const shmap_ctx *ctx = rt->devs[dev].ctx;
  uint32_t calls = ctx ? ctx->seq : atomic_load(&rt->devs[dev].coll.arrive);
  /* A device released by the map's failure says so instead of its count:
   * its DONE notice may reach a process before the failure notice does
   * (they come from different processes), and a peer must then wait for
   * the failure rather than blame this device for leaving early. */
  if (atomic_load(&rt->abort))
    calls = UINT32_MAX;
  shmap__mpi_dev_done(rt, dev, calls);
  atomic_store(&rt->devs[dev].coll.finished, 1);
  shmap__wake_all(rt);
}

static void mpi_failed(shmap__runtime *rt)
{
  /* The notice to the other processes went out first (shmap__fail). */
  shmap__wake_all(rt);
}

static int mpi_arrive(shmap__coll *c)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shmap__mpimesh *m = c->comm->priv;
  shmap__dev *self = &rt->devs[ctx->dev];
  mcall *mc = shmap__calloc(1, sizeof *mc);
  memcpy(c->priv, &mc, sizeof mc);
  atomic_store(&self->coll.arrive, c->k);
  if (!mc)
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  if (c->n == 1)
    return 0;
  int n = c->n;
  shmap__call *theirs = shmap__malloc(sizeof *theirs * (size_t)n);
  MPI_Request *reqs = shmap__malloc(sizeof *reqs * 2 * (size_t)n);
  int *watch = shmap__malloc(sizeof *watch * (size_t)n);
  int *procs = shmap__malloc(sizeof *procs * (size_t)n);
  /* On the heap: a failed call may leave its sends behind (abandon). */
  shmap__call *wire = shmap__malloc(sizeof *wire);
  if (!theirs || !reqs || !watch || !procs || !wire) {
    free(theirs);
    free(reqs);
    free(watch);
    free(procs);
    free(wire);
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  }
  *wire = c->call;
  wire->src = NULL;
  wire->dst = NULL;
  int nreq = 0, nwatch = 0;
  for (int r = 0; r < n; r++) {
    if (r == c->rank)
      continue;
    int d, p = peer_proc(c, r, &d);
    atomic_fetch_add(&m->got[p], 1);
    MPI_Irecv(&theirs[r], (int)sizeof *theirs, MPI_BYTE, p,
              tag_of(m, d, ctx->dev), m->comm, &reqs[nreq++]);
    atomic_fetch_add(&m->sent[p], 1);
    MPI_Isend(wire, (int)sizeof *wire, MPI_BYTE, p, tag_of(m, ctx->dev, d),
              m->comm, &reqs[nreq++]);
    procs[nwatch] = p;
    watch[nwatch++] = d;
  }
  waitarg w = {.m = m, .reqs = reqs, .nreq = nreq, .watch = watch,
               .nwatch = nwatch, .k = c->k};
  int rc = wait_all(ctx, &w);
  if (rc && abandon(m, reqs, nreq, procs))
    orphan(m, wire);
  else
    free(wire);
  free(procs);
  char why[SHMAP__MSG_MAX - 200];
  why[0] = '\0';
  if (rc == SHMAP_EMISMATCH && !atomic_load(&rt->abort))
    shmap__call_mismatch(rt->mesh, ctx->dev, &c->call, w.short_dev, NULL,
                         c->k, w.short_calls, why, sizeof why);
  for (int r = 0; rc == 0 && r < n && !why[0]; r++)
    if (r != c->rank && !shmap__call_equal(&c->call, &theirs[r]))
      shmap__call_mismatch(rt->mesh, ctx->dev, &c->call,
                           shmap__comm_member(c, r), &theirs[r], c->k, c->k,
                           why, sizeof why);
  free(theirs);
  free(reqs);
  free(watch);
  if (why[0])
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH, "%s",
                           why);
  if (rc)
    return shmap__canceled(ctx, shmap__coll_opname(c));
  return 0;
}

static void mpi_send(shmap__coll *c, int peer, const shmap__box *from)
{
  shmap__mpimesh *m = c->comm->priv;
  int d, p = peer_proc(c, peer, &d);
  MPI_Datatype t = box_type(from->rank, from->shape, from->strides, c->esize);
  MPI_Request r;
  atomic_fetch_add(&m->sent[p], 1);
  MPI_Isend((const char *)c->call.src + from->off, 1, t, p,
            tag_of(m, c->ctx->dev, d), m->comm, &r);
  MPI_Type_free(&t);
  add_req(c, r);
}

static void mpi_recv(shmap__coll *c, int peer, const shmap__box *to)
{
  shmap__mpimesh *m = c->comm->priv;
  int d, p = peer_proc(c, peer, &d);
  MPI_Datatype t = box_type(to->rank, to->shape, to->strides, c->esize);
  MPI_Request r;
  atomic_fetch_add(&m->got[p], 1);
  MPI_Irecv((char *)c->call.dst + to->off, 1, t, p,
            tag_of(m, d, c->ctx->dev), m->comm, &r);
  MPI_Type_free(&t);
  add_req(c, r);
  c->ctx->remote += p != m->self ? (uint64_t)shmap__numel(to->rank, to->shape) * c->esize : 0;
}

static void mpi_get(shmap__coll *c, int peer, const shmap__box *from, void *to,
                    const int64_t to_strides[])
{
  if (peer == c->rank) {
    shmap__copy_box(to, to_strides, (const char *)c->call.src + from->off,
                    from->strides, from->rank, from->shape, c->esize);
    return;
  }
  shmap__mpimesh *m = c->comm->priv;
  int d, p = peer_proc(c, peer, &d);
  MPI_Datatype t = box_type(from->rank, from->shape, to_strides, c->esize);
  MPI_Request r;
  atomic_fetch_add(&m->got[p], 1);
  MPI_Irecv(to, 1, t, p, tag_of(m, d, c->ctx->dev), m->comm, &r);
  MPI_Type_free(&t);
  wait_must(c, &r, 1);
  c->ctx->remote += p != m->self ? (uint64_t)shmap__numel(from->rank, from->shape) * c->esize : 0;
}

/* Every member's src[off..off+count) folded in rank order into acc. */
static void fold_terms(shmap__coll *c, size_t off, size_t count,
                       const shmap__fold *fold, void *acc)
{
  shmap__mpimesh *m = c->comm->priv;
  size_t bytes = count * c->esize;
  int n = c->n;
  char *terms = shmap__alloc(bytes * (size_t)n + 1, false);
  MPI_Request *reqs = shmap__malloc(sizeof *reqs * (size_t)n);
  if (!terms || !reqs)
    abort(); /* no way to fail a call every member entered */
  MPI_Datatype t;
  MPI_Type_contiguous((int)c->esize, MPI_BYTE, &t);
  MPI_Type_commit(&t);
  int nreq = 0;
  for (int r = 0; r < n; r++) {
    if (r == c->rank)
      continue;
    int d, p = peer_proc(c, r, &d);
    atomic_fetch_add(&m->got[p], 1);
    MPI_Irecv(terms + (size_t)r * bytes, (int)count, t, p,
              tag_of(m, d, c->ctx->dev), m->comm, &reqs[nreq++]);
    if (p != m->self)
      c->ctx->remote += bytes;
  }
  MPI_Type_free(&t);
  wait_must(c, reqs, nreq);
  /* Every term at once, in rank order: the fused kernel folds them in
   * one pass (and divides for pmean). */
  const void **srcs = shmap__malloc(sizeof *srcs * (size_t)n);
  if (!srcs)
    abort(); /* no way to fail a call every member entered */
  const char *own = (const char *)c->call.src + off * c->esize;
  for (int r = 0; r < n; r++)
    srcs[r] = r == c->rank ? own : terms + (size_t)r * bytes;
  fold->fn(acc, srcs, n, count, fold->count);
  free(srcs);
  free(terms);
  free(reqs);
}

static void mpi_reduce(shmap__coll *c, size_t off, size_t count,
                       const shmap__fold *fold, void *acc)
{
  fold_terms(c, off, count, fold, acc);
}

static void mpi_allreduce(shmap__coll *c, size_t off, size_t count,
                          const shmap__fold *fold)
{
  shmap__mpimesh *m = c->comm->priv;
  /* The result's elements may be wider than the terms (a bool sum). */
  size_t des = fold->out_esize;
  size_t bytes = count * des;
  char *acc = shmap__alloc(bytes + 1, false);
  if (!acc)
    abort(); /* no way to fail a call every member entered */
  fold_terms(c, off, count, fold, acc);
  /* In place (psum): what this device sent from src must be out before
   * its dst, the same memory, changes. */
  mcall *mc = MC(c);
  wait_must(c, mc->reqs, mc->nreq);
  mc->nreq = 0;
  memcpy((char *)c->call.dst + off * des, acc, bytes);
  MPI_Datatype t;
  MPI_Type_contiguous((int)des, MPI_BYTE, &t);
  MPI_Type_commit(&t);
  for (int r = 0; r < c->n; r++) {
    if (r == c->rank)
      continue;
    int d, p = peer_proc(c, r, &d);
    MPI_Request q;
    atomic_fetch_add(&m->sent[p], 1);
    MPI_Isend(acc, (int)count, t, p, tag_of(m, c->ctx->dev, d), m->comm, &q);
    add_req(c, q);
  }
  MPI_Type_free(&t);
  keep(c, acc);
}

static int mpi_depart(shmap__coll *c)
{
  mcall *mc = MC(c);
  if (!mc)
    return 0;
  if (mc->nreq)
    wait_must(c, mc->reqs, mc->nreq);
  for (int i = 0; i < mc->nkeep; i++)
    free(mc->keep[i]);
  free(mc->keep);
  free(mc->reqs);
  free(mc);
  memset(c->priv, 0, sizeof mc);
  return 0;
}

const shmap__transport shmap__mpi_transport = {
    .name = "mpi",
    .open = mpi_open,
    .close = mpi_close,
    .is_local = mpi_is_local,
    .finish = mpi_finish,
    .failed = mpi_failed,
    .arrive = mpi_arrive,
    .get = mpi_get,
    .reduce = mpi_reduce,
    .allreduce = mpi_allreduce,
    .send = mpi_send,
    .recv = mpi_recv,
    .depart = mpi_depart,
};

/* ---- the end of a map ----------------------------------------------------------- */

typedef struct verdict {
  int32_t code, origin;
  char msg[SHMAP__MSG_MAX];
} verdict;

int shmap__mpi_map_end(shmap_mesh *mesh, int rc, const uint32_t *calls)
{
  shmap__mpimesh *m = mm_of(mesh);
  if (!m)
    return rc;
  shmap__runtime *rt = mesh->rt;
  (void)calls;
  /* Exchange the results, still taking in notices while waiting. */
  verdict *all = shmap__calloc((size_t)m->nproc, sizeof *all);
  if (!all)
    MPI_Abort(m->comm, 1); /* cannot take part: stop rather than hang */
  all[m->self].code = rc;
  all[m->self].origin = rc && !atomic_load(&m->remote_fail);
  if (rc)
    snprintf(all[m->self].msg, sizeof all[0].msg, "%s", shmap__errbuf());
  MPI_Request req;
  int err = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all,
                           (int)sizeof *all, MPI_BYTE, m->comm, &req);
  if (err != MPI_SUCCESS) {
    free(all);
    return shmap__err(SHMAP_ESYS, "MPI_Iallgather failed at the end of a map");
  }
  for (int i = 0;; i++) {
    int flag = 0;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (flag)
      break;
    if ((i & 15) == 0) {
      uv_mutex_lock(&m->lock);
      drain(m);
      uv_mutex_unlock(&m->lock);
    }
    uv_sleep(0);
    struct timespec ts = {0, i < 100 ? 1000 : 200000};
    nanosleep(&ts, NULL);
  }
  int pick = -1;
  for (int p = 0; p < m->nproc && pick < 0; p++)
    if (all[p].code && all[p].origin)
      pick = p;
  for (int p = 0; p < m->nproc && pick < 0; p++)
    if (all[p].code)
      pick = p;
  rc = 0;
  if (pick >= 0) {
    rc = all[pick].code;
    all[pick].msg[sizeof all[pick].msg - 1] = '\0';
    shmap__err_set(all[pick].msg);
  }
  free(all);
  /* This map is over everywhere: its slot serves the map after next. */
  uv_mutex_lock(&m->lock);
  eslot *s = &m->slot[m->epoch & 1];
  s->epoch = m->epoch + 2;
  s->fail_dev = -1;
  memset(s->done, 0, (size_t)m->ndev);
  memset(s->counts, 0, sizeof(uint32_t) * (size_t)m->ndev);
  uv_mutex_unlock(&m->lock);
  (void)rt;
  return rc;
}

#else /* no MPI */

int shmap__mpi_mesh_init(shmap_mesh *mesh) { (void)mesh; return 0; }
void shmap__mpi_mesh_free(shmap_mesh *mesh) { (void)mesh; }
void shmap__mpi_map_begin(shmap_mesh *mesh) { (void)mesh; }
void shmap__mpi_dev_done(shmap__runtime *rt, int dev, uint32_t calls)
{
  (void)rt; (void)dev; (void)calls;
}
int shmap__mpi_map_end(shmap_mesh *mesh, int rc, const uint32_t *calls)
{
  (void)mesh;
  (void)calls;
  return rc;
}
void shmap__mpi_on_fail(shmap__runtime *rt, int dev, int code, const char *msg)
{
  (void)rt; (void)dev; (void)code; (void)msg;
}
#endif
