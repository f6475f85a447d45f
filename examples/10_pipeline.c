/* SPDX-License-Identifier: MIT */
/*
 * 10_pipeline.c - libshmap tutorial, step 10: pipeline parallelism on two
 * sub-meshes, with a 1F1B schedule, microbatches moving between the stages
 * by transfers.
 *
 * What this example teaches
 *   The mesh is stage=2, data=2.  shmap_mesh_slice gives one sub-mesh per
 *   stage ("stage=0" and "stage=1", each data=2).  The network
 *   o = relu(X W1) W2 is cut in two: stage 0 holds W1 and computes the
 *   hidden layer, stage 1 holds W2, the targets and the loss
 *   L = 1/(2B) * sum (o - Y)^2.  Within a stage the microbatch is split
 *   over 'data' and the weight gradients are added with shmap_psum over
 *   'data' (data parallelism inside each stage).
 *
 *   Each stage is driven by a thread of its own, so the two sub-meshes run
 *   maps at the same time.  A batch of 16 rows is 4 microbatches of 4.
 *   Stage 0 follows the one-forward-one-backward (1F1B) schedule of a
 *   two-stage pipeline: F0 F1 B0 F2 B1 F3 B2 B3, at most two microbatches
 *   in flight; stage 1 runs forward and backward of each microbatch in
 *   one map, as they arrive.  The activations of microbatch i move from
 *   stage 0 to stage 1, and their gradients back, with
 *   shmap_array_transfer: each device of the receiving stage copies its
 *   block straight from the device of the sending stage that holds it.
 *   The weight gradients accumulate on the devices over the microbatches;
 *   after the last one each stage updates its weights, and the next step
 *   begins.
 *
 *   Three steps of training are checked bit for bit against serial
 *   training that uses the same kernels on the same rows in the same
 *   order.  The statistics of stage 1 show the bytes its transfers
 *   brought in.  Under mpirun the stages may run in different processes:
 *   every process checks the weights it gets from shmap_array_to_host,
 *   process 0 prints, and the statistics, which each process keeps for
 *   its own devices, are added over the processes.
 */
#include <shmap.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 16   /* batch rows */
#define M 4    /* microbatches */
#define MB 4   /* rows per microbatch */
#define D 4    /* inputs */
#define H 6    /* hidden units */
#define O 2    /* outputs */
#define ND 2   /* devices along 'data' in each stage */
#define STEPS 3
#define LR 0.1

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "10_pipeline: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* ---- kernels (the bodies and the serial check share them) ---------------- */

/* c (m x n) = a (m x k) b (k x n). */
static void matmul(const double *a, const double *b, double *c, int m, int k,
                   int n)
{
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++)
        s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
}

/* c (k x n) = a^T b, a is m x k, b is m x n. */
static void tmatmul(const double *a, const double *b, double *c, int m, int k,
                    int n)
{
  for (int i = 0; i < k; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int r = 0; r < m; r++)
        s += a[r * k + i] * b[r * n + j];
      c[i * n + j] = s;
    }
}

/* Stage 0 forward: h = relu(x W1). */
static void fwd0(const double *x, const double *w1, double *h, int rows)
{
  matmul(x, w1, h, rows, D, H);
  for (int i = 0; i < rows * H; i++)
    h[i] = h[i] > 0 ? h[i] : 0;
}

/* Stage 1 forward and backward: the partial dW2 = h^T d and dh = d W2^T,
 * where d = (h W2 - y) / B. */
static void fb1(const double *h, const double *w2, const double *y,
                double *p2, double *dh, int rows)
{
  double o[MB * O], d[MB * O];
  matmul(h, w2, o, rows, H, O);
  for (int i = 0; i < rows * O; i++)
    d[i] = (o[i] - y[i]) / B;
  tmatmul(h, d, p2, rows, H, O);
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < H; i++) {
      double s = 0;
      for (int j = 0; j < O; j++)
        s += d[r * O + j] * w2[i * O + j];
      dh[r * H + i] = s;
    }
}

/* Stage 0 backward: the partial dW1 = x^T (dh masked by relu). */
static void bwd0(const double *x, const double *h, const double *dh,
                 double *p1, int rows)
{
  double m[MB * H];
  for (int i = 0; i < rows * H; i++)
    m[i] = h[i] > 0 ? dh[i] : 0;
  tmatmul(x, m, p1, rows, D, H);
}

/* ---- bodies ------------------------------------------------------------- */

