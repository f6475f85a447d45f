/* SPDX-License-Identifier: MIT */
/*
 * 09_mlp_2d.c - libshmap tutorial, step 9: a two-layer MLP, forward and
 * backward, data parallel x model parallel, written as a map over the
 * data axis with a map over the model axis nested inside it.
 *
 * What this example teaches
 *   The network is o = relu(X W1) W2 with the loss
 *   L = 1/(2B) * sum (o - Y)^2 over a batch of B rows.  The mesh is
 *   data=2, model=2.
 *
 *   The outer map is manual over 'data' only (shmap_map_ex with
 *   manual_axes "data"): X and Y are split by rows, P('data'), and the
 *   weights come whole, P(); 'model' is a free axis, so the two devices
 *   along it run the same outer body on the same blocks.
 *
 *   Inside, shmap_map_nested maps over 'model' (Megatron-style tensor
 *   parallelism): W1 is split by columns, P(None, 'model'), W2 by rows,
 *   P('model'), and X and Y stay whole for the inner body, P().  The
 *   inner body computes its slice of the hidden layer, its partial output,
 *   and adds the partial outputs with shmap_psum over 'model'.  Backward,
 *   each device gets the gradients of its own slices of W1 and W2, and
 *   adds them over the data replicas with shmap_psum over 'data' through
 *   the outer context (shmap_ctx_outer): a data-parallel gradient
 *   all-reduce issued from inside the model-parallel map.
 *
 *   The nested map assembles the gradient slices over 'model' by its out
 *   specs (P(None, 'model') and P('model')) into whole gradients for the
 *   outer body, which returns them under P(): they are equal along 'data'
 *   after the psum.  The outputs are checked bit for bit against a serial
 *   computation that uses the same kernels on the same slices and adds
 *   partial results in the same (rank) order.  Under mpirun every process
 *   gets the whole outputs from shmap_array_to_host and checks them;
 *   process 0 prints the summary.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 8  /* batch rows */
#define D 4  /* inputs */
#define H 8  /* hidden units */
#define O 2  /* outputs */
#define ND 2 /* devices along 'data' */
#define NM 2 /* devices along 'model' */

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "09_mlp_2d: %s failed: %s: %s\n", what, shmap_strerror(rc),
            shmap_errmsg());
    exit(1);
  }
}

/* c[m][n] = sum_k a[m][k] b[k][n], with row strides lda, ldb, ldc. */
static void matmul(const double *a, int lda, const double *b, int ldb,
                   double *c, int ldc, int m, int k, int n)
{
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++)
        s += a[i * lda + p] * b[p * ldb + j];
      c[i * ldc + j] = s;
    }
}

/* The work of one (data, model) slice, used by the bodies and by the
 * serial check: forward to the partial output, and, given the full output
 * gradient d, backward to this slice's weight gradients.
 *   x: rows x D, w1: D x hl (columns of W1, row stride ld1),
 *   w2: hl x O (rows of W2), h: rows x hl. */
static void forward(const double *x, int rows, const double *w1, int ld1,
                    const double *w2, int hl, double *h, double *part)
{
  matmul(x, D, w1, ld1, h, hl, rows, D, hl);
  for (int i = 0; i < rows * hl; i++)
    h[i] = h[i] > 0 ? h[i] : 0;
  matmul(h, hl, w2, O, part, O, rows, hl, O);
}

static void out_grad(const double *o, const double *y, int rows, double *d)
{
  for (int i = 0; i < rows * O; i++)
    d[i] = (o[i] - y[i]) / B;
}

