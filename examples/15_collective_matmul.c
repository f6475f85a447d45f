/* SPDX-License-Identifier: MIT */
/*
 * 15_collective_matmul.c - libshmap tutorial, step 12: the collective
 * matmul, where each step's transfer travels while the step's matmul runs.
 *
 * What this example teaches
 *   Example 03 multiplied first and communicated after; an all_gather
 *   before the matmul would do the opposite.  Either way the devices sit
 *   idle while the bytes move.  The collective matmul (JAX's shard_map
 *   documentation, "Efficiently Scaling Transformer Inference" 3.2.3) cuts
 *   the collective into n-1 ppermutes around a ring and the matmul into n
 *   pieces, and in every step multiplies the chunk it has while the next
 *   chunk is on its way.  The three programs here, on a ring of n = 4
 *   devices along axis 'i', out = lhs @ rhs with lhs f32[M,K], rhs f32[K,N]:
 *
 *   1. all-gather matmul, one direction.  lhs is split by rows, P('i',None),
 *      rhs by rows too, P('i',None): device d holds rhs chunk d (K/n rows)
 *      and needs all of them.  In step s it holds chunk c = (d - s) mod n,
 *      passes it on to d+1, and adds lhs[:, chunk c] @ chunk c to its
 *      output rows.  After n steps it has seen every chunk, never the whole
 *      rhs at once: the all_gather happened piece by piece under the matmul.
 *   2. all-gather matmul, both directions.  Each chunk is cut in halves; the
 *      low half travels up the ring (d -> d+1), the high half down
 *      (d -> d-1), so both links of every device carry half the bytes and
 *      each step's transfer takes half as long.
 *   3. reduce-scatter matmul.  lhs split by columns, P(None,'i'), rhs by
 *      rows: every device holds a partial product of the whole output, and
 *      out must be summed over devices and scattered by rows (example 04's
 *      psum_scatter).  Instead an accumulator for each row block travels
 *      down the ring (d -> d-1); every device adds its own partial product
 *      for that row block while the previous accumulator is in flight, and
 *      after n-1 steps device d holds the finished row block d.
 *
 * Overlapped and blocking transfers
 *   Each step is written as: start the transfer, multiply, wait for the
 *   transfer (xfer_start and xfer_wait below).  The transfers are
 *   shmap_ppermute_start() and shmap_wait(): the library moves the bytes
 *   while the body multiplies, and the body must neither write the block
 *   it sends nor read the one it receives before the wait.  With the
 *   argument "blocking" the start is the ordinary shmap_ppermute_new(),
 *   which returns once the bytes have arrived, and the wait does nothing;
 *   the results are the same bits.
 *     ./examples/15_collective_matmul              both, each checked
 *     ./examples/15_collective_matmul blocking     blocking only
 *     ./examples/15_collective_matmul overlapped   overlapped only
 *   Add "big" to run a larger problem (M=N=256, K=1024) whose trace is
 *   easier to read; the checks are the same.
 *
 * Checking the result bit for bit
 *   A float matmul is a sum, and the ring decides the order of its terms:
 *   device d adds its chunks' products in the order d, d-1, ..., so the
 *   result differs in the last bits from a serial matmul that runs through
 *   k = 0..K-1 in one loop.  The serial reference here therefore uses the
 *   same kernels in the same order (chunk by chunk, starting where the
 *   ring starts) and must match bit for bit; the one-loop serial matmul is
 *   printed beside it as the largest difference, which is rounding only.
 *   Under mpirun (shmap-mpi(7)) the devices of the ring are spread over
 *   the processes; shmap_array_to_host() gives each process the whole
 *   result, every process checks it, and process 0 alone prints.
 *
 * Pictures: a trace for Perfetto
 *     SHMAP_TRACE=cm.json ./examples/15_collective_matmul overlapped big
 *   writes a Chrome trace of the whole run when the program exits; open it
 *   at https://ui.perfetto.dev ("Open trace file").  The mesh is a process,
 *   "mesh i=4", and each device a track with one slice per map, its body,
 *   in which the matmuls run.  In the overlapped run each device has
 *   tracks "device d requests (slot k)" beneath its own: every request is
 *   a slice "ppermute request" from its start to its completion, with the
 *   copy itself, "ppermute transfer", inside it.  They lie under the
 *   device's body, that is under the matmuls: the bytes move while the
 *   device computes.  Run it with "blocking" instead and the ppermute
 *   slices sit on the device's own track inside the body, one after each
 *   step, the matmuls being the gaps between them: the body lasts as long
 *   as the matmuls plus the transfers.  On a machine with two cores the
 *   copies and the matmuls share the cores, so overlap gains little there
 *   (BENCHMARKS.md, "Collective matmul").
 */
