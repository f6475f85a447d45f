/* SPDX-License-Identifier: MIT */
/*
 * test_fail_scale.c - a failure on a mesh of 4096 devices ends the map in
 * time proportional to the work, not to waking thousands of threads one
 * after the other for every device that leaves.
 *
 * On a mesh i=4096 (i=1024 under a sanitizer), one device fails (its body calls shmap_fail, at once
 * or after 200 ms, when every other device sleeps in a psum over 'i');
 * the map must return SHMAP_EBODY with the failing device's message, and
 * a correct psum map on the same mesh must then give 4096 on every device.
 * In thread mode (4096 threads) and in fiber mode.  Nothing is timed: the
 * Check timeout (generous, for sanitizer builds on a busy machine) is what
 * fails a release that is quadratic in the number of devices, which took
 * minutes here.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Under a sanitizer 4096 devices take about ten CPU minutes (each thread
 * or fiber gets the sanitizer's own state); 1024 take the same paths, and
 * the plain build keeps the scale that a quadratic release would fail. */
#define NDEV (TU_SANITIZED ? 1024 : 4096)
#define TIMEOUT 600

typedef struct fail_arg {
  int who;   /* the failing device */
  int delay; /* ms before it fails */
} fail_arg;

static int body_fail(shmap_ctx *ctx, void *arg)
{
  const fail_arg *fa = arg;
  if (shmap_ctx_device(ctx) == fa->who) {
    if (fa->delay)
      tu_sleep_ms(fa->delay);
    return shmap_fail(ctx, "boom");
  }
  float x = 1;
  shmap_block b = {&x, SHMAP_F32, 0, {0}};
  return shmap_psum(ctx, &b, "i");
}

typedef struct sum_arg {
  _Atomic int bad;
} sum_arg;

static int body_sum(shmap_ctx *ctx, void *arg)
{
  sum_arg *sa = arg;
  float x = 1;
  shmap_block b = {&x, SHMAP_F32, 0, {0}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc == 0 && x != (float)NDEV)
    sa->bad++;
  return rc;
}

static void run_case(const char *mode)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", mode, 1), 0);
  char text[32];
  snprintf(text, sizeof text, "i=%d", NDEV);
  shmap_mesh *m = tu_mesh_new(text);
  static const fail_arg cases[] = {{NDEV / 2, 0}, {NDEV / 2 + 1, 200},
                                   {0, 200}, {NDEV - 1, 0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int rc = shmap_map(m, body_fail, (void *)&cases[c], 0, NULL, NULL, 0, NULL,
                       NULL);
    char want[64];
    snprintf(want, sizeof want, "device %d (i=%d) failed: boom",
             cases[c].who, cases[c].who);
    ck_assert_msg(rc == SHMAP_EBODY, "%s, case %zu: shmap_map = %d (%s): %s",
                  mode, c, rc, shmap_strerror(rc), shmap_errmsg());
    ck_assert_msg(strcmp(shmap_errmsg(), want) == 0,
                  "%s, case %zu: message \"%s\", want \"%s\"", mode, c,
                  shmap_errmsg(), want);
    sum_arg sa = {0};
    tu_map_ok(shmap_map(m, body_sum, &sa, 0, NULL, NULL, 0, NULL, NULL), mode);
    ck_assert_int_eq(sa.bad, 0);
  }
  shmap_mesh_destroy(m);
}

START_TEST(threads) { run_case("threads"); }
END_TEST

START_TEST(fibers) { run_case("fibers"); }
END_TEST

int main(void)
{
  Suite *s = suite_create("fail_scale");
  TCase *tc = tcase_create("fail_scale");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, threads);
  tcase_add_test(tc, fibers);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
