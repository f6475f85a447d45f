/* SPDX-License-Identifier: MIT */
/*
 * 16_ring_attention.c - libshmap tutorial, step 13: ring attention, causal
 * self-attention over a sequence split across devices.
 *
 * What this example teaches
 *   Attention out = softmax(Q K^T / sqrt(D)) V needs, for every query, all
 *   keys and values before it.  When the sequence is too long for one
 *   device it is split by position, P('seq', None): device d holds the
 *   queries, keys and values of tokens d*Tb .. (d+1)*Tb - 1.  Ring
 *   attention (Liu, Zaharia and Abbeel, 2023) keeps the queries in place
 *   and passes the key/value blocks around the ring with ppermute, so that
 *   every device sees every block once, one block per step, and no device
 *   ever holds the whole sequence.  Each step's transfer is started before
 *   the step's attention, like the collective matmul of example 15.
 *
 *   A device cannot compute a softmax over keys it has not seen yet, so it
 *   keeps, for each of its query rows, the running maximum score m, the
 *   running sum of exp(score - m) l, and the running weighted sum of values
 *   o (the "online softmax" of FlashAttention).  When a block brings a
 *   larger maximum, l and o are rescaled by exp(m_old - m_new).  After the
 *   last block, out = o / l.
 *
 *   The mask is causal: token t attends to tokens 0..t.  Key blocks from
 *   later devices are entirely in the future, so a device skips them (but
 *   still forwards them): device d computes d+1 blocks and device 0 only
 *   one.  Real systems reorder the tokens (striped or zigzag layouts) to
 *   even this out; this example keeps the plain layout so the picture stays
 *   simple.
 *
 * Checking
 *   The online softmax adds the key blocks in the order they arrive:
 *   d, d-1, ..., 0.  The serial reference runs the same kernel over the
 *   whole sequence in that order and must match bit for bit; a plain
 *   softmax over each full row is printed beside it as the largest
 *   difference, which is rounding only.  Under mpirun (shmap-mpi(7)) the
 *   devices of the ring are spread over the processes;
 *   shmap_array_to_host() gives each process the whole output, every
 *   process checks it, and process 0 alone prints.
 */
#include <shmap.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDEV 4          /* devices along 'seq' */
#define T 16            /* tokens */
#define D 4             /* head dimension */
#define TB (T / NDEV)   /* tokens per device */
#define SCALE 0.5f      /* 1/sqrt(D) */
#define MAX_RING 64

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "16_ring_attention: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* ---- the kernel: the bodies and the serial reference share it ------------ */

/* Running state of one query row. */
typedef struct row_state {
  float m, l, o[D];
} row_state;

static void row_init(row_state *st)
{
  st->m = -INFINITY;
  st->l = 0.0f;
  for (int e = 0; e < D; e++)
    st->o[e] = 0.0f;
}

/*
 * Fold one block of keys and values (rows of kv: K in columns 0..D-1, V in
 * D..2D-1) into the state of query q at position qpos; the block's first
 * key is at position kpos0.  Keys after qpos are masked out.
 */
static void attend_block(const float *q, int qpos, const float *kv, int kpos0,
                         int rows, row_state *st)
{
  float s[TB];
  float mnew = st->m;
  int n = 0; /* visible keys: the first n of the block */
  for (int j = 0; j < rows && kpos0 + j <= qpos; j++, n++) {
    float dot = 0.0f;
    for (int e = 0; e < D; e++)
      dot += q[e] * kv[j * 2 * D + e];
    s[j] = dot * SCALE;
    mnew = fmaxf(mnew, s[j]);
  }
  if (n == 0)
    return;
  float corr = expf(st->m - mnew); /* 0 for the first block: m = -inf */
  st->l = st->l * corr;
  for (int e = 0; e < D; e++)
    st->o[e] = st->o[e] * corr;
  for (int j = 0; j < n; j++) {
    float p = expf(s[j] - mnew);
    st->l = st->l + p;
    for (int e = 0; e < D; e++)
      st->o[e] = st->o[e] + p * kv[j * 2 * D + D + e];
  }
  st->m = mnew;
}

