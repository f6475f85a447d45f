/* SPDX-License-Identifier: MIT */
/* transfer.c - moving a sharded array to a spec on another mesh.
 *
 * The destination mesh runs a map in which every device builds its own
 * block: it visits the source blocks its block overlaps and copies each
 * overlap once, straight out of a source device that holds it.  Of the
 * devices holding equal copies of a source block it takes the one that is
 * the same physical device (same root mesh, same root device number) when
 * there is one, else the copy at coordinate 0 of the axes the source spec
 * leaves out.  Source arrays never change, so the source mesh may run other
 * maps meanwhile. */
#include "proc/proc.h"
#include "map/map.h"
#include "sched/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct xfer {
  const shmap_array *src;
  shmap__spec spec;              /* target spec on the destination mesh */
  int64_t bshape[SHMAP_MAX_RANK];
  _Atomic uint64_t bytes;        /* bytes copied from the source mesh */
} xfer;

/* The source device that is physically device `dev` of `mesh`, or -1. */
static int same_device(const shmap_mesh *smesh, const shmap_mesh *mesh, int dev)
{
  if (shmap__mesh_root(smesh) != shmap__mesh_root(mesh))
    return -1;
  int r = shmap__mesh_rootdev(mesh, dev);
  for (int s = 0; s < smesh->ndev; s++)
    if (shmap__mesh_rootdev(smesh, s) == r)
      return s;
  return -1;
}

static uint64_t gather_from(const xfer *x, const shmap_mesh *mesh, int dev,
                            void *dst)
{
  int c[SHMAP_MAX_AXES], zero[SHMAP_MAX_AXES] = {0};
  shmap__mesh_coords(mesh, dev, c);
  int64_t off[SHMAP_MAX_RANK];
  shmap__block_offset(mesh, &x->spec, x->src->rank, x->bshape, c, off);
  shmap__moved n = {0, 0, 0};
  shmap__copy_pieces(x->src, off, x->bshape, zero,
                     same_device(x->src->mesh, mesh, dev), dst, &n);
  return n.local + n.moved;
}

static int xfer_body(shmap_ctx *ctx, void *arg)
{
  xfer *x = arg;
  shmap_block *b = shmap_out(ctx, 0, x->src->dtype, x->src->rank, x->bshape);
  if (!b)
    return ctx->err;
  uint64_t n = gather_from(x, ctx->rt->mesh, ctx->dev, b->data);
  atomic_fetch_add(&x->bytes, n);
  return 0;
}

SHMAP_EXTERN int shmap_array_transfer(shmap_array **out,
                                      const shmap_array *array,
                                      shmap_mesh *mesh, const char *spec)
{
  const char *op = "shmap_array_transfer";
  if (out)
    *out = NULL;
  int rc = 0;
  if (!out || !array || !mesh || !spec)
    rc = shmap__err(SHMAP_EINVAL, "%s: NULL argument", op);
  if (!array || !mesh)
    return rc;
  if (!array->mesh)
    return rc ? rc
              : shmap__err(SHMAP_EINVAL,
                           "%s: a host array has no mesh; use "
                           "shmap_array_from_host_sharded to place it", op);
  shmap_ctx *body = shmap__current();
  if (body)
    return rc ? rc
              : shmap__dev_fail(body, op, SHMAP_ESTATE,
                                "called from inside a body; a transfer runs "
                                "a map on the destination mesh, so call it "
                                "between maps");
  if (rc == 0 && array->mesh == mesh)
    return shmap_array_reshard(out, array, spec);
  xfer *x = shmap__calloc(1, sizeof *x);
  if (rc == 0 && !x)
    rc = shmap__err(SHMAP_ENOMEM, "%s: out of memory", op);
  if (rc == 0) {
    x->src = array;
    if ((rc = shmap__spec_resolve(mesh, spec, &x->spec)))
      rc = shmap__err_prefix(rc, "%s", op);
    else if ((rc = shmap__spec_fit(mesh, "spec", spec, &x->spec, array->rank,
                                   array->shape)))
      rc = shmap__err_prefix(rc, "%s", op);
  }
  /* Under MPI every process agrees on the transfer and its target layout,
   * with its own verdict on the arguments, before pieces held only by
   * other processes come over (stage.c). */
  if (shmap__stage_needed(array, mesh)) {
    char args[800] = "", t[400];
    if (rc == 0) {
      shmap__shape_format(array->dtype, array->rank, array->shape, t,
                          sizeof t);
      shmap__cat(args, sizeof args, "%s from mesh %d to ", t,
                 array->mesh->serial);
      shmap__spec_format(mesh, &x->spec, t, sizeof t);
      shmap__cat(args, sizeof args, "%s", t);
    }
    rc = shmap__host_agree_call(op, mesh, op, args, rc);
  }
  if (rc) {
    free(x);
    return rc;
  }
  shmap__block_shape(mesh, &x->spec, array->rank, array->shape, x->bshape);
  atomic_init(&x->bytes, 0);
  shmap_array *view = NULL;
  if (shmap__stage_needed(array, mesh) &&
      (rc = shmap__stage(array, mesh, &x->spec, x->bshape, op, &view))) {
    free(x);
    return rc;
  }
  if (view)
    x->src = view;
  /* Copies of one target block come from the same source values. */
  rc = shmap__map(mesh, xfer_body, x, 0, NULL, NULL, 1, out, &spec,
                  SHMAP__TRUSTED_REP);
  shmap__stage_free(view);
  if (rc) {
    free(x);
    return shmap__err_prefix(rc, "%s", op);
  }
  /* The map counted itself; the blocks it built are the transfer's: one
   * per device of this process (the statistics are per process). */
  shmap__runtime_lock(mesh->rt);
  mesh->stats.blocks_built +=
      (uint64_t)(mesh->place ? mesh->place->nlocal : mesh->ndev);
  mesh->stats.bytes_transferred += atomic_load(&x->bytes);
  shmap__runtime_unlock(mesh->rt);
  free(x);
  return 0;
}
