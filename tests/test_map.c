/* SPDX-License-Identifier: MIT */
/*
 * test_map.c - the eager map (SEMANTICS.md §3-§5) without collectives:
 * the seed examples, dtypes, host import/export, private inputs, and every
 * error a map reports, with its code and message.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shmap.h>

#include "refmodel.h"
#include "testutil.h"

#define TIMEOUT 60
#define MAXDEV 64

static void expect_shape(const shmap_array *a, shmap_dtype dt, int rank,
                         const int64_t *shape) {
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(shmap_array_dtype(a), dt);
  ck_assert_int_eq(shmap_array_rank(a), rank);
  for (int d = 0; d < rank; d++)
    ck_assert_msg(shmap_array_shape(a)[d] == shape[d],
                  "dim %d: %lld, want %lld", d,
                  (long long)shmap_array_shape(a)[d], (long long)shape[d]);
  ck_assert_int_eq(shmap_array_numel(a), ref_numel(rank, shape));
}

static int coords_of(shmap_ctx *ctx, int c[]) {
  return shmap_mesh_device_coords(shmap_ctx_mesh(ctx), shmap_ctx_device(ctx),
                                  c);
}

/* ---- bodies --------------------------------------------------------------- */

typedef struct targ {
  int mode;
  int bad_dev;
  atomic_int calls[MAXDEV];
  atomic_int arrived;
  const void *mesh_seen[MAXDEV];
  int64_t seen_shape[MAXDEV][SHMAP_MAX_RANK];
  int seen_rank[MAXDEV];
  shmap_dtype seen_dtype[MAXDEV];
} targ;

static targ *targ_new(void) {
  targ *t = calloc(1, sizeof *t);
  ck_assert_ptr_nonnull(t);
  return t;
}

/* Copies input 0 to output 0 and records what it saw. */
static int body_identity(shmap_ctx *ctx, void *arg) {
  targ *t = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *in = shmap_in(ctx, 0);
  if (in == NULL)
    return shmap_fail(ctx, "no input 0");
  if (t != NULL && dev >= 0 && dev < MAXDEV) {
    atomic_fetch_add(&t->calls[dev], 1);
    t->mesh_seen[dev] = shmap_ctx_mesh(ctx);
    t->seen_rank[dev] = in->rank;
    t->seen_dtype[dev] = in->dtype;
    for (int d = 0; d < in->rank; d++)
      t->seen_shape[dev][d] = in->shape[d];
  }
  return shmap_out_copy(ctx, 0, in) != NULL ? 0 : shmap_fail(ctx, "out_copy");
}

/* Run an identity map and check the output equals the input (used to show
 * a mesh still works after a failed map). */
static void check_mesh_usable(shmap_mesh *m) {
  int64_t shape[1];
  shmap_array *x, *y = NULL;
  const char *is[] = {"P()"}, *os[] = {"P()"};
  float *h;
  int rc;
  shape[0] = 5;
  x = tu_arange_f32(1, shape);
  rc = shmap_map(m, body_identity, NULL, 1, &x, is, 1, &y, os);
  ck_assert_msg(rc == 0, "mesh unusable after a failure: %d %s", rc,
                shmap_errmsg());
  expect_shape(y, SHMAP_F32, 1, shape);
  h = tu_array_to_host(y, NULL);
  for (int e = 0; e < 5; e++)
    ck_assert(h[e] == (float)e);
  free(h);
  shmap_array_destroy(x);
  shmap_array_destroy(y);
}

/* ---- seed examples -------------------------------------------------------- */

START_TEST(seed_tile) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[2] = {12, 12}, oshape[2] = {12, 24};
  shmap_array *x = tu_arange_f32(2, shape), *y = NULL;
  const char *is[] = {"P('i', None)"}, *os[] = {"P('i', 'j')"};
  targ *t = targ_new();
  float *h;
  int rc = shmap_map(m, body_identity, t, 1, &x, is, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  expect_shape(y, SHMAP_F32, 2, oshape);
  h = tu_array_to_host(y, NULL);
  /* tile(x, (1, 2)) */
  for (int r = 0; r < 12; r++)
    for (int c = 0; c < 24; c++)
      ck_assert_msg(h[r * 24 + c] == (float)(r * 12 + c % 12),
                    "y[%d][%d] = %g, want %d", r, c, h[r * 24 + c],
                    r * 12 + c % 12);
  for (int dev = 0; dev < 8; dev++) {
    ck_assert_int_eq(atomic_load(&t->calls[dev]), 1);
    ck_assert_int_eq(t->seen_rank[dev], 2);
    ck_assert_int_eq(t->seen_shape[dev][0], 3);
    ck_assert_int_eq(t->seen_shape[dev][1], 12);
    ck_assert_int_eq(t->seen_dtype[dev], SHMAP_F32);
    ck_assert_ptr_eq(t->mesh_seen[dev], m);
  }
  for (int dev = 8; dev < MAXDEV; dev++)
    ck_assert_int_eq(atomic_load(&t->calls[dev]), 0);
  free(h);
  free(t);
  shmap_array_destroy(x);
  shmap_array_destroy(y);
  shmap_mesh_destroy(m);
}
END_TEST

/* Output: one i32 element, c(i)*size(j) + c(j) (mode 0) or the device
 * number (mode 1). */
static int body_coord_value(shmap_ctx *ctx, void *arg) {
  int c[SHMAP_MAX_AXES];
  int64_t one[1] = {1};
  shmap_block *o;
  const shmap_mesh *m = shmap_ctx_mesh(ctx);
  (void)arg;
  if (coords_of(ctx, c) != 0)
    return shmap_fail(ctx, "device_coords failed");
  o = shmap_out(ctx, 0, SHMAP_I32, 1, one);
  if (o == NULL)
    return shmap_fail(ctx, "shmap_out failed");
  ((int32_t *)o->data)[0] = c[0] * shmap_mesh_axis_size(m, 1) + c[1];
  return 0;
}

