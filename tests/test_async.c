/* SPDX-License-Identifier: MIT */
/*
 * test_async.c - asynchronous collectives (shmap_*_start, shmap_wait,
 * shmap_wait_all, shmap_test), in thread and fiber mode: results equal the
 * blocking calls bit for bit; every rule fails the map with its code and a
 * message naming the call (too many requests open, a body returning with
 * one open, the input or the result written before the wait, bad
 * handles); mismatches and failures involving started calls end promptly.
 * A request's blocks outlive it: a body (nested or not) that returns with
 * one open fails the map and nothing is written after it returns, and
 * shmap_block_free refuses them.  Request tables take memory only for the
 * devices that start requests.
 */
#include "testutil.h"

#include "coll/async.h"
#include "internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define NMODES 2
static const char *const modes[NMODES] = {"threads", "fibers"};

static void set_mode(int i)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[i % NMODES], 1), 0);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
  unsetenv("SHMAP_ASYNC_CHECK");
}

static bool same(const shmap_block *a, const shmap_block *b)
{
  return a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) == 0 &&
         memcmp(a->data, b->data, shmap_block_nbytes(a)) == 0;
}

/* ---- results ----------------------------------------------------------- */

/* Four requests open at once, then the blocking calls: equal bit for bit.
 * The ppermute's result is also the body's output (checked on the host). */
static int all_four(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  int n = shmap_axis_size(ctx, "i");
  int pairs[8][2];
  for (int r = 0; r < n; r++)
    pairs[r][0] = r, pairs[r][1] = (r + 1) % n;
  shmap_block *perm, *gath, *scat;
  shmap_request *req[4];
  shmap_block *sum = shmap_block_alloc(ctx, x->dtype, x->rank, x->shape);
  if (!sum)
    return -1;
  memcpy(sum->data, x->data, shmap_block_nbytes(x));
  int rc;
  if ((rc = shmap_ppermute_start(ctx, x, "i", n, (const int(*)[2])pairs, &perm,
                                 &req[0])) ||
      (rc = shmap_all_gather_start(ctx, x, "i", 0, 1, &gath, &req[1])) ||
      (rc = shmap_psum_scatter_start(ctx, x, "i", 0, 1, &scat, &req[2])) ||
      (rc = shmap_psum_start(ctx, sum, "i", &req[3])))
    return rc;
  /* Computing meanwhile, without calling into the library. */
  volatile double acc = 0;
  for (int k = 0; k < 20000; k++)
    acc += k * 0.5;
  if (acc < 0)
    return -1;
  if ((rc = shmap_wait_all(ctx, 4, req)))
    return rc;
  for (int k = 0; k < 4; k++)
    if (req[k])
      return shmap_fail(ctx, "request %d not cleared by shmap_wait_all", k);
  shmap_block *bperm, *bgath, *bscat;
  shmap_block *bsum = shmap_block_alloc(ctx, x->dtype, x->rank, x->shape);
  if (!bsum)
    return -1;
  memcpy(bsum->data, x->data, shmap_block_nbytes(x));
  if ((rc = shmap_ppermute_new(ctx, x, "i", n, (const int(*)[2])pairs,
                               &bperm)) ||
      (rc = shmap_all_gather(ctx, x, "i", 0, 1, &bgath)) ||
      (rc = shmap_psum_scatter(ctx, x, "i", 0, 1, &bscat)) ||
      (rc = shmap_psum(ctx, bsum, "i")))
    return rc;
  if (!same(perm, bperm) || !same(gath, bgath) || !same(scat, bscat) ||
      !same(sum, bsum))
    return shmap_fail(ctx, "asynchronous results differ from the blocking "
                           "ones: ppermute %d all_gather %d psum_scatter %d "
                           "psum %d", same(perm, bperm), same(gath, bgath),
                      same(scat, bscat), same(sum, bsum));
  return shmap_out_set(ctx, 0, perm);
}

START_TEST(t_results)
{
  /* Loops 0-3 without the check, 4-5 with it (mesh i=4): results watched
   * until their waits are still exact. */
  set_mode(_i);
  bool checked = _i >= 2 * NMODES;
  if (checked)
    ck_assert_int_eq(setenv("SHMAP_ASYNC_CHECK", "1", 1), 0);
  bool flat = _i < NMODES || checked;
  shmap_mesh *mesh = tu_mesh_new(flat ? "i=4" : "i=2, j=2");
  float host[32];
  for (int k = 0; k < 32; k++)
    host[k] = (float)k * 1.25f + 0.1f;
  shmap_array *in = tu_array_from_host(SHMAP_F32, 1, (int64_t[]){32}, host);
  shmap_array *out = NULL;
  /* Several maps in a row reuse the helpers and request slots. */
  for (int rep = 0; rep < 3; rep++) {
    tu_map_ok(shmap_map(mesh, all_four, NULL, 1, (shmap_array *[]){in},
                        (const char *[]){"P('i')"}, 1, &out,
                        (const char *[]){"P('i')"}),
              "all_four");
    float got[64];
    ck_assert_int_eq(shmap_array_to_host(out, got), 0);
    int n = flat ? 4 : 2, blk = 32 / n;
    for (int r = 0; r < n; r++)
      for (int k = 0; k < blk; k++)
        ck_assert_float_eq(got[r * blk + k], host[((r + n - 1) % n) * blk + k]);
    shmap_array_destroy(out);
    ck_assert_int_eq(shmap__guard_watching(), 0);
  }
  shmap_array_destroy(in);
  shmap_mesh_destroy(mesh);
  unsetenv("SHMAP_ASYNC_CHECK");
}
END_TEST


