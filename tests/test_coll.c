/* SPDX-License-Identifier: MIT */
/*
 * test_coll.c - the collectives of SEMANTICS.md section 6, case by case:
 * the reference values of the text, the section 5 shapes that use psum,
 * axis_index/axis_size, every dtype, the shape-changing collectives in
 * their tiled and untiled forms, ppermute with partial permutations,
 * blocks described by the body and freed early, and determinism of the
 * reductions (bitwise equal to a serial left fold in rank order).
 *
 * Expected values come from tests/refcoll.c (a serial model written from
 * the text) or are spelled out by hand.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "refcoll.h"
#include "testutil.h"

#define TIMEOUT 30

/* Under ThreadSanitizer a map costs about ten times as much (TU_TSAN). */

/* ---- helpers ---------------------------------------------------------------- */

static shmap_mesh *mesh_from_ref(const ref_mesh *rm)
{
  char text[256];
  ref_mesh_text(rm, text, sizeof text);
  return tu_mesh_new(text);
}

static void refmesh(ref_mesh *rm, int naxes, const char *const names[],
                    const int sizes[])
{
  ck_assert_int_eq(ref_mesh_init(rm, naxes, names, sizes), 0);
}

/* The array equals `want` (dtype, shape and bytes). */
static void arr_expect(shmap_array *a, const shmap_block *want,
                       const char *what)
{
  shmap_block got;
  tu_array_to_block(a, &got, what);
  char gs[128], ws[128];
  ref_shape_text(got.dtype, got.rank, got.shape, gs, sizeof gs);
  ref_shape_text(want->dtype, want->rank, want->shape, ws, sizeof ws);
  ck_assert_msg(got.dtype == want->dtype && got.rank == want->rank,
                "%s: output is %s, want %s", what, gs, ws);
  for (int d = 0; d < got.rank; d++)
    ck_assert_msg(got.shape[d] == want->shape[d],
                  "%s: output is %s, want %s", what, gs, ws);
  if (!ref_block_same(&got, want)) {
    char diff[256], gt[1024], wt[1024];
    ref_block_diff(&got, want, diff, sizeof diff);
    ref_block_text(&got, 64, gt, sizeof gt);
    ref_block_text(want, 64, wt, sizeof wt);
    ck_abort_msg("%s: %s\n got  %s\n want %s", what, diff, gt, wt);
  }
  free(got.data);
}

/* A host block from literal values (converted to dt). */
static shmap_block *blk_vals(shmap_dtype dt, int rank, const int64_t shape[],
                             const double *vals)
{
  shmap_block *b = ref_block_new(dt, rank, shape);
  int64_t n = ref_numel(rank, shape);
  for (int64_t i = 0; i < n; i++)
    ref_set(b, i, vals[i]);
  return b;
}

static shmap_block *blk_arange(shmap_dtype dt, int rank, const int64_t shape[])
{
  shmap_block *b = ref_block_new(dt, rank, shape);
  int64_t n = ref_numel(rank, shape);
  for (int64_t i = 0; i < n; i++)
    ref_set(b, i, (double)i);
  return b;
}

/* Body: output 0 is op applied to input 0 (in place on a copy for the
 * in-place kinds; the new block taken over with shmap_out_set otherwise). */
static int body_op_out(shmap_ctx *ctx, void *arg)
{
  const ref_op *op = arg;
  const shmap_block *in = shmap_in(ctx, 0);
  if (!in)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  shmap_block *res = NULL;
  if (ref_kind_inplace(op->kind)) {
    shmap_block *o = shmap_out_copy(ctx, 0, in);
    if (!o)
      return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
    return ref_call(ctx, op, o, &res);
  }
  int rc = ref_call(ctx, op, (shmap_block *)in, &res);
  if (rc)
    return rc;
  return shmap_out_set(ctx, 0, res);
}

/* Run body_op_out on one input and one output and check the output. */
static void map_op_expect(shmap_mesh *mesh, const ref_op *op,
                          shmap_array *x, const char *ispec,
                          const char *ospec, const shmap_block *want,
                          const char *what)
{
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_op_out, (void *)op, 1, (shmap_array *[]){x},
                     (const char *[]){ispec}, 1, out, (const char *[]){ospec});
  tu_map_ok(rc, what);
  arr_expect(out[0], want, what);
  shmap_array_destroy(out[0]);
}

static ref_op mkop(const ref_mesh *m, ref_kind k, const int axes[], int naxes,
                   int style)
{
  ref_op op;
  memset(&op, 0, sizeof op);
  op.kind = k;
  ref_op_axes(m, &op, axes, naxes, style);
  return op;
}

