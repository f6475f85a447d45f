/* SPDX-License-Identifier: MIT */
/* blocks.c - a body frees a block it allocated.  The block may still be
 * read or written by a collective the device started and has not waited
 * for (coll/async.c), which finishes first: so this public function of the
 * body lives above the collectives rather than with the rest of the body's
 * side (device/body.c). */
#include "map/map.h"

#include "coll/async.h"

SHMAP_EXTERN int shmap_block_free(shmap_ctx *ctx, shmap_block *block)
{
  int rc = shmap__ctx_check(ctx, "shmap_block_free");
  if (rc)
    return rc;
  if (!block)
    return 0;
  shmap__chunk *c = shmap__arena_find(ctx, block);
  if (!c)
    return shmap__dev_fail(ctx, "shmap_block_free", SHMAP_EINVAL,
                           "the block was not allocated by this device "
                           "(shmap_block_alloc or a collective)");
  if (c->kind != SHMAP__CHUNK_SCRATCH)
    return shmap__dev_fail(ctx, "shmap_block_free", SHMAP_EINVAL,
                           "the block is an %s block, which the map owns",
                           c->kind == SHMAP__CHUNK_IN ? "input" : "output");
  if ((rc = shmap__async_block_free(ctx, block, c->block.data, c->cap)))
    return rc;
  shmap__arena_free(ctx, c);
  return 0;
}
