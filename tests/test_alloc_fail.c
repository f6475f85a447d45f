/* SPDX-License-Identifier: MIT */
/*
 * test_alloc_fail.c - every allocation the library makes can fail, and each
 * failure must be clean.
 *
 * For each representative operation the test walks k = 1, 2, 3, ...: it
 * makes the k-th library allocation from now fail (shmap__test_fail_alloc),
 * runs the operation and requires one of two outcomes:
 *
 *   - success with no failure injected: k is past the operation's last
 *     allocation, the walk is complete;
 *   - a negative code (SHMAP_ENOMEM, or SHMAP_ESYS for a fiber stack) with
 *     exactly one failure injected, a message that mentions memory (or the
 *     stack), no output handed out, and objects that still work: the same
 *     operation, run again with injection off, gives the reference result.
 *
 * A hang is caught by Check's timeout, a crash by the fork.  Leaks: built
 * with AddressSanitizer, every step ends with LeakSanitizer's check, which
 * fails the test when anything is unreachable; meshes, which the registry
 * of live runtimes keeps reachable, are checked through their reference
 * count and the registry itself.
 *
 * Operations: mesh creation from text; shmap_array_from_host + to_host; a
 * full map on i=2, j=2 (two inputs, a scratch block, psum, all_gather, two
 * outputs, one of them taken over from the collective) as the first map of
 * a fresh mesh (which starts the threads) and as a later map, each with
 * SHMAP_SCHED=threads and =fibers; shmap_array_from_host_sharded +
 * shmap_array_reshard + to_host on a fresh mesh in both modes; a map with
 * the other collectives (psum_scatter, ppermute, all_to_all, pmean) in both
 * modes; shmap_array_zeros + fill + init; shmap_array_visualize (which
 * must write nothing when it fails).  Last, the system refusing a stack
 * (SHMAP_STACK_SIZE beyond the address space): SHMAP_ESYS, then the same
 * mesh works.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "map/map.h"
#include "sched/runtime.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_LSAN 1
#endif
#endif
#ifdef HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#define TIMEOUT 240
/* No operation here makes anywhere near this many allocations. */
#define MAX_K 5000

/* The registry of live runtimes (debug.c; the gdb extension reads it). */
extern shmap__runtime *shmap__registry;

/* Outputs start as these, so that a failure that leaves them alone can be
 * told from one that clears them: shmap_mesh_create leaves *mesh unchanged
 * on failure, every other operation here sets its outputs to NULL (their
 * man pages). */
static shmap_array unset_array_;
static shmap_mesh unset_mesh_;
#define UNSET_A (&unset_array_)
#define UNSET_M (&unset_mesh_)

/* ---- helpers -------------------------------------------------------------- */

static void leak_check(const char *what, long k)
{
#ifdef HAVE_LSAN
  ck_assert_msg(__lsan_do_recoverable_leak_check() == 0,
                "%s: memory leaked (allocation %ld was made to fail; "
                "LeakSanitizer's report is on stderr)", what, k);
#else
  (void)what;
  (void)k;
#endif
}

/* Nothing of the library is left alive. */
static void no_live_mesh(const char *what, long k)
{
  ck_assert_msg(shmap__registry == NULL,
                "%s (allocation %ld made to fail): a mesh runtime is still "
                "registered after every object was destroyed (a leaked mesh "
                "reference?)", what, k);
}

static void mesh_release(shmap_mesh *m, const char *what, long k)
{
  int refs = atomic_load(&m->refs);
  ck_assert_msg(refs == 1,
                "%s (allocation %ld made to fail): the mesh has %d references "
                "once every array on it is destroyed, want 1", what, k, refs);
  shmap_mesh_destroy(m);
}

static bool mentions_resource(const char *msg)
{
  return strcasestr(msg, "memory") || strcasestr(msg, "stack");
}

/*
 * Judge the outcome of an operation run with allocation k made to fail.
 * Returns true when the walk is complete (success, nothing injected) and
 * false after a clean failure; anything else fails the test.
 */
