/* SPDX-License-Identifier: MIT */
/*
 * test_small_reduce.c - reductions of a few hundred bytes, which the
 * shared-memory transport runs in one round trip: every member publishes
 * its terms and folds everyone's itself.
 *
 * The members' boxes alternate by call number, so a box is written again
 * two calls later; these tests alternate groups (the whole mesh, rows,
 * columns) so that a box is rewritten while devices of another group may
 * still be on the call that read it, mix in calls of other protocols and
 * sizes, and check every result exactly against the serial left fold in
 * rank order (with values whose sums round, so the order shows).  Groups
 * of more than 4 members, where only rank 0 folds and the others copy
 * its result, get the same checks, and mismatches and a member leaving
 * there are reported with the usual messages; so are groups spread over
 * several workers in fiber mode, which fold through a chain of
 * sub-leaders (2, 3 and 7 workers), also when the same group's calls
 * alternate between one leader and a chain, and a member whose call
 * differs from its leader's never takes the leader's result as its own.
 * all_gather, psum_scatter, all_to_all and ppermute of a few
 * hundred bytes take the same path.  Groups of 256 and 1024 reduce f32
 * and i32 terms with psum, pmax and pmin (and within axis_index_groups at
 * 256), checked bit for bit against the serial fold.  Every case runs in
 * both scheduling
 * modes.
 */
#include "testutil.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 60
#define LEN 100 /* floats: 400 bytes */

static const char *const modes[2] = {"threads", "fibers"};

typedef struct sarg {
  int ni, nj;
  _Atomic int bad;
  _Atomic int failed;
} sarg;

/* Term e of the device at (i, j) in step t: sums of these round in f32,
 * so a fold in another order gives other bits. */
static float term(int i, int j, int t, int e)
{
  return 1.0f / (float)(1 + i * 7 + j * 3 + t + e) + (float)(i + j) * 1e4f;
}

static int body(shmap_ctx *ctx, void *arg)
{
  sarg *sa = arg;
  int i = shmap_axis_index(ctx, "i"), j = shmap_axis_index(ctx, "j");
  float x[LEN];
  shmap_block b = {x, SHMAP_F32, 1, {LEN}};
  for (int t = 0; t < STEPS; t++) {
    for (int e = 0; e < LEN; e++)
      x[e] = term(i, j, t, e);
    const char *axes = t % 3 == 0 ? "i, j" : t % 3 == 1 ? "j" : "i";
    bool max = t % 5 == 4;
    int rc = max ? shmap_pmax(ctx, &b, axes) : shmap_psum(ctx, &b, axes);
    if (rc) {
      sa->failed++;
      return rc;
    }
    /* The serial fold over the group in rank order (first axis named
     * major). */
    int wrong = 0;
    for (int e = 0; e < LEN; e++) {
      float acc = 0;
      bool first = true;
      for (int a = 0; a < sa->ni; a++)
        for (int c = 0; c < sa->nj; c++) {
          if ((t % 3 == 1 && a != i) || (t % 3 == 2 && c != j))
            continue;
          float v = term(a, c, t, e);
          acc = first ? v : max ? (v > acc ? v : acc) : acc + v;
          first = false;
        }
      wrong += memcmp(&acc, &x[e], sizeof acc) != 0;
    }
    if (wrong)
      sa->bad++;
    if (t % 7 == 6) {
      /* A call of the group-wide protocol in between. */
      float big[1024];
      shmap_block bb = {big, SHMAP_F32, 1, {1024}};
      for (int e = 0; e < 1024; e++)
        big[e] = 1;
      if ((rc = shmap_psum(ctx, &bb, "i")) || big[0] != (float)sa->ni) {
        sa->failed++;
        return rc ? rc : -1;
      }
    }
  }
  /* bool terms give an i32 sum, four times their bytes. */
  uint8_t flag[LEN]; /* SHMAP_BOOL: one byte, 0 or 1 */
  for (int e = 0; e < LEN; e++)
    flag[e] = (e + i + j) % 2;
  shmap_block fb = {flag, SHMAP_BOOL, 1, {LEN}};
  shmap_block *sum;
  int rc = shmap_psum_new(ctx, &fb, "i, j", &sum);
  if (rc)
    return rc;
  for (int e = 0; e < LEN; e++) {
    int want = 0;
    for (int a = 0; a < sa->ni; a++)
      for (int c = 0; c < sa->nj; c++)
        want += (e + a + c) % 2;
    if (((int32_t *)sum->data)[e] != want) {
      sa->bad++;
      break;
    }
  }
  return shmap_block_free(ctx, sum);
}

START_TEST(t_groups)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int shapes[][2] = {{2, 3}, {4, 4}, {1, 5}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    char text[32];
    snprintf(text, sizeof text, "i=%d, j=%d", shapes[s][0], shapes[s][1]);
    shmap_mesh *mesh = tu_mesh_new(text);
    sarg sa = {.ni = shapes[s][0], .nj = shapes[s][1]};
    tu_map_ok(shmap_map(mesh, body, &sa, 0, NULL, NULL, 0, NULL, NULL), text);
    ck_assert_msg(sa.bad == 0, "%s (%s): %d wrong results", text, modes[_i],
                  (int)sa.bad);
    ck_assert_int_eq(sa.failed, 0);
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

/* A device leaves in the middle of a loop of small reductions: everyone
 * is released, and the map names it. */
static int body_leave(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int d = shmap_ctx_device(ctx);
  float x[8] = {0};
  shmap_block b = {x, SHMAP_F32, 1, {8}};
  for (int t = 0; t < 20; t++) {
    if (d == 3 && t == 9)
      return 0;
    int rc = shmap_psum(ctx, &b, "i");
    if (rc)
      return rc;
  }
  return 0;
}

START_TEST(t_leave)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=5");
  int rc = shmap_map(mesh, body_leave, NULL, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == SHMAP_EMISMATCH, "%d (%s): %s", rc, shmap_strerror(rc),
                shmap_errmsg());
  ck_assert_msg(strstr(shmap_errmsg(), "device 3") &&
                    strstr(shmap_errmsg(), "returned from its body after 9"),
                "message: %s", shmap_errmsg());
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Small reductions carried out by a device's progress helper (started,
 * then waited for) meet the same calls made by other devices themselves,
 * with blocking ones in between; and within axis_index_groups, which take
 * the group-wide protocol. */
