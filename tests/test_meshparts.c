/* SPDX-License-Identifier: MIT */
/*
 * test_meshparts.c - parts of a mesh (SEMANTICS.md §7, §8): maps over some
 * axes (partial-manual), maps nested in a body, sub-meshes, and transfers
 * between meshes, with every error they report.  Each test runs in both
 * scheduling modes (loop index 0: threads, 1: fibers).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "refmodel.h"
#include "testutil.h"

#define TIMEOUT 120
#define MAXDEV 64

/* Asserts rc == code and that the message contains every needle. */
static void expect_err(int rc, int code, const char *n1, const char *n2,
                       const char *n3)
{
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "rc %d (%s), want %d: %s", rc, shmap_strerror(rc),
                code, msg);
  const char *need[3] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    ck_assert_msg(!need[i] || t_has(msg, need[i]),
                  "message lacks \"%s\": %s", need[i], msg);
}

/* ---- partial-manual maps ---------------------------------------------- */

typedef struct seen {
  int64_t shape[MAXDEV][2];
  int size_i[MAXDEV], index_i[MAXDEV];
  atomic_int calls;
} seen;

/* Records its block shape and axis queries; returns its block doubled. */
static int body_double(shmap_ctx *ctx, void *arg)
{
  seen *s = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return -1;
  if (s) {
    s->shape[dev][0] = x->shape[0];
    s->shape[dev][1] = x->shape[1];
    s->size_i[dev] = shmap_axis_size(ctx, "i");
    s->index_i[dev] = shmap_axis_index(ctx, "i");
    atomic_fetch_add(&s->calls, 1);
  }
  shmap_block *y = shmap_out_copy(ctx, 0, x);
  if (!y)
    return -1;
  float *p = y->data;
  for (int64_t e = 0; e < shmap_block_numel(y); e++)
    p[e] *= 2;
  return 0;
}

START_TEST(partial_blocks_and_layout)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=2, j=3");
  int64_t shape[2] = {4, 6};
  shmap_array *x = tu_arange_f32(2, shape), *y = NULL;
  seen *s = calloc(1, sizeof *s);
  shmap_map_opts o = {.manual_axes = "i"};
  const char *is[] = {"P('i')"}, *os[] = {"P('i')"};
  int rc = shmap_map_ex(m, body_double, s, 1, &x, is, 1, &y, os, &o);
  tu_map_ok(rc, "partial map");
  /* Split over i only: one body per coordinate of i, on the device at
   * j=0, which sees 2x6; the devices along j hold its values. */
  ck_assert_int_eq(atomic_load(&s->calls), 2);
  for (int d = 0; d < 6; d++) {
    bool runs = d % 3 == 0;
    ck_assert_int_eq(s->shape[d][0], runs ? 2 : 0);
    ck_assert_int_eq(s->shape[d][1], runs ? 6 : 0);
    ck_assert_int_eq(s->size_i[d], runs ? 2 : 0);
    ck_assert_int_eq(s->index_i[d], runs ? d / 3 : 0);
  }
  float *h = tu_array_to_host(y, NULL);
  for (int e = 0; e < 24; e++)
    ck_assert_float_eq(h[e], 2.0f * e);
  free(h);
  /* Laid out replicated along the free axis j. */
  char spec[64];
  shmap_array_spec(y, spec, sizeof spec);
  ck_assert_str_eq(spec, "P('i')");
  for (int d = 0; d < 6; d++) {
    shmap_block b, b0;
    ck_assert_int_eq(shmap_array_block(y, d, &b, NULL), 0);
    ck_assert_int_eq(shmap_array_block(y, d / 3 * 3, &b0, NULL), 0);
    ck_assert_int_eq(memcmp(b.data, b0.data, shmap_block_nbytes(&b)), 0);
  }
  shmap_array_destroy(y);
  /* A map over every axis named explicitly or by NULL options behaves as
   * shmap_map. */
  const char *full[] = {"P('i', 'j')"};
  shmap_array *y1 = NULL, *y2 = NULL, *y3 = NULL;
  shmap_map_opts all = {.manual_axes = "i, j"};
  tu_map_ok(shmap_map(m, body_double, NULL, 1, &x, full, 1, &y1, full), "map");
  tu_map_ok(shmap_map_ex(m, body_double, NULL, 1, &x, full, 1, &y2, full, NULL),
            "map_ex NULL");
  tu_map_ok(shmap_map_ex(m, body_double, NULL, 1, &x, full, 1, &y3, full, &all),
            "map_ex all");
  float *a1 = tu_array_to_host(y1, NULL), *a2 = tu_array_to_host(y2, NULL),
        *a3 = tu_array_to_host(y3, NULL);
  ck_assert_int_eq(memcmp(a1, a2, 24 * sizeof *a1), 0);
  ck_assert_int_eq(memcmp(a1, a3, 24 * sizeof *a1), 0);
  free(a1);
  free(a2);
  free(a3);
  shmap_array_destroy(y1);
  shmap_array_destroy(y2);
  shmap_array_destroy(y3);
  shmap_array_destroy(x);
  free(s);
  shmap_mesh_destroy(m);
}
END_TEST

/* An input split along a free axis is gathered for the body. */
START_TEST(partial_gathers_free_axis)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=2, j=3");
  int64_t shape[2] = {4, 6};
  float host[24];
  for (int e = 0; e < 24; e++)
    host[e] = (float)e;
  shmap_array *x = NULL, *y = NULL;
  ck_assert_int_eq(shmap_array_from_host_sharded(&x, m, "P(None, 'j')",
                                                 SHMAP_F32, 2, shape, host), 0);
  shmap_mesh_stats_reset(m);
  shmap_map_opts o = {.manual_axes = "('i',)"};
  const char *is[] = {"P('i')"}, *os[] = {"P('i')"};
  tu_map_ok(shmap_map_ex(m, body_double, NULL, 1, &x, is, 1, &y, os, &o),
            "gather");
  shmap_stats st;
  ck_assert_int_eq(shmap_mesh_stats(m, &st), 0);
  /* The body runs on the two devices at j=0: each builds a 2x6 block from
   * three 2x2 pieces, its own and two of its peers along j. */
  ck_assert_uint_eq(st.blocks_built, 2);
  ck_assert_uint_eq(st.bytes_local, 2 * 16);
  ck_assert_uint_eq(st.bytes_moved, 2 * 32);
  float *h = tu_array_to_host(y, NULL);
  for (int e = 0; e < 24; e++)
    ck_assert_float_eq(h[e], 2.0f * e);
  free(h);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* psum over the manual axis; the free axis holds copies. */