static shmap_block **inputs_random(const ref_mesh *m, ref_rng *r,
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

/* Run a job on the library and compare every device with the model. */
static void job_expect(shmap_mesh *lm, const ref_mesh *m, const ref_op *ops,
                       int nops, shmap_block **in, int mem, int free_early,
                       const char *what)
{
  ref_cap *cap = ref_cap_new(m->ndev);
  ref_job job = {m, nops, ops, in, cap, mem, free_early};
  shmap_block **want = calloc((size_t)m->ndev, sizeof *want);
  ck_assert_ptr_nonnull(want);
  char ot[512];
  ref_op_text(&ops[nops - 1], ot, sizeof ot);
  int mrc = ref_job_model(&job, want);
  ck_assert_msg(mrc == 0, "%s: model rejects %s: %d", what, ot, mrc);
  int rc = ref_job_run(lm, &job);
  ck_assert_msg(rc == 0, "%s: %s: shmap_map = %d (%s): %s", what, ot, rc,
                shmap_strerror(rc), shmap_errmsg());
  for (int d = 0; d < m->ndev; d++) {
    if (!ref_block_same(cap->blk[d], want[d])) {
      char diff[256], gt[1024], wt[1024];
      ref_block_diff(cap->blk[d], want[d], diff, sizeof diff);
      ref_block_text(cap->blk[d], 32, gt, sizeof gt);
      ref_block_text(want[d], 32, wt, sizeof wt);
      ck_abort_msg("%s: %s on device %d: %s\n got  %s\n want %s", what, ot,
                   d, diff, gt, wt);
    }
  }
  ref_blocks_free(want, m->ndev);
  free(want);
  ref_cap_free(cap);
}

static const shmap_dtype all_dtypes[4] = {SHMAP_F32, SHMAP_F64, SHMAP_I32,
                                          SHMAP_I64};

/* ---- section 6 reference values ---------------------------------------------- */

static const double sec6_x[16] = {3, 1, 4, 1, 5, 9, 2, 6,
                                  5, 3, 5, 8, 9, 7, 1, 2};

START_TEST(t_sec6_psum)
{
  static const char *const names[] = {"i"};
  ref_mesh rm;
  refmesh(&rm, 1, names, (int[]){4});
  shmap_mesh *mesh = tu_mesh_new("i=4");
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block *x = blk_vals(dt, 1, (int64_t[]){16}, sec6_x);
    shmap_block *want =
        blk_vals(dt, 1, (int64_t[]){4}, (double[]){22, 20, 12, 17});
    shmap_array *xa = tu_array_from_block(x);
    ref_op op = mkop(&rm, RK_PSUM, (int[]){0}, 1, 0);
    char what[64];
    snprintf(what, sizeof what, "psum %s, out P()", ref_dtname(dt));
    map_op_expect(mesh, &op, xa, "P('i')", "P()", want, what);
    shmap_array_destroy(xa);
    ref_block_free(x);
    ref_block_free(want);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

START_TEST(t_sec6_psum_scatter)
{
  static const char *const names[] = {"i"};
  ref_mesh rm;
  refmesh(&rm, 1, names, (int[]){4});
  shmap_mesh *mesh = tu_mesh_new("i=4");
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block *x = blk_vals(dt, 1, (int64_t[]){16}, sec6_x);
    shmap_block *want =
        blk_vals(dt, 1, (int64_t[]){4}, (double[]){22, 20, 12, 17});
    shmap_array *xa = tu_array_from_block(x);
    ref_op op = mkop(&rm, RK_PSUM_SCATTER, (int[]){0}, 1, 0);
    op.dim = 0;
    op.tiled = 1;
    char what[64];
    snprintf(what, sizeof what, "psum_scatter tiled %s, out P('i')",
             ref_dtname(dt));
    map_op_expect(mesh, &op, xa, "P('i')", "P('i')", want, what);
    shmap_array_destroy(xa);
    ref_block_free(x);
    ref_block_free(want);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

START_TEST(t_sec6_all_to_all)
{
  static const char *const names[] = {"i"};
  ref_mesh rm;
  refmesh(&rm, 1, names, (int[]){4});
  shmap_mesh *mesh = tu_mesh_new("i=4");
  static const double w[16] = {3, 5, 5, 9, 1, 9, 3, 7,
                               4, 2, 5, 1, 1, 6, 8, 2};
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block *x = blk_vals(dt, 1, (int64_t[]){16}, sec6_x);
    shmap_block *want = blk_vals(dt, 1, (int64_t[]){16}, w);
    shmap_array *xa = tu_array_from_block(x);
    ref_op op = mkop(&rm, RK_ALL_TO_ALL, (int[]){0}, 1, 0);
    op.dim = 0;
    op.dim2 = 0;
    op.tiled = 1;
    char what[80];
    snprintf(what, sizeof what, "all_to_all(0,0,tiled) %s, out P('i')",
             ref_dtname(dt));
    map_op_expect(mesh, &op, xa, "P('i')", "P('i')", want, what);
    shmap_array_destroy(xa);
    ref_block_free(x);
    ref_block_free(want);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ppermute shift +1 on arange(8): pairs (r, (r+1) mod n), out[dst] = x[src].
 * The expected array is derived here from that rule alone. */
static void ppermute_shift_case(int n)
{
  static const char *const names[] = {"i"};
  ref_mesh rm;
  refmesh(&rm, 1, names, (int[]){n});
  char text[32];
  snprintf(text, sizeof text, "i=%d", n);
  shmap_mesh *mesh = tu_mesh_new(text);
  int blk = 8 / n;
  double want_v[8];
  /* Device r+1 receives device r's block: global block (r+1) mod n holds
   * the elements of block r. */
  for (int r = 0; r < n; r++)
    for (int e = 0; e < blk; e++)
      want_v[((r + 1) % n) * blk + e] = r * blk + e;
  int(*pairs)[2] = calloc((size_t)n, sizeof *pairs);
  for (int r = 0; r < n; r++) {
    pairs[r][0] = r;
    pairs[r][1] = (r + 1) % n;
  }
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block *x = blk_arange(dt, 1, (int64_t[]){8});
    shmap_block *want = blk_vals(dt, 1, (int64_t[]){8}, want_v);
    shmap_array *xa = tu_array_from_block(x);
    ref_op op = mkop(&rm, RK_PPERMUTE, (int[]){0}, 1, 0);
    op.npairs = n;
    op.pairs = pairs;
    char what[80];
    snprintf(what, sizeof what, "ppermute shift +1 on i=%d, %s", n,
             ref_dtname(dt));
    map_op_expect(mesh, &op, xa, "P('i')", "P('i')", want, what);
    shmap_array_destroy(xa);
    ref_block_free(x);
    ref_block_free(want);
  }
  free(pairs);
  shmap_mesh_destroy(mesh);
}

START_TEST(t_sec6_ppermute_i4)
{
  /* On the section's own mesh (i=4, blocks of 2) the rule gives the value
   * the text quotes. */
  static const double doc[8] = {6, 7, 0, 1, 2, 3, 4, 5};
  double rule[8];
  for (int r = 0; r < 4; r++)
    for (int e = 0; e < 2; e++)
      rule[((r + 1) % 4) * 2 + e] = r * 2 + e;
  for (int i = 0; i < 8; i++)
    ck_assert_msg(rule[i] == doc[i], "rule and text differ at %d", i);
  ppermute_shift_case(4);
}
END_TEST

START_TEST(t_sec6_ppermute_i8)
{
  /* One element per device: the rule gives [7,0,1,2,3,4,5,6]. */
  ppermute_shift_case(8);
}
END_TEST

START_TEST(t_sec6_ppermute_i2)
{
  ppermute_shift_case(2);
}
END_TEST

/* ---- axis_index / axis_size --------------------------------------------------- */

#define MAXQ 64

typedef struct axq {
  int nq;
  char text[MAXQ][64];
  int idx[64][MAXQ];
  int size[64][MAXQ];
} axq;

static int body_axis_query(shmap_ctx *ctx, void *arg)
{
  axq *q = arg;
  int dev = shmap_ctx_device(ctx);
  if (dev < 0 || dev >= 64)
    return shmap_fail(ctx, "device %d", dev);
  for (int k = 0; k < q->nq; k++) {
    q->idx[dev][k] = shmap_axis_index(ctx, q->text[k]);
    q->size[dev][k] = shmap_axis_size(ctx, q->text[k]);
  }
  return 0;
}

/* Every ordered non-empty subset of the mesh axes, in every text style. */
static void axis_query_all(const ref_mesh *rm)
{
  shmap_mesh *mesh = mesh_from_ref(rm);
  axq *q = calloc(1, sizeof *q);
  ck_assert_ptr_nonnull(q);
  int groups[MAXQ][SHMAP_MAX_AXES], glen[MAXQ];
  int ng = 0;
  int na = rm->naxes;
  /* Enumerate sequences of distinct axes of length 1..na. */
  int seq[SHMAP_MAX_AXES];
  for (int len = 1; len <= na; len++) {
    int total = 1;
    for (int k = 0; k < len; k++)
      total *= na;
    for (int code = 0; code < total; code++) {
      int c = code, ok = 1;
      for (int k = 0; k < len; k++) {
        seq[k] = c % na;
        c /= na;
        for (int l = 0; l < k; l++)
          if (seq[l] == seq[k])
            ok = 0;
      }
      if (!ok)
        continue;
      for (int style = 0; style < 4; style++) {
        if (len == 1 && style > 0)
          continue;
        ck_assert_int_lt(ng, MAXQ);
        memcpy(groups[ng], seq, sizeof seq);
        glen[ng] = len;
        ref_axes_text(rm, seq, len, style, q->text[ng], sizeof q->text[ng]);
        ng++;
      }
    }
  }
  q->nq = ng;
  int rc = shmap_map(mesh, body_axis_query, q, 0, NULL, NULL, 0, NULL, NULL);
  tu_map_ok(rc, __func__);
  for (int dev = 0; dev < rm->ndev; dev++)
    for (int k = 0; k < ng; k++) {
      int wi = ref_axis_index(rm, groups[k], glen[k], dev);
      int ws = ref_axis_size(rm, groups[k], glen[k]);
      ck_assert_msg(q->idx[dev][k] == wi,
                    "device %d: axis_index(\"%s\") = %d, want %d", dev,
                    q->text[k], q->idx[dev][k], wi);
      ck_assert_msg(q->size[dev][k] == ws,
                    "device %d: axis_size(\"%s\") = %d, want %d", dev,
                    q->text[k], q->size[dev][k], ws);
    }
  free(q);
  shmap_mesh_destroy(mesh);
}

START_TEST(t_axis_index_2d)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  axis_query_all(&rm);
}
END_TEST

START_TEST(t_axis_index_3d)
{
  static const char *const names[] = {"a", "b", "c"};
  ref_mesh rm;
  refmesh(&rm, 3, names, (int[]){2, 3, 2});
  axis_query_all(&rm);
}
END_TEST

/* The formula of the text, spelled out: axis_index(('i','j')) =
 * c(i)*size(j) + c(j); ('j','i') = c(j)*size(i) + c(i). */
START_TEST(t_axis_index_formula)
{
  shmap_mesh *mesh = tu_mesh_new("i=4, j=2");
  axq *q = calloc(1, sizeof *q);
  ck_assert_ptr_nonnull(q);
  const char *texts[] = {"i", "j", "('i','j')", "('j','i')", "i,j", "j, i"};
  q->nq = 6;
  for (int k = 0; k < 6; k++)
    snprintf(q->text[k], sizeof q->text[k], "%s", texts[k]);
  int rc = shmap_map(mesh, body_axis_query, q, 0, NULL, NULL, 0, NULL, NULL);
  tu_map_ok(rc, __func__);
  for (int dev = 0; dev < 8; dev++) {
    int ci = dev / 2, cj = dev % 2;
    int wi[6] = {ci, cj, ci * 2 + cj, cj * 4 + ci, ci * 2 + cj, cj * 4 + ci};
    int ws[6] = {4, 2, 8, 8, 8, 8};
    for (int k = 0; k < 6; k++) {
      ck_assert_msg(q->idx[dev][k] == wi[k],
                    "device %d: axis_index(\"%s\") = %d, want %d", dev,
                    texts[k], q->idx[dev][k], wi[k]);
      ck_assert_msg(q->size[dev][k] == ws[k],
                    "device %d: axis_size(\"%s\") = %d, want %d", dev,
                    texts[k], q->size[dev][k], ws[k]);
    }
  }
  free(q);
  shmap_mesh_destroy(mesh);
}
END_TEST

static int body_axis_index_out(shmap_ctx *ctx, void *arg)
{
  const char *axes = arg;
  shmap_block *o = shmap_out(ctx, 0, SHMAP_I32, 1, (int64_t[]){1});
  if (!o)
    return shmap_fail(ctx, "shmap_out: %s", shmap_errmsg());
  int r = shmap_axis_index(ctx, axes);
  if (r < 0)
    return r;
  ((int32_t *)o->data)[0] = r;
  return 0;
}

/* Section 5: axis_index(('i','j')) as a 1-element block under out spec
 * P(('j','i')) gives [0,2,1,3]. */
START_TEST(t_axis_index_block_transpose)
{
  shmap_mesh *mesh = tu_mesh_new("i=2, j=2");
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_axis_index_out, "('i','j')", 0, NULL, NULL,
                     1, out, (const char *[]){"P(('j','i'))"});
  tu_map_ok(rc, __func__);
  shmap_block *want =
      blk_vals(SHMAP_I32, 1, (int64_t[]){4}, (double[]){0, 2, 1, 3});
  arr_expect(out[0], want, "axis_index(('i','j')) out P(('j','i'))");
  ref_block_free(want);
  shmap_array_destroy(out[0]);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- section 5 shapes with psum -------------------------------------------------- */

static shmap_block *sec5_x(void)
{
  return blk_arange(SHMAP_F32, 2, (int64_t[]){12, 12});
}

/* psum of sec5_x() laid out P('i','j') on i=4, j=2 over the given mesh
 * axes (named in each of `nstyles` styles), output spec ospec: the output
 * must equal want (freed here). */
static void sec5_psum(const int axes[], int naxes, int nstyles,
                      const char *ospec, shmap_block *want)
{
  shmap_mesh *mesh = tu_mesh_new("i=4, j=2");
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  shmap_block *x = sec5_x();
  shmap_array *xa = tu_array_from_block(x);
  for (int style = 0; style < nstyles; style++) {
    ref_op op = mkop(&rm, RK_PSUM, axes, naxes, style);
    char what[192];
    snprintf(what, sizeof what, "psum(x,\"%s\") out %s", op.text, ospec);
    map_op_expect(mesh, &op, xa, "P('i','j')", ospec, want, what);
  }
  shmap_array_destroy(xa);
  ref_block_free(x);
  ref_block_free(want);
  shmap_mesh_destroy(mesh);
}

START_TEST(t_sec5_psum_j)
{
  shmap_block *want = ref_block_new(SHMAP_F32, 2, (int64_t[]){12, 6});
  for (int r = 0; r < 12; r++)
    for (int c = 0; c < 6; c++)
      ref_set(want, r * 6 + c, (r * 12 + c) + (r * 12 + c + 6));
  sec5_psum((int[]){1}, 1, 1, "P('i',None)", want);
}
END_TEST

START_TEST(t_sec5_psum_i)
{
  shmap_block *want = ref_block_new(SHMAP_F32, 2, (int64_t[]){3, 12});
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 12; c++) {
      double s = 0;
      for (int i = 0; i < 4; i++)
        s += (3 * i + r) * 12 + c;
      ref_set(want, r * 12 + c, s);
    }
  sec5_psum((int[]){0}, 1, 1, "P(None,'j')", want);
}
END_TEST

START_TEST(t_sec5_psum_ij)
{
  shmap_block *want = ref_block_new(SHMAP_F32, 2, (int64_t[]){3, 6});
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 6; c++) {
      double s = 0;
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
          s += (3 * i + r) * 12 + 6 * j + c;
      ref_set(want, r * 6 + c, s);
    }
  sec5_psum((int[]){0, 1}, 2, 4, "P(None,None)", want);
}
END_TEST

