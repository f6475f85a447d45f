/* map.c - one map call: validate the specs, hand each device its input
 * blocks, run the bodies, then check and assemble the outputs. */
#include "map.h"

#include "dtype.h"
#include "runtime/debug.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors on a device -------------------------------------------------- */

int shmap__dev_fail(shmap_ctx *ctx, const char *op, int code, const char *fmt,
                    ...)
{
  char me[96], text[SHMAP__MSG_MAX];
  shmap__mesh_devname(ctx->rt->mesh, ctx->dev, me, sizeof me);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  shmap__err(code, "%s on %s: %s", op, me, text);
  if (!ctx->err)
    ctx->err = code;
  return shmap__fail(ctx->rt, ctx->dev, code, shmap__errbuf());
}

int shmap__canceled(shmap_ctx *ctx, const char *op)
{
  shmap__runtime *rt = ctx->rt;
  char me[96];
  shmap__mesh_devname(rt->mesh, ctx->dev, me, sizeof me);
  int code = rt->fail_code == SHMAP_EMISMATCH ? SHMAP_EMISMATCH
                                               : SHMAP_ECANCELED;
  if (!ctx->err)
    ctx->err = code;
  return shmap__err(code, "%s on %s: canceled because another device failed: %s",
                    op, me, rt->fail_msg);
}

int shmap__ctx_check(shmap_ctx *ctx, const char *op)
{
  if (!ctx)
    return shmap__err(SHMAP_EINVAL, "%s: ctx is NULL", op);
  if (ctx != shmap__current())
    return shmap__err(SHMAP_ESTATE,
                      "%s: ctx is not the context of a body running on this "
                      "thread (call it from inside the body it was given to)",
                      op);
  return 0;
}

/* ---- the body's side ----------------------------------------------------- */

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

SHMAP_EXTERN const shmap_block *shmap_in(shmap_ctx *ctx, int k)
{
  if (shmap__ctx_check(ctx, "shmap_in"))
    return NULL;
  if (k < 0 || k >= ctx->job->nin) {
    shmap__dev_fail(ctx, "shmap_in", SHMAP_EINVAL,
                    "input %d is out of range: the map has %d input%s", k,
                    ctx->job->nin, ctx->job->nin == 1 ? "" : "s");
    return NULL;
  }
  return ctx->in[k];
}

static int out_check(shmap_ctx *ctx, const char *op, int k)
{
  int rc = shmap__ctx_check(ctx, op);
  if (rc)
    return rc;
  if (k < 0 || k >= ctx->job->nout)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL,
                           "output %d is out of range: the map has %d output%s",
                           k, ctx->job->nout, ctx->job->nout == 1 ? "" : "s");
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
  for (int d = 0; d < b->rank; d++)
    if (b->shape[d] < 0)
      return shmap__dev_fail(ctx, op, SHMAP_ESHAPE,
                             "%s block has negative size %lld in dimension %d",
                             name, (long long)b->shape[d], d);
  if (!b->data && shmap__numel(b->rank, b->shape) > 0)
    return shmap__dev_fail(ctx, op, SHMAP_EINVAL, "%s block has no data", name);
  return 0;
}

bool shmap__block_valid(const shmap_block *b)
{
  if (!b || shmap_dtype_size(b->dtype) == 0 || b->rank < 0 ||
      b->rank > SHMAP_MAX_RANK)
    return false;
  for (int d = 0; d < b->rank; d++)
    if (b->shape[d] < 0)
      return false;
  return b->data || shmap__numel(b->rank, b->shape) == 0;
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
  if (out_check(ctx, "shmap_out", k))
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
  if (out_check(ctx, "shmap_out_copy", k) ||
      shmap__block_check(ctx, "shmap_out_copy", "source", src))
    return NULL;
  shmap_block *b = shmap_out(ctx, k, src->dtype, src->rank, src->shape);
  if (b)
    memcpy(b->data, src->data, shmap_block_nbytes(src));
  return b;
}

SHMAP_EXTERN int shmap_out_set(shmap_ctx *ctx, int k, shmap_block *block)
{
  int rc = out_check(ctx, "shmap_out_set", k);
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
  shmap__arena_free(ctx, c);
  return 0;
}