static int body_fwd0(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *w1 = shmap_in(ctx, 1);
  int rows = (int)x->shape[0];
  shmap_block *h = shmap_out(ctx, 0, SHMAP_F64, 2, (int64_t[]){rows, H});
  if (!h)
    return -1;
  fwd0(x->data, w1->data, h->data, rows);
  return 0;
}

/* acc + psum over 'data' of p, as output k. */
static int accumulate(shmap_ctx *ctx, int k, const shmap_block *acc,
                      shmap_block *p)
{
  int rc = shmap_psum(ctx, p, "data");
  if (rc)
    return rc;
  shmap_block *g = shmap_out(ctx, k, SHMAP_F64, acc->rank, acc->shape);
  if (!g)
    return -1;
  const double *a = acc->data, *s = p->data;
  double *o = g->data;
  for (int64_t i = 0; i < shmap_block_numel(g); i++)
    o[i] = a[i] + s[i];
  return 0;
}

static int body_fb1(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *h = shmap_in(ctx, 0), *w2 = shmap_in(ctx, 1),
                    *y = shmap_in(ctx, 2), *g2 = shmap_in(ctx, 3);
  int rows = (int)h->shape[0];
  shmap_block *p2 = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){H, O});
  shmap_block *dh = shmap_out(ctx, 1, SHMAP_F64, 2, (int64_t[]){rows, H});
  if (!p2 || !dh)
    return -1;
  fb1(h->data, w2->data, y->data, p2->data, dh->data, rows);
  return accumulate(ctx, 0, g2, p2);
}

static int body_bwd0(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *h = shmap_in(ctx, 1),
                    *dh = shmap_in(ctx, 2), *g1 = shmap_in(ctx, 3);
  shmap_block *p1 = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){D, H});
  if (!p1)
    return -1;
  bwd0(x->data, h->data, dh->data, p1->data, (int)x->shape[0]);
  return accumulate(ctx, 0, g1, p1);
}

static int body_update(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *w = shmap_in(ctx, 0), *g = shmap_in(ctx, 1);
  shmap_block *n = shmap_out_copy(ctx, 0, w);
  if (!n)
    return -1;
  double *v = n->data;
  const double *gv = g->data;
  for (int64_t i = 0; i < shmap_block_numel(n); i++)
    v[i] = v[i] - LR * gv[i];
  return 0;
}

/* ---- the two stages ----------------------------------------------------- */

typedef struct pipe {
  shmap_mesh *st[2];
  shmap_array *x[M], *y[M]; /* stage 0 and stage 1 inputs */
  shmap_array *w1, *w2;     /* weights on their stages */
  /* Microbatch i: activations on stage 0, its gradient on stage 1. */
  shmap_array *act[M], *grad[M];
  int act_ready[M], grad_ready[M];
  pthread_mutex_t lock;
  pthread_cond_t cond;
} pipe_t;

static shmap_array *wait_for(pipe_t *p, shmap_array **slot, int *ready)
{
  pthread_mutex_lock(&p->lock);
  while (!*ready)
    pthread_cond_wait(&p->cond, &p->lock);
  shmap_array *a = *slot;
  pthread_mutex_unlock(&p->lock);
  return a;
}

static void publish(pipe_t *p, shmap_array **slot, int *ready, shmap_array *a)
{
  pthread_mutex_lock(&p->lock);
  *slot = a;
  *ready = 1;
  pthread_cond_broadcast(&p->cond);
  pthread_mutex_unlock(&p->lock);
}

static const char *P_DATA = "P('data')", *P_ALL = "P()";

static void stage0_forward(pipe_t *p, int i)
{
  shmap_array *h;
  check(shmap_map(p->st[0], body_fwd0, NULL, 2, (shmap_array *[]){p->x[i], p->w1},
                  (const char *[]){P_DATA, P_ALL}, 1, &h, &P_DATA),
        "stage 0 forward");
  publish(p, &p->act[i], &p->act_ready[i], h);
}

static void stage0_backward(pipe_t *p, int i, shmap_array **g1)
{
  shmap_array *g = wait_for(p, &p->grad[i], &p->grad_ready[i]), *dh, *n;
  check(shmap_array_transfer(&dh, g, p->st[0], P_DATA), "transfer to stage 0");
  shmap_array_destroy(g);
  check(shmap_map(p->st[0], body_bwd0, NULL, 4,
                  (shmap_array *[]){p->x[i], p->act[i], dh, *g1},
                  (const char *[]){P_DATA, P_DATA, P_DATA, P_ALL}, 1, &n,
                  &P_ALL),
        "stage 0 backward");
  shmap_array_destroy(dh);
  shmap_array_destroy(*g1);
  *g1 = n;
}

