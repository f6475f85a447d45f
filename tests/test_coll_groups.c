/* SPDX-License-Identifier: MIT */
/*
 * test_coll_groups.c - axis_index_groups, pbroadcast, ragged_all_to_all
 * and user-defined reductions (preduce), against serial models.
 *
 * Grouped collectives and pbroadcast are compared with tests/refcoll.c on
 * random meshes, axes, group layouts (random sizes and orders), dtypes,
 * shapes, dimensions, tilings and forms (in place and _new), bit for bit.
 * ragged_all_to_all is compared with a serial model written here from
 * JAX's definition, on random per-peer sizes and placements; preduce with
 * a serial left fold of the same combine functions (an argmax carrying
 * the index, a log-sum-exp).  Errors: bad layouts, sources, offsets and
 * sizes, and members that disagree, each with its code and message.
 *
 * Every test runs in both scheduling modes (the loop index picks one).
 * The seed is printed; SHMAPTEST_PROP_SEED overrides it and SHMAPTEST_PROP_CASES
 * sets the number of cases (default 120).
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "jaxgroups.h"
#include "jaxragged.h"
#include "refcoll.h"
#include "testutil.h"

#define DEFAULT_SEED 0x9e0b5u
#define DEFAULT_CASES 120
#define TIMEOUT 60

static uint64_t g_seed;
static int g_cases;

static void set_mode(int i)
{
  setenv("SHMAP_SCHED", i % 2 ? "fibers" : "threads", 1);
}

/* ---- random worlds ------------------------------------------------------------ */

static const char *const axis_pool[] = {"i", "j", "k", "data", "model",
                                        "expert"};

typedef struct world {
  ref_mesh rm;
  shmap_mesh *mesh;
  char text[128];
} world;

static void world_new(world *w, ref_rng *r)
{
  int naxes = ref_rng_int(r, 1, 3);
  const char *names[3];
  int sizes[3], used[6] = {0}, total = 1;
  for (int a = 0; a < naxes; a++) {
    int p;
    do
      p = ref_rng_int(r, 0, 5);
    while (used[p]);
    used[p] = 1;
    names[a] = axis_pool[p];
    int maxs = 12 / total;
    sizes[a] = ref_rng_int(r, 1, maxs < 4 ? maxs : 4);
    if (naxes == 1)
      sizes[a] = ref_rng_int(r, 1, 8);
    total *= sizes[a];
  }
  ck_assert_int_eq(ref_mesh_init(&w->rm, naxes, names, sizes), 0);
  ref_mesh_text(&w->rm, w->text, sizeof w->text);
  w->mesh = tu_mesh_new(w->text);
}

static void world_free(world *w)
{
  shmap_mesh_destroy(w->mesh);
  w->mesh = NULL;
}

/* A random ordered nonempty subset of the axes. */
static void random_axes(ref_rng *r, const ref_mesh *m, ref_op *op)
{
  int perm[SHMAP_MAX_AXES];
  for (int a = 0; a < m->naxes; a++)
    perm[a] = a;
  for (int a = m->naxes - 1; a > 0; a--) {
    int b = ref_rng_int(r, 0, a), t = perm[a];
    perm[a] = perm[b];
    perm[b] = t;
  }
  ref_op_axes(m, op, perm, ref_rng_int(r, 1, m->naxes), ref_rng_int(r, 0, 3));
}

/* A random layout of n ranks into groups of a random divisor of n. */
static void random_layout(ref_rng *r, int n, int *ngroups, int *gsize,
                          int ranks[])
{
  int divs[16] = {1}, nd = 0;
  for (int d = 1; d <= n; d++)
    if (n % d == 0)
      divs[nd++] = d;
  *gsize = divs[ref_rng_int(r, 0, nd - 1)];
  *ngroups = n / *gsize;
  for (int i = 0; i < n; i++)
    ranks[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = ref_rng_int(r, 0, i), t = ranks[i];
    ranks[i] = ranks[j];
    ranks[j] = t;
  }
}

static shmap_block **random_inputs(ref_rng *r, const ref_mesh *m,
                                   shmap_dtype dt, int rank,
                                   const int64_t shape[])
{
  shmap_block **in = calloc((size_t)m->ndev, sizeof *in);
  ck_assert_ptr_nonnull(in);
  for (int d = 0; d < m->ndev; d++) {
    in[d] = ref_block_new(dt, rank, shape);
    ref_fill_random(r, in[d]);
  }
  return in;
}

static void inputs_free(shmap_block **in, int n)
{
  ref_blocks_free(in, n);
  free(in);
}

/* Run the ops as a job and compare every device's result with the model. */
static void job_check(const world *w, const ref_op *ops, int nops,
                      shmap_block **in, int mem, const char *desc)
{
  ref_job job = {&w->rm, nops, ops, in, ref_cap_new(w->rm.ndev), mem, 0};
  shmap_block **want = calloc((size_t)w->rm.ndev, sizeof *want);
  int mrc = ref_job_model(&job, want);
  ck_assert_msg(mrc == 0, "%s: the model refuses (%d)", desc, mrc);
  int rc = ref_job_run(w->mesh, &job);
  ck_assert_msg(rc == 0, "%s: %d: %s", desc, rc, shmap_errmsg());
  for (int d = 0; d < w->rm.ndev; d++)
    if (!ref_block_same(job.cap->blk[d], want[d])) {
      char diff[256], gt[768], wt[768];
      ref_block_diff(job.cap->blk[d], want[d], diff, sizeof diff);
      ref_block_text(job.cap->blk[d], 24, gt, sizeof gt);
      ref_block_text(want[d], 24, wt, sizeof wt);
      ck_abort_msg("%s\n device %d: %s\n got  %s\n want %s", desc, d, diff,
                   gt, wt);
    }
  ref_blocks_free(want, w->rm.ndev);
  free(want);
  ref_cap_free(job.cap);
}

static void describe(char *buf, size_t n, int ci, const world *w,
                     const ref_op *ops, int nops, shmap_dtype dt, int rank,
                     const int64_t shape[])
{
  char sh[128];
  ref_shape_text(dt, rank, shape, sh, sizeof sh);
  snprintf(buf, n, "seed %" PRIu64 ", case %d, mesh \"%s\", input %s:", g_seed,
           ci, w->text, sh);
  for (int k = 0; k < nops; k++) {
    char t[512];
    ref_op_text(&ops[k], t, sizeof t);
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, " %s%s", k ? "then " : "", t);
  }
}

static int allowed(ref_kind k, shmap_dtype dt)
{
  if (k == RK_PMAX || k == RK_PMIN)
    return ref_reduce_allowed(REF_MAX, dt) == 0;
  if (k == RK_PMEAN)
    return ref_reduce_allowed(REF_MEAN, dt) == 0;
  return 1;
}

/* ---- axis_index_groups: properties ------------------------------------------ */

/* Random grouped collectives of every kind, dtype, tiling and layout; a
 * second grouped op with another layout follows now and then. */
