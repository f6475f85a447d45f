/* SPDX-License-Identifier: MIT */
/*
 * spmd.c - host data when a mesh's devices are spread over processes.
 *
 * A sharded array keeps, in each process, only the blocks of that
 * process's devices.  shmap_array_to_host_local() writes those;
 * shmap_array_to_host() then also collects the others, each distinct block
 * being sent by the process of the lowest-numbered device holding it (the
 * block's representative, whose coordinates are 0 on the axes the spec
 * leaves out).  Every exchange here goes over the mesh's own communicator
 * (shmap__proc_mesh_comm), never the job-wide one: calls on other meshes,
 * from other threads, may be exchanging at the same time.
 */
#include "proc/proc.h"
#include "sched/runtime.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHMAP_HAVE_MPI
#include <mpi.h>
#endif

/* Where the block of device d starts in row-major host memory `dst`. */
static char *block_origin(const shmap_array *a, int d, void *dst,
                          const int64_t gstr[])
{
  int c[SHMAP_MAX_AXES];
  int64_t off[SHMAP_MAX_RANK];
  shmap__mesh_coords(a->mesh, d, c);
  shmap__block_offset(a->mesh, &a->spec, a->rank, a->bshape, c, off);
  char *out = dst;
  for (int i = 0; i < a->rank; i++)
    out += off[i] * gstr[i] * (int64_t)shmap_dtype_size(a->dtype);
  return out;
}

void shmap__array_assemble_local(const shmap_array *a, void *dst)
{
  const shmap_mesh *mesh = a->mesh;
  unsigned mask = shmap__spec_axes_mask(&a->spec);
  size_t es = shmap_dtype_size(a->dtype);
  int64_t gstr[SHMAP_MAX_RANK], bstr[SHMAP_MAX_RANK];
  shmap__strides(a->rank, a->shape, gstr);
  shmap__strides(a->rank, a->bshape, bstr);
  /* The first local holder of each distinct block writes it.  A block's
   * holders are the devices with its representative, which comes first
   * among them; a mark per representative finds the first in one pass
   * (without memory for the marks, a look back over the devices between,
   * quadratic in the devices of a replicated array). */
  bool *seen = shmap__calloc((size_t)mesh->ndev, sizeof *seen);
  for (int d = 0; d < mesh->ndev; d++) {
    if (!shmap__dev_local(mesh, d))
      continue;
    int rep = shmap__representative(mesh, mask, d);
    bool first = true;
    if (seen) {
      first = !seen[rep];
      seen[rep] = true;
    } else {
      for (int e = rep; e < d && first; e++)
        if (shmap__dev_local(mesh, e) &&
            shmap__representative(mesh, mask, e) == rep)
          first = false;
    }
    if (!a->blocks[d].data && shmap__valid_numel(&a->blocks[d]) > 0)
      continue;
    if (first)
      shmap__copy_box(block_origin(a, d, dst, gstr), gstr, a->blocks[d].data,
                      bstr, a->rank, a->bshape, es);
  }
  free(seen);
}