static int body_async_groups(shmap_ctx *ctx, void *arg)
{
  _Atomic int *bad = arg;
  int r = shmap_axis_index(ctx, "i");
  static const int ranks[4] = {0, 2, 1, 3};
  const shmap_groups g = {2, 2, ranks};
  for (int t = 0; t < 20; t++) {
    float x[16];
    for (int e = 0; e < 16; e++)
      x[e] = term(r, 0, t, e);
    shmap_block b = {x, SHMAP_F32, 1, {16}};
    int rc;
    if (t % 3 == 2) {
      rc = shmap_psum_groups(ctx, &b, "i", &g);
    } else if ((r + t) % 2) {
      shmap_request *req;
      rc = shmap_psum_start(ctx, &b, "i", &req);
      if (!rc)
        rc = shmap_wait(ctx, &req);
    } else {
      rc = shmap_psum(ctx, &b, "i");
    }
    if (rc)
      return rc;
    for (int e = 0; e < 16; e++) {
      float acc = 0;
      bool first = true;
      for (int a = 0; a < 4; a++) {
        if (t % 3 == 2 && a % 2 != r % 2)
          continue;
        acc = first ? term(a, 0, t, e) : acc + term(a, 0, t, e);
        first = false;
      }
      if (memcmp(&acc, &x[e], sizeof acc) != 0) {
        (*bad)++;
        break;
      }
    }
  }
  return 0;
}

START_TEST(t_async_groups)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  _Atomic int bad = 0;
  tu_map_ok(shmap_map(mesh, body_async_groups, &bad, 0, NULL, NULL, 0, NULL,
                      NULL),
            "small reductions started, blocking and within groups");
  ck_assert_int_eq(bad, 0);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* One device reduces within axis_index_groups where the others reduce
 * over the whole axis: a mismatch naming both calls. */
