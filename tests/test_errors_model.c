/* SPDX-License-Identifier: MIT */
/*
 * test_errors_model.c - stress of the error model: every failure on any
 * device ends the map.  Peers waiting in a collective are released with
 * SHMAP_ECANCELED; the map returns promptly with the first failure's code
 * and a message naming the failing device and its coordinates; the mesh
 * then runs a correct map.
 *
 * 16 devices (i=4, j=4) on 2 cores (the process is pinned to two CPUs when
 * it may use more), with SHMAP_SCHED=threads and =fibers.  One device (a
 * different one each run) fails while the 15 others wait in a collective
 * over ('i', 'j'):
 *   - its body returns -1, at once or after 100 ms;
 *   - it calls shmap_fail, at once or after 200 ms;
 *   - it calls psum over an unknown axis (after 50 ms);
 *   - the result allocation of its all_gather fails (allocation hook,
 *     after 50 ms, once every device passed a psum);
 *   - two devices call shmap_fail at once: the map reports one of them,
 *     and every canceled peer quotes that same one;
 *   - a device leaves midway through a sequence of 40 collectives over
 *     'i', 'j' and ('i', 'j') (more calls than a group has rendezvous
 *     slots), at a different call each run.
 * The correct map that follows each run makes 41 collectives over changing
 * groups too, so state left behind by a canceled call would show.
 * Each case runs 20 times in a row on the same mesh, to shake out races.
 */
#include <check.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "map/map.h"
#include "sched/runtime.h"
#include "testutil.h"

#define TIMEOUT 120
#define NDEV 16
#define RUNS 20
/* A map whose failing device fails after d ms must return before this. */
#define PROMPT_S 2.0
/* A device's collective never returned (its body did not run, or it did
 * not reach the call). */
#define NOT_REACHED 1

/* ---- helpers ------------------------------------------------------------ */

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run on at most two CPUs, whatever the machine (threads created later
 * inherit the mask). */
static void pin_two_cpus(void)
{
  cpu_set_t set, two;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) <= 2)
    return;
  CPU_ZERO(&two);
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &set)) {
      CPU_SET(c, &two);
      n++;
    }
  ck_assert_int_eq(sched_setaffinity(0, sizeof two, &two), 0);
}

static void devname(int dev, char *buf, size_t n)
{
  snprintf(buf, n, "device %d (i=%d, j=%d)", dev, dev / 4, dev % 4);
}

static shmap_mesh *mesh_for(const char *mode)
{
  pin_two_cpus();
  ck_assert_int_eq(setenv("SHMAP_SCHED", mode, 1), 0);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create(&m, "i=4, j=4");
  ck_assert_msg(rc == 0, "shmap_mesh_create: %d: %s", rc, shmap_errmsg());
  return m;
}

/* ---- a correct map --------------------------------------------------------- */

typedef struct healthy {
  _Atomic int bad[NDEV];
} healthy;

/* A sequence of collectives over changing groups, longer than the number
 * of rendezvous slots a group keeps (16), so that slots are reused. */
#define SEQ 40
static const char *const seq_axes[3] = {"i", "j", "i, j"};

/* psum of dev+1 over seq_axes[c % 3], as the device at `dev` sees it. */
static double seq_want(int dev, int c)
{
  double sum = 0;
  for (int d = 0; d < NDEV; d++) {
    bool same_i = d / 4 == dev / 4, same_j = d % 4 == dev % 4;
    if ((c % 3 == 0 && same_j) || (c % 3 == 1 && same_i) || c % 3 == 2)
      sum += d + 1;
  }
  return sum;
}

static int body_healthy(shmap_ctx *ctx, void *arg)
{
  healthy *h = arg;
  int dev = shmap_ctx_device(ctx);
  int bad = 0;
  for (int c = 0; c < SEQ; c++) {
    double u = dev + 1;
    shmap_block bu = {&u, SHMAP_F64, 0, {0}};
    int rc = shmap_psum(ctx, &bu, seq_axes[c % 3]);
    if (rc)
      return rc;
    bad += u != seq_want(dev, c);
  }
  double v = dev + 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  int rc = shmap_psum(ctx, &b, "i, j");
  if (rc)
    return rc;
  int32_t w = dev;
  shmap_block x = {&w, SHMAP_I32, 1, {1}};
  shmap_block *g = NULL;
  if ((rc = shmap_all_gather(ctx, &x, "i, j", 0, 1, &g)))
    return rc;
  bad += v != NDEV * (NDEV + 1) / 2;
  for (int k = 0; k < NDEV; k++)
    bad += ((int32_t *)g->data)[k] != k;
  h->bad[dev] = bad;
  return 0;
}

