/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_explore.c - exploring schedules need every device in one
 * process.  Over several processes, shmap_explore() fails with
 * SHMAP_EINVAL and its message on every process without running the
 * caller's program part, and SHMAP_EXPLORE set on one process only fails
 * that map on every process (through the map's agreement) instead of
 * leaving the others waiting.  On one process both explore: the program
 * part runs under each schedule, and SHMAP_EXPLORE's map gives the right
 * values.
 *
 * Mesh "i=2R" (two devices per process); the map is a psum of each
 * device's number, whose result is known.
 */
#include <shmap.h>

#include "expect.h"
#include "../alarm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int R;

/* Each device's psum of its device number, into its slot of sums. */
static int body(shmap_ctx *ctx, void *arg)
{
  int *sums = arg;
  int dev = shmap_axis_index(ctx, "i");
  if (dev < 0)
    return dev;
  int32_t v = dev;
  shmap_block b = {&v, SHMAP_I32, 1, {1}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc == 0)
    sums[dev] = v;
  return rc;
}

static int psum_map(shmap_mesh *m, int *sums)
{
  for (int d = 0; d < 2 * R; d++)
    sums[d] = -1;
  return shmap_map(m, body, sums, 0, NULL, NULL, 0, NULL, NULL);
}

/* Whether this process's two devices (the slots a body wrote) got the
 * sum of 0 .. 2R-1, and no other slot was written. */
static int sums_right(const int *sums)
{
  int n = 2 * R, want = n * (n - 1) / 2, mine = 0;
  for (int d = 0; d < n; d++) {
    if (sums[d] == -1)
      continue;
    if (sums[d] != want)
      return 0;
    mine++;
  }
  return mine == 2;
}

typedef struct part {
  int runs;
  int sums[64];
} part;

static int run(shmap_mesh *m, void *arg, unsigned long long *digest)
{
  part *p = arg;
  p->runs++;
  int rc = psum_map(m, p->sums);
  *digest = 0;
  for (int d = 0; d < 2 * R; d++)
    *digest = *digest * 31 + (unsigned long long)(p->sums[d] + 1);
  return rc;
}

/* The mesh "i=2R" in scheduling mode `mode`, or NULL (failure counted). */
static shmap_mesh *mesh_in(const char *mode)
{
  EXPECT(setenv("SHMAP_SCHED", mode, 1) == 0, "setenv");
  shmap_mesh *m = NULL;
  char text[32];
  snprintf(text, sizeof text, "i=%d", 2 * R);
  int rc = shmap_mesh_create(&m, text);
  EXPECT(rc == 0, "shmap_mesh_create(%s): %s", text, shmap_errmsg());
  return rc ? NULL : m;
}

/* The refusal's message, after "API: ". */
static void refusal(char *buf, size_t n, const char *api)
{
  snprintf(buf, n, "%s: an exploring schedule runs every device on one "
           "thread, and this mesh's %d devices run in %d processes", api,
           2 * R, R);
}

static void one_mode(const char *mode)
{
  shmap_mesh *m = mesh_in(mode);
  if (!m)
    return;
  char want[256];
  refusal(want, sizeof want, "shmap_explore");
  int rc;

  /* shmap_explore() */
  part p = {0};
  shmap_explore_opts o = {.schedules = 5, .seed = 7, .quiet = 1};
  shmap_explore_result res;
  rc = shmap_explore(m, run, &p, &o, &res);
  if (R == 1) {
    EXPECT(rc == 0, "%s: shmap_explore on one process: %d %s", mode, rc,
           shmap_errmsg());
    EXPECT(p.runs == 5 && res.schedules == 5 && res.failed == -1,
           "%s: %d runs, %d schedules, failed %d (want 5, 5, -1)", mode,
           p.runs, res.schedules, res.failed);
    EXPECT(sums_right(p.sums), "%s: wrong sums under a schedule", mode);
  } else {
    EXPECT(rc == SHMAP_EINVAL, "%s: shmap_explore over %d processes gave %d "
           "(%s), want SHMAP_EINVAL", mode, R, rc, shmap_err_name(rc));
    EXPECT(strcmp(shmap_errmsg(), want) == 0, "%s: message\n  %s\nwant\n  %s",
           mode, shmap_errmsg(), want);
    EXPECT(p.runs == 0, "%s: the program part ran %d times", mode, p.runs);
  }

  /* The same mesh still runs a correct map on every process. */
  int sums[64];
  rc = psum_map(m, sums);
  EXPECT(rc == 0 && sums_right(sums), "%s: a map after shmap_explore: %d %s",
         mode, rc, shmap_errmsg());
  EXPECT(shmap_mesh_destroy(m) == 0, "%s", shmap_errmsg());
}

/* SHMAP_EXPLORE=3 on process 0 only (read once per process: the last
 * part of the run). */
static void env_part(void)
{
  if (me == 0)
    EXPECT(setenv("SHMAP_EXPLORE", "3", 1) == 0, "setenv");
  shmap_mesh *m = mesh_in("fibers");
  if (!m)
    return;
  int sums[64];
  int rc = psum_map(m, sums);
  if (R == 1) {
    EXPECT(rc == 0 && sums_right(sums),
           "SHMAP_EXPLORE=3 on one process: %d %s", rc, shmap_errmsg());
  } else {
    char want[256];
    refusal(want, sizeof want, "SHMAP_EXPLORE");
    EXPECT(rc == SHMAP_EINVAL, "SHMAP_EXPLORE=3 on process 0 of %d gave %d "
           "(%s), want SHMAP_EINVAL", R, rc, shmap_err_name(rc));
    /* Every process reports process 0's refusal. */
    const char *msg = shmap_errmsg(), *pre = "shmap_map: process 0 (host ";
    const char *tail = strstr(msg, ") rejected the call: ");
    EXPECT(strncmp(msg, pre, strlen(pre)) == 0 && tail &&
               strcmp(tail + strlen(") rejected the call: "), want) == 0,
           "SHMAP_EXPLORE=3 on process 0: message\n  %s\nwant\n  %s<host>) "
           "rejected the call: %s", msg, pre, want);
  }
  EXPECT(shmap_mesh_destroy(m) == 0, "%s", shmap_errmsg());
}

int main(void)
{
  alarm(120); /* run.sh bounds the run too */
  unsetenv("SHMAP_EXPLORE");
  unsetenv("SHMAP_REPLAY");
  R = shmap_process_count();
  me = shmap_process_rank();
  if (R < 1 || me < 0 || R > 32) {
    fprintf(stderr, "test_mpi_explore: %d processes: %s\n", R, shmap_errmsg());
    return 1;
  }
  static const char *const modes[2] = {"threads", "fibers"};
  for (int k = 0; k < 2; k++)
    if (tu_mode_wanted(modes[k]))
      one_mode(modes[k]);
  env_part();
  if (failures)
    return 1;
  if (me == 0)
    printf("test_mpi_explore: %d process%s, all passed\n", R,
           R == 1 ? "" : "es");
  return 0;
}
