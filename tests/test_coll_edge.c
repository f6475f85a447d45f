/* SPDX-License-Identifier: MIT */
/*
 * test_coll_edge.c - collectives at the edges of their input, in thread
 * and fiber mode:
 *
 *   empty blocks (a dimension of size 0) whose data pointer is NULL, as
 *   shmap_block_alloc() and a host array may give them, through every
 *   collective -- the reductions in place and out of place, psum_scatter,
 *   all_gather, all_to_all, ppermute, pbroadcast, the asynchronous starts,
 *   the grouped forms, ragged_all_to_all and preduce -- over groups of 1,
 *   2, 4 and 8 members: each returns 0 with the result's exact shape (the
 *   UndefinedBehaviorSanitizer build, whose configure flags make it abort,
 *   checks that no copy is given a NULL pointer);
 *
 *   signalling NaNs through pmax and pmin of f32 and f64 (in place, out of
 *   place, grouped; 5 and 4099 elements, so that both the vector loops and
 *   the tails fold them): the result is the first NaN in rank order with
 *   its quiet bit set, its sign and payload kept, bit for bit, as
 *   shmap_psum(3) says.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define TIMEOUT 120

static const char *const modes[2] = {"threads", "fibers"};

/* ---- empty blocks with NULL data -------------------------------------------- */

typedef struct empty_arg {
  const char *axes;
  int g; /* the group's size */
  shmap_dtype dt;
} empty_arg;

/* A result's shape, or a failure naming the call. */
static int want_shape(shmap_ctx *ctx, const empty_arg *a, const char *call,
                      const shmap_block *out, int rank, int64_t d0, int64_t d1,
                      int64_t d2)
{
  const int64_t want[3] = {d0, d1, d2};
  int ok = out && out->rank == rank && out->dtype == a->dt;
  for (int k = 0; ok && k < rank; k++)
    ok = out->shape[k] == want[k];
  if (!ok)
    return shmap_fail(ctx, "%s over '%s', %s: result rank %d [%lld, %lld]",
                      call, a->axes, shmap_dtype_name(a->dt),
                      out ? out->rank : -1,
                      out ? (long long)out->shape[0] : -1LL,
                      out ? (long long)out->shape[1] : -1LL);
  return 0;
}

#define CALL(expr)                                                             \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_)                                                                   \
      return shmap_fail(ctx, "%s over '%s', %s: %d (%s)", #expr, a->axes,      \
                        shmap_dtype_name(a->dt), rc_, shmap_errmsg());         \
  } while (0)

#define SHAPE(call, out, rank, d0, d1, d2)                                     \
  do {                                                                         \
    int rc_ = want_shape(ctx, a, call, out, rank, d0, d1, d2);                 \
    if (rc_)                                                                   \
      return rc_;                                                              \
  } while (0)

static void add_f32(void *inout, const void *in, int64_t count, void *arg)
{
  (void)arg;
  for (int64_t i = 0; i < count; i++)
    ((float *)inout)[i] += ((const float *)in)[i];
}

