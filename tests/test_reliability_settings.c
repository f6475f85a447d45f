/* SPDX-License-Identifier: MIT */
/*
 * test_reliability_settings.c - the SHMAP_* environment variables: their
 * parsers, and a bad value reported once on stderr with the accepted values
 * while the default is used (the map still runs), in both scheduling modes
 * where the variable matters to both.  Each test runs in a process of its
 * own (Check's fork mode), so settings read once per process start fresh.
 */
#include <check.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include <uv.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#endif

#include "map/map.h"
#include "sched/runtime.h"
#include "settings.h"
#include "testutil.h"

#include <stdint.h>

#define TIMEOUT 120

/* ---- parsers --------------------------------------------------------------- */

START_TEST(test_parse_size)
{
  static const struct {
    const char *text;
    bool ok;
    size_t want;
  } cases[] = {
      {"65536", true, 65536},       {"64k", true, 65536},
      {"64K", true, 65536},         {"8M", true, (size_t)8 << 20},
      {"8m", true, (size_t)8 << 20}, {"1G", true, (size_t)1 << 30},
      {"0", true, 0},               {"1e6", false, 0},
      {"-1", false, 0},             {"", false, 0},
      {"64kb", false, 0},           {" 64k", false, 0},
      {"64 k", false, 0},           {"k", false, 0},
      {"0x100", false, 0},          {"99999999999999999999", false, 0},
      {"17179869184G", false, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t v = 12345;
    bool ok = shmap__parse_size(cases[i].text, &v);
    ck_assert_msg(ok == cases[i].ok, "parse_size(\"%s\") = %d", cases[i].text,
                  ok);
    if (ok)
      ck_assert_msg(v == cases[i].want, "parse_size(\"%s\") = %zu",
                    cases[i].text, v);
  }
  double s;
  ck_assert(shmap__parse_seconds("10", &s) && s == 10);
  ck_assert(shmap__parse_seconds("0.5", &s) && s == 0.5);
  ck_assert(shmap__parse_seconds("0", &s) && s == 0);
  ck_assert(!shmap__parse_seconds("abc", &s));
  ck_assert(!shmap__parse_seconds("-1", &s));
  ck_assert(!shmap__parse_seconds("1s", &s));
  ck_assert(!shmap__parse_seconds("nan", &s));
  ck_assert(!shmap__parse_seconds("inf", &s));
  long l;
  ck_assert(shmap__parse_long("42", 0, 100, &l) && l == 42);
  ck_assert(!shmap__parse_long("101", 0, 100, &l));
  ck_assert(!shmap__parse_long("-1", 0, 100, &l));
  ck_assert(!shmap__parse_long("4x", 0, 100, &l));
}
END_TEST

/* ---- messages ------------------------------------------------------------------- */

static char errfile[] = "/tmp/shmap_settings_errXXXXXX";
static int saved_fd = -1;

static void capture_start(void)
{
  int fd = mkstemp(errfile);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  saved_fd = dup(2);
  dup2(fd, 2);
  close(fd);
}

/* What the library wrote on stderr since capture_start (malloc'ed). */
static char *capture_end(void)
{
  fflush(stderr);
  dup2(saved_fd, 2);
  close(saved_fd);
  char *s = tu_slurp(errfile, NULL);
  unlink(errfile);
  strcpy(errfile, "/tmp/shmap_settings_errXXXXXX");
  ck_assert_ptr_nonnull(s);
  return s;
}

static int count(const char *s, const char *sub)
{
  int n = 0;
  for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub))
    n++;
  return n;
}

static int body_psum(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  float v = 1;
  shmap_block b = {&v, SHMAP_F32, 0, {0}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc == 0 && v != (float)shmap_axis_size(ctx, "i"))
    return shmap_fail(ctx, "psum gave %g", (double)v);
  return rc;
}

/* Two meshes with one map each: the message must come once. */
static char *two_maps(const char *mode)
{
  if (mode)
    ck_assert_int_eq(setenv("SHMAP_SCHED", mode, 1), 0);
  capture_start();
  for (int i = 0; i < 2; i++) {
    shmap_mesh *m = tu_mesh_new("i=3");
    tu_map_ok(shmap_map(m, body_psum, NULL, 0, NULL, NULL, 0, NULL, NULL),
              "map with a bad setting");
    shmap_mesh_destroy(m);
  }
  return capture_end();
}

static void expect_once(const char *out, const char *msg)
{
  ck_assert_msg(count(out, msg) == 1, "stderr has %d times \"%s\":\n%s",
                count(out, msg), msg, out);
}

/* A SHMAP_ name the library does not read is named once, with the nearest
 * setting when one is near, and the maps still run (both modes). */
