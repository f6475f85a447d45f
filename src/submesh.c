/* SPDX-License-Identifier: MIT */
/* submesh.c - the geometry of meshes over some devices of another mesh:
 * slices by axis coordinates and new meshes over a list of devices (they
 * are created in map/mesh.c).
 *
 * A sub-mesh is a mesh of its own (its own device threads, its own map
 * lock and statistics) that remembers which devices of its parent, and of
 * the root mesh at the top of the chain, its devices are.  Because it runs
 * its own maps, the slices of one mesh can run different maps at the same
 * time from different threads, which is what a pipeline of stages needs.
 * The device numbers of the root are the physical devices: transfers use
 * them to read a piece from the very device that needs it when it holds
 * one, and a transport that spreads devices over processes places a
 * sub-mesh's device where it placed the root's device rootdev[d]. */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const shmap_mesh *shmap__mesh_root(const shmap_mesh *mesh)
{
  while (mesh->parent)
    mesh = mesh->parent;
  return mesh;
}

int shmap__mesh_rootdev(const shmap_mesh *mesh, int dev)
{
  return mesh->rootdev ? mesh->rootdev[dev] : dev;
}

int shmap__slice_devices(const shmap_mesh *parent, const char *coords,
                         const char *sn[], size_t sl[], int ss[], int **out)
{
  const char *names[SHMAP_MAX_AXES + 1];
  size_t lens[SHMAP_MAX_AXES + 1];
  int vals[SHMAP_MAX_AXES + 1];
  int n = shmap__mesh_parse(coords, names, lens, vals);
  if (n < 0)
    return shmap__err_prefix(n, "shmap_mesh_slice");
  int fixed[SHMAP_MAX_AXES];
  unsigned mask = 0;
  for (int a = 0; a < parent->naxes; a++)
    fixed[a] = -1;
  for (int k = 0; k < n; k++) {
    int a = 0;
    while (a < parent->naxes && (strlen(parent->names[a]) != lens[k] ||
                                 memcmp(parent->names[a], names[k], lens[k])))
      a++;
    if (a == parent->naxes) {
      char list[SHMAP__AXES_MAX];
      shmap__mask_format(parent, shmap__mesh_all(parent), list, sizeof list);
      return shmap__err(SHMAP_EAXIS,
                        "shmap_mesh_slice: \"%.200s\": unknown axis '%.*s' "
                        "(mesh axes: %s)",
                        coords, (int)lens[k], names[k], list);
    }
    if (mask & (1u << a))
      return shmap__err(SHMAP_EAXIS,
                        "shmap_mesh_slice: \"%.200s\": axis '%s' is fixed "
                        "twice", coords, parent->names[a]);
    if (vals[k] < 0 || vals[k] >= parent->sizes[a])
      return shmap__err(SHMAP_EINVAL,
                        "shmap_mesh_slice: \"%.200s\": coordinate %d on axis "
                        "'%s' is out of range [0, %d)",
                        coords, vals[k], parent->names[a], parent->sizes[a]);
    mask |= 1u << a;
    fixed[a] = vals[k];
  }
  int keep[SHMAP_MAX_AXES];
  int m = 0;
  for (int a = 0; a < parent->naxes; a++)
    if (fixed[a] < 0) {
      sn[m] = parent->names[a];
      sl[m] = strlen(parent->names[a]);
      ss[m] = parent->sizes[a];
      keep[m++] = a;
    }
  if (m == 0)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_mesh_slice: \"%.200s\" fixes every axis; a mesh "
                      "needs at least one axis (use shmap_mesh_submesh for "
                      "a mesh of one device)", coords);
  /* The slice's devices in its own row-major order. */
  int ndev = 1;
  for (int k = 0; k < m; k++)
    ndev *= ss[k];
  int *devs = shmap__calloc((size_t)ndev, sizeof *devs);
  if (!devs)
    return shmap__err(SHMAP_ENOMEM, "out of memory creating a sub-mesh");
  for (int d = 0; d < ndev; d++) {
    int id = 0, rest = d;
    for (int k = m - 1; k >= 0; k--) {
      id += rest % ss[k] * parent->strides[keep[k]];
      rest /= ss[k];
    }
    for (int a = 0; a < parent->naxes; a++)
      if (fixed[a] >= 0)
        id += fixed[a] * parent->strides[a];
    devs[d] = id;
  }
  *out = devs;
  return m;
}

int shmap__submesh_check(const shmap_mesh *parent, const char *text,
                         const int devices[], const char *names[],
                         size_t lens[], int sizes[])
{
  int n = shmap__mesh_parse(text, names, lens, sizes);
  if (n < 0)
    return shmap__err_prefix(n, "shmap_mesh_submesh");
  long long ndev = 1;
  for (int k = 0; k < n; k++) {
    if (sizes[k] < 1)
      break; /* shmap__mesh_build reports it */
    ndev *= sizes[k];
    if (ndev > parent->ndev)
      return shmap__err(SHMAP_EINVAL,
                        "shmap_mesh_submesh: mesh \"%.200s\" has more "
                        "devices than its parent (%d)", text, parent->ndev);
  }
  /* Distinct devices of the parent. */
  unsigned char *seen = shmap__calloc((size_t)parent->ndev, 1);
  if (!seen)
    return shmap__err(SHMAP_ENOMEM, "out of memory creating a sub-mesh");
  int rc = 0;
  for (long long d = 0; d < ndev && !rc; d++) {
    int p = devices[d];
    if (p < 0 || p >= parent->ndev)
      rc = shmap__err(SHMAP_EINVAL,
                      "shmap_mesh_submesh: devices[%lld] = %d is not a "
                      "device of the parent mesh [0, %d)",
                      d, p, parent->ndev);
    else if (seen[p]++)
      rc = shmap__err(SHMAP_EINVAL,
                      "shmap_mesh_submesh: device %d of the parent is listed "
                      "twice (devices[%lld])", p, d);
  }
  free(seen);
  return rc ? rc : n;
}

SHMAP_EXTERN shmap_mesh *shmap_mesh_parent(const shmap_mesh *mesh)
{
  if (!mesh) {
    shmap__err(SHMAP_EINVAL, "shmap_mesh_parent: mesh is NULL");
    return NULL;
  }
  return mesh->parent;
}

SHMAP_EXTERN int shmap_mesh_parent_device(const shmap_mesh *mesh, int device)
{
  if (!mesh)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_parent_device: mesh is NULL");
  if (device < 0 || device >= mesh->ndev)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_mesh_parent_device: device %d is out of range "
                      "[0, %d)", device, mesh->ndev);
  return mesh->pdev ? mesh->pdev[device] : device;
}