static int body_empty(shmap_ctx *ctx, void *arg)
{
  const empty_arg *a = arg;
  const int g = a->g;
  const int fl = shmap_dtype_class(a->dt) == SHMAP_CLASS_FLOAT;
  shmap_block *out = NULL;

  /* Reductions, in place and into new blocks, of [0] and [2g, 0]. */
  shmap_block e1 = {NULL, a->dt, 1, {0}};
  shmap_block e2 = {NULL, a->dt, 2, {2 * g, 0}};
  shmap_block *ins[2] = {&e1, &e2};
  for (int k = 0; k < 2; k++) {
    shmap_block *e = ins[k];
    CALL(shmap_psum(ctx, e, a->axes));
    CALL(shmap_pmax(ctx, e, a->axes));
    CALL(shmap_pmin(ctx, e, a->axes));
    if (fl)
      CALL(shmap_pmean(ctx, e, a->axes));
    CALL(shmap_psum_new(ctx, e, a->axes, &out));
    SHAPE("psum_new", out, e->rank, e->shape[0], e->shape[1], 0);
    CALL(shmap_pmax_new(ctx, e, a->axes, &out));
    SHAPE("pmax_new", out, e->rank, e->shape[0], e->shape[1], 0);
    CALL(shmap_pmin_new(ctx, e, a->axes, &out));
    SHAPE("pmin_new", out, e->rank, e->shape[0], e->shape[1], 0);
    if (fl) {
      CALL(shmap_pmean_new(ctx, e, a->axes, &out));
      SHAPE("pmean_new", out, e->rank, e->shape[0], e->shape[1], 0);
    }
    CALL(shmap_psum_groups(ctx, e, a->axes, NULL));
    CALL(shmap_pmax_groups_new(ctx, e, a->axes, NULL, &out));
    SHAPE("pmax_groups_new", out, e->rank, e->shape[0], e->shape[1], 0);
  }

  /* Shape-changing collectives. */
  shmap_block r0 = {NULL, a->dt, 2, {0, 2 * g}}; /* empty rows */
  CALL(shmap_psum_scatter(ctx, &r0, a->axes, 1, 1, &out));
  SHAPE("psum_scatter", out, 2, 0, 2, 0);
  CALL(shmap_psum_scatter(ctx, &e2, a->axes, 0, 1, &out));
  SHAPE("psum_scatter", out, 2, 2, 0, 0);
  CALL(shmap_psum_scatter(ctx, &r0, a->axes, 0, 1, &out));
  SHAPE("psum_scatter", out, 2, 0, 2 * g, 0);
  CALL(shmap_all_gather(ctx, &r0, a->axes, 0, 1, &out));
  SHAPE("all_gather", out, 2, 0, 2 * g, 0);
  CALL(shmap_all_gather(ctx, &e2, a->axes, 1, 1, &out));
  SHAPE("all_gather", out, 2, 2 * g, 0, 0);
  CALL(shmap_all_gather(ctx, &r0, a->axes, 0, 0, &out));
  SHAPE("all_gather", out, 3, g, 0, 2 * g);
  CALL(shmap_all_to_all(ctx, &e2, a->axes, 0, 1, 1, &out));
  SHAPE("all_to_all", out, 2, 2, 0, 0);
  CALL(shmap_all_to_all(ctx, &r0, a->axes, 1, 0, 1, &out));
  SHAPE("all_to_all", out, 2, 0, 2, 0);

  /* ppermute: a cycle over the group, and a shift (rank 0 is nobody's
   * destination and gets zeros); pbroadcast from the last rank. */
  int pairs[8][2];
  for (int r = 0; r < g; r++) {
    pairs[r][0] = r;
    pairs[r][1] = (r + 1) % g;
  }
  const int(*cycle)[2] = (const int(*)[2])pairs;
  const int(*shift)[2] = (const int(*)[2])pairs; /* its first g-1 pairs */
  CALL(shmap_ppermute(ctx, &e1, a->axes, g, cycle));
  CALL(shmap_ppermute(ctx, &e2, a->axes, g - 1, shift));
  CALL(shmap_ppermute_new(ctx, &e2, a->axes, g, cycle, &out));
  SHAPE("ppermute_new", out, 2, 2 * g, 0, 0);
  CALL(shmap_ppermute_new(ctx, &e1, a->axes, g - 1, shift, &out));
  SHAPE("ppermute_new", out, 1, 0, 0, 0);
  /* A block of the device's own, empty too, permuted in place. */
  shmap_block *own = shmap_block_alloc(ctx, a->dt, 2, (int64_t[]){0, 3});
  if (!own)
    return shmap_fail(ctx, "shmap_block_alloc of [0, 3]: %s", shmap_errmsg());
  for (int it = 0; it < 2; it++) {
    CALL(shmap_ppermute(ctx, own, a->axes, g, cycle));
    CALL(shmap_ppermute(ctx, own, a->axes, g - 1, shift));
    CALL(shmap_psum(ctx, own, a->axes));
  }
  CALL(shmap_pbroadcast(ctx, &e1, a->axes, g - 1));
  CALL(shmap_pbroadcast_new(ctx, &e2, a->axes, g - 1, &out));
  SHAPE("pbroadcast_new", out, 2, 2 * g, 0, 0);

  /* The asynchronous forms. */
  shmap_request *req = NULL;
  CALL(shmap_psum_start(ctx, &e1, a->axes, &req));
  CALL(shmap_wait(ctx, &req));
  CALL(shmap_all_gather_start(ctx, &r0, a->axes, 0, 1, &out, &req));
  CALL(shmap_wait(ctx, &req));
  SHAPE("all_gather_start", out, 2, 0, 2 * g, 0);
  CALL(shmap_psum_scatter_start(ctx, &r0, a->axes, 1, 1, &out, &req));
  CALL(shmap_wait(ctx, &req));
  SHAPE("psum_scatter_start", out, 2, 0, 2, 0);
  CALL(shmap_ppermute_start(ctx, &e2, a->axes, g, cycle, &out, &req));
  CALL(shmap_wait(ctx, &req));
  SHAPE("ppermute_start", out, 2, 2 * g, 0, 0);
  CALL(shmap_ppermute_start(ctx, &e1, a->axes, g - 1, shift, &out, &req));
  CALL(shmap_wait(ctx, &req));
  SHAPE("ppermute_start", out, 1, 0, 0, 0);

  /* Grouped forms with groups of two (or one) consecutive ranks. */
  int ranks[8];
  for (int r = 0; r < g; r++)
    ranks[r] = r;
  const int gs = g % 2 ? 1 : 2;
  shmap_groups grp = {g / gs, gs, ranks};
  CALL(shmap_pmin_groups(ctx, &e1, a->axes, &grp));
  CALL(shmap_all_gather_groups(ctx, &r0, a->axes, &grp, 0, 1, &out));
  SHAPE("all_gather_groups", out, 2, 0, 2 * g, 0);
  CALL(shmap_psum_scatter_groups(ctx, &r0, a->axes, &grp, 1, 1, &out));
  SHAPE("psum_scatter_groups", out, 2, 0, 2 * g / gs, 0);
  CALL(shmap_all_to_all_groups(ctx, &e2, a->axes, &grp, 0, 1, 1, &out));
  SHAPE("all_to_all_groups", out, 2, 2 * g / gs, 0, 0);

  /* ragged_all_to_all of no rows, and preduce (f32 only: its combine). */
  int64_t zeros[8] = {0};
  shmap_block rin = {NULL, a->dt, 2, {0, 3}};
  shmap_block rout = {NULL, a->dt, 2, {0, 3}};
  CALL(shmap_ragged_all_to_all(ctx, &rin, &rout, zeros, zeros, zeros, zeros,
                               a->axes));
  if (a->dt == SHMAP_F32) {
    shmap_reduce_op op = {"add_f32", add_f32, NULL, 0};
    CALL(shmap_preduce(ctx, &e2, a->axes, &op));
    CALL(shmap_preduce_new(ctx, &e1, a->axes, &op, &out));
    SHAPE("preduce_new", out, 1, 0, 0, 0);
  }
  return 0;
}

