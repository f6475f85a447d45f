/* SPDX-License-Identifier: MIT */
/*
 * cmatmul.c - the collective matmul of examples/15_collective_matmul.c in
 * bench/run: out = lhs @ rhs for square f32 matrices of side N on a ring of
 * P devices, each program timed three ways in the same map:
 *   local       the device's P matmul steps alone, no transfer at all
 *               (each step multiplies the chunk it already has): the time
 *               the compute needs;
 *   blocking    each step's ppermute (shmap_ppermute_new) completes before
 *               the step's matmul;
 *   overlapped  each step's shmap_ppermute_start is issued before the
 *               step's matmul and waited for after it.
 * Programs: ag (all-gather matmul, one direction), ag_bidi (both
 * directions, half chunks each way) and rs (reduce-scatter matmul).
 * comm_roofline_us is the time the transfers alone would take at the
 * measured memory bandwidth.  BENCHMARKS.md, "Collective matmul", explains
 * the figures.
 */
#include "cmatmul.h"

#include <shmap.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { CM_AG, CM_AG_BIDI, CM_RS, CM_NPROG };
static const char *const prog_names[CM_NPROG] = {"cmatmul_ag",
                                                 "cmatmul_ag_bidi",
                                                 "cmatmul_rs"};
enum { V_LOCAL, V_BLOCKING, V_OVERLAPPED, V_N };

#define CM_MAX_P 64
#define CM_MAX_REPS 64

typedef struct cm_job {
  int prog, variant, P, N, reps;
  double *t0, *t1; /* [variant][rep][device] */
  int pairs_up[CM_MAX_P][2], pairs_dn[CM_MAX_P][2];
} cm_job;

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* z (m x n) += a (m x k, row stride lda) @ b (k x n), row by row so the
 * inner loop runs along rows of b and z (it vectorises). */
static void mm_acc(const float *a, int lda, const float *b, float *z, int m,
                   int k, int n)
{
  for (int r = 0; r < m; r++)
    for (int t = 0; t < k; t++) {
      float x = a[r * lda + t];
      const float *br = b + (size_t)t * n;
      float *zr = z + (size_t)r * n;
      for (int c = 0; c < n; c++)
        zr[c] += x * br[c];
    }
}

/* One transfer of a step: start (or, blocking, do) it, later wait. */
static int xstart(shmap_ctx *ctx, const cm_job *j, const shmap_block *x,
                  int down, shmap_block **out, shmap_request **req)
{
  const int(*pairs)[2] = (const int(*)[2])(down ? j->pairs_dn : j->pairs_up);
  *req = NULL;
  if (j->variant == V_OVERLAPPED)
    return shmap_ppermute_start(ctx, x, "i", j->P, pairs, out, req);
  return shmap_ppermute_new(ctx, x, "i", j->P, pairs, out);
}

static int xwait(shmap_ctx *ctx, shmap_request **req)
{
  return *req ? shmap_wait(ctx, req) : 0;
}

/* Frees the block a step received once it is done with; the local variant
 * keeps reusing the device's own blocks. */
static int release(shmap_ctx *ctx, shmap_block *b, const shmap_block *own)
{
  return b && b != own ? shmap_block_free(ctx, b) : 0;
}

/* The all-gather matmul, one direction or both. */
static int run_ag(shmap_ctx *ctx, const cm_job *j, const shmap_block *lhs,
                  const shmap_block *rhs, float *out, int bidi)
{
  int P = j->P, N = j->N, d = shmap_axis_index(ctx, "i");
  int mb = N / P, kb = N / P, h = bidi ? kb / 2 : kb;
  memset(out, 0, sizeof(float) * (size_t)mb * N);
  shmap_block lo0 = *rhs, hi0 = *rhs;
  lo0.shape[0] = h;
  hi0.shape[0] = h;
  hi0.data = (float *)rhs->data + (size_t)h * N;
  shmap_block *lo = &lo0, *hi = &hi0;
  for (int s = 0; s < P; s++) {
    int cl = ((d - s) % P + P) % P, ch = (d + s) % P;
    shmap_block *nlo = lo, *nhi = hi;
    shmap_request *rlo = NULL, *rhi = NULL;
    int rc = 0, move = j->variant != V_LOCAL && s < P - 1;
    if (move && ((rc = xstart(ctx, j, lo, 0, &nlo, &rlo)) < 0 ||
                 (bidi && (rc = xstart(ctx, j, hi, 1, &nhi, &rhi)) < 0)))
      return rc;
    mm_acc((const float *)lhs->data + cl * kb, N, lo->data, out, mb, h, N);
    if (bidi)
      mm_acc((const float *)lhs->data + ch * kb + h, N, hi->data, out, mb, h,
             N);
    if (move) {
      if ((rc = xwait(ctx, &rlo)) < 0 || (rc = xwait(ctx, &rhi)) < 0 ||
          (rc = release(ctx, lo, &lo0)) < 0 ||
          (bidi && (rc = release(ctx, hi, &hi0)) < 0))
        return rc;
      lo = nlo;
      hi = nhi;
    }
  }
  int rc = release(ctx, lo, &lo0);
  return rc < 0 ? rc : bidi ? release(ctx, hi, &hi0) : 0;
}