SHMAP_EXTERN int shmap_fail(shmap_ctx *ctx, const char *fmt, ...)
{
  int rc = shmap__ctx_check(ctx, "shmap_fail");
  if (rc)
    return rc;
  char me[96], text[SHMAP__MSG_MAX];
  shmap__mesh_devname(ctx->rt->mesh, ctx->dev, me, sizeof me);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  shmap__err(SHMAP_EBODY, "%s failed: %s", me, text);
  if (!ctx->err)
    ctx->err = SHMAP_EBODY;
  return shmap__fail(ctx->rt, ctx->dev, SHMAP_EBODY, shmap__errbuf());
}

/* ---- one device's part of a map ------------------------------------------ */

static void run_device(shmap__job *job, int dev)
{
  shmap_ctx *ctx = &job->ctx[dev];
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[dev];
  self->ctx = ctx;
  shmap__set_current(ctx);
  shmap__set_state(self, SHMAP__ST_INPUTS, 0, shmap__now());
  bool ok = true;
  for (int k = 0; k < job->nin && ok; k++) {
    shmap_array *a = job->in[k];
    const shmap__in_info *ii = &job->ins[k];
    if (ii->borrow) {
      ctx->in[k] = &a->blocks[dev];
      ctx->shared++;
      continue;
    }
    shmap__chunk *c = shmap__arena_alloc(ctx, a->dtype, a->rank, ii->bshape,
                                         SHMAP__CHUNK_IN, false);
    if (!c) {
      shmap__dev_fail(ctx, "input", SHMAP_ENOMEM, "%s", shmap__errbuf());
      ok = false;
      break;
    }
    shmap__gather_block(a, job->mesh, &ii->spec, ii->bshape, dev,
                        c->block.data, &ctx->moved);
    ctx->built++;
    ctx->in[k] = &c->block;
  }
  if (ok && !atomic_load(&rt->abort)) {
    uint64_t t0 = shmap__set_state(self, SHMAP__ST_BODY, 0, shmap__now());
    int rc = job->body(ctx, job->arg);
    uint64_t t1 = shmap__set_state(self, SHMAP__ST_DONE, 0, shmap__now());
    if (shmap__tracing())
      shmap__trace_event(self, t0, t1, 0, 0, ctx->seq);
    if (rc != 0 && !ctx->err) {
      char me[96], msg[SHMAP__MSG_MAX];
      shmap__mesh_devname(job->mesh, dev, me, sizeof me);
      /* No library call failed on this device, so the number is the
       * body's own (-1 is not SHMAP_EINVAL here). */
      snprintf(msg, sizeof msg, "%s: body returned %d", me, rc);
      ctx->err = SHMAP_EBODY;
      shmap__fail(rt, dev, SHMAP_EBODY, msg);
    }
  }
  shmap__set_state(self, SHMAP__ST_DONE, 0, shmap__now());
  shmap__set_current(NULL);
  self->ctx = NULL;
  /* Peers waiting for this device in a collective must learn that it
   * left. */
  shmap__comm_finish(ctx->comm, dev);
}

/* ---- the caller's side ----------------------------------------------------- */

static void format_index(int rank, const int64_t shape[], int64_t flat,
                         char *buf, size_t n)
{
  int64_t idx[SHMAP_MAX_RANK];
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  snprintf(buf, n, "[");
  for (int d = 0; d < rank; d++)
    shmap__cat(buf, n, "%s%lld", d ? "," : "", (long long)idx[d]);
  shmap__cat(buf, n, "]");
}

/* Outputs: every device declared the same count, dtypes and shapes. */
static int check_outputs(shmap__job *job, const char *const out_specs[],
                         const shmap__spec *ospec)
{
  shmap_mesh *mesh = job->mesh;
  for (int k = 0; k < job->nout; k++) {
    int first = -1;
    for (int d = 0; d < mesh->ndev && first < 0; d++)
      if (job->ctx[d].out[k])
        first = d;
    if (first < 0)
      return shmap__err(SHMAP_EINVAL,
                        "output %d was not declared by any device (the map "
                        "has %d outputs; declare each with shmap_out)",
                        k, job->nout);
    const shmap_block *b0 = job->ctx[first].out[k];
    char n0[96], s0[128];
    shmap__mesh_devname(mesh, first, n0, sizeof n0);
    shmap__shape_format(b0->dtype, b0->rank, b0->shape, s0, sizeof s0);
    for (int d = 0; d < mesh->ndev; d++) {
      const shmap_block *b = job->ctx[d].out[k];
      char nd[96];
      shmap__mesh_devname(mesh, d, nd, sizeof nd);
      if (!b)
        return shmap__err(SHMAP_EMISMATCH,
                          "output %d: %s declared %s but %s declared no "
                          "output %d",
                          k, n0, s0, nd, k);
      if (b->dtype != b0->dtype || b->rank != b0->rank ||
          memcmp(b->shape, b0->shape, (size_t)b->rank * sizeof b->shape[0])) {
        char sd[128];
        shmap__shape_format(b->dtype, b->rank, b->shape, sd, sizeof sd);
        return shmap__err(SHMAP_EMISMATCH,
                          "output %d: %s returned %s but %s returned %s", k,
                          n0, s0, nd, sd);
      }
    }
    char what[32];
    snprintf(what, sizeof what, "out_specs[%d]", k);
    if (ospec[k].ndims > b0->rank)
      return shmap__err(SHMAP_ESHAPE,
                        "%s \"%.200s\" has length %d but output %d has rank %d "
                        "(blocks are %s)",
                        what, out_specs[k], ospec[k].ndims, k, b0->rank, s0);
  }
  return 0;
}

