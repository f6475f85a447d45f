/* SPDX-License-Identifier: MIT */
/*
 * 05_ring_allreduce.c - libshmap tutorial, step 5: an allreduce built by hand
 * from ppermute, and why the order of floating-point additions matters.
 *
 * What this example teaches
 *   - ppermute: every device of a group sends its block to one other rank
 *     and receives one block, in a single collective call.  With the pairs
 *     (r, r+1 mod n) the group becomes a ring.
 *   - Collectives act within groups.  On the mesh i=4, j=2 a collective
 *     over 'i' runs on two groups of 4 devices (j=0 and j=1) at once, so
 *     everything below runs as two independent rings.
 *   - How a ring allreduce works: cut the vector into n chunks and keep
 *     every link of the ring busy with one chunk per step, first adding
 *     (reduce phase), then copying the finished sums around (broadcast,
 *     or all-gather, phase).
 *   - Floating-point addition is not associative: (a + b) + c and
 *     a + (b + c) can differ in the last bits.  shmap_psum adds in rank
 *     order, ((x0 + x1) + x2) + x3, a left fold, so its result is the same
 *     bits every run.  A hand-written allreduce only matches it bit for bit
 *     if each element is added up in that same order.
 *
 * Two ring algorithms
 *   Each device holds a vector of n*C floats, cut into n chunks of C.
 *
 *   1. The classic ring (reduce-scatter then all-gather, 2(n-1) steps).
 *      In reduce-scatter step s, rank r sends chunk (r - s) mod n to r+1,
 *      which adds its own values to it.  Chunk c therefore starts at rank c
 *      and is added up in the order c, c+1, ..., n-1, 0, ..., c-1.  After
 *      n-1 steps rank r holds the finished chunk r+1; n-1 all-gather steps
 *      pass the finished chunks around the ring.  Every chunk but chunk 0
 *      starts its fold at a rank other than 0, so the result generally
 *      differs from psum in the last bits.  It equals, bit for bit, the
 *      serial fold in that rotated order, which is what we check.
 *
 *   2. The rank-ordered ring (3(n-1) steps).  Every chunk starts at rank 0
 *      and travels 0 -> 1 -> ... -> n-1, each rank adding its own values
 *      (hops 0..n-2), so chunk c is finished at rank n-1 with exactly the
 *      left fold ((x0 + x1) + ...) + x(n-1) that psum computes.  It then
 *      keeps going, n-1 -> 0 -> 1 -> ... -> n-2, and each rank copies the
 *      finished sum (hops n-1..2n-3).  Chunk c leaves rank 0 at step c, so
 *      its hop k happens at step c + k on the link leaving rank k mod n.
 *      Two chunks never want the same link in the same step (that would
 *      need c1 = c2 mod n), so one ppermute per step carries them all.
 *      Each link still carries 2(n-1) chunks in total, as in the classic
 *      ring; the price is n-1 extra steps while the pipeline fills.
 *      The result is equal to shmap_psum bit for bit, and we check that.
 *
 *   The input values use every bit of a float's mantissa and have very
 *   different magnitudes, so the order of the additions does change many
 *   results; the program checks that too, so the bitwise comparisons are
 *   not trivially true.
 *
 *   Under mpirun every process checks every result and process 0 prints.
 */
#include <shmap.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NI 4        /* ring size: devices along axis i */
#define NJ 2        /* number of independent rings */
#define C 8         /* elements per chunk */
#define L (NI * C)  /* elements per device */
#define MAX_RING 64 /* largest ring the bodies support */

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "05_ring_allreduce: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/*
 * The schedule of the rank-ordered ring.  In step s, which chunk does rank r
 * send, and which hop of its journey is that?  Chunk c makes hop k in step
 * c + k, from rank k mod n; so c = (s - r) mod n and k = s - c.  Returns k,
 * or -1 when rank r sends nothing useful in step s.
 */
static int ordered_hop(int n, int s, int r, int *chunk)
{
  int c = ((s - r) % n + n) % n;
  int k = s - c;
  *chunk = c;
  return k >= 0 && k <= 2 * n - 3 ? k : -1;
}

/* The ppermute pairs of a ring: rank q sends to rank q+1 (mod n). */
static void ring_pairs(int n, int pairs[][2])
{
  for (int q = 0; q < n; q++) {
    pairs[q][0] = q;
    pairs[q][1] = (q + 1) % n;
  }
}

