/* SPDX-License-Identifier: MIT */
/* mesh.c - a mesh's life: creating one (its placement over processes, its
 * communicator, its device threads, and under MPI the agreement of every
 * process on it), sub-meshes of it, and its end.  The geometry is the
 * base's (src/mesh.c, src/submesh.c). */
#include "internal.h"
#include "debug/debug.h"
#include "device/device.h"
#include "proc/proc.h"
#include "sched/runtime.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Serial numbers of meshes, the same in every process (meshes are created
 * in the same order everywhere). */
static _Atomic int serials;

int shmap__mesh_rejected(int rc)
{
  /* Under MPI the processes agree on each new mesh before it gets its
   * communicator (transport/mpi.c): a process that rejects its arguments
   * joins that agreement with its verdict, so that every process fails
   * with its reason instead of waiting for it, and takes the serial number
   * the mesh would have had, so that later calls' descriptions still
   * match.  (The message is kept across shmap__proc_init, which may set
   * its own.) */
  char msg[SHMAP__MSG_MAX];
  snprintf(msg, sizeof msg, "%s", shmap__errbuf());
  if (shmap__proc_init() != 0)
    return shmap__err(rc, "%s", msg);
  const shmap__proc *me = shmap__proc_self();
  shmap__err(rc, "%s", msg);
  if (!me->mpi || me->size < 2)
    return rc;
  atomic_fetch_add(&serials, 1);
  return shmap__host_agree_call("shmap_mesh_create", NULL, "creating a mesh",
                                NULL, rc);
}

/* A mesh that failed after its serial number was taken and before its
 * transport took part in the agreement on it: join that agreement with
 * this verdict. */
static int refused(int rc)
{
  const shmap__proc *me = shmap__proc_self();
  if (!me->mpi || me->size < 2)
    return rc;
  return shmap__host_agree_call("shmap_mesh_create", NULL, "creating a mesh",
                                NULL, rc);
}

/* The same for a sub-mesh of parent, which spans the processes its parent
 * does; with `serial`, one that failed before taking its serial number
 * takes it now, so that the processes' numbers stay equal.  The others'
 * agreement describes the sub-mesh as a mesh being created (its parent
 * is attached once it is built), and so does this. */
static int refused_sub(const shmap_mesh *parent, bool serial, int rc)
{
  if (!parent->place || parent->place->nproc < 2)
    return rc;
  if (serial)
    atomic_fetch_add(&serials, 1);
  return shmap__host_agree_call("shmap_mesh_create", NULL, "creating a mesh",
                                NULL, rc);
}

/* The teardown of a mesh whose last reference went (shmap__mesh_release):
 * 0, or the error of the release over processes (transport/mpi.h). */
static int mesh_free(shmap_mesh *mesh)
{
  /* The transport first: between processes it drains the mesh's
   * communicator, which the runtime's devices no longer use. */
  int rc = shmap__comm_mesh_free(mesh->rt);
  shmap__runtime_destroy(mesh->rt);
  shmap__place_free(mesh->place);
  shmap_mesh *parent = mesh->parent;
  free(mesh->pdev);
  free(mesh->rootdev);
  free(mesh);
  if (parent) {
    int prc = shmap__mesh_release(parent);
    rc = rc ? rc : prc;
  }
  return rc;
}

/* Validates and builds; names need not be NUL-terminated (lens given). */
int shmap__mesh_build(shmap_mesh **out, int naxes, const char *const names[],
                      const size_t lens[], const int sizes[], const char *src)
{
  return shmap__mesh_build_over(out, naxes, names, lens, sizes, src, NULL,
                                NULL);
}

int shmap__mesh_build_over(shmap_mesh **out, int naxes,
                           const char *const names[], const size_t lens[],
                           const int sizes[], const char *src,
                           const shmap_mesh *parent, const int pdev[])
{
  long long ndev = 0;
  int rc = shmap__mesh_check(naxes, names, lens, sizes, src, &ndev);
  if (rc)
    return parent ? rc : shmap__mesh_rejected(rc);
  shmap_mesh *m = shmap__calloc(1, sizeof *m);
  if (!m) {
    rc = shmap__err(SHMAP_ENOMEM, "out of memory creating a mesh");
    return parent ? refused_sub(parent, true, rc) : shmap__mesh_rejected(rc);
  }
  shmap__mesh_fill(m, naxes, names, lens, sizes, (int)ndev);
  /* The base names devices and frees the mesh through these. */
  m->where = shmap__proc_suffix;
  m->destroy = mesh_free;
  m->serial = atomic_fetch_add(&serials, 1) + 1;
  /* A sub-mesh's devices run where its parent's devices run. */
  rc = parent ? shmap__place_sub(m, parent, pdev) : shmap__place_default(m);
  shmap__debug_init();
  /* The runtime first: the transport keeps its state in it.  The
   * transport's start takes part in the agreement on the mesh (under MPI),
   * whatever happens.  A failure before it that every process makes
   * alike (a placement the processes cannot share) returns at once
   * everywhere; one of this process alone (out of memory) joins that
   * agreement here, since the others wait for this process there. */
  bool agreed = false;
  if (rc == 0 && (rc = shmap__runtime_create(&m->rt, m)) == 0) {
    agreed = true;
    if ((rc = shmap__comm_mesh_init(m->rt)))
      shmap__runtime_destroy(m->rt);
  }
  if (rc) {
    shmap__place_free(m->place);
    free(m);
    if (!agreed && rc == SHMAP_ENOMEM)
      rc = parent ? refused_sub(parent, false, rc) : refused(rc);
    return rc;
  }
  *out = m;
  return 0;
}