static void *stage0(void *arg)
{
  pipe_t *p = arg;
  shmap_array *g1;
  check(shmap_array_zeros(&g1, p->st[0], P_ALL, SHMAP_F64, 2,
                          (int64_t[]){D, H}), "zeros");
  /* 1F1B: one microbatch ahead, then one forward and one backward. */
  stage0_forward(p, 0);
  for (int i = 0; i < M; i++) {
    if (i + 1 < M)
      stage0_forward(p, i + 1);
    stage0_backward(p, i, &g1);
  }
  shmap_array *w;
  check(shmap_map(p->st[0], body_update, NULL, 2, (shmap_array *[]){p->w1, g1},
                  (const char *[]){P_ALL, P_ALL}, 1, &w, &P_ALL),
        "stage 0 update");
  shmap_array_destroy(p->w1);
  shmap_array_destroy(g1);
  p->w1 = w;
  return NULL;
}

static void *stage1(void *arg)
{
  pipe_t *p = arg;
  shmap_array *g2;
  check(shmap_array_zeros(&g2, p->st[1], P_ALL, SHMAP_F64, 2,
                          (int64_t[]){H, O}), "zeros");
  for (int i = 0; i < M; i++) {
    shmap_array *a = wait_for(p, &p->act[i], &p->act_ready[i]), *h, *out[2];
    check(shmap_array_transfer(&h, a, p->st[1], P_DATA), "transfer to stage 1");
    check(shmap_map(p->st[1], body_fb1, NULL, 4,
                    (shmap_array *[]){h, p->w2, p->y[i], g2},
                    (const char *[]){P_DATA, P_ALL, P_DATA, P_ALL}, 2, out,
                    (const char *[]){P_ALL, P_DATA}),
          "stage 1 forward and backward");
    shmap_array_destroy(h);
    shmap_array_destroy(g2);
    g2 = out[0];
    publish(p, &p->grad[i], &p->grad_ready[i], out[1]);
  }
  shmap_array *w;
  check(shmap_map(p->st[1], body_update, NULL, 2, (shmap_array *[]){p->w2, g2},
                  (const char *[]){P_ALL, P_ALL}, 1, &w, &P_ALL),
        "stage 1 update");
  shmap_array_destroy(p->w2);
  shmap_array_destroy(g2);
  p->w2 = w;
  return NULL;
}

/* The sum over the processes of `mine`, a count each process keeps for
 * its own devices of `stage` (zero in a process that runs none): each
 * puts its count at its first device, and shmap_array_to_host gives
 * every process all of them. */
static uint64_t job_total(shmap_mesh *stage, uint64_t mine)
{
  uint64_t v[ND] = {0}, sum = 0;
  for (int d = 0; d < ND; d++)
    if (shmap_mesh_device_process(stage, d) == shmap_process_rank()) {
      v[d] = mine;
      break;
    }
  shmap_array *a;
  check(shmap_array_from_host_sharded(&a, stage, P_DATA, SHMAP_U64, 1,
                                      (int64_t[]){ND}, v),
        "placing the count");
  check(shmap_array_to_host(a, v), "reading the counts");
  shmap_array_destroy(a);
  for (int d = 0; d < ND; d++)
    sum += v[d];
  return sum;
}

/* ---- serial training ---------------------------------------------------- */

static void serial_step(const double *x, const double *y, double *w1,
                        double *w2, double *loss)
{
  const int rows = MB / ND;
  double g1[D * H] = {0}, g2[H * O] = {0};
  *loss = 0;
  for (int i = 0; i < M; i++) {
    double h[ND][MB * H], dh[ND][MB * H], p2[ND][H * O], p1[ND][D * H];
    for (int dd = 0; dd < ND; dd++) {
      const double *xr = x + (i * MB + dd * rows) * D;
      const double *yr = y + (i * MB + dd * rows) * O;
      fwd0(xr, w1, h[dd], rows);
      fb1(h[dd], w2, yr, p2[dd], dh[dd], rows);
      double o[MB * O];
      matmul(h[dd], w2, o, rows, H, O);
      for (int k = 0; k < rows * O; k++)
        *loss += 0.5 * (o[k] - yr[k]) * (o[k] - yr[k]) / B;
    }
    for (int k = 0; k < H * O; k++)
      g2[k] = g2[k] + (p2[0][k] + p2[1][k]);
    for (int dd = 0; dd < ND; dd++)
      bwd0(x + (i * MB + dd * rows) * D, h[dd], dh[dd], p1[dd], rows);
    for (int k = 0; k < D * H; k++)
      g1[k] = g1[k] + (p1[0][k] + p1[1][k]);
  }
  for (int k = 0; k < D * H; k++)
    w1[k] = w1[k] - LR * g1[k];
  for (int k = 0; k < H * O; k++)
    w2[k] = w2[k] - LR * g2[k];
}