/* Algorithm 2: allreduce `v` (n chunks of C floats) in rank order. */
static int ring_allreduce_ordered(shmap_ctx *ctx, float *v, shmap_block *msg)
{
  int n = shmap_axis_size(ctx, "i");
  int r = shmap_axis_index(ctx, "i");
  int from = (r + n - 1) % n; /* the rank that sends to me */
  int pairs[MAX_RING][2];
  float *m = msg->data;
  ring_pairs(n, pairs);

  /* An in-place ppermute may give the block new storage (it writes what
   * it receives into memory no peer reads): read msg->data again after
   * each call rather than keeping a pointer across it. */
  for (int s = 0; s < 3 * (n - 1); s++) {
    /* Put the chunk I forward this step (if any) into the message. */
    int c;
    if (ordered_hop(n, s, r, &c) >= 0)
      memcpy(m, v + c * C, C * sizeof *m);
    /* Everyone sends its message to the next rank and receives the
     * previous rank's; ranks with nothing to send send stale data that
     * the receiver ignores, because a collective needs every member. */
    int rc = shmap_ppermute(ctx, msg, "i", n, (const int(*)[2])pairs);
    if (rc < 0)
      return rc;
    m = msg->data;
    /* What did I receive?  The same schedule, seen from the sender. */
    int k = ordered_hop(n, s, from, &c);
    if (k < 0)
      continue;
    float *mine = v + c * C;
    if (k <= n - 2) {
      /* Reduce hop: m holds x0 + ... + x(r-1), folded left; add mine. */
      for (int e = 0; e < C; e++)
        mine[e] = m[e] + mine[e];
    } else {
      /* Broadcast hop: m holds the finished sum. */
      memcpy(mine, m, C * sizeof *m);
    }
  }
  return 0;
}

/* Algorithm 1: the classic ring, reduce-scatter then all-gather. */
static int ring_allreduce_classic(shmap_ctx *ctx, float *v, shmap_block *msg)
{
  int n = shmap_axis_size(ctx, "i");
  int r = shmap_axis_index(ctx, "i");
  int pairs[MAX_RING][2];
  float *m = msg->data;
  ring_pairs(n, pairs);

  /* Reduce-scatter: after step s, the chunk received by rank q holds the
   * sum of s+2 ranks' values; after n-1 steps rank r owns chunk r+1. */
  for (int s = 0; s < n - 1; s++) {
    int send = ((r - s) % n + n) % n;
    int recv = ((r - 1 - s) % n + n) % n;
    memcpy(m, v + send * C, C * sizeof *m);
    int rc = shmap_ppermute(ctx, msg, "i", n, (const int(*)[2])pairs);
    if (rc < 0)
      return rc;
    m = msg->data; /* see ring_allreduce_ordered */
    for (int e = 0; e < C; e++)
      v[recv * C + e] = m[e] + v[recv * C + e];
  }
  /* All-gather: pass the finished chunks once around the ring. */
  for (int s = 0; s < n - 1; s++) {
    int send = ((r + 1 - s) % n + n) % n;
    int recv = ((r - s) % n + n) % n;
    memcpy(m, v + send * C, C * sizeof *m);
    int rc = shmap_ppermute(ctx, msg, "i", n, (const int(*)[2])pairs);
    if (rc < 0)
      return rc;
    m = msg->data; /* see ring_allreduce_ordered */
    memcpy(v + recv * C, m, C * sizeof *m);
  }
  return 0;
}

/*
 * The body.  Input 0 is this device's vector, f32[1,1,L].  Outputs:
 *   0: the rank-ordered ring's result,
 *   1: shmap_psum's result,
 *   2: the classic ring's result.
 */
static int body(shmap_ctx *ctx, void *arg)
{
  const shmap_block *x = shmap_in(ctx, 0);
  if (x == NULL)
    return shmap_fail(ctx, "shmap_in(0) returned NULL");
  if (shmap_axis_size(ctx, "i") > MAX_RING)
    return shmap_fail(ctx, "ring longer than %d", MAX_RING);
  if (shmap_block_numel(x) != (int64_t)shmap_axis_size(ctx, "i") * C)
    return shmap_fail(ctx, "expected %d chunks of %d elements",
                      shmap_axis_size(ctx, "i"), C);

  /* One chunk-sized message buffer for ppermute. */
  shmap_block *msg = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){C});
  shmap_block *ordered = shmap_out_copy(ctx, 0, x);
  shmap_block *summed = shmap_out_copy(ctx, 1, x);
  shmap_block *classic = shmap_out_copy(ctx, 2, x);
  if (msg == NULL || ordered == NULL || summed == NULL || classic == NULL)
    return shmap_fail(ctx, "could not allocate blocks");

  int rc = ring_allreduce_ordered(ctx, ordered->data, msg);
  if (rc == 0)
    rc = shmap_psum(ctx, summed, "i");
  if (rc == 0)
    rc = ring_allreduce_classic(ctx, classic->data, msg);
  return rc;
}

/* A reproducible input: random 24-bit mantissas (all a float holds), both
 * signs, scaled by powers of two from 2^-4 to 2^4.  Adding four of them
 * rounds, and the rounding depends on the order of the additions. */
static float input_value(unsigned *state)
{
  *state = *state * 1103515245u + 12345u;
  long mant = (long)(*state >> 8) | (1L << 23); /* 2^23 .. 2^24-1 */
  *state = *state * 1103515245u + 12345u;
  int expo = (int)((*state >> 8) % 9u) - 4 - 23;
  float v = ldexpf((float)mant, expo);
  return (*state >> 31) ? -v : v;
}

static int same_bits(float a, float b)
{
  return memcmp(&a, &b, sizeof a) == 0;
}

