/* SPDX-License-Identifier: MIT */
/* shard.c - sharded arrays made on the devices: import into a sharding,
 * zeros, fill, per-device initialisers, and resharding.  Each runs as a
 * map, so every device builds its own block on its own thread. */
#include "map/map.h"
#include "proc/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Validate a target layout; fills the block shape. */
static int target(const char *op, shmap_mesh *mesh, const char *spec,
                  shmap_dtype dtype, int rank, const int64_t shape[],
                  int64_t bshape[], shmap__spec *s)
{
  if (!mesh || !spec)
    return shmap__err(SHMAP_EINVAL, "%s: %s is NULL", op, mesh ? "spec" : "mesh");
  int rc = shmap__check_shape(op, dtype, rank, shape);
  if (rc)
    return rc;
  if ((rc = shmap__spec_resolve(mesh, spec, s)))
    return shmap__err_prefix(rc, "%s", op);
  if ((rc = shmap__spec_fit(mesh, "spec", spec, s, rank, shape)))
    return shmap__err_prefix(rc, "%s", op);
  shmap__block_shape(mesh, s, rank, shape, bshape);
  return 0;
}

/* Under MPI: every process agrees on the call `op` on `mesh` (not NULL)
 * and on its target layout, with this process's verdict rc (proc.c). */
static int agree(const char *op, const shmap_mesh *mesh, int rc,
                 shmap_dtype dtype, int rank, const int64_t shape[],
                 const shmap__spec *s)
{
  char args[800] = "", t[400];
  if (rc == 0) {
    shmap__shape_format(dtype, rank, shape, t, sizeof t);
    shmap__cat(args, sizeof args, "%s ", t);
    shmap__spec_format(mesh, s, t, sizeof t);
    shmap__cat(args, sizeof args, "%s", t);
  }
  return shmap__host_agree_entry(op, mesh, op, args, rc);
}

/* The input block becomes the output: a block built for this map is taken
 * over, a block shared with the source array is copied. */
static int adopt_body(shmap_ctx *ctx, void *arg)
{
  ctx->job_name = arg; /* the public function's name, for the trace */
  shmap_block *in = ctx->in[0];
  shmap__chunk *c = shmap__arena_find(ctx, in);
  if (c) {
    c->kind = SHMAP__CHUNK_OUT;
    ctx->out[0] = in;
    return 0;
  }
  return shmap_out_copy(ctx, 0, in) ? 0 : ctx->err;
}

static int relayout(const char *op, shmap_array **out, shmap_mesh *mesh,
                    shmap_array *src, const char *spec)
{
  int rc = shmap__map(mesh, adopt_body, (void *)op, 1, &src, &spec, 1, out, &spec,
                      SHMAP__TRUSTED_REP);
  return rc ? shmap__err_prefix(rc, "%s", op) : 0;
}

SHMAP_EXTERN int shmap_array_from_host_sharded(shmap_array **array,
                                               shmap_mesh *mesh,
                                               const char *spec,
                                               shmap_dtype dtype, int rank,
                                               const int64_t shape[],
                                               const void *data)
{
  const char *op = "shmap_array_from_host_sharded";
  if (!array)
    return shmap__err(SHMAP_EINVAL, "%s: array is NULL", op);
  *array = NULL;
  int64_t bshape[SHMAP_MAX_RANK];
  shmap__spec s;
  int rc = target(op, mesh, spec, dtype, rank, shape, bshape, &s);
  int64_t numel = rc ? 0 : shmap__numel(rank, shape);
  if (rc == 0 && !data && numel > 0)
    rc = shmap__err(SHMAP_EINVAL, "%s: data is NULL", op);
  if (mesh)
    rc = agree(op, mesh, rc, dtype, rank, shape, &s);
  if (rc)
    return rc;
  /* The caller's memory, seen as a host array for the duration of the
   * call: each device copies its block straight out of it. */
  shmap_array host = {.dtype = dtype, .rank = rank, .numel = numel,
                      .data = (void *)data};
  if (rank)
    memcpy(host.shape, shape, sizeof(int64_t) * (size_t)rank);
  if (!host.data)
    host.data = &host; /* empty array: any non-NULL pointer marks "host" */
  return relayout(op, array, mesh, &host, spec);
}

