/* SPDX-License-Identifier: MIT */
/*
 * test_watchdog.c - the watchdog: every period a map runs, a report of each
 * device's state on stderr.
 *
 * On mesh i=2, j=2 device 2 (i=1, j=0) sleeps 1 s in its body while the
 * others psum over 'j': devices 0 and 1 finish, device 3 waits for device 2.
 * With shmap_set_watchdog(0.2), stderr (redirected to a file around the
 * map) must hold at least two reports, each naming every device with its
 * coordinates, device 2 "running its body" and device 3 "waiting in psum
 * over 'j'"; the map still succeeds with the right values.  Both modes.
 * A device not started yet has waited as long as the map has run.
 * Also: bad periods are SHMAP_EINVAL, 0 turns the watchdog off, a quick map
 * prints nothing, and SHMAP_WATCHDOG is read (in a child: the test binary
 * exec'ed with an argument, its stderr in a file).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmap.h>

#include "testutil.h"
#define TIMEOUT 60
#define CHILD_ARG "--watchdog-child"

static char *self_argv0;

/* ---- helpers ------------------------------------------------------------ */

static int count(const char *hay, const char *needle)
{
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* stderr goes to a temporary file between capture_begin and capture_end,
 * which returns what was written (malloc'ed). */
typedef struct capture {
  int saved;
  char path[64];
} capture;

static void capture_begin(capture *c)
{
  snprintf(c->path, sizeof c->path, "/tmp/shmap-watchdog-XXXXXX");
  int fd = mkstemp(c->path);
  ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
  /* Should the map crash, its stderr stays in this file. */
  printf("stderr captured in %s\n", c->path);
  fflush(stdout);
  fflush(stderr);
  c->saved = dup(2);
  ck_assert_int_ge(c->saved, 0);
  ck_assert_int_eq(dup2(fd, 2), 2);
  close(fd);
}

static char *capture_end(capture *c)
{
  fflush(stderr);
  ck_assert_int_eq(dup2(c->saved, 2), 2);
  close(c->saved);
  char *s = tu_slurp(c->path, NULL);
  unlink(c->path);
  ck_assert_ptr_nonnull(s);
  return s;
}

/* ---- the slow map -------------------------------------------------------- */

typedef struct slow {
  int sleeper;   /* device that sleeps */
  int ms;        /* for how long */
  double got[4]; /* psum results */
} slow;

static int body_slow(shmap_ctx *ctx, void *arg)
{
  slow *s = arg;
  int dev = shmap_ctx_device(ctx);
  if (dev == s->sleeper)
    tu_sleep_ms(s->ms);
  double v = dev + 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  int rc = shmap_psum(ctx, &b, "j");
  s->got[dev] = v;
  return rc;
}

/* Run the slow map on m (device 2 sleeps `ms`); it must succeed. */
static void run_slow(shmap_mesh *m, int ms)
{
  slow s = {2, ms, {0}};
  int rc = shmap_map(m, body_slow, &s, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == 0, "the slow map fails: %d (%s): %s", rc,
                shmap_strerror(rc), shmap_errmsg());
  /* psum over 'j': devices 0,1 (i=0) give 1+2, devices 2,3 give 3+4. */
  const double want[4] = {3, 3, 7, 7};
  for (int d = 0; d < 4; d++)
    ck_assert_msg(s.got[d] == want[d], "device %d got %g, want %g", d,
                  s.got[d], want[d]);
}

/* Check the reports in `out`: returns how many show device 2 running its
 * body and device 3 waiting in psum over 'j'. */
static int check_reports(const char *out)
{
  static const char *header = "shmap watchdog: a map on mesh i=2, j=2 has run for ";
  static const char *names[4] = {"device 0 (i=0, j=0)", "device 1 (i=0, j=1)",
                                 "device 2 (i=1, j=0)", "device 3 (i=1, j=1)"};
  int reports = 0, telling = 0;
  double last = -1;
  for (const char *p = strstr(out, header); p; p = strstr(p + 1, header)) {
    reports++;
    char *end;
    double secs = strtod(p + strlen(header), &end);
    ck_assert_msg(end != p + strlen(header) &&
                      strncmp(end, " s; devices:\n", 13) == 0,
                  "report %d: malformed header: %.200s", reports, p);
    ck_assert_msg(secs > 0 && secs >= last,
                  "report %d: \"has run for %g s\" after %g s: %.300s",
                  reports, secs, last, p);
    last = secs;
    const char *line = strchr(p, '\n');
    bool running = false, waiting = false;
    for (int d = 0; d < 4; d++) {
      const char *l = line + 1;
      ck_assert_msg(strncmp(l, "  ", 2) == 0 &&
                        strncmp(l + 2, names[d], strlen(names[d])) == 0 &&
                        l[2 + strlen(names[d])] == ':',
                    "report %d: line %d does not describe %s: %.200s",
                    reports, d + 1, names[d], l);
      line = strchr(l, '\n');
      ck_assert_msg(line, "report %d: truncated", reports);
      size_t len = (size_t)(line - l);
      char text[256];
      snprintf(text, sizeof text, "%.*s", (int)(len < 255 ? len : 255), l);
      if (d == 2 && strstr(text, ": running its body for "))
        running = true;
      if (d == 3 && strstr(text, ": waiting in psum over 'j'"))
        waiting = true;
      /* Every state is one of the documented ones, with a duration. */
      ck_assert_msg(strstr(text, "running its body for ") ||
                        strstr(text, "waiting in ") ||
                        strstr(text, "returned from its body ") ||
                        strstr(text, "building its input blocks for ") ||
                        strstr(text, "not started yet"),
                    "report %d: unknown state: %s", reports, text);
      ck_assert_msg(strstr(text, " s"), "report %d: no duration: %s", reports,
                    text);
    }
    if (running && waiting)
      telling++;
  }
  ck_assert_msg(reports >= 2, "%d watchdog reports, want at least 2:\n%s",
                reports, out);
  return telling;
}

/* ---- tests ---------------------------------------------------------------- */

/* _i: 0 threads, 1 fibers */
START_TEST(t_report)
{
  tu_set_sched(_i);
  /* A worker per device: a body asleep holds its worker, and device 3
   * placed on device 2's worker would not start before device 2 returns. */
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "4", 1), 0);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  ck_assert_int_eq(shmap_set_watchdog(0.2), 0);
  capture c;
  capture_begin(&c);
  run_slow(m, 1000);
  char *out = capture_end(&c);
  int telling = check_reports(out);
  ck_assert_msg(telling >= 2,
                "only %d reports show device 2 (i=1, j=0) running its body and "
                "device 3 (i=1, j=1) waiting in psum over 'j':\n%s",
                telling, out);
  free(out);

  /* A quick map prints nothing. */
  capture_begin(&c);
  run_slow(m, 0);
  out = capture_end(&c);
  ck_assert_msg(out[0] == '\0', "a quick map printed a report:\n%s", out);
  free(out);

  /* 0 turns the watchdog off. */
  ck_assert_int_eq(shmap_set_watchdog(0), 0);
  capture_begin(&c);
  run_slow(m, 500);
  out = capture_end(&c);
  ck_assert_msg(out[0] == '\0', "the watchdog is off but printed:\n%s", out);
  free(out);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(t_bad_period)
{
  const double bad[] = {-1, -0.001, NAN, -INFINITY};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    int rc = shmap_set_watchdog(bad[k]);
    ck_assert_msg(rc == SHMAP_EINVAL, "shmap_set_watchdog(%g) = %d, want "
                  "SHMAP_EINVAL", bad[k], rc);
    ck_assert_msg(shmap_errmsg()[0] != '\0' &&
                      strstr(shmap_errmsg(), "shmap_set_watchdog"),
                  "shmap_set_watchdog(%g): message does not name the "
                  "function: %s", bad[k], shmap_errmsg());
  }
  /* A rejected period leaves the setting alone: still off, nothing
   * printed by a slow map. */
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  capture c;
  capture_begin(&c);
  run_slow(m, 400);
  char *out = capture_end(&c);
  ck_assert_msg(out[0] == '\0', "a rejected period turned the watchdog on:\n%s",
                out);
  free(out);
  ck_assert_int_eq(shmap_set_watchdog(0.5), 0);
  ck_assert_int_eq(shmap_set_watchdog(-1), SHMAP_EINVAL);
  /* ... and does not turn a valid one off. */
  capture_begin(&c);
  run_slow(m, 800);
  out = capture_end(&c);
  ck_assert_msg(count(out, "shmap watchdog:") >= 1,
                "shmap_set_watchdog(-1) after 0.5 turned the watchdog off");
  free(out);
  ck_assert_int_eq(shmap_set_watchdog(0), 0);
  shmap_mesh_destroy(m);
}
END_TEST