static bool judge(const char *what, long k, int rc)
{
  long injected = shmap__test_alloc_failures();
  shmap__test_fail_alloc(0);
  char msg[SHMAP__MSG_MAX + 1];
  snprintf(msg, sizeof msg, "%s", shmap_errmsg());
  if (rc == 0) {
    ck_assert_msg(injected == 0,
                  "%s: allocation %ld failed but the operation reported "
                  "success (the failure was swallowed)", what, k);
    return true;
  }
  ck_assert_msg(injected == 1,
                "%s: returned %d (%s) with allocation %ld planned to fail, "
                "but %ld failures were injected: %s",
                what, rc, shmap_strerror(rc), k, injected, msg);
  ck_assert_msg(rc == SHMAP_ENOMEM || rc == SHMAP_ESYS,
                "%s: allocation %ld failed and the operation returned %d (%s), "
                "want SHMAP_ENOMEM (or SHMAP_ESYS for a fiber stack): %s",
                what, k, rc, shmap_strerror(rc), msg);
  ck_assert_msg(msg[0] != '\0',
                "%s: allocation %ld failed, code %d, but shmap_errmsg() is "
                "empty", what, k, rc);
  ck_assert_msg(mentions_resource(msg),
                "%s: allocation %ld failed, but the message does not say that "
                "memory (or a stack) ran out: %s", what, k, msg);
  return false;
}

static void walk_done(const char *what, long k)
{
  /* k-1 allocations failed one by one; at least one must exist, or the
   * hook is not wired to this operation. */
  ck_assert_msg(k > 1, "%s: the operation made no allocation the hook sees",
                what);
  printf("%s: %ld allocation failures walked\n", what, k - 1);
}

static void set_mode(const char *mode)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", mode, 1), 0);
}

static void expect_mode(shmap_mesh *m, const char *mode)
{
  int want = strcmp(mode, "fibers") == 0 ? SHMAP__FIBERS : SHMAP__THREADS;
  ck_assert_msg(m->rt->started && m->rt->mode == want,
                "the mesh does not run in %s mode (SHMAP_SCHED=%s)", mode,
                mode);
}

/* ---- the full map ----------------------------------------------------------- */

/* X: f64[4,4], x[r][c] = 4r + c + 1, split P('i', 'j');
 * Y: f64[4], y[c] = 10(c + 1), split P('j').
 * Body: scratch copy of the X block, psum over 'j', all_gather of the Y
 * block over 'j' (tiled), output 0 = the psum (P('i'): f64[4,2],
 * o0[r][c] = x[r][c] + x[r][c+2]), output 1 = the gathered block taken
 * over (P(): f64[4] = Y). */
typedef struct ref {
  double x[16], y[4], o0[8];
  shmap_array *X, *Y;
} ref;

static void ref_init(ref *r)
{
  for (int i = 0; i < 16; i++)
    r->x[i] = i + 1;
  for (int c = 0; c < 4; c++)
    r->y[c] = 10.0 * (c + 1);
  for (int row = 0; row < 4; row++)
    for (int c = 0; c < 2; c++)
      r->o0[row * 2 + c] = r->x[row * 4 + c] + r->x[row * 4 + c + 2];
  int64_t sx[2] = {4, 4}, sy[1] = {4};
  ck_assert_int_eq(shmap_array_from_host(&r->X, SHMAP_F64, 2, sx, r->x), 0);
  ck_assert_int_eq(shmap_array_from_host(&r->Y, SHMAP_F64, 1, sy, r->y), 0);
}

static void ref_fini(ref *r)
{
  shmap_array_destroy(r->X);
  shmap_array_destroy(r->Y);
}

static int body_full(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0), *y = shmap_in(ctx, 1);
  if (!x || !y)
    return -1;
  shmap_block *s = shmap_block_alloc(ctx, SHMAP_F64, x->rank, x->shape);
  if (!s)
    return -1;
  memcpy(s->data, x->data, shmap_block_nbytes(x));
  int rc = shmap_psum(ctx, s, "j");
  if (rc)
    return rc;
  shmap_block *g = NULL;
  if ((rc = shmap_all_gather(ctx, y, "j", 0, 1, &g)))
    return rc;
  if (!shmap_out_copy(ctx, 0, s))
    return -1;
  if ((rc = shmap_block_free(ctx, s)))
    return rc;
  return shmap_out_set(ctx, 1, g);
}