int main(void)
{
  double x[B * D], y[B * O], w1[D * H], w2[H * O];
  unsigned s = 11;
  double *all[4] = {x, y, w1, w2};
  int len[4] = {B * D, B * O, D * H, H * O};
  for (int a = 0; a < 4; a++)
    for (int i = 0; i < len[a]; i++) {
      s = s * 1103515245u + 12345u;
      all[a][i] = (double)((s >> 16) % 200) / 100.0 - 1.0;
    }

  shmap_mesh *mesh;
  pipe_t p;
  memset(&p, 0, sizeof p);
  pthread_mutex_init(&p.lock, NULL);
  pthread_cond_init(&p.cond, NULL);
  check(shmap_mesh_create(&mesh, "stage=2, data=2"), "shmap_mesh_create");
  check(shmap_mesh_slice(&p.st[0], mesh, "stage=0"), "slice 0");
  check(shmap_mesh_slice(&p.st[1], mesh, "stage=1"), "slice 1");
  for (int i = 0; i < M; i++) {
    check(shmap_array_from_host_sharded(&p.x[i], p.st[0], P_DATA, SHMAP_F64, 2,
                                        (int64_t[]){MB, D}, x + i * MB * D),
          "x");
    check(shmap_array_from_host_sharded(&p.y[i], p.st[1], P_DATA, SHMAP_F64, 2,
                                        (int64_t[]){MB, O}, y + i * MB * O),
          "y");
  }
  check(shmap_array_from_host_sharded(&p.w1, p.st[0], P_ALL, SHMAP_F64, 2,
                                      (int64_t[]){D, H}, w1), "w1");
  check(shmap_array_from_host_sharded(&p.w2, p.st[1], P_ALL, SHMAP_F64, 2,
                                      (int64_t[]){H, O}, w2), "w2");

  int bad = 0;
  for (int step = 0; step < STEPS; step++) {
    for (int i = 0; i < M; i++)
      p.act_ready[i] = p.grad_ready[i] = 0;
    pthread_t t[2];
    pthread_create(&t[0], NULL, stage0, &p);
    pthread_create(&t[1], NULL, stage1, &p);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    for (int i = 0; i < M; i++)
      shmap_array_destroy(p.act[i]);
    double loss, got1[D * H], got2[H * O];
    serial_step(x, y, w1, w2, &loss);
    check(shmap_array_to_host(p.w1, got1), "w1 to host");
    check(shmap_array_to_host(p.w2, got2), "w2 to host");
    int same = !memcmp(got1, w1, sizeof w1) && !memcmp(got2, w2, sizeof w2);
    bad |= !same;
    if (shmap_process_rank() == 0 || !same)
      printf("step %d: loss %.6f; weights %s serial training bit for bit\n",
             step, loss, same ? "equal" : "DIFFER from");
  }
  shmap_stats st;
  check(shmap_mesh_stats(p.st[1], &st), "stats");
  uint64_t transferred = job_total(p.st[1], st.bytes_transferred);
  if (shmap_process_rank() == 0)
    printf("stage 1 brought in %llu bytes by transfer\n",
           (unsigned long long)transferred);
  /* Activations: STEPS * M microbatches of MB x H doubles. */
  if (transferred != (unsigned long long)STEPS * M * MB * H * 8) {
    printf("expected %d bytes\n", STEPS * M * MB * H * 8);
    bad = 1;
  }
  for (int i = 0; i < M; i++) {
    shmap_array_destroy(p.x[i]);
    shmap_array_destroy(p.y[i]);
  }
  shmap_array_destroy(p.w1);
  shmap_array_destroy(p.w2);
  shmap_mesh_destroy(p.st[0]);
  shmap_mesh_destroy(p.st[1]);
  shmap_mesh_destroy(mesh);
  pthread_mutex_destroy(&p.lock);
  pthread_cond_destroy(&p.cond);
  return bad;
}