/* ---- mixing with blocking calls ------------------------------------------ */

/* A blocking psum between a start and its wait, and several requests of
 * different groups (mesh i=2, j=2) open at once. */
static int mixed(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0); /* i32[2] */
  static const int swap[2][2] = {{0, 1}, {1, 0}};
  shmap_block *pi, *pj, *bi, *bj;
  shmap_request *ri, *rj;
  int rc;
  if ((rc = shmap_ppermute_start(ctx, x, "i", 2, swap, &pi, &ri)) ||
      (rc = shmap_ppermute_start(ctx, x, "j", 2, swap, &pj, &rj)))
    return rc;
  shmap_block *s = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){2});
  if (!s)
    return -1;
  memcpy(s->data, x->data, 8);
  if ((rc = shmap_psum(ctx, s, "('i','j')")))
    return rc;
  int done = 0;
  if ((rc = shmap_test(ctx, &rj, &done)) || (rc = shmap_wait(ctx, &rj)) ||
      (rc = shmap_wait(ctx, &ri)))
    return rc;
  if ((rc = shmap_ppermute_new(ctx, x, "i", 2, swap, &bi)) ||
      (rc = shmap_ppermute_new(ctx, x, "j", 2, swap, &bj)))
    return rc;
  if (!same(pi, bi) || !same(pj, bj))
    return shmap_fail(ctx, "ppermute results differ");
  return shmap_out_set(ctx, 0, s);
}

START_TEST(t_mixed)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=2, j=2");
  int32_t host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[2];
  shmap_array *x = tu_array_from_host(SHMAP_I32, 1, (int64_t[]){8}, host);
  shmap_array *y = NULL;
  tu_map_ok(shmap_map(mesh, mixed, NULL, 1, &x,
                      (const char *[]){"P(('i','j'))"}, 1, &y,
                      (const char *[]){"P()"}),
            "mixed");
  ck_assert_int_eq(shmap_array_to_host(y, got), 0);
  ck_assert_int_eq(got[0], 1 + 3 + 5 + 7);
  ck_assert_int_eq(got[1], 2 + 4 + 6 + 8);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- the rules ---------------------------------------------------------- */

static shmap_mesh *rule_mesh;

/* Runs body on mesh i=4 with an i32[8] input split over i; returns the
 * map's code, the message in msg. */
static int run4(shmap_body_fn body, void *arg, char *msg, size_t n)
{
  int32_t host[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  shmap_array *x = tu_array_from_host(SHMAP_I32, 1, (int64_t[]){8}, host);
  int rc = shmap_map(rule_mesh, body, arg, 1, &x, (const char *[]){"P('i')"},
                     0, NULL, NULL);
  snprintf(msg, n, "%s", rc ? shmap_errmsg() : "");
  shmap_array_destroy(x);
  return rc;
}

/* The processor says whether a fault was a read only on x86-64. */
#if defined(__x86_64__)
#define READ_MSG "the result was read"
#else
#define READ_MSG "the result was read or written"
#endif

static void expect(int rc, int code, const char *msg, const char *const parts[])
{
  ck_assert_msg(rc == code, "map = %d (%s), want %d (%s): %s", rc,
                shmap_strerror(rc), code, shmap_strerror(code), msg);
  for (int k = 0; parts[k]; k++)
    ck_assert_msg(strstr(msg, parts[k]), "message lacks \"%s\": %s", parts[k],
                  msg);
}

/* A correct map afterwards: the mesh and the helpers still work. */
static int ring_ok(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *y;
  shmap_request *r;
  int rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r);
  if (rc || (rc = shmap_wait(ctx, &r)))
    return rc;
  int d = shmap_ctx_device(ctx), from = (d + 3) % 4;
  const int32_t *v = y->data;
  if (v[0] != 2 * from || v[1] != 2 * from + 1)
    return shmap_fail(ctx, "got %d %d from %d", v[0], v[1], from);
  return 0;
}

static void after(void)
{
  char msg[1024];
  int rc = run4(ring_ok, NULL, msg, sizeof msg);
  ck_assert_msg(rc == 0, "the map after: %d %s", rc, msg);
}

static void rule_setup(int i)
{
  set_mode(i);
  rule_mesh = tu_mesh_new("i=4");
}

static void rule_teardown(void)
{
  after();
  shmap_mesh_destroy(rule_mesh);
  rule_mesh = NULL;
}

/* One more than SHMAP_MAX_REQUESTS open. */
static int too_many(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_request *r[SHMAP_MAX_REQUESTS + 1];
  shmap_block *y;
  for (int k = 0; k <= SHMAP_MAX_REQUESTS; k++) {
    int rc = shmap_all_gather_start(ctx, x, "i", 0, 1, &y, &r[k]);
    if (rc) {
      if (k != SHMAP_MAX_REQUESTS || r[k] || y)
        return shmap_fail(ctx, "start %d failed: %d", k, rc);
      return shmap_wait_all(ctx, k, r) ? rc : rc;
    }
  }
  return 0;
}

