/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_coll.c - property tests of the collectives with the devices
 * spread over the processes of an MPI job, against the serial model of
 * tests/refcoll.c, bit for bit; and failures on a device of another
 * process.
 *
 * Every process draws the same random cases from the same seed (SPMD):
 * meshes of 4, 8 or 16 devices (so 1, 2 or 4 processes divide them), the
 * default placement or random process axes, random groups of axes, every
 * dtype (floats, 16-bit floats, signed and unsigned integers of every
 * width, bool, complex) with the kinds it allows, in place or out of place,
 * shapes, dimensions, tilings and ppermute pairs.  Each process checks the results of its own devices.
 * The results of a single process are the model's, so equality with the
 * model is equality with the single-process run.
 *
 * SHMAPTEST_PROP_SEED and SHMAPTEST_PROP_CASES (default 250) override the seed and
 * the number of cases.  A plain program: Check would fork after MPI_Init.
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "expect.h"
#include "../refcoll.h"

static int R;

static const char *const axis_pool[] = {"i", "j", "k", "data", "model"};

/* A mesh of 4, 8 or 16 devices in 1 to 3 axes. */
static void random_mesh(ref_rng *r, ref_mesh *m)
{
  static const int totals[] = {4, 8, 16};
  int total = totals[ref_rng_int(r, 0, 2)];
  int naxes = ref_rng_int(r, 1, 3);
  const char *names[3];
  int sizes[3], left = total;
  for (int a = 0; a < naxes; a++) {
    names[a] = axis_pool[a + (naxes < 3 ? ref_rng_int(r, 0, 2) : 0)];
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
  /* Distinct names: pick again in order when two collide. */
  if (naxes == 2 && strcmp(names[0], names[1]) == 0)
    names[1] = axis_pool[4];
  ref_mesh_init(m, naxes, names, sizes);
}

/* Process axes: a random ordered subset of the axes whose sizes R divides,
 * or NULL for the default. */
static const char *random_process_axes(ref_rng *r, const ref_mesh *m,
                                       char *buf, size_t n)
{
  if (ref_rng_int(r, 0, 2) == 0)
    return NULL;
  int perm[SHMAP_MAX_AXES];
  for (int a = 0; a < m->naxes; a++)
    perm[a] = a;
  for (int a = m->naxes - 1; a > 0; a--) {
    int b = ref_rng_int(r, 0, a), t = perm[a];
    perm[a] = perm[b];
    perm[b] = t;
  }
  int k = ref_rng_int(r, 1, m->naxes), prod = 1;
  buf[0] = '\0';
  size_t len = 0;
  for (int i = 0; i < k; i++) {
    prod *= m->sizes[perm[i]];
    len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "," : "",
                            m->names[perm[i]]);
  }
  return prod % 4 == 0 ? buf : NULL; /* 4 covers R = 1, 2, 4 alike */
}

static void random_group(ref_rng *r, const ref_mesh *m, ref_op *op)
{
  int perm[SHMAP_MAX_AXES];
  for (int a = 0; a < m->naxes; a++)
    perm[a] = a;
  for (int a = m->naxes - 1; a > 0; a--) {
    int b = ref_rng_int(r, 0, a), t = perm[a];
    perm[a] = perm[b];
    perm[b] = t;
  }
  int k = ref_rng_int(r, 1, m->naxes);
  ref_op_axes(m, op, perm, k, ref_rng_int(r, 0, 3));
}

