/* SPDX-License-Identifier: MIT */
/*
 * 03_matmul_basic.c - libshmap tutorial, step 3: a sharded matmul with psum.
 *
 * What this example teaches
 *   The first example of JAX's shard_map documentation, in C.  On the mesh
 *   i=4, j=2 we compute c = a @ b with
 *
 *     a  f32[8,16]   in P('i','j')   each device holds a f32[2,8] block
 *     b  f32[16,32]  in P('j',None)  each device holds a f32[8,32] block
 *
 *   Device (i, j) holds rows 2i..2i+1 of a, but only the columns 8j..8j+7,
 *   and the matching rows 8j..8j+7 of b.  Its local product a_blk @ b_blk is
 *   therefore a *partial* sum: the part of the contraction over k that
 *   falls in its j-slice.  Adding the partial sums of the two devices that
 *   share i (a psum over 'j') gives the full rows 2i..2i+1 of c, and both of
 *   them hold the same f32[2,32] block.  The out spec P('i',None) stacks the
 *   blocks over i and, since it does not name j, keeps one of the two equal
 *   copies; the library checks, bit for bit, that they are equal.
 *
 *   The inputs are small integers stored as floats, so every sum is exact
 *   and the result can be compared with a serial matmul using ==.
 *
 *   This is the program the README's quick start runs.  Under mpirun
 *   every process checks the whole result and process 0 prints.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>

#define M 8  /* rows of a and c */
#define K 16 /* columns of a, rows of b: the contracted dimension */
#define N 32 /* columns of b and c */

/* Block shapes seen by device 0, printed by main() (device 0 runs in
 * process 0, the one that prints under mpirun). */
struct seen {
  int64_t a[2], b[2];
};

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "03_matmul_basic: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* z[m][n] = sum over k of x[m][k] * y[k][n], all row-major. */
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

/* The body: runs once per device on its blocks of a and b. */
static int matmul_basic(shmap_ctx *ctx, void *arg)
{
  const shmap_block *a = shmap_in(ctx, 0); /* f32[2,8]  */
  const shmap_block *b = shmap_in(ctx, 1); /* f32[8,32] */
  if (a == NULL || b == NULL)
    return shmap_fail(ctx, "shmap_in returned NULL");
  if (a->shape[1] != b->shape[0])
    return shmap_fail(ctx, "blocks do not fit: a %lldx%lld, b %lldx%lld",
                      (long long)a->shape[0], (long long)a->shape[1],
                      (long long)b->shape[0], (long long)b->shape[1]);
  if (shmap_ctx_device(ctx) == 0) {
    struct seen *s = arg;
    s->a[0] = a->shape[0], s->a[1] = a->shape[1];
    s->b[0] = b->shape[0], s->b[1] = b->shape[1];
  }

  /* Output 0 is this device's f32[2,32] block of c (it starts as zeros). */
  shmap_block *z = shmap_out(ctx, 0, SHMAP_F32, 2,
                             (int64_t[]){a->shape[0], b->shape[1]});
  if (z == NULL)
    return shmap_fail(ctx, "shmap_out failed");
  local_matmul(a->data, b->data, z->data, a->shape[0], a->shape[1],
               b->shape[1]);

  /* Sum the partial products of the devices that share this i. */
  return shmap_psum(ctx, z, "j");
}

int main(void)
{
  static float a[M * K], b[K * N], c[M * N], want[M * N];

  /* Small integers in [-4, 4]: products and sums stay exact in f32. */
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

  struct seen seen = {{0, 0}, {0, 0}};
  int rc = shmap_map(mesh, matmul_basic, &seen, 2,
                     (shmap_array *[]){ga, gb},
                     (const char *[]){"P('i','j')", "P('j',None)"}, 1, &gc,
                     (const char *[]){"P('i',None)"});
  check(rc, "shmap_map");
  check(shmap_array_to_host(gc, c), "shmap_array_to_host");
  const int64_t *cs = shmap_array_shape(gc);

  int rank = shmap_process_rank(); /* 0 without mpirun */
  if (rank == 0) {
    printf("mesh      i=4, j=2 (%d devices)\n", shmap_mesh_ndevices(mesh));
    printf("a         f32[%d,%d]  in P('i','j')   each device holds f32[%lld,%lld]\n",
           M, K, (long long)seen.a[0], (long long)seen.a[1]);
    printf("b         f32[%d,%d] in P('j',None)  each device holds f32[%lld,%lld]\n",
           K, N, (long long)seen.b[0], (long long)seen.b[1]);
    printf("body      z = a_blk @ b_blk; psum(z, 'j')\n");
    printf("c = a @ b f32[%lld,%lld]  out P('i',None)\n", (long long)cs[0],
           (long long)cs[1]);
  }

  local_matmul(a, b, want, M, K, N);
  int bad = 0;
  if (shmap_array_rank(gc) != 2 || cs[0] != M || cs[1] != N) {
    fprintf(stderr, "03_matmul_basic: c has shape [%lld,%lld], expected [%d,%d]\n",
            (long long)cs[0], (long long)cs[1], M, N);
    bad = 1;
  }
  for (int k = 0; k < M * N && !bad; k++)
    if (c[k] != want[k]) {
      fprintf(stderr, "03_matmul_basic: c[%d][%d] = %g, serial matmul gives %g\n",
              k / N, k % N, c[k], want[k]);
      bad = 1;
    }

  shmap_array_destroy(gc);
  shmap_array_destroy(gb);
  shmap_array_destroy(ga);
  shmap_mesh_destroy(mesh);
  if (bad) {
    fprintf(stderr, "03_matmul_basic: FAILED: result differs from serial matmul\n");
    return 1;
  }
  if (rank == 0)
    printf("result matches serial matmul (%d elements, exact)\n", M * N);
  return 0;
}
