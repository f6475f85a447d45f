/* SPDX-License-Identifier: MIT */
/*
 * test_coll_repeat: a device keeps the plan of its last call of each kind
 * and reuses it for an equal call (coll/plan.c, "repeated calls").  These
 * tests change, between two calls that look alike, each thing a plan
 * depends on, in the caller's own memory where the pointer stays the same
 * (the axes' text, the ppermute's pairs, a block's shape and dtype), and
 * check every result exactly against values computed here; and that an
 * error found after a reused plan is reported word for word as when the
 * failing call comes first.  Every case runs in thread and fiber mode.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The mesh "i=2, j=2": device d has i = d / 2, j = d % 2, and its rank
 * over "i, j" is d. */
#define NDEV 4
#define N 8

static int want_f32(shmap_ctx *ctx, const char *what, int round,
                    const shmap_block *b, int n, const float want[])
{
  if (!b || b->dtype != SHMAP_F32 || shmap_block_numel(b) != n)
    return shmap_fail(ctx, "%s, round %d: not an f32 block of %d elements",
                      what, round, n);
  for (int k = 0; k < n; k++)
    if (((const float *)b->data)[k] != want[k])
      return shmap_fail(ctx, "%s, round %d: element %d is %g, not %g", what,
                        round, k, (double)((const float *)b->data)[k],
                        (double)want[k]);
  return 0;
}

static float val(int d, int k) { return (float)(10 * d + k); }

#define CALL(expr)                                                            \
  do {                                                                        \
    int rc_ = (expr);                                                         \
    if (rc_)                                                                  \
      return rc_;                                                             \
  } while (0)

static int body_repeat(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int d = shmap_ctx_device(ctx), i = d / 2, j = d % 2;
  if (shmap_axis_index(ctx, "i") != i || shmap_axis_index(ctx, "j") != j)
    return shmap_fail(ctx, "device %d: unexpected coordinates", d);
  float buf[N], want[2 * N];
  shmap_block y = {.data = buf, .dtype = SHMAP_F32, .rank = 1, .shape = {N}};

  /* The axes' text in one buffer, "i" and "j" in turn. */
  char axes[8];
  for (int r = 0; r < 4; r++) {
    snprintf(axes, sizeof axes, "%s", r % 2 ? "j" : "i");
    for (int k = 0; k < N; k++)
      buf[k] = val(d, k);
    CALL(shmap_psum(ctx, &y, axes));
    for (int k = 0; k < N; k++)
      want[k] = r % 2 ? val(2 * i, k) + val(2 * i + 1, k)
                      : val(j, k) + val(2 + j, k);
    CALL(want_f32(ctx, "psum over a rewritten axes text", r, &y, N, want));
  }

  /* psum and pmax in turn on one block. */
  for (int r = 0; r < 4; r++) {
    for (int k = 0; k < N; k++)
      buf[k] = val(d, k);
    CALL(r % 2 ? shmap_pmax(ctx, &y, "i, j") : shmap_psum(ctx, &y, "i, j"));
    for (int k = 0; k < N; k++)
      want[k] = r % 2 ? val(3, k)
                      : val(0, k) + val(1, k) + val(2, k) + val(3, k);
    CALL(want_f32(ctx, "psum and pmax in turn", r, &y, N, want));
  }

  /* The ppermute's pairs rewritten in place: a shift by 1, then by 3. */
  int pairs[NDEV][2];
  for (int r = 0; r < 4; r++) {
    int s = r % 2 ? 3 : 1;
    for (int p = 0; p < NDEV; p++) {
      pairs[p][0] = p;
      pairs[p][1] = (p + s) % NDEV;
    }
    for (int k = 0; k < N; k++)
      buf[k] = val(d, k);
    CALL(shmap_ppermute(ctx, &y, "i, j", NDEV, (const int(*)[2])pairs));
    for (int k = 0; k < N; k++)
      want[k] = val((d - s + NDEV) % NDEV, k);
    CALL(want_f32(ctx, "ppermute of rewritten pairs", r, &y, N, want));
  }

  /* One block struct, its shape changed: all_gather of 8, then 4, then a
   * 2x4 and a 4x2 block (the same elements) along dimension 0. */
  static const int shapes[4][3] = {{1, 8, 0}, {1, 4, 0}, {2, 2, 4}, {2, 4, 2}};
  for (int r = 0; r < 4; r++) {
    y.rank = shapes[r][0];
    y.shape[0] = shapes[r][1];
    y.shape[1] = shapes[r][2];
    int n = (int)shmap_block_numel(&y);
    for (int k = 0; k < n; k++)
      buf[k] = val(d, k);
    shmap_block *out = NULL;
    CALL(shmap_all_gather(ctx, &y, "j", 0, 1, &out));
    if (out->rank != y.rank || out->shape[0] != 2 * y.shape[0] ||
        (y.rank == 2 && out->shape[1] != y.shape[1]))
      return shmap_fail(ctx, "all_gather of a reshaped block, round %d: "
                             "result of the wrong shape", r);
    for (int m = 0; m < 2; m++)
      for (int k = 0; k < n; k++)
        want[m * n + k] = val(2 * i + m, k);
    int rc = want_f32(ctx, "all_gather of a reshaped block", r, out, 2 * n,
                      want);
    shmap_block_free(ctx, out);
    if (rc)
      return rc;
  }

  /* The same block as f32, then i32 (the same bytes), through psum. */
  y.rank = 1;
  y.shape[0] = N;
  for (int r = 0; r < 4; r++) {
    y.dtype = r % 2 ? SHMAP_I32 : SHMAP_F32;
    for (int k = 0; k < N; k++) {
      if (r % 2)
        ((int32_t *)buf)[k] = 1000 * d + k - 7;
      else
        buf[k] = val(d, k);
    }
    CALL(shmap_psum(ctx, &y, "i"));
    for (int k = 0; k < N; k++) {
      if (r % 2) {
        int32_t w = 1000 * j + k - 7 + 1000 * (2 + j) + k - 7;
        if (((int32_t *)buf)[k] != w)
          return shmap_fail(ctx, "psum as i32, round %d: element %d is %d, "
                                 "not %d",
                            r, k, (int)((int32_t *)buf)[k], (int)w);
      } else {
        want[k] = val(j, k) + val(2 + j, k);
      }
    }
    if (r % 2 == 0)
      CALL(want_f32(ctx, "psum as f32", r, &y, N, want));
  }

  /* psum_scatter and all_to_all along changing dimensions of a 2x4 block. */
  y.dtype = SHMAP_F32;
  y.rank = 2;
  y.shape[0] = 2;
  y.shape[1] = 4;
  for (int r = 0; r < 4; r++) {
    int dim = r % 2;
    for (int k = 0; k < N; k++)
      buf[k] = val(d, k);
    shmap_block *out = NULL;
    CALL(shmap_psum_scatter(ctx, &y, "j", dim, 1, &out));
    /* Rank j keeps rows (dim 0) or columns (dim 1) [j*m, (j+1)*m). */
    int w = 0;
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 4; b++) {
        int idx = dim ? b : a, m = dim ? 2 : 1;
        if (idx / m != j)
          continue;
        want[w++] = val(2 * i, 4 * a + b) + val(2 * i + 1, 4 * a + b);
      }
    int rc = want_f32(ctx, "psum_scatter along a changing dimension", r, out,
                      w, want);
    shmap_block_free(ctx, out);
    if (rc)
      return rc;
    CALL(shmap_all_to_all(ctx, &y, "j", dim, dim, 1, &out));
    /* Tiled, split and concat on one dimension: chunk c of member m goes to
     * member c, which puts it at position m; here the chunks are along
     * `dim`, two of them. */
    w = 0;
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 4; b++) {
        int idx = dim ? b : a, m = dim ? 2 : 1;
        int from = idx / m, off = idx % m;
        int sidx = j * m + off;
        int sa = dim ? a : sidx, sb = dim ? sidx : b;
        want[w++] = val(2 * i + from, 4 * sa + sb);
      }
    rc = want_f32(ctx, "all_to_all along a changing dimension", r, out, w,
                  want);
    shmap_block_free(ctx, out);
    if (rc)
      return rc;
  }
  return 0;
}

