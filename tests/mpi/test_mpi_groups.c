/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_groups.c - axis_index_groups, pbroadcast, ragged_all_to_all and
 * preduce with the devices spread over the processes of an MPI job,
 * against serial models, bit for bit.
 *
 * Every process draws the same random cases from the same seed (SPMD):
 * meshes of 4, 8 or 16 devices, the default placement or random process
 * axes, random axes, group layouts, dtypes (all of them), shapes, tilings,
 * sources and ragged sizes.  Each process checks its own devices.
 * SHMAPTEST_PROP_SEED and SHMAPTEST_PROP_CASES (default 60) override the seed and
 * the number of cases.  A plain program: Check would fork after MPI_Init.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "expect.h"
#include "../jaxgroups.h"
#include "../jaxragged.h"
#include "../refcoll.h"

static int R;

static const char *const axis_pool[] = {"i", "j", "k"};

/* A mesh of 4, 8 or 16 devices in 1 to 3 axes of sizes 1, 2 or 4. */
static void random_mesh(ref_rng *r, ref_mesh *m)
{
  static const int totals[] = {4, 8, 16};
  int total = totals[ref_rng_int(r, 0, 2)];
  int naxes = ref_rng_int(r, 1, 3);
  int sizes[3], left = total;
  for (int a = 0; a < naxes; a++) {
    if (a == naxes - 1) {
      sizes[a] = left;
    } else {
      int s = 1 << ref_rng_int(r, 0, 2);
      while (left % s)
        s /= 2;
      sizes[a] = s;
      left /= s;
    }
  }
  ref_mesh_init(m, naxes, axis_pool, sizes);
}

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

static shmap_mesh *make_mesh(ref_rng *r, const ref_mesh *m, char *text,
                             size_t n)
{
  ref_mesh_text(m, text, n);
  shmap_mesh *mesh = NULL;
  int rc = shmap_mesh_create(&mesh, text);
  /* Now and then the processes split along the last axis first. */
  if (rc == 0 && ref_rng_int(r, 0, 1) && m->sizes[m->naxes - 1] % 4 == 0)
    rc = shmap_mesh_set_process_axes(mesh, m->names[m->naxes - 1]);
  EXPECT(rc == 0, "mesh %s: %s", text, shmap_errmsg());
  return rc ? NULL : mesh;
}

/* ---- grouped collectives and pbroadcast against the model -------------- */

