/* SPDX-License-Identifier: MIT */
/*
 * test_ppermute_handover.c - in-place ppermute that passes buffers
 * instead of copying them.
 *
 * When every member of a cycle of the permutation has its block's data in
 * the block's second buffer (after the first call of a loop), each member
 * takes its source's buffer as its own data.  These tests run
 * permutations made of cycles of several lengths, a fixed point and a
 * path (whose members must copy), a cycle with a member whose block is the
 * body's own memory (so nobody in that cycle may take a buffer), and a
 * cycle longer than the transport walks for a small block.  Each device
 * writes its block after every call, every value is checked against the
 * serial model, and the data pointers show that buffers pass exactly
 * around the cycles that may pass them and that no two devices ever hold
 * the same buffer.  Every case runs in both scheduling modes.
 */
#include "testutil.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 12
#define MAXN 16

static const char *const modes[2] = {"threads", "fibers"};

static void set_mode(int i)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[i], 1), 0);
}

typedef struct hcase {
  int n;                  /* group size (mesh "i=n") */
  int npairs;
  int pairs[MAXN][2];
  int64_t len;            /* floats per block */
  int user;               /* rank whose block is the body's memory, or -1 */
  /* Filled by the devices: each one's data pointer after each step. */
  const void *ptr[STEPS][MAXN];
  _Atomic int bad;
} hcase;

/* The source of rank r, or -1. */
static int source(const hcase *h, int r)
{
  for (int i = 0; i < h->npairs; i++)
    if (h->pairs[i][1] == r)
      return h->pairs[i][0];
  return -1;
}

/* What rank r holds at element e after `steps` calls, when every device
 * adds (rank + 1) to element 0 after each call. */
static float model(const hcase *h, int r, int steps, int e)
{
  if (steps == 0)
    return (float)(r * 100000 + e);
  int s = source(h, r);
  if (s < 0)
    return e == 0 ? (float)(r + 1) : 0.0f;
  return model(h, s, steps - 1, e) + (e == 0 ? (float)(r + 1) : 0.0f);
}

static int body(shmap_ctx *ctx, void *arg)
{
  hcase *h = arg;
  int r = shmap_axis_index(ctx, "i");
  if (r < 0)
    return r;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &h->len);
  if (!x)
    return -1;
  float *mine = NULL;
  if (r == h->user) {
    mine = malloc(sizeof(float) * (size_t)h->len);
    if (!mine)
      return shmap_fail(ctx, "out of memory");
    x->data = mine;
  }
  for (int64_t e = 0; e < h->len; e++)
    ((float *)x->data)[e] = (float)(r * 100000 + e);
  int rc = 0;
  for (int t = 0; t < STEPS && !rc; t++) {
    rc = shmap_ppermute(ctx, x, "i", h->npairs,
                        (const int(*)[2])h->pairs);
    if (rc)
      break;
    float *v = x->data;
    v[0] += (float)(r + 1); /* written at once */
    h->ptr[t][r] = v;
    for (int64_t e = 0; e < h->len; e++)
      if (v[e] != model(h, r, t + 1, (int)e)) {
        h->bad++;
        break;
      }
  }
  if (!rc)
    rc = shmap_block_free(ctx, x);
  free(mine);
  return rc;
}

/* Whether rank r's cycle may pass buffers: every member has a source and
 * a destination other than itself, none is the body's memory, and the
 * cycle is at most `walk` long. */
static int passes(const hcase *h, int r, int walk)
{
  int len = 0, q = r;
  do {
    int s = source(h, q);
    if (s < 0 || s == q || q == h->user)
      return 0;
    q = s;
    len++;
  } while (q != r && len <= h->n);
  return q == r && len <= walk;
}

static void run(int mode, hcase *h, int walk)
{
  set_mode(mode);
  char text[32];
  snprintf(text, sizeof text, "i=%d", h->n);
  shmap_mesh *mesh = tu_mesh_new(text);
  atomic_store(&h->bad, 0);
  memset(h->ptr, 0, sizeof h->ptr);
  tu_map_ok(shmap_map(mesh, body, h, 0, NULL, NULL, 0, NULL, NULL),
            "ppermute loop");
  ck_assert_int_eq(atomic_load(&h->bad), 0);
  for (int t = 0; t < STEPS; t++)
    for (int r = 0; r < h->n; r++) {
      /* No two devices hold the same buffer. */
      for (int q = 0; q < r; q++)
        ck_assert_ptr_ne(h->ptr[t][r], h->ptr[t][q]);
      /* From the second call on, a cycle that may pass buffers takes
       * its sources' (the first call copies into each block's second
       * buffer); any other device keeps buffers of its own block. */
      int s = source(h, r);
      if (t >= 1 && passes(h, r, walk))
        ck_assert_msg(h->ptr[t][r] == h->ptr[t - 1][s],
                      "step %d: rank %d did not take rank %d's buffer", t, r,
                      s);
      else if (t >= 1 && s >= 0 && s != r)
        ck_assert_msg(h->ptr[t][r] != h->ptr[t - 1][s],
                      "step %d: rank %d took rank %d's buffer", t, r, s);
    }
  shmap_mesh_destroy(mesh);
}

/* Cycles of 3 and 2, a fixed point, and a path 6 -> 7. */
START_TEST(t_cycles)
{
  hcase *h = calloc(1, sizeof *h);
  ck_assert_ptr_nonnull(h);
  static const int pairs[7][2] = {{0, 1}, {1, 2}, {2, 0}, {3, 4},
                                  {4, 3}, {5, 5}, {6, 7}};
  h->n = 8;
  h->npairs = 7;
  memcpy(h->pairs, pairs, sizeof pairs);
  h->len = 5000;
  h->user = -1;
  run(_i, h, 8);
  free(h);
}
END_TEST

/* A ring of 4 in which rank 2's block is the body's memory: every member
 * of it copies; and a second ring of 4 beside it that passes buffers. */
START_TEST(t_user_member)
{
  hcase *h = calloc(1, sizeof *h);
  ck_assert_ptr_nonnull(h);
  static const int pairs[8][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0},
                                  {4, 5}, {5, 6}, {6, 7}, {7, 4}};
  h->n = 8;
  h->npairs = 8;
  memcpy(h->pairs, pairs, sizeof pairs);
  h->len = 3000;
  h->user = 2;
  run(_i, h, 8);
  free(h);
}
END_TEST

/* A ring of 16: a small block copies (the walk around the cycle would cost
 * more than the copy: the transport walks at most 8 + bytes / 2048
 * members), a large one passes buffers. */
START_TEST(t_long_ring)
{
  hcase *h = calloc(1, sizeof *h);
  ck_assert_ptr_nonnull(h);
  h->n = 16;
  h->npairs = 16;
  for (int i = 0; i < 16; i++) {
    h->pairs[i][0] = i;
    h->pairs[i][1] = (i + 1) % 16;
  }
  h->user = -1;
  h->len = 300; /* 1200 bytes: at most 8 members */
  run(_i, h, 8);
  h->len = 9000; /* 36000 bytes: at most 25 */
  run(_i, h, 25);
  free(h);
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("ppermute_handover");
  TCase *tc = tcase_create("handover");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, t_cycles, 0, 2);
  tcase_add_loop_test(tc, t_user_member, 0, 2);
  tcase_add_loop_test(tc, t_long_ring, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(suite()); }
