/* SPDX-License-Identifier: MIT */
/*
 * transport/mpi.c - collectives between processes, failure notices, and the
 * end of a map, over MPI.
 *
 * Messages.  Each mesh spread over several processes has its own
 * communicator.  Tag 0 carries notices between processes; every other tag
 * names one ordered pair of devices within one map,
 *     1 + ((epoch mod K) * ndev + from) * ndev + to,
 * or, offset by K * ndev * ndev, one ordered pair of leaders of a group's
 * parts in two processes (see "Groups spread over processes"),
 * so the messages of a map that failed half-way can never match a receive
 * of a later map, and the messages between two devices arrive in the order
 * they were sent (MPI does not reorder messages with one source and tag).
 *
 * Waiting.  A device never makes a blocking MPI call: it posts non-blocking
 * sends and receives and waits for them with the runtime's own waiting
 * (shmap__poll_until: its thread tests, yielding its core; in fiber mode
 * its worker runs other devices and tests again), checking meanwhile for
 * the map's failure
 * and for notices from the other processes (every eighth poll: a probe
 * for notices and a clock reading cost more than the test of a request,
 * and most waits of a small call end within a few polls):
 *   FAIL - a device of that process failed: this process's map fails too,
 *          with the same message;
 *   DONE - a device of that process returned from its body after this
 *          many collective calls: a device waiting for it in a later call
 *          would wait forever, which is a mismatch.  The notice also says
 *          how many calls the device entered (sent its descriptor for),
 *          which settles who may give up a call after a failure (below);
 *   ASK, STATUS - a question about one device's progress in the map and
 *          its answer (see Cross-group agreement).
 * A process that dies is the launcher's business: Open MPI's mpirun and
 * MPICH's mpiexec kill the job when one of its processes dies.
 *
 * Giving up a call after a failure.  comm.h promises that a call whose
 * every member passed arrive completes, so its data waits are not released
 * by failures.  Then either every member of a group must pass arrive or
 * none: a member that gave up on the map's failure while a peer, holding
 * every descriptor already, went on to wait for its data would leave that
 * peer waiting for ever.  So the failure alone releases no member from
 * arrive.  A member gives up only when a peer whose descriptor it lacks
 * has returned from its body without entering the call: that descriptor
 * will never come, so no member of the group can pass.  Every member that
 * enters posts its descriptor to every peer at once, so when all enter,
 * all pass.  (Without a failure, such a peer is a mismatch.)
 *
 * Quiescence.  A failed map leaves sends nobody receives, and notices are
 * never awaited one by one.  The mesh's communicator belongs to the
 * process engine (proc/pmesh.c), which drains it before freeing it: this
 * file counts every message it sends and receives there (pm->sent,
 * pm->got), and its mesh_free lets the engine quiesce first.
 */
#include "transport/mpi.h"

#include "device/device.h"
#include "proc/proc.h"
#include "sched/runtime.h"
#include "sched/trace.h"
#include "transport/comm.h"

#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#ifdef SHMAP_HAVE_MPI
#include <mpi.h>

enum { N_FAIL = 1, N_DONE = 2, N_ASK = 3, N_STATUS = 4 };
#define TAG_NOTICE 0

/* A notice as sent; a DONE notice is the part before msg, its code the
 * device's number of collective calls (UINT32_MAX: it left on the map's
 * failure) and `entered` the number of calls it sent descriptors for. */
typedef struct notice {
  uint32_t kind, epoch;
  int32_t dev, code;
  uint32_t entered;
  char msg[SHMAP__MSG_MAX];
} notice;
#define DONE_LEN offsetof(notice, msg)

/* A question about one device's progress in the current map (N_ASK, from
 * the asker's process to the device's) and its answer (N_STATUS, back):
 * how many calls the device has published, whether it left its body, and
 * its descriptor of call k when still kept (see Cross-group agreement). */
enum { ST_FINISHED = 1, ST_RELEASED = 2, ST_HAS_CALL = 4 };
typedef struct smsg {
  uint32_t kind, epoch;
  int32_t asker, about;
  uint32_t k, id, count, flags;
  shmap__call call;
} smsg;
_Static_assert(sizeof(smsg) <= sizeof(notice), "a status fits a notice");

/* The buffers of exchange() for groups of up to `cap` members, kept from
 * call to call: allocating and freeing them on every call was most of
 * the library's own work in a small psum over processes.  `wire` goes to
 * the orphans (and a new one is allocated) when a failed call leaves a
 * send that still reads it. */
typedef struct xbufs {
  struct mwire *theirs, *wire;
  struct mhead *heads; /* theirs' descriptors, unpacked */
  MPI_Request *reqs;
  int *watch, *procs;
  char *settled;
  const void **srcs;
  int cap;
} xbufs;

/* Per call: the requests this device posted (the array is the device's,
 * kept from call to call). */
typedef struct mcall {
  MPI_Request *reqs;
  int nreq, cap;
} mcall;

/* A device's view of a group it made a small reduction in, computed
 * once per group (see "Groups spread over processes"). */
typedef struct hplan {
  int naxes, base, n;      /* the group (n 0: none yet) */
  int axes[SHMAP_MAX_AXES];
  bool spread;             /* a process holds two or more of its members */
  int lead;                /* the leader here: the lowest rank's device */
  int nlocal;              /* members in this process ... */
  int *locals;             /* ... their devices, by rank (n) */
  int *rproc, *ridx;       /* n: each rank's process, its index there */
  int *first, *cnt, *plead; /* nproc: a process's lowest rank (-1: none),
                               members and leader */
  int cap;                 /* ranks the arrays hold */
} hplan;

/* A leader's buffers (see "Groups spread over processes"), kept from
 * call to call: its message (to the orphans when a failed call leaves
 * its sends behind), one received message per process, the requests, and
 * the terms of one fold. */
typedef struct hbufs {
  unsigned char *out, **in;
  size_t outcap, *incap;
  char *unrecv;
  MPI_Request *reqs;
  int *watch, *procs;
  char *settled;
  const void **srcs;
  int srccap, nin;
} hbufs;

/* The descriptors a device published in the current map, the last RING
 * by call number (in the mesh's ring, see ring_slot), with their count
 * and whether it left its body. */
#define RING 64
typedef struct mdev {
  uv_mutex_t lock;
  uint32_t published;
  int finished;        /* ST_FINISHED, | ST_RELEASED: by the map's failure */
  /* Peers in this process (see Members in one process): the buffers of
   * call `cur` (valid once cur is stored, a release), and the last call
   * the device left. */
  const void *src;
  void *dst;
  _Atomic uint32_t cur, left;
  /* Buffers a call stages other processes' terms and its folded chunk in
   * (see scratch()), kept from call to call. */
  void *scratch[2];
  size_t scap[2];
  xbufs x;
  mcall mc;
  /* Groups spread over processes: the outcome of the last call whose
   * leader was another device of this process (the call number << 1, | 1
   * when it succeeded, the result then in dst), and the part of the
   * result this device takes (psum_scatter's offset and length). */
  _Atomic uint64_t hgot;
  /* As a leader: the outcome of its last call (as hgot), once it gave it
   * to every member then in that call (see lead_publish). */
  _Atomic uint64_t hlead;
  /* As a member: the leader of the call it waits in (stored before the
   * call's descriptor is published), so that only that leader gives it
   * an outcome (lead_publish). */
  _Atomic int hleader;
  size_t hoff, hn;
  const shmap__fold *hfold; /* its fold, when own (on its stack) */
  hplan hp;
  hbufs hb;
  /* By peer device, the last exchange() message this device sent to it
   * and received from it (see "Repeated calls"); allocated at the first
   * exchange, NULL in meshes of more than WREC_MAX_DEV devices. */
  struct wrec *tx, *rx;
} mdev;
enum { SCRATCH_TERMS, SCRATCH_ACC };

/* One side's record of the exchange() messages between two devices in
 * the current map (epoch): the last one's call number, how far it was
 * from the one before (0: no earlier one), and its packed descriptor
 * (see "Repeated calls"). */
typedef struct wrec {
  uint32_t epoch, k, delta, len;
  unsigned char *b;
  size_t cap;
} wrec;
#define WREC_MAX_DEV 256

/* A process's result of a map, as exchanged at its end. */
typedef struct verdict {
  int32_t code, origin;
  char msg[SHMAP__MSG_MAX];
} verdict;

/* A send left to complete on its own, with its buffer (status notices). */
typedef struct pend {
  MPI_Request req;
  void *buf;
} pend;

/* What this process learnt about one map (two kept: a faster process may
 * already send notices of the next map). */
typedef struct eslot {
  uint32_t epoch;
  char *done;        /* ndev: the device returned from its body ... */
  uint32_t *counts;  /* ... after this many collective calls */
  uint32_t *entered; /* ... having entered this many */
  int fail_dev;      /* first FAIL notice, -1: none */
  int fail_code;
  char fail_msg[SHMAP__MSG_MAX];
} eslot;

typedef struct shmap__mpimesh {
  MPI_Comm comm;            /* the mesh's, from the process engine */
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
                               from each process (both the engine's) */
  uv_mutex_t orphan_lock;
  void **orphans;           /* buffers of sends a failed call left behind */
  int norphans, caporphans;
  mdev *dev;                /* ndev: the local devices' published calls */
  shmap__call *ring;        /* RING * ndev: their descriptors (ring_slot) */
  smsg *reply;              /* ndev: the last status a local device asked
                               for, as received (under lock) */
  uint32_t *ask_id;         /* ndev: the asker's last question */
  pend *pend;               /* status notices still being sent (lock) */
  verdict *all;             /* nproc: the results of a map, at its end */
  int npend, cappend;
} shmap__mpimesh;

static _Thread_local bool applying_remote;

static shmap__mpimesh *mm_of(const shmap__runtime *rt)
{
  return rt->tstate;
}

/* Free what mesh_init allocated (m may be half built). */
static void xbufs_free(xbufs *x, bool wire)
{
  free(x->theirs);
  free(x->heads);
  free(x->reqs);
  free(x->watch);
  free(x->procs);
  free(x->settled);
  free(x->srcs);
  if (wire)
    free(x->wire);
  *x = (xbufs){.wire = wire ? NULL : x->wire};
}

static void hplan_free(hplan *h)
{
  free(h->locals);
  free(h->rproc);
  free(h->ridx);
  free(h->first);
  free(h->cnt);
  free(h->plead);
  *h = (hplan){0};
}

static void hbufs_free(hbufs *b, bool out)
{
  if (out)
    free(b->out);
  for (int i = 0; b->in && i < b->nin; i++)
    free(b->in[i]);
  free(b->in);
  free(b->incap);
  free(b->unrecv);
  free(b->reqs);
  free(b->watch);
  free(b->procs);
  free(b->settled);
  free(b->srcs);
  *b = (hbufs){.out = out ? NULL : b->out, .outcap = out ? 0 : b->outcap};
}

static void mm_free(shmap__mpimesh *m)
{
  for (int i = 0; i < m->npend; i++)
    free(m->pend[i].buf);
  free(m->pend);
  for (int d = 0; m->dev && d < m->ndev; d++) {
    free(m->dev[d].scratch[SCRATCH_TERMS]);
    free(m->dev[d].scratch[SCRATCH_ACC]);
    xbufs_free(&m->dev[d].x, true);
    free(m->dev[d].mc.reqs);
    hplan_free(&m->dev[d].hp);
    hbufs_free(&m->dev[d].hb, true);
    for (int p = 0; p < m->ndev && m->dev[d].tx; p++) {
      free(m->dev[d].tx[p].b);
      free(m->dev[d].rx[p].b);
    }
    free(m->dev[d].tx);
    free(m->dev[d].rx);
  }
  free(m->dev);
  free(m->ring);
  free(m->reply);
  free(m->ask_id);
  for (int i = 0; i < m->norphans; i++)
    free(m->orphans[i]);
  free(m->orphans);
  for (int s = 0; s < 2; s++) {
    free(m->slot[s].done);
    free(m->slot[s].counts);
    free(m->slot[s].entered);
    free(m->out[s]);
    free(m->dout[s]);
  }
  free(m->in);
  free(m->all);
  free(m);
}

/* The memory of a mesh's state: false when some allocation failed. */
static bool mm_alloc(shmap__mpimesh *m, int ndev)
{
  bool ok = true;
  for (int s = 0; s < 2; s++) {
    m->slot[s].done = shmap__calloc((size_t)ndev, 1);
    m->slot[s].counts = shmap__calloc((size_t)ndev, sizeof(uint32_t));
    m->slot[s].entered = shmap__calloc((size_t)ndev, sizeof(uint32_t));
    m->slot[s].fail_dev = -1;
    m->slot[s].epoch = s ? 1 : 2; /* maps are numbered from 1 */
    m->out[s] = shmap__calloc(1, sizeof(notice));
    m->dout[s] = shmap__calloc((size_t)ndev, sizeof(notice));
    ok = ok && m->slot[s].done && m->slot[s].counts && m->slot[s].entered &&
         m->out[s] && m->dout[s];
  }
  m->in = shmap__malloc(sizeof(notice));
  m->dev = shmap__calloc((size_t)ndev, sizeof *m->dev);
  /* Written here, not left to calloc's pages that appear when first
   * touched: calls 1 to RING of the mesh would each take a page fault per
   * 8 devices of the process instead, at 10-30 us each on a virtual
   * machine (a psum of 256 B over 2x4 devices took 32 us a call instead
   * of 4.4 until call 64).  From 2 MiB, huge pages (shmap__alloc). */
  m->ring = shmap__alloc((size_t)ndev * RING * sizeof *m->ring, true);
  m->reply = shmap__calloc((size_t)ndev, sizeof *m->reply);
  m->ask_id = shmap__calloc((size_t)ndev, sizeof *m->ask_id);
  /* Kept for the mesh's life: the end of a map cannot fail for memory,
   * which would leave the other processes waiting for this one. */
  m->all = shmap__calloc((size_t)m->nproc, sizeof *m->all);
  return ok && m->in && m->dev && m->ring && m->reply && m->ask_id && m->all;
}

/* A mesh placed on several processes: this file's state for it, over the
 * communicator the process engine makes for it (proc/pmesh.c). */
static int mpi_mesh_init(shmap__runtime *rt)
{
  shmap_mesh *mesh = rt->mesh;
  shmap__place *pl = mesh->place;
  if (!pl || pl->nproc == 1)
    return 0;
  shmap__mpimesh *m = shmap__calloc(1, sizeof *m);
  /* Out of memory before the agreement on the mesh: the other processes
   * wait for this one there (proc/pmesh.c). */
  if (!m)
    return shmap__proc_mesh_refuse(
        mesh, shmap__err(SHMAP_ENOMEM, "out of memory for a mesh's MPI state"));
  m->nproc = pl->nproc;
  m->self = pl->self;
  m->ndev = mesh->ndev;
  bool ok = mm_alloc(m, mesh->ndev);
  int ub = shmap__proc_tag_ub();
  long long pairs = (long long)mesh->ndev * mesh->ndev;
  /* Two ranges of tags: device pairs, then leader pairs (see "Groups
   * spread over processes"). */
  m->tagk = ub > 0 ? (int)((ub - 1LL) / (2 * pairs)) : 0;
  int rc = 0;
  if (!ok)
    rc = shmap__proc_mesh_refuse(
        mesh, shmap__err(SHMAP_ENOMEM, "out of memory for a mesh's MPI state"));
  else if (m->tagk < 2)
    rc = shmap__err(SHMAP_EINVAL,
                    "a mesh of %d devices over several processes needs MPI "
                    "tags up to %lld; this MPI offers %d",
                    mesh->ndev, 4 * pairs, ub);
  else
    rc = shmap__proc_mesh_open(mesh);
  if (rc) {
    mm_free(m);
    return rc;
  }
  m->comm = *(MPI_Comm *)pl->pm->comm;
  m->sent = pl->pm->sent;
  m->got = pl->pm->got;
  uv_mutex_init(&m->lock);
  uv_mutex_init(&m->orphan_lock);
  for (int d = 0; d < m->ndev; d++)
    uv_mutex_init(&m->dev[d].lock);
  atomic_init(&m->remote_fail, 0);
  rt->tstate = m;
  return 0;
}

/* Every process releases its meshes in the same order: 0, or the
 * mismatch of a process that did not (the state is freed either way). */
static int mpi_mesh_free(shmap__runtime *rt)
{
  shmap__mpimesh *m = mm_of(rt);
  if (!m)
    return 0;
  int rc = shmap__proc_mesh_quiesce(rt->mesh);
  /* Every message was received: the last status notices are sent. */
  for (int i = 0; rc == 0 && rt->mesh->place->pm->quiet && i < m->npend; i++)
    (void)SHMAP__MPI_CHECK(MPI_Wait, &m->pend[i].req, MPI_STATUS_IGNORE);
  for (int d = 0; d < m->ndev; d++)
    uv_mutex_destroy(&m->dev[d].lock);
  uv_mutex_destroy(&m->orphan_lock);
  uv_mutex_destroy(&m->lock);
  mm_free(m);
  rt->tstate = NULL;
  return rc;
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
    /* A notice that cannot go is lost: the message stays set, and the
     * other process learns what it says from the map's end instead. */
    MPI_Request r;
    if (SHMAP__MPI_CHECK(MPI_Isend, buf, (int)len, MPI_BYTE, p, TAG_NOTICE,
                         m->comm, &r) == 0) {
      atomic_fetch_add(&m->sent[p], 1);
      (void)SHMAP__MPI_CHECK(MPI_Request_free, &r);
    }
  }
}

