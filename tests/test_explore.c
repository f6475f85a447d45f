/* SPDX-License-Identifier: MIT */
/*
 * test_explore.c - exploring device interleavings (shmap_explore(3)).
 *
 * Seeded bugs that only some orders of the devices show, each found by
 * shmap_explore() within a stated number of schedules and by
 * SHMAP_EXPLORE=N on an unmodified run of the same program (this program
 * run again as a child), and each failing schedule replayed 100 times out
 * of 100 with the same choices and the same outcome (in the API form, the
 * same choices' hash, code and message; in the environment form, the same
 * output).  Then correct programs (a matmul, a collective matmul, a
 * ring-attention-like ppermute loop) pass 1,000 schedules in all with
 * outputs bit-identical to the first schedule's and to the serial result.
 * Every case runs with the mesh's mode threads and fibers: the explored
 * maps run in the exploring mode either way.
 *
 * SHMAPTEST_REPLAYS sets how many child processes replay each failing
 * schedule in the environment form (default 100; the sanitizer runs of
 * .ci/run take 10, since every child pays the sanitizer's start-up).
 *
 * Not here: an async input rewritten before its all_gather's wait and a
 * result read before its psum_scatter's wait.  shmap_explore() turns
 * SHMAP_ASYNC_CHECK on for its runs, but the shadow-state check that
 * would report those two is not part of the library yet.
 */
#include "testutil.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const modes[2] = {"threads", "fibers"};

static void set_mode(int i)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[i % 2], 1), 0);
  unsetenv("SHMAP_EXPLORE");
  unsetenv("SHMAP_REPLAY");
  unsetenv("SHMAP_EXPLORE_SEED");
}

/* The devices' shared host memory: what the buggy programs talk through. */
typedef struct shared {
  int slot[8];
  float scale;
  _Atomic int flag;
  float got[8]; /* what each device read, for the output */
} shared;

static shared sh;

static shmap_block *out1(shmap_ctx *ctx, float v)
{
  shmap_block *o = shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){1});
  if (o)
    ((float *)o->data)[0] = v;
  return o;
}

/* Bug 1: devices pass values through shared memory with no collective
 * between the write and the read.  After a psum each device writes its
 * slot again and reads its right neighbour's, expecting the new value;
 * it holds only if the neighbour left the psum first. */
static int shared_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int r = shmap_axis_index(ctx, "i"), n = shmap_axis_size(ctx, "i");
  sh.slot[r] = r + 1;
  shmap_block *x = out1(ctx, (float)r);
  if (!x)
    return shmap_fail(ctx, "no output");
  int rc = shmap_psum(ctx, x, "i");
  if (rc)
    return rc;
  sh.slot[r] = 100 + r;
  int v = r + 1 < n ? sh.slot[r + 1] : 100 + r + 1;
  rc = shmap_psum(ctx, x, "i");
  sh.slot[r] = 0; /* clean for the next run */
  if (rc)
    return rc;
  if (v != 100 + r + 1)
    return shmap_fail(ctx, "read %d from device %d's slot, expected %d", v,
                      r + 1, 100 + r + 1);
  return 0;
}

/* Bug 2: a ppermute pair where device 1 assumes device 0 left the call
 * first and already set the scale it reads: its output depends on the
 * order. */
static int pair_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int r = shmap_axis_index(ctx, "i");
  shmap_block *x = out1(ctx, (float)(r + 1));
  if (!x)
    return shmap_fail(ctx, "no output");
  int rc = shmap_ppermute(ctx, x, "i", 2, (const int[][2]){{0, 1}, {1, 0}});
  if (rc)
    return rc;
  if (r == 0) {
    sh.scale = 2.0f;
  } else {
    ((float *)x->data)[0] *= sh.scale;
    sh.scale = 0.0f; /* clean for the next run */
  }
  return 0;
}

/* Bug 3: a nested map whose slices reach collectives in different
 * orders.  Slice 1 raises a flag after its first inner psum; a device of
 * slice 0 that sees it already raised does the outer psum before the
 * inner one. */
