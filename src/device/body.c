/* SPDX-License-Identifier: MIT */
/* body.c - what a body asks of its own device: its number, mesh, inputs,
 * outputs and scratch blocks, and its own failure (shmap.h).  Freeing a
 * block is in map/blocks.c: requests still reading it finish first. */
#include "device/device.h"

#include <stdio.h>
#include <string.h>

SHMAP_EXTERN int shmap_ctx_device(const shmap_ctx *ctx)
{
  int rc = shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_device");
  return rc ? rc : ctx->dev;
}

SHMAP_EXTERN const shmap_mesh *shmap_ctx_mesh(const shmap_ctx *ctx)
{
  if (shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_mesh"))
    return NULL;
  return ctx->rt->mesh;
}

SHMAP_EXTERN shmap_ctx *shmap_ctx_outer(const shmap_ctx *ctx)
{
  if (shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_outer"))
    return NULL;
  return ctx->outer;
}

SHMAP_EXTERN int shmap_ctx_manual_axes(const shmap_ctx *ctx, char *buf,
                                       size_t len)
{
  int rc = shmap__ctx_check((shmap_ctx *)ctx, "shmap_ctx_manual_axes");
  if (rc)
    return rc;
  if (!buf && len)
    return shmap__err(SHMAP_EINVAL, "shmap_ctx_manual_axes: buf is NULL");
  const shmap_mesh *mesh = ctx->rt->mesh;
  int axes[SHMAP_MAX_AXES], n = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (ctx->manual & (1u << a))
      axes[n++] = a;
  char tmp[SHMAP__AXES_MAX];
  shmap__axes_format(mesh, axes, n, tmp, sizeof tmp);
  if (len)
    snprintf(buf, len, "%s", tmp);
  return (int)strlen(tmp);
}

SHMAP_EXTERN const shmap_block *shmap_in(shmap_ctx *ctx, int k)
{
  if (shmap__ctx_check(ctx, "shmap_in"))
    return NULL;
  if (k < 0 || k >= ctx->nin) {
    shmap__dev_fail(ctx, "shmap_in", SHMAP_EINVAL,
                    "input %d is out of range: the map has %d input%s", k,
                    ctx->nin, ctx->nin == 1 ? "" : "s");
    return NULL;
  }
  return ctx->in[k];
}

static shmap_block *new_block(shmap_ctx *ctx, const char *op, shmap_dtype dtype,
                              int rank, const int64_t shape[], int kind)
{
  int rc = shmap__check_shape(op, dtype, rank, shape);
  if (rc) {
    shmap__dev_fail(ctx, op, rc, "%s", shmap__errbuf());
    return NULL;
  }
  shmap__chunk *c = shmap__arena_alloc(ctx, dtype, rank, shape, kind, true);
  if (!c) {
    shmap__dev_fail(ctx, op, SHMAP_ENOMEM, "%s", shmap__errbuf());
    return NULL;
  }
  return &c->block;
}

SHMAP_EXTERN shmap_block *shmap_out(shmap_ctx *ctx, int k, shmap_dtype dtype,
                                    int rank, const int64_t shape[])
{
  if (shmap__out_check(ctx, "shmap_out", k))
    return NULL;
  shmap_block *b = new_block(ctx, "shmap_out", dtype, rank, shape,
                             SHMAP__CHUNK_OUT);
  if (b)
    ctx->out[k] = b;
  return b;
}

SHMAP_EXTERN shmap_block *shmap_out_copy(shmap_ctx *ctx, int k,
                                         const shmap_block *src)
{
  if (shmap__out_check(ctx, "shmap_out_copy", k) ||
      shmap__block_check(ctx, "shmap_out_copy", "source", src))
    return NULL;
  shmap_block *b = shmap_out(ctx, k, src->dtype, src->rank, src->shape);
  if (b)
    memcpy(b->data, src->data, shmap_block_nbytes(src));
  return b;
}

SHMAP_EXTERN int shmap_out_set(shmap_ctx *ctx, int k, shmap_block *block)
{
  int rc = shmap__out_check(ctx, "shmap_out_set", k);
  if (rc)
    return rc;
  if ((rc = shmap__block_check(ctx, "shmap_out_set", "the", block)))
    return rc;
  shmap__chunk *c = shmap__arena_find(ctx, block);
  if (c && c->kind == SHMAP__CHUNK_SCRATCH) {
    c->kind = SHMAP__CHUNK_OUT; /* taken over, no copy */
    ctx->out[k] = &c->block;
    return 0;
  }
  return shmap_out_copy(ctx, k, block) ? 0 : ctx->err;
}

SHMAP_EXTERN shmap_block *shmap_block_alloc(shmap_ctx *ctx, shmap_dtype dtype,
                                            int rank, const int64_t shape[])
{
  if (shmap__ctx_check(ctx, "shmap_block_alloc"))
    return NULL;
  return new_block(ctx, "shmap_block_alloc", dtype, rank, shape,
                   SHMAP__CHUNK_SCRATCH);
}

SHMAP_EXTERN int shmap_fail(shmap_ctx *ctx, const char *fmt, ...)
{
  int rc = shmap__ctx_check(ctx, "shmap_fail");
  if (rc)
    return rc;
  char me[SHMAP__CTXNAME_MAX], text[SHMAP__MSG_MAX];
  shmap__ctx_devname(ctx, me, sizeof me);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  shmap__err(SHMAP_EBODY, "%s failed: %s", me, text);
  if (!ctx->err)
    ctx->err = SHMAP_EBODY;
  return shmap__fail(ctx->rt, ctx->dev, SHMAP_EBODY, shmap__errbuf());
}
