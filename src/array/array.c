/* SPDX-License-Identifier: MIT */
/* array.c - global arrays in host memory: import, export, queries. */
#include "internal.h"
#include "proc/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int shmap__array_new(shmap_array **out, shmap_dtype dtype, int rank,
                     const int64_t shape[], bool zero)
{
  shmap_array *a = shmap__calloc(1, sizeof *a);
  if (!a)
    return shmap__err(SHMAP_ENOMEM, "out of memory allocating an array header");
  a->dtype = dtype;
  a->rank = rank;
  if (rank)
    memcpy(a->shape, shape, (size_t)rank * sizeof shape[0]);
  a->numel = shmap__numel(rank, shape);
  size_t bytes = (size_t)a->numel * shmap_dtype_size(dtype);
  a->data = shmap__alloc(bytes, zero);
  if (!a->data) {
    free(a);
    char s[SHMAP__SHAPE_MAX];
    shmap__shape_format(dtype, rank, shape, s, sizeof s);
    return shmap__err(SHMAP_ENOMEM, "out of memory allocating %s (%zu bytes)",
                      s, bytes);
  }
  *out = a;
  return 0;
}

/* Large copies are split over OpenMP threads: the device threads are parked
 * while the host imports or exports, so the cores are free.  Under
 * ThreadSanitizer the copy stays serial (libgomp is not instrumented). */
