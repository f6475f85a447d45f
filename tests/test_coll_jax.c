/* SPDX-License-Identifier: MIT */
/*
 * test_coll_jax.c - cases whose facts come from JAX's shard_map tests
 * (tests/shard_map_test.py), rewritten for libshmap: the same meshes,
 * arrays, specs and collectives, with the expected results JAX asserts,
 * spelled out in closed form here and cross-checked block by block.
 *
 *   matmul + psum_scatter over one axis and over two axes (2x2x2 mesh)
 *   all_gather over an axis and over a tuple of axes with a negative axis
 *   ppermute over tuples of axes, and a ring shift on 8 devices
 *   all_to_all transposing an 8x8 matrix on 8 devices and on a 4x2 mesh
 *   all_to_all split 1 / concat 0 giving back the input
 *   psum repeated k times (n^k scaling), psum in eager control flow,
 *   the replication check with and without a psum.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "refcoll.h"
#include "testutil.h"

#define TIMEOUT 30

/* ---- helpers ------------------------------------------------------------------ */

static shmap_block *blk_arange(shmap_dtype dt, int rank, const int64_t shape[])
{
  shmap_block *b = ref_block_new(dt, rank, shape);
  int64_t n = ref_numel(rank, shape);
  for (int64_t i = 0; i < n; i++)
    ref_set(b, i, (double)i);
  return b;
}

static void blk_expect(const shmap_block *got, const shmap_block *want,
                       const char *what)
{
  if (!ref_block_same(got, want)) {
    char diff[256], gt[1024], wt[1024];
    ref_block_diff(got, want, diff, sizeof diff);
    ref_block_text(got, 64, gt, sizeof gt);
    ref_block_text(want, 64, wt, sizeof wt);
    ck_abort_msg("%s: %s\n got  %s\n want %s", what, diff, gt, wt);
  }
}

static void arr_expect(shmap_array *a, const shmap_block *want,
                       const char *what)
{
  shmap_block got;
  tu_array_to_block(a, &got, what);
  blk_expect(&got, want, what);
  free(got.data);
}

/* Element (r, c) of a rank-2 block as double. */
static double at2(const shmap_block *b, int64_t r, int64_t c)
{
  return ref_get(b, r * b->shape[1] + c);
}

/* The sub-block rows [r0, r0+nr), columns [c0, c0+nc) of a rank-2 block. */
static shmap_block *sub2(const shmap_block *b, int64_t r0, int64_t nr,
                         int64_t c0, int64_t nc)
{
  shmap_block *s = ref_block_new(b->dtype, 2, (int64_t[]){nr, nc});
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nc; c++)
      ref_set(s, r * nc + c, at2(b, r0 + r, c0 + c));
  return s;
}

/* Capture of every device's input block and up to two results. */
typedef struct jcap {
  ref_cap *in, *r0, *r1;
} jcap;

static jcap *jcap_new(int ndev)
{
  jcap *j = calloc(1, sizeof *j);
  j->in = ref_cap_new(ndev);
  j->r0 = ref_cap_new(ndev);
  j->r1 = ref_cap_new(ndev);
  return j;
}

static void jcap_free(jcap *j)
{
  ref_cap_free(j->in);
  ref_cap_free(j->r0);
  ref_cap_free(j->r1);
  free(j);
}

/* ---- matmul with psum_scatter (test_matmul_reduce_scatter) ------------------------ */

/* c = a @ b on the device's blocks (f32, small integers: exact). */
static shmap_block *local_matmul(shmap_ctx *ctx, const shmap_block *a,
                                 const shmap_block *b)
{
  int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  shmap_block *c = shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){m, n});
  if (!c)
    return NULL;
  const float *pa = a->data, *pb = b->data;
  float *pc = c->data;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float s = 0;
      for (int64_t l = 0; l < k; l++)
        s += pa[i * k + l] * pb[l * n + j];
      pc[i * n + j] = s;
    }
  return c;
}

