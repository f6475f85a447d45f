/* SPDX-License-Identifier: MIT */
/*
 * test_coll_errors.c - every way a collective call can be wrong:
 *
 *   arguments: the shape rules of section 6 (psum_scatter, all_to_all),
 *   dimensions out of range, bad ppermute pairs, unknown and duplicate
 *   axes, axes that do not parse, pmean on integers, NULL and invalid
 *   blocks, NULL or stale contexts and contexts used from another thread;
 *
 *   mismatches between the members of a group: another collective, other
 *   axes, dtype, shape, dimensions, tiling or pairs, calls in another
 *   order, one call more, and a body that returns (successfully or not)
 *   while its peers wait in a collective.
 *
 * Each case checks the code the map returns, the code every device saw,
 * and the words the message must contain (the collective, the axes, the
 * sizes, the devices, both calls); then the same mesh must run a correct
 * map.  Short timeouts turn a hang into a failure.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shmap.h>

#include "refcoll.h"
#include "testutil.h"

/* The case tables below list fields positionally and leave the trailing
 * ones zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define TIMEOUT 20

/* ---- helpers ------------------------------------------------------------------ */

/* A correct map: every device contributes dev+1, psum over every axis, then
 * all_gather; each device checks what it got. */
static int body_healthy(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_mesh *m = shmap_ctx_mesh(ctx);
  char axes[256] = "";
  for (int a = 0; a < shmap_mesh_naxes(m); a++) {
    strcat(axes, a ? "," : "");
    strcat(axes, shmap_mesh_axis_name(m, a));
  }
  int n = shmap_mesh_ndevices(m);
  double v = dev + 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  int rc = shmap_psum(ctx, &b, axes);
  if (rc)
    return rc;
  shmap_block *g = NULL;
  double w = dev;
  shmap_block x = {&w, SHMAP_F64, 1, {1}};
  rc = shmap_all_gather(ctx, &x, axes, 0, 1, &g);
  if (rc)
    return rc;
  int bad = v != n * (n + 1) / 2.0;
  for (int k = 0; k < n; k++)
    bad += ((double *)g->data)[k] != k;
  cap->val[dev] = bad;
  return 0;
}

static void expect_healthy(shmap_mesh *mesh, const char *after)
{
  int n = shmap_mesh_ndevices(mesh);
  ref_cap *cap = ref_cap_new(n);
  int rc = shmap_map(mesh, body_healthy, cap, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == 0,
                "after %s, a correct map on the same mesh fails: %d (%s): %s",
                after, rc, shmap_strerror(rc), shmap_errmsg());
  for (int d = 0; d < n; d++)
    ck_assert_msg(cap->val[d] == 0,
                  "after %s, a correct map gives wrong values on device %d",
                  after, d);
  ref_cap_free(cap);
}

/* Run body (no inputs or outputs); the map must return `want` and its
 * message contain every string of subs (NULL-terminated). */
static void expect_map_error(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                             int want, const char *const subs[],
                             const char *what)
{
  int rc = shmap_map(mesh, body, arg, 0, NULL, NULL, 0, NULL, NULL);
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", shmap_errmsg());
  ck_assert_msg(rc == want, "%s: shmap_map = %d (%s), want %d (%s); message: %s",
                what, rc, shmap_strerror(rc), want, shmap_strerror(want), msg);
  for (int k = 0; subs && subs[k]; k++)
    ck_assert_msg(ref_has(msg, subs[k]),
                  "%s: the message does not contain \"%s\": %s", what, subs[k],
                  msg);
}

/* ---- argument errors ------------------------------------------------------------ */

/* One call per case, made by every device with the same arguments. */
typedef struct acase {
  const char *what;
  int want;
  const char *subs[6];
  ref_kind kind;
  const char *axes;
  shmap_dtype dtype;
  int rank;
  int64_t shape[3];
  int dim, dim2, tiled;
  int npairs;
  int pairs[3][2];
  int null_x, null_out, null_pairs, null_data;
} acase;

typedef struct aarg {
  const acase *c;
  ref_cap *cap;
} aarg;

static int body_arg_error(shmap_ctx *ctx, void *arg)
{
  aarg *p = arg;
  const acase *c = p->c;
  int dev = shmap_ctx_device(ctx);
  double buf[64];
  memset(buf, 0, sizeof buf);
  shmap_block x;
  memset(&x, 0, sizeof x);
  x.data = c->null_data ? NULL : buf;
  x.dtype = c->dtype;
  x.rank = c->rank;
  for (int d = 0; d < c->rank && d < 3; d++)
    x.shape[d] = c->shape[d];
  shmap_block *xp = c->null_x ? NULL : &x;
  shmap_block *res = (shmap_block *)&x; /* must be set to NULL on error */
  shmap_block **out = c->null_out ? NULL : &res;
  const int(*pairs)[2] = c->null_pairs ? NULL : c->pairs;
  int rc;
  switch (c->kind) {
  case RK_PSUM:
    rc = shmap_psum(ctx, xp, c->axes);
    break;
  case RK_PMAX:
    rc = shmap_pmax(ctx, xp, c->axes);
    break;
  case RK_PMIN:
    rc = shmap_pmin(ctx, xp, c->axes);
    break;
  case RK_PMEAN:
    rc = shmap_pmean(ctx, xp, c->axes);
    break;
  case RK_PSUM_SCATTER:
    rc = shmap_psum_scatter(ctx, xp, c->axes, c->dim, c->tiled, out);
    break;
  case RK_ALL_GATHER:
    rc = shmap_all_gather(ctx, xp, c->axes, c->dim, c->tiled, out);
    break;
  case RK_ALL_TO_ALL:
    rc = shmap_all_to_all(ctx, xp, c->axes, c->dim, c->dim2, c->tiled, out);
    break;
  case RK_PPERMUTE:
    rc = shmap_ppermute(ctx, xp, c->axes, c->npairs, pairs);
    break;
  default:
    rc = shmap_axis_index(ctx, c->axes);
    if (rc > 0)
      rc = 0;
    break;
  }
  ref_cap_rc(p->cap, dev, rc);
  /* val: 1 when a shape-changing call left *out set on failure */
  p->cap->val[dev] = !ref_kind_inplace(c->kind) && c->kind < RK_NKINDS &&
                     !c->null_out && rc != 0 && res != NULL;
  return rc;
}