/* ---- the body ---------------------------------------------------------------- */

/* Inputs: q f32[TB, D] and kv f32[TB, 2D] (keys | values) of my tokens.
 * Output: f32[TB, D], the attention of my queries. */
static int ring_attention(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int n = shmap_axis_size(ctx, "seq"), d = shmap_axis_index(ctx, "seq");
  const shmap_block *q = shmap_in(ctx, 0), *kv = shmap_in(ctx, 1);
  if (q == NULL || kv == NULL)
    return shmap_fail(ctx, "no input blocks");
  if (n > MAX_RING || q->shape[0] != TB)
    return shmap_fail(ctx, "this body expects a ring of at most %d devices "
                      "and %d tokens each", MAX_RING, TB);
  shmap_block *out = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){TB, D});
  if (out == NULL)
    return shmap_fail(ctx, "no output block");
  int pairs[MAX_RING][2]; /* d -> d+1 */
  for (int r = 0; r < n; r++) {
    pairs[r][0] = r;
    pairs[r][1] = (r + 1) % n;
  }

  row_state st[TB];
  for (int t = 0; t < TB; t++)
    row_init(&st[t]);
  const shmap_block *cur = kv;
  for (int s = 0; s < n; s++) {
    int c = ((d - s) % n + n) % n; /* whose keys and values I hold */
    shmap_block *next = NULL;
    shmap_request *req = NULL;
    int rc;
    /* Start passing the block on, attend to it, then wait for the next. */
    if (s < n - 1 && (rc = shmap_ppermute_start(ctx, cur, "seq", n,
                                                (const int(*)[2])pairs,
                                                &next, &req)) < 0)
      return rc;
    if (c <= d) /* later blocks are in the future: masked entirely */
      for (int t = 0; t < TB; t++)
        attend_block((const float *)q->data + t * D, d * TB + t, cur->data,
                     c * TB, TB, &st[t]);
    if (req != NULL && (rc = shmap_wait(ctx, &req)) < 0)
      return rc;
    if (cur != kv && (rc = shmap_block_free(ctx, (shmap_block *)cur)) < 0)
      return rc;
    cur = next;
  }
  float *o = out->data;
  for (int t = 0; t < TB; t++)
    for (int e = 0; e < D; e++)
      o[t * D + e] = st[t].o[e] / st[t].l;
  return 0;
}

/* ---- pictures ------------------------------------------------------------------- */

static void print_mask(int n)
{
  printf("causal mask by blocks (row: query block = device, column: key "
         "block)\n   #: all visible  \\: diagonal, half masked  .: future, "
         "skipped\n     ");
  for (int c = 0; c < n; c++)
    printf(" k%d", c);
  printf("\n");
  for (int d = 0; d < n; d++) {
    printf("  q%d ", d);
    for (int c = 0; c < n; c++)
      printf("  %c", c < d ? '#' : c == d ? '\\' : '.');
    printf("\n");
  }
}

static void print_steps(int n)
{
  printf("\nstep by step: the key/value block each device holds, and what "
         "it does with it\nstep |");
  for (int d = 0; d < n; d++)
    printf("   dev%d   ", d);
  printf("| started before the attention\n");
  for (int s = 0; s < n; s++) {
    printf("%4d |", s);
    for (int d = 0; d < n; d++) {
      int c = ((d - s) % n + n) % n;
      printf(" KV%d %-5s", c, c < d ? "full" : c == d ? "diag" : "skip");
    }
    printf("| ");
    if (s == n - 1)
      printf("nothing\n");
    else
      for (int d = 0; d < n; d++)
        printf("%d->%d%s", d, (d + 1) % n, d == n - 1 ? "\n" : " ");
  }
}

/* ---- main --------------------------------------------------------------------------- */

static float input_value(unsigned *state)
{
  *state = *state * 1103515245u + 12345u;
  return (float)((int)(*state >> 9) - (1 << 22)) / (float)(1 << 21);
}