static int body_psum_i(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  return y ? shmap_psum(ctx, y, "i") : -1;
}

START_TEST(partial_collective)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[1] = {8};
  shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
  shmap_map_opts o = {.manual_axes = "i"};
  const char *is[] = {"P('i')"}, *os[] = {"P()"};
  tu_map_ok(shmap_map_ex(m, body_psum_i, NULL, 1, &x, is, 1, &y, os, &o),
            "psum");
  float *h = tu_array_to_host(y, NULL);
  ck_assert_float_eq(h[0], 0 + 2 + 4 + 6);
  ck_assert_float_eq(h[1], 1 + 3 + 5 + 7);
  free(h);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

static int body_call(shmap_ctx *ctx, void *arg)
{
  int what = *(int *)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return -1;
  switch (what) {
  case 0: return shmap_psum(ctx, y, "j");
  case 1: return shmap_axis_index(ctx, "('i', 'j')") < 0 ? -1 : 0;
  case 2: { /* differs along the manual axis i, which P() leaves out */
    float *p = y->data;
    p[0] += (float)shmap_axis_index(ctx, "i");
    return 0;
  }
  default: return 0;
  }
}

START_TEST(partial_errors)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  int64_t shape[1] = {4};
  shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
  shmap_map_opts o = {.manual_axes = "i"};
  const char *is[] = {"P('i')"}, *os[] = {"P('i')"}, *bad[] = {"P('j')"};
  int what = 0;
  /* Specs may name only manual axes. */
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, bad, 1, &y, os, &o),
             SHMAP_EAXIS, "in_specs[0]", "'j'", "manual axes: 'i'");
  ck_assert_ptr_null(y);
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, bad, &o),
             SHMAP_EAXIS, "out_specs[0]", "'j'", "manual axes: 'i'");
  /* So may collectives and axis queries. */
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, os, &o),
             SHMAP_EAXIS, "psum", "axis 'j'", "manual axes: 'i'");
  what = 1;
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, os, &o),
             SHMAP_EAXIS, "axis_index", "axis 'j'", "manual axes: 'i'");
  /* The replication check covers manual axes the out spec leaves out. */
  what = 2;
  const char *rep[] = {"P()"};
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, rep, &o),
             SHMAP_EREPLICATION, "axis 'i'", "device 0", "device 2");
  shmap_map_opts nc = {.manual_axes = "i", .flags = SHMAP_NO_CHECK_REP};
  tu_map_ok(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, rep, &nc),
            "unchecked");
  shmap_array_destroy(y);
  y = NULL;
  /* Bad options. */
  shmap_map_opts unk = {.manual_axes = "k"};
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, os, &unk),
             SHMAP_EAXIS, "manual_axes", "unknown axis 'k'", NULL);
  shmap_map_opts dup = {.manual_axes = "i, i"};
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, os, &dup),
             SHMAP_EAXIS, "manual_axes", "'i'", "more than once");
  shmap_map_opts syn = {.manual_axes = "(i"};
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, os, &syn),
             SHMAP_ESYNTAX, "manual_axes", NULL, NULL);
  shmap_map_opts fl = {.manual_axes = "i", .flags = 0x10};
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, os, &fl),
             SHMAP_EINVAL, "shmap_map_ex", "unknown flags 0x10", NULL);
  /* The room reserved for later options must be zero. */
  shmap_map_opts res = {.manual_axes = "i"};
  res.reserved[3] = 9;
  expect_err(shmap_map_ex(m, body_call, &what, 1, &x, is, 1, &y, os, &res),
             SHMAP_EINVAL, "shmap_map_ex: opts->reserved[3] is 9, not 0",
             "zero-initialise the options", NULL);
  ck_assert_ptr_null(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- nested maps --------------------------------------------------------- */

typedef struct nest_arg {
  int what;
  int64_t inner_shape[MAXDEV][2];
  int inner_index[MAXDEV];
  int outer_index[MAXDEV];
  char manual[MAXDEV][32];
} nest_arg;

/* Inner body: records its block and axes; output 0 is 3*x, output 1 is the
 * psum over model of its row sums, and (what 1) the psum over data through
 * the outer context. */
static int inner_body(shmap_ctx *ctx, void *arg)
{
  nest_arg *a = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return -1;
  a->inner_shape[dev][0] = x->shape[0];
  a->inner_shape[dev][1] = x->shape[1];
  a->inner_index[dev] = shmap_axis_index(ctx, "model");
  shmap_ctx_manual_axes(ctx, a->manual[dev], sizeof a->manual[dev]);
  shmap_ctx *outer = shmap_ctx_outer(ctx);
  if (!outer)
    return shmap_fail(ctx, "no outer context");
  a->outer_index[dev] = shmap_axis_index(outer, "data");
  shmap_block *y = shmap_out_copy(ctx, 0, x);
  if (!y)
    return -1;
  float *p = y->data;
  for (int64_t e = 0; e < shmap_block_numel(y); e++)
    p[e] *= 3;
  int64_t rs[1] = {x->shape[0]};
  shmap_block *r = shmap_out(ctx, 1, SHMAP_F32, 1, rs);
  if (!r)
    return -1;
  const float *xv = x->data;
  float *rv = r->data;
  for (int64_t i = 0; i < x->shape[0]; i++)
    for (int64_t j = 0; j < x->shape[1]; j++)
      rv[i] += xv[i * x->shape[1] + j];
  int rc = shmap_psum(ctx, r, "model");
  if (rc == 0 && a->what == 1)
    rc = shmap_psum(outer, r, "data");
  return rc;
}

static int outer_body(shmap_ctx *ctx, void *arg)
{
  nest_arg *a = arg;
  const shmap_block *x = shmap_in(ctx, 0);
  const char *is[] = {"P(None, 'model')"}, *os[] = {"P(None, 'model')", "P()"};
  shmap_block *out[2];
  shmap_map_opts o = {.manual_axes = "model"};
  int rc = shmap_map_nested(ctx, inner_body, a, 1, &x, is, 2, out, os, &o);
  if (rc)
    return rc;
  if (shmap_out_set(ctx, 0, out[0]) || shmap_out_set(ctx, 1, out[1]))
    return -1;
  return 0;
}

START_TEST(nested_basic)
{
  tu_set_sched(_i);
  for (int what = 0; what < 2; what++) {
    shmap_mesh *m = tu_mesh_new("data=2, model=2");
    int64_t shape[2] = {4, 4};
    shmap_array *x = tu_arange_f32(2, shape), *y[2] = {NULL, NULL};
    nest_arg *a = calloc(1, sizeof *a);
    a->what = what;
    shmap_map_opts o = {.manual_axes = "data"};
    const char *is[] = {"P('data')"};
    const char *os[] = {"P('data')", what ? "P()" : "P('data')"};
    tu_map_ok(shmap_map_ex(m, outer_body, a, 1, &x, is, 2, y, os, &o),
              "nested");
    for (int d = 0; d < 4; d++) {
      ck_assert_int_eq(a->inner_shape[d][0], 2);
      ck_assert_int_eq(a->inner_shape[d][1], 2);
      ck_assert_int_eq(a->inner_index[d], d % 2);
      ck_assert_int_eq(a->outer_index[d], d / 2);
      ck_assert_str_eq(a->manual[d], "'model'");
    }
    float *h = tu_array_to_host(y[0], NULL);
    for (int e = 0; e < 16; e++)
      ck_assert_float_eq(h[e], 3.0f * e);
    free(h);
    h = tu_array_to_host(y[1], NULL);
    float rows[4] = {6, 22, 38, 54};
    for (int r = 0; r < (what ? 2 : 4); r++)
      ck_assert_float_eq(h[r], what ? rows[r] + rows[r + 2] : rows[r]);
    free(h);
    shmap_array_destroy(y[0]);
    shmap_array_destroy(y[1]);
    shmap_array_destroy(x);
    free(a);
    shmap_mesh_destroy(m);
  }
}
END_TEST

/* Three levels on a=2, b=2, c=2: each level splits its block over one more
 * axis and the innermost reports every level's axis index. */
static int level3(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_ctx *o1 = shmap_ctx_outer(ctx), *o0 = shmap_ctx_outer(o1);
  int64_t s[1] = {4};
  shmap_block *y = shmap_out(ctx, 0, SHMAP_F32, 1, s);
  if (!y || !x)
    return -1;
  float *p = y->data;
  p[0] = ((const float *)x->data)[0];
  p[1] = (float)shmap_axis_index(o0, "a");
  p[2] = (float)shmap_axis_index(o1, "b");
  p[3] = (float)shmap_axis_index(ctx, "c");
  return shmap_ctx_outer(o0) == NULL ? 0 : -1;
}

static int level2(shmap_ctx *ctx, void *arg)
{
  const shmap_block *x = shmap_in(ctx, 0);
  const char *is[] = {"P('c')"}, *os[] = {"P('c')"};
  shmap_block *out;
  int rc = shmap_map_nested(ctx, level3, arg, 1, &x, is, 1, &out, os, NULL);
  return rc ? rc : shmap_out_set(ctx, 0, out);
}

static int level1(shmap_ctx *ctx, void *arg)
{
  const shmap_block *x = shmap_in(ctx, 0);
  const char *is[] = {"P('b')"}, *os[] = {"P('b')"};
  shmap_map_opts o = {.manual_axes = "b"};
  shmap_block *out;
  int rc = shmap_map_nested(ctx, level2, arg, 1, &x, is, 1, &out, os, &o);
  return rc ? rc : shmap_out_set(ctx, 0, out);
}

START_TEST(nested_three_levels)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("a=2, b=2, c=2");
  int64_t shape[1] = {8};
  shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
  shmap_map_opts o = {.manual_axes = "a"};
  const char *is[] = {"P('a')"}, *os[] = {"P('a')"};
  tu_map_ok(shmap_map_ex(m, level1, NULL, 1, &x, is, 1, &y, os, &o), "3 levels");
  float *h = tu_array_to_host(y, NULL);
  for (int d = 0; d < 8; d++) {
    ck_assert_float_eq(h[4 * d], (float)d);
    ck_assert_float_eq(h[4 * d + 1], (float)(d / 4));
    ck_assert_float_eq(h[4 * d + 2], (float)(d / 2 % 2));
    ck_assert_float_eq(h[4 * d + 3], (float)(d % 2));
  }
  free(h);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* Nested maps that go wrong, chosen by what. */
typedef struct bad_arg {
  int what;
} bad_arg;

static int bad_inner(shmap_ctx *ctx, void *arg)
{
  bad_arg *b = arg;
  int dev = shmap_ctx_device(ctx);
  int64_t s1[1] = {dev == 3 ? 2 : 1};
  shmap_block *y;
  switch (b->what) {
  case 3: /* collective over the outer axis on the inner context */
    y = shmap_out(ctx, 0, SHMAP_F32, 1, s1);
    return y ? shmap_psum(ctx, y, "data") : -1;
  case 4: /* shapes differ between devices */
    return shmap_out(ctx, 0, SHMAP_F32, 1, s1) ? 0 : -1;
  case 5: /* differs along model, which the out spec leaves out */
    y = shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1});
    if (!y)
      return -1;
    ((float *)y->data)[0] = (float)shmap_axis_index(ctx, "model");
    return 0;
  case 6: /* the body fails on one device */
    shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1});
    return dev == 2 ? 7 : 0;
  case 7: /* a plain map inside a body */
    shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1});
    return shmap_map((shmap_mesh *)shmap_ctx_mesh(ctx), bad_inner, arg, 0,
                     NULL, NULL, 0, NULL, NULL);
  case 8: /* nested again over an axis already manual */
    shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1});
    return shmap_map_nested(ctx, bad_inner, arg, 0, NULL, NULL, 0, NULL, NULL,
                            &(shmap_map_opts){.manual_axes = "model"});
  case 9: /* no free axis left */
    shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1});
    return shmap_map_nested(ctx, bad_inner, arg, 0, NULL, NULL, 0, NULL, NULL,
                            NULL);
  case 20: /* no output at all */
    return 0;
  case 13: /* a nested map started with the outer context */
    shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1});
    return shmap_map_nested(shmap_ctx_outer(ctx), bad_inner, arg, 0, NULL,
                            NULL, 0, NULL, NULL, NULL);
  default:
    return shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1}) ? 0 : -1;
  }
}