static int body_matmul_rs(shmap_ctx *ctx, void *arg)
{
  jcap *jc = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *a = shmap_in(ctx, 0), *b = shmap_in(ctx, 1);
  if (!a || !b)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  shmap_block *c = local_matmul(ctx, a, b); /* f32[4,8], partial over y */
  if (!c)
    return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
  shmap_block *s1 = NULL, *s2 = NULL;
  int rc = shmap_psum_scatter(ctx, c, "y", 0, 1, &s1);
  if (rc)
    return rc;
  rc = shmap_psum_scatter(ctx, c, "('z', 'y')", 0, 1, &s2);
  if (rc)
    return rc;
  ref_cap_put(jc->r0, dev, s1);
  ref_cap_put(jc->r1, dev, s2);
  if ((rc = shmap_out_set(ctx, 0, s1)) || (rc = shmap_out_set(ctx, 1, s2)))
    return rc;
  return 0;
}

START_TEST(t_matmul_reduce_scatter)
{
  shmap_mesh *mesh = tu_mesh_new("x=2, y=2, z=2");
  shmap_block *a = blk_arange(SHMAP_F32, 2, (int64_t[]){8, 8});
  shmap_block *b = blk_arange(SHMAP_F32, 2, (int64_t[]){8, 8});
  shmap_array *aa = tu_array_from_block(a), *ba = tu_array_from_block(b);
  jcap *jc = jcap_new(8);
  shmap_array *out[2] = {NULL, NULL};
  int rc = shmap_map(mesh, body_matmul_rs, jc, 2, (shmap_array *[]){aa, ba},
                     (const char *[]){"P('z', 'y')", "P('y', None)"}, 2, out,
                     (const char *[]){"P(('z', 'y'), None)",
                                      "P(('z', 'y'), None)"});
  tu_map_ok(rc, "matmul + psum_scatter");
  /* expected = a @ b; d = expected[:4] + expected[4:]. */
  shmap_block *e = ref_block_new(SHMAP_F32, 2, (int64_t[]){8, 8});
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) {
      double s = 0;
      for (int l = 0; l < 8; l++)
        s += at2(a, i, l) * at2(b, l, j);
      ref_set(e, i * 8 + j, s);
    }
  shmap_block *d = ref_block_new(SHMAP_F32, 2, (int64_t[]){4, 8});
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 8; j++)
      ref_set(d, i * 8 + j, at2(e, i, j) + at2(e, i + 4, j));
  for (int dev = 0; dev < 8; dev++) {
    ck_assert_msg(jc->r0->blk[dev] && jc->r0->blk[dev]->rank == 2 &&
                      jc->r0->blk[dev]->shape[0] == 2 &&
                      jc->r0->blk[dev]->shape[1] == 8,
                  "device %d: psum_scatter over 'y' should be f32[2,8]", dev);
    ck_assert_msg(jc->r1->blk[dev] && jc->r1->blk[dev]->rank == 2 &&
                      jc->r1->blk[dev]->shape[0] == 1 &&
                      jc->r1->blk[dev]->shape[1] == 8,
                  "device %d: psum_scatter over ('z','y') should be f32[1,8]",
                  dev);
  }
  arr_expect(out[0], e, "psum_scatter(c, 'y') out P(('z','y'), None)");
  arr_expect(out[1], d, "psum_scatter(c, ('z','y')) out P(('z','y'), None)");
  ref_block_free(e);
  ref_block_free(d);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(out[1]);
  shmap_array_destroy(aa);
  shmap_array_destroy(ba);
  ref_block_free(a);
  ref_block_free(b);
  jcap_free(jc);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* The matmul of the design notes: in P('i','j') x P('j',None), psum over
 * 'j', out P('i',None) is a @ b. */
static int body_matmul_psum(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *a = shmap_in(ctx, 0), *b = shmap_in(ctx, 1);
  if (!a || !b)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  shmap_block *z = shmap_out(ctx, 0, SHMAP_F32, 2,
                             (int64_t[]){a->shape[0], b->shape[1]});
  if (!z)
    return shmap_fail(ctx, "shmap_out: %s", shmap_errmsg());
  shmap_block *c = local_matmul(ctx, a, b);
  if (!c)
    return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
  memcpy(z->data, c->data, shmap_block_nbytes(c));
  return shmap_psum(ctx, z, "j");
}

