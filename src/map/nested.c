/* SPDX-License-Identifier: MIT */
/* nested.c - a map started from inside a body, over axes the body's map
 * leaves free: the agreement of the body instances on the call, the inner
 * context on each device, the inner inputs cut from the outer blocks, and
 * the outputs assembled over the inner axes. */
#include "map/map.h"
#include "hash.h"

#include "coll/async.h"
#include "coll/plan.h"
#include "sched/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- nested maps ------------------------------------------------------------ *
 *
 * A map over some axes runs its body on every device: devices along the free
 * axes run the same instance on equal blocks, as XLA runs a partially
 * manual computation.  So when a body starts a nested map over free axes,
 * every device of the mesh is already there to run its part: the nested map
 * runs inline, on the device's own thread or fiber, with a second context
 * chained to the first.  No device set changes hands and no thread is
 * woken; the inner map's groups are groups of the same mesh over the inner
 * axes, so whatever the map's communicator does for a collective (shared
 * memory here; another transport for devices in other processes) it does
 * for the nested map's collectives, and for those the inner body makes
 * over the outer axes through the outer context.  Before it starts, the
 * body instances of every slice agree on the nested call over the axes of
 * the whole chain (instances_agree), so that slices nesting differently
 * fail instead of meeting in groups over outer axes that a slice nested
 * otherwise cannot fill.  The inner body's inputs are cut from the outer
 * blocks locally; its outputs are assembled with all_gathers over the
 * inner axes, after an agreement (an all_gather of a small descriptor)
 * that turns devices making different nested calls or returning different
 * shapes into an error naming two of them.
 */

/* The axes whose bits are set, as the axes text of a collective. */
static void mask_axes_text(const shmap_mesh *mesh, unsigned mask, char *buf,
                           size_t n)
{
  int axes[SHMAP_MAX_AXES], k = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      axes[k++] = a;
  shmap__axes_format(mesh, axes, k, buf, n);
}

/* A string mixed into `h`, then an end mark, so that "ab", "" differs from
 * "a", "b". */
static uint64_t hash_str(uint64_t h, const char *s)
{
  return shmap__hash_u64(shmap__hash_str(h, s), 0xff);
}

/*
 * Every member of the inner group gathers a word from every other and
 * compares.  Used for the agreement on the nested call itself and on each
 * output's dtype and shape, so that devices that disagree fail with a
 * message naming both instead of meeting in mismatched collectives.
 * Returns 0, or the index of the first member that differs (+1) in *diff.
 */
static int agree(shmap_ctx *ictx, const char *axes, const int64_t *mine,
                 int nwords, int *diff, int64_t *theirs)
{
  shmap_block b = {.data = (void *)mine, .dtype = SHMAP_I64, .rank = 1,
                   .shape = {nwords}};
  shmap_block *all;
  int rc = shmap_all_gather(ictx, &b, axes, 0, 0, &all);
  if (rc)
    return rc;
  const int64_t *w = all->data;
  *diff = 0;
  for (int64_t r = 0; r < all->shape[0] && !*diff; r++)
    if (memcmp(w + r * nwords, mine, (size_t)nwords * sizeof *mine)) {
      *diff = (int)r + 1;
      memcpy(theirs, w + r * nwords, (size_t)nwords * sizeof *mine);
    }
  shmap_block_free(ictx, all);
  return 0;
}

/*
 * Every body instance of the map of octx (the devices that run its body:
 * one for each coordinate of `used`, the manual axes of the whole chain of
 * maps) must start the same nested map.  They agree on it before any
 * replica joins, over `used`, with a call whose descriptor describes the
 * nested map (SHMAP__NESTED: an all_gather of one word), so that
 * instances nesting over other axes, with other counts or specs, or a
 * different number of times or not at all, fail with SHMAP_EMISMATCH
 * naming two devices and their calls (the transport's mismatch message)
 * instead of starting inner maps whose groups over the outer axes meet
 * no one.  An instance that is a replica (it joined an offer) goes back
 * to waiting when its inner body returns, unseen by the transport, so
 * with replicas the instances of an inner body also agree when it
 * returns (`end`): an instance still calling, or nesting, meets that
 * call and fails instead of waiting for it.
 */