static int body_groups_mismatch(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  static const int ranks[4] = {0, 1, 2, 3};
  const shmap_groups g = {2, 2, ranks};
  float x[8] = {0};
  shmap_block b = {x, SHMAP_F32, 1, {8}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  return shmap_axis_index(ctx, "i") == 1 ? shmap_psum_groups(ctx, &b, "i", &g)
                                         : shmap_psum(ctx, &b, "i");
}

START_TEST(t_groups_mismatch)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  int rc = shmap_map(mesh, body_groups_mismatch, NULL, 0, NULL, NULL, 0, NULL,
                     NULL);
  ck_assert_msg(rc == SHMAP_EMISMATCH, "%d (%s): %s", rc, shmap_strerror(rc),
                shmap_errmsg());
  const char *m = shmap_errmsg();
  ck_assert_msg(strstr(m, "#2") && strstr(m, "device 1") &&
                    strstr(m, "axis_index_groups [[0, 1], [2, 3]]") &&
                    strstr(m, "psum"),
                "message: %s", m);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Groups of more than 4 members: the group's rank 0 folds every box
 * once and the others copy its result.  Whole-mesh groups of 144 and 140
 * alternate with groups of 72 or 70 (two leaders, one of them also the
 * whole mesh's, so its result box passes between groups) and of 2, and
 * with calls of the group-wide protocol; every result is the serial left
 * fold in rank order, bit for bit. */
START_TEST(t_large_groups)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int shapes[][2] = {{72, 2}, {2, 70}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    char text[32];
    snprintf(text, sizeof text, "i=%d, j=%d", shapes[s][0], shapes[s][1]);
    shmap_mesh *mesh = tu_mesh_new(text);
    sarg sa = {.ni = shapes[s][0], .nj = shapes[s][1]};
    tu_map_ok(shmap_map(mesh, body, &sa, 0, NULL, NULL, 0, NULL, NULL), text);
    ck_assert_msg(sa.bad == 0, "%s (%s): %d wrong results", text, modes[_i],
                  (int)sa.bad);
    ck_assert_int_eq(sa.failed, 0);
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

/* A member of a group of 100 leaves in the middle of a loop: everyone is
 * released, and the map names it. */
static int body_leave_at(shmap_ctx *ctx, void *arg)
{
  const int *leaver = arg;
  int d = shmap_ctx_device(ctx);
  float x[8] = {0};
  shmap_block b = {x, SHMAP_F32, 1, {8}};
  for (int t = 0; t < 20; t++) {
    if (d == *leaver && t == 9)
      return 0;
    int rc = shmap_psum(ctx, &b, "i");
    if (rc)
      return rc;
  }
  return 0;
}

START_TEST(t_large_leave)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=100");
  static const int leaver = 77;
  int rc = shmap_map(mesh, body_leave_at, (void *)&leaver, 0, NULL, NULL, 0,
                     NULL, NULL);
  ck_assert_msg(rc == SHMAP_EMISMATCH, "%d (%s): %s", rc, shmap_strerror(rc),
                shmap_errmsg());
  ck_assert_msg(strstr(shmap_errmsg(), "device 77") &&
                    strstr(shmap_errmsg(), "returned from its body after 9"),
                "message: %s", shmap_errmsg());
  shmap_mesh_destroy(mesh);
}
END_TEST

/* In a group of 100, one member (the leader, rank 0, or another) reduces
 * a block of another shape at its third call: a mismatch naming it. */
static int body_large_mismatch(shmap_ctx *ctx, void *arg)
{
  const int *odd = arg;
  float x[8] = {0};
  for (int t = 0; t < 5; t++) {
    int64_t n = t == 2 && shmap_ctx_device(ctx) == *odd ? 6 : 8;
    shmap_block b = {x, SHMAP_F32, 1, {n}};
    int rc = shmap_psum(ctx, &b, "i");
    if (rc)
      return rc;
  }
  return 0;
}

START_TEST(t_large_mismatch)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=100");
  static const int odds[2] = {0, 50};
  for (int k = 0; k < 2; k++) {
    int rc = shmap_map(mesh, body_large_mismatch, (void *)&odds[k], 0, NULL,
                       NULL, 0, NULL, NULL);
    ck_assert_msg(rc == SHMAP_EMISMATCH, "%d (%s): %s", rc,
                  shmap_strerror(rc), shmap_errmsg());
    char dev[32];
    snprintf(dev, sizeof dev, "device %d ", odds[k]);
    const char *m = shmap_errmsg();
    ck_assert_msg(strstr(m, "#3") && strstr(m, dev) && strstr(m, "f32[6]") &&
                      strstr(m, "f32[8]") && strstr(m, "differs"),
                  "message: %s", m);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* all_gather along axis 0 with a result of at most 512 bytes takes the
 * same single round trip, concatenating the members' blocks.  Groups of
 * 4 (every member copies), 5, 8, 100 and 128 (rank 0 gathers, the others
 * copy its result; 128 floats is exactly the limit) alternate with psums of
 * the same groups, tiled and untiled, with a 2-D block, and with a
 * gather one element too large for the small path; every result element
 * is checked. */
typedef struct garg {
  int n;
  _Atomic int bad;
} garg;

static int body_gather(shmap_ctx *ctx, void *arg)
{
  garg *ga = arg;
  int d = shmap_ctx_device(ctx), n = ga->n;
  for (int t = 0; t < 12; t++) {
    /* rows x cols floats per member: 1x1, 1x(512/4/n) and 2x1 blocks,
     * and every fourth step 1 float more than the small path takes. */
    int64_t cols = t % 3 == 1 ? 128 / n : 1, rows = t % 3 == 2 ? 2 : 1;
    if (t % 4 == 3)
      cols = 128 / n + 1;
    float x[2 * 129];
    for (int64_t e = 0; e < rows * cols; e++)
      x[e] = (float)(d * 1000 + t * 10) + (float)e / 8;
    shmap_block b = {x, SHMAP_F32, 2, {rows, cols}};
    shmap_block *out = NULL;
    int tiled = t & 1;
    int rc = shmap_all_gather(ctx, &b, "i", 0, tiled, &out);
    if (rc)
      return rc;
    /* Member r's block at rows [r*rows, (r+1)*rows) (tiled) or at index r
     * of the new leading axis: either way the flat result is the blocks
     * one after the other. */
    int64_t want_rank = tiled ? 2 : 3;
    if (out->rank != want_rank)
      atomic_fetch_add(&ga->bad, 1);
    const float *o = out->data;
    for (int r = 0; r < n; r++)
      for (int64_t e = 0; e < rows * cols; e++)
        if (o[r * rows * cols + e] != (float)(r * 1000 + t * 10) + (float)e / 8)
          atomic_fetch_add(&ga->bad, 1);
    shmap_block_free(ctx, out);
    float one = (float)d;
    shmap_block s = {&one, SHMAP_F32, 0, {0}};
    if ((rc = shmap_psum(ctx, &s, "i")))
      return rc;
    if (one != (float)(n * (n - 1) / 2))
      atomic_fetch_add(&ga->bad, 1);
  }
  return 0;
}

/* Run fn on meshes "i=4", "i=5", "i=8", "i=100" and "i=128" in the mode
 * of the loop test; the body counts wrong elements in garg.bad. */
static void run_groups(shmap_body_fn fn, const char *mode)
{
  static const int sizes[] = {4, 5, 8, 100, 128};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    char text[32];
    snprintf(text, sizeof text, "i=%d", sizes[k]);
    shmap_mesh *mesh = tu_mesh_new(text);
    garg ga = {.n = sizes[k]};
    tu_map_ok(shmap_map(mesh, fn, &ga, 0, NULL, NULL, 0, NULL, NULL), text);
    ck_assert_msg(ga.bad == 0, "%s (%s): %d wrong elements", text, mode,
                  (int)ga.bad);
    shmap_mesh_destroy(mesh);
  }
}

START_TEST(t_gather)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  run_groups(body_gather, modes[_i]);
}
END_TEST

/* One member makes a psum where the others gather (both small): the
 * mismatch names it and both calls. */
static int body_gather_mismatch(shmap_ctx *ctx, void *arg)
{
  const int *odd = arg;
  float x = 1;
  shmap_block b = {&x, SHMAP_F32, 1, {1}};
  for (int t = 0; t < 4; t++) {
    shmap_block *out = NULL;
    int rc = t == 2 && shmap_ctx_device(ctx) == *odd
                 ? shmap_psum(ctx, &b, "i")
                 : shmap_all_gather(ctx, &b, "i", 0, 1, &out);
    if (rc)
      return rc;
    if (out)
      shmap_block_free(ctx, out);
  }
  return 0;
}

/* Run fn on "i=4" and "i=100", where device odd[k] makes another call
 * #3 than the others (`call`): the map fails with a mismatch naming both
 * calls. */
static void check_mismatch(shmap_body_fn fn, const int odd[2],
                           const char *call)
{
  static const char *const meshes[] = {"i=4", "i=100"};
  for (int k = 0; k < 2; k++) {
    shmap_mesh *mesh = tu_mesh_new(meshes[k]);
    int rc = shmap_map(mesh, fn, (void *)&odd[k], 0, NULL, NULL, 0, NULL,
                       NULL);
    ck_assert_msg(rc == SHMAP_EMISMATCH, "%s: %d (%s): %s", meshes[k], rc,
                  shmap_strerror(rc), shmap_errmsg());
    const char *m = shmap_errmsg();
    ck_assert_msg(strstr(m, "#3") && strstr(m, "called psum(") &&
                      strstr(m, call),
                  "%s: message: %s", meshes[k], m);
    shmap_mesh_destroy(mesh);
  }
}

START_TEST(t_gather_mismatch)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int odd[2] = {1, 70};
  check_mismatch(body_gather_mismatch, odd, "all_gather(");
}
END_TEST

/* all_to_all split and concatenated along axis 0 takes the same round
 * trip when all n members' results (n times the block) fit in 512 bytes:
 * each member keeps chunk r of every block (groups of up to 4), or rank 0
 * lays out every member's result and each copies its own (5 and more).
 * Chunks of 1 element, of the most that fit, and of one more (the
 * general path), tiled and untiled, alternate with psums; every element
 * is checked. */