START_TEST(t_matmul_psum)
{
  shmap_mesh *mesh = tu_mesh_new("i=4, j=2");
  shmap_block *a = blk_arange(SHMAP_F32, 2, (int64_t[]){8, 16});
  shmap_block *b = blk_arange(SHMAP_F32, 2, (int64_t[]){16, 32});
  shmap_array *aa = tu_array_from_block(a), *ba = tu_array_from_block(b);
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_matmul_psum, NULL, 2,
                     (shmap_array *[]){aa, ba},
                     (const char *[]){"P('i','j')", "P('j',None)"}, 1, out,
                     (const char *[]){"P('i',None)"});
  tu_map_ok(rc, "matmul_basic");
  shmap_block *e = ref_block_new(SHMAP_F32, 2, (int64_t[]){8, 32});
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 32; j++) {
      double s = 0;
      for (int l = 0; l < 16; l++)
        s += at2(a, i, l) * at2(b, l, j);
      ref_set(e, i * 32 + j, s);
    }
  arr_expect(out[0], e, "psum(a_blk @ b_blk, 'j') out P('i',None)");
  ref_block_free(e);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(aa);
  shmap_array_destroy(ba);
  ref_block_free(a);
  ref_block_free(b);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- all_gather (test_all_gather) ------------------------------------------------ */

static int body_all_gather(shmap_ctx *ctx, void *arg)
{
  jcap *jc = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *a = shmap_in(ctx, 0); /* [4,2] */
  if (!a)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  ref_cap_put(jc->in, dev, a);
  shmap_block *c = NULL, *d = NULL, *u = NULL;
  int rc = shmap_all_gather(ctx, a, "z", 0, 1, &c);
  if (rc)
    return rc;
  rc = shmap_all_gather(ctx, a, "('x', 'y')", -1, 1, &d);
  if (rc)
    return rc;
  rc = shmap_all_gather(ctx, a, "x, y", -1, 0, &u); /* untiled: [4,2,4] */
  if (rc)
    return rc;
  ref_cap_put(jc->r0, dev, c);
  ref_cap_put(jc->r1, dev, d);
  jc->in->val[dev] = (u->rank == 3 && u->shape[0] == 4 && u->shape[1] == 2 &&
                      u->shape[2] == 4)
                         ? 0
                         : -1;
  rc = shmap_out_set(ctx, 0, c);
  if (rc)
    return rc;
  rc = shmap_out_set(ctx, 1, d);
  if (rc)
    return rc;
  return shmap_out_set(ctx, 2, u);
}