START_TEST(t_prop_groups)
{
  set_mode(_i);
  ref_rng rng = {g_seed ^ 0x6a0u ^ (uint64_t)_i};
  world w;
  world_new(&w, &rng);
  static const ref_kind kinds[] = {RK_PSUM,         RK_PMAX,       RK_PMIN,
                                   RK_PMEAN,        RK_PSUM_SCATTER,
                                   RK_ALL_GATHER,   RK_ALL_TO_ALL};
  for (int ci = 0; ci < g_cases; ci++) {
    if (ci && ci % 8 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    ref_op ops[2];
    int ranks[2][64];
    int nops = ref_rng_int(&rng, 0, 3) == 0 ? 2 : 1;
    shmap_dtype dt;
    ref_kind kind = kinds[ref_rng_int(&rng, 0, 6)];
    do
      dt = ref_dtype_at(ref_rng_int(&rng, 0, ref_ndtypes() - 1));
    while (!allowed(kind, dt) || (nops == 2 && !allowed(RK_PMAX, dt)));
    int rank = ref_rng_int(&rng, 1, 3);
    int64_t shape[SHMAP_MAX_RANK];
    for (int d = 0; d < rank; d++)
      shape[d] = ref_rng_int(&rng, 1, 3);
    for (int k = 0; k < nops; k++) {
      ref_op *op = &ops[k];
      memset(op, 0, sizeof *op);
      op->kind = k == 0 ? kind : RK_PMAX;
      random_axes(&rng, &w.rm, op);
      int n = ref_axis_size(&w.rm, op->axes, op->naxes);
      random_layout(&rng, n, &op->ngroups, &op->gsize, ranks[k]);
      op->groups = ranks[k];
      int g = op->gsize;
      switch (op->kind) {
      case RK_PSUM_SCATTER: {
        int d = ref_rng_int(&rng, 0, rank - 1);
        op->tiled = ref_rng_int(&rng, 0, 1);
        shape[d] = op->tiled ? (int64_t)g * ref_rng_int(&rng, 1, 2) : g;
        op->dim = ref_rng_int(&rng, 0, 3) == 0 ? d - rank : d;
        break;
      }
      case RK_ALL_GATHER: {
        op->tiled = ref_rng_int(&rng, 0, 1);
        int lim = op->tiled ? rank : rank + 1;
        op->dim = ref_rng_int(&rng, -lim, lim - 1);
        break;
      }
      case RK_ALL_TO_ALL: {
        int s = ref_rng_int(&rng, 0, rank - 1);
        op->tiled = ref_rng_int(&rng, 0, 1);
        shape[s] = op->tiled ? (int64_t)g * ref_rng_int(&rng, 1, 2) : g;
        op->dim = s;
        op->dim2 = ref_rng_int(&rng, 0, rank - 1);
        break;
      }
      default:
        /* psum of bool gives i32: only the _new form takes it. */
        op->outplace = ref_rng_int(&rng, 0, 1) ||
                       (op->kind == RK_PSUM && dt == SHMAP_BOOL);
        break;
      }
    }
    /* The second op (pmax) runs on the first's result, whose dtype may be
     * i32 (a psum of bool): pmax takes that too. */
    shmap_block **in = random_inputs(&rng, &w.rm, dt, rank, shape);
    char desc[2048];
    describe(desc, sizeof desc, ci, &w, ops, nops, dt, rank, shape);
    job_check(&w, ops, nops, in, ref_rng_int(&rng, 0, 1), desc);
    inputs_free(in, w.rm.ndev);
  }
  world_free(&w);
}
END_TEST

/* Every grouped kind on every dtype it allows, tiled and untiled, over a
 * fixed mesh i=2, j=3 with the layouts of both axes: exhaustive rather
 * than random. */
START_TEST(t_groups_every_dtype)
{
  set_mode(_i);
  world w;
  ck_assert_int_eq(ref_mesh_init(&w.rm, 2, (const char *[]){"i", "j"},
                                 (int[]){2, 3}), 0);
  ref_mesh_text(&w.rm, w.text, sizeof w.text);
  w.mesh = tu_mesh_new(w.text);
  ref_rng rng = {g_seed ^ 0xe7e1u};
  /* Over ('j','i') (6 ranks): pairs, threes, one group, singletons. */
  static int lay2[] = {5, 0, 3, 1, 2, 4}, lay3[] = {0, 2, 4, 1, 3, 5},
             lay6[] = {3, 1, 4, 0, 5, 2}, lay1[] = {0, 1, 2, 3, 4, 5};
  struct { int gsize; int *ranks; } lays[] = {
      {2, lay2}, {3, lay3}, {6, lay6}, {1, lay1}};
  static const ref_kind kinds[] = {RK_PSUM,         RK_PMAX,       RK_PMIN,
                                   RK_PMEAN,        RK_PSUM_SCATTER,
                                   RK_ALL_GATHER,   RK_ALL_TO_ALL};
  for (int di = 0; di < ref_ndtypes(); di++) {
    shmap_dtype dt = ref_dtype_at(di);
    for (int ki = 0; ki < 7; ki++) {
      if (!allowed(kinds[ki], dt))
        continue;
      for (int tiled = 0; tiled < 2; tiled++) {
        int li = (di + ki + tiled) % 4;
        ref_op op;
        memset(&op, 0, sizeof op);
        op.kind = kinds[ki];
        ref_op_axes(&w.rm, &op, (int[]){1, 0}, 2, 1);
        op.gsize = lays[li].gsize;
        op.ngroups = 6 / op.gsize;
        op.groups = lays[li].ranks;
        op.tiled = tiled;
        int64_t shape[2] = {2, 3};
        if (op.kind == RK_PSUM_SCATTER || op.kind == RK_ALL_TO_ALL)
          shape[1] = tiled ? 2 * op.gsize : op.gsize;
        op.dim = 1;
        op.dim2 = 0;
        if (op.kind <= RK_PMEAN)
          op.outplace = tiled || (op.kind == RK_PSUM && dt == SHMAP_BOOL);
        shmap_block **in = random_inputs(&rng, &w.rm, dt, 2, shape);
        char desc[1024];
        describe(desc, sizeof desc, di * 100 + ki * 2 + tiled, &w, &op, 1, dt,
                 2, shape);
        job_check(&w, &op, 1, in, tiled, desc);
        inputs_free(in, w.rm.ndev);
      }
    }
  }
  world_free(&w);
}
END_TEST

/* ---- axis_index_groups: fixed values, NaN and signed zeros ------------------- */

typedef struct fixed {
  int which;
  double got[8][8];
  int rc[8];
} fixed;

static int body_fixed(shmap_ctx *ctx, void *arg)
{
  fixed *f = arg;
  int dev = shmap_ctx_device(ctx);
  static const int pairs[] = {0, 1, 2, 3}, evens[] = {0, 2, 1, 3};
  shmap_groups g01 = {2, 2, pairs}, g02 = {2, 2, evens};
  float v = (float)dev;
  shmap_block x = {&v, SHMAP_F32, 1, {1}};
  shmap_block *out = NULL;
  int rc = 0;
  switch (f->which) {
  case 0: /* psum, groups [[0,1],[2,3]] on [0,1,2,3]: [1,1,5,5] */
    rc = shmap_psum_groups(ctx, &x, "i", &g01);
    f->got[dev][0] = v;
    break;
  case 1: /* all_gather, groups [[0,2],[1,3]]: [[0,2],[1,3],[0,2],[1,3]] */
    rc = shmap_all_gather_groups(ctx, &x, "i", &g02, 0, 1, &out);
    if (!rc)
      for (int k = 0; k < 2; k++)
        f->got[dev][k] = ((float *)out->data)[k];
    break;
  case 2: { /* NaN wins pmax; -0 < +0; psum of NaN is NaN */
    float nv[4] = {NAN, 1.0f, -0.0f, 0.0f};
    float zv[4] = {-0.0f, -0.0f, 0.0f, -0.0f};
    float a[2] = {nv[dev], zv[dev]};
    shmap_block xb = {a, SHMAP_F32, 1, {2}};
    shmap_block *mx = NULL, *mn = NULL, *sm = NULL;
    if ((rc = shmap_pmax_groups_new(ctx, &xb, "i", &g01, &mx)) ||
        (rc = shmap_pmin_groups_new(ctx, &xb, "i", &g01, &mn)) ||
        (rc = shmap_psum_groups_new(ctx, &xb, "i", &g01, &sm)))
      break;
    for (int k = 0; k < 2; k++) {
      f->got[dev][k] = ((float *)mx->data)[k];
      f->got[dev][2 + k] = ((float *)mn->data)[k];
      f->got[dev][4 + k] = ((float *)sm->data)[k];
    }
    break;
  }
  }
  f->rc[dev] = rc;
  return rc;
}

START_TEST(t_groups_fixed)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  fixed f;
  memset(&f, 0, sizeof f);
  f.which = 0;
  tu_map_ok(shmap_map(mesh, body_fixed, &f, 0, NULL, NULL, 0, NULL, NULL),
            "psum groups");
  double want0[] = {1, 1, 5, 5};
  for (int d = 0; d < 4; d++)
    ck_assert_msg(f.got[d][0] == want0[d], "psum_groups device %d: %g", d,
                  f.got[d][0]);
  f.which = 1;
  tu_map_ok(shmap_map(mesh, body_fixed, &f, 0, NULL, NULL, 0, NULL, NULL),
            "all_gather groups");
  for (int d = 0; d < 4; d++) {
    ck_assert(f.got[d][0] == d % 2 && f.got[d][1] == d % 2 + 2);
  }
  f.which = 2;
  tu_map_ok(shmap_map(mesh, body_fixed, &f, 0, NULL, NULL, 0, NULL, NULL),
            "NaN and signed zeros");
  /* group [0,1]: values {NaN, 1}, zeros {-0, -0}; group [2,3]: {-0, +0},
   * zeros {+0, -0} */
  for (int d = 0; d < 4; d++) {
    double *g = f.got[d];
    if (d < 2) {
      ck_assert(isnan(g[0]) && isnan(g[2]) && isnan(g[4]));
      ck_assert(g[1] == 0 && signbit(g[1]) && signbit(g[3]) && signbit(g[5]));
    } else {
      ck_assert(g[0] == 0 && !signbit(g[0])); /* pmax(-0, +0) = +0 */
      ck_assert(g[2] == 0 && signbit(g[2]));  /* pmin(-0, +0) = -0 */
      ck_assert(g[4] == 0 && !signbit(g[4])); /* -0 + +0 = +0 */
      ck_assert(!signbit(g[1]) && signbit(g[3]) && !signbit(g[5]));
    }
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- axis_index_groups: errors ------------------------------------------------ */

typedef struct gerr {
  int ngroups, size;
  const int *ranks;
  const int *ranks_odd; /* odd devices use these instead, when set */
  int kind;             /* 0 psum, 1 all_gather, 2 psum_scatter */
} gerr;

static int body_gerr(shmap_ctx *ctx, void *arg)
{
  gerr *e = arg;
  int dev = shmap_ctx_device(ctx);
  shmap_groups g = {e->ngroups, e->size,
                    e->ranks_odd && dev % 2 ? e->ranks_odd : e->ranks};
  float v[4] = {1, 2, 3, 4};
  shmap_block x = {v, SHMAP_F32, 1, {4}};
  shmap_block *out;
  switch (e->kind) {
  case 1: return shmap_all_gather_groups(ctx, &x, "i", &g, 0, 1, &out);
  case 2: return shmap_psum_scatter_groups(ctx, &x, "i", &g, 0, 1, &out);
  default: return shmap_psum_groups(ctx, &x, "i", &g);
  }
}

static void expect_err(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                       int code, const char *const words[])
{
  int rc = shmap_map(mesh, body, arg, 0, NULL, NULL, 0, NULL, NULL);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "want %s, got %d (%s): %s", shmap_strerror(code),
                rc, shmap_strerror(rc), msg);
  for (int k = 0; words[k]; k++)
    ck_assert_msg(ref_has(msg, words[k]), "message lacks \"%s\": %s",
                  words[k], msg);
}

/* The whole message, exactly: `want`, or `other` (the same failure seen
 * by the other device first) when not NULL. */
static void expect_msg2(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                        int code, const char *want, const char *other)
{
  int rc = shmap_map(mesh, body, arg, 0, NULL, NULL, 0, NULL, NULL);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "want %s, got %d (%s): %s", shmap_strerror(code),
                rc, shmap_strerror(rc), msg);
  ck_assert_msg(strcmp(msg, want) == 0 || (other && strcmp(msg, other) == 0),
                "message\n  %s\nwant\n  %s", msg, want);
}

