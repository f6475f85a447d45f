/* SPDX-License-Identifier: MIT */
/*
 * stage.c - the pieces of a sharded array that this process's devices need
 * for a new layout but only other processes hold (resharding a map's input,
 * shmap_array_transfer between meshes).
 *
 * Devices build their blocks for a new layout by copying, out of the
 * source's blocks, the box each source block shares with their target
 * block (shmap__gather_block in array.c, gather_from in transfer.c).  When
 * the source's devices are spread over processes, a source block may be
 * held only elsewhere.  Before the map starts, every process works out the
 * same list of pieces: for each target device, each source block its block
 * overlaps, unless a device of the target's process holds an equal copy.
 * A piece needed by several devices of one process (copies of one target
 * block) is listed once.  The process of the source device named for the
 * piece sends it straight from that device's block, described by an MPI
 * derived datatype (no packing); the target process receives it into a
 * buffer shaped like a source block, and the map then reads a *view* of the
 * source whose remote blocks point at local copies of the same block or at
 * these buffers.  Each piece thus crosses once to each process that needs
 * it, from a process that holds it, and only the boxes needed are sent.
 *
 * Every process makes the same calls (SPMD), so both sides of every piece
 * are listed in the same order everywhere and one tag serves them all.
 * Before moving anything, the processes agree (a non-blocking all-reduce)
 * that each could allocate its buffers, so a process that cannot is never
 * left out of an exchange the others wait in.
 */
#include "proc/proc.h"
#include "sched/runtime.h"

#include <stdlib.h>
#include <string.h>

#ifdef SHMAP_HAVE_MPI
#include <mpi.h>
#endif

/* A view and what it owns (the view is the first member). */
typedef struct stage {
  shmap_array view;
  char **bufs; /* per source device: a receive buffer (owned by class reps) */
} stage;

bool shmap__stage_needed(const shmap_array *a, const shmap_mesh *tmesh)
{
  if (a->data || !a->mesh)
    return false;
  const shmap__place *sp = a->mesh->place, *tp = tmesh->place;
  return (sp && sp->nproc > 1) || (tp && tp->nproc > 1);
}

void shmap__stage_free(shmap_array *view)
{
  stage *s = (stage *)view;
  if (!s)
    return;
  if (s->bufs)
    for (int d = 0; d < view->mesh->ndev; d++)
      free(s->bufs[d]);
  free(s->bufs);
  free(view->blocks);
  free(s);
}

#ifdef SHMAP_HAVE_MPI

/* One piece: the box [start, start+shape) of source block class `cls`
 * (its representative device), for process `to`, sent by device `from`. */
typedef struct piece {
  int to, cls, from;
  int64_t start[SHMAP_MAX_RANK], shape[SHMAP_MAX_RANK];
} piece;

typedef struct plist {
  piece *v;
  size_t n, cap;
} plist;

static int plist_add(plist *l, const piece *p)
{
  for (size_t k = 0; k < l->n; k++) {
    const piece *q = &l->v[k];
    if (q->to == p->to && q->cls == p->cls &&
        !memcmp(q->start, p->start, sizeof p->start) &&
        !memcmp(q->shape, p->shape, sizeof p->shape))
      return 0; /* copies of one target block: listed once */
  }
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    piece *v = shmap__realloc(l->v, cap * sizeof *v);
    if (!v)
      return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *p;
  return 0;
}

/* The device of the source mesh that is physically device `dev` of the
 * target mesh, or -1 (as transfer.c chooses). */
static int same_device(const shmap_mesh *sm, const shmap_mesh *tm, int dev)
{
  if (sm == tm)
    return dev;
  if (shmap__mesh_root(sm) != shmap__mesh_root(tm))
    return -1;
  int r = shmap__mesh_rootdev(tm, dev);
  for (int s = 0; s < sm->ndev; s++)
    if (shmap__mesh_rootdev(sm, s) == r)
      return s;
  return -1;
}

static int owner(const shmap_mesh *m, int dev)
{
  return m->place ? m->place->owner[dev] : 0;
}

/* Whether a device of process p holds a block of class cls (source). */
static bool proc_holds(const shmap_mesh *sm, unsigned named, int cls, int p)
{
  for (int d = 0; d < sm->ndev; d++)
    if (owner(sm, d) == p && shmap__representative(sm, named, d) == cls)
      return true;
  return false;
}