static int body_twice(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  if (!in)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  shmap_block *o = shmap_out_copy(ctx, 0, in);
  if (!o)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  float *p = o->data;
  for (int64_t i = 0; i < shmap_block_numel(o); i++)
    p[i] *= 2;
  return 0;
}

START_TEST(t_sec5_replication_error)
{
  shmap_mesh *mesh = tu_mesh_new("i=4, j=2");
  shmap_block *x = sec5_x();
  shmap_array *xa = tu_array_from_block(x);
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_twice, NULL, 1, (shmap_array *[]){xa},
                     (const char *[]){"P('i','j')"}, 1, out,
                     (const char *[]){"P(None,'j')"});
  ck_assert_msg(rc == SHMAP_EREPLICATION,
                "2*x out P(None,'j'): shmap_map = %d (%s), want "
                "SHMAP_EREPLICATION; message: %s",
                rc, shmap_strerror(rc), shmap_errmsg());
  ck_assert_ptr_null(out[0]);
  /* The same map with psum over 'i' first is fine (JAX's replication
   * checker example). */
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  ref_op op = mkop(&rm, RK_PSUM, (int[]){0}, 1, 0);
  rc = shmap_map(mesh, body_op_out, &op, 1, (shmap_array *[]){xa},
                 (const char *[]){"P('i','j')"}, 1, out,
                 (const char *[]){"P(None,'j')"});
  ck_assert_msg(rc == 0, "psum then out P(None,'j'): %d: %s", rc,
                shmap_errmsg());
  shmap_array_destroy(out[0]);
  shmap_array_destroy(xa);
  ref_block_free(x);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- reductions ----------------------------------------------------------------- */

/* Tiny explicit values, independent of the model: mesh i=3, device r holds
 * {v_r, 10*v_r}. */