static int run_full(shmap_mesh *m, ref *r, shmap_array *out[2])
{
  shmap_array *in[2] = {r->X, r->Y};
  const char *in_specs[2] = {"i, j", "j"};
  const char *out_specs[2] = {"i", "P()"};
  out[0] = out[1] = UNSET_A;
  return shmap_map(m, body_full, NULL, 2, in, in_specs, 2, out, out_specs);
}

static void check_full(const char *what, long k, ref *r, shmap_array *out[2])
{
  double o0[8], o1[4];
  ck_assert_msg(out[0] && out[0] != UNSET_A && out[1] && out[1] != UNSET_A,
                "%s: the map succeeded without setting both outputs", what);
  ck_assert_int_eq(shmap_array_to_host(out[0], o0), 0);
  ck_assert_int_eq(shmap_array_to_host(out[1], o1), 0);
  ck_assert_msg(shmap_array_numel(out[0]) == 8 && shmap_array_numel(out[1]) == 4,
                "%s (k=%ld): outputs have the wrong sizes", what, k);
  for (int i = 0; i < 8; i++)
    ck_assert_msg(o0[i] == r->o0[i],
                  "%s (allocation %ld made to fail before): output 0 element "
                  "%d is %g, want %g", what, k, i, o0[i], r->o0[i]);
  for (int i = 0; i < 4; i++)
    ck_assert_msg(o1[i] == r->y[i],
                  "%s (allocation %ld made to fail before): output 1 element "
                  "%d is %g, want %g", what, k, i, o1[i], r->y[i]);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(out[1]);
  out[0] = out[1] = NULL;
}

static void outputs_null(const char *what, long k, shmap_array *out[], int n)
{
  for (int i = 0; i < n; i++)
    ck_assert_msg(out[i] == NULL,
                  "%s: allocation %ld failed but output %d is not NULL", what,
                  k, i);
}

/* A mesh is usable: the full map gives the reference result. */
static void mesh_works(const char *what, long k, shmap_mesh *m, ref *r)
{
  shmap_array *out[2];
  int rc = run_full(m, r, out);
  ck_assert_msg(rc == 0, "%s (allocation %ld made to fail before): the full "
                "map fails: %d (%s): %s", what, k, rc, shmap_strerror(rc),
                shmap_errmsg());
  check_full(what, k, r, out);
}

/* ---- mesh creation -------------------------------------------------------------- */

START_TEST(t_mesh_create)
{
  const char *what = "shmap_mesh_create(\"i=2, j=2\")";
  set_mode("threads");
  ref r;
  ref_init(&r);
  long k;
  for (k = 1; k < MAX_K; k++) {
    shmap_mesh *m = UNSET_M;
    shmap__test_fail_alloc(k);
    int rc = shmap_mesh_create(&m, "i=2, j=2");
    if (judge(what, k, rc)) {
      ck_assert_msg(m && m != UNSET_M, "%s succeeded but set no mesh", what);
      mesh_works(what, k, m, &r);
      mesh_release(m, what, k);
      no_live_mesh(what, k);
      leak_check(what, k);
      break;
    }
    ck_assert_msg(m == UNSET_M,
                  "%s: allocation %ld failed but *mesh changed (to %p); the "
                  "man page says it is left unchanged", what, k, (void *)m);
    m = tu_mesh_new("i=2, j=2");
    mesh_works(what, k, m, &r);
    mesh_release(m, what, k);
    no_live_mesh(what, k);
    leak_check(what, k);
  }
  ck_assert_msg(k < MAX_K, "%s: the walk did not end", what);
  walk_done(what, k);
  ref_fini(&r);
  leak_check(what, k);
}
END_TEST

/* ---- host arrays ----------------------------------------------------------------- */

