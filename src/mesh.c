/* SPDX-License-Identifier: MIT */
/* mesh.c - named device meshes: creation from text or arrays, queries. */
#include "internal.h"
#include "map/map.h"
#include "proc/proc.h"
#include "sched/runtime.h"
#include "transport/comm.h"

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

/* The checks of a new mesh's axes: 0, or an error with the message set;
 * *ndev_out gets the device count. */
static int mesh_check(int naxes, const char *const names[],
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
  int rc = mesh_check(naxes, names, lens, sizes, src, &ndev);
  if (rc)
    return parent ? rc : shmap__mesh_rejected(rc);
  shmap_mesh *m = shmap__calloc(1, sizeof *m);
  if (!m)
    return shmap__err(SHMAP_ENOMEM, "out of memory creating a mesh");
  m->naxes = naxes;
  m->ndev = (int)ndev;
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
  m->serial = atomic_fetch_add(&serials, 1) + 1;
  /* A sub-mesh's devices run where its parent's devices run. */
  rc = parent ? shmap__place_sub(m, parent, pdev) : shmap__place_default(m);
  if (rc == 0 && (rc = shmap__runtime_create(&m->rt, m)) == 0 &&
      (rc = shmap__comm_mesh_init(m->rt)))
    shmap__runtime_destroy(m->rt);
  if (rc) {
    shmap__place_free(m->place);
    free(m);
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

void shmap__mesh_retain(shmap_mesh *mesh) { atomic_fetch_add(&mesh->refs, 1); }

int shmap__mesh_release(shmap_mesh *mesh)
{
  int rc = 0;
  if (atomic_fetch_sub(&mesh->refs, 1) == 1) {
    rc = shmap__comm_mesh_free(mesh->rt);
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
  }
  return rc;
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
  char where[128];
  shmap__proc_suffix(mesh, dev, where, sizeof where);
  shmap__cat(buf, n, ")%s", where);
}