static int inner_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_ctx *outer = shmap_ctx_outer(ctx);
  int i = shmap_axis_index(outer, "i");
  int64_t one = 1;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &one);
  if (!x)
    return shmap_fail(ctx, "no block");
  ((float *)x->data)[0] = 1.0f;
  int rc = shmap_psum(ctx, x, "j");
  if (rc)
    return rc;
  if (i == 1)
    atomic_store(&sh.flag, 1);
  if (i == 0 && atomic_load(&sh.flag)) {
    rc = shmap_psum(outer, x, "i");
    return rc ? rc : shmap_psum(ctx, x, "j");
  }
  rc = shmap_psum(ctx, x, "j");
  return rc ? rc : shmap_psum(outer, x, "i");
}

static int nested_body(shmap_ctx *ctx, void *arg)
{
  int rc = shmap_map_nested(ctx, inner_body, arg, 0, NULL, NULL, 0, NULL,
                            NULL, NULL);
  if (rc == 0 && shmap_axis_index(ctx, "i") == 0)
    atomic_store(&sh.flag, 0); /* clean for the next run */
  return rc;
}

/* Bug 4: an input block rewritten between an all_gather's start and its
 * wait.  Device 0 reuses its input for the next step as soon as it has
 * started the gather; the exploring run checks the asynchronous rules. */
static int rewrite_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int r = shmap_axis_index(ctx, "i");
  int64_t one = 1;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &one);
  if (!x)
    return shmap_fail(ctx, "no block");
  ((float *)x->data)[0] = (float)r;
  shmap_block *g = NULL;
  shmap_request *req = NULL;
  int rc = shmap_all_gather_start(ctx, x, "i", 0, 1, &g, &req);
  if (rc)
    return rc;
  if (r == 0)
    ((float *)x->data)[0] = 100.0f; /* the bug: before the wait */
  return shmap_wait(ctx, &req);
}

/* Bug 5: a result read between a psum_scatter's start and its wait.
 * Device 1 peeks at its share of the sum before waiting; the exploring
 * run checks the asynchronous rules, which report the read. */
static int peek_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int r = shmap_axis_index(ctx, "i");
  int64_t two = 2;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &two);
  if (!x)
    return shmap_fail(ctx, "no block");
  ((float *)x->data)[0] = (float)r;
  ((float *)x->data)[1] = (float)(r + 1);
  shmap_block *s = NULL;
  shmap_request *req = NULL;
  int rc = shmap_psum_scatter_start(ctx, x, "i", 0, 1, &s, &req);
  if (rc)
    return rc;
  volatile float early = 0.0f;
  if (r == 1)
    early = ((float *)s->data)[0]; /* the bug: before the wait */
  (void)early;
  return shmap_wait(ctx, &req);
}

/* ---- the programs, as shmap_explore() runs them --------------------------- */

typedef struct prog {
  const char *name, *mesh;
  shmap_body_fn body;
  int nout;              /* 1: one f32[1] output per device, sharded on i */
  const char *manual;    /* the map's manual axes (NULL: all) */
  int max_schedules;     /* found within this many */
  const char *want;      /* in the failure's message (NULL: any failure) */
} prog;

static const prog bugs[] = {
    {"shared", "i=4", shared_body, 1, NULL, 2, "'s slot, expected"},
    {"pair", "i=2", pair_body, 1, NULL, 4, NULL},
    {"nested", "i=2, j=2", nested_body, 0, "i", 8, NULL},
    {"rewrite", "i=2", rewrite_body, 0, NULL, 1,
     "the input was written between shmap_all_gather_start and shmap_wait"},
    {"peek", "i=2", peek_body, 0, NULL, 1,
     "the result was read between shmap_psum_scatter_start and shmap_wait"},
};
#define NBUGS (int)(sizeof bugs / sizeof bugs[0])

/* One run of a program: its map, and its output as text in buf. */
static int run_prog(shmap_mesh *mesh, const prog *p, char *buf, size_t n)
{
  shmap_array *o = NULL;
  memset(&sh, 0, sizeof sh);
  shmap_map_opts mo = {.manual_axes = p->manual};
  int rc = shmap_map_ex(mesh, p->body, NULL, 0, NULL, NULL, p->nout,
                        p->nout ? &o : NULL,
                        p->nout ? (const char *[]){"P('i')"} : NULL, &mo);
  snprintf(buf, n, "rc=%d", rc);
  if (rc)
    snprintf(buf, n, "rc=%d %s", rc, shmap_errmsg());
  if (o) {
    float v[8] = {0};
    int hr = shmap_array_to_host(o, v);
    if (hr)
      snprintf(buf + strlen(buf), n - strlen(buf), " to_host: %s",
               shmap_errmsg());
    for (int64_t k = 0; k < shmap_array_shape(o)[0]; k++)
      snprintf(buf + strlen(buf), n - strlen(buf), " %g", (double)v[k]);
    shmap_array_destroy(o);
  }
  return rc;
}

