/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_allocfail.c - one process runs out of memory in a map over
 * processes.  The last process makes its k-th library allocation from
 * now fail (shmap__test_fail_alloc, any thread of it: its devices, its
 * workers, its progress helper), for k = 1, 2, ..., and every process
 * runs the same map of collectives; the walk ends at the first k past the
 * map's last allocation.  For every k:
 *
 *   - the map ends in every process (no hang: the alarm, and run.sh's
 *     timeout);
 *   - every process returns the same code and the same message;
 *   - with the failure injected, the code is SHMAP_ENOMEM and the message
 *     says "out of memory", or the map succeeds with every value right (a
 *     failure the library absorbs, by going without a cache);
 *   - without it, the map succeeds with every value right;
 *   - the same map, run again at once without injection, succeeds with
 *     every value right: nothing was left half done, in any process.
 *
 * Four walks: a later map on a mesh that has run one (the transport's
 * buffers and records exist; what a call allocates), the first map of a
 * fresh mesh (threads or fibers started, the transport's per-map and
 * per-device state allocated), the creation of a mesh (its placement,
 * runtime and communicator: every process gets the same code, and a mesh
 * only when all made theirs, on which a map then works) and that of a
 * sub-mesh (the same, and the next sub-mesh is made).
 * The map, on "i=R,j=2": repeated
 * small psums over "i" (one device per process in each group: records
 * of repeated calls), a psum over "i,j" (a group spread over the
 * processes, two members in each: the leaders' exchange), a psum over
 * "j" (within a process), all_gather, ppermute and psum_scatter over
 * "i", and in the later map a psum of 64 KiB over "i" (arrive, data and
 * depart).  Not in the first map: a large call's buffers for the other
 * processes' terms are allocated once its members have agreed (and kept
 * for later calls), and a failure to move data after that agreement
 * ends the job with its message (transport/comm.h: no failure releases a
 * wait for data), which a test cannot take part in.  The scheduling mode
 * is SHMAP_SCHED's (run.sh runs both).
 */
#include <shmap.h>

#include "internal.h"

#include "expect.h"
#include "mpiutil.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SMALL 64       /* f32 elements: 256 bytes */
#define LARGE 16384    /* f32 elements: 64 KiB */
#define MAX_K 20000    /* no map here makes nearly this many allocations */

static int R;
/* Whether the maps make the psum of 64 KiB (see the top). */
static int large;

static float term(int d, int e, int k)
{
  return (float)((d * 131 + e * 7 + k * 3) % 1000);
}

/* Fill x with device d's terms of call k, psum it over `axes` and check
 * the sum over the devices `ndev` listed. */
static int psum_checked(shmap_ctx *ctx, shmap_block *x, int64_t len,
                        const char *axes, int k, const int *devs, int ndev)
{
  int d = shmap_ctx_device(ctx);
  float *v = x->data;
  for (int64_t e = 0; e < len; e++)
    v[e] = term(d, (int)e, k);
  int rc = shmap_psum(ctx, x, axes);
  if (rc)
    return rc;
  for (int64_t e = 0; e < len; e++) {
    float want = 0;
    for (int t = 0; t < ndev; t++)
      want += term(devs[t], (int)e, k);
    if (v[e] != want)
      return shmap_fail(ctx, "psum over %s, call %d, element %lld: %g, want %g",
                        axes, k, (long long)e, (double)v[e], (double)want);
  }
  return 0;
}

static shmap_block *block(shmap_ctx *ctx, int64_t len)
{
  int64_t shape[1] = {len};
  return shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
}

