/* SPDX-License-Identifier: MIT */
/*
 * test_rehearse_price.c - the cluster rehearsal's pricing rules against
 * alpha-beta values computed by hand for every topology and collective,
 * the latency-bound regime, the presets' figures, and the messages for
 * bad fabric files.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "rehearse/fabric.h"
#include "testutil.h"

#define TIMEOUT 30
#define EQ(x, want) ck_assert_double_eq_tol((x), (want), (want) * 1e-12)

static const shmap__level ici = {"ici", SHMAP__TOPO_RING, 4.5e10, 1e-6, 0};
static const shmap__level line = {"ici", SHMAP__TOPO_LINE, 4.5e10, 1e-6, 0};
static const shmap__level nvl = {"nvlink", SHMAP__TOPO_SWITCH, 4.5e11, 1e-6,
                                 0};
static const shmap__level ib = {"ib", SHMAP__TOPO_SWITCH, 5e10, 5e-6, 0};
static const shmap__level full = {"full", SHMAP__TOPO_FULL, 1e10, 2e-6, 3e-6};

START_TEST(ring_rules)
{
  /* 16 MiB gathered over a ring of 16: 16 MiB * 15/16 over both
   * directions (9e10 B/s). */
  shmap__phase p = {&ici, 16, 1, 0};
  EQ(shmap__price_all_gather(&p, 16777216), 1.7476266666666666e-4);
  EQ(shmap__price_reduce_scatter(&p, 16777216), 1.7476266666666666e-4);
  /* A small message is latency bound: 8 hops of 1 us. */
  EQ(shmap__price_all_gather(&p, 1024), 8e-6);
  /* psum over 8: twice 8e6 * 7/8 / 9e10. */
  shmap__phase p8 = {&ici, 8, 1, 0};
  EQ(shmap__price_all_reduce(&p8, 8e6), 1.5555555555555556e-4);
  /* all_to_all over 8: 4 * 4 * 1e6 bytes cross the cut on 2 links. */
  EQ(shmap__price_all_to_all(&p8, 8e6), 1.7777777777777779e-4);
  /* Two torus axes of 4 at once: both axes' links, 2 + 2 hops. */
  shmap__phase p2 = {&ici, 16, 2, 4};
  EQ(shmap__price_all_gather(&p2, 16777216), 8.738133333333333e-05);
  EQ(shmap__price_all_gather(&p2, 64), 4e-6);
  /* One member: nothing to do. */
  shmap__phase p1 = {&ici, 1, 1, 0};
  ck_assert(shmap__price_all_reduce(&p1, 1e9) == 0);
}
END_TEST

START_TEST(line_switch_full_rules)
{
  /* Without wraparound: one direction, 3 hops. */
  shmap__phase pl = {&line, 4, 1, 0};
  EQ(shmap__price_all_gather(&pl, 4e6), 6.666666666666667e-05);
  EQ(shmap__price_all_gather(&pl, 8), 3e-6);
  /* NVLink switch, 8 GPUs: 1 GiB * 7/8 at 450 GB/s egress. */
  shmap__phase ps = {&nvl, 8, 1, 0};
  EQ(shmap__price_all_gather(&ps, 1073741824), 2.0878313244444445e-3);
  /* all_to_all on a switch: the port bound, 8e6 * 7/8 / 4.5e11. */
  EQ(shmap__price_all_to_all(&ps, 8e6), 1.5555555555555555e-05);
  /* InfiniBand across 4 nodes. */
  shmap__phase pi = {&ib, 4, 1, 0};
  EQ(shmap__price_all_gather(&pi, 4e8), 0.006);
  EQ(shmap__price_all_gather(&pi, 4), 15e-6);
  /* Fully connected: every peer's link at once, 1 hop, and the per-call
   * latency added. */
  shmap__phase pf = {&full, 4, 1, 0};
  EQ(shmap__price_all_gather(&pf, 4e6), 3e-6 + 1e-4);
  EQ(shmap__price_all_gather(&pf, 4), 3e-6 + 2e-6);
}
END_TEST