START_TEST(t_limit)
{
  rule_setup(_i);
  char msg[1024];
  int rc = run4(too_many, NULL, msg, sizeof msg);
  expect(rc, SHMAP_ESTATE, msg,
         (const char *[]){"all_gather over 'i' on device",
                          "at most SHMAP_MAX_REQUESTS (8) requests open",
                          "shmap_all_gather_start", "#1 all_gather", NULL});
  rule_teardown();
}
END_TEST

/* The body of device `*arg` (or every device, -1) returns without waiting. */
static int leaves_open(shmap_ctx *ctx, void *arg)
{
  int who = *(int *)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  shmap_block *y, *g;
  shmap_request *r, *rg;
  int rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r);
  if (rc || (rc = shmap_all_gather_start(ctx, x, "i", 0, 1, &g, &rg)))
    return rc;
  if (who < 0 || who == shmap_ctx_device(ctx))
    return 0;
  rc = shmap_wait(ctx, &r);
  int rc2 = shmap_wait(ctx, &rg);
  return rc ? rc : rc2;
}

START_TEST(t_unwaited)
{
  rule_setup(_i);
  char msg[1024];
  for (int who = -1; who < 4; who += 3) {
    int rc = run4(leaves_open, &who, msg, sizeof msg);
    char dev[64];
    snprintf(dev, sizeof dev, "on device %d", who < 0 ? 0 : who);
    expect(rc, SHMAP_ESTATE, msg,
           (const char *[]){"ppermute over 'i'",
                            "the body returned with this request open",
                            "call #1", "shmap_ppermute_start",
                            "2 requests open", who < 0 ? "on device" : dev,
                            NULL});
  }
  rule_teardown();
}
END_TEST

/* With SHMAP_ASYNC_CHECK=1, device 1 writes its input (arg 0) or its
 * result (arg 1) before the wait. */
static int writes(shmap_ctx *ctx, void *arg)
{
  int what = *(int *)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){4});
  if (!x)
    return -1;
  memcpy(x->data, in->data, 8);
  memcpy((char *)x->data + 8, in->data, 8);
  shmap_block *y;
  shmap_request *r;
  int rc = what == 2 ? shmap_psum_start(ctx, x, "i", &r)
                     : shmap_psum_scatter_start(ctx, x, "i", 0, 1, &y, &r);
  if (rc)
    return rc;
  if (shmap_ctx_device(ctx) == 1) {
    /* Once the transfer is done, so that the write does not race with the
     * peers reading the input (a data race ThreadSanitizer would report):
     * the wait's checksums still find it. */
    int done = 0;
    while (!done)
      if ((rc = shmap_test(ctx, &r, &done)))
        return rc;
    if (what != 1)
      ((int32_t *)x->data)[0] += 1; /* the input (psum: in place) */
    else
      ((int32_t *)y->data)[0] = 99; /* the result */
  }
  return shmap_wait(ctx, &r);
}

START_TEST(t_check)
{
  rule_setup(_i);
  ck_assert_int_eq(setenv("SHMAP_ASYNC_CHECK", "1", 1), 0);
  char msg[1024];
  for (int what = 0; what < 3; what++) {
    int rc = run4(writes, &what, msg, sizeof msg);
    expect(rc, SHMAP_ESTATE, msg,
           (const char *[]){what == 2 ? "psum over 'i' on device 1"
                                      : "psum_scatter over 'i' on device 1",
                            what == 1 ? "the result was written"
                                      : "the input was written",
                            what == 2 ? "between shmap_psum_start and "
                                        "shmap_wait (call #1)"
                                      : "between shmap_psum_scatter_start "
                                        "and shmap_wait (call #1)",
                            NULL});
  }
  /* Without the check the same bodies pass (the results are then the
   * caller's problem). */
  unsetenv("SHMAP_ASYNC_CHECK");
  int what = 0;
  ck_assert_int_eq(run4(writes, &what, msg, sizeof msg), 0);
  rule_teardown();
}
END_TEST

/* With SHMAP_ASYNC_CHECK=1, device 1 reads (how 0: psum_scatter, 1:
 * all_gather) or writes (2: psum_scatter) its result before the wait, at
 * once (the transfer may still run); 3 waits first and reads after, as
 * it should.  What device 1 read is kept in `seen`. */
typedef struct early {
  int how;
  int32_t seen;
} early;

static int touches(shmap_ctx *ctx, void *arg)
{
  early *e = arg;
  /* The input twice (i32[4]): a psum_scatter over i=4 divides it. */
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){4});
  if (!x)
    return -1;
  memcpy(x->data, in->data, 8);
  memcpy((char *)x->data + 8, in->data, 8);
  shmap_block *y;
  shmap_request *r;
  int rc = e->how == 1 ? shmap_all_gather_start(ctx, x, "i", 0, 1, &y, &r)
                       : shmap_psum_scatter_start(ctx, x, "i", 0, 1, &y, &r);
  if (rc)
    return rc;
  volatile int32_t *v = y->data;
  bool me = shmap_ctx_device(ctx) == 1;
  if (me && e->how == 2)
    v[0] = 99;
  else if (me && e->how < 2)
    e->seen = v[0];
  if ((rc = shmap_wait(ctx, &r)))
    return rc;
  if (me && e->how == 3)
    e->seen = v[0];
  return 0;
}

/* A map after a failed one, still checked: every device allocates blocks
 * of the results' sizes (the chunks the failed map freed, from its
 * cache) and writes and reads all of them. */