#include <shmap.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDEV 4 /* devices on the ring (axis i) */
#define MAX_RING 64

/* Problem size; "big" makes it larger for the trace. */
static int M = 8, K = 16, N = 8;
static int verbose = 1;
static int root; /* this process prints: process 0 under mpirun */

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "15_collective_matmul: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* ---- kernels: the bodies and the serial reference share them ----------- */

/* z (m x n) = a (m x k, row stride lda) @ b (k x n): one left fold over k. */
static void matmul(const float *a, int lda, const float *b, float *z, int m,
                   int k, int n)
{
  for (int r = 0; r < m; r++)
    for (int c = 0; c < n; c++) {
      float s = 0.0f;
      for (int t = 0; t < k; t++)
        s += a[r * lda + t] * b[t * n + c];
      z[r * n + c] = s;
    }
}

/* acc = acc + z, elementwise. */
static void add(float *acc, const float *z, int64_t len)
{
  for (int64_t e = 0; e < len; e++)
    acc[e] = acc[e] + z[e];
}

/* ---- transfers: start, compute, wait ----------------------------------- */

static int overlapped; /* 1: start/wait requests, 0: blocking ppermute */

/* A transfer of one step: its result block and, when overlapped, the open
 * request. */
typedef struct xfer {
  shmap_block *out;
  shmap_request *req;
} xfer;

/* Start sending x along the ring: rank q sends to q + dir (mod n). */
static int xfer_start(shmap_ctx *ctx, const shmap_block *x, int dir, xfer *t)
{
  int n = shmap_axis_size(ctx, "i");
  int pairs[MAX_RING][2];
  for (int q = 0; q < n; q++) {
    pairs[q][0] = q;
    pairs[q][1] = ((q + dir) % n + n) % n;
  }
  t->req = NULL;
  if (overlapped)
    return shmap_ppermute_start(ctx, x, "i", n, (const int(*)[2])pairs,
                                &t->out, &t->req);
  return shmap_ppermute_new(ctx, x, "i", n, (const int(*)[2])pairs, &t->out);
}

/* Wait until t->out holds what the neighbour sent. */
static int xfer_wait(shmap_ctx *ctx, xfer *t)
{
  return overlapped ? shmap_wait(ctx, &t->req) : 0;
}

/* A block describing rows [r0, r0 + rows) of a row-major matrix with n
 * columns; the memory stays the caller's. */
static shmap_block rows_of(const shmap_block *x, int64_t r0, int64_t rows)
{
  shmap_block b = {.data = (float *)x->data + r0 * x->shape[1],
                   .dtype = SHMAP_F32, .rank = 2,
                   .shape = {rows, x->shape[1]}};
  return b;
}

/* ---- 1. all-gather matmul, one direction --------------------------------- */

