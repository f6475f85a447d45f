/* SPDX-License-Identifier: MIT */
/* layout.c - the pure index math of splitting, tiling and assembling:
 * block shapes and offsets, strided box copies (axis groups and ranks are
 * group.c's); shapes as text and their checks.  No threads and no
 * allocation here. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Without a division: a 64-bit one takes tens of cycles, and every
 * collective checks its shapes with this. */
bool shmap__mul_size(int64_t a, int64_t b, int64_t *out)
{
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ||
      r > SHMAP__SIZE_MAX)
    return false;
  *out = r;
  return true;
}

int shmap__shape_size(const char *what, int rank, const int64_t shape[],
                      size_t esize, int64_t *numel, int64_t *bytes)
{
  /* prod: the bytes (elements when esize is 0); n: the elements, which
   * are never more than prod (no division by esize at the end). */
  int64_t prod = (int64_t)(esize ? esize : 1), n = 1;
  bool zero = false;
  for (int d = 0; d < rank; d++) {
    if (shape[d] < 0)
      return shmap__err(SHMAP_ESHAPE, "%s: dimension %d has negative size %lld",
                        what, d, (long long)shape[d]);
    if (shape[d] == 0)
      zero = true;
    else if (!shmap__mul_size(prod, shape[d], &prod))
      return shmap__err(SHMAP_ESHAPE,
                        "%s: the shape is too large: at dimension %d (size "
                        "%lld) its elements would take more than 2^62 bytes",
                        what, d, (long long)shape[d]);
    else
      n *= shape[d];
  }
  if (numel)
    *numel = zero ? 0 : n;
  if (bytes)
    *bytes = zero ? 0 : esize ? prod : 0;
  return 0;
}

int64_t shmap__numel(int rank, const int64_t shape[])
{
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  return n;
}

void shmap__strides(int rank, const int64_t shape[], int64_t strides[])
{
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d];
  }
}

int64_t shmap__entry_count(const shmap_mesh *mesh, const shmap__spec *spec,
                           int d)
{
  int64_t count = 1;
  if (d < spec->ndims)
    for (int k = 0; k < spec->naxes[d]; k++)
      count *= mesh->sizes[spec->axes[d][k]];
  return count;
}

int64_t shmap__entry_index(const shmap_mesh *mesh, const shmap__spec *spec,
                           int d, const int coords[])
{
  int64_t idx = 0;
  if (d < spec->ndims)
    for (int k = 0; k < spec->naxes[d]; k++) {
      int a = spec->axes[d][k];
      idx = idx * mesh->sizes[a] + coords[a];
    }
  return idx;
}

void shmap__block_shape(const shmap_mesh *mesh, const shmap__spec *spec,
                        int rank, const int64_t gshape[], int64_t bshape[])
{
  for (int d = 0; d < rank; d++)
    bshape[d] = gshape[d] / shmap__entry_count(mesh, spec, d);
}

int shmap__global_shape(const char *what, const shmap_mesh *mesh,
                        const shmap__spec *spec, int rank,
                        const int64_t bshape[], int64_t gshape[])
{
  for (int d = 0; d < rank; d++) {
    int64_t count = shmap__entry_count(mesh, spec, d);
    if (!shmap__mul_size(bshape[d], count, &gshape[d]))
      return shmap__err(SHMAP_ESHAPE,
                        "%s: dimension %d of the global shape would be %lld "
                        "x %lld, more than 2^62",
                        what, d, (long long)bshape[d], (long long)count);
  }
  return 0;
}

void shmap__block_offset(const shmap_mesh *mesh, const shmap__spec *spec,
                         int rank, const int64_t bshape[], const int coords[],
                         int64_t off[])
{
  for (int d = 0; d < rank; d++)
    off[d] = shmap__entry_index(mesh, spec, d, coords) * bshape[d];
}

unsigned shmap__spec_axes_mask(const shmap__spec *spec)
{
  unsigned mask = 0;
  for (int d = 0; d < spec->ndims; d++)
    for (int k = 0; k < spec->naxes[d]; k++)
      mask |= 1u << spec->axes[d][k];
  return mask;
}