static int body_a2a(shmap_ctx *ctx, void *arg)
{
  garg *ga = arg;
  int d = shmap_ctx_device(ctx), n = ga->n;
  int64_t most = 128 / ((int64_t)n * n) > 1 ? 128 / ((int64_t)n * n) : 1;
  float *x = malloc(sizeof(float) * (size_t)n * (size_t)(most + 1));
  if (!x)
    return shmap_fail(ctx, "out of memory");
  for (int t = 0; t < 12; t++) {
    int64_t cols = t % 3 == 0 ? 1 : t % 3 == 1 ? most : most + 1;
    for (int r = 0; r < n; r++)
      for (int64_t e = 0; e < cols; e++)
        x[r * cols + e] = (float)(d * 1000 + r * 10) + (float)e / 8;
    int tiled = t & 1;
    shmap_block b = {x, SHMAP_F32, tiled ? 1 : 2,
                     {tiled ? n * cols : n, tiled ? 0 : cols}};
    shmap_block *out = NULL;
    int rc = shmap_all_to_all(ctx, &b, "i", 0, 0, tiled, &out);
    if (rc) {
      free(x);
      return rc;
    }
    /* Member k's chunk d, in the order of k: flat, the same either way. */
    const float *o = out->data;
    for (int k = 0; k < n; k++)
      for (int64_t e = 0; e < cols; e++)
        if (o[k * cols + e] != (float)(k * 1000 + d * 10) + (float)e / 8)
          atomic_fetch_add(&ga->bad, 1);
    shmap_block_free(ctx, out);
    float one = (float)d;
    shmap_block s = {&one, SHMAP_F32, 0, {0}};
    if ((rc = shmap_psum(ctx, &s, "i"))) {
      free(x);
      return rc;
    }
  }
  free(x);
  return 0;
}

START_TEST(t_all_to_all)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  run_groups(body_a2a, modes[_i]);
}
END_TEST

/* ppermute of at most 512 bytes in a group of at most 4 takes the same
 * round trip, every member copying its source's published block.  Over
 * "i=4" (a ring, then a path whose first member gets zeros, then a swap
 * with fixed points), in place on an arena block and on the body's memory
 * and out of place, alternating with calls of 513 bytes on the same arena
 * block (the general path, whose buffers pass through the block's second
 * room) and over the whole mesh "i=8" (more members than the small path
 * takes); every element is checked. */
typedef struct parg {
  _Atomic int bad;
} parg;

/* Where device d's block comes from in step t over n members (-1: none). */
static int perm_from(int t, int d, int n)
{
  switch (t % 3) {
  case 0: return (d + n - 1) % n;          /* ring */
  case 1: return d == 0 ? -1 : d - 1;      /* path 0 -> 1 -> ... */
  default: return d < 2 ? 1 - d : d;       /* swap 0, 1; fixed points */
  }
}

static int perm_pairs(int t, int n, int pairs[][2])
{
  int k = 0;
  for (int d = 0; d < n; d++) {
    int f = perm_from(t, d, n);
    if (f >= 0) {
      pairs[k][0] = f;
      pairs[k][1] = d;
      k++;
    }
  }
  return k;
}

static float pval(int d, int t, int64_t e)
{
  return (float)(d * 1000 + t * 10) + (float)e / 8;
}

static void pcheck(parg *pa, const float *got, int from, int t, int64_t len)
{
  for (int64_t e = 0; e < len; e++)
    if (got[e] != (from < 0 ? 0.0f : pval(from, t, e)))
      atomic_fetch_add(&pa->bad, 1);
}

static int body_perm(shmap_ctx *ctx, void *arg)
{
  parg *pa = arg;
  int i = shmap_axis_index(ctx, "i"), d = shmap_ctx_device(ctx);
  int pairs[8][2];
  /* Arena blocks of 3, 128 and 129 floats. */
  static const int64_t lens[3] = {3, 128, 129};
  shmap_block *xs[3];
  for (int k = 0; k < 3; k++)
    if (!(xs[k] = shmap_block_alloc(ctx, SHMAP_F32, 1, &lens[k])))
      return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  float mine[128];
  int rc;
  for (int t = 0; t < 24; t++) {
    int64_t len = t % 4 == 3 ? 129 : t % 2 ? 128 : 3;
    bool whole = t % 8 == 7; /* over "i, j": 8 members */
    int n = whole ? 8 : 4, me = whole ? d : i;
    int np = perm_pairs(t, n, pairs);
    int from = perm_from(t, me, n);
    const char *axes = whole ? "i, j" : "i";
    shmap_block b = {mine, SHMAP_F32, 1, {len}};
    shmap_block *y = len == 129   ? xs[2]
                     : t % 3 == 0 ? xs[len == 3 ? 0 : 1]
                                  : &b;
    shmap_block *out = NULL;
    for (int64_t e = 0; e < len; e++)
      ((float *)y->data)[e] = pval(me, t, e);
    if (t % 5 == 4) {
      rc = shmap_ppermute_new(ctx, y, axes, np, (const int(*)[2])pairs, &out);
      if (!rc) {
        pcheck(pa, out->data, from, t, len);
        shmap_block_free(ctx, out);
      }
    } else {
      rc = shmap_ppermute(ctx, y, axes, np, (const int(*)[2])pairs);
      if (!rc)
        pcheck(pa, y->data, from, t, len);
    }
    if (rc)
      return rc;
  }
  for (int k = 0; k < 3; k++)
    if ((rc = shmap_block_free(ctx, xs[k])))
      return rc;
  return 0;
}

START_TEST(t_ppermute)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=4, j=2");
  parg pa = {0};
  tu_map_ok(shmap_map(mesh, body_perm, &pa, 0, NULL, NULL, 0, NULL, NULL),
            "i=4, j=2");
  ck_assert_msg(pa.bad == 0, "%s: %d wrong elements", modes[_i], (int)pa.bad);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* One member makes a psum where the others make a small ppermute: the
 * mismatch names both calls (on "i=4"; "i=100" takes the general path). */
static int body_perm_mismatch(shmap_ctx *ctx, void *arg)
{
  const int *odd = arg;
  float x = 1;
  shmap_block b = {&x, SHMAP_F32, 1, {1}};
  int n = shmap_axis_size(ctx, "i"), pairs[100][2];
  for (int k = 0; k < n; k++) {
    pairs[k][0] = k;
    pairs[k][1] = (k + 1) % n;
  }
  for (int t = 0; t < 4; t++) {
    int rc = t == 2 && shmap_ctx_device(ctx) == *odd
                 ? shmap_psum(ctx, &b, "i")
                 : shmap_ppermute(ctx, &b, "i", n, (const int(*)[2])pairs);
    if (rc)
      return rc;
  }
  return 0;
}

START_TEST(t_ppermute_mismatch)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int odd[2] = {1, 70};
  check_mismatch(body_perm_mismatch, odd, "ppermute(");
}
END_TEST

/* One member makes a psum where the others make a small all_to_all: the
 * mismatch names it and both calls. */
