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

/* The worked examples of J. Austin et al., "How to Scale Your Model"
 * (jax-ml.github.io/scaling-book), chapter "Sharded Matrices": its pop quiz
 * on AllGather time, its problems 2 and 3 (AllGather latency, latency-bound
 * AllGather) and its summary table.  TPU v5e and v4p ICI: 4.5e10 B/s per
 * link per direction (9e10 B/s both ways), about 1 us per hop.
 *
 * The book's bandwidth-bound times are V/W, the limit of the exact ring
 * rule V(N-1)/(N W) for a large axis, which the book's table states too.
 * The rehearsal prices the exact rule, so its values are the book's times
 * V/W times (N-1)/N; shmap-rehearse(7) says so.  Where the book counts
 * hops or a line without wraparound, the values are the book's exactly. */
static const shmap__level book_ring = {"ici", SHMAP__TOPO_RING, 4.5e10, 1e-6,
                                       0};
static const shmap__level book_line = {"ici", SHMAP__TOPO_LINE, 4.5e10, 1e-6,
                                       0};

START_TEST(scaling_book_all_gather)
{
  /* Pop quiz 2, part 1: AllGather_Y([E_Y, F]) -> [E, F] on a TPU v5e mesh
   * {X:8, Y:4}, E = 2048, F = 8192 in bfloat16: V = 2 * 2048 * 8192 bytes.
   * The book: V / 9e10 = 377 us (V rounded to 34e6; 372.8 us unrounded). */
  double v = 2.0 * 2048 * 8192;
  shmap__phase ring4 = {&book_ring, 4, 1, 0};
  EQ(shmap__price_all_gather(&ring4, v), v / 9e10 * 3 / 4);
  ck_assert_double_eq_tol(v / 9e10, 377e-6, 5e-6);
  /* The book then notes that a v5e axis of 4 has no wraparound link and
   * gives 3 hops of V/4 at 4.5e10 B/s: 3 * 8.4e6 / 4.5e10 = 560 us.  On a
   * line the rule is exactly that (8.4e6 is V/4 = 8388608 rounded). */
  shmap__phase line4 = {&book_line, 4, 1, 0};
  EQ(shmap__price_all_gather(&line4, v), 3 * (v / 4) / 4.5e10);
  ck_assert_double_eq_tol(shmap__price_all_gather(&line4, v), 560e-6,
                          1e-6);
  /* Part 2: E = F = 256, V = 131072 bytes: 2.2 us of bandwidth, below the
   * 3 hops of 1 us, so latency bound at 3 us, the book's figure. */
  EQ(shmap__price_all_gather(&line4, 2.0 * 256 * 256), 3e-6);
  /* Problem 3: AllGather_X([B_X]) of 128 bfloat16 on a TPU v4p axis of 4
   * with wraparound: latency bound, 2 hops, 2 us. */
  EQ(shmap__price_all_gather(&ring4, 256), 2e-6);
  /* Problem 2, part 1: AllGather_X([B_X, D_Y]) on a v4p 4x4x4, B = 1024,
   * D = 4096: V = 2BD/4 bytes, the book's V / 9e10 = 23 us. */
  double b = 1024, d = 4096;
  EQ(shmap__price_all_gather(&ring4, 2 * b * d / 4), 2 * b * d / 4 / 9e10 * 3 / 4);
  ck_assert_double_eq_tol(2 * b * d / 4 / 9e10, 23e-6, 0.5e-6);
  /* Part 2: AllGather_XY of the whole array, two axes' links at once:
   * the book's 2BD / (2 * 9e10) = 46 us, here times 15/16. */
  shmap__phase ring44 = {&book_ring, 16, 2, 4};
  EQ(shmap__price_all_gather(&ring44, 2 * b * d), 2 * b * d / 18e10 * 15 / 16);
  ck_assert_double_eq_tol(2 * b * d / 18e10, 46e-6, 1e-6);
}
END_TEST

START_TEST(scaling_book_reduce_all_to_all)
{
  double b = 1024, d = 4096;
  shmap__phase ring4 = {&book_ring, 4, 1, 0};
  /* The summary table: a ReduceScatter costs an AllGather, an AllReduce
   * two.  Problem 2, part 3: AllReduce_Z of the book's 2BD bytes,
   * 4BD / 9e10 = 190 us (186.4 us unrounded), here times 3/4. */
  EQ(shmap__price_reduce_scatter(&ring4, 2 * b * d),
     shmap__price_all_gather(&ring4, 2 * b * d));
  EQ(shmap__price_all_reduce(&ring4, 2 * b * d), 4 * b * d / 9e10 * 3 / 4);
  ck_assert_double_eq_tol(4 * b * d / 9e10, 190e-6, 5e-6);
  /* The table's AllToAll: a quarter of the AllGather's V / 9e10 on a
   * bidirectional ring, V the whole array (N devices of V / N bytes).
   * The bisection rule gives exactly that on an even ring, without the
   * (N-1)/N factor, as the book's footnote counts N^2/4 pieces of V/N^2. */
  for (int n = 4; n <= 16; n *= 2) {
    shmap__phase p = {&book_ring, n, 1, 0};
    double v = 64e6;
    EQ(shmap__price_all_to_all(&p, v / n), v / 9e10 / 4);
  }
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
  tcase_add_test(tc, scaling_book_all_gather);
  tcase_add_test(tc, scaling_book_reduce_all_to_all);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(price_suite()); }
