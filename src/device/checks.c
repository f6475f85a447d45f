/* SPDX-License-Identifier: MIT */
/* checks.c - the checks of a block or output argument a body passes to the
 * library (device.h). */
#include "device/device.h"

#include <stdio.h>

int shmap__out_check(shmap_ctx *ctx, const char *op, int k)
{
  int rc = shmap__ctx_check(ctx, op);
  if (rc)
    return rc;
  if (k < 0 || k >= ctx->nout)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL,
                           "output %d is out of range: the map has %d output%s",
                           k, ctx->nout, ctx->nout == 1 ? "" : "s");
  if (ctx->out[k])
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL,
                           "output %d is already declared", k);
  return 0;
}

int shmap__block_check(shmap_ctx *ctx, const char *op, const char *name,
                       const shmap_block *b)
{
  if (!b)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL, "%s block is NULL", name);
  if (shmap_dtype_size(b->dtype) == 0)
    return shmap__dev_fail(ctx, op, SHMAP_EDTYPE, "%s block has invalid dtype %d",
                           name, (int)b->dtype);
  if (b->rank < 0 || b->rank > SHMAP_MAX_RANK)
    return shmap__dev_fail(ctx, op, SHMAP_ESHAPE,
                           "%s block has rank %d, outside [0, %d]", name,
                           b->rank, SHMAP_MAX_RANK);
  char what[64];
  snprintf(what, sizeof what, "%s block", name);
  if (shmap__shape_size(what, b->rank, b->shape, shmap_dtype_size(b->dtype),
                        NULL, NULL))
    return shmap__dev_fail(ctx, op, SHMAP_ESHAPE, "%s", shmap__errbuf());
  if (!b->data && shmap__numel(b->rank, b->shape) > 0)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL, "%s block has no data", name);
  return 0;
}

bool shmap__block_valid(const shmap_block *b)
{
  if (!b)
    return false;
  /* The size check without its message (cheap: no formatting), the
   * dtype's size looked up once: every collective call checks. */
  int64_t prod = (int64_t)shmap_dtype_size(b->dtype);
  if (prod == 0 || b->rank < 0 || b->rank > SHMAP_MAX_RANK)
    return false;
  bool zero = false;
  for (int d = 0; d < b->rank; d++) {
    if (b->shape[d] < 0)
      return false;
    if (b->shape[d] == 0)
      zero = true;
    else if (!shmap__mul_size(prod, b->shape[d], &prod))
      return false;
  }
  return b->data || zero;
}
