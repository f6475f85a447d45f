/* SPDX-License-Identifier: MIT */
/* validate.c - a map's arguments: counts, flags, the caller, the manual
 * axes and the specs; under MPI the agreement of every process on the
 * call, and the inputs' pieces staged from other processes. */
#include "map/map.h"

#include "proc/proc.h"

#include <stdio.h>
#include <stdlib.h>

int shmap__map_check_args(const char *flags_op, const shmap_mesh *mesh,
                          shmap_body_fn body, int nin,
                          shmap_array *const in[],
                          const char *const in_specs[], int nout,
                          shmap_array *out[], const char *const out_specs[],
                          unsigned flags)
{
  int rc = 0;
  if (flags_op && (flags & ~SHMAP_NO_CHECK_REP))
    rc = shmap__err(SHMAP_EINVAL, "%s: unknown flags 0x%x", flags_op, flags);
  if (!mesh)
    return rc ? rc : shmap__err(SHMAP_EINVAL, "shmap_map: mesh is NULL");
  if (rc)
    return rc;
  if (!body)
    return shmap__err(SHMAP_EINVAL, "shmap_map: body is NULL");
  if (nin < 0 || nout < 0)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_map: negative count (nin=%d, nout=%d)", nin, nout);
  if (nin > 0 && (!in || !in_specs))
    return shmap__err(SHMAP_EINVAL, "shmap_map: nin=%d but %s is NULL", nin,
                      in ? "in_specs" : "in");
  if (nout > 0 && (!out || !out_specs))
    return shmap__err(SHMAP_EINVAL, "shmap_map: nout=%d but %s is NULL", nout,
                      out ? "out_specs" : "out");
  return 0;
}

int shmap__map_opts_reserved(const shmap_map_opts *opts)
{
  for (int k = 0; k < (int)(sizeof opts->reserved / sizeof opts->reserved[0]);
       k++)
    if (opts->reserved[k])
      return k;
  return -1;
}

int shmap__map_check_caller(shmap_mesh *mesh, int rc)
{
  unsigned gen = atomic_load(&mesh->rt->forkgen);
  if (gen && gen != shmap__fork_generation() + 1)
    return rc ? rc
              : shmap__err(SHMAP_ESTATE,
                           "shmap_map: the mesh's device threads belong to "
                           "the process that forked this one; create a new "
                           "mesh here");
  shmap_ctx *outer = shmap__current();
  if (outer)
    return rc ? rc
              : shmap__dev_fail(outer, "shmap_map", SHMAP_ESTATE,
                                "called from inside a body; a map inside a "
                                "body is shmap_map_nested, over the outer "
                                "map's free axes");
  return 0;
}

int shmap__map_manual(shmap__job *job, const char *manual_text)
{
  if (!manual_text || !*manual_text)
    return 0;
  int axes[SHMAP_MAX_AXES], n;
  int rc = shmap__axes_parse(job->mesh, "shmap_map_ex: manual_axes",
                             manual_text, axes, &n);
  if (rc == 0 && n > 0) {
    job->manual = 0;
    for (int i = 0; i < n; i++)
      job->manual |= 1u << axes[i];
  }
  return rc;
}

/* The inputs' specs against their arrays; nothing is exchanged yet. */
static int check_inputs(shmap__job *job, const char *const in_specs[])
{
  for (int k = 0; k < job->nin; k++) {
    char what[32];
    snprintf(what, sizeof what, "in_specs[%d]", k);
    const shmap_array *a = job->in[k];
    if (!a)
      return shmap__err(SHMAP_EINVAL, "input %d is NULL", k);
    if (a->mesh && a->mesh != job->mesh)
      return shmap__err(SHMAP_EINVAL,
                        "input %d is sharded on another mesh; move it with "
                        "shmap_array_transfer first", k);
    if (!in_specs[k])
      return shmap__err(SHMAP_EINVAL, "%s is NULL", what);
    shmap__in_info *ii = &job->ins[k];
    int rc = shmap__spec_resolve_manual(job->mesh, job->manual, in_specs[k],
                                        &ii->spec);
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

int shmap__map_check_specs(shmap__job *job, const char *const in_specs[],
                           const char *const out_specs[], shmap__spec *ospec)
{
  int rc = check_inputs(job, in_specs);
  for (int k = 0; rc == 0 && k < job->nout; k++) {
    if (!out_specs[k])
      rc = shmap__err(SHMAP_EINVAL, "out_specs[%d] is NULL", k);
    else if ((rc = shmap__spec_resolve_manual(job->mesh, job->manual,
                                              out_specs[k], &ospec[k])))
      rc = shmap__err_prefix(rc, "out_specs[%d]", k);
  }
  return rc;
}

/* What every process must pass alike to a map, as text (for the
 * agreement between processes, proc.c): counts, flags, manual axes, each
 * input's dtype, shape and spec, each output's spec (resolved, so that
 * spellings of one spec are equal).  NULL when out of memory. */
static char *describe_map(const shmap__job *job, const shmap__spec *ospec,
                          unsigned flags)
{
  const shmap_mesh *mesh = job->mesh;
  size_t n = 256 + ((size_t)job->nin + (size_t)job->nout) * 640;
  char *t = shmap__malloc(n), tmp[400];
  if (!t)
    return NULL;
  shmap__mask_format(mesh, job->manual, tmp, sizeof tmp);
  snprintf(t, n, "nin=%d, nout=%d, flags 0x%x, manual axes %s", job->nin,
           job->nout, flags, tmp);
  for (int k = 0; k < job->nin; k++) {
    const shmap_array *a = job->in[k];
    shmap__shape_format(a->dtype, a->rank, a->shape, tmp, sizeof tmp);
    shmap__cat(t, n, ", in %s ", tmp);
    shmap__spec_format(mesh, &job->ins[k].spec, tmp, sizeof tmp);
    shmap__cat(t, n, "%s", tmp);
  }
  for (int k = 0; k < job->nout; k++) {
    shmap__spec_format(mesh, &ospec[k], tmp, sizeof tmp);
    shmap__cat(t, n, ", out %s", tmp);
  }
  return t;
}

/* Under MPI every process makes this same map, with the same arguments,
 * and accepts it, before anything is exchanged (proc.c). */
int shmap__map_agree(shmap__job *job, const shmap__spec *ospec,
                     unsigned flags, int rc)
{
  shmap_mesh *mesh = job->mesh;
  if (!mesh->place || mesh->place->nproc <= 1)
    return rc;
  char *args = rc ? NULL : describe_map(job, ospec, flags);
  if (rc == 0 && !args)
    rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
  rc = shmap__host_agree_call("shmap_map", mesh, "shmap_map", args, rc);
  free(args);
  return rc;
}

/* Pieces of another layout that other processes hold come over before
 * the devices start (stage.c); every process calls this after the map was
 * agreed on. */
int shmap__map_stage_inputs(shmap__job *job)
{
  for (int k = 0; k < job->nin; k++) {
    char what[32];
    snprintf(what, sizeof what, "in_specs[%d]", k);
    const shmap_array *a = job->in[k];
    shmap__in_info *ii = &job->ins[k];
    int rc;
    if (a->mesh && !ii->borrow && shmap__stage_needed(a, job->mesh) &&
        (rc = shmap__stage(a, job->mesh, &ii->spec, ii->bshape, what,
                           &ii->view)))
      return rc;
  }
  return 0;
}
