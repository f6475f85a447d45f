/* SPDX-License-Identifier: MIT */
/*
 * bench/overlap - what asynchronous collectives buy on this machine.
 *
 * Each device runs S steps of a ring: it passes a block of B bytes to the
 * next device (ppermute) and computes a small matmul (C: n x n floats).
 * Four ways, each map timed from the host, median of R maps:
 *   compute   the matmuls alone
 *   transfer  the ppermutes alone (blocking)
 *   blocking  ppermute, then matmul, step after step
 *   overlap   shmap_ppermute_start, matmul, shmap_wait
 * The best overlap can do is max(compute, transfer); blocking costs their
 * sum.  With as many computing devices as cores, the progress helpers'
 * copies take cores from the matmuls and overlap gains little; with the
 * devices on fewer cores (fibers on one worker), the helpers copy on the
 * idle core and the transfer hides under the compute.
 *
 * Usage: bench/overlap [R]   (default 7 maps per figure)
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { COMPUTE, TRANSFER, BLOCKING, OVERLAP, NWAYS };
static const char *const way_names[NWAYS] = {"compute", "transfer", "blocking",
                                             "overlap"};

typedef struct cfg {
  int way, steps, n;
} cfg;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* c = a * b, n x n, naive i-k-j order (vectorises, stays in cache). */
static void matmul(int n, const float *a, const float *b, float *c)
{
  memset(c, 0, sizeof(float) * (size_t)n * (size_t)n);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < n; k++) {
      float aik = a[i * n + k];
      for (int j = 0; j < n; j++)
        c[i * n + j] += aik * b[k * n + j];
    }
}

static int body(shmap_ctx *ctx, void *arg)
{
  const cfg *c = arg;
  int p = shmap_axis_size(ctx, "i");
  int ring[64][2];
  for (int r = 0; r < p; r++)
    ring[r][0] = r, ring[r][1] = (r + 1) % p;
  const shmap_block *x0 = shmap_in(ctx, 0);
  const shmap_block *x = x0;
  int n = c->n;
  int64_t sq[2] = {n, n};
  shmap_block *a = shmap_block_alloc(ctx, SHMAP_F32, 2, sq);
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_F32, 2, sq);
  shmap_block *m = shmap_block_alloc(ctx, SHMAP_F32, 2, sq);
  if (!a || !b || !m)
    return -1;
  for (int k = 0; k < n * n; k++)
    ((float *)a->data)[k] = (float)(k % 7), ((float *)b->data)[k] = 0.5f;
  for (int s = 0; s < c->steps; s++) {
    shmap_block *y = NULL;
    shmap_request *req;
    int rc = 0;
    switch (c->way) {
    case COMPUTE:
      matmul(n, a->data, b->data, m->data);
      break;
    case TRANSFER:
      rc = shmap_ppermute_new(ctx, x, "i", p, (const int(*)[2])ring, &y);
      break;
    case BLOCKING:
      rc = shmap_ppermute_new(ctx, x, "i", p, (const int(*)[2])ring, &y);
      matmul(n, a->data, b->data, m->data);
      break;
    case OVERLAP:
      rc = shmap_ppermute_start(ctx, x, "i", p, (const int(*)[2])ring, &y,
                                &req);
      if (rc)
        return rc;
      matmul(n, a->data, b->data, m->data);
      rc = shmap_wait(ctx, &req);
      break;
    }
    if (rc)
      return rc;
    if (y) {
      if (x != x0)
        shmap_block_free(ctx, (shmap_block *)x);
      x = y;
    }
  }
  return 0;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Seconds per step of one map of one way. */
static double run_once(shmap_mesh *mesh, shmap_array *x, cfg *c)
{
  double t0 = now_s();
  int rc = shmap_map(mesh, body, c, 1, &x, (const char *[]){"P('i')"}, 0,
                     NULL, NULL);
  if (rc) {
    fprintf(stderr, "overlap: %s\n", shmap_errmsg());
    exit(1);
  }
  return (now_s() - t0) / c->steps;
}

