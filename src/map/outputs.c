/* SPDX-License-Identifier: MIT */
/* outputs.c - a map's outputs: every device declared the same blocks, the
 * blocks are replicated along the axes their specs leave out (or, not
 * checked, the copy at coordinate 0 is taken), and each output becomes a
 * sharded array that keeps the devices' blocks. */
#include "map/map.h"

#include "dtype.h"
#include "proc/proc.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void shmap__format_index(int rank, const int64_t shape[], int64_t flat,
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

int64_t shmap__rep_differs(const shmap_block *b, const void *a, const void *x,
                           char *buf, size_t n)
{
  size_t bytes = shmap_block_nbytes(b);
  if (bytes == 0 || memcmp(a, x, bytes) == 0)
    return -1;
  int64_t es = (int64_t)shmap_dtype_size(b->dtype), i = 0;
  const char *pa = a, *px = x;
  while (memcmp(pa + i * es, px + i * es, (size_t)es) == 0)
    i++;
  char va[64], vx[64], idx[SHMAP__SHAPE_MAX];
  shmap__dtype_format(b->dtype, pa + i * es, va, sizeof va);
  shmap__dtype_format(b->dtype, px + i * es, vx, sizeof vx);
  shmap__format_index(b->rank, b->shape, i, idx, sizeof idx);
  snprintf(buf, n, "%s: %s vs %s", idx, va, vx);
  return i;
}

/* An out spec no longer than output k's rank. */
static int check_spec_rank(int k, const char *text, const shmap__spec *spec,
                           const shmap_block *b0)
{
  if (spec->ndims <= b0->rank)
    return 0;
  char s0[SHMAP__SHAPE_MAX];
  shmap__shape_format(b0->dtype, b0->rank, b0->shape, s0, sizeof s0);
  return shmap__err(SHMAP_ESHAPE,
                    "out_specs[%d] \"%.200s\" has length %d but output %d has "
                    "rank %d (blocks are %s)",
                    k, text, spec->ndims, k, b0->rank, s0);
}

/* Output k: every device of this process declared it alike; *first: the
 * first device that did. */
static int check_output(shmap__job *job, int k, int *first)
{
  shmap_mesh *mesh = job->mesh;
  *first = -1;
  for (int d = 0; d < mesh->ndev && *first < 0; d++)
    if (job->ctx[d].out[k] && shmap__dev_local(mesh, d))
      *first = d;
  if (*first < 0)
    return shmap__err(SHMAP_EINVAL,
                      "output %d was not declared by any device (the map "
                      "has %d outputs; declare each with shmap_out)",
                      k, job->nout);
  const shmap_block *b0 = job->ctx[*first].out[k];
  char n0[SHMAP__DEVNAME_MAX], s0[SHMAP__SHAPE_MAX];
  shmap__mesh_devname(mesh, *first, n0, sizeof n0);
  shmap__shape_format(b0->dtype, b0->rank, b0->shape, s0, sizeof s0);
  for (int d = 0; d < mesh->ndev; d++) {
    if (!shmap__dev_local(mesh, d))
      continue;
    const shmap_block *b = job->ctx[d].out[k];
    char nd[SHMAP__DEVNAME_MAX];
    shmap__mesh_devname(mesh, d, nd, sizeof nd);
    if (!b)
      return shmap__err(SHMAP_EMISMATCH,
                        "output %d: %s declared %s but %s declared no "
                        "output %d",
                        k, n0, s0, nd, k);
    if (b->dtype != b0->dtype || b->rank != b0->rank ||
        memcmp(b->shape, b0->shape, (size_t)b->rank * sizeof b->shape[0])) {
      char sd[SHMAP__SHAPE_MAX];
      shmap__shape_format(b->dtype, b->rank, b->shape, sd, sizeof sd);
      return shmap__err(SHMAP_EMISMATCH,
                        "output %d: %s returned %s but %s returned %s", k,
                        n0, s0, nd, sd);
    }
  }
  return 0;
}

/* Outputs: every device declared the same count, dtypes and shapes. */
static int check_outputs(shmap__job *job, const char *const out_specs[],
                         const shmap__spec *ospec)
{
  for (int k = 0; k < job->nout; k++) {
    int first, rc;
    if ((rc = check_output(job, k, &first)) ||
        (rc = check_spec_rank(k, out_specs[k], &ospec[k],
                              job->ctx[first].out[k])))
      return rc;
  }
  return 0;
}