static int check_replicated(shmap__job *job, int k, const char *spec_text,
                            const shmap__spec *spec)
{
  shmap_mesh *mesh = job->mesh;
  unsigned mask = shmap__spec_axes_mask(spec);
  for (int d = 0; d < mesh->ndev; d++) {
    int rep = shmap__representative(mesh, mask, d);
    if (rep == d)
      continue;
    const shmap_block *a = job->ctx[rep].out[k], *b = job->ctx[d].out[k];
    size_t es = shmap_dtype_size(a->dtype);
    size_t bytes = shmap_block_nbytes(a);
    if (memcmp(a->data, b->data, bytes) == 0)
      continue;
    int64_t i = 0;
    while (memcmp((const char *)a->data + i * (int64_t)es,
                  (const char *)b->data + i * (int64_t)es, es) == 0)
      i++;
    char na[96], nb[96], va[64], vb[64], idx[96], axes[160] = "";
    shmap__mesh_devname(mesh, rep, na, sizeof na);
    shmap__mesh_devname(mesh, d, nb, sizeof nb);
    shmap__dtype_format(a->dtype, (const char *)a->data + i * (int64_t)es, va, sizeof va);
    shmap__dtype_format(a->dtype, (const char *)b->data + i * (int64_t)es, vb, sizeof vb);
    format_index(a->rank, a->shape, i, idx, sizeof idx);
    int n = 0;
    for (int ax = 0; ax < mesh->naxes; ax++)
      if (!(mask & (1u << ax)))
        shmap__cat(axes, sizeof axes, "%s'%s'", n++ ? ", " : "", mesh->names[ax]);
    return shmap__err(SHMAP_EREPLICATION,
                      "output %d with out_specs[%d] \"%.200s\" is not "
                      "replicated along %s %s, which the spec leaves out: %s "
                      "and %s differ at block element %s: %s vs %s (name the "
                      "axis in the out spec, or pass SHMAP_NO_CHECK_REP to use "
                      "the block at coordinate 0)",
                      k, k, spec_text, n > 1 ? "axes" : "axis", axes, na, nb,
                      idx, va, vb);
  }
  return 0;
}