START_TEST(test_empty_null_blocks)
{
  static const struct {
    const char *axes;
    int g;
  } groups[] = {{"", 1}, {"i", 2}, {"j", 4}, {"i, j", 8}};
  static const shmap_dtype dts[] = {SHMAP_F32, SHMAP_F64, SHMAP_BF16,
                                    SHMAP_I32, SHMAP_U8};
  for (int m = 0; m < 2; m++) {
    ck_assert_int_eq(setenv("SHMAP_SCHED", modes[m], 1), 0);
    ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
    /* The asynchronous calls' checksums too, in one of the modes. */
    ck_assert_int_eq(setenv("SHMAP_ASYNC_CHECK", m ? "1" : "0", 1), 0);
    shmap_mesh *mesh = tu_mesh_new("i=2, j=4");
    for (size_t k = 0; k < sizeof groups / sizeof groups[0]; k++)
      for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
        empty_arg a = {groups[k].axes, groups[k].g, dts[t]};
        char what[96];
        snprintf(what, sizeof what, "%s, axes '%s', %s", modes[m], a.axes,
                 shmap_dtype_name(a.dt));
        tu_map_ok(shmap_map(mesh, body_empty, &a, 0, NULL, NULL, 0, NULL,
                            NULL),
                  what);
      }
    shmap_mesh_destroy(mesh);
  }
  ck_assert_int_eq(unsetenv("SHMAP_ASYNC_CHECK"), 0);
}
END_TEST