static int reuses(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  for (int k = 0; k < 4; k++) {
    int64_t n = k < 2 ? 1 : 16;
    shmap_block *b = shmap_block_alloc(ctx, SHMAP_I32, 1, &n);
    if (!b)
      return -1;
    volatile int32_t *v = b->data;
    for (int64_t j = 0; j < n; j++)
      v[j] = (int32_t)(j + k);
    for (int64_t j = 0; j < n; j++)
      if (v[j] != (int32_t)(j + k))
        return shmap_fail(ctx, "block %d element %lld: %d", k, (long long)j,
                          v[j]);
  }
  return 0;
}

START_TEST(t_read)
{
  rule_setup(_i);
  ck_assert_int_eq(setenv("SHMAP_ASYNC_CHECK", "1", 1), 0);
  char msg[1024];
  for (int how = 0; how < 4; how++) {
    early e = {how, 0};
    int rc = run4(touches, &e, msg, sizeof msg);
    ck_assert_int_eq(shmap__guard_watching(), 0);
    if (how == 3) {
      /* Device d's x is 2d, 2d+1, 2d, 2d+1: the psum_scatter over i=4,
       * tiled over dimension 0, leaves device 1 the sum of the 2d+1. */
      ck_assert_msg(rc == 0, "%s", msg);
      ck_assert_int_eq(e.seen, 1 + 3 + 5 + 7);
      continue;
    }
    const char *api = how == 1 ? "shmap_all_gather_start"
                               : "shmap_psum_scatter_start";
    char between[128];
    snprintf(between, sizeof between, "between %s and shmap_wait (call #1)",
             api);
    expect(rc, SHMAP_ESTATE, msg,
           (const char *[]){how == 1 ? "all_gather over 'i' on device 1"
                                     : "psum_scatter over 'i' on device 1",
                            how == 2 ? "the result was written" : READ_MSG,
                            between,
                            "it belongs to the transfer until the wait "
                            "returns",
                            NULL});
    /* A read sees the pattern: bytes ff 7f ff 7f. */
    if (how < 2)
      ck_assert_int_eq(e.seen, 0x7fff7fff);
    ck_assert_int_eq(run4(reuses, NULL, msg, sizeof msg), 0);
    ck_assert_int_eq(shmap__guard_watching(), 0);
  }
  unsetenv("SHMAP_ASYNC_CHECK");
  rule_teardown();
}
END_TEST

/* With SHMAP_ASYNC_CHECK=1 a result read before its wait holds the
 * poison, which every float dtype reads as NaN (the transfer writes a
 * scratch block, copied in at the wait), and the read fails the wait:
 * device 0 starts an all_gather over 'i' (mesh i=2) of the values 1, 2
 * and reads its result at once, while device 1 starts late (in thread
 * mode 50 ms late).  `seen` counts the poisoned elements read; `bad` the
 * elements neither final nor poison. */
typedef struct poisoned {
  shmap_dtype dt;
  int seen, bad;
} poisoned;

static bool poison_value(shmap_dtype dt, const void *p, double *v)
{
  switch (dt) {
  case SHMAP_F16: *v = shmap_f16_to_f32(*(const uint16_t *)p); break;
  case SHMAP_BF16: *v = shmap_bf16_to_f32(*(const uint16_t *)p); break;
  case SHMAP_F32: *v = *(const float *)p; break;
  case SHMAP_F64: *v = *(const double *)p; break;
  case SHMAP_C64: *v = ((const float *)p)[0] + ((const float *)p)[1]; break;
  default: *v = ((const double *)p)[0] + ((const double *)p)[1]; break;
  }
  return isnan(*v);
}

static int reads_early(shmap_ctx *ctx, void *arg)
{
  poisoned *q = arg;
  int d = shmap_ctx_device(ctx);
  size_t es = shmap_dtype_size(q->dt);
  unsigned char in[16] = {0};
  /* The value d + 1 in the dtype (the real part of a complex). */
  float f = (float)(d + 1);
  double g = d + 1;
  if (q->dt == SHMAP_F16)
    *(uint16_t *)in = shmap_f32_to_f16(f);
  else if (q->dt == SHMAP_BF16)
    *(uint16_t *)in = shmap_f32_to_bf16(f);
  else if (q->dt == SHMAP_F32 || q->dt == SHMAP_C64)
    memcpy(in, &f, sizeof f);
  else
    memcpy(in, &g, sizeof g);
  shmap_block x = {in, q->dt, 1, {1}};
  if (d == 1)
    usleep(50000);
  shmap_block *y;
  shmap_request *r;
  int rc = shmap_all_gather_start(ctx, &x, "i", 0, 1, &y, &r);
  if (rc)
    return rc;
  if (d == 0)
    for (int k = 0; k < 2; k++) {
      double v;
      if (poison_value(q->dt, (char *)y->data + (size_t)k * es, &v))
        q->seen++;
      else if (v != k + 1)
        q->bad++;
    }
  return shmap_wait(ctx, &r);
}

