/* SPDX-License-Identifier: MIT */
/*
 * test_ppermute_inplace.c - in-place ppermute on blocks the device owns.
 *
 * Such a ppermute writes the received block into a second room of the
 * block's storage and leaves the room it read from to its reader, which
 * the device waits for only when it next writes or frees that room.
 * These tests write the block right after each call, free blocks right
 * after a call, mix in other collectives and out-of-place ppermutes, turn
 * the block into a map output, go on with calls over another group before
 * the readers read, and fail a device in the middle of a ring:
 * every value is checked against the serial result, and every map must
 * end (under ThreadSanitizer too, any read of a room being rewritten
 * shows).  Every case runs in both scheduling modes.
 */
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 40 /* more calls than a device keeps descriptors for */
#define LEN 300

static const char *const modes[2] = {"threads", "fibers"};

static void set_mode(int i)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[i], 1), 0);
}

typedef struct ring_arg {
  const char *axis;
  _Atomic int bad;  /* devices that saw a wrong value */
  _Atomic int calls; /* failed calls */
} ring_arg;

/* The value element e of a device of rank r holds after t steps of
 * "shift by one, then add one" in a group of n: the start value of rank
 * r - t, plus t. */
static float ring_value(int r, int n, int t, int e)
{
  int src = ((r - t) % n + n) % n;
  return (float)(src * 1000 + e + t);
}

/* A ring over `axis`: shift by one, then write the block at once. */
static int body_ring(shmap_ctx *ctx, void *arg)
{
  ring_arg *ra = arg;
  int n = shmap_axis_size(ctx, ra->axis);
  int r = shmap_axis_index(ctx, ra->axis);
  if (n < 0 || r < 0)
    return n < 0 ? n : r;
  int pairs[64][2];
  for (int i = 0; i < n; i++) {
    pairs[i][0] = i;
    pairs[i][1] = (i + 1) % n;
  }
  shmap_block *x = shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){LEN});
  if (!x)
    return -1;
  float *v = x->data;
  for (int e = 0; e < LEN; e++)
    v[e] = (float)(r * 1000 + e);
  for (int t = 1; t <= STEPS; t++) {
    int rc;
    if (t % 11 == 0) {
      /* Out of place, into a block freed at once. */
      shmap_block *y;
      rc = shmap_ppermute_new(ctx, x, ra->axis, n, (const int(*)[2])pairs, &y);
      if (rc == 0) {
        memcpy(x->data, y->data, sizeof(float) * LEN);
        rc = shmap_block_free(ctx, y);
      }
    } else {
      rc = shmap_ppermute(ctx, x, ra->axis, n, (const int(*)[2])pairs);
    }
    if (rc) {
      ra->calls++;
      return rc;
    }
    v = x->data;
    int wrong = 0;
    for (int e = 0; e < LEN; e++) {
      wrong += v[e] != ring_value(r, n, t, e) - 1;
      v[e] += 1;
    }
    if (wrong)
      ra->bad++;
    if (t % 7 == 0) {
      float one = 1;
      shmap_block s = {&one, SHMAP_F32, 0, {0}};
      if ((rc = shmap_psum(ctx, &s, ra->axis)) || one != (float)n) {
        ra->calls++;
        return rc ? rc : -1;
      }
    }
  }
  return 0;
}