static void unknown_names(const char *mode)
{
  ck_assert_int_eq(setenv("SHMAP_SCHEDULE", "threads", 1), 0);
  ck_assert_int_eq(setenv("SHMAP_TRCE", "/dev/null", 1), 0);
  ck_assert_int_eq(setenv("SHMAP_NOT_A_SETTING_AT_ALL", "1", 1), 0);
  char *out = two_maps(mode);
  expect_once(out, "shmap: SHMAP_SCHEDULE is not a setting of libshmap and "
                   "is ignored; did you mean SHMAP_SCHED?\n");
  expect_once(out, "shmap: SHMAP_TRCE is not a setting of libshmap and is "
                   "ignored; did you mean SHMAP_TRACE?\n");
  expect_once(out, "shmap: SHMAP_NOT_A_SETTING_AT_ALL is not a setting of "
                   "libshmap and is ignored (settings: shmap(7), "
                   "ENVIRONMENT)\n");
  ck_assert_msg(count(out, "shmap: ") == 3, "other lines:\n%s", out);
  free(out);
}

START_TEST(test_unknown_names_threads) { unknown_names("threads"); }
END_TEST

START_TEST(test_unknown_names_fibers) { unknown_names("fibers"); }
END_TEST

/* Every setting the library documents is known: none of them is named. */
START_TEST(test_known_names)
{
  static const char *const names[] = {
      "SHMAP_ASYNC_CHECK", "SHMAP_HUGEPAGES", "SHMAP_MEMBARRIER",
      "SHMAP_SIMD",        "SHMAP_SPIN",      "SHMAP_STACK_SIZE",
      "SHMAP_TRACE",       "SHMAP_WATCHDOG",  "SHMAP_WORKERS"};
  static const char *const values[] = {"0", "1", "1", "generic", "0",
                                       "1M", "",  "0", "2"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    ck_assert_int_eq(setenv(names[i], values[i], 1), 0);
  char *out = two_maps("fibers");
  ck_assert_msg(count(out, "not a setting") == 0, "%s", out);
  free(out);
}
END_TEST

START_TEST(test_bad_sched)
{
  setenv("SHMAP_SCHED", "fiber", 1);
  char *out = two_maps(NULL);
  expect_once(out, "shmap: SHMAP_SCHED=\"fiber\" is not valid (accepted: "
                   "threads, fibers, explore, auto); using auto\n");
  free(out);
}
END_TEST

/* SHMAP_SIMD is read at the first reduction: a bad name is reported once,
 * the default kernels are used and the psum is still right. */
START_TEST(test_bad_simd)
{
  setenv("SHMAP_SIMD", "sse9", 1);
  char *out = two_maps(_i ? "fibers" : "threads");
  expect_once(out, "shmap: SHMAP_SIMD=\"sse9\" is not valid (accepted: "
                   "generic, avx2, avx512); using the default (avx2 where "
                   "the processor has it)\n");
  free(out);
}
END_TEST

START_TEST(test_bad_workers)
{
  setenv("SHMAP_WORKERS", "0", 1);
  char *out = two_maps("fibers");
  expect_once(out, "shmap: SHMAP_WORKERS=\"0\" is not valid (accepted: a number "
                   "of worker threads from 1 to 4096); using one worker per "
                   "processor\n");
  free(out);
  /* A new bad value is reported again. */
  setenv("SHMAP_WORKERS", "two", 1);
  out = two_maps("fibers");
  expect_once(out, "SHMAP_WORKERS=\"two\" is not valid");
  free(out);
}
END_TEST

START_TEST(test_bad_spin)
{
  for (int m = 0; m < 2; m++) {
    setenv("SHMAP_SPIN", m ? "lots" : "-5", 1);
    char *out = two_maps(m ? "fibers" : "threads");
    char want[160];
    snprintf(want, sizeof want,
             "shmap: SHMAP_SPIN=\"%s\" is not valid (accepted: a spin time "
             "in microseconds from 0 to 1000000000); using the default\n",
             m ? "lots" : "-5");
    expect_once(out, want);
    free(out);
  }
}
END_TEST

START_TEST(test_bad_stack_size)
{
  static const char *const bad[] = {"16384", "1e6", "64kb", "-8M"};
  for (int m = 0; m < 2; m++)
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      setenv("SHMAP_STACK_SIZE", bad[i], 1);
      char *out = two_maps(m ? "fibers" : "threads");
      char want[256];
      snprintf(want, sizeof want,
               "shmap: SHMAP_STACK_SIZE=\"%s\" is not valid (accepted: a size "
               "in bytes such as 65536, 64k, 8M or 1G, at least 64k); using "
               "the default (4M for fibers, the system's for threads)\n",
               bad[i]);
      /* Once for the two meshes; again when the value changes. */
      expect_once(out, want);
      free(out);
    }
  /* The accepted forms run, at the minimum too, in both modes. */
  static const char *const good[] = {"65536", "64k", "8M"};
  for (int m = 0; m < 2; m++)
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
      setenv("SHMAP_STACK_SIZE", good[i], 1);
      char *out = two_maps(m ? "fibers" : "threads");
      ck_assert_msg(!strstr(out, "SHMAP_STACK_SIZE"), "%s: stderr:\n%s",
                    good[i], out);
      free(out);
    }
}
END_TEST