START_TEST(t_all_gather_tuple_negative)
{
  shmap_mesh *mesh = tu_mesh_new("x=2, y=2, z=2");
  shmap_block *a = blk_arange(SHMAP_F32, 2, (int64_t[]){8, 8});
  shmap_array *aa = tu_array_from_block(a);
  jcap *jc = jcap_new(8);
  shmap_array *out[3] = {NULL, NULL, NULL};
  int rc = shmap_map(mesh, body_all_gather, jc, 1, (shmap_array *[]){aa},
                     (const char *[]){"P('z', ('x', 'y'))"}, 3, out,
                     (const char *[]){"P('z', ('x', 'y'))",
                                      "P('z', ('x', 'y'))",
                                      "P('z', ('x', 'y'))"});
  tu_map_ok(rc, "all_gather");
  for (int dev = 0; dev < 8; dev++) {
    ck_assert_msg(jc->in->val[dev] == 0,
                  "device %d: untiled all_gather over ('x','y') axis -1 "
                  "should be f32[4,2,4]",
                  dev);
    /* device = x*4 + y*2 + z: its (x,y) rank is dev/2, its z is dev%2 */
    int q = dev / 2, z = dev % 2;
    /* c: all_gather over z of the [4,2] blocks = column block q of a */
    shmap_block *wc = sub2(a, 0, 8, 2 * q, 2);
    char what[96];
    snprintf(what, sizeof what, "device %d: all_gather(a,'z',0,tiled)", dev);
    blk_expect(jc->r0->blk[dev], wc, what);
    /* d: all_gather over (x,y) along -1 = row block z of a */
    shmap_block *wd = sub2(a, 4 * z, 4, 0, 8);
    snprintf(what, sizeof what,
             "device %d: all_gather(a,('x','y'),-1,tiled)", dev);
    blk_expect(jc->r1->blk[dev], wd, what);
    ref_block_free(wc);
    ref_block_free(wd);
  }
  /* JAX: c.addressable_data(2*i) == np.split(a, 4, axis=1)[i] */
  for (int i = 0; i < 4; i++) {
    shmap_block *w = sub2(a, 0, 8, 2 * i, 2);
    blk_expect(jc->r0->blk[2 * i], w, "c on device 2*i");
    ref_block_free(w);
  }
  /* JAX: d.addressable_data(i) == np.split(a, 2, axis=0)[i] */
  for (int i = 0; i < 2; i++) {
    shmap_block *w = sub2(a, 4 * i, 4, 0, 8);
    blk_expect(jc->r1->blk[i], w, "d on device i");
    ref_block_free(w);
  }
  /* Global outputs: c -> [16,8] = a stacked twice; d -> [8,32] = a four
   * times side by side; u -> [8,8,4]: device (x,y,z) holds
   * u[r,c,k] = a[4z + r, 2k + c] at rows 4z.., columns 2q.. (q its (x,y)
   * rank), so u[gr,gc,k] = a[gr, 2k + gc%2]. */
  shmap_block *wc = ref_block_new(SHMAP_F32, 2, (int64_t[]){16, 8});
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++)
      ref_set(wc, r * 8 + c, at2(a, r % 8, c));
  arr_expect(out[0], wc, "all_gather(a,'z',0,tiled) out P('z',('x','y'))");
  shmap_block *wd = ref_block_new(SHMAP_F32, 2, (int64_t[]){8, 32});
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 32; c++)
      ref_set(wd, r * 32 + c, at2(a, r, c % 8));
  arr_expect(out[1], wd,
             "all_gather(a,('x','y'),-1,tiled) out P('z',('x','y'))");
  shmap_block *wu = ref_block_new(SHMAP_F32, 3, (int64_t[]){8, 8, 4});
  for (int gr = 0; gr < 8; gr++)      /* global row: z = gr/4, r = gr%4 */
    for (int gc = 0; gc < 8; gc++)    /* global col: q = gc/2, c = gc%2 */
      for (int k = 0; k < 4; k++)
        ref_set(wu, (gr * 8 + gc) * 4 + k,
                at2(a, 4 * (gr / 4) + gr % 4, 2 * k + gc % 2));
  arr_expect(out[2], wu,
             "all_gather(a,('x','y'),-1,untiled) out P('z',('x','y'))");
  ref_block_free(wc);
  ref_block_free(wd);
  ref_block_free(wu);
  for (int k = 0; k < 3; k++)
    shmap_array_destroy(out[k]);
  shmap_array_destroy(aa);
  ref_block_free(a);
  jcap_free(jc);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- ppermute (test_collective_permute*) ------------------------------------------ */

