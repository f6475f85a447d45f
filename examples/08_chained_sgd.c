/* SPDX-License-Identifier: MIT */
/*
 * 08_chained_sgd.c - libshmap tutorial, step 8: data-parallel gradient
 * descent, with arrays that stay on the devices between maps.
 *
 * What this example teaches
 *   The model is linear, y = X w, fitted by least squares: the loss is
 *   L(w) = 1/(2N) * sum_r (x_r . w - y_r)^2 and its gradient is
 *   X^T (X w - y) / N.  X is 64 x 8 (f64), split by rows over the mesh
 *   data=4 with spec P('data', None): each device holds 16 rows and the
 *   matching 16 targets of y (spec P('data')).  The weights w are
 *   replicated, P(): every device holds all 8.
 *
 *   One step is one map:
 *     1. each device computes the partial gradient of its 16 rows,
 *        X_d^T (X_d w - y_d), into a scratch block;
 *     2. shmap_psum over 'data' adds the 4 partial gradients, so every
 *        device now has the full sum (and likewise for the loss);
 *     3. each device updates its copy, w - lr * g / N, and returns it under
 *        out spec P().  All devices computed the same bits, so the
 *        replication check of P() passes.
 *
 *   The arrays never go back to the host between steps.  X and y are
 *   placed once with shmap_array_from_host_sharded; the weights start as
 *   shmap_array_zeros.  The output w of step t is a sharded array with spec
 *   P(), and step t+1 reads it with in spec P(): the same sharding, so each
 *   body is handed the very block its device already holds.  X and y are
 *   read with the spec they were made with, so they are shared too.  The
 *   mesh statistics (shmap_mesh_stats) prove it: after the steps,
 *   blocks_shared counts 3 inputs x 4 devices per step, and no block was
 *   built and no byte copied or moved.  For contrast, one last map reads X
 *   with in spec P(): every device then gathers the whole of X, and the
 *   statistics show the bytes that cost.  (Under mpirun each process
 *   counts only what its own devices did, so the program adds the counts
 *   of all processes up; process 0 prints the results.)
 *
 *   The result is checked against a serial computation.  shmap_psum adds
 *   in rank order (a left fold: ((g0 + g1) + g2) + g3), so the serial
 *   version computes each device's partial gradient with the same function
 *   on the same rows and adds them in device order: the weights then agree
 *   exactly, bit for bit, not just to a tolerance.  (Summing all 64 rows
 *   in one loop would round differently.)  The program exits non-zero on
 *   any mismatch.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64     /* rows */
#define F 8      /* features */
#define NDEV 4   /* devices on the axis 'data' */
#define STEPS 25
#define LR 0.5

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "08_chained_sgd: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* Partial gradient and partial loss of `rows` rows:
 * g = X^T (X w - y), loss = sum of squared residuals / 2.
 * Used by the bodies and by the serial reference alike. */
static void partial(const double *x, const double *y, const double *w,
                    int64_t rows, double g[F], double *loss)
{
  for (int f = 0; f < F; f++)
    g[f] = 0;
  *loss = 0;
  for (int64_t r = 0; r < rows; r++) {
    double res = -y[r];
    for (int f = 0; f < F; f++)
      res += x[r * F + f] * w[f];
    for (int f = 0; f < F; f++)
      g[f] += res * x[r * F + f];
    *loss += 0.5 * res * res;
  }
}

static int step_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0); /* f64[16, 8] */
  const shmap_block *y = shmap_in(ctx, 1); /* f64[16] */
  const shmap_block *w = shmap_in(ctx, 2); /* f64[8], the whole weights */
  if (!x || !y || !w)
    return shmap_fail(ctx, "missing input");

  /* g holds the F gradient entries and, last, the loss: one psum adds
   * both over the 4 devices, in rank order. */
  const int64_t gshape[1] = {F + 1};
  shmap_block *g = shmap_block_alloc(ctx, SHMAP_F64, 1, gshape);
  if (!g)
    return -1;
  double *gv = g->data;
  partial(x->data, y->data, w->data, x->shape[0], gv, &gv[F]);
  int rc = shmap_psum(ctx, g, "data");
  if (rc)
    return rc;

  const int64_t wshape[1] = {F};
  shmap_block *wn = shmap_out(ctx, 0, SHMAP_F64, 1, wshape);
  shmap_block *loss = shmap_out(ctx, 1, SHMAP_F64, 0, NULL);
  if (!wn || !loss)
    return -1;
  const double *wv = w->data;
  for (int f = 0; f < F; f++)
    ((double *)wn->data)[f] = wv[f] - LR * gv[f] / N;
  *(double *)loss->data = gv[F] / N; /* the loss before this step */
  return 0;
}