/* Output k becomes a sharded array that keeps each device's block. */
static int adopt_output(shmap__job *job, int k, const shmap__spec *spec,
                        unsigned flags, shmap_array **res)
{
  shmap_mesh *mesh = job->mesh;
  const shmap_block *b0 = job->ctx[0].out[k];
  int64_t gshape[SHMAP_MAX_RANK];
  shmap__global_shape(mesh, spec, b0->rank, b0->shape, gshape);
  char what[32];
  snprintf(what, sizeof what, "output %d", k);
  int rc = shmap__check_shape(what, b0->dtype, b0->rank, gshape);
  if (rc)
    return rc;
  shmap_array *a = shmap__calloc(1, sizeof *a);
  if (a) {
    a->blocks = shmap__calloc((size_t)mesh->ndev, sizeof *a->blocks);
    a->mem = shmap__calloc((size_t)mesh->ndev, sizeof *a->mem);
  }
  if (!a || !a->blocks || !a->mem) {
    if (a) {
      free(a->blocks);
      free(a->mem);
    }
    free(a);
    return shmap__err(SHMAP_ENOMEM, "out of memory for output %d", k);
  }
  a->dtype = b0->dtype;
  a->rank = b0->rank;
  memcpy(a->shape, gshape, sizeof gshape);
  memcpy(a->bshape, b0->shape, sizeof a->bshape);
  a->numel = shmap__numel(a->rank, a->shape);
  a->spec = *spec;
  a->mesh = mesh;
  shmap__mesh_retain(mesh);
  for (int d = 0; d < mesh->ndev; d++) {
    shmap_ctx *ctx = &job->ctx[d];
    shmap__chunk *c = shmap__arena_find(ctx, ctx->out[k]);
    shmap__arena_unlink(ctx, c);
    a->mem[d] = c;
    a->blocks[d] = c->block;
  }
  /* Unchecked outputs: the copy at coordinate 0 of the unnamed axes is the
   * value, so every holder gets that copy. */
  if ((flags & SHMAP_NO_CHECK_REP) && !(flags & SHMAP__TRUSTED_REP)) {
    unsigned mask = shmap__spec_axes_mask(spec);
    size_t bytes = shmap_block_nbytes(&a->blocks[0]);
    for (int d = 0; d < mesh->ndev; d++) {
      int rep = shmap__representative(mesh, mask, d);
      if (rep != d)
        memcpy(a->blocks[d].data, a->blocks[rep].data, bytes);
    }
  }
  *res = a;
  return 0;
}

static int prepare_inputs(shmap__job *job, const char *const in_specs[])
{
  for (int k = 0; k < job->nin; k++) {
    char what[32];
    snprintf(what, sizeof what, "in_specs[%d]", k);
    const shmap_array *a = job->in[k];
    if (!a)
      return shmap__err(SHMAP_EINVAL, "input %d is NULL", k);
    if (a->mesh && a->mesh != job->mesh)
      return shmap__err(SHMAP_EINVAL,
                        "input %d is sharded on another mesh; export it to "
                        "the host (shmap_array_to_host) to move it", k);
    if (!in_specs[k])
      return shmap__err(SHMAP_EINVAL, "%s is NULL", what);
    shmap__in_info *ii = &job->ins[k];
    int rc = shmap__spec_resolve(job->mesh, in_specs[k], &ii->spec);
    if (rc)
      return shmap__err_prefix(rc, "%s", what);
    rc = shmap__spec_fit(job->mesh, what, in_specs[k], &ii->spec, a->rank,
                         a->shape);
    if (rc)
      return rc;
    shmap__block_shape(job->mesh, &ii->spec, a->rank, a->shape, ii->bshape);
    ii->borrow = a->mesh && shmap__spec_same(&a->spec, &ii->spec, a->rank);
  }
  return 0;
}

static void free_job(shmap__job *job)
{
  if (job->ctx)
    for (int d = 0; d < job->mesh->ndev; d++)
      shmap__arena_clear(&job->ctx[d]);
  free(job->ctx);
  free(job->ins);
}