int shmap__array_exchange(const shmap_array *a, void *dst)
{
#ifdef SHMAP_HAVE_MPI
  const shmap_mesh *mesh = a->mesh;
  const shmap__place *pl = mesh->place;
  int tag;
  MPI_Comm *comm = shmap__proc_mesh_comm(mesh, &tag);
  if (!pl || pl->nproc == 1 || !comm)
    return 0;
  (void)tag;
  const char *op = "shmap_array_to_host";
  unsigned mask = shmap__spec_axes_mask(&a->spec);
  size_t es = shmap_dtype_size(a->dtype);
  int64_t bnumel = shmap__numel(a->rank, a->bshape);
  int *counts = shmap__calloc((size_t)pl->nproc * 2, sizeof *counts);
  if (!counts)
    return shmap__err(SHMAP_ENOMEM, "%s: out of memory", op);
  int *displs = counts + pl->nproc;
  int64_t total = 0;
  for (int p = 0; p < pl->nproc; p++) {
    int64_t n = 0;
    for (int d = 0; d < mesh->ndev; d++)
      if (shmap__representative(mesh, mask, d) == d && pl->owner[d] == p)
        n += bnumel;
    if (n > INT_MAX || total > INT_MAX) {
      free(counts);
      return shmap__err(SHMAP_EINVAL,
                        "%s: process %d holds %lld elements, more than one "
                        "MPI message of this version carries (%d)",
                        op, p, (long long)n, INT_MAX);
    }
    counts[p] = (int)n;
    displs[p] = (int)total;
    total += n;
  }
  char *buf = shmap__malloc((size_t)total * es + 1);
  if (!buf) {
    free(counts);
    return shmap__err(SHMAP_ENOMEM, "%s: out of memory for %lld elements", op,
                      (long long)total);
  }
  /* Pack this process's representatives in device order. */
  char *mine = buf + (size_t)displs[pl->self] * es;
  for (int d = 0; d < mesh->ndev; d++)
    if (shmap__representative(mesh, mask, d) == d && pl->owner[d] == pl->self) {
      memcpy(mine, a->blocks[d].data, (size_t)bnumel * es);
      mine += (size_t)bnumel * es;
    }
  MPI_Datatype elem;
  MPI_Request req;
  int rc = SHMAP__MPI_CHECK(MPI_Type_contiguous, (int)es, MPI_BYTE, &elem);
  bool typed = rc == 0;
  if (rc == 0)
    rc = SHMAP__MPI_CHECK(MPI_Type_commit, &elem);
  if (rc == 0)
    rc = SHMAP__MPI_CHECK(MPI_Iallgatherv, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL,
                          buf, counts, displs, elem, *comm, &req);
  if (rc == 0)
    rc = shmap__mpi_wait(&req);
  if (typed)
    (void)SHMAP__MPI_CHECK(MPI_Type_free, &elem);
  if (rc == 0) {
    int64_t gstr[SHMAP_MAX_RANK], bstr[SHMAP_MAX_RANK];
    shmap__strides(a->rank, a->shape, gstr);
    shmap__strides(a->rank, a->bshape, bstr);
    int64_t *at = shmap__calloc((size_t)pl->nproc, sizeof *at);
    if (!at)
      rc = shmap__err(SHMAP_ENOMEM, "%s: out of memory", op);
    uint64_t received = 0;
    for (int d = 0; at && d < mesh->ndev; d++) {
      if (shmap__representative(mesh, mask, d) != d)
        continue;
      int p = pl->owner[d];
      const char *src = buf + (size_t)(displs[p] + at[p]) * es;
      at[p] += bnumel;
      if (p == pl->self)
        continue;
      shmap__copy_box(block_origin(a, d, dst, gstr), gstr, src, bstr, a->rank,
                      a->bshape, es);
      received += (uint64_t)bnumel * es;
    }
    free(at);
    shmap__runtime_lock(mesh->rt);
    ((shmap_mesh *)mesh)->stats.bytes_remote += received;
    shmap__runtime_unlock(mesh->rt);
  }
  free(buf);
  free(counts);
  return rc;
#else
  (void)a;
  (void)dst;
  return 0;
#endif
}

SHMAP_EXTERN int shmap_array_to_host_local(const shmap_array *array, void *data)
{
  if (!array || (!data && array->numel > 0))
    return shmap__err(SHMAP_EINVAL, "shmap_array_to_host_local: NULL argument");
  if (array->data) {
    /* A host array is whole in every process. */
    memcpy(data, array->data,
           (size_t)array->numel * shmap_dtype_size(array->dtype));
    return 0;
  }
  shmap__array_assemble_local(array, data);
  return 0;
}

/* ---- a map's outputs over processes ---------------------------------------- */

#ifdef SHMAP_HAVE_MPI
#define AGREE_OUTPUTS "agreeing on a map's outputs between processes"

/* One device's description of one output (rank -1: none declared). */
typedef struct odesc {
  int32_t dev; /* -1: no such device in that process */
  int32_t dtype, rank;
  int64_t shape[SHMAP_MAX_RANK];
} odesc;

static void odesc_set(odesc *e, int dev, const shmap_block *b)
{
  e->dev = dev;
  e->rank = b ? b->rank : -1;
  e->dtype = b ? (int32_t)b->dtype : 0;
  if (b)
    memcpy(e->shape, b->shape, sizeof(int64_t) * (size_t)b->rank);
}

static bool odesc_same(const odesc *a, const odesc *b)
{
  return a->rank == b->rank && a->dtype == b->dtype &&
         (a->rank <= 0 ||
          !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank));
}

static void odesc_text(const odesc *e, char *buf, size_t n)
{
  shmap__shape_format((shmap_dtype)e->dtype, e->rank, e->shape, buf, n);
}
#endif

