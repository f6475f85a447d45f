/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_meshes.c - several meshes driven at the same time by threads of
 * their own, over the processes of an MPI job.
 *
 * Each of NT application threads owns two meshes (for one thread the
 * second is a slice of the first, as a pipeline's next stage; sizes,
 * dtypes and array shapes differ from thread to thread) and repeats,
 * concurrently with the others: a map from host data, shmap_array_to_host, a map that reads the
 * array with another spec (pieces from other processes) and psums over
 * every axis with a replicated output (the replication check between
 * processes), shmap_array_reshard, shmap_array_transfer to its second mesh,
 * and shmap_array_to_host of each result, checking every value exactly.
 * Calls on different meshes may come in any order across processes
 * (shmap-mpi(7)), so each exchange between processes must stay on its
 * mesh's communicator: one shared by all meshes pairs one thread's data
 * with another's (wrong values, or MPI_ERR_TRUNCATE when the sizes
 * differ).
 *
 * A thread also reads the blocks of devices placed in other processes
 * with shmap_array_block, which must fail with SHMAP_EINVAL naming the
 * device and the process that holds it.
 *
 * Run under `mpirun -np R` (R = 1, 2 or 4) or without mpirun; a plain
 * program (no fork after MPI is initialised).  Every process prints its
 * failures; the exit status is non-zero on any.
 */
#include <shmap.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NT 4
#define ITERS 25

static int R, me;
static atomic_int failures;
static char host[64];

#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      char m_[1024];                                                          \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                   \
      fprintf(stderr, "[process %d] %s:%d: %s: %s\n", me, __FILE__,          \
              __LINE__, #cond, m_);                                           \
      atomic_fetch_add(&failures, 1);                                         \
    }                                                                         \
  } while (0)

typedef struct job {
  int t;
  const char *amesh, *aspec, *aspec2, *bmesh, *bspec;
  const char *slice; /* when not NULL, the second mesh is this slice */
  shmap_dtype dtype;
  int rank;
  int64_t shape[2];
  shmap_mesh *a, *b;
} job;

/* Meshes of 4 or 8 devices (divisible by 1, 2 and 4 processes). */
static job jobs[NT] = {
    {0, "i=4", "P('i')", "P(None, 'i')", "i=2, j=2", "P('j', 'i')", NULL,
     SHMAP_F32, 2, {8, 12}, NULL, NULL},
    {1, "i=4, j=2", "P('i', 'j')", "P('j')", "k=8", "P(None, 'k')", NULL,
     SHMAP_F64, 2, {16, 8}, NULL, NULL},
    {2, "x=8", "P('x')", "P()", "y=2, z=2", "P(('y', 'z'))", NULL,
     SHMAP_I32, 1, {24, 1}, NULL, NULL},
    /* A pipeline's next stage: a slice whose devices run in half of the
     * processes (at 2 or 4), while thread 0-2's meshes run in all. */
    {3, "s=2, t=4", "P('s', 't')", "P('t')", NULL, "P(None, 't')", "s=1",
     SHMAP_F32, 2, {4, 8}, NULL, NULL},
};

static double get(shmap_dtype dt, const void *p, int64_t k)
{
  switch (dt) {
  case SHMAP_F32: return ((const float *)p)[k];
  case SHMAP_F64: return ((const double *)p)[k];
  default: return ((const int32_t *)p)[k];
  }
}

static void set(shmap_dtype dt, void *p, int64_t k, double v)
{
  switch (dt) {
  case SHMAP_F32: ((float *)p)[k] = (float)v; break;
  case SHMAP_F64: ((double *)p)[k] = v; break;
  default: ((int32_t *)p)[k] = (int32_t)v; break;
  }
}

/* y = 2x + 1 on the block. */
static int affine(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *y = shmap_out(ctx, 0, x->dtype, x->rank, x->shape);
  if (!y)
    return -1;
  for (int64_t k = 0; k < shmap_block_numel(x); k++)
    set(x->dtype, y->data, k, 2 * get(x->dtype, x->data, k) + 1);
  return 0;
}