int shmap__map(shmap_mesh *mesh, shmap_body_fn body, void *arg, int nin,
               shmap_array *const in[], const char *const in_specs[],
               int nout, shmap_array *out[], const char *const out_specs[],
               unsigned flags)
{
  if (!mesh || !body)
    return shmap__err(SHMAP_EINVAL, "shmap_map: %s is NULL", mesh ? "body" : "mesh");
  if (nin < 0 || nout < 0)
    return shmap__err(SHMAP_EINVAL, "shmap_map: negative count (nin=%d, nout=%d)",
                      nin, nout);
  if (nin > 0 && (!in || !in_specs))
    return shmap__err(SHMAP_EINVAL, "shmap_map: nin=%d but %s is NULL", nin,
                      in ? "in_specs" : "in");
  if (nout > 0 && (!out || !out_specs))
    return shmap__err(SHMAP_EINVAL, "shmap_map: nout=%d but %s is NULL", nout,
                      out ? "out_specs" : "out");
  shmap_ctx *outer = shmap__current();
  if (outer)
    return shmap__dev_fail(outer, "shmap_map", SHMAP_ESTATE,
                           "called from inside a body; nested maps are not "
                           "supported");
  for (int k = 0; k < nout; k++)
    out[k] = NULL;

  shmap__job job = {.mesh = mesh, .body = body, .arg = arg, .nin = nin,
                    .nout = nout, .in = in};
  shmap__spec *ospec = NULL;
  shmap_block **slots = NULL;
  shmap_array **res = NULL;
  int rc = 0;
  job.ins = shmap__calloc((size_t)nin + 1, sizeof *job.ins);
  ospec = shmap__calloc((size_t)nout + 1, sizeof *ospec);
  res = shmap__calloc((size_t)nout + 1, sizeof *res);
  if (!job.ins || !ospec || !res) {
    rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
    goto done;
  }
  if ((rc = prepare_inputs(&job, in_specs)))
    goto done;
  for (int k = 0; k < nout; k++) {
    if (!out_specs[k]) {
      rc = shmap__err(SHMAP_EINVAL, "out_specs[%d] is NULL", k);
      goto done;
    }
    if ((rc = shmap__spec_resolve(mesh, out_specs[k], &ospec[k]))) {
      rc = shmap__err_prefix(rc, "out_specs[%d]", k);
      goto done;
    }
  }

  /* One allocation for the device contexts' block tables. */
  size_t per = (size_t)nin + (size_t)nout;
  job.ctx = shmap__calloc((size_t)mesh->ndev, sizeof *job.ctx);
  slots = shmap__calloc((size_t)mesh->ndev * per + 1, sizeof *slots);
  if (!job.ctx || !slots) {
    rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory for %d devices",
                    mesh->ndev);
    goto done;
  }
  for (int d = 0; d < mesh->ndev; d++) {
    shmap_ctx *ctx = &job.ctx[d];
    ctx->rt = mesh->rt;
    ctx->job = &job;
    ctx->comm = &job.comm;
    ctx->dev = d;
    shmap__mesh_coords(mesh, d, ctx->coords);
    ctx->in = slots + (size_t)d * per;
    ctx->out = ctx->in + nin;
  }

  shmap__runtime *rt = mesh->rt;
  shmap__runtime_lock(rt);
  rc = shmap__comm_open(&job.comm, rt);
  if (rc == 0) {
    rc = shmap__runtime_run(rt, &job, run_device);
    shmap__comm_close(&job.comm, rc != 0 || atomic_load(&rt->failed_dev) >= 0);
  }
  if (rc == 0) {
    shmap_stats *st = &mesh->stats;
    st->maps++;
    for (int d = 0; d < mesh->ndev; d++) {
      const shmap_ctx *ctx = &job.ctx[d];
      st->blocks_shared += ctx->shared;
      st->blocks_built += ctx->built;
      st->bytes_host += ctx->moved.host;
      st->bytes_local += ctx->moved.local;
      st->bytes_moved += ctx->moved.moved;
    }
  }
  if (rc == 0 && atomic_load(&rt->failed_dev) >= 0) {
    rc = rt->fail_code;
    shmap__err_set(rt->fail_msg);
  }
  shmap__runtime_unlock(rt);
  if (rc)
    goto done;

  if ((rc = check_outputs(&job, out_specs, ospec)))
    goto done;
  for (int k = 0; k < nout; k++) {
    if (!(flags & (SHMAP_NO_CHECK_REP | SHMAP__TRUSTED_REP)) &&
        (rc = check_replicated(&job, k, out_specs[k], &ospec[k])))
      goto done;
    if ((rc = adopt_output(&job, k, &ospec[k], flags, &res[k])))
      goto done;
  }
  for (int k = 0; k < nout; k++) {
    out[k] = res[k];
    res[k] = NULL;
  }
done:
  if (res)
    for (int k = 0; k < nout; k++)
      shmap_array_destroy(res[k]);
  free_job(&job);
  free(slots);
  free(ospec);
  free(res);
  return rc;
}

SHMAP_EXTERN int shmap_map_flags(shmap_mesh *mesh, shmap_body_fn body,
                                 void *arg, int nin, shmap_array *const in[],
                                 const char *const in_specs[], int nout,
                                 shmap_array *out[],
                                 const char *const out_specs[], unsigned flags)
{
  if (flags & ~SHMAP_NO_CHECK_REP)
    return shmap__err(SHMAP_EINVAL, "shmap_map: unknown flags 0x%x", flags);
  return shmap__map(mesh, body, arg, nin, in, in_specs, nout, out, out_specs,
                    flags);
}

SHMAP_EXTERN int shmap_map(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                           int nin, shmap_array *const in[],
                           const char *const in_specs[], int nout,
                           shmap_array *out[], const char *const out_specs[])
{
  return shmap_map_flags(mesh, body, arg, nin, in, in_specs, nout, out,
                         out_specs, 0);
}