static int body_ppermute_tuples(shmap_ctx *ctx, void *arg)
{
  jcap *jc = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *a = shmap_in(ctx, 0); /* [2,4] */
  if (!a)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  ref_cap_put(jc->in, dev, a);
  int nxy = shmap_axis_size(ctx, "('x', 'y')");
  int nyz = shmap_axis_size(ctx, "('y', 'z')");
  if (nxy != 4 || nyz != 4)
    return shmap_fail(ctx, "axis sizes %d %d", nxy, nyz);
  int pxy[4][2], pyz[4][2];
  for (int j = 0; j < 4; j++) {
    pxy[j][0] = pyz[j][0] = j;
    pxy[j][1] = (j + 1) % nxy;
    pyz[j][1] = (j + 1) % nyz;
  }
  shmap_block *c = shmap_out_copy(ctx, 0, a);
  shmap_block *d = shmap_out_copy(ctx, 1, a);
  if (!c || !d)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  int rc = shmap_ppermute(ctx, c, "('x', 'y')", 4, (const int(*)[2])pxy);
  if (rc)
    return rc;
  rc = shmap_ppermute(ctx, d, "('y', 'z')", 4, (const int(*)[2])pyz);
  if (rc)
    return rc;
  ref_cap_put(jc->r0, dev, c);
  ref_cap_put(jc->r1, dev, d);
  return 0;
}

START_TEST(t_ppermute_tuple_axes)
{
  shmap_mesh *mesh = tu_mesh_new("x=2, y=2, z=2");
  shmap_block *a = blk_arange(SHMAP_I32, 2, (int64_t[]){4, 16});
  shmap_array *aa = tu_array_from_block(a);
  jcap *jc = jcap_new(8);
  shmap_array *out[2] = {NULL, NULL};
  int rc = shmap_map(mesh, body_ppermute_tuples, jc, 1, (shmap_array *[]){aa},
                     (const char *[]){"P('x', ('y', 'z'))"}, 2, out,
                     (const char *[]){"P('x', ('y', 'z'))",
                                      "P('x', ('y', 'z'))"});
  tu_map_ok(rc, "ppermute over tuples");
  for (int i = 0; i < 8; i++) {
    /* the input block of device i is a[2x:2x+2, 4q:4q+4], x = i/4,
     * q = i%4 */
    shmap_block *w = sub2(a, 2 * (i / 4), 2, 4 * (i % 4), 4);
    blk_expect(jc->in->blk[i], w, "input block");
    ref_block_free(w);
    char what[96];
    snprintf(what, sizeof what,
             "ppermute over ('x','y'): device %d's block on device %d", i,
             (i + 2) % 8);
    blk_expect(jc->r0->blk[(i + 2) % 8], jc->in->blk[i], what);
    int dd = 4 * (i / 4) + (i + 1) % 4;
    snprintf(what, sizeof what,
             "ppermute over ('y','z'): device %d's block on device %d", i,
             dd);
    blk_expect(jc->r1->blk[dd], jc->in->blk[i], what);
  }
  /* As global arrays: c is a with its 2x4 blocks moved from device i to
   * (i+2)%8; d with blocks moved within each row of blocks. */
  shmap_block *wc = ref_block_new(SHMAP_I32, 2, (int64_t[]){4, 16});
  shmap_block *wd = ref_block_new(SHMAP_I32, 2, (int64_t[]){4, 16});
  for (int i = 0; i < 8; i++) {
    int ci = (i + 2) % 8, di = 4 * (i / 4) + (i + 1) % 4;
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 4; c++) {
        double v = at2(a, 2 * (i / 4) + r, 4 * (i % 4) + c);
        ref_set(wc, (2 * (ci / 4) + r) * 16 + 4 * (ci % 4) + c, v);
        ref_set(wd, (2 * (di / 4) + r) * 16 + 4 * (di % 4) + c, v);
      }
  }
  arr_expect(out[0], wc, "ppermute over ('x','y') out P('x',('y','z'))");
  arr_expect(out[1], wd, "ppermute over ('y','z') out P('x',('y','z'))");
  ref_block_free(wc);
  ref_block_free(wd);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(out[1]);
  shmap_array_destroy(aa);
  ref_block_free(a);
  jcap_free(jc);
  shmap_mesh_destroy(mesh);
}
END_TEST

