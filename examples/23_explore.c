/* SPDX-License-Identifier: MIT */
/*
 * 23_explore.c - finding a bug that only some orders of the devices show,
 * replaying it, and checking the fix (shmap_explore(3)).
 *
 * One step of gradient descent on a mesh of four devices.  Each device
 * holds a block of the weights and its gradient; a psum adds the
 * devices' squared gradient norms, and each device then takes a step whose
 * size device 0, the leader, chose.  The leader does not send the step
 * size through a collective: it posts it on a board in host memory that
 * every device of the process sees, and the others read it there.
 *
 * The buggy kernel posts after the psum.  A psum orders what each device
 * did before it against what every device does after it (no device leaves
 * it before all have entered), but it says nothing about the order in
 * which the devices leave it: a device that leaves before the leader
 * reads a board with nothing on it.  With threads or fibers that
 * happens now and then, depending on the machine's load; shmap_explore()
 * runs the kernel under many chosen orders, one device at a time, and
 * finds an order that fails, names it ("r.1": a random walk of seed 1),
 * and replays it exactly.
 *
 * The fixed kernel posts before the psum, so every read comes after the
 * post whatever the order: 200 schedules pass, each with the serial
 * result.  The seeds are fixed, so the output is the same on every run
 * and in both scheduling modes (the explored maps run one device at a
 * time in either); tests/test_explore_example.sh compares it.
 *
 * "23_explore once" runs the buggy kernel once, as an ordinary program
 * would: with SHMAP_EXPLORE=200 in the environment its map is explored
 * without a change to the program, and SHMAP_REPLAY replays the order
 * that failed.  SHMAP_EXPLORE runs the map again without sgd_run() around
 * it, so the board keeps what the previous schedule left on it: the same
 * failing schedule then has another critical step.
 */
#include <shmap.h>

#include <stdio.h>
#include <string.h>

#define NDEV 4
#define N 16 /* weights */

/* The board: host memory that every device of this process sees. */
static struct board {
  float step;
  int posted;
} board;

typedef struct kernel {
  int fixed; /* 1: the leader posts before the psum */
} kernel;

/* w - step * g on this device's block, where step = 0.5 / (1 + |g|^2),
 * chosen by the leader from the norm of the whole gradient. */
static int sgd_body(shmap_ctx *ctx, void *arg)
{
  const kernel *k = arg;
  int r = shmap_axis_index(ctx, "i");
  const shmap_block *w = shmap_in(ctx, 0), *g = shmap_in(ctx, 1);
  const float *wd = w->data, *gd = g->data;
  int64_t n = shmap_block_numel(w);
  shmap_block *norm = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){1});
  shmap_block *out = shmap_out(ctx, 0, SHMAP_F32, 1, &n);
  if (!norm || !out)
    return shmap_fail(ctx, "out of memory");
  float s = 0;
  for (int64_t e = 0; e < n; e++)
    s += gd[e] * gd[e];
  ((float *)norm->data)[0] = s;
  /* The leader's base step does not depend on the psum: the fixed kernel
   * posts it before, where every device's read after the psum sees it. */
  if (k->fixed && r == 0) {
    board.step = 0.25f;
    board.posted = 1;
  }
  int rc = shmap_psum(ctx, norm, "i");
  if (rc)
    return rc;
  if (!k->fixed && r == 0) { /* the bug: posted after the psum */
    board.step = 0.25f;
    board.posted = 1;
  }
  if (!board.posted)
    return shmap_fail(ctx, "read the board before device 0 posted its step");
  float step = board.step / (1.0f + ((float *)norm->data)[0]);
  float *o = out->data;
  for (int64_t e = 0; e < n; e++)
    o[e] = wd[e] - step * gd[e];
  return 0;
}

static float W[N], G[N], want[N];

/* One run of the kernel: the part of the program shmap_explore() runs
 * under each schedule.  It checks the result against the serial one. */
static int sgd_run(shmap_mesh *mesh, void *arg, unsigned long long *digest)
{
  (void)digest; /* the map's output is hashed already */
  shmap_array *w = NULL, *g = NULL, *o = NULL;
  float got[N];
  memset(&board, 0, sizeof board); /* a clean board for every run */
  int rc = shmap_array_from_host(&w, SHMAP_F32, 1, (int64_t[]){N}, W);
  if (rc == 0)
    rc = shmap_array_from_host(&g, SHMAP_F32, 1, (int64_t[]){N}, G);
  if (rc == 0)
    rc = shmap_map(mesh, sgd_body, arg, 2, (shmap_array *[]){w, g},
                   (const char *[]){"P('i')", "P('i')"}, 1, &o,
                   (const char *[]){"P('i')"});
  if (rc == 0)
    rc = shmap_array_to_host(o, got);
  if (rc == 0 && memcmp(got, want, sizeof got) != 0)
    rc = SHMAP_EMISMATCH;
  shmap_array_destroy(o);
  shmap_array_destroy(g);
  shmap_array_destroy(w);
  return rc;
}

