/* SPDX-License-Identifier: MIT */
/* ctx.c - a device's context during a map: whose it is, what it is called
 * in messages, and the errors the device reports (device.h). */
#include "device/device.h"

#include <stdio.h>

/* ---- errors on a device -------------------------------------------------- */

int shmap__dev_fail(shmap_ctx *ctx, const char *op, int code, const char *fmt,
                    ...)
{
  char me[SHMAP__CTXNAME_MAX], text[SHMAP__MSG_MAX];
  shmap__ctx_devname(ctx, me, sizeof me);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  shmap__err(code, "%s on %s: %s", op, me, text);
  if (!ctx->err)
    ctx->err = code;
  return shmap__fail(ctx->rt, ctx->dev, code, shmap__errbuf());
}

void shmap__ctx_devname(const shmap_ctx *ctx, char *buf, size_t n)
{
  const shmap_mesh *mesh = ctx->rt->mesh;
  shmap__mesh_devname(mesh, ctx->dev, buf, n);
  if (!ctx->depth)
    return;
  char axes[SHMAP__AXES_MAX];
  shmap__mask_format(mesh, ctx->manual, axes, sizeof axes);
  shmap__cat(buf, n, " in a map nested over %s", axes);
  for (const shmap_ctx *o = ctx->outer; o; o = o->outer) {
    shmap__mask_format(mesh, o->manual, axes, sizeof axes);
    shmap__cat(buf, n, " inside a map over %s", axes);
  }
}

int shmap__canceled(shmap_ctx *ctx, const char *op)
{
  shmap__runtime *rt = ctx->rt;
  char me[SHMAP__DEVNAME_MAX];
  shmap__mesh_devname(rt->mesh, ctx->dev, me, sizeof me);
  int code = rt->fail_code == SHMAP_EMISMATCH ? SHMAP_EMISMATCH
                                               : SHMAP_ECANCELED;
  if (!ctx->err)
    ctx->err = code;
  return shmap__err(code, "%s on %s: canceled because another device failed: %s",
                    op, me, rt->fail_msg);
}

int shmap__body_returned(shmap_ctx *ctx, int rc)
{
  if (ctx->err)
    return ctx->err;
  char me[SHMAP__CTXNAME_MAX], msg[SHMAP__CTXNAME_MAX + 40];
  shmap__ctx_devname(ctx, me, sizeof me);
  /* No library call failed on this device, so the number is the body's
   * own (-1 is not SHMAP_EINVAL here). */
  snprintf(msg, sizeof msg, "%s: body returned %d", me, rc);
  ctx->err = SHMAP_EBODY;
  int code = shmap__fail(ctx->rt, ctx->dev, SHMAP_EBODY, msg);
  shmap__err_set(msg);
  return code;
}

/* ---- whose context ------------------------------------------------------- */

/*
 * A body may use the context of the map it is nested in (for collectives
 * over the outer axes) as well as its own.  Collective calls are numbered
 * per device whichever context makes them, so the numbers of the chain of
 * contexts are brought level before each use: the largest is the device's
 * count, and every call numbers itself from the context it is made with.
 */
/* A library call from a shmap_preduce combine function: the device's
 * peers wait for its fold, so the call fails at once. */
static int in_combine(shmap_ctx *cur, const char *op)
{
  struct shmap__dev_plan *dp = &cur->rt->devs[cur->dev].plan;
  const char *name = dp->combine;
  dp->combine_called = true;
  return shmap__dev_fail(cur, op, SHMAP_ESTATE,
                         "called from the combine function of the "
                         "shmap_preduce operation '%.100s', which may not "
                         "call the library",
                         name);
}

SHMAP__TLS_FAST int shmap__combining;

int shmap__ctx_check(shmap_ctx *ctx, const char *op)
{
  shmap_ctx *cur = shmap__current();
  if (shmap__combining && cur && cur->rt->devs[cur->dev].plan.combine)
    return in_combine(cur, op);
  if (!ctx)
    return shmap__err(SHMAP_EINVAL, "%s: ctx is NULL", op);
  if (ctx == cur && !cur->outer)
    return 0;
  bool found = false;
  uint32_t seq = 0;
  for (shmap_ctx *c = cur; c; c = c->outer) {
    found = found || c == ctx;
    if (c->seq > seq)
      seq = c->seq;
  }
  if (!found)
    return shmap__err(SHMAP_ESTATE,
                      "%s: ctx is not the context of a body running on this "
                      "thread (call it from inside the body it was given to)",
                      op);
  ctx->seq = seq;
  return 0;
}

int shmap__ctx_axes(shmap_ctx *ctx, const char *op, const char *text,
                    const int axes[], int naxes)
{
  if (ctx->manual == shmap__mesh_all(ctx->rt->mesh))
    return 0;
  int rc = shmap__axes_manual(ctx->rt->mesh, ctx->manual, op, text, axes,
                              naxes);
  return rc ? shmap__dev_fail(ctx, op, rc, "%s", shmap__errbuf()) : 0;
}