/* ---- signalling NaNs through pmax and pmin ---------------------------------- */

#define NDEV 4
#define F32_QUIET UINT64_C(0x00400000)
#define F64_QUIET UINT64_C(0x0008000000000000)

typedef struct nan_arg {
  int f64;      /* f64, else f32 */
  int n;        /* elements per device */
  int variant;  /* 0 in place, 1 out of place, 2 grouped in place */
  int max;      /* pmax, else pmin */
  const char *axes;
  int g;        /* the group's size */
  uint64_t *got; /* [NDEV][n] result bits */
} nan_arg;

static uint64_t sig_nan(int f64, int neg, uint64_t payload)
{
  /* Exponent all ones, quiet bit clear, payload nonzero. */
  if (f64)
    return (neg ? UINT64_C(0x8000000000000000) : 0) |
           UINT64_C(0x7ff0000000000000) | (payload & UINT64_C(0x7ffffffffffff));
  return (neg ? UINT64_C(0x80000000) : 0) | UINT64_C(0x7f800000) |
         (payload & UINT64_C(0x3fffff));
}

static uint64_t quiet_nan(int f64, uint64_t payload)
{
  return sig_nan(f64, 0, payload) | (f64 ? F64_QUIET : F32_QUIET);
}

static uint64_t num_bits(int f64, double v)
{
  if (f64) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return u;
  }
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* The bits rank r of a group holds at element k (rank = device % g for
 * the group layouts used: "i" over i=4). */
static uint64_t input_bits(int f64, int r, int g, int k)
{
  switch (k % 7) {
  case 0: /* ordinary numbers */
    return num_bits(f64, (double)((r * 7 + k) % 11) - 5.0);
  case 1: /* one sNaN on rank (k / 7) % g */
    return r == (k / 7) % g ? sig_nan(f64, 0, (uint64_t)k + 1)
                            : num_bits(f64, (double)r);
  case 2: /* a qNaN on rank 0, a negative sNaN on the last rank */
    return r == 0 ? quiet_nan(f64, 5)
           : r == g - 1 ? sig_nan(f64, 1, 9) : num_bits(f64, 1.0);
  case 3: /* two sNaNs of both signs: rank 1 then rank 2 */
    return r == 1 % g ? sig_nan(f64, 1, 3)
           : r == 2 % g ? sig_nan(f64, 0, 4) : num_bits(f64, -1.0);
  case 4: /* an sNaN everywhere, each its own payload */
    return sig_nan(f64, r & 1, (uint64_t)(r + 1) * 17);
  case 5: /* -0 on rank 0, +0 elsewhere */
    return r == 0 ? num_bits(f64, -0.0) : num_bits(f64, 0.0);
  default: /* an infinity and a number */
    return r == g - 1 ? num_bits(f64, r % 2 ? -1.0 / 0.0 : 1.0 / 0.0)
                      : num_bits(f64, 2.0);
  }
}

static double as_double(int f64, uint64_t u)
{
  if (f64) {
    double d;
    memcpy(&d, &u, 8);
    return d;
  }
  uint32_t w = (uint32_t)u;
  float f;
  memcpy(&f, &w, 4);
  return f;
}

static int is_nan_bits(int f64, uint64_t u)
{
  return f64 ? (u & UINT64_C(0x7fffffffffffffff)) > UINT64_C(0x7ff0000000000000)
             : (u & UINT64_C(0x7fffffff)) > UINT64_C(0x7f800000);
}

/* IEEE 754-2019 maximum/minimum over ranks 0..g-1, in bits: the first NaN
 * quietened, -0 below +0. */
static uint64_t expect_bits(int f64, int max, int g, int k)
{
  uint64_t acc = input_bits(f64, 0, g, k);
  for (int r = 0; r < g; r++) {
    uint64_t x = input_bits(f64, r, g, k);
    if (is_nan_bits(f64, x))
      return x | (f64 ? F64_QUIET : F32_QUIET);
    if (r == 0)
      continue;
    double da = as_double(f64, acc), dx = as_double(f64, x);
    if (max ? dx > da : dx < da)
      acc = x;
    else if (dx == da)
      acc = max ? (acc & x) : (acc | x);
  }
  return acc;
}

