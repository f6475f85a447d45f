/* SPDX-License-Identifier: MIT */
/*
 * 22_rehearse.c - libshmap tutorial: how fast would this kernel be on a
 * real cluster, and does it fit?
 *
 * What this example teaches
 *   The collective matmul of example 15 (all-gather matmul, one
 *   direction, on a ring of 8 devices along 'i') runs here, on this
 *   machine, and is rehearsed on every preset cluster: a TPU v5e slice,
 *   an 8-GPU H100 node and H100 nodes joined by InfiniBand, where the one
 *   axis 'i' runs across nodes (shmap-rehearse(7) gives their figures and
 *   sources).  The rehearsal replays what every device did: each
 *   ppermute with its bytes, each start and wait, and the compute between
 *   them, which the body annotates with shmap_cost() (2 M K N / n^2 FLOP
 *   and the bytes the step's matmul touches), so that it is priced as a
 *   roofline on the target device rather than as the time this machine
 *   took.
 *
 *   Arithmetic intensity decides the outcome.  A step multiplies an
 *   (M/n x K/n) piece by a (K/n x N) chunk: 2 (M/n)(K/n) N FLOP while the
 *   chunk's 4 (K/n) N bytes travel one hop.  The transfer hides under the
 *   matmul when 2 (M/n)(K/n) N / F >= 4 (K/n) N / W, that is when
 *   M/n >= 2 F / W: on a TPU v5e (F = 1.97e14 FLOP/s, W = 4.5e10 B/s per
 *   direction) about 8800 rows per device, on an H100 node (F = 9.89e14,
 *   W = 4.5e11) about 4400, and across H100 nodes (W = 5e10 on
 *   InfiniBand) about 40000.  This kernel's M/n is far smaller, so on
 *   every cluster the transfers are exposed: the report says how much.
 *
 *   Run it as it is, or with SHMAP_REHEARSE=h100-multinode and
 *   SHMAP_REHEARSE_OUT=report.jsonl to rehearse every map of any program
 *   without changing it; shmap-rehearse(1) prints such a file as tables.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M 128
#define K 1024
#define N 512

static int root;

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "%s: %s\n", what, shmap_errmsg());
    exit(1);
  }
}

/* z = a (rows x kb, row stride lda) @ b (kb x nc); out += z. */
static void matmul_add(const float *a, int lda, const float *b, float *out,
                       int rows, int kb, int nc)
{
  for (int r = 0; r < rows; r++)
    for (int k = 0; k < kb; k++) {
      float x = a[r * lda + k];
      for (int c = 0; c < nc; c++)
        out[r * nc + c] += x * b[k * nc + c];
    }
}

/* lhs f32[M/n, K], rhs f32[K/n, N] -> out f32[M/n, N]. */
static int ag_matmul(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int n = shmap_axis_size(ctx, "i"), d = shmap_axis_index(ctx, "i");
  const shmap_block *lhs = shmap_in(ctx, 0), *rhs = shmap_in(ctx, 1);
  int mb = (int)lhs->shape[0], kb = K / n;
  shmap_block *out = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){mb, N});
  if (out == NULL)
    return shmap_fail(ctx, "no memory for the output");
  int pairs[8][2];
  for (int q = 0; q < n; q++)
    pairs[q][0] = q, pairs[q][1] = (q + 1) % n;
  const shmap_block *cur = rhs;
  for (int s = 0; s < n; s++) {
    int c = ((d - s) % n + n) % n, rc;
    shmap_block *next = NULL;
    shmap_request *req = NULL;
    if (s < n - 1 && (rc = shmap_ppermute_start(ctx, cur, "i", n,
                                                (const int(*)[2])pairs,
                                                &next, &req)) < 0)
      return rc;
    matmul_add((const float *)lhs->data + c * kb, K, cur->data, out->data,
               mb, kb, N);
    /* [tutorial:cost] */
    /* What the step's matmul does on any device: its FLOPs, and the
     * bytes of the pieces it reads and the output it updates. */
    shmap_cost(ctx, 2.0 * mb * kb * N,
               4.0 * ((double)mb * kb + (double)kb * N + 2.0 * mb * N));
    /* [end] */
    if (req && (rc = shmap_wait(ctx, &req)) < 0)
      return rc;
    if (cur != rhs && (rc = shmap_block_free(ctx, (shmap_block *)cur)) < 0)
      return rc;
    cur = next;
  }
  return 0;
}

/* The number after "key": in a report. */
static double field(const char *report, const char *key)
{
  const char *p = strstr(report, key);
  return p ? atof(p + strlen(key)) : -1;
}

int main(void)
{
  static float a[M * K], b[K * N], want[M * N], got[M * N];
  for (int i = 0; i < M * K; i++)
    a[i] = (float)(i % 7) - 3;
  for (int i = 0; i < K * N; i++)
    b[i] = (float)(i % 5) - 2;
  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=8"), "shmap_mesh_create");
  root = shmap_process_rank() <= 0;
  shmap_array *ga, *gb, *gc;
  check(shmap_array_from_host(&ga, SHMAP_F32, 2, (int64_t[]){M, K}, a), "a");
  check(shmap_array_from_host(&gb, SHMAP_F32, 2, (int64_t[]){K, N}, b), "b");
  const char *presets[] = {"tpu-v5e-16x16", "h100-8", "h100-multinode"};
  for (int p = 0; p < 3; p++) {
    shmap_map_opts o = {.rehearse = presets[p]};
    check(shmap_map_ex(mesh, ag_matmul, NULL, 2, (shmap_array *[]){ga, gb},
                       (const char *[]){"P('i', None)", "P('i', None)"}, 1,
                       &gc, (const char *[]){"P('i', None)"}, &o),
          "shmap_map_ex");
    char report[16384];
    shmap_rehearse_report(report, sizeof report);
    if (root)
      printf("%-14s predicted %8.1f us  (compute %7.1f us, exposed "
             "communication %7.1f us on device 0)\n",
             presets[p], field(report, "\"predicted_s\":") * 1e6,
             field(report, "\"compute_s\":") * 1e6,
             field(report, "\"exposed_comm_s\":") * 1e6);
    check(shmap_array_to_host(gc, got), "shmap_array_to_host");
    shmap_array_destroy(gc);
  }
  /* Small integers: every sum is exact, in any order. */
  memset(want, 0, sizeof want);
  matmul_add(a, K, b, want, M, K, N);
  int bad = memcmp(want, got, sizeof want) != 0;
  if (root)
    printf("result %s\n", bad ? "WRONG" : "matches the serial matmul");
  shmap_array_destroy(ga);
  shmap_array_destroy(gb);
  shmap_mesh_destroy(mesh);
  return bad;
}