static int bad_outer(shmap_ctx *ctx, void *arg)
{
  bad_arg *b = arg;
  const shmap_block *x = shmap_in(ctx, 0);
  const char *is[] = {"P()"}, *os[] = {"P()"};
  shmap_map_opts o = {.manual_axes = "model"};
  shmap_block *out = NULL;
  int rc;
  switch (b->what) {
  case 0: /* reuse the outer manual axis */
    o.manual_axes = "data";
    break;
  case 1: /* inner spec names the outer axis */
    is[0] = "P('data')";
    break;
  case 2: /* unknown axis */
    o.manual_axes = "nope";
    break;
  case 10: /* the body instances make different nested calls */
    if (shmap_ctx_device(ctx) == 2)
      os[0] = "P('model')";
    break;
  case 11: /* bad arguments */
    rc = shmap_map_nested(ctx, NULL, b, 1, &x, is, 1, &out, os, &o);
    return rc;
  case 12:
    o.flags = 0x20;
    break;
  case 21: /* room reserved for later options, not zero */
    o.reserved[5] = 1;
    break;
  case 14: /* in spec longer than the block's rank */
    is[0] = "P(None, 'model')";
    break;
  case 15: /* not divisible: blocks of 2 over model=2 ... of 3 elements */
    is[0] = "P('model')";
    {
      shmap_block *odd = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){3});
      const shmap_block *in1[1] = {odd};
      return shmap_map_nested(ctx, bad_inner, b, 1, in1, is, 1, &out, os, &o);
    }
  case 16: /* NULL spec */
    is[0] = NULL;
    break;
  case 17: /* negative count */
    return shmap_map_nested(ctx, bad_inner, b, -1, &x, is, 1, &out, os, &o);
  case 18: /* outputs but no array for them */
    return shmap_map_nested(ctx, bad_inner, b, 1, &x, is, 1, NULL, os, &o);
  case 19: /* an invalid input block */
    {
      shmap_block bogus = {NULL, SHMAP_F32, 1, {4}};
      const shmap_block *in1[1] = {&bogus};
      return shmap_map_nested(ctx, bad_inner, b, 1, in1, is, 1, &out, os, &o);
    }
  case 20: /* no device declares the output */
    b->what = 20;
    break;
  }
  rc = shmap_map_nested(ctx, bad_inner, b, 1, &x, is, 1, &out, os, &o);
  if (rc)
    return rc;
  return shmap_out_set(ctx, 0, out);
}

