/* SPDX-License-Identifier: MIT */
/*
 * 17_mlp_ladder.c - libshmap tutorial, step 14: the parallelism ladder.
 * One training step of one small network, five ways.
 *
 * The network and the step
 *   y = relu(x W1) W2, with x, the targets t, y f64[16,8] and W1, W2
 *   f64[8,8]; loss = 1/(2B) sum (y - t)^2 over the batch of B = 16 rows;
 *   one step of plain gradient descent, W -= 0.25 dW.
 *
 * The ladder (the rungs of JAX's shard_map notebook and of "How to Scale
 * Your Model"), each a map over its own mesh:
 *   1. data parallel (DP), mesh data=4: the batch is split, the weights are
 *      copied on every device; the gradients are summed with psum.
 *   2. fully sharded data parallel (FSDP), mesh data=4: the batch is split
 *      and so are the weights, by rows; a device gathers each weight
 *      (all_gather) just before using it, and the gradients are summed and
 *      cut back into shards in one psum_scatter.  Memory for weights and
 *      optimizer state drops by the number of devices; the traffic is the
 *      same as DP's psum (an all-gather plus a reduce-scatter).
 *   3. tensor parallel (TP, Megatron-style), mesh model=4: the batch is
 *      whole on every device; W1 is split by columns and W2 by rows, so
 *      each device computes a quarter of the hidden units and a partial y,
 *      and one psum over 'model' per layer pair completes y.  The weight
 *      gradients need no communication at all.
 *   4. FSDP + TP, mesh data=2, model=2: TP along 'model', and along 'data'
 *      the batch is split and the TP shards are sharded again, gathered
 *      before use and reduce-scattered after.
 *   5. pipeline (GPipe), mesh stage=2: stage 0 holds W1, stage 1 holds W2
 *      (the two weights stacked in one f64[2,8,8] split by 'stage').  The
 *      batch is cut into 4 microbatches; the activations go from stage 0
 *      to stage 1 by ppermute, one per tick, all forwards first, then all
 *      backwards with the gradients going back.  Here the stages are one
 *      mesh with a 'stage' axis and every device runs every tick;
 *      examples/10_pipeline.c runs the stages as sub-meshes of their own,
 *      with a 1F1B schedule and data parallelism inside each stage.
 *   Examples 03, 04 and 09 show TP, 08 and 09 DP, in more detail.
 *
 * Checking, bit for bit
 *   The rungs add up their sums in different orders (DP sums gradients
 *   over devices, TP sums y over hidden-unit quarters, the pipeline over
 *   microbatches).  In general that changes the last bits.  The inputs
 *   here are small multiples of 1/8, chosen so that every product and
 *   every sum of the step is exact in double: then the order cannot
 *   matter, and every rung must give the serial step's loss and new
 *   weights bit for bit.  The program proves the premise first: it runs
 *   the serial step a second time with every sum in reverse order and
 *   checks that the bits agree.
 *
 * Under mpirun (shmap-mpi(7)) each rung's devices are spread over the
 * processes (one or two: the pipeline's mesh has two devices);
 * shmap_array_to_host() gives every process the whole result to check,
 * and process 0 alone prints.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 16    /* batch rows */
#define W 8     /* width of every layer */
#define MICRO 4 /* microbatches of the pipeline */
#define LR 0.25

static int root; /* this process prints: process 0 under mpirun */

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "17_mlp_ladder: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* ---- kernels: the bodies and the serial step share them ------------------ */

static int reverse_sums; /* the serial step's second run sums backwards */

/* c (m x n) = a (m x k) b (k x n). */
static void mm(const double *a, const double *b, double *c, int m, int k,
               int n)
{
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) {
        int q = reverse_sums ? k - 1 - p : p;
        s += a[i * k + q] * b[q * n + j];
      }
      c[i * n + j] = s;
    }
}

/* c (k x n) = a^T b, a is m x k, b is m x n: sums over the m rows. */
static void mm_tn(const double *a, const double *b, double *c, int m, int k,
                  int n)
{
  for (int i = 0; i < k; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < m; p++) {
        int q = reverse_sums ? m - 1 - p : p;
        s += a[q * k + i] * b[q * n + j];
      }
      c[i * n + j] = s;
    }
}