START_TEST(t_poison)
{
  set_mode(_i);
  ck_assert_int_eq(setenv("SHMAP_ASYNC_CHECK", "1", 1), 0);
  static const shmap_dtype dts[] = {SHMAP_F16, SHMAP_BF16, SHMAP_F32,
                                    SHMAP_F64, SHMAP_C64, SHMAP_C128};
  shmap_mesh *mesh = tu_mesh_new("i=2");
  for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
    poisoned q = {dts[t], 0, 0};
    int rc = shmap_map(mesh, reads_early, &q, 0, NULL, NULL, 0, NULL, NULL);
    expect(rc, SHMAP_ESTATE, rc ? shmap_errmsg() : "",
           (const char *[]){"all_gather over 'i' on device 0",
                            READ_MSG " between shmap_all_gather_start and "
                                     "shmap_wait (call #1)",
                            NULL});
    ck_assert_msg(q.bad == 0, "%s: %d elements neither final nor NaN",
                  shmap_dtype_name(dts[t]), q.bad);
    ck_assert_msg(q.seen == 2, "%s: %d of 2 elements poisoned",
                  shmap_dtype_name(dts[t]), q.seen);
    ck_assert_int_eq(shmap__guard_watching(), 0);
  }
  shmap_mesh_destroy(mesh);
  unsetenv("SHMAP_ASYNC_CHECK");
}
END_TEST

/* Device 2 makes another call as call #1: all_gather started against the
 * others' ppermute (arg 0), or a blocking psum (arg 1). */
static int mismatched(shmap_ctx *ctx, void *arg)
{
  int how = *(int *)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  shmap_block *y;
  shmap_request *r;
  int rc;
  if (shmap_ctx_device(ctx) != 2)
    rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r);
  else if (how == 0)
    rc = shmap_all_gather_start(ctx, x, "i", 0, 1, &y, &r);
  else {
    shmap_block *s = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){2});
    return s ? shmap_psum(ctx, s, "i") : -1;
  }
  return rc ? rc : shmap_wait(ctx, &r);
}

START_TEST(t_mismatch)
{
  rule_setup(_i);
  char msg[1024];
  for (int how = 0; how < 2; how++) {
    int rc = run4(mismatched, &how, msg, sizeof msg);
    expect(rc, SHMAP_EMISMATCH, msg,
           (const char *[]){"collective call #1 differs",
                            how ? "psum(i32[2]" : "all_gather(i32[2]",
                            "ppermute(i32[2]", NULL});
  }
  rule_teardown();
}
END_TEST

/* Device 3 fails while the others wait for requests it never joins. */
static int one_fails(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  if (shmap_ctx_device(ctx) == 3) {
    tu_sleep_ms(20);
    return shmap_fail(ctx, "device three gives up");
  }
  shmap_block *y, *g;
  shmap_request *r[2];
  int rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r[0]);
  if (rc || (rc = shmap_all_gather_start(ctx, x, "i", 0, 1, &g, &r[1])))
    return rc;
  rc = shmap_wait_all(ctx, 2, r);
  if (rc != SHMAP_ECANCELED || r[0] || r[1] ||
      !strstr(shmap_errmsg(), "device three gives up"))
    return shmap_fail(ctx, "wait_all = %d: %s", rc, shmap_errmsg());
  return rc;
}

START_TEST(t_failure)
{
  rule_setup(_i);
  char msg[1024];
  int rc = run4(one_fails, NULL, msg, sizeof msg);
  expect(rc, SHMAP_EBODY, msg,
         (const char *[]){"device 3", "device three gives up", NULL});
  rule_teardown();
}
END_TEST

/* Bad handles and arguments, each failing the map with its message. */
static int bad_args(shmap_ctx *ctx, void *arg)
{
  int which = *(int *)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  shmap_block *y;
  shmap_request *r = NULL, *copy;
  int done;
  switch (which) {
  case 0: return shmap_wait(ctx, NULL);
  case 1: return shmap_wait(ctx, &r);
  case 2: {
    int rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r);
    copy = r;
    if (rc || (rc = shmap_wait(ctx, &r)))
      return rc;
    return shmap_wait(ctx, &copy);
  }
  case 3: {
    int rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r);
    if (rc)
      return rc;
    rc = shmap_test(ctx, &r, NULL);
    shmap_wait(ctx, &r);
    return rc;
  }
  case 4: return shmap_wait_all(ctx, -1, NULL);
  case 5: return shmap_ppermute_start(ctx, x, "i", 4, ring, &y, NULL);
  case 6: return shmap_psum_start(ctx, NULL, "i", &r);
  default: return shmap_all_gather_start(ctx, x, "k", 0, 1, &y, &r);
  }
  (void)done;
}

START_TEST(t_bad_args)
{
  rule_setup(_i);
  static const struct {
    int code;
    const char *parts[3];
  } want[] = {
      {SHMAP_EINVAL, {"shmap_wait on device", "req is NULL", NULL}},
      {SHMAP_EINVAL, {"shmap_wait on device", "*req is NULL", NULL}},
      {SHMAP_EINVAL, {"shmap_wait on device", "not an open request", NULL}},
      {SHMAP_EINVAL, {"shmap_test on device", "done is NULL", NULL}},
      {SHMAP_EINVAL, {"shmap_wait_all on device", "n is negative", NULL}},
      {SHMAP_EINVAL, {"ppermute over 'i' on device", "req is NULL", NULL}},
      {SHMAP_EINVAL, {"psum", "NULL", NULL}},
      {SHMAP_EAXIS, {"all_gather", "'k'", NULL}},
  };
  char msg[1024];
  for (int k = 0; k < (int)(sizeof want / sizeof want[0]); k++) {
    int rc = run4(bad_args, &k, msg, sizeof msg);
    expect(rc, want[k].code, msg, want[k].parts);
  }
  rule_teardown();
}
END_TEST