/* z = psum of the (whole) block over every axis. */
static int psum_all(shmap_ctx *ctx, void *arg)
{
  const char *axes = arg;
  shmap_block *z = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!z)
    return -1;
  return shmap_psum(ctx, z, axes);
}

/* The whole array back on the host, compared with want (times `scale`). */
static void check_host(const job *j, const shmap_array *arr, const double *want,
                       double scale, int it, const char *what)
{
  int64_t n = j->shape[0] * j->shape[1];
  void *got = calloc((size_t)n, 8);
  int rc = shmap_array_to_host(arr, got);
  EXPECT(rc == 0, "thread %d iteration %d: %s: to_host: %s", j->t, it, what,
         shmap_errmsg());
  int bad = 0;
  for (int64_t k = 0; rc == 0 && k < n && bad < 3; k++) {
    double g = get(j->dtype, got, k), w = want[k] * scale;
    if (g != w) {
      EXPECT(g == w, "thread %d iteration %d: %s: [%lld] = %g, want %g", j->t,
             it, what, (long long)k, g, w);
      bad++;
    }
  }
  free(got);
}

/* A device in another process: SHMAP_EINVAL naming it and its process,
 * and the devices of this one (none, for a slice placed elsewhere). */
static void check_remote_block(const job *j, const shmap_array *arr)
{
  shmap_mesh *m = shmap_array_mesh(arr);
  int n = shmap_mesh_ndevices(m);
  for (int d = 0; d < n; d++) {
    shmap_block b;
    memset(&b, 0x5a, sizeof b);
    int64_t off[2];
    int rc = shmap_array_block(arr, d, &b, off);
    int p = shmap_mesh_device_process(m, d);
    if (p == me) {
      EXPECT(rc == 0 && b.data != NULL, "thread %d: block of device %d: %s",
             j->t, d, rc ? shmap_errmsg() : "NULL data");
      continue;
    }
    char want[512];
    snprintf(want, sizeof want, "shmap_array_block: device %d (", d);
    EXPECT(rc == SHMAP_EINVAL && strncmp(shmap_errmsg(), want,
                                         strlen(want)) == 0,
           "thread %d: device %d of process %d: rc %d: %s", j->t, d, p, rc,
           shmap_errmsg());
    /* This process's devices (a run of numbers in these meshes). */
    char mine[32] = "no device of this mesh";
    int lo = -1, hi = -1;
    for (int e = 0; e < n; e++)
      if (shmap_mesh_device_process(m, e) == me) {
        lo = lo < 0 ? e : lo;
        hi = e;
      }
    if (lo >= 0 && lo == hi)
      snprintf(mine, sizeof mine, "device %d", lo);
    else if (lo >= 0)
      snprintf(mine, sizeof mine, "devices %d-%d", lo, hi);
    snprintf(want, sizeof want, ") runs in process %d (host %s), which alone "
             "keeps its block; this process (process %d, host %s) holds "
             "%s: read the blocks of its own devices, or the whole "
             "array with shmap_array_to_host (see shmap-mpi(7))",
             p, host, me, host, mine);
    EXPECT(strstr(shmap_errmsg(), want) != NULL, "thread %d: message: %s\n"
           "want: ...%s", j->t, shmap_errmsg(), want);
  }
}