void shmap__bulk_copy(void *dst, const void *src, size_t bytes)
{
  if (bytes == 0)
    return;
#if defined(_OPENMP) && !defined(__SANITIZE_THREAD__)
  const size_t piece = (size_t)1 << 20;
  /* Not in a child of fork(): OpenMP's threads stayed in the parent. */
  shmap__fork_init();
  if (bytes >= 4 * piece && shmap__fork_generation() == 0) {
    long n = (long)((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
      size_t off = (size_t)i * piece;
      size_t len = bytes - off < piece ? bytes - off : piece;
      memcpy((char *)dst + off, (const char *)src + off, len);
    }
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

SHMAP_EXTERN int shmap_array_from_host(shmap_array **array, shmap_dtype dtype,
                                       int rank, const int64_t shape[],
                                       const void *data)
{
  if (!array)
    return shmap__err(SHMAP_EINVAL, "shmap_array_from_host: array is NULL");
  *array = NULL;
  int rc = shmap__check_shape("shmap_array_from_host", dtype, rank, shape);
  if (rc)
    return rc;
  int64_t numel = shmap__numel(rank, shape);
  if (!data && numel > 0)
    return shmap__err(SHMAP_EINVAL, "shmap_array_from_host: data is NULL");
  shmap_array *a;
  rc = shmap__array_new(&a, dtype, rank, shape, false);
  if (rc)
    return rc;
  shmap__bulk_copy(a->data, data, (size_t)numel * shmap_dtype_size(dtype));
  *array = a;
  return 0;
}

SHMAP_EXTERN int shmap_array_to_host(const shmap_array *array, void *data)
{
  const char *op = "shmap_array_to_host";
  int rc = 0;
  if (!array || (!data && array->numel > 0))
    rc = shmap__err(SHMAP_EINVAL, "%s: NULL argument", op);
  if (!array)
    return rc;
  if (array->data) {
    if (rc == 0)
      shmap__bulk_copy(data, array->data,
                       (size_t)array->numel * shmap_dtype_size(array->dtype));
  } else if (array->mesh->place && array->mesh->place->nproc > 1) {
    /* Blocks are spread over processes: ours, then everyone else's, once
     * every process agreed on the call (a process that rejects it still
     * agrees, so that every process rejects it; proc.c). */
    char what[96];
    snprintf(what, sizeof what, "%s of %s[", op,
             shmap_dtype_name(array->dtype));
    for (int i = 0; i < array->rank; i++)
      shmap__cat(what, sizeof what, "%s%lld", i ? "," : "",
                 (long long)array->shape[i]);
    shmap__cat(what, sizeof what, "]");
    rc = shmap__host_agree_call(op, array->mesh, what, NULL, rc);
    if (rc)
      return rc;
    shmap__array_assemble_local(array, data);
    return shmap__array_exchange(array, data);
  } else if (rc == 0)
    shmap__array_assemble(array, data);
  return rc;
}

SHMAP_EXTERN void shmap_array_destroy(shmap_array *array)
{
  if (!array)
    return;
  if (array->mesh) {
    shmap__blocks_release(array->mesh, array->mem);
    free(array->mem);
    free(array->blocks);
    shmap__mesh_release(array->mesh);
  }
  free(array->data);
  free(array);
}

/* ---- sharded arrays: layout and movement ------------------------------- */

void shmap__copy_pieces(const shmap_array *a, const int64_t off[],
                        const int64_t bshape[], const int base[], int self,
                        void *dst, shmap__moved *count)
{
  int rank = a->rank;
  size_t es = shmap_dtype_size(a->dtype);
  if (shmap__numel(rank, bshape) == 0)
    return;
  /* A host array is one block that every device can read. */
  static const shmap__spec whole;
  const bool host = a->data != NULL;
  const shmap_mesh *sm = a->mesh;
  const shmap__spec *from = host ? &whole : &a->spec;
  const int64_t *sb = host ? a->shape : a->bshape;
  unsigned named = host ? 0 : shmap__spec_axes_mask(from);
  int own[SHMAP_MAX_AXES] = {0};
  if (!host && self >= 0)
    shmap__mesh_coords(sm, self, own);
  int64_t lo[SHMAP_MAX_RANK], hi[SHMAP_MAX_RANK], i[SHMAP_MAX_RANK];
  int64_t sstr[SHMAP_MAX_RANK], dstr[SHMAP_MAX_RANK];
  shmap__strides(rank, sb, sstr);
  shmap__strides(rank, bshape, dstr);
  for (int d = 0; d < rank; d++) {
    lo[d] = i[d] = off[d] / sb[d];
    hi[d] = (off[d] + bshape[d] - 1) / sb[d];
  }
  /* Visit every source block the target block overlaps, in row-major
   * order of the source blocks, and copy the overlap once. */
  for (;;) {
    int s = 0;
    if (!host) {
      /* The source block's coordinates on the axes its spec names; the
       * other coordinates from `base`, or all of `self`'s when it holds
       * this block, so a piece it holds is never fetched from a peer. */
      int sc[SHMAP_MAX_AXES];
      memcpy(sc, base, sizeof sc);
      for (int d = 0; d < from->ndims; d++) {
        int64_t rem = i[d];
        for (int k = from->naxes[d] - 1; k >= 0; k--) {
          int ax = from->axes[d][k];
          sc[ax] = (int)(rem % sm->sizes[ax]);
          rem /= sm->sizes[ax];
        }
      }
      bool mine = self >= 0;
      for (int ax = 0; ax < sm->naxes && mine; ax++)
        if ((named & (1u << ax)) && sc[ax] != own[ax])
          mine = false;
      for (int ax = 0; ax < sm->naxes; ax++)
        s += (mine ? own[ax] : sc[ax]) * sm->strides[ax];
    }
    const char *src = host ? a->data : a->blocks[s].data;
    char *out = dst;
    int64_t box[SHMAP_MAX_RANK];
    for (int d = 0; d < rank; d++) {
      int64_t b0 = i[d] * sb[d];
      int64_t start = off[d] > b0 ? off[d] : b0;
      int64_t end = off[d] + bshape[d] < b0 + sb[d] ? off[d] + bshape[d] : b0 + sb[d];
      box[d] = end - start;
      src += (start - b0) * sstr[d] * (int64_t)es;
      out += (start - off[d]) * dstr[d] * (int64_t)es;
    }
    shmap__copy_box(out, dstr, src, sstr, rank, box, es);
    uint64_t bytes = (uint64_t)shmap__numel(rank, box) * es;
    if (host)
      count->host += bytes;
    else if (s == self)
      count->local += bytes;
    else
      count->moved += bytes;
    if (!shmap__index_next(rank, i, lo, hi))
      return;
  }
}

void shmap__gather_block(const shmap_array *a, const shmap_mesh *mesh,
                         const shmap__spec *to, const int64_t bshape[],
                         int dev, void *dst, shmap__moved *count)
{
  int c[SHMAP_MAX_AXES];
  shmap__mesh_coords(mesh, dev, c);
  int64_t off[SHMAP_MAX_RANK];
  shmap__block_offset(mesh, to, a->rank, bshape, c, off);
  /* Pieces this device lacks come from the device that shares its other
   * coordinates. */
  shmap__copy_pieces(a, off, bshape, c, dev, dst, count);
}

void shmap__array_assemble(const shmap_array *a, void *dst)
{
  const shmap_mesh *mesh = a->mesh;
  unsigned mask = shmap__spec_axes_mask(&a->spec);
  size_t es = shmap_dtype_size(a->dtype);
  int64_t gstr[SHMAP_MAX_RANK], bstr[SHMAP_MAX_RANK];
  shmap__strides(a->rank, a->shape, gstr);
  shmap__strides(a->rank, a->bshape, bstr);
  shmap__fork_init();
  bool big = (size_t)a->numel * es >= ((size_t)4 << 20) &&
             shmap__fork_generation() == 0;
  (void)big;
#if defined(_OPENMP) && !defined(__SANITIZE_THREAD__)
#pragma omp parallel for schedule(dynamic) if (big)
#endif
  for (int d = 0; d < mesh->ndev; d++) {
    if (shmap__representative(mesh, mask, d) != d)
      continue;
    int c[SHMAP_MAX_AXES];
    int64_t off[SHMAP_MAX_RANK];
    shmap__mesh_coords(mesh, d, c);
    shmap__block_offset(mesh, &a->spec, a->rank, a->bshape, c, off);
    char *out = dst;
    for (int i = 0; i < a->rank; i++)
      out += off[i] * gstr[i] * (int64_t)es;
    shmap__copy_box(out, gstr, a->blocks[d].data, bstr, a->rank, a->bshape, es);
  }
}

SHMAP_EXTERN shmap_mesh *shmap_array_mesh(const shmap_array *array)
{
  if (!array) {
    shmap__err(SHMAP_EINVAL, "shmap_array_mesh: array is NULL");
    return NULL;
  }
  return array->mesh;
}

SHMAP_EXTERN int shmap_array_spec(const shmap_array *array, char *buf,
                                  size_t len)
{
  if (!array || (!buf && len))
    return shmap__err(SHMAP_EINVAL, "shmap_array_spec: NULL argument");
  if (!array->mesh)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_array_spec: a host array has no sharding");
  char tmp[512];
  shmap__spec_format(array->mesh, &array->spec, tmp, sizeof tmp);
  if (len)
    snprintf(buf, len, "%s", tmp);
  return (int)strlen(tmp);
}

/* Device `dev` of `mesh` runs in another process, which alone keeps its
 * blocks: say which, and which devices this process holds. */
static int not_here(const shmap_mesh *mesh, int dev)
{
  const shmap__place *pl = mesh->place;
  char mine[160] = "";
  for (int i = 0; i < pl->nlocal;) {
    int j = i;
    while (j + 1 < pl->nlocal && pl->local[j + 1] == pl->local[j] + 1)
      j++;
    if (strlen(mine) > sizeof mine - 24) {
      shmap__cat(mine, sizeof mine, ", ...");
      break;
    }
    if (j == i)
      shmap__cat(mine, sizeof mine, "%s%d", i ? ", " : "", pl->local[i]);
    else
      shmap__cat(mine, sizeof mine, "%s%d-%d", i ? ", " : "", pl->local[i],
                 pl->local[j]);
    i = j + 1;
  }
  int c[SHMAP_MAX_AXES], r = pl->owner[dev];
  shmap__mesh_coords(mesh, dev, c);
  char coords[128] = "";
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(coords, sizeof coords, "%s%s=%d", a ? ", " : "",
               mesh->names[a], c[a]);
  const shmap__proc *me = shmap__proc_self();
  return shmap__err(SHMAP_EINVAL,
                    "shmap_array_block: device %d (%s) runs in process %d "
                    "(host %s), which alone keeps its block; this process "
                    "(process %d, host %s) holds %s%s: read the blocks of its "
                    "own devices, or the whole array with shmap_array_to_host "
                    "(see shmap-mpi(7))",
                    dev, coords, r, shmap__proc_host(r),
                    me->rank, me->host,
                    pl->nlocal > 1    ? "devices "
                    : pl->nlocal == 1 ? "device "
                                      : "no device of this mesh",
                    mine);
}

SHMAP_EXTERN int shmap_array_block(const shmap_array *array, int device,
                                   shmap_block *block, int64_t offset[])
{
  if (!array || !block)
    return shmap__err(SHMAP_EINVAL, "shmap_array_block: NULL argument");
  if (!array->mesh)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_array_block: a host array has no device blocks");
  if (device < 0 || device >= array->mesh->ndev)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_array_block: device %d is out of range [0, %d)",
                      device, array->mesh->ndev);
  if (!shmap__dev_local(array->mesh, device))
    return not_here(array->mesh, device);
  *block = array->blocks[device];
  if (offset) {
    int c[SHMAP_MAX_AXES];
    shmap__mesh_coords(array->mesh, device, c);
    shmap__block_offset(array->mesh, &array->spec, array->rank, array->bshape,
                        c, offset);
  }
  return 0;
}

SHMAP_EXTERN shmap_dtype shmap_array_dtype(const shmap_array *array)
{
  if (!array) {
    shmap__err(SHMAP_EINVAL, "shmap_array_dtype: array is NULL");
    return (shmap_dtype)-1;
  }
  return array->dtype;
}

SHMAP_EXTERN int shmap_array_rank(const shmap_array *array)
{
  return array ? array->rank
               : shmap__err(SHMAP_EINVAL, "shmap_array_rank: array is NULL");
}

SHMAP_EXTERN const int64_t *shmap_array_shape(const shmap_array *array)
{
  if (!array) {
    shmap__err(SHMAP_EINVAL, "shmap_array_shape: array is NULL");
    return NULL;
  }
  return array->shape;
}

SHMAP_EXTERN int64_t shmap_array_numel(const shmap_array *array)
{
  return array ? array->numel
               : shmap__err(SHMAP_EINVAL, "shmap_array_numel: array is NULL");
}