/* lhs f32[M/n, K], rhs f32[K/n, N] -> out f32[M/n, N]. */
static int ag_uni(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int n = shmap_axis_size(ctx, "i"), d = shmap_axis_index(ctx, "i");
  const shmap_block *lhs = shmap_in(ctx, 0), *rhs = shmap_in(ctx, 1);
  if (lhs == NULL || rhs == NULL)
    return shmap_fail(ctx, "no input blocks");
  int mb = (int)lhs->shape[0], k = (int)lhs->shape[1], kb = k / n;
  int nc = (int)rhs->shape[1];
  shmap_block *out = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){mb, nc});
  shmap_block *z = shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){mb, nc});
  if (out == NULL || z == NULL)
    return shmap_fail(ctx, "no memory for the output");

  const shmap_block *cur = rhs; /* the chunk this device holds now */
  for (int s = 0; s < n; s++) {
    int c = ((d - s) % n + n) % n;
    xfer t = {NULL, NULL};
    int rc = 0;
    if (s < n - 1 && (rc = xfer_start(ctx, cur, +1, &t)) < 0)
      return rc;
    /* The matmul of this step, while chunk c travels on to d+1. */
    matmul((const float *)lhs->data + c * kb, k, cur->data, z->data, mb, kb,
           nc);
    add(out->data, z->data, shmap_block_numel(out));
    if (s < n - 1 && (rc = xfer_wait(ctx, &t)) < 0)
      return rc;
    if (cur != rhs && (rc = shmap_block_free(ctx, (shmap_block *)cur)) < 0)
      return rc;
    cur = t.out;
  }
  return 0;
}

/* ---- 2. all-gather matmul, both directions -------------------------------- */

static int ag_bidi(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int n = shmap_axis_size(ctx, "i"), d = shmap_axis_index(ctx, "i");
  const shmap_block *lhs = shmap_in(ctx, 0), *rhs = shmap_in(ctx, 1);
  if (lhs == NULL || rhs == NULL)
    return shmap_fail(ctx, "no input blocks");
  int mb = (int)lhs->shape[0], k = (int)lhs->shape[1], kb = k / n, h = kb / 2;
  int nc = (int)rhs->shape[1];
  shmap_block *out = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){mb, nc});
  shmap_block *z = shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){mb, nc});
  if (out == NULL || z == NULL)
    return shmap_fail(ctx, "no memory for the output");

  /* The low half of my chunk goes up the ring, the high half down. */
  shmap_block lo0 = rows_of(rhs, 0, h), hi0 = rows_of(rhs, h, h);
  shmap_block *lo = &lo0, *hi = &hi0;
  for (int s = 0; s < n; s++) {
    int cl = ((d - s) % n + n) % n; /* whose low half I hold */
    int ch = (d + s) % n;           /* whose high half I hold */
    xfer up = {NULL, NULL}, dn = {NULL, NULL};
    int rc = 0;
    if (s < n - 1 && ((rc = xfer_start(ctx, lo, +1, &up)) < 0 ||
                      (rc = xfer_start(ctx, hi, -1, &dn)) < 0))
      return rc;
    matmul((const float *)lhs->data + cl * kb, k, lo->data, z->data, mb, h,
           nc);
    add(out->data, z->data, shmap_block_numel(out));
    matmul((const float *)lhs->data + ch * kb + h, k, hi->data, z->data, mb,
           h, nc);
    add(out->data, z->data, shmap_block_numel(out));
    if (s < n - 1 &&
        ((rc = xfer_wait(ctx, &up)) < 0 || (rc = xfer_wait(ctx, &dn)) < 0))
      return rc;
    if (lo != &lo0 && ((rc = shmap_block_free(ctx, lo)) < 0 ||
                       (rc = shmap_block_free(ctx, hi)) < 0))
      return rc;
    lo = up.out;
    hi = dn.out;
  }
  return 0;
}

/* ---- 3. reduce-scatter matmul ----------------------------------------------- */

/* lhs f32[M, K/n], rhs f32[K/n, N] -> out f32[M/n, N], the summed rows of
 * block d. */