static int body_a2a_mismatch(shmap_ctx *ctx, void *arg)
{
  const int *odd = arg;
  float x[128] = {1, 2, 3, 4};
  shmap_block b = {x, SHMAP_F32, 1, {shmap_axis_size(ctx, "i")}};
  for (int t = 0; t < 4; t++) {
    shmap_block *out = NULL;
    int rc = t == 2 && shmap_ctx_device(ctx) == *odd
                 ? shmap_psum(ctx, &b, "i")
                 : shmap_all_to_all(ctx, &b, "i", 0, 0, 1, &out);
    if (rc)
      return rc;
    if (out)
      shmap_block_free(ctx, out);
  }
  return 0;
}

START_TEST(t_all_to_all_mismatch)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int odd[2] = {1, 70};
  check_mismatch(body_a2a_mismatch, odd, "all_to_all(");
}
END_TEST


/* psum_scatter whose member keeps one run of the input (nothing but
 * size-1 dimensions before the scatter dimension) and whose input is at
 * most 512 bytes takes the same single round trip, each member folding
 * only its part (or copying it from rank 0's fold in groups over 4).
 * Groups of 4, 5, 8, 100 and 128 go through untiled and tiled 1-D blocks, a
 * [1, S] block scattered along dimension 1, a [2, S] block (two runs per
 * member: the general protocol), an input one run too large, and bool
 * terms (i32 counts), with psums in between; every element is checked
 * against the serial left fold in rank order. */
static float sterm(int d, int t, int64_t e)
{
  return 1.0f / (float)(1 + d * 7 + t + e) + (float)d * 1e4f;
}

static int body_scatter(shmap_ctx *ctx, void *arg)
{
  garg *ga = arg;
  int d = shmap_ctx_device(ctx), n = ga->n;
  for (int t = 0; t < 18; t++) {
    int v = t % 6;
    int64_t m = v == 0 ? 1 : 128 / n, outer = 1;
    shmap_block b = {NULL, SHMAP_F32, 1, {n * m}};
    int dim = 0, tiled = v != 0;
    if (v == 2 || v == 3) { /* [outer, n*m] along dimension 1 */
      outer = v == 2 ? 1 : 2;
      m = v == 2 ? 128 / n : 1;
      b.rank = 2;
      b.shape[0] = outer;
      b.shape[1] = n * m;
      dim = 1;
    } else if (v == 4) {
      m = 128 / n + 1;
      b.shape[0] = n * m;
    } else if (v == 5) {
      b.dtype = SHMAP_BOOL;
    }
    int64_t numel = outer * n * m;
    float x[2 * 129 * 2];
    unsigned char bx[512];
    for (int64_t e = 0; e < numel; e++) {
      x[e] = sterm(d, t, e);
      bx[e] = (unsigned char)((d + e + t) % 3 == 0);
    }
    b.data = v == 5 ? (void *)bx : (void *)x;
    shmap_block *out = NULL;
    int rc = shmap_psum_scatter(ctx, &b, "i", dim, tiled, &out);
    if (rc)
      return rc;
    if (shmap_block_numel(out) != outer * m ||
        out->dtype != (v == 5 ? SHMAP_I32 : SHMAP_F32))
      atomic_fetch_add(&ga->bad, 1);
    else
      for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++) {
          int64_t e = o * n * m + d * m + j;
          if (v == 5) {
            int32_t want = 0;
            for (int s = 0; s < n; s++)
              want += (s + e + t) % 3 == 0;
            if (((const int32_t *)out->data)[o * m + j] != want)
              atomic_fetch_add(&ga->bad, 1);
          } else {
            float want = sterm(0, t, e);
            for (int s = 1; s < n; s++)
              want += sterm(s, t, e);
            if (((const float *)out->data)[o * m + j] != want)
              atomic_fetch_add(&ga->bad, 1);
          }
        }
    shmap_block_free(ctx, out);
    float one = (float)d;
    shmap_block s1 = {&one, SHMAP_F32, 0, {0}};
    if ((rc = shmap_psum(ctx, &s1, "i")))
      return rc;
    if (one != (float)(n * (n - 1) / 2))
      atomic_fetch_add(&ga->bad, 1);
  }
  return 0;
}

START_TEST(t_scatter)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  run_groups(body_scatter, modes[_i]);
}
END_TEST

/* A member's psum_scatter against the others' psum (both small): the
 * mismatch names both calls. */
static int body_scatter_mismatch(shmap_ctx *ctx, void *arg)
{
  const int *odd = arg;
  int n = shmap_axis_size(ctx, "i");
  float x[128];
  for (int e = 0; e < n; e++)
    x[e] = 1;
  shmap_block b = {x, SHMAP_F32, 1, {n}};
  for (int t = 0; t < 4; t++) {
    shmap_block *out = NULL;
    int rc = t == 2 && shmap_ctx_device(ctx) == *odd
                 ? shmap_psum(ctx, &b, "i")
                 : shmap_psum_scatter(ctx, &b, "i", 0, 1, &out);
    if (rc)
      return rc;
    if (out)
      shmap_block_free(ctx, out);
  }
  return 0;
}

START_TEST(t_scatter_mismatch)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int odd[2] = {2, 99};
  check_mismatch(body_scatter_mismatch, odd, "psum_scatter(");
}
END_TEST

/*
 * Two levels: in fiber mode a group spread over several workers folds
 * through a chain of sub-leaders, one per worker (see shm.c).  With 2, 3
 * and 7 workers (chains of 2 to 7 links; a worker's range of devices may
 * end inside a row), groups over the whole mesh, its rows and its columns
 * reduce f32, f64 and i64 with psum (half the members through their
 * progress helpers), pmax and pmin, and f32 with psum_scatter.  Axes named in the mesh's order chain; named the other
 * way ("j, i") the ranks do not follow the workers and one leader folds.
 * Every result is the serial left fold in rank order, bit for bit.
 */
typedef struct carg {
  int ni, nj;
  _Atomic int bad;
} carg;

/* Member (a, c)'s term e of step t, as a double: its sums round. */
static double cterm(int a, int c, int t, int e)
{
  return 1.0 / (double)(1 + a * 7 + c * 3 + t + e) + (double)(a + c) * 1e9;
}