/* A device that has not started waits for as long as the map has run: on one
 * worker, device 2 sleeps in its body and device 3, next on that worker,
 * cannot start; each report says so with the report's own duration. */
START_TEST(t_not_started)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", "fibers", 1), 0);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "1", 1), 0);
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  ck_assert_int_eq(shmap_set_watchdog(0.2), 0);
  capture c;
  capture_begin(&c);
  run_slow(m, 900);
  char *out = capture_end(&c);
  static const char *header = "shmap watchdog: a map on mesh i=2, j=2 has run for ";
  static const char *line3 = "  device 3 (i=1, j=1): not started yet for ";
  int seen = 0;
  for (const char *p = strstr(out, header); p; p = strstr(p + 1, header)) {
    const char *ran = p + strlen(header);
    const char *l = strstr(p, line3);
    const char *next = strstr(p + 1, header);
    if (!l || (next && l > next))
      continue;
    const char *waited = l + strlen(line3);
    size_t n = strcspn(ran, " ");
    ck_assert_msg(n > 0 && strncmp(ran, waited, n) == 0 && waited[n] == ' ',
                  "device 3 has not started, but the time it waited is not "
                  "the time the map has run:\n%s", out);
    seen++;
  }
  ck_assert_msg(seen >= 2, "want at least 2 reports with device 3 not started "
                "yet:\n%s", out);
  free(out);
  ck_assert_int_eq(shmap_set_watchdog(0), 0);
  shmap_mesh_destroy(m);
}
END_TEST