static int collectives(shmap_ctx *ctx, shmap_block *x, shmap_block *big)
{
  int d = shmap_ctx_device(ctx), i = d / 2, j = d % 2;
  int ofi[64], all[128], ofj[2] = {i * 2, i * 2 + 1};
  for (int r = 0; r < R; r++)
    ofi[r] = r * 2 + j;
  for (int t = 0; t < 2 * R; t++)
    all[t] = t;
  int rc = 0;
  for (int k = 0; k < 3 && !rc; k++)
    rc = psum_checked(ctx, x, SMALL, "i", k, ofi, R);
  if (!rc)
    rc = psum_checked(ctx, x, SMALL, "i,j", 3, all, 2 * R);
  if (!rc)
    rc = psum_checked(ctx, x, SMALL, "j", 4, ofj, 2);
  if (rc)
    return rc;

  /* all_gather over "i" of 16 floats, tiled. */
  float *v = x->data;
  for (int e = 0; e < SMALL; e++)
    v[e] = term(d, e, 5);
  shmap_block *part = block(ctx, 16), *out = NULL;
  if (!part)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  memcpy(part->data, v, 16 * sizeof(float));
  rc = shmap_all_gather(ctx, part, "i", 0, 1, &out);
  for (int r = 0; !rc && r < R; r++)
    for (int e = 0; !rc && e < 16; e++)
      if (((float *)out->data)[r * 16 + e] != term(r * 2 + j, e, 5))
        rc = shmap_fail(ctx, "all_gather: row %d, element %d", r, e);
  if (out) {
    int frc = shmap_block_free(ctx, out);
    rc = rc ? rc : frc;
  }
  int frc = shmap_block_free(ctx, part);
  rc = rc ? rc : frc;
  if (rc)
    return rc;

  /* ppermute over "i": a ring shift by one. */
  int pairs[64][2];
  for (int r = 0; r < R; r++) {
    pairs[r][0] = r;
    pairs[r][1] = (r + 1) % R;
  }
  for (int e = 0; e < SMALL; e++)
    v[e] = term(d, e, 6);
  if ((rc = shmap_ppermute(ctx, x, "i", R, (const int(*)[2])pairs)))
    return rc;
  int from = ((i + R - 1) % R) * 2 + j;
  for (int e = 0; e < SMALL; e++)
    if (v[e] != term(from, e, 6))
      return shmap_fail(ctx, "ppermute: element %d: %g", e, (double)v[e]);

  /* psum_scatter over "i" of R * 16 floats: this device's 16. */
  shmap_block *whole = block(ctx, (int64_t)R * 16), *mine = NULL;
  if (!whole)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  for (int e = 0; e < R * 16; e++)
    ((float *)whole->data)[e] = term(d, e, 7);
  rc = shmap_psum_scatter(ctx, whole, "i", 0, 1, &mine);
  for (int e = 0; !rc && e < 16; e++) {
    float want = 0;
    for (int r = 0; r < R; r++)
      want += term(r * 2 + j, i * 16 + e, 7);
    if (((float *)mine->data)[e] != want)
      rc = shmap_fail(ctx, "psum_scatter: element %d", e);
  }
  if (mine) {
    frc = shmap_block_free(ctx, mine);
    rc = rc ? rc : frc;
  }
  frc = shmap_block_free(ctx, whole);
  rc = rc ? rc : frc;
  if (rc)
    return rc;

  /* 64 KiB over "i" (see the top). */
  return large ? psum_checked(ctx, big, LARGE, "i", 8, ofi, R) : 0;
}

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *x = block(ctx, SMALL), *big = block(ctx, LARGE);
  int rc = x && big ? collectives(ctx, x, big)
                    : shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  if (x)
    shmap_block_free(ctx, x);
  if (big)
    shmap_block_free(ctx, big);
  return rc;
}

static int map(shmap_mesh *m, char *msg, size_t n)
{
  int rc = shmap_map(m, body, NULL, 0, NULL, NULL, 0, NULL, NULL);
  snprintf(msg, n, "%s", rc ? shmap_errmsg() : "");
  return rc;
}