static int instances_agree(shmap_ctx *octx, unsigned used, unsigned manual,
                           int nin, int nout, uint64_t h, bool end)
{
  char axes[SHMAP__AXES_MAX];
  mask_axes_text(octx->rt->mesh, used, axes, sizeof axes);
  int64_t word = 0;
  shmap_block b = {.data = &word, .dtype = SHMAP_I64, .rank = 1,
                   .shape = {1}};
  shmap__plan p;
  /* The call is over every axis of the chain, not only octx's own. */
  unsigned own = octx->manual;
  octx->manual = used;
  int rc = shmap__plan_all_gather(octx, &b, axes, 0, 0, true, &p);
  octx->manual = own;
  if (rc)
    return rc;
  p.c.name = "shmap_map_nested";
  snprintf(p.c.op, sizeof p.c.op, "%s", p.c.name);
  p.c.call.kind = SHMAP__NESTED;
  p.c.call.source = (int)manual;
  p.c.call.p2 = end;
  p.c.call.op_hash = (uint64_t)(nin > 0xffff ? 0xffff : nin) << 48 |
                     (uint64_t)(nout > 0xffff ? 0xffff : nout) << 32 |
                     (h & 0xffffffffu);
  shmap_block *all = NULL;
  if ((rc = shmap__into_new_block(&p, shmap__algo_all_gather, &all)))
    return rc;
  shmap_block_free(octx, all);
  return 0;
}

int shmap__mask_count(const shmap_mesh *mesh, unsigned mask)
{
  int n = 1;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      n *= mesh->sizes[a];
  return n;
}

/* The device number of member r of this device's group over the axes in
 * `mask` (mesh order). */
int shmap__mask_member(const shmap_mesh *mesh, unsigned mask, int dev, int r)
{
  int axes[SHMAP_MAX_AXES], k = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      axes[k++] = a;
  int id = dev;
  for (int i = k - 1; i >= 0; i--) {
    int a = axes[i];
    id -= (dev / mesh->strides[a] % mesh->sizes[a]) * mesh->strides[a];
    id += r % mesh->sizes[a] * mesh->strides[a];
    r /= mesh->sizes[a];
  }
  return id;
}

shmap_ctx *shmap__root_ctx(shmap_ctx *ctx)
{
  while (ctx->outer)
    ctx = ctx->outer;
  return ctx;
}

void shmap__nested_fold(shmap_ctx *into, shmap_ctx *from)
{
  while (from->arena)
    shmap__arena_free(from, from->arena);
  if (from->seq > into->seq)
    into->seq = from->seq;
  into->shared += from->shared;
  into->built += from->built;
  into->moved.local += from->moved.local;
  into->moved.moved += from->moved.moved;
}

/* The specs of a nested call, hashed in order. */
static uint64_t specs_hash(int nin, const char *const in_specs[], int nout,
                           const char *const out_specs[])
{
  uint64_t h = shmap__hash_init();
  for (int k = 0; k < nin; k++)
    h = hash_str(h, in_specs[k]);
  for (int k = 0; k < nout; k++)
    h = hash_str(h, out_specs[k]);
  return h;
}

/* ---- outputs ----------------------------------------------------------------- */

/* Output k (b: this device's, or NULL) is declared alike by every member
 * of the inner group. */