START_TEST(nested_errors)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("data=2, model=2");
  int64_t shape[1] = {4};
  shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
  shmap_map_opts o = {.manual_axes = "data"};
  const char *is[] = {"P('data')"}, *os[] = {"P('data')"};
  bad_arg b;
  struct {
    int what, code;
    const char *n1, *n2, *n3;
  } cases[] = {
      {0, SHMAP_EAXIS, "shmap_map_nested", "axis 'data' is already manual",
       "free axes: 'model'"},
      {1, SHMAP_EAXIS, "in_specs[0]", "'data'", "manual axes: 'model'"},
      {2, SHMAP_EAXIS, "manual_axes", "unknown axis 'nope'", NULL},
      {3, SHMAP_EAXIS, "psum", "axis 'data'",
       "in a map nested over 'model' inside a map over 'data'"},
      {4, SHMAP_EMISMATCH, "output 0", "f32[2]", "f32[1]"},
      {5, SHMAP_EREPLICATION, "not replicated along 'model'", "model=0) and",
       "model=1) differ at block element [0]: 0 vs 1"},
      {6, SHMAP_EBODY, "device 2", "nested over 'model'", "body returned 7"},
      {7, SHMAP_ESTATE, "shmap_map", "shmap_map_nested", NULL},
      {8, SHMAP_EAXIS, "axis 'model' is already manual", NULL, NULL},
      {9, SHMAP_EAXIS, "no free axis is left", NULL, NULL},
      {10, SHMAP_EMISMATCH, "collective call #1 differs between devices",
       "device 0 (data=0, model=0) called shmap_map_nested(over 'model', 1 "
       "input, 1 output, specs #",
       "device 2 (data=1, model=0) called shmap_map_nested(over 'model', 1 "
       "input, 1 output, specs #"},
      {11, SHMAP_EINVAL, "shmap_map_nested", "body is NULL", NULL},
      {12, SHMAP_EINVAL, "shmap_map_nested", "unknown flags 0x20", NULL},
      {13, SHMAP_ESTATE, "shmap_map_nested", "outer map", NULL},
      {14, SHMAP_ESHAPE, "in_specs[0]", "length 2", "rank 1"},
      {15, SHMAP_ESHAPE, "in_specs[0]", "size 3", "divisible by 2"},
      {16, SHMAP_EINVAL, "shmap_map_nested", "in_specs[0] is NULL", NULL},
      {17, SHMAP_EINVAL, "shmap_map_nested", "negative count (nin=-1", NULL},
      {18, SHMAP_EINVAL, "shmap_map_nested", "is NULL", NULL},
      {19, SHMAP_EINVAL, "in_specs[0] block has no data", NULL, NULL},
      {20, SHMAP_EINVAL, "output 0 was not declared by any device", NULL,
       NULL},
      {21, SHMAP_EINVAL, "shmap_map_nested",
       "opts->reserved[5] is 1, not 0", "zero-initialise the options"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    b.what = cases[c].what;
    int rc = shmap_map_ex(m, bad_outer, &b, 1, &x, is, 1, &y, os, &o);
    ck_assert_msg(y == NULL, "case %d: output set", cases[c].what);
    if (rc != cases[c].code)
      ck_abort_msg("case %d: rc %d, want %d: %s", cases[c].what, rc,
                   cases[c].code, shmap_errmsg());
    expect_err(rc, cases[c].code, cases[c].n1, cases[c].n2, cases[c].n3);
  }
  /* The mesh still works after every failure. */
  b.what = 100;
  tu_map_ok(shmap_map_ex(m, bad_outer, &b, 1, &x, is, 1, &y, os, &o), "after");
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* Body instances of a map over 'a' (mesh a=2, b=2, c=2) whose nested maps
 * differ, chosen by what: the slices must fail with SHMAP_EMISMATCH naming
 * two devices and their nested calls, never meet in groups over 'a' that
 * a slice nested otherwise cannot fill. */
static int slices_inner(shmap_ctx *ctx, void *arg)
{
  const int *what = arg;
  float v = 1;
  shmap_block b = {&v, SHMAP_F32, 1, {1}};
  /* A collective over the outer axis from every inner body. */
  if (*what == 0)
    return shmap_psum(shmap_ctx_outer(ctx), &b, "a");
  /* Level 2 of case 4: only the inner instance at b=0 nests again. */
  if (*what == 4 && shmap_axis_index(ctx, "b") == 0)
    return shmap_map_nested(ctx, slices_inner, &(int){100}, 0, NULL, NULL, 0,
                            NULL, NULL,
                            &(shmap_map_opts){.manual_axes = "c"});
  return 0;
}

static int slices_outer(shmap_ctx *ctx, void *arg)
{
  const int *what = arg;
  int a = shmap_axis_index(ctx, "a");
  shmap_map_opts ob = {.manual_axes = "b"}, oc = {.manual_axes = "c"};
  float v = 1;
  shmap_block x = {&v, SHMAP_F32, 1, {1}};
  int rc;
  switch (*what) {
  case 0: /* slice a=0 nests over 'b', slice a=1 over 'c' */
    return shmap_map_nested(ctx, slices_inner, arg, 0, NULL, NULL, 0, NULL,
                            NULL, a == 0 ? &ob : &oc);
  case 1: /* slice a=1 does not nest and returns */
    return a == 0 ? shmap_map_nested(ctx, slices_inner, arg, 0, NULL, NULL, 0,
                                     NULL, NULL, &ob)
                  : 0;
  case 2: /* slice a=1 does not nest and calls a psum over 'a' */
    return a == 0 ? shmap_map_nested(ctx, slices_inner, arg, 0, NULL, NULL, 0,
                                     NULL, NULL, &ob)
                  : shmap_psum(ctx, &x, "a");
  case 3: /* slice a=0 nests twice, slice a=1 once */
    rc = shmap_map_nested(ctx, slices_inner, arg, 0, NULL, NULL, 0, NULL,
                          NULL, &ob);
    if (rc || a == 1)
      return rc;
    return shmap_map_nested(ctx, slices_inner, arg, 0, NULL, NULL, 0, NULL,
                            NULL, &ob);
  case 4: /* both nest over 'b'; inside, only the instances at b=0 nest */
    return shmap_map_nested(ctx, slices_inner, arg, 0, NULL, NULL, 0, NULL,
                            NULL, &ob);
  default: /* the same nested map everywhere, with a psum over 'a' inside */
    return shmap_map_nested(ctx, slices_inner, &(int){0}, 0, NULL, NULL, 0,
                            NULL, NULL, &ob);
  }
}

START_TEST(nested_slices_differ)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("a=2, b=2, c=2");
  shmap_map_opts o = {.manual_axes = "a"};
  struct {
    int what;
    const char *n1, *n2, *n3;
  } cases[] = {
      {0, "device 0 (a=0, b=0, c=0)", "shmap_map_nested(over 'b', 0 inputs",
       "device 4 (a=1, b=0, c=0) called shmap_map_nested(over 'c', 0 inputs"},
      {1, "device 0 (a=0, b=0, c=0) called shmap_map_nested(over 'b'",
       "as its collective call #1, but device 4 (a=1, b=0, c=0) returned "
       "from its body after 0 collective calls", NULL},
      {2, "shmap_map_nested(over 'b', 0 inputs, 0 outputs",
       "psum(f32[1] over 'a')", "device 4 (a=1, b=0, c=0)"},
      {3, "device 0 (a=0, b=0, c=0) called shmap_map_nested(over 'b'",
       "as its collective call #3, but device 4 (a=1, b=0, c=0) returned "
       "from its body after 2 collective calls", NULL},
      {4, "collective call #2 differs between devices",
       "called shmap_map_nested(over 'c', 0 inputs",
       "called shmap_map_nested(return from the body nested over 'b')"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int what = cases[c].what;
    int rc = shmap_map_ex(m, slices_outer, &what, 0, NULL, NULL, 0, NULL,
                          NULL, &o);
    if (rc != SHMAP_EMISMATCH)
      ck_abort_msg("case %d: rc %d, want %d: %s", what, rc, SHMAP_EMISMATCH,
                   rc ? shmap_errmsg() : "");
    expect_err(rc, SHMAP_EMISMATCH, cases[c].n1, cases[c].n2, cases[c].n3);
    /* The mesh still works, psums over 'a' from the inner bodies too. */
    int ok = 100;
    tu_map_ok(shmap_map_ex(m, slices_outer, &ok, 0, NULL, NULL, 0, NULL, NULL,
                           &o),
              "after");
  }
  shmap_mesh_destroy(m);
}
END_TEST

/* Context queries: bad arguments, and a context kept past its body. */
static shmap_ctx *kept;
static int ctx_query_body(shmap_ctx *ctx, void *arg)
{
  int *res = arg;
  int dev = shmap_ctx_device(ctx);
  char buf[4];
  /* Truncated like snprintf: the full length comes back. */
  if (dev == 0) {
    kept = ctx;
    res[0] = shmap_ctx_manual_axes(ctx, buf, sizeof buf);
    res[1] = strcmp(buf, "('i") == 0;
    res[2] = shmap_ctx_outer(ctx) == NULL;
    res[3] = shmap_ctx_manual_axes(ctx, NULL, 0);
  }
  return 0;
}

START_TEST(ctx_queries)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  int res[4] = {0};
  tu_map_ok(shmap_map(m, ctx_query_body, res, 0, NULL, NULL, 0, NULL, NULL),
            "queries");
  ck_assert_int_eq(res[0], (int)strlen("('i', 'j')"));
  ck_assert_int_eq(res[1], 1);
  ck_assert_int_eq(res[2], 1);
  ck_assert_int_eq(res[3], (int)strlen("('i', 'j')"));
  expect_err(shmap_ctx_manual_axes(NULL, NULL, 0), SHMAP_EINVAL,
             "shmap_ctx_manual_axes: ctx is NULL", NULL, NULL);
  ck_assert_ptr_null(shmap_ctx_outer(NULL));
  expect_err(SHMAP_EINVAL, SHMAP_EINVAL, "shmap_ctx_outer: ctx is NULL", NULL,
             NULL);
  expect_err(shmap_ctx_manual_axes(kept, NULL, 0), SHMAP_ESTATE,
             "shmap_ctx_manual_axes", "not the context of a body", NULL);
  ck_assert_ptr_null(shmap_ctx_outer(kept));
  expect_err(SHMAP_ESTATE, SHMAP_ESTATE, "shmap_ctx_outer",
             "not the context of a body", NULL);
  expect_err(shmap_map_nested(kept, ctx_query_body, res, 0, NULL, NULL, 0,
                              NULL, NULL, NULL),
             SHMAP_ESTATE, "shmap_map_nested", "not the context of a body",
             NULL);
  shmap_mesh_destroy(m);
}
END_TEST