/* Whether every process has this code. */
static int same_code(int rc)
{
  if (R == 1)
    return 1;
  int lo = rc, hi = rc;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* What a step of a walk calls while the failure is armed: a map on a
 * mesh, or the creation of a mesh or sub-mesh.  Its code; msg gets the
 * error message (empty on success). */
typedef int (*walk_call)(void *arg, char *msg, size_t n);

/* Call call(arg) with the last process's k-th allocation from now
 * failing, and require what every step requires: the same code and
 * message in every process, and success, or SHMAP_ENOMEM with "out of
 * memory" when an allocation failed.  The code; *hit whether an
 * allocation failed in some process. */
static int injected(const char *walk, long k, walk_call call, void *arg,
                    char *msg, size_t n, long *hit)
{
  int victim = me == R - 1;
  if (getenv("ALLOCFAIL_VERBOSE"))
    fprintf(stderr, "[process %d] %s, k=%ld\n", me, walk, k);
  if (R > 1) /* without mpirun the library does not start MPI */
    MPI_Barrier(MPI_COMM_WORLD);
  if (victim)
    shmap__test_fail_alloc(k);
  int rc = call(arg, msg, n);
  *hit = victim ? shmap__test_alloc_failures() : 0;
  if (victim)
    shmap__test_fail_alloc(0);
  if (R > 1)
    MPI_Allreduce(MPI_IN_PLACE, hit, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  EXPECT(same_code(rc), "%s, k=%ld: the processes disagree on the code (%d here: %s)",
         walk, k, rc, msg);
  EXPECT(same_everywhere_of(R, msg),
         "%s, k=%ld: the processes disagree on the message (here: %s)", walk,
         k, msg);
  if (*hit)
    EXPECT(rc == 0 || (rc == SHMAP_ENOMEM && strstr(msg, "out of memory")),
           "%s, k=%ld: a failed allocation gave %d (%s): %s", walk, k, rc,
           shmap_strerror(rc), msg);
  else
    EXPECT(rc == 0, "%s, k=%ld: no failure injected, yet %d (%s): %s", walk,
           k, rc, shmap_strerror(rc), msg);
  return rc;
}

static int map_call(void *m, char *msg, size_t n) { return map(m, msg, n); }

/* One step of a walk: the last process's k-th allocation from now fails
 * in a map on m.  Whether k is past the map's last allocation. */
static int step(shmap_mesh *m, long k, const char *walk)
{
  char msg[1024], again[1024];
  long hit;
  injected(walk, k, map_call, m, msg, sizeof msg, &hit);
  int rc = map(m, again, sizeof again);
  EXPECT(rc == 0, "%s, k=%ld: the map after the failure: %d (%s): %s", walk,
         k, rc, shmap_strerror(rc), again);
  return !hit;
}

/* A mesh's creation as a walk_call: from text, or the sub-mesh sub of
 * parent over devs. */
struct creation {
  const char *text, *sub;
  shmap_mesh *parent, *made;
  const int *devs;
};

static int create_call(void *arg, char *msg, size_t n)
{
  struct creation *c = arg;
  c->made = NULL;
  int rc = c->parent ? shmap_mesh_submesh(&c->made, c->parent, c->sub, c->devs)
                     : shmap_mesh_create(&c->made, c->text);
  snprintf(msg, n, "%s", rc ? shmap_errmsg() : "");
  return rc;
}

/* Creating a mesh from text (parent NULL) or the sub-mesh "k=R" of
 * parent: every process gets the same code, and a mesh only when every
 * process made one; a map on a new mesh then works, and so does making
 * the next sub-mesh.  The allocations the creation makes in the last
 * process. */
static long create_walk(const char *walk, const char *text,
                        shmap_mesh *parent)
{
  char msg[1024], sub[32];
  int devs[64];
  snprintf(sub, sizeof sub, "k=%d", R);
  for (int r = 0; r < R; r++)
    devs[r] = (R - 1 - r) * 2 + 1;
  struct creation c = {text, sub, parent, NULL, devs};
  long k;
  for (k = 1; k < MAX_K && !failures; k++) {
    long hit;
    int rc = injected(walk, k, create_call, &c, msg, sizeof msg, &hit);
    shmap_mesh *m = c.made;
    EXPECT((rc == 0) == (m != NULL), "%s, k=%ld: %d with mesh %p", walk, k, rc,
           (void *)m);
    if (m && !parent) {
      large = 1;
      rc = map(m, msg, sizeof msg);
      EXPECT(rc == 0, "%s, k=%ld: a map on it: %d (%s): %s", walk, k, rc,
             shmap_strerror(rc), msg);
    }
    shmap_mesh_destroy(m);
    if (parent) {
      m = NULL;
      rc = shmap_mesh_submesh(&m, parent, sub, devs);
      EXPECT(rc == 0, "%s, k=%ld: the next sub-mesh: %d (%s): %s", walk, k, rc,
             shmap_strerror(rc), rc ? shmap_errmsg() : "");
      shmap_mesh_destroy(m);
    }
    if (!hit)
      break;
  }
  EXPECT(k < MAX_K, "%s: still allocating at k=%ld", walk, k);
  return k - 1;
}

int main(void)
{
  alarm(280); /* run.sh bounds the run too */
  me = shmap_process_rank();
  R = shmap_process_count();
  if (R < 1 || me < 0) {
    fprintf(stderr, "test_mpi_allocfail: %s\n", shmap_errmsg());
    return 1;
  }
  if (R > 64)
    return 77;
  char text[64], msg[1024];
  snprintf(text, sizeof text, "i=%d,j=2", R);

  /* A later map. */
  shmap_mesh *m = NULL;
  int rc = expect_mesh(&m, text);
  if (rc)
    return expect_report("test_mpi_allocfail", R);
  large = 1;
  rc = map(m, msg, sizeof msg);
  EXPECT(rc == 0, "the first map: %d %s", rc, msg);
  long k = 1;
  while (k < MAX_K && !failures && !step(m, k, "a later map"))
    k++;
  EXPECT(k < MAX_K, "a later map: still allocating at k=%ld", k);
  long later = k;
  shmap_mesh_destroy(m);

  /* The first map of a fresh mesh. */
  large = 0;
  for (k = 1; k < MAX_K && !failures; k++) {
    m = NULL;
    rc = expect_mesh(&m, text);
    if (rc)
      break;
    int done = step(m, k, "a first map");
    shmap_mesh_destroy(m);
    if (done)
      break;
  }
  EXPECT(k < MAX_K, "a first map: still allocating at k=%ld", k);
  long first = k;

  long made = create_walk("creating a mesh", text, NULL);
  /* A sub-mesh "k=R" over the devices j=1 of "i=R,j=2" (one in each
   * process), in reverse order. */
  m = NULL;
  rc = expect_mesh(&m, text);
  if (rc == 0) {
    large = 1;
    rc = map(m, msg, sizeof msg);
    EXPECT(rc == 0, "the parent of the sub-meshes: %d %s", rc, msg);
  }
  long sub = rc ? 0 : create_walk("creating a sub-mesh", NULL, m);
  if (m) {
    rc = map(m, msg, sizeof msg);
    EXPECT(rc == 0, "the parent after the sub-meshes: %d %s", rc, msg);
    shmap_mesh_destroy(m);
  }
  if (me == 0 && !failures)
    printf("test_mpi_allocfail: in the last process a later map makes %ld "
           "allocations, a first map %ld, creating a mesh %ld, a sub-mesh "
           "%ld\n",
           later - 1, first - 1, made, sub);
  return expect_report("test_mpi_allocfail", R);
}