static void ring_case(const char *mesh_text, const char *axis, int n)
{
  shmap_mesh *mesh = tu_mesh_new(mesh_text);
  ring_arg ra = {.axis = axis};
  shmap_array *out = NULL;
  int rc = shmap_map(mesh, body_ring, &ra, 0, NULL, NULL, 1, &out,
                     (const char *[]){"P(('i', 'j'))"});
  char what[128];
  snprintf(what, sizeof what, "ring over %s on %s", axis, mesh_text);
  tu_map_ok(rc, what);
  ck_assert_msg(ra.bad == 0, "%s: %d devices saw a wrong block", what,
                (int)ra.bad);
  ck_assert_int_eq(ra.calls, 0);
  size_t nbytes;
  float *got = tu_array_to_host(out, &nbytes);
  int ndev = shmap_mesh_ndevices(mesh);
  ck_assert_uint_eq(nbytes, sizeof(float) * LEN * (size_t)ndev);
  /* Devices are numbered with j fastest; the group over 'j' is a row,
   * over 'i' a column. */
  int nj = ndev / (strcmp(axis, "i") == 0 ? n : ndev / n);
  for (int d = 0; d < ndev; d++) {
    int r = strcmp(axis, "i") == 0 ? d / nj : d % nj;
    for (int e = 0; e < LEN; e++)
      ck_assert_msg(got[(size_t)d * LEN + e] == ring_value(r, n, STEPS, e),
                    "%s: output of device %d element %d: %g, want %g", what,
                    d, e, (double)got[(size_t)d * LEN + e],
                    (double)ring_value(r, n, STEPS, e));
  }
  free(got);
  shmap_array_destroy(out);
  shmap_mesh_destroy(mesh);
}

START_TEST(t_ring)
{
  set_mode(_i);
  ring_case("i=2, j=1", "i", 2);
  ring_case("i=3, j=1", "i", 3);
  ring_case("i=8, j=1", "i", 8);
  ring_case("i=2, j=3", "j", 3);
  ring_case("i=3, j=2", "i", 3);
}
END_TEST

/* A partial permutation (rank 0 receives nothing, rank 1 keeps its own),
 * and the block freed right after the call, while its old room may still
 * be read. */
typedef struct part_arg {
  _Atomic int bad;
} part_arg;

static int body_partial(shmap_ctx *ctx, void *arg)
{
  part_arg *pa = arg;
  static const int pairs[3][2] = {{0, 2}, {1, 1}, {2, 3}};
  int r = shmap_axis_index(ctx, "i");
  for (int t = 0; t < STEPS; t++) {
    shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){LEN});
    if (!x)
      return -1;
    int32_t *v = x->data;
    for (int e = 0; e < LEN; e++)
      v[e] = r * 100000 + t * 1000 + e;
    int rc = shmap_ppermute(ctx, x, "i", 3, pairs);
    if (rc)
      return rc;
    static const int from[4] = {-1, 1, 0, 2};
    int src = from[r];
    v = x->data;
    for (int e = 0; e < LEN; e++)
      if (v[e] != (src < 0 ? 0 : src * 100000 + t * 1000 + e)) {
        pa->bad++;
        break;
      }
    /* A second call on the same block, then free it at once. */
    if ((rc = shmap_ppermute(ctx, x, "i", 3, pairs)) ||
        (rc = shmap_block_free(ctx, x)))
      return rc;
  }
  return 0;
}

START_TEST(t_partial_and_free)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  part_arg pa = {0};
  tu_map_ok(shmap_map(mesh, body_partial, &pa, 0, NULL, NULL, 0, NULL, NULL),
            "partial ppermute, blocks freed at once");
  ck_assert_int_eq(pa.bad, 0);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* A block whose data the body points elsewhere is still exchanged in
 * place, through that memory. */
static int body_user_data(shmap_ctx *ctx, void *arg)
{
  _Atomic int *bad = arg;
  static const int pairs[2][2] = {{0, 1}, {1, 0}};
  int r = shmap_axis_index(ctx, "i");
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){LEN});
  if (!x)
    return -1;
  float mine[LEN];
  x->data = mine;
  for (int t = 0; t < 5; t++) {
    for (int e = 0; e < LEN; e++)
      mine[e] = (float)(r * 1000 + t * 10 + e);
    int rc = shmap_ppermute(ctx, x, "i", 2, pairs);
    if (rc)
      return rc;
    if (x->data != mine)
      (*bad)++;
    for (int e = 0; e < LEN; e++)
      if (mine[e] != (float)((1 - r) * 1000 + t * 10 + e)) {
        (*bad)++;
        break;
      }
  }
  return 0;
}

START_TEST(t_user_data)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=2");
  _Atomic int bad = 0;
  tu_map_ok(shmap_map(mesh, body_user_data, &bad, 0, NULL, NULL, 0, NULL,
                      NULL),
            "ppermute of a block with the body's own data");
  ck_assert_int_eq(bad, 0);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* One device fails in the middle of a ring: the map reports it, and every
 * other device is released. */