/* Forward of layer 1 on `rows` rows and `hl` hidden units: h = relu(x W1). */
static void forward1(const double *x, const double *w1, double *h, int rows,
                     int hl)
{
  mm(x, w1, h, rows, W, hl);
  for (int e = 0; e < rows * hl; e++)
    h[e] = h[e] > 0 ? h[e] : 0;
}

/* The loss's share of these rows, sum (y - t)^2, and dy = (y - t) / B. */
static double loss_grad(const double *y, const double *t, double *dy,
                        int rows)
{
  double s = 0;
  for (int e = 0; e < rows * W; e++) {
    int q = reverse_sums ? rows * W - 1 - e : e;
    double r = y[q] - t[q];
    s += r * r;
    dy[q] = r / B;
  }
  return s;
}

/* Backward of layer 2: dW2 = h^T dy, and dh = (dy W2^T) where h > 0. */
static void backward2(const double *h, const double *dy, const double *w2,
                      double *dw2, double *dh, int rows, int hl)
{
  mm_tn(h, dy, dw2, rows, hl, W);
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < hl; j++) {
      double s = 0;
      for (int p = 0; p < W; p++) {
        int q = reverse_sums ? W - 1 - p : p;
        s += dy[i * W + q] * w2[j * W + q];
      }
      dh[i * hl + j] = h[i * hl + j] > 0 ? s : 0;
    }
}

/* g += gm (gradients of microbatches). */
static void accumulate(double *g, const double *gm, int64_t len)
{
  for (int64_t e = 0; e < len; e++)
    g[e] += gm[e];
}

/* w -= LR * dw. */
static void sgd(double *w, const double *dw, int64_t len)
{
  for (int64_t e = 0; e < len; e++)
    w[e] -= LR * dw[e];
}

/* ---- helpers for the bodies --------------------------------------------- */

/* A zeroed scratch block f64[r, c]. */
static double *scratch(shmap_ctx *ctx, int64_t r, int64_t c)
{
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){r, c});
  return b ? b->data : NULL;
}

/* Output k as a copy of `w` (its shape) with the step applied. */
static int update_out(shmap_ctx *ctx, int k, const shmap_block *w,
                      const double *dw)
{
  shmap_block *o = shmap_out_copy(ctx, k, w);
  if (o == NULL)
    return shmap_fail(ctx, "no output block %d", k);
  sgd(o->data, dw, shmap_block_numel(o));
  return 0;
}

/* The loss output: total / (2B), summed over `axes` first (NULL: none). */
static int loss_out(shmap_ctx *ctx, int k, double part, const char *axes)
{
  shmap_block *l = shmap_out(ctx, k, SHMAP_F64, 1, (int64_t[]){1});
  if (l == NULL)
    return shmap_fail(ctx, "no loss block");
  *(double *)l->data = part;
  int rc = axes ? shmap_psum(ctx, l, axes) : 0;
  *(double *)l->data /= 2 * B;
  return rc;
}

/* ---- rung 1: data parallel ------------------------------------------------ */

/* In: x, t P('data'), W1, W2 P().  Out: W1', W2' P(), loss P(). */
static int dp_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *t = shmap_in(ctx, 1);
  const shmap_block *w1 = shmap_in(ctx, 2), *w2 = shmap_in(ctx, 3);
  if (!x || !t || !w1 || !w2)
    return shmap_fail(ctx, "no inputs");
  int rows = (int)x->shape[0];
  shmap_block *g1 = shmap_block_alloc(ctx, SHMAP_F64, 2, w1->shape);
  shmap_block *g2 = shmap_block_alloc(ctx, SHMAP_F64, 2, w2->shape);
  double *h = scratch(ctx, rows, W), *y = scratch(ctx, rows, W);
  double *dy = scratch(ctx, rows, W), *dh = scratch(ctx, rows, W);
  if (!g1 || !g2 || !h || !y || !dy || !dh)
    return shmap_fail(ctx, "no scratch memory");
  forward1(x->data, w1->data, h, rows, W);
  mm(h, w2->data, y, rows, W, W);
  double part = loss_grad(y, t->data, dy, rows);
  backward2(h, dy, w2->data, g2->data, dh, rows, W);
  mm_tn(x->data, dh, g1->data, rows, W, W);
  /* [tutorial:dp] */
  /* The gradients of my rows; every device needs the sum over the batch. */
  int rc;
  if ((rc = shmap_psum(ctx, g1, "data")) < 0 ||
      (rc = shmap_psum(ctx, g2, "data")) < 0 ||
      (rc = update_out(ctx, 0, w1, g1->data)) < 0 ||
      (rc = update_out(ctx, 1, w2, g2->data)) < 0)
    return rc;
  /* [end] */
  return loss_out(ctx, 2, part, "data");
}