/* SHMAP_WATCHDOG: the test binary runs itself with CHILD_ARG in an
 * environment that sets it, stderr in a file. */
static int watchdog_child(void)
{
  shmap_mesh *m = NULL;
  if (shmap_mesh_create(&m, "i=2, j=2") != 0)
    return 2;
  slow s = {2, 700, {0}};
  int rc = shmap_map(m, body_slow, &s, 0, NULL, NULL, 0, NULL, NULL);
  shmap_mesh_destroy(m);
  return rc == 0 && s.got[3] == 7 ? 0 : 3;
}

START_TEST(t_env)
{
  char path[] = "/tmp/shmap-watchdog-env-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fd, 2);
    setenv("SHMAP_WATCHDOG", "0.2", 1);
    execl("/proc/self/exe", self_argv0, CHILD_ARG, (char *)NULL);
    _exit(127);
  }
  close(fd);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  char *out = tu_slurp(path, NULL);
  unlink(path);
  ck_assert_ptr_nonnull(out);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the child (SHMAP_WATCHDOG=0.2) failed: status 0x%x; its "
                "stderr:\n%s", status, out);
  ck_assert_msg(count(out, "shmap watchdog: a map on mesh i=2, j=2") >= 2,
                "SHMAP_WATCHDOG=0.2: want at least 2 reports from a 0.7 s "
                "map; stderr:\n%s", out);
  ck_assert_msg(strstr(out, "device 2 (i=1, j=0): running its body"),
                "SHMAP_WATCHDOG: the report lacks device 2 running:\n%s", out);
  free(out);
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("watchdog");
  TCase *tc = tcase_create("watchdog");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, t_report, 0, 2);
  tcase_add_test(tc, t_bad_period);
  tcase_add_test(tc, t_not_started);
  tcase_add_test(tc, t_env);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv)
{
  self_argv0 = argv[0];
  if (argc > 1 && strcmp(argv[1], CHILD_ARG) == 0)
    return watchdog_child();
  return tu_run_suite(suite());
}
