/* SPDX-License-Identifier: MIT */
/*
 * kernels.c - the reduction kernels alone, on one thread: the fused P-way
 * kernel of each instruction set against the two-operand passes it
 * replaced (copy the first member's piece, then one dst op= src pass per
 * further member), on the access pattern of one member's share of a psum
 * (P sources of `bytes / P` each, folded in 8 KiB pieces).  No devices, no
 * synchronisation: this is the fold's cost in isolation, which the loaded
 * machine measures far more steadily than whole collectives.
 *
 * usage: bench/kernels [BYTES [P]]   (default 16 MiB, 8)
 * Output: one line per dtype and kernel: the median and the best of 9 runs
 * (on a shared machine the best shows the kernel, the median the load).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#include "dtype.h"

#define PIECE 8192
#define RUNS 9

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The old kernel: dst[i] += src[i], one member per pass, vectorised as the
 * library vectorised it (GCC's cheap cost model leaves it scalar at -O2). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
static void add2_f32(float *restrict d, const float *restrict s, size_t n)
{
  for (size_t i = 0; i < n; i++)
    d[i] += s[i];
}

static void add2_f64(double *restrict d, const double *restrict s, size_t n)
{
  for (size_t i = 0; i < n; i++)
    d[i] += s[i];
}

typedef struct bcase {
  shmap_dtype dt;
  int P;
  size_t n; /* elements per source */
  char **src;
} bcase;

/* One member's share: every piece folded and written to one place. */
static double run_fused(const bcase *c, shmap__fold_fn fold)
{
  size_t es = shmap_dtype_size(c->dt), piece = PIECE / es;
  _Alignas(64) static unsigned char tmp[PIECE];
  const void *srcs[64];
  double t0 = now_us();
  for (size_t off = 0; off < c->n; off += piece) {
    size_t len = c->n - off < piece ? c->n - off : piece;
    for (int r = 0; r < c->P; r++)
      srcs[r] = c->src[r] + off * es;
    fold(tmp, srcs, c->P, len, 0);
  }
  return now_us() - t0;
}

static double run_twopass(const bcase *c)
{
  size_t es = shmap_dtype_size(c->dt), piece = PIECE / es;
  _Alignas(64) static unsigned char tmp[PIECE];
  double t0 = now_us();
  for (size_t off = 0; off < c->n; off += piece) {
    size_t len = c->n - off < piece ? c->n - off : piece;
    memcpy(tmp, c->src[0] + off * es, len * es);
    for (int r = 1; r < c->P; r++) {
      if (c->dt == SHMAP_F32)
        add2_f32((float *)tmp, (const float *)(c->src[r] + off * es), len);
      else
        add2_f64((double *)tmp, (const double *)(c->src[r] + off * es), len);
    }
  }
  return now_us() - t0;
}

static void report(const bcase *c, const char *what, double *t)
{
  qsort(t, RUNS, sizeof *t, cmp);
  double bytes = (double)c->P * (double)c->n * (double)shmap_dtype_size(c->dt);
  printf("dtype=%s P=%d bytes=%.0f kernel=%s median_us=%.0f best_us=%.0f "
         "best_read_GBps=%.2f\n",
         shmap_dtype_name(c->dt), c->P, bytes, what, t[RUNS / 2], t[0],
         bytes / t[0] * 1e-3);
}

int main(int argc, char **argv)
{
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)16 << 20;
  int P = argc > 2 ? atoi(argv[2]) : 8;
  if (P < 1 || P > 64) {
    fprintf(stderr, "bench/kernels: P must be in [1, 64]\n");
    return 1;
  }
  static const shmap_dtype dts[] = {SHMAP_F32, SHMAP_BF16, SHMAP_F16,
                                    SHMAP_F64, SHMAP_I32, SHMAP_I8};
  printf("# bench/kernels: one member's share of a psum of %zu bytes per "
         "device at P=%d (P sources of %zu bytes); chosen set: %s\n",
         bytes, P, bytes / (size_t)P, shmap__isa_name(shmap__isa()));
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    bcase c = {dts[k], P, bytes / (size_t)P / shmap_dtype_size(dts[k]), NULL};
    c.src = malloc(sizeof(char *) * (size_t)P);
    for (int r = 0; r < P; r++) {
      c.src[r] = malloc(c.n * shmap_dtype_size(c.dt) + 64);
      memset(c.src[r], 0x3c + r, c.n * shmap_dtype_size(c.dt));
    }
    double t[RUNS];
    if (c.dt == SHMAP_F32 || c.dt == SHMAP_F64) {
      for (int i = 0; i < RUNS; i++)
        t[i] = run_twopass(&c);
      report(&c, "two-operand", t);
    }
    for (int isa = 0; isa < SHMAP__NISA; isa++) {
      if (!shmap__isa_supported(isa))
        continue;
      shmap__fold_fn f = shmap__kernel_isa(isa, SHMAP__OP_SUM, c.dt);
      for (int i = 0; i < RUNS; i++)
        t[i] = run_fused(&c, f);
      char what[32];
      snprintf(what, sizeof what, "fused-%s", shmap__isa_name(isa));
      report(&c, what, t);
    }
    for (int r = 0; r < P; r++)
      free(c.src[r]);
    free(c.src);
  }
  return 0;
}