START_TEST(t_host_array)
{
  const char *what = "shmap_array_from_host + shmap_array_to_host";
  int64_t shape[3] = {3, 5, 7};
  double data[105], got[105];
  for (int i = 0; i < 105; i++)
    data[i] = i * 0.5 - 7;
  long k;
  for (k = 1; k < MAX_K; k++) {
    shmap_array *a = UNSET_A;
    memset(got, 0, sizeof got);
    shmap__test_fail_alloc(k);
    int rc = shmap_array_from_host(&a, SHMAP_F64, 3, shape, data);
    if (rc == 0)
      rc = shmap_array_to_host(a, got);
    bool done = judge(what, k, rc);
    if (!done) {
      ck_assert_msg(a == NULL,
                    "%s: allocation %ld failed but *array is not NULL", what,
                    k);
      rc = shmap_array_from_host(&a, SHMAP_F64, 3, shape, data);
      ck_assert_msg(rc == 0, "%s: retry fails: %s", what, shmap_errmsg());
      ck_assert_int_eq(shmap_array_to_host(a, got), 0);
    }
    ck_assert_msg(memcmp(got, data, sizeof data) == 0,
                  "%s: the array's values differ from the data (k=%ld)", what,
                  k);
    shmap_array_destroy(a);
    leak_check(what, k);
    if (done)
      break;
  }
  ck_assert_msg(k < MAX_K, "%s: the walk did not end", what);
  walk_done(what, k);
}
END_TEST

/* ---- the full map ------------------------------------------------------------------ */

/* _i: bit 0 = a later map (the mesh ran one already), bit 1 = fibers. */
START_TEST(t_map)
{
  bool warm = _i & 1;
  const char *mode = _i & 2 ? "fibers" : "threads";
  char what[160];
  snprintf(what, sizeof what,
           "%s map on i=2, j=2 (inputs, psum, all_gather, 2 outputs), "
           "SHMAP_SCHED=%s", warm ? "a later" : "the first", mode);
  set_mode(mode);
  ref r;
  ref_init(&r);
  shmap_mesh *m = NULL;
  if (warm) {
    m = tu_mesh_new("i=2, j=2");
    mesh_works(what, 0, m, &r);
    expect_mode(m, mode);
  }
  long k;
  for (k = 1; k < MAX_K; k++) {
    if (!warm)
      m = tu_mesh_new("i=2, j=2");
    shmap_array *out[2];
    shmap__test_fail_alloc(k);
    int rc = run_full(m, &r, out);
    bool done = judge(what, k, rc);
    if (done) {
      check_full(what, k, &r, out);
    } else {
      outputs_null(what, k, out, 2);
      /* The same mesh and inputs still work. */
      mesh_works(what, k, m, &r);
    }
    expect_mode(m, mode);
    if (!warm) {
      mesh_release(m, what, k);
      m = NULL;
      no_live_mesh(what, k);
    }
    leak_check(what, k);
    if (done)
      break;
  }
  ck_assert_msg(k < MAX_K, "%s: the walk did not end", what);
  walk_done(what, k);
  if (warm)
    mesh_release(m, what, k);
  no_live_mesh(what, k);
  ref_fini(&r);
  leak_check(what, k);
}
END_TEST

/* ---- sharded import, reshard, export ------------------------------------------- */

/* _i: 0 threads, 1 fibers.  A fresh mesh per step, so the import is the
 * mesh's first map. */