START_TEST(p2p_and_compute)
{
  /* One hop, the link shared by 2 messages. */
  EQ(shmap__price_p2p(&ici, 1e6, 1, 2), 4.4444444444444447e-05);
  EQ(shmap__price_p2p(&ici, 1e6, 1, 1), 1e6 / 4.5e10);
  /* Latency bound: 5 hops of a tiny message. */
  EQ(shmap__price_p2p(&ici, 16, 5, 1), 5e-6);
  ck_assert(shmap__price_p2p(&ici, 1e6, 0, 1) == 0);
  shmap_fabric *f;
  ck_assert_int_eq(shmap_fabric_load(&f, "tpu-v5e-16x16"), 0);
  /* 1.97e14 FLOP take 1 s; 8.19e11 bytes take 1 s. */
  EQ(shmap__price_compute(f, 1.97e14, 1), 1.0);
  EQ(shmap__price_compute(f, 1, 8.19e11 * 2), 2.0);
  ck_assert_double_eq(f->memcap, 17179869184.0);
  ck_assert_int_eq(f->levels[0].topo, SHMAP__TOPO_RING);
  shmap_fabric_free(f);
  ck_assert_int_eq(shmap_fabric_load(&f, "h100-multinode"), 0);
  ck_assert_str_eq(f->levels[f->axis_level[0]].name, "infiniband");
  ck_assert_str_eq(f->levels[f->axis_level[1]].name, "nvlink");
  ck_assert_double_eq(f->levels[0].bw, 4.5e11);
  ck_assert_double_eq(f->flops, 9.89e14);
  shmap_fabric_free(f);
}
END_TEST

/* Write `text` to a fresh file and load it; the error's message. */
static int load_text(const char *text, char *path, size_t n)
{
  snprintf(path, n, "/tmp/shmap-fabric-%d.json", (int)getpid());
  FILE *fp = fopen(path, "w");
  ck_assert_ptr_nonnull(fp);
  fputs(text, fp);
  fclose(fp);
  shmap_fabric *f = NULL;
  int rc = shmap_fabric_load(&f, path);
  shmap_fabric_free(f);
  unlink(path);
  return rc;
}

#define DEV "\"device\":{\"flops\":1e12,\"memory_bandwidth\":1e11," \
            "\"memory_bytes\":1e9}"

static void expect_error(const char *text, const char *what)
{
  char path[64], want[512];
  ck_assert_int_eq(load_text(text, path, sizeof path), SHMAP_EINVAL);
  snprintf(want, sizeof want, "shmap_fabric_load: %s: %s", path, what);
  ck_assert_str_eq(shmap_errmsg(), want);
}

START_TEST(file_errors)
{
  char path[64];
  ck_assert_int_eq(
      load_text("{\"name\":\"mine\"," DEV ",\"levels\":[{\"name\":\"nv\","
                "\"topology\":\"switch\",\"bandwidth\":1e11}],"
                "\"axes\":[{\"name\":\"i\",\"level\":\"nv\"}]}",
                path, sizeof path),
      0);
  expect_error("{" DEV ",\"levels\":[{\"name\":\"a\",\"topology\":\"rign\","
               "\"bandwidth\":1}]}",
               "key 'levels[0].topology': value 'rign' is not one of ring, "
               "torus, torus-nowrap, switch, full");
  expect_error("{\"device\":{\"flops\":\"fast\"},\"levels\":[]}",
               "key 'device.flops': value \"fast\" is not a number");
  expect_error("{\"device\":{\"flops\":1e12,\"memory_bandwidth\":-1,"
               "\"memory_bytes\":1}}",
               "key 'device.memory_bandwidth': value -1 is not positive");
  expect_error("{" DEV "}", "key 'levels': missing");
  expect_error("{" DEV ",\"levels\":[{\"name\":\"a\",\"topology\":\"ring\","
               "\"bandwidth\":1}],\"axes\":[{\"level\":\"b\"}]}",
               "key 'axes[0].level': value 'b' names no entry of \"levels\"");
  expect_error("[1]", "key '(top level)': value is not an object");
  expect_error("{\"device\":", "line 1 column 10: unexpected token near "
                               "end of file");
  shmap_fabric *f = (shmap_fabric *)1;
  ck_assert_int_eq(shmap_fabric_load(&f, "tpu-v9"), SHMAP_EINVAL);
  ck_assert_ptr_null(f);
  ck_assert_str_eq(shmap_errmsg(),
                   "shmap_fabric_load: 'tpu-v9' is no preset (tpu-v5e-16x16, "
                   "h100-8, h100-multinode) and no .json file");
  ck_assert_int_eq(shmap_fabric_load(&f, "/nonexistent/x.json"),
                   SHMAP_EINVAL);
  ck_assert_str_eq(shmap_errmsg(),
                   "shmap_fabric_load: /nonexistent/x.json: line -1 column "
                   "-1: unable to open /nonexistent/x.json: No such file or "
                   "directory");
}
END_TEST

static Suite *price_suite(void)
{
  Suite *s = suite_create("rehearse_price");
  TCase *tc = tcase_create("price");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, ring_rules);
  tcase_add_test(tc, line_switch_full_rules);
  tcase_add_test(tc, p2p_and_compute);
  tcase_add_test(tc, file_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(price_suite()); }