int main(int argc, char **argv)
{
  int once = argc > 1 && strcmp(argv[1], "once") == 0;
  float norm = 0;
  for (int e = 0; e < N; e++) {
    W[e] = (float)(e % 5) - 2.0f;
    G[e] = (float)((e * 3) % 4) * 0.5f - 0.75f;
  }
  /* The serial step, summing the norm in the devices' order as psum does. */
  for (int d = 0; d < NDEV; d++) {
    float s = 0;
    for (int e = d * (N / NDEV); e < (d + 1) * (N / NDEV); e++)
      s += G[e] * G[e];
    norm += s;
  }
  for (int e = 0; e < N; e++)
    want[e] = W[e] - 0.25f / (1.0f + norm) * G[e];

  /* The schedules run every device of the mesh on this thread: a mesh
   * spread over MPI processes cannot be explored (shmap_explore(3)). */
  if (shmap_process_count() > 1) {
    if (shmap_process_rank() == 0)
      printf("exploring runs on one process: run 23_explore without "
             "mpirun\n");
    return 0;
  }
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, "i=4") != 0) {
    fprintf(stderr, "%s\n", shmap_errmsg());
    return 1;
  }
  int bad = 0;

  /* 0. The buggy kernel once, under whatever the environment says. */
  if (once) {
    kernel buggy = {.fixed = 0};
    int rc = sgd_run(mesh, &buggy, NULL);
    printf("one run of the buggy kernel: %s\n",
           rc ? shmap_errmsg() : "passed");
    shmap_mesh_destroy(mesh);
    return rc != 0;
  }

  /* 1. Search: 200 schedules, alternately random walks and PCT, seeds
   * from 1.  quiet: the result, not stderr, says what failed. */
  kernel buggy = {.fixed = 0};
  shmap_explore_opts opts = {.schedules = 200, .seed = 1, .quiet = 1};
  shmap_explore_result res;
  int rc = shmap_explore(mesh, sgd_run, &buggy, &opts, &res);
  printf("buggy kernel: %s\n", rc ? shmap_err_name(rc) : "passed");
  if (rc == 0) {
    printf("  no failure in %d schedules\n", res.schedules);
    bad = 1;
  } else {
    printf("  schedule %d of %d failed: %s\n", res.failed + 1,
           opts.schedules, res.message);
    printf("  replay it with SHMAP_REPLAY=%s (or opts.replay = \"%s\")\n",
           res.replay, res.replay);
    if (res.critical_step >= 0)
      printf("  critical step %ld of map %d: device %d went first\n",
             res.critical_step, res.critical_map, res.critical_dev);
    else
      printf("  no critical step: certain from the start of map %d\n",
             res.critical_map);
  }

  /* The critical step is the choice after which every other order of
   * the rest that was tried failed too: the place to look in a debugger
   * (shmap-debugging(7)).  2. Replay: the same schedule makes the same
   * choices and fails the same way, every time. */
  if (rc != 0) {
    shmap_explore_result first = res, again;
    shmap_explore_opts ro = {.replay = first.replay, .quiet = 1};
    int same = 0;
    for (int t = 0; t < 10; t++) {
      int rr = shmap_explore(mesh, sgd_run, &buggy, &ro, &again);
      same += rr == first.code && strcmp(again.message, first.message) == 0 &&
              again.steps == first.steps && again.choices == first.choices;
    }
    printf("replay of %s: %d of 10 runs failed the same way "
           "(%lu choices, the same each time)\n",
           first.replay, same, first.steps);
    bad |= same != 10;
  }

  /* 3. The fix: 200 schedules, every one with the serial result. */
  kernel fixed = {.fixed = 1};
  rc = shmap_explore(mesh, sgd_run, &fixed, &opts, &res);
  printf("fixed kernel: %s\n", rc ? shmap_err_name(rc) : "passed");
  if (rc == 0)
    printf("  %d schedules, each with the serial result\n", res.schedules);
  else
    printf("  %s\n", res.message);
  bad |= rc != 0 || res.schedules != 200;

  shmap_mesh_destroy(mesh);
  return bad;
}