int main(void)
{
  static float q[T][D], kv[T][2 * D], out[T][D], ref[T][D], plain[T][D];
  unsigned state = 7;
  for (int t = 0; t < T; t++) {
    for (int e = 0; e < D; e++)
      q[t][e] = input_value(&state);
    for (int e = 0; e < 2 * D; e++)
      kv[t][e] = input_value(&state);
  }

  /* Serial reference 1: the ring's order, key blocks d, d-1, ..., 0. */
  for (int d = 0; d < NDEV; d++)
    for (int t = 0; t < TB; t++) {
      int qpos = d * TB + t;
      row_state st;
      row_init(&st);
      for (int c = d; c >= 0; c--)
        attend_block(q[qpos], qpos, kv[c * TB], c * TB, TB, &st);
      for (int e = 0; e < D; e++)
        ref[qpos][e] = st.o[e] / st.l;
    }
  /* Serial reference 2: a plain softmax over each whole row, in double. */
  for (int t = 0; t < T; t++) {
    double w[T], mx = -INFINITY, sum = 0;
    for (int u = 0; u <= t; u++) {
      double dot = 0;
      for (int e = 0; e < D; e++)
        dot += (double)q[t][e] * kv[u][e];
      w[u] = dot * SCALE;
      mx = fmax(mx, w[u]);
    }
    for (int u = 0; u <= t; u++)
      sum += w[u] = exp(w[u] - mx);
    for (int e = 0; e < D; e++) {
      double o = 0;
      for (int u = 0; u <= t; u++)
        o += w[u] * kv[u][D + e];
      plain[t][e] = (float)(o / sum);
    }
  }

  int root = shmap_process_rank() == 0; /* this process prints */
  if (root) {
    printf("causal attention over %d tokens (head dimension %d), sequence "
           "split over %d devices along 'seq'\n\n", T, D, NDEV);
    print_mask(NDEV);
    print_steps(NDEV);
  }

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "seq=4"), "shmap_mesh_create");
  shmap_array *gq, *gkv, *gout;
  check(shmap_array_from_host_sharded(&gq, mesh, "P('seq', None)", SHMAP_F32,
                                      2, (int64_t[]){T, D}, q),
        "q");
  check(shmap_array_from_host_sharded(&gkv, mesh, "P('seq', None)",
                                      SHMAP_F32, 2, (int64_t[]){T, 2 * D}, kv),
        "kv");
  if (root) {
    printf("\nq f32[%d,%d] P('seq', None) (kv f32[%d,%d], keys | values, "
           "is laid out alike):\n", T, D, T, 2 * D);
    check(shmap_array_visualize(gq, stdout), "shmap_array_visualize");
  }
  check(shmap_map(mesh, ring_attention, NULL, 2, (shmap_array *[]){gq, gkv},
                  (const char *[]){"P('seq', None)", "P('seq', None)"}, 1,
                  &gout, (const char *[]){"P('seq', None)"}),
        "shmap_map");
  check(shmap_array_to_host(gout, out), "shmap_array_to_host");

  int same = memcmp(out, ref, sizeof out) == 0;
  double diff = 0;
  for (int t = 0; t < T; t++)
    for (int e = 0; e < D; e++)
      diff = fmax(diff, fabs((double)out[t][e] - plain[t][e]));
  if (root) {
    printf("\nring attention == serial online softmax in ring order: %s\n",
           same ? "yes, bit for bit" : "NO");
    printf("ring attention vs plain softmax (double): max |diff| %.2g\n",
           diff);
  }
  int errors = !same;
  if (diff > 1e-5) {
    if (root)
      fprintf(stderr, "16_ring_attention: too far from the plain softmax\n");
    errors++;
  }
  shmap_array_destroy(gout);
  shmap_array_destroy(gkv);
  shmap_array_destroy(gq);
  shmap_mesh_destroy(mesh);
  if (errors) {
    if (root)
      fprintf(stderr, "16_ring_attention: FAILED\n");
    return 1;
  }
  return 0;
}