/* Devices along free axes ran the same body on the same blocks; only the
 * manual axes the spec leaves out are promised equal by the body. */
static unsigned rep_mask(const shmap__job *job, const shmap__spec *spec)
{
  return shmap__spec_axes_mask(spec) |
         (shmap__mesh_all(job->mesh) & ~job->manual);
}

/* repdata[d]: the block of d's representative as this process has it
 * (under MPI possibly a copy received from another process), for every
 * device d of this process.  *bad: the first device whose block differs. */
static int check_replicated(shmap__job *job, int k, const char *spec_text,
                            const shmap__spec *spec,
                            const void *const repdata[], int *bad)
{
  shmap_mesh *mesh = job->mesh;
  unsigned mask = rep_mask(job, spec);
  for (int d = 0; d < mesh->ndev; d++) {
    int rep = shmap__representative(mesh, mask, d);
    if (rep == d || !shmap__dev_local(mesh, d))
      continue;
    const shmap_block *b = job->ctx[d].out[k];
    char diff[SHMAP__SHAPE_MAX + 160];
    if (shmap__rep_differs(b, repdata[d], b->data, diff, sizeof diff) < 0)
      continue;
    *bad = d;
    char na[SHMAP__DEVNAME_MAX], nb[SHMAP__DEVNAME_MAX], axes[SHMAP__AXES_MAX];
    shmap__mesh_devname(mesh, rep, na, sizeof na);
    shmap__mesh_devname(mesh, d, nb, sizeof nb);
    unsigned left = shmap__mesh_all(mesh) & ~mask;
    shmap__mask_format(mesh, left, axes, sizeof axes);
    return shmap__err(SHMAP_EREPLICATION,
                      "output %d with out_specs[%d] \"%.200s\" is not "
                      "replicated along %s %s, which the spec leaves out: %s "
                      "and %s differ at block element %s (name the "
                      "axis in the out spec, or pass SHMAP_NO_CHECK_REP to use "
                      "the block at coordinate 0)",
                      k, k, spec_text, left & (left - 1) ? "axes" : "axis",
                      axes, na, nb, diff);
  }
  return 0;
}

/* A new sharded array of output k's shape, without blocks yet. */
static int output_array(shmap__job *job, int k, const shmap__spec *spec,
                        const shmap_block *b0, shmap_array **res)
{
  shmap_mesh *mesh = job->mesh;
  int64_t gshape[SHMAP_MAX_RANK];
  char what[32];
  snprintf(what, sizeof what, "output %d", k);
  int rc = shmap__global_shape(what, mesh, spec, b0->rank, b0->shape, gshape);
  if (rc == 0)
    rc = shmap__check_shape(what, b0->dtype, b0->rank, gshape);
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
  *res = a;
  return 0;
}

/* Output k becomes a sharded array that keeps each device's block. */
static int adopt_output(shmap__job *job, int k, const shmap__spec *spec,
                        const shmap_block *b0, const void *const repdata[],
                        shmap_array **res)
{
  shmap_mesh *mesh = job->mesh;
  shmap_array *a = NULL;
  int rc = output_array(job, k, spec, b0, &a);
  if (rc)
    return rc;
  for (int d = 0; d < mesh->ndev; d++) {
    shmap_ctx *ctx = &job->ctx[d];
    if (!shmap__dev_local(mesh, d)) {
      /* Another process keeps this block: only its description here. */
      a->blocks[d] = *b0;
      a->blocks[d].data = NULL;
      continue;
    }
    shmap__chunk *c = shmap__arena_find(ctx, ctx->out[k]);
    shmap__arena_unlink(ctx, c);
    c = shmap__arena_settle(ctx, c);
    a->mem[d] = c;
    a->blocks[d] = c->block;
  }
  /* Unchecked outputs: the copy at coordinate 0 of the unnamed axes is the
   * value, so every holder gets that copy (repdata, also from other
   * processes). */
  if (repdata) {
    size_t bytes = shmap_block_nbytes(b0);
    for (int d = 0; d < mesh->ndev; d++)
      if (a->blocks[d].data && repdata[d] && repdata[d] != a->blocks[d].data)
        memcpy(a->blocks[d].data, repdata[d], bytes);
  }
  *res = a;
  return 0;
}

/* Output k: the replication check (or, unchecked, the copy at coordinate
 * 0 for every holder), then the sharded array.  b0 describes every
 * device's block.  Under MPI every process calls this with the same
 * arguments and returns the same result. */