typedef struct bad_buf {
  int rc[4];
  char msg[4][256];
} bad_buf;

static int bad_buf_body(shmap_ctx *ctx, void *arg)
{
  bad_buf *b = arg;
  int dev = shmap_ctx_device(ctx);
  b->rc[dev] = shmap_ctx_manual_axes(ctx, NULL, 8);
  snprintf(b->msg[dev], sizeof b->msg[dev], "%s", shmap_errmsg());
  return 0;
}

START_TEST(ctx_query_bad_buf)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=2");
  bad_buf b;
  tu_map_ok(shmap_map(m, bad_buf_body, &b, 0, NULL, NULL, 0, NULL, NULL),
            "bad buf");
  for (int d = 0; d < 2; d++) {
    ck_assert_int_eq(b.rc[d], SHMAP_EINVAL);
    ck_assert_str_eq(b.msg[d], "shmap_ctx_manual_axes: buf is NULL");
  }
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- sub-meshes ---------------------------------------------------------- */

START_TEST(slices)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("stage=2, data=2, model=2");
  shmap_mesh *s1 = NULL, *s2 = NULL;
  ck_assert_int_eq(shmap_mesh_slice(&s1, m, "stage=1"), 0);
  ck_assert_int_eq(shmap_mesh_ndevices(s1), 4);
  ck_assert_int_eq(shmap_mesh_naxes(s1), 2);
  ck_assert_str_eq(shmap_mesh_axis_name(s1, 0), "data");
  ck_assert_ptr_eq(shmap_mesh_parent(s1), m);
  ck_assert_ptr_null(shmap_mesh_parent(m));
  for (int d = 0; d < 4; d++)
    ck_assert_int_eq(shmap_mesh_parent_device(s1, d), 4 + d);
  ck_assert_int_eq(shmap_mesh_parent_device(m, 5), 5);
  /* A slice of a slice, fixing a middle axis. */
  ck_assert_int_eq(shmap_mesh_slice(&s2, s1, "data=1"), 0);
  ck_assert_int_eq(shmap_mesh_ndevices(s2), 2);
  ck_assert_int_eq(shmap_mesh_parent_device(s2, 0), 2);
  ck_assert_int_eq(shmap_mesh_parent_device(s2, 1), 3);
  shmap_mesh *s3 = NULL;
  ck_assert_int_eq(shmap_mesh_slice(&s3, m, "model=1, stage=0"), 0);
  ck_assert_int_eq(shmap_mesh_ndevices(s3), 2);
  ck_assert_int_eq(shmap_mesh_parent_device(s3, 0), 1);
  ck_assert_int_eq(shmap_mesh_parent_device(s3, 1), 3);
  /* Maps run on a slice. */
  int64_t shape[1] = {4};
  shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
  const char *is[] = {"P('data')"};
  shmap_map_opts o = {.manual_axes = "data"};
  tu_map_ok(shmap_map_ex(s1, body_double, NULL, 1, &x, is, 1, &y, is, &o),
            "slice map");
  ck_assert_ptr_eq(shmap_array_mesh(y), s1);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  /* The parent outlives its handle while slices use it. */
  shmap_mesh_destroy(m);
  shmap_mesh_destroy(s3);
  shmap_mesh_destroy(s1);
  ck_assert_int_eq(shmap_mesh_ndevices(s2), 2);
  shmap_mesh_destroy(s2);
}
END_TEST

