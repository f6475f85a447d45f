/* array.c - global arrays in host memory: import, export, queries. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SHMAP_EXTERN size_t shmap_dtype_size(shmap_dtype dtype)
{
  switch (dtype) {
  case SHMAP_F32: case SHMAP_I32: return 4;
  case SHMAP_F64: case SHMAP_I64: return 8;
  default: return 0;
  }
}

SHMAP_EXTERN const char *shmap_dtype_name(shmap_dtype dtype)
{
  switch (dtype) {
  case SHMAP_F32: return "f32";
  case SHMAP_F64: return "f64";
  case SHMAP_I32: return "i32";
  case SHMAP_I64: return "i64";
  default: return "invalid";
  }
}

void *shmap__alloc(size_t n, bool zero)
{
  size_t rounded = (n + 63) & ~(size_t)63;
  if (rounded < n)
    return NULL;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (p && zero)
    memset(p, 0, rounded);
  return p;
}

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
  int64_t bytes = (int64_t)shmap_dtype_size(dtype);
  for (int d = 0; d < rank; d++) {
    if (shape[d] < 0)
      return shmap__err(SHMAP_ESHAPE, "%s: dimension %d has negative size %lld",
                        what, d, (long long)shape[d]);
    if (shape[d] > 0 && bytes > (INT64_MAX / 2) / shape[d])
      return shmap__err(SHMAP_ESHAPE, "%s: shape is too large", what);
    bytes *= shape[d] ? shape[d] : 1;
  }
  return 0;
}

int shmap__array_new(shmap_array **out, shmap_dtype dtype, int rank,
                     const int64_t shape[], bool zero)
{
  shmap_array *a = calloc(1, sizeof *a);
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
    char s[128];
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
static void bulk_copy(void *dst, const void *src, size_t bytes)
{
#if defined(_OPENMP) && !defined(__SANITIZE_THREAD__)
  const size_t piece = (size_t)1 << 20;
  if (bytes >= 4 * piece) {
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
  bulk_copy(a->data, data, (size_t)numel * shmap_dtype_size(dtype));
  *array = a;
  return 0;
}

SHMAP_EXTERN int shmap_array_to_host(const shmap_array *array, void *data)
{
  if (!array || (!data && array->numel > 0))
    return shmap__err(SHMAP_EINVAL, "shmap_array_to_host: NULL argument");
  bulk_copy(data, array->data, (size_t)array->numel * shmap_dtype_size(array->dtype));
  return 0;
}

SHMAP_EXTERN void shmap_array_destroy(shmap_array *array)
{
  if (!array)
    return;
  free(array->data);
  free(array);
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

SHMAP_EXTERN int64_t shmap_block_numel(const shmap_block *block)
{
  if (!block || block->rank < 0 || block->rank > SHMAP_MAX_RANK)
    return shmap__err(SHMAP_EINVAL, "shmap_block_numel: invalid block");
  return shmap__numel(block->rank, block->shape);
}

SHMAP_EXTERN size_t shmap_block_nbytes(const shmap_block *block)
{
  int64_t n = shmap_block_numel(block);
  return n < 0 ? 0 : (size_t)n * shmap_dtype_size(block->dtype);
}