/* Median seconds per step of each way; the ways take turns map by map,
 * so that a change in the machine's load hits them alike. */
static void run(shmap_mesh *mesh, shmap_array *x, int n, int reps,
                double med[NWAYS])
{
  double t[NWAYS][64];
  for (int w = 0; w < NWAYS; w++) { /* threads started, caches warm */
    cfg c = {w, 10, n};
    run_once(mesh, x, &c);
  }
  for (int r = 0; r < reps; r++)
    for (int w = 0; w < NWAYS; w++) {
      cfg c = {w, 10, n};
      t[w][r] = run_once(mesh, x, &c);
    }
  for (int w = 0; w < NWAYS; w++) {
    qsort(t[w], (size_t)reps, sizeof t[w][0], cmp);
    med[w] = t[w][reps / 2];
  }
}

int main(int argc, char **argv)
{
  int reps = argc > 1 ? atoi(argv[1]) : 7;
  if (reps < 1 || reps > 63)
    reps = 7;
  static const struct {
    const char *sched, *workers;
    int p;
    const char *what;
  } setups[] = {
      {"threads", "", 2, "2 device threads on 2 cores"},
      {"fibers", "1", 2, "2 device fibers on 1 worker (1 core computes)"},
      {"threads", "", 4, "4 device threads on 2 cores"},
      {"fibers", "1", 4, "4 device fibers on 1 worker"},
  };
  static const struct {
    int64_t bytes;
    int n;
  } sizes[] = {{1 << 20, 96}, {8 << 20, 192}};
  char load[64] = "?";
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf) {
    if (!fgets(load, sizeof load, lf))
      snprintf(load, sizeof load, "?");
    fclose(lf);
    load[strcspn(load, " ")] = '\0';
  }
  printf("bench/overlap: S=10 ring steps per map, median of %d maps, "
         "ms per step, loadavg %s\n", reps, load);
  printf("%-46s %8s %5s %9s %9s %9s %9s %8s %8s\n", "setup", "block", "n",
         "compute", "transfer", "blocking", "overlap", "ideal", "gain");
  for (size_t s = 0; s < sizeof setups / sizeof setups[0]; s++) {
    setenv("SHMAP_SCHED", setups[s].sched, 1);
    if (*setups[s].workers)
      setenv("SHMAP_WORKERS", setups[s].workers, 1);
    else
      unsetenv("SHMAP_WORKERS");
    char text[32];
    snprintf(text, sizeof text, "i=%d", setups[s].p);
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
      shmap_mesh *mesh;
      shmap_array *x;
      int64_t numel = sizes[z].bytes / 4 * setups[s].p;
      float *host = calloc((size_t)numel, sizeof *host);
      if (!host || shmap_mesh_create(&mesh, text) ||
          shmap_array_from_host(&x, SHMAP_F32, 1, &numel, host)) {
        fprintf(stderr, "overlap: %s\n", shmap_errmsg());
        return 1;
      }
      double t[NWAYS];
      run(mesh, x, sizes[z].n, reps, t);
      double ideal = t[COMPUTE] > t[TRANSFER] ? t[COMPUTE] : t[TRANSFER];
      printf("%-46s %6lldMi %5d %9.3f %9.3f %9.3f %9.3f %8.3f %7.2fx\n",
             setups[s].what, (long long)(sizes[z].bytes >> 20), sizes[z].n,
             t[COMPUTE] * 1e3, t[TRANSFER] * 1e3, t[BLOCKING] * 1e3,
             t[OVERLAP] * 1e3, ideal * 1e3, t[BLOCKING] / t[OVERLAP]);
      shmap_array_destroy(x);
      shmap_mesh_destroy(mesh);
      free(host);
    }
  }
  printf("gain = blocking / overlap; ideal = max(compute, transfer), the "
         "best overlap can do\n");
  (void)way_names;
  return 0;
}