int shmap__proc_outputs(const shmap_mesh *mesh, int nout,
                        const shmap_block *const tab[], shmap_block *out)
{
#ifdef SHMAP_HAVE_MPI
  int tag;
  MPI_Comm *comm = shmap__proc_mesh_comm(mesh, &tag);
  const shmap__place *pl = mesh->place;
  if (!comm || nout == 0)
    return 0;
  (void)tag;
  /* Per process and output: its lowest device's block, and its first
   * device whose block differs from that one. */
  size_t per = 2 * (size_t)nout;
  odesc *all = shmap__calloc(per * (size_t)pl->nproc, sizeof *all);
  if (!all) /* the others would wait for this process: stop instead */
    MPI_Abort(*comm, 1);
  odesc *mine = all + per * (size_t)pl->self;
  for (int k = 0; k < nout; k++) {
    mine[2 * k].dev = mine[2 * k + 1].dev = -1;
    if (pl->nlocal == 0)
      continue;
    int f = pl->local[0];
    odesc_set(&mine[2 * k], f, tab[(size_t)f * (size_t)nout + (size_t)k]);
    for (int i = 1; i < pl->nlocal; i++) {
      int d = pl->local[i];
      odesc e;
      odesc_set(&e, d, tab[(size_t)d * (size_t)nout + (size_t)k]);
      if (!odesc_same(&e, &mine[2 * k])) {
        mine[2 * k + 1] = e;
        break;
      }
    }
  }
  MPI_Request req;
  int rc = SHMAP__MPI_CHECK(MPI_Iallgather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL,
                            all, (int)(sizeof *all * per), MPI_BYTE, *comm,
                            &req);
  if (rc == 0)
    rc = shmap__mpi_wait_all(1, &req, AGREE_OUTPUTS);
  for (int k = 0; k < nout && rc == 0; k++) {
    /* The lowest device's block, then the lowest device whose block
     * differs, as one process checks them in device order. */
    const odesc *f = NULL, *declared = NULL;
    for (int p = 0; p < pl->nproc; p++) {
      const odesc *e = &all[per * (size_t)p + 2 * (size_t)k];
      if (e->dev >= 0 && (!f || e->dev < f->dev))
        f = e;
      for (int x = 0; x < 2; x++)
        if (e[x].dev >= 0 && e[x].rank >= 0 &&
            (!declared || e[x].dev < declared->dev))
          declared = &e[x];
    }
    if (!declared) {
      rc = shmap__err(SHMAP_EINVAL,
                      "output %d was not declared by any device (the map "
                      "has %d outputs; declare each with shmap_out)",
                      k, nout);
      break;
    }
    const odesc *bad = NULL;
    for (int p = 0; p < pl->nproc; p++) {
      const odesc *e = &all[per * (size_t)p + 2 * (size_t)k];
      const odesc *c = e->dev < 0 ? NULL
                       : !odesc_same(e, f) ? e
                       : e[1].dev >= 0 ? &e[1] : NULL;
      if (c && (!bad || c->dev < bad->dev))
        bad = c;
    }
    if (bad) {
      /* Named as one process names them: a declared block first. */
      const odesc *a = f->rank >= 0 ? f : bad, *b = f->rank >= 0 ? bad : f;
      char na[96], nb[96], sa[128], sb[128];
      shmap__mesh_devname(mesh, a->dev, na, sizeof na);
      shmap__mesh_devname(mesh, b->dev, nb, sizeof nb);
      odesc_text(a, sa, sizeof sa);
      if (b->rank < 0)
        rc = shmap__err(SHMAP_EMISMATCH,
                        "output %d: %s declared %s but %s declared no "
                        "output %d", k, na, sa, nb, k);
      else {
        odesc_text(b, sb, sizeof sb);
        rc = shmap__err(SHMAP_EMISMATCH, "output %d: %s returned %s but %s "
                        "returned %s", k, na, sa, nb, sb);
      }
      break;
    }
    memset(&out[k], 0, sizeof out[k]);
    out[k].dtype = (shmap_dtype)f->dtype;
    out[k].rank = f->rank;
    memcpy(out[k].shape, f->shape, sizeof(int64_t) * (size_t)f->rank);
  }
  free(all);
  return rc;
#else
  (void)mesh; (void)nout; (void)tab; (void)out;
  return 0;
#endif
}