static int output_agree(shmap_ctx *ictx, int k, const shmap_block *b)
{
  const char *op = "shmap_map_nested";
  const shmap_mesh *mesh = ictx->rt->mesh;
  char all_axes[SHMAP__AXES_MAX];
  mask_axes_text(mesh, ictx->manual, all_axes, sizeof all_axes);
  int64_t desc[2 + SHMAP_MAX_RANK] = {-1, -1};
  if (b) {
    desc[0] = b->dtype;
    desc[1] = b->rank;
    memcpy(desc + 2, b->shape, (size_t)b->rank * sizeof b->shape[0]);
  }
  int diff;
  int64_t theirs[2 + SHMAP_MAX_RANK];
  int rc = agree(ictx, all_axes, desc, 2 + SHMAP_MAX_RANK, &diff, theirs);
  if (rc || !diff)
    return rc;
  char me[SHMAP__DEVNAME_MAX], them[SHMAP__DEVNAME_MAX];
  char s0[SHMAP__SHAPE_MAX] = "no output", s1[SHMAP__SHAPE_MAX] = "no output";
  int other = shmap__mask_member(mesh, ictx->manual, ictx->dev, diff - 1);
  shmap__mesh_devname(mesh, ictx->dev, me, sizeof me);
  shmap__mesh_devname(mesh, other, them, sizeof them);
  if (b)
    shmap__shape_format(b->dtype, b->rank, b->shape, s0, sizeof s0);
  if (theirs[0] >= 0)
    shmap__shape_format((shmap_dtype)theirs[0], (int)theirs[1], theirs + 2,
                        s1, sizeof s1);
  return shmap__dev_fail(ictx, op, SHMAP_EMISMATCH,
                         "output %d: %s returned %s but %s returned %s", k,
                         me, s0, them, s1);
}

/* Output k along the inner axes its spec leaves out (`unnamed`): the copy
 * at coordinate 0 is the value (*val); with the check on, every copy must
 * equal it bit for bit. */
static int output_value(shmap_ctx *ictx, int k, const char *spec_text,
                        const shmap_block *b, unsigned unnamed, unsigned flags,
                        const void **val)
{
  const shmap_mesh *mesh = ictx->rt->mesh;
  char axes[SHMAP__AXES_MAX];
  mask_axes_text(mesh, unnamed, axes, sizeof axes);
  shmap_block *ug;
  int rc = shmap_all_gather(ictx, b, axes, 0, 0, &ug);
  if (rc)
    return rc;
  *val = ug->data;
  size_t bytes = shmap_block_nbytes(b);
  for (int64_t r = 1; !(flags & SHMAP_NO_CHECK_REP) && r < ug->shape[0];
       r++) {
    const char *x = (const char *)ug->data + (size_t)r * bytes;
    char diff[SHMAP__SHAPE_MAX + 160];
    if (shmap__rep_differs(b, *val, x, diff, sizeof diff) < 0)
      continue;
    char na[SHMAP__DEVNAME_MAX], nb[SHMAP__DEVNAME_MAX], list[SHMAP__AXES_MAX];
    shmap__mesh_devname(mesh, shmap__mask_member(mesh, unnamed, ictx->dev, 0),
                        na, sizeof na);
    shmap__mesh_devname(mesh,
                        shmap__mask_member(mesh, unnamed, ictx->dev, (int)r),
                        nb, sizeof nb);
    shmap__mask_format(mesh, unnamed, list, sizeof list);
    return shmap__dev_fail(ictx, "shmap_map_nested", SHMAP_EREPLICATION,
                           "output %d with out_specs[%d] \"%.200s\" is not "
                           "replicated along %s, which the spec leaves out: "
                           "%s and %s differ at block element %s",
                           k, k, spec_text, list, na, nb, diff);
  }
  return 0;
}

/* The value of output k (val, b's shape) gathered over the inner axes its
 * spec names (`named`) into a new block of the outer body. */