static int explore_fn(shmap_mesh *mesh, void *arg, unsigned long long *digest)
{
  (void)digest;
  char buf[1024];
  return run_prog(mesh, arg, buf, sizeof buf);
}

/* The child: the program once, its result on stdout (SHMAP_EXPLORE and
 * SHMAP_REPLAY do the rest). */
static int child(const char *name)
{
  for (int b = 0; b < NBUGS; b++)
    if (strcmp(bugs[b].name, name) == 0) {
      shmap_mesh *mesh;
      if (shmap_mesh_create(&mesh, bugs[b].mesh))
        return 2;
      char buf[1024];
      run_prog(mesh, &bugs[b], buf, sizeof buf);
      printf("%s\n", buf);
      shmap_mesh_destroy(mesh);
      return 0;
    }
  return 2;
}

/* ---- the API form ----------------------------------------------------------- */

START_TEST(bug_api)
{
  set_mode(_i);
  const prog *p = &bugs[_i / 2];
  shmap_mesh *mesh;
  ck_assert_int_eq(shmap_mesh_create(&mesh, p->mesh), 0);
  shmap_explore_opts o = {.schedules = 100, .seed = 1, .quiet = 1};
  shmap_explore_result res;
  int rc = shmap_explore(mesh, explore_fn, (void *)p, &o, &res);
  ck_assert_msg(rc != 0, "%s: no failure in 100 schedules", p->name);
  ck_assert_int_eq(rc, res.code);
  ck_assert_msg(res.failed < p->max_schedules, "%s: found only at schedule %d",
                p->name, res.failed);
  ck_assert_str_eq(shmap_errmsg(), shmap_errmsg()); /* set */
  ck_assert_ptr_nonnull(strstr(shmap_errmsg(), res.replay));
  if (p->want)
    ck_assert_msg(strstr(res.message, p->want), "%s: %s", p->name,
                  res.message);
  /* 100 replays: the same choices and the same failure. */
  shmap_explore_result first = res;
  /* Outputs unlike the first schedule's are not a failure of the schedule
   * alone: its replay gives the same outputs again. */
  bool differ = strncmp(first.message, "the outputs differ", 18) == 0;
  for (int k = 0; k < 100; k++) {
    shmap_explore_opts ro = {.replay = first.replay, .quiet = 1};
    int rr = shmap_explore(mesh, explore_fn, (void *)p, &ro, &res);
    ck_assert_int_eq(rr, differ ? 0 : first.code);
    ck_assert_int_eq(res.failed, differ ? -1 : 0);
    if (!differ)
      ck_assert_str_eq(res.message, first.message);
    ck_assert_uint_eq(res.outputs, first.outputs);
    ck_assert_uint_eq(res.steps, first.steps);
    ck_assert_uint_eq(res.choices, first.choices);
  }
  ck_assert_int_eq(shmap_mesh_destroy(mesh), 0);
}
END_TEST

/* ---- the environment form ------------------------------------------------- */

/* Run this program as a child for bug `name` with `env` (NAME=VALUE
 * pairs); its stdout and stderr into out and err. */
