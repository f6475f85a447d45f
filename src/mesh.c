/* SPDX-License-Identifier: MIT */
/* mesh.c - the geometry of named device meshes: axis names and sizes,
 * parsing mesh text, device numbers and coordinates, names of devices,
 * queries and statistics.  Creating and destroying a mesh (its device
 * threads, placement and communicator) is map/mesh.c. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool shmap__valid_axis_name(const char *name, size_t len)
{
  if (len == 0 || len >= SHMAP__NAME_MAX)
    return false;
  if (!(isalpha((unsigned char)name[0]) || name[0] == '_'))
    return false;
  for (size_t i = 1; i < len; i++)
    if (!(isalnum((unsigned char)name[i]) || name[i] == '_'))
      return false;
  /* Unquoted None means "unsplit" in a spec, so it cannot name an axis. */
  return !(len == 4 && memcmp(name, "None", 4) == 0);
}

int shmap__mesh_check(int naxes, const char *const names[],
                      const size_t lens[], const int sizes[], const char *src,
                      long long *ndev_out)
{
  char where[160] = "";
  if (src)
    snprintf(where, sizeof where, " in mesh \"%.120s\"", src);
  if (naxes < 1)
    return shmap__err(SHMAP_EINVAL, "a mesh needs at least one axis%s", where);
  if (naxes > SHMAP_MAX_AXES)
    return shmap__err(SHMAP_EINVAL, "a mesh has at most %d axes, got %d%s",
                      SHMAP_MAX_AXES, naxes, where);
  long long ndev = 1;
  for (int a = 0; a < naxes; a++) {
    if (lens[a] == 0)
      return shmap__err(SHMAP_EAXIS, "axis %d has an empty name%s", a, where);
    if (!shmap__valid_axis_name(names[a], lens[a]))
      return shmap__err(SHMAP_EAXIS,
                        "axis name '%.*s' is not valid%s: use an identifier "
                        "(letters, digits, '_'; not None) of at most %d "
                        "characters",
                        (int)(lens[a] > 64 ? 64 : lens[a]), names[a], where,
                        SHMAP__NAME_MAX - 1);
    for (int b = 0; b < a; b++)
      if (lens[a] == lens[b] && memcmp(names[a], names[b], lens[a]) == 0)
        return shmap__err(SHMAP_EAXIS, "duplicate axis name '%.*s'%s",
                          (int)lens[a], names[a], where);
    if (sizes[a] < 1)
      return shmap__err(SHMAP_EINVAL, "axis '%.*s' has size %d%s; sizes must be >= 1",
                        (int)lens[a], names[a], sizes[a], where);
    ndev *= sizes[a];
    if (ndev > SHMAP_MAX_DEVICES)
      return shmap__err(SHMAP_EINVAL,
                        "mesh has more than %d devices (at axis '%.*s')%s",
                        SHMAP_MAX_DEVICES, (int)lens[a], names[a], where);
  }
  *ndev_out = ndev;
  return 0;
}

void shmap__mesh_fill(shmap_mesh *m, int naxes, const char *const names[],
                      const size_t lens[], const int sizes[], int ndev)
{
  m->naxes = naxes;
  m->ndev = ndev;
  for (int a = 0; a < naxes; a++) {
    memcpy(m->names[a], names[a], lens[a]);
    m->names[a][lens[a]] = '\0';
    m->sizes[a] = sizes[a];
  }
  int stride = 1;
  for (int a = naxes - 1; a >= 0; a--) {
    m->strides[a] = stride;
    stride *= m->sizes[a];
  }
  atomic_init(&m->refs, 1);
}

static int syntax(const char *text, const char *p, const char *what)
{
  return shmap__err(SHMAP_ESYNTAX,
                    "mesh \"%.200s\": syntax error at column %d: %s "
                    "(expected text such as \"i=4, j=2\")",
                    text, (int)(p - text) + 1, what);
}

int shmap__mesh_parse(const char *text, const char *names[], size_t lens[],
                      int sizes[])
{
  int n = 0;
  const char *p = text;
  while (isspace((unsigned char)*p))
    p++;
  if (*p == '\0')
    return shmap__err(SHMAP_EINVAL, "mesh \"%s\" has no axes", text);
  for (;;) {
    while (isspace((unsigned char)*p))
      p++;
    const char *name = p;
    while (isalnum((unsigned char)*p) || *p == '_')
      p++;
    size_t len = (size_t)(p - name);
    while (isspace((unsigned char)*p))
      p++;
    if (*p != '=')
      return syntax(text, p, len ? "expected '=' after the axis name"
                                 : "expected an axis name");
    if (len == 0)
      return shmap__err(SHMAP_EAXIS, "mesh \"%.200s\": axis at column %d has an empty name",
                        text, (int)(name - text) + 1);
    p++;
    while (isspace((unsigned char)*p))
      p++;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || (*p != '-' && !isdigit((unsigned char)*p)))
      return syntax(text, p, "expected an integer size");
    if (errno == ERANGE || v > INT_MAX || v < INT_MIN)
      v = v > 0 ? INT_MAX : 0;
    p = end;
    if (n == SHMAP_MAX_AXES)
      return shmap__err(SHMAP_EINVAL, "mesh \"%.200s\": a mesh has at most %d axes",
                        text, SHMAP_MAX_AXES);
    names[n] = name;
    lens[n] = len;
    sizes[n] = (int)v;
    n++;
    while (isspace((unsigned char)*p))
      p++;
    if (*p == '\0')
      return n;
    if (*p != ',')
      return syntax(text, p, "expected ',' between axes");
    p++;
  }
}