static int output_assemble(shmap_ctx *ictx, shmap_ctx *octx,
                           const shmap__spec *spec, const shmap_block *b,
                           unsigned named, const void *val, shmap_block **res)
{
  const char *op = "shmap_map_nested";
  const shmap_mesh *mesh = ictx->rt->mesh;
  int64_t gshape[SHMAP_MAX_RANK];
  int rc;
  if ((rc = shmap__global_shape("nested output", mesh, spec, b->rank, b->shape,
                                gshape)))
    return shmap__dev_fail(ictx, op, rc, "%s", shmap__errbuf());
  shmap__chunk *c = shmap__arena_alloc(octx, b->dtype, b->rank, gshape,
                                       SHMAP__CHUNK_SCRATCH, false);
  if (!c)
    return shmap__dev_fail(ictx, op, SHMAP_ENOMEM, "%s", shmap__errbuf());
  size_t bytes = shmap_block_nbytes(b);
  size_t es = shmap_dtype_size(b->dtype);
  *res = &c->block;
  if (!named) {
    memcpy(c->block.data, val, bytes);
    return 0;
  }
  char axes[SHMAP__AXES_MAX];
  mask_axes_text(mesh, named, axes, sizeof axes);
  shmap_block v = *b;
  v.data = (void *)val;
  shmap_block *ng;
  if ((rc = shmap_all_gather(ictx, &v, axes, 0, 0, &ng))) {
    *res = NULL;
    shmap__arena_free(octx, c);
    return rc;
  }
  int64_t gstr[SHMAP_MAX_RANK], bstr[SHMAP_MAX_RANK];
  shmap__strides(b->rank, gshape, gstr);
  shmap__strides(b->rank, b->shape, bstr);
  for (int64_t r = 0; r < ng->shape[0]; r++) {
    int coords[SHMAP_MAX_AXES];
    shmap__mesh_coords(mesh, shmap__mask_member(mesh, named, ictx->dev, (int)r),
                       coords);
    int64_t off[SHMAP_MAX_RANK];
    shmap__block_offset(mesh, spec, b->rank, b->shape, coords, off);
    char *dst = c->block.data;
    for (int d = 0; d < b->rank; d++)
      dst += off[d] * gstr[d] * (int64_t)es;
    shmap__copy_box(dst, gstr, (const char *)ng->data + (size_t)r * bytes,
                    bstr, b->rank, b->shape, es);
  }
  return 0;
}

/* Output k of a nested map: check that the members agree on it, that it is
 * replicated along the inner axes its spec leaves out, and assemble it over
 * the axes it names into a new block of the outer body. */
static int nested_output(shmap_ctx *ictx, shmap_ctx *octx, int k,
                         const char *spec_text, const shmap__spec *spec,
                         unsigned flags, shmap_block **res)
{
  const char *op = "shmap_map_nested";
  const shmap_block *b = ictx->out[k];
  int rc = output_agree(ictx, k, b);
  if (rc)
    return rc;
  if (!b)
    return shmap__dev_fail(ictx, op, SHMAP_EINVAL,
                           "output %d was not declared by any device (declare "
                           "each with shmap_out)", k);
  if (spec->ndims > b->rank) {
    char s0[SHMAP__SHAPE_MAX];
    shmap__shape_format(b->dtype, b->rank, b->shape, s0, sizeof s0);
    return shmap__dev_fail(ictx, op, SHMAP_ESHAPE,
                           "out_specs[%d] \"%.200s\" has length %d but output "
                           "%d has rank %d (blocks are %s)",
                           k, spec_text, spec->ndims, k, b->rank, s0);
  }
  unsigned named = shmap__spec_axes_mask(spec);
  unsigned unnamed = ictx->manual & ~named;
  const void *val = b->data;
  if (unnamed &&
      (rc = output_value(ictx, k, spec_text, b, unnamed, flags, &val)))
    return rc;
  return output_assemble(ictx, octx, spec, b, named, val, res);
}

/* ---- inputs ------------------------------------------------------------------ */