static int body_fail(shmap_ctx *ctx, void *arg)
{
  const int *when = arg;
  int n = shmap_axis_size(ctx, "i");
  int r = shmap_axis_index(ctx, "i");
  int pairs[8][2];
  for (int i = 0; i < n; i++) {
    pairs[i][0] = i;
    pairs[i][1] = (i + 1) % n;
  }
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F64, 1, (int64_t[]){LEN});
  if (!x)
    return -1;
  for (int t = 0; t < STEPS; t++) {
    if (r == 2 && t == *when)
      return shmap_fail(ctx, "device stops at step %d", t);
    int rc = shmap_ppermute(ctx, x, "i", n, (const int(*)[2])pairs);
    if (rc)
      return rc;
    ((double *)x->data)[0] += 1; /* written at once */
  }
  return shmap_block_free(ctx, x);
}

START_TEST(t_fail_releases)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=5");
  for (int when = 0; when < 12; when += 3) {
    int rc = shmap_map(mesh, body_fail, &when, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == SHMAP_EBODY, "failure at step %d: %d (%s): %s", when,
                  rc, shmap_strerror(rc), shmap_errmsg());
    char want[64];
    snprintf(want, sizeof want, "device stops at step %d", when);
    ck_assert_msg(strstr(shmap_errmsg(), want), "message: %s", shmap_errmsg());
  }
  /* The mesh still works. */
  int when = STEPS;
  tu_map_ok(shmap_map(mesh, body_fail, &when, 0, NULL, NULL, 0, NULL, NULL),
            "a ring after failed ones");
  shmap_mesh_destroy(mesh);
}
END_TEST

/* In-place ppermutes among started calls: a block exchanged in place is
 * freed while a started ppermute and a started small psum may still be
 * carried out by the device's progress helper, and another is exchanged
 * in place before they are waited for.  Every value is checked. */
static int body_async(shmap_ctx *ctx, void *arg)
{
  _Atomic int *bad = arg;
  int n = shmap_axis_size(ctx, "i");
  int r = shmap_axis_index(ctx, "i");
  int pairs[8][2];
  for (int i = 0; i < n; i++) {
    pairs[i][0] = i;
    pairs[i][1] = (i + 1) % n;
  }
  int from = (r - 1 + n) % n;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){LEN});
  shmap_block *y = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){LEN});
  if (!x || !y)
    return -1;
  for (int e = 0; e < LEN; e++)
    ((float *)x->data)[e] = (float)(r * 1000 + e);
  for (int t = 1; t <= STEPS / 2; t++) {
    float *yv = y->data, s[8];
    for (int e = 0; e < LEN; e++)
      yv[e] = (float)(r * 100 + t + e);
    for (int e = 0; e < 8; e++)
      s[e] = (float)(r + e + t);
    shmap_block sb = {s, SHMAP_F32, 1, {8}};
    shmap_block *z = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){LEN});
    if (!z)
      return -1;
    for (int e = 0; e < LEN; e++)
      ((float *)z->data)[e] = (float)(r * 10 + e);
    int rc = shmap_ppermute(ctx, z, "i", n, (const int(*)[2])pairs);
    if (rc)
      return rc;
    for (int e = 0; e < LEN; e++)
      if (((float *)z->data)[e] != (float)(from * 10 + e)) {
        (*bad)++;
        break;
      }
    shmap_block *got;
    shmap_request *req[2];
    if ((rc = shmap_ppermute_start(ctx, y, "i", n, (const int(*)[2])pairs,
                                   &got, &req[0])) ||
        (rc = shmap_psum_start(ctx, &sb, "i", &req[1])))
      return rc;
    /* z's old room may still be read by its reader. */
    if ((rc = shmap_block_free(ctx, z)))
      return rc;
    if ((rc = shmap_ppermute(ctx, x, "i", n, (const int(*)[2])pairs)))
      return rc;
    if ((rc = shmap_wait_all(ctx, 2, req)))
      return rc;
    int src = ((r - t) % n + n) % n;
    for (int e = 0; e < LEN; e++)
      if (((float *)x->data)[e] != (float)(src * 1000 + e) ||
          ((float *)got->data)[e] != (float)(from * 100 + t + e)) {
        (*bad)++;
        break;
      }
    for (int e = 0; e < 8; e++)
      if (s[e] != (float)(n * (n - 1) / 2 + n * (e + t))) {
        (*bad)++;
        break;
      }
    if ((rc = shmap_block_free(ctx, got)))
      return rc;
  }
  return 0;
}