static void expect_msg(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                       int code, const char *want)
{
  expect_msg2(mesh, body, arg, code, want, NULL);
}

/* A message every device gives alike (a local check): `want` as device
 * 0 words it, from whichever device of the mesh i=N reported first. */
static void expect_anydev(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                          int code, const char *want)
{
  int rc = shmap_map(mesh, body, arg, 0, NULL, NULL, 0, NULL, NULL);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "want %s, got %d (%s): %s", shmap_strerror(code),
                rc, shmap_strerror(rc), msg);
  const char *at = strstr(want, " on device 0 (i=0): ");
  ck_assert(at != NULL);
  size_t head = (size_t)(at - want);
  int d = -1, used = 0;
  char tail[8];
  int ok = strncmp(msg, want, head) == 0 &&
           sscanf(msg + head, " on device %d (i=%7[0-9]): %n", &d, tail,
                  &used) == 2 &&
           used > 0 && atoi(tail) == d &&
           strcmp(msg + head + used, at + strlen(" on device 0 (i=0): ")) == 0;
  ck_assert_msg(ok, "message\n  %s\nwant (from any device)\n  %s", msg, want);
}

START_TEST(t_groups_errors)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  static const int out_of_range[] = {0, 1, 2, 4}, dup_other[] = {0, 1, 1, 3},
                   dup_same[] = {0, 0, 2, 3}, ok[] = {0, 1, 2, 3},
                   other[] = {0, 2, 1, 3};
  gerr e1 = {2, 2, out_of_range, NULL, 0};
  expect_err(mesh, body_gerr, &e1, SHMAP_EINVAL,
             (const char *[]){"psum over 'i'", "group 1 [2, 4]",
                              "rank 4 outside [0, 4)", NULL});
  gerr e2 = {2, 2, dup_other, NULL, 1};
  expect_err(mesh, body_gerr, &e2, SHMAP_EINVAL,
             (const char *[]){"all_gather", "group 1 [1, 3] has rank 1",
                              "group 0 [0, 1] has already", NULL});
  gerr e3 = {2, 2, dup_same, NULL, 0};
  expect_err(mesh, body_gerr, &e3, SHMAP_EINVAL,
             (const char *[]){"group 0 [0, 0] has rank 0 twice", NULL});
  gerr e4 = {3, 1, ok, NULL, 2};
  expect_err(mesh, body_gerr, &e4, SHMAP_EINVAL,
             (const char *[]){"psum_scatter", "3 groups of 1 ranks",
                              "cover the 4 ranks", NULL});
  gerr e5 = {0, 4, ok, NULL, 0};
  expect_err(mesh, body_gerr, &e5, SHMAP_EINVAL,
             (const char *[]){"0 groups of 4 ranks", NULL});
  gerr e6 = {2, 2, NULL, NULL, 0};
  expect_err(mesh, body_gerr, &e6, SHMAP_EINVAL,
             (const char *[]){"ranks is NULL", NULL});
  /* Members that disagree on the layout: a mismatch listing both. */
  gerr e7 = {2, 2, ok, other, 0};
  expect_err(mesh, body_gerr, &e7, SHMAP_EMISMATCH,
             (const char *[]){"axis_index_groups [[0, 1], [2, 3]]",
                              "axis_index_groups [[0, 2], [1, 3]]", NULL});
  /* One group of every rank is a valid layout. */
  static const int whole[] = {0, 1, 2, 3};
  gerr e8 = {1, 4, whole, NULL, 2};
  int rc = shmap_map(mesh, body_gerr, &e8, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == 0, "%s", shmap_errmsg());
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- pbroadcast ----------------------------------------------------------------- */