int main(void)
{
  static float x[NI][NJ][L];
  static float ordered[NI][NJ][L], summed[NI][NJ][L], classic[NI][NJ][L];
  unsigned state = 2024;
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NJ; j++)
      for (int e = 0; e < L; e++)
        x[i][j][e] = input_value(&state);

  /* The schedule of the rank-ordered ring, as the devices will run it. */
  int rank = shmap_process_rank(); /* 0 without mpirun */
  if (rank == 0) {
    printf("rank-ordered ring on n=%d: chunk c on each link per step "
           "(+ adds, = copies)\n", NI);
    printf("step ");
    for (int q = 0; q < NI; q++)
      printf("  %d->%d", q, (q + 1) % NI);
    printf("\n");
    for (int s = 0; s < 3 * (NI - 1); s++) {
      printf("%4d ", s);
      for (int q = 0; q < NI; q++) {
        int c, k = ordered_hop(NI, s, q, &c);
        if (k < 0)
          printf("     .");
        else
          printf("   c%d%c", c, k <= NI - 2 ? '+' : '=');
      }
      printf("\n");
    }
  }

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=4, j=2"), "shmap_mesh_create");
  shmap_array *gx, *out[3] = {NULL, NULL, NULL};
  check(shmap_array_from_host(&gx, SHMAP_F32, 3, (int64_t[]){NI, NJ, L}, x),
        "shmap_array_from_host");
  /* x[i][j] is the vector of device (i, j).  The spec P('i','j') is
   * shorter than the rank; the last dimension is padded with None. */
  check(shmap_map(mesh, body, NULL, 1, &gx, (const char *[]){"P('i','j')"},
                  3, out,
                  (const char *[]){"P('i','j')", "P('i','j')", "P('i','j')"}),
        "shmap_map");
  check(shmap_array_to_host(out[0], ordered), "shmap_array_to_host");
  check(shmap_array_to_host(out[1], summed), "shmap_array_to_host");
  check(shmap_array_to_host(out[2], classic), "shmap_array_to_host");

  /* Serial references, per ring j and element e:
   *   left:    ((x[0] + x[1]) + x[2]) + x[3]            (psum's order)
   *   rotated: the fold starting at rank c = e / C       (classic ring) */
  int bad_psum = 0, bad_ordered = 0, bad_classic = 0;
  int order_matters = 0, classic_differs = 0;
  for (int j = 0; j < NJ; j++)
    for (int e = 0; e < L; e++) {
      float left = x[0][j][e];
      for (int i = 1; i < NI; i++)
        left = left + x[i][j][e];
      int c = e / C;
      float rotated = x[c][j][e];
      for (int t = 1; t < NI; t++)
        rotated = rotated + x[(c + t) % NI][j][e];
      if (!same_bits(left, rotated))
        order_matters++;
      for (int i = 0; i < NI; i++) {
        if (!same_bits(summed[i][j][e], left) && bad_psum++ < 3)
          fprintf(stderr, "05_ring_allreduce: device (%d,%d) element %d: psum "
                  "gives %.9g, the serial left fold gives %.9g\n",
                  i, j, e, summed[i][j][e], left);
        if (!same_bits(ordered[i][j][e], summed[i][j][e]) && bad_ordered++ < 3)
          fprintf(stderr, "05_ring_allreduce: device (%d,%d) element %d: the "
                  "rank-ordered ring gives %.9g, psum gives %.9g\n",
                  i, j, e, ordered[i][j][e], summed[i][j][e]);
        if (!same_bits(classic[i][j][e], rotated) && bad_classic++ < 3)
          fprintf(stderr, "05_ring_allreduce: device (%d,%d) element %d: the "
                  "classic ring gives %.9g, the serial rotated fold gives "
                  "%.9g\n", i, j, e, classic[i][j][e], rotated);
        if (!same_bits(classic[i][j][e], summed[i][j][e]))
          classic_differs++;
      }
    }

  int total = NI * NJ * L;
  if (rank == 0) {
    printf("\nmesh i=4, j=2: two rings of %d devices, %d floats per device\n",
           NI, L);
    printf("the order of additions changes %d of %d sums in this input\n",
           order_matters, NJ * L);
    printf("psum == serial left fold in rank order:            %s\n",
           bad_psum ? "NO" : "yes, bit for bit");
    printf("rank-ordered ring == psum:                         %s\n",
           bad_ordered ? "NO" : "yes, bit for bit");
    printf("classic ring == serial fold in its rotated order:  %s\n",
           bad_classic ? "NO" : "yes, bit for bit");
    printf("classic ring != psum in %d of %d elements\n", classic_differs,
           total);
  }
  int errors = bad_psum + bad_ordered + bad_classic;
  if (order_matters == 0) {
    fprintf(stderr, "05_ring_allreduce: the input does not exercise the "
            "order of additions, so the bitwise checks prove nothing\n");
    errors++;
  }

  for (int k = 0; k < 3; k++)
    shmap_array_destroy(out[k]);
  shmap_array_destroy(gx);
  shmap_mesh_destroy(mesh);
  if (errors) {
    fprintf(stderr, "05_ring_allreduce: FAILED (%d mismatches)\n", errors);
    return 1;
  }
  return 0;
}