/* ---- rung 2: FSDP ------------------------------------------------------------- */

/* In: x, t P('data'), W1, W2 P('data', None).  Out: the same shards. */
static int fsdp_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *t = shmap_in(ctx, 1);
  const shmap_block *w1s = shmap_in(ctx, 2), *w2s = shmap_in(ctx, 3);
  if (!x || !t || !w1s || !w2s)
    return shmap_fail(ctx, "no inputs");
  int rows = (int)x->shape[0];
  shmap_block *w1, *w2, *g1s, *g2s;
  shmap_block *g1 = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){W, W});
  shmap_block *g2 = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){W, W});
  double *h = scratch(ctx, rows, W), *y = scratch(ctx, rows, W);
  double *dy = scratch(ctx, rows, W), *dh = scratch(ctx, rows, W);
  if (!g1 || !g2 || !h || !y || !dy || !dh)
    return shmap_fail(ctx, "no scratch memory");
  int rc;
  /* [tutorial:fsdp] */
  /* Gather each weight just before its layer needs it. */
  if ((rc = shmap_all_gather(ctx, w1s, "data", 0, 1, &w1)) < 0)
    return rc;
  forward1(x->data, w1->data, h, rows, W);
  if ((rc = shmap_all_gather(ctx, w2s, "data", 0, 1, &w2)) < 0)
    return rc;
  mm(h, w2->data, y, rows, W, W);
  double part = loss_grad(y, t->data, dy, rows);
  backward2(h, dy, w2->data, g2->data, dh, rows, W);
  mm_tn(x->data, dh, g1->data, rows, W, W);
  /* Sum the gradients over the batch and keep my shard's rows. */
  if ((rc = shmap_psum_scatter(ctx, g1, "data", 0, 1, &g1s)) < 0 ||
      (rc = shmap_psum_scatter(ctx, g2, "data", 0, 1, &g2s)) < 0 ||
      (rc = update_out(ctx, 0, w1s, g1s->data)) < 0 ||
      (rc = update_out(ctx, 1, w2s, g2s->data)) < 0)
    return rc;
  /* [end] */
  return loss_out(ctx, 2, part, "data");
}

/* ---- rung 3: tensor parallel -------------------------------------------------- */

/* In: x, t P(), W1 P(None, 'model'), W2 P('model', None).  Out: the same. */
static int tp_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *t = shmap_in(ctx, 1);
  const shmap_block *w1 = shmap_in(ctx, 2), *w2 = shmap_in(ctx, 3);
  if (!x || !t || !w1 || !w2)
    return shmap_fail(ctx, "no inputs");
  int rows = (int)x->shape[0], hl = (int)w1->shape[1];
  shmap_block *y = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){rows, W});
  double *h = scratch(ctx, rows, hl), *dy = scratch(ctx, rows, W);
  double *dh = scratch(ctx, rows, hl);
  double *g1 = scratch(ctx, W, hl), *g2 = scratch(ctx, hl, W);
  if (!y || !h || !dy || !dh || !g1 || !g2)
    return shmap_fail(ctx, "no scratch memory");
  /* [tutorial:tp] */
  /* My hidden units, and their share of y. */
  forward1(x->data, w1->data, h, rows, hl);
  mm(h, w2->data, y->data, rows, hl, W);
  int rc = shmap_psum(ctx, y, "model");
  /* [end] */
  if (rc < 0)
    return rc;
  double part = loss_grad(y->data, t->data, dy, rows);
  /* The gradients of my own weight shards: nothing to communicate. */
  backward2(h, dy, w2->data, g2, dh, rows, hl);
  mm_tn(x->data, dh, g1, rows, W, hl);
  if ((rc = update_out(ctx, 0, w1, g1)) < 0 ||
      (rc = update_out(ctx, 1, w2, g2)) < 0)
    return rc;
  return loss_out(ctx, 2, part, NULL);
}

/* ---- rung 4: FSDP + TP ------------------------------------------------------- */