START_TEST(t_prop_pbroadcast)
{
  set_mode(_i);
  ref_rng rng = {g_seed ^ 0xb0cau ^ (uint64_t)_i};
  world w;
  world_new(&w, &rng);
  for (int ci = 0; ci < g_cases; ci++) {
    if (ci && ci % 8 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    ref_op op;
    memset(&op, 0, sizeof op);
    op.kind = RK_PBROADCAST;
    random_axes(&rng, &w.rm, &op);
    op.dim = ref_rng_int(&rng, 0,
                         ref_axis_size(&w.rm, op.axes, op.naxes) - 1);
    op.outplace = ref_rng_int(&rng, 0, 1);
    shmap_dtype dt = ref_dtype_at(ref_rng_int(&rng, 0, ref_ndtypes() - 1));
    int rank = ref_rng_int(&rng, 0, 3);
    int64_t shape[SHMAP_MAX_RANK];
    for (int d = 0; d < rank; d++)
      shape[d] = ref_rng_int(&rng, 0, 3);
    shmap_block **in = random_inputs(&rng, &w.rm, dt, rank, shape);
    char desc[1024];
    describe(desc, sizeof desc, ci, &w, &op, 1, dt, rank, shape);
    job_check(&w, &op, 1, in, ref_rng_int(&rng, 0, 1), desc);
    inputs_free(in, w.rm.ndev);
  }
  world_free(&w);
}
END_TEST

static int body_pb_err(shmap_ctx *ctx, void *arg)
{
  int which = *(int *)arg;
  int dev = shmap_ctx_device(ctx);
  double v = dev;
  shmap_block x = {&v, SHMAP_F64, 0, {0}};
  shmap_block *out;
  switch (which) {
  case 0: return shmap_pbroadcast(ctx, &x, "i", 3);
  case 1: return shmap_pbroadcast(ctx, &x, "i", dev == 1 ? 0 : 1);
  default: return shmap_pbroadcast_new(ctx, &x, "i", 0, NULL);
  }
  (void)out;
}

START_TEST(t_pbroadcast_errors)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=3");
  int which = 0;
  expect_err(mesh, body_pb_err, &which, SHMAP_EINVAL,
             (const char *[]){"pbroadcast over 'i'", "source 3 is outside "
                              "[0, 3)", NULL});
  which = 1;
  expect_err(mesh, body_pb_err, &which, SHMAP_EMISMATCH,
             (const char *[]){"source=0", "source=1", NULL});
  which = 2;
  expect_err(mesh, body_pb_err, &which, SHMAP_EINVAL,
             (const char *[]){"out is NULL", NULL});
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- ragged_all_to_all ----------------------------------------------------------- */

/*
 * The model, from JAX's definition: member s sends rows
 * [in_off[s][j], +send[s][j]) of its operand to member j, which stores
 * them at rows [out_off[s][j], +send[s][j]) of its output; other rows of
 * the output keep their values.
 */
typedef struct ragged {
  const ref_mesh *m;
  int axes[SHMAP_MAX_AXES], naxes;
  char text[128];
  int n;
  shmap_dtype dt;
  int64_t rows, orows, inner;
  /* per device, per peer rank */
  int64_t (*in_off)[16], (*send)[16], (*out_off)[16], (*recv)[16];
  shmap_block **operand, **output0, **got;
  ref_cap *cap;
} ragged;

static int body_ragged(shmap_ctx *ctx, void *arg)
{
  ragged *g = arg;
  int dev = shmap_ctx_device(ctx);
  shmap_block *out = shmap_block_alloc(ctx, g->dt, g->output0[dev]->rank,
                                       g->output0[dev]->shape);
  if (!out)
    return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
  memcpy(out->data, g->output0[dev]->data, shmap_block_nbytes(out));
  int rc = shmap_ragged_all_to_all(ctx, g->operand[dev], out, g->in_off[dev],
                                   g->send[dev], g->out_off[dev],
                                   g->recv[dev], g->text);
  ref_cap_rc(g->cap, dev, rc);
  if (!rc)
    ref_cap_put(g->cap, dev, out);
  return rc;
}

START_TEST(t_prop_ragged)
{
  set_mode(_i);
  ref_rng rng = {g_seed ^ 0x4a66edu ^ (uint64_t)_i};
  world w;
  world_new(&w, &rng);
  for (int ci = 0; ci < g_cases; ci++) {
    if (ci && ci % 8 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    int nd = w.rm.ndev;
    ragged g;
    memset(&g, 0, sizeof g);
    g.m = &w.rm;
    ref_op op;
    memset(&op, 0, sizeof op);
    random_axes(&rng, &w.rm, &op);
    memcpy(g.axes, op.axes, sizeof g.axes);
    g.naxes = op.naxes;
    snprintf(g.text, sizeof g.text, "%s", op.text);
    g.n = ref_axis_size(&w.rm, g.axes, g.naxes);
    g.dt = ref_dtype_at(ref_rng_int(&rng, 0, ref_ndtypes() - 1));
    int rank = ref_rng_int(&rng, 1, 3);
    int64_t shape[SHMAP_MAX_RANK];
    for (int d = 1; d < rank; d++)
      shape[d] = ref_rng_int(&rng, 1, 3);
    g.in_off = calloc((size_t)nd, sizeof *g.in_off);
    g.send = calloc((size_t)nd, sizeof *g.send);
    g.out_off = calloc((size_t)nd, sizeof *g.out_off);
    g.recv = calloc((size_t)nd, sizeof *g.recv);
    /* sizes[dev][j]: rows dev sends to its rank-j peer. */
    int64_t (*sz)[16] = calloc((size_t)nd, sizeof *sz);
    int64_t maxsend = 0, maxrecv = 0;
    for (int d = 0; d < nd; d++) {
      int64_t tot = 0;
      for (int j = 0; j < g.n; j++)
        tot += sz[d][j] = ref_rng_int(&rng, 0, 2) ? ref_rng_int(&rng, 0, 3) : 0;
      maxsend = tot > maxsend ? tot : maxsend;
    }
    int mem[64];
    for (int d = 0; d < nd; d++) {
      int me;
      ref_group(&w.rm, g.axes, g.naxes, d, mem, &me);
      int64_t tot = 0;
      for (int s = 0; s < g.n; s++)
        tot += sz[mem[s]][me];
      maxrecv = tot > maxrecv ? tot : maxrecv;
    }
    g.rows = maxsend + ref_rng_int(&rng, 0, 2);
    g.orows = maxrecv + ref_rng_int(&rng, 0, 2);
    shape[0] = g.rows;
    int64_t oshape[SHMAP_MAX_RANK];
    memcpy(oshape, shape, sizeof oshape);
    oshape[0] = g.orows;
    g.inner = ref_numel(rank - 1, shape + 1);
    for (int d = 0; d < nd; d++) {
      int me;
      ref_group(&w.rm, g.axes, g.naxes, d, mem, &me);
      /* Sends packed in a random peer order, after a random gap. */
      int perm[16];
      for (int j = 0; j < g.n; j++)
        perm[j] = j;
      for (int j = g.n - 1; j > 0; j--) {
        int k = ref_rng_int(&rng, 0, j), t = perm[j];
        perm[j] = perm[k];
        perm[k] = t;
      }
      int64_t tot = 0;
      for (int j = 0; j < g.n; j++)
        tot += sz[d][j];
      int64_t at = ref_rng_int(&rng, 0, (int)(g.rows - tot));
      for (int k = 0; k < g.n; k++) {
        g.in_off[d][perm[k]] = at;
        g.send[d][perm[k]] = sz[d][perm[k]];
        at += sz[d][perm[k]];
      }
      /* Receiver j lays out its senders in reverse rank order. */
      for (int j = 0; j < g.n; j++) {
        int peer = mem[j], pme;
        int pm[64];
        ref_group(&w.rm, g.axes, g.naxes, peer, pm, &pme);
        int64_t off = 0;
        for (int s = g.n - 1; s > me; s--)
          off += sz[pm[s]][j];
        g.out_off[d][j] = off;
        g.recv[d][j] = sz[mem[j]][me];
      }
    }
    g.operand = random_inputs(&rng, &w.rm, g.dt, rank, shape);
    g.output0 = random_inputs(&rng, &w.rm, g.dt, rank, oshape);
    g.cap = ref_cap_new(nd);
    char desc[512];
    snprintf(desc, sizeof desc,
             "seed %" PRIu64 ", case %d, mesh \"%s\", ragged_all_to_all over "
             "\"%s\" of %s rows %lld -> %lld",
             g_seed, ci, w.text, g.text, ref_dtname(g.dt), (long long)g.rows,
             (long long)g.orows);
    int rc = shmap_map(w.mesh, body_ragged, &g, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == 0, "%s: %d: %s", desc, rc, shmap_errmsg());
    size_t es = ref_esize(g.dt);
    for (int d = 0; d < nd; d++) {
      shmap_block *want = ref_block_copy(g.output0[d]);
      int me;
      ref_group(&w.rm, g.axes, g.naxes, d, mem, &me);
      for (int s = 0; s < g.n; s++) {
        int src = mem[s];
        int64_t cnt = g.send[src][me];
        memcpy((char *)want->data + (size_t)(g.out_off[src][me] * g.inner) * es,
               (char *)g.operand[src]->data +
                   (size_t)(g.in_off[src][me] * g.inner) * es,
               (size_t)(cnt * g.inner) * es);
      }
      if (!ref_block_same(g.cap->blk[d], want)) {
        char diff[256];
        ref_block_diff(g.cap->blk[d], want, diff, sizeof diff);
        ck_abort_msg("%s: device %d: %s", desc, d, diff);
      }
      ref_block_free(want);
    }
    inputs_free(g.operand, nd);
    inputs_free(g.output0, nd);
    ref_cap_free(g.cap);
    free(g.in_off);
    free(g.send);
    free(g.out_off);
    free(g.recv);
    free(sz);
  }
  world_free(&w);
}
END_TEST

/* Errors, on i=2 with operand f32[4] and output f32[4]. */
typedef struct rerr {
  int64_t in_off[2], send[2], out_off[2], recv[2];
  int dev; /* the device whose arrays these are; the other's are fine */
  int alias; /* the output is the operand */
  int rank0; /* a rank-0 operand */
  int orows; /* device `dev`'s output rows (0: 4) */
} rerr;

static int body_rerr(shmap_ctx *ctx, void *arg)
{
  rerr *e = arg;
  int dev = shmap_ctx_device(ctx);
  float a[4] = {1, 2, 3, 4}, b[4] = {0};
  shmap_block op = {a, SHMAP_F32, e->rank0 ? 0 : 1, {4}};
  shmap_block out = {e->alias ? a : b, SHMAP_F32, 1,
                     {dev == e->dev && e->orows ? e->orows : 4}};
  /* Fine: send 1 row to each at offset rank, receive 1 from each. */
  int64_t io[2] = {0, 1}, ss[2] = {1, 1}, oo[2] = {dev, dev}, rs[2] = {1, 1};
  if (dev == e->dev)
    return shmap_ragged_all_to_all(ctx, &op, &out, e->in_off, e->send,
                                   e->out_off, e->recv, "i");
  return shmap_ragged_all_to_all(ctx, &op, &out, io, ss, oo, rs, "i");
}

START_TEST(t_ragged_errors)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=2");
  rerr ok = {{0, 1}, {1, 1}, {0, 0}, {1, 1}, 0, 0, 0, 0};
  int rc = shmap_map(mesh, body_rerr, &ok, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == 0, "%s", shmap_errmsg());
  rerr e1 = {{0, 3}, {1, 2}, {0, 0}, {1, 1}, 0, 0, 0, 0};
  expect_err(mesh, body_rerr, &e1, SHMAP_EINVAL,
             (const char *[]){"ragged_all_to_all over 'i'",
                              "input_offsets[1] = 3 with send_sizes[1] = 2",
                              "outside the operand's 4 rows", NULL});
  /* Device 1 puts its row for device 0 after device 0's own, and its
   * own past the end of its output: found by the sender, once the first
   * round has agreed on the outputs' rows. */
  rerr e2 = {{0, 1}, {1, 1}, {1, 4}, {1, 1}, 1, 0, 0, 0};
  expect_msg(mesh, body_rerr, &e2, SHMAP_EINVAL,
             "ragged_all_to_all over 'i' on device 1 (i=1): "
             "output_offsets[1] = 4 with send_sizes[1] = 1 is outside the "
             "receiver's output's 4 rows");
  /* Outputs of different rows: the mismatch, not an offset judged against
   * the caller's own output. */
  rerr e9 = {{0, 1}, {1, 1}, {1, 1}, {1, 1}, 1, 0, 0, 2};
  expect_msg2(mesh, body_rerr, &e9, SHMAP_EMISMATCH,
              "ragged_all_to_all over 'i' on device 1 (i=1): collective call "
              "#1 differs between devices: device 1 (i=1) called "
              "ragged_all_to_all(f32[4] over 'i', output rows 2) but device 0 "
              "(i=0) called ragged_all_to_all(f32[4] over 'i', output rows 4)",
              "ragged_all_to_all over 'i' on device 0 (i=0): collective call "
              "#1 differs between devices: device 0 (i=0) called "
              "ragged_all_to_all(f32[4] over 'i', output rows 4) but device 1 "
              "(i=1) called ragged_all_to_all(f32[4] over 'i', output rows 2)");
  rerr e3 = {{0, 1}, {-1, 1}, {0, 0}, {1, 1}, 0, 0, 0, 0};
  expect_err(mesh, body_rerr, &e3, SHMAP_EINVAL,
             (const char *[]){"send_sizes[0] = -1", NULL});
  rerr e4 = {{0, 1}, {1, 1}, {0, 0}, {1, 5}, 0, 0, 0, 0};
  expect_err(mesh, body_rerr, &e4, SHMAP_EINVAL,
             (const char *[]){"recv_sizes[1] = 5 is outside [0, 4]", NULL});
  /* Sizes the peers disagree on: found after the offsets are exchanged. */
  rerr e5 = {{0, 1}, {1, 1}, {0, 0}, {1, 2}, 0, 0, 0, 0};
  expect_err(mesh, body_rerr, &e5, SHMAP_EINVAL,
             (const char *[]){"recv_sizes[1] = 2, but rank 1 sends 1 rows",
                              NULL});
  /* Device 0 puts its row for device 1 at row 1, where device 1's own
   * row lands too. */
  rerr e6 = {{0, 1}, {1, 1}, {0, 1}, {1, 1}, 0, 0, 0, 0};
  expect_err(mesh, body_rerr, &e6, SHMAP_EINVAL,
             (const char *[]){"overlap in the output", NULL});
  rerr e7 = {{0, 1}, {1, 1}, {0, 0}, {1, 1}, 0, 1, 0, 0};
  expect_err(mesh, body_rerr, &e7, SHMAP_EINVAL,
             (const char *[]){"the output overlaps the operand", NULL});
  rerr e8 = {{0, 1}, {1, 1}, {0, 0}, {1, 1}, 0, 0, 1, 0};
  expect_err(mesh, body_rerr, &e8, SHMAP_ESHAPE,
             (const char *[]){"no rows (rank 0)", NULL});
  shmap_mesh_destroy(mesh);
}
END_TEST

/* JAX's examples (jaxragged.h), exact values, every device. */
START_TEST(t_ragged_jax)
{
  set_mode(_i);
  for (size_t k = 0; k < sizeof jr_cases / sizeof jr_cases[0]; k++) {
    const jr_case *c = &jr_cases[k];
    shmap_mesh *mesh = tu_mesh_new(c->mesh);
    jr_run r = {c, {0}, {{0}}};
    int rc = shmap_map(mesh, jr_body, &r, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == 0, "%s: %s", c->name, shmap_errmsg());
    for (int d = 0; d < JR_NDEV; d++)
      ck_assert_msg(!r.bad[d], "%s: device %d: %s", c->name, d, r.why[d]);
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

/* JAX's psum examples and groups of different sizes (jaxgroups.h). */
START_TEST(t_groups_jax)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  for (size_t k = 0; k < sizeof jg_cases / sizeof jg_cases[0]; k++) {
    jg_run r = {&jg_cases[k], {0}, {{0}}};
    int rc = shmap_map(mesh, jg_body, &r, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == 0, "%s: %s", r.c->name, shmap_errmsg());
    for (int d = 0; d < 4; d++)
      ck_assert_msg(!r.bad[d], "%s: device %d: %s", r.c->name, d, r.why[d]);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Groups of different sizes where JAX refuses them or means something
 * else, and layouts of size 0 that are not a partition. */
typedef struct ugerr {
  int which; /* 0 pmean, 1 all_gather, 2 psum_scatter, 3 all_to_all,
                4 ragged_all_to_all, 5 psum */
  int ngroups;
  const int *ranks;
} ugerr;

static int body_ugerr(shmap_ctx *ctx, void *arg)
{
  ugerr *e = arg;
  float v[4] = {1, 2, 3, 4}, o[4] = {0};
  shmap_block x = {v, SHMAP_F32, 1, {4}}, y = {o, SHMAP_F32, 1, {4}};
  shmap_groups g = {e->ngroups, 0, e->ranks};
  shmap_block *out = NULL;
  int64_t io[1] = {0}, ss[1] = {0}, oo[1] = {0}, rs[1] = {0};
  int rc;
  switch (e->which) {
  case 0: rc = shmap_pmean_groups(ctx, &x, "i", &g); break;
  case 1: rc = shmap_all_gather_groups(ctx, &x, "i", &g, 0, 1, &out); break;
  case 2: rc = shmap_psum_scatter_groups(ctx, &x, "i", &g, 0, 1, &out); break;
  case 3:
    rc = shmap_all_to_all_groups(ctx, &x, "i", &g, 0, 0, 1, &out);
    break;
  case 4:
    rc = shmap_ragged_all_to_all_groups(ctx, &x, &y, io, ss, oo, rs, 0, "i",
                                        &g);
    break;
  default: rc = shmap_psum_groups(ctx, &x, "i", &g); break;
  }
  return rc;
}

/* Device 0 passes [[0, 1, 2], [3]], the others [[0], [1, 2, 3]]. */
static int body_ugmis(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  static const int a[] = {0, 1, 2, -1, 3, -1}, b[] = {0, -1, 1, 2, 3, -1};
  float v[1] = {1};
  shmap_block x = {v, SHMAP_F32, 1, {1}};
  shmap_groups g = {2, 0, shmap_ctx_device(ctx) == 0 ? a : b};
  return shmap_psum_groups(ctx, &x, "i", &g);
}

START_TEST(t_groups_unequal_errors)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=4");
  static const int three_one[] = {0, 1, 2, -1, 3, -1};
  static const char *const what[] = {
      "pmean over 'i' on device 0 (i=0): axis_index_groups of different "
      "sizes: JAX's pmean divides by the first group's size in every group; "
      "use psum within the groups and divide by the member's own group size",
      "all_gather over 'i' on device 0 (i=0): axis_index_groups of different "
      "sizes: JAX requires groups of one size here (only psum, pmax and "
      "pmin take groups of different sizes)",
      "psum_scatter over 'i' on device 0 (i=0): axis_index_groups of "
      "different sizes: JAX requires groups of one size here (only psum, "
      "pmax and pmin take groups of different sizes)",
      "all_to_all over 'i' on device 0 (i=0): axis_index_groups of different "
      "sizes: JAX requires groups of one size here (only psum, pmax and "
      "pmin take groups of different sizes)",
      "ragged_all_to_all over 'i' on device 0 (i=0): axis_index_groups of "
      "different sizes: JAX requires groups of one size here (only psum, "
      "pmax and pmin take groups of different sizes)"};
  for (int w = 0; w < 5; w++) {
    ugerr e = {w, 2, three_one};
    expect_anydev(mesh, body_ugerr, &e, SHMAP_EINVAL, what[w]);
  }
  static const int empty[] = {0, 1, 2, 3, -1, -1};
  ugerr e1 = {5, 2, empty};
  expect_anydev(mesh, body_ugerr, &e1, SHMAP_EINVAL,
                "psum over 'i' on device 0 (i=0): axis_index_groups: group 1 "
                "of the 2 (size 0: each ended by -1) is empty");
  static const int unended[] = {0, 1, -1, 2, 3, 0};
  ugerr e2 = {5, 2, unended};
  expect_anydev(mesh, body_ugerr, &e2, SHMAP_EINVAL,
                "psum over 'i' on device 0 (i=0): axis_index_groups: group 1 "
                "of the 2 (size 0: each ended by -1) has no -1 within the 2 "
                "ranks the axes' 4 leave it");
  static const int short_[] = {0, 1, -1, 2, -1};
  ugerr e3 = {5, 2, short_};
  expect_anydev(mesh, body_ugerr, &e3, SHMAP_EINVAL,
                "psum over 'i' on device 0 (i=0): axis_index_groups: 2 groups "
                "of 3 ranks in all cannot cover the 4 ranks of the axes "
                "exactly once");
  /* Layouts that differ between members: the mismatch shows both. */
  int rc = shmap_map(mesh, body_ugmis, NULL, 0, NULL, NULL, 0, NULL, NULL);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == SHMAP_EMISMATCH, "%d: %s", rc, msg);
  ck_assert_msg(
      ref_has(msg, "psum(f32[1] over 'i', axis_index_groups [[0, 1, 2], "
                   "[3]])") &&
          ref_has(msg, "psum(f32[1] over 'i', axis_index_groups [[0], [1, "
                       "2, 3]])"),
      "%s", msg);
  static const int twice[] = {0, 1, -1, 2, 1, -1};
  ugerr e4 = {5, 2, twice};
  expect_anydev(mesh, body_ugerr, &e4, SHMAP_EINVAL,
                "psum over 'i' on device 0 (i=0): axis_index_groups: group 1 "
                "[2, 1] has rank 1, which group 0 [0, 1] has already");
  shmap_mesh_destroy(mesh);
}
END_TEST

/* shmap_ragged_all_to_all_groups's own errors, on i=2 (or i=4). */
typedef struct rgerr {
  int64_t count;
  int groups; /* 1: groups {{0, 1}, {2, 3}} on i=4 */
  int dev;    /* the device that passes `count`; the others pass theirs */
} rgerr;

static int body_rgerr(shmap_ctx *ctx, void *arg)
{
  rgerr *e = arg;
  int dev = shmap_ctx_device(ctx);
  float a[4] = {1, 2, 3, 4}, b[4] = {0};
  shmap_block op = {a, SHMAP_F32, 1, {4}}, out = {b, SHMAP_F32, 1, {4}};
  static const int ranks[4] = {0, 1, 2, 3};
  shmap_groups g = {2, 2, ranks};
  /* Groups of 2 either way; k slices per peer, slice j of member s at
   * row k s + j of its receiver. */
  int me = dev % 2, k = e->count == 4 ? 2 : 1;
  int64_t io[4] = {0, 1, 2, 3}, ss[4] = {1, 1, 1, 1}, oo[4],
          rs[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; i++)
    oo[i] = k * me + i % k;
  int64_t count = dev == e->dev ? e->count : 2 * k;
  return shmap_ragged_all_to_all_groups(ctx, &op, &out, io, ss, oo, rs,
                                        count, "i", e->groups ? &g : NULL);
}

START_TEST(t_ragged_groups_errors)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=2");
  rgerr e1 = {3, 0, 1};
  expect_msg(mesh, body_rgerr, &e1, SHMAP_EINVAL,
             "ragged_all_to_all over 'i' on device 1 (i=1): count 3 is not a "
             "positive multiple of the group's 2 members");
  rgerr e2 = {-2, 0, 0};
  expect_msg(mesh, body_rgerr, &e2, SHMAP_EINVAL,
             "ragged_all_to_all over 'i' on device 0 (i=0): count -2 is not "
             "a positive multiple of the group's 2 members");
  /* Two slices per peer on every device: fine. */
  rgerr ok = {4, 0, 0};
  int rc = shmap_map(mesh, body_rgerr, &ok, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == 0, "%s", shmap_errmsg());
  shmap_mesh_destroy(mesh);
  mesh = tu_mesh_new("i=4");
  rgerr ok4 = {2, 1, 0};
  rc = shmap_map(mesh, body_rgerr, &ok4, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == 0, "%s", shmap_errmsg());
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- preduce ------------------------------------------------------------------- */

/* Records (value, index): the larger value wins, the lower index on ties;
 * NaN counts as larger than everything (the first NaN wins). */
static void argmax_combine(void *inout, const void *in, int64_t count,
                           void *arg)
{
  (void)arg;
  double *a = inout;
  const double *b = in;
  for (int64_t i = 0; i < count; i++) {
    double av = a[2 * i], bv = b[2 * i];
    int take = isnan(av) ? 0
               : isnan(bv) ? 1
               : bv > av || (bv == av && b[2 * i + 1] < a[2 * i + 1]);
    if (take) {
      a[2 * i] = bv;
      a[2 * i + 1] = b[2 * i + 1];
    }
  }
}

/* Records (max, sum of exp(x - max)): log-sum-exp without overflow. */
static void lse_combine(void *inout, const void *in, int64_t count, void *arg)
{
  (void)arg;
  float *a = inout;
  const float *b = in;
  for (int64_t i = 0; i < count; i++) {
    float m = a[2 * i] > b[2 * i] ? a[2 * i] : b[2 * i];
    a[2 * i + 1] = a[2 * i + 1] * expf(a[2 * i] - m) +
                   b[2 * i + 1] * expf(b[2 * i] - m);
    a[2 * i] = m;
  }
}

typedef struct pr {
  int n, cols, which, inplace;
  double *vals;   /* [dev][cols] */
  double *got;    /* [dev][cols][2] */
} pr;

static int body_preduce(shmap_ctx *ctx, void *arg)
{
  pr *p = arg;
  int dev = shmap_ctx_device(ctx);
  int c = p->cols;
  shmap_reduce_op am = {"argmax", argmax_combine, NULL, 2};
  shmap_reduce_op lse = {"logsumexp", lse_combine, NULL, 2};
  int rc;
  if (p->which == 0) {
    double *rec = calloc((size_t)c * 2, sizeof *rec);
    for (int k = 0; k < c; k++) {
      rec[2 * k] = p->vals[dev * c + k];
      rec[2 * k + 1] = dev;
    }
    shmap_block x = {rec, SHMAP_F64, 2, {c, 2}};
    shmap_block *out = &x;
    rc = p->inplace ? shmap_preduce(ctx, &x, "i", &am)
                    : shmap_preduce_new(ctx, &x, "i", &am, &out);
    if (!rc)
      for (int k = 0; k < 2 * c; k++)
        p->got[dev * 2 * c + k] = ((double *)out->data)[k];
    free(rec);
  } else {
    float *rec = calloc((size_t)c * 2, sizeof *rec);
    for (int k = 0; k < c; k++) {
      rec[2 * k] = (float)p->vals[dev * c + k];
      rec[2 * k + 1] = 1.0f;
    }
    shmap_block x = {rec, SHMAP_F32, 1, {2 * c}};
    shmap_block *out = &x;
    rc = p->inplace ? shmap_preduce(ctx, &x, "i", &lse)
                    : shmap_preduce_new(ctx, &x, "i", &lse, &out);
    if (!rc)
      for (int k = 0; k < 2 * c; k++)
        p->got[dev * 2 * c + k] = ((float *)out->data)[k];
    free(rec);
  }
  return rc;
}

START_TEST(t_preduce)
{
  set_mode(_i);
  ref_rng rng = {g_seed ^ 0xa59u};
  for (int n = 1; n <= 6; n++) {
    char text[16];
    snprintf(text, sizeof text, "i=%d", n);
    shmap_mesh *mesh = tu_mesh_new(text);
    for (int which = 0; which < 2; which++) {
      pr p = {n, 5 + n, which, n % 2, NULL, NULL};
      int c = p.cols;
      p.vals = calloc((size_t)(n * c), sizeof *p.vals);
      p.got = calloc((size_t)(n * c * 2), sizeof *p.got);
      for (int k = 0; k < n * c; k++)
        /* few distinct values, so ties happen; large ones for the LSE */
        p.vals[k] = which ? 80.0 + ref_rng_int(&rng, 0, 40)
                          : ref_rng_int(&rng, -3, 3);
      if (which == 0 && n > 2)
        p.vals[c + 1] = NAN;
      tu_map_ok(shmap_map(mesh, body_preduce, &p, 0, NULL, NULL, 0, NULL,
                          NULL),
                which ? "logsumexp" : "argmax");
      /* The serial left fold in rank order, with the same combine. */
      for (int k = 0; k < c; k++) {
        if (which == 0) {
          double acc[2] = {p.vals[k], 0};
          for (int r = 1; r < n; r++) {
            double t[2] = {p.vals[r * c + k], r};
            argmax_combine(acc, t, 1, NULL);
          }
          for (int d = 0; d < n; d++) {
            double *g = &p.got[(d * c + k) * 2];
            ck_assert_msg((isnan(acc[0]) ? isnan(g[0]) : g[0] == acc[0]) &&
                              g[1] == acc[1],
                          "argmax n=%d col %d dev %d: (%g, %g) want (%g, %g)",
                          n, k, d, g[0], g[1], acc[0], acc[1]);
          }
        } else {
          float acc[2] = {(float)p.vals[k], 1.0f};
          for (int r = 1; r < n; r++) {
            float t[2] = {(float)p.vals[r * c + k], 1.0f};
            lse_combine(acc, t, 1, NULL);
          }
          double want = acc[0] + log(acc[1]);
          for (int d = 0; d < n; d++) {
            double *g = &p.got[(d * c + k) * 2];
            ck_assert_msg(g[0] == acc[0] && g[1] == acc[1],
                          "lse n=%d col %d dev %d: (%a, %a) want (%a, %a)", n,
                          k, d, g[0], g[1], (double)acc[0], (double)acc[1]);
            ck_assert(isfinite(want));
          }
        }
      }
      free(p.vals);
      free(p.got);
    }
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

/* A combine that calls a collective (which it may not) on device 1. */
typedef struct combine_call {
  shmap_ctx *ctx;
  int dev, rc;
} combine_call;

static void psum_combine(void *inout, const void *in, int64_t count, void *arg)
{
  combine_call *cc = arg;
  double *a = inout;
  const double *b = in;
  for (int64_t i = 0; i < count; i++)
    a[i] += b[i];
  if (cc->dev == 1) {
    double v = 1;
    shmap_block y = {&v, SHMAP_F64, 1, {1}};
    cc->rc = shmap_psum(cc->ctx, &y, "i");
  }
}

static int preduce_rc[8];

static int body_preduce_err(shmap_ctx *ctx, void *arg)
{
  int which = *(int *)arg;
  int dev = shmap_ctx_device(ctx);
  double v[3] = {1, 2, 3};
  shmap_block x = {v, SHMAP_F64, 1, {3}};
  shmap_reduce_op am = {"argmax", argmax_combine, NULL, 2};
  shmap_reduce_op other = {dev ? "argmin" : "argmax", argmax_combine, NULL, 1};
  shmap_reduce_op none = {"x", NULL, NULL, 1};
  shmap_reduce_op longer = {dev ? "a_reduction_whose_name_is_longer_than_forty_1"
                                : "a_reduction_whose_name_is_longer_than_forty_0",
                            argmax_combine, NULL, 1};
  combine_call cc = {ctx, dev, 0};
  shmap_reduce_op calls = {"sum_and_psum", psum_combine, &cc, 1};
  switch (which) {
  case 0: return shmap_preduce(ctx, &x, "i", &am);
  case 1: return shmap_preduce(ctx, &x, "i", &other);
  case 2: return shmap_preduce(ctx, &x, "i", &none);
  case 4: return shmap_preduce(ctx, &x, "i", &longer);
  case 5:
  case 6:
    if (which == 6)
      cc.dev = -1;
    preduce_rc[dev] = shmap_preduce(ctx, &x, "i", &calls);
    /* What the collective in the combine returned, on device 1. */
    if (dev == 1)
      preduce_rc[2] = cc.rc;
    return preduce_rc[dev];
  default: return shmap_preduce(ctx, &x, "i", NULL);
  }
}

START_TEST(t_preduce_errors)
{
  set_mode(_i);
  shmap_mesh *mesh = tu_mesh_new("i=2");
  int which = 0;
  expect_err(mesh, body_preduce_err, &which, SHMAP_ESHAPE,
             (const char *[]){"preduce over 'i'", "3 elements",
                              "records of width 2", NULL});
  which = 1;
  /* The operations are named by their names. */
  expect_err(mesh, body_preduce_err, &which, SHMAP_EMISMATCH,
             (const char *[]){"preduce(f64[3] over 'i', op 'argmax' of width 1)",
                              "preduce(f64[3] over 'i', op 'argmin' of width 1)",
                              NULL});
  which = 4;
  expect_err(mesh, body_preduce_err, &which, SHMAP_EMISMATCH,
             (const char *[]){"op 'a_reduction_whose_name_is_longer_than_"
                              "fo...' #",
                              "differs between devices", NULL});
  /* A collective from a combine function fails at once, and the map. */
  which = 5;
  expect_err(mesh, body_preduce_err, &which, SHMAP_ESTATE,
             (const char *[]){"psum on device 1 (i=1): called from the "
                              "combine function of the shmap_preduce "
                              "operation 'sum_and_psum', which may not call "
                              "the library",
                              NULL});
  ck_assert_int_eq(preduce_rc[2], SHMAP_ESTATE);
  ck_assert_int_eq(preduce_rc[1], SHMAP_ESTATE);
  ck_assert(preduce_rc[0] == 0 || preduce_rc[0] == SHMAP_ECANCELED);
  /* The mesh still works, with the same combine calling nothing. */
  which = 6;
  ck_assert_int_eq(shmap_map(mesh, body_preduce_err, &which, 0, NULL, NULL, 0,
                             NULL, NULL),
                   0);
  ck_assert_int_eq(preduce_rc[0], 0);
  ck_assert_int_eq(preduce_rc[1], 0);
  which = 2;
  expect_err(mesh, body_preduce_err, &which, SHMAP_EINVAL,
             (const char *[]){"op->combine is NULL", NULL});
  which = 3;
  expect_err(mesh, body_preduce_err, &which, SHMAP_EINVAL,
             (const char *[]){"op is NULL", NULL});
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------ */

int main(void)
{
  g_seed = ref_seed(DEFAULT_SEED);
  g_cases = DEFAULT_CASES;
  const char *c = getenv("SHMAPTEST_PROP_CASES");
  if (c && atoi(c) > 0)
    g_cases = atoi(c);
  printf("test_coll_groups: seed %" PRIu64 " (SHMAPTEST_PROP_SEED overrides), %d "
         "cases per property (SHMAPTEST_PROP_CASES)\n",
         g_seed, g_cases);
  fflush(stdout);
  Suite *s = suite_create("coll_groups");
  struct {
    const char *name;
    const TTest *t;
  } cases[] = {{"groups", t_prop_groups},
               {"groups_dtypes", t_groups_every_dtype},
               {"groups_fixed", t_groups_fixed},
               {"groups_errors", t_groups_errors},
               {"pbroadcast", t_prop_pbroadcast},
               {"pbroadcast_errors", t_pbroadcast_errors},
               {"ragged", t_prop_ragged},
               {"ragged_errors", t_ragged_errors},
               {"ragged_jax", t_ragged_jax},
               {"groups_jax", t_groups_jax},
               {"groups_unequal_errors", t_groups_unequal_errors},
               {"ragged_groups_errors", t_ragged_groups_errors},
               {"preduce", t_preduce},
               {"preduce_errors", t_preduce_errors}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    TCase *tc = tcase_create(cases[k].name);
    tcase_set_timeout(tc, TIMEOUT);
    /* 0: threads, 1: fibers */
    tcase_add_loop_test(tc, cases[k].t, 0, 2);
    suite_add_tcase(s, tc);
  }
  return tu_run_suite(s);
}