static int rs(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int n = shmap_axis_size(ctx, "i"), d = shmap_axis_index(ctx, "i");
  const shmap_block *lhs = shmap_in(ctx, 0), *rhs = shmap_in(ctx, 1);
  if (lhs == NULL || rhs == NULL)
    return shmap_fail(ctx, "no input blocks");
  int m = (int)lhs->shape[0], kb = (int)lhs->shape[1], mb = m / n;
  int nc = (int)rhs->shape[1];
  const float *a = lhs->data;
  shmap_block *acc = shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){mb, nc});
  shmap_block *z = shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){mb, nc});
  if (acc == NULL || z == NULL)
    return shmap_fail(ctx, "no memory for the accumulator");

  /* Start the accumulator of row block d+1: it will travel d, d-1, ...
   * and come back finished to device d+1 after n-1 hops. */
  matmul(a + (int64_t)((d + 1) % n) * mb * kb, kb, rhs->data, acc->data, mb,
         kb, nc);
  for (int s = 1; s < n; s++) {
    int blk = (d + s + 1) % n; /* the row block whose accumulator arrives */
    xfer t = {NULL, NULL};
    int rc = xfer_start(ctx, acc, -1, &t);
    if (rc < 0)
      return rc;
    /* My partial product for that row block, while it is on its way. */
    matmul(a + (int64_t)blk * mb * kb, kb, rhs->data, z->data, mb, kb, nc);
    if ((rc = xfer_wait(ctx, &t)) < 0 || (rc = shmap_block_free(ctx, acc)) < 0)
      return rc;
    acc = t.out;
    add(acc->data, z->data, shmap_block_numel(acc));
  }
  return shmap_out_set(ctx, 0, acc);
}

/* ---- serial references ---------------------------------------------------- */

/* The all-gather matmuls: the output rows of device d, chunks in ring
 * order; bidi says whether chunks are cut in a low and a high half. */
static void serial_ag(const float *a, const float *b, float *out, int n,
                      int bidi)
{
  int mb = M / n, kb = K / n, h = kb / 2;
  float *z = calloc((size_t)mb * N, sizeof *z);
  for (int d = 0; d < n; d++) {
    float *o = out + (int64_t)d * mb * N;
    const float *ad = a + (int64_t)d * mb * K;
    memset(o, 0, (size_t)mb * N * sizeof *o);
    for (int s = 0; s < n; s++) {
      int cl = ((d - s) % n + n) % n, ch = (d + s) % n;
      if (!bidi) {
        matmul(ad + cl * kb, K, b + (int64_t)cl * kb * N, z, mb, kb, N);
        add(o, z, (int64_t)mb * N);
        continue;
      }
      matmul(ad + cl * kb, K, b + (int64_t)cl * kb * N, z, mb, h, N);
      add(o, z, (int64_t)mb * N);
      matmul(ad + ch * kb + h, K, b + ((int64_t)ch * kb + h) * N, z, mb, h, N);
      add(o, z, (int64_t)mb * N);
    }
  }
  free(z);
}

/* The reduce-scatter matmul: row block c adds the products of the column
 * chunks c-1, c-2, ..., c (mod n), the order its accumulator visits
 * the devices. */
static void serial_rs(const float *a, const float *b, float *out, int n)
{
  int mb = M / n, kb = K / n;
  float *z = calloc((size_t)mb * N, sizeof *z);
  for (int c = 0; c < n; c++) {
    float *o = out + (int64_t)c * mb * N;
    for (int s = 0; s < n; s++) {
      int dev = ((c - 1 - s) % n + n) % n;
      matmul(a + (int64_t)c * mb * K + dev * kb, K, b + (int64_t)dev * kb * N,
             s == 0 ? o : z, mb, kb, N);
      if (s > 0)
        add(o, z, (int64_t)mb * N);
    }
  }
  free(z);
}

/* ---- the diagrams ------------------------------------------------------------ */

/* "0->1 1->2 2->3 3->0" for a shift by dir on a ring of n. */
static void print_pairs(int n, int dir)
{
  for (int q = 0; q < n; q++)
    printf("%s%d->%d", q ? " " : "", q, ((q + dir) % n + n) % n);
}