START_TEST(test_repeat_changed)
{
  tu_set_sched(_i);
  shmap_mesh *mesh = tu_mesh_new("i=2, j=2");
  for (int m = 0; m < 3; m++)
    tu_map_ok(shmap_map(mesh, body_repeat, NULL, 0, NULL, NULL, 0, NULL,
                        NULL),
              "repeated calls with their arguments changed");
  shmap_mesh_destroy(mesh);
}
END_TEST

/* A failing psum_scatter (3 rows over 2 members), alone or after good
 * calls of every kind with the same block struct and axes. */
static int body_fail(shmap_ctx *ctx, void *arg)
{
  int after = *(const int *)arg;
  float buf[N] = {0};
  shmap_block y = {.data = buf, .dtype = SHMAP_F32, .rank = 1, .shape = {N}};
  shmap_block *out = NULL;
  for (int r = 0; r < after; r++) {
    CALL(shmap_psum_scatter(ctx, &y, "j", 0, 1, &out));
    shmap_block_free(ctx, out);
    CALL(shmap_psum(ctx, &y, "j"));
  }
  y.shape[0] = 3;
  return shmap_psum_scatter(ctx, &y, "j", 0, 1, &out);
}

START_TEST(test_repeat_error)
{
  tu_set_sched(_i);
  shmap_mesh *mesh = tu_mesh_new("i=2, j=2");
  char first[1024];
  for (int after = 0; after < 3; after++) {
    int rc = shmap_map(mesh, body_fail, &after, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_int_eq(rc, SHMAP_ESHAPE);
    /* Whichever device reports first: the message names it. */
    const char *msg = shmap_errmsg();
    ck_assert_msg(strncmp(msg, "psum_scatter over 'j' on device ", 32) == 0,
                  "%s", msg);
    const char *tail = strstr(msg, "): ");
    ck_assert_ptr_nonnull(tail);
    if (after == 0) {
      ck_assert_str_eq(tail, "): scatter_dimension 0 of the f32[3] block has "
                             "size 3, not divisible by the group size 2");
      snprintf(first, sizeof first, "%s", tail);
    } else {
      ck_assert_str_eq(tail, first);
    }
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("coll_repeat");
  TCase *tc = tcase_create("repeat");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_repeat_changed, 0, 2);
  tcase_add_loop_test(tc, test_repeat_error, 0, 2);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
