/* SPDX-License-Identifier: MIT */
/*
 * test_coll_prop.c - property tests of the collectives against the serial
 * model of tests/refcoll.c.
 *
 * Random meshes (1 to 4 axes, up to 16 devices), random ordered groups of
 * axes (the empty group included), random dtypes, shapes, dimensions
 * (negative ones too), tilings and ppermute pairs: every collective must
 * give, on every device, the model's result bit for bit.  Identities:
 * psum_scatter then all_gather (tiled, same dimension) is psum; an
 * all_to_all followed by the swapped all_to_all is the identity; a
 * ppermute followed by its inverse is the identity.  Random sequences of
 * collectives check calls over different groups in a row.
 *
 * The seed is printed at the start; SHMAPTEST_PROP_SEED overrides it, and
 * SHMAPTEST_PROP_CASES the number of cases per property (default 300).
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "refcoll.h"
#include "testutil.h"

#define DEFAULT_SEED 0x5eedc011u
#define DEFAULT_CASES 300
#define TIMEOUT 60

static uint64_t g_seed;
static int g_cases;

/* ---- random meshes, groups, shapes ------------------------------------------------ */

static const char *const axis_pool[] = {"i", "j", "k", "x", "y", "z",
                                        "data", "model", "pipe", "expert"};

typedef struct world {
  ref_mesh rm;
  shmap_mesh *mesh;
  char text[128];
} world;

static void world_new(world *w, ref_rng *r)
{
  int naxes = ref_rng_int(r, 1, 4);
  const char *names[4];
  int sizes[4];
  int used[10] = {0};
  int total = 1;
  for (int a = 0; a < naxes; a++) {
    int p;
    do
      p = ref_rng_int(r, 0, 9);
    while (used[p]);
    used[p] = 1;
    names[a] = axis_pool[p];
    int maxs = 16 / total;
    /* sizes of 1 now and then: a group over them has one member */
    int s = ref_rng_int(r, 0, 5) == 0 ? 1 : ref_rng_int(r, 1, maxs < 4 ? maxs : 4);
    if (a == 0 && naxes == 1)
      s = ref_rng_int(r, 1, 16);
    sizes[a] = s;
    total *= s;
  }
  ck_assert_int_eq(ref_mesh_init(&w->rm, naxes, names, sizes), 0);
  ref_mesh_text(&w->rm, w->text, sizeof w->text);
  w->mesh = NULL;
  int rc;
  if (ref_rng_int(r, 0, 1))
    rc = shmap_mesh_create(&w->mesh, w->text);
  else
    rc = shmap_mesh_create_axes(&w->mesh, naxes, names, sizes);
  ck_assert_msg(rc == 0, "mesh %s: %d: %s", w->text, rc, shmap_errmsg());
}

static void world_free(world *w)
{
  shmap_mesh_destroy(w->mesh);
  w->mesh = NULL;
}

/* A random ordered subset of the mesh axes; empty now and then. */
static void random_group(ref_rng *r, const ref_mesh *m, ref_op *op)
{
  int perm[SHMAP_MAX_AXES];
  for (int a = 0; a < m->naxes; a++)
    perm[a] = a;
  for (int a = m->naxes - 1; a > 0; a--) {
    int b = ref_rng_int(r, 0, a);
    int t = perm[a];
    perm[a] = perm[b];
    perm[b] = t;
  }
  int k = ref_rng_int(r, 0, 19) == 0 ? 0 : ref_rng_int(r, 1, m->naxes);
  ref_op_axes(m, op, perm, k, ref_rng_int(r, 0, 3));
}

/* Whether the library takes `dt` for one op of `kind` (the model's rules;
 * psum in place cannot change bool into its i32 result). */
