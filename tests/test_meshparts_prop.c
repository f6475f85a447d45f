/* SPDX-License-Identifier: MIT */
/*
 * test_meshparts_prop.c - random maps over some axes, with and without a
 * nested map, compared with the serial reference model (tests/refmodel.c).
 *
 * Each case draws a mesh (1 to 4 axes of sizes 1 to 3), a non-empty set of
 * manual axes, a spec over them for the input, a layout of the input over
 * all axes (so inputs split along free axes are gathered), and in half the
 * cases a nested map over a random non-empty set of the free axes with a
 * spec of its own.  Bodies record the blocks they see, which must equal the
 * reference's slices; the nested body returns its block (assembled back by
 * its spec) and its psum over the inner axes; the outer body returns what
 * it got, so the map's outputs must equal the input and the reference's
 * sums.  A second test moves random arrays between random meshes (slices,
 * meshes over random subsets of devices, unrelated meshes) with random
 * specs.  Cases alternate between thread and fiber mode.  SHMAPTEST_PROP_CASES
 * (default 200, half as many transfers) and SHMAPTEST_PROP_SEED choose them.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "refmodel.h"
#include "testutil.h"

#define MAXDEV 81
#define MAXEL 4096

typedef struct pcase {
  ref_mesh mesh;
  int ndev;
  unsigned manual, inner; /* inner == 0: no nested map */
  ref_spec src, in, nin;  /* input layout, outer in spec, nested spec */
  char src_text[160], in_text[160], nin_text[160], inner_text[64],
      manual_text[64];
  int rank;
  int64_t shape[3];
  int32_t *global;
  /* What the bodies saw, per device. */
  int32_t outer_seen[MAXDEV][MAXEL];
  int64_t outer_shape[MAXDEV][3];
  int32_t inner_seen[MAXDEV][MAXEL];
  int64_t inner_shape[MAXDEV][3];
  int fail[MAXDEV];
  /* How many times each device ran the outer and the nested body. */
  int outer_ran[MAXDEV], inner_ran[MAXDEV];
} pcase;

/* Whether device dev has coordinate 0 on every axis of mask. */
static int at_zero(const ref_mesh *m, int dev, unsigned mask)
{
  int coords[REF_MAX_AXES];
  ref_coords(m, dev, coords);
  for (int a = 0; a < m->naxes; a++)
    if ((mask & (1u << a)) && coords[a] != 0)
      return 0;
  return 1;
}

static void spec_text(const ref_mesh *m, const ref_spec *s, char *buf, size_t n)
{
  snprintf(buf, n, "P(");
  for (int d = 0; d < s->ndims; d++) {
    size_t len = strlen(buf);
    if (s->naxes[d] == 0)
      snprintf(buf + len, n - len, "%sNone", d ? ", " : "");
    else if (s->naxes[d] == 1)
      snprintf(buf + len, n - len, "%s'%s'", d ? ", " : "",
               m->names[s->axes[d][0]]);
    else {
      snprintf(buf + len, n - len, "%s(", d ? ", " : "");
      for (int k = 0; k < s->naxes[d]; k++) {
        len = strlen(buf);
        snprintf(buf + len, n - len, "%s'%s'", k ? ", " : "",
                 m->names[s->axes[d][k]]);
      }
      len = strlen(buf);
      snprintf(buf + len, n - len, ")");
    }
  }
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, ")");
}

static void mask_text(const ref_mesh *m, unsigned mask, char *buf, size_t n)
{
  buf[0] = '\0';
  int k = 0;
  for (int a = 0; a < m->naxes; a++)
    if (mask & (1u << a)) {
      size_t len = strlen(buf);
      snprintf(buf + len, n - len, "%s%s", k++ ? ", " : "", m->names[a]);
    }
}

/* A random spec of `rank` entries using each axis of `mask` in a random
 * dimension or not at all, in random order. */
static void random_spec(uint64_t *rng, unsigned mask, int naxes, int rank,
                        ref_spec *s)
{
  memset(s, 0, sizeof *s);
  s->ndims = t_rng_range(rng, 0, rank);
  int order[REF_MAX_AXES], n = 0;
  for (int a = 0; a < naxes; a++)
    if (mask & (1u << a))
      order[n++] = a;
  for (int i = n - 1; i > 0; i--) {
    int j = t_rng_range(rng, 0, i);
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int i = 0; i < n && s->ndims > 0; i++) {
    int d = t_rng_range(rng, -1, s->ndims - 1);
    if (d >= 0)
      s->axes[d][s->naxes[d]++] = order[i];
  }
}