static int spawn(const char *name, const char *const env[], int nenv,
                 char *out, size_t nout, char *err, size_t nerr)
{
  char ofile[] = "/tmp/shmap-explore-oXXXXXX", efile[] = "/tmp/shmap-explore-eXXXXXX";
  int ofd = mkstemp(ofile), efd = mkstemp(efile);
  ck_assert(ofd >= 0 && efd >= 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    dup2(ofd, 1);
    dup2(efd, 2);
    for (int k = 0; k < nenv; k++)
      putenv((char *)env[k]);
    execl("/proc/self/exe", "test_explore", "child", name, (char *)NULL);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  close(ofd);
  close(efd);
  char *o = tu_slurp(ofile, NULL), *e = tu_slurp(efile, NULL);
  snprintf(out, nout, "%s", o ? o : "");
  snprintf(err, nerr, "%s", e ? e : "");
  free(o);
  free(e);
  unlink(ofile);
  unlink(efile);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* How many child processes replay a failing schedule: SHMAPTEST_REPLAYS,
 * 1 to 100000, or 100. */
static int replays(void)
{
  const char *e = getenv("SHMAPTEST_REPLAYS");
  if (!e || !*e)
    return 100;
  char *end;
  long n = strtol(e, &end, 10);
  ck_assert_msg(*end == 0 && n >= 1 && n <= 100000,
                "SHMAPTEST_REPLAYS=%s: want a count from 1 to 100000", e);
  return (int)n;
}

START_TEST(bug_env)
{
  set_mode(_i);
  const prog *p = &bugs[_i / 2];
  static char out[4096], err[8192], out2[4096], err2[8192];
  char sched[64];
  snprintf(sched, sizeof sched, "SHMAP_SCHED=%s", modes[_i % 2]);
  const char *env[] = {sched, "SHMAP_EXPLORE=100", "SHMAP_EXPLORE_SEED=1"};
  ck_assert_int_eq(spawn(p->name, env, 3, out, sizeof out, err, sizeof err), 0);
  ck_assert_msg(strncmp(out, "rc=0", 4) != 0, "%s: not found: %s", p->name, out);
  if (p->want)
    ck_assert_msg(strstr(out, p->want), "%s: %s", p->name, out);
  const char *at = strstr(err, "SHMAP_REPLAY=");
  ck_assert_msg(at != NULL, "%s: no schedule printed: %s", p->name, err);
  const char *s = strstr(err, "exploring: schedule ");
  ck_assert_ptr_nonnull(s);
  ck_assert_int_le(atoi(s + strlen("exploring: schedule ")), p->max_schedules);
  char replay[64];
  snprintf(replay, sizeof replay, "%.*s", (int)strcspn(at, " \n"), at);
  /* The replay: the same output (and failure) every time, 100 times by
   * default. */
  const char *renv[] = {sched, replay};
  ck_assert_int_eq(spawn(p->name, renv, 2, out, sizeof out, err, sizeof err), 0);
  for (int k = 1, n = replays(); k < n; k++) {
    ck_assert_int_eq(
        spawn(p->name, renv, 2, out2, sizeof out2, err2, sizeof err2), 0);
    ck_assert_str_eq(out2, out);
  }
}
END_TEST

/* ---- correct programs --------------------------------------------------------- */

#define CM 8
#define CK 16
#define CN 8

static float A[CM * CK], B[CK * CN], C[CM * CN];

/* The matmul of examples/03_matmul_basic: blocks of a and b, a psum. */
static int matmul_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *a = shmap_in(ctx, 0), *b = shmap_in(ctx, 1);
  shmap_block *z = shmap_out(ctx, 0, SHMAP_F32, 2,
                             (int64_t[]){a->shape[0], b->shape[1]});
  if (!z)
    return shmap_fail(ctx, "no output");
  const float *x = a->data, *y = b->data;
  float *o = z->data;
  for (int64_t r = 0; r < a->shape[0]; r++)
    for (int64_t c = 0; c < b->shape[1]; c++) {
      float s = 0;
      for (int64_t t = 0; t < a->shape[1]; t++)
        s += x[r * a->shape[1] + t] * y[t * b->shape[1] + c];
      o[r * b->shape[1] + c] = s;
    }
  return shmap_psum(ctx, z, "j");
}

/* An all-gather collective matmul: b's row blocks go round the ring by
 * ppermute while each device multiplies its columns of a with the block
 * it holds. */
static int cmatmul_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int n = shmap_axis_size(ctx, "i"), r = shmap_axis_index(ctx, "i");
  const shmap_block *a = shmap_in(ctx, 0), *b0 = shmap_in(ctx, 1);
  int64_t kb = b0->shape[0], m = a->shape[0];
  shmap_block *z = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){m, CN});
  shmap_block *cur = shmap_block_alloc(ctx, SHMAP_F32, 2, b0->shape);
  if (!z || !cur)
    return shmap_fail(ctx, "no memory");
  memcpy(cur->data, b0->data, shmap_block_nbytes(b0));
  int pairs[16][2];
  for (int k = 0; k < n; k++)
    pairs[k][0] = k, pairs[k][1] = (k + n - 1) % n;
  for (int s = 0; s < n; s++) {
    int src = (r + s) % n; /* whose rows of b cur holds */
    const float *x = a->data, *y = cur->data;
    float *o = z->data;
    for (int64_t i = 0; i < m; i++)
      for (int64_t c = 0; c < CN; c++)
        for (int64_t t = 0; t < kb; t++)
          o[i * CN + c] += x[i * CK + src * kb + t] * y[t * CN + c];
    if (s + 1 < n) {
      int rc = shmap_ppermute(ctx, cur, "i", n, (const int(*)[2])pairs);
      if (rc)
        return rc;
    }
  }
  return 0;
}