static int kind_allows(ref_kind kind, shmap_dtype dt)
{
  switch (kind) {
  case RK_PSUM: /* bool needs the _new form (see with_form) */
    return 1;
  case RK_PMAX:
    return ref_reduce_allowed(REF_MAX, dt) == 0;
  case RK_PMIN:
    return ref_reduce_allowed(REF_MIN, dt) == 0;
  case RK_PMEAN:
    return ref_reduce_allowed(REF_MEAN, dt) == 0;
  default:
    return 1;
  }
}

/* In place or out of place (the _new form), at random; a psum of bool
 * is always out of place (its i32 result does not fit in place). */
static void with_form(ref_rng *r, ref_op *op, shmap_dtype dt)
{
  switch (op->kind) {
  case RK_PSUM:
  case RK_PMAX:
  case RK_PMIN:
  case RK_PMEAN:
  case RK_PPERMUTE:
    op->outplace = ref_rng_int(r, 0, 1) || (op->kind == RK_PSUM &&
                                            dt == SHMAP_BOOL);
    break;
  default:
    op->outplace = 0;
  }
}

/* Any dtype the kind allows, every dtype as likely. */
static shmap_dtype random_dtype(ref_rng *r, ref_kind kind)
{
  shmap_dtype dt;
  do
    dt = ref_dtype_at(ref_rng_int(r, 0, ref_ndtypes() - 1));
  while (!kind_allows(kind, dt));
  return dt;
}

static void random_shape(ref_rng *r, int minrank, int maxrank, int *rank,
                         int64_t shape[])
{
  *rank = ref_rng_int(r, minrank, maxrank);
  for (int d = 0; d < *rank; d++)
    shape[d] = ref_rng_int(r, 1, 4);
}

/* Random pairs: a random injective partial map when partial, else a full
 * permutation; listed in random order.  Returns the number of pairs. */