/* Split an outer block into this device's inner block under `spec`. */
static int nested_input(shmap_ctx *ictx, int k, const shmap_block *src,
                        const shmap__spec *spec)
{
  const shmap_mesh *mesh = ictx->rt->mesh;
  if (shmap__spec_axes_mask(spec) == 0) {
    ictx->in[k] = (shmap_block *)src; /* read-only, so shared */
    ictx->shared++;
    return 0;
  }
  int64_t bshape[SHMAP_MAX_RANK], off[SHMAP_MAX_RANK];
  shmap__block_shape(mesh, spec, src->rank, src->shape, bshape);
  shmap__block_offset(mesh, spec, src->rank, bshape, ictx->coords, off);
  shmap__chunk *c = shmap__arena_alloc(ictx, src->dtype, src->rank, bshape,
                                       SHMAP__CHUNK_IN, false);
  if (!c)
    return shmap__dev_fail(ictx, "shmap_map_nested", SHMAP_ENOMEM, "%s",
                           shmap__errbuf());
  size_t es = shmap_dtype_size(src->dtype);
  int64_t sstr[SHMAP_MAX_RANK], dstr[SHMAP_MAX_RANK];
  shmap__strides(src->rank, src->shape, sstr);
  shmap__strides(src->rank, bshape, dstr);
  const char *from = src->data;
  for (int d = 0; d < src->rank; d++)
    from += off[d] * sstr[d] * (int64_t)es;
  shmap__copy_box(c->block.data, dstr, from, sstr, src->rank, bshape, es);
  ictx->built++;
  ictx->moved.local += shmap_block_nbytes(&c->block);
  ictx->in[k] = &c->block;
  return 0;
}

/* ---- the call ---------------------------------------------------------------- */

/* The arguments of a nested call, before any device agrees on it. */
static int nested_check_args(shmap_ctx *octx, shmap_body_fn body, int nin,
                             const shmap_block *const in[],
                             const char *const in_specs[], int nout,
                             shmap_block *out[], const char *const out_specs[],
                             const shmap_map_opts *opts)
{
  const char *op = "shmap_map_nested";
  if (!body)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL, "body is NULL");
  if (nin < 0 || nout < 0)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL,
                           "negative count (nin=%d, nout=%d)", nin, nout);
  if ((nin > 0 && (!in || !in_specs)) || (nout > 0 && (!out || !out_specs)))
    return shmap__dev_fail(octx, op, SHMAP_EINVAL,
                           "nin=%d, nout=%d but an array of blocks or specs "
                           "is NULL", nin, nout);
  if (opts->flags & ~SHMAP_NO_CHECK_REP)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL, "unknown flags 0x%x",
                           opts->flags);
  if (opts->schedule)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL,
                           "schedule \"%.60s\" given: a nested map runs in "
                           "the order of the map it is nested in",
                           opts->schedule);
  return 0;
}

/* The nested map's manual axes (*manual): the free axes of the chain of
 * maps (*used: the axes manual in it), or those opts names. */
static int nested_manual(shmap_ctx *octx, const shmap_map_opts *opts,
                         unsigned *used_out, unsigned *manual_out)
{
  const char *op = "shmap_map_nested";
  const shmap_mesh *mesh = octx->rt->mesh;
  unsigned used = 0;
  for (const shmap_ctx *c = octx; c; c = c->outer)
    used |= c->manual;
  unsigned free_axes = shmap__mesh_all(mesh) & ~used;
  char usedl[SHMAP__AXES_MAX], freel[SHMAP__AXES_MAX];
  shmap__mask_format(mesh, used, usedl, sizeof usedl);
  shmap__mask_format(mesh, free_axes, freel, sizeof freel);
  unsigned manual = free_axes;
  if (opts->manual_axes && *opts->manual_axes) {
    int axes[SHMAP_MAX_AXES], n, rc;
    if ((rc = shmap__axes_parse(mesh, "shmap_map_nested: manual_axes",
                                opts->manual_axes, axes, &n)))
      return shmap__dev_fail(octx, op, rc, "%s", shmap__errbuf());
    if (n > 0)
      manual = 0;
    for (int i = 0; i < n; i++) {
      if (used & (1u << axes[i]))
        return shmap__dev_fail(octx, op, SHMAP_EAXIS,
                               "axis '%s' is already manual in an enclosing "
                               "map (manual there: %s; free axes: %s)",
                               mesh->names[axes[i]], usedl, freel);
      manual |= 1u << axes[i];
    }
  }
  if (!manual)
    return shmap__dev_fail(octx, op, SHMAP_EAXIS,
                           "no free axis is left to map over (every axis is "
                           "manual in an enclosing map: %s)", usedl);
  *used_out = used;
  *manual_out = manual;
  return 0;
}