static void backward(const double *x, int rows, const double *w2, int hl,
                     const double *h, const double *d, double *dw1,
                     double *dw2)
{
  /* dW2 = h^T d;  dh = d W2^T masked by relu;  dW1 = x^T dh. */
  for (int i = 0; i < hl; i++)
    for (int j = 0; j < O; j++) {
      double s = 0;
      for (int r = 0; r < rows; r++)
        s += h[r * hl + i] * d[r * O + j];
      dw2[i * O + j] = s;
    }
  double dh[B * H];
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < hl; i++) {
      double s = 0;
      for (int j = 0; j < O; j++)
        s += d[r * O + j] * w2[i * O + j];
      dh[r * hl + i] = h[r * hl + i] > 0 ? s : 0;
    }
  for (int k = 0; k < D; k++)
    for (int i = 0; i < hl; i++) {
      double s = 0;
      for (int r = 0; r < rows; r++)
        s += x[r * D + k] * dh[r * hl + i];
      dw1[k * hl + i] = s;
    }
}

/* ---- the bodies ---------------------------------------------------------- */

static int model_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *w1 = shmap_in(ctx, 1),
                    *w2 = shmap_in(ctx, 2), *y = shmap_in(ctx, 3);
  int rows = (int)x->shape[0], hl = (int)w1->shape[1];
  shmap_block *h = shmap_block_alloc(ctx, SHMAP_F64, 2,
                                     (int64_t[]){rows, hl});
  shmap_block *o = shmap_out(ctx, 2, SHMAP_F64, 2, (int64_t[]){rows, O});
  shmap_block *dw1 = shmap_out(ctx, 0, SHMAP_F64, 2, (int64_t[]){D, hl});
  shmap_block *dw2 = shmap_out(ctx, 1, SHMAP_F64, 2, (int64_t[]){hl, O});
  shmap_block *d = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){rows, O});
  if (!h || !o || !dw1 || !dw2 || !d)
    return -1;
  forward(x->data, rows, w1->data, hl, w2->data, hl, h->data, o->data);
  /* The partial outputs of the hidden slices add up to the output. */
  int rc = shmap_psum(ctx, o, "model");
  if (rc)
    return rc;
  out_grad(o->data, y->data, rows, d->data);
  backward(x->data, rows, w2->data, hl, h->data, d->data, dw1->data,
           dw2->data);
  /* Data parallelism: add the gradients of the data replicas, through the
   * context of the outer map, which is manual over 'data'. */
  shmap_ctx *outer = shmap_ctx_outer(ctx);
  if ((rc = shmap_psum(outer, dw1, "data")))
    return rc;
  return shmap_psum(outer, dw2, "data");
}

static int data_body(shmap_ctx *ctx, void *arg)
{
  const shmap_block *in[4] = {shmap_in(ctx, 0), shmap_in(ctx, 1),
                              shmap_in(ctx, 2), shmap_in(ctx, 3)};
  const char *is[] = {"P()", "P(None, 'model')", "P('model')", "P()"};
  const char *os[] = {"P(None, 'model')", "P('model')", "P()"};
  shmap_block *out[3];
  shmap_map_opts o = {.manual_axes = "model"};
  int rc = shmap_map_nested(ctx, model_body, arg, 4, in, is, 3, out, os, &o);
  if (rc)
    return rc;
  for (int k = 0; k < 3; k++)
    if ((rc = shmap_out_set(ctx, k, out[k])))
      return rc;
  return 0;
}