START_TEST(t_sharded)
{
  const char *mode = _i ? "fibers" : "threads";
  char what[200];
  snprintf(what, sizeof what,
           "shmap_array_from_host_sharded(P('i','j')) + "
           "shmap_array_reshard(P('j','i')) + shmap_array_to_host on a fresh "
           "mesh i=2, j=2, SHMAP_SCHED=%s", mode);
  set_mode(mode);
  int64_t shape[2] = {4, 8};
  int32_t data[32], got[32];
  for (int i = 0; i < 32; i++)
    data[i] = 3 * i - 40;
  long k;
  for (k = 1; k < MAX_K; k++) {
    shmap_mesh *m = tu_mesh_new("i=2, j=2");
    shmap_array *a = UNSET_A, *b = UNSET_A;
    memset(got, 0, sizeof got);
    int stage = 0;
    shmap__test_fail_alloc(k);
    int rc = shmap_array_from_host_sharded(&a, m, "i, j", SHMAP_I32, 2, shape,
                                           data);
    if (rc == 0) {
      stage = 1;
      rc = shmap_array_reshard(&b, a, "j, i");
    }
    if (rc == 0) {
      stage = 2;
      rc = shmap_array_to_host(b, got);
    }
    bool done = judge(what, k, rc);
    if (!done) {
      /* No output from the failed step; the objects made before it (and
       * the mesh) still work: finish the steps with injection off. */
      if (stage == 0) {
        ck_assert_msg(a == NULL,
                      "%s: allocation %ld failed in the import but *array is "
                      "not NULL", what, k);
        rc = shmap_array_from_host_sharded(&a, m, "i, j", SHMAP_I32, 2, shape,
                                           data);
        ck_assert_msg(rc == 0, "%s: import retry fails: %s", what,
                      shmap_errmsg());
      }
      if (stage <= 1) {
        ck_assert_msg(stage == 0 ? b == UNSET_A : b == NULL,
                      "%s: allocation %ld failed in the reshard but *out is "
                      "not NULL", what, k);
        rc = shmap_array_reshard(&b, a, "j, i");
        ck_assert_msg(rc == 0, "%s: reshard retry fails: %s", what,
                      shmap_errmsg());
      }
      ck_assert_int_eq(shmap_array_to_host(b, got), 0);
    }
    ck_assert_msg(memcmp(got, data, sizeof data) == 0,
                  "%s: the resharded array's values differ (k=%ld)", what, k);
    memset(got, 0, sizeof got);
    ck_assert_int_eq(shmap_array_to_host(a, got), 0);
    ck_assert_msg(memcmp(got, data, sizeof data) == 0,
                  "%s: the imported array's values differ (k=%ld)", what, k);
    char spec[64];
    ck_assert_int_gt(shmap_array_spec(b, spec, sizeof spec), 0);
    ck_assert_str_eq(spec, "P('j', 'i')");
    expect_mode(m, mode);
    shmap_array_destroy(a);
    shmap_array_destroy(b);
    mesh_release(m, what, k);
    no_live_mesh(what, k);
    leak_check(what, k);
    if (done)
      break;
  }
  ck_assert_msg(k < MAX_K, "%s: the walk did not end", what);
  walk_done(what, k);
}
END_TEST

/* ---- more collectives, and arrays made on the devices ------------------------ */

/* Every device builds its data; psum_scatter over 'j' (its result becomes
 * output 0 without a copy after a ppermute over 'i'), all_to_all over
 * ('i', 'j') (output 1), pmean over 'i' into a scratch block (output 2,
 * replicated over 'i'). */
static int body_colls(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  float x[8];
  for (int e = 0; e < 8; e++)
    x[e] = (float)(dev * 8 + e);
  shmap_block bx = {x, SHMAP_F32, 1, {8}};
  shmap_block *r1 = NULL, *r2 = NULL;
  int rc = shmap_psum_scatter(ctx, &bx, "j", 0, 1, &r1);
  if (rc)
    return rc;
  const int swap[2][2] = {{0, 1}, {1, 0}};
  if ((rc = shmap_ppermute(ctx, r1, "i", 2, swap)))
    return rc;
  shmap_block bx2 = {x, SHMAP_F32, 2, {4, 2}};
  if ((rc = shmap_all_to_all(ctx, &bx2, "i, j", 0, 1, 1, &r2)))
    return rc;
  int64_t one[1] = {3};
  shmap_block *m = shmap_block_alloc(ctx, SHMAP_F64, 1, one);
  if (!m)
    return -1;
  for (int e = 0; e < 3; e++)
    ((double *)m->data)[e] = dev + e;
  if ((rc = shmap_pmean(ctx, m, "i")))
    return rc;
  if ((rc = shmap_out_set(ctx, 0, r1)) || (rc = shmap_out_set(ctx, 1, r2)) ||
      (rc = shmap_out_set(ctx, 2, m)))
    return rc;
  return 0;
}

static int run_colls(shmap_mesh *m, shmap_array *out[3])
{
  const char *out_specs[3] = {"(i, j)", "(i, j)", "j"};
  out[0] = out[1] = out[2] = UNSET_A;
  return shmap_map(m, body_colls, NULL, 0, NULL, NULL, 3, out, out_specs);
}

static void same_arrays(const char *what, long k, shmap_array *got[],
                        shmap_array *want[], int n)
{
  for (int i = 0; i < n; i++) {
    size_t ng, nw;
    void *g = tu_array_to_host(got[i], &ng);
    void *w = tu_array_to_host(want[i], &nw);
    ck_assert_msg(ng == nw && memcmp(g, w, nw) == 0,
                  "%s (allocation %ld made to fail before): output %d differs "
                  "from the reference run", what, k, i);
    free(g);
    free(w);
  }
}