#define F32 SHMAP_F32
#define R1(a) 1, {a}
#define R2(a, b) 2, {a, b}

static const acase arg_cases[] = {
    /* psum_scatter shape rules */
    {"psum_scatter tiled, 7 not divisible by 3", SHMAP_ESHAPE,
     {"psum_scatter", "rows", "7", "3", "device"}, RK_PSUM_SCATTER, "rows",
     F32, R2(7, 2), 0, 0, 1},
    {"psum_scatter untiled, 5 != 3", SHMAP_ESHAPE,
     {"psum_scatter", "rows", "5", "3", "device"}, RK_PSUM_SCATTER, "rows",
     F32, R2(2, 5), 1, 0, 0},
    {"psum_scatter tiled over ('rows','cols'), 9 not divisible by 6",
     SHMAP_ESHAPE, {"psum_scatter", "rows", "cols", "9", "6"},
     RK_PSUM_SCATTER, "('rows','cols')", F32, R1(9), 0, 0, 1},
    {"psum_scatter dimension 2 of a rank-2 block", SHMAP_EINVAL,
     {"psum_scatter", "device"}, RK_PSUM_SCATTER, "rows", F32, R2(3, 3), 2,
     0, 1},
    {"psum_scatter dimension -3 of a rank-2 block", SHMAP_EINVAL,
     {"psum_scatter", "device"}, RK_PSUM_SCATTER, "rows", F32, R2(3, 3), -3,
     0, 1},
    /* all_gather axis range */
    {"all_gather tiled axis 2 of rank 2", SHMAP_EINVAL,
     {"all_gather", "device"}, RK_ALL_GATHER, "rows", F32, R2(2, 3), 2, 0, 1},
    {"all_gather tiled axis -3 of rank 2", SHMAP_EINVAL,
     {"all_gather", "device"}, RK_ALL_GATHER, "rows", F32, R2(2, 3), -3, 0,
     1},
    {"all_gather untiled axis 3 of rank 2", SHMAP_EINVAL,
     {"all_gather", "device"}, RK_ALL_GATHER, "rows", F32, R2(2, 3), 3, 0, 0},
    {"all_gather untiled axis -4 of rank 2", SHMAP_EINVAL,
     {"all_gather", "device"}, RK_ALL_GATHER, "rows", F32, R2(2, 3), -4, 0,
     0},
    {"all_gather tiled of a rank-0 block", SHMAP_ESHAPE,
     {"all_gather", "device"}, RK_ALL_GATHER, "rows", F32, 0, {0}, 0, 0, 1},
    /* all_to_all shape rules and axis range */
    {"all_to_all tiled, 7 not divisible by 3", SHMAP_ESHAPE,
     {"all_to_all", "rows", "7", "3", "device"}, RK_ALL_TO_ALL, "rows", F32,
     R2(7, 2), 0, 1, 1},
    {"all_to_all untiled, 2 != 3", SHMAP_ESHAPE,
     {"all_to_all", "rows", "2", "3", "device"}, RK_ALL_TO_ALL, "rows", F32,
     R2(2, 6), 0, 1, 0},
    {"all_to_all split_axis 2 of rank 2", SHMAP_EINVAL,
     {"all_to_all", "device"}, RK_ALL_TO_ALL, "rows", F32, R2(3, 3), 2, 0, 1},
    {"all_to_all concat_axis 2 of rank 2", SHMAP_EINVAL,
     {"all_to_all", "device"}, RK_ALL_TO_ALL, "rows", F32, R2(3, 3), 0, 2, 1},
    {"all_to_all concat_axis -3 of rank 2", SHMAP_EINVAL,
     {"all_to_all", "device"}, RK_ALL_TO_ALL, "rows", F32, R2(3, 3), 0, -3,
     1},
    {"all_to_all untiled concat_axis 2 of rank 2", SHMAP_EINVAL,
     {"all_to_all", "device"}, RK_ALL_TO_ALL, "rows", F32, R2(3, 3), 0, 2, 0},
    /* ppermute pairs */
    {"ppermute duplicate source", SHMAP_EINVAL,
     {"ppermute", "pair 1 (0, 2) repeats a source (group size 3)", "device"}, RK_PPERMUTE, "rows", F32, R1(2), 0, 0, 0, 2,
     {{0, 1}, {0, 2}}},
    {"ppermute duplicate destination", SHMAP_EINVAL,
     {"ppermute", "pair 1 (2, 1) repeats a destination (group size 3)",
      "device"}, RK_PPERMUTE, "rows", F32, R1(2), 0, 0, 0, 2,
     {{0, 1}, {2, 1}}},
    {"ppermute destination 3 out of [0,3)", SHMAP_EINVAL,
     {"ppermute", "3", "device"}, RK_PPERMUTE, "rows", F32, R1(2), 0, 0, 0, 1,
     {{0, 3}}},
    {"ppermute source -1", SHMAP_EINVAL, {"ppermute", "device"}, RK_PPERMUTE,
     "rows", F32, R1(2), 0, 0, 0, 1, {{-1, 0}}},
    {"ppermute over ('rows','cols') destination 6", SHMAP_EINVAL,
     {"ppermute", "6", "device"}, RK_PPERMUTE, "rows, cols", F32, R1(2), 0, 0,
     0, 2, {{0, 1}, {5, 6}}},
    {"ppermute npairs -1", SHMAP_EINVAL, {"ppermute"}, RK_PPERMUTE, "rows",
     F32, R1(2), 0, 0, 0, -1},
    {"ppermute NULL pairs", SHMAP_EINVAL, {"ppermute"}, RK_PPERMUTE, "rows",
     F32, R1(2), 0, 0, 0, 2, {{0, 1}, {1, 0}}, 0, 0, 1},
    /* axes */
    {"psum over an unknown axis", SHMAP_EAXIS, {"psum", "zz", "device"},
     RK_PSUM, "zz", F32, R1(2)},
    {"pmax over an unknown axis in a group", SHMAP_EAXIS, {"pmax", "zz"},
     RK_PMAX, "('rows', 'zz')", F32, R1(2)},
    {"all_gather over an unknown axis", SHMAP_EAXIS, {"all_gather", "zz"},
     RK_ALL_GATHER, "zz", F32, R1(2), 0, 0, 1},
    {"psum_scatter over an unknown axis", SHMAP_EAXIS, {"psum_scatter", "zz"},
     RK_PSUM_SCATTER, "zz", F32, R1(2), 0, 0, 1},
    {"all_to_all over an unknown axis", SHMAP_EAXIS, {"all_to_all", "zz"},
     RK_ALL_TO_ALL, "zz", F32, R1(2), 0, 0, 1},
    {"ppermute over an unknown axis", SHMAP_EAXIS, {"ppermute", "zz"},
     RK_PPERMUTE, "zz", F32, R1(2), 0, 0, 0, 0},
    {"axis_index of an unknown axis", SHMAP_EAXIS, {"zz"}, RK_NKINDS, "zz"},
    {"psum over ('rows','rows')", SHMAP_EAXIS, {"psum", "rows"}, RK_PSUM,
     "('rows','rows')", F32, R1(2)},
    {"pmin over rows, cols, rows", SHMAP_EAXIS, {"pmin", "rows"}, RK_PMIN,
     "rows, cols, rows", F32, R1(2)},
    {"all_gather over (cols, cols)", SHMAP_EAXIS, {"all_gather", "cols"},
     RK_ALL_GATHER, "('cols', 'cols')", F32, R1(2), 0, 0, 1},
    {"axis_index of ('rows','rows')", SHMAP_EAXIS, {"rows"}, RK_NKINDS,
     "('rows','rows')"},
    {"psum over axes that do not parse", SHMAP_ESYNTAX, {"psum"}, RK_PSUM,
     "('rows'", F32, R1(2)},
    /* dtypes */
    {"pmean on i32", SHMAP_EDTYPE, {"pmean", "i32", "device"}, RK_PMEAN,
     "rows", SHMAP_I32, R1(2)},
    {"pmean on i64", SHMAP_EDTYPE, {"pmean", "i64", "device"}, RK_PMEAN,
     "rows", SHMAP_I64, R1(2)},
    {"psum on an invalid dtype", SHMAP_EDTYPE, {"psum"}, RK_PSUM, "rows",
     (shmap_dtype)SHMAP_NDTYPES, R1(2)},
    /* blocks */
    {"psum of rank 9", SHMAP_ESHAPE, {"psum"}, RK_PSUM, "rows", F32, 9, {1}},
    {"psum of a negative size", SHMAP_ESHAPE, {"psum"}, RK_PSUM, "rows", F32,
     R2(2, -1)},
    {"psum of NULL", SHMAP_EINVAL, {"psum", "device"}, RK_PSUM, "rows", F32,
     R1(2), 0, 0, 0, 0, {{0}}, 1},
    {"pmax of NULL", SHMAP_EINVAL, {"pmax"}, RK_PMAX, "rows", F32, R1(2), 0,
     0, 0, 0, {{0}}, 1},
    {"pmin of NULL", SHMAP_EINVAL, {"pmin"}, RK_PMIN, "rows", F32, R1(2), 0,
     0, 0, 0, {{0}}, 1},
    {"pmean of NULL", SHMAP_EINVAL, {"pmean"}, RK_PMEAN, "rows", F32, R1(2),
     0, 0, 0, 0, {{0}}, 1},
    {"psum_scatter of NULL", SHMAP_EINVAL, {"psum_scatter"}, RK_PSUM_SCATTER,
     "rows", F32, R1(3), 0, 0, 1, 0, {{0}}, 1},
    {"all_gather of NULL", SHMAP_EINVAL, {"all_gather"}, RK_ALL_GATHER,
     "rows", F32, R1(3), 0, 0, 1, 0, {{0}}, 1},
    {"all_to_all of NULL", SHMAP_EINVAL, {"all_to_all"}, RK_ALL_TO_ALL,
     "rows", F32, R1(3), 0, 0, 1, 0, {{0}}, 1},
    {"ppermute of NULL", SHMAP_EINVAL, {"ppermute"}, RK_PPERMUTE, "rows", F32,
     R1(3), 0, 0, 0, 0, {{0}}, 1},
    {"psum_scatter with NULL out", SHMAP_EINVAL, {"psum_scatter"},
     RK_PSUM_SCATTER, "rows", F32, R1(3), 0, 0, 1, 0, {{0}}, 0, 1},
    {"all_gather with NULL out", SHMAP_EINVAL, {"all_gather"}, RK_ALL_GATHER,
     "rows", F32, R1(3), 0, 0, 1, 0, {{0}}, 0, 1},
    {"all_to_all with NULL out", SHMAP_EINVAL, {"all_to_all"}, RK_ALL_TO_ALL,
     "rows", F32, R1(3), 0, 0, 1, 0, {{0}}, 0, 1},
    {"psum of a block with NULL data", SHMAP_EINVAL, {"psum"}, RK_PSUM,
     "rows", F32, R1(3), 0, 0, 0, 0, {{0}}, 0, 0, 0, 1},
    {"psum with NULL axes", SHMAP_EINVAL, {"psum"}, RK_PSUM, NULL, F32,
     R1(3)},
    {"all_gather with NULL axes", SHMAP_EINVAL, {"all_gather"},
     RK_ALL_GATHER, NULL, F32, R1(3), 0, 0, 1},
    {"axis_index of NULL axes", SHMAP_EINVAL, {"axis_index"}, RK_NKINDS,
     NULL},
};