static void model_case(ref_rng *r, uint64_t seed, int ci)
{
  ref_mesh m;
  random_mesh(r, &m);
  char text[128];
  shmap_mesh *mesh = make_mesh(r, &m, text, sizeof text);
  if (!mesh)
    return;
  ref_op op;
  memset(&op, 0, sizeof op);
  int ranks[16];
  random_axes(r, &m, &op);
  int n = ref_axis_size(&m, op.axes, op.naxes);
  static const ref_kind kinds[] = {RK_PSUM,         RK_PMAX,
                                   RK_PMIN,         RK_PMEAN,
                                   RK_PSUM_SCATTER, RK_ALL_GATHER,
                                   RK_ALL_TO_ALL,   RK_PBROADCAST};
  op.kind = kinds[ref_rng_int(r, 0, 7)];
  shmap_dtype dt;
  for (;;) {
    dt = ref_dtype_at(ref_rng_int(r, 0, ref_ndtypes() - 1));
    if (op.kind == RK_PMEAN && ref_reduce_allowed(REF_MEAN, dt))
      continue;
    if ((op.kind == RK_PMAX || op.kind == RK_PMIN) &&
        ref_reduce_allowed(REF_MAX, dt))
      continue;
    break;
  }
  int rank = ref_rng_int(r, 1, 3);
  int64_t shape[SHMAP_MAX_RANK];
  for (int d = 0; d < rank; d++)
    shape[d] = ref_rng_int(r, 1, 3);
  if (op.kind == RK_PBROADCAST) {
    op.dim = ref_rng_int(r, 0, n - 1);
    op.outplace = ref_rng_int(r, 0, 1);
  } else {
    /* Groups of a random divisor of n, ranks in random order. */
    int divs[16] = {1}, nd = 0;
    for (int d = 1; d <= n; d++)
      if (n % d == 0)
        divs[nd++] = d;
    op.gsize = divs[ref_rng_int(r, 0, nd - 1)];
    op.ngroups = n / op.gsize;
    for (int i = 0; i < n; i++)
      ranks[i] = i;
    for (int i = n - 1; i > 0; i--) {
      int j = ref_rng_int(r, 0, i), t = ranks[i];
      ranks[i] = ranks[j];
      ranks[j] = t;
    }
    op.groups = ranks;
    int g = op.gsize;
    op.tiled = ref_rng_int(r, 0, 1);
    if (op.kind == RK_PSUM_SCATTER || op.kind == RK_ALL_TO_ALL) {
      int d = ref_rng_int(r, 0, rank - 1);
      shape[d] = op.tiled ? (int64_t)g * ref_rng_int(r, 1, 2) : g;
      op.dim = d;
      op.dim2 = ref_rng_int(r, 0, rank - 1);
    } else if (op.kind == RK_ALL_GATHER) {
      op.dim = ref_rng_int(r, 0, op.tiled ? rank - 1 : rank);
    } else {
      op.outplace = ref_rng_int(r, 0, 1) ||
                    (op.kind == RK_PSUM && dt == SHMAP_BOOL);
    }
  }
  shmap_block **in = calloc((size_t)m.ndev, sizeof *in);
  shmap_block **want = calloc((size_t)m.ndev, sizeof *want);
  for (int d = 0; d < m.ndev; d++) {
    in[d] = ref_block_new(dt, rank, shape);
    ref_fill_random(r, in[d]);
  }
  char opt[512], sh[64];
  ref_op_text(&op, opt, sizeof opt);
  ref_shape_text(dt, rank, shape, sh, sizeof sh);
  ref_cap *cap = ref_cap_new(m.ndev);
  ref_job job = {.m = &m, .nops = 1, .ops = &op, .in = in, .cap = cap,
                 .mem = ref_rng_int(r, 0, 1), .free_early = 0};
  int mrc = ref_job_model(&job, want);
  EXPECT(mrc == 0, "model failed: %d", mrc);
  if (mrc == 0) {
    int rc = ref_job_run(mesh, &job);
    EXPECT(rc == 0, "seed %" PRIu64 " case %d: mesh \"%s\", %s %s: %s", seed,
           ci, text, sh, opt, shmap_errmsg());
    for (int d = 0; rc == 0 && d < m.ndev; d++) {
      if (shmap_mesh_device_process(mesh, d) != me)
        continue;
      if (!ref_block_same(cap->blk[d], want[d])) {
        char diff[256];
        ref_block_diff(cap->blk[d], want[d], diff, sizeof diff);
        EXPECT(0, "seed %" PRIu64 " case %d: mesh \"%s\", %s %s: device %d: "
               "%s", seed, ci, text, sh, opt, d, diff);
      }
    }
    ref_blocks_free(want, m.ndev);
  }
  ref_cap_free(cap);
  ref_blocks_free(in, m.ndev);
  free(in);
  free(want);
  shmap_mesh_destroy(mesh);
}

/* ---- ragged_all_to_all ------------------------------------------------- */

/* sz[d][j]: rows device d sends to rank j of its group.  Senders pack
 * their rows in rank order from row 0; receivers store senders' rows in
 * rank order from row 1 (row 0 keeps its value). */
typedef struct rg {
  const ref_mesh *m;
  char text[128];
  int axes[SHMAP_MAX_AXES], naxes, n;
  int64_t sz[16][16];
  int64_t rows, orows;
  int bad[16];
} rg;

static float cell(int dev, int64_t row) { return (float)(dev * 1000 + row); }

static int body_ragged(shmap_ctx *ctx, void *arg)
{
  rg *g = arg;
  int dev = shmap_ctx_device(ctx), mem[16], rk;
  ref_group(g->m, g->axes, g->naxes, dev, mem, &rk);
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                     (int64_t[]){g->rows, 2});
  shmap_block *y = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                     (int64_t[]){g->orows, 2});
  if (!x || !y)
    return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
  for (int64_t i = 0; i < g->rows; i++)
    ((float *)x->data)[2 * i] = ((float *)x->data)[2 * i + 1] = cell(dev, i);
  for (int64_t i = 0; i < g->orows; i++)
    ((float *)y->data)[2 * i] = ((float *)y->data)[2 * i + 1] = -1;
  int64_t io[16], ss[16], oo[16], rs[16], at = 0;
  for (int j = 0; j < g->n; j++) {
    io[j] = at;
    ss[j] = g->sz[dev][j];
    at += ss[j];
    oo[j] = 1;
    for (int s = 0; s < rk; s++)
      oo[j] += g->sz[mem[s]][j];
    rs[j] = g->sz[mem[j]][rk];
  }
  int rc = shmap_ragged_all_to_all(ctx, x, y, io, ss, oo, rs, g->text);
  if (rc)
    return rc;
  /* Expected: row 0 untouched; then each sender's rows in rank order. */
  int64_t row = 1;
  const float *yd = y->data;
  g->bad[dev] |= yd[0] != -1;
  for (int s = 0; s < g->n; s++) {
    int src = mem[s];
    int64_t first = 0;
    for (int j = 0; j < rk; j++)
      first += g->sz[src][j];
    for (int64_t k = 0; k < g->sz[src][rk]; k++, row++)
      g->bad[dev] |= yd[2 * row] != cell(src, first + k) ||
                     yd[2 * row + 1] != cell(src, first + k);
  }
  for (; row < g->orows; row++)
    g->bad[dev] |= yd[2 * row] != -1;
  return 0;
}