static void destroy_all(shmap_array *a[], int n)
{
  for (int i = 0; i < n; i++) {
    if (a[i] != UNSET_A)
      shmap_array_destroy(a[i]);
    a[i] = NULL;
  }
}

/* _i: 0 threads, 1 fibers; a later map on the mesh. */
START_TEST(t_map_colls)
{
  const char *mode = _i ? "fibers" : "threads";
  char what[200];
  snprintf(what, sizeof what,
           "a map with psum_scatter, ppermute, all_to_all, pmean and 3 "
           "outputs taken over, SHMAP_SCHED=%s", mode);
  set_mode(mode);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  shmap_array *want[3], *got[3];
  int rc = run_colls(m, want);
  ck_assert_msg(rc == 0, "%s: the reference run fails: %s", what,
                shmap_errmsg());
  expect_mode(m, mode);
  long k;
  for (k = 1; k < MAX_K; k++) {
    shmap__test_fail_alloc(k);
    rc = run_colls(m, got);
    bool done = judge(what, k, rc);
    if (!done) {
      outputs_null(what, k, got, 3);
      rc = run_colls(m, got);
      ck_assert_msg(rc == 0, "%s: after allocation %ld failed, the map "
                    "fails again: %s", what, k, shmap_errmsg());
    }
    same_arrays(what, k, got, want, 3);
    destroy_all(got, 3);
    leak_check(what, k);
    if (done)
      break;
  }
  ck_assert_msg(k < MAX_K, "%s: the walk did not end", what);
  walk_done(what, k);
  destroy_all(want, 3);
  mesh_release(m, what, k);
  no_live_mesh(what, k);
  leak_check(what, k);
}
END_TEST

static int init_fn(shmap_block *b, int device, const int coords[],
                   const int64_t offset[], void *arg)
{
  (void)device;
  (void)coords;
  (void)arg;
  int64_t n = shmap_block_numel(b);
  for (int64_t e = 0; e < n; e++)
    ((int64_t *)b->data)[e] = offset[0] * 100 + offset[1] + e;
  return 0;
}

static int make_three(shmap_mesh *m, shmap_array *out[3])
{
  int64_t shape[2] = {4, 6};
  double v = 2.5;
  out[0] = out[1] = out[2] = UNSET_A;
  int rc = shmap_array_zeros(&out[0], m, "i", SHMAP_F32, 2, shape);
  if (rc == 0)
    rc = shmap_array_fill(&out[1], m, "(j, i)", SHMAP_F64, 2, shape, &v);
  if (rc == 0)
    rc = shmap_array_init(&out[2], m, "i, j", SHMAP_I64, 2, shape, init_fn,
                          NULL);
  return rc;
}

/* shmap_array_zeros + fill + init, threads mode, a warm mesh. */
START_TEST(t_device_side)
{
  const char *what = "shmap_array_zeros + shmap_array_fill + shmap_array_init";
  set_mode("threads");
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  shmap_array *want[3], *got[3];
  ck_assert_msg(make_three(m, want) == 0, "%s: reference run fails: %s", what,
                shmap_errmsg());
  long k;
  for (k = 1; k < MAX_K; k++) {
    shmap__test_fail_alloc(k);
    int rc = make_three(m, got);
    bool done = judge(what, k, rc);
    if (!done) {
      /* The arrays made before the failure are kept; the failed one is
       * NULL; the rest were not attempted. */
      int i = 0;
      while (i < 3 && got[i] != UNSET_A && got[i] != NULL)
        i++;
      ck_assert_msg(i < 3, "%s: failed but every array is set", what);
      outputs_null(what, k, got + i, 1);
      for (int j = i + 1; j < 3; j++)
        ck_assert_msg(got[j] == UNSET_A, "%s: array %d made after a failure",
                      what, j);
      destroy_all(got, 3);
      ck_assert_msg(make_three(m, got) == 0, "%s: retry fails: %s", what,
                    shmap_errmsg());
    }
    same_arrays(what, k, got, want, 3);
    destroy_all(got, 3);
    leak_check(what, k);
    if (done)
      break;
  }
  ck_assert_msg(k < MAX_K, "%s: the walk did not end", what);
  walk_done(what, k);
  destroy_all(want, 3);
  mesh_release(m, what, k);
  no_live_mesh(what, k);
  leak_check(what, k);
}
END_TEST