/* For the contrast map: report the rows this device was given. */
static int rows_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *o = shmap_out(ctx, 0, SHMAP_I64, 0, NULL);
  if (!x || !o)
    return -1;
  *(int64_t *)o->data = x->shape[0];
  return 0;
}

/* The mesh's statistics for the whole job.  Every process counts every
 * map, but each counts only the blocks and bytes of its own devices:
 * each process puts those counts in the row of its first device, and
 * shmap_array_to_host gives every process all rows to add up. */
static void job_stats(shmap_mesh *mesh, shmap_stats *s)
{
  check(shmap_mesh_stats(mesh, s), "shmap_mesh_stats");
  uint64_t *count[5] = {&s->blocks_shared, &s->blocks_built, &s->bytes_host,
                        &s->bytes_local, &s->bytes_moved};
  uint64_t rows[NDEV][5] = {{0}};
  for (int d = 0; d < NDEV; d++)
    if (shmap_mesh_device_process(mesh, d) == shmap_process_rank()) {
      for (int k = 0; k < 5; k++)
        rows[d][k] = *count[k];
      break;
    }
  shmap_array *a;
  check(shmap_array_from_host_sharded(&a, mesh, "P('data')", SHMAP_U64, 2,
                                      (int64_t[]){NDEV, 5}, rows),
        "placing the counts");
  check(shmap_array_to_host(a, rows), "reading the counts");
  shmap_array_destroy(a);
  for (int k = 0; k < 5; k++) {
    *count[k] = 0;
    for (int d = 0; d < NDEV; d++)
      *count[k] += rows[d][k];
  }
}

static void print_stats(const char *what, const shmap_stats *s)
{
  if (shmap_process_rank() != 0) /* one process prints */
    return;
  printf("%s: maps %llu, blocks shared %llu, built %llu; bytes from host "
         "%llu, local %llu, moved between devices %llu\n",
         what, (unsigned long long)s->maps,
         (unsigned long long)s->blocks_shared,
         (unsigned long long)s->blocks_built,
         (unsigned long long)s->bytes_host,
         (unsigned long long)s->bytes_local,
         (unsigned long long)s->bytes_moved);
}