SHMAP_EXTERN int shmap_array_reshard(shmap_array **out,
                                     const shmap_array *array,
                                     const char *spec)
{
  const char *op = "shmap_array_reshard";
  if (out)
    *out = NULL;
  if (!array)
    return shmap__err(SHMAP_EINVAL, "%s: NULL argument", op);
  if (!array->mesh)
    return shmap__err(SHMAP_EINVAL,
                      "%s: %s", op,
                      out ? "a host array has no mesh; use "
                            "shmap_array_from_host_sharded to place it"
                          : "NULL argument");
  /* Under MPI a process that rejects the call agrees with the others
   * first (proc.c, "Verdicts"). */
  int64_t bshape[SHMAP_MAX_RANK];
  shmap__spec s;
  int rc = !out ? shmap__err(SHMAP_EINVAL, "%s: NULL argument", op)
                : target(op, array->mesh, spec, array->dtype, array->rank,
                         array->shape, bshape, &s);
  if ((rc = agree(op, array->mesh, rc, array->dtype, array->rank,
                  array->shape, &s)))
    return rc;
  return relayout(op, out, array->mesh, (shmap_array *)array, spec);
}

/* ---- arrays made on the devices ------------------------------------------ */

typedef struct make_arg {
  shmap_dtype dtype;
  int rank;
  const int64_t *bshape;
  const void *value;   /* fill */
  shmap_init_fn init;  /* init */
  void *init_arg;
  shmap__spec spec;
  const char *op; /* the public function's name, for the trace */
} make_arg;

static void fill_value(shmap_block *b, const void *value)
{
  size_t es = shmap_dtype_size(b->dtype);
  int64_t n = shmap_block_numel(b);
  char *p = b->data;
  for (int64_t i = 0; i < n; i++)
    memcpy(p + i * (int64_t)es, value, es);
}

static int make_body(shmap_ctx *ctx, void *arg)
{
  const make_arg *m = arg;
  ctx->job_name = m->op;
  shmap_block *b = shmap_out(ctx, 0, m->dtype, m->rank, m->bshape);
  if (!b)
    return ctx->err;
  if (m->value)
    fill_value(b, m->value);
  if (m->init) {
    int64_t off[SHMAP_MAX_RANK];
    shmap__block_offset(ctx->rt->mesh, &m->spec, m->rank,
                        m->bshape, ctx->coords, off);
    int rc = m->init(b, ctx->dev, ctx->coords, off, m->init_arg);
    if (rc)
      return ctx->err ? ctx->err
                      : shmap_fail(ctx, "the init callback returned %d", rc);
  }
  return 0;
}

/* rc: this process's verdict on the arguments checked before (0, or an
 * error code with its message set). */
static int make(const char *op, shmap_array **array, shmap_mesh *mesh,
                const char *spec, shmap_dtype dtype, int rank,
                const int64_t shape[], make_arg *m, unsigned flags, int rc)
{
  if (array)
    *array = NULL;
  else if (rc == 0)
    rc = shmap__err(SHMAP_EINVAL, "%s: array is NULL", op);
  int64_t bshape[SHMAP_MAX_RANK];
  if (rc == 0)
    rc = target(op, mesh, spec, dtype, rank, shape, bshape, &m->spec);
  if (mesh)
    rc = agree(op, mesh, rc, dtype, rank, shape, &m->spec);
  if (rc)
    return rc;
  m->dtype = dtype;
  m->rank = rank;
  m->bshape = bshape;
  m->op = op;
  rc = shmap__map(mesh, make_body, m, 0, NULL, NULL, 1, array, &spec, flags);
  return rc ? shmap__err_prefix(rc, "%s", op) : 0;
}

SHMAP_EXTERN int shmap_array_zeros(shmap_array **array, shmap_mesh *mesh,
                                   const char *spec, shmap_dtype dtype,
                                   int rank, const int64_t shape[])
{
  make_arg m = {0};
  return make("shmap_array_zeros", array, mesh, spec, dtype, rank, shape, &m,
              SHMAP__TRUSTED_REP, 0);
}

SHMAP_EXTERN int shmap_array_fill(shmap_array **array, shmap_mesh *mesh,
                                  const char *spec, shmap_dtype dtype,
                                  int rank, const int64_t shape[],
                                  const void *value)
{
  int rc = value ? 0
                 : shmap__err(SHMAP_EINVAL, "shmap_array_fill: value is NULL");
  make_arg m = {.value = value};
  return make("shmap_array_fill", array, mesh, spec, dtype, rank, shape, &m,
              SHMAP__TRUSTED_REP, rc);
}

SHMAP_EXTERN int shmap_array_init(shmap_array **array, shmap_mesh *mesh,
                                  const char *spec, shmap_dtype dtype,
                                  int rank, const int64_t shape[],
                                  shmap_init_fn init, void *arg)
{
  int rc = init ? 0
                : shmap__err(SHMAP_EINVAL, "shmap_array_init: init is NULL");
  make_arg m = {.init = init, .init_arg = arg};
  /* Copies of one block come from the user's callback: checked. */
  return make("shmap_array_init", array, mesh, spec, dtype, rank, shape, &m,
              0, rc);
}