/* The specs resolved over the nested map's manual axes (specs[]: nin
 * input then nout output specs), and the inputs checked against theirs. */
static int nested_specs(shmap_ctx *octx, unsigned manual, int nin,
                        const shmap_block *const in[],
                        const char *const in_specs[], int nout,
                        const char *const out_specs[], shmap__spec *specs)
{
  const char *op = "shmap_map_nested";
  const shmap_mesh *mesh = octx->rt->mesh;
  int rc = 0;
  for (int k = 0; k < nin + nout && !rc; k++) {
    bool isin = k < nin;
    int j = isin ? k : k - nin;
    const char *text = isin ? in_specs[j] : out_specs[j];
    const char *what = isin ? "in_specs" : "out_specs";
    if (!text)
      return shmap__dev_fail(octx, op, SHMAP_EINVAL, "%s[%d] is NULL", what, j);
    if ((rc = shmap__spec_resolve_manual(mesh, manual, text, &specs[k])))
      return shmap__dev_fail(octx, op, rc, "%s[%d]: %s", what, j,
                             shmap__errbuf());
    if (!isin)
      continue;
    char w[32];
    snprintf(w, sizeof w, "in_specs[%d]", j);
    if (!shmap__block_valid(in[j]))
      rc = shmap__block_check(octx, op, w, in[j]);
    else if ((rc = shmap__spec_fit(mesh, w, text, &specs[k], in[j]->rank,
                                   in[j]->shape)))
      rc = shmap__dev_fail(octx, op, rc, "%s", shmap__errbuf());
  }
  return rc;
}

/* In a map with replicas, the other members of this instance's group
 * over the inner axes are replicas waiting in its slice: each gets the
 * call as an offer and runs its part (replica.c). */
static void post_offers(shmap_ctx *root, shmap__offer *of)
{
  shmap__runtime *rt = root->rt;
  const shmap_mesh *mesh = rt->mesh;
  int n = shmap__mask_count(mesh, of->manual);
  atomic_store(&of->left, n - 1);
  for (int r = 1; r < n; r++) {
    int m = shmap__mask_member(mesh, of->manual, of->poster, r);
    shmap__offer *none = NULL;
    if (atomic_compare_exchange_strong(&root->job->ctx[m].offer, &none, of))
      shmap__dev_wake(&rt->devs[m]);
    else
      atomic_fetch_sub(&of->left, 1); /* it stopped waiting (a failure) */
  }
}

SHMAP_EXTERN int shmap_map_nested(shmap_ctx *octx, shmap_body_fn body,
                                  void *arg, int nin,
                                  const shmap_block *const in[],
                                  const char *const in_specs[], int nout,
                                  shmap_block *out[],
                                  const char *const out_specs[],
                                  const shmap_map_opts *opts)
{
  const char *op = "shmap_map_nested";
  int rc = shmap__ctx_check(octx, op);
  if (rc)
    return rc;
  if (octx != shmap__current())
    return shmap__dev_fail(octx, op, SHMAP_ESTATE,
                           "ctx is the context of an outer map; start a "
                           "nested map from the innermost body's context");
  static const shmap_map_opts defaults;
  if (!opts)
    opts = &defaults;
  int rsv = shmap__map_opts_reserved(opts);
  if (rsv >= 0)
    return shmap__dev_fail(octx, op, SHMAP_EINVAL, SHMAP__OPTS_RESERVED_MSG,
                           rsv, (unsigned long long)opts->reserved[rsv]);
  if ((rc = nested_check_args(octx, body, nin, in, in_specs, nout, out,
                              out_specs, opts)))
    return rc;
  for (int k = 0; k < nout; k++)
    out[k] = NULL;
  unsigned used = 0, manual = 0;
  if ((rc = nested_manual(octx, opts, &used, &manual)))
    return rc;
  shmap__spec *specs = shmap__calloc((size_t)nin + (size_t)nout + 1,
                                     sizeof *specs);
  shmap_block **res = shmap__calloc((size_t)nout + 1, sizeof *res);
  if (!specs || !res)
    rc = shmap__dev_fail(octx, op, SHMAP_ENOMEM, "out of memory");
  if (!rc)
    rc = nested_specs(octx, manual, nin, in, in_specs, nout, out_specs, specs);
  if (!rc) {
    uint64_t h = specs_hash(nin, in_specs, nout, out_specs);
    h = shmap__hash_u64(h, (uint64_t)nin);
    h = shmap__hash_u64(h, (uint64_t)nout);
    rc = instances_agree(octx, used, manual, nin, nout, h, false);
  }
  if (!rc) {
    shmap__offer of = {.octx = octx, .body = body, .arg = arg, .nin = nin,
                       .nout = nout, .in = in, .in_specs = in_specs,
                       .out_specs = out_specs, .specs = specs,
                       .manual = manual, .flags = opts->flags,
                       .seq = octx->seq, .poster = octx->dev};
    shmap__dev *self = &octx->rt->devs[octx->dev];
    of.nest = atomic_load_explicit(&self->dbg.nest, memory_order_relaxed);
    shmap_ctx *root = shmap__root_ctx(octx);
    if (root->job->replicas) {
      /* The poster shows the nested map before any replica can run it. */
      atomic_store_explicit(&self->dbg.nest, shmap__nest_push(of.nest, manual),
                            memory_order_relaxed);
      post_offers(root, &of);
    }
    rc = shmap__nested_run(octx, &of, res);
    if (root->job->replicas)
      shmap__dev_wait(octx->rt, self, shmap__offer_done, &of, NULL);
  }
  for (int k = 0; k < nout && !rc; k++)
    out[k] = res[k];
  free(specs);
  free(res);
  return rc;
}

