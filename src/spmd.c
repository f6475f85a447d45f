/* SPDX-License-Identifier: MIT */
/*
 * spmd.c - host data when a mesh's devices are spread over processes.
 *
 * A sharded array keeps, in each process, only the blocks of that
 * process's devices.  shmap_array_to_host_local() writes those;
 * shmap_array_to_host() then also collects the others, each distinct block
 * being sent by the process of the lowest-numbered device holding it (the
 * block's representative, whose coordinates are 0 on the axes the spec
 * leaves out).
 */
#include "proc.h"
#include "runtime/runtime.h"

#include <limits.h>
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
  /* The first local holder of each distinct block writes it. */
  for (int d = 0; d < mesh->ndev; d++) {
    if (!a->blocks[d].data && shmap_block_numel(&a->blocks[d]) > 0)
      continue;
    if (!shmap__dev_local(mesh, d))
      continue;
    int rep = shmap__representative(mesh, mask, d);
    bool first = true;
    for (int e = rep; e < d && first; e++)
      if (shmap__dev_local(mesh, e) &&
          shmap__representative(mesh, mask, e) == rep)
        first = false;
    if (first)
      shmap__copy_box(block_origin(a, d, dst, gstr), gstr, a->blocks[d].data,
                      bstr, a->rank, a->bshape, es);
  }
}

int shmap__array_exchange(const shmap_array *a, void *dst)
{
#ifdef SHMAP_HAVE_MPI
  const shmap_mesh *mesh = a->mesh;
  const shmap__place *pl = mesh->place;
  if (!pl || pl->nproc == 1)
    return 0;
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
  MPI_Type_contiguous((int)es, MPI_BYTE, &elem);
  MPI_Type_commit(&elem);
  MPI_Request req;
  int rc = 0;
  int err = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts,
                            displs, elem, *(MPI_Comm *)shmap__proc_comm(), &req);
  if (err != MPI_SUCCESS)
    rc = shmap__err(SHMAP_ESYS, "%s: MPI_Iallgatherv failed (%d)", op, err);
  else
    rc = shmap__mpi_wait(&req);
  MPI_Type_free(&elem);
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