void shmap__mesh_retain(shmap_mesh *mesh) { atomic_fetch_add(&mesh->refs, 1); }

/* The last reference tears the mesh down through the hook its creator
 * set (map/mesh.c): the device threads, the placement and the
 * communicator are above this file. */
int shmap__mesh_release(shmap_mesh *mesh)
{
  if (atomic_fetch_sub(&mesh->refs, 1) != 1)
    return 0;
  return mesh->destroy ? mesh->destroy(mesh) : 0;
}

/* The counters have a lock of their own, the last in the lock order (see
 * runtime/debug.c), held for a few additions: they can be read and reset from
 * any thread, a body of the mesh included, while maps run. */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

void shmap__mesh_stats_add(shmap_mesh *mesh, const shmap_stats *d)
{
  pthread_mutex_lock(&stats_lock);
  shmap_stats *s = &mesh->stats;
  s->maps += d->maps;
  s->blocks_shared += d->blocks_shared;
  s->blocks_built += d->blocks_built;
  s->bytes_host += d->bytes_host;
  s->bytes_local += d->bytes_local;
  s->bytes_moved += d->bytes_moved;
  s->bytes_remote += d->bytes_remote;
  pthread_mutex_unlock(&stats_lock);
}

SHMAP_EXTERN int shmap_mesh_stats(const shmap_mesh *mesh, shmap_stats *stats)
{
  if (!mesh || !stats)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_stats: NULL argument");
  pthread_mutex_lock(&stats_lock);
  *stats = mesh->stats;
  pthread_mutex_unlock(&stats_lock);
  return 0;
}

SHMAP_EXTERN void shmap_mesh_stats_reset(shmap_mesh *mesh)
{
  if (!mesh)
    return;
  pthread_mutex_lock(&stats_lock);
  memset(&mesh->stats, 0, sizeof mesh->stats);
  pthread_mutex_unlock(&stats_lock);
}

SHMAP_EXTERN int shmap_mesh_naxes(const shmap_mesh *mesh)
{
  return mesh ? mesh->naxes : shmap__err(SHMAP_EINVAL, "mesh is NULL");
}

SHMAP_EXTERN int shmap_mesh_ndevices(const shmap_mesh *mesh)
{
  return mesh ? mesh->ndev : shmap__err(SHMAP_EINVAL, "mesh is NULL");
}

SHMAP_EXTERN const char *shmap_mesh_axis_name(const shmap_mesh *mesh, int axis)
{
  if (!mesh || axis < 0 || axis >= mesh->naxes) {
    shmap__err(SHMAP_EINVAL, "axis number %d is out of range", axis);
    return NULL;
  }
  return mesh->names[axis];
}

SHMAP_EXTERN int shmap_mesh_axis_size(const shmap_mesh *mesh, int axis)
{
  if (!mesh)
    return shmap__err(SHMAP_EINVAL, "mesh is NULL");
  if (axis < 0 || axis >= mesh->naxes)
    return shmap__err(SHMAP_EINVAL, "axis number %d is out of range [0, %d)",
                      axis, mesh->naxes);
  return mesh->sizes[axis];
}

SHMAP_EXTERN int shmap_mesh_axis_find(const shmap_mesh *mesh, const char *name)
{
  if (!mesh || !name)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_axis_find: NULL argument");
  for (int a = 0; a < mesh->naxes; a++)
    if (strcmp(mesh->names[a], name) == 0)
      return a;
  return shmap__err(SHMAP_EAXIS, "unknown axis '%.64s'", name);
}

void shmap__mesh_coords(const shmap_mesh *mesh, int dev, int coords[])
{
  for (int a = 0; a < mesh->naxes; a++)
    coords[a] = dev / mesh->strides[a] % mesh->sizes[a];
}

SHMAP_EXTERN int shmap_mesh_device_coords(const shmap_mesh *mesh, int device,
                                          int coords[])
{
  if (!mesh || !coords)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_device_coords: NULL argument");
  if (device < 0 || device >= mesh->ndev)
    return shmap__err(SHMAP_EINVAL, "device %d is out of range [0, %d)",
                      device, mesh->ndev);
  shmap__mesh_coords(mesh, device, coords);
  return 0;
}

SHMAP_EXTERN int shmap_mesh_device_id(const shmap_mesh *mesh, const int coords[])
{
  if (!mesh || !coords)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_device_id: NULL argument");
  int dev = 0;
  for (int a = 0; a < mesh->naxes; a++) {
    if (coords[a] < 0 || coords[a] >= mesh->sizes[a])
      return shmap__err(SHMAP_EINVAL,
                        "coordinate %d on axis '%s' is out of range [0, %d)",
                        coords[a], mesh->names[a], mesh->sizes[a]);
    dev += coords[a] * mesh->strides[a];
  }
  return dev;
}

void shmap__mesh_devname(const shmap_mesh *mesh, int dev, char *buf, size_t n)
{
  int c[SHMAP_MAX_AXES];
  shmap__mesh_coords(mesh, dev, c);
  snprintf(buf, n, "device %d (", dev);
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(buf, n, "%s%s=%d", a ? ", " : "", mesh->names[a], c[a]);
  /* Where the device runs, when its placement says (proc.h). */
  char where[SHMAP__WHERE_MAX] = "";
  if (mesh->where)
    mesh->where(mesh, dev, where, sizeof where);
  shmap__cat(buf, n, ")%s", where);
}