/* Send a status notice to process p; its buffer (malloc'd, taken over)
 * lives until the send completes (caller holds the lock). */
static void send_pending(shmap__mpimesh *m, int p, smsg *msg)
{
  if (m->npend == m->cappend) {
    int cap = m->cappend ? 2 * m->cappend : 8;
    pend *n = shmap__realloc(m->pend, sizeof *n * (size_t)cap);
    if (!n) {
      free(msg); /* unanswered: the asker asks again */
      return;
    }
    m->pend = n;
    m->cappend = cap;
  }
  MPI_Request r;
  if (SHMAP__MPI_CHECK(MPI_Isend, msg, (int)sizeof *msg, MPI_BYTE, p,
                       TAG_NOTICE, m->comm, &r)) {
    free(msg);
    return;
  }
  atomic_fetch_add(&m->sent[p], 1);
  m->pend[m->npend++] = (pend){r, msg};
}

/* Free the buffers of status notices that are out (caller holds the lock). */
static void reap_pending(shmap__mpimesh *m)
{
  for (int i = 0; i < m->npend;) {
    int flag = 0;
    /* One that fails is kept, and waited for when the mesh goes. */
    if (SHMAP__MPI_CHECK(MPI_Test, &m->pend[i].req, &flag,
                         MPI_STATUS_IGNORE) ||
        !flag) {
      i++;
      continue;
    }
    free(m->pend[i].buf);
    m->pend[i] = m->pend[--m->npend];
  }
}

/*
 * Device d's descriptor of call k, kept while k is among its last RING.
 * The ring is laid out by call, then device: the descriptors of one call
 * by every device of the process lie together, where the leader of a
 * spread group reads them one after the other and each device writes
 * one.  Laid out by device, each device's 64 slots took 31 KiB, so a
 * call's descriptors lay 31 KiB apart and cycled through RING times the
 * memory a call touches: at 512 devices a process, 16 MiB, beyond the
 * caches, and a psum over 1024 devices in 2 processes cost 2-5 times as
 * much per device as over 128.
 */
static shmap__call *ring_slot(const shmap__mpimesh *m, int d, uint32_t k)
{
  return &m->ring[(size_t)(k % RING) * (size_t)m->ndev + (size_t)d];
}

/* Device d's call k, or NULL when it is not (or no longer) kept; the
 * caller holds d's lock. */
static const shmap__call *kept_call(const shmap__mpimesh *m, int d, uint32_t k)
{
  const mdev *v = &m->dev[d];
  bool kept = k >= 1 && k <= v->published && v->published - k < RING;
  return kept ? ring_slot(m, d, k) : NULL;
}

/* Local device d's progress in the current map, and its call k if kept. */
static void status_of(shmap__mpimesh *m, int d, uint32_t k, smsg *out)
{
  mdev *v = &m->dev[d];
  uv_mutex_lock(&v->lock);
  out->count = v->published;
  out->flags = (uint32_t)v->finished;
  const shmap__call *kc = kept_call(m, d, k);
  if (kc) {
    out->call = *kc;
    out->flags |= ST_HAS_CALL;
  }
  uv_mutex_unlock(&v->lock);
}