START_TEST(t_async)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  _Atomic int bad = 0;
  tu_map_ok(shmap_map(mesh, body_async, &bad, 0, NULL, NULL, 0, NULL, NULL),
            "in-place ppermutes among started calls");
  ck_assert_int_eq(bad, 0);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Between two ppermutes over x (pairs (0, 1) and (1, 0)), the devices go
 * on with `arg` psums over y, a group that does not wait for their
 * ppermute's readers, which the devices at x=1 are made to be: those at
 * x=0 arrive last, so the readers still sleep in the arrivals when their
 * sources are already making the psums.  With 7 psums or more a source
 * rewrites the ppermute's descriptor (HIST 8) while its reader may not
 * have read it yet; it must wait.  Every value is checked. */
static int body_other_calls(shmap_ctx *ctx, void *arg)
{
  int npsum = *(const int *)arg;
  int d = shmap_ctx_device(ctx), xi = shmap_axis_index(ctx, "x");
  int64_t n = 16;
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_F32, 1, &n);
  shmap_block *s = shmap_block_alloc(ctx, SHMAP_F32, 1, &n);
  if (!b || !s)
    return SHMAP_ENOMEM;
  static const int pairs[2][2] = {{0, 1}, {1, 0}};
  for (int t = 0; t < 60; t++) {
    for (int e = 0; e < 16; e++)
      ((float *)b->data)[e] = (float)(d * 1000 + t);
    if (xi == 0) {
      volatile unsigned z = 0;
      for (unsigned i = 0; i < 100000; i++)
        z += i;
    }
    int rc = shmap_ppermute(ctx, b, "x", 2, pairs);
    if (rc)
      return rc;
    for (int e = 0; e < 16; e++)
      if (((float *)b->data)[e] != (float)((d ^ 2) * 1000 + t))
        return 100 + t; /* not an error code: the value was wrong */
    for (int j = 0; j < npsum; j++) {
      for (int e = 0; e < 16; e++)
        ((float *)s->data)[e] = (float)(d + j);
      if ((rc = shmap_psum(ctx, s, "y")))
        return rc;
      if (((float *)s->data)[0] != (float)(2 * (d & 2) + 1 + 2 * j))
        return 200 + t;
    }
  }
  return 0;
}

START_TEST(t_other_calls_between)
{
  set_mode(_i);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
  shmap_mesh *mesh = tu_mesh_new("x=2, y=2");
  static const int npsums[] = {6, 7, 9};
  for (int k = 0; k < 3; k++) {
    int rc = shmap_map(mesh, body_other_calls, (void *)&npsums[k], 0, NULL,
                       NULL, 0, NULL, NULL);
    ck_assert_msg(rc == 0, "%d psums between: %d (%s): %s", npsums[k], rc,
                  shmap_strerror(rc), shmap_errmsg());
  }
  shmap_mesh_destroy(mesh);
  ck_assert_int_eq(unsetenv("SHMAP_WORKERS"), 0);
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("ppermute_inplace");
  TCase *tc = tcase_create("inplace");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, t_ring, 0, 2);
  tcase_add_loop_test(tc, t_partial_and_free, 0, 2);
  tcase_add_loop_test(tc, t_user_data, 0, 2);
  tcase_add_loop_test(tc, t_fail_releases, 0, 2);
  tcase_add_loop_test(tc, t_async, 0, 2);
  tcase_add_loop_test(tc, t_other_calls_between, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(suite()); }