START_TEST(submesh_over_devices)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=8");
  shmap_mesh *s = NULL;
  int devs[6] = {7, 1, 2, 5, 4, 0};
  ck_assert_int_eq(shmap_mesh_submesh(&s, m, "a=2, b=3", devs), 0);
  ck_assert_int_eq(shmap_mesh_ndevices(s), 6);
  for (int d = 0; d < 6; d++)
    ck_assert_int_eq(shmap_mesh_parent_device(s, d), devs[d]);
  shmap_mesh_destroy(s);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(submesh_errors)
{
  shmap_mesh *m = tu_mesh_new("stage=2, data=2");
  shmap_mesh *s = (shmap_mesh *)1;
  expect_err(shmap_mesh_slice(&s, m, "pipe=0"), SHMAP_EAXIS,
             "shmap_mesh_slice", "unknown axis 'pipe'",
             "mesh axes: 'stage', 'data'");
  ck_assert_ptr_null(s);
  expect_err(shmap_mesh_slice(&s, m, "stage=2"), SHMAP_EINVAL,
             "coordinate 2 on axis 'stage'", "[0, 2)", NULL);
  expect_err(shmap_mesh_slice(&s, m, "stage=-1"), SHMAP_EINVAL,
             "coordinate -1", NULL, NULL);
  expect_err(shmap_mesh_slice(&s, m, "stage=0, stage=1"), SHMAP_EAXIS,
             "axis 'stage' is fixed twice", NULL, NULL);
  expect_err(shmap_mesh_slice(&s, m, "stage=0, data=1"), SHMAP_EINVAL,
             "fixes every axis", NULL, NULL);
  expect_err(shmap_mesh_slice(&s, m, "stage"), SHMAP_ESYNTAX,
             "shmap_mesh_slice", "expected '='", NULL);
  expect_err(shmap_mesh_slice(NULL, m, "stage=0"), SHMAP_EINVAL,
             "shmap_mesh_slice: NULL argument", NULL, NULL);
  int devs[4] = {0, 1, 1, 3};
  expect_err(shmap_mesh_submesh(&s, m, "x=4", devs), SHMAP_EINVAL,
             "device 1 of the parent is listed twice", "devices[2]", NULL);
  int far[2] = {0, 4};
  expect_err(shmap_mesh_submesh(&s, m, "x=2", far), SHMAP_EINVAL,
             "devices[1] = 4", "[0, 4)", NULL);
  int many[8] = {0, 1, 2, 3, 0, 1, 2, 3};
  expect_err(shmap_mesh_submesh(&s, m, "x=8", many), SHMAP_EINVAL,
             "more devices than its parent (4)", NULL, NULL);
  expect_err(shmap_mesh_submesh(&s, m, "x=0", many), SHMAP_EINVAL,
             "axis 'x' has size 0", NULL, NULL);
  expect_err(shmap_mesh_submesh(&s, m, "x=", many), SHMAP_ESYNTAX,
             "shmap_mesh_submesh", NULL, NULL);
  expect_err(shmap_mesh_submesh(&s, m, "x=2", NULL), SHMAP_EINVAL,
             "shmap_mesh_submesh: NULL argument", NULL, NULL);
  ck_assert_ptr_null(shmap_mesh_parent(NULL));
  expect_err(shmap_mesh_parent_device(NULL, 0), SHMAP_EINVAL,
             "mesh is NULL", NULL, NULL);
  expect_err(shmap_mesh_parent_device(m, 4), SHMAP_EINVAL,
             "device 4 is out of range [0, 4)", NULL, NULL);
  shmap_mesh_destroy(m);
}
END_TEST

/* Two slices run maps with collectives at the same time from two threads. */
typedef struct slice_job {
  shmap_mesh *mesh;
  int rounds, ok;
} slice_job;