/* In: x, t P('data'), W1 P('data', 'model'), W2 P('model', 'data'). */
static int fsdp_tp_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *t = shmap_in(ctx, 1);
  const shmap_block *w1s = shmap_in(ctx, 2), *w2s = shmap_in(ctx, 3);
  if (!x || !t || !w1s || !w2s)
    return shmap_fail(ctx, "no inputs");
  int rows = (int)x->shape[0], hl = (int)w1s->shape[1];
  shmap_block *w1, *w2, *g1s, *g2s;
  shmap_block *y = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){rows, W});
  shmap_block *g1 = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){W, hl});
  shmap_block *g2 = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){hl, W});
  double *h = scratch(ctx, rows, hl), *dy = scratch(ctx, rows, W);
  double *dh = scratch(ctx, rows, hl);
  if (!y || !g1 || !g2 || !h || !dy || !dh)
    return shmap_fail(ctx, "no scratch memory");
  int rc;
  /* FSDP along 'data': gather my TP shards (W1 by rows, W2 by columns). */
  if ((rc = shmap_all_gather(ctx, w1s, "data", 0, 1, &w1)) < 0 ||
      (rc = shmap_all_gather(ctx, w2s, "data", 1, 1, &w2)) < 0)
    return rc;
  /* TP along 'model', as in rung 3, on my rows of the batch. */
  forward1(x->data, w1->data, h, rows, hl);
  mm(h, w2->data, y->data, rows, hl, W);
  if ((rc = shmap_psum(ctx, y, "model")) < 0)
    return rc;
  double part = loss_grad(y->data, t->data, dy, rows);
  backward2(h, dy, w2->data, g2->data, dh, rows, hl);
  mm_tn(x->data, dh, g1->data, rows, W, hl);
  /* FSDP again: sum over the batch, keep my shard. */
  if ((rc = shmap_psum_scatter(ctx, g1, "data", 0, 1, &g1s)) < 0 ||
      (rc = shmap_psum_scatter(ctx, g2, "data", 1, 1, &g2s)) < 0 ||
      (rc = update_out(ctx, 0, w1s, g1s->data)) < 0 ||
      (rc = update_out(ctx, 1, w2s, g2s->data)) < 0)
    return rc;
  return loss_out(ctx, 2, part, "data");
}

/* ---- rung 5: GPipe pipeline ----------------------------------------------------- */

#define MB (B / MICRO) /* rows per microbatch */
#define TICKS (MICRO + 1) /* forward ticks with two stages; as many back */

/* What stage s does at forward tick k (or backward tick k): the
 * microbatch, or -1 for an idle tick (the pipeline's bubble). */
static int fwd_micro(int s, int k)
{
  int m = k - s;
  return m >= 0 && m < MICRO ? m : -1;
}
static int bwd_micro(int s, int k)
{
  int m = MICRO - 1 - (k - (1 - s));
  return k - (1 - s) >= 0 && m >= 0 ? m : -1;
}

/* In: x, t P(), W f64[2,W,W] P('stage') (W1 on stage 0, W2 on stage 1).
 * Out: W' P('stage'), loss P(). */