static int body_explicit(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  static const double v[3] = {1, -5, 3};
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    for (int op = 0; op < 4; op++) {
      if (op == 3 && (dt == SHMAP_I32 || dt == SHMAP_I64))
        continue;
      shmap_block *b = shmap_block_alloc(ctx, dt, 1, (int64_t[]){2});
      if (!b)
        return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
      ref_set(b, 0, v[dev]);
      ref_set(b, 1, 10 * v[dev]);
      int rc = op == 0   ? shmap_psum(ctx, b, "i")
               : op == 1 ? shmap_pmax(ctx, b, "i")
               : op == 2 ? shmap_pmin(ctx, b, "i")
                         : shmap_pmean(ctx, b, "i");
      if (rc)
        return rc;
      /* Store as doubles in the capture: 4 ops x 4 dtypes x 2 values. */
      double e0 = op == 0 ? -1 : op == 1 ? 3 : op == 2 ? -5 : -1.0 / 3;
      double e1 = op == 3 ? -10.0 / 3 : 10 * e0;
      if (dt == SHMAP_F32 && op == 3) {
        e0 = (double)(-1.0f / 3.0f);
        e1 = (double)(-10.0f / 3.0f);
      }
      if (ref_get(b, 0) != e0 || ref_get(b, 1) != e1) {
        snprintf(cap->msg[dev], REF_MSG_MAX,
                 "%s %s: got {%.17g, %.17g}, want {%.17g, %.17g}",
                 op == 0   ? "psum"
                 : op == 1 ? "pmax"
                 : op == 2 ? "pmin"
                           : "pmean",
                 ref_dtname(dt), ref_get(b, 0), ref_get(b, 1), e0, e1);
        cap->val[dev]++;
      }
      shmap_block_free(ctx, b);
    }
  }
  return 0;
}

START_TEST(t_reduce_explicit)
{
  shmap_mesh *mesh = tu_mesh_new("i=3");
  ref_cap *cap = ref_cap_new(3);
  int rc = shmap_map(mesh, body_explicit, cap, 0, NULL, NULL, 0, NULL, NULL);
  tu_map_ok(rc, __func__);
  for (int d = 0; d < 3; d++)
    ck_assert_msg(cap->val[d] == 0, "device %d: %d wrong results, e.g. %s",
                  d, cap->val[d], cap->msg[d]);
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

static void reduce_dtypes(ref_kind kind, int float_only)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  ref_rng rng = {0x5eed0001u + (uint64_t)kind};
  static const int groups[4][2] = {{0, -1}, {1, -1}, {0, 1}, {1, 0}};
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    if (float_only && (dt == SHMAP_I32 || dt == SHMAP_I64))
      continue;
    for (int g = 0; g < 4; g++) {
      int na = groups[g][1] < 0 ? 1 : 2;
      shmap_block **in = inputs_random(&rm, &rng, dt, 2, (int64_t[]){3, 5});
      ref_op op = mkop(&rm, kind, groups[g], na, g % 3 + 1);
      char what[64];
      snprintf(what, sizeof what, "%s %s", ref_kind_name(kind),
               ref_dtname(dt));
      job_expect(mesh, &rm, &op, 1, in, g & 1, 0, what);
      inputs_free(in, rm.ndev);
    }
  }
  shmap_mesh_destroy(mesh);
}

START_TEST(t_psum_dtypes)
{
  reduce_dtypes(RK_PSUM, 0);
}
END_TEST

START_TEST(t_pmax_dtypes)
{
  reduce_dtypes(RK_PMAX, 0);
}
END_TEST

START_TEST(t_pmin_dtypes)
{
  reduce_dtypes(RK_PMIN, 0);
}
END_TEST

START_TEST(t_pmean_dtypes)
{
  reduce_dtypes(RK_PMEAN, 1);
}
END_TEST

/* A value already equal across the group is still summed: n*x. */
START_TEST(t_psum_replicated)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block *x = blk_vals(dt, 1, (int64_t[]){3}, (double[]){1, -2, 7});
    shmap_array *xa = tu_array_from_block(x);
    ref_op op = mkop(&rm, RK_PSUM, (int[]){0}, 1, 0);
    shmap_block *w4 = blk_vals(dt, 1, (int64_t[]){3}, (double[]){4, -8, 28});
    map_op_expect(mesh, &op, xa, "P()", "P()", w4, "psum(P() x, 'i')");
    op = mkop(&rm, RK_PSUM, (int[]){0, 1}, 2, 1);
    shmap_block *w8 =
        blk_vals(dt, 1, (int64_t[]){3}, (double[]){8, -16, 56});
    map_op_expect(mesh, &op, xa, "P()", "P()", w8,
                  "psum(P() x, ('i','j'))");
    shmap_array_destroy(xa);
    ref_block_free(x);
    ref_block_free(w4);
    ref_block_free(w8);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Rank-0 blocks (scalars) reduce too. */
START_TEST(t_reduce_scalar)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){2, 3});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  ref_rng rng = {77};
  for (int kind = RK_PSUM; kind <= RK_PMEAN; kind++)
    for (int k = 0; k < 2; k++) {
      shmap_dtype dt = all_dtypes[k];
      shmap_block **in = inputs_random(&rm, &rng, dt, 0, NULL);
      ref_op op = mkop(&rm, (ref_kind)kind, (int[]){1, 0}, 2, 2);
      job_expect(mesh, &rm, &op, 1, in, 0, 0, "rank-0 block");
      inputs_free(in, rm.ndev);
    }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Integer sums wrap around as unsigned arithmetic does (no undefined
 * behaviour: the sanitizer builds would stop on a signed overflow). */
static int body_int_wrap(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  int32_t a[2] = {INT32_MAX, INT32_MIN};
  int64_t b[2] = {INT64_MAX, INT64_MIN};
  shmap_block xa = {a, SHMAP_I32, 1, {2}};
  shmap_block xb = {b, SHMAP_I64, 1, {2}};
  int rc = shmap_psum(ctx, &xa, "i");
  if (rc)
    return rc;
  rc = shmap_psum(ctx, &xb, "i");
  if (rc)
    return rc;
  /* 3 * MAX wraps to MAX - 2 (mod 2^w); 3 * MIN wraps to MIN. */
  cap->val[dev] = (a[0] != INT32_MAX - 2) + (a[1] != INT32_MIN) +
                  (b[0] != INT64_MAX - 2) + (b[1] != INT64_MIN);
  snprintf(cap->msg[dev], REF_MSG_MAX,
           "i32 {%" PRId32 ", %" PRId32 "}, i64 {%" PRId64 ", %" PRId64 "}",
           a[0], a[1], b[0], b[1]);
  return 0;
}