/* List the pieces every target device's process lacks. */
static int list_pieces(const shmap_array *a, const shmap_mesh *tm,
                       const shmap__spec *tspec, const int64_t tbshape[],
                       plist *l)
{
  const shmap_mesh *sm = a->mesh;
  const int rank = a->rank;
  const int64_t *sb = a->bshape;
  unsigned named = shmap__spec_axes_mask(&a->spec);
  if (shmap__numel(rank, tbshape) == 0 || shmap__numel(rank, sb) == 0)
    return 0;
  for (int t = 0; t < tm->ndev; t++) {
    int to = owner(tm, t);
    int tc[SHMAP_MAX_AXES];
    shmap__mesh_coords(tm, t, tc);
    int64_t off[SHMAP_MAX_RANK], lo[SHMAP_MAX_RANK], hi[SHMAP_MAX_RANK],
        i[SHMAP_MAX_RANK];
    shmap__block_offset(tm, tspec, rank, tbshape, tc, off);
    for (int d = 0; d < rank; d++) {
      lo[d] = i[d] = off[d] / sb[d];
      hi[d] = (off[d] + tbshape[d] - 1) / sb[d];
    }
    /* Other coordinates of the sender: this device's own when the source
     * is on the same mesh (as the device itself would read), else those
     * of the device that is the same physical device, else zeros. */
    int base[SHMAP_MAX_AXES] = {0};
    int phys = same_device(sm, tm, t);
    if (phys >= 0)
      shmap__mesh_coords(sm, phys, base);
    for (;;) {
      int sc[SHMAP_MAX_AXES];
      memcpy(sc, base, sizeof sc);
      for (int d = 0; d < a->spec.ndims; d++) {
        int64_t rem = i[d];
        for (int k = a->spec.naxes[d] - 1; k >= 0; k--) {
          int ax = a->spec.axes[d][k];
          sc[ax] = (int)(rem % sm->sizes[ax]);
          rem /= sm->sizes[ax];
        }
      }
      int s = 0;
      for (int ax = 0; ax < sm->naxes; ax++)
        s += sc[ax] * sm->strides[ax];
      piece p = {.to = to, .cls = shmap__representative(sm, named, s),
                 .from = s};
      if (!proc_holds(sm, named, p.cls, to)) {
        for (int d = 0; d < rank; d++) {
          int64_t b0 = i[d] * sb[d];
          int64_t start = off[d] > b0 ? off[d] : b0;
          int64_t end = off[d] + tbshape[d] < b0 + sb[d] ? off[d] + tbshape[d]
                                                         : b0 + sb[d];
          p.start[d] = start - b0;
          p.shape[d] = end - start;
        }
        if (plist_add(l, &p))
          return -1;
      }
      if (!shmap__index_next(rank, i, lo, hi))
        break;
    }
  }
  return 0;
}

/* The MPI type of box `p` inside a row-major block of shape sb (*type,
 * committed) and its displacement: 0 or an MPI error (message set). */
static int piece_type(int rank, const int64_t sb[], const piece *p, size_t es,
                      MPI_Datatype *type, MPI_Aint *disp)
{
  int64_t str[SHMAP_MAX_RANK];
  shmap__strides(rank, sb, str);
  MPI_Datatype t, nt;
  int rc = SHMAP__MPI_CHECK(MPI_Type_contiguous, (int)es, MPI_BYTE, &t);
  *disp = 0;
  for (int d = rank - 1; rc == 0 && d >= 0; d--) {
    rc = SHMAP__MPI_CHECK(MPI_Type_create_hvector, (int)p->shape[d], 1,
                          (MPI_Aint)(str[d] * (int64_t)es), t, &nt);
    (void)SHMAP__MPI_CHECK(MPI_Type_free, &t);
    t = nt;
    *disp += (MPI_Aint)(p->start[d] * str[d] * (int64_t)es);
  }
  if (rc == 0 && (rc = SHMAP__MPI_CHECK(MPI_Type_commit, &t)))
    (void)SHMAP__MPI_CHECK(MPI_Type_free, &t);
  if (rc == 0)
    *type = t;
  return rc;
}

/* The view: local blocks as they are; a remote block as a local copy of
 * the same block, or as the buffer of its class. */
static void build_view(stage *s, const shmap_array *a)
{
  const shmap_mesh *sm = a->mesh;
  unsigned named = shmap__spec_axes_mask(&a->spec);
  for (int d = 0; d < sm->ndev; d++) {
    s->view.blocks[d] = a->blocks[d];
    if (a->blocks[d].data)
      continue;
    int cls = shmap__representative(sm, named, d);
    for (int e = 0; e < sm->ndev && !s->view.blocks[d].data; e++)
      if (a->blocks[e].data && shmap__representative(sm, named, e) == cls)
        s->view.blocks[d].data = a->blocks[e].data;
    if (!s->view.blocks[d].data)
      s->view.blocks[d].data = s->bufs[cls];
  }
}