static void expect_healthy(shmap_mesh *m, const char *after, int run)
{
  healthy h;
  for (int d = 0; d < NDEV; d++)
    h.bad[d] = -1;
  shmap__test_fail_alloc(0);
  int rc = shmap_map(m, body_healthy, &h, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == 0,
                "run %d: after %s, a correct map on the same mesh fails: %d "
                "(%s): %s", run, after, rc, shmap_strerror(rc), shmap_errmsg());
  for (int d = 0; d < NDEV; d++)
    ck_assert_msg(h.bad[d] == 0,
                  "run %d: after %s, a correct map gives wrong values on "
                  "device %d", run, after, d);
}

/* ---- the failing map --------------------------------------------------------- */

enum how { RETURN, FAIL, BAD_AXIS, ALLOC, MIDWAY };

typedef struct scenario {
  const char *what;
  enum how how;
  int delay_ms;
  int want;              /* the map's code */
  const char *subs[4];   /* words the map's message contains */
  bool two;              /* a second device fails the same way at once */
} scenario;

static const scenario scenarios[] = {
    {"the body returns -1 at once", RETURN, 0, SHMAP_EBODY,
     {"body returned -1"}, false},
    {"shmap_fail at once", FAIL, 0, SHMAP_EBODY,
     {"failed", "planned failure"}, false},
    {"the body returns -1 after 100 ms", RETURN, 100, SHMAP_EBODY,
     {"body returned -1"}, false},
    {"shmap_fail after 200 ms", FAIL, 200, SHMAP_EBODY,
     {"failed", "planned failure"}, false},
    {"psum over an unknown axis after 50 ms", BAD_AXIS, 50, SHMAP_EAXIS,
     {"psum", "zz"}, false},
    {"the all_gather result allocation fails after 50 ms", ALLOC, 50,
     SHMAP_ENOMEM, {"all_gather", "memory"}, false},
    {"two devices call shmap_fail at once", FAIL, 0, SHMAP_EBODY,
     {"failed", "planned failure"}, true},
    {"the body returns -1 midway through 40 collectives over i, j and "
     "(i, j)", MIDWAY, 0, SHMAP_EBODY, {"body returned -1"}, false},
};
#define NSCEN ((int)(sizeof scenarios / sizeof scenarios[0]))

typedef struct frun {
  const scenario *s;
  int bad, bad2;            /* the failing device(s) (bad2 < 0: one) */
  int run;
  _Atomic int barrier_rc[NDEV];
  _Atomic int rc[NDEV];     /* the waiting (or failing) call's code */
  char msg[NDEV][SHMAP__MSG_MAX];
  _Atomic long injected;    /* ALLOC: failures the hook injected */
} frun;

static int record(frun *r, int dev, int rc)
{
  snprintf(r->msg[dev], sizeof r->msg[dev], "%s", rc ? shmap_errmsg() : "");
  r->rc[dev] = rc;
  return rc;
}

/* Whether every device's psum before the planted allocation failure
 * returned. */
static bool all_passed(frun *r)
{
  for (int d = 0; d < NDEV; d++)
    if (atomic_load(&r->barrier_rc[d]) == NOT_REACHED)
      return false;
  return true;
}