static int body_chain(shmap_ctx *ctx, void *arg)
{
  carg *ca = arg;
  int i = shmap_axis_index(ctx, "i"), j = shmap_axis_index(ctx, "j");
  static const char *const axes_of[4] = {"i, j", "j", "i", "j, i"};
  for (int t = 0; t < 48; t++) {
    const char *axes = axes_of[t % 4];
    int op = t / 4 % 4; /* psum, pmax, pmin, psum_scatter */
    shmap_dtype dt = op == 3 ? SHMAP_F32
                     : t / 16 % 3 == 0 ? SHMAP_F32
                     : t / 16 % 3 == 1 ? SHMAP_F64
                                      : SHMAP_I64;
    /* The group's members (a, c) in rank order, and this device's rank. */
    int n = 0, me = 0, mem[200][2];
    bool jmajor = t % 4 == 3;
    for (int o = 0; o < (jmajor ? ca->nj : ca->ni); o++)
      for (int q = 0; q < (jmajor ? ca->ni : ca->nj); q++) {
        int a = jmajor ? q : o, c = jmajor ? o : q;
        if ((t % 4 == 1 && a != i) || (t % 4 == 2 && c != j))
          continue;
        if (a == i && c == j)
          me = n;
        mem[n][0] = a;
        mem[n++][1] = c;
      }
    int len = op == 3 ? n : 24;
    if (op == 3 && n * 4 > 512)
      len = 0; /* too large for the small path: skip */
    if (!len)
      continue;
    double xd[200];
    float xf[200];
    int64_t xi[200];
    void *data = dt == SHMAP_F32 ? (void *)xf
                 : dt == SHMAP_F64 ? (void *)xd
                                   : (void *)xi;
    for (int e = 0; e < len; e++) {
      double v = cterm(i, j, t, e);
      xd[e] = v;
      xf[e] = (float)v;
      xi[e] = (int64_t)(v * 1e3) * (e % 2 ? -1 : 1);
    }
    shmap_block b = {data, dt, 1, {len}};
    shmap_block *out = NULL;
    int rc;
    if (op == 0 && (i + j + t / 16) % 2) {
      /* Half the members carry this psum out through their progress
       * helpers (started, then waited for). */
      shmap_request *req;
      rc = shmap_psum_start(ctx, &b, axes, &req);
      if (!rc)
        rc = shmap_wait(ctx, &req);
    } else {
      rc = op == 0   ? shmap_psum(ctx, &b, axes)
           : op == 1 ? shmap_pmax(ctx, &b, axes)
           : op == 2 ? shmap_pmin(ctx, &b, axes)
                     : shmap_psum_scatter(ctx, &b, axes, 0, 1, &out);
    }
    if (rc)
      return rc;
    int lo = op == 3 ? me : 0, hi = op == 3 ? me + 1 : len;
    for (int e = lo; e < hi; e++) {
      double ad = 0;
      float af = 0;
      int64_t ai = 0;
      for (int r = 0; r < n; r++) {
        double v = cterm(mem[r][0], mem[r][1], t, e);
        float vf = (float)v;
        int64_t vi = (int64_t)(v * 1e3) * (e % 2 ? -1 : 1);
        if (r == 0) {
          ad = v, af = vf, ai = vi;
        } else if (op == 0 || op == 3) {
          ad += v, af += vf, ai += vi;
        } else if (op == 1) {
          ad = v > ad ? v : ad, af = vf > af ? vf : af, ai = vi > ai ? vi : ai;
        } else {
          ad = v < ad ? v : ad, af = vf < af ? vf : af, ai = vi < ai ? vi : ai;
        }
      }
      const void *got = op == 3 ? (const float *)out->data + (e - lo)
                        : dt == SHMAP_F32 ? (const void *)&xf[e]
                        : dt == SHMAP_F64 ? (const void *)&xd[e]
                                          : (const void *)&xi[e];
      const void *want = dt == SHMAP_F32   ? (const void *)&af
                         : dt == SHMAP_F64 ? (const void *)&ad
                                           : (const void *)&ai;
      if (memcmp(got, want, shmap_dtype_size(dt)) != 0) {
        atomic_fetch_add(&ca->bad, 1);
        break;
      }
    }
    if (out && (rc = shmap_block_free(ctx, out)))
      return rc;
  }
  return 0;
}

START_TEST(t_chain)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int shapes[][2] = {{72, 2}, {2, 70}, {9, 11}};
  static const char *const workers[] = {"2", "3", "7"};
  for (size_t w = 0; w < 3; w++) {
    ck_assert_int_eq(setenv("SHMAP_WORKERS", workers[w], 1), 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      char text[32];
      snprintf(text, sizeof text, "i=%d, j=%d", shapes[s][0], shapes[s][1]);
      shmap_mesh *mesh = tu_mesh_new(text);
      carg ca = {.ni = shapes[s][0], .nj = shapes[s][1]};
      tu_map_ok(shmap_map(mesh, body_chain, &ca, 0, NULL, NULL, 0, NULL, NULL),
                text);
      ck_assert_msg(ca.bad == 0, "%s (%s, %s workers): %d wrong results", text,
                    modes[_i], workers[w], (int)ca.bad);
      shmap_mesh_destroy(mesh);
    }
  }
  ck_assert_int_eq(unsetenv("SHMAP_WORKERS"), 0);
}
END_TEST

/* In chains of 3 (i=100 over 3 workers: devices 0-32, 33-65, 66-99, whose
 * first devices are the sub-leaders), a device makes another call #3: the
 * first, middle and last sub-leader, or a member on the middle or the last
 * worker.  The mismatch names it.  Then a sub-leader or a member leaves its
 * body: everyone is released, and the map names it. */
