/* SPDX-License-Identifier: MIT */
/*
 * 18_processes.c - libshmap tutorial: the same program on one process or
 * on many.
 *
 * What this example teaches
 *   - Run it as it is (`./18_processes`) and one process runs all 8
 *     devices of the mesh "data=4, model=2".  Run it under MPI
 *     (`mpirun -np 2 ./18_processes`, or -np 4) and each process runs its
 *     share of the devices; the program does not change, and it prints the
 *     same numbers, digit for digit.
 *   - Every process makes the same library calls in the same order (SPMD).
 *     shmap_mesh_set_process_axes(mesh, "data") puts different `data`
 *     coordinates on different processes, so the psum over `model` below
 *     combines devices of one process.
 *   - shmap_array_to_host() gives every process the whole result; only
 *     process 0 prints it (shmap_process_rank()).
 *
 * The computation: y = A x with A (8x6) split P('data', 'model') and x (6)
 * split P('model').  Each device multiplies its 2x3 block by its 3 entries
 * of x, and a psum over `model` adds the two partial products in rank
 * order, exactly as the serial check in main() does.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 8
#define COLS 6

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "18_processes (process %d): %s failed: %s: %s\n",
            shmap_process_rank(), what, shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* y_block = A_block x_block, then summed over the model axis. */
static int matvec(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *a = shmap_in(ctx, 0), *x = shmap_in(ctx, 1);
  int64_t rows = a->shape[0], cols = a->shape[1];
  shmap_block *y = shmap_out(ctx, 0, SHMAP_F64, 1, &rows);
  if (!y)
    return -1;
  const double *A = a->data, *X = x->data;
  double *Y = y->data;
  for (int64_t r = 0; r < rows; r++) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; c++)
      acc += A[r * cols + c] * X[c];
    Y[r] = acc;
  }
  return shmap_psum(ctx, y, "model");
}

int main(void)
{
  double A[ROWS * COLS], x[COLS], y[ROWS], want[ROWS];
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++)
      A[r * COLS + c] = 1.0 / (double)(r + c + 1); /* a Hilbert matrix */
  for (int c = 0; c < COLS; c++)
    x[c] = (double)(c + 1) / 7.0;

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "data=4, model=2"), "shmap_mesh_create");
  check(shmap_mesh_set_process_axes(mesh, "data"), "shmap_mesh_set_process_axes");
  shmap_array *in[2], *out;
  int64_t ashape[2] = {ROWS, COLS}, xshape[1] = {COLS};
  check(shmap_array_from_host(&in[0], SHMAP_F64, 2, ashape, A), "A");
  check(shmap_array_from_host(&in[1], SHMAP_F64, 1, xshape, x), "x");
  const char *in_specs[2] = {"P('data', 'model')", "P('model')"};
  const char *out_spec = "P('data')";
  check(shmap_map(mesh, matvec, NULL, 2, in, in_specs, 1, &out, &out_spec),
        "shmap_map");
  check(shmap_array_to_host(out, y), "shmap_array_to_host");

  /* The serial computation, in the same order: each half of a row, then
   * the two halves added in rank order. */
  int bad = 0;
  for (int r = 0; r < ROWS; r++) {
    double half[2];
    for (int h = 0; h < 2; h++) {
      half[h] = 0.0;
      for (int c = h * 3; c < h * 3 + 3; c++)
        half[h] += A[r * COLS + c] * x[c];
    }
    want[r] = half[0] + half[1];
    bad |= memcmp(&want[r], &y[r], sizeof y[r]) != 0;
  }
  if (shmap_process_rank() == 0) {
    printf("y = A x on a mesh of %d devices:\n", shmap_mesh_ndevices(mesh));
    for (int r = 0; r < ROWS; r++)
      printf("  y[%d] = %.17g\n", r, y[r]);
  }
  shmap_array_destroy(out);
  shmap_array_destroy(in[0]);
  shmap_array_destroy(in[1]);
  shmap_mesh_destroy(mesh);
  if (bad) {
    fprintf(stderr, "18_processes: the result differs from the serial one\n");
    return 1;
  }
  return 0;
}
