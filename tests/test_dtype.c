/* SPDX-License-Identifier: MIT */
/*
 * test_dtype.c - the dtype table, the 16-bit float conversions, and the
 * fused reduction kernels of every instruction set this CPU runs, against
 * the serial reference model (tests/refcoll.c); then the per-dtype rules
 * for NaN, signed zeros, wrapping and rounding through real maps, in both
 * scheduling modes.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#include "dtype.h"
#include "refcoll.h"
#include "testutil.h"

/* Bounds, not timings: the exhaustive checks take seconds, many more
 * under the sanitizers on a loaded machine. */
#define TIMEOUT 600

static const ref_redop redops[SHMAP__NOPS] = {
    [SHMAP__OP_SUM] = REF_SUM, [SHMAP__OP_MAX] = REF_MAX,
    [SHMAP__OP_MIN] = REF_MIN, [SHMAP__OP_MEAN] = REF_MEAN};
static const char *const opnames[SHMAP__NOPS] = {"psum", "pmax", "pmin",
                                                 "pmean"};

/* ---- the table --------------------------------------------------------------- */

/* Names, sizes and classes agree with the model's own list; a kernel is
 * missing exactly where the table says the reduction is not allowed, and
 * there the model refuses it too; result dtypes agree. */
START_TEST(t_table)
{
  ck_assert_int_eq(ref_ndtypes(), SHMAP_NDTYPES);
  static const int cls[] = {['f'] = SHMAP_CLASS_FLOAT,
                            ['s'] = SHMAP_CLASS_SIGNED,
                            ['u'] = SHMAP_CLASS_UNSIGNED,
                            ['b'] = SHMAP_CLASS_BOOL,
                            ['c'] = SHMAP_CLASS_COMPLEX};
  for (int k = 0; k < SHMAP_NDTYPES; k++) {
    shmap_dtype dt = ref_dtype_at(k);
    const shmap__dtype_info *t = shmap__dtype(dt);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(shmap_dtype_name(dt), ref_dtname(dt));
    ck_assert_uint_eq(shmap_dtype_size(dt), ref_esize(dt));
    ck_assert_int_eq(shmap_dtype_class(dt), cls[(int)ref_dtclass(dt)]);
    for (int op = 0; op < SHMAP__NOPS; op++) {
      int refused = ref_reduce_allowed(redops[op], dt) != 0;
      ck_assert_msg((t->not_allowed[op] != NULL) == refused,
                    "%s on %s: table and model disagree", opnames[op],
                    t->name);
      ck_assert_int_eq(t->result[op], ref_reduce_dtype(redops[op], dt));
      for (int isa = 0; isa < SHMAP__NISA; isa++)
        if (shmap__kern_built[isa])
          ck_assert_msg((shmap__kernel_isa(isa, op, dt) == NULL) == refused,
                        "%s on %s, %s kernel", opnames[op], t->name,
                        shmap__isa_name(isa));
    }
  }
  ck_assert_ptr_null(shmap__dtype((shmap_dtype)SHMAP_NDTYPES));
  ck_assert_ptr_null(shmap__dtype((shmap_dtype)-1));
  ck_assert_int_eq(shmap_dtype_class((shmap_dtype)SHMAP_NDTYPES), SHMAP_EDTYPE);
  ck_assert_msg(strstr(shmap_errmsg(), "invalid dtype 15") != NULL, "%s",
                shmap_errmsg());
  /* The formatter of each class. */
  char buf[64];
  uint16_t h = shmap_f32_to_bf16(-1.5f);
  shmap__dtype_format(SHMAP_BF16, &h, buf, sizeof buf);
  ck_assert_str_eq(buf, "-1.5");
  uint8_t b = 1;
  shmap__dtype_format(SHMAP_BOOL, &b, buf, sizeof buf);
  ck_assert_str_eq(buf, "true");
  b = 7;
  shmap__dtype_format(SHMAP_BOOL, &b, buf, sizeof buf);
  ck_assert_str_eq(buf, "true (byte 7)");
  float c[2] = {1, -2};
  shmap__dtype_format(SHMAP_C64, c, buf, sizeof buf);
  ck_assert_str_eq(buf, "1-2j");
  uint64_t u = UINT64_MAX;
  shmap__dtype_format(SHMAP_U64, &u, buf, sizeof buf);
  ck_assert_str_eq(buf, "18446744073709551615");
  int8_t i8 = -128;
  shmap__dtype_format(SHMAP_I8, &i8, buf, sizeof buf);
  ck_assert_str_eq(buf, "-128");
}
END_TEST