static int pipe_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *t = shmap_in(ctx, 1);
  const shmap_block *w = shmap_in(ctx, 2);
  if (!x || !t || !w)
    return shmap_fail(ctx, "no inputs");
  int s = shmap_axis_index(ctx, "stage");
  const double *xd = x->data, *td = t->data, *wd = w->data;
  /* Kept from the forward to the backward pass, per microbatch: the
   * hidden activations (on both stages) and dy (on stage 1). */
  double *hs = scratch(ctx, B, W), *dys = scratch(ctx, B, W);
  double *y = scratch(ctx, MB, W), *dh = scratch(ctx, MB, W);
  double *g = scratch(ctx, W, W), *gm = scratch(ctx, W, W);
  shmap_block *msg = shmap_block_alloc(ctx, SHMAP_F64, 2, (int64_t[]){MB, W});
  if (!hs || !dys || !y || !dh || !g || !gm || !msg)
    return shmap_fail(ctx, "no scratch memory");
  const size_t mbytes = sizeof(double) * MB * W;
  const int down[1][2] = {{0, 1}}, up[1][2] = {{1, 0}};
  double part = 0;
  int rc;

  /* Forward ticks: stage 0 computes h of microbatch k and sends it; stage
   * 1 computes y and the loss of the microbatch it received a tick ago. */
  /* [tutorial:pipeline] */
  for (int k = 0; k < TICKS; k++) {
    int m = fwd_micro(s, k);
    if (m >= 0 && s == 0) {
      forward1(xd + m * MB * W, wd, hs + m * MB * W, MB, W);
      memcpy(msg->data, hs + m * MB * W, mbytes);
    }
    if (m >= 0 && s == 1) {
      mm(hs + m * MB * W, wd, y, MB, W, W);
      part += loss_grad(y, td + m * MB * W, dys + m * MB * W, MB);
    }
    if ((rc = shmap_ppermute(ctx, msg, "stage", 1, down)) < 0)
      return rc;
    if (s == 1 && (m = fwd_micro(1, k + 1)) >= 0)
      memcpy(hs + m * MB * W, msg->data, mbytes);
  }
  /* [end] */
  /* Backward ticks, last microbatch first: stage 1 computes its share of
   * dW2 and dh and sends dh; stage 0 adds x^T dh of the dh it received a
   * tick ago to dW1. */
  for (int k = 0; k < TICKS; k++) {
    int m = bwd_micro(s, k);
    if (m >= 0 && s == 1) {
      backward2(hs + m * MB * W, dys + m * MB * W, wd, gm, msg->data, MB, W);
      accumulate(g, gm, W * W);
    }
    if (m >= 0 && s == 0) {
      mm_tn(xd + m * MB * W, dh, gm, MB, W, W);
      accumulate(g, gm, W * W);
    }
    if ((rc = shmap_ppermute(ctx, msg, "stage", 1, up)) < 0)
      return rc;
    if (s == 0)
      memcpy(dh, msg->data, mbytes);
  }
  /* g is my stage's weight gradient, summed over the microbatches. */
  if ((rc = update_out(ctx, 0, w, g)) < 0)
    return rc;
  return loss_out(ctx, 1, part, "stage");
}
/* ---- the serial step -------------------------------------------------------- */

typedef struct step {
  double w1[W * W], w2[W * W], loss;
} step;

static void serial_step(const double *x, const double *t, const double *w1,
                        const double *w2, step *out)
{
  static double h[B * W], y[B * W], dy[B * W], dh[B * W];
  double g1[W * W], g2[W * W];
  forward1(x, w1, h, B, W);
  mm(h, w2, y, B, W, W);
  out->loss = loss_grad(y, t, dy, B) / (2 * B);
  backward2(h, dy, w2, g2, dh, B, W);
  mm_tn(x, dh, g1, B, W, W);
  memcpy(out->w1, w1, sizeof out->w1);
  memcpy(out->w2, w2, sizeof out->w2);
  sgd(out->w1, g1, W * W);
  sgd(out->w2, g2, W * W);
}

/* ---- running the rungs ---------------------------------------------------- */

static double X[B * W], TGT[B * W], W1[W * W], W2[W * W];

typedef struct rung {
  const char *title, *mesh, *x_spec, *w1_spec, *w2_spec;
  shmap_body_fn body;
  const char *story; /* who sends what to whom */
} rung;

static const rung rungs[] = {
    {"1. data parallel (DP)", "data=4", "P('data', None)", "P()", "P()",
     dp_body,
     "  each device: 4 of the 16 rows of x and t, all of W1 and W2\n"
     "  forward, backward on my rows -> dW1, dW2 of my rows (8x8 each)\n"
     "  psum(dW1, 'data'), psum(dW2, 'data'): each device sends its 8x8\n"
     "    gradients to the others and adds up theirs in device order\n"
     "  update: all 4 make the same update; out spec P() checks that the\n"
     "    copies agree bit for bit\n"},
    {"2. fully sharded data parallel (FSDP)", "data=4", "P('data', None)",
     "P('data', None)", "P('data', None)", fsdp_body,
     "  each device: 4 rows of x and t, and 2 of the 8 rows of W1 and W2\n"
     "  all_gather(W1 shard, 'data'): device d sends its 2 rows to the 3\n"
     "    others -> whole W1 for layer 1; the same for W2 before layer 2\n"
     "  backward on my rows -> whole dW1, dW2 of my rows\n"
     "  psum_scatter(dW, 'data', rows): summed over devices, device d keeps\n"
     "    rows 2d, 2d+1 of the sum: exactly the gradient of its shard\n"
     "  update: each device its own shard\n"},
    {"3. tensor parallel (TP)", "model=4", "P()", "P(None, 'model')",
     "P('model', None)", tp_body,
     "  each device: all of x and t, columns 2d, 2d+1 of W1 (2 hidden\n"
     "    units), the matching 2 rows of W2\n"
     "  h = relu(x W1 shard): my 2 hidden units of every row\n"
     "  y partial = h W2 shard; psum(y, 'model'): devices exchange their\n"
     "    16x8 partials and add them -> y on every device\n"
     "  backward: dW1, dW2 of my shards from my h and the common dy:\n"
     "    no communication\n"},
    {"4. FSDP + TP", "data=2, model=2", "P('data', None)",
     "P('data', 'model')", "P('model', 'data')", fsdp_tp_body,
     "  device (d, m): rows 8d.. of x, t; the TP shard of W1 (columns 4m..)\n"
     "    cut again by rows over 'data', of W2 (rows 4m..) by columns\n"
     "  all_gather over 'data' (between d=0 and d=1): the TP shards\n"
     "  TP over 'model' on my 8 rows: psum(y, 'model') between m=0 and m=1\n"
     "  psum_scatter over 'data': gradients summed over the batch, cut back\n"
     "    into FSDP shards\n"},
};