/* ---- one device's part ---------------------------------------------------------- */

/* The inner context becomes the device's current one, and the watchdog
 * and the gdb extension show every level of nesting (one more than the
 * offer's).  Returns the nesting word to restore. */
static uint64_t nested_enter(shmap_ctx *ictx, const shmap__offer *of)
{
  shmap__dev *self = &ictx->rt->devs[ictx->dev];
  self->ctx = ictx;
  shmap__set_current(ictx);
  atomic_store_explicit(&self->dbg.nest,
                        shmap__nest_push(of->nest, ictx->manual),
                        memory_order_relaxed);
  return of->nest;
}

/* Back in the outer body. */
static void nested_leave(shmap_ctx *octx, uint64_t nest)
{
  shmap__dev *self = &octx->rt->devs[octx->dev];
  self->ctx = octx;
  shmap__set_current(octx);
  atomic_store_explicit(&self->dbg.nest, nest, memory_order_relaxed);
  shmap__set_state(self, SHMAP__ST_BODY, 0, shmap__now_state());
}

/* Agree on the call: same axes, specs and counts on every member.  With
 * replicas the members run the offer of one body instance, which agreed
 * with the others already (instances_agree); without, every device made
 * the call itself. */
static int nested_agree_call(shmap_ctx *ictx, const shmap__offer *of)
{
  const shmap_mesh *mesh = ictx->rt->mesh;
  int nin = of->nin, nout = of->nout;
  char all_axes[SHMAP__AXES_MAX];
  mask_axes_text(mesh, of->manual, all_axes, sizeof all_axes);
  uint64_t h = specs_hash(nin, of->in_specs, nout, of->out_specs);
  int64_t desc[4] = {(int64_t)of->manual, nin, nout, (int64_t)(h >> 1)};
  int64_t theirs[4];
  int diff = 0;
  int rc = agree(ictx, all_axes, desc, 4, &diff, theirs);
  if (rc || !diff)
    return rc;
  char them[SHMAP__DEVNAME_MAX];
  shmap__mesh_devname(mesh,
                      shmap__mask_member(mesh, of->manual, ictx->dev, diff - 1),
                      them, sizeof them);
  return shmap__dev_fail(ictx, "shmap_map_nested", SHMAP_EMISMATCH,
                         "nested maps differ between devices: this device "
                         "maps %d input%s to %d output%s, %s maps %d to %d%s",
                         nin, nin == 1 ? "" : "s", nout, nout == 1 ? "" : "s",
                         them, (int)theirs[1], (int)theirs[2],
                         theirs[0] != desc[0] ? " over other axes"
                         : theirs[3] != desc[3] ? " with other specs" : "");
}