int shmap__proc_rep_blocks(const shmap_mesh *mesh, unsigned mask,
                           const void *const data[], size_t bytes,
                           const void **rep, void **owned,
                           uint64_t *received)
{
  /* Local representatives first; the others are filled below. */
  for (int d = 0; d < mesh->ndev; d++) {
    int r = shmap__representative(mesh, mask, d);
    rep[d] = shmap__dev_local(mesh, d) ? data[r] : NULL;
  }
  *owned = NULL;
  *received = 0;
#ifdef SHMAP_HAVE_MPI
  int tag;
  MPI_Comm *comm = shmap__proc_mesh_comm(mesh, &tag);
  const shmap__place *pl = mesh->place;
  if (!comm || bytes == 0)
    return 0;
  /* The classes this process needs from elsewhere, and the processes
   * each class of this process goes to, in device order everywhere:
   * need[c * nproc + p] says that process p holds a device of class c
   * (c its representative) and another process owns c, found in one pass
   * over the devices; recv_at[c], where this process receives class c. */
  size_t np = (size_t)pl->nproc, nd = (size_t)mesh->ndev;
  unsigned char *need = shmap__calloc(nd * np, 1);
  char **recv_at = shmap__calloc(nd, sizeof *recv_at);
  int nrecv = 0, nsend = 0;
  for (int d = 0; need && d < mesh->ndev; d++) {
    int c = shmap__representative(mesh, mask, d), p = pl->owner[d];
    if (p == pl->owner[c] || need[(size_t)c * np + (size_t)p])
      continue;
    need[(size_t)c * np + (size_t)p] = 1;
    if (p == pl->self)
      nrecv++;
    if (pl->owner[c] == pl->self)
      nsend++;
  }
  char *buf = shmap__alloc(bytes * (size_t)nrecv + 1, false);
  MPI_Request *reqs = shmap__malloc(sizeof *reqs * (size_t)(nrecv + nsend + 1));
  int ok = need && recv_at && buf && reqs, all = ok;
  MPI_Request req;
  int rc = SHMAP__MPI_CHECK(MPI_Iallreduce, MPI_IN_PLACE, &all, 1, MPI_INT,
                            MPI_MIN, *comm, &req);
  if (rc == 0)
    rc = shmap__mpi_wait_all(1, &req, AGREE_OUTPUTS);
  if (rc == 0 && !all)
    rc = shmap__err(SHMAP_ENOMEM, "out of memory for the copies of outputs "
                    "that other processes hold (in %s)",
                    ok ? "another process" : "this process");
  int n = 0, prc = 0;
  char *at = buf;
  for (int c = 0; rc == 0 && prc == 0 && c < mesh->ndev; c++) {
    if (shmap__representative(mesh, mask, c) != c)
      continue;
    for (int p = 0; p < pl->nproc && prc == 0; p++) {
      if (p == pl->owner[c] || (p != pl->self && pl->owner[c] != pl->self))
        continue;
      if (!need[(size_t)c * np + (size_t)p])
        continue;
      if (p == pl->self) {
        if ((prc = SHMAP__MPI_CHECK(MPI_Irecv, at, (int)bytes, MPI_BYTE,
                                    pl->owner[c], tag, *comm, &reqs[n])))
          break;
        n++;
        recv_at[c] = at;
        at += bytes;
      } else if ((prc = SHMAP__MPI_CHECK(MPI_Isend, data[c], (int)bytes,
                                         MPI_BYTE, p, tag, *comm,
                                         &reqs[n])) == 0) {
        n++;
      }
    }
  }
  for (int d = 0; rc == 0 && d < mesh->ndev; d++)
    if (pl->owner[d] == pl->self) {
      char *r = recv_at[shmap__representative(mesh, mask, d)];
      if (r)
        rep[d] = r;
    }
  free(need);
  free(recv_at);
  /* After a failed post, those posted still complete before buf goes. */
  if (rc == 0 && n)
    rc = shmap__mpi_wait_all(n, reqs,
                             "moving copies of outputs between processes");
  rc = rc ? rc : prc;
  free(reqs);
  if (rc) {
    free(buf);
    return rc;
  }
  *owned = buf;
  *received = (uint64_t)nrecv * bytes;
  return 0;
#else
  (void)bytes;
  return 0;
#endif
}

int shmap__proc_agree_first(const shmap_mesh *mesh, int dev, int rc)
{
#ifdef SHMAP_HAVE_MPI
  int tag;
  MPI_Comm *comm = shmap__proc_mesh_comm(mesh, &tag);
  if (!comm)
    return rc;
  (void)tag;
  const shmap__place *pl = mesh->place;
  typedef struct first {
    int32_t dev, code;
    char msg[SHMAP__MSG_MAX];
  } first;
  first *all = shmap__calloc((size_t)pl->nproc, sizeof *all);
  if (!all) /* the others would wait for this process: stop instead */
    MPI_Abort(*comm, 1);
  all[pl->self].dev = rc ? dev : -1;
  all[pl->self].code = rc;
  if (rc)
    snprintf(all[pl->self].msg, sizeof all[0].msg, "%s", shmap__errbuf());
  MPI_Request req;
  int err = SHMAP__MPI_CHECK(MPI_Iallgather, MPI_IN_PLACE, 0,
                             MPI_DATATYPE_NULL, all, (int)sizeof *all,
                             MPI_BYTE, *comm, &req);
  if (err == 0)
    err = shmap__mpi_wait_all(1, &req, AGREE_OUTPUTS);
  if (err) {
    free(all);
    return err;
  }
  int pick = -1;
  for (int p = 0; p < pl->nproc; p++)
    if (all[p].code && (pick < 0 || all[p].dev < all[pick].dev))
      pick = p;
  rc = 0;
  if (pick >= 0) {
    rc = all[pick].code;
    all[pick].msg[sizeof all[pick].msg - 1] = '\0';
    shmap__err_set(all[pick].msg);
  }
  free(all);
  return rc;
#else
  (void)mesh;
  (void)dev;
  return rc;
#endif
}