START_TEST(test_bad_watchdog)
{
  setenv("SHMAP_WATCHDOG", "abc", 1);
  char *out = two_maps("threads");
  expect_once(out, "shmap: SHMAP_WATCHDOG=\"abc\" is not valid (accepted: a "
                   "period in seconds such as 10 or 0.5, 0 for none); using "
                   "none\n");
  /* No watchdog report follows. */
  ck_assert_msg(!strstr(out, "shmap watchdog:"), "%s", out);
  free(out);
}
END_TEST

START_TEST(test_auto_sched)
{
  /* Without a debugger, auto runs the devices as fibers even when every
   * device could have a core (see THREADS in shmap(7)); unset is auto. */
  static const char *const modes[] = {NULL, "auto", "threads", "fibers"};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    if (modes[i])
      ck_assert_int_eq(setenv("SHMAP_SCHED", modes[i], 1), 0);
    else
      ck_assert_int_eq(unsetenv("SHMAP_SCHED"), 0);
    shmap_mesh *m = tu_mesh_new("i=2");
    tu_map_ok(shmap_map(m, body_psum, NULL, 0, NULL, NULL, 0, NULL, NULL),
              "map");
    int want = modes[i] && strcmp(modes[i], "threads") == 0 ? SHMAP__THREADS
                                                            : SHMAP__FIBERS;
    ck_assert_msg(m->rt->mode == want, "SHMAP_SCHED=%s: mode %d, want %d",
                  modes[i] ? modes[i] : "(unset)", m->rt->mode, want);
    shmap_mesh_destroy(m);
  }
}
END_TEST

START_TEST(test_hugepages)
{
  const size_t huge = (size_t)2 << 20;
  /* Default and 1: a large allocation starts on a huge page boundary, and
   * is usable to its last byte. */
  static const char *const on[] = {NULL, "1"};
  for (int i = 0; i < 2; i++) {
    if (on[i])
      ck_assert_int_eq(setenv("SHMAP_HUGEPAGES", on[i], 1), 0);
    else
      ck_assert_int_eq(unsetenv("SHMAP_HUGEPAGES"), 0);
    size_t n = huge + 12345;
    unsigned char *p = shmap__alloc(n, true);
    ck_assert_ptr_nonnull(p);
    ck_assert_msg((uintptr_t)p % huge == 0, "%p is not 2 MiB aligned",
                  (void *)p);
    ck_assert_int_eq(p[0] | p[n / 2] | p[n - 1], 0);
    p[n - 1] = 7;
    free(p);
    /* Below 2 MiB, an ordinary allocation (64-byte aligned). */
    p = shmap__alloc(huge - 64, false);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq((uintptr_t)p % 64, 0);
    free(p);
  }
  /* A bad value is reported once and counts as the default; 0 turns the
   * rounding off, and maps with large blocks work either way. */
  ck_assert_int_eq(setenv("SHMAP_HUGEPAGES", "yes", 1), 0);
  capture_start();
  for (int i = 0; i < 2; i++) {
    unsigned char *p = shmap__alloc(huge, false);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq((uintptr_t)p % huge, 0);
    free(p);
  }
  char *out = capture_end();
  expect_once(out, "shmap: SHMAP_HUGEPAGES=\"yes\" is not valid (accepted: "
                   "0, 1); using 1\n");
  free(out);
  ck_assert_int_eq(setenv("SHMAP_HUGEPAGES", "0", 1), 0);
  unsigned char *p = shmap__alloc(huge + 1, true);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq((uintptr_t)p % 64, 0);
  ck_assert_int_eq(p[huge], 0);
  free(p);
  unsetenv("SHMAP_HUGEPAGES");
}
END_TEST

/* ---- publishing fences (SHMAP_MEMBARRIER) ---------------------------------- */

/* Small psums over the rows (j) and over the whole mesh of A x B devices
 * (on 4 x 3: groups of 3, where every member folds, and of 12, with one
 * leader, or in fiber mode a chain of sub-leaders on 3 workers), with
 * every wait sleeping at once (SHMAP_SPIN=0): a wake-up lost between a
 * publisher's store and a sleeper's last look would hang the map (and the
 * test's timeout would fail it). */