int main(void)
{
  double x[B * D], y[B * O], w1[D * H], w2[H * O];
  unsigned s = 7;
  double *all[4] = {x, y, w1, w2};
  int len[4] = {B * D, B * O, D * H, H * O};
  for (int a = 0; a < 4; a++)
    for (int i = 0; i < len[a]; i++) {
      s = s * 1103515245u + 12345u;
      all[a][i] = (double)((s >> 16) % 200) / 100.0 - 1.0;
    }

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "data=2, model=2"), "shmap_mesh_create");
  shmap_array *ax, *ay, *aw1, *aw2, *out[3];
  check(shmap_array_from_host(&ax, SHMAP_F64, 2, (int64_t[]){B, D}, x), "x");
  check(shmap_array_from_host(&ay, SHMAP_F64, 2, (int64_t[]){B, O}, y), "y");
  check(shmap_array_from_host(&aw1, SHMAP_F64, 2, (int64_t[]){D, H}, w1), "w1");
  check(shmap_array_from_host(&aw2, SHMAP_F64, 2, (int64_t[]){H, O}, w2), "w2");
  shmap_map_opts opts = {.manual_axes = "data"};
  check(shmap_map_ex(mesh, data_body, NULL, 4,
                     (shmap_array *[]){ax, aw1, aw2, ay},
                     (const char *[]){"P('data')", "P()", "P()", "P('data')"},
                     3, out, (const char *[]){"P()", "P()", "P('data')"},
                     &opts),
        "shmap_map_ex");
  double dw1[D * H], dw2[H * O], o[B * O];
  check(shmap_array_to_host(out[0], dw1), "dw1");
  check(shmap_array_to_host(out[1], dw2), "dw2");
  check(shmap_array_to_host(out[2], o), "o");

  /* Serially: the same slices, the same kernels, sums in rank order. */
  const int rows = B / ND, hl = H / NM;
  double so[B * O], sdw1[D * H] = {0}, sdw2[H * O] = {0};
  double h[ND][NM][B * H];
  for (int di = 0; di < ND; di++) {
    double part[NM][B * O];
    for (int mi = 0; mi < NM; mi++)
      forward(x + di * rows * D, rows, w1 + mi * hl, H, w2 + mi * hl * O, hl,
              h[di][mi], part[mi]);
    for (int i = 0; i < rows * O; i++) {
      so[di * rows * O + i] = part[0][i];
      for (int mi = 1; mi < NM; mi++)
        so[di * rows * O + i] += part[mi][i];
    }
  }
  for (int mi = 0; mi < NM; mi++) {
    double g1[ND][D * H], g2[ND][H * O];
    for (int di = 0; di < ND; di++) {
      double d[B * O];
      out_grad(so + di * rows * O, y + di * rows * O, rows, d);
      backward(x + di * rows * D, rows, w2 + mi * hl * O, hl, h[di][mi], d,
               g1[di], g2[di]);
    }
    for (int k = 0; k < D; k++)
      for (int i = 0; i < hl; i++) {
        double v = g1[0][k * hl + i];
        for (int di = 1; di < ND; di++)
          v += g1[di][k * hl + i];
        sdw1[k * H + mi * hl + i] = v;
      }
    for (int i = 0; i < hl * O; i++) {
      double v = g2[0][i];
      for (int di = 1; di < ND; di++)
        v += g2[di][i];
      sdw2[mi * hl * O + i] = v;
    }
  }
  int bad = memcmp(o, so, sizeof o) != 0;
  bad |= memcmp(dw1, sdw1, sizeof dw1) != 0;
  bad |= memcmp(dw2, sdw2, sizeof dw2) != 0;
  double loss = 0;
  for (int i = 0; i < B * O; i++)
    loss += 0.5 * (o[i] - y[i]) * (o[i] - y[i]) / B;
  double n1 = 0, n2 = 0;
  for (int i = 0; i < D * H; i++)
    n1 += dw1[i] < 0 ? -dw1[i] : dw1[i];
  for (int i = 0; i < H * O; i++)
    n2 += dw2[i] < 0 ? -dw2[i] : dw2[i];
  if (shmap_process_rank() == 0 || bad)
    printf("loss %.6f, |dW1|_1 %.6f, |dW2|_1 %.6f: %s the serial computation "
           "bit for bit\n",
           loss, n1, n2, bad ? "DIFFERS from" : "equals");
  for (int k = 0; k < 3; k++)
    shmap_array_destroy(out[k]);
  shmap_array_destroy(ax);
  shmap_array_destroy(ay);
  shmap_array_destroy(aw1);
  shmap_array_destroy(aw2);
  shmap_mesh_destroy(mesh);
  return bad;
}