static int random_pairs(ref_rng *r, int n, int (*pairs)[2])
{
  int perm[16], np = 0;
  for (int i = 0; i < n; i++)
    perm[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = ref_rng_int(r, 0, i), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int partial = ref_rng_int(r, 0, 1);
  for (int s = 0; s < n; s++)
    if (!partial || ref_rng_int(r, 0, 2) != 0) {
      pairs[np][0] = s;
      pairs[np][1] = perm[s];
      np++;
    }
  return np;
}

/* Whether the library takes `dt` for one op of `kind` (the model's rules:
 * pmean of floats and complex only, pmax and pmin of anything but
 * complex). */
static int kind_allows(ref_kind kind, shmap_dtype dt)
{
  switch (kind) {
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

/* Random parameters for one op of dtype `dt` on blocks of `shape` (may
 * change it): any kind the dtype allows, in place or out of place (the
 * _new form) at random where both exist; a psum of bool is always out of
 * place (its i32 result does not fit in place). */
static int random_op(ref_rng *r, const ref_mesh *m, ref_op *op, int rank,
                     int64_t shape[], int (*pairs)[2], shmap_dtype dt)
{
  memset(op, 0, sizeof *op);
  do
    op->kind = (ref_kind)ref_rng_int(r, 0, RK_NKINDS - 1);
  while (!kind_allows(op->kind, dt));
  switch (op->kind) {
  case RK_PSUM:
  case RK_PMAX:
  case RK_PMIN:
  case RK_PMEAN:
  case RK_PPERMUTE:
    op->outplace = ref_rng_int(r, 0, 1) ||
                   (op->kind == RK_PSUM && dt == SHMAP_BOOL);
    break;
  default:
    break;
  }
  random_group(r, m, op);
  int n = ref_axis_size(m, op->axes, op->naxes);
  switch (op->kind) {
  case RK_PSUM_SCATTER: {
    if (rank < 1)
      return -1;
    int d = ref_rng_int(r, 0, rank - 1);
    op->tiled = ref_rng_int(r, 0, 1);
    shape[d] = op->tiled ? (int64_t)n * ref_rng_int(r, 1, 3) : n;
    op->dim = d;
    break;
  }
  case RK_ALL_GATHER:
    op->tiled = rank >= 1 ? ref_rng_int(r, 0, 1) : 0;
    op->dim = ref_rng_int(r, 0, op->tiled ? rank - 1 : rank);
    break;
  case RK_ALL_TO_ALL: {
    if (rank < 1)
      return -1;
    int s = ref_rng_int(r, 0, rank - 1), c = ref_rng_int(r, 0, rank - 1);
    op->tiled = ref_rng_int(r, 0, 1);
    shape[s] = op->tiled ? (int64_t)n * ref_rng_int(r, 1, 2) : n;
    op->dim = s;
    op->dim2 = c;
    break;
  }
  case RK_PPERMUTE:
    op->npairs = random_pairs(r, n, pairs);
    op->pairs = pairs;
    break;
  default:
    break;
  }
  return 0;
}

/* One case: a mesh, a placement, a single collective with fresh inputs
 * (sequences are built from single cases whose shapes do not chain). */
static void one_case(ref_rng *r, uint64_t seed, int ci)
{
  ref_mesh m;
  random_mesh(r, &m);
  char text[128], pax[128];
  ref_mesh_text(&m, text, sizeof text);
  const char *axes = random_process_axes(r, &m, pax, sizeof pax);
  shmap_dtype dt = ref_dtype_at(ref_rng_int(r, 0, ref_ndtypes() - 1));
  int rank = ref_rng_int(r, 0, 3);
  int64_t shape[SHMAP_MAX_RANK];
  for (int d = 0; d < rank; d++)
    shape[d] = ref_rng_int(r, 1, 4);
  /* One case in four has a long first dimension: calls of hundreds of
   * bytes to several KiB, on either side of the transport's bound for
   * small calls (3 KiB over MPI, less in larger groups). */
  if (rank > 0 && ref_rng_int(r, 0, 3) == 0)
    shape[0] = ref_rng_int(r, 5, 48);
  ref_op op;
  int pairs[16][2];
  while (random_op(r, &m, &op, rank, shape, pairs, dt) != 0)
    rank = 1, shape[0] = 2;
  shmap_block **in = calloc((size_t)m.ndev, sizeof *in);
  shmap_block **want = calloc((size_t)m.ndev, sizeof *want);
  for (int d = 0; d < m.ndev; d++) {
    in[d] = ref_block_new(dt, rank, shape);
    ref_fill_random(r, in[d]);
  }
  char opt[512];
  ref_op_text(&op, opt, sizeof opt);
  char sh[64];
  ref_shape_text(dt, rank, shape, sh, sizeof sh);
  shmap_mesh *mesh = NULL;
  int rc = shmap_mesh_create(&mesh, text);
  if (rc == 0 && axes)
    rc = shmap_mesh_set_process_axes(mesh, axes);
  EXPECT(rc == 0, "seed %" PRIu64 " case %d: mesh %s: %s", seed, ci, text,
         shmap_errmsg());
  ref_cap *cap = ref_cap_new(m.ndev);
  ref_job job = {.m = &m, .nops = 1, .ops = &op, .in = in, .cap = cap,
                 .mem = ref_rng_int(r, 0, 1), .free_early = 0};
  int mrc = ref_job_model(&job, want);
  EXPECT(mrc == 0, "model failed: %d", mrc);
  if (rc == 0 && mrc == 0) {
    rc = ref_job_run(mesh, &job);
    EXPECT(rc == 0,
           "seed %" PRIu64 " case %d: mesh \"%s\" processes over %s, %s %s: "
           "%s", seed, ci, text, axes ? axes : "(default)", sh, opt,
           shmap_errmsg());
    for (int d = 0; rc == 0 && d < m.ndev; d++) {
      if (shmap_mesh_device_process(mesh, d) != me)
        continue;
      if (!ref_block_same(cap->blk[d], want[d])) {
        char diff[256];
        ref_block_diff(cap->blk[d], want[d], diff, sizeof diff);
        EXPECT(0, "seed %" PRIu64 " case %d: mesh \"%s\" processes over %s, "
               "%s %s: device %d: %s", seed, ci, text,
               axes ? axes : "(default)", sh, opt, d, diff);
      }
    }
  }
  for (int d = 0; d < m.ndev; d++)
    if (mrc == 0)
      ref_block_free(want[d]);
  ref_cap_free(cap);
  ref_blocks_free(in, m.ndev);
  free(in);
  free(want);
  shmap_mesh_destroy(mesh);
}

/* After 5 failures in any process, every process stops drawing cases
 * (together: the processes must keep making the same calls). */
static int stop_now(void)
{
  int mine = failures, most = mine;
  if (R > 1)
    MPI_Allreduce(&mine, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return most >= 5;
}

/* ---- failures on a device of another process --------------------------- */

typedef struct fail_arg {
  int mode; /* 0 body fails, 1 bad argument, 2 mismatched call, 3 early return */
} fail_arg;

static int fail_body(shmap_ctx *ctx, void *arg)
{
  const fail_arg *fa = arg;
  int dev = shmap_ctx_device(ctx);
  int64_t shape[1] = {4};
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
  if (!b)
    return -1;
  /* Every device first makes one good collective over everything. */
  int rc = shmap_psum(ctx, b, "i,j");
  if (rc)
    return rc;
  if (dev == 7 && fa->mode >= 0) {
    switch (fa->mode) {
    case 0:
      return shmap_fail(ctx, "device seven gives up");
    case 1:
      return shmap_psum(ctx, b, "nope");
    case 2:
      return shmap_pmax(ctx, b, "i,j");
    default:
      return 0; /* returns without the second call */
    }
  }
  return shmap_psum(ctx, b, "i,j");
}

static void test_failures(void)
{
  shmap_mesh *mesh = NULL;
  EXPECT(shmap_mesh_create(&mesh, "i=4, j=2") == 0, "mesh: %s", shmap_errmsg());
  int owner = 7 / (8 / R);
  static const int codes[] = {SHMAP_EBODY, SHMAP_EAXIS, SHMAP_EMISMATCH,
                              SHMAP_EMISMATCH};
  for (int mode = 0; mode < 4; mode++) {
    fail_arg fa = {mode};
    int rc = shmap_map(mesh, fail_body, &fa, 0, NULL, NULL, 0, NULL, NULL);
    const char *msg = shmap_errmsg();
    char proc[64] = "";
    if (R > 1)
      snprintf(proc, sizeof proc, " on process %d (host ", owner);
    EXPECT(rc == codes[mode], "mode %d: rc %d (%s), message: %s", mode, rc,
           shmap_strerror(rc), msg);
    /* The failing device is named with its process, whichever reports. */
    char dev7[96];
    snprintf(dev7, sizeof dev7, "device 7 (i=3, j=1)%s", proc);
    EXPECT(strstr(msg, dev7) != NULL, "mode %d: message without \"%s\": %s",
           mode, dev7, msg);
  }
  /* The next map works, on every process. */
  fail_arg ok = {-1};
  int rc = shmap_map(mesh, fail_body, &ok, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT(rc == 0, "the map after the failures: %s", shmap_errmsg());
  shmap_mesh_destroy(mesh);
}

int main(void)
{
  R = shmap_process_count();
  me = shmap_process_rank();
  const char *s = getenv("SHMAPTEST_PROP_SEED");
  uint64_t seed = s ? strtoull(s, NULL, 0) : 0x5eedc0de;
  const char *c = getenv("SHMAPTEST_PROP_CASES");
  int cases = c ? atoi(c) : 250;
  if (me == 0)
    printf("test_mpi_coll: %d process%s, seed %" PRIu64 ", %d cases\n", R,
           R == 1 ? "" : "es", seed, cases);
  ref_rng rng = {seed};
  for (int ci = 0; ci < cases && !stop_now(); ci++)
    one_case(&rng, seed, ci);
  test_failures();
  if (failures)
    fprintf(stderr, "[process %d of %d] %d failure%s\n", me, R, failures,
            failures == 1 ? "" : "s");
  else if (me == 0)
    printf("test_mpi_coll: all passed\n");
  return failures ? 1 : 0;
}