START_TEST(t_arg_errors)
{
  int ncase = (int)(sizeof arg_cases / sizeof arg_cases[0]);
  int k = _i;
  ck_assert_int_lt(k, ncase);
  const acase *c = &arg_cases[k];
  shmap_mesh *mesh = tu_mesh_new("rows=3, cols=2");
  aarg p = {c, ref_cap_new(6)};
  expect_map_error(mesh, body_arg_error, &p, c->want, c->subs, c->what);
  for (int d = 0; d < 6; d++) {
    /* A device that had not called yet when another failed may see
     * SHMAP_ECANCELED instead, or not run at all (rc still 1). */
    ck_assert_msg(p.cap->rc[d] == c->want || p.cap->rc[d] == SHMAP_ECANCELED ||
                      p.cap->rc[d] == 1,
                  "%s: device %d's call returned %d (%s), want %d (%s): %s",
                  c->what, d, p.cap->rc[d], shmap_strerror(p.cap->rc[d]),
                  c->want, shmap_strerror(c->want), p.cap->msg[d]);
    if (p.cap->rc[d] == c->want) {
      for (int s = 0; c->subs[s]; s++)
        ck_assert_msg(ref_has(p.cap->msg[d], c->subs[s]),
                      "%s: device %d's message lacks \"%s\": %s", c->what, d,
                      c->subs[s], p.cap->msg[d]);
    }
    ck_assert_msg(p.cap->val[d] == 0,
                  "%s: device %d: *out is not NULL after the failure",
                  c->what, d);
  }
  /* At least one device made the call and failed with the code. */
  int seen = 0;
  for (int d = 0; d < 6; d++)
    seen += p.cap->rc[d] == c->want;
  ck_assert_msg(seen > 0, "%s: no device saw the error", c->what);
  ref_cap_free(p.cap);
  expect_healthy(mesh, c->what);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* The error names the device that made the bad call when only one does. */
static int body_one_bad(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  float buf[8] = {0};
  shmap_block x = {buf, SHMAP_F32, 1, {dev == 4 ? 7 : 6}};
  shmap_block *r = NULL;
  return shmap_psum_scatter(ctx, &x, "rows", 0, 1, &r);
}

START_TEST(t_error_names_device)
{
  shmap_mesh *mesh = tu_mesh_new("rows=3, cols=2");
  /* device 4 (rows=2, cols=0) has 7 rows, which 3 does not divide: it
   * fails alone with SHMAP_ESHAPE, before any exchange. */
  const char *subs[] = {"psum_scatter", "device 4", "7", "3", NULL};
  int rc = shmap_map(mesh, body_one_bad, NULL, 0, NULL, NULL, 0, NULL, NULL);
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", shmap_errmsg());
  /* The peers of device 4 in its group may detect a shape mismatch first;
   * either way the map fails and names device 4. */
  ck_assert_msg(rc == SHMAP_ESHAPE || rc == SHMAP_EMISMATCH,
                "shmap_map = %d (%s): %s", rc, shmap_strerror(rc), msg);
  for (int k = 0; subs[k]; k++) {
    if (rc == SHMAP_EMISMATCH && k >= 2)
      break;
    ck_assert_msg(ref_has(msg, subs[k]), "message lacks \"%s\": %s", subs[k],
                  msg);
  }
  expect_healthy(mesh, "one bad psum_scatter");
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- contexts ------------------------------------------------------------------- */

static void all_calls(shmap_ctx *ctx, int rcs[10])
{
  float buf[4] = {0};
  shmap_block x = {buf, SHMAP_F32, 1, {4}};
  shmap_block *r = (shmap_block *)&x;
  int pairs[1][2] = {{0, 0}};
  rcs[0] = shmap_psum(ctx, &x, "i");
  rcs[1] = shmap_pmax(ctx, &x, "i");
  rcs[2] = shmap_pmin(ctx, &x, "i");
  rcs[3] = shmap_pmean(ctx, &x, "i");
  rcs[4] = shmap_psum_scatter(ctx, &x, "i", 0, 1, &r);
  rcs[5] = shmap_all_gather(ctx, &x, "i", 0, 1, &r);
  rcs[6] = shmap_all_to_all(ctx, &x, "i", 0, 0, 1, &r);
  rcs[7] = shmap_ppermute(ctx, &x, "i", 1, (const int(*)[2])pairs);
  rcs[8] = shmap_axis_index(ctx, "i");
  rcs[9] = shmap_axis_size(ctx, "i");
}

static const char *const call_names[10] = {
    "psum",       "pmax",       "pmin",     "pmean",      "psum_scatter",
    "all_gather", "all_to_all", "ppermute", "axis_index", "axis_size"};

START_TEST(t_null_ctx)
{
  int rcs[10];
  all_calls(NULL, rcs);
  for (int k = 0; k < 10; k++)
    ck_assert_msg(rcs[k] == SHMAP_EINVAL,
                  "%s with a NULL ctx outside a map = %d, want SHMAP_EINVAL",
                  call_names[k], rcs[k]);
  /* and while a map runs on a mesh, from the main thread */
  shmap_mesh *mesh = tu_mesh_new("i=2");
  expect_healthy(mesh, "NULL ctx calls");
  all_calls(NULL, rcs);
  for (int k = 0; k < 10; k++)
    ck_assert_msg(rcs[k] == SHMAP_EINVAL, "%s with a NULL ctx = %d",
                  call_names[k], rcs[k]);
  shmap_mesh_destroy(mesh);
}
END_TEST

static shmap_ctx *saved_ctx[4];

static int body_save_ctx(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  if (dev >= 0 && dev < 4)
    saved_ctx[dev] = ctx;
  return 0;
}

START_TEST(t_stale_ctx)
{
  shmap_mesh *mesh = tu_mesh_new("i=2");
  int rc = shmap_map(mesh, body_save_ctx, NULL, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_int_eq(rc, 0);
  ck_assert_ptr_nonnull(saved_ctx[0]);
  int rcs[10];
  all_calls(saved_ctx[0], rcs);
  for (int k = 0; k < 10; k++)
    ck_assert_msg(rcs[k] == SHMAP_ESTATE,
                  "%s with the ctx of a finished map = %d (%s), want "
                  "SHMAP_ESTATE",
                  call_names[k], rcs[k], shmap_strerror(rcs[k]));
  ck_assert_msg(ref_has(shmap_errmsg(), "axis_size"),
                "message should name the call: %s", shmap_errmsg());
  /* the mesh still works */
  expect_healthy(mesh, "stale ctx calls");
  shmap_mesh_destroy(mesh);
}
END_TEST

/* A device's ctx used from a thread of the body's own: SHMAP_ESTATE, and
 * the map is not failed by it. */
typedef struct thr_arg {
  shmap_ctx *ctx;
  int rcs[10];
} thr_arg;

static void *thread_calls(void *arg)
{
  thr_arg *t = arg;
  all_calls(t->ctx, t->rcs);
  return NULL;
}

static int body_other_thread(shmap_ctx *ctx, void *arg)
{
  thr_arg *ta = arg;
  int dev = shmap_ctx_device(ctx);
  ta[dev].ctx = ctx;
  pthread_t th;
  if (pthread_create(&th, NULL, thread_calls, &ta[dev]) != 0)
    return shmap_fail(ctx, "pthread_create");
  pthread_join(th, NULL);
  double v = 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  return v == 2 ? 0 : shmap_fail(ctx, "psum gave %g", v);
}

START_TEST(t_ctx_other_thread)
{
  shmap_mesh *mesh = tu_mesh_new("i=2");
  thr_arg ta[2];
  memset(ta, 0, sizeof ta);
  int rc = shmap_map(mesh, body_other_thread, ta, 0, NULL, NULL, 0, NULL,
                     NULL);
  tu_map_ok(rc, __func__);
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 10; k++)
      ck_assert_msg(ta[d].rcs[k] == SHMAP_ESTATE,
                    "device %d: %s from another thread = %d, want "
                    "SHMAP_ESTATE",
                    d, call_names[k], ta[d].rcs[k]);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- mismatches ------------------------------------------------------------------ */

/* Blocks the mismatch bodies pass: f32 or f64, shapes given. */
static shmap_block mkblk(void *buf, shmap_dtype dt, int rank, int64_t a,
                         int64_t b)
{
  shmap_block x;
  memset(&x, 0, sizeof x);
  x.data = buf;
  x.dtype = dt;
  x.rank = rank;
  x.shape[0] = a;
  x.shape[1] = b;
  return x;
}

typedef struct mcase {
  const char *what;
  const char *mesh;
  int (*call)(shmap_ctx *ctx, int dev, int step);
  int nsteps;             /* collective calls per device (max) */
  int want;               /* the map's code */
  const char *subs[6];    /* in the map's message */
  int dev_want[8];        /* per device: expected code of its failing call;
                             0: no constraint; 1: must succeed; MMN or CAN:
                             SHMAP_EMISMATCH or SHMAP_ECANCELED, or the
                             body never started (it may not start once
                             the map has failed) */
  int ndev;
} mcase;

typedef struct marg {
  const mcase *c;
  ref_cap *cap;
} marg;

/* Each device makes its calls; the first failure is recorded and
 * returned.  call() returns 2 to end the body early with success. */
static int body_mismatch(shmap_ctx *ctx, void *arg)
{
  marg *p = arg;
  int dev = shmap_ctx_device(ctx);
  int rc = 0;
  for (int s = 0; s < p->c->nsteps; s++) {
    rc = p->c->call(ctx, dev, s);
    if (rc == 2) {
      rc = 0;
      break;
    }
    if (rc)
      break;
  }
  ref_cap_rc(p->cap, dev, rc);
  return rc;
}

static double mbuf_storage[8][64];

static int c_psum_vs_pmax(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return dev == 1 ? shmap_pmax(ctx, &x, "i") : shmap_psum(ctx, &x, "i");
}

static int c_psum_vs_pmean(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return dev == 0 ? shmap_pmean(ctx, &x, "i") : shmap_psum(ctx, &x, "i");
}

static int c_psum_vs_all_gather(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  shmap_block *r;
  return dev == 2 ? shmap_all_gather(ctx, &x, "i", 0, 1, &r)
                  : shmap_psum(ctx, &x, "i");
}

static int c_axes_order(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return shmap_psum(ctx, &x, dev == 3 ? "('j','i')" : "('i','j')");
}

static int c_axes_sets(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return shmap_psum(ctx, &x, dev == 0 ? "i, j" : "i");
}

static int c_dtype(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], dev == 1 ? SHMAP_F64 : SHMAP_F32,
                        1, 4, 0);
  return shmap_psum(ctx, &x, "i");
}

static int c_shape_len(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, dev == 1 ? 5 : 4, 0);
  return shmap_psum(ctx, &x, "i");
}