START_TEST(t_chain_mismatch)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "3", 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=100");
  static const int odds[] = {0, 33, 66, 40, 99};
  for (size_t k = 0; k < sizeof odds / sizeof odds[0]; k++) {
    int rc = shmap_map(mesh, body_large_mismatch, (void *)&odds[k], 0, NULL,
                       NULL, 0, NULL, NULL);
    ck_assert_msg(rc == SHMAP_EMISMATCH, "%d (%s): %s", rc,
                  shmap_strerror(rc), shmap_errmsg());
    char dev[32];
    snprintf(dev, sizeof dev, "device %d ", odds[k]);
    const char *m = shmap_errmsg();
    ck_assert_msg(strstr(m, "#3") && strstr(m, dev) && strstr(m, "f32[6]") &&
                      strstr(m, "f32[8]") && strstr(m, "differs"),
                  "device %d: message: %s", odds[k], m);
  }
  static const int leavers[] = {33, 66, 50};
  for (size_t k = 0; k < sizeof leavers / sizeof leavers[0]; k++) {
    int rc = shmap_map(mesh, body_leave_at, (void *)&leavers[k], 0, NULL,
                       NULL, 0, NULL, NULL);
    ck_assert_msg(rc == SHMAP_EMISMATCH, "%d (%s): %s", rc,
                  shmap_strerror(rc), shmap_errmsg());
    char dev[32];
    snprintf(dev, sizeof dev, "device %d ", leavers[k]);
    ck_assert_msg(strstr(shmap_errmsg(), dev) &&
                      strstr(shmap_errmsg(), "returned from its body after 9"),
                  "device %d: message: %s", leavers[k], shmap_errmsg());
  }
  shmap_mesh_destroy(mesh);
  ck_assert_int_eq(unsetenv("SHMAP_WORKERS"), 0);
}
END_TEST

/* One group's calls alternate between one leader (pmean, which a chain
 * cannot take) and a chain of sub-leaders (psum), with a call of another
 * group between: the group's first device, leader of the first and first
 * sub-leader of the second, must not rewrite its result while members on
 * the other worker still read the first.  Device 8, the first on worker
 * 1, is slow now and then.  Every result is checked. */
static int body_lead_then_chain(shmap_ctx *ctx, void *arg)
{
  sarg *a = arg;
  int d = shmap_ctx_device(ctx), j = d % 2;
  for (int t = 0; t < 20; t++) {
    float x[4], y[4];
    for (int e = 0; e < 4; e++) {
      x[e] = (float)(d / 2 + t);
      y[e] = (float)(d + 100 * t + e);
    }
    shmap_block bx = {x, SHMAP_F32, 1, {4}}, by = {y, SHMAP_F32, 1, {4}};
    int rc = shmap_pmean(ctx, &bx, "i");
    if (!rc && d == 8 && t % 4 == 0)
      tu_sleep_ms(2);
    if (!rc)
      rc = shmap_psum(ctx, &bx, "j");
    if (!rc)
      rc = shmap_psum(ctx, &by, "i");
    if (rc)
      return rc;
    for (int e = 0; e < 4; e++) {
      /* mean over i of i + t is 3.5 + t; the sum over i of 2i + j + 100t + e
       * is 56 + 8 (j + 100t + e). */
      if (x[e] != 2 * (3.5f + (float)t) ||
          y[e] != (float)(56 + 8 * (j + 100 * t + e)))
        atomic_fetch_add(&a->bad, 1);
    }
  }
  return 0;
}

START_TEST(t_lead_then_chain)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
  shmap_mesh *mesh = tu_mesh_new("i=8, j=2");
  for (int k = 0; k < 5; k++) {
    sarg a = {8, 2, 0, 0};
    int rc = shmap_map(mesh, body_lead_then_chain, &a, 0, NULL, NULL, 0, NULL,
                       NULL);
    ck_assert_msg(rc == 0, "map %d: %d (%s): %s", k, rc, shmap_strerror(rc),
                  shmap_errmsg());
    ck_assert_int_eq(atomic_load(&a.bad), 0);
  }
  shmap_mesh_destroy(mesh);
  ck_assert_int_eq(unsetenv("SHMAP_WORKERS"), 0);
}
END_TEST

/* Device 1 reduces over "i, j" (a group of 16 led by device 0) while the
 * others reduce over "i" (groups of 8, device 0 leading the even
 * column): device 0's result of that call is the even column's.  Device
 * 1 must report the difference, never take that result as its own. */
static _Atomic int other_rc[16];

static int body_other_group(shmap_ctx *ctx, void *arg)
{
  int d = shmap_ctx_device(ctx);
  float x[4] = {1, 1, 1, 1};
  shmap_block b = {x, SHMAP_F32, 1, {4}};
  if (d == 1 && (intptr_t)arg)
    tu_sleep_ms(5); /* device 0 is done with its call by then */
  int rc = shmap_psum(ctx, &b, d == 1 ? "i, j" : "i");
  atomic_store(&other_rc[d], rc);
  return rc;
}

START_TEST(t_lead_other_group)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const char *const workers[] = {"1", "2"};
  for (int w = 0; w < 2; w++) {
    ck_assert_int_eq(setenv("SHMAP_WORKERS", workers[w], 1), 0);
    shmap_mesh *mesh = tu_mesh_new("i=8, j=2");
    for (int k = 0; k < 10; k++) {
      atomic_store(&other_rc[1], 1);
      /* Device 1 late in half the maps, and on time in the others. */
      int rc = shmap_map(mesh, body_other_group, (void *)(intptr_t)(k % 2), 0,
                         NULL, NULL, 0, NULL, NULL);
      ck_assert_msg(rc == SHMAP_EMISMATCH, "%d (%s): %s", rc,
                    shmap_strerror(rc), shmap_errmsg());
      ck_assert_msg(strstr(shmap_errmsg(), "device 1 ") &&
                        strstr(shmap_errmsg(), "differs"),
                    "message: %s", shmap_errmsg());
      ck_assert_msg(atomic_load(&other_rc[1]) != 0,
                    "workers %s, map %d: device 1 took another call's result",
                    workers[w], k);
    }
    shmap_mesh_destroy(mesh);
  }
  ck_assert_int_eq(unsetenv("SHMAP_WORKERS"), 0);
}
END_TEST

/* Large groups, property-style: over "i=256" and "i=1024", psum, pmax and
 * pmin of 64 f32 terms whose sums round (so any other order shows in the
 * bits) and of 64 i32 terms, every result compared bit for bit with the
 * serial left fold in rank order, computed before the map; at 256, also
 * within axis_index_groups of 64 ranks listed from the highest down, whose
 * fold goes in that listed order. */
#define PLEN 64
#define PSTEPS 12
#define PGROUPS 4

typedef struct lparg {
  int n;
  bool groups;
  float (*wf)[PLEN];   /* [PSTEPS]: the folds over the whole axis */
  int32_t (*wi)[PLEN];
  float (*gf)[PGROUPS][PLEN]; /* [PSTEPS]: the folds within each group */
  int32_t (*gi)[PGROUPS][PLEN];
  int ranks[1024];
  _Atomic int bad;
} lparg;