static int body_fail(shmap_ctx *ctx, void *arg)
{
  frun *r = arg;
  const scenario *s = r->s;
  int dev = shmap_ctx_device(ctx);
  double v = dev;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  float w[3] = {(float)dev, 1, 2};
  shmap_block x = {w, SHMAP_F32, 1, {3}};
  shmap_block *g = NULL;
  if (s->how == MIDWAY) {
    /* The failing device leaves before its call number `at` (a different
     * one each run); the others are canceled wherever they wait, at the
     * latest in the last call, over every device. */
    int at = (r->run * 13 + 5) % SEQ;
    for (int c = 0; c < SEQ; c++) {
      if (dev == r->bad && c == at) {
        r->rc[dev] = -1;
        return -1;
      }
      int rc = shmap_psum(ctx, &b, seq_axes[c % 3]);
      if (rc)
        return record(r, dev, rc);
    }
    return record(r, dev, shmap_psum(ctx, &b, "i, j"));
  }
  if (s->how == ALLOC) {
    /* Every device passes this psum first, so the others are in (or on
     * their way into) the all_gather when the failing device plants the
     * failure of the next allocation: its own result block. */
    int rc = shmap_psum(ctx, &b, "i, j");
    r->barrier_rc[dev] = rc;
    if (rc)
      return rc;
  }
  if (dev != r->bad && dev != r->bad2) {
    if (s->how == ALLOC)
      return record(r, dev, shmap_all_gather(ctx, &x, "i, j", 0, 1, &g));
    return record(r, dev, shmap_psum(ctx, &b, "i, j"));
  }
  if (s->delay_ms)
    tu_sleep_ms(s->delay_ms);
  switch (s->how) {
  case RETURN:
    r->rc[dev] = -1;
    return -1;
  case FAIL:
    return record(r, dev, shmap_fail(ctx, "planned failure in run %d", r->run));
  case BAD_AXIS:
    return record(r, dev, shmap_psum(ctx, &b, "zz"));
  case MIDWAY:
    break;
  case ALLOC: {
    /* The failure comes once every device has returned from the psum: the
     * delay above alone is a guess, and on a loaded machine a member may
     * still be waiting for its leader's result 50 ms after the leader
     * returned (then it is rightly canceled).  In fiber mode the other
     * worker takes over this one's devices while it sleeps here. */
    for (int t = 0; t < 20000 && !all_passed(r); t++)
      tu_sleep_ms(1);
    shmap__test_fail_alloc_here(1);
    int rc = shmap_all_gather(ctx, &x, "i, j", 0, 1, &g);
    r->injected = shmap__test_alloc_failures();
    shmap__test_fail_alloc(0);
    return record(r, dev, rc);
  }
  }
  return -1;
}