static int body_ring(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *a = shmap_in(ctx, 0);
  shmap_block *c = a ? shmap_out_copy(ctx, 0, a) : NULL;
  if (!c)
    return shmap_fail(ctx, "in/out: %s", shmap_errmsg());
  int n = shmap_axis_size(ctx, "x");
  if (n < 1)
    return n;
  int(*perm)[2] = calloc((size_t)n, sizeof *perm);
  for (int j = 0; j < n; j++) {
    perm[j][0] = j;
    perm[j][1] = (j + 1) % n;
  }
  int rc = shmap_ppermute(ctx, c, "x", n, (const int(*)[2])perm);
  free(perm);
  return rc;
}

START_TEST(t_collective_permute_ring)
{
  shmap_mesh *mesh = tu_mesh_new("x=8");
  shmap_block *a = blk_arange(SHMAP_I32, 2, (int64_t[]){8, 8});
  shmap_array *aa = tu_array_from_block(a);
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_ring, NULL, 1, (shmap_array *[]){aa},
                     (const char *[]){"P('x', None)"}, 1, out,
                     (const char *[]){"P('x', None)"});
  tu_map_ok(rc, "ring shift");
  /* c[1,:] == a[0,:], and in full c = roll(a, 1, axis=0). */
  shmap_block *w = ref_block_new(SHMAP_I32, 2, (int64_t[]){8, 8});
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 8; c++)
      ref_set(w, r * 8 + c, at2(a, (r + 7) % 8, c));
  arr_expect(out[0], w, "ppermute ring on 8 devices");
  ref_block_free(w);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(aa);
  ref_block_free(a);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- all_to_all (test_all_to_all, test_all_to_all_grad) ------------------------------ */

typedef struct a2a_arg {
  const char *axes;
  int split, concat;
} a2a_arg;

static int body_a2a(shmap_ctx *ctx, void *arg)
{
  const a2a_arg *p = arg;
  shmap_block *r = NULL;
  int rc = shmap_all_to_all(ctx, shmap_in(ctx, 0), p->axes, p->split,
                            p->concat, 1, &r);
  if (rc)
    return rc;
  return shmap_out_set(ctx, 0, r);
}

static void all_to_all_transpose(const char *mesh_text, const char *axes,
                                 const char *spec_in, const char *spec_out)
{
  shmap_mesh *mesh = tu_mesh_new(mesh_text);
  shmap_block *a = blk_arange(SHMAP_I32, 2, (int64_t[]){8, 8});
  shmap_array *aa = tu_array_from_block(a);
  shmap_array *out[1] = {NULL};
  a2a_arg p = {axes, 1, 1};
  int rc = shmap_map(mesh, body_a2a, &p, 1, (shmap_array *[]){aa},
                     (const char *[]){spec_in}, 1, out,
                     (const char *[]){spec_out});
  tu_map_ok(rc, mesh_text);
  /* c == reshape(a.T, (1, 64)) */
  shmap_block *w = ref_block_new(SHMAP_I32, 2, (int64_t[]){1, 64});
  for (int k = 0; k < 64; k++)
    ref_set(w, k, at2(a, k % 8, k / 8));
  char what[128];
  snprintf(what, sizeof what, "all_to_all(split 1, concat 1) over %s on %s",
           axes, mesh_text);
  arr_expect(out[0], w, what);
  ref_block_free(w);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(aa);
  ref_block_free(a);
  shmap_mesh_destroy(mesh);
}

START_TEST(t_all_to_all_8)
{
  all_to_all_transpose("x=8", "x", "P('x', None)", "P(None, 'x')");
}
END_TEST

START_TEST(t_all_to_all_4x2)
{
  all_to_all_transpose("x=4, y=2", "('x', 'y')", "P(('x', 'y'), None)",
                       "P(None, ('x', 'y'))");
}
END_TEST