static void ragged_case(ref_rng *r, uint64_t seed, int ci)
{
  ref_mesh m;
  random_mesh(r, &m);
  rg g;
  memset(&g, 0, sizeof g);
  g.m = &m;
  char text[128];
  shmap_mesh *mesh = make_mesh(r, &m, text, sizeof text);
  if (!mesh)
    return;
  ref_op op;
  memset(&op, 0, sizeof op);
  random_axes(r, &m, &op);
  snprintf(g.text, sizeof g.text, "%s", op.text);
  memcpy(g.axes, op.axes, sizeof g.axes);
  g.naxes = op.naxes;
  g.n = ref_axis_size(&m, g.axes, g.naxes);
  int64_t maxs = 0, maxr = 0;
  for (int d = 0; d < m.ndev; d++) {
    int64_t t = 0;
    for (int j = 0; j < g.n; j++)
      t += g.sz[d][j] = ref_rng_int(r, 0, 2);
    maxs = t > maxs ? t : maxs;
  }
  for (int d = 0; d < m.ndev; d++) {
    int mem[16], rk;
    int64_t t = 0;
    ref_group(&m, g.axes, g.naxes, d, mem, &rk);
    for (int s = 0; s < g.n; s++)
      t += g.sz[mem[s]][rk];
    maxr = t > maxr ? t : maxr;
  }
  g.rows = maxs + 1;
  g.orows = maxr + 2;
  int rc = shmap_map(mesh, body_ragged, &g, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT(rc == 0, "seed %" PRIu64 " ragged case %d: mesh \"%s\" over %s: %s",
         seed, ci, text, g.text, shmap_errmsg());
  for (int d = 0; rc == 0 && d < m.ndev; d++)
    if (shmap_mesh_device_process(mesh, d) == me)
      EXPECT(!g.bad[d], "seed %" PRIu64 " ragged case %d: mesh \"%s\" over "
             "%s: device %d received wrong rows", seed, ci, text, g.text, d);
  shmap_mesh_destroy(mesh);
}

/* A receiver whose recv_sizes disagree with its sender, on another
 * process: every process reports the error. */
static int body_ragged_bad(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  float a[4] = {0}, b[8] = {0};
  shmap_block x = {a, SHMAP_F32, 1, {4}}, y = {b, SHMAP_F32, 1, {8}};
  int64_t io[4] = {0, 1, 2, 3}, ss[4] = {1, 1, 1, 1}, oo[4], rs[4];
  for (int j = 0; j < 4; j++) {
    oo[j] = dev;
    rs[j] = dev == 3 && j == 0 ? 2 : 1;
  }
  return shmap_ragged_all_to_all(ctx, &x, &y, io, ss, oo, rs, "i");
}

/* ---- preduce ----------------------------------------------------------- */

static void argmax(void *inout, const void *in, int64_t count, void *arg)
{
  (void)arg;
  double *a = inout;
  const double *b = in;
  for (int64_t i = 0; i < count; i++)
    if (b[2 * i] > a[2 * i]) {
      a[2 * i] = b[2 * i];
      a[2 * i + 1] = b[2 * i + 1];
    }
}

static int body_preduce(shmap_ctx *ctx, void *arg)
{
  int *bad = arg;
  int dev = shmap_ctx_device(ctx);
  double rec[2] = {(double)((dev * 5) % 8), dev};
  shmap_block x = {rec, SHMAP_F64, 1, {2}};
  shmap_reduce_op op = {"argmax", argmax, NULL, 2};
  /* bad[8] set: the last device passes another operation. */
  if (bad[8] && dev == 7)
    op.name = "argmax_by_index";
  int rc = shmap_preduce(ctx, &x, "i", &op);
  if (rc)
    return rc;
  /* Values (5d mod 8) over 8 devices: 7 first at device 3. */
  bad[dev] = rec[0] != 7 || rec[1] != 3;
  return 0;
}

static void fixed_cases(void)
{
  shmap_mesh *mesh = NULL;
  EXPECT(shmap_mesh_create(&mesh, "i=4") == 0, "mesh: %s", shmap_errmsg());
  int rc = shmap_map(mesh, body_ragged_bad, NULL, 0, NULL, NULL, 0, NULL,
                     NULL);
  const char *msg = shmap_errmsg();
  EXPECT(rc == SHMAP_EINVAL && strstr(msg, "device 3") &&
             strstr(msg, "recv_sizes[0] = 2, but rank 0 sends 1 rows"),
         "ragged sizes that disagree: %d: %s", rc, msg);
  shmap_mesh_destroy(mesh);
  EXPECT(shmap_mesh_create(&mesh, "i=8") == 0, "mesh: %s", shmap_errmsg());
  int bad[9] = {0};
  rc = shmap_map(mesh, body_preduce, bad, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT(rc == 0, "preduce: %s", shmap_errmsg());
  for (int d = 0; rc == 0 && d < 8; d++)
    if (shmap_mesh_device_process(mesh, d) == me)
      EXPECT(!bad[d], "preduce: device %d got the wrong argmax", d);
  /* Operations of other names: the message names both, on every process. */
  bad[8] = 1;
  rc = shmap_map(mesh, body_preduce, bad, 0, NULL, NULL, 0, NULL, NULL);
  msg = shmap_errmsg();
  EXPECT(rc == SHMAP_EMISMATCH && strstr(msg, "op 'argmax' of width 2") &&
             strstr(msg, "op 'argmax_by_index' of width 2"),
         "preduce of other operations: %d: %s", rc, msg);
  shmap_mesh_destroy(mesh);
}

/* JAX's examples of ragged_all_to_all (../jaxragged.h): every process
 * checks the devices it runs. */
static void jax_ragged_cases(void)
{
  for (size_t k = 0; k < sizeof jr_cases / sizeof jr_cases[0]; k++) {
    const jr_case *c = &jr_cases[k];
    shmap_mesh *mesh = NULL;
    int rc = shmap_mesh_create(&mesh, c->mesh);
    EXPECT(rc == 0, "%s: mesh \"%s\": %s", c->name, c->mesh, shmap_errmsg());
    if (rc)
      continue;
    jr_run r = {c, {0}, {{0}}};
    rc = shmap_map(mesh, jr_body, &r, 0, NULL, NULL, 0, NULL, NULL);
    EXPECT(rc == 0, "%s: %s", c->name, shmap_errmsg());
    for (int d = 0; d < JR_NDEV; d++)
      if (shmap_mesh_device_process(mesh, d) == me)
        EXPECT(!r.bad[d], "%s: device %d: %s", c->name, d, r.why[d]);
    shmap_mesh_destroy(mesh);
  }
}

/* JAX's psum examples and groups of different sizes (../jaxgroups.h). */
static void jax_groups_cases(void)
{
  shmap_mesh *mesh = NULL;
  int rc = shmap_mesh_create(&mesh, "i=4");
  EXPECT(rc == 0, "mesh \"i=4\": %s", shmap_errmsg());
  if (rc)
    return;
  for (size_t k = 0; k < sizeof jg_cases / sizeof jg_cases[0]; k++) {
    jg_run r = {&jg_cases[k], {0}, {{0}}};
    rc = shmap_map(mesh, jg_body, &r, 0, NULL, NULL, 0, NULL, NULL);
    EXPECT(rc == 0, "%s: %s", r.c->name, shmap_errmsg());
    for (int d = 0; d < 4; d++)
      if (shmap_mesh_device_process(mesh, d) == me)
        EXPECT(!r.bad[d], "%s: device %d: %s", r.c->name, d, r.why[d]);
  }
  shmap_mesh_destroy(mesh);
}

int main(void)
{
  R = shmap_process_count();
  me = shmap_process_rank();
  const char *s = getenv("SHMAPTEST_PROP_SEED");
  uint64_t seed = s ? strtoull(s, NULL, 0) : 0x6e0b5;
  const char *c = getenv("SHMAPTEST_PROP_CASES");
  int cases = c ? atoi(c) : 60;
  if (me == 0)
    printf("test_mpi_groups: %d process%s, seed %" PRIu64 ", %d cases\n", R,
           R == 1 ? "" : "es", seed, cases);
  ref_rng rng = {seed};
  for (int ci = 0; ci < cases && failures < 5; ci++) {
    model_case(&rng, seed, ci);
    ragged_case(&rng, seed, ci);
  }
  fixed_cases();
  jax_ragged_cases();
  jax_groups_cases();
  if (failures)
    fprintf(stderr, "[process %d of %d] %d failure%s\n", me, R, failures,
            failures == 1 ? "" : "s");
  else if (me == 0)
    printf("test_mpi_groups: all passed\n");
  return failures ? 1 : 0;
}