/* ---- the text picture -------------------------------------------------------------- */

/* What shmap_array_visualize wrote to f (rewinds and truncates f). */
static char *drain(FILE *f)
{
  fflush(f);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  char *s = calloc(1, (size_t)n + 1);
  ck_assert_ptr_nonnull(s);
  rewind(f);
  ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  rewind(f);
  ck_assert_int_eq(ftruncate(fileno(f), 0), 0);
  return s;
}

START_TEST(t_visualize)
{
  const char *what = "shmap_array_visualize of P(('i','j'), None) on i=2, j=2";
  set_mode("threads");
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  int64_t shape[2] = {8, 3};
  shmap_array *a = NULL;
  ck_assert_int_eq(shmap_array_zeros(&a, m, "(i, j), None", SHMAP_F32, 2,
                                     shape), 0);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(shmap_array_visualize(a, f), 0);
  char *want = drain(f);
  ck_assert_msg(want[0], "%s: the reference picture is empty", what);
  long k;
  for (k = 1; k < MAX_K; k++) {
    shmap__test_fail_alloc(k);
    int rc = shmap_array_visualize(a, f);
    bool done = judge(what, k, rc);
    char *got = drain(f);
    if (!done) {
      ck_assert_msg(got[0] == '\0',
                    "%s: allocation %ld failed, but part of a picture was "
                    "written:\n%s", what, k, got);
      free(got);
      ck_assert_int_eq(shmap_array_visualize(a, f), 0);
      got = drain(f);
    }
    ck_assert_msg(strcmp(got, want) == 0, "%s: the picture differs:\n%s",
                  what, got);
    free(got);
    leak_check(what, k);
    if (done)
      break;
  }
  ck_assert_msg(k < MAX_K, "%s: the walk did not end", what);
  walk_done(what, k);
  free(want);
  fclose(f);
  shmap_array_destroy(a);
  mesh_release(m, what, k);
  no_live_mesh(what, k);
  leak_check(what, k);
}
END_TEST

/* ---- the operating system refuses a stack -------------------------------------- */

/* SHMAP_STACK_SIZE far beyond the address space: in fiber mode the device
 * stacks cannot be mapped, in thread mode the threads cannot start.  The
 * first map fails with SHMAP_ESYS and says why; with a sane size the same
 * mesh then starts and works.  _i: 0 threads, 1 fibers. */
START_TEST(t_os_refuses)
{
  const char *mode = _i ? "fibers" : "threads";
  char what[160];
  snprintf(what, sizeof what, "the first map with SHMAP_STACK_SIZE=2^50, "
           "SHMAP_SCHED=%s", mode);
  set_mode(mode);
  ref r;
  ref_init(&r);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  ck_assert_int_eq(setenv("SHMAP_STACK_SIZE", "1125899906842624", 1), 0);
  shmap_array *out[2];
  int rc = run_full(m, &r, out);
  char msg[SHMAP__MSG_MAX + 1];
  snprintf(msg, sizeof msg, "%s", shmap_errmsg());
  ck_assert_int_eq(unsetenv("SHMAP_STACK_SIZE"), 0);
  ck_assert_msg(rc == SHMAP_ESYS, "%s: returned %d (%s), want SHMAP_ESYS: %s",
                what, rc, shmap_strerror(rc), msg);
  ck_assert_msg(strstr(msg, _i ? "stack" : "thread"),
                "%s: the message does not say what the system refused: %s",
                what, msg);
  outputs_null(what, 0, out, 2);
  leak_check(what, 0);
  mesh_works(what, 0, m, &r);
  expect_mode(m, mode);
  mesh_release(m, what, 0);
  no_live_mesh(what, 0);
  ref_fini(&r);
  leak_check(what, 0);
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("alloc_fail");
  TCase *tc = tcase_create("walks");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, t_mesh_create);
  tcase_add_test(tc, t_host_array);
  tcase_add_loop_test(tc, t_map, 0, 4);
  tcase_add_loop_test(tc, t_sharded, 0, 2);
  tcase_add_loop_test(tc, t_map_colls, 0, 2);
  tcase_add_test(tc, t_device_side);
  tcase_add_test(tc, t_visualize);
  tcase_add_loop_test(tc, t_os_refuses, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  return tu_run_suite(suite());
}
