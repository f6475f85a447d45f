/* SPDX-License-Identifier: MIT */
/*
 * calibrate.c - this machine as a fabric for the cluster rehearsal
 * (shmap-rehearse(7)).  It times single collectives on a mesh of n
 * devices here: a ring ppermute of a tiny block gives alpha, the cost of
 * one call, and psums of larger blocks give beta, the bytes per second
 * one device moves at; each timing is printed beside its price.  One device's FLOP/s (a plain matmul loop, the kind
 * the examples run) and memory bandwidth (memcpy) are measured on one
 * core and shared out: n devices on c cores each get c/n of a core.
 * The result is a fabric file with one "switch" level whose port has
 * bandwidth beta, call latency alpha and no hop latency, so a message of
 * V bytes is priced alpha + V / beta.
 *
 * Usage: bench/calibrate [-n DEVICES] [-q] [-o FILE]
 *   -n  devices on the mesh (2..8, default 8)
 *   -q  quick: fewer sizes and repetitions (about a second)
 *   -o  where to write the file (default: standard output)
 * Run it in threads mode (the default it sets); timings on a loaded
 * machine vary from run to run.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  int64_t elems; /* f32 elements of each device's block */
  int reps;
  int psum;      /* 0: ring ppermute, 1: psum */
  double per_call; /* seconds per call, device 0's */
} job;

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int body(shmap_ctx *ctx, void *arg)
{
  job *j = arg;
  int n = shmap_axis_size(ctx, "i"), rc = 0;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){j->elems});
  if (x == NULL)
    return shmap_fail(ctx, "no memory for a block of %lld floats",
                      (long long)j->elems);
  memset(x->data, 0, (size_t)j->elems * 4);
  int pairs[8][2];
  for (int q = 0; q < n; q++)
    pairs[q][0] = q, pairs[q][1] = (q + 1) % n;
  double t0 = 0;
  /* The first call is a warm-up: pages touched, peers started. */
  for (int r = 0; r <= j->reps && rc >= 0; r++) {
    if (r == 1)
      t0 = now();
    rc = j->psum ? shmap_psum(ctx, x, "i")
                 : shmap_ppermute(ctx, x, "i", n, (const int(*)[2])pairs);
  }
  if (rc >= 0 && shmap_axis_index(ctx, "i") == 0)
    j->per_call = (now() - t0) / j->reps;
  shmap_block_free(ctx, x);
  return rc < 0 ? rc : 0;
}

/* The fastest of three maps of `reps` calls: on a loaded machine the
 * slower ones measure the other load. */
static double timed(shmap_mesh *mesh, int64_t bytes, int reps, int psum)
{
  double best = 0;
  for (int k = 0; k < 3; k++) {
    job j = {bytes / 4, reps, psum, 0};
    if (shmap_map(mesh, body, &j, 0, NULL, NULL, 0, NULL, NULL) < 0) {
      fprintf(stderr, "calibrate: %s\n", shmap_errmsg());
      exit(1);
    }
    if (k == 0 || j.per_call < best)
      best = j.per_call;
  }
  return best;
}

/* FLOP/s of one core running the examples' kind of matmul loop. */
static double core_flops(int quick)
{
  int m = 64, k = quick ? 128 : 256, nc = 256;
  float *a = calloc((size_t)m * k, 4), *b = calloc((size_t)k * nc, 4),
        *c = calloc((size_t)m * nc, 4);
  if (!a || !b || !c)
    exit(1);
  for (int i = 0; i < m * k; i++)
    a[i] = (float)(i % 3);
  double t0 = now();
  for (int r = 0; r < m; r++)
    for (int q = 0; q < k; q++) {
      float x = a[r * k + q];
      for (int j = 0; j < nc; j++)
        c[r * nc + j] += x * b[q * nc + j];
    }
  double t = now() - t0, f = 2.0 * m * k * nc / t;
  volatile float sink = c[0];
  (void)sink;
  free(a), free(b), free(c);
  return f;
}

