/* SPDX-License-Identifier: MIT */
/*
 * test_svg.c - shmap_array_visualize_svg: the document it writes for
 * shardings, replicated blocks, values, stacked arrays and host arrays
 * (exact elements, in order), and its errors (exact codes and messages).
 * Each drawing test runs in both scheduling modes (threads, fibers): the
 * arrays are placed by the devices.  tests/check-pictures.py checks the
 * same pictures as a browser shows them.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "testutil.h"

#define TIMEOUT 60

/* What the call wrote, NUL-terminated (malloc'ed). */
static char *draw(const shmap_array *const arrays[], const char *const caps[],
                  int n, unsigned flags, int want_rc)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  int rc = shmap_array_visualize_svg(arrays, caps, n, flags, f);
  ck_assert_msg(rc == want_rc, "shmap_array_visualize_svg returned %d (%s), "
                "expected %d", rc, shmap_errmsg(), want_rc);
  ck_assert_int_eq(fclose(f), 0);
  return buf;
}

/* How many times needle occurs in s. */
static int count(const char *s, const char *needle)
{
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* An f32 array holding 0, 1, 2, ... laid out by spec on mesh m. */
static shmap_array *arange_on(shmap_mesh *m, const char *spec, int rank,
                              const int64_t shape[])
{
  int64_t n = 1;
  for (int k = 0; k < rank; k++)
    n *= shape[k];
  float *v = malloc(sizeof(float) * (size_t)n);
  ck_assert_ptr_nonnull(v);
  for (int64_t k = 0; k < n; k++)
    v[k] = (float)k;
  shmap_array *a = NULL;
  int rc = shmap_array_from_host_sharded(&a, m, spec, SHMAP_F32, rank, shape,
                                         v);
  ck_assert_msg(rc == 0, "%s: %s", spec, shmap_errmsg());
  free(v);
  return a;
}

/* Asserts that the strings of want[] occur in s in that order. */
static void in_order(const char *s, const char *const want[], int n)
{
  const char *p = s;
  for (int k = 0; k < n; k++) {
    const char *q = strstr(p, want[k]);
    ck_assert_msg(q, "\"%s\" (item %d) missing after offset %ld in:\n%s",
                  want[k], k, (long)(p - s), s);
    p = q + strlen(want[k]);
  }
}

START_TEST(sharding_rows_replicated)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  shmap_array *s = arange_on(m, "P('i')", 2, (const int64_t[]){8, 8});
  const shmap_array *arr[1] = {s};
  char *svg = draw(arr, NULL, 1, 0, 0);
  /* Two cells of two stripes each: d0 d1 above, d2 d3 below. */
  static const char *const want[] = {
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"",
      ">f32[8,8] sharded P('i') over mesh i=2, j=2</text>",
      "data-device=\"0\" x=\"4\" y=\"28\" width=\"48\" height=\"48\" "
      "fill=\"#8dd3c7\"",
      "data-device=\"1\" x=\"52\" y=\"28\" width=\"48\" height=\"48\" "
      "fill=\"#ffffb3\"",
      ">d0 d1</text>", ">[0:4, 0:8]</text>",
      "data-device=\"2\"", "fill=\"#bebada\"",
      "data-device=\"3\"", "fill=\"#fb8072\"",
      ">d2 d3</text>", ">[4:8, 0:8]</text>", "</svg>\n"};
  in_order(svg, want, (int)(sizeof want / sizeof want[0]));
  ck_assert_int_eq(count(svg, "class=\"block\""), 4);
  free(svg);
  shmap_array_destroy(s);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(values_before_after)
{
  tu_set_sched(_i);
  shmap_mesh *m = tu_mesh_new("i=4");
  shmap_array *s = arange_on(m, "P('i')", 1, (const int64_t[]){8});
  shmap_array *r = arange_on(m, "P()", 1, (const int64_t[]){8});
  const shmap_array *arr[2] = {s, r};
  const char *caps[2] = {"BEFORE", "AFTER <all>"};
  char *svg = draw(arr, caps, 2, SHMAP_SVG_VALUES, 0);
  static const char *const want[] = {
      ">BEFORE: f32[8] sharded P('i') over mesh i=4</text>",
      ">d0</text>", ">[0:2]</text>", ">0 1</text>",
      ">d3</text>", ">[6:8]</text>", ">6 7</text>",
      ">AFTER &lt;all&gt;: f32[8] sharded P() over mesh i=4</text>",
      "data-device=\"0\"", "data-device=\"1\"", "data-device=\"2\"",
      "data-device=\"3\"", ">d0 d1 d2 d3</text>", ">[0:8]</text>",
      ">0 1 2 3 4 5 6 7</text>"};
  in_order(svg, want, (int)(sizeof want / sizeof want[0]));
  ck_assert_int_eq(count(svg, "class=\"block\""), 8);
  free(svg);
  shmap_array_destroy(r);
  shmap_array_destroy(s);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(host_array_and_large_blocks)
{
  shmap_array *h = tu_arange_f32(2, (const int64_t[]){2, 3});
  const shmap_array *arr[1] = {h};
  char *svg = draw(arr, (const char *[]){""}, 1, SHMAP_SVG_VALUES, 0);
  static const char *const want[] = {
      ">f32[2,3] on the host (not sharded)</text>", "fill=\"#dddddd\"",
      ">host</text>"};
  in_order(svg, want, 3);
  free(svg);
  shmap_array_destroy(h);

  shmap_mesh *m = tu_mesh_new("i=2");
  shmap_array *s = arange_on(m, "P('i')", 1, (const int64_t[]){40});
  arr[0] = s;
  svg = draw(arr, NULL, 1, SHMAP_SVG_VALUES, 0);
  ck_assert_int_eq(count(svg, ">(20 values)</text>"), 2);
  free(svg);
  shmap_array_destroy(s);
  shmap_mesh_destroy(m);
}
END_TEST

static void err(const shmap_array *const arrays[], int n, unsigned flags,
                FILE *out, int code, const char *msg)
{
  int rc = shmap_array_visualize_svg(arrays, NULL, n, flags, out);
  ck_assert_msg(rc == code, "returned %d, expected %d", rc, code);
  ck_assert_str_eq(shmap_errmsg(), msg);
}

START_TEST(errors)
{
  shmap_array *h = tu_arange_f32(1, (const int64_t[]){4});
  shmap_array *h3 = tu_arange_f32(3, (const int64_t[]){2, 2, 2});
  const shmap_array *one[1] = {h}, *two[2] = {h, NULL}, *r3[1] = {h3};
  err(NULL, 1, 0, stdout, SHMAP_EINVAL,
      "shmap_array_visualize_svg: NULL argument");
  err(one, 1, 0, NULL, SHMAP_EINVAL,
      "shmap_array_visualize_svg: NULL argument");
  err(one, 0, 0, stdout, SHMAP_EINVAL,
      "shmap_array_visualize_svg: 0 arrays; at least 1 is needed");
  err(one, 1, 6, stdout, SHMAP_EINVAL,
      "shmap_array_visualize_svg: unknown flags 0x6");
  err(two, 2, 0, stdout, SHMAP_EINVAL,
      "shmap_array_visualize_svg: array 1 is NULL");
  err(r3, 1, 0, stdout, SHMAP_ESHAPE,
      "shmap_array_visualize_svg: array 0 has rank 3 and cannot be drawn; "
      "rank 0, 1 and 2 can");
  /* A stream that refuses writes. */
  FILE *ro = fopen("/dev/null", "r");
  ck_assert_ptr_nonnull(ro);
  err(one, 1, 0, ro, SHMAP_ESYS,
      "shmap_array_visualize_svg: writing the picture failed");
  fclose(ro);
  shmap_array_destroy(h3);
  shmap_array_destroy(h);
}
END_TEST

static Suite *svg_suite(void)
{
  Suite *s = suite_create("svg");
  TCase *tc = tcase_create("draw");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, sharding_rows_replicated, 0, 2);
  tcase_add_loop_test(tc, values_before_after, 0, 2);
  tcase_add_test(tc, host_array_and_large_blocks);
  tcase_add_test(tc, errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  return tu_run_suite(svg_suite());
}