/* Receive every notice that has arrived (caller holds the lock). */
static void drain(shmap__mpimesh *m)
{
  reap_pending(m);
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (SHMAP__MPI_CHECK(MPI_Improbe, MPI_ANY_SOURCE, TAG_NOTICE, m->comm,
                         &flag, &msg, &st) ||
        !flag)
      return;
    int len = 0;
    if (SHMAP__MPI_CHECK(MPI_Get_count, &st, MPI_BYTE, &len) ||
        SHMAP__MPI_CHECK(MPI_Mrecv, m->in, (int)sizeof(notice), MPI_BYTE,
                         &msg, MPI_STATUS_IGNORE))
      return;
    atomic_fetch_add(&m->got[st.MPI_SOURCE], 1);
    const notice *n = (const notice *)m->in;
    if (n->kind == N_ASK || n->kind == N_STATUS) {
      const smsg *q = (const smsg *)m->in;
      if ((size_t)len != sizeof *q || q->epoch != m->epoch || q->asker < 0 ||
          q->asker >= m->ndev || q->about < 0 || q->about >= m->ndev)
        continue; /* another map's: its asker has moved on */
      if (n->kind == N_STATUS) {
        m->reply[q->asker] = *q;
        continue;
      }
      smsg *a = shmap__malloc(sizeof *a);
      if (!a)
        continue; /* the asker asks again */
      memset(a, 0, sizeof *a);
      a->kind = N_STATUS;
      a->epoch = q->epoch;
      a->asker = q->asker;
      a->about = q->about;
      a->k = q->k;
      a->id = q->id;
      status_of(m, q->about, q->k, a);
      send_pending(m, st.MPI_SOURCE, a);
      continue;
    }
    eslot *s = &m->slot[n->epoch & 1];
    if ((size_t)len < DONE_LEN || n->epoch != s->epoch || n->dev < 0 ||
        n->dev >= m->ndev)
      continue; /* a map that already ended */
    if (n->kind == N_FAIL && s->fail_dev < 0 && (size_t)len == sizeof *n) {
      s->fail_dev = n->dev;
      s->fail_code = n->code;
      memcpy(s->fail_msg, n->msg, sizeof s->fail_msg);
      s->fail_msg[sizeof s->fail_msg - 1] = '\0';
    } else if (n->kind == N_DONE) {
      s->counts[n->dev] = (uint32_t)n->code;
      s->entered[n->dev] = n->entered;
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

/* shmap__fail() is recording the first failure of a map: tell the other
 * processes (unless it came from one of them). */
static void mpi_notify(shmap__runtime *rt, int dev, int code, const char *msg)
{
  shmap__mpimesh *m = mm_of(rt);
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

/* Device dev returned from its body after `calls` collective calls: tell
 * the other processes, whose devices may wait for it. */
static void dev_done(shmap__runtime *rt, int dev, uint32_t calls)
{
  shmap__mpimesh *m = mm_of(rt);
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
  n->entered = atomic_load(&rt->devs[dev].coll.arrive);
  send_notice(m, n, DONE_LEN);
}

/* The caller of a map, before its devices start. */
static void map_begin(shmap__mpimesh *m)
{
  uv_mutex_lock(&m->lock);
  m->epoch++;
  for (int d = 0; d < m->ndev; d++) {
    m->dev[d].published = 0;
    m->dev[d].finished = 0;
    atomic_store(&m->dev[d].cur, 0);
    atomic_store(&m->dev[d].left, 0);
    atomic_store(&m->dev[d].hgot, 0);
    atomic_store(&m->dev[d].hlead, 0);
    atomic_store(&m->dev[d].hleader, -1);
    m->reply[d].epoch = 0;
  }
  uv_mutex_unlock(&m->lock);
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
  int err;            /* an MPI error ended the wait (message set) */
  bool cancel;        /* a watched member left without entering the call */
  /* Descriptor exchange only (arrive, see Cross-group agreement): */
  shmap__coll *c;
  struct mwire *theirs; /* by index i of watch, as received */
  struct mhead *heads;   /* their descriptors, unpacked (their()) */
  const struct mwire *mine; /* this device's message */
  /* Leaders' messages (see "Groups spread over processes"), received
   * once probed, in buffers of their size: by i, whether still to come
   * (then reqs[2i] is MPI_REQUEST_NULL), and the message. */
  char *unrecv;
  struct hbufs *hb;
  char *settled;       /* by i: its descriptor is known to be on its way */
  uint64_t next_check, interval;
  int asking;          /* index asked about, -1: none */
  uint32_t ask_id;
  uint64_t asked_at;
  int rr;              /* where the next question starts looking */
  bool await_fail;     /* a member was released by a failure not yet here */
  char *why;           /* the mismatch found, if any */
  size_t nwhy;
} waitarg;

/* A descriptor with its call number (see Cross-group agreement). */
typedef struct mhead {
  uint32_t k;
  uint16_t at;   /* where the terms start in the message (exchange()) */
  uint16_t same; /* 1: a repeated call equal to this device's own, which
                    `call` then does not hold (exchange()) */
  shmap__call call;
} mhead;
/* The message of exchange(): the call number, the descriptor packed
 * (shmap__call_pack: about 20 bytes for a psum, where the struct takes
 * 500), then from the next multiple of 16 a small reduction's terms (see
 * Small reductions), and a byte more when that would make an even
 * length: such a message always has an odd length.  Every receive takes
 * a whole mwire, so that a mismatch between two kinds of call is a
 * difference of descriptors, never a truncated message.
 *
 * Repeated calls.  Open MPI's shared-memory transport sends a message of
 * up to 256 bytes inline, in about half the time of a longer one, so a
 * header in front of 256 bytes of terms costs as much as the rest of the
 * call.  A device therefore sends its terms alone, an even number of
 * bytes (none for arrive), when its call repeats the last one it sent to
 * that peer in this map: the same packed descriptor, and a call number
 * as far from that one's as that one's was from the one before.  Both
 * devices keep a record of their last message each way (wrec: tx by the
 * sender, rx by the receiver); the messages between two devices arrive
 * in order, so the receiver's record is the sender's, and an even length
 * reads as the call the record predicts.  The check stays exact: the
 * predicted descriptor is compared with the receiver's own as any other.
 * A receive that a failed call cancels leaves the records of that map
 * unusable (a later message without a header then reads as an error).
 * Records are kept per peer only in meshes of at most WREC_MAX_DEV
 * devices. */
#define WIRE_DESC 8
#define WIRE_DATA (((WIRE_DESC + SHMAP__CALL_PACKED_MAX) + 15) / 16 * 16)
typedef struct mwire {
  alignas(16) uint32_t k; /* the call number */
  uint32_t dlen;          /* the packed descriptor's bytes */
  unsigned char b[WIRE_DATA - WIRE_DESC + SHMAP__SMALL_BYTES_MPI + 16];
} mwire;
_Static_assert(offsetof(mwire, b) == WIRE_DESC, "the descriptor follows");
_Static_assert(WIRE_DATA <= UINT16_MAX, "where the terms start fits mhead.at");

/* Where a message's terms start, after a packed descriptor of dlen
 * bytes. */
static size_t wire_data_at(uint32_t dlen)
{
  return (WIRE_DESC + (size_t)dlen + 15) / 16 * 16;
}

static unsigned char *wire_data(mwire *w)
{
  return (unsigned char *)w + wire_data_at(w->dlen);
}

/* A message length made odd (see above), the padding byte zeroed. */
static int wire_odd(mwire *w, size_t len)
{
  if (len % 2 == 0)
    ((unsigned char *)w)[len++] = 0;
  return (int)len;
}

/* Fill *w with call k's descriptor: the bytes up to its terms. */
static size_t wire_pack(mwire *w, uint32_t k, const shmap__call *call)
{
  w->k = k;
  w->dlen = (uint32_t)shmap__call_pack(call, w->b);
  return WIRE_DESC + w->dlen;
}

/* The error of a message of `len` bytes from device `from` that is not
 * one of exchange()'s. */
static int wire_error(const shmap_mesh *mesh, int from, int len)
{
  char name[96];
  shmap__mesh_devname(mesh, from, name, sizeof name);
  return shmap__err(SHMAP_ESYS,
                    "a collective call's message of %d bytes from %s does "
                    "not hold a call description (processes of different "
                    "libshmap versions?)",
                    len, name);
}

/* Record message k with the packed descriptor b[0..len) in *r; false
 * when out of memory (the record is then unusable). */
static bool wrec_put(wrec *r, uint32_t epoch, uint32_t k,
                     const unsigned char *b, uint32_t len)
{
  r->delta = r->epoch == epoch ? k - r->k : 0;
  r->epoch = epoch;
  r->k = k;
  if (r->b && r->len == len && memcmp(r->b, b, len) == 0)
    return true;
  if (r->cap < len) {
    unsigned char *nb = shmap__realloc(r->b, len);
    if (!nb) {
      r->epoch = 0;
      return false;
    }
    r->b = nb;
    r->cap = len;
  }
  memcpy(r->b, b, len);
  r->len = len;
  return true;
}

/* The records of device dev, allocated at its first exchange; false in a
 * large mesh or out of memory (messages then always carry a header). */
static bool wrec_room(shmap__mpimesh *m, int dev)
{
  mdev *v = &m->dev[dev];
  if (v->tx)
    return true;
  if (m->ndev > WREC_MAX_DEV)
    return false;
  v->tx = shmap__calloc((size_t)m->ndev, sizeof *v->tx);
  v->rx = shmap__calloc((size_t)m->ndev, sizeof *v->rx);
  if (!v->tx || !v->rx) {
    free(v->tx);
    free(v->rx);
    v->tx = v->rx = NULL;
    return false;
  }
  return true;
}

/* Whether the message of call k with the descriptor in *w, to a peer
 * whose record is *r, goes without its header. */
static bool wrec_repeats(const wrec *r, uint32_t epoch, uint32_t k,
                         const mwire *w)
{
  return r->epoch == epoch && r->delta && r->k + r->delta == k &&
         r->len == w->dlen && memcmp(r->b, w->b, w->dlen) == 0;
}

/* Read the received message *w of `len` bytes from device `from` into
 * *h (its terms at h->at bytes into *w), given this device's own
 * message `mine` and call `call` (number k), and record it.  0, or an
 * error code (message set) when it is not one of exchange()'s
 * messages. */
static int wire_unpack(const shmap_mesh *mesh, shmap__mpimesh *m, int me,
                       int from, const mwire *w, int len, const mwire *mine,
                       const shmap__call *call, uint32_t k, mhead *h)
{
  wrec *r = m->dev[me].rx ? &m->dev[me].rx[from] : NULL;
  h->same = 0;
  if (len % 2 == 0) {
    /* Terms alone: the call the record predicts. */
    if (!r || r->epoch != m->epoch || !r->delta)
      return wire_error(mesh, from, len);
    h->k = r->k + r->delta;
    h->at = 0;
    if (r->len == mine->dlen && memcmp(r->b, mine->b, r->len) == 0) {
      /* This device's own call: read from `call` where it differs in
       * number (a mismatch's message), and needs no comparison else. */
      if (h->k == k)
        h->same = 1;
      else
        memcpy(&h->call, call, sizeof *call);
    } else if (!shmap__call_unpack(&h->call, r->b, r->len)) {
      return wire_error(mesh, from, len);
    }
    r->k = h->k;
    return 0;
  }
  if (len >= WIRE_DESC && w->dlen <= SHMAP__CALL_PACKED_MAX &&
      WIRE_DESC + w->dlen <= (uint32_t)len &&
      shmap__call_unpack(&h->call, w->b, w->dlen)) {
    h->k = w->k;
    h->at = (uint16_t)wire_data_at(w->dlen);
    if (r && !wrec_put(r, m->epoch, w->k, w->b, w->dlen))
      return shmap__err(SHMAP_ENOMEM, "out of memory");
    return 0;
  }
  return wire_error(mesh, from, len);
}

/* The received descriptor of watched member i: unpacked when its
 * receive completed (test_req), or a leader's message (probe_leads). */
static const mhead *their(const waitarg *w, int i);

/* Whether watched member i's message is still to come. */
static bool recv_pending(const waitarg *w, int i)
{
  return w->reqs[2 * i] != MPI_REQUEST_NULL || (w->unrecv && w->unrecv[i]);
}

static bool probe_leads(waitarg *w);

static bool arrive_check(waitarg *w);

/* MPI_Test of request j; a completed receive of exchange() (an even j)
 * is unpacked into w->heads.  0, or an error code (message set). */
static int test_req(waitarg *w, int j, int *flag)
{
  /* A request that completed is MPI_REQUEST_NULL: it tests complete,
   * with an empty status, and was unpacked then. */
  if (!w->heads || j % 2 || w->reqs[j] == MPI_REQUEST_NULL)
    return SHMAP__MPI_CHECK(MPI_Test, &w->reqs[j], flag, MPI_STATUS_IGNORE);
  MPI_Status st;
  int len = 0, rc = SHMAP__MPI_CHECK(MPI_Test, &w->reqs[j], flag, &st);
  if (rc || !*flag)
    return rc;
  if ((rc = SHMAP__MPI_CHECK(MPI_Get_count, &st, MPI_BYTE, &len)))
    return rc;
  return wire_unpack(w->c->ctx->rt->mesh, w->m, w->c->ctx->dev,
                     w->watch[j / 2], &w->theirs[j / 2], len, w->mine,
                     &w->c->call, w->c->k, &w->heads[j / 2]);
}

/* Whether every request completed.  One MPI_Test per request rather than
 * MPI_Testall: MPICH declares MPI_STATUSES_IGNORE as a zero-length array,
 * which GCC's -Wstringop-overflow takes for a too-small status buffer.  A
 * completed request becomes MPI_REQUEST_NULL, which tests as complete
 * again, without driving MPI's progress.  The tests stop at the first
 * request still pending: each test drives the progress of every request
 * (Open MPI polls its shared memory and its other engines on each), so
 * one per poll does, and the rest are tested once it completed.  An MPI
 * error counts as the end, with w->err set. */
static bool tested_all(waitarg *w)
{
  int flag = 1;
  if (w->unrecv && !probe_leads(w))
    flag = 0;
  if (w->err)
    return true;
  for (int i = 0; i < w->nreq && flag; i++) {
    if ((w->err = test_req(w, i, &flag)))
      return true;
  }
  return flag;
}

static bool requests_done(void *arg)
{
  waitarg *w = arg;
  if (w->c)
    return arrive_check(w);
  if (tested_all(w)) {
    w->done = true;
    return true;
  }
  if ((++w->polls & 7) == 0) {
    poll_notices(w->rt, w->m);
    eslot *s = &w->m->slot[w->m->epoch & 1];
    const shmap__place *pl = w->rt->mesh->place;
    bool failed = atomic_load(&w->rt->abort) != 0;
    for (int i = 0; i < w->nwatch; i++) {
      int d = w->watch[i];
      bool local = pl->owner[d] == pl->self;
      const shmap__dev *dv = &w->rt->devs[d];
      bool gone = local ? atomic_load(&dv->coll.finished) != 0 : s->done[d];
      if (!gone)
        continue;
      uint32_t calls = local ? atomic_load(&dv->coll.arrive) : s->counts[d];
      uint32_t entered = local ? calls : s->entered[d];
      if (!failed && calls < w->k) {
        w->short_dev = d;
        w->short_calls = calls;
        return true;
      }
      /* Its descriptor will never come, so no member passes this call
       * (see "Giving up a call after a failure").  A member that left on a
       * failure this process has not heard of yet (calls UINT32_MAX) is
       * waited for until the failure notice arrives. */
      if (failed && entered < w->k) {
        w->cancel = true;
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
    /* The call failed already: an MPI error here leaves its message
     * set and changes nothing else. */
    int flag = 0;
    if (SHMAP__MPI_CHECK(MPI_Test, &reqs[i], &flag, MPI_STATUS_IGNORE) == 0 &&
        flag)
      continue;
    if (i % 2 == 0) {
      MPI_Status st;
      int cancelled = 0;
      if (SHMAP__MPI_CHECK(MPI_Cancel, &reqs[i]) == 0 &&
          SHMAP__MPI_CHECK(MPI_Wait, &reqs[i], &st) == 0 &&
          SHMAP__MPI_CHECK(MPI_Test_cancelled, &st, &cancelled) == 0 &&
          cancelled)
        atomic_fetch_sub(&m->got[procs[i / 2]], 1);
    } else {
      (void)SHMAP__MPI_CHECK(MPI_Request_free, &reqs[i]);
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
    if (!n) {
      /* Not kept, not freed: a send may still read it. */
      uv_mutex_unlock(&m->orphan_lock);
      return;
    }
    m->orphans = n;
    m->caporphans = cap;
  }
  m->orphans[m->norphans++] = buf;
  uv_mutex_unlock(&m->orphan_lock);
}

/* The descriptor exchange of arrive.  0: every request completed;
 * SHMAP_ECANCELED (the map failed and a watched member left without
 * entering the call); SHMAP_EMISMATCH (a watched member returned early,
 * *w set).  The map's failure alone does not end the wait (see "Giving up
 * a call after a failure").  On an error the requests are the caller's to
 * abandon. */
static int wait_all(shmap_ctx *ctx, waitarg *w)
{
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[ctx->dev];
  w->rt = rt;
  w->short_dev = -1;
  w->done = false;
  w->err = 0;
  w->cancel = false;
  while (!shmap__dev_poll(rt, self, requests_done, w, NULL))
    ;
  if (w->err)
    return w->err;
  if (w->done)
    return 0;
  return w->cancel ? SHMAP_ECANCELED : SHMAP_EMISMATCH;
}

/*
 * Cross-group agreement.  Descriptors travel only within the caller's
 * group, so a member that makes call k with another group (other axes,
 * other axis_index_groups, a group of one) never sends this device its
 * descriptor, and nothing above would end the wait: each device of a
 * cycle may wait in a different group, or the awaited member may have
 * completed call k with its own group long ago.  So a device still
 * waiting for some members' descriptors after CHECK_AFTER asks about them
 * (less and less often): a member of this process it reads directly
 * (mdev), one of another process answers through a status notice (N_ASK,
 * N_STATUS, one question at a time per device; whichever thread takes in
 * notices there replies, including the end-of-map wait).  Each device
 * keeps its last RING descriptors, written when its sends are posted.
 * The answer decides:
 *   - the member published call k and it equals ours: its descriptor is
 *     on its way; wait for it and ask no more about it;
 *   - it published call k and it differs: SHMAP_EMISMATCH naming both;
 *   - it published calls beyond k and call k is no longer kept (RING
 *     calls ago): its descriptor has still not come, so it made call k
 *     with a group without this device.  This is the one answer that
 *     rests on timing: a descriptor so late that its sender made RING
 *     further calls meanwhile would be taken for a mismatch;
 *   - it returned from its body before call k: a mismatch, unless the
 *     map's failure released it (then the failure is reported, as above);
 *   - it is behind: ask again later.
 * Descriptors carry their call number.  One of another number is one
 * the sender meant for a call of ours that did not include it (an earlier
 * number: ours is in our own history) or shows that it made our call k
 * without us (a later number: ask it for its call k).
 *
 * These answers keep "every member of a group passes arrive or none"
 * (Giving up a call after a failure): each is about a member that never
 * sends this device its call-k descriptor, so no member of the group
 * gets them all.  A member with all n - 1 descriptors, numbered k and
 * equal to its own, knows every member sent them to every member.
 *
 * Why a mismatch never hangs, whatever the call sequences.  Let k be the
 * first call number at which some device's call differs from one of its
 * group's (or which a member never makes).  Every call before it is the
 * same on every member of its group, so each completes (its members all
 * publish, no answer finds a difference) and every device publishes call
 * k or leaves its body.  A device waiting at k for a member that never
 * sends to it asks about that member until the member has published k or
 * left: both happen, and the answer is a difference, a pass without it,
 * or an early return, so the device fails the map.  Its failure notice
 * sets every process's abort flag, after which no device enters a further
 * call; every device still waiting asks until each member it waits for
 * has sent, differs, or left its body, which each does.  The common case
 * costs nothing: no question before a descriptor is CHECK_AFTER late.
 */
#define CHECK_AFTER 1000000ull   /* 1 ms */
#define CHECK_MAX 32000000ull    /* questions at least this often */
#define REASK_AFTER 200000000ull /* an unanswered question is asked again */

/* Decide about member i from its status s.  true: the wait is over
 * (w->why set, or w->cancel). */
static bool decide(waitarg *w, int i, const smsg *s)
{
  shmap__coll *c = w->c;
  shmap__runtime *rt = w->rt;
  int d = w->watch[i], me = c->ctx->dev;
  uint32_t k = w->k;
  bool failed = atomic_load(&rt->abort) != 0;
  bool later = false;
  int flag = 0;
  /* An MPI error leaves the request as it is; the next round's
   * tested_all reports it.  A message received that does not unpack ends
   * the wait. */
  if (w->reqs[2 * i] != MPI_REQUEST_NULL) {
    int e = test_req(w, 2 * i, &flag);
    if (e && w->reqs[2 * i] == MPI_REQUEST_NULL) {
      w->err = e;
      return true;
    }
  }
  if (!recv_pending(w, i)) {
    if (their(w, i)->k == k)
      return false; /* it came meanwhile */
    later = true;   /* it made call k without us */
  }
  if (s->count >= k) {
    if ((s->flags & ST_HAS_CALL) && shmap__call_equal(&c->call, &s->call) &&
        !later) {
      w->settled[i] = 1;
      return false;
    }
    if (failed) {
      w->cancel = true;
      return true;
    }
    shmap__call_mismatch(rt->mesh, me, &c->call, d,
                         (s->flags & ST_HAS_CALL) ? &s->call : NULL, k,
                         s->count, w->why, w->nwhy);
    return true;
  }
  if (!(s->flags & ST_FINISHED))
    return false; /* behind: ask again later */
  if (failed) {
    w->cancel = true;
    return true;
  }
  if (s->flags & ST_RELEASED) {
    /* Released by a failure whose notice has not come yet. */
    w->await_fail = true;
    return false;
  }
  w->short_dev = d;
  w->short_calls = s->count;
  shmap__call_mismatch(rt->mesh, me, &c->call, d, NULL, k, s->count, w->why,
                       w->nwhy);
  return true;
}

/* The predicate of a device waiting for its group's descriptors. */
/* Members of other processes that returned from their bodies (DONE):
 * true when that settles the wait (w->why or w->cancel set). */
static bool remote_left(waitarg *w, bool failed)
{
  shmap__mpimesh *m = w->m;
  eslot *es = &m->slot[m->epoch & 1];
  const shmap__place *pl = w->rt->mesh->place;
  uint32_t k = w->k;
  for (int i = 0; i < w->nwatch; i++) {
    int d = w->watch[i];
    if (pl->owner[d] == pl->self || !recv_pending(w, i) ||
        !es->done[d])
      continue;
    if (!failed && es->counts[d] < k) {
      w->short_dev = d;
      w->short_calls = es->counts[d];
      shmap__call_mismatch(w->rt->mesh, w->c->ctx->dev, &w->c->call, d, NULL,
                           k, es->counts[d], w->why, w->nwhy);
      return true;
    }
    if (failed && es->entered[d] < k) {
      w->cancel = true;
      return true;
    }
  }
  return false;
}

/* The answer to our question, if any: 1 when it settles the wait, -1 to
 * wait on for it, 0 to go on (asking again when unanswered too long). */
static int take_answer(waitarg *w, uint64_t now)
{
  shmap__mpimesh *m = w->m;
  int me = w->c->ctx->dev;
  if (w->asking < 0)
    return 0;
  smsg s;
  bool got = false;
  uv_mutex_lock(&m->lock);
  if (m->reply[me].epoch == m->epoch && m->reply[me].id == w->ask_id) {
    s = m->reply[me];
    m->reply[me].epoch = 0;
    got = true;
  }
  uv_mutex_unlock(&m->lock);
  if (got) {
    int i = w->asking;
    w->asking = -1;
    return decide(w, i, &s) ? 1 : 0;
  }
  if (now - w->asked_at < REASK_AFTER)
    return -1;
  w->asking = -1; /* unanswered (a process between maps): ask again */
  return 0;
}

static bool ask_members(waitarg *w, uint64_t now);

static bool arrive_check(waitarg *w)
{
  shmap__mpimesh *m = w->m;
  shmap__runtime *rt = w->rt;
  uint32_t k = w->k;
  int me = w->c->ctx->dev;
  /* A verdict stands: a fiber's worker may ask again before resuming it. */
  if (w->done || w->err || w->cancel || w->why[0])
    return true;
  int flag = tested_all(w);
  if (w->err)
    return true;
  bool later = false;
  for (int i = 0; i < w->nwatch; i++) {
    if (recv_pending(w, i) || their(w, i)->k == k)
      continue;
    if (their(w, i)->k > k) {
      later = true;
      continue;
    }
    /* An earlier number: we made that call without the sender, which
     * made it with us; our own history holds ours. */
    if (atomic_load(&rt->abort)) {
      w->cancel = true;
      return true;
    }
    uint32_t j = their(w, i)->k;
    smsg mine;
    memset(&mine, 0, sizeof mine);
    status_of(m, me, j, &mine);
    if (mine.flags & ST_HAS_CALL)
      shmap__call_mismatch(rt->mesh, me, &mine.call, w->watch[i],
                           &their(w, i)->call, j, j, w->why, w->nwhy);
    else
      shmap__call_mismatch(rt->mesh, w->watch[i], &their(w, i)->call, me,
                           NULL, j, j, w->why, w->nwhy);
    return true;
  }
  if (flag && !later) {
    w->done = true;
    return true;
  }
  /* Notices and the clock every eighth poll only, the first of them
   * after a few polls: most exchanges complete sooner, and each costs
   * an MPI probe and a clock reading. */
  if ((++w->polls & 7) != 0 && !later)
    return false;
  poll_notices(rt, m);
  bool failed = atomic_load(&rt->abort) != 0;
  if (w->await_fail && failed) {
    w->cancel = true;
    return true;
  }
  if (remote_left(w, failed))
    return true;
  uint64_t now = shmap__now();
  /* The answer to our question. */
  int a = take_answer(w, now);
  if (a)
    return a > 0;
  if (!w->next_check) /* the first look at the clock in this wait */
    w->next_check = now + CHECK_AFTER;
  if (!later && now < w->next_check)
    return false;
  w->interval = w->interval < CHECK_MAX ? 2 * w->interval : CHECK_MAX;
  w->next_check = now + w->interval;
  return ask_members(w, now);
}

/* Members of this process: read directly.  Others: one question.  true
 * when a verdict was reached. */
static bool ask_members(waitarg *w, uint64_t now)
{
  shmap__mpimesh *m = w->m;
  const shmap__place *pl = w->rt->mesh->place;
  uint32_t k = w->k;
  int me = w->c->ctx->dev;
  for (int t = 0; t < w->nwatch; t++) {
    int i = (w->rr + t) % w->nwatch;
    int d = w->watch[i];
    bool pending = recv_pending(w, i) || their(w, i)->k != k;
    if (!pending || w->settled[i])
      continue;
    if (pl->owner[d] == pl->self) {
      smsg s;
      memset(&s, 0, sizeof s);
      status_of(m, d, k, &s);
      if (decide(w, i, &s))
        return true;
      continue;
    }
    if (w->asking >= 0)
      continue;
    smsg *q = shmap__malloc(sizeof *q);
    if (!q)
      continue;
    memset(q, 0, sizeof *q);
    q->kind = N_ASK;
    q->asker = me;
    q->about = d;
    q->k = k;
    q->id = w->ask_id = ++m->ask_id[me];
    uv_mutex_lock(&m->lock);
    q->epoch = m->epoch;
    send_pending(m, pl->owner[d], q);
    uv_mutex_unlock(&m->lock);
    w->asking = i;
    w->asked_at = now;
    w->rr = i + 1;
  }
  return false;
}

static int tag_of(const shmap__mpimesh *m, int from, int to)
{
  long long e = m->epoch % (uint32_t)m->tagk;
  return (int)(1 + (e * m->ndev + from) * m->ndev + to);
}

/* The tag of a message between two processes' leaders of a group (see
 * "Groups spread over processes"), in a range after every device pair's. */
static int lead_tag_of(const shmap__mpimesh *m, int from, int to)
{
  long long e = m->tagk + m->epoch % (uint32_t)m->tagk;
  return (int)(1 + (e * m->ndev + from) * m->ndev + to);
}

/* ---- the transport (transport/comm.h) ---------------------------------------- */


static mcall *MC(shmap__coll *c) { return *(mcall **)c->priv; }

/* A data operation's failure (message set): the job fails with it. */
static int call_fail(shmap__coll *c, int rc)
{
  return shmap__dev_fail(c->ctx, shmap__coll_opname(c), rc, "%s",
                         shmap__errbuf());
}

/* How an exchange of descriptors ended for device c: an engine error
 * (err), a mismatch (why, the message), a failure elsewhere that released
 * it (rc), or agreement (0). */
static int agreed(shmap__coll *c, int err, const char *why, int rc)
{
  if (err)
    return call_fail(c, err);
  if (why[0])
    return shmap__dev_fail(c->ctx, shmap__coll_opname(c), SHMAP_EMISMATCH,
                           "%s", why);
  if (rc)
    return shmap__canceled(c->ctx, shmap__coll_opname(c));
  return 0;
}

/* A failure after every member passed arrive: the peers wait for this
 * device's data, and by the seam's promise (comm.h) no failure releases
 * that wait, so no notice could end it.  The job ends instead, with the
 * device's message, rather than leave the other processes waiting. */
static int data_fail(shmap__coll *c, int rc)
{
  rc = call_fail(c, rc);
  shmap__proc_abort(shmap__errbuf());
  return rc; /* not reached with MPI; kept for the compiler */
}

/* Track request r until depart; 0 or an MPI error (message set). */
static int add_req(shmap__coll *c, MPI_Request r)
{
  mcall *mc = MC(c);
  if (mc->nreq == mc->cap) {
    int cap = mc->cap ? 2 * mc->cap : 16;
    MPI_Request *n = shmap__realloc(mc->reqs, sizeof *n * (size_t)cap);
    if (!n) /* cannot track it: wait for it now instead */
      return SHMAP__MPI_CHECK(MPI_Wait, &r, MPI_STATUS_IGNORE);
    mc->reqs = n;
    mc->cap = cap;
  }
  mc->reqs[mc->nreq++] = r;
  return 0;
}

/* The MPI type of a box of `rank` dimensions with these element strides:
 * *count of it.  A dense box (row-major strides of its shape: a whole
 * block, or a piece cut along its first axis) is plain bytes, which MPI
 * moves by its fastest path (Open MPI's single copy between processes of
 * one host); any other box is a nest of hvectors over the element.  The
 * signature is the same either way (bytes), so the two sides of a
 * transfer may describe it differently. */
static int box_type(int rank, const int64_t shape[], const int64_t strides[],
                    size_t es, MPI_Datatype *type, int *count)
{
  int64_t n = 1; /* elements of the dimensions after d */
  bool dense = true;
  for (int d = rank - 1; d >= 0; d--) {
    if (shape[d] != 1 && strides[d] != n)
      dense = false;
    n *= shape[d];
  }
  *type = MPI_BYTE;
  if (dense && (uint64_t)n * es <= INT_MAX) {
    *count = (int)((uint64_t)n * es);
    return 0;
  }
  MPI_Datatype t, nt;
  int rc = SHMAP__MPI_CHECK(MPI_Type_contiguous, (int)es, MPI_BYTE, &t);
  for (int d = rank - 1; rc == 0 && d >= 0; d--) {
    rc = SHMAP__MPI_CHECK(MPI_Type_create_hvector, (int)shape[d], 1,
                          (MPI_Aint)(strides[d] * (int64_t)es), t, &nt);
    (void)SHMAP__MPI_CHECK(MPI_Type_free, &t);
    t = nt;
  }
  if (rc == 0 && (rc = SHMAP__MPI_CHECK(MPI_Type_commit, &t)))
    (void)SHMAP__MPI_CHECK(MPI_Type_free, &t);
  if (rc)
    return rc;
  *type = t;
  *count = 1;
  return 0;
}

static void type_done(MPI_Datatype *t)
{
  if (*t != MPI_BYTE)
    (void)SHMAP__MPI_CHECK(MPI_Type_free, t);
}

/* An element of `es` bytes, as an MPI type (committed); 0 or an error. */
static int elem_type(size_t es, MPI_Datatype *t)
{
  int rc = SHMAP__MPI_CHECK(MPI_Type_contiguous, (int)es, MPI_BYTE, t);
  if (rc == 0 && (rc = SHMAP__MPI_CHECK(MPI_Type_commit, t)))
    (void)SHMAP__MPI_CHECK(MPI_Type_free, t);
  return rc;
}

static int peer_proc(shmap__coll *c, int r, int *dev)
{
  *dev = shmap__comm_member(c, r);
  return c->comm->mesh->place->owner[*dev];
}

/*
 * Members in one process.  Devices of one process share its memory, so
 * pieces between them never go through MPI: the pulling side reads the
 * peer's buffer directly (get, a reduction's term) and the writing side
 * of a reduction's result writes into the peer's dst, while the matching
 * send and recv are nothing.  Both sides agree on who is local (the
 * placement is the same in every process), so the messages that remain
 * between each pair of processes still match in order.  A member's
 * buffers are found in its mdev: it stores them, then the call number
 * `cur` (a release), before its descriptor goes out, and a peer holding
 * that descriptor (every peer, after arrive) loads `cur` (an acquire).
 * Comm.h's rule that buffers stay unchanged until depart becomes a
 * barrier of the local members at depart: each stores the call it left
 * in `left` (after its last read and write of a peer's buffer), wakes the
 * others, and leaves once every local member has left the call.  A
 * member's pieces of its own chunk in an in-place psum are read only by
 * the member that writes the result there, so reads come before writes.
 */
static bool local_member(shmap__coll *c, int r, int *dev)
{
  const shmap__place *pl = c->comm->mesh->place;
  *dev = shmap__comm_member(c, r);
  return pl->owner[*dev] == pl->self;
}

/* Local member d's buffers for our call (it published before sending us
 * its descriptor, which we hold: the loop only guards against a compiler
 * or MPI library that made that order invisible). */
static const mdev *peer_bufs(shmap__coll *c, int d)
{
  shmap__mpimesh *m = c->comm->priv;
  const mdev *v = &m->dev[d];
  while (atomic_load_explicit(&v->cur, memory_order_acquire) != c->k)
    sched_yield();
  return v;
}

typedef struct leftarg {
  shmap__coll *c;
  int next; /* ranks below it have left */
} leftarg;

static bool locals_left(void *arg)
{
  leftarg *a = arg;
  shmap__coll *c = a->c;
  shmap__mpimesh *m = c->comm->priv;
  for (; a->next < c->n; a->next++) {
    int d;
    if (a->next == c->rank || !local_member(c, a->next, &d))
      continue;
    if (atomic_load_explicit(&m->dev[d].left, memory_order_acquire) < c->k)
      return false;
  }
  return true;
}

/* The barrier of the local members at depart (see above). */
static void locals_depart(shmap__coll *c)
{
  shmap__mpimesh *m = c->comm->priv;
  shmap__runtime *rt = c->ctx->rt;
  shmap__publish(rt, &m->dev[c->ctx->dev].left, c->k);
  int nlocal = 0;
  for (int r = 0; r < c->n; r++) {
    int d;
    if (r != c->rank && local_member(c, r, &d)) {
      nlocal++;
      shmap__dev_wake(&rt->devs[d]);
    }
  }
  if (nlocal == 0)
    return;
  leftarg a = {c, 0};
  if (!locals_left(&a))
    shmap__dev_wait(rt, &rt->devs[c->ctx->dev], locals_left, &a, NULL);
}

/* Wait for requests that must complete (data of a call every member
 * entered): no release by failures, as comm.h requires.  0, or an MPI
 * error (message set). */
static int wait_must(shmap__coll *c, MPI_Request *reqs, int n)
{
  shmap_ctx *ctx = c->ctx;
  waitarg w = {.m = c->comm->priv, .reqs = reqs, .nreq = n};
  w.rt = ctx->rt;
  w.short_dev = -1;
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[ctx->dev];
  while (!shmap__dev_poll(rt, self, requests_done, &w, NULL) || !w.done)
    ;
  return w.err;
}

static int mpi_open(shmap__comm *comm)
{
  shmap__mpimesh *m = mm_of(comm->rt);
  map_begin(m);
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
  shmap__mpimesh *m = comm->priv;
  mdev *v = &m->dev[dev];
  uv_mutex_lock(&v->lock);
  v->finished = ST_FINISHED | (calls == UINT32_MAX ? ST_RELEASED : 0);
  uv_mutex_unlock(&v->lock);
  dev_done(rt, dev, calls);
  atomic_store(&rt->devs[dev].coll.finished, 1);
  shmap__wake_all(rt);
}

static void mpi_failed(shmap__runtime *rt)
{
  /* The notice to the other processes went out first (shmap__fail). */
  shmap__wake_all(rt);
}

/* This device published call c->k (its sends are posted): peers' questions
 * may now learn it (see Cross-group agreement). */
static void publish(shmap__mpimesh *m, const shmap__coll *c)
{
  mdev *v = &m->dev[c->ctx->dev];
  v->src = c->call.src;
  v->dst = c->call.dst;
  atomic_store_explicit(&v->cur, c->k, memory_order_release);
  /* The parts of the descriptor in use only (readers stop there).  The
   * slot still holds call k - RING, which an answer may read until
   * published moves on: hence the lock. */
  shmap__call *slot = ring_slot(m, c->ctx->dev, c->k);
  uv_mutex_lock(&v->lock);
  shmap__call_copy(slot, &c->call);
  slot->src = NULL;
  slot->dst = NULL;
  v->published = c->k;
  uv_mutex_unlock(&v->lock);
}

/* Post the descriptor exchange of arrive: for the i-th other member,
 * reqs[2i] receives its descriptor into theirs[i] and reqs[2i+1] sends
 * ours (wire, wbytes; its first hbytes, the descriptor, when `only` is
 * another member), or its `bytes` of terms alone when the call repeats
 * (see "Repeated calls"); procs[i] and watch[i] are its process and
 * device.  *nreq counts the requests posted.  0, or an MPI error
 * (message set): the posting stops there. */
static int post_all(shmap__coll *c, mwire *wire, int wbytes, int hbytes,
                    int bytes, int only, mwire *theirs, MPI_Request *reqs,
                    int *procs, int *watch, int *nreq)
{
  shmap__mpimesh *m = c->comm->priv;
  int me = c->ctx->dev, i = 0;
  wrec *tx = m->dev[me].tx;
  for (int r = 0; r < c->n; r++) {
    if (r == c->rank)
      continue;
    int d, p = peer_proc(c, r, &d);
    procs[i] = p;
    watch[i] = d;
    atomic_fetch_add(&m->got[p], 1);
    int rc = SHMAP__MPI_CHECK(MPI_Irecv, &theirs[i], (int)sizeof *theirs,
                              MPI_BYTE, p, tag_of(m, d, me), m->comm,
                              &reqs[2 * i]);
    if (rc) {
      atomic_fetch_sub(&m->got[p], 1);
      return rc;
    }
    atomic_fetch_add(&m->sent[p], 1);
    bool to = only < 0 || only == r;
    const void *buf = wire;
    int len = to ? wbytes : hbytes;
    if (tx && (!to || bytes % 2 == 0) &&
        wrec_repeats(&tx[d], m->epoch, c->k, wire)) {
      buf = wire_data(wire);
      len = to ? bytes : 0;
      tx[d].k = c->k;
    } else if (tx) {
      (void)wrec_put(&tx[d], m->epoch, c->k, wire->b, wire->dlen);
    }
    rc = SHMAP__MPI_CHECK(MPI_Isend, buf, len, MPI_BYTE, p, tag_of(m, me, d),
                          m->comm, &reqs[2 * i + 1]);
    if (rc) {
      atomic_fetch_sub(&m->sent[p], 1);
      reqs[2 * i + 1] = MPI_REQUEST_NULL;
      *nreq = 2 * i + 2;
      return rc;
    }
    *nreq = 2 * ++i;
  }
  return 0;
}

/* The device's buffers of exchange() for a group of n, or NULL (out of
 * memory). */
static xbufs *xbufs_for(shmap__mpimesh *m, int dev, int n)
{
  xbufs *x = &m->dev[dev].x;
  if (x->cap < n) {
    xbufs_free(x, false);
    x->theirs = shmap__malloc(sizeof *x->theirs * (size_t)n);
    x->heads = shmap__malloc(sizeof *x->heads * (size_t)n);
    x->reqs = shmap__malloc(sizeof *x->reqs * 2 * (size_t)n);
    x->watch = shmap__malloc(sizeof *x->watch * (size_t)n);
    x->procs = shmap__malloc(sizeof *x->procs * (size_t)n);
    x->settled = shmap__malloc((size_t)n);
    x->srcs = shmap__malloc(sizeof *x->srcs * (size_t)n);
    if (!x->theirs || !x->heads || !x->reqs || !x->watch || !x->procs ||
        !x->settled || !x->srcs) {
      xbufs_free(x, false);
      return NULL;
    }
    x->cap = n;
  }
  /* On the heap: a failed call may leave its sends behind (abandon). */
  if (!x->wire && !(x->wire = shmap__calloc(1, sizeof *x->wire)))
    return NULL;
  return x;
}

/* exchange() in a group of one: nobody to send to or agree with. */
static int exchange_alone(shmap__coll *c, const void *data, size_t bytes,
                          const void ***got)
{
  shmap_ctx *ctx = c->ctx;
  publish(c->comm->priv, c);
  atomic_store(&ctx->rt->devs[ctx->dev].coll.arrive, c->k);
  if (got) {
    xbufs *x = xbufs_for(c->comm->priv, ctx->dev, 1);
    if (!x)
      return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                             "out of memory");
    /* A copy: the fold may write dst, which may be src (in place). */
    x->wire->dlen = 0;
    if (bytes)
      memcpy(wire_data(x->wire), data, bytes);
    x->srcs[0] = wire_data(x->wire);
    *got = x->srcs;
  }
  return 0;
}

/* Send this device's descriptor (and `bytes` of terms from `data`) to
 * every other member (the terms to member `only` alone when it is not
 * -1), take theirs, and agree.  0, with *got, when got is not NULL,
 * pointing at every member's terms by rank (this device's own a copy in
 * its message), in the device's buffers (xbufs) until its next call; or
 * an error code, message set.  The messages stay where they came: the
 * ranks are put in order by pointers, not by moving messages of a
 * descriptor each. */
static int exchange(shmap__coll *c, const void *data, size_t bytes, int only,
                    const void ***got)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shmap__mpimesh *m = c->comm->priv;
  shmap__dev *self = &rt->devs[ctx->dev];
  /* coll.arrive counts the calls whose descriptor went to every peer: a
   * call that fails before that was never entered (see "Giving up a call
   * after a failure"). */
  if (c->n == 1)
    return exchange_alone(c, data, bytes, got);
  int n = c->n;
  xbufs *x = xbufs_for(m, ctx->dev, n);
  if (!x)
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  mwire *theirs = x->theirs, *wire = x->wire;
  mhead *heads = x->heads;
  MPI_Request *reqs = x->reqs;
  int *watch = x->watch, *procs = x->procs;
  char *settled = x->settled;
  memset(settled, 0, (size_t)n);
  if (!wrec_room(m, ctx->dev) && m->ndev <= WREC_MAX_DEV)
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  int hbytes = wire_odd(wire, wire_pack(wire, c->k, &c->call));
  if (bytes)
    memcpy(wire_data(wire), data, bytes);
  int wbytes = wire_odd(wire, wire_data_at(wire->dlen) + bytes);
  /* Before the sends: a member of this process that has our descriptor
   * finds our buffers (see Members in one process). */
  publish(m, c);
  int nreq = 0;
  int perr = post_all(c, wire, wbytes, hbytes, (int)bytes, only, theirs,
                      reqs, procs, watch, &nreq);
  int nwatch = nreq / 2;
  /* A call whose descriptors did not all go out was not entered (see
   * "Giving up a call after a failure"). */
  if (!perr)
    atomic_store(&self->coll.arrive, c->k);
  char why[SHMAP__MSG_MAX - 200];
  why[0] = '\0';
  waitarg w = {.m = m, .reqs = reqs, .nreq = nreq, .watch = watch,
               .nwatch = nwatch, .k = c->k, .c = c,
               .theirs = theirs, .heads = heads, .mine = wire,
               .settled = settled, .interval = CHECK_AFTER, .asking = -1,
               .why = why, .nwhy = sizeof why};
  int rc = perr ? perr : wait_all(ctx, &w);
  int err = perr ? perr : w.err;
  bool orphaned = rc && abandon(m, reqs, nreq, procs);
  /* A cancelled receive leaves its sender's record ahead of ours. */
  for (int i = 0; rc && m->dev[ctx->dev].rx && i < nwatch; i++)
    m->dev[ctx->dev].rx[watch[i]].epoch = 0;
  if (atomic_load(&rt->abort))
    why[0] = '\0';
  for (int i = 0; rc == 0 && i < nwatch && !why[0]; i++)
    if (!heads[i].same && !shmap__call_equal(&c->call, &heads[i].call))
      shmap__call_mismatch(rt->mesh, ctx->dev, &c->call, watch[i],
                           &heads[i].call, c->k, c->k, why, sizeof why);
  /* The terms that came from other processes (a ppermute's from its
   * source only). */
  for (int i = 0; rc == 0 && !why[0] && i < nwatch; i++)
    ctx->remote += procs[i] != m->self &&
                           (only < 0 || i + (i >= c->rank) == c->from)
                       ? bytes
                       : 0;
  if (!rc && !why[0] && got) {
    /* By rank: the members before this one, this one, the others. */
    for (int r = 0; r < n; r++)
      x->srcs[r] = r == c->rank
                       ? wire_data(wire)
                       : (unsigned char *)&theirs[r - (r > c->rank)] +
                             heads[r - (r > c->rank)].at;
    *got = x->srcs;
  }
  if (orphaned) {
    orphan(m, wire);
    x->wire = NULL;
  }
  return agreed(c, err, why, rc);
}

static int mpi_arrive(shmap__coll *c)
{
  shmap__mpimesh *m = c->comm->priv;
  mcall *mc = &m->dev[c->ctx->dev].mc;
  mc->nreq = 0;
  memcpy(c->priv, &mc, sizeof mc);
  return exchange(c, NULL, 0, -1, NULL);
}

/*
 * Small reductions.  A reduction of at most SHMAP__SMALL_BYTES_MPI takes one
 * exchange instead of three dependent steps (descriptors, the pieces of
 * the reduce-scatter and all-gather, the wait for the sends): each member
 * sends its terms with its descriptor, and once it holds every member's,
 * equal to its own, folds them all in rank order, as shm does.  A member
 * that waits for a peer costs a scheduling round when processes share
 * cores, so each step saved is one round less.  Every member gets the
 * same descriptors and the same verdict as from arrive (the same
 * exchange); nobody reads this device's buffers, so nothing is waited
 * for afterwards.  The other small calls that coll/algo.c words as such
 * a "fold" take the same exchange: all_gather and all_to_all (the fold
 * concatenates), psum_scatter (each member keeps its part), and ppermute,
 * whose fold picks the term of the member this one receives from (an
 * `own` fold).  A ppermute's terms go only to the member that takes
 * them, its descriptor to every member, so the agreement is arrive's.
 * In a group spread over processes (below) an own fold is not one
 * result for all: the leader applies each local member's own fold (its
 * shmap__fold, on that member's stack while it waits for the outcome,
 * published with its buffers) to every member's terms, into that
 * member's dst; such a fold is never partial, so every term travels.
 */
/*
 * Groups spread over processes.  A small reduction whose group has two or
 * more members in some process would cost, by the exchange above, a
 * message from every member to every other one: n(n-1) per call, each on
 * a tag of its own, and MPI's matching walks lists that grow with them
 * (the time grew as n^4).  Such a group goes in two levels instead.  The
 * members of one process agree and combine through its memory; their
 * leader, the device of the lowest rank among them, sends one message to
 * the leader of each other process holding members, and receives one from
 * each: its descriptor and its process's terms.
 *
 * Agreement.  The leader reads each local member's published descriptor
 * of the call (mdev, as "Cross-group agreement" reads a local member) and
 * decides about it exactly as a member that asked about it would: equal,
 * a mismatch naming the two (the message a member of today's exchange
 * that received it would report), a member that returned early, or one
 * released by the map's failure.  Only when every local member published
 * an equal descriptor does the leader send, so one descriptor stands for
 * the process.  Between leaders, the messages are the descriptors of
 * arrive's exchange: their call numbers, the questions about a late
 * leader, the rules on giving up after a failure all apply unchanged with
 * the leaders as the watched members, and a leader counts as having
 * entered the call (coll.arrive) once its messages went out.  A member
 * that is not a leader waits for its leader's outcome, watching the
 * leader as a local member: a leader whose call differs, or that
 * returned without making it, settles its wait the same way.  The leader
 * records its failure before it publishes the outcome, so the members'
 * cancellation never comes first.
 *
 * The fold.  The result is the left fold of every member's terms in rank
 * order, bit for bit.  A process whose members hold ranks 0 to h-1 may
 * send their fold instead (when the fold of a run is itself a term, as
 * shm's "Two levels"); every other process sends each of its members'
 * terms, and each leader folds the same terms in the same order, then
 * writes each local member's part of the result into its dst and
 * publishes the outcome (hgot).  Pieces of a later run cannot be folded
 * apart: (a + b) + (c + d) is not ((a + b) + c) + d in floating point.
 *
 * Larger calls over a spread group.  Above the small bound a call would
 * take arrive, the pieces and depart, each member with every other: the
 * same n(n-1) messages.  Over 2x64 devices a psum of 4 KiB took 163 ms a
 * call that way and 0.15 ms in two levels; 64 KiB, 281 and 4.8 ms; 256
 * KiB, 330 and 22 ms.  So the two levels take larger calls too
 * (mpi_small_takes), up to a bound.  There the leader alone moves and
 * folds every term, where the pieces spread the work over the members
 * and move only what each one reads, which wins for large blocks in
 * small groups: a psum of 1 MiB over 2x4 devices took 1.2 ms by pieces
 * and 3.0 in two levels (a group in two runs of two processes now takes
 * the chain above the bound, "Larger reductions between two processes"),
 * over 2x16 the two were even (15 and 14 ms), and
 * 256 KiB over 2x4 took 316-347 us by pieces, 226-243 in two levels.  A
 * member's terms may be up to 32 KiB per member of the group (256 KiB
 * over 2x4, 1 MiB over 2x16), and 16 KiB where each member keeps a part
 * of the result (psum_scatter, all_to_all), whose pieces fold only that
 * part.  A ppermute's terms all travel in two levels,
 * where the pieces send only the block each member reads: up to 64 bytes
 * per member squared (4 KiB over 2x4, where 16 KiB took 37 us by pieces
 * and 56 in two levels; 64 KiB over 2x16, 1 MiB over 2x64).  And all
 * the terms together up to 64 MiB, so that a message's length stays an
 * int.  The bound depends on the call and the group alone, so every
 * member of an equal call takes the same path.
 */
static void *scratch(shmap__coll *c, int which, size_t bytes);

typedef struct hwire {
  mhead h;
  uint32_t prefold, nterms; /* the terms: one fold of ranks 0.. or each */
  alignas(16) unsigned char data[];
} hwire;

/* The base device of c's group (see shmap__comm_member). */
static int group_base(const shmap__coll *c)
{
  int base = c->ctx->dev;
  for (int k = 0; k < c->call.naxes; k++)
    base -= c->ctx->coords[c->call.axes[k]] *
            (int)c->comm->mesh->strides[c->call.axes[k]];
  return base;
}

/* Room for a plan of n ranks over nproc processes; false: out of memory. */
static bool hplan_room(hplan *h, int n, int nproc)
{
  if (h->cap >= n)
    return true;
  hplan_free(h);
  h->locals = shmap__malloc(sizeof(int) * (size_t)n);
  h->rproc = shmap__malloc(sizeof(int) * (size_t)n);
  h->ridx = shmap__malloc(sizeof(int) * (size_t)n);
  h->first = shmap__malloc(sizeof(int) * (size_t)nproc);
  h->cnt = shmap__malloc(sizeof(int) * (size_t)nproc);
  h->plead = shmap__malloc(sizeof(int) * (size_t)nproc);
  if (!h->locals || !h->rproc || !h->ridx || !h->first || !h->cnt ||
      !h->plead) {
    hplan_free(h);
    return false;
  }
  h->cap = n;
  return true;
}

/* This device's plan of c's group, or NULL when out of memory. */
static hplan *hplan_of(shmap__coll *c)
{
  shmap__mpimesh *m = c->comm->priv;
  hplan *h = &m->dev[c->ctx->dev].hp;
  int base = group_base(c);
  if (h->n == c->n && h->base == base && h->naxes == c->call.naxes &&
      memcmp(h->axes, c->call.axes, sizeof(int) * (size_t)h->naxes) == 0)
    return h;
  if (!hplan_room(h, c->n, m->nproc))
    return NULL;
  const shmap__place *pl = c->comm->mesh->place;
  for (int p = 0; p < m->nproc; p++) {
    h->first[p] = -1;
    h->cnt[p] = 0;
    h->plead[p] = -1;
  }
  int nspan = 0;
  h->nlocal = 0;
  for (int r = 0; r < c->n; r++) {
    int d = shmap__comm_member(c, r), p = pl->owner[d];
    if (h->first[p] < 0) {
      h->first[p] = r;
      h->plead[p] = d;
      nspan++;
    }
    h->rproc[r] = p;
    h->ridx[r] = h->cnt[p]++;
    if (p == m->self)
      h->locals[h->nlocal++] = d;
  }
  h->spread = c->n > nspan;
  h->lead = h->plead[m->self];
  h->n = c->n;
  h->base = base;
  h->naxes = c->call.naxes;
  memcpy(h->axes, c->call.axes, sizeof(int) * (size_t)h->naxes);
  return h;
}

/* The leader's buffers for folds of n terms and a message of `bytes`,
 * or NULL (out of memory). */
static hbufs *hbufs_for(shmap__mpimesh *m, int dev, int n, size_t bytes)
{
  hbufs *b = &m->dev[dev].hb;
  if (!b->in) {
    size_t np = (size_t)m->nproc;
    b->in = shmap__calloc(np, sizeof *b->in);
    b->incap = shmap__calloc(np, sizeof *b->incap);
    b->unrecv = shmap__malloc(np);
    b->reqs = shmap__malloc(sizeof *b->reqs * 2 * np);
    b->watch = shmap__malloc(sizeof *b->watch * np);
    b->procs = shmap__malloc(sizeof *b->procs * np);
    b->settled = shmap__malloc(np);
    b->nin = b->in ? m->nproc : 0;
    if (!b->in || !b->incap || !b->unrecv || !b->reqs || !b->watch ||
        !b->procs || !b->settled) {
      hbufs_free(b, false);
      return NULL;
    }
  }
  if (b->srccap < n) {
    free(b->srcs);
    b->srccap = 0;
    if (!(b->srcs = shmap__malloc(sizeof *b->srcs * (size_t)n)))
      return NULL;
    b->srccap = n;
  }
  /* On the heap: a failed call may leave its sends behind (abandon). */
  if (!b->out || b->outcap < bytes) {
    free(b->out);
    b->outcap = 0;
    if (!(b->out = shmap__malloc(bytes)))
      return NULL;
    b->outcap = bytes;
  }
  return b;
}

static const mhead *their(const waitarg *w, int i)
{
  if (w->hb)
    return (const mhead *)w->hb->in[i];
  return &w->heads[i];
}

/* Receive the leaders' messages that came, each into a buffer of its
 * size (a leader whose call differs may send more than ours would).
 * Whether all came; an error sets w->err. */
static bool probe_leads(waitarg *w)
{
  shmap__mpimesh *m = w->m;
  hbufs *b = w->hb;
  bool all = true;
  for (int i = 0; i < w->nwatch; i++) {
    if (!w->unrecv[i])
      continue;
    int flag = 0, len = 0, p = b->procs[i];
    int tag = lead_tag_of(m, w->watch[i], w->c->ctx->dev);
    MPI_Message msg;
    MPI_Status st;
    /* Its length first, with a probe that leaves it where it is: without
     * memory for it the message stays for the mesh's quiescence (which
     * counts it as not received), rather than be received cut short, which
     * MPICH treats as fatal whatever the communicator's error handler.
     * This device alone receives with this tag, so the message probed is
     * the one matched next. */
    if ((w->err = SHMAP__MPI_CHECK(MPI_Iprobe, p, tag, m->comm, &flag, &st)))
      return false;
    if (!flag) {
      all = false;
      continue;
    }
    (void)SHMAP__MPI_CHECK(MPI_Get_count, &st, MPI_BYTE, &len);
    size_t need = (size_t)len > sizeof(hwire) ? (size_t)len : sizeof(hwire);
    if (b->incap[i] < need) {
      free(b->in[i]);
      b->incap[i] = 0;
      if ((b->in[i] = shmap__malloc(need)))
        b->incap[i] = need;
    }
    if (!b->in[i]) {
      w->err = shmap__err(SHMAP_ENOMEM, "out of memory");
      return false;
    }
    if ((w->err = SHMAP__MPI_CHECK(MPI_Improbe, p, tag, m->comm, &flag, &msg,
                                   &st)))
      return false;
    if (!flag) {
      all = false;
      continue;
    }
    atomic_fetch_add(&m->got[p], 1);
    memset(b->in[i], 0, sizeof(hwire));
    w->unrecv[i] = 0;
    if ((w->err = SHMAP__MPI_CHECK(MPI_Mrecv, b->in[i], len, MPI_BYTE, &msg,
                                   MPI_STATUS_IGNORE)))
      return false;
  }
  return all;
}

/* What a local member's published call k says (as decide() for a member
 * asked about): H_READY equal, H_WAIT not yet (or released by a failure
 * not heard of yet), H_FAIL a mismatch (why set), H_CANCEL the map failed
 * and the member will not come. */
enum { H_READY, H_WAIT, H_FAIL, H_CANCEL };
static int local_state(shmap__coll *c, int d, char *why, size_t nwhy)
{
  shmap__mpimesh *m = c->comm->priv;
  shmap__runtime *rt = c->ctx->rt;
  uint32_t k = c->k;
  /* The usual answer, equal, compared in place: a leader asks about
   * every local member on every call, and a copy would read every line
   * of the descriptor. */
  mdev *v = &m->dev[d];
  uv_mutex_lock(&v->lock);
  const shmap__call *kc = kept_call(m, d, k);
  bool equal = kc && shmap__call_equal(&c->call, kc);
  uv_mutex_unlock(&v->lock);
  if (equal)
    return H_READY;
  smsg s;
  memset(&s, 0, sizeof s);
  status_of(m, d, k, &s);
  bool failed = atomic_load(&rt->abort) != 0;
  if (s.count >= k) {
    if ((s.flags & ST_HAS_CALL) && shmap__call_equal(&c->call, &s.call))
      return H_READY;
    if (failed)
      return H_CANCEL;
    shmap__call_mismatch(rt->mesh, c->ctx->dev, &c->call, d,
                         (s.flags & ST_HAS_CALL) ? &s.call : NULL, k, s.count,
                         why, nwhy);
    return H_FAIL;
  }
  if (!(s.flags & ST_FINISHED) || (!failed && (s.flags & ST_RELEASED)))
    return H_WAIT;
  if (failed)
    return H_CANCEL;
  shmap__call_mismatch(rt->mesh, c->ctx->dev, &c->call, d, NULL, k, s.count,
                       why, nwhy);
  return H_FAIL;
}

typedef struct hwait {
  shmap__coll *c;
  const hplan *h;
  int next;      /* local members before it are in (leader) */
  int state;     /* H_* */
  unsigned polls;
  char *why;
  size_t nwhy;
} hwait;

/* The leader's wait for its local members' descriptors. */
static bool locals_in(void *arg)
{
  hwait *w = arg;
  shmap__coll *c = w->c;
  for (; w->next < w->h->nlocal; w->next++) {
    int d = w->h->locals[w->next];
    if (d == c->ctx->dev)
      continue;
    w->state = local_state(c, d, w->why, w->nwhy);
    if (w->state == H_WAIT) {
      if ((w->polls++ & 7) == 0)
        poll_notices(c->ctx->rt, c->comm->priv);
      return false;
    }
    if (w->state != H_READY)
      return true;
  }
  w->state = H_READY;
  return true;
}

/* The leader's outcome of this call, when this member did not get it
 * from lead_publish: true (w->state set) once the leader gave its outcome
 * and the map failed.  A member that entered the call before the failure
 * but published its descriptor only after the leader had looked for the
 * members in the call was passed over (lead_publish gives the outcome
 * only to those in it); the leader's outcome was then a failure (a
 * success needs every member's descriptor) and stays in hlead. */
static bool lead_gave(hwait *w)
{
  shmap__coll *c = w->c;
  shmap__mpimesh *m = c->comm->priv;
  if (!atomic_load_explicit(&c->ctx->rt->abort, memory_order_acquire))
    return false;
  uint64_t v = atomic_load_explicit(&m->dev[w->h->lead].hlead,
                                    memory_order_acquire);
  if (v >> 1 != c->k)
    return false;
  w->state = (v & 1) ? H_READY : H_CANCEL;
  return true;
}

/* A member's wait for its leader's outcome. */
static bool lead_done(void *arg)
{
  hwait *w = arg;
  shmap__coll *c = w->c;
  shmap__mpimesh *m = c->comm->priv;
  uint64_t got = atomic_load_explicit(&m->dev[c->ctx->dev].hgot,
                                      memory_order_acquire);
  if (got >> 1 == c->k) {
    w->state = (got & 1) ? H_READY : H_CANCEL;
    return true;
  }
  if (lead_gave(w))
    return true;
  if ((w->polls++ & 15) != 0)
    return false;
  int st = local_state(c, w->h->lead, w->why, w->nwhy);
  if (st == H_READY || st == H_WAIT)
    return false; /* it is in the call, or behind: its outcome will come */
  w->state = st;
  return true;
}

/* Publish the leader's outcome to its local members (every member's
 * result written first when ok).  Only to those in a call of the same
 * number that wait for this leader: after a mismatch a member may wait
 * in an earlier call for another leader, whose outcome this one must not
 * overwrite, or in a call of the same number in another group (a leader
 * that found the mismatch in its own group must not release a member
 * whose own leader still folds into its buffers). */
static void lead_publish(shmap__coll *c, const hplan *h, bool ok)
{
  shmap__mpimesh *m = c->comm->priv;
  shmap__runtime *rt = c->ctx->rt;
  uint64_t v = (uint64_t)c->k << 1 | (ok ? 1u : 0u);
  for (int i = 0; i < h->nlocal; i++) {
    int d = h->locals[i];
    if (d == c->ctx->dev ||
        atomic_load_explicit(&m->dev[d].cur, memory_order_acquire) != c->k ||
        atomic_load_explicit(&m->dev[d].hleader, memory_order_relaxed) !=
            c->ctx->dev)
      continue;
    shmap__publish(c->ctx->rt, &m->dev[d].hgot, v);
    shmap__dev_wake(&rt->devs[d]);
  }
  /* For a member passed over above (lead_gave): after a failure, every
   * local member is woken to look. */
  shmap__publish(c->ctx->rt, &m->dev[c->ctx->dev].hlead, v);
  for (int i = 0; !ok && i < h->nlocal; i++)
    if (h->locals[i] != c->ctx->dev)
      shmap__dev_wake(&rt->devs[h->locals[i]]);
}

/* The device of local rank r's term (its src, published before its
 * descriptor). */
static const void *local_src(shmap__coll *c, int d)
{
  shmap__mpimesh *m = c->comm->priv;
  return d == c->ctx->dev ? c->call.src : m->dev[d].src;
}

/* Fill the leader's message: its descriptor and its process's terms (one
 * fold of them when they are ranks 0 to nlocal-1 and the fold of a run is
 * a term).  Its length in bytes. */
static int lead_message(shmap__coll *c, const hplan *h, const shmap__fold *fold,
                        size_t count, hwire *out, const void **srcs)
{
  shmap__mpimesh *m = c->comm->priv;
  size_t tb = count * c->esize;
  memset(out, 0, offsetof(hwire, data));
  out->h.k = c->k;
  out->h.call = c->call;
  out->h.call.src = NULL;
  out->h.call.dst = NULL;
  bool run = h->first[m->self] == 0;
  for (int r = 0; run && r < h->nlocal; r++)
    run = h->rproc[r] == m->self;
  bool prefold = run && h->nlocal > 1 && fold->partial && !fold->count &&
                 fold->out_esize == c->esize;
  for (int i = 0; i < h->nlocal; i++)
    srcs[i] = local_src(c, h->locals[i]);
  if (prefold) {
    fold->fn(out->data, srcs, h->nlocal, count, 0);
    out->prefold = 1;
    out->nterms = 1;
  } else {
    for (int i = 0; i < h->nlocal; i++)
      memcpy(out->data + (size_t)i * tb, srcs[i], tb);
    out->nterms = (uint32_t)h->nlocal;
  }
  return (int)(offsetof(hwire, data) + out->nterms * tb);
}

/* Post the leaders' exchange: for the i-th other process holding members,
 * send ours; its leader's message, to be probed for, comes into in[i]
 * (unrecv[i] set, reqs[2i] null).  0, or an MPI error (message set), the
 * posting stopping there. */
static int post_leads(shmap__coll *c, const hplan *h, hbufs *b, int wbytes,
                      int *nreq)
{
  shmap__mpimesh *m = c->comm->priv;
  int me = c->ctx->dev, i = 0;
  for (int p = 0; p < m->nproc; p++) {
    if (p == m->self || h->cnt[p] == 0)
      continue;
    int d = h->plead[p];
    b->procs[i] = p;
    b->watch[i] = d;
    b->unrecv[i] = 1;
    b->reqs[2 * i] = MPI_REQUEST_NULL;
    atomic_fetch_add(&m->sent[p], 1);
    int rc = SHMAP__MPI_CHECK(MPI_Isend, b->out, wbytes, MPI_BYTE, p,
                              lead_tag_of(m, me, d), m->comm,
                              &b->reqs[2 * i + 1]);
    if (rc) {
      atomic_fetch_sub(&m->sent[p], 1);
      b->reqs[2 * i + 1] = MPI_REQUEST_NULL;
      *nreq = 2 * i + 2;
      return rc;
    }
    *nreq = 2 * ++i;
  }
  return 0;
}

/* The message of process p (this one's: ours), by the order of
 * post_leads. */
static const hwire *msg_of(shmap__coll *c, const hplan *h, const hbufs *b,
                           int p)
{
  shmap__mpimesh *m = c->comm->priv;
  if (p == m->self)
    return (const hwire *)b->out;
  int i = 0;
  for (int q = 0; q < p; q++)
    i += q != m->self && h->cnt[q] > 0;
  return (const hwire *)b->in[i];
}

/* Every member's terms folded in rank order into acc (count elements),
 * then each local member's part written into its dst. */
static void lead_fold(shmap__coll *c, const hplan *h, const hbufs *b,
                      const shmap__fold *fold, size_t count, char *acc)
{
  shmap__mpimesh *m = c->comm->priv;
  size_t tb = count * c->esize, des = fold->out_esize;
  const void **srcs = b->srcs;
  int nsrc = 0, r = 0;
  const hwire *first = msg_of(c, h, b, h->rproc[0]);
  if (first->prefold) {
    srcs[nsrc++] = first->data;
    r = h->cnt[h->rproc[0]];
  }
  int lastp = -1;
  const hwire *w = NULL;
  for (; r < c->n; r++) {
    int p = h->rproc[r];
    if (p == m->self) {
      srcs[nsrc++] = local_src(c, h->locals[h->ridx[r]]);
      continue;
    }
    if (p != lastp) {
      w = msg_of(c, h, b, p);
      lastp = p;
    }
    srcs[nsrc++] = w->data + (size_t)h->ridx[r] * tb;
  }
  if (fold->own) {
    /* Each member's own fold (its part starts at 0), into acc first: a
     * member's dst may be its src (in place), a term of the others'. */
    size_t rb = count * des;
    for (int i = 0; i < h->nlocal; i++) {
      const mdev *v = &m->dev[h->locals[i]];
      const shmap__fold *f = h->locals[i] == c->ctx->dev ? fold : v->hfold;
      f->fn(acc + (size_t)i * rb, srcs, nsrc, count, f->count);
    }
    for (int i = 0; i < h->nlocal; i++) {
      const mdev *v = &m->dev[h->locals[i]];
      memcpy(h->locals[i] == c->ctx->dev ? c->call.dst : v->dst,
             acc + (size_t)i * rb, rb);
    }
    return;
  }
  fold->fn(acc, srcs, nsrc, count, fold->count);
  for (int i = 0; i < h->nlocal; i++) {
    int d = h->locals[i];
    const mdev *v = &m->dev[d];
    if (d != c->ctx->dev)
      memcpy(v->dst, acc + v->hoff * des, v->hn * des);
  }
}

/* The leaders' exchange of a leader whose local members are in: 0 with
 * every message received and equal to ours, else an error code (message
 * set, the map failed or canceled). */
static int lead_exchange(shmap__coll *c, const hplan *h, hbufs *b, int wbytes)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shmap__mpimesh *m = c->comm->priv;
  int nreq = 0;
  int perr = post_leads(c, h, b, wbytes, &nreq);
  int nwatch = nreq / 2;
  if (!perr)
    atomic_store(&rt->devs[ctx->dev].coll.arrive, c->k);
  memset(b->settled, 0, (size_t)m->nproc);
  char why[SHMAP__MSG_MAX - 200];
  why[0] = '\0';
  waitarg w = {.m = m, .reqs = b->reqs, .nreq = nreq, .watch = b->watch,
               .nwatch = nwatch, .k = c->k, .c = c, .unrecv = b->unrecv,
               .hb = b, .settled = b->settled,
               .interval = CHECK_AFTER, .asking = -1, .why = why,
               .nwhy = sizeof why};
  int rc = perr ? perr : wait_all(ctx, &w);
  int err = perr ? perr : w.err;
  if (rc && abandon(m, b->reqs, nreq, b->procs)) {
    orphan(m, b->out);
    b->out = NULL;
  }
  if (atomic_load(&rt->abort))
    why[0] = '\0';
  for (int i = 0; rc == 0 && i < nwatch && !why[0]; i++)
    if (!shmap__call_equal(&c->call, &their(&w, i)->call))
      shmap__call_mismatch(rt->mesh, ctx->dev, &c->call, b->watch[i],
                           &their(&w, i)->call, c->k, c->k, why, sizeof why);
  return agreed(c, err, why, rc);
}

/* The terms of other processes a member's result takes: every one, or
 * for an own fold (ppermute) its source's when that is elsewhere. */
static uint64_t remote_terms(const shmap__coll *c, const hplan *h,
                             const shmap__fold *fold)
{
  const shmap__mpimesh *m = c->comm->priv;
  if (fold->own)
    return c->from >= 0 && h->rproc[c->from] != m->self;
  return (uint64_t)(c->n - h->nlocal);
}

/* The leader's part of a small reduction over a spread group. */
static int lead_call(shmap__coll *c, const hplan *h, const shmap__fold *fold,
                     size_t count, size_t off, size_t nn)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shmap__mpimesh *m = c->comm->priv;
  size_t des = fold->out_esize;
  publish(m, c);
  char why[SHMAP__MSG_MAX - 200];
  why[0] = '\0';
  hwait w = {.c = c, .h = h, .state = H_WAIT, .why = why, .nwhy = sizeof why};
  while (!shmap__dev_poll(rt, &rt->devs[ctx->dev], locals_in, &w, NULL))
    ;
  int rc = 0;
  if (w.state == H_FAIL)
    rc = shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH, "%s",
                         why);
  else if (w.state == H_CANCEL)
    rc = shmap__canceled(ctx, shmap__coll_opname(c));
  size_t wmax = offsetof(hwire, data) + (size_t)h->nlocal * count * c->esize;
  hbufs *b = rc ? NULL : hbufs_for(m, ctx->dev, c->n, wmax);
  /* One result for all, or one per local member (own folds). */
  size_t nres = fold->own ? (size_t)h->nlocal : 1;
  char *acc = b ? scratch(c, SCRATCH_ACC, nres * count * des + 1) : NULL;
  if (!rc && !acc)
    rc = shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                         "out of memory");
  if (!rc) {
    int wbytes = lead_message(c, h, fold, count, (hwire *)b->out, b->srcs);
    rc = lead_exchange(c, h, b, wbytes);
  }
  if (!rc) {
    lead_fold(c, h, b, fold, count, acc);
    if (!fold->own)
      memcpy(c->call.dst, acc + off * des, nn * des);
    ctx->remote += remote_terms(c, h, fold) * count * c->esize;
  }
  /* After the failure is recorded: the members' cancellation follows it. */
  lead_publish(c, h, rc == 0);
  return rc;
}