static void print_w1_layout(shmap_array *w1)
{
  char spec[64];
  shmap_array_spec(w1, spec, sizeof spec);
  printf("  W1 f64[%d,%d] %s:\n", W, W, spec);
  check(shmap_array_visualize(w1, stdout), "shmap_array_visualize");
}

/* Compare a result with the serial step; returns the number of errors. */
static int compare(const char *title, const double *w1, const double *w2,
                   double loss, const step *ref)
{
  int ok = memcmp(w1, ref->w1, sizeof ref->w1) == 0 &&
           memcmp(w2, ref->w2, sizeof ref->w2) == 0 &&
           memcmp(&loss, &ref->loss, sizeof loss) == 0;
  if (root) {
    printf("  loss %.10g; loss and new W1, W2 == the serial step: %s\n",
           loss, ok ? "yes, bit for bit" : "NO");
    if (!ok)
      fprintf(stderr, "17_mlp_ladder: %s differs from the serial step\n",
              title);
  }
  return !ok;
}

static int run_rung(const rung *r, const step *ref)
{
  shmap_mesh *mesh;
  shmap_array *in[4], *out[3];
  if (root)
    printf("\n%s, mesh %s\n", r->title, r->mesh);
  check(shmap_mesh_create(&mesh, r->mesh), "shmap_mesh_create");
  const int64_t xs[2] = {B, W}, ws[2] = {W, W};
  check(shmap_array_from_host_sharded(&in[0], mesh, r->x_spec, SHMAP_F64, 2,
                                      xs, X), "x");
  check(shmap_array_from_host_sharded(&in[1], mesh, r->x_spec, SHMAP_F64, 2,
                                      xs, TGT), "t");
  check(shmap_array_from_host_sharded(&in[2], mesh, r->w1_spec, SHMAP_F64, 2,
                                      ws, W1), "W1");
  check(shmap_array_from_host_sharded(&in[3], mesh, r->w2_spec, SHMAP_F64, 2,
                                      ws, W2), "W2");
  if (root) {
    print_w1_layout(in[2]);
    fputs(r->story, stdout);
  }
  check(shmap_map(mesh, r->body, NULL, 4, in,
                  (const char *[]){r->x_spec, r->x_spec, r->w1_spec,
                                   r->w2_spec},
                  3, out,
                  (const char *[]){r->w1_spec, r->w2_spec, "P()"}),
        r->title);
  double w1[W * W], w2[W * W], loss;
  check(shmap_array_to_host(out[0], w1), "W1'");
  check(shmap_array_to_host(out[1], w2), "W2'");
  check(shmap_array_to_host(out[2], &loss), "loss");
  int errors = compare(r->title, w1, w2, loss, ref);
  for (int k = 0; k < 3; k++)
    shmap_array_destroy(out[k]);
  for (int k = 0; k < 4; k++)
    shmap_array_destroy(in[k]);
  shmap_mesh_destroy(mesh);
  return errors;
}