SHMAP_EXTERN int shmap_mesh_create_axes(shmap_mesh **mesh, int naxes,
                                        const char *const names[],
                                        const int sizes[])
{
  if (!mesh || (naxes > 0 && (!names || !sizes)))
    return shmap__mesh_rejected(
        shmap__err(SHMAP_EINVAL, "shmap_mesh_create_axes: NULL argument"));
  if (naxes > SHMAP_MAX_AXES || naxes < 1)
    return shmap__mesh_build(mesh, naxes, NULL, NULL, NULL, NULL);
  size_t lens[SHMAP_MAX_AXES];
  for (int a = 0; a < naxes; a++) {
    if (!names[a])
      return shmap__mesh_rejected(shmap__err(
          SHMAP_EINVAL, "shmap_mesh_create_axes: names[%d] is NULL", a));
    lens[a] = strlen(names[a]);
  }
  return shmap__mesh_build(mesh, naxes, names, lens, sizes, NULL);
}

SHMAP_EXTERN int shmap_mesh_create(shmap_mesh **mesh, const char *text)
{
  if (!mesh || !text)
    return shmap__mesh_rejected(
        shmap__err(SHMAP_EINVAL, "shmap_mesh_create: NULL argument"));
  const char *names[SHMAP_MAX_AXES + 1];
  size_t lens[SHMAP_MAX_AXES + 1];
  int sizes[SHMAP_MAX_AXES + 1];
  int n = shmap__mesh_parse(text, names, lens, sizes);
  if (n < 0)
    return shmap__mesh_rejected(n);
  return shmap__mesh_build(mesh, n, names, lens, sizes, text);
}

/* Sharded arrays hold references: the threads stop when the last of them
 * and the user's handle are gone. */
SHMAP_EXTERN int shmap_mesh_destroy(shmap_mesh *mesh)
{
  if (!mesh)
    return 0;
  /* A body would stop the threads its own map runs on: refuse, and fail
   * the map, as a nested map does.  (The map holds a reference of its own,
   * so a destroy from another thread only takes effect when it returns.) */
  shmap_ctx *ctx = shmap__current();
  bool own = false;
  for (shmap_ctx *c = ctx; c; c = c->outer)
    own = own || c->rt->mesh == mesh;
  if (own)
    return shmap__dev_fail(ctx, "shmap_mesh_destroy", SHMAP_ESTATE,
                           "called from inside a body of a map on this mesh; "
                           "destroy the mesh after the map returns");
  return shmap__mesh_release(mesh);
}

/* ---- sub-meshes (their geometry is src/submesh.c) -------------------------- */

/* Attach a freshly built mesh to its parent over the parent's devices
 * pdev[] (taken over). */
static void attach(shmap_mesh *sub, shmap_mesh *parent, int *pdev, int *root)
{
  for (int d = 0; d < sub->ndev; d++)
    root[d] = shmap__mesh_rootdev(parent, pdev[d]);
  sub->pdev = pdev;
  sub->rootdev = root;
  sub->parent = parent;
  shmap__mesh_retain(parent);
}

static int build_over(shmap_mesh **out, shmap_mesh *parent, int naxes,
                      const char *const names[], const size_t lens[],
                      const int sizes[], const char *src, const int devs[])
{
  /* The tables first: once the processes agreed on the sub-mesh, this one
   * could not drop it alone (its release is collective). */
  size_t ndev = 1;
  for (int a = 0; a < naxes; a++)
    ndev *= (size_t)sizes[a];
  int *pdev = shmap__calloc(ndev, sizeof *pdev);
  int *root = shmap__calloc(ndev, sizeof *root);
  if (!pdev || !root) {
    free(pdev);
    free(root);
    return refused_sub(parent, true,
                       shmap__err(SHMAP_ENOMEM,
                                  "out of memory creating a sub-mesh"));
  }
  shmap_mesh *sub;
  int rc = shmap__mesh_build_over(&sub, naxes, names, lens, sizes, src,
                                  parent, devs);
  if (rc) {
    free(pdev);
    free(root);
    return rc;
  }
  memcpy(pdev, devs, (size_t)sub->ndev * sizeof *pdev);
  attach(sub, parent, pdev, root);
  *out = sub;
  return 0;
}

/* coords text: "stage=1" or "stage=1, data=0". */
SHMAP_EXTERN int shmap_mesh_slice(shmap_mesh **sub, shmap_mesh *parent,
                                  const char *coords)
{
  if (sub)
    *sub = NULL;
  if (!sub || !parent || !coords)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_slice: NULL argument");
  const char *sn[SHMAP_MAX_AXES];
  size_t sl[SHMAP_MAX_AXES];
  int ss[SHMAP_MAX_AXES], *devs;
  int m = shmap__slice_devices(parent, coords, sn, sl, ss, &devs);
  if (m < 0) /* out of memory here: the others wait in the agreement */
    return m == SHMAP_ENOMEM ? refused_sub(parent, true, m) : m;
  int rc = build_over(sub, parent, m, sn, sl, ss, NULL, devs);
  free(devs);
  return rc;
}

SHMAP_EXTERN int shmap_mesh_submesh(shmap_mesh **sub, shmap_mesh *parent,
                                    const char *text, const int devices[])
{
  if (sub)
    *sub = NULL;
  if (!sub || !parent || !text || !devices)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_submesh: NULL argument");
  const char *names[SHMAP_MAX_AXES + 1];
  size_t lens[SHMAP_MAX_AXES + 1];
  int sizes[SHMAP_MAX_AXES + 1];
  int n = shmap__submesh_check(parent, text, devices, names, lens, sizes);
  if (n < 0) /* out of memory here: the others wait in the agreement */
    return n == SHMAP_ENOMEM ? refused_sub(parent, true, n) : n;
  return build_over(sub, parent, n, names, lens, sizes, text, devices);
}