/* The reduce-scatter matmul: the accumulator travels down the ring. */
static int run_rs(shmap_ctx *ctx, const cm_job *j, const shmap_block *lhs,
                  const shmap_block *rhs, shmap_block *acc0, float *z)
{
  int P = j->P, N = j->N, d = shmap_axis_index(ctx, "i");
  int mb = N / P, kb = N / P;
  const float *a = lhs->data;
  size_t len = (size_t)mb * N;
  shmap_block *acc = acc0;
  memset(acc->data, 0, sizeof(float) * len);
  mm_acc(a + (size_t)((d + 1) % P) * mb * kb, kb, rhs->data, acc->data, mb,
         kb, N);
  for (int s = 1; s < P; s++) {
    int blk = (d + s + 1) % P;
    shmap_block *next = acc;
    shmap_request *req = NULL;
    int rc, move = j->variant != V_LOCAL;
    if (move && (rc = xstart(ctx, j, acc, 1, &next, &req)) < 0)
      return rc;
    memset(z, 0, sizeof(float) * len);
    mm_acc(a + (size_t)blk * mb * kb, kb, rhs->data, z, mb, kb, N);
    if (move && ((rc = xwait(ctx, &req)) < 0 ||
                 (rc = release(ctx, acc, acc0)) < 0))
      return rc;
    acc = next;
    float *ad = acc->data;
    for (size_t e = 0; e < len; e++)
      ad[e] += z[e];
  }
  return release(ctx, acc, acc0);
}

/* One warm-up round, then reps rounds; a round runs the three variants
 * once each, in an order that rotates from round to round, so that a
 * burst of load from elsewhere falls on all three alike.  Each run starts
 * after a psum that lines the devices up. */
static int cm_body(shmap_ctx *ctx, void *arg)
{
  cm_job j0 = *(const cm_job *)arg, *j = &j0;
  int d = shmap_ctx_device(ctx), P = j->P, N = j->N;
  int rs = j->prog == CM_RS;
  /* ag: lhs f32[N/P, N] (my rows); rs: lhs f32[N, N/P] (my columns). */
  int64_t lshape[2] = {rs ? N : N / P, rs ? N / P : N};
  shmap_block *lhs = shmap_block_alloc(ctx, SHMAP_F32, 2, lshape);
  shmap_block *rhs =
      shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){N / P, N});
  shmap_block *out =
      shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){N / P, N});
  shmap_block *z = shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){N / P, N});
  shmap_block *bar = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){1});
  if (!lhs || !rhs || !out || !z || !bar)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  float *l = lhs->data, *r = rhs->data;
  for (int64_t e = 0; e < lshape[0] * lshape[1]; e++)
    l[e] = (float)((e + d) % 13) * 0.0625f;
  for (int64_t e = 0; e < (int64_t)(N / P) * N; e++)
    r[e] = (float)((e + 3 * d) % 11) * 0.125f;
  int rc = 0;
  for (int k = -1; k < j->reps && rc == 0; k++)
    for (int i = 0; i < V_N && rc == 0; i++) {
      j->variant = (i + k + 1) % V_N;
      if ((rc = shmap_psum(ctx, bar, "i")) < 0)
        break;
      double t0 = now_us();
      rc = rs ? run_rs(ctx, j, lhs, rhs, out, z->data)
              : run_ag(ctx, j, lhs, rhs, out->data, j->prog == CM_AG_BIDI);
      if (k >= 0) {
        size_t at = ((size_t)j->variant * j->reps + k) * P + d;
        j->t0[at] = t0;
        j->t1[at] = now_us();
      }
    }
  return rc;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Medians, per variant, over the samples of (last device done - first
 * device started). */