static int c_shape_same_numel(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 2, dev == 1 ? 3 : 2,
                        dev == 1 ? 2 : 3);
  return shmap_pmin(ctx, &x, "i");
}

static int c_rank(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = dev == 1 ? mkblk(mbuf_storage[dev], SHMAP_F32, 2, 1, 4)
                           : mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return shmap_psum(ctx, &x, "i");
}

static int c_gather_axis(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 2, 2, 2);
  shmap_block *r;
  return shmap_all_gather(ctx, &x, "i", dev == 1 ? 1 : 0, 0, &r);
}

static int c_gather_tiled(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 2, 2, 2);
  shmap_block *r;
  return shmap_all_gather(ctx, &x, "i", 0, dev == 1 ? 0 : 1, &r);
}

static int c_scatter_dim(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 2, 2, 2);
  shmap_block *r;
  return shmap_psum_scatter(ctx, &x, "i", dev == 1 ? 1 : 0, 1, &r);
}

static int c_scatter_tiled(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 2, 2, 2);
  shmap_block *r;
  return shmap_psum_scatter(ctx, &x, "i", 0, dev == 1 ? 0 : 1, &r);
}

static int c_a2a_dims(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 2, 2, 2);
  shmap_block *r;
  return shmap_all_to_all(ctx, &x, "i", dev == 1 ? 1 : 0, dev == 1 ? 0 : 1,
                          1, &r);
}