/* A member's part that is not the leader: publish, and take the
 * leader's outcome. */
static int member_call(shmap__coll *c, const hplan *h,
                       const shmap__fold *fold, size_t count, size_t off,
                       size_t nn)
{
  shmap_ctx *ctx = c->ctx;
  shmap__runtime *rt = ctx->rt;
  shmap__mpimesh *m = c->comm->priv;
  mdev *v = &m->dev[ctx->dev];
  v->hoff = off;
  v->hn = nn;
  v->hfold = fold;
  atomic_store_explicit(&v->hleader, h->lead, memory_order_relaxed);
  publish(m, c);
  /* Its descriptor is with its process's leader, which sends it on. */
  atomic_store(&rt->devs[ctx->dev].coll.arrive, c->k);
  char why[SHMAP__MSG_MAX - 200];
  why[0] = '\0';
  hwait w = {.c = c, .h = h, .state = H_WAIT, .why = why, .nwhy = sizeof why};
  /* The leader wakes it (lead_publish). */
  while (!shmap__dev_poll_woken(rt, &rt->devs[ctx->dev], lead_done, &w, NULL))
    ;
  if (w.state == H_READY) {
    ctx->remote += remote_terms(c, h, fold) * count * c->esize;
    return 0;
  }
  if (w.state == H_FAIL && !atomic_load(&rt->abort))
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_EMISMATCH, "%s",
                           why);
  return shmap__canceled(ctx, shmap__coll_opname(c));
}

