/* SPDX-License-Identifier: MIT */
/*
 * 06_transpose.c - libshmap tutorial, step 6: a distributed transpose with
 * all_to_all.
 *
 * What this example teaches
 *   A matrix A (R x S) is split by rows over the n = 8 devices of the mesh
 *   i=8: device d holds rows d*R/n .. (d+1)*R/n - 1, a block of b = R/n
 *   rows and all S columns.  We want A's transpose, also split by rows:
 *   device d should end with rows d*S/n .. of A^T, which are the columns
 *   d*S/n .. of A, from every row of A.  Every device needs a piece of
 *   every other device's block: that is the all-to-all exchange.
 *
 *   shmap_all_to_all(x, "i", split_axis=1, concat_axis=0, tiled) does it
 *   in one call.  Each device cuts its (b, S) block along dimension 1 into
 *   n chunks of (b, S/n) and sends chunk k to rank k; rank k stacks what
 *   it receives along dimension 0 in sender order.  Rank k then holds a
 *   (R, S/n) block: all rows of A, its own slice of columns.  A local
 *   transpose of that block gives (S/n, R), exactly rows k*S/n .. of A^T,
 *   and the out spec P('i',None) stacks those into the (S, R) matrix A^T.
 *
 *   The matrix is not square (16 x 24), so a mix-up of rows and columns
 *   cannot go unnoticed.  The example uses f64 and checks every element
 *   against a serial transpose.
 *
 *   The same body works for any R and S divisible by n.  main() runs it
 *   twice: on the mesh i=8, and on the 2-D mesh i=4, j=2 with the two axes
 *   grouped.  There the in spec P(('i','j'),None) and an all_to_all over
 *   "('i','j')" treat the 8 devices as one group ranked row-major
 *   (rank = 2*i + j), which is also the order P(('i','j'),None) gives the
 *   blocks, so the result is the same.
 *
 *   Under mpirun every process checks the whole result and process 0
 *   prints.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>

#define R 16 /* rows of A */
#define S 24 /* columns of A */

/* Block shapes seen by device 0 at each stage (device 0 runs in process 0,
 * the one that prints under mpirun). */
static int64_t seen[3][2];

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "06_transpose: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

static int transpose_body(shmap_ctx *ctx, void *arg)
{
  const char *axes = arg; /* "i", or "('i','j')" on a 2-D mesh */
  const shmap_block *x = shmap_in(ctx, 0); /* f64[b, S]: my rows of A */
  if (x == NULL)
    return shmap_fail(ctx, "shmap_in(0) returned NULL");

  /* Exchange: afterwards t is f64[R, S/n], my slice of A's columns. */
  shmap_block *t;
  int rc = shmap_all_to_all(ctx, x, axes, /*split_axis=*/1,
                            /*concat_axis=*/0, /*tiled=*/1, &t);
  if (rc < 0)
    return rc;

  /* Local transpose into the output block, f64[S/n, R]. */
  int64_t rows = t->shape[0], cols = t->shape[1];
  shmap_block *y = shmap_out(ctx, 0, SHMAP_F64, 2, (int64_t[]){cols, rows});
  if (y == NULL)
    return shmap_fail(ctx, "shmap_out failed");
  const double *src = t->data;
  double *dst = y->data;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      dst[c * rows + r] = src[r * cols + c];

  if (shmap_ctx_device(ctx) == 0) {
    seen[0][0] = x->shape[0], seen[0][1] = x->shape[1];
    seen[1][0] = t->shape[0], seen[1][1] = t->shape[1];
    seen[2][0] = y->shape[0], seen[2][1] = y->shape[1];
  }
  return 0;
}

/* Run the transpose on `mesh` and compare with the serial transpose. */
static int run(const char *mesh_text, const char *in_spec, const char *axes,
               const char *axes_label, const char *out_spec, const double *a)
{
  shmap_mesh *mesh;
  shmap_array *ga, *gt = NULL;
  check(shmap_mesh_create(&mesh, mesh_text), "shmap_mesh_create");
  check(shmap_array_from_host(&ga, SHMAP_F64, 2, (int64_t[]){R, S}, a),
        "shmap_array_from_host");
  check(shmap_map(mesh, transpose_body, (void *)axes, 1, &ga,
                  (const char *[]){in_spec}, 1, &gt,
                  (const char *[]){out_spec}),
        "shmap_map");

  const int64_t *shape = shmap_array_shape(gt);
  int rank = shmap_process_rank(); /* 0 without mpirun */
  if (rank == 0) {
    printf("mesh %s: A f64[%d,%d] in %s\n", mesh_text, R, S, in_spec);
    printf("  block f64[%lld,%lld] -> all_to_all(%s, split 1, concat 0, tiled) "
           "-> f64[%lld,%lld] -> local transpose -> f64[%lld,%lld]\n",
           (long long)seen[0][0], (long long)seen[0][1], axes_label,
           (long long)seen[1][0], (long long)seen[1][1], (long long)seen[2][0],
           (long long)seen[2][1]);
    printf("  out %s: f64[%lld,%lld]\n", out_spec, (long long)shape[0],
           (long long)shape[1]);
  }

  int bad = 0;
  if (shmap_array_rank(gt) != 2 || shape[0] != S || shape[1] != R) {
    fprintf(stderr, "06_transpose: result has shape [%lld,%lld], expected "
            "[%d,%d]\n", (long long)shape[0], (long long)shape[1], S, R);
    bad = 1;
  } else {
    static double at[S * R];
    check(shmap_array_to_host(gt, at), "shmap_array_to_host");
    for (int r = 0; r < S && !bad; r++)
      for (int c = 0; c < R; c++)
        if (at[r * R + c] != a[c * S + r]) {
          fprintf(stderr, "06_transpose: result[%d][%d] = %g, A[%d][%d] = "
                  "%g\n", r, c, at[r * R + c], c, r, a[c * S + r]);
          bad = 1;
          break;
        }
  }
  if (!bad && rank == 0)
    printf("  result equals the serial transpose of A\n");
  shmap_array_destroy(gt);
  shmap_array_destroy(ga);
  shmap_mesh_destroy(mesh);
  return bad;
}

int main(void)
{
  /* A[r][c] = r + c/100: every element different, the position readable. */
  static double a[R * S];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < S; c++)
      a[r * S + c] = r + c / 100.0;

  int bad = run("i=8", "P('i',None)", "i", "'i'", "P('i',None)", a);
  bad |= run("i=4, j=2", "P(('i','j'),None)", "('i','j')", "('i','j')",
             "P(('i','j'),None)", a);
  if (bad) {
    fprintf(stderr, "06_transpose: FAILED\n");
    return 1;
  }
  return 0;
}