int main(void)
{
  int bad = 0;
  const int first = shmap_process_rank() == 0; /* process 0 prints */
  /* Data: X in [-1, 1) from a small LCG, y = X w_true. */
  static double X[N * F], Y[N];
  double w_true[F];
  uint32_t seed = 12345;
  for (int e = 0; e < N * F; e++) {
    seed = seed * 1664525u + 1013904223u;
    X[e] = (double)(seed >> 8) / (double)(1u << 23) - 1.0;
  }
  for (int f = 0; f < F; f++)
    w_true[f] = 0.25 * f - 1.0;
  for (int r = 0; r < N; r++) {
    Y[r] = 0;
    for (int f = 0; f < F; f++)
      Y[r] += X[r * F + f] * w_true[f];
  }

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "data=4"), "shmap_mesh_create");
  const int64_t xshape[2] = {N, F}, yshape[1] = {N}, wshape[1] = {F};
  shmap_array *x, *y, *w;
  check(shmap_array_from_host_sharded(&x, mesh, "P('data', None)", SHMAP_F64,
                                      2, xshape, X),
        "placing X");
  check(shmap_array_from_host_sharded(&y, mesh, "P('data')", SHMAP_F64, 1,
                                      yshape, Y),
        "placing y");
  check(shmap_array_zeros(&w, mesh, "P()", SHMAP_F64, 1, wshape), "zeros w");

  /* The steps: w_{t+1} = step(X, y, w_t).  Count only their movement. */
  shmap_mesh_stats_reset(mesh);
  const char *in_specs[3] = {"P('data', None)", "P('data')", "P()"};
  const char *out_specs[2] = {"P()", "P()"};
  double first_loss = 0, last_loss = 0;
  for (int t = 0; t < STEPS; t++) {
    shmap_array *in[3] = {x, y, w}, *out[2];
    check(shmap_map(mesh, step_body, NULL, 3, in, in_specs, 2, out,
                    out_specs),
          "step");
    double loss;
    check(shmap_array_to_host(out[1], &loss), "reading the loss");
    if (t == 0)
      first_loss = loss;
    last_loss = loss;
    if ((t % 5 == 0 || t == STEPS - 1) && first)
      printf("step %2d: loss %.6e\n", t, loss);
    shmap_array_destroy(out[1]);
    shmap_array_destroy(w); /* the old weights; the new ones replace them */
    w = out[0];
  }
  shmap_stats st;
  job_stats(mesh, &st);
  print_stats("the steps", &st);
  if (st.maps != STEPS || st.blocks_shared != (uint64_t)STEPS * 3 * NDEV ||
      st.blocks_built != 0 || st.bytes_host != 0 || st.bytes_local != 0 ||
      st.bytes_moved != 0) {
    fprintf(stderr, "08_chained_sgd: the steps copied data; expected %d "
                    "shared blocks and no bytes\n",
            STEPS * 3 * NDEV);
    bad++;
  }

  /* Contrast: reading X as P() makes every device gather all of it:
   * 4 devices x 4096 bytes, of which 1024 each are its own rows. */
  shmap_mesh_stats_reset(mesh);
  shmap_array *rows;
  const char *p_all[1] = {"P()"};
  check(shmap_map(mesh, rows_body, NULL, 1, &x, p_all, 1, &rows, p_all),
        "contrast map");
  job_stats(mesh, &st);
  print_stats("X read as P()", &st);
  int64_t seen;
  check(shmap_array_to_host(rows, &seen), "reading rows");
  if (seen != N || st.bytes_local != NDEV * 1024 ||
      st.bytes_moved != NDEV * 3072) {
    fprintf(stderr, "08_chained_sgd: the gather moved %llu bytes, expected "
                    "%d\n",
            (unsigned long long)st.bytes_moved, NDEV * 3072);
    bad++;
  }
  shmap_array_destroy(rows);

  /* Serial reference, with the device partition and the rank-order sum. */
  double w_ref[F] = {0}, ref_first = 0, ref_last = 0;
  for (int t = 0; t < STEPS; t++) {
    double g[F + 1], p[F + 1];
    for (int d = 0; d < NDEV; d++) {
      const int rows_per = N / NDEV;
      partial(X + d * rows_per * F, Y + d * rows_per, w_ref, rows_per, p,
              &p[F]);
      for (int k = 0; k <= F; k++)
        g[k] = d == 0 ? p[k] : g[k] + p[k];
    }
    if (t == 0)
      ref_first = g[F] / N;
    ref_last = g[F] / N;
    for (int f = 0; f < F; f++)
      w_ref[f] = w_ref[f] - LR * g[f] / N;
  }

  double w_got[F];
  check(shmap_array_to_host(w, w_got), "reading w");
  if (first)
    printf("final weights (device / serial / true):\n");
  for (int f = 0; f < F; f++) {
    if (first)
      printf("  w[%d] = % .17g  % .17g  % .3f\n", f, w_got[f], w_ref[f],
             w_true[f]);
    if (w_got[f] != w_ref[f])
      bad++;
  }
  if (first_loss != ref_first || last_loss != ref_last) {
    fprintf(stderr, "08_chained_sgd: the losses differ from the serial ones\n");
    bad++;
  }
  if (!(last_loss < first_loss / 10)) {
    fprintf(stderr, "08_chained_sgd: the loss did not fall (%g -> %g)\n",
            first_loss, last_loss);
    bad++;
  }

  shmap_array_destroy(w);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
  if (bad) {
    fprintf(stderr, "08_chained_sgd: %d mismatches\n", bad);
    return 1;
  }
  if (first)
    printf("08_chained_sgd: weights equal the serial computation bit for "
           "bit\n");
  return 0;
}