int shmap__stage(const shmap_array *a, shmap_mesh *tm, const shmap__spec *tspec,
                 const int64_t tbshape[], const char *op, shmap_array **out)
{
  *out = NULL;
  int tag = 0;
  MPI_Comm *comm = shmap__proc_mesh_comm(tm, &tag);
  if (!comm)
    comm = shmap__proc_mesh_comm(a->mesh, &tag);
  if (!comm)
    return 0;
  const shmap_mesh *sm = a->mesh;
  const int self = shmap__proc_self()->rank;
  size_t es = shmap_dtype_size(a->dtype);
  size_t bbytes = (size_t)shmap__numel(a->rank, a->bshape) * es;
  plist l = {0};
  stage *s = shmap__calloc(1, sizeof *s);
  int ok = s != NULL;
  if (ok) {
    s->view = *a;
    s->view.mem = NULL;
    s->view.blocks = shmap__calloc((size_t)sm->ndev, sizeof *s->view.blocks);
    s->bufs = shmap__calloc((size_t)sm->ndev, sizeof *s->bufs);
    ok = s->view.blocks && s->bufs && list_pieces(a, tm, tspec, tbshape, &l) == 0;
  }
  /* The requests too: one process short of them must not hang the rest. */
  MPI_Request *reqs = ok && l.n ? shmap__malloc(l.n * sizeof *reqs) : NULL;
  ok = ok && (reqs || !l.n);
  /* Receive buffers, one per class of source blocks this process lacks. */
  for (size_t k = 0; ok && k < l.n; k++) {
    const piece *p = &l.v[k];
    if (p->to == self && !s->bufs[p->cls])
      ok = (s->bufs[p->cls] = shmap__alloc(bbytes + 1, true)) != NULL;
  }
  /* Everyone could allocate, or nobody moves anything. */
  int all = ok;
  MPI_Request req;
  int rc = 0;
  char what[128];
  snprintf(what, sizeof what, "%s: moving pieces between processes", op);
  if ((rc = SHMAP__MPI_CHECK(MPI_Iallreduce, MPI_IN_PLACE, &all, 1, MPI_INT,
                             MPI_MIN, *comm, &req)) == 0)
    rc = shmap__mpi_wait_all(1, &req, what);
  if (rc == 0 && !all)
    rc = shmap__err(SHMAP_ENOMEM, "%s: out of memory for the pieces of the "
                    "array that other processes hold (in %s)", op,
                    ok ? "another process" : "this process");
  int nreq = 0, prc = 0;
  uint64_t received = 0;
  for (size_t k = 0; rc == 0 && prc == 0 && k < l.n; k++) {
    const piece *p = &l.v[k];
    int from = owner(sm, p->from);
    if (from != self && p->to != self)
      continue;
    MPI_Aint disp;
    MPI_Datatype t;
    if ((prc = piece_type(a->rank, a->bshape, p, es, &t, &disp)))
      break;
    if (from == self)
      prc = SHMAP__MPI_CHECK(MPI_Isend,
                             (const char *)a->blocks[p->from].data + disp, 1,
                             t, p->to, tag, *comm, &reqs[nreq]);
    else
      prc = SHMAP__MPI_CHECK(MPI_Irecv, s->bufs[p->cls] + disp, 1, t, from,
                             tag, *comm, &reqs[nreq]);
    nreq += prc == 0;
    if (prc == 0 && from != self)
      received += (uint64_t)shmap__numel(a->rank, p->shape) * es;
    (void)SHMAP__MPI_CHECK(MPI_Type_free, &t);
  }
  /* After a failed post, those posted complete before the buffers go. */
  if (rc == 0 && nreq)
    rc = shmap__mpi_wait_all(nreq, reqs, what);
  rc = rc ? rc : prc;
  free(reqs);
  free(l.v);
  if (rc) {
    if (s)
      shmap__stage_free(&s->view);
    return rc;
  }
  build_view(s, a);
  if (received) {
    shmap__runtime_lock(tm->rt);
    tm->stats.bytes_remote += received;
    shmap__runtime_unlock(tm->rt);
  }
  *out = &s->view;
  return 0;
}

#else

int shmap__stage(const shmap_array *a, shmap_mesh *tm, const shmap__spec *tspec,
                 const int64_t tbshape[], const char *op, shmap_array **out)
{
  (void)a; (void)tm; (void)tspec; (void)tbshape; (void)op;
  *out = NULL;
  return 0;
}

#endif