/* A ring-attention-like loop: blocks pass round the ring; each device
 * keeps a running maximum and a rescaled running sum of its dot
 * products with them. */
static int ring_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int n = shmap_axis_size(ctx, "i");
  const shmap_block *q = shmap_in(ctx, 0);
  int64_t len = q->shape[0];
  shmap_block *z = shmap_out(ctx, 0, SHMAP_F32, 1, (int64_t[]){2});
  shmap_block *kv = shmap_block_alloc(ctx, SHMAP_F32, 1, &len);
  if (!z || !kv)
    return shmap_fail(ctx, "no memory");
  memcpy(kv->data, q->data, shmap_block_nbytes(q));
  float mx = -1e30f, sum = 0;
  int pairs[16][2];
  for (int k = 0; k < n; k++)
    pairs[k][0] = k, pairs[k][1] = (k + 1) % n;
  for (int s = 0; s < n; s++) {
    float d = 0;
    for (int64_t e = 0; e < len; e++)
      d += ((const float *)q->data)[e] * ((float *)kv->data)[e];
    if (d > mx) {
      sum = sum * 0.5f + 1;
      mx = d;
    } else {
      sum += 0.25f;
    }
    int rc = shmap_ppermute(ctx, kv, "i", n, (const int(*)[2])pairs);
    if (rc)
      return rc;
  }
  ((float *)z->data)[0] = mx;
  ((float *)z->data)[1] = sum;
  return 0;
}

typedef struct good {
  const char *mesh;
  int which; /* 0 matmul, 1 collective matmul, 2 ring */
  float want[CM * CN];
  int nwant;
} good;

static int good_fn(shmap_mesh *mesh, void *arg, unsigned long long *digest)
{
  good *g = arg;
  shmap_array *ga, *gb, *o = NULL;
  float got[CM * CN];
  int rc = shmap_array_from_host(&ga, SHMAP_F32, 2, (int64_t[]){CM, CK}, A);
  if (rc)
    return rc;
  rc = shmap_array_from_host(&gb, SHMAP_F32, 2, (int64_t[]){CK, CN}, B);
  if (rc == 0 && g->which == 0)
    rc = shmap_map(mesh, matmul_body, NULL, 2, (shmap_array *[]){ga, gb},
                   (const char *[]){"P('i','j')", "P('j',None)"}, 1, &o,
                   (const char *[]){"P('i',None)"});
  else if (rc == 0 && g->which == 1)
    rc = shmap_map(mesh, cmatmul_body, NULL, 2, (shmap_array *[]){ga, gb},
                   (const char *[]){"P('i',None)", "P('i',None)"}, 1, &o,
                   (const char *[]){"P('i',None)"});
  else if (rc == 0) {
    shmap_array *gq;
    rc = shmap_array_from_host(&gq, SHMAP_F32, 1, (int64_t[]){CM * CK}, A);
    if (rc == 0)
      rc = shmap_map(mesh, ring_body, NULL, 1, &gq, (const char *[]){"P('i')"},
                     1, &o, (const char *[]){"P('i')"});
    shmap_array_destroy(gq);
  }
  if (rc == 0)
    rc = shmap_array_to_host(o, got);
  if (rc == 0 && g->nwant && memcmp(got, g->want, sizeof(float) * (size_t)g->nwant))
    rc = SHMAP_EBODY;
  *digest = (unsigned long long)got[0];
  shmap_array_destroy(o);
  shmap_array_destroy(ga);
  shmap_array_destroy(gb);
  return rc;
}