static void *slice_thread(void *p)
{
  slice_job *j = p;
  int64_t shape[1] = {8};
  shmap_array *x = tu_arange_f32(1, shape);
  j->ok = 1;
  for (int r = 0; r < j->rounds && j->ok; r++) {
    shmap_array *y = NULL;
    const char *is[] = {"P('i')"}, *os[] = {"P()"};
    if (shmap_map(j->mesh, body_psum_i, NULL, 1, &x, is, 1, &y, os)) {
      j->ok = 0;
      break;
    }
    float h[2];
    shmap_array_to_host(y, h);
    j->ok = h[0] == 0 + 2 + 4 + 6 && h[1] == 1 + 3 + 5 + 7;
    shmap_array_destroy(y);
  }
  shmap_array_destroy(x);
  return NULL;
}

START_TEST(slices_concurrently)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("s=2, i=4");
  slice_job j[2];
  pthread_t t[2];
  for (int k = 0; k < 2; k++) {
    char text[16];
    snprintf(text, sizeof text, "s=%d", k);
    j[k].mesh = NULL;
    ck_assert_int_eq(shmap_mesh_slice(&j[k].mesh, m, text), 0);
    j[k].rounds = 50;
    ck_assert_int_eq(pthread_create(&t[k], NULL, slice_thread, &j[k]), 0);
  }
  for (int k = 0; k < 2; k++) {
    pthread_join(t[k], NULL);
    ck_assert_msg(j[k].ok, "slice %d failed: %s", k, shmap_errmsg());
    shmap_mesh_destroy(j[k].mesh);
  }
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- transfers ------------------------------------------------------------- */

START_TEST(transfer_between_slices)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("stage=2, data=2, model=2");
  shmap_mesh *s0 = NULL, *s1 = NULL;
  ck_assert_int_eq(shmap_mesh_slice(&s0, m, "stage=0"), 0);
  ck_assert_int_eq(shmap_mesh_slice(&s1, m, "stage=1"), 0);
  int64_t shape[2] = {4, 6};
  float host[24];
  for (int e = 0; e < 24; e++)
    host[e] = (float)e * 0.5f;
  shmap_array *a = NULL, *b = NULL;
  ck_assert_int_eq(shmap_array_from_host_sharded(&a, s0, "P('data', None)",
                                                 SHMAP_F32, 2, shape, host), 0);
  shmap_mesh_stats_reset(s1);
  ck_assert_int_eq(shmap_array_transfer(&b, a, s1, "P(None, 'model')"), 0);
  ck_assert_ptr_eq(shmap_array_mesh(b), s1);
  char spec[64];
  shmap_array_spec(b, spec, sizeof spec);
  ck_assert_str_eq(spec, "P(None, 'model')");
  float out[24];
  ck_assert_int_eq(shmap_array_to_host(b, out), 0);
  ck_assert_int_eq(memcmp(out, host, sizeof host), 0);
  shmap_stats st;
  shmap_mesh_stats(s1, &st);
  /* Four devices each build a 4x3 block from two 2x3 pieces. */
  ck_assert_uint_eq(st.bytes_transferred, 4 * 48);
  ck_assert_uint_eq(st.blocks_built, 4);
  ck_assert_uint_eq(st.bytes_moved, 0);
  ck_assert_uint_eq(st.bytes_host, 0);
  shmap_array_destroy(b);
  b = NULL;
  /* To a mesh of another shape and size: a 3-device mesh over the
   * parent's devices, and back to the parent. */
  shmap_mesh *t = NULL, *u = tu_mesh_new("q=3, r=2");
  int devs[3] = {6, 0, 3};
  ck_assert_int_eq(shmap_mesh_submesh(&t, m, "k=3", devs), 0);
  shmap_array *c = NULL, *d = NULL, *e = NULL;
  ck_assert_int_eq(shmap_array_transfer(&c, a, t, "P(None, 'k')"), 0);
  ck_assert_int_eq(shmap_array_transfer(&d, c, m, "P('stage', 'data')"), 0);
  ck_assert_int_eq(shmap_array_transfer(&e, d, u, "P('r', 'q')"), 0);
  shmap_array *arrs[3] = {c, d, e};
  for (int k = 0; k < 3; k++) {
    memset(out, 0, sizeof out);
    ck_assert_int_eq(shmap_array_to_host(arrs[k], out), 0);
    ck_assert_int_eq(memcmp(out, host, sizeof host), 0);
    shmap_array_destroy(arrs[k]);
  }
  /* The same mesh: a reshard. */
  ck_assert_int_eq(shmap_array_transfer(&b, a, s0, "P(None, 'model')"), 0);
  ck_assert_int_eq(shmap_array_to_host(b, out), 0);
  ck_assert_int_eq(memcmp(out, host, sizeof host), 0);
  shmap_array_destroy(b);
  /* Errors. */
  shmap_array *hx = tu_array_from_host(SHMAP_F32, 2, shape, host);
  b = (shmap_array *)1;
  expect_err(shmap_array_transfer(&b, hx, s1, "P()"), SHMAP_EINVAL,
             "shmap_array_transfer", "host array", NULL);
  ck_assert_ptr_null(b);
  expect_err(shmap_array_transfer(&b, a, s1, "P('stage')"), SHMAP_EAXIS,
             "shmap_array_transfer", "unknown axis 'stage'", NULL);
  expect_err(shmap_array_transfer(&b, a, t, "P('k')"), SHMAP_ESHAPE,
             "shmap_array_transfer", "size 4", "divisible by 3");
  expect_err(shmap_array_transfer(&b, a, NULL, "P()"), SHMAP_EINVAL,
             "shmap_array_transfer: NULL argument", NULL, NULL);
  expect_err(shmap_array_transfer(&b, a, s1, "P(("), SHMAP_ESYNTAX,
             "shmap_array_transfer", NULL, NULL);
  /* A map does not take an array of another mesh. */
  const char *is[] = {"P()"};
  shmap_array *y = NULL;
  expect_err(shmap_map(s1, body_double, NULL, 1, &a, is, 1, &y, is),
             SHMAP_EINVAL, "another mesh", "shmap_array_transfer", NULL);
  shmap_array_destroy(hx);
  shmap_array_destroy(a);
  shmap_mesh_destroy(t);
  shmap_mesh_destroy(u);
  shmap_mesh_destroy(s0);
  shmap_mesh_destroy(s1);
  shmap_mesh_destroy(m);
}
END_TEST


/* ---- watchdog and trace see nesting ---------------------------------------- */

static int slow_inner(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  if (shmap_ctx_device(ctx) == 2)
    tu_sleep_ms(700);
  double v = 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  return shmap_psum(ctx, &b, "model");
}