START_TEST(t_psum_int_wrap)
{
  shmap_mesh *mesh = tu_mesh_new("i=3");
  ref_cap *cap = ref_cap_new(3);
  int rc = shmap_map(mesh, body_int_wrap, cap, 0, NULL, NULL, 0, NULL, NULL);
  tu_map_ok(rc, __func__);
  for (int d = 0; d < 3; d++)
    ck_assert_msg(cap->val[d] == 0,
                  "device %d: wrapped sums wrong: %s (want i32 {%d, %d}, "
                  "i64 {%" PRId64 ", %" PRId64 "})",
                  d, cap->msg[d], INT32_MAX - 2, INT32_MIN, INT64_MAX - 2,
                  INT64_MIN);
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* pmax/pmin: a NaN on any member makes the result NaN at that position. */
static int body_nan(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  int bad = 0;
  for (int op = 0; op < 2; op++) {
    float f[3] = {(float)dev, dev == 1 ? NAN : 1.0f, dev == 0 ? NAN : 2.0f};
    double g[3] = {(double)dev, dev == 2 ? NAN : 1.0, dev == 3 ? NAN : 2.0};
    shmap_block xf = {f, SHMAP_F32, 1, {3}};
    shmap_block xg = {g, SHMAP_F64, 1, {3}};
    int rc = op ? shmap_pmin(ctx, &xf, "i") : shmap_pmax(ctx, &xf, "i");
    if (rc)
      return rc;
    rc = op ? shmap_pmin(ctx, &xg, "i") : shmap_pmax(ctx, &xg, "i");
    if (rc)
      return rc;
    bad += f[0] != (op ? 0.0f : 3.0f) || !isnan(f[1]) || !isnan(f[2]);
    bad += g[0] != (op ? 0.0 : 3.0) || !isnan(g[1]) || !isnan(g[2]);
  }
  cap->val[dev] = bad;
  return 0;
}

START_TEST(t_pmax_pmin_nan)
{
  shmap_mesh *mesh = tu_mesh_new("i=4");
  ref_cap *cap = ref_cap_new(4);
  int rc = shmap_map(mesh, body_nan, cap, 0, NULL, NULL, 0, NULL, NULL);
  tu_map_ok(rc, __func__);
  for (int d = 0; d < 4; d++)
    ck_assert_msg(cap->val[d] == 0,
                  "device %d: a NaN on a member did not give NaN (%d wrong)",
                  d, cap->val[d]);
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- shape-changing collectives ----------------------------------------------- */

typedef struct shape_case {
  ref_kind kind;
  int naxes;
  int axes[2];
  int rank;
  int64_t shape[3];
  int dim, dim2, tiled;
} shape_case;

static void run_shape_cases(const ref_mesh *rm, const shape_case *cs, int n)
{
  shmap_mesh *mesh = mesh_from_ref(rm);
  ref_rng rng = {4242};
  for (int c = 0; c < n; c++)
    for (int k = 0; k < 4; k += 3) { /* f32 and i64 */
      shmap_dtype dt = all_dtypes[k];
      shmap_block **in =
          inputs_random(rm, &rng, dt, cs[c].rank, cs[c].shape);
      ref_op op = mkop(rm, cs[c].kind, cs[c].axes, cs[c].naxes, 1);
      op.dim = cs[c].dim;
      op.dim2 = cs[c].dim2;
      op.tiled = cs[c].tiled;
      char what[64];
      snprintf(what, sizeof what, "case %d, %s", c, ref_dtname(dt));
      job_expect(mesh, rm, &op, 1, in, c & 1, c & 2, what);
      inputs_free(in, rm->ndev);
    }
  shmap_mesh_destroy(mesh);
}

START_TEST(t_psum_scatter_forms)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  static const shape_case cs[] = {
      /* untiled: shape[d] == n, d removed */
      {RK_PSUM_SCATTER, 1, {0}, 2, {4, 3}, 0, 0, 0},
      {RK_PSUM_SCATTER, 1, {0}, 2, {3, 4}, 1, 0, 0},
      {RK_PSUM_SCATTER, 2, {0, 1}, 1, {8}, 0, 0, 0},
      {RK_PSUM_SCATTER, 2, {1, 0}, 3, {2, 8, 3}, 1, 0, 0},
      /* tiled: shape[d] / n */
      {RK_PSUM_SCATTER, 1, {1}, 2, {3, 4}, 1, 0, 1},
      {RK_PSUM_SCATTER, 1, {0}, 2, {8, 2}, 0, 0, 1},
      {RK_PSUM_SCATTER, 2, {0, 1}, 2, {2, 16}, 1, 0, 1},
      {RK_PSUM_SCATTER, 2, {1, 0}, 3, {8, 1, 2}, 0, 0, 1},
      /* negative scatter_dimension counts from the end of x */
      {RK_PSUM_SCATTER, 1, {0}, 2, {3, 4}, -1, 0, 0},
      {RK_PSUM_SCATTER, 2, {0, 1}, 3, {2, 16, 1}, -2, 0, 1},
  };
  run_shape_cases(&rm, cs, (int)(sizeof cs / sizeof cs[0]));
}
END_TEST

START_TEST(t_all_gather_forms)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  static const shape_case cs[] = {
      /* untiled: new dim of size n at axis (axis in [-(r+1), r]) */
      {RK_ALL_GATHER, 1, {0}, 2, {2, 3}, 0, 0, 0},
      {RK_ALL_GATHER, 1, {0}, 2, {2, 3}, 1, 0, 0},
      {RK_ALL_GATHER, 1, {1}, 2, {2, 3}, 2, 0, 0},
      {RK_ALL_GATHER, 2, {0, 1}, 2, {2, 3}, -1, 0, 0},
      {RK_ALL_GATHER, 2, {1, 0}, 2, {2, 3}, -3, 0, 0},
      {RK_ALL_GATHER, 1, {0}, 0, {0}, 0, 0, 0},
      /* tiled: dim `axis` grows n times (axis in [-r, r)) */
      {RK_ALL_GATHER, 1, {0}, 2, {2, 3}, 0, 0, 1},
      {RK_ALL_GATHER, 1, {1}, 2, {2, 3}, 1, 0, 1},
      {RK_ALL_GATHER, 2, {0, 1}, 2, {2, 3}, -1, 0, 1},
      {RK_ALL_GATHER, 2, {1, 0}, 2, {2, 3}, -2, 0, 1},
      {RK_ALL_GATHER, 2, {1, 0}, 3, {1, 2, 1}, 2, 0, 1},
  };
  run_shape_cases(&rm, cs, (int)(sizeof cs / sizeof cs[0]));
}
END_TEST

START_TEST(t_all_to_all_forms)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  static const shape_case cs[] = {
      /* untiled: split dim == n removed, new dim n at concat */
      {RK_ALL_TO_ALL, 1, {0}, 2, {4, 3}, 0, 0, 0},
      {RK_ALL_TO_ALL, 1, {0}, 2, {4, 3}, 0, 1, 0},
      {RK_ALL_TO_ALL, 1, {0}, 2, {3, 4}, 1, 0, 0},
      {RK_ALL_TO_ALL, 2, {1, 0}, 3, {2, 8, 3}, 1, 2, 0},
      /* tiled, split != concat */
      {RK_ALL_TO_ALL, 1, {0}, 2, {8, 3}, 0, 1, 1},
      {RK_ALL_TO_ALL, 1, {0}, 2, {3, 8}, 1, 0, 1},
      {RK_ALL_TO_ALL, 2, {0, 1}, 3, {2, 3, 16}, 2, 0, 1},
      {RK_ALL_TO_ALL, 1, {1}, 3, {2, 2, 3}, 0, 2, 1},
      /* tiled, split == concat */
      {RK_ALL_TO_ALL, 2, {1, 0}, 2, {3, 16}, 1, 1, 1},
      /* negative axes count from the end */
      {RK_ALL_TO_ALL, 1, {0}, 2, {3, 8}, -1, -2, 1},
      {RK_ALL_TO_ALL, 1, {0}, 3, {2, 4, 3}, -2, -1, 0},
  };
  run_shape_cases(&rm, cs, (int)(sizeof cs / sizeof cs[0]));
}
END_TEST