static int c_a2a_tiled(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 2, 2, 2);
  shmap_block *r;
  return shmap_all_to_all(ctx, &x, "i", 0, 1, dev == 1 ? 0 : 1, &r);
}

static int c_pairs(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  static const int p2[2][2] = {{0, 1}, {1, 0}};
  static const int p1[1][2] = {{0, 1}};
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return dev == 1 ? shmap_ppermute(ctx, &x, "i", 1, p1)
                  : shmap_ppermute(ctx, &x, "i", 2, p2);
}

static int c_pairs_other_dst(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  static const int pa[1][2] = {{0, 1}};
  static const int pb[1][2] = {{0, 2}};
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return shmap_ppermute(ctx, &x, "i", 1, dev == 2 ? pb : pa);
}

static int c_order(shmap_ctx *ctx, int dev, int step)
{
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  int first_psum = dev == 0;
  if ((step == 0) == first_psum)
    return shmap_psum(ctx, &x, "i");
  return shmap_pmax(ctx, &x, "i");
}

static int c_one_more(shmap_ctx *ctx, int dev, int step)
{
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  if (dev == 1 && step == 1)
    return 2; /* device 1 returns after one psum */
  return shmap_psum(ctx, &x, "i");
}

static int c_returns_early(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  if (dev == 3)
    return 2; /* returns at once with success */
  return shmap_psum(ctx, &x, "i");
}