static int random_pairs(ref_rng *r, int n, int partial, int (*pairs)[2])
{
  int perm[16];
  for (int i = 0; i < n; i++)
    perm[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = ref_rng_int(r, 0, i);
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int np = 0;
  for (int s = 0; s < n; s++)
    if (!partial || ref_rng_int(r, 0, 2) != 0) {
      pairs[np][0] = s;
      pairs[np][1] = perm[s];
      np++;
    }
  for (int i = np - 1; i > 0; i--) {
    int j = ref_rng_int(r, 0, i);
    int t0 = pairs[i][0], t1 = pairs[i][1];
    pairs[i][0] = pairs[j][0];
    pairs[i][1] = pairs[j][1];
    pairs[j][0] = t0;
    pairs[j][1] = t1;
  }
  return np;
}

/* Per-device random inputs. */
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

/* ---- one case: run on the library, compare with expected blocks ------------------- */

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

/* Run the job; every device's result must equal want[dev] bitwise. */
static void run_expect(const world *w, ref_job *job, shmap_block **want,
                       const char *desc)
{
  tu_map_ok(ref_job_run(w->mesh, job), desc);
  for (int d = 0; d < w->rm.ndev; d++) {
    if (!ref_block_same(job->cap->blk[d], want[d])) {
      char diff[256], gt[768], wt[768];
      ref_block_diff(job->cap->blk[d], want[d], diff, sizeof diff);
      ref_block_text(job->cap->blk[d], 24, gt, sizeof gt);
      ref_block_text(want[d], 24, wt, sizeof wt);
      ck_abort_msg("%s\n device %d: %s\n got  %s\n want %s", desc, d, diff,
                   gt, wt);
    }
  }
}

/* Random parameters for one op of `kind` on blocks of the given shape;
 * may change the shape (to make it divisible).  Returns 0, or -1 when the
 * kind cannot apply (rank 0 for a dimensioned kind). */
static int random_op(ref_rng *r, const ref_mesh *m, ref_kind kind, ref_op *op,
                     int rank, int64_t shape[], int (*pairs)[2])
{
  memset(op, 0, sizeof *op);
  op->kind = kind;
  random_group(r, m, op);
  int n = ref_axis_size(m, op->axes, op->naxes);
  switch (kind) {
  case RK_PSUM_SCATTER: {
    if (rank < 1)
      return -1;
    int d = ref_rng_int(r, 0, rank - 1);
    op->tiled = ref_rng_int(r, 0, 1);
    shape[d] = op->tiled ? (int64_t)n * ref_rng_int(r, 1, 3) : n;
    op->dim = ref_rng_int(r, 0, 3) == 0 ? d - rank : d;
    break;
  }
  case RK_ALL_GATHER: {
    op->tiled = rank >= 1 ? ref_rng_int(r, 0, 1) : 0;
    int lim = op->tiled ? rank : rank + 1;
    op->dim = ref_rng_int(r, -lim, lim - 1);
    break;
  }
  case RK_ALL_TO_ALL: {
    if (rank < 1)
      return -1;
    int s = ref_rng_int(r, 0, rank - 1), c = ref_rng_int(r, 0, rank - 1);
    op->tiled = ref_rng_int(r, 0, 1);
    shape[s] = op->tiled ? (int64_t)n * ref_rng_int(r, 1, 2) : n;
    op->dim = ref_rng_int(r, 0, 3) == 0 ? s - rank : s;
    op->dim2 = ref_rng_int(r, 0, 3) == 0 ? c - rank : c;
    break;
  }
  case RK_PPERMUTE:
    op->npairs = random_pairs(r, n, ref_rng_int(r, 0, 1), pairs);
    op->pairs = pairs;
    break;
  default:
    break;
  }
  return 0;
}

/* `cases` random single-collective cases of one kind. */
static void prop_kind(ref_kind kind, int cases)
{
  ref_rng rng = {g_seed ^ (0x1000193u * (uint64_t)(kind + 1))};
  world w;
  world_new(&w, &rng);
  for (int ci = 0; ci < cases; ci++) {
    if (ci && ci % 10 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    int rank;
    int64_t shape[SHMAP_MAX_RANK];
    int pairs[16][2];
    random_shape(&rng, 0, 3, &rank, shape);
    ref_op op;
    if (random_op(&rng, &w.rm, kind, &op, rank, shape, pairs) != 0) {
      rank = 1;
      shape[0] = 2;
      ck_assert_int_eq(random_op(&rng, &w.rm, kind, &op, rank, shape, pairs),
                       0);
    }
    shmap_dtype dt = random_dtype(&rng, kind);
    with_form(&rng, &op, dt);
    shmap_block **in = random_inputs(&rng, &w.rm, dt, rank, shape);
    char desc[2048];
    describe(desc, sizeof desc, ci, &w, &op, 1, dt, rank, shape);
    ref_cap *cap = ref_cap_new(w.rm.ndev);
    ref_job job = {&w.rm, 1, &op, in, cap, ref_rng_int(&rng, 0, 1),
                   ref_rng_int(&rng, 0, 1)};
    shmap_block **want = calloc((size_t)w.rm.ndev, sizeof *want);
    int mrc = ref_job_model(&job, want);
    ck_assert_msg(mrc == 0, "%s: the model rejects the case (%d)", desc, mrc);
    run_expect(&w, &job, want, desc);
    ref_blocks_free(want, w.rm.ndev);
    free(want);
    ref_cap_free(cap);
    inputs_free(in, w.rm.ndev);
  }
  world_free(&w);
}

START_TEST(t_prop_psum) { prop_kind(RK_PSUM, g_cases); }
END_TEST
START_TEST(t_prop_pmax) { prop_kind(RK_PMAX, g_cases); }
END_TEST
START_TEST(t_prop_pmin) { prop_kind(RK_PMIN, g_cases); }
END_TEST
START_TEST(t_prop_pmean) { prop_kind(RK_PMEAN, g_cases); }
END_TEST
START_TEST(t_prop_psum_scatter) { prop_kind(RK_PSUM_SCATTER, g_cases); }
END_TEST
START_TEST(t_prop_all_gather) { prop_kind(RK_ALL_GATHER, g_cases); }
END_TEST
START_TEST(t_prop_all_to_all) { prop_kind(RK_ALL_TO_ALL, g_cases); }
END_TEST
START_TEST(t_prop_ppermute) { prop_kind(RK_PPERMUTE, g_cases); }
END_TEST

/* ---- identities -------------------------------------------------------------------- */

/* psum_scatter(tiled, d) then all_gather(tiled, d) == psum, bitwise. */
START_TEST(t_ident_scatter_gather)
{
  ref_rng rng = {g_seed ^ 0xa11ca7e5u};
  world w;
  world_new(&w, &rng);
  for (int ci = 0; ci < g_cases; ci++) {
    if (ci && ci % 10 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    int rank;
    int64_t shape[SHMAP_MAX_RANK];
    random_shape(&rng, 1, 3, &rank, shape);
    ref_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].kind = RK_PSUM_SCATTER;
    random_group(&rng, &w.rm, &ops[0]);
    int n = ref_axis_size(&w.rm, ops[0].axes, ops[0].naxes);
    int d = ref_rng_int(&rng, 0, rank - 1);
    shape[d] = (int64_t)n * ref_rng_int(&rng, 1, 3);
    ops[0].dim = ref_rng_int(&rng, 0, 1) ? d : d - rank;
    ops[0].tiled = 1;
    ops[1] = ops[0];
    ops[1].kind = RK_ALL_GATHER;
    ops[1].dim = ref_rng_int(&rng, 0, 1) ? d : d - rank;
    shmap_dtype dt = random_dtype(&rng, RK_ALL_GATHER);
    shmap_block **in = random_inputs(&rng, &w.rm, dt, rank, shape);
    ref_op ps = ops[0];
    ps.kind = RK_PSUM;
    shmap_block **want = calloc((size_t)w.rm.ndev, sizeof *want);
    ck_assert_int_eq(ref_apply(&w.rm, &ps, in, want), 0);
    char desc[2048];
    describe(desc, sizeof desc, ci, &w, ops, 2, dt, rank, shape);
    strcat(desc, " (must equal psum)");
    ref_cap *cap = ref_cap_new(w.rm.ndev);
    ref_job job = {&w.rm, 2, ops, in, cap, ref_rng_int(&rng, 0, 1),
                   ref_rng_int(&rng, 0, 1)};
    run_expect(&w, &job, want, desc);
    ref_blocks_free(want, w.rm.ndev);
    free(want);
    ref_cap_free(cap);
    inputs_free(in, w.rm.ndev);
  }
  world_free(&w);
}
END_TEST

/* all_to_all(split s, concat c) then all_to_all(split c, concat s), both
 * tiled or both untiled, over the same group: the identity. */
START_TEST(t_ident_all_to_all)
{
  ref_rng rng = {g_seed ^ 0xa2a2a2a2u};
  world w;
  world_new(&w, &rng);
  for (int ci = 0; ci < g_cases; ci++) {
    if (ci && ci % 10 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    int rank;
    int64_t shape[SHMAP_MAX_RANK];
    random_shape(&rng, 1, 3, &rank, shape);
    ref_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].kind = RK_ALL_TO_ALL;
    random_group(&rng, &w.rm, &ops[0]);
    int n = ref_axis_size(&w.rm, ops[0].axes, ops[0].naxes);
    int s = ref_rng_int(&rng, 0, rank - 1), c = ref_rng_int(&rng, 0, rank - 1);
    ops[0].tiled = ref_rng_int(&rng, 0, 1);
    shape[s] = ops[0].tiled ? (int64_t)n * ref_rng_int(&rng, 1, 2) : n;
    ops[0].dim = s;
    ops[0].dim2 = c;
    ops[1] = ops[0];
    ops[1].dim = c;
    ops[1].dim2 = s;
    shmap_dtype dt = random_dtype(&rng, RK_ALL_GATHER);
    shmap_block **in = random_inputs(&rng, &w.rm, dt, rank, shape);
    char desc[2048];
    describe(desc, sizeof desc, ci, &w, ops, 2, dt, rank, shape);
    strcat(desc, " (must be the identity)");
    ref_cap *cap = ref_cap_new(w.rm.ndev);
    ref_job job = {&w.rm, 2, ops, in, cap, ref_rng_int(&rng, 0, 1),
                   ref_rng_int(&rng, 0, 1)};
    run_expect(&w, &job, in, desc);
    ref_cap_free(cap);
    inputs_free(in, w.rm.ndev);
  }
  world_free(&w);
}
END_TEST

/* ppermute by a full permutation, then by its inverse: the identity. */
START_TEST(t_ident_ppermute)
{
  ref_rng rng = {g_seed ^ 0x99e1u};
  world w;
  world_new(&w, &rng);
  for (int ci = 0; ci < g_cases; ci++) {
    if (ci && ci % 10 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    int rank;
    int64_t shape[SHMAP_MAX_RANK];
    random_shape(&rng, 0, 3, &rank, shape);
    int fwd[16][2], inv[16][2];
    ref_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].kind = RK_PPERMUTE;
    random_group(&rng, &w.rm, &ops[0]);
    int n = ref_axis_size(&w.rm, ops[0].axes, ops[0].naxes);
    int np = random_pairs(&rng, n, 0, fwd);
    for (int p = 0; p < np; p++) {
      inv[p][0] = fwd[np - 1 - p][1];
      inv[p][1] = fwd[np - 1 - p][0];
    }
    ops[0].npairs = np;
    ops[0].pairs = fwd;
    ops[1] = ops[0];
    ops[1].pairs = inv;
    shmap_dtype dt = random_dtype(&rng, RK_ALL_GATHER);
    shmap_block **in = random_inputs(&rng, &w.rm, dt, rank, shape);
    char desc[2048];
    describe(desc, sizeof desc, ci, &w, ops, 2, dt, rank, shape);
    strcat(desc, " (must be the identity)");
    ref_cap *cap = ref_cap_new(w.rm.ndev);
    ref_job job = {&w.rm, 2, ops, in, cap, ref_rng_int(&rng, 0, 1), 0};
    run_expect(&w, &job, in, desc);
    ref_cap_free(cap);
    inputs_free(in, w.rm.ndev);
  }
  world_free(&w);
}
END_TEST

/* ---- sequences ------------------------------------------------------------------------ */

/* Random parameters for an op that fits blocks of the given shape as they
 * are (no resizing).  Returns -1 when none fits. */
static int fit_op(ref_rng *r, const ref_mesh *m, ref_kind kind, ref_op *op,
                  int rank, const int64_t shape[], int (*pairs)[2])
{
  memset(op, 0, sizeof *op);
  op->kind = kind;
  random_group(r, m, op);
  int n = ref_axis_size(m, op->axes, op->naxes);
  int cand[SHMAP_MAX_RANK], nc = 0;
  for (int d = 0; d < rank; d++)
    if (shape[d] % n == 0)
      cand[nc++] = d;
  switch (kind) {
  case RK_PSUM_SCATTER:
  case RK_ALL_TO_ALL: {
    if (nc == 0)
      return -1;
    int d = cand[ref_rng_int(r, 0, nc - 1)];
    op->tiled = shape[d] == n ? ref_rng_int(r, 0, 1) : 1;
    op->dim = ref_rng_int(r, 0, 3) == 0 ? d - rank : d;
    if (kind == RK_ALL_TO_ALL)
      op->dim2 = ref_rng_int(r, 0, rank - 1);
    return 0;
  }
  case RK_ALL_GATHER: {
    op->tiled = rank >= 1 ? ref_rng_int(r, 0, 1) : 0;
    if (!op->tiled && rank + 1 > 4)
      op->tiled = 1;
    int lim = op->tiled ? rank : rank + 1;
    op->dim = ref_rng_int(r, -lim, lim - 1);
    return 0;
  }
  case RK_PPERMUTE:
    op->npairs = random_pairs(r, n, ref_rng_int(r, 0, 1), pairs);
    op->pairs = pairs;
    return 0;
  default:
    return 0;
  }
}

/* 2 to 5 random collectives in a row, over random groups, each result
 * feeding the next. */
START_TEST(t_prop_sequences)
{
  static const int64_t dims[] = {1, 2, 3, 4, 6, 8, 12, 16};
  ref_rng rng = {g_seed ^ 0x5e9u};
  world w;
  world_new(&w, &rng);
  int cases = g_cases / 2 > 0 ? g_cases / 2 : 1;
  for (int ci = 0; ci < cases; ci++) {
    if (ci && ci % 5 == 0) {
      world_free(&w);
      world_new(&w, &rng);
    }
    int rank0 = ref_rng_int(&rng, 1, 3), rank = rank0;
    int64_t shape0[SHMAP_MAX_RANK], shape[SHMAP_MAX_RANK];
    do
      for (int d = 0; d < rank; d++)
        shape0[d] = dims[ref_rng_int(&rng, 0, 7)];
    while (ref_numel(rank, shape0) > 256);
    memcpy(shape, shape0, sizeof shape);
    shmap_dtype dt = random_dtype(&rng, RK_ALL_GATHER), dt0 = dt;
    int nops = ref_rng_int(&rng, 2, 5);
    ref_op ops[5];
    int pairs[5][16][2];
    int made = 0;
    for (int k = 0; k < nops; k++) {
      ref_kind kind = (ref_kind)ref_rng_int(&rng, 0, RK_NKINDS - 1);
      do {
        kind = (ref_kind)ref_rng_int(&rng, 0, RK_NKINDS - 1);
        if (kind == RK_ALL_GATHER && ref_numel(rank, shape) > 256)
          kind = RK_PMAX;
      } while (!kind_allows(kind, dt));
      ref_op op;
      if (fit_op(&rng, &w.rm, kind, &op, rank, shape, pairs[made]) != 0)
        continue;
      with_form(&rng, &op, dt);
      ops[made++] = op;
      /* the shape after the op, by the model's rules */
      shmap_block *tmp = ref_block_new(dt, rank, shape);
      shmap_block **pin = calloc((size_t)w.rm.ndev, sizeof *pin);
      shmap_block **pout = calloc((size_t)w.rm.ndev, sizeof *pout);
      for (int d = 0; d < w.rm.ndev; d++)
        pin[d] = tmp;
      ck_assert_int_eq(ref_apply(&w.rm, &op, pin, pout), 0);
      rank = pout[0]->rank;
      dt = pout[0]->dtype; /* psum_scatter of bool gives i32 */
      memcpy(shape, pout[0]->shape, sizeof shape);
      ref_blocks_free(pout, w.rm.ndev);
      free(pout);
      free(pin);
      ref_block_free(tmp);
    }
    if (made == 0)
      continue;
    shmap_block **in = random_inputs(&rng, &w.rm, dt0, rank0, shape0);
    char desc[4096];
    describe(desc, sizeof desc, ci, &w, ops, made, dt0, rank0, shape0);
    ref_cap *cap = ref_cap_new(w.rm.ndev);
    ref_job job = {&w.rm, made, ops, in, cap, ref_rng_int(&rng, 0, 1),
                   ref_rng_int(&rng, 0, 1)};
    shmap_block **want = calloc((size_t)w.rm.ndev, sizeof *want);
    int mrc = ref_job_model(&job, want);
    ck_assert_msg(mrc == 0, "%s: the model rejects the sequence (%d)", desc,
                  mrc);
    run_expect(&w, &job, want, desc);
    ref_blocks_free(want, w.rm.ndev);
    free(want);
    ref_cap_free(cap);
    inputs_free(in, w.rm.ndev);
  }
  world_free(&w);
}
END_TEST

/* ---- axis_index / axis_size -------------------------------------------------------------- */

typedef struct axq {
  int nq;
  char text[8][128];
  int idx[16][8], size[16][8];
} axq;

static int body_axq(shmap_ctx *ctx, void *arg)
{
  axq *q = arg;
  int dev = shmap_ctx_device(ctx);
  for (int k = 0; k < q->nq; k++) {
    q->idx[dev][k] = shmap_axis_index(ctx, q->text[k]);
    q->size[dev][k] = shmap_axis_size(ctx, q->text[k]);
  }
  return 0;
}

START_TEST(t_prop_axis_index)
{
  ref_rng rng = {g_seed ^ 0xa815u};
  int cases = g_cases / 3 > 0 ? g_cases / 3 : 1;
  for (int ci = 0; ci < cases; ci++) {
    world w;
    world_new(&w, &rng);
    axq q;
    memset(&q, 0, sizeof q);
    ref_op ops[8];
    q.nq = 8;
    for (int k = 0; k < 8; k++) {
      random_group(&rng, &w.rm, &ops[k]);
      snprintf(q.text[k], sizeof q.text[k], "%s", ops[k].text);
    }
    int rc = shmap_map(w.mesh, body_axq, &q, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == 0, "seed %" PRIu64 " case %d: %d: %s", g_seed, ci, rc,
                  shmap_errmsg());
    for (int d = 0; d < w.rm.ndev; d++)
      for (int k = 0; k < 8; k++) {
        int wi = ref_axis_index(&w.rm, ops[k].axes, ops[k].naxes, d);
        int ws = ref_axis_size(&w.rm, ops[k].axes, ops[k].naxes);
        ck_assert_msg(q.idx[d][k] == wi && q.size[d][k] == ws,
                      "seed %" PRIu64 " case %d, mesh \"%s\", device %d: "
                      "axis_index/axis_size(\"%s\") = %d/%d, want %d/%d",
                      g_seed, ci, w.text, d, q.text[k], q.idx[d][k],
                      q.size[d][k], wi, ws);
      }
    world_free(&w);
  }
}
END_TEST

/* ---- suite -------------------------------------------------------------------------------- */

int main(void)
{
  g_seed = ref_seed(DEFAULT_SEED);
  g_cases = DEFAULT_CASES;
  const char *c = getenv("SHMAPTEST_PROP_CASES");
  if (c && atoi(c) > 0)
    g_cases = atoi(c);
  printf("test_coll_prop: seed %" PRIu64 " (SHMAPTEST_PROP_SEED overrides), %d "
         "cases per property (SHMAPTEST_PROP_CASES)\n",
         g_seed, g_cases);
  fflush(stdout);

  Suite *s = suite_create("coll_prop");
  TCase *tc = tcase_create("collectives");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, t_prop_psum);
  tcase_add_test(tc, t_prop_pmax);
  tcase_add_test(tc, t_prop_pmin);
  tcase_add_test(tc, t_prop_pmean);
  tcase_add_test(tc, t_prop_psum_scatter);
  tcase_add_test(tc, t_prop_all_gather);
  tcase_add_test(tc, t_prop_all_to_all);
  tcase_add_test(tc, t_prop_ppermute);
  tcase_add_test(tc, t_prop_axis_index);
  suite_add_tcase(s, tc);

  tc = tcase_create("identities");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, t_ident_scatter_gather);
  tcase_add_test(tc, t_ident_all_to_all);
  tcase_add_test(tc, t_ident_ppermute);
  tcase_add_test(tc, t_prop_sequences);
  suite_add_tcase(s, tc);

  return tu_run_suite(s);
}