static void diagram_ag(int n, int bidi)
{
  if (!verbose)
    return;
  printf("\n%s: step by step, the rhs chunk each device multiplies\n",
         bidi ? "all-gather matmul, both directions"
              : "all-gather matmul, one direction");
  printf(bidi ? "(Lc = low half of chunk c, travels d -> d+1; Hc = high "
                "half, travels d -> d-1)\n"
              : "(Rc = rhs chunk c; it travels d -> d+1 during the step)\n");
  printf("step |");
  for (int d = 0; d < n; d++)
    printf(bidi ? "  dev%d" : " dev%d", d);
  printf(" | started before the matmul\n");
  for (int s = 0; s < n; s++) {
    printf("%4d |", s);
    for (int d = 0; d < n; d++) {
      int cl = ((d - s) % n + n) % n, ch = (d + s) % n;
      if (bidi)
        printf(" L%d+H%d", cl, ch);
      else
        printf("   R%d", cl);
    }
    printf(" | ");
    if (s == n - 1) {
      printf("nothing: the last chunks stay\n");
      continue;
    }
    printf(bidi ? "L: " : "R: ");
    print_pairs(n, +1);
    if (bidi) {
      printf(", H: ");
      print_pairs(n, -1);
    }
    printf("\n");
  }
}

static void diagram_rs(int n)
{
  if (!verbose)
    return;
  printf("\nreduce-scatter matmul: step by step, the row block whose "
         "accumulator each device adds to\n(Ab = accumulator of output "
         "rows b; it travels d -> d-1, each device adds its partial "
         "product)\n");
  printf("step |");
  for (int d = 0; d < n; d++)
    printf(" dev%d", d);
  printf(" | started before the matmul\n");
  for (int s = 0; s < n; s++) {
    printf("%4d |", s);
    for (int d = 0; d < n; d++)
      printf("   A%d", (d + s + 1) % n);
    printf(" | ");
    if (s == 0) {
      printf("nothing: each device starts an accumulator\n");
      continue;
    }
    print_pairs(n, -1);
    printf(", then add\n");
  }
  printf("after the last step device d holds row block d, summed over all "
         "%d devices\n", n);
}

/* ---- main ----------------------------------------------------------------------- */

static float input_value(unsigned *state)
{
  *state = *state * 1103515245u + 12345u;
  return (float)((int)(*state >> 9) - (1 << 22)) / (float)(1 << 22);
}

static int same_bits(const float *x, const float *y, int64_t len)
{
  return memcmp(x, y, (size_t)len * sizeof *x) == 0;
}

static double max_diff(const float *x, const float *y, int64_t len)
{
  double m = 0;
  for (int64_t e = 0; e < len; e++)
    m = fmax(m, fabs((double)x[e] - (double)y[e]));
  return m;
}

/* Run one program; returns the number of failed checks. */
static int run(shmap_mesh *mesh, const char *name, shmap_body_fn body,
               const float *a, const float *b, const char *lhs_spec,
               const float *ref, const float *plain, int show)
{
  int64_t len = (int64_t)M * N;
  shmap_array *ga, *gb, *gout;
  if (!root || !verbose) /* the layouts: process 0, small problem only */
    show = 0;
  check(shmap_array_from_host_sharded(&ga, mesh, lhs_spec, SHMAP_F32, 2,
                                      (int64_t[]){M, K}, a),
        "lhs");
  check(shmap_array_from_host_sharded(&gb, mesh, "P('i', None)", SHMAP_F32, 2,
                                      (int64_t[]){K, N}, b),
        "rhs");
  if (show) {
    printf("lhs f32[%d,%d] %s:\n", M, K, lhs_spec);
    check(shmap_array_visualize(ga, stdout), "visualize lhs");
  }
  if (show == 2) {
    printf("rhs f32[%d,%d] P('i', None):\n", K, N);
    check(shmap_array_visualize(gb, stdout), "visualize rhs");
  }
  check(shmap_map(mesh, body, NULL, 2, (shmap_array *[]){ga, gb},
                  (const char *[]){lhs_spec, "P('i', None)"}, 1, &gout,
                  (const char *[]){"P('i', None)"}),
        name);
  if (show == 2) {
    printf("out f32[%d,%d] P('i', None):\n", M, N);
    check(shmap_array_visualize(gout, stdout), "visualize out");
  }
  float *got = malloc((size_t)len * sizeof *got);
  check(shmap_array_to_host(gout, got), "shmap_array_to_host");
  int ok = same_bits(got, ref, len);
  if (root)
    printf("%-34s %-10s == serial in ring order: %s; vs one-loop "
           "serial: max |diff| %.2g\n",
           name, overlapped ? "overlapped" : "blocking",
           ok ? "yes, bit for bit" : "NO", max_diff(got, plain, len));
  free(got);
  shmap_array_destroy(gout);
  shmap_array_destroy(gb);
  shmap_array_destroy(ga);
  return !ok;
}