static int32_t *block_of(pcase *c, int dev, const ref_spec *s, int rank,
                         const int64_t *gshape, const int32_t *g,
                         int64_t *bshape)
{
  int32_t *b = malloc(MAXEL * sizeof *b);
  ck_assert_int_eq(ref_slice(&c->mesh, s, 4, rank, gshape, g, dev, bshape, b),
                   0);
  (void)c;
  return b;
}

static int inner_body(shmap_ctx *ctx, void *arg)
{
  pcase *c = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return -1;
  c->inner_ran[dev]++;
  memcpy(c->inner_seen[dev], x->data, shmap_block_nbytes(x));
  memcpy(c->inner_shape[dev], x->shape, sizeof c->inner_shape[dev]);
  if (!shmap_out_copy(ctx, 0, x))
    return -1;
  shmap_block *s = shmap_out_copy(ctx, 1, x);
  return s ? shmap_psum(ctx, s, c->inner_text) : -1;
}

static int outer_body(shmap_ctx *ctx, void *arg)
{
  pcase *c = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return -1;
  c->outer_ran[dev]++;
  memcpy(c->outer_seen[dev], x->data, shmap_block_nbytes(x));
  memcpy(c->outer_shape[dev], x->shape, sizeof c->outer_shape[dev]);
  if (!c->inner) {
    shmap_block *y = shmap_out_copy(ctx, 0, x);
    return y ? 0 : -1;
  }
  shmap_block *out[2];
  shmap_map_opts o = {.manual_axes = c->inner_text};
  const char *is[] = {c->nin_text}, *os[] = {c->nin_text, "P()"};
  int rc = shmap_map_nested(ctx, inner_body, c, 1, &x, is, 2, out, os, &o);
  if (rc)
    return rc;
  if (shmap_out_set(ctx, 0, out[0]) || shmap_out_set(ctx, 1, out[1]))
    return -1;
  return 0;
}