START_TEST(t_all_to_all_split1_concat0)
{
  shmap_mesh *mesh = tu_mesh_new("x=4");
  shmap_block *a = blk_arange(SHMAP_F32, 2, (int64_t[]){8, 8});
  shmap_array *aa = tu_array_from_block(a);
  shmap_array *out[1] = {NULL};
  a2a_arg p = {"x", 1, 0};
  int rc = shmap_map(mesh, body_a2a, &p, 1, (shmap_array *[]){aa},
                     (const char *[]){"P('x', None)"}, 1, out,
                     (const char *[]){"P(None, 'x')"});
  tu_map_ok(rc, "all_to_all split 1 concat 0");
  arr_expect(out[0], a, "all_to_all(x, split 1, concat 0) out P(None,'x')");
  shmap_array_destroy(out[0]);
  shmap_array_destroy(aa);
  ref_block_free(a);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- psum ---------------------------------------------------------------------- */

typedef struct rep_arg {
  const char *axes;
  int k;
} rep_arg;

static int body_repeat_psum(shmap_ctx *ctx, void *arg)
{
  const rep_arg *p = arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  for (int it = 0; it < p->k; it++) {
    int rc = shmap_psum(ctx, y, p->axes);
    if (rc)
      return rc;
  }
  return 0;
}

/* psum k times of a replicated x over a group of n: n^k x; of a sharded x
 * (out P()): n^(k-1) times the sum of the blocks. */
START_TEST(t_repeated_psum)
{
  shmap_mesh *mesh = tu_mesh_new("i=2, j=4");
  shmap_block *x = blk_arange(SHMAP_I64, 1, (int64_t[]){8});
  shmap_array *xa = tu_array_from_block(x);
  static const struct {
    const char *axes;
    int n;
  } groups[3] = {{"i", 2}, {"j", 4}, {"('j', 'i')", 8}};
  for (int g = 0; g < 3; g++)
    for (int k = 1; k <= 5; k++) {
      rep_arg p = {groups[g].axes, k};
      int64_t nk = 1;
      for (int t = 0; t < k; t++)
        nk *= groups[g].n;
      /* replicated */
      shmap_array *out[1] = {NULL};
      int rc = shmap_map(mesh, body_repeat_psum, &p, 1, (shmap_array *[]){xa},
                         (const char *[]){"P()"}, 1, out,
                         (const char *[]){"P()"});
      tu_map_ok(rc, "repeated psum of a replicated input");
      shmap_block *w = ref_block_new(SHMAP_I64, 1, (int64_t[]){8});
      for (int e = 0; e < 8; e++)
        ((int64_t *)w->data)[e] = nk * e;
      char what[96];
      snprintf(what, sizeof what, "psum over %s %d times of P() x",
               groups[g].axes, k);
      arr_expect(out[0], w, what);
      shmap_array_destroy(out[0]);
      ref_block_free(w);
    }
  /* sharded over ('i','j') (blocks of 1), psum over both k times, out P():
   * n^(k-1) * sum(x) = 8^(k-1) * 28 */
  for (int k = 1; k <= 4; k++) {
    rep_arg p = {"('i', 'j')", k};
    shmap_array *out[1] = {NULL};
    int rc = shmap_map(mesh, body_repeat_psum, &p, 1, (shmap_array *[]){xa},
                       (const char *[]){"P(('i', 'j'))"}, 1, out,
                       (const char *[]){"P()"});
    tu_map_ok(rc, "repeated psum of a sharded input");
    int64_t v = 28;
    for (int t = 1; t < k; t++)
      v *= 8;
    shmap_block *w = ref_block_new(SHMAP_I64, 1, (int64_t[]){1});
    ((int64_t *)w->data)[0] = v;
    char what[96];
    snprintf(what, sizeof what, "psum over ('i','j') %d times of sharded x",
             k);
    arr_expect(out[0], w, what);
    shmap_array_destroy(out[0]);
    ref_block_free(w);
  }
  shmap_array_destroy(xa);
  ref_block_free(x);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* test_eager_control_flow: y = psum(x, ('x','y')); return x if y < 0 else
 * -x. */
static int body_control_flow(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0); /* f32[1,1] */
  if (!x)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  float v = ((const float *)x->data)[0];
  float s = v;
  shmap_block sb = {&s, SHMAP_F32, 0, {0}};
  int rc = shmap_psum(ctx, &sb, "('x', 'y')");
  if (rc)
    return rc;
  shmap_block *o = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){1, 1});
  if (!o)
    return shmap_fail(ctx, "shmap_out: %s", shmap_errmsg());
  ((float *)o->data)[0] = s < 0 ? v : -v;
  return 0;
}