void shmap__copy_box(void *dst, const int64_t dst_strides[], const void *src,
                     const int64_t src_strides[], int rank,
                     const int64_t shape[], size_t esize)
{
  if (shmap__numel(rank, shape) == 0)
    return;
  /* Merge trailing dimensions that are contiguous in both views, so the
   * innermost loop is one memcpy of the longest possible run. */
  int64_t run = 1;
  int inner = rank;
  while (inner > 0 && dst_strides[inner - 1] == run &&
         src_strides[inner - 1] == run) {
    run *= shape[inner - 1];
    inner--;
  }
  size_t run_bytes = (size_t)run * esize;
  char *d = dst;
  const char *s = src;
  if (inner == 0) {
    memcpy(d, s, run_bytes);
    return;
  }
  /* The last unmerged dimension is a strided loop of runs; the ones before
   * it advance like an odometer. */
  int last = inner - 1;
  int64_t n = shape[last];
  int64_t ds = dst_strides[last] * (int64_t)esize;
  int64_t ss = src_strides[last] * (int64_t)esize;
  int64_t idx[SHMAP_MAX_RANK] = {0};
  for (;;) {
    for (int64_t i = 0; i < n; i++)
      memcpy(d + i * ds, s + i * ss, run_bytes);
    int k = last - 1;
    for (; k >= 0; k--) {
      idx[k]++;
      d += dst_strides[k] * (int64_t)esize;
      s += src_strides[k] * (int64_t)esize;
      if (idx[k] < shape[k])
        break;
      d -= dst_strides[k] * shape[k] * (int64_t)esize;
      s -= src_strides[k] * shape[k] * (int64_t)esize;
      idx[k] = 0;
    }
    if (k < 0)
      return;
  }
}

/* ---- shapes and blocks --------------------------------------------------- */

void shmap__shape_format(shmap_dtype dtype, int rank, const int64_t shape[],
                         char *buf, size_t n)
{
  snprintf(buf, n, "%s[", shmap_dtype_name(dtype));
  for (int d = 0; d < rank; d++)
    shmap__cat(buf, n, "%s%lld", d ? "," : "", (long long)shape[d]);
  shmap__cat(buf, n, "]");
}

int shmap__check_shape(const char *what, shmap_dtype dtype, int rank,
                       const int64_t shape[])
{
  if (shmap_dtype_size(dtype) == 0)
    return shmap__err(SHMAP_EDTYPE, "%s: invalid dtype %d", what, (int)dtype);
  if (rank < 0 || rank > SHMAP_MAX_RANK)
    return shmap__err(SHMAP_ESHAPE, "%s: rank %d is out of range [0, %d]", what,
                      rank, SHMAP_MAX_RANK);
  if (rank > 0 && !shape)
    return shmap__err(SHMAP_EINVAL, "%s: shape is NULL", what);
  return shmap__shape_size(what, rank, shape, shmap_dtype_size(dtype), NULL,
                           NULL);
}

SHMAP_EXTERN int64_t shmap_block_numel(const shmap_block *block)
{
  if (!block || block->rank < 0 || block->rank > SHMAP_MAX_RANK)
    return shmap__err(SHMAP_EINVAL, "shmap_block_numel: invalid block");
  int64_t n;
  int rc = shmap__shape_size("shmap_block_numel", block->rank, block->shape,
                             1, &n, NULL);
  return rc ? rc : n;
}

SHMAP_EXTERN size_t shmap_block_nbytes(const shmap_block *block)
{
  if (!block || block->rank < 0 || block->rank > SHMAP_MAX_RANK) {
    shmap__err(SHMAP_EINVAL, "shmap_block_nbytes: invalid block");
    return 0;
  }
  if (shmap_dtype_size(block->dtype) == 0) {
    shmap__err(SHMAP_EDTYPE, "shmap_block_nbytes: invalid dtype %d",
               (int)block->dtype);
    return 0;
  }
  int64_t bytes;
  if (shmap__shape_size("shmap_block_nbytes", block->rank, block->shape,
                        shmap_dtype_size(block->dtype), NULL, &bytes))
    return 0;
  return (size_t)bytes;
}

bool shmap__index_next(int rank, int64_t i[], const int64_t lo[],
                       const int64_t hi[])
{
  for (int d = rank - 1; d >= 0; d--) {
    if (++i[d] <= hi[d])
      return true;
    i[d] = lo[d];
  }
  return false;
}