/* ---- the watchdog and the trace ---------------------------------------- */

/* Device 0 waits for a request while device 1 sleeps before joining it. */
static int late_peer(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  const shmap_block *x = shmap_in(ctx, 0);
  if (shmap_ctx_device(ctx) == 1)
    tu_sleep_ms(400);
  shmap_block *y;
  shmap_request *r;
  int rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r);
  return rc ? rc : shmap_wait(ctx, &r);
}

START_TEST(t_watchdog)
{
  rule_setup(_i);
  char path[64] = "/tmp/shmap-async-wd-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_eq(dup2(fd, 2), 2);
  close(fd);
  ck_assert_int_eq(shmap_set_watchdog(0.1), 0);
  char msg[1024];
  int rc = run4(late_peer, NULL, msg, sizeof msg);
  ck_assert_int_eq(shmap_set_watchdog(0), 0);
  fflush(stderr);
  ck_assert_int_eq(dup2(saved, 2), 2);
  close(saved);
  char *out = tu_slurp(path, NULL);
  unlink(path);
  ck_assert_ptr_nonnull(out);
  ck_assert_msg(rc == 0, "map = %d: %s", rc, msg);
  ck_assert_msg(strstr(out, "shmap watchdog") &&
                    strstr(out, "request 0: ppermute over 'i' (call #1, "
                                "shmap_ppermute_start), started"),
                "the watchdog's report lacks the open request:\n%s", out);
  free(out);
  rule_teardown();
}
END_TEST

START_TEST(t_trace)
{
  rule_setup(_i);
  char path[64];
  snprintf(path, sizeof path, "/tmp/shmap-async-trace-%d.json", (int)getpid());
  ck_assert_int_eq(shmap_trace_start(path), 0);
  char msg[1024];
  int rc = run4(ring_ok, NULL, msg, sizeof msg);
  ck_assert_int_eq(shmap_trace_stop(), 0);
  ck_assert_msg(rc == 0, "map = %d: %s", rc, msg);
  char *t = tu_slurp(path, NULL);
  ck_assert_ptr_nonnull(t);
  /* A request slice and its transfer on the track of request slot 0 of
   * each device; the device's own track has its body only. */
  for (int d = 0; d < 4; d++) {
    char track[64];
    snprintf(track, sizeof track, "\"device %d (i=%d) requests (slot 0)\"", d,
             d);
    ck_assert_msg(strstr(t, track), "no track %s in the trace", track);
  }
  ck_assert_msg(strstr(t, "\"name\":\"ppermute request\",\"cat\":\"request\""),
                "no request slice");
  ck_assert_msg(strstr(t, "\"name\":\"ppermute transfer\",\"cat\":\"transfer\""),
                "no transfer slice");
  ck_assert_msg(!strstr(t, "\"name\":\"ppermute\",\"cat\":\"collective\""),
                "the transfer is on the device's own track");
  free(t);
  unlink(path);
  rule_teardown();
}
END_TEST


/* ---- a request's blocks -------------------------------------------------- */


#define NB 8192 /* elements of an outer block */
#define PATTERN 0x5a5a5a5a

typedef struct {
  int how; /* 0: the inner body leaves its request open; 1: it waits; 2: the
            * outer body has one open across the nested call */
  int nested_rc[4], overwritten[4], outer_rc[4];
  char msg[4][512];
} nest_arg;

static int inner(shmap_ctx *ctx, void *arg)
{
  nest_arg *a = arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *g;
  shmap_request *r;
  int rc = shmap_all_gather_start(ctx, x, "j", 0, 1, &g, &r);
  if (rc || a->how == 0)
    return rc;
  if ((rc = shmap_wait(ctx, &r)))
    return rc;
  /* The gathered block is the outer block again. */
  const int32_t *v = g->data, *w = shmap_in(shmap_ctx_outer(ctx), 0)->data;
  return memcmp(v, w, NB * sizeof *v) ? shmap_fail(ctx, "gather differs") : 0;
}

static int outer(shmap_ctx *ctx, void *arg)
{
  nest_arg *a = arg;
  int d = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *p = NULL;
  shmap_request *pr = NULL;
  int rc;
  static const int swap[2][2] = {{0, 1}, {1, 0}};
  if (a->how == 2 && (rc = shmap_ppermute_start(ctx, x, "i", 2, swap, &p,
                                                &pr)))
    return rc;
  rc = shmap_map_nested(ctx, inner, a, 1, &x, (const char *[]){"P('j')"}, 0,
                        NULL, NULL, NULL);
  a->nested_rc[d] = rc;
  snprintf(a->msg[d], sizeof a->msg[d], "%s", rc ? shmap_errmsg() : "");
  /* The block the outer body allocates next (of the size of the inner
   * result, so that it may reuse its memory) keeps what it is given. */
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){NB});
  if (!b)
    return -1;
  int32_t *v = b->data;
  for (int k = 0; k < NB; k++)
    v[k] = PATTERN;
  tu_sleep_ms(30);
  for (int k = 0; k < NB; k++)
    a->overwritten[d] += v[k] != PATTERN;
  if (pr) {
    int wrc = shmap_wait(ctx, &pr);
    a->outer_rc[d] = wrc;
    int32_t want = shmap_axis_index(ctx, "i") ? 0 : NB;
    if (!rc && !wrc && ((int32_t *)p->data)[0] != want)
      return shmap_fail(ctx, "ppermute gave %d, not %d",
                        ((int32_t *)p->data)[0], want);
    if (!rc)
      rc = wrc;
  }
  return rc;
}