START_TEST(t_eager_control_flow)
{
  shmap_mesh *mesh = tu_mesh_new("x=2, y=2");
  shmap_block *x = blk_arange(SHMAP_F32, 2, (int64_t[]){2, 2});
  shmap_array *xa = tu_array_from_block(x);
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_control_flow, NULL, 1, (shmap_array *[]){xa},
                     (const char *[]){"P('x', 'y')"}, 1, out,
                     (const char *[]){"P('x', 'y')"});
  tu_map_ok(rc, "eager control flow");
  shmap_block *w = ref_block_new(SHMAP_F32, 2, (int64_t[]){2, 2});
  for (int k = 0; k < 4; k++)
    ref_set(w, k, -(double)k);
  /* -0.0f for element 0: the body computes -v with v = 0 */
  ((float *)w->data)[0] = -0.0f;
  arr_expect(out[0], w, "psum in eager control flow");
  ref_block_free(w);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(xa);
  ref_block_free(x);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* test_replication_checker_eager: 2*x with out P(None,'y') fails; psum over
 * 'x' with the same out spec works. */
static int body_scale2(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  for (int64_t e = 0; e < shmap_block_numel(y); e++)
    ((float *)y->data)[e] *= 2;
  return 0;
}

static int body_psum_x(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  return shmap_psum(ctx, y, "x");
}

START_TEST(t_replication_checker)
{
  shmap_mesh *mesh = tu_mesh_new("x=2, y=2");
  shmap_block *x = blk_arange(SHMAP_F32, 2, (int64_t[]){8, 8});
  shmap_array *xa = tu_array_from_block(x);
  shmap_array *out[1] = {NULL};
  int rc = shmap_map(mesh, body_scale2, NULL, 1, (shmap_array *[]){xa},
                     (const char *[]){"P('x', 'y')"}, 1, out,
                     (const char *[]){"P(None, 'y')"});
  ck_assert_msg(rc == SHMAP_EREPLICATION,
                "2*x out P(None,'y'): %d, want SHMAP_EREPLICATION (%s)", rc,
                shmap_errmsg());
  ck_assert_ptr_null(out[0]);
  rc = shmap_map(mesh, body_psum_x, NULL, 1, (shmap_array *[]){xa},
                 (const char *[]){"P('x', 'y')"}, 1, out,
                 (const char *[]){"P(None, 'y')"});
  tu_map_ok(rc, "psum(x,'x') out P(None,'y')");
  shmap_block *w = ref_block_new(SHMAP_F32, 2, (int64_t[]){4, 8});
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 8; c++)
      ref_set(w, r * 8 + c, at2(x, r, c) + at2(x, r + 4, c));
  arr_expect(out[0], w, "psum(x,'x') out P(None,'y')");
  ref_block_free(w);
  shmap_array_destroy(out[0]);
  shmap_array_destroy(xa);
  ref_block_free(x);
  shmap_mesh_destroy(mesh);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------ */

int main(void)
{
  Suite *s = suite_create("coll_jax");
  TCase *tc = tcase_create("shard_map_test");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, t_matmul_reduce_scatter);
  tcase_add_test(tc, t_matmul_psum);
  tcase_add_test(tc, t_all_gather_tuple_negative);
  tcase_add_test(tc, t_ppermute_tuple_axes);
  tcase_add_test(tc, t_collective_permute_ring);
  tcase_add_test(tc, t_all_to_all_8);
  tcase_add_test(tc, t_all_to_all_4x2);
  tcase_add_test(tc, t_all_to_all_split1_concat0);
  tcase_add_test(tc, t_repeated_psum);
  tcase_add_test(tc, t_eager_control_flow);
  tcase_add_test(tc, t_replication_checker);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