static void *run(void *arg)
{
  job *j = arg;
  int64_t n = j->shape[0] * j->shape[1];
  double *h = calloc((size_t)n, sizeof *h), *w = calloc((size_t)n, sizeof *w);
  void *raw = calloc((size_t)n, 8);
  shmap_mesh *am = j->a;
  int ndev = shmap_mesh_ndevices(am);
  char axes[32] = "(";
  for (int a = 0; a < shmap_mesh_naxes(am); a++)
    snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "'%s',",
             shmap_mesh_axis_name(am, a));
  axes[strlen(axes) - 1] = ')';
  /* Every process makes every call, even after a failure here. */
  for (int it = 0; it < ITERS; it++) {
    for (int64_t k = 0; k < n; k++) {
      h[k] = j->t * 100000 + it * 1000 + k;
      w[k] = 2 * h[k] + 1;
      set(j->dtype, raw, k, h[k]);
    }
    shmap_array *x = NULL, *y = NULL, *z = NULL, *r = NULL, *tr = NULL;
    int rc = shmap_array_from_host(&x, j->dtype, j->rank, j->shape, raw);
    EXPECT(rc == 0, "from_host: %s", shmap_errmsg());
    rc = shmap_map(am, affine, NULL, 1, &x, &j->aspec, 1, &y, &j->aspec);
    EXPECT(rc == 0, "thread %d iteration %d: map: %s", j->t, it,
           shmap_errmsg());
    if (rc == 0) {
      check_host(j, y, w, 1, it, "map");
      if (it == 0)
        check_remote_block(j, y);
    }
    const char *whole = "P()";
    rc = y ? shmap_map(am, psum_all, axes, 1, &y, &whole, 1, &z, &whole) : -1;
    EXPECT(rc == 0, "thread %d iteration %d: psum map: %s", j->t, it,
           shmap_errmsg());
    if (rc == 0)
      check_host(j, z, w, ndev, it, "psum map");
    rc = y ? shmap_array_reshard(&r, y, j->aspec2) : -1;
    EXPECT(rc == 0, "thread %d iteration %d: reshard: %s", j->t, it,
           shmap_errmsg());
    if (rc == 0)
      check_host(j, r, w, 1, it, "reshard");
    rc = y ? shmap_array_transfer(&tr, y, j->b, j->bspec) : -1;
    EXPECT(rc == 0, "thread %d iteration %d: transfer: %s", j->t, it,
           shmap_errmsg());
    if (rc == 0) {
      check_host(j, tr, w, 1, it, "transfer");
      if (it == 0)
        check_remote_block(j, tr);
    }
    shmap_array_destroy(tr);
    shmap_array_destroy(r);
    shmap_array_destroy(z);
    shmap_array_destroy(y);
    shmap_array_destroy(x);
  }
  free(raw);
  free(w);
  free(h);
  return NULL;
}

int main(void)
{
  gethostname(host, sizeof host - 1);
  R = shmap_process_count();
  me = shmap_process_rank();
  /* Meshes are created (and destroyed) in the same order everywhere. */
  for (int t = 0; t < NT; t++) {
    int rc = shmap_mesh_create(&jobs[t].a, jobs[t].amesh);
    if (rc == 0)
      rc = jobs[t].slice ? shmap_mesh_slice(&jobs[t].b, jobs[t].a, jobs[t].slice)
                         : shmap_mesh_create(&jobs[t].b, jobs[t].bmesh);
    if (rc) {
      fprintf(stderr, "[process %d] mesh: %s\n", me, shmap_errmsg());
      return 1;
    }
  }
  pthread_t th[NT];
  for (int t = 0; t < NT; t++)
    if (pthread_create(&th[t], NULL, run, &jobs[t])) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  for (int t = 0; t < NT; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < NT; t++) {
    EXPECT(shmap_mesh_destroy(jobs[t].b) == 0, "destroy: %s", shmap_errmsg());
    EXPECT(shmap_mesh_destroy(jobs[t].a) == 0, "destroy: %s", shmap_errmsg());
  }
  int f = atomic_load(&failures);
  if (f)
    fprintf(stderr, "[process %d of %d] %d failure%s\n", me, R, f,
            f == 1 ? "" : "s");
  else if (me == 0)
    printf("test_mpi_meshes: %d process%s, %d threads: all passed\n", R,
           R == 1 ? "" : "es", NT);
  return f ? 1 : 0;
}