static int finish_output(shmap__job *job, int k, const char *spec_text,
                         const shmap__spec *spec, unsigned flags,
                         const shmap_block *b0, shmap_array **res)
{
  shmap_mesh *mesh = job->mesh;
  bool multi = mesh->place && mesh->place->nproc > 1;
  bool check = !(flags & (SHMAP_NO_CHECK_REP | SHMAP__TRUSTED_REP));
  bool copy = (flags & SHMAP_NO_CHECK_REP) && !(flags & SHMAP__TRUSTED_REP);
  if (!check && !copy)
    return adopt_output(job, k, spec, b0, NULL, res);
  const void **data = shmap__calloc((size_t)mesh->ndev * 2, sizeof *data);
  if (!data) {
    /* Under MPI the others would wait for this process: stop instead. */
    if (multi)
      abort();
    return shmap__err(SHMAP_ENOMEM, "out of memory checking output %d", k);
  }
  const void **repdata = data + mesh->ndev;
  for (int d = 0; d < mesh->ndev; d++)
    if (shmap__dev_local(mesh, d))
      data[d] = job->ctx[d].out[k]->data;
  void *owned = NULL;
  uint64_t received = 0;
  int rc = shmap__proc_rep_blocks(mesh, rep_mask(job, spec), data,
                                  shmap_block_nbytes(b0), repdata, &owned,
                                  &received);
  mesh->stats.bytes_remote += received; /* the runtime lock is held */
  if (rc == 0 && check) {
    int bad = -1;
    rc = check_replicated(job, k, spec_text, spec, repdata, &bad);
    if (multi)
      rc = shmap__proc_agree_first(mesh, bad, rc);
  }
  if (rc == 0)
    rc = adopt_output(job, k, spec, b0, copy ? repdata : NULL, res);
  free(owned);
  free(data);
  return rc;
}

/* Every device's block description into b0[]: this process's first
 * device's, compared with the other processes' under MPI (spmd.c). */
static int describe_outputs(shmap__job *job, const char *const out_specs[],
                            const shmap__spec *ospec, shmap_block b0[])
{
  shmap_mesh *mesh = job->mesh;
  const shmap__place *pl = mesh->place;
  int nout = job->nout;
  if (!pl || pl->nproc <= 1) {
    for (int k = 0; k < nout; k++)
      b0[k] = *job->ctx[0].out[k];
    return 0;
  }
  if (nout == 0)
    return 0; /* nothing to describe, nothing to exchange */
  const shmap_block **tab =
      shmap__calloc((size_t)mesh->ndev * (size_t)nout + 1, sizeof *tab);
  if (!tab)
    abort(); /* the others would wait for this process */
  for (int i = 0; i < pl->nlocal; i++)
    for (int k = 0; k < nout; k++)
      tab[(size_t)pl->local[i] * (size_t)nout + (size_t)k] =
          job->ctx[pl->local[i]].out[k];
  int rc = shmap__proc_outputs(mesh, nout, tab, b0);
  free(tab);
  for (int k = 0; k < nout && rc == 0; k++)
    rc = check_spec_rank(k, out_specs[k], &ospec[k], &b0[k]);
  return rc;
}

int shmap__map_outputs(shmap__job *job, const char *const out_specs[],
                       const shmap__spec *ospec, unsigned flags,
                       shmap_array *res[], int rc)
{
  shmap_mesh *mesh = job->mesh;
  /* Under MPI a process may run no device of a sub-mesh: the others
   * check. */
  bool multi = mesh->place && mesh->place->nproc > 1;
  if (rc == 0 && !multi)
    rc = check_outputs(job, out_specs, ospec);
  /* Every process of the job returns the same result (proc.c). */
  if ((rc = shmap__comm_verdict(&job->comm, rc)))
    return rc;
  int nout = job->nout;
  shmap_block b0_local[4], *b0 = b0_local;
  if (nout > 4 && !(b0 = shmap__calloc((size_t)nout + 1, sizeof *b0))) {
    if (multi)
      abort(); /* the others would wait for this process */
    return shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
  }
  rc = describe_outputs(job, out_specs, ospec, b0);
  for (int k = 0; k < nout && rc == 0; k++)
    rc = finish_output(job, k, out_specs[k], &ospec[k], flags, &b0[k],
                       &res[k]);
  if (b0 != b0_local)
    free(b0);
  return rc;
}