int main(int argc, char **argv)
{
  int want_blocking = 1, want_overlapped = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "blocking") == 0)
      want_overlapped = 0;
    else if (strcmp(argv[i], "overlapped") == 0)
      want_blocking = 0;
    else if (strcmp(argv[i], "big") == 0)
      M = 256, K = 1024, N = 256, verbose = 0;
    else {
      fprintf(stderr, "usage: %s [blocking|overlapped] [big]\n", argv[0]);
      return 2;
    }
  }
  int n = NDEV;
  int64_t la = (int64_t)M * K, lb = (int64_t)K * N, lo = (int64_t)M * N;
  float *a = malloc((size_t)la * sizeof *a), *b = malloc((size_t)lb * sizeof *b);
  float *plain = malloc((size_t)lo * sizeof *plain);
  float *ref[3];
  for (int v = 0; v < 3; v++)
    ref[v] = malloc((size_t)lo * sizeof *ref[v]);
  unsigned state = 12;
  for (int64_t e = 0; e < la; e++)
    a[e] = input_value(&state);
  for (int64_t e = 0; e < lb; e++)
    b[e] = input_value(&state);
  matmul(a, K, b, plain, M, K, N);
  serial_ag(a, b, ref[0], n, 0);
  serial_ag(a, b, ref[1], n, 1);
  serial_rs(a, b, ref[2], n);

  root = shmap_process_rank() == 0;
  if (root) {
    printf("out = lhs @ rhs, lhs f32[%d,%d], rhs f32[%d,%d], ring of %d "
           "devices along 'i'\n", M, K, K, N, n);
    diagram_ag(n, 0);
    diagram_ag(n, 1);
    diagram_rs(n);
    printf("\n");
  }

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=4"), "shmap_mesh_create");
  int errors = 0;
  for (int mode = 0; mode < 2; mode++) {
    if (!(mode ? want_overlapped : want_blocking))
      continue;
    overlapped = mode;
    /* Show the layouts in the first run: lhs, rhs and out, then the other
     * lhs. */
    int show = mode == (want_blocking ? 0 : 1) ? 2 : 0;
    errors += run(mesh, "all-gather matmul, one direction", ag_uni, a, b,
                  "P('i', None)", ref[0], plain, show);
    show = show ? 1 : 0;
    errors += run(mesh, "all-gather matmul, both directions", ag_bidi, a, b,
                  "P('i', None)", ref[1], plain, 0);
    errors += run(mesh, "reduce-scatter matmul", rs, a, b, "P(None, 'i')",
                  ref[2], plain, show);
  }
  /* The check is only meaningful if the order of the terms matters. */
  if (same_bits(ref[0], plain, lo)) {
    if (root)
      fprintf(stderr, "15_collective_matmul: the ring order gives the same "
              "bits as one loop; the inputs do not exercise rounding\n");
    errors++;
  }
  shmap_mesh_destroy(mesh);
  for (int v = 0; v < 3; v++)
    free(ref[v]);
  free(plain);
  free(b);
  free(a);
  if (errors) {
    if (root)
      fprintf(stderr, "15_collective_matmul: FAILED (%d mismatches)\n",
              errors);
    return 1;
  }
  return 0;
}