static double core_membw(int quick)
{
  size_t len = (size_t)(quick ? 8 : 64) << 20;
  char *s = malloc(len), *d = malloc(len);
  if (!s || !d)
    exit(1);
  memset(s, 1, len), memset(d, 0, len);
  double t0 = now();
  memcpy(d, s, len);
  double t = now() - t0;
  volatile char sink = d[len / 2];
  (void)sink;
  free(s), free(d);
  return 2.0 * len / t; /* read and written */
}

int main(int argc, char **argv)
{
  int n = 8, quick = 0, opt;
  const char *out = NULL;
  while ((opt = getopt(argc, argv, "n:qo:")) != -1) {
    if (opt == 'n')
      n = atoi(optarg);
    else if (opt == 'q')
      quick = 1;
    else if (opt == 'o')
      out = optarg;
    else {
      fprintf(stderr, "usage: %s [-n DEVICES] [-q] [-o FILE]\n", argv[0]);
      return 2;
    }
  }
  if (n < 2 || n > 8) {
    fprintf(stderr, "calibrate: -n %d: the mesh takes 2 to 8 devices\n", n);
    return 2;
  }
  setenv("SHMAP_SCHED", "threads", 0);
  char axes[16];
  snprintf(axes, sizeof axes, "i=%d", n);
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, axes) < 0) {
    fprintf(stderr, "calibrate: %s\n", shmap_errmsg());
    return 1;
  }
  int reps = quick ? 50 : 200;
  double alpha = timed(mesh, 64, reps, 0);
  /* beta: in threads mode a ppermute hands its block over without a
   * copy, so its time hardly grows with the bytes; a psum reads, adds and
   * writes them.  beta is the least-squares fit of the psums' time above
   * alpha to the switch rule's 2 V (n-1)/n bytes, and a large ppermute is
   * overpriced by it (BENCHMARKS.md). */
  int64_t sizes[] = {256 << 10, 1 << 20, 4 << 20};
  int nsizes = quick ? 2 : 3;
  double tp[3], ts[3], vv = 0, vt = 0;
  for (int s = 0; s < nsizes; s++) {
    double v = 2.0 * sizes[s] * (n - 1) / n;
    tp[s] = timed(mesh, sizes[s], quick ? 5 : 20, 0);
    ts[s] = timed(mesh, sizes[s], quick ? 5 : 20, 1);
    vv += v * v;
    vt += v * (ts[s] - alpha);
  }
  double beta = vt > 0 ? vv / vt : 1e12;
  for (int s = 0; s < nsizes; s++) {
    double v = (double)sizes[s];
    fprintf(stderr, "ppermute %8lld B: %9.1f us, priced %9.1f us\n",
            (long long)sizes[s], tp[s] * 1e6, (alpha + v / beta) * 1e6);
    fprintf(stderr, "psum     %8lld B: %9.1f us, priced %9.1f us\n",
            (long long)sizes[s], ts[s] * 1e6,
            (alpha + 2 * v * (n - 1) / (n * beta)) * 1e6);
  }
  int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  double share = cores >= n ? 1.0 : (double)cores / n;
  double flops = core_flops(quick) * share, membw = core_membw(quick) * share;
  shmap_mesh_destroy(mesh);
  FILE *fp = out ? fopen(out, "w") : stdout;
  if (fp == NULL) {
    perror(out);
    return 1;
  }
  fprintf(fp,
          "{\n  \"name\": \"this-machine-%d\",\n"
          "  \"device\": {\"flops\": %.6g, \"memory_bandwidth\": %.6g,\n"
          "             \"memory_bytes\": %.6g},\n"
          "  \"levels\": [{\"name\": \"threads\", \"topology\": \"switch\",\n"
          "              \"bandwidth\": %.6g, \"hop_latency\": 0,\n"
          "              \"call_latency\": %.6g}]\n}\n",
          n, flops, membw,
          (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / n, beta,
          alpha);
  if (out)
    fclose(fp);
  fprintf(stderr, "alpha %.3g s per call, beta %.3g B/s, %.3g FLOP/s and "
                  "%.3g B/s per device\n", alpha, beta, flops, membw);
  return 0;
}