static int c_returns_late(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  if (dev == 3) {
    tu_sleep_ms(50); /* the peers are waiting by now */
    return 2;
  }
  return shmap_all_gather(ctx, &x, "i", 0, 1, &(shmap_block *){NULL});
}

static int c_fails_while_waiting(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  if (dev == 3) {
    tu_sleep_ms(50);
    return shmap_fail(ctx, "boom on purpose");
  }
  return shmap_psum(ctx, &x, "i");
}

static int c_returns_nonzero_while_waiting(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  if (dev == 3) {
    tu_sleep_ms(50);
    return 42;
  }
  return shmap_pmin(ctx, &x, "i");
}

static int c_fails_first(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  if (dev == 0)
    return shmap_fail(ctx, "early failure");
  tu_sleep_ms(50); /* call after device 0 failed */
  return shmap_psum(ctx, &x, "i");
}

static int c_error_while_waiting(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  if (dev == 1) {
    tu_sleep_ms(50);
    return shmap_psum(ctx, &x, "nosuchaxis");
  }
  return shmap_psum(ctx, &x, "i");
}

/* mesh i=2, j=2: the 'i' group of j=0 is {0, 2}, of j=1 is {1, 3}. */
static int c_one_group(shmap_ctx *ctx, int dev, int step)
{
  (void)step;
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  return dev == 2 ? shmap_pmax(ctx, &x, "i") : shmap_psum(ctx, &x, "i");
}

/* After a mismatch a device ignores the error and keeps calling: every
 * later call returns at once with an error. */
static int c_ignores_errors(shmap_ctx *ctx, int dev, int step)
{
  shmap_block x = mkblk(mbuf_storage[dev], SHMAP_F32, 1, 4, 0);
  int rc = (dev == 1 && step == 0) ? shmap_pmax(ctx, &x, "i")
                                   : shmap_psum(ctx, &x, "i");
  if (step == 0)
    return rc == 0 ? -1000 : 0; /* the first call must fail; go on */
  if (rc != SHMAP_EMISMATCH && rc != SHMAP_ECANCELED)
    return rc == 0 ? -1001 : rc - 1000;
  return step == 99 ? rc : 0;
}

#define MM SHMAP_EMISMATCH
#define CA SHMAP_ECANCELED
#define MMN 1000
#define CAN 1001