START_TEST(correct_programs)
{
  set_mode(_i);
  for (int k = 0; k < CM * CK; k++)
    A[k] = (float)((k * 7 + 3) % 9 - 4);
  for (int k = 0; k < CK * CN; k++)
    B[k] = (float)((k * 5 + 1) % 9 - 4);
  for (int r = 0; r < CM; r++)
    for (int c = 0; c < CN; c++) {
      float s = 0;
      for (int t = 0; t < CK; t++)
        s += A[r * CK + t] * B[t * CN + c];
      C[r * CN + c] = s;
    }
  /* 1,000 schedules over both modes: 500 per mode. */
  static const struct { const char *mesh; int which, n; } cases[] = {
      {"i=4, j=2", 0, 200}, {"i=4", 1, 150}, {"i=4", 2, 150}};
  for (int c = 0; c < 3; c++) {
    good g = {.mesh = cases[c].mesh, .which = cases[c].which};
    if (g.which < 2) {
      memcpy(g.want, C, sizeof C);
      g.nwant = CM * CN;
    }
    shmap_mesh *mesh;
    ck_assert_int_eq(shmap_mesh_create(&mesh, g.mesh), 0);
    shmap_explore_opts o = {.schedules = cases[c].n, .seed = 7};
    shmap_explore_result res;
    int rc = shmap_explore(mesh, good_fn, &g, &o, &res);
    ck_assert_msg(rc == 0, "case %d: %s", c, shmap_errmsg());
    ck_assert_int_eq(res.schedules, cases[c].n);
    ck_assert_int_eq(res.failed, -1);
    ck_assert_int_eq(shmap_mesh_destroy(mesh), 0);
  }
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */

START_TEST(bad_input)
{
  set_mode(_i);
  shmap_mesh *mesh;
  ck_assert_int_eq(shmap_mesh_create(&mesh, "i=2"), 0);
  shmap_explore_opts o = {.replay = "x.1"};
  ck_assert_int_eq(shmap_explore(mesh, explore_fn, (void *)&bugs[1], &o, NULL),
                   SHMAP_EINVAL);
  ck_assert_str_eq(shmap_errmsg(), "shmap_explore: schedule \"x.1\" is not "
                                   "valid (r.SEED or pDEPTH.SEED)");
  ck_assert_int_eq(shmap_explore(mesh, NULL, NULL, NULL, NULL), SHMAP_EINVAL);
  ck_assert_str_eq(shmap_errmsg(), "shmap_explore: run is NULL");
  shmap_map_opts mo = {.schedule = "p0.3"};
  shmap_array *out = NULL;
  ck_assert_int_eq(shmap_map_ex(mesh, pair_body, NULL, 0, NULL, NULL, 1, &out,
                                (const char *[]){"P('i')"}, &mo),
                   SHMAP_EINVAL);
  ck_assert_str_eq(shmap_errmsg(), "shmap_map_ex: schedule \"p0.3\" is not "
                                   "valid (r.SEED or pDEPTH.SEED)");
  /* A valid schedule runs the map once in that order. */
  mo.schedule = "p2.3";
  ck_assert_int_eq(shmap_map_ex(mesh, pair_body, NULL, 0, NULL, NULL, 1, &out,
                                (const char *[]){"P('i')"}, &mo),
                   0);
  shmap_array_destroy(out);
  ck_assert_int_eq(shmap_mesh_destroy(mesh), 0);
}
END_TEST

/* A deadlock: device 0 waits in a ppermute that device 1 never joins
 * while device 1 waits in a psum: reported with both calls, no hang. */
static int deadlock_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *x = out1(ctx, 1);
  if (!x)
    return shmap_fail(ctx, "no output");
  if (shmap_axis_index(ctx, "i") == 0)
    return shmap_ppermute(ctx, x, "i", 1, (const int[][2]){{0, 1}});
  return shmap_psum(ctx, x, "i");
}

START_TEST(deadlock)
{
  set_mode(_i);
  shmap_mesh *mesh;
  ck_assert_int_eq(shmap_mesh_create(&mesh, "i=2"), 0);
  shmap_map_opts mo = {.schedule = "r.1"};
  shmap_array *out = NULL;
  int rc = shmap_map_ex(mesh, deadlock_body, NULL, 0, NULL, NULL, 1, &out,
                        (const char *[]){"P('i')"}, &mo);
  ck_assert_int_ne(rc, 0);
  ck_assert_ptr_null(out);
  ck_assert_int_eq(shmap_mesh_destroy(mesh), 0);
}
END_TEST

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "child") == 0)
    return child(argv[2]);
  Suite *s = suite_create("explore");
  TCase *tc = tcase_create("explore");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, bug_api, 0, 2 * NBUGS);
  tcase_add_loop_test(tc, bug_env, 0, 2 * NBUGS);
  tcase_add_loop_test(tc, correct_programs, 0, 2);
  tcase_add_loop_test(tc, bad_input, 0, 2);
  tcase_add_loop_test(tc, deadlock, 0, 2);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