static float pterm_f(int d, int t, int e)
{
  return 1.0f / (float)(3 + d * 5 + t * 7 + e) + (float)(d % 17) * 1e3f;
}

static int32_t pterm_i(int d, int t, int e)
{
  return (int32_t)((d * 37 + t * 11 + e * 5) % 1001) - 500;
}

/* Fold member terms in the order of rank list `order` (n of them). */
static void pfold(const int *order, int n, int t, int op, float *f,
                  int32_t *iv)
{
  for (int e = 0; e < PLEN; e++) {
    float af = pterm_f(order[0], t, e);
    int32_t ai = pterm_i(order[0], t, e);
    for (int r = 1; r < n; r++) {
      float vf = pterm_f(order[r], t, e);
      int32_t vi = pterm_i(order[r], t, e);
      af = op == 0 ? af + vf : op == 1 ? (vf > af ? vf : af)
                                       : (vf < af ? vf : af);
      ai = op == 0 ? ai + vi : op == 1 ? (vi > ai ? vi : ai)
                                       : (vi < ai ? vi : ai);
    }
    f[e] = af;
    iv[e] = ai;
  }
}

static int preduce(shmap_ctx *ctx, int op, shmap_block *b,
                   const shmap_groups *g)
{
  return op == 0   ? shmap_psum_groups(ctx, b, "i", g)
         : op == 1 ? shmap_pmax_groups(ctx, b, "i", g)
                   : shmap_pmin_groups(ctx, b, "i", g);
}

static int body_large_p(shmap_ctx *ctx, void *arg)
{
  lparg *pa = arg;
  int d = shmap_axis_index(ctx, "i");
  const shmap_groups g = {PGROUPS, pa->n / PGROUPS, pa->ranks};
  for (int t = 0; t < PSTEPS; t++) {
    int op = t % 3;
    bool grp = pa->groups && t % 4 == 3;
    float xf[PLEN];
    int32_t xi[PLEN];
    for (int e = 0; e < PLEN; e++) {
      xf[e] = pterm_f(d, t, e);
      xi[e] = pterm_i(d, t, e);
    }
    shmap_block bf = {xf, SHMAP_F32, 1, {PLEN}};
    shmap_block bi = {xi, SHMAP_I32, 1, {PLEN}};
    int rc = preduce(ctx, op, &bf, grp ? &g : NULL);
    if (!rc)
      rc = preduce(ctx, op, &bi, grp ? &g : NULL);
    if (rc)
      return rc;
    const float *wf = grp ? pa->gf[t][d % PGROUPS] : pa->wf[t];
    const int32_t *wi = grp ? pa->gi[t][d % PGROUPS] : pa->wi[t];
    if (memcmp(xf, wf, sizeof xf) || memcmp(xi, wi, sizeof xi))
      atomic_fetch_add(&pa->bad, 1);
  }
  return 0;
}

START_TEST(t_large_p)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[_i], 1), 0);
  static const int sizes[] = {256, 1024};
  for (size_t k = 0; k < 2; k++) {
    lparg *pa = calloc(1, sizeof *pa);
    ck_assert_ptr_nonnull(pa);
    pa->n = sizes[k];
    pa->groups = pa->n == 256;
    pa->wf = calloc(PSTEPS, sizeof *pa->wf);
    pa->wi = calloc(PSTEPS, sizeof *pa->wi);
    pa->gf = calloc(PSTEPS, sizeof *pa->gf);
    pa->gi = calloc(PSTEPS, sizeof *pa->gi);
    ck_assert(pa->wf && pa->wi && pa->gf && pa->gi);
    /* Group q holds the ranks r with r % PGROUPS == q, highest first. */
    int gs = pa->n / PGROUPS, all[1024];
    for (int q = 0; q < PGROUPS; q++)
      for (int m = 0; m < gs; m++)
        pa->ranks[q * gs + m] = (gs - 1 - m) * PGROUPS + q;
    for (int r = 0; r < pa->n; r++)
      all[r] = r;
    for (int t = 0; t < PSTEPS; t++) {
      pfold(all, pa->n, t, t % 3, pa->wf[t], pa->wi[t]);
      for (int q = 0; q < PGROUPS; q++)
        pfold(&pa->ranks[q * gs], gs, t, t % 3, pa->gf[t][q], pa->gi[t][q]);
    }
    char text[32];
    snprintf(text, sizeof text, "i=%d", pa->n);
    shmap_mesh *mesh = tu_mesh_new(text);
    tu_map_ok(shmap_map(mesh, body_large_p, pa, 0, NULL, NULL, 0, NULL, NULL),
              text);
    ck_assert_msg(pa->bad == 0, "%s (%s): %d wrong results", text, modes[_i],
                  (int)pa->bad);
    shmap_mesh_destroy(mesh);
    free(pa->wf);
    free(pa->wi);
    free(pa->gf);
    free(pa->gi);
    free(pa);
  }
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("small_reduce");
  TCase *tc = tcase_create("small");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, t_groups, 0, 2);
  tcase_add_loop_test(tc, t_leave, 0, 2);
  tcase_add_loop_test(tc, t_async_groups, 0, 2);
  tcase_add_loop_test(tc, t_groups_mismatch, 0, 2);
  tcase_add_loop_test(tc, t_large_groups, 0, 2);
  tcase_add_loop_test(tc, t_large_leave, 0, 2);
  tcase_add_loop_test(tc, t_large_mismatch, 0, 2);
  tcase_add_loop_test(tc, t_gather, 0, 2);
  tcase_add_loop_test(tc, t_gather_mismatch, 0, 2);
  tcase_add_loop_test(tc, t_all_to_all, 0, 2);
  tcase_add_loop_test(tc, t_all_to_all_mismatch, 0, 2);
  tcase_add_loop_test(tc, t_ppermute, 0, 2);
  tcase_add_loop_test(tc, t_ppermute_mismatch, 0, 2);
  tcase_add_loop_test(tc, t_scatter, 0, 2);
  tcase_add_loop_test(tc, t_scatter_mismatch, 0, 2);
  tcase_add_loop_test(tc, t_chain, 0, 2);
  tcase_add_loop_test(tc, t_chain_mismatch, 0, 2);
  tcase_add_loop_test(tc, t_lead_then_chain, 0, 2);
  tcase_add_loop_test(tc, t_lead_other_group, 0, 2);
  tcase_add_loop_test(tc, t_large_p, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(suite()); }