static void cm_measure(shmap_mesh *mesh, cm_job *j, double us[V_N])
{
  size_t n = (size_t)V_N * j->reps * j->P;
  double *t0 = calloc(n, sizeof *t0), *t1 = calloc(n, sizeof *t1);
  double v[CM_MAX_REPS];
  if (!t0 || !t1) {
    fprintf(stderr, "bench/run: out of memory\n");
    exit(1);
  }
  j->t0 = t0;
  j->t1 = t1;
  int rc = shmap_map(mesh, cm_body, j, 0, NULL, NULL, 0, NULL, NULL);
  if (rc) {
    fprintf(stderr, "bench/run: %s failed: %s: %s\n", prog_names[j->prog],
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
  for (int var = 0; var < V_N; var++) {
    for (int k = 0; k < j->reps; k++) {
      size_t at = ((size_t)var * j->reps + k) * j->P;
      double lo = t0[at], hi = t1[at];
      for (int d = 1; d < j->P; d++) {
        lo = fmin(lo, t0[at + d]);
        hi = fmax(hi, t1[at + d]);
      }
      v[k] = hi - lo;
    }
    us[var] = median(v, j->reps);
  }
  free(t0);
  free(t1);
}

struct cm_result {
  int prog, P, N;
  double us[V_N];
};

int cmatmul_measure(const int ps[], int nps, const int ns[], int nn, int reps,
                    int verbose, cm_result **results)
{
  int cap = nps * nn * CM_NPROG, count = 0;
  cm_result *res = calloc((size_t)(cap ? cap : 1), sizeof *res);
  if (!res)
    return -1;
  if (reps > CM_MAX_REPS)
    reps = CM_MAX_REPS;
  for (int pi = 0; pi < nps; pi++) {
    int P = ps[pi];
    if (P > CM_MAX_P)
      continue;
    char text[32];
    snprintf(text, sizeof text, "i=%d", P);
    shmap_mesh *mesh;
    if (shmap_mesh_create(&mesh, text)) {
      free(res);
      return -1;
    }
    for (int ni = 0; ni < nn; ni++) {
      int N = ns[ni];
      if (N % (2 * P))
        continue; /* ag_bidi cuts chunks of N/P rows in halves */
      for (int prog = 0; prog < CM_NPROG; prog++) {
        cm_result *r = &res[count++];
        r->prog = prog;
        r->P = P;
        r->N = N;
        if (verbose)
          fprintf(stderr, "[bench] P=%d: %s N=%d\n", P, prog_names[prog], N);
        cm_job j = {.prog = prog, .P = P, .N = N, .reps = reps};
        for (int q = 0; q < P; q++) {
          j.pairs_up[q][0] = j.pairs_dn[q][0] = q;
          j.pairs_up[q][1] = (q + 1) % P;
          j.pairs_dn[q][1] = (q + P - 1) % P;
        }
        cm_measure(mesh, &j, r->us);
      }
    }
    shmap_mesh_destroy(mesh);
  }
  *results = res;
  return count;
}

void cmatmul_print(FILE *f, const cm_result *res, int count,
                   double bandwidth)
{
  if (count > 0)
    fprintf(f, "# collective matmul: f32 N x N @ N x N on a ring of P; "
               "local = the matmul steps alone, no transfer\n");
  for (int i = 0; i < count; i++) {
    const cm_result *r = &res[i];
    /* Bytes each device receives: all-gather (P-1) rhs chunks, or (P-1)
     * accumulators for rs; the same N/P x N floats either way. */
    double bytes = 4.0 * (double)(r->P - 1) * (r->N / r->P) * r->N;
    /* The transfers' own floor: every device's bytes read and written
     * once at the machine's memory bandwidth. */
    double floor_us = 2.0 * bytes * r->P / bandwidth;
    fprintf(f, "op=%s P=%d N=%d local_us=%.0f blocking_us=%.0f "
               "overlapped_us=%.0f overlapped_x=%.2f comm_bytes=%.0f "
               "comm_roofline_us=%.1f\n",
            prog_names[r->prog], r->P, r->N, r->us[V_LOCAL],
            r->us[V_BLOCKING], r->us[V_OVERLAPPED],
            r->us[V_BLOCKING] / r->us[V_OVERLAPPED], bytes, floor_us);
  }
}