/* A mesh i=2, j=2, a map over i with a nested map over j (arg 1), or
 * a map of each device (arg 0) whose body leaves a request open. */
static int leaves_open_big(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *g;
  shmap_request *r;
  return shmap_all_gather_start(ctx, x, "(i, j)", 0, 1, &g, &r);
}

START_TEST(t_open_at_end)
{
  set_mode(_i);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  int32_t *host = malloc(2 * NB * sizeof *host);
  for (int k = 0; k < 2 * NB; k++)
    host[k] = k;
  shmap_array *x = tu_array_from_host(SHMAP_I32, 1, (int64_t[]){2 * NB}, host);
  shmap_map_opts o = {.manual_axes = "i"};
  for (int how = 0; how < 3; how++) {
    /* A host whose body did not start before the map failed keeps -1. */
    nest_arg a = {.how = how, .nested_rc = {-1, -1, -1, -1}};
    int rc = shmap_map_ex(m, outer, &a, 1, &x, (const char *[]){"P('i')"}, 0,
                          NULL, NULL, &o);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? shmap_errmsg() : "");
    for (int d = 0; d < 4; d += 2) {
      ck_assert_msg(a.overwritten[d] == 0,
                    "how %d: device %d: %d elements of the block allocated "
                    "after the nested map were overwritten",
                    how, d, a.overwritten[d]);
      if (how)
        ck_assert_msg(a.nested_rc[d] == 0, "how %d: nested map = %d: %s",
                      how, a.nested_rc[d], a.msg[d]);
      else
        ck_assert_msg(a.nested_rc[d] == SHMAP_ESTATE ||
                          a.nested_rc[d] == SHMAP_ECANCELED ||
                          (a.nested_rc[d] == -1 &&
                           a.nested_rc[2 - d] != -1),
                      "device %d: nested map = %d (%s): %s", d,
                      a.nested_rc[d], shmap_strerror(a.nested_rc[d]),
                      a.msg[d]);
    }
    if (how) {
      ck_assert_msg(rc == 0, "how %d: map = %d: %s", how, rc, msg);
      continue;
    }
    expect(rc, SHMAP_ESTATE, msg,
           (const char *[]){"all_gather over 'j' on device",
                            "in a map nested over 'j' inside a map over 'i'",
                            "the body returned with this request open",
                            "(call #2, started by shmap_all_gather_start and "
                            "never waited for; 1 request open)",
                            NULL});
  }
  /* The same at the end of a map's body, with every device. */
  char msg[1024];
  int rc = shmap_map(m, leaves_open_big, NULL, 1, &x,
                     (const char *[]){"P(('i', 'j'))"}, 0, NULL, NULL);
  snprintf(msg, sizeof msg, "%s", rc ? shmap_errmsg() : "");
  expect(rc, SHMAP_ESTATE, msg,
         (const char *[]){"all_gather over ('i', 'j') on device",
                          "the body returned with this request open",
                          "(call #1, started by shmap_all_gather_start and "
                          "never waited for; 1 request open)",
                          NULL});
  ck_assert_msg(!strstr(msg, "nested"), "%s", msg);
  /* And the mesh works afterwards. */
  nest_arg a = {.how = 1};
  rc = shmap_map_ex(m, outer, &a, 1, &x, (const char *[]){"P('i')"}, 0, NULL,
                    NULL, &o);
  ck_assert_msg(rc == 0, "the map after: %d %s", rc, rc ? shmap_errmsg() : "");
  shmap_array_destroy(x);
  free(host);
  shmap_mesh_destroy(m);
}
END_TEST

typedef struct {
  int which; /* what device 1 frees while its request is open: 0 the
              * all_gather's result, 1 its input, 2 psum_start's block, 3 a
              * block of no request */
  int free_rc, later_rc;
  char msg[512];
} free_arg;

static int frees_open(shmap_ctx *ctx, void *arg)
{
  free_arg *a = arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){2});
  shmap_block *other = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){2});
  if (!x || !other)
    return -1;
  memcpy(x->data, in->data, 8);
  shmap_block *y = NULL;
  shmap_request *r;
  int rc = a->which == 2 ? shmap_psum_start(ctx, x, "i", &r)
                         : shmap_all_gather_start(ctx, x, "i", 0, 1, &y, &r);
  if (rc)
    return rc;
  if (shmap_ctx_device(ctx) != 1)
    return shmap_wait(ctx, &r);
  shmap_block *victim = a->which == 0 ? y : a->which == 3 ? other : x;
  a->free_rc = shmap_block_free(ctx, victim);
  snprintf(a->msg, sizeof a->msg, "%s", a->free_rc ? shmap_errmsg() : "");
  int wrc = shmap_wait(ctx, &r);
  /* Once the request is complete, the block may go. */
  if (a->which != 3)
    a->later_rc = shmap_block_free(ctx, victim);
  return a->free_rc ? a->free_rc : wrc;
}