static const mcase mcases[] = {
    {"psum vs pmax", "i=2", c_psum_vs_pmax, 1, MM,
     {"psum", "pmax", "device 0", "device 1"}, {MM, MM}, 2},
    {"pmean vs psum", "i=2", c_psum_vs_pmean, 1, MM,
     {"psum", "pmean", "device 0", "device 1"}, {MM, MM}, 2},
    {"psum vs all_gather", "i=4", c_psum_vs_all_gather, 1, MM,
     {"psum", "all_gather", "device 2"}, {MMN, MMN, MM, MMN}, 4},
    {"axes ('i','j') vs ('j','i')", "i=2, j=2", c_axes_order, 1, MM,
     {"psum", "device 3", "'i'", "'j'"}, {MMN, MMN, MMN, MM}, 4},
    {"axes (i,j) vs i", "i=2, j=2", c_axes_sets, 1, MM, {"psum", "device 0"},
     {MM, 0, 0, 0}, 4},
    {"f32 vs f64", "i=2", c_dtype, 1, MM,
     {"psum", "f32", "f64", "device 0", "device 1"}, {MM, MM}, 2},
    {"f32[4] vs f32[5]", "i=2", c_shape_len, 1, MM,
     {"psum", "[4]", "[5]", "device 0", "device 1"}, {MM, MM}, 2},
    {"f32[2,3] vs f32[3,2]", "i=2", c_shape_same_numel, 1, MM,
     {"pmin", "[2,3]", "[3,2]", "device 0", "device 1"}, {MM, MM}, 2},
    {"f32[4] vs f32[1,4]", "i=2", c_rank, 1, MM,
     {"psum", "device 0", "device 1"}, {MM, MM}, 2},
    {"all_gather axis 0 vs 1", "i=2", c_gather_axis, 1, MM,
     {"all_gather", "device 0", "device 1"}, {MM, MM}, 2},
    {"all_gather tiled vs untiled", "i=2", c_gather_tiled, 1, MM,
     {"all_gather", "device 0", "device 1"}, {MM, MM}, 2},
    {"psum_scatter dim 0 vs 1", "i=2", c_scatter_dim, 1, MM,
     {"psum_scatter", "device 0", "device 1"}, {MM, MM}, 2},
    {"psum_scatter tiled vs untiled", "i=2", c_scatter_tiled, 1, MM,
     {"psum_scatter", "device 0", "device 1"}, {MM, MM}, 2},
    {"all_to_all (0,1) vs (1,0)", "i=2", c_a2a_dims, 1, MM,
     {"all_to_all", "device 0", "device 1"}, {MM, MM}, 2},
    {"all_to_all tiled vs untiled", "i=2", c_a2a_tiled, 1, MM,
     {"all_to_all", "device 0", "device 1"}, {MM, MM}, 2},
    {"ppermute pairs differ", "i=2", c_pairs, 1, MM,
     {"ppermute", "device 1", "pairs [(0, 1)]", "pairs [(1, 0), (0, 1)]",
      "has pairs (1, 0)"}, {MM, MM}, 2},
    {"ppermute destination differs on one device", "i=3", c_pairs_other_dst,
     1, MM, {"ppermute", "device 2", "has pairs (0, 2)", "has pairs (0, 1)"},
     {MMN, MMN, MM}, 3},
    {"psum,pmax vs pmax,psum", "i=2", c_order, 2, MM,
     {"psum", "pmax", "device 0", "device 1"}, {MM, MM}, 2},
    {"one call more", "i=2", c_one_more, 2, MM,
     {"psum", "device 0", "device 1"}, {MM, 1}, 2},
    {"a body returns at once while its peers call psum", "i=4",
     c_returns_early, 1, MM, {"psum", "device 3"}, {MMN, MMN, MMN, 1}, 4},
    {"a body returns while its peers wait in all_gather", "i=4",
     c_returns_late, 1, MM, {"all_gather", "device 3"}, {MMN, MMN, MMN, 1}, 4},
    {"shmap_fail while the peers wait in psum", "i=4", c_fails_while_waiting,
     1, SHMAP_EBODY, {"boom on purpose", "device 3"},
     {CAN, CAN, CAN, SHMAP_EBODY},
     4},
    {"a body returns 42 while the peers wait in pmin", "i=4",
     c_returns_nonzero_while_waiting, 1, SHMAP_EBODY, {"device 3", "42"},
     {CAN, CAN, CAN, 0}, 4},
    {"psum after a peer failed", "i=4", c_fails_first, 1, SHMAP_EBODY,
     {"early failure", "device 0"}, {SHMAP_EBODY, CAN, CAN, CAN}, 4},
    {"an axis error while the peer waits in psum", "i=2",
     c_error_while_waiting, 1, SHMAP_EAXIS, {"nosuchaxis", "device 1"},
     {CAN, SHMAP_EAXIS}, 2},
    {"a mismatch in one group only", "i=2, j=2", c_one_group, 1, MM,
     {"psum", "pmax", "device 0", "device 2"}, {MM, 0, MM, 0}, 4},
    {"calls after a mismatch", "i=2", c_ignores_errors, 100, MM,
     {"psum", "pmax"}, {0, 0}, 2},
};