/* all_gather untiled, spelled out: result[k] is member k's block. */
static int body_gather_explicit(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  int32_t mine[2] = {dev * 10, dev * 10 + 1};
  shmap_block x = {mine, SHMAP_I32, 1, {2}};
  shmap_block *g = NULL, *t = NULL;
  int rc = shmap_all_gather(ctx, &x, "j", 0, 0, &g); /* [3,2] */
  if (rc)
    return rc;
  rc = shmap_all_gather(ctx, &x, "j", -1, 1, &t); /* [6] */
  if (rc)
    return rc;
  /* mesh i=2, j=3: members of the 'j' group of dev are 3*(dev/3)+k. */
  int base = 3 * (dev / 3);
  int bad = 0;
  if (g->rank != 2 || g->shape[0] != 3 || g->shape[1] != 2 ||
      t->rank != 1 || t->shape[0] != 6)
    bad = 100;
  else
    for (int k = 0; k < 3; k++)
      for (int e = 0; e < 2; e++) {
        int32_t w = (base + k) * 10 + e;
        if (((int32_t *)g->data)[k * 2 + e] != w)
          bad++;
        if (((int32_t *)t->data)[k * 2 + e] != w)
          bad++;
      }
  cap->val[dev] = bad;
  return 0;
}

START_TEST(t_all_gather_explicit)
{
  shmap_mesh *mesh = tu_mesh_new("i=2, j=3");
  ref_cap *cap = ref_cap_new(6);
  int rc =
      shmap_map(mesh, body_gather_explicit, cap, 0, NULL, NULL, 0, NULL, NULL);
  tu_map_ok(rc, __func__);
  for (int d = 0; d < 6; d++)
    ck_assert_msg(cap->val[d] == 0, "device %d: %d wrong elements", d,
                  cap->val[d]);
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ppermute with a partial permutation: non-destinations get zeros. */
START_TEST(t_ppermute_partial)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  int pairs[2][2] = {{0, 2}, {2, 1}};
  for (int k = 0; k < 4; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block **in = calloc(8, sizeof *in);
    for (int d = 0; d < 8; d++)
      in[d] = blk_vals(dt, 1, (int64_t[]){2},
                       (double[]){d + 1, -(d + 1)});
    ref_op op = mkop(&rm, RK_PPERMUTE, (int[]){0}, 1, 0);
    op.npairs = 2;
    op.pairs = pairs;
    ref_cap *cap = ref_cap_new(8);
    ref_job job = {&rm, 1, &op, in, cap, k & 1, 0};
    int rc = ref_job_run(mesh, &job);
    tu_map_ok(rc, __func__);
    /* Group over 'i' of device d: devices 2*r + (d%2); rank r = d/2.
     * Rank 2 gets rank 0's block, rank 1 gets rank 2's, ranks 0 and 3
     * get zeros. */
    for (int d = 0; d < 8; d++) {
      int r = d / 2, j = d % 2;
      int src = r == 2 ? 0 : r == 1 ? 2 : -1;
      double w0 = src < 0 ? 0 : (2 * src + j) + 1;
      shmap_block *w =
          blk_vals(dt, 1, (int64_t[]){2}, (double[]){w0, w0 ? -w0 : 0});
      char diff[256];
      ref_block_diff(cap->blk[d], w, diff, sizeof diff);
      ck_assert_msg(ref_block_same(cap->blk[d], w),
                    "%s: device %d (rank %d): %s", ref_dtname(dt), d, r,
                    diff);
      ref_block_free(w);
    }
    ref_cap_free(cap);
    /* And the model agrees. */
    job_expect(mesh, &rm, &op, 1, in, 0, 0, "ppermute partial");
    inputs_free(in, 8);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

START_TEST(t_ppermute_forms)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  ref_rng rng = {99};
  /* no pairs: everybody gets zeros */
  {
    shmap_block **in = inputs_random(&rm, &rng, SHMAP_F64, 1, (int64_t[]){3});
    ref_op op = mkop(&rm, RK_PPERMUTE, (int[]){0, 1}, 2, 1);
    op.npairs = 0;
    op.pairs = NULL;
    job_expect(mesh, &rm, &op, 1, in, 0, 0, "ppermute with no pairs");
    inputs_free(in, 8);
  }
  /* identity pairs */
  {
    int pairs[2][2] = {{0, 0}, {1, 1}};
    shmap_block **in = inputs_random(&rm, &rng, SHMAP_I32, 2, (int64_t[]){2, 2});
    ref_op op = mkop(&rm, RK_PPERMUTE, (int[]){1}, 1, 0);
    op.npairs = 2;
    op.pairs = pairs;
    job_expect(mesh, &rm, &op, 1, in, 1, 0, "ppermute identity");
    inputs_free(in, 8);
  }
  /* a reversal over ('j','i'), and a shift over ('i','j') */
  {
    int rev[8][2], shift[8][2];
    for (int r = 0; r < 8; r++) {
      rev[r][0] = r;
      rev[r][1] = 7 - r;
      shift[r][0] = r;
      shift[r][1] = (r + 3) % 8;
    }
    shmap_block **in = inputs_random(&rm, &rng, SHMAP_F32, 1, (int64_t[]){5});
    ref_op op = mkop(&rm, RK_PPERMUTE, (int[]){1, 0}, 2, 2);
    op.npairs = 8;
    op.pairs = rev;
    job_expect(mesh, &rm, &op, 1, in, 0, 0, "ppermute reversal ('j','i')");
    op = mkop(&rm, RK_PPERMUTE, (int[]){0, 1}, 2, 0);
    op.npairs = 8;
    op.pairs = shift;
    job_expect(mesh, &rm, &op, 1, in, 1, 0, "ppermute shift 3 ('i','j')");
    inputs_free(in, 8);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Blocks large enough to be cut in many chunks and pieces, with sizes that
 * do not divide evenly, for every collective. */
START_TEST(t_large_blocks)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  ref_rng rng = {0x1a2b3c};
  static const int64_t cols[] = {1, 3, 15, 17, 255, 257, 1025, 2049};
  static const int groups[3][2] = {{0, 1}, {1, 0}, {0, -1}};
  for (int c = 0; c < (int)(sizeof cols / sizeof cols[0]); c++)
    for (int k = c % 2; k < 4; k += 2) {
      /* Under ThreadSanitizer one dtype per size, all four over the sizes:
       * half the maps, which keeps the case well inside its time-out. */
      if (TU_TSAN && k != c % 2 + 2 * (c / 2 % 2))
        continue;
      shmap_dtype dt = all_dtypes[k];
      const int *g = groups[(c + k) % 3];
      int na = g[1] < 0 ? 1 : 2;
      /* [8, cols]: dimension 0 divides by every group size here */
      shmap_block **in =
          inputs_random(&rm, &rng, dt, 2, (int64_t[]){8, cols[c]});
      for (int kind = RK_PSUM; kind < RK_NKINDS; kind++) {
        if (kind == RK_PMEAN && (dt == SHMAP_I32 || dt == SHMAP_I64))
          continue;
        ref_op op = mkop(&rm, (ref_kind)kind, g, na, 1);
        int n = ref_axis_size(&rm, g, na);
        int pairs[8][2];
        for (int r = 0; r < n; r++) {
          pairs[r][0] = r;
          pairs[r][1] = (r * 3 + 1) % n;
        }
        op.tiled = 1;
        op.dim = 0;
        op.dim2 = 1;
        if (kind == RK_ALL_GATHER)
          op.dim = 1;
        if (kind == RK_PPERMUTE) {
          op.npairs = n == 2 ? 1 : n; /* (r*3+1)%n is a permutation */
          op.pairs = pairs;
          if (n == 2) {
            pairs[0][0] = 1;
            pairs[0][1] = 0;
          }
        }
        char what[96];
        snprintf(what, sizeof what, "%s f32/f64/i32/i64 [8,%" PRId64 "]",
                 ref_kind_name((ref_kind)kind), cols[c]);
        job_expect(mesh, &rm, &op, 1, in, kind & 1, 0, what);
      }
      inputs_free(in, 8);
    }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- blocks: body memory, output take-over, early free --------------------------- */

/* A block describing a stack buffer is reduced in place, then copied out
 * (output 0 with shmap_out_copy, output 1 with shmap_out_set). */
static int body_stack_block(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  double buf[4] = {dev, 2.0 * dev, -1.0, 0.5};
  shmap_block b = {buf, SHMAP_F64, 1, {4}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  if (!shmap_out_copy(ctx, 0, &b))
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  rc = shmap_pmax(ctx, &b, "i");
  if (rc)
    return rc;
  return shmap_out_set(ctx, 1, &b);
}

START_TEST(t_stack_block)
{
  shmap_mesh *mesh = tu_mesh_new("i=4");
  shmap_array *out[2] = {NULL, NULL};
  int rc = shmap_map(mesh, body_stack_block, NULL, 0, NULL, NULL, 2, out,
                     (const char *[]){"P()", "P()"});
  tu_map_ok(rc, __func__);
  shmap_block *w =
      blk_vals(SHMAP_F64, 1, (int64_t[]){4}, (double[]){6, 12, -4, 2});
  arr_expect(out[0], w, "psum of a stack block");
  arr_expect(out[1], w, "pmax of equal stack blocks");
  ref_block_free(w);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(out[1]);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* Many shape-changing results, each freed early, then one taken over as
 * the output. */
static int body_free_early(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  float mine[3] = {(float)dev, 1.0f, (float)(-dev)};
  shmap_block x = {mine, SHMAP_F32, 1, {3}};
  for (int it = 0; it < 50; it++) {
    shmap_block *g = NULL, *s = NULL, *a = NULL;
    int rc = shmap_all_gather(ctx, &x, "i", 0, 1, &g); /* f32[12] */
    if (rc)
      return rc;
    rc = shmap_psum_scatter(ctx, g, "i", 0, 1, &s); /* f32[3] */
    if (rc)
      return rc;
    rc = shmap_all_to_all(ctx, g, "i", 0, 0, 1, &a); /* f32[12] */
    if (rc)
      return rc;
    /* psum_scatter of the gathered blocks: 4 * (block of rank dev). */
    for (int e = 0; e < 3; e++) {
      float w = 4.0f * (e == 0 ? (float)dev : e == 1 ? 1.0f : (float)-dev);
      if (((float *)s->data)[e] != w)
        cap->val[dev]++;
    }
    if ((rc = shmap_block_free(ctx, g)) || (rc = shmap_block_free(ctx, s)) ||
        (rc = shmap_block_free(ctx, a)))
      return shmap_fail(ctx, "shmap_block_free = %d: %s", rc,
                        shmap_errmsg());
  }
  shmap_block *g = NULL;
  int rc = shmap_all_gather(ctx, &x, "i", 0, 0, &g); /* f32[4,3] */
  if (rc)
    return rc;
  return shmap_out_set(ctx, 0, g);
}

START_TEST(t_free_early)
{
  shmap_mesh *mesh = tu_mesh_new("i=4");
  ref_cap *cap = ref_cap_new(4);
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_free_early, cap, 0, NULL, NULL, 1, out,
                     (const char *[]){"P()"});
  tu_map_ok(rc, __func__);
  for (int d = 0; d < 4; d++)
    ck_assert_msg(cap->val[d] == 0, "device %d: %d wrong psum_scatter "
                  "elements", d, cap->val[d]);
  double w[12];
  for (int d = 0; d < 4; d++) {
    w[3 * d] = d;
    w[3 * d + 1] = 1;
    w[3 * d + 2] = -d;
  }
  shmap_block *wb = blk_vals(SHMAP_F32, 2, (int64_t[]){4, 3}, w);
  arr_expect(out[0], wb, "all_gather result taken over by shmap_out_set");
  ref_block_free(wb);
  shmap_array_destroy(out[0]);
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* shmap_block_free of a block the library does not own is an error, which
 * fails the map whatever the body returns; NULL is ignored. */
static int body_free_foreign(shmap_ctx *ctx, void *arg)
{
  ref_cap *cap = arg;
  int dev = shmap_ctx_device(ctx);
  float mine[2] = {1, 2};
  shmap_block x = {mine, SHMAP_F32, 1, {2}};
  cap->val[dev] = shmap_block_free(ctx, NULL);
  if (dev == 1)
    ref_cap_rc(cap, dev, shmap_block_free(ctx, &x));
  return 0;
}

START_TEST(t_free_foreign)
{
  shmap_mesh *mesh = tu_mesh_new("i=2");
  ref_cap *cap = ref_cap_new(2);
  int rc =
      shmap_map(mesh, body_free_foreign, cap, 0, NULL, NULL, 0, NULL, NULL);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == SHMAP_EINVAL,
                "shmap_block_free(stack block) in a body: shmap_map = %d, "
                "want SHMAP_EINVAL (%s)",
                rc, msg);
  ck_assert_msg(ref_has(msg, "shmap_block_free") && ref_has(msg, "device 1"),
                "message should name shmap_block_free and device 1: %s", msg);
  for (int d = 0; d < 2; d++)
    ck_assert_msg(cap->val[d] == 0,
                  "device %d: shmap_block_free(NULL) = %d, want 0", d,
                  cap->val[d]);
  ck_assert_msg(cap->rc[1] == SHMAP_EINVAL,
                "shmap_block_free(stack block) = %d, want SHMAP_EINVAL",
                cap->rc[1]);
  ref_cap_free(cap);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* The same job with library and body memory, freeing early or not. */
START_TEST(t_job_memory_modes)
{
  static const char *const names[] = {"x", "y", "z"};
  ref_mesh rm;
  refmesh(&rm, 3, names, (int[]){2, 2, 2});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  ref_rng rng = {1234};
  ref_op ops[4];
  ops[0] = mkop(&rm, RK_ALL_GATHER, (int[]){2}, 1, 0);
  ops[0].dim = 1;
  ops[0].tiled = 1; /* [2,6] */
  ops[1] = mkop(&rm, RK_PSUM, (int[]){0, 1}, 2, 1);
  ops[2] = mkop(&rm, RK_ALL_TO_ALL, (int[]){1, 0}, 2, 3);
  ops[2].dim = 1;
  ops[2].dim2 = 0;
  ops[2].tiled = 0;
  ops[3] = mkop(&rm, RK_PSUM_SCATTER, (int[]){2, 0}, 2, 2);
  ops[3].dim = 0;
  ops[3].tiled = 1;
  /* input f64[2,2]: gather z tiled axis 1 -> [2,4]; psum; all_to_all over
   * ('y','x') (n=4) untiled split 1 (size 4) concat 0 -> [4,2];
   * psum_scatter over ('z','x') (n=4) tiled dim 0 -> [1,2]. */
  for (int mode = 0; mode < 4; mode++) {
    shmap_block **in = inputs_random(&rm, &rng, SHMAP_F64, 2, (int64_t[]){2, 2});
    job_expect(mesh, &rm, ops, 4, in, mode & 1, mode >> 1,
               "four collectives in a row");
    inputs_free(in, 8);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- determinism ----------------------------------------------------------------- */

/* f32 data where the order of summation changes the result: on device r,
 * element e holds pattern[(r + e) % 4] scaled by 2^(e % 5). */
static shmap_block **det_inputs(const ref_mesh *rm, shmap_dtype dt, int64_t n)
{
  static const double p32[4] = {1e8, 1, -1e8, 1};
  static const double p64[4] = {1e17, 1, -1e17, 1};
  const double *p = dt == SHMAP_F32 ? p32 : p64;
  shmap_block **in = calloc((size_t)rm->ndev, sizeof *in);
  for (int d = 0; d < rm->ndev; d++) {
    in[d] = ref_block_new(dt, 1, (int64_t[]){n});
    for (int64_t e = 0; e < n; e++)
      ref_set(in[d], e, p[(d + e) % 4] * (double)(1 << (e % 5)));
  }
  return in;
}

/* Run the op `reps` times; every run must equal the model bitwise. */
static void det_runs(shmap_mesh *mesh, const ref_mesh *rm, const ref_op *op,
                     shmap_block **in, int reps, const char *what)
{
  shmap_block **want = calloc((size_t)rm->ndev, sizeof *want);
  ref_cap *c0 = ref_cap_new(rm->ndev);
  ref_job j0 = {rm, 1, op, in, c0, 0, 0};
  ck_assert_int_eq(ref_job_model(&j0, want), 0);
  for (int it = 0; it < reps; it++) {
    ref_cap *cap = ref_cap_new(rm->ndev);
    ref_job job = {rm, 1, op, in, cap, it & 1, 0};
    int rc = ref_job_run(mesh, &job);
    ck_assert_msg(rc == 0, "%s run %d: shmap_map = %d: %s", what, it, rc,
                  shmap_errmsg());
    for (int d = 0; d < rm->ndev; d++) {
      if (!ref_block_same(cap->blk[d], want[d])) {
        char diff[256];
        ref_block_diff(cap->blk[d], want[d], diff, sizeof diff);
        ck_abort_msg("%s, run %d, device %d: not the serial left fold in "
                     "rank order: %s",
                     what, it, d, diff);
      }
    }
    ref_cap_free(cap);
  }
  ref_blocks_free(want, rm->ndev);
  free(want);
  ref_cap_free(c0);
}

START_TEST(t_det_pattern)
{
  static const char *const names[] = {"i"};
  ref_mesh rm;
  refmesh(&rm, 1, names, (int[]){8});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  for (int k = 0; k < 2; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block **in = det_inputs(&rm, dt, 40);
    /* The data must be order-sensitive for this test to mean anything:
     * the left fold and the reversed fold differ somewhere. */
    {
      int members[8], differ = 0;
      ref_group(&rm, (int[]){0}, 1, 0, members, NULL);
      for (int64_t e = 0; e < 40; e++) {
        double f = 0, b = 0;
        float ff = 0, fb = 0;
        for (int r = 0; r < 8; r++) {
          f = f + ref_get(in[r], e);
          b = b + ref_get(in[7 - r], e);
          ff = ff + (float)ref_get(in[r], e);
          fb = fb + (float)ref_get(in[7 - r], e);
        }
        differ += dt == SHMAP_F32 ? ff != fb : f != b;
      }
      ck_assert_msg(differ > 0, "test data is not order-sensitive");
    }
    ref_op op = mkop(&rm, RK_PSUM, (int[]){0}, 1, 0);
    det_runs(mesh, &rm, &op, in, 50, "psum");
    op.kind = RK_PMEAN;
    det_runs(mesh, &rm, &op, in, 50, "pmean");
    op.kind = RK_PSUM_SCATTER;
    op.dim = 0;
    op.tiled = 1;
    det_runs(mesh, &rm, &op, in, 50, "psum_scatter tiled");
    inputs_free(in, 8);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

START_TEST(t_det_random)
{
  static const char *const names[] = {"i", "j"};
  ref_mesh rm;
  refmesh(&rm, 2, names, (int[]){4, 2});
  shmap_mesh *mesh = mesh_from_ref(&rm);
  ref_rng rng = {0xdec0de};
  for (int k = 0; k < 2; k++) {
    shmap_dtype dt = all_dtypes[k];
    shmap_block **in = inputs_random(&rm, &rng, dt, 2, (int64_t[]){8, 5});
    static const int groups[3][2] = {{0, 1}, {1, 0}, {0, -1}};
    for (int g = 0; g < 3; g++) {
      int na = groups[g][1] < 0 ? 1 : 2;
      ref_op op = mkop(&rm, RK_PSUM, groups[g], na, 1);
      det_runs(mesh, &rm, &op, in, 50, "psum random");
      op.kind = RK_PMEAN;
      det_runs(mesh, &rm, &op, in, 50, "pmean random");
      op.kind = RK_PSUM_SCATTER;
      op.dim = 0;
      op.tiled = na == 2 ? 0 : 1; /* 8 == n for two axes: untiled */
      det_runs(mesh, &rm, &op, in, 50, "psum_scatter random");
    }
    inputs_free(in, 8);
  }
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------ */

static TCase *tcase(const char *name)
{
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, TIMEOUT);
  return tc;
}

static Suite *coll_suite(void)
{
  Suite *s = suite_create("coll");
  TCase *tc = tcase("section6");
  tcase_add_test(tc, t_sec6_psum);
  tcase_add_test(tc, t_sec6_psum_scatter);
  tcase_add_test(tc, t_sec6_all_to_all);
  tcase_add_test(tc, t_sec6_ppermute_i4);
  tcase_add_test(tc, t_sec6_ppermute_i8);
  tcase_add_test(tc, t_sec6_ppermute_i2);
  suite_add_tcase(s, tc);

  tc = tcase("axis_index");
  tcase_add_test(tc, t_axis_index_2d);
  tcase_add_test(tc, t_axis_index_3d);
  tcase_add_test(tc, t_axis_index_formula);
  tcase_add_test(tc, t_axis_index_block_transpose);
  suite_add_tcase(s, tc);

  tc = tcase("section5");
  tcase_add_test(tc, t_sec5_psum_j);
  tcase_add_test(tc, t_sec5_psum_i);
  tcase_add_test(tc, t_sec5_psum_ij);
  tcase_add_test(tc, t_sec5_replication_error);
  suite_add_tcase(s, tc);

  tc = tcase("reductions");
  tcase_add_test(tc, t_reduce_explicit);
  tcase_add_test(tc, t_psum_dtypes);
  tcase_add_test(tc, t_pmax_dtypes);
  tcase_add_test(tc, t_pmin_dtypes);
  tcase_add_test(tc, t_pmean_dtypes);
  tcase_add_test(tc, t_psum_replicated);
  tcase_add_test(tc, t_reduce_scalar);
  tcase_add_test(tc, t_psum_int_wrap);
  tcase_add_test(tc, t_pmax_pmin_nan);
  suite_add_tcase(s, tc);

  tc = tcase("shape_changing");
  tcase_add_test(tc, t_psum_scatter_forms);
  tcase_add_test(tc, t_all_gather_forms);
  tcase_add_test(tc, t_all_to_all_forms);
  tcase_add_test(tc, t_all_gather_explicit);
  tcase_add_test(tc, t_ppermute_partial);
  tcase_add_test(tc, t_ppermute_forms);
  suite_add_tcase(s, tc);

  tc = tcase("large");
  tcase_add_test(tc, t_large_blocks);
  suite_add_tcase(s, tc);

  tc = tcase("blocks");
  tcase_add_test(tc, t_stack_block);
  tcase_add_test(tc, t_free_early);
  tcase_add_test(tc, t_free_foreign);
  tcase_add_test(tc, t_job_memory_modes);
  suite_add_tcase(s, tc);

  tc = tcase("determinism");
  tcase_add_test(tc, t_det_pattern);
  tcase_add_test(tc, t_det_random);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  return tu_run_suite(coll_suite());
}