/* ---- conversions ------------------------------------------------------------- */

static uint32_t bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float fbits(uint32_t u)
{
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Every bf16 and f16 pattern decodes as the model decodes it. */
START_TEST(t_decode_all)
{
  for (uint32_t h = 0; h < 65536; h++) {
    ck_assert_msg(bits(shmap_bf16_to_f32((uint16_t)h)) ==
                      bits(ref_bf16_to_f32((uint16_t)h)),
                  "bf16 %04x", h);
    ck_assert_msg(bits(shmap_f16_to_f32((uint16_t)h)) ==
                      bits(ref_f16_to_f32((uint16_t)h)),
                  "f16 %04x", h);
  }
}
END_TEST

static void check_encode(float f)
{
  uint16_t a = shmap_f32_to_bf16(f), b = ref_f32_to_bf16(f);
  ck_assert_msg(a == b, "bf16 of %a (%08x): %04x, model %04x", (double)f,
                bits(f), a, b);
  a = shmap_f32_to_f16(f);
  b = ref_f32_to_f16(f);
  ck_assert_msg(a == b, "f16 of %a (%08x): %04x, model %04x", (double)f,
                bits(f), a, b);
}

/* Encoding agrees with the model on every value next to a rounding
 * boundary of either format (each representable value, the halfway
 * points between neighbours and one f32 step either side of them), on
 * every f32 exponent, and on a spread of other patterns. */
START_TEST(t_encode)
{
  for (uint32_t h = 0; h < 65536; h++) {
    float lo = ref_f16_to_f32((uint16_t)h);
    float hi = ref_f16_to_f32((uint16_t)(h + 1));
    uint32_t base[2] = {bits(lo), bits(ref_bf16_to_f32((uint16_t)h))};
    for (int k = 0; k < 2; k++)
      for (int d = -1; d <= 1; d++)
        check_encode(fbits(base[k] + (uint32_t)d));
    if (!isnan(lo) && !isnan(hi) && !isinf(lo) && !isinf(hi) &&
        (h & 0x7fff) != 0x7fff) {
      float mid = (float)(((double)lo + (double)hi) / 2);
      for (int d = -1; d <= 1; d++)
        check_encode(fbits(bits(mid) + (uint32_t)d));
    }
    /* bf16 halfway points: the pattern with bit 15 set. */
    uint32_t bmid = (h << 16) | 0x8000u;
    for (int d = -1; d <= 1; d++)
      check_encode(fbits(bmid + (uint32_t)d));
  }
  for (uint64_t u = 0; u < (1ull << 32); u += 16381)
    check_encode(fbits((uint32_t)u));
}
END_TEST

/* ---- kernels against the model ---------------------------------------------- */

/* Float values that exercise the rules: zeros of both signs, infinities,
 * NaNs with payloads, subnormals, and ordinary numbers. */
static void special_fill(ref_rng *r, shmap_block *b, int specials)
{
  ref_fill_random(r, b);
  if (!specials)
    return;
  int64_t ne = ref_numel(b->rank, b->shape);
  size_t es = ref_esize(b->dtype);
  char c = ref_dtclass(b->dtype);
  if (c != 'f' && c != 'c')
    return;
  int parts = c == 'c' ? 2 : 1;
  size_t ps = es / (size_t)parts;
  for (int64_t i = 0; i < ne; i++)
    for (int part = 0; part < parts; part++) {
      int pick = ref_rng_int(r, 0, 11);
      double v;
      switch (pick) {
      case 0: v = 0.0; break;
      case 1: v = -0.0; break;
      case 2: v = INFINITY; break;
      case 3: v = -INFINITY; break;
      case 4: v = NAN; break;
      case 5: v = 1e-40; break; /* an f32 subnormal */
      default: continue;
      }
      char *p = (char *)b->data + (size_t)i * es + (size_t)part * ps;
      if (b->dtype == SHMAP_F64 || b->dtype == SHMAP_C128) {
        if (pick == 4) {
          uint64_t q = 0x7ff8000000000000ull | (ref_rng_next(r) >> 14);
          memcpy(p, &q, 8);
        } else {
          memcpy(p, &v, 8);
        }
      } else {
        float f = (float)v;
        if (pick == 4)
          f = fbits(0x7fc00000u | (uint32_t)(ref_rng_next(r) >> 42) |
                    (ref_rng_int(r, 0, 1) ? 0x80000000u : 0));
        if (b->dtype == SHMAP_BF16) {
          uint16_t h = ref_f32_to_bf16(f);
          memcpy(p, &h, 2);
        } else if (b->dtype == SHMAP_F16) {
          uint16_t h = ref_f32_to_f16(pick == 5 ? 1e-7f : f); /* subnormal */
          memcpy(p, &h, 2);
        } else {
          memcpy(p, &f, 4);
        }
      }
    }
}

/* Whether element i of got equals want: bitwise, except that a sum or
 * mean that is NaN may be any NaN (IEEE leaves the payload open). */
static int elem_ok(const shmap_block *got, const shmap_block *want,
                   int64_t i, int op)
{
  size_t es = ref_esize(want->dtype);
  const char *g = (const char *)got->data + (size_t)i * es;
  const char *w = (const char *)want->data + (size_t)i * es;
  if (memcmp(g, w, es) == 0)
    return 1;
  if (op == SHMAP__OP_MAX || op == SHMAP__OP_MIN)
    return 0;
  char c = ref_dtclass(want->dtype);
  if (c != 'f' && c != 'c')
    return 0;
  int parts = c == 'c' ? 2 : 1;
  shmap_block one = *got;
  for (int part = 0; part < parts; part++) {
    double gv, wv;
    if (c == 'c') {
      if (want->dtype == SHMAP_C64) {
        gv = ((const float *)g)[part];
        wv = ((const float *)w)[part];
      } else {
        gv = ((const double *)g)[part];
        wv = ((const double *)w)[part];
      }
    } else {
      one.data = (void *)g;
      gv = ref_get(&one, 0);
      one.data = (void *)w;
      wv = ref_get(&one, 0);
    }
    if (!(isnan(gv) && isnan(wv)) &&
        memcmp(&gv, &wv, sizeof gv) != 0)
      return 0;
  }
  return 1;
}

static void kernel_case(ref_rng *r, int isa, int op, shmap_dtype dt, int p,
                        int64_t n, int specials)
{
  shmap__fold_fn fold = shmap__kernel_isa(isa, op, dt);
  ck_assert_ptr_nonnull(fold);
  ref_mesh m;
  const char *names[] = {"i"};
  ck_assert_int_eq(ref_mesh_init(&m, 1, names, &p), 0);
  shmap_block **in = calloc((size_t)p, sizeof *in);
  shmap_block **want = calloc((size_t)p, sizeof *want);
  const void **src = calloc((size_t)p, sizeof *src);
  int64_t shape[1] = {n};
  for (int k = 0; k < p; k++) {
    in[k] = ref_block_new(dt, 1, shape);
    special_fill(r, in[k], specials);
    src[k] = in[k]->data;
  }
  int axes[1] = {0};
  ck_assert_int_eq(ref_reduce(&m, axes, 1, redops[op], in, want), 0);
  shmap_block *got = ref_block_new(want[0]->dtype, 1, shape);
  fold(got->data, src, p, (size_t)n, op == SHMAP__OP_MEAN ? p : 0);
  for (int64_t i = 0; i < n; i++)
    if (!elem_ok(got, want[0], i, op)) {
      char diff[256];
      ref_block_diff(got, want[0], diff, sizeof diff);
      ck_abort_msg("%s kernel, %s on %s, %d members, %" PRId64
                   " elements, element %" PRId64 ": %s",
                   shmap__isa_name(isa), opnames[op], ref_dtname(dt), p, n, i,
                   diff);
    }
  /* The kernel may write over its first source (psum_scatter's and the
   * in-place reductions' pieces never do, but nothing forbids it). */
  ref_block_free(got);
  ref_blocks_free(want, p);
  ref_blocks_free(in, p);
  free(want);
  free(in);
  free(src);
}

/* _i: the instruction set. */
START_TEST(t_kernels)
{
  int isa = _i;
  if (!shmap__kern_built[isa] || !shmap__isa_supported(isa)) {
    fprintf(stderr, "test_dtype: %s kernels not run on this CPU\n",
            shmap__isa_name(isa));
    return;
  }
  /* Sizes around every vector width's steps (up to two 64-byte vectors
   * of i8 per step) and its tail. */
  static const int ps[] = {1, 2, 3, 8, 13};
  static const int64_t ns[] = {0, 1, 7, 31, 64, 65, 129, 257};
  ref_rng r = {ref_seed(0xd7a9e5u) + (uint64_t)isa};
  for (int k = 0; k < SHMAP_NDTYPES; k++)
    for (int op = 0; op < SHMAP__NOPS; op++) {
      shmap_dtype dt = ref_dtype_at(k);
      if (ref_reduce_allowed(redops[op], dt))
        continue;
      for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
          for (int specials = 0; specials < 2; specials++)
            kernel_case(&r, isa, op, dt, ps[a], ns[b], specials);
    }
}
END_TEST

/* ---- the rules through maps ----------------------------------------------------- */

/*
 * Mesh i=4.  Device d holds a block of the dtype, the values given per
 * device as doubles (or raw bits); each case runs one reduction and every
 * device must hold the expected elements.
 */
typedef struct rule_case {
  const char *what;
  shmap_dtype dt;
  int op;          /* SHMAP__OP_* */
  double v[4][2];  /* per device, two elements */
  double want[2];
  int want_bits;   /* compare want as f32 bits too (signed zeros) */
} rule_case;

typedef struct rule_arg {
  const rule_case *c;
  shmap_block *got[4];
  int rc[4];
  char msg[4][256];
} rule_arg;

static int rule_body(shmap_ctx *ctx, void *arg)
{
  rule_arg *a = arg;
  int d = shmap_ctx_device(ctx);
  shmap_block *x = shmap_block_alloc(ctx, a->c->dt, 1, (int64_t[]){2});
  if (!x)
    return 1;
  for (int e = 0; e < 2; e++)
    ref_set(x, e, a->c->v[d][e]);
  int rc;
  switch (a->c->op) {
  case SHMAP__OP_SUM: rc = shmap_psum(ctx, x, "i"); break;
  case SHMAP__OP_MAX: rc = shmap_pmax(ctx, x, "i"); break;
  case SHMAP__OP_MIN: rc = shmap_pmin(ctx, x, "i"); break;
  default: rc = shmap_pmean(ctx, x, "i"); break;
  }
  a->rc[d] = rc;
  snprintf(a->msg[d], sizeof a->msg[d], "%s", shmap_errmsg());
  if (rc == 0)
    a->got[d] = ref_block_copy(x);
  return 0;
}

static const rule_case rules[] = {
    /* IEEE 754-2019 maximum and minimum: -0 < +0 in either order. */
    {"pmax +0 -0", SHMAP_F32, SHMAP__OP_MAX,
     {{0.0, -0.0}, {-0.0, 0.0}, {-0.0, -0.0}, {-0.0, -0.0}}, {0.0, 0.0}, 1},
    {"pmin +0 -0", SHMAP_F32, SHMAP__OP_MIN,
     {{0.0, -0.0}, {-0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}}, {-0.0, -0.0}, 1},
    {"pmax -0 only", SHMAP_F64, SHMAP__OP_MAX,
     {{-0.0, -1}, {-0.0, -2}, {-0.0, -3}, {-0.0, -4}}, {-0.0, -1}, 1},
    {"pmax bf16 +0 -0", SHMAP_BF16, SHMAP__OP_MAX,
     {{-0.0, -0.0}, {0.0, -0.0}, {-0.0, -0.0}, {-0.0, 0.0}}, {0.0, 0.0}, 1},
    {"pmin f16 +0 -0", SHMAP_F16, SHMAP__OP_MIN,
     {{0.0, 0.0}, {-0.0, 0.0}, {0.0, 0.0}, {0.0, -0.0}}, {-0.0, -0.0}, 1},
    /* NaN wins max and min, wherever it is. */
    {"pmax NaN", SHMAP_F32, SHMAP__OP_MAX,
     {{1, NAN}, {NAN, 2}, {3, 3}, {INFINITY, 4}}, {NAN, NAN}, 0},
    {"pmin NaN f16", SHMAP_F16, SHMAP__OP_MIN,
     {{1, 5}, {2, 6}, {3, NAN}, {NAN, -INFINITY}}, {NAN, NAN}, 0},
    /* Sums: -0 + -0 is -0, -0 + +0 is +0, inf - inf is NaN. */
    {"psum zeros", SHMAP_F32, SHMAP__OP_SUM,
     {{-0.0, -0.0}, {-0.0, 0.0}, {-0.0, -0.0}, {-0.0, -0.0}}, {-0.0, 0.0}, 1},
    {"psum inf", SHMAP_F64, SHMAP__OP_SUM,
     {{INFINITY, 1}, {-INFINITY, INFINITY}, {1, 1}, {1, 1}}, {NAN, INFINITY},
     0},
    {"psum bf16 zeros", SHMAP_BF16, SHMAP__OP_SUM,
     {{-0.0, -0.0}, {-0.0, 0.0}, {-0.0, -0.0}, {-0.0, -0.0}}, {-0.0, 0.0}, 1},
    /* bf16 accumulates in f32 and rounds once: 1 + 2^-8 + 2^-8 + 0 is
     * 1 + 2^-7 (a bf16 fold would round each 1 + 2^-8 back to 1, a tie
     * to even), and 256 + 1 + 1 is 258 (not 256). */
    {"psum bf16 rounds once", SHMAP_BF16, SHMAP__OP_SUM,
     {{1, 256}, {0x1p-8, 1}, {0x1p-8, 1}, {0, 0}}, {1 + 0x1p-7, 258}, 1},
    /* f16 likewise: 2048 + 1 + 1 is 2050 (2049 is not an f16). */
    {"psum f16 rounds once", SHMAP_F16, SHMAP__OP_SUM,
     {{2048, 65504}, {1, 16}, {1, 0}, {0, 0}}, {2050, INFINITY}, 1},
    /* pmean rounds once after the division. */
    {"pmean bf16", SHMAP_BF16, SHMAP__OP_MEAN,
     {{1, 3}, {2, 3}, {3, 3}, {4, 4}}, {2.5, 3.25}, 1},
    {"pmean c64 (real parts)", SHMAP_C64, SHMAP__OP_MEAN,
     {{1, 3}, {2, 3}, {3, 3}, {4, 4}}, {2.5, 3.25}, 1},
    /* Integers wrap in their width. */
    {"psum i8 wraps", SHMAP_I8, SHMAP__OP_SUM,
     {{127, -128}, {1, -1}, {0, 0}, {0, 0}}, {-128, 127}, 0},
    {"psum u8 wraps", SHMAP_U8, SHMAP__OP_SUM,
     {{255, 200}, {1, 100}, {0, 0}, {0, 0}}, {0, 44}, 0},
    {"pmax u16", SHMAP_U16, SHMAP__OP_MAX,
     {{65535, 0}, {1, 0}, {0, 0}, {0, 1}}, {65535, 1}, 0},
    {"pmin i16", SHMAP_I16, SHMAP__OP_MIN,
     {{-32768, 0}, {1, 0}, {0, 0}, {0, -1}}, {-32768, -1}, 0},
    /* bool: pmax is any, pmin is all. */
    {"pmax bool", SHMAP_BOOL, SHMAP__OP_MAX,
     {{0, 0}, {0, 1}, {0, 0}, {0, 1}}, {0, 1}, 0},
    {"pmin bool", SHMAP_BOOL, SHMAP__OP_MIN,
     {{1, 0}, {1, 1}, {1, 1}, {1, 1}}, {1, 0}, 0},
};

/* _i: case * 2 + mode (0 threads, 1 fibers). */
START_TEST(t_rules)
{
  const rule_case *c = &rules[_i / 2];
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=4");
  rule_arg a;
  memset(&a, 0, sizeof a);
  a.c = c;
  tu_map_ok(shmap_map(m, rule_body, &a, 0, NULL, NULL, 0, NULL, NULL), c->what);
  for (int d = 0; d < 4; d++) {
    ck_assert_msg(a.rc[d] == 0, "%s: device %d: %d %s", c->what, d, a.rc[d],
                  a.msg[d]);
    for (int e = 0; e < 2; e++) {
      double g = ref_get(a.got[d], e), w = c->want[e];
      if (isnan(w)) {
        ck_assert_msg(isnan(g), "%s: device %d element %d: %g, want NaN",
                      c->what, d, e, g);
        continue;
      }
      ck_assert_msg(g == w && (!c->want_bits || signbit(g) == signbit(w)),
                    "%s: device %d element %d: %g, want %g", c->what, d, e, g,
                    w);
    }
    ref_block_free(a.got[d]);
  }
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- errors: reductions a dtype does not allow ------------------------------- */

typedef struct err_arg {
  shmap_dtype dt;
  int op;
  int rc[4];
  char msg[4][512];
} err_arg;

static int err_body(shmap_ctx *ctx, void *arg)
{
  err_arg *a = arg;
  int d = shmap_ctx_device(ctx);
  shmap_block *x = shmap_block_alloc(ctx, a->dt, 1, (int64_t[]){2});
  if (!x)
    return 1;
  int rc;
  switch (a->op) {
  case SHMAP__OP_SUM: rc = shmap_psum(ctx, x, "i"); break;
  case SHMAP__OP_MAX: rc = shmap_pmax(ctx, x, "i"); break;
  case SHMAP__OP_MIN: rc = shmap_pmin(ctx, x, "i"); break;
  default: rc = shmap_pmean(ctx, x, "i"); break;
  }
  a->rc[d] = rc;
  snprintf(a->msg[d], sizeof a->msg[d], "%s", shmap_errmsg());
  return rc;
}

static const struct {
  shmap_dtype dt;
  int op;
  const char *needles[3];
} errs[] = {
    {SHMAP_I8, SHMAP__OP_MEAN,
     {"pmean over 'i'", "pmean on i8: pmean needs a float or complex dtype",
      "divide by shmap_axis_size()"}},
    {SHMAP_U64, SHMAP__OP_MEAN, {"pmean on u64", "convert the block to f32", ""}},
    {SHMAP_BOOL, SHMAP__OP_MEAN,
     {"pmean on bool", "psum gives the count of true values as i32", ""}},
    {SHMAP_C64, SHMAP__OP_MAX,
     {"pmax over 'i'", "pmax on c64: complex numbers have no order", ""}},
    {SHMAP_C128, SHMAP__OP_MIN,
     {"pmin on c128: complex numbers have no order", "real parts", ""}},
    {SHMAP_BOOL, SHMAP__OP_SUM,
     {"psum of bool gives i32 (as in JAX)", "does not fit in place",
      "shmap_psum_new()"}},
};

/* _i: case * 2 + mode. */
START_TEST(t_errors)
{
  int k = _i / 2;
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=4");
  err_arg a;
  memset(&a, 0, sizeof a);
  a.dt = errs[k].dt;
  a.op = errs[k].op;
  int rc = shmap_map(m, err_body, &a, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_int_eq(rc, SHMAP_EDTYPE);
  for (int n = 0; n < 3; n++)
    ck_assert_msg(strstr(shmap_errmsg(), errs[k].needles[n]) != NULL,
                  "case %d: message lacks \"%s\": %s", k, errs[k].needles[n],
                  shmap_errmsg());
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- out of place --------------------------------------------------------------- */

/* Mesh i=4 over a bool input [1,0,1,1 | 1,1,0,0 | 0,0,0,1 | 1,0,1,0] in
 * P('i'): psum_new of each device's input block (read-only) counts the
 * true values per position as i32; pmax_new of the same block is any;
 * ppermute_new shifts the blocks by one; the input is unchanged. */
static int outplace_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *sum = NULL, *any = NULL, *moved = NULL;
  const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  int rc;
  if ((rc = shmap_psum_new(ctx, x, "i", &sum)) ||
      (rc = shmap_pmax_new(ctx, x, "i", &any)) ||
      (rc = shmap_ppermute_new(ctx, x, "i", 4, ring, &moved)))
    return rc;
  if (sum->dtype != SHMAP_I32 || any->dtype != SHMAP_BOOL ||
      moved->dtype != SHMAP_BOOL)
    return shmap_fail(ctx, "result dtypes %s %s %s",
                      shmap_dtype_name(sum->dtype), shmap_dtype_name(any->dtype),
                      shmap_dtype_name(moved->dtype));
  if ((rc = shmap_out_set(ctx, 0, sum)) || (rc = shmap_out_set(ctx, 1, any)) ||
      (rc = shmap_out_set(ctx, 2, moved)))
    return rc;
  /* Errors: no place for the result. */
  if (shmap_pmin_new(ctx, x, "i", NULL) != SHMAP_EINVAL)
    return shmap_fail(ctx, "pmin_new with out NULL did not fail");
  return 0;
}

/* _i: mode. */
START_TEST(t_outplace)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=4");
  static const unsigned char v[16] = {1, 0, 1, 1, 1, 1, 0, 0,
                                      0, 0, 0, 1, 1, 0, 1, 0};
  shmap_array *x = tu_array_from_host(SHMAP_BOOL, 1, (int64_t[]){16}, v);
  shmap_array *out[3] = {NULL, NULL, NULL};
  const char *in_specs[] = {"P('i')"};
  const char *out_specs[] = {"P()", "P()", "P('i')"};
  int rc = shmap_map(m, outplace_body, NULL, 1, &x, in_specs, 3, out,
                     out_specs);
  /* The map fails on purpose (pmin_new with out NULL) after the checks
   * above it passed: its message names the call. */
  ck_assert_int_eq(rc, SHMAP_EINVAL);
  ck_assert_msg(strstr(shmap_errmsg(), "pmin over 'i'") &&
                    strstr(shmap_errmsg(), "out is NULL"),
                "%s", shmap_errmsg());
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* The same without the failing call: the values. */
static int outplace_ok_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *sum = NULL, *any = NULL, *moved = NULL;
  const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  int rc;
  if ((rc = shmap_psum_new(ctx, x, "i", &sum)) ||
      (rc = shmap_pmax_new(ctx, x, "i", &any)) ||
      (rc = shmap_ppermute_new(ctx, x, "i", 4, ring, &moved)) ||
      (rc = shmap_out_set(ctx, 0, sum)) || (rc = shmap_out_set(ctx, 1, any)) ||
      (rc = shmap_out_set(ctx, 2, moved)))
    return rc;
  return 0;
}

START_TEST(t_outplace_values)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=4");
  static const unsigned char v[16] = {1, 0, 1, 1, 1, 1, 0, 0,
                                      0, 0, 0, 1, 1, 0, 1, 0};
  shmap_array *x = tu_array_from_host(SHMAP_BOOL, 1, (int64_t[]){16}, v);
  shmap_array *out[3] = {NULL, NULL, NULL};
  const char *in_specs[] = {"P('i')"};
  const char *out_specs[] = {"P()", "P()", "P('i')"};
  tu_map_ok(shmap_map(m, outplace_ok_body, NULL, 1, &x, in_specs, 3, out,
                      out_specs),
            "psum_new, pmax_new, ppermute_new of bool");
  int32_t sum[4];
  unsigned char any[4], moved[16], back[16];
  ck_assert_int_eq(shmap_array_dtype(out[0]), SHMAP_I32);
  ck_assert_int_eq(shmap_array_to_host(out[0], sum), 0);
  ck_assert_int_eq(shmap_array_to_host(out[1], any), 0);
  ck_assert_int_eq(shmap_array_to_host(out[2], moved), 0);
  ck_assert_int_eq(shmap_array_to_host(x, back), 0);
  static const int32_t want_sum[4] = {3, 1, 2, 2};
  static const unsigned char want_any[4] = {1, 1, 1, 1};
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(sum[k], want_sum[k]);
    ck_assert_int_eq(any[k], want_any[k]);
  }
  for (int k = 0; k < 16; k++) {
    ck_assert_int_eq(moved[k], v[(k + 12) % 16]);
    ck_assert_int_eq(back[k], v[k]);
  }
  for (int k = 0; k < 3; k++)
    shmap_array_destroy(out[k]);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

/* The instruction set the kernels use: AVX2 by default where the CPU
 * has it (else the best it has), and what SHMAP_SIMD names when the CPU
 * has that; a set it lacks or an unknown name leaves the default (the
 * name is reported on stderr). */
START_TEST(t_isa_choice)
{
  int dflt = shmap__isa_supported(SHMAP__ISA_AVX2)     ? SHMAP__ISA_AVX2
             : shmap__isa_supported(SHMAP__ISA_AVX512) ? SHMAP__ISA_AVX512
                                                       : SHMAP__ISA_GENERIC;
  unsetenv("SHMAP_SIMD");
  ck_assert_int_eq(shmap__isa_choose(), dflt);
  static const char *const names[] = {"generic", "avx2", "avx512"};
  for (int i = 0; i < SHMAP__NISA; i++) {
    setenv("SHMAP_SIMD", names[i], 1);
    ck_assert_str_eq(shmap__isa_name(i), names[i]);
    ck_assert_int_eq(shmap__isa_choose(),
                     shmap__isa_supported(i) ? i : dflt);
  }
  setenv("SHMAP_SIMD", "sse9", 1);
  ck_assert_int_eq(shmap__isa_choose(), dflt);
  unsetenv("SHMAP_SIMD");
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("dtype");
  TCase *tc = tcase_create("table");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, t_table);
  tcase_add_test(tc, t_decode_all);
  tcase_add_test(tc, t_encode);
  suite_add_tcase(s, tc);
  tc = tcase_create("kernels");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, t_kernels, 0, SHMAP__NISA);
  tcase_add_test(tc, t_isa_choice);
  suite_add_tcase(s, tc);
  tc = tcase_create("rules");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, t_rules, 0, 2 * (int)(sizeof rules / sizeof rules[0]));
  tcase_add_loop_test(tc, t_errors, 0, 2 * (int)(sizeof errs / sizeof errs[0]));
  tcase_add_loop_test(tc, t_outplace, 0, 2);
  tcase_add_loop_test(tc, t_outplace_values, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  return tu_run_suite(suite());
}