/* Whether a call above the small bound takes the two levels anyway (see
 * "Larger calls over a spread group"): over a spread group, while a
 * member's terms stay within SPREAD_PER_MEMBER bytes per member of the
 * group (SPREAD_PART where each member keeps a part, a ppermute's
 * SPREAD_OWN bytes per member squared) and all of them within
 * SPREAD_MAX_TERMS.  Out of memory for the plan, the call takes this
 * path and fails there (mpi_allreduce_small), as every member of a
 * spread group would. */
#define SPREAD_PER_MEMBER 32768
#define SPREAD_PART 16384
#define SPREAD_OWN 64
#define SPREAD_MAX_TERMS ((size_t)64 << 20)
static bool mpi_small_takes(shmap__coll *c, const shmap__fold *fold,
                            size_t terms, bool part)
{
  size_t n = (size_t)c->n, mine = terms / n;
  size_t per = fold->own ? n * SPREAD_OWN
               : part    ? SPREAD_PART
                         : SPREAD_PER_MEMBER;
  if (terms > SPREAD_MAX_TERMS || mine > n * per)
    return false;
  hplan *h = hplan_of(c);
  return !h || h->spread;
}

static int mpi_allreduce_small(shmap__coll *c, size_t count,
                               const shmap__fold *fold, size_t off, size_t n)
{
  memset(c->priv, 0, sizeof(mcall *));
  if (c->n > 1) {
    hplan *h = hplan_of(c);
    if (!h)
      return shmap__dev_fail(c->ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                             "out of memory");
    if (h->spread)
      return h->lead == c->ctx->dev ? lead_call(c, h, fold, count, off, n)
                                    : member_call(c, h, fold, count, off, n);
  }
  /* Beyond the message's room only after mpi_small_takes found no
   * memory for the plan, which this device has now: it cannot know what
   * the other members took. */
  if (count * c->esize > SHMAP__SMALL_BYTES_MPI)
    return shmap__dev_fail(c->ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  /* A ppermute's terms go to the one member that reads them (c->n:
   * none does), the descriptor to all. */
  int only = -1;
  if (fold->own)
    only = c->to >= 0 && c->to != c->rank ? c->to : c->n;
  const void **srcs = NULL;
  int rc = exchange(c, c->call.src, count * c->esize, only, &srcs);
  if (rc)
    return rc;
  if (off)
    for (int r = 0; r < c->n; r++)
      srcs[r] = (const char *)srcs[r] + off * c->esize;
  fold->fn(c->call.dst, srcs, c->n, n, fold->count);
  return 0;
}

/* Post the send or receive of box `b` of `buf` with member `peer`'s
 * process (tag: from -> to), tracked until depart; 0 or an MPI error. */
static int post_box(shmap__coll *c, bool send, int peer, void *buf,
                    const shmap__box *b, const int64_t strides[])
{
  shmap__mpimesh *m = c->comm->priv;
  int d, p = peer_proc(c, peer, &d), me = c->ctx->dev;
  int cnt;
  MPI_Datatype t;
  MPI_Request r;
  int rc = box_type(b->rank, b->shape, strides, c->esize, &t, &cnt);
  if (rc)
    return rc;
  _Atomic int64_t *count = send ? &m->sent[p] : &m->got[p];
  atomic_fetch_add(count, 1);
  rc = send ? SHMAP__MPI_CHECK(MPI_Isend, (char *)buf + b->off, cnt, t, p,
                               tag_of(m, me, d), m->comm, &r)
            : SHMAP__MPI_CHECK(MPI_Irecv, (char *)buf + b->off, cnt, t, p,
                               tag_of(m, d, me), m->comm, &r);
  type_done(&t);
  if (rc) {
    atomic_fetch_sub(count, 1);
    return rc;
  }
  return add_req(c, r);
}

static int mpi_send(shmap__coll *c, int peer, const shmap__box *from)
{
  shmap__mpimesh *m = c->comm->priv;
  int d, p = peer_proc(c, peer, &d);
  if (p == m->self)
    return 0; /* the peer reads it (Members in one process) */
  int rc = post_box(c, true, peer, (void *)c->call.src, from, from->strides);
  return rc ? data_fail(c, rc) : 0;
}

static int mpi_recv(shmap__coll *c, int peer, const shmap__box *to)
{
  shmap__mpimesh *m = c->comm->priv;
  int d, p = peer_proc(c, peer, &d);
  if (p == m->self)
    return 0; /* the peer writes it (Members in one process) */
  int rc = post_box(c, false, peer, c->call.dst, to, to->strides);
  if (rc)
    return data_fail(c, rc);
  c->ctx->remote += (uint64_t)shmap__numel(to->rank, to->shape) * c->esize;
  return 0;
}

static int mpi_get(shmap__coll *c, int peer, const shmap__box *from, void *to,
                   const int64_t to_strides[])
{
  if (peer == c->rank) {
    shmap__copy_box(to, to_strides, (const char *)c->call.src + from->off,
                    from->strides, from->rank, from->shape, c->esize);
    return 0;
  }
  shmap__mpimesh *m = c->comm->priv;
  int d, p = peer_proc(c, peer, &d);
  if (p == m->self) {
    shmap__copy_box(to, to_strides, (const char *)peer_bufs(c, d)->src + from->off,
                    from->strides, from->rank, from->shape, c->esize);
    return 0;
  }
  int cnt;
  MPI_Datatype t;
  MPI_Request r;
  int rc = box_type(from->rank, from->shape, to_strides, c->esize, &t, &cnt);
  if (rc)
    return data_fail(c, rc);
  atomic_fetch_add(&m->got[p], 1);
  rc = SHMAP__MPI_CHECK(MPI_Irecv, to, cnt, t, p, tag_of(m, d, c->ctx->dev),
                        m->comm, &r);
  type_done(&t);
  if (rc) {
    atomic_fetch_sub(&m->got[p], 1);
    return data_fail(c, rc);
  }
  if ((rc = wait_must(c, &r, 1)))
    return data_fail(c, rc);
  c->ctx->remote += (uint64_t)shmap__numel(from->rank, from->shape) * c->esize;
  return 0;
}

/* A device's staging buffer `which` of at least `bytes`, NULL when out of
 * memory.  Kept for the
 * mesh's life, because fresh memory costs more than the transfer: MPI
 * writes received pieces page by page into it (with Open MPI's
 * single-copy path, process_vm_readv faults each new page in), and the C
 * library gives freed megabytes back to the kernel, so a buffer allocated
 * per call was new pages on every call (a psum of 1 MiB over 2 processes
 * of 4 devices took 6-7 times as long).  A device makes one call at a
 * time (comm.h), and a call's buffers live until its depart. */
static void *scratch(shmap__coll *c, int which, size_t bytes)
{
  shmap__mpimesh *m = c->comm->priv;
  mdev *v = &m->dev[c->ctx->dev];
  if (v->scap[which] < bytes) {
    free(v->scratch[which]);
    v->scap[which] = 0;
    v->scratch[which] = shmap__alloc(bytes, false);
    if (!v->scratch[which])
      return NULL;
    v->scap[which] = bytes;
  }
  return v->scratch[which];
}

/* Post the receives of the terms of other processes into `terms`, and
 * point srcs[r] at every member's term (those of this process where they
 * are).  *nreq counts the receives posted; 0 or an MPI error (message
 * set), the posting stopping there. */
static int post_terms(shmap__coll *c, size_t off, size_t count, char *terms,
                      const void **srcs, MPI_Request *reqs, int *nreq)
{
  shmap__mpimesh *m = c->comm->priv;
  size_t bytes = count * c->esize;
  MPI_Datatype t;
  int rc = elem_type(c->esize, &t);
  bool typed = rc == 0;
  char *next = terms;
  for (int r = 0; rc == 0 && r < c->n; r++) {
    int d;
    if (r == c->rank) {
      srcs[r] = (const char *)c->call.src + off * c->esize;
      continue;
    }
    if (local_member(c, r, &d)) {
      srcs[r] = (const char *)peer_bufs(c, d)->src + off * c->esize;
      continue;
    }
    int p = c->comm->mesh->place->owner[d];
    atomic_fetch_add(&m->got[p], 1);
    rc = SHMAP__MPI_CHECK(MPI_Irecv, next, (int)count, t, p,
                          tag_of(m, d, c->ctx->dev), m->comm, &reqs[*nreq]);
    if (rc) {
      atomic_fetch_sub(&m->got[p], 1);
      break;
    }
    ++*nreq;
    srcs[r] = next;
    next += bytes;
    c->ctx->remote += bytes;
  }
  if (typed)
    type_done(&t);
  return rc;
}

/* Every member's src[off..off+count) folded in rank order into acc: terms
 * of other processes received into one buffer, those of this process read
 * where they are.  0, or an error code (the job failed with it). */
static int fold_terms(shmap__coll *c, size_t off, size_t count,
                      const shmap__fold *fold, void *acc)
{
  size_t bytes = count * c->esize;
  int n = c->n;
  int nremote = 0;
  for (int r = 0; r < n; r++) {
    int d;
    if (r != c->rank && !local_member(c, r, &d))
      nremote++;
  }
  /* The exchange's buffers, idle after arrive (sized for the group). */
  shmap__mpimesh *m = c->comm->priv;
  xbufs *x = xbufs_for(m, c->ctx->dev, n);
  const void **srcs = x ? x->srcs : NULL;
  MPI_Request *reqs = x ? x->reqs : NULL;
  char *terms = nremote ? scratch(c, SCRATCH_TERMS, bytes * (size_t)nremote)
                        : NULL;
  if (!srcs || !reqs || (nremote && !terms))
    return data_fail(c, shmap__err(SHMAP_ENOMEM, "out of memory"));
  int nreq = 0;
  int rc = post_terms(c, off, count, terms, srcs, reqs, &nreq);
  /* Even after an error: the receives posted write into terms. */
  int wrc = nreq ? wait_must(c, reqs, nreq) : 0;
  rc = rc ? rc : wrc;
  /* Every term at once, in rank order: the fused kernel folds them in
   * one pass (and divides for pmean). */
  if (rc == 0)
    fold->fn(acc, srcs, n, count, fold->count);
  return rc ? data_fail(c, rc) : 0;
}

static int mpi_reduce(shmap__coll *c, size_t off, size_t count,
                      const shmap__fold *fold, void *acc)
{
  return fold_terms(c, off, count, fold, acc);
}

/* Send the folded chunk acc (count result elements of des bytes) to every
 * member of another process; those of this process get it written into
 * their dst at off.  0 or an MPI error (message set). */
static int post_result(shmap__coll *c, size_t off, size_t count, size_t des,
                       const char *acc)
{
  shmap__mpimesh *m = c->comm->priv;
  size_t bytes = count * des;
  MPI_Datatype t;
  int rc = elem_type(des, &t);
  bool typed = rc == 0;
  for (int r = 0; rc == 0 && r < c->n; r++) {
    if (r == c->rank)
      continue;
    int d, p = peer_proc(c, r, &d);
    if (p == m->self) {
      shmap__copy((char *)peer_bufs(c, d)->dst + off * des, acc, bytes);
      continue;
    }
    MPI_Request q;
    atomic_fetch_add(&m->sent[p], 1);
    rc = SHMAP__MPI_CHECK(MPI_Isend, acc, (int)count, t, p,
                          tag_of(m, c->ctx->dev, d), m->comm, &q);
    if (rc) {
      atomic_fetch_sub(&m->sent[p], 1);
      break;
    }
    rc = add_req(c, q);
  }
  if (typed)
    type_done(&t);
  return rc;
}

static int mpi_allreduce(shmap__coll *c, size_t off, size_t count,
                         const shmap__fold *fold)
{
  /* The result's elements may be wider than the terms (a bool sum). */
  size_t des = fold->out_esize;
  size_t bytes = count * des;
  char *acc = scratch(c, SCRATCH_ACC, bytes + 1);
  if (!acc)
    return data_fail(c, shmap__err(SHMAP_ENOMEM, "out of memory"));
  int rc = fold_terms(c, off, count, fold, acc);
  if (rc)
    return rc;
  /* In place (psum): what this device sent from src must be out before
   * its dst, the same memory, changes. */
  mcall *mc = MC(c);
  rc = wait_must(c, mc->reqs, mc->nreq);
  mc->nreq = 0;
  if (rc)
    return data_fail(c, rc);
  shmap__copy((char *)c->call.dst + off * des, acc, bytes);
  rc = post_result(c, off, count, des, acc);
  return rc ? data_fail(c, rc) : 0;
}

/*
 * Larger reductions between two processes.  A group whose members are
 * ranks [0, na) in one process (the first) and [na, n) in another (the
 * second), n > 2, folds a psum, pmax or pmin above the two levels' bound
 * (allreduce_whole) as a chain: the first process's members fold their
 * terms, read where they are, into a prefix; the prefix crosses to the
 * second process, whose members fold their terms onto it; the result
 * crosses back.  The left fold in rank order, ((t0 + ... + t(na-1)) +
 * t(na)) + ..., is that bit for bit when the fold of a run of terms is
 * itself a term (fold->partial; pmean and the folds of bf16, f16 and bool
 * take the chunks).  The call's bytes then cross once each way, in 2 na
 * nb messages, where the chunks of shmap__algo_allreduce send each
 * member's terms to the members of the other process that fold a chunk,
 * and their results back: 2 na nb / n times the call's bytes each way (4
 * times over 2x4 devices, 8 over 2x8), in 4 na nb messages.  A psum of 1
 * MiB over 2x4 devices took 0.67-1.45 ms instead of 1.12-3.09, over 2x2
 * 0.38-0.45 instead of 0.45-1.05 (BENCHMARKS.md).  Below the bound the
 * two levels stay faster (64 KiB over 2x4: 64-69 us against 131-162 as a
 * chain).
 *
 * The work is spread over every member: the call's elements are cut
 * into na * nb pieces (64-byte aligned, the last ones possibly short or
 * empty), piece (i, j) at q = j * na + i.  Member i of the first process
 * folds the prefixes of its pieces (i, j), for every j, and sends each to
 * member j of the second, which receives its pieces (i, j) for every i,
 * a contiguous chunk.  It folds each piece onto its process's terms as it
 * comes and sends the result back to member i at once, then writes the
 * chunk into every member of its process; member i writes each piece it
 * gets back into every member of its own.  As with the chunks of
 * shmap__algo_allreduce, the part of a member's src that a result
 * overwrites is read by the writer alone, before it writes.
 */

/* The size of the first of two runs of c's group: na when ranks [0, na)
 * run in one process and [na, n) in another, else 0.  From the
 * placement alone, so that every member gets the same answer. */
static int two_runs(shmap__coll *c)
{
  const shmap__place *pl = c->comm->mesh->place;
  int p0 = pl->owner[shmap__comm_member(c, 0)], p1 = -1, na = 0;
  for (int r = 1; r < c->n; r++) {
    int p = pl->owner[shmap__comm_member(c, r)];
    if (p1 < 0 && p != p0) {
      p1 = p;
      na = r;
    } else if (p1 >= 0 && p != p1) {
      return 0;
    }
  }
  return na;
}

/* Post the transfer of count elements (type t) at buf between this
 * device and device d: a send tracked until depart, or a receive into
 * *req.  0 or an MPI error (message set). */
static int post_piece(shmap__coll *c, bool send, int d, void *buf,
                      size_t count, MPI_Datatype t, MPI_Request *req)
{
  shmap__mpimesh *m = c->comm->priv;
  int p = c->comm->mesh->place->owner[d], me = c->ctx->dev;
  _Atomic int64_t *n = send ? &m->sent[p] : &m->got[p];
  MPI_Request r;
  atomic_fetch_add(n, 1);
  int rc = send ? SHMAP__MPI_CHECK(MPI_Isend, buf, (int)count, t, p,
                                   tag_of(m, me, d), m->comm, &r)
                : SHMAP__MPI_CHECK(MPI_Irecv, buf, (int)count, t, p,
                                   tag_of(m, d, me), m->comm, &r);
  if (rc) {
    atomic_fetch_sub(n, 1);
    return rc;
  }
  if (!send) {
    *req = r;
    c->ctx->remote += count * c->esize;
    return 0;
  }
  return add_req(c, r);
}

static int mpi_allreduce_whole(shmap__coll *c, size_t count,
                               const shmap__fold *fold)
{
  int n = c->n, na;
  if (n < 3 || !fold->partial || fold->count || fold->own ||
      fold->out_esize != c->esize || !(na = two_runs(c)))
    return 1;
  shmap__mpimesh *m = c->comm->priv;
  int nb = n - na, me = c->ctx->dev;
  size_t es = c->esize, align = 64 / es;
  size_t np = (size_t)na * (size_t)nb;
  size_t piece = (count + np - 1) / np;
  piece = (piece + align - 1) / align * align;
#define PLO(q) (piece * (size_t)(q) < count ? piece * (size_t)(q) : count)
#define PHI(q) (PLO(q) + piece < count ? PLO(q) + piece : count)
  bool first = c->rank < na;
  int mine = first ? c->rank : c->rank - na;
  /* The second process's member j folds its chunk [lo, hi): pieces
   * (0, j) to (na - 1, j). */
  size_t lo = first ? 0 : PLO((size_t)mine * na);
  size_t hi = first ? 0 : PLO((size_t)(mine + 1) * na);
  size_t sbytes = first ? (size_t)nb * piece * es : (hi - lo) * es;
  xbufs *x = xbufs_for(m, me, n);
  char *stage = scratch(c, SCRATCH_TERMS, sbytes + 1);
  char *acc = first ? NULL : scratch(c, SCRATCH_ACC, (hi - lo) * es + 1);
  if (!x || !stage || (!first && !acc))
    return data_fail(c, shmap__err(SHMAP_ENOMEM, "out of memory"));
  /* The devices of this process's members, in rank order. */
  int base = first ? 0 : na, nl = first ? na : nb;
  int *devs = x->watch;
  for (int i = 0; i < nl; i++) {
    devs[i] = shmap__comm_member(c, base + i);
    if (devs[i] != me)
      (void)peer_bufs(c, devs[i]);
  }
#define SRC(i) (devs[i] == me ? c->call.src : m->dev[devs[i]].src)
#define DST(i) (devs[i] == me ? c->call.dst : m->dev[devs[i]].dst)
  /* Pieces go in turns: at turn t, member i of the first process sends
   * to member (i + t) % nb of the second, so that every member of the
   * second has a piece to fold from the first turn on.  order[] lists a
   * member's peers (their ranks in their run) in the turns' order. */
  const void **srcs = x->srcs;
  MPI_Request *reqs = x->reqs;
  int *order = x->procs, nord = 0;
  if (first) {
    for (int t = 0; t < nb; t++)
      order[nord++] = (mine + t) % nb;
  } else {
    for (int t = 0; t < nb; t++)
      for (int i = ((mine - t) % nb + nb) % nb; i < na; i += nb)
        order[nord++] = i;
  }
  MPI_Datatype t;
  int rc = elem_type(es, &t);
  if (rc)
    return data_fail(c, rc);
  if (first) {
    /* Each prefix goes as soon as it is folded. */
    for (int k = 0; rc == 0 && k < nord; k++) {
      int j = order[k];
      size_t q = (size_t)j * na + mine, a = PLO(q), cnt = PHI(q) - a;
      if (!cnt)
        continue;
      char *out = stage + (size_t)j * piece * es;
      for (int i = 0; i < na; i++)
        srcs[i] = (const char *)SRC(i) + a * es;
      fold->fn(out, srcs, na, cnt, 0);
      rc = post_piece(c, true, shmap__comm_member(c, na + j), out, cnt, t,
                      NULL);
    }
    /* The results come into this device's dst, whose pieces (i, j) only
     * this device read, and from there into its process's members'. */
    for (int k = 0; rc == 0 && k < nord; k++) {
      int j = order[k];
      size_t q = (size_t)j * na + mine, a = PLO(q), cnt = PHI(q) - a;
      reqs[k] = MPI_REQUEST_NULL;
      if (cnt)
        rc = post_piece(c, false, shmap__comm_member(c, na + j),
                        (char *)c->call.dst + a * es, cnt, t, &reqs[k]);
    }
    for (int k = 0; rc == 0 && k < nord; k++) {
      int j = order[k];
      size_t q = (size_t)j * na + mine, a = PLO(q), cnt = PHI(q) - a;
      if (!cnt || (rc = wait_must(c, &reqs[k], 1)))
        continue;
      for (int i = 0; i < na; i++)
        if (devs[i] != me)
          shmap__copy((char *)DST(i) + a * es,
                      (const char *)c->call.dst + a * es, cnt * es);
    }
  } else if (hi > lo) {
    for (int k = 0; rc == 0 && k < nord; k++) {
      int i = order[k];
      size_t q = (size_t)mine * na + i, a = PLO(q), cnt = PHI(q) - a;
      reqs[k] = MPI_REQUEST_NULL;
      if (cnt)
        rc = post_piece(c, false, shmap__comm_member(c, i),
                        stage + (a - lo) * es, cnt, t, &reqs[k]);
    }
    /* Each piece folded onto this process's terms as it comes, and its
     * result sent back at once. */
    for (int k = 0; rc == 0 && k < nord; k++) {
      int i = order[k];
      size_t q = (size_t)mine * na + i, a = PLO(q), cnt = PHI(q) - a;
      if (!cnt || (rc = wait_must(c, &reqs[k], 1)))
        continue;
      srcs[0] = stage + (a - lo) * es;
      for (int b = 0; b < nb; b++)
        srcs[1 + b] = (const char *)SRC(b) + a * es;
      fold->fn(acc + (a - lo) * es, srcs, nb + 1, cnt, 0);
      rc = post_piece(c, true, shmap__comm_member(c, i), acc + (a - lo) * es,
                      cnt, t, NULL);
    }
    for (int b = 0; rc == 0 && b < nb; b++)
      shmap__copy((char *)DST(b) + lo * es, acc, (hi - lo) * es);
  }
#undef SRC
#undef DST
#undef PLO
#undef PHI
  type_done(&t);
  return rc ? data_fail(c, rc) : 0;
}

static int mpi_depart(shmap__coll *c)
{
  mcall *mc = MC(c);
  if (!mc)
    return 0;
  int rc = mc->nreq ? wait_must(c, mc->reqs, mc->nreq) : 0;
  locals_depart(c);
  mc->nreq = 0;
  memset(c->priv, 0, sizeof mc);
  return rc ? data_fail(c, rc) : 0;
}

/* ---- the end of a map ----------------------------------------------------------- */

typedef struct endwait {
  shmap__mpimesh *m;
  MPI_Request *req;
  unsigned polls;
  int err; /* an MPI error ended the wait (message set) */
} endwait;

/* The results' exchange is done; meanwhile notices are taken in. */
static bool end_done(void *arg)
{
  endwait *w = arg;
  int flag = 0;
  if ((w->err = SHMAP__MPI_CHECK(MPI_Test, w->req, &flag, MPI_STATUS_IGNORE)) ||
      flag)
    return true;
  if ((w->polls++ & 15) == 0) {
    uv_mutex_lock(&w->m->lock);
    drain(w->m);
    uv_mutex_unlock(&w->m->lock);
  }
  return false;
}

/* After the map's devices finished: exchange every process's result and
 * return the agreed code (message set): the first failure that began in
 * the lowest-numbered process where one began, else the lowest-numbered
 * process's. */
static int mpi_verdict(shmap__comm *comm, int rc)
{
  shmap__mpimesh *m = comm->priv;
  /* Exchange the results, still taking in notices while waiting. */
  verdict *all = m->all;
  memset(all, 0, sizeof *all * (size_t)m->nproc);
  all[m->self].code = rc;
  all[m->self].origin = rc && !atomic_load(&m->remote_fail);
  if (rc)
    snprintf(all[m->self].msg, sizeof all[0].msg, "%s", shmap__errbuf());
  MPI_Request req;
  int err = SHMAP__MPI_CHECK(MPI_Iallgather, MPI_IN_PLACE, 0,
                             MPI_DATATYPE_NULL, all, (int)sizeof *all,
                             MPI_BYTE, m->comm, &req);
  if (err)
    return err;
  endwait ew = {.m = m, .req = &req};
  shmap__poll_until(NULL, NULL, end_done, &ew, NULL);
  if (ew.err)
    return ew.err;
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
  /* This map is over everywhere: its slot serves the map after next. */
  uv_mutex_lock(&m->lock);
  eslot *s = &m->slot[m->epoch & 1];
  s->epoch = m->epoch + 2;
  s->fail_dev = -1;
  memset(s->done, 0, (size_t)m->ndev);
  memset(s->counts, 0, sizeof(uint32_t) * (size_t)m->ndev);
  memset(s->entered, 0, sizeof(uint32_t) * (size_t)m->ndev);
  uv_mutex_unlock(&m->lock);
  return rc;
}

/* ---- the table -------------------------------------------------------- */

const shmap__transport shmap__mpi_transport = {
    .name = "mpi",
    .mesh_init = mpi_mesh_init,
    .mesh_free = mpi_mesh_free,
    .open = mpi_open,
    .close = mpi_close,
    .is_local = mpi_is_local,
    .finish = mpi_finish,
    .notify = mpi_notify,
    .failed = mpi_failed,
    .verdict = mpi_verdict,
    .arrive = mpi_arrive,
    .get = mpi_get,
    .reduce = mpi_reduce,
    .allreduce = mpi_allreduce,
    .allreduce_whole = mpi_allreduce_whole,
    .send = mpi_send,
    .recv = mpi_recv,
    .depart = mpi_depart,
    .allreduce_small = mpi_allreduce_small,
    .small_max_bytes = SHMAP__SMALL_BYTES_MPI,
    .small_takes = mpi_small_takes,
    .small_max_n = SHMAP_MAX_DEVICES,
    .small_own_max_n = SHMAP_MAX_DEVICES,
};

#else /* no MPI: no transport between processes (comm.c) */

typedef int shmap__no_mpi;
#endif