/* The GPipe schedule, tick by tick. */
static void print_schedule(void)
{
  printf("  stage 0: W1 = W[0] (layer 1), stage 1: W2 = W[1] (layer 2), the "
         "weights stacked\n  in W f64[2,%d,%d] P('stage'); %d microbatches of "
         "%d rows; Fm/Bm = forward/backward\n  of microbatch m, '.' = idle "
         "(the bubble)\n", W, W, MICRO, MB);
  printf("  tick | stage 0 | stage 1 | ppermute after the tick\n");
  for (int k = 0; k < 2 * TICKS; k++) {
    int back = k >= TICKS, kk = back ? k - TICKS : k;
    printf("  %4d |", k);
    for (int st = 0; st < 2; st++) {
      int m = back ? bwd_micro(st, kk) : fwd_micro(st, kk);
      if (m < 0)
        printf("    .    |");
      else
        printf("   %c%d    |", back ? 'B' : 'F', m);
    }
    int m = back ? bwd_micro(1, kk) : fwd_micro(0, kk);
    if (m < 0)
      printf(" (still called by both: stale data, ignored)\n");
    else if (back)
      printf(" 1->0: dh of microbatch %d\n", m);
    else
      printf(" 0->1: h of microbatch %d\n", m);
  }
  printf("  each stage: its weight's gradient summed over the microbatches, "
         "then its update\n");
}

static int run_pipeline(const step *ref)
{
  const char *title = "5. pipeline (GPipe)";
  if (root) {
    printf("\n%s, mesh stage=2\n", title);
    print_schedule();
  }

  static double wst[2 * W * W];
  memcpy(wst, W1, sizeof W1);
  memcpy(wst + W * W, W2, sizeof W2);
  shmap_mesh *mesh;
  shmap_array *in[3], *out[2];
  check(shmap_mesh_create(&mesh, "stage=2"), "shmap_mesh_create");
  check(shmap_array_from_host(&in[0], SHMAP_F64, 2, (int64_t[]){B, W}, X),
        "x");
  check(shmap_array_from_host(&in[1], SHMAP_F64, 2, (int64_t[]){B, W}, TGT),
        "t");
  check(shmap_array_from_host(&in[2], SHMAP_F64, 3, (int64_t[]){2, W, W},
                              wst), "W");
  check(shmap_map(mesh, pipe_body, NULL, 3, in,
                  (const char *[]){"P()", "P()", "P('stage')"}, 2, out,
                  (const char *[]){"P('stage')", "P()"}),
        title);
  double loss;
  check(shmap_array_to_host(out[0], wst), "W'");
  check(shmap_array_to_host(out[1], &loss), "loss");
  int errors = compare(title, wst, wst + W * W, loss, ref);
  for (int k = 0; k < 2; k++)
    shmap_array_destroy(out[k]);
  for (int k = 0; k < 3; k++)
    shmap_array_destroy(in[k]);
  shmap_mesh_destroy(mesh);
  return errors;
}

/* A multiple of 1/8 in [-1, 1]. */
static double eighths(unsigned *state)
{
  *state = *state * 1103515245u + 12345u;
  return (double)((int)((*state >> 16) % 17u) - 8) / 8;
}

int main(void)
{
  root = shmap_process_rank() == 0;
  unsigned state = 14;
  for (int e = 0; e < B * W; e++) {
    X[e] = eighths(&state);
    TGT[e] = eighths(&state);
  }
  for (int e = 0; e < W * W; e++) {
    W1[e] = eighths(&state);
    W2[e] = eighths(&state);
  }

  /* The serial step, and again with every sum reversed: the same bits
   * show that the arithmetic is exact, so the rungs' orders cannot matter. */
  static step ref, rev;
  serial_step(X, TGT, W1, W2, &ref);
  reverse_sums = 1;
  serial_step(X, TGT, W1, W2, &rev);
  reverse_sums = 0;
  int errors = 0;
  if (root)
    printf("one step of y = relu(x W1) W2, x f64[%d,%d], W1, W2 f64[%d,%d], "
           "loss 1/(2B) sum (y - t)^2, W -= %g dW\n", B, W, W, W, LR);
  if (memcmp(&ref, &rev, sizeof ref) != 0) {
    if (root)
      fprintf(stderr, "17_mlp_ladder: the serial step is not exact (reversed "
              "sums give other bits); the bitwise checks would be unfair\n");
    errors++;
  }
  if (root)
    printf("serial step: loss %.10g (the same bits with every sum reversed: "
           "%s)\n", ref.loss, errors ? "NO" : "yes, the arithmetic is exact");

  for (size_t k = 0; k < sizeof rungs / sizeof rungs[0]; k++)
    errors += run_rung(&rungs[k], &ref);
  errors += run_pipeline(&ref);
  if (errors) {
    if (root)
      fprintf(stderr, "17_mlp_ladder: FAILED (%d mismatches)\n", errors);
    return 1;
  }
  return 0;
}