static void run_case(uint64_t seed, int index)
{
  uint64_t rng = seed;
  pcase *c = calloc(1, sizeof *c);
  ck_assert_ptr_nonnull(c);
  ref_mesh *m = &c->mesh;
  m->naxes = t_rng_range(&rng, 1, 4);
  c->ndev = 1;
  char mesh_text[128] = "";
  for (int a = 0; a < m->naxes; a++) {
    m->sizes[a] = t_rng_range(&rng, 1, 3);
    snprintf(m->names[a], sizeof m->names[a], "%c", 'a' + a);
    c->ndev *= m->sizes[a];
    size_t len = strlen(mesh_text);
    snprintf(mesh_text + len, sizeof mesh_text - len, "%s%s=%d", a ? ", " : "",
             m->names[a], m->sizes[a]);
  }
  unsigned all = (1u << m->naxes) - 1;
  do
    c->manual = (unsigned)t_rng_next(&rng) & all;
  while (!c->manual);
  unsigned free_axes = all & ~c->manual;
  c->inner = 0;
  if (free_axes && t_rng_range(&rng, 0, 1))
    do
      c->inner = (unsigned)t_rng_next(&rng) & free_axes;
    while (!c->inner);
  c->rank = t_rng_range(&rng, 1, 3);
  random_spec(&rng, all, m->naxes, c->rank, &c->src);
  random_spec(&rng, c->manual, m->naxes, c->rank, &c->in);
  random_spec(&rng, c->inner, m->naxes, c->rank, &c->nin);
  for (int d = 0; d < c->rank; d++)
    c->shape[d] = t_rng_range(&rng, 1, 2) * ref_count(m, &c->src, d) *
                  ref_count(m, &c->in, d) * ref_count(m, &c->nin, d);
  if (ref_numel(c->rank, c->shape) > MAXEL) {
    free(c);
    return; /* too large for the recording buffers: skip */
  }
  spec_text(m, &c->src, c->src_text, sizeof c->src_text);
  spec_text(m, &c->in, c->in_text, sizeof c->in_text);
  spec_text(m, &c->nin, c->nin_text, sizeof c->nin_text);
  mask_text(m, c->manual, c->manual_text, sizeof c->manual_text);
  mask_text(m, c->inner, c->inner_text, sizeof c->inner_text);
  int64_t n = ref_numel(c->rank, c->shape);
  c->global = malloc((size_t)n * sizeof *c->global);
  for (int64_t e = 0; e < n; e++)
    c->global[e] = (int32_t)(t_rng_next(&rng) % 1000);
  char what[1024];
  snprintf(what, sizeof what,
           "case %d seed %llu: mesh \"%s\", manual \"%s\", array laid out %s, "
           "in spec %s, nested over \"%s\" with %s",
           index, (unsigned long long)seed, mesh_text, c->manual_text,
           c->src_text, c->in_text, c->inner_text, c->nin_text);

  tu_set_sched(index);
  shmap_mesh *mesh = tu_mesh_new(mesh_text);
  shmap_array *x = NULL, *y[2] = {NULL, NULL};
  int rc = shmap_array_from_host_sharded(&x, mesh, c->src_text, SHMAP_I32,
                                         c->rank, c->shape, c->global);
  ck_assert_msg(rc == 0, "%s: import: %s", what, shmap_errmsg());
  shmap_map_opts o = {.manual_axes = c->manual_text};
  const char *is[] = {c->in_text}, *os[] = {c->in_text, c->in_text};
  rc = shmap_map_ex(mesh, outer_body, c, 1, &x, is, c->inner ? 2 : 1, y, os,
                    &o);
  ck_assert_msg(rc == 0, "%s: map: %d %s", what, rc, shmap_errmsg());

  /* One outer body per coordinate of the manual axes, on the device at
   * coordinate 0 of the free axes; one nested body per coordinate of the
   * manual and inner axes.  Blocks seen, against the reference's slices;
   * every device holds the output block of its coordinates (replicated
   * along the free axes). */

  for (int dev = 0; dev < c->ndev; dev++) {
    int64_t ob[3] = {0}, ib[3] = {0};
    int32_t *want = block_of(c, dev, &c->in, c->rank, c->shape, c->global, ob);
    shmap_block yb;
    ck_assert_int_eq(shmap_array_block(y[0], dev, &yb, NULL), 0);
    ck_assert_msg(memcmp(want, yb.data, (size_t)ref_numel(c->rank, ob) * 4) ==
                      0, "%s: device %d holds another output block", what,
                  dev);
    int outer_runs = at_zero(m, dev, free_axes);
    int inner_runs = c->inner && at_zero(m, dev, free_axes & ~c->inner);
    ck_assert_msg(c->outer_ran[dev] == outer_runs,
                  "%s: device %d ran the body %d times, want %d", what, dev,
                  c->outer_ran[dev], outer_runs);
    ck_assert_msg(c->inner_ran[dev] == inner_runs,
                  "%s: device %d ran the nested body %d times, want %d", what,
                  dev, c->inner_ran[dev], inner_runs);
    if (!outer_runs && !inner_runs) {
      free(want);
      continue;
    }
    for (int d = 0; d < c->rank && outer_runs; d++)
      ck_assert_msg(c->outer_shape[dev][d] == ob[d], "%s: device %d dim %d",
                    what, dev, d);
    ck_assert_msg(!outer_runs || memcmp(want, c->outer_seen[dev],
                                        (size_t)ref_numel(c->rank, ob) * 4) ==
                                     0,
                  "%s: device %d outer block differs", what, dev);
    if (inner_runs) {
      int32_t *iw = block_of(c, dev, &c->nin, c->rank, ob, want, ib);
      for (int d = 0; d < c->rank; d++)
        ck_assert_msg(c->inner_shape[dev][d] == ib[d],
                      "%s: device %d inner dim %d", what, dev, d);
      ck_assert_msg(memcmp(iw, c->inner_seen[dev],
                           (size_t)ref_numel(c->rank, ib) * 4) == 0,
                    "%s: device %d inner block differs", what, dev);
      free(iw);
    }
    free(want);
  }
  /* Output 0 went round trip. */
  int32_t *got = tu_array_to_host(y[0], NULL);
  ck_assert_msg(memcmp(got, c->global, (size_t)n * 4) == 0,
                "%s: output 0 differs from the input", what);
  free(got);
  if (c->inner) {
    /* Output 1: per device, the sum over the inner group of the inner
     * blocks (a left fold in rank order), assembled by the outer spec. */
    const void *blocks[MAXDEV];
    int64_t ib[3] = {0}, ob[3];
    for (int dev = 0; dev < c->ndev; dev++) {
      int32_t *outer = block_of(c, dev, &c->in, c->rank, c->shape, c->global,
                                ob);
      int32_t *sum = calloc(MAXEL, sizeof *sum);
      int coords[REF_MAX_AXES];
      ref_coords(m, dev, coords);
      for (int peer = 0; peer < c->ndev; peer++) {
        int pc[REF_MAX_AXES];
        ref_coords(m, peer, pc);
        int same = 1;
        for (int a = 0; a < m->naxes; a++)
          if (!(c->inner & (1u << a)) && pc[a] != coords[a])
            same = 0;
        if (!same)
          continue;
        int32_t *pb = block_of(c, peer, &c->nin, c->rank, ob, outer, ib);
        for (int64_t e = 0; e < ref_numel(c->rank, ib); e++)
          sum[e] += pb[e];
        free(pb);
      }
      blocks[dev] = sum;
      free(outer);
    }
    int64_t gshape[3];
    ref_global_shape(m, &c->in, c->rank, ib, gshape);
    int64_t gn = ref_numel(c->rank, gshape);
    int32_t *want = malloc((size_t)gn * 4 + 4);
    ref_rep_err err;
    ck_assert_int_eq(ref_assemble(m, &c->in, 4, c->rank, ib, blocks, gshape,
                                  want, &err), 0);
    const int64_t *ys = shmap_array_shape(y[1]);
    for (int d = 0; d < c->rank; d++)
      ck_assert_msg(ys[d] == gshape[d], "%s: output 1 dim %d", what, d);
    got = tu_array_to_host(y[1], NULL);
    ck_assert_msg(memcmp(got, want, (size_t)gn * 4) == 0,
                  "%s: output 1 differs from the reference sums", what);
    free(got);
    free(want);
    for (int dev = 0; dev < c->ndev; dev++)
      free((void *)blocks[dev]);
  }
  shmap_array_destroy(y[0]);
  shmap_array_destroy(y[1]);
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
  free(c->global);
  free(c);
}