static int slow_outer(shmap_ctx *ctx, void *arg)
{
  /* After a psum over data, device 0 is slow while its replica, device 1,
   * waits.  Device 2 comes to the psum late, so that device 0 waits there
   * and, in fiber mode, its worker starts device 1 before device 0's body
   * holds it (a psum that completes at once would not yield). */
  double v = 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  if (shmap_ctx_device(ctx) == 2)
    tu_sleep_ms(100);
  int rc = shmap_psum(ctx, &b, "data");
  if (rc)
    return rc;
  if (shmap_ctx_device(ctx) == 0)
    tu_sleep_ms(700);
  shmap_map_opts o = {.manual_axes = "model"};
  return shmap_map_nested(ctx, slow_inner, arg, 0, NULL, NULL, 0, NULL, NULL,
                          &o);
}

START_TEST(watchdog_shows_nesting)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("data=2, model=2");
  char path[64];
  snprintf(path, sizeof path, "/tmp/shmap-meshparts-XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  ck_assert_int_eq(dup2(fd, 2), 2);
  close(fd);
  ck_assert_int_eq(shmap_set_watchdog(0.2), 0);
  shmap_map_opts o = {.manual_axes = "data"};
  int rc = shmap_map_ex(m, slow_outer, NULL, 0, NULL, NULL, 0, NULL, NULL, &o);
  shmap_set_watchdog(0);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char *text = tu_slurp(path, NULL);
  unlink(path);
  tu_map_ok(rc, "slow nested map");
  ck_assert_ptr_nonnull(text);
  /* Device 3 waits in the nested map: in its psum, or (in fiber mode,
   * when device 2's sleep holds the worker that would resume it) in the
   * nested map's own exchange before the body. */
  ck_assert_msg(t_has(text, "device 3 (data=1, model=1) [map over 'data' > "
                            "nested over 'model']: waiting in ") &&
                    (t_has(text, "waiting in psum over 'model'") ||
                     t_has(text, "waiting in all_gather over 'model'")),
                "watchdog output: %s", text);
  ck_assert_msg(t_has(text, "device 2 (data=1, model=0) [map over 'data' > "
                            "nested over 'model']: running its body"),
                "watchdog output: %s", text);
  ck_assert_msg(t_has(text, "device 0 (data=0, model=0) [map over 'data']: "
                            "running its body"),
                "watchdog output: %s", text);
  ck_assert_msg(t_has(text, "device 1 (data=0, model=1) [map over 'data']: "
                            "replica of device 0 (data=0, model=0), waiting "
                            "for its body"),
                "watchdog output: %s", text);
  free(text);
  shmap_mesh_destroy(m);
}
END_TEST

static int quick_inner(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  double v = 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  return shmap_psum(ctx, &b, "model");
}

static int quick_outer(shmap_ctx *ctx, void *arg)
{
  return shmap_map_nested(ctx, quick_inner, arg, 0, NULL, NULL, 0, NULL, NULL,
                          NULL);
}

START_TEST(trace_shows_nesting)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("data=2, model=2");
  char path[64];
  snprintf(path, sizeof path, "/tmp/shmap-meshparts-%d.json", (int)getpid());
  ck_assert_int_eq(shmap_trace_start(path), 0);
  shmap_map_opts o = {.manual_axes = "data"};
  tu_map_ok(shmap_map_ex(m, quick_outer, NULL, 0, NULL, NULL, 0, NULL, NULL,
                         &o), "traced");
  ck_assert_int_eq(shmap_trace_stop(), 0);
  char *text = tu_slurp(path, NULL);
  unlink(path);
  ck_assert_ptr_nonnull(text);
  /* The body on the two devices at model=0; on every device the nested
   * body over 'model' and the psum. */
  ck_assert_msg(t_count(text, "\"name\":\"nested body\"") == 4, "%s", text);
  ck_assert_msg(t_count(text, "\"axes\":\"'model'\",\"collectives\"") == 4,
                "%s", text);
  ck_assert_msg(t_count(text, "\"name\":\"body\"") == 2, "%s", text);
  free(text);
  shmap_mesh_destroy(m);
}
END_TEST

/* A transfer runs a map, so a body cannot start one. */
typedef struct xfer_arg {
  shmap_array *a;
  shmap_mesh *to;
} xfer_arg;

static int transfer_body(shmap_ctx *ctx, void *arg)
{
  xfer_arg *x = arg;
  shmap_array *b = NULL;
  if (shmap_ctx_device(ctx) != 0)
    return 0;
  return shmap_array_transfer(&b, x->a, x->to, "P()");
}

START_TEST(transfer_in_body)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("s=2, i=2"), *s0 = NULL, *s1 = NULL;
  ck_assert_int_eq(shmap_mesh_slice(&s0, m, "s=0"), 0);
  ck_assert_int_eq(shmap_mesh_slice(&s1, m, "s=1"), 0);
  int64_t shape[1] = {4};
  xfer_arg x = {NULL, s1};
  ck_assert_int_eq(shmap_array_zeros(&x.a, s0, "P('i')", SHMAP_F32, 1, shape),
                   0);
  expect_err(shmap_map(s0, transfer_body, &x, 0, NULL, NULL, 0, NULL, NULL),
             SHMAP_ESTATE, "shmap_array_transfer on device 0", "inside a body", NULL);
  shmap_array_destroy(x.a);
  shmap_mesh_destroy(s0);
  shmap_mesh_destroy(s1);
  shmap_mesh_destroy(m);
}
END_TEST

static Suite *meshparts_suite(void)
{
  Suite *s = suite_create("meshparts");
  TCase *tc = tcase_create("partial");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, partial_blocks_and_layout, 0, 2);
  tcase_add_loop_test(tc, partial_gathers_free_axis, 0, 2);
  tcase_add_loop_test(tc, partial_collective, 0, 2);
  tcase_add_loop_test(tc, partial_errors, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("nested");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, nested_basic, 0, 2);
  tcase_add_loop_test(tc, nested_three_levels, 0, 2);
  tcase_add_loop_test(tc, nested_errors, 0, 2);
  tcase_add_loop_test(tc, nested_slices_differ, 0, 2);
  tcase_add_loop_test(tc, ctx_queries, 0, 2);
  tcase_add_loop_test(tc, ctx_query_bad_buf, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("submesh");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, slices, 0, 2);
  tcase_add_loop_test(tc, submesh_over_devices, 0, 2);
  tcase_add_test(tc, submesh_errors);
  tcase_add_loop_test(tc, slices_concurrently, 0, 2);
  tcase_add_loop_test(tc, transfer_between_slices, 0, 2);
  tcase_add_loop_test(tc, transfer_in_body, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("debug");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, watchdog_shows_nesting, 0, 2);
  tcase_add_loop_test(tc, trace_shows_nesting, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(meshparts_suite()); }
