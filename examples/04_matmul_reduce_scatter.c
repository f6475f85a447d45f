/* SPDX-License-Identifier: MIT */
/*
 * 04_matmul_reduce_scatter.c - libshmap tutorial, step 4: psum_scatter.
 *
 * What this example teaches
 *   Example 03 ended with a psum over 'j': both devices of a j-group added
 *   their partial products and both kept the whole f32[2,32] sum.  Often
 *   each device only needs part of the sum.  psum_scatter (a
 *   reduce-scatter) adds the same partial products but leaves each device
 *   only its own chunk of the result: with scatter_dimension 1 and tiled,
 *   the f32[2,32] partial sums become f32[2,16] blocks, the device with
 *   axis_index('j') = r keeping columns 16r..16r+15.  An allreduce is a
 *   reduce-scatter followed by an all-gather, so stopping after the first
 *   half saves the second half's traffic, and the result stays sharded
 *   over j, ready for a next step that works on column blocks.
 *
 *   Because every device now holds a different piece, the out spec names j
 *   as well: P('i','j') puts block (i, j) at rows 2i.., columns 16j.., and
 *   the assembled result is again the full f32[8,32] product a @ b.  No
 *   axis is left out, so there is nothing to check for replication.
 *
 *   Two more things are new here:
 *   - a scratch block from shmap_block_alloc() holds the partial product;
 *   - psum_scatter changes the shape, so it returns a new block, which
 *     shmap_out_set() then declares as output 0 without copying it.
 *
 *   Under mpirun process 0 prints; every process checks the whole result,
 *   and the process that runs device 0 also the block shape it recorded.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>

#define M 8
#define K 16
#define N 32

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "04_matmul_reduce_scatter: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

static void local_matmul(const float *x, const float *y, float *z, int64_t m,
                         int64_t k, int64_t n)
{
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < n; c++) {
      float s = 0.0f;
      for (int64_t t = 0; t < k; t++)
        s += x[r * k + t] * y[t * n + c];
      z[r * n + c] = s;
    }
}

/* Output block shape seen by device 0 (set only in the process that runs
 * it: process 0, the one that prints under mpirun). */
static int64_t seen_out[2];

static int matmul_reduce_scatter(shmap_ctx *ctx, void *arg)
{
  const shmap_block *a = shmap_in(ctx, 0); /* f32[2,8]  */
  const shmap_block *b = shmap_in(ctx, 1); /* f32[8,32] */
  if (a == NULL || b == NULL)
    return shmap_fail(ctx, "shmap_in returned NULL");

  /* The partial product, in scratch memory owned by this device. */
  shmap_block *z = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                     (int64_t[]){a->shape[0], b->shape[1]});
  if (z == NULL)
    return shmap_fail(ctx, "shmap_block_alloc failed");
  local_matmul(a->data, b->data, z->data, a->shape[0], a->shape[1],
               b->shape[1]);

  /* Sum over 'j' and keep this device's half of the columns. */
  shmap_block *part;
  int rc = shmap_psum_scatter(ctx, z, "j", /*scatter_dimension=*/1,
                              /*tiled=*/1, &part);
  if (rc < 0)
    return rc;
  shmap_block_free(ctx, z); /* optional: freed when the map returns anyway */

  if (shmap_ctx_device(ctx) == 0)
    seen_out[0] = part->shape[0], seen_out[1] = part->shape[1];
  return shmap_out_set(ctx, 0, part); /* f32[2,16], taken over */
}

int main(void)
{
  static float a[M * K], b[K * N], c[M * N], want[M * N];
  for (int k = 0; k < M * K; k++)
    a[k] = (float)((k * 7 + 3) % 9 - 4);
  for (int k = 0; k < K * N; k++)
    b[k] = (float)((k * 5 + 1) % 9 - 4);

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=4, j=2"), "shmap_mesh_create");
  shmap_array *ga, *gb, *gc = NULL;
  check(shmap_array_from_host(&ga, SHMAP_F32, 2, (int64_t[]){M, K}, a),
        "shmap_array_from_host(a)");
  check(shmap_array_from_host(&gb, SHMAP_F32, 2, (int64_t[]){K, N}, b),
        "shmap_array_from_host(b)");

  check(shmap_map(mesh, matmul_reduce_scatter, NULL, 2,
                  (shmap_array *[]){ga, gb},
                  (const char *[]){"P('i','j')", "P('j',None)"}, 1, &gc,
                  (const char *[]){"P('i','j')"}),
        "shmap_map");
  const int64_t *cs = shmap_array_shape(gc);
  int rank = shmap_process_rank(); /* 0 without mpirun */
  if (rank == 0) {
    printf("mesh i=4, j=2; a f32[%d,%d] in P('i','j'), b f32[%d,%d] in P('j',None)\n",
           M, K, K, N);
    printf("body: z = a_blk @ b_blk (f32[2,32]); psum_scatter(z, 'j', "
           "scatter_dimension=1, tiled) -> f32[%lld,%lld]\n",
           (long long)seen_out[0], (long long)seen_out[1]);
    printf("c f32[%lld,%lld] out P('i','j')\n", (long long)cs[0],
           (long long)cs[1]);
  }

  int bad = 0;
  if (shmap_mesh_device_process(mesh, 0) == rank &&
      (seen_out[0] != M / 4 || seen_out[1] != N / 2)) {
    fprintf(stderr, "04_matmul_reduce_scatter: device 0's block is "
            "[%lld,%lld]; expected [%d,%d]\n", (long long)seen_out[0],
            (long long)seen_out[1], M / 4, N / 2);
    bad = 1;
  }
  /* c's shape is the same in every process, so all of them call
   * shmap_array_to_host (every process must) or none does. */
  if (shmap_array_rank(gc) != 2 || cs[0] != M || cs[1] != N) {
    fprintf(stderr, "04_matmul_reduce_scatter: c has shape [%lld,%lld]; "
            "expected [%d,%d]\n", (long long)cs[0], (long long)cs[1], M, N);
    bad = 1;
  } else {
    check(shmap_array_to_host(gc, c), "shmap_array_to_host");
    local_matmul(a, b, want, M, K, N);
    for (int k = 0; k < M * N; k++)
      if (c[k] != want[k]) {
        fprintf(stderr, "04_matmul_reduce_scatter: c[%d][%d] = %g, serial "
                "matmul gives %g\n", k / N, k % N, c[k], want[k]);
        bad = 1;
        break;
      }
  }

  shmap_array_destroy(gc);
  shmap_array_destroy(gb);
  shmap_array_destroy(ga);
  shmap_mesh_destroy(mesh);
  if (bad) {
    fprintf(stderr, "04_matmul_reduce_scatter: FAILED\n");
    return 1;
  }
  if (rank == 0)
    printf("result matches serial matmul (%d elements, exact)\n", M * N);
  return 0;
}