START_TEST(random_partial_and_nested)
{
  const char *env = getenv("SHMAPTEST_PROP_CASES");
  int cases = env && *env ? atoi(env) : 200;
  env = getenv("SHMAPTEST_PROP_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 0) : 12;
  printf("test_meshparts_prop: %d cases from seed %llu\n", cases,
         (unsigned long long)seed);
  uint64_t rng = seed;
  for (int i = 0; i < cases; i++)
    run_case(t_rng_next(&rng), i);
}
END_TEST

/* A random mesh of up to 3 axes (names a, b, c) into m and its text. */
static void random_mesh(uint64_t *rng, ref_mesh *m, char *text, size_t n,
                        int most)
{
  do {
    m->naxes = t_rng_range(rng, 1, 3);
    text[0] = '\0';
    for (int a = 0; a < m->naxes; a++) {
      m->sizes[a] = t_rng_range(rng, 1, 3);
      snprintf(m->names[a], sizeof m->names[a], "%c", 'a' + a);
      size_t len = strlen(text);
      snprintf(text + len, n - len, "%s%s=%d", a ? ", " : "", m->names[a],
               m->sizes[a]);
    }
    if (ref_ndev(m) <= most)
      return;
  } while (1);
}

/* Arrays moved between random meshes: a slice of the source mesh, a mesh
 * over a random subset of its devices, or a mesh of its own, with random
 * specs; the values must arrive unchanged, and the destination counts
 * every byte its devices built. */
START_TEST(random_transfers)
{
  const char *env = getenv("SHMAPTEST_PROP_CASES");
  int cases = env && *env ? atoi(env) / 2 : 100;
  env = getenv("SHMAPTEST_PROP_SEED");
  uint64_t rng = env && *env ? strtoull(env, NULL, 0) : 12;
  rng ^= 0x5eed;
  for (int i = 0; i < cases; i++) {
    tu_set_sched(i);
    ref_mesh sm, dm;
    char stext[64], dtext[64];
    random_mesh(&rng, &sm, stext, sizeof stext, 27);
    shmap_mesh *src = tu_mesh_new(stext), *dst = NULL;
    int kind = t_rng_range(&rng, 0, 2);
    if (kind == 0 && sm.naxes > 1) {
      /* A slice fixing axis 0. */
      int c = t_rng_range(&rng, 0, sm.sizes[0] - 1);
      char co[16];
      snprintf(co, sizeof co, "a=%d", c);
      ck_assert_int_eq(shmap_mesh_slice(&dst, src, co), 0);
      dm.naxes = sm.naxes - 1;
      dtext[0] = '\0';
      for (int a = 0; a < dm.naxes; a++) {
        dm.sizes[a] = sm.sizes[a + 1];
        snprintf(dm.names[a], sizeof dm.names[a], "%c", 'b' + a);
      }
    } else if (kind == 1) {
      /* A 1-axis mesh over a random subset of the devices. */
      int n = ref_ndev(&sm), k = t_rng_range(&rng, 1, n), devs[27];
      for (int d = 0; d < n; d++)
        devs[d] = d;
      for (int d = n - 1; d > 0; d--) {
        int j = t_rng_range(&rng, 0, d);
        int t = devs[d];
        devs[d] = devs[j];
        devs[j] = t;
      }
      snprintf(dtext, sizeof dtext, "a=%d", k);
      ck_assert_int_eq(shmap_mesh_submesh(&dst, src, dtext, devs), 0);
      dm.naxes = 1;
      dm.sizes[0] = k;
      snprintf(dm.names[0], sizeof dm.names[0], "a");
    } else {
      random_mesh(&rng, &dm, dtext, sizeof dtext, 27);
      dst = tu_mesh_new(dtext);
    }
    int rank = t_rng_range(&rng, 1, 3);
    ref_spec ss, ds;
    random_spec(&rng, (1u << sm.naxes) - 1, sm.naxes, rank, &ss);
    random_spec(&rng, (1u << dm.naxes) - 1, dm.naxes, rank, &ds);
    int64_t shape[3];
    for (int d = 0; d < rank; d++)
      shape[d] = t_rng_range(&rng, 1, 2) * ref_count(&sm, &ss, d) *
                 ref_count(&dm, &ds, d);
    int64_t n = ref_numel(rank, shape);
    int32_t *g = malloc((size_t)n * 4 + 4), *back = malloc((size_t)n * 4 + 4);
    for (int64_t e = 0; e < n; e++)
      g[e] = (int32_t)(t_rng_next(&rng) % 100000);
    char st[160], dt[160];
    spec_text(&sm, &ss, st, sizeof st);
    spec_text(&dm, &ds, dt, sizeof dt);
    shmap_array *a = NULL, *b = NULL;
    ck_assert_int_eq(shmap_array_from_host_sharded(&a, src, st, SHMAP_I32,
                                                   rank, shape, g), 0);
    shmap_mesh_stats_reset(dst);
    int rc = shmap_array_transfer(&b, a, dst, dt);
    ck_assert_msg(rc == 0, "case %d: %s %s -> kind %d %s: %s", i, stext, st,
                  kind, dt, shmap_errmsg());
    ck_assert_int_eq(shmap_array_to_host(b, back), 0);
    ck_assert_msg(memcmp(g, back, (size_t)n * 4) == 0,
                  "case %d: values differ after %s %s -> %s", i, stext, st,
                  dt);
    /* Every device built its whole block from the source. */
    int64_t bshape[3];
    ck_assert_int_eq(ref_block_shape(&dm, &ds, rank, shape, bshape), 0);
    shmap_stats stats;
    shmap_mesh_stats(dst, &stats);
    ck_assert_uint_eq(stats.bytes_transferred,
                      (uint64_t)ref_ndev(&dm) * ref_numel(rank, bshape) * 4);
    shmap_array_destroy(b);
    shmap_array_destroy(a);
    shmap_mesh_destroy(dst);
    shmap_mesh_destroy(src);
    free(g);
    free(back);
  }
}
END_TEST

int main(void)
{
  Suite *s = suite_create("meshparts_prop");
  TCase *tc = tcase_create("random");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, random_partial_and_nested);
  tcase_add_test(tc, random_transfers);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