START_TEST(seed_block_transpose) {
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  shmap_array *y = NULL;
  const char *os[] = {"P(('j','i'))"};
  int64_t four[1] = {4};
  int32_t *h;
  int rc = shmap_map(m, body_coord_value, NULL, 0, NULL, NULL, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  expect_shape(y, SHMAP_I32, 1, four);
  h = tu_array_to_host(y, NULL);
  ck_assert_int_eq(h[0], 0);
  ck_assert_int_eq(h[1], 2);
  ck_assert_int_eq(h[2], 1);
  ck_assert_int_eq(h[3], 3);
  free(h);
  shmap_array_destroy(y);

  os[0] = "P(('i','j'))";
  y = NULL;
  ck_assert_int_eq(shmap_map(m, body_coord_value, NULL, 0, NULL, NULL, 1, &y,
                             os),
                   0);
  h = tu_array_to_host(y, NULL);
  for (int e = 0; e < 4; e++)
    ck_assert_int_eq(h[e], e);
  free(h);
  shmap_array_destroy(y);

  /* out P('j') untiles i, along which the values differ */
  os[0] = "j";
  y = NULL;
  ck_assert_int_eq(
      shmap_map(m, body_coord_value, NULL, 0, NULL, NULL, 1, &y, os),
      SHMAP_EREPLICATION);
  ck_assert_ptr_null(y);
  shmap_mesh_destroy(m);
}
END_TEST

/* The block-transpose example with shmap_axis_index: each device outputs
 * axis_index("('i','j')"); mode 1 also checks other groups and sizes. */
static int body_axis_index(shmap_ctx *ctx, void *arg) {
  int c[SHMAP_MAX_AXES];
  int64_t one[1] = {1};
  shmap_block *o;
  int idx = shmap_axis_index(ctx, "('i','j')");
  (void)arg;
  if (idx < 0)
    return idx;
  if (coords_of(ctx, c) != 0)
    return shmap_fail(ctx, "coords");
  if (shmap_axis_size(ctx, "('i','j')") != 4 ||
      shmap_axis_size(ctx, "i") != 2 || shmap_axis_size(ctx, "") != 1 ||
      shmap_axis_index(ctx, "i") != c[0] || shmap_axis_index(ctx, "j") != c[1] ||
      shmap_axis_index(ctx, "(j, i)") != c[1] * 2 + c[0] ||
      shmap_axis_index(ctx, "()") != 0 || idx != c[0] * 2 + c[1])
    return shmap_fail(ctx, "axis_index/axis_size disagree with coords");
  o = shmap_out(ctx, 0, SHMAP_I32, 1, one);
  if (o == NULL)
    return shmap_fail(ctx, "shmap_out");
  ((int32_t *)o->data)[0] = idx;
  return 0;
}

START_TEST(seed_block_transpose_axis_index) {
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  shmap_array *y = NULL;
  const char *os[] = {"P(('j','i'))"};
  int32_t *h;
  int rc = shmap_map(m, body_axis_index, NULL, 0, NULL, NULL, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  h = tu_array_to_host(y, NULL);
  ck_assert_int_eq(h[0], 0);
  ck_assert_int_eq(h[1], 2);
  ck_assert_int_eq(h[2], 1);
  ck_assert_int_eq(h[3], 3);
  free(h);
  shmap_array_destroy(y);
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- dtypes and host arrays --------------------------------------------- */

static void fill_values(shmap_dtype dt, int64_t n, void *p) {
  for (int64_t e = 0; e < n; e++)
    switch (dt) {
    case SHMAP_F32:
      ((float *)p)[e] = e == 1 ? -0.0f : e == 2 ? 1e-40f : (float)e * 0.5f - 3;
      break;
    case SHMAP_F64:
      ((double *)p)[e] = e == 1 ? -0.0 : e == 2 ? 1e300 : (double)e / 3.0;
      break;
    case SHMAP_I32:
      ((int32_t *)p)[e] = e == 1 ? INT32_MIN : (int32_t)(e * 1000003 - 7);
      break;
    case SHMAP_I64:
      ((int64_t *)p)[e] = e == 1 ? INT64_MIN
                                 : ((int64_t)1 << 53) + 1 + e * 0x100000001LL;
      break;
    default: {
      /* Any bit pattern must survive the trip (NaNs, bool bytes > 1). */
      size_t es = shmap_dtype_size(dt);
      for (size_t b = 0; b < es; b++)
        ((unsigned char *)p)[(size_t)e * es + b] =
            (unsigned char)(e * 31 + (int64_t)b * 7 + 1);
      break;
    }
    }
}

START_TEST(dtype_roundtrip) {
  static const shmap_dtype dts[] = {
      SHMAP_F32, SHMAP_F64, SHMAP_I32, SHMAP_I64, SHMAP_BF16,
      SHMAP_F16, SHMAP_I8,  SHMAP_U8,  SHMAP_I16, SHMAP_U16,
      SHMAP_U32, SHMAP_U64, SHMAP_BOOL, SHMAP_C64, SHMAP_C128};
  static const char *const names[] = {"f32", "f64", "i32", "i64", "bf16",
                                      "f16", "i8",  "u8",  "i16", "u16",
                                      "u32", "u64", "bool", "c64", "c128"};
  static const size_t sizes[] = {4, 8, 4, 8, 2, 2, 1, 1, 2, 2, 4, 8, 1, 8, 16};
  static const char *const specs[][2] = {
      {"P('i', 'j')", "P('i', 'j')"},
      {"P(('j', 'i'))", "P(('j', 'i'))"},
      {"P(None, ('i', 'j'))", "P(None, ('i', 'j'))"},
      {"P()", "P()"},
  };
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[2] = {8, 8};
  ck_assert_int_eq(SHMAP_NDTYPES, 15);
  for (int k = 0; k < SHMAP_NDTYPES; k++) {
    shmap_dtype dt = dts[k];
    void *src = malloc(64 * 16), *back;
    shmap_array *x;
    ck_assert_uint_eq(shmap_dtype_size(dt), sizes[k]);
    ck_assert_str_eq(shmap_dtype_name(dt), names[k]);
    fill_values(dt, 64, src);
    x = tu_array_from_host(dt, 2, shape, src);
    expect_shape(x, dt, 2, shape);
    back = tu_array_to_host(x, NULL);
    ck_assert_mem_eq(back, src, 64 * sizes[k]);
    free(back);
    for (size_t sp = 0; sp < sizeof specs / sizeof specs[0]; sp++) {
      shmap_array *y = NULL;
      targ *t = targ_new();
      int rc = shmap_map(m, body_identity, t, 1, &x, &specs[sp][0], 1, &y,
                         &specs[sp][1]);
      ck_assert_msg(rc == 0, "%s %s: %d %s", names[k], specs[sp][0], rc,
                    shmap_errmsg());
      expect_shape(y, dt, 2, shape);
      back = tu_array_to_host(y, NULL);
      ck_assert_msg(memcmp(back, src, 64 * sizes[k]) == 0,
                    "%s %s: output differs from input", names[k],
                    specs[sp][0]);
      for (int dev = 0; dev < 8; dev++)
        ck_assert_int_eq(t->seen_dtype[dev], dt);
      free(back);
      free(t);
      shmap_array_destroy(y);
    }
    shmap_array_destroy(x);
    free(src);
  }
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(host_arrays) {
  int64_t shape[3] = {2, 3, 4};
  int32_t data[24], back[24];
  shmap_array *a = NULL;
  const int64_t *sh;
  for (int e = 0; e < 24; e++)
    data[e] = e * 3 - 10;
  ck_assert_int_eq(shmap_array_from_host(&a, SHMAP_I32, 3, shape, data), 0);
  /* the array owns a copy of both the data and the shape */
  data[0] = 99;
  shape[0] = 7;
  sh = shmap_array_shape(a);
  ck_assert_int_eq(sh[0], 2);
  ck_assert_int_eq(sh[1], 3);
  ck_assert_int_eq(sh[2], 4);
  ck_assert_int_eq(shmap_array_rank(a), 3);
  ck_assert_int_eq(shmap_array_numel(a), 24);
  ck_assert_int_eq(shmap_array_dtype(a), SHMAP_I32);
  ck_assert_int_eq(shmap_array_to_host(a, back), 0);
  ck_assert_int_eq(back[0], -10);
  for (int e = 1; e < 24; e++)
    ck_assert_int_eq(back[e], e * 3 - 10);
  ck_assert_int_eq(shmap_array_to_host(a, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_to_host(NULL, back), SHMAP_EINVAL);
  shmap_array_destroy(a);
  shmap_array_destroy(NULL);

  /* a scalar */
  {
    double v = 2.75, w = 0;
    a = NULL;
    ck_assert_int_eq(shmap_array_from_host(&a, SHMAP_F64, 0, NULL, &v), 0);
    ck_assert_int_eq(shmap_array_rank(a), 0);
    ck_assert_int_eq(shmap_array_numel(a), 1);
    ck_assert_int_eq(shmap_array_to_host(a, &w), 0);
    ck_assert(w == 2.75);
    shmap_array_destroy(a);
  }
}
END_TEST

START_TEST(host_array_errors) {
  int64_t shape[2] = {2, 3}, neg[2] = {2, -1};
  int64_t big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  float data[64] = {0};
  shmap_array *a = NULL;
  int rc;
  ck_assert_int_eq(shmap_array_from_host(NULL, SHMAP_F32, 2, shape, data),
                   SHMAP_EINVAL);
  /* on failure *array is set to NULL */
#define SENTINEL ((shmap_array *)(uintptr_t)0x10)
  a = SENTINEL;
  ck_assert_int_eq(shmap_array_from_host(&a, SHMAP_F32, 2, shape, NULL),
                   SHMAP_EINVAL);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  ck_assert_int_eq(shmap_array_from_host(&a, SHMAP_F32, 2, NULL, data),
                   SHMAP_EINVAL);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  rc = shmap_array_from_host(&a, (shmap_dtype)SHMAP_NDTYPES, 2, shape, data);
  ck_assert_msg(rc == SHMAP_EDTYPE, "dtype SHMAP_NDTYPES: %d", rc);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  rc = shmap_array_from_host(&a, (shmap_dtype)-1, 2, shape, data);
  ck_assert_msg(rc == SHMAP_EDTYPE, "dtype -1: %d", rc);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  rc = shmap_array_from_host(&a, SHMAP_F32, -1, shape, data);
  ck_assert_msg(rc == SHMAP_ESHAPE, "rank -1: %d", rc);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  rc = shmap_array_from_host(&a, SHMAP_F32, 9, big, data);
  ck_assert_msg(rc == SHMAP_ESHAPE, "rank 9: %d", rc);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  rc = shmap_array_from_host(&a, SHMAP_F32, 2, neg, data);
  ck_assert_msg(rc == SHMAP_ESHAPE, "dim -1: %d", rc);
  ck_assert_ptr_null(a);
  /* too large to address */
  a = SENTINEL;
  rc = shmap_array_from_host(&a, SHMAP_F64, 3,
                             (const int64_t[]){INT64_C(1) << 40,
                                               INT64_C(1) << 40, 1 << 20},
                             data);
  ck_assert_msg(rc == SHMAP_ESHAPE, "huge shape: %d", rc);
  ck_assert_ptr_null(a);
  /* queries on NULL */
  ck_assert_int_eq(shmap_array_rank(NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_numel(NULL), SHMAP_EINVAL);
  ck_assert_ptr_null(shmap_array_shape(NULL));
  ck_assert_int_eq((int)shmap_array_dtype(NULL), -1);
  ck_assert_uint_eq(shmap_dtype_size((shmap_dtype)SHMAP_NDTYPES), 0);
  ck_assert_str_eq(shmap_dtype_name((shmap_dtype)SHMAP_NDTYPES), "invalid");
}
END_TEST

START_TEST(strerror_codes) {
  for (int c = 0; c >= SHMAP_ESYS; c--) {
    const char *s = shmap_strerror(c);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(strlen(s) > 0, "strerror(%d) empty", c);
    for (int d = c + 1; d <= 0; d++)
      ck_assert_msg(strcmp(s, shmap_strerror(d)) != 0,
                    "strerror(%d) == strerror(%d)", c, d);
  }
  ck_assert_str_eq(shmap_strerror(-1000), "unknown error code");
  ck_assert_str_eq(shmap_strerror(5), "unknown error code");
  ck_assert_str_eq(shmap_strerror(SHMAP_EINVAL), "invalid argument");
}
END_TEST

/* Every code's name and text, written out here rather than taken from
 * SHMAP_ERRNO_MAP, so that a change to the table shows. */
START_TEST(err_names) {
  static const struct {
    int code;
    const char *name, *text;
  } want[] = {
      {SHMAP_OK, "SHMAP_OK", "success"},
      {SHMAP_EINVAL, "SHMAP_EINVAL", "invalid argument"},
      {SHMAP_ENOMEM, "SHMAP_ENOMEM", "out of memory"},
      {SHMAP_ESYNTAX, "SHMAP_ESYNTAX", "syntax error"},
      {SHMAP_EAXIS, "SHMAP_EAXIS", "bad axis name"},
      {SHMAP_ESHAPE, "SHMAP_ESHAPE", "bad shape"},
      {SHMAP_EDTYPE, "SHMAP_EDTYPE", "bad dtype"},
      {SHMAP_EBODY, "SHMAP_EBODY", "body failed"},
      {SHMAP_EMISMATCH, "SHMAP_EMISMATCH", "devices disagree"},
      {SHMAP_EREPLICATION, "SHMAP_EREPLICATION", "output not replicated"},
      {SHMAP_ECANCELED, "SHMAP_ECANCELED",
       "canceled because another device failed"},
      {SHMAP_ESTATE, "SHMAP_ESTATE", "not allowed in this state"},
      {SHMAP_ESYS, "SHMAP_ESYS", "system error"},
  };
  int n = (int)(sizeof want / sizeof want[0]);
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(want[i].code, -i);
    ck_assert_str_eq(shmap_err_name(want[i].code), want[i].name);
    ck_assert_str_eq(shmap_strerror(want[i].code), want[i].text);
  }
  /* The table has these codes and no others. */
  int count = 0;
#define COUNT(name, value, text) count++;
  SHMAP_ERRNO_MAP(COUNT)
#undef COUNT
  ck_assert_int_eq(count, n);
  ck_assert_str_eq(shmap_err_name(-13), "SHMAP_UNKNOWN");
  ck_assert_str_eq(shmap_err_name(-1000), "SHMAP_UNKNOWN");
  ck_assert_str_eq(shmap_err_name(1), "SHMAP_UNKNOWN");
  ck_assert_str_eq(shmap_strerror(-13), "unknown error code");
}
END_TEST

/* ---- private inputs, concurrency ---------------------------------------- */

/* Wait until every device of the map arrived (they run concurrently). */
static int barrier(shmap_ctx *ctx, targ *t, int ndev) {
  struct timespec t0, now;
  atomic_fetch_add(&t->arrived, 1);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load(&t->arrived) < ndev) {
    sched_yield();
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec > 20)
      return shmap_fail(ctx, "devices do not run concurrently: %d of %d "
                             "arrived", atomic_load(&t->arrived), ndev);
  }
  return 0;
}

/* Every device writes its own marker into both of its input blocks (the
 * same array passed twice), waits for all others, then checks that its
 * blocks still hold its own markers, and outputs block 0. */
static int body_private(shmap_ctx *ctx, void *arg) {
  targ *t = arg;
  int dev = shmap_ctx_device(ctx);
  int ndev = shmap_mesh_ndevices(shmap_ctx_mesh(ctx));
  const shmap_block *a = shmap_in(ctx, 0), *b = shmap_in(ctx, 1);
  int32_t *pa, *pb;
  int64_t n;
  int rc;
  if (a == NULL || b == NULL)
    return shmap_fail(ctx, "missing input");
  n = shmap_block_numel(a);
  pa = a->data;
  pb = b->data;
  if (pa == pb)
    return shmap_fail(ctx, "inputs 0 and 1 share storage");
  for (int64_t e = 0; e < n; e++) {
    pa[e] = (int32_t)(dev * 100 + e);
    pb[e] = (int32_t)(-dev * 100 - e);
  }
  rc = barrier(ctx, t, ndev);
  if (rc != 0)
    return rc;
  for (int64_t e = 0; e < n; e++)
    if (pa[e] != (int32_t)(dev * 100 + e) || pb[e] != (int32_t)(-dev * 100 - e))
      return shmap_fail(ctx, "input block changed by another device: "
                             "element %lld is %d/%d",
                        (long long)e, pa[e], pb[e]);
  return shmap_out_copy(ctx, 0, a) != NULL ? 0 : shmap_fail(ctx, "out");
}

START_TEST(private_inputs) {
  /* The body below waits for its peers with a spin barrier of its own,
   * which needs every device on a thread of its own: in fiber mode
   * devices only hand over inside collectives. */
  setenv("SHMAP_SCHED", "threads", 1);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  int64_t shape[1] = {4}, oshape[1] = {16};
  int32_t src[4] = {10, 20, 30, 40}, *h;
  shmap_array *x = tu_array_from_host(SHMAP_I32, 1, shape, src);
  shmap_array *in[2] = {x, x}, *y = NULL;
  const char *is[] = {"P()", "P()"}, *os[] = {"P(('i', 'j'))"};
  targ *t = targ_new();
  int rc = shmap_map(m, body_private, t, 2, in, is, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  expect_shape(y, SHMAP_I32, 1, oshape);
  h = tu_array_to_host(y, NULL);
  for (int dev = 0; dev < 4; dev++)
    for (int e = 0; e < 4; e++)
      ck_assert_int_eq(h[dev * 4 + e], dev * 100 + e);
  free(h);
  h = tu_array_to_host(x, NULL);
  ck_assert_mem_eq(h, src, sizeof src);
  free(h);
  shmap_array_destroy(y);

  /* split input: the source is unchanged too */
  {
    int64_t s8[1] = {8};
    int32_t src8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    shmap_array *x8 = tu_array_from_host(SHMAP_I32, 1, s8, src8);
    shmap_array *in8[2] = {x8, x8};
    const char *is8[] = {"P(('i','j'))", "P('j')"};
    const char *os8[] = {"P(('j','i'))"};
    free(t);
    t = targ_new();
    y = NULL;
    rc = shmap_map(m, body_private, t, 2, in8, is8, 1, &y, os8);
    ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
    h = tu_array_to_host(x8, NULL);
    ck_assert_mem_eq(h, src8, sizeof src8);
    free(h);
    h = tu_array_to_host(y, NULL);
    /* device (i,j) lands at block j*2+i */
    for (int dev = 0; dev < 4; dev++) {
      int blk = (dev % 2) * 2 + dev / 2;
      for (int e = 0; e < 2; e++)
        ck_assert_int_eq(h[blk * 2 + e], dev * 100 + e);
    }
    free(h);
    shmap_array_destroy(y);
    shmap_array_destroy(x8);
  }
  free(t);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- more shapes of maps ---------------------------------------------------- */

/* out0 = in1, out1 = in0 (two inputs of different dtypes). */
static int body_swap(shmap_ctx *ctx, void *arg) {
  const shmap_block *a = shmap_in(ctx, 0), *b = shmap_in(ctx, 1);
  (void)arg;
  if (a == NULL || b == NULL)
    return shmap_fail(ctx, "missing input");
  if (shmap_out_copy(ctx, 0, b) == NULL || shmap_out_copy(ctx, 1, a) == NULL)
    return shmap_fail(ctx, "out_copy");
  return 0;
}

START_TEST(two_in_two_out) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t sa[2] = {8, 3}, sb[2] = {3, 4};
  int64_t ia[24], *h64;
  float fb[12], *hf;
  shmap_array *a, *b, *in[2], *out[2] = {NULL, NULL};
  const char *is[] = {"P('i')", "P(None, 'j')"};
  const char *os[] = {"P(None, 'j')", "P('i')"};
  int rc;
  for (int e = 0; e < 24; e++)
    ia[e] = ((int64_t)1 << 45) + e;
  for (int e = 0; e < 12; e++)
    fb[e] = e * 0.25f;
  a = tu_array_from_host(SHMAP_I64, 2, sa, ia);
  b = tu_array_from_host(SHMAP_F32, 2, sb, fb);
  in[0] = a;
  in[1] = b;
  rc = shmap_map(m, body_swap, NULL, 2, in, is, 2, out, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  expect_shape(out[0], SHMAP_F32, 2, sb);
  expect_shape(out[1], SHMAP_I64, 2, sa);
  hf = tu_array_to_host(out[0], NULL);
  h64 = tu_array_to_host(out[1], NULL);
  ck_assert_mem_eq(hf, fb, sizeof fb);
  ck_assert_mem_eq(h64, ia, sizeof ia);
  free(hf);
  free(h64);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(out[1]);
  shmap_array_destroy(a);
  shmap_array_destroy(b);
  shmap_mesh_destroy(m);
}
END_TEST

static int body_nothing(shmap_ctx *ctx, void *arg) {
  targ *t = arg;
  atomic_fetch_add(&t->calls[shmap_ctx_device(ctx)], 1);
  return 0;
}

START_TEST(no_outputs) {
  shmap_mesh *m = tu_mesh_new("a=3, b=1, c=2");
  targ *t = targ_new();
  ck_assert_int_eq(
      shmap_map(m, body_nothing, t, 0, NULL, NULL, 0, NULL, NULL), 0);
  for (int dev = 0; dev < 6; dev++)
    ck_assert_int_eq(atomic_load(&t->calls[dev]), 1);
  free(t);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(scalar_map) {
  shmap_mesh *m = tu_mesh_new("i=3");
  float v = 4.5f, *h;
  shmap_array *x = tu_array_from_host(SHMAP_F32, 0, NULL, &v), *y = NULL;
  const char *is[] = {"P()"}, *os[] = {""};
  targ *t = targ_new();
  int rc = shmap_map(m, body_identity, t, 1, &x, is, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  ck_assert_int_eq(shmap_array_rank(y), 0);
  ck_assert_int_eq(shmap_array_numel(y), 1);
  h = tu_array_to_host(y, NULL);
  ck_assert(h[0] == 4.5f);
  for (int dev = 0; dev < 3; dev++)
    ck_assert_int_eq(t->seen_rank[dev], 0);
  free(h);
  free(t);
  shmap_array_destroy(x);
  shmap_array_destroy(y);
  shmap_mesh_destroy(m);
}
END_TEST

/* Output through shmap_out (zeroed, then filled), shmap_block_alloc +
 * shmap_out_set, and shmap_out_set of a body-owned block. */
static int body_out_variants(shmap_ctx *ctx, void *arg) {
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *o, *s;
  shmap_block mine;
  int32_t buf[64];
  int64_t n = shmap_block_numel(in);
  (void)arg;
  if (n > 64)
    return shmap_fail(ctx, "block too big");
  o = shmap_out(ctx, 0, in->dtype, in->rank, in->shape);
  if (o == NULL)
    return shmap_fail(ctx, "shmap_out");
  for (int64_t e = 0; e < n; e++)
    if (((int32_t *)o->data)[e] != 0)
      return shmap_fail(ctx, "shmap_out block not zeroed");
  if (shmap_block_nbytes(o) != (size_t)n * 4)
    return shmap_fail(ctx, "nbytes %zu", shmap_block_nbytes(o));
  memcpy(o->data, in->data, (size_t)n * 4);
  s = shmap_block_alloc(ctx, in->dtype, in->rank, in->shape);
  if (s == NULL)
    return shmap_fail(ctx, "block_alloc");
  for (int64_t e = 0; e < n; e++)
    if (((int32_t *)s->data)[e] != 0)
      return shmap_fail(ctx, "block_alloc not zeroed");
  for (int64_t e = 0; e < n; e++)
    ((int32_t *)s->data)[e] = ((const int32_t *)in->data)[e] * 2;
  if (shmap_out_set(ctx, 1, s) != 0)
    return shmap_fail(ctx, "out_set(alloc): %s", shmap_errmsg());
  mine = *in;
  mine.data = buf;
  for (int64_t e = 0; e < n; e++)
    buf[e] = ((const int32_t *)in->data)[e] + 1;
  if (shmap_out_set(ctx, 2, &mine) != 0)
    return shmap_fail(ctx, "out_set(own): %s", shmap_errmsg());
  /* the body's buffer was copied: overwriting it changes nothing */
  for (int64_t e = 0; e < n; e++)
    buf[e] = -12345;
  /* scratch blocks can be freed early */
  s = shmap_block_alloc(ctx, SHMAP_F64, 1, (const int64_t[]){3});
  if (s == NULL || shmap_block_free(ctx, s) != 0)
    return shmap_fail(ctx, "block_free");
  return 0;
}

START_TEST(out_variants) {
  shmap_mesh *m = tu_mesh_new("i=2, j=3");
  int64_t shape[2] = {4, 6};
  int32_t src[24], *h;
  shmap_array *x, *out[3] = {NULL, NULL, NULL};
  const char *is[] = {"P('i', 'j')"};
  const char *os[] = {"P('i', 'j')", "P('i', 'j')", "P('i', 'j')"};
  int rc;
  for (int e = 0; e < 24; e++)
    src[e] = e * 7 - 50;
  x = tu_array_from_host(SHMAP_I32, 2, shape, src);
  rc = shmap_map(m, body_out_variants, NULL, 1, &x, is, 3, out, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  for (int k = 0; k < 3; k++) {
    expect_shape(out[k], SHMAP_I32, 2, shape);
    h = tu_array_to_host(out[k], NULL);
    for (int e = 0; e < 24; e++) {
      int32_t want = k == 0 ? src[e] : k == 1 ? src[e] * 2 : src[e] + 1;
      ck_assert_msg(h[e] == want, "out[%d][%d] = %d, want %d", k, e, h[e],
                    want);
    }
    free(h);
    shmap_array_destroy(out[k]);
  }
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(short_out_spec_pads) {
  /* out P('i') on a rank-2 block: dimension 1 unsplit; j untiles */
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[2] = {8, 3};
  shmap_array *x = tu_arange_f32(2, shape), *y = NULL;
  const char *is[] = {"P('i')"}, *os[] = {"P('i')"};
  float *h;
  int rc = shmap_map(m, body_identity, NULL, 1, &x, is, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  expect_shape(y, SHMAP_F32, 2, shape);
  h = tu_array_to_host(y, NULL);
  for (int e = 0; e < 24; e++)
    ck_assert(h[e] == (float)e);
  free(h);
  shmap_array_destroy(x);
  shmap_array_destroy(y);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(single_device_and_sixteen) {
  static const char *const meshes[] = {"solo=1", "a=2, b=2, c=2, d=2",
                                       "x=16"};
  for (size_t k = 0; k < 3; k++) {
    shmap_mesh *m = tu_mesh_new(meshes[k]);
    int64_t shape[1] = {32};
    shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
    const char *is[] = {k == 0 ? "P('solo')"
                        : k == 1 ? "P(('d', 'c', 'b', 'a'))"
                                 : "P('x')"};
    const char *os[1];
    float *h;
    int rc;
    os[0] = is[0];
    rc = shmap_map(m, body_identity, NULL, 1, &x, is, 1, &y, os);
    ck_assert_msg(rc == 0, "%s: %d %s", meshes[k], rc, shmap_errmsg());
    expect_shape(y, SHMAP_F32, 1, shape);
    h = tu_array_to_host(y, NULL);
    for (int e = 0; e < 32; e++)
      ck_assert(h[e] == (float)e);
    free(h);
    shmap_array_destroy(x);
    shmap_array_destroy(y);
    shmap_mesh_destroy(m);
  }
}
END_TEST

START_TEST(repeated_maps) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[2] = {8, 4}, oshape[2] = {8, 8};
  shmap_array *x = tu_arange_f32(2, shape);
  const char *is[] = {"P('i')"}, *os[] = {"P('i', 'j')"};
  for (int it = 0; it < 200; it++) {
    shmap_array *y = NULL;
    float *h;
    int rc = shmap_map(m, body_identity, NULL, 1, &x, is, 1, &y, os);
    ck_assert_msg(rc == 0, "iteration %d: %d %s", it, rc, shmap_errmsg());
    expect_shape(y, SHMAP_F32, 2, oshape);
    h = tu_array_to_host(y, NULL);
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 8; c++)
        ck_assert(h[r * 8 + c] == (float)(r * 4 + c % 4));
    free(h);
    shmap_array_destroy(y);
  }
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);

  /* meshes come and go, with a map each */
  for (int it = 0; it < 20; it++) {
    m = tu_mesh_new(it % 2 ? "i=3, j=2" : "k=5");
    check_mesh_usable(m);
    shmap_mesh_destroy(m);
  }
}
END_TEST

START_TEST(two_meshes) {
  shmap_mesh *m1 = tu_mesh_new("i=2"), *m2 = tu_mesh_new("j=3");
  for (int it = 0; it < 5; it++) {
    check_mesh_usable(m1);
    check_mesh_usable(m2);
  }
  shmap_mesh_destroy(m1);
  check_mesh_usable(m2);
  shmap_mesh_destroy(m2);
}
END_TEST

/* ---- errors --------------------------------------------------------------- */

/* Run a map expected to fail with `code`; checks that no output is set and
 * that the message contains n1 and n2 (when not NULL); returns the
 * message. */
static const char *expect_map_error(shmap_mesh *m, shmap_body_fn body,
                                    void *arg, int nin, shmap_array *in[],
                                    const char *const is[], int nout,
                                    const char *const os[], unsigned flags,
                                    int code, const char *n1, const char *n2) {
  shmap_array *out[4] = {NULL, NULL, NULL, NULL};
  int rc = shmap_map_flags(m, body, arg, nin, in, is, nout, out, os, flags);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "map = %d (%s), want %d (%s); message: %s", rc,
                shmap_strerror(rc), code, shmap_strerror(code), msg);
  for (int k = 0; k < 4; k++)
    ck_assert_msg(out[k] == NULL, "failed map set out[%d]", k);
  if (n1)
    ck_assert_msg(t_has(msg, n1), "message lacks \"%s\": %s", n1, msg);
  if (n2)
    ck_assert_msg(t_has(msg, n2), "message lacks \"%s\": %s", n2, msg);
  return msg;
}

START_TEST(err_in_specs) {
  shmap_mesh *m = tu_mesh_new("rows=4, cols=2");
  int64_t bad[2] = {10, 12}, good[2] = {12, 12};
  shmap_array *xb = tu_arange_f32(2, bad), *xg = tu_arange_f32(2, good);
  const char *os[] = {"P()"};
  const char *msg;
  const char *is[1];

  /* dimension 0 of size 10 is not divisible by rows=4 */
  is[0] = "P('rows')";
  msg = expect_map_error(m, body_identity, NULL, 1, &xb, is, 1, os, 0,
                         SHMAP_ESHAPE, "rows", NULL);
  ck_assert_msg(t_has_int(msg, 10) && t_has_int(msg, 4) && t_has_int(msg, 0),
                "divisibility message: %s", msg);
  /* dimension 1 of size 12 is not divisible by ('rows','cols') = 8 */
  is[0] = "P(None, ('rows', 'cols'))";
  msg = expect_map_error(m, body_identity, NULL, 1, &xb, is, 1, os, 0,
                         SHMAP_ESHAPE, "rows", "cols");
  ck_assert_msg(t_has_int(msg, 12) && t_has_int(msg, 8) && t_has_int(msg, 1),
                "divisibility message: %s", msg);
  check_mesh_usable(m);

  /* longer than the rank */
  is[0] = "P('rows', None, None)";
  msg = expect_map_error(m, body_identity, NULL, 1, &xg, is, 1, os, 0,
                         SHMAP_ESHAPE, "P('rows', None, None)", NULL);
  ck_assert_msg(t_has_int(msg, 3) && t_has_int(msg, 2), "rank message: %s",
                msg);
  /* duplicate axis; these messages start with in_specs[k] and show the
   * spec as given */
  is[0] = "P('rows', 'rows')";
  msg = expect_map_error(m, body_identity, NULL, 1, &xg, is, 1, os, 0,
                         SHMAP_EAXIS, "'rows'", "P('rows', 'rows')");
  ck_assert_msg(strncmp(msg, "in_specs[0]", 11) == 0, "message: %s", msg);
  is[0] = "P(('cols', 'rows'), 'cols')";
  msg = expect_map_error(m, body_identity, NULL, 1, &xg, is, 1, os, 0,
                         SHMAP_EAXIS, "'cols'", "P(('cols', 'rows'), 'cols')");
  ck_assert_msg(strncmp(msg, "in_specs[0]", 11) == 0, "message: %s", msg);
  /* unknown axis */
  is[0] = "P('rows', 'zz_top')";
  msg = expect_map_error(m, body_identity, NULL, 1, &xg, is, 1, os, 0,
                         SHMAP_EAXIS, "zz_top", "P('rows', 'zz_top')");
  ck_assert_msg(strncmp(msg, "in_specs[0]", 11) == 0, "message: %s", msg);
  /* syntax */
  is[0] = "P('rows'";
  msg = expect_map_error(m, body_identity, NULL, 1, &xg, is, 1, os, 0,
                         SHMAP_ESYNTAX, "\"P('rows'\"", NULL);
  ck_assert_msg(strncmp(msg, "in_specs[0]", 11) == 0, "message: %s", msg);
  check_mesh_usable(m);
  shmap_array_destroy(xb);
  shmap_array_destroy(xg);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(err_out_specs) {
  shmap_mesh *m = tu_mesh_new("rows=4, cols=2");
  int64_t good[2] = {12, 12};
  shmap_array *x = tu_arange_f32(2, good);
  const char *is[] = {"P('rows')"};
  const char *os[1];
  const char *msg;
  targ *t;

  os[0] = "P('rows', 'qq')";
  t = targ_new();
  msg = expect_map_error(m, body_identity, t, 1, &x, is, 1, os, 0,
                         SHMAP_EAXIS, "'qq'", "P('rows', 'qq')");
  ck_assert_msg(strncmp(msg, "out_specs[0]", 12) == 0, "message: %s", msg);
  /* the spec is checked before any body runs */
  for (int dev = 0; dev < 8; dev++)
    ck_assert_int_eq(atomic_load(&t->calls[dev]), 0);
  free(t);
  os[0] = "P('rows', 'rows')";
  msg = expect_map_error(m, body_identity, NULL, 1, &x, is, 1, os, 0,
                         SHMAP_EAXIS, "'rows'", "P('rows', 'rows')");
  ck_assert_msg(strncmp(msg, "out_specs[0]", 12) == 0, "message: %s", msg);
  os[0] = "P('rows', None, 'cols')";
  msg = expect_map_error(m, body_identity, NULL, 1, &x, is, 1, os, 0,
                         SHMAP_ESHAPE, "P('rows', None, 'cols')", NULL);
  ck_assert_msg(t_has_int(msg, 3) && t_has_int(msg, 2), "rank message: %s",
                msg);
  os[0] = "P(('rows',)";
  msg = expect_map_error(m, body_identity, NULL, 1, &x, is, 1, os, 0,
                         SHMAP_ESYNTAX, "\"P(('rows',)\"", NULL);
  ck_assert_msg(strncmp(msg, "out_specs[0]", 12) == 0, "message: %s", msg);
  check_mesh_usable(m);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(err_null_args) {
  shmap_mesh *m = tu_mesh_new("i=2");
  int64_t shape[1] = {4};
  shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
  shmap_array *nullarr[1] = {NULL};
  const char *is[] = {"P('i')"}, *os[] = {"P('i')"};
  const char *nullspec[] = {NULL};
  ck_assert_int_eq(shmap_map(NULL, body_identity, NULL, 1, &x, is, 1, &y, os),
                   SHMAP_EINVAL);
  ck_assert_int_eq(shmap_map(m, NULL, NULL, 1, &x, is, 1, &y, os),
                   SHMAP_EINVAL);
  ck_assert_int_eq(
      shmap_map(m, body_identity, NULL, 1, NULL, is, 1, &y, os), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_map(m, body_identity, NULL, 1, &x, NULL, 1, &y, os),
                   SHMAP_EINVAL);
  ck_assert_int_eq(
      shmap_map(m, body_identity, NULL, 1, nullarr, is, 1, &y, os),
      SHMAP_EINVAL);
  ck_assert_int_eq(
      shmap_map(m, body_identity, NULL, 1, &x, nullspec, 1, &y, os),
      SHMAP_EINVAL);
  ck_assert_int_eq(
      shmap_map(m, body_identity, NULL, 1, &x, is, 1, NULL, os), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_map(m, body_identity, NULL, 1, &x, is, 1, &y, NULL),
                   SHMAP_EINVAL);
  ck_assert_int_eq(
      shmap_map(m, body_identity, NULL, 1, &x, is, 1, &y, nullspec),
      SHMAP_EINVAL);
  ck_assert_int_eq(shmap_map(m, body_identity, NULL, -1, &x, is, 1, &y, os),
                   SHMAP_EINVAL);
  ck_assert_int_eq(shmap_map(m, body_identity, NULL, 1, &x, is, -1, &y, os),
                   SHMAP_EINVAL);
  ck_assert_ptr_null(y);
  check_mesh_usable(m);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* Modes of body_mismatch: which device does what differently. */
enum {
  MM_MISSING,     /* device bad_dev does not declare output 1 */
  MM_NONE,        /* nobody declares output 0 */
  MM_DTYPE,       /* device bad_dev: i32[2,3], others f32[2,3] */
  MM_SHAPE,       /* device bad_dev: f32[2,4] */
  MM_RANK,        /* device bad_dev: f32[6] */
  MM_FAIL_MSG,    /* device bad_dev fails with shmap_fail */
  MM_FAIL_CODE,   /* device bad_dev returns 7 */
  MM_FAIL_ALL,    /* every device fails */
  MM_REP_ELEMENT, /* device bad_dev sets element [1][2] = 7.5 */
};

static int body_mismatch(shmap_ctx *ctx, void *arg) {
  targ *t = arg;
  int dev = shmap_ctx_device(ctx);
  int bad = dev == t->bad_dev;
  int64_t s23[2] = {2, 3}, s24[2] = {2, 4}, s6[1] = {6};
  shmap_block *o = NULL;
  switch (t->mode) {
  case MM_MISSING:
    if (shmap_out(ctx, 0, SHMAP_F32, 2, s23) == NULL)
      return shmap_fail(ctx, "out 0");
    if (!bad && shmap_out(ctx, 1, SHMAP_F32, 2, s23) == NULL)
      return shmap_fail(ctx, "out 1");
    return 0;
  case MM_NONE:
    return 0;
  case MM_DTYPE:
    o = shmap_out(ctx, 0, bad ? SHMAP_I32 : SHMAP_F32, 2, s23);
    break;
  case MM_SHAPE:
    o = shmap_out(ctx, 0, SHMAP_F32, 2, bad ? s24 : s23);
    break;
  case MM_RANK:
    o = bad ? shmap_out(ctx, 0, SHMAP_F32, 1, s6)
            : shmap_out(ctx, 0, SHMAP_F32, 2, s23);
    break;
  case MM_FAIL_MSG:
    if (shmap_out(ctx, 0, SHMAP_F32, 2, s23) == NULL)
      return shmap_fail(ctx, "out 0");
    return bad ? shmap_fail(ctx, "custom failure xyzzy %d", 42) : 0;
  case MM_FAIL_CODE:
    if (shmap_out(ctx, 0, SHMAP_F32, 2, s23) == NULL)
      return shmap_fail(ctx, "out 0");
    return bad ? 7 : 0;
  case MM_FAIL_ALL:
    return shmap_fail(ctx, "everyone fails on device %d", dev);
  case MM_REP_ELEMENT:
    o = shmap_out(ctx, 0, SHMAP_F32, 2, s23);
    if (o != NULL && bad)
      ((float *)o->data)[1 * 3 + 2] = 7.5f;
    break;
  }
  return o != NULL ? 0 : shmap_fail(ctx, "shmap_out");
}

START_TEST(err_output_mismatch) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  targ *t = targ_new();
  const char *os1[] = {"P('i', 'j')"};
  const char *os2[] = {"P('i', 'j')", "P('i', 'j')"};
  const char *msg;

  t->mode = MM_MISSING;
  t->bad_dev = 3;
  msg = expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 2, os2, 0,
                         SHMAP_EMISMATCH, NULL, NULL);
  ck_assert_msg(t_has_dev(msg, 3), "message does not name device 3: %s", msg);
  check_mesh_usable(m);

  /* an output nobody declared */
  t->mode = MM_NONE;
  expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 1, os1, 0,
                   SHMAP_EINVAL, NULL, NULL);
  check_mesh_usable(m);

  /* one device's output differs in dtype, shape or rank */
  static const struct {
    int mode, dev;
    const char *n1, *n2;
  } diff[] = {{MM_DTYPE, 2, "f32[2,3]", "i32[2,3]"},
              {MM_SHAPE, 5, "f32[2,3]", "f32[2,4]"},
              {MM_RANK, 0, "f32[2,3]", "f32[6]"}};
  for (size_t k = 0; k < sizeof diff / sizeof diff[0]; k++) {
    t->mode = diff[k].mode;
    t->bad_dev = diff[k].dev;
    msg = expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 1, os1, 0,
                           SHMAP_EMISMATCH, diff[k].n1, diff[k].n2);
    ck_assert_msg(t_has_dev(msg, diff[k].dev) &&
                      t_count(msg, "device ") >= 2,
                  "message does not name device %d and another: %s",
                  diff[k].dev, msg);
    check_mesh_usable(m);
  }
  free(t);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(err_body_fails) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  targ *t = targ_new();
  const char *os1[] = {"P('i', 'j')"};
  const char *msg;

  t->mode = MM_FAIL_MSG;
  t->bad_dev = 3;
  msg = expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 1, os1, 0,
                         SHMAP_EBODY, "custom failure xyzzy 42", NULL);
  ck_assert_msg(t_has_dev(msg, 3), "message does not name device 3: %s", msg);
  check_mesh_usable(m);

  t->mode = MM_FAIL_CODE;
  t->bad_dev = 6;
  msg = expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 1, os1, 0,
                         SHMAP_EBODY, NULL, NULL);
  ck_assert_msg(t_has_dev(msg, 6) && t_has_int(msg, 7),
                "message does not name device 6 and the value 7: %s", msg);
  check_mesh_usable(m);

  t->mode = MM_FAIL_ALL;
  msg = expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 1, os1, 0,
                         SHMAP_EBODY, "everyone fails on device", NULL);
  ck_assert_msg(t_count(msg, "device ") >= 1, "message: %s", msg);
  check_mesh_usable(m);
  free(t);
  shmap_mesh_destroy(m);
}
END_TEST

/* 2*x */
static int body_double(shmap_ctx *ctx, void *arg) {
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *o;
  (void)arg;
  if (in == NULL || (o = shmap_out_copy(ctx, 0, in)) == NULL)
    return shmap_fail(ctx, "in/out");
  for (int64_t e = 0; e < shmap_block_numel(o); e++)
    ((float *)o->data)[e] *= 2;
  return 0;
}

START_TEST(err_replication_seed) {
  /* mesh i=4,j=2, in P('i','j'), body 2*x, out P(None,'j'): blocks differ
   * along i (device 0 holds 0 where device 2 holds 72). */
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[2] = {12, 12}, oshape[2] = {3, 12};
  shmap_array *x = tu_arange_f32(2, shape), *y = NULL;
  const char *is[] = {"P('i', 'j')"}, *os[] = {"P(None, 'j')"};
  const char *msg;
  float *h;
  int rc;
  msg = expect_map_error(m, body_double, NULL, 1, &x, is, 1, os, 0,
                         SHMAP_EREPLICATION, NULL, NULL);
  ck_assert_msg(t_count(msg, "device ") >= 2,
                "message does not name two devices: %s", msg);
  ck_assert_msg(t_has(msg, "72"), "message lacks the differing value: %s",
                msg);
  check_mesh_usable(m);
  /* unchecked: the copy at i=0 */
  rc = shmap_map_flags(m, body_double, NULL, 1, &x, is, 1, &y, os,
                       SHMAP_NO_CHECK_REP);
  ck_assert_msg(rc == 0, "unchecked map: %d %s", rc, shmap_errmsg());
  expect_shape(y, SHMAP_F32, 2, oshape);
  h = tu_array_to_host(y, NULL);
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 12; c++)
      ck_assert_msg(h[r * 12 + c] == 2.0f * (r * 12 + c),
                    "y[%d][%d] = %g, want %g", r, c, h[r * 12 + c],
                    2.0 * (r * 12 + c));
  free(h);
  shmap_array_destroy(y);
  /* flags 0 through shmap_map_flags behaves like shmap_map */
  expect_map_error(m, body_double, NULL, 1, &x, is, 1, os, 0,
                   SHMAP_EREPLICATION, NULL, NULL);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(err_replication_element) {
  /* zeros f32[2,3], except device 5 = (i=2, j=1) has 7.5 at [1][2]; out
   * P(None, 'j') untiles i: device 5 differs from device 1 = (0, 1). */
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  targ *t = targ_new();
  const char *os[] = {"P(None, 'j')"};
  const char *msg;
  int64_t oshape[2] = {2, 6};
  shmap_array *y = NULL;
  float *h;
  int rc;
  t->mode = MM_REP_ELEMENT;
  t->bad_dev = 5;
  msg = expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 1, os, 0,
                         SHMAP_EREPLICATION, "7.5", "P(None, 'j')");
  ck_assert_msg(t_has_dev(msg, 5) && (t_has_dev(msg, 1) || t_has_dev(msg, 3)),
                "message does not name devices 5 and 1: %s", msg);
  ck_assert_msg(t_has(msg, "[1,2]") || t_has(msg, "[1, 2]"),
                "message lacks the element [1,2]: %s", msg);
  ck_assert_msg(t_has(msg, "'i'"), "message lacks the axis 'i': %s", msg);
  check_mesh_usable(m);
  rc = shmap_map_flags(m, body_mismatch, t, 0, NULL, NULL, 1, &y, os,
                       SHMAP_NO_CHECK_REP);
  ck_assert_msg(rc == 0, "unchecked: %d %s", rc, shmap_errmsg());
  expect_shape(y, SHMAP_F32, 2, oshape);
  h = tu_array_to_host(y, NULL);
  for (int e = 0; e < 12; e++)
    ck_assert_msg(h[e] == 0.0f, "y[%d] = %g", e, h[e]);
  free(h);
  shmap_array_destroy(y);

  /* fully replicated output P(): also compared against device 0 */
  os[0] = "P()";
  msg = expect_map_error(m, body_mismatch, t, 0, NULL, NULL, 1, os, 0,
                         SHMAP_EREPLICATION, "7.5", NULL);
  ck_assert_msg(t_has_dev(msg, 5), "message: %s", msg);
  /* when the odd device is named by the out spec, nothing is untiled */
  os[0] = "P('i', 'j')";
  y = NULL;
  rc = shmap_map(m, body_mismatch, t, 0, NULL, NULL, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  h = tu_array_to_host(y, NULL);
  /* (8, 6): device 5's block at rows 4-5, cols 3-5 */
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 6; c++)
      ck_assert(h[r * 6 + c] == (r == 5 && c == 5 ? 7.5f : 0.0f));
  free(h);
  shmap_array_destroy(y);
  free(t);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(replication_equal_ok) {
  /* the blocks of a P('j') input are equal along i: untiling i is legal */
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[1] = {6};
  shmap_array *x = tu_arange_f32(1, shape), *y = NULL;
  const char *is[] = {"P('j')"}, *os[] = {"P('j')"};
  float *h;
  int rc = shmap_map(m, body_double, NULL, 1, &x, is, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  h = tu_array_to_host(y, NULL);
  for (int e = 0; e < 6; e++)
    ck_assert(h[e] == 2.0f * e);
  free(h);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

static int body_neg_zero(shmap_ctx *ctx, void *arg) {
  int64_t one[1] = {1};
  shmap_block *o = shmap_out(ctx, 0, SHMAP_F64, 1, one);
  (void)arg;
  if (o == NULL)
    return shmap_fail(ctx, "out");
  ((double *)o->data)[0] = shmap_ctx_device(ctx) == 1 ? -0.0 : 0.0;
  return 0;
}

START_TEST(replication_bitwise) {
  /* -0.0 and 0.0 are equal by value but differ bitwise */
  shmap_mesh *m = tu_mesh_new("i=2");
  const char *os[] = {"P()"};
  expect_map_error(m, body_neg_zero, NULL, 0, NULL, NULL, 1, os, 0,
                   SHMAP_EREPLICATION, NULL, NULL);
  shmap_mesh_destroy(m);
}
END_TEST

/* A bad call inside a body: it returns NULL or an error, and (unless it
 * is about ctx itself) fails the map with its code, whatever the body
 * returns afterwards.  Only device `bad_dev` makes the call. */
enum {
  BC_IN_RANGE,      /* shmap_in(ctx, 1) with one input */
  BC_IN_NEG,        /* shmap_in(ctx, -1) */
  BC_OUT_RANGE,     /* shmap_out(ctx, 1, ...) with one output */
  BC_OUT_NEG,       /* shmap_out(ctx, -1, ...) */
  BC_OUT_DTYPE,     /* shmap_out with invalid dtype */
  BC_OUT_RANK_NEG,  /* rank -1 */
  BC_OUT_RANK_BIG,  /* rank 9 */
  BC_OUT_DIM_NEG,   /* a negative dimension */
  BC_OUT_SHAPE_NULL,/* shape NULL with rank 2 */
  BC_OUT_TWICE,     /* output 0 declared twice */
  BC_COPY_RANGE,    /* shmap_out_copy(ctx, 1, in) */
  BC_COPY_NULL,     /* shmap_out_copy(ctx, 0, NULL) */
  BC_SET_RANGE,     /* shmap_out_set(ctx, 1, in) */
  BC_SET_NULL,      /* shmap_out_set(ctx, 0, NULL) */
  BC_ALLOC_DTYPE,   /* shmap_block_alloc with invalid dtype */
  BC_FREE_INPUT,    /* shmap_block_free of an input block */
  BC_NESTED_MAP,    /* shmap_map from inside a body */
  BC_COUNT
};

static const struct {
  const char *what;
  int code;
} BC_EXPECT[BC_COUNT] = {
    {"shmap_in(ctx, 1)", SHMAP_EINVAL},
    {"shmap_in(ctx, -1)", SHMAP_EINVAL},
    {"shmap_out(ctx, 1)", SHMAP_EINVAL},
    {"shmap_out(ctx, -1)", SHMAP_EINVAL},
    {"shmap_out(invalid dtype)", SHMAP_EDTYPE},
    {"shmap_out(rank -1)", SHMAP_ESHAPE},
    {"shmap_out(rank 9)", SHMAP_ESHAPE},
    {"shmap_out(dim -1)", SHMAP_ESHAPE},
    {"shmap_out(shape NULL)", SHMAP_EINVAL},
    {"shmap_out twice", SHMAP_EINVAL},
    {"shmap_out_copy(ctx, 1)", SHMAP_EINVAL},
    {"shmap_out_copy(NULL src)", SHMAP_EINVAL},
    {"shmap_out_set(ctx, 1)", SHMAP_EINVAL},
    {"shmap_out_set(NULL block)", SHMAP_EINVAL},
    {"shmap_block_alloc(invalid dtype)", SHMAP_EDTYPE},
    {"shmap_block_free(input)", SHMAP_EINVAL},
    {"nested shmap_map", SHMAP_ESTATE},
};

static int body_bad_call(shmap_ctx *ctx, void *arg) {
  targ *t = arg;
  const shmap_block *in = shmap_in(ctx, 0);
  int64_t s2[2] = {2, 2}, neg[2] = {2, -1};
  int bad = shmap_ctx_device(ctx) == t->bad_dev;
  int failed = 0;
  if (in == NULL)
    return shmap_fail(ctx, "shmap_in(0) failed");
  if (bad) {
    switch (t->mode) {
    case BC_IN_RANGE:
      failed = shmap_in(ctx, 1) == NULL;
      break;
    case BC_IN_NEG:
      failed = shmap_in(ctx, -1) == NULL;
      break;
    case BC_OUT_RANGE:
      failed = shmap_out(ctx, 1, SHMAP_F32, 2, s2) == NULL;
      break;
    case BC_OUT_NEG:
      failed = shmap_out(ctx, -1, SHMAP_F32, 2, s2) == NULL;
      break;
    case BC_OUT_DTYPE:
      failed = shmap_out(ctx, 0, (shmap_dtype)(SHMAP_NDTYPES + 2), 2, s2) == NULL;
      break;
    case BC_OUT_RANK_NEG:
      failed = shmap_out(ctx, 0, SHMAP_F32, -1, s2) == NULL;
      break;
    case BC_OUT_RANK_BIG:
      failed = shmap_out(ctx, 0, SHMAP_F32, SHMAP_MAX_RANK + 1, s2) == NULL;
      break;
    case BC_OUT_DIM_NEG:
      failed = shmap_out(ctx, 0, SHMAP_F32, 2, neg) == NULL;
      break;
    case BC_OUT_SHAPE_NULL:
      failed = shmap_out(ctx, 0, SHMAP_F32, 2, NULL) == NULL;
      break;
    case BC_OUT_TWICE:
      failed = shmap_out_copy(ctx, 0, in) != NULL &&
               shmap_out_copy(ctx, 0, in) == NULL;
      /* output 0 stays declared: return without declaring it again */
      return failed ? 0 : shmap_fail(ctx, "second declaration accepted");
    case BC_COPY_RANGE:
      failed = shmap_out_copy(ctx, 1, in) == NULL;
      break;
    case BC_COPY_NULL:
      failed = shmap_out_copy(ctx, 0, NULL) == NULL;
      break;
    case BC_SET_RANGE:
      failed = shmap_out_set(ctx, 1, (shmap_block *)in) < 0;
      break;
    case BC_SET_NULL:
      failed = shmap_out_set(ctx, 0, NULL) < 0;
      break;
    case BC_ALLOC_DTYPE:
      failed = shmap_block_alloc(ctx, (shmap_dtype)(SHMAP_NDTYPES + 2), 1, s2) == NULL;
      break;
    case BC_FREE_INPUT:
      failed = shmap_block_free(ctx, (shmap_block *)in) < 0;
      break;
    case BC_NESTED_MAP: {
      shmap_array *y = NULL;
      const char *os[] = {"P()"};
      failed = shmap_map((shmap_mesh *)shmap_ctx_mesh(ctx), body_nothing, t,
                         0, NULL, NULL, 1, &y, os) == SHMAP_ESTATE &&
               y == NULL;
      break;
    }
    }
    if (!failed)
      return shmap_fail(ctx, "bad call %s did not fail", BC_EXPECT[t->mode].what);
  }
  /* whatever the body does afterwards, the map fails with the call's code */
  (void)shmap_out_copy(ctx, 0, in);
  return 0;
}

START_TEST(err_bad_calls_in_body) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  int64_t shape[1] = {8};
  shmap_array *x = tu_arange_f32(1, shape);
  const char *is[] = {"P('i')"}, *os[] = {"P('i')"};
  targ *t = targ_new();
  for (int mode = 0; mode < BC_COUNT; mode++) {
    shmap_array *y = NULL;
    int rc;
    t->mode = mode;
    t->bad_dev = mode % 8;
    rc = shmap_map(m, body_bad_call, t, 1, &x, is, 1, &y, os);
    ck_assert_msg(rc == BC_EXPECT[mode].code,
                  "%s on device %d: map returned %d (%s), want %d (%s); "
                  "message: %s",
                  BC_EXPECT[mode].what, mode % 8, rc, shmap_strerror(rc),
                  BC_EXPECT[mode].code, shmap_strerror(BC_EXPECT[mode].code),
                  shmap_errmsg());
    ck_assert_ptr_null(y);
    ck_assert_msg(strlen(shmap_errmsg()) > 0, "%s: empty message",
                  BC_EXPECT[mode].what);
  }
  check_mesh_usable(m);
  free(t);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* Calls about ctx itself (NULL) return an error but do not fail the map;
 * a NULL block is ignored by shmap_block_free. */
static int body_null_ctx_calls(shmap_ctx *ctx, void *arg) {
  int64_t s1[1] = {1};
  (void)arg;
  if (shmap_in(NULL, 0) != NULL)
    return shmap_fail(ctx, "shmap_in(NULL) not NULL");
  if (shmap_out(NULL, 0, SHMAP_F32, 1, s1) != NULL)
    return shmap_fail(ctx, "shmap_out(NULL) not NULL");
  if (shmap_block_alloc(NULL, SHMAP_F32, 1, s1) != NULL)
    return shmap_fail(ctx, "shmap_block_alloc(NULL) not NULL");
  if (shmap_fail(NULL, "x") != SHMAP_EINVAL)
    return shmap_fail(ctx, "shmap_fail(NULL) not SHMAP_EINVAL");
  if (shmap_ctx_device(NULL) != SHMAP_EINVAL)
    return shmap_fail(ctx, "shmap_ctx_device(NULL) not SHMAP_EINVAL");
  if (shmap_ctx_mesh(NULL) != NULL)
    return shmap_fail(ctx, "shmap_ctx_mesh(NULL) not NULL");
  if (shmap_block_free(ctx, NULL) != 0)
    return shmap_fail(ctx, "shmap_block_free(NULL) failed");
  /* rank 0 with a NULL shape is fine */
  return shmap_out(ctx, 0, SHMAP_I32, 0, NULL) != NULL
             ? 0
             : shmap_fail(ctx, "rank-0 output: %s", shmap_errmsg());
}

START_TEST(null_ctx_calls) {
  shmap_mesh *m = tu_mesh_new("i=3");
  shmap_array *y = NULL;
  const char *os[] = {"P()"};
  int rc = shmap_map(m, body_null_ctx_calls, NULL, 0, NULL, NULL, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  ck_assert_int_eq(shmap_array_rank(y), 0);
  shmap_array_destroy(y);
  shmap_mesh_destroy(m);
}
END_TEST

static int body_save_ctx(shmap_ctx *ctx, void *arg) {
  shmap_ctx **saved = arg;
  saved[shmap_ctx_device(ctx)] = ctx;
  return 0;
}

START_TEST(stale_ctx) {
  /* a context kept after its body returned is refused (SHMAP_ESTATE) */
  shmap_mesh *m = tu_mesh_new("i=2");
  shmap_ctx *saved[2] = {NULL, NULL};
  int64_t s1[1] = {1};
  ck_assert_int_eq(
      shmap_map(m, body_save_ctx, saved, 0, NULL, NULL, 0, NULL, NULL), 0);
  ck_assert_ptr_nonnull(saved[0]);
  ck_assert_int_eq(shmap_ctx_device(saved[0]), SHMAP_ESTATE);
  ck_assert_ptr_null(shmap_in(saved[1], 0));
  ck_assert_ptr_null(shmap_out(saved[0], 0, SHMAP_F32, 1, s1));
  ck_assert_int_eq(shmap_fail(saved[1], "late"), SHMAP_ESTATE);
  check_mesh_usable(m);
  shmap_mesh_destroy(m);
}
END_TEST

/* An unknown axis given to axis_index fails the map with SHMAP_EAXIS,
 * whatever the body returns afterwards. */
static int body_bad_axis(shmap_ctx *ctx, void *arg) {
  int64_t one[1] = {1};
  (void)arg;
  if (shmap_ctx_device(ctx) == 1 && shmap_axis_index(ctx, "nosuchaxis") >= 0)
    return shmap_fail(ctx, "unknown axis accepted");
  return shmap_out(ctx, 0, SHMAP_I32, 1, one) != NULL ? 0 : 0;
}

START_TEST(err_axis_index_unknown) {
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  const char *os[] = {"P(('i','j'))"};
  expect_map_error(m, body_bad_axis, NULL, 0, NULL, NULL, 1, os, 0,
                   SHMAP_EAXIS, "nosuchaxis", NULL);
  check_mesh_usable(m);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(err_flags) {
  shmap_mesh *m = tu_mesh_new("i=2");
  shmap_array *y = NULL;
  const char *os[] = {"P()"};
  ck_assert_int_eq(shmap_map_flags(m, body_coord_value, NULL, 0, NULL, NULL, 1,
                                   &y, os, 0x2u),
                   SHMAP_EINVAL);
  ck_assert_ptr_null(y);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(zero_size) {
  /* an empty array: i=2 divides 0 */
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  int64_t shape[2] = {0, 3}, oshape[2] = {0, 6};
  shmap_array *x = NULL, *y = NULL;
  const char *is[] = {"P('i')"}, *os[] = {"P('i', 'j')"};
  targ *t = targ_new();
  int rc;
  ck_assert_int_eq(shmap_array_from_host(&x, SHMAP_F64, 2, shape, NULL), 0);
  ck_assert_int_eq(shmap_array_numel(x), 0);
  rc = shmap_map(m, body_identity, t, 1, &x, is, 1, &y, os);
  ck_assert_msg(rc == 0, "map: %d %s", rc, shmap_errmsg());
  expect_shape(y, SHMAP_F64, 2, oshape);
  for (int dev = 0; dev < 4; dev++) {
    ck_assert_int_eq(t->seen_shape[dev][0], 0);
    ck_assert_int_eq(t->seen_shape[dev][1], 3);
  }
  free(t);
  shmap_array_destroy(x);
  shmap_array_destroy(y);
  shmap_mesh_destroy(m);
}
END_TEST

/* Maps from two threads at once: on one mesh they take turns, on two
 * meshes they may overlap; every result is right. */
typedef struct mt_arg {
  shmap_mesh *mesh;
  int iters;
  int errors;
  char msg[256];
} mt_arg;

static void *mt_thread(void *p) {
  mt_arg *a = p;
  int64_t shape[2] = {8, 4};
  shmap_array *x = NULL;
  float host[32];
  const char *is[] = {"P('i')"}, *os[] = {"P('i')"};
  for (int e = 0; e < 32; e++)
    host[e] = (float)e;
  if (shmap_array_from_host(&x, SHMAP_F32, 2, shape, host) != 0) {
    a->errors++;
    return NULL;
  }
  for (int it = 0; it < a->iters; it++) {
    shmap_array *y = NULL;
    float back[32];
    int rc = shmap_map(a->mesh, body_identity, NULL, 1, &x, is, 1, &y, os);
    if (rc != 0) {
      a->errors++;
      snprintf(a->msg, sizeof a->msg, "%d %s", rc, shmap_errmsg());
      continue;
    }
    shmap_array_to_host(y, back);
    if (memcmp(back, host, sizeof host) != 0) {
      a->errors++;
      snprintf(a->msg, sizeof a->msg, "wrong output");
    }
    shmap_array_destroy(y);
  }
  shmap_array_destroy(x);
  return NULL;
}

START_TEST(maps_from_threads) {
  shmap_mesh *m1 = tu_mesh_new("i=4"), *m2 = tu_mesh_new("i=2, j=2");
  mt_arg args[4] = {{m1, 40, 0, ""}, {m1, 40, 0, ""}, {m2, 40, 0, ""},
                    {m2, 40, 0, ""}};
  pthread_t th[4];
  for (int k = 0; k < 4; k++)
    ck_assert_int_eq(pthread_create(&th[k], NULL, mt_thread, &args[k]), 0);
  for (int k = 0; k < 4; k++)
    ck_assert_int_eq(pthread_join(th[k], NULL), 0);
  for (int k = 0; k < 4; k++)
    ck_assert_msg(args[k].errors == 0, "thread %d: %d errors, last: %s", k,
                  args[k].errors, args[k].msg);
  shmap_mesh_destroy(m1);
  shmap_mesh_destroy(m2);
}
END_TEST

START_TEST(err_outside_body) {
  /* body-only calls with no body running */
  int64_t s[1] = {1};
  ck_assert_ptr_null(shmap_in(NULL, 0));
  ck_assert_ptr_null(shmap_out(NULL, 0, SHMAP_F32, 1, s));
  ck_assert_ptr_null(shmap_block_alloc(NULL, SHMAP_F32, 1, s));
  ck_assert_int_eq(shmap_ctx_device(NULL), SHMAP_EINVAL);
  ck_assert_ptr_null(shmap_ctx_mesh(NULL));
  ck_assert_int_eq(shmap_fail(NULL, "%d", 1), SHMAP_EINVAL);
}
END_TEST

static Suite *map_suite(void) {
  Suite *s = suite_create("map");
  TCase *tc = tcase_create("seed");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, seed_tile);
  tcase_add_test(tc, seed_block_transpose);
  tcase_add_test(tc, seed_block_transpose_axis_index);
  suite_add_tcase(s, tc);

  tc = tcase_create("arrays");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, dtype_roundtrip);
  tcase_add_test(tc, host_arrays);
  tcase_add_test(tc, host_array_errors);
  tcase_add_test(tc, strerror_codes);
  tcase_add_test(tc, err_names);
  suite_add_tcase(s, tc);

  tc = tcase_create("maps");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, private_inputs);
  tcase_add_test(tc, two_in_two_out);
  tcase_add_test(tc, no_outputs);
  tcase_add_test(tc, scalar_map);
  tcase_add_test(tc, out_variants);
  tcase_add_test(tc, short_out_spec_pads);
  tcase_add_test(tc, single_device_and_sixteen);
  tcase_add_test(tc, repeated_maps);
  tcase_add_test(tc, two_meshes);
  tcase_add_test(tc, zero_size);
  tcase_add_test(tc, maps_from_threads);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, err_in_specs);
  tcase_add_test(tc, err_out_specs);
  tcase_add_test(tc, err_null_args);
  tcase_add_test(tc, err_output_mismatch);
  tcase_add_test(tc, err_body_fails);
  tcase_add_test(tc, err_replication_seed);
  tcase_add_test(tc, err_replication_element);
  tcase_add_test(tc, replication_equal_ok);
  tcase_add_test(tc, replication_bitwise);
  tcase_add_test(tc, err_bad_calls_in_body);
  tcase_add_test(tc, null_ctx_calls);
  tcase_add_test(tc, stale_ctx);
  tcase_add_test(tc, err_flags);
  tcase_add_test(tc, err_axis_index_unknown);
  tcase_add_test(tc, err_outside_body);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return tu_run_suite(map_suite());
}