/* The inner body on this device, and what its return means. */
static int nested_body(shmap_ctx *ictx, const shmap__offer *of, bool replicas)
{
  const shmap_mesh *mesh = ictx->rt->mesh;
  shmap__dev *self = &ictx->rt->devs[ictx->dev];
  int rc = 0;
  uint64_t t0 = shmap__set_state(self, SHMAP__ST_BODY, 0, shmap__now_state());
  int brc = of->body(ictx, of->arg);
  uint64_t t1 = shmap__now_state();
  if (shmap__tracing()) {
    int axes[SHMAP_MAX_AXES], na = 0;
    for (int a = 0; a < mesh->naxes; a++)
      if (of->manual & (1u << a))
        axes[na++] = a;
    shmap__trace_event(self, t0, t1,
                       shmap__pack_op(SHMAP__NESTED_BODY, axes, na), 0,
                       ictx->seq);
  }
  if (brc != 0) {
    rc = shmap__body_returned(ictx, brc);
  } else if (ictx->err) {
    rc = ictx->err;
  } else if (replicas) {
    unsigned used = 0;
    for (const shmap_ctx *c = ictx; c; c = c->outer)
      used |= c->manual;
    rc = instances_agree(ictx, used, of->manual, of->nin, of->nout, 0, true);
  }
  /* Requests the inner body left open fail the map and are finished
   * before its blocks go (coll/async.c). */
  shmap__async_body_end(ictx);
  return rc ? rc : ictx->err;
}

int shmap__nested_run(shmap_ctx *octx, const shmap__offer *of,
                      shmap_block **res)
{
  int nin = of->nin, nout = of->nout, rc = 0;
  const shmap__spec *specs = of->specs, *ospec = specs + nin;
  shmap_block **slots = shmap__calloc((size_t)nin + (size_t)nout + 1,
                                      sizeof *slots);
  if (!slots)
    return shmap__dev_fail(octx, "shmap_map_nested", SHMAP_ENOMEM,
                           "out of memory");
  /* The inner map: one more context on this device, a job of one. */
  shmap__runtime *rt = octx->rt;
  shmap__job job = {.mesh = rt->mesh, .body = of->body, .arg = of->arg,
                    .nin = nin, .nout = nout, .manual = of->manual};
  shmap_ctx ictx = {.rt = rt, .job = &job, .comm = octx->comm,
                    .src_wait = octx->src_wait, .dev = octx->dev,
                    .nin = nin, .nout = nout, .seq = octx->seq,
                    .manual = of->manual, .outer = octx,
                    .depth = octx->depth + 1, .host = octx->dev};
  memcpy(ictx.coords, octx->coords, sizeof ictx.coords);
  ictx.in = slots;
  ictx.out = slots + nin;
  job.ctx = &ictx;
  uint64_t nest = nested_enter(&ictx, of);
  bool replicas = shmap__root_ctx(octx)->job->replicas;
  if (!replicas)
    rc = nested_agree_call(&ictx, of);
  for (int k = 0; k < nin && !rc; k++)
    rc = nested_input(&ictx, k, of->in[k], &specs[k]);
  if (!rc)
    rc = nested_body(&ictx, of, replicas);
  for (int k = 0; k < nout && !rc; k++)
    rc = nested_output(&ictx, octx, k, of->out_specs[k], &ospec[k], of->flags,
                       &res[k]);
  /* Back in the outer body: it counts the calls made inside. */
  shmap__nested_fold(octx, &ictx);
  nested_leave(octx, nest);
  if (rc) {
    if (!octx->err)
      octx->err = rc;
    for (int k = 0; k < nout; k++)
      if (res[k]) {
        shmap__arena_free(octx, shmap__arena_find(octx, res[k]));
        res[k] = NULL;
      }
  }
  free(slots);
  return rc;
}