static int body_sleepy(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int i = shmap_axis_index(ctx, "i"), j = shmap_axis_index(ctx, "j");
  int A = shmap_axis_size(ctx, "i"), B = shmap_axis_size(ctx, "j");
  for (int t = 0; t < 300; t++) {
    float v = (float)(i * B + j + t);
    shmap_block b = {&v, SHMAP_F32, 0, {0}};
    bool all = t % 2;
    int rc = shmap_psum(ctx, &b, all ? "i, j" : "j");
    if (rc)
      return rc;
    float want = all ? (float)(A * B * (A * B - 1) / 2 + A * B * t)
                     : (float)(B * (i * B + t) + B * (B - 1) / 2);
    if (v != want)
      return shmap_fail(ctx, "call %d: psum gave %g, not %g", t, (double)v,
                        (double)want);
  }
  return 0;
}

/* The maps above in both modes, on 4 x 3 devices (3 workers in fiber
 * mode) and, in thread mode, on 1 x 2: a runtime whose threads outnumber
 * the processors publishes with full fences and sleeps without a
 * membarrier; one whose threads fit takes the process's choice (see
 * "Publishing before a wake-up" in sched/sched.h). */
static void sleepy_maps(void)
{
  ck_assert_int_eq(setenv("SHMAP_SPIN", "0", 1), 0);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "3", 1), 0);
  static const struct {
    const char *mode, *mesh;
    long threads; /* a thread per device, or SHMAP_WORKERS */
  } runs[3] = {{"threads", "i=4, j=3", 12}, {"fibers", "i=4, j=3", 3},
               {"threads", "i=1, j=2", 2}};
  long ncpu = (long)uv_available_parallelism();
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(setenv("SHMAP_SCHED", runs[k].mode, 1), 0);
    shmap_mesh *m = tu_mesh_new(runs[k].mesh);
    tu_map_ok(shmap_map(m, body_sleepy, NULL, 0, NULL, NULL, 0, NULL, NULL),
              runs[k].mode);
    long threads = runs[k].threads;
    if (threads > ncpu)
      ck_assert_msg(!m->rt->fence_light, "%s on %s: light fences with %ld "
                    "threads on %ld processors", runs[k].mode, runs[k].mesh,
                    threads, ncpu);
    else if (k == 2)
      ck_assert_msg(m->rt->fence_light == shmap__fence_light,
                    "%s on %s: not the process's fences", runs[k].mode,
                    runs[k].mesh);
    shmap_mesh_destroy(m);
  }
  unsetenv("SHMAP_SPIN");
  unsetenv("SHMAP_WORKERS");
  unsetenv("SHMAP_SCHED");
}

/* Whether this kernel lets the process use private expedited membarriers. */
static bool kernel_membarrier(void)
{
#if defined(__linux__) && defined(SYS_membarrier)
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
#else
  return false;
#endif
}

/* Each case runs in a process of its own (check forks), and the setting
 * is read once per process, at the first mesh. */
START_TEST(test_membarrier_default)
{
  unsetenv("SHMAP_MEMBARRIER");
  sleepy_maps();
  /* Light fences only where the kernel has them. */
  ck_assert(!shmap__fence_light || kernel_membarrier());
}
END_TEST

START_TEST(test_membarrier_off)
{
  ck_assert_int_eq(setenv("SHMAP_MEMBARRIER", "0", 1), 0);
  sleepy_maps();
  ck_assert(!shmap__fence_light);
  unsetenv("SHMAP_MEMBARRIER");
}
END_TEST

START_TEST(test_membarrier_bad)
{
  ck_assert_int_eq(setenv("SHMAP_MEMBARRIER", "yes", 1), 0);
  capture_start();
  sleepy_maps();
  char *out = capture_end();
  expect_once(out, "shmap: SHMAP_MEMBARRIER=\"yes\" is not valid (accepted: "
                   "0, 1); using 1\n");
  free(out);
  unsetenv("SHMAP_MEMBARRIER");
}
END_TEST

int main(void)
{
  Suite *s = suite_create("reliability_settings");
  TCase *tc = tcase_create("settings");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, test_parse_size);
  tcase_add_test(tc, test_unknown_names_threads);
  tcase_add_test(tc, test_unknown_names_fibers);
  tcase_add_test(tc, test_known_names);
  tcase_add_test(tc, test_bad_sched);
  tcase_add_loop_test(tc, test_bad_simd, 0, 2);
  tcase_add_test(tc, test_bad_workers);
  tcase_add_test(tc, test_bad_spin);
  tcase_add_test(tc, test_bad_stack_size);
  tcase_add_test(tc, test_bad_watchdog);
  tcase_add_test(tc, test_auto_sched);
  tcase_add_test(tc, test_hugepages);
  tcase_add_test(tc, test_membarrier_default);
  tcase_add_test(tc, test_membarrier_off);
  tcase_add_test(tc, test_membarrier_bad);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
