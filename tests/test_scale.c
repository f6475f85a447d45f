/* SPDX-License-Identifier: MIT */
/*
 * test_scale.c - meshes of 64, 256 and 1024 devices on a 2-core machine:
 * an empty map, a psum of 64 floats and an all_gather, with exact values,
 * in the default mode (fibers when devices outnumber cores) and with one
 * thread per device for the smaller meshes.
 */
#include <check.h>
#include <shmap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

static int empty_body(shmap_ctx *ctx, void *arg)
{
  (void)ctx;
  (void)arg;
  return 0;
}

/* Each device sums 64 floats holding its own number, and gathers one
 * value per device; output 0 is the psum (replicated), output 1 the
 * gathered vector (replicated). */
static int scale_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  shmap_block *s = shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){64});
  if (!s)
    return -1;
  float *v = s->data;
  for (int i = 0; i < 64; i++)
    v[i] = (float)(dev + i);
  int rc = shmap_psum(ctx, s, "d");
  if (rc)
    return rc;
  int32_t mine = dev;
  shmap_block one = {&mine, SHMAP_I32, 1, {1}};
  shmap_block *all;
  if ((rc = shmap_all_gather(ctx, &one, "d", 0, 1, &all)))
    return rc;
  return shmap_out_set(ctx, 1, all);
}

static void run_scale(int ndev)
{
  char text[32];
  snprintf(text, sizeof text, "d=%d", ndev);
  shmap_mesh *mesh = tu_mesh_new(text);
  ck_assert_int_eq(shmap_mesh_ndevices(mesh), ndev);
  for (int k = 0; k < 3; k++)
    ck_assert_msg(shmap_map(mesh, empty_body, NULL, 0, NULL, NULL, 0, NULL,
                            NULL) == 0,
                  "empty map on %d devices: %s", ndev, shmap_errmsg());
  shmap_array *out[2];
  int rc = shmap_map(mesh, scale_body, NULL, 0, NULL, NULL, 2, out,
                     (const char *[]){"P()", "P()"});
  ck_assert_msg(rc == 0, "map on %d devices: %s", ndev, shmap_errmsg());
  float sum[64];
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)ndev);
  ck_assert_ptr_nonnull(ids);
  ck_assert_int_eq(shmap_array_to_host(out[0], sum), 0);
  ck_assert_int_eq(shmap_array_to_host(out[1], ids), 0);
  /* sum over d of (d + i): exact in f32 for these sizes */
  for (int i = 0; i < 64; i++) {
    float want = 0;
    for (int d = 0; d < ndev; d++)
      want += (float)(d + i);
    ck_assert_msg(sum[i] == want, "%d devices: sum[%d] = %g, want %g", ndev, i,
                  (double)sum[i], (double)want);
  }
  for (int d = 0; d < ndev; d++)
    ck_assert_int_eq(ids[d], d);
  free(ids);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(out[1]);
  shmap_mesh_destroy(mesh);
}

START_TEST(scale_default)
{
  static const int sizes[] = {64, 256, 1024};
  run_scale(sizes[_i]);
}
END_TEST

START_TEST(scale_threads)
{
  /* One thread per device still works for the smaller meshes. */
  setenv("SHMAP_SCHED", "threads", 1);
  run_scale(64);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("scale");
  TCase *tc = tcase_create("meshes");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, scale_default, 0, 3);
  tcase_add_test(tc, scale_threads);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