START_TEST(t_mismatch)
{
  int ncase = (int)(sizeof mcases / sizeof mcases[0]);
  ck_assert_int_lt(_i, ncase);
  const mcase *c = &mcases[_i];
  shmap_mesh *mesh = tu_mesh_new(c->mesh);
  ck_assert_int_eq(shmap_mesh_ndevices(mesh), c->ndev);
  marg p = {c, ref_cap_new(c->ndev)};
  expect_map_error(mesh, body_mismatch, &p, c->want, c->subs, c->what);
  for (int d = 0; d < c->ndev; d++) {
    int w = c->dev_want[d], got = p.cap->rc[d];
    if (w == 0)
      continue;
    if (w == 1) {
      ck_assert_msg(got == 0, "%s: device %d should have succeeded: %d (%s)",
                    c->what, d, got, p.cap->msg[d]);
      continue;
    }
    if (w == MMN || w == CAN) {
      int code = w == MMN ? MM : CA;
      ck_assert_msg(got == code || got == 1,
                    "%s: device %d's call returned %d (%s), want %d (%s); "
                    "its message: %s",
                    c->what, d, got, shmap_strerror(got), code,
                    shmap_strerror(code), p.cap->msg[d]);
      continue;
    }
    ck_assert_msg(got == w,
                  "%s: device %d's call returned %d (%s), want %d (%s); its "
                  "message: %s",
                  c->what, d, got, shmap_strerror(got), w, shmap_strerror(w),
                  p.cap->msg[d]);
  }
  if (c->want == MM) {
    int seen = 0;
    for (int d = 0; d < c->ndev; d++)
      seen += p.cap->rc[d] == MM;
    ck_assert_msg(seen >= 1, "%s: no device's call returned SHMAP_EMISMATCH",
                  c->what);
  }
  if (c->call == c_ignores_errors)
    for (int d = 0; d < c->ndev; d++)
      ck_assert_msg(p.cap->rc[d] == MM || p.cap->rc[d] == CA,
                    "%s: device %d ended with %d", c->what, d, p.cap->rc[d]);
  ref_cap_free(p.cap);
  expect_healthy(mesh, c->what);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Pairs are a mapping: the same pairs listed in another order match. */
static int body_pairs_order(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  static const int pa[3][2] = {{0, 1}, {1, 2}, {2, 0}};
  static const int pb[3][2] = {{2, 0}, {0, 1}, {1, 2}};
  float v[2] = {(float)dev, 10.0f * (float)dev};
  shmap_block x = {v, SHMAP_F32, 1, {2}};
  int rc = shmap_ppermute(ctx, &x, "i", 3, dev == 1 ? pb : pa);
  ref_cap_rc(cap, dev, rc);
  if (rc)
    return rc;
  int src = (dev + 2) % 3;
  cap->val[dev] = v[0] != (float)src || v[1] != 10.0f * (float)src;
  return 0;
}

START_TEST(t_pairs_order_matches)
{
  shmap_mesh *mesh = tu_mesh_new("i=3");
  ref_cap *cap = ref_cap_new(3);
  int rc = shmap_map(mesh, body_pairs_order, cap, 0, NULL, NULL, 0, NULL,
                     NULL);
  ck_assert_msg(rc == 0,
                "the same pairs in another order should match: %d (%s): %s",
                rc, shmap_strerror(rc), shmap_errmsg());
  for (int d = 0; d < 3; d++)
    ck_assert_msg(cap->val[d] == 0, "device %d: wrong ppermute result", d);
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* The same dimension written as a negative and a positive number is the
 * same call. */
static int body_equiv_dims(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  float buf[4] = {1, 2, 3, 4};
  shmap_block x = {buf, SHMAP_F32, 2, {2, 2}};
  shmap_block *r = NULL;
  int neg = dev == 1;
  int rc = shmap_all_gather(ctx, &x, "i", neg ? -1 : 1, 1, &r);
  if (!rc)
    rc = shmap_psum_scatter(ctx, &x, "i", neg ? -2 : 0, 1, &r);
  if (!rc)
    rc = shmap_all_to_all(ctx, &x, "i", neg ? -1 : 1, neg ? -2 : 0, 1, &r);
  ref_cap_rc(cap, dev, rc);
  return rc;
}

START_TEST(t_equivalent_dims_match)
{
  shmap_mesh *mesh = tu_mesh_new("i=2");
  ref_cap *cap = ref_cap_new(2);
  int rc = shmap_map(mesh, body_equiv_dims, cap, 0, NULL, NULL, 0, NULL,
                     NULL);
  ck_assert_msg(rc == 0,
                "axis -1 and axis 1 of a rank-2 block should be the same "
                "call: %d (%s): %s",
                rc, shmap_strerror(rc), shmap_errmsg());
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* A device fails while the devices of other groups are in the middle of
 * collectives: every map must return the failure promptly (no member of a
 * healthy group may be left waiting for a peer that gave up). */
#ifndef STORM_MAPS
#define STORM_MAPS 100
#endif

typedef struct storm_arg {
  int iter;
  ref_cap *cap;
} storm_arg;

static int body_fail_during_others(shmap_ctx *ctx, void *arg)
{
  storm_arg *p = arg;
  int dev = shmap_ctx_device(ctx);
  /* mesh g=8, r=2: the 'r' groups are {0,1}, {2,3}, ..., {14,15}; device 5
   * fails after a few calls, the others keep calling psum/all_gather. */
  double v[8];
  for (int k = 0; k < 8; k++)
    v[k] = dev + k;
  shmap_block x = {v, SHMAP_F64, 1, {8}};
  int rc = 0;
  for (int step = 0; step < 40 && rc == 0; step++) {
    if (dev == 5 && step == 1 + p->iter % 7)
      return shmap_fail(ctx, "device 5 fails at step %d", step);
    if (step % 2) {
      rc = shmap_psum(ctx, &x, "r");
    } else {
      shmap_block *g = NULL;
      rc = shmap_all_gather(ctx, &x, "r", 0, 1, &g);
      if (rc == 0)
        rc = shmap_block_free(ctx, g);
    }
  }
  ref_cap_rc(p->cap, dev, rc);
  return rc;
}

START_TEST(t_failure_during_other_group)
{
  shmap_mesh *mesh = tu_mesh_new("g=8, r=2");
  int wrong = 0;
  char first_wrong[REF_MSG_MAX + 128] = "";
  for (int it = 0; it < STORM_MAPS; it++) {
    storm_arg p = {it, ref_cap_new(16)};
    const char *subs[] = {"device 5 fails", NULL};
    char what[64];
    snprintf(what, sizeof what, "iteration %d", it);
    expect_map_error(mesh, body_fail_during_others, &p, SHMAP_EBODY, subs,
                     what);
    /* Codes are checked after the loop, so that a hang in a later
     * iteration is not hidden by a wrong code in an earlier one. */
    for (int d = 0; d < 16; d++)
      if (d != 5 && p.cap->rc[d] != 0 && p.cap->rc[d] != 1 &&
          p.cap->rc[d] != CA) {
        if (!wrong++)
          snprintf(first_wrong, sizeof first_wrong,
                   "%s: device %d's collective returned %d (%s): %s", what, d,
                   p.cap->rc[d], shmap_strerror(p.cap->rc[d]),
                   p.cap->msg[d]);
      }
    ref_cap_free(p.cap);
  }
  expect_healthy(mesh, "failures during other groups' collectives");
  shmap_mesh_destroy(mesh);
  ck_assert_msg(wrong == 0,
                "%d collective calls released by device 5's failure returned "
                "another code than SHMAP_ECANCELED; first: %s",
                wrong, first_wrong);
}
END_TEST

/* Failures and correct maps alternate many times on one mesh. */
START_TEST(t_mismatch_repeated)
{
  shmap_mesh *mesh = tu_mesh_new("i=4, j=2");
  static const mcase c = {"psum vs pmax, 8 devices", "i=4, j=2",
                          c_psum_vs_pmax, 1, MM, {"psum", "pmax"}, {0}, 8};
  static const mcase e = {"a body returns early, 8 devices", "i=4, j=2",
                          c_returns_early, 1, MM, {"psum"}, {0}, 8};
  for (int it = 0; it < 20; it++) {
    const mcase *cc = it % 2 ? &e : &c;
    marg p = {cc, ref_cap_new(8)};
    expect_map_error(mesh, body_mismatch, &p, MM, cc->subs, cc->what);
    ref_cap_free(p.cap);
    expect_healthy(mesh, cc->what);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------- */

int main(void)
{
  Suite *s = suite_create("coll_errors");
  TCase *tc = tcase_create("arguments");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, t_arg_errors, 0,
                      (int)(sizeof arg_cases / sizeof arg_cases[0]));
  tcase_add_test(tc, t_error_names_device);
  suite_add_tcase(s, tc);

  tc = tcase_create("contexts");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, t_null_ctx);
  tcase_add_test(tc, t_stale_ctx);
  tcase_add_test(tc, t_ctx_other_thread);
  suite_add_tcase(s, tc);

  tc = tcase_create("mismatch");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, t_mismatch, 0,
                      (int)(sizeof mcases / sizeof mcases[0]));
  tcase_add_test(tc, t_pairs_order_matches);
  tcase_add_test(tc, t_equivalent_dims_match);
  tcase_add_test(tc, t_mismatch_repeated);
  tcase_add_test(tc, t_failure_during_other_group);
  suite_add_tcase(s, tc);

  return tu_run_suite(s);
}
