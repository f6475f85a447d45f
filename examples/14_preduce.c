/* SPDX-License-Identifier: MIT */
/*
 * 14_preduce.c - user-defined reductions: an argmax that carries the
 * index of the winner, and a numerically stable log-sum-exp.
 *
 * Four devices (mesh i=4) each hold a row of scores.  preduce folds the
 * devices' blocks in rank order with the program's own combine function,
 * like MPI_Op_create: records of two elements (value, device) for the
 * argmax, and (running max, sum of exp(x - max)) for the log-sum-exp,
 * which stays finite where exp(x) alone would overflow a float.  The
 * program checks both against a serial fold and exits non-zero on any
 * difference.
 *
 * The devices return their results as outputs split P('i'), so under
 * mpirun, where a body runs only in the process that owns its device,
 * shmap_array_to_host() still gives every process every device's results
 * to check; process 0 prints.
 */
#include <shmap.h>

#include <math.h>
#include <stdio.h>

#define N 4
#define C 3

static const float scores[N][C] = {
    {1.0f, 95.0f, -2.0f}, {3.0f, 99.0f, -2.0f},
    {3.0f, 97.0f, -7.0f}, {0.5f, 98.0f, -1.0f}};

/* (value, index): the larger value wins, the lower index on ties. */
static void argmax(void *inout, const void *in, int64_t count, void *arg)
{
  (void)arg;
  float *a = inout;
  const float *b = in;
  for (int64_t i = 0; i < count; i++)
    if (b[2 * i] > a[2 * i] ||
        (b[2 * i] == a[2 * i] && b[2 * i + 1] < a[2 * i + 1])) {
      a[2 * i] = b[2 * i];
      a[2 * i + 1] = b[2 * i + 1];
    }
}

/* (m, s) stands for log(s) + m. */
static void logsumexp(void *inout, const void *in, int64_t count, void *arg)
{
  (void)arg;
  float *a = inout;
  const float *b = in;
  for (int64_t i = 0; i < count; i++) {
    float m = a[2 * i] > b[2 * i] ? a[2 * i] : b[2 * i];
    a[2 * i + 1] = a[2 * i + 1] * expf(a[2 * i] - m) +
                   b[2 * i + 1] * expf(b[2 * i] - m);
    a[2 * i] = m;
  }
}

/* Outputs: f32[C, 2] each, the argmax records (reduced in place) and
 * the log-sum-exp records (a new block). */
static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int me = shmap_axis_index(ctx, "i");
  shmap_block *a = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){C, 2});
  if (a == NULL)
    return shmap_fail(ctx, "shmap_out: %s", shmap_errmsg());
  float(*am)[2] = a->data; /* C records (value, device) */
  float lse[C][2];
  for (int c = 0; c < C; c++) {
    am[c][0] = scores[me][c];
    am[c][1] = (float)me;
    lse[c][0] = scores[me][c];
    lse[c][1] = 1.0f;
  }
  shmap_reduce_op op_am = {"argmax", argmax, NULL, 2};
  shmap_reduce_op op_lse = {"logsumexp", logsumexp, NULL, 2};
  shmap_block *l = NULL;
  shmap_block lin = {lse, SHMAP_F32, 2, {C, 2}};
  int rc;
  if ((rc = shmap_preduce(ctx, a, "i", &op_am)) ||
      (rc = shmap_preduce_new(ctx, &lin, "i", &op_lse, &l)))
    return rc;
  return shmap_out_set(ctx, 1, l);
}

int main(void)
{
  /* results[0]: argmax, results[1]: log-sum-exp, each device's records. */
  static float results[2][N][C][2];
  shmap_mesh *mesh = NULL;
  shmap_array *out[2] = {NULL, NULL};
  const char *out_specs[2] = {"P('i')", "P('i')"};
  int rc = shmap_mesh_create(&mesh, "i=4");
  if (!rc)
    rc = shmap_map(mesh, body, NULL, 0, NULL, NULL, 2, out, out_specs);
  for (int k = 0; k < 2; k++) {
    if (!rc)
      rc = shmap_array_to_host(out[k], results[k]);
    shmap_array_destroy(out[k]);
  }
  shmap_mesh_destroy(mesh);
  if (rc) {
    fprintf(stderr, "14_preduce: %s: %s\n", shmap_strerror(rc),
            shmap_errmsg());
    return 1;
  }
  int bad = 0, root = shmap_process_rank() == 0; /* process 0 prints */
  for (int c = 0; c < C; c++) {
    float am[2] = {scores[0][c], 0}, lse[2] = {scores[0][c], 1};
    for (int r = 1; r < N; r++) {
      float t[2] = {scores[r][c], (float)r}, u[2] = {scores[r][c], 1};
      argmax(am, t, 1, NULL);
      logsumexp(lse, u, 1, NULL);
    }
    for (int d = 0; d < N; d++)
      bad |= results[0][d][c][0] != am[0] || results[0][d][c][1] != am[1] ||
             results[1][d][c][0] != lse[0] || results[1][d][c][1] != lse[1];
    if (root)
      printf("column %d: argmax %g on device %d, log-sum-exp %.6f\n", c,
             am[0], (int)am[1], lse[0] + logf(lse[1]));
  }
  if (root)
    printf("14_preduce: %s\n", bad ? "WRONG" : "every device agrees with "
                                               "the serial fold");
  return bad;
}