START_TEST(t_free_open)
{
  rule_setup(_i);
  static const char *const what[3] = {
      "the block is the result of the open shmap_all_gather_start request "
      "(call #1, all_gather over 'i'); wait for it first",
      "the block is the input of the open shmap_all_gather_start request "
      "(call #1, all_gather over 'i'); wait for it first",
      "the block is the input and result of the open shmap_psum_start "
      "request (call #1, psum over 'i'); wait for it first"};
  char msg[1024];
  for (int which = 0; which < 4; which++) {
    free_arg a = {.which = which, .free_rc = -1, .later_rc = -1};
    int rc = run4(frees_open, &a, msg, sizeof msg);
    if (which == 3) {
      ck_assert_msg(rc == 0 && a.free_rc == 0, "map %d, free %d: %s", rc,
                    a.free_rc, msg);
      continue;
    }
    ck_assert_msg(a.free_rc == SHMAP_ESTATE, "which %d: free = %d: %s", which,
                  a.free_rc, a.msg);
    ck_assert_msg(strstr(a.msg, "shmap_block_free on device 1") &&
                      strstr(a.msg, what[which]),
                  "which %d: %s", which, a.msg);
    ck_assert_msg(a.later_rc == 0, "which %d: free after the wait = %d",
                  which, a.later_rc);
    expect(rc, SHMAP_ESTATE, msg,
           (const char *[]){"shmap_block_free on device 1", what[which],
                            NULL});
  }
  rule_teardown();
}
END_TEST

/* Devices with i < rows gather over j. */
static int row_gathers(shmap_ctx *ctx, void *arg)
{
  int rows = *(int *)arg;
  if (shmap_axis_index(ctx, "i") >= rows)
    return 0;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *g;
  shmap_request *r;
  int rc = shmap_all_gather_start(ctx, x, "j", 0, 1, &g, &r);
  if (rc || (rc = shmap_wait(ctx, &r)))
    return rc;
  const float *v = g->data;
  int base = shmap_axis_index(ctx, "i") * 16;
  for (int k = 0; k < 16; k++)
    if (v[k] != (float)(base + k))
      return shmap_fail(ctx, "element %d is %g", k, (double)v[k]);
  return 0;
}

static long max_rss_kb(void)
{
  struct rusage ru;
  ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
  return ru.ru_maxrss;
}

START_TEST(t_tables)
{
  set_mode(_i);
  shmap_mesh *m = tu_mesh_new("i=16, j=16");
  shmap_array *x = tu_arange_f32(1, (int64_t[]){256});
  shmap__runtime *rt = NULL;
  size_t per = 0;
  long rss0 = max_rss_kb();
  /* The first requests of the mesh: one row, then every device. */
  for (int rows = 1; rows <= 16; rows += 15) {
    int rc = shmap_map(m, row_gathers, &rows, 1, &x,
                       (const char *[]){"P(('i', 'j'))"}, 0, NULL, NULL);
    ck_assert_msg(rc == 0, "rows %d: %d %s", rows, rc,
                  rc ? shmap_errmsg() : "");
    rt = m->rt;
    size_t bytes = shmap__async_table_bytes(rt, &per);
    ck_assert_msg(bytes == 256 * sizeof(void *) + (size_t)rows * 16 * per,
                  "rows %d: the request tables take %zu bytes, want a "
                  "pointer per device and %zu bytes for each of the %d that "
                  "started one", rows, bytes, per, rows * 16);
    /* Under exploring schedules the devices carry out their own requests
     * (sched/progress.c): no helper threads. */
    ck_assert_int_eq(atomic_load(&rt->helpers), rt->explore_all ? 0 : rows * 16);
  }
  /* Each device's requests allocated once: all of them together and 256
   * helper threads (stacks touched little) stay well within 64 MiB; a
   * whole-mesh table per racing device took gigabytes at 4096.  (The
   * sanitizers' own memory per thread is more than that.) */
  long grew = max_rss_kb() - rss0;
  ck_assert_msg(TU_SANITIZED || grew < 64 * 1024,
                "the maps grew the peak RSS by %ld KiB", grew);
  shmap_array_destroy(x);
  shmap_mesh_destroy(m);
}
END_TEST

Suite *async_suite(void);
Suite *async_suite(void)
{
  Suite *s = suite_create("async");
  TCase *tc = tcase_create("results");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, t_results, 0, 3 * NMODES);
  tcase_add_loop_test(tc, t_mixed, 0, NMODES);
  suite_add_tcase(s, tc);
  tc = tcase_create("rules");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, t_limit, 0, NMODES);
  tcase_add_loop_test(tc, t_unwaited, 0, NMODES);
  tcase_add_loop_test(tc, t_check, 0, NMODES);
  tcase_add_loop_test(tc, t_read, 0, NMODES);
  /* t_poison reads a result before its wait on purpose; under the check
   * the progress helper writes a scratch block meanwhile, not the result,
   * so it is no data race and runs under ThreadSanitizer too. */
  tcase_add_loop_test(tc, t_poison, 0, NMODES);
  tcase_add_loop_test(tc, t_mismatch, 0, NMODES);
  tcase_add_loop_test(tc, t_failure, 0, NMODES);
  tcase_add_loop_test(tc, t_bad_args, 0, NMODES);
  tcase_add_loop_test(tc, t_watchdog, 0, NMODES);
  tcase_add_loop_test(tc, t_trace, 0, NMODES);
  suite_add_tcase(s, tc);
  tc = tcase_create("lifetimes");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, t_open_at_end, 0, NMODES);
  tcase_add_loop_test(tc, t_free_open, 0, NMODES);
  tcase_add_loop_test(tc, t_tables, 0, NMODES);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(async_suite()); }