static int body_nan(shmap_ctx *ctx, void *arg)
{
  const nan_arg *a = arg;
  int dev = shmap_ctx_device(ctx);
  /* With axes "" each device is a group of its own, of rank 0. */
  int rank = a->g == 1 ? 0 : shmap_axis_index(ctx, a->axes);
  if (rank < 0)
    return rank;
  int rc;
  size_t es = a->f64 ? 8 : 4;
  shmap_dtype dt = a->f64 ? SHMAP_F64 : SHMAP_F32;
  shmap_block *x = shmap_block_alloc(ctx, dt, 1, (int64_t[]){a->n});
  if (!x)
    return shmap_fail(ctx, "no block");
  for (int k = 0; k < a->n; k++) {
    uint64_t u = input_bits(a->f64, rank, a->g, k);
    uint32_t w = (uint32_t)u;
    memcpy((char *)x->data + (size_t)k * es, a->f64 ? (void *)&u : (void *)&w,
           es);
  }
  shmap_block *res = x;
  switch (a->variant) {
  case 0:
    rc = a->max ? shmap_pmax(ctx, x, a->axes) : shmap_pmin(ctx, x, a->axes);
    break;
  case 1:
    rc = a->max ? shmap_pmax_new(ctx, x, a->axes, &res)
                : shmap_pmin_new(ctx, x, a->axes, &res);
    break;
  default:
    rc = a->max ? shmap_pmax_groups(ctx, x, a->axes, NULL)
                : shmap_pmin_groups(ctx, x, a->axes, NULL);
    break;
  }
  if (rc)
    return rc;
  for (int k = 0; k < a->n; k++) {
    uint64_t u = 0;
    uint32_t w = 0;
    if (a->f64)
      memcpy(&u, (char *)res->data + (size_t)k * 8, 8);
    else {
      memcpy(&w, (char *)res->data + (size_t)k * 4, 4);
      u = w;
    }
    a->got[(size_t)dev * (size_t)a->n + (size_t)k] = u;
  }
  return 0;
}

START_TEST(test_pmax_pmin_quieten_snan)
{
  static const char *const vnames[3] = {"in place", "out of place",
                                        "grouped"};
  static const struct {
    const char *axes;
    int g;
  } groups[] = {{"i", NDEV}, {"", 1}};
  static const int sizes[] = {5, 4099};
  for (int m = 0; m < 2; m++) {
    ck_assert_int_eq(setenv("SHMAP_SCHED", modes[m], 1), 0);
    ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
    shmap_mesh *mesh = tu_mesh_new("i=4");
    for (int f64 = 0; f64 < 2; f64++)
      for (int max = 0; max < 2; max++)
        for (int v = 0; v < 3; v++)
          for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
              int n = sizes[s];
              uint64_t *got = calloc((size_t)NDEV * (size_t)n, 8);
              ck_assert_ptr_nonnull(got);
              nan_arg a = {f64, n, v, max, groups[gi].axes, groups[gi].g, got};
              char what[128];
              snprintf(what, sizeof what, "%s, %s %s %s, %d elements, axes '%s'",
                       modes[m], max ? "pmax" : "pmin", f64 ? "f64" : "f32",
                       vnames[v], n, a.axes);
              tu_map_ok(shmap_map(mesh, body_nan, &a, 0, NULL, NULL, 0, NULL,
                                  NULL),
                        what);
              for (int d = 0; d < NDEV; d++)
                for (int k = 0; k < n; k++) {
                  uint64_t want = expect_bits(f64, max, a.g, k);
                  uint64_t have = got[(size_t)d * (size_t)n + (size_t)k];
                  ck_assert_msg(have == want,
                                "%s: device %d element %d (case %d): got "
                                "0x%llx, want 0x%llx",
                                what, d, k, k % 7, (unsigned long long)have,
                                (unsigned long long)want);
                }
              free(got);
            }
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

int main(void)
{
  Suite *s = suite_create("coll_edge");
  TCase *tc = tcase_create("edge");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, test_empty_null_blocks);
  tcase_add_test(tc, test_pmax_pmin_quieten_snan);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