static void run_scenario(const char *mode, const scenario *s)
{
  shmap_mesh *m = mesh_for(mode);
  frun *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  int want_mode = strcmp(mode, "fibers") == 0 ? SHMAP__FIBERS : SHMAP__THREADS;
  for (int run = 0; run < RUNS; run++) {
    memset(r, 0, sizeof *r);
    r->s = s;
    r->run = run;
    r->bad = (run * 7 + 3) % NDEV;
    r->bad2 = s->two ? (r->bad + 5 + run % 3) % NDEV : -1;
    for (int d = 0; d < NDEV; d++) {
      r->rc[d] = NOT_REACHED;
      r->barrier_rc[d] = NOT_REACHED;
    }
    char bad[64], bad2[64] = "", what[256];
    devname(r->bad, bad, sizeof bad);
    if (r->bad2 >= 0)
      devname(r->bad2, bad2, sizeof bad2);
    snprintf(what, sizeof what, "SHMAP_SCHED=%s, run %d: %s on %s%s%s", mode,
             run, s->what, bad, r->bad2 >= 0 ? " and " : "", bad2);

    double t0 = now_s();
    int rc = shmap_map(m, body_fail, r, 0, NULL, NULL, 0, NULL, NULL);
    double took = now_s() - t0;
    char msg[SHMAP__MSG_MAX + 1];
    snprintf(msg, sizeof msg, "%s", shmap_errmsg());

    ck_assert_msg(m->rt->mode == want_mode, "%s: the mesh runs in the wrong mode",
                  what);
    ck_assert_msg(rc == s->want, "%s: shmap_map = %d (%s), want %d (%s): %s",
                  what, rc, shmap_strerror(rc), s->want,
                  shmap_strerror(s->want), msg);
    ck_assert_msg(took < PROMPT_S,
                  "%s: the map took %.2f s to return (the failure came after "
                  "%d ms)", what, took, s->delay_ms);
    /* With two failing devices, the first failure is the map's: the
     * message names one of them, and that one is "the" failing device
     * below. */
    int first = r->bad, second = r->bad2;
    if (second >= 0 && !strstr(msg, bad) && strstr(msg, bad2)) {
      first = r->bad2;
      second = r->bad;
      snprintf(bad, sizeof bad, "%s", bad2);
    }
    ck_assert_msg(strstr(msg, bad),
                  "%s: the message does not name \"%s\": %s", what, bad, msg);
    for (int k = 0; s->subs[k]; k++)
      ck_assert_msg(strstr(msg, s->subs[k]),
                    "%s: the message lacks \"%s\": %s", what, s->subs[k], msg);
    /* No other device is blamed. */
    for (int d = 0; d < NDEV; d++) {
      char other[64];
      devname(d, other, sizeof other);
      ck_assert_msg(d == first || !strstr(msg, other),
                    "%s: the message blames %s too: %s", what, other, msg);
    }

    /* The failing device's own call reported the failure. */
    if (s->how != RETURN && s->how != MIDWAY)
      ck_assert_msg(r->rc[first] == s->want,
                    "%s: the failing call returned %d (%s) on the failing "
                    "device, want %d: %s", what, r->rc[first],
                    shmap_strerror(r->rc[first]), s->want, r->msg[first]);
    /* The second failing device saw its own failure, or was canceled
     * before it could fail. */
    if (second >= 0)
      ck_assert_msg(r->rc[second] == s->want || r->rc[second] == NOT_REACHED,
                    "%s: the second failing device's call returned %d: %s",
                    what, r->rc[second], r->msg[second]);
    if (s->how == ALLOC) {
      ck_assert_msg(r->injected == 1,
                    "%s: %ld allocation failures injected, want 1", what,
                    (long)r->injected);
      for (int d = 0; d < NDEV; d++)
        ck_assert_msg(r->barrier_rc[d] == 0,
                      "%s: device %d's psum before the failure returned %d",
                      what, d, r->barrier_rc[d]);
    }
    /* Every peer was released from its wait with SHMAP_ECANCELED, and
     * says why; none reports an error of its own. */
    for (int d = 0; d < NDEV; d++) {
      if (d == r->bad || d == r->bad2)
        continue;
      int drc = r->rc[d];
      ck_assert_msg(drc == SHMAP_ECANCELED || drc == NOT_REACHED,
                    "%s: device %d's collective returned %d (%s), want "
                    "SHMAP_ECANCELED: %s", what, d, drc, shmap_strerror(drc),
                    r->msg[d]);
      if (drc == SHMAP_ECANCELED) {
        char me[64];
        devname(d, me, sizeof me);
        ck_assert_msg(strstr(r->msg[d], "canceled") && strstr(r->msg[d], bad) &&
                          strstr(r->msg[d], me),
                      "%s: device %d's message should say it was canceled "
                      "because %s failed: %s", what, d, bad, r->msg[d]);
        if (second >= 0) {
          char loser[64];
          devname(second, loser, sizeof loser);
          ck_assert_msg(!strstr(r->msg[d], loser),
                        "%s: device %d quotes the second failure (%s) while "
                        "the map reports the first (%s): %s", what, d, loser,
                        bad, r->msg[d]);
        }
      }
    }
    /* With a delay, the others had time to reach their wait: each of them
     * must have been released from it (not just skipped). */
    if (s->delay_ms >= 100 && strcmp(mode, "threads") == 0)
      for (int d = 0; d < NDEV; d++)
        ck_assert_msg(d == first || r->rc[d] == SHMAP_ECANCELED,
                      "%s: device %d was never released from its psum (rc %d)",
                      what, d, r->rc[d]);

    expect_healthy(m, what, run);
  }
  free(r);
  shmap_mesh_destroy(m);
}

/* _i = mode * NSCEN + scenario */
START_TEST(t_one_fails_others_wait)
{
  const char *mode = _i / NSCEN ? "fibers" : "threads";
  run_scenario(mode, &scenarios[_i % NSCEN]);
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("errors_model");
  TCase *tc = tcase_create("one device fails while 15 wait");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, t_one_fails_others_wait, 0, 2 * NSCEN);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  return tu_run_suite(suite());
}
