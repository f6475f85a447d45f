/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_parts.c - what moves blocks between layouts and meshes when the
 * devices are spread over processes: resharding (shmap_array_reshard and
 * maps reading an array with another spec), the replication check and
 * SHMAP_NO_CHECK_REP, output shapes that differ between processes,
 * sub-meshes (slices and lists of devices, including sub-meshes of which a
 * process runs no device), transfers between them, partial-manual maps
 * (shmap_map_ex) and nested maps.
 *
 * Run under `mpirun -np R` (R = 1, 2 or 4) or without mpirun; every
 * expectation is computed from R and written as the single-process result,
 * so one program checks that every R gives the single-process values and
 * messages (messages under MPI add " on process p (host h)" to device
 * names).  A plain program, not a Check suite: an MPI process must not
 * fork.  Every process prints its failures; the exit status is non-zero on
 * any.
 */
#include "mpiutil.h"
#include <shmap.h>

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
static int R, me;
static char host[64];

#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "[process %d] %s:%d: %s: ", me, __FILE__, __LINE__,     \
              #cond);                                                         \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      failures++;                                                             \
    }                                                                         \
  } while (0)

#define OK(rc, what)                                                          \
  EXPECT((rc) >= 0, "%s: %s: %s", what, shmap_strerror(rc), shmap_errmsg())

static int same_everywhere(const char *text)
{
  return same_everywhere_of(R, text);
}

/* "device 4 (i=2, j=0)" plus the process suffix under MPI. */
static void devname(const shmap_mesh *m, int dev, const char *coords,
                    char *buf, size_t n)
{
  if (R > 1)
    snprintf(buf, n, "device %d (%s) on process %d (host %s)", dev, coords,
             shmap_mesh_device_process(m, dev), host);
  else
    snprintf(buf, n, "device %d (%s)", dev, coords);
}

static uint64_t remote_bytes(shmap_mesh *m)
{
  shmap_stats st;
  memset(&st, 0, sizeof st);
  OK(shmap_mesh_stats(m, &st), "stats");
  return st.bytes_remote;
}

/* Every local block of `a` equals the matching box of the row-major
 * 2-d global array `want`, and to_host gives `want` everywhere. */
static void expect_array(const shmap_array *a, const double *want,
                         const char *what)
{
  const int64_t *shape = shmap_array_shape(a);
  int64_t n = shape[0] * shape[1];
  double *got = calloc((size_t)n, sizeof *got);
  OK(shmap_array_to_host(a, got), "to_host");
  EXPECT(memcmp(got, want, sizeof *got * (size_t)n) == 0, "%s: to_host differs",
         what);
  free(got);
  shmap_mesh *m = shmap_array_mesh(a);
  int ndev = shmap_mesh_ndevices(m);
  for (int d = 0; d < ndev; d++) {
    shmap_block b;
    int64_t off[2];
    if (shmap_mesh_device_process(m, d) != me) {
      EXPECT(shmap_array_block(a, d, &b, off) == SHMAP_EINVAL,
             "%s: block of device %d of another process", what, d);
      continue;
    }
    OK(shmap_array_block(a, d, &b, off), "array_block");
    EXPECT(b.data != NULL, "%s: block of device %d: NULL data", what, d);
    if (!b.data)
      continue;
    for (int64_t r = 0; r < b.shape[0]; r++)
      for (int64_t c = 0; c < b.shape[1]; c++) {
        double v = ((const double *)b.data)[r * b.shape[1] + c];
        double w = want[(off[0] + r) * shape[1] + off[1] + c];
        if (v != w) {
          EXPECT(v == w, "%s: device %d [%lld,%lld] = %g, want %g", what, d,
                 (long long)r, (long long)c, v, w);
          return;
        }
      }
  }
}

/* ---- resharding ---------------------------------------------------------- */

/* Bytes this process must receive to reshard an 8x8 f64 array on the mesh
 * "i=4, j=2" from `from` to `to`: each distinct piece its devices lack,
 * once (computed naively from the layouts). */
typedef struct box { int64_t r0, r1, c0, c1; } box;

static box block_of(const char *spec, int dev)
{
  int i = dev / 2, j = dev % 2;
  box b = {0, 8, 0, 8};
  /* The specs below, by hand: rows then columns. */
  if (!strcmp(spec, "P('i','j')"))
    b = (box){2 * i, 2 * i + 2, 4 * j, 4 * j + 4};
  else if (!strcmp(spec, "P('j','i')"))
    b = (box){4 * j, 4 * j + 4, 2 * i, 2 * i + 2};
  else if (!strcmp(spec, "P('i')"))
    b = (box){2 * i, 2 * i + 2, 0, 8};
  else if (!strcmp(spec, "P(None,'i')"))
    b = (box){0, 8, 2 * i, 2 * i + 2};
  else if (!strcmp(spec, "P(('i','j'))"))
    b = (box){i * 2 + j, i * 2 + j + 1, 0, 8};
  else if (!strcmp(spec, "P(('j','i'))"))
    b = (box){j * 4 + i, j * 4 + i + 1, 0, 8};
  else if (!strcmp(spec, "P('j')"))
    b = (box){4 * j, 4 * j + 4, 0, 8};
  return b; /* P(): whole */
}

static uint64_t expected_bytes(shmap_mesh *m, const char *from, const char *to)
{
  /* Mark, per element, whether a device of this process holds it in the
   * source layout; for the distinct target blocks of this process's
   * devices, count the elements it lacks (distinct target blocks never
   * overlap, so each is counted once). */
  bool held[64] = {false}, need[64] = {false};
  for (int d = 0; d < 8; d++) {
    if (shmap_mesh_device_process(m, d) != me)
      continue;
    box s = block_of(from, d), t = block_of(to, d);
    for (int64_t r = s.r0; r < s.r1; r++)
      for (int64_t c = s.c0; c < s.c1; c++)
        held[r * 8 + c] = true;
    for (int64_t r = t.r0; r < t.r1; r++)
      for (int64_t c = t.c0; c < t.c1; c++)
        need[r * 8 + c] = true;
  }
  uint64_t n = 0;
  for (int k = 0; k < 64; k++)
    n += need[k] && !held[k];
  return n * sizeof(double);
}

static int scale(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *out = shmap_out(ctx, 0, in->dtype, in->rank, in->shape);
  if (!out)
    return -1;
  for (int64_t k = 0; k < shmap_block_numel(in); k++)
    ((double *)out->data)[k] = ((const double *)in->data)[k] * 3.0;
  return 0;
}

static void test_reshard(const char *axes)
{
  static const char *const specs[] = {"P('i','j')", "P('j','i')", "P('i')",
                                      "P(None,'i')", "P(('i','j'))",
                                      "P(('j','i'))", "P('j')", "P()"};
  const int nspec = (int)(sizeof specs / sizeof specs[0]);
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh");
  if (axes)
    OK(shmap_mesh_set_process_axes(m, axes), "process axes");
  double x[64], x3[64];
  for (int k = 0; k < 64; k++) {
    x[k] = (double)k + 0.5;
    x3[k] = x[k] * 3.0;
  }
  int64_t shape[2] = {8, 8};
  for (int a = 0; a < nspec; a++) {
    shmap_array *src = NULL;
    OK(shmap_array_from_host_sharded(&src, m, specs[a], SHMAP_F64, 2, shape,
                                     x),
       "from_host_sharded");
    for (int b = 0; b < nspec && src; b++) {
      char what[128];
      snprintf(what, sizeof what, "reshard %s -> %s (process axes %s)",
               specs[a], specs[b], axes ? axes : "default");
      uint64_t before = remote_bytes(m);
      shmap_array *dst = NULL;
      OK(shmap_array_reshard(&dst, src, specs[b]), what);
      uint64_t moved = remote_bytes(m) - before;
      uint64_t want = expected_bytes(m, specs[a], specs[b]);
      EXPECT(moved == want, "%s: %llu bytes from other processes, want %llu",
             what, (unsigned long long)moved, (unsigned long long)want);
      if (dst) {
        char spec[64];
        shmap_array_spec(dst, spec, sizeof spec);
        expect_array(dst, x, what);
      }
      shmap_array_destroy(dst);
      /* A map reading the array with another spec does the same. */
      dst = NULL;
      OK(shmap_map(m, scale, NULL, 1, &src, &specs[b], 1, &dst, &specs[b]),
         what);
      if (dst)
        expect_array(dst, x3, what);
      shmap_array_destroy(dst);
    }
    shmap_array_destroy(src);
  }
  shmap_mesh_destroy(m);
}

/* ---- replication ---------------------------------------------------------- */

/* Three i32 per device: element 1 is 5 on i=2, 0 elsewhere. */
static int uneven(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int64_t three = 3;
  shmap_block *b = shmap_out(ctx, 0, SHMAP_I32, 1, &three);
  if (!b)
    return -1;
  int32_t *v = b->data;
  int i = shmap_axis_index(ctx, "i");
  v[0] = 0;
  v[1] = i == 2 ? 5 : 0;
  v[2] = 0;
  return 0;
}

/* Device 5 returns two elements, the others one. */
static int shape_5(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int64_t n = shmap_ctx_device(ctx) == 5 ? 2 : 1;
  shmap_block *b = shmap_out(ctx, 0, SHMAP_I32, 1, &n);
  return b ? 0 : -1;
}

static void test_replication(void)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh");
  const char *spec = "P('j')";
  shmap_array *out = NULL;
  int rc = shmap_map(m, uneven, NULL, 0, NULL, NULL, 1, &out, &spec);
  char n0[128], n4[128], want[1024];
  devname(m, 0, "i=0, j=0", n0, sizeof n0);
  devname(m, 4, "i=2, j=0", n4, sizeof n4);
  snprintf(want, sizeof want,
           "output 0 with out_specs[0] \"P('j')\" is not replicated along "
           "axis 'i', which the spec leaves out: %s and %s differ at block "
           "element [1]: 0 vs 5 (name the axis in the out spec, or pass "
           "SHMAP_NO_CHECK_REP to use the block at coordinate 0)", n0, n4);
  int same = same_everywhere(shmap_errmsg());
  EXPECT(rc == SHMAP_EREPLICATION && !out && same &&
             strcmp(shmap_errmsg(), want) == 0,
         "rc %d (same everywhere: %d) message: %s\nwant: %s", rc, same,
         shmap_errmsg(), want);
  /* Unchecked: every holder gets the copy at coordinate 0 of i. */
  rc = shmap_map_flags(m, uneven, NULL, 0, NULL, NULL, 1, &out, &spec,
                       SHMAP_NO_CHECK_REP);
  OK(rc, "unchecked map");
  for (int d = 0; out && d < 8; d++) {
    shmap_block b;
    if (shmap_mesh_device_process(m, d) != me)
      continue; /* its block is in that process */
    OK(shmap_array_block(out, d, &b, NULL), "block");
    if (b.data)
      EXPECT(((int32_t *)b.data)[1] == 0, "unchecked: device %d holds %d", d,
             ((int32_t *)b.data)[1]);
  }
  shmap_array_destroy(out);
  out = NULL;

  /* Shapes that differ between devices of different processes. */
  spec = "P(('i','j'))";
  rc = shmap_map(m, shape_5, NULL, 0, NULL, NULL, 1, &out, &spec);
  char n5[128];
  devname(m, 5, "i=2, j=1", n5, sizeof n5);
  snprintf(want, sizeof want,
           "output 0: %s returned i32[1] but %s returned i32[2]", n0, n5);
  same = same_everywhere(shmap_errmsg());
  EXPECT(rc == SHMAP_EMISMATCH && !out && same &&
             strcmp(shmap_errmsg(), want) == 0,
         "rc %d (same everywhere: %d) message: %s\nwant: %s", rc, same,
         shmap_errmsg(), want);
  shmap_mesh_destroy(m);
}

/* ---- sub-meshes and transfers ------------------------------------------------ */

/* out = in + 1000 * (device's coordinate on the mesh's first axis + 1). */
static int mark(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *out = shmap_out(ctx, 0, in->dtype, in->rank, in->shape);
  if (!out)
    return -1;
  for (int64_t k = 0; k < shmap_block_numel(in); k++)
    ((double *)out->data)[k] = ((const double *)in->data)[k] + 1.0;
  return 0;
}

static int psum_stage(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *out = shmap_out(ctx, 0, in->dtype, in->rank, in->shape);
  if (!out)
    return -1;
  memcpy(out->data, in->data, shmap_block_nbytes(in));
  return shmap_psum(ctx, out, "data");
}

static void test_submeshes(void)
{
  /* Stages: with R = 2 each stage lives in one process (the other runs
   * none of its devices); with R = 4 each device in its own. */
  shmap_mesh *m = NULL, *s0 = NULL, *s1 = NULL, *odd = NULL;
  OK(shmap_mesh_create(&m, "stage=2, data=2"), "mesh");
  OK(shmap_mesh_slice(&s0, m, "stage=0"), "slice stage=0");
  OK(shmap_mesh_slice(&s1, m, "stage=1"), "slice stage=1");
  int devs[2] = {3, 0};
  OK(shmap_mesh_submesh(&odd, m, "k=2", devs), "submesh of devices 3, 0");
  if (!m || !s0 || !s1 || !odd) {
    shmap_mesh_destroy(odd);
    shmap_mesh_destroy(s1);
    shmap_mesh_destroy(s0);
    shmap_mesh_destroy(m);
    return;
  }
  for (int d = 0; d < 2; d++) {
    EXPECT(shmap_mesh_device_process(s1, d) ==
               shmap_mesh_device_process(m, 2 + d),
           "slice device %d on process %d", d, shmap_mesh_device_process(s1, d));
    EXPECT(shmap_mesh_device_process(odd, d) ==
               shmap_mesh_device_process(m, devs[d]),
           "submesh device %d on process %d", d,
           shmap_mesh_device_process(odd, d));
  }
  EXPECT(shmap_mesh_set_process_axes(s0, "data") == SHMAP_ESTATE &&
             strstr(shmap_errmsg(), "a sub-mesh's devices run in the "
                                    "processes of its parent's devices"),
         "process axes of a slice: %s", shmap_errmsg());

  double x[32], want[32];
  int64_t shape[2] = {4, 8};
  for (int k = 0; k < 32; k++)
    x[k] = (double)k * 0.25;
  shmap_array *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;
  const char *pd = "P('data')", *pn = "P(None,'data')";
  OK(shmap_array_from_host_sharded(&a, s0, pd, SHMAP_F64, 2, shape, x),
     "import on stage 0");
  OK(shmap_map(s0, mark, NULL, 1, &a, &pd, 1, &b, &pd), "map on stage 0");
  for (int k = 0; k < 32; k++)
    want[k] = x[k] + 1.0;
  if (b)
    expect_array(b, want, "stage 0 output");
  /* To the other stage, with another layout, then a psum there. */
  if (b) {
    /* The statistics are this process's: one block built per device of
     * stage 1 that runs here. */
    shmap_mesh_stats_reset(s1);
    OK(shmap_array_transfer(&c, b, s1, pn), "transfer to stage 1");
    shmap_stats st;
    memset(&st, 0, sizeof st);
    OK(shmap_mesh_stats(s1, &st), "stats");
    uint64_t mine = 0;
    for (int dv = 0; dv < shmap_mesh_ndevices(s1); dv++)
      mine += shmap_mesh_device_process(s1, dv) == shmap_process_rank();
    EXPECT(st.blocks_built == mine,
           "transfer to stage 1: %llu blocks built, this process runs %llu "
           "of its devices", (unsigned long long)st.blocks_built,
           (unsigned long long)mine);
  }
  if (c)
    expect_array(c, want, "transferred to stage 1");
  if (c)
    OK(shmap_map(s1, psum_stage, NULL, 1, &c, &pn, 1, &d, &pd), "psum on stage 1");
  /* psum over data of column halves: rows 0-1 get col-half sums... each
   * device's block is (4, 4); the sum of the two halves, replicated. */
  double sum[16];
  for (int r = 0; r < 4; r++)
    for (int col = 0; col < 4; col++)
      sum[r * 4 + col] = want[r * 8 + col] + want[r * 8 + 4 + col];
  if (d) {
    /* Out P('data') of a (4,4) block: rows stack to (8, 4). */
    double stacked[32];
    for (int k = 0; k < 16; k++)
      stacked[k] = stacked[16 + k] = sum[k];
    expect_array(d, stacked, "psum on stage 1");
  }
  /* To a sub-mesh that mixes both stages, whole. */
  if (b)
    OK(shmap_array_transfer(&e, b, odd, "P()"), "transfer to devices 3, 0");
  if (e)
    expect_array(e, want, "transferred to devices 3, 0");
  shmap_array_destroy(e);
  shmap_array_destroy(d);
  shmap_array_destroy(c);
  shmap_array_destroy(b);
  shmap_array_destroy(a);
  shmap_mesh_destroy(odd);
  shmap_mesh_destroy(s1);
  shmap_mesh_destroy(s0);
  shmap_mesh_destroy(m);
}

/* ---- partial-manual and nested maps ----------------------------------------- */

static int inner_psum(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *out = shmap_out(ctx, 0, in->dtype, in->rank, in->shape);
  if (!out)
    return -1;
  memcpy(out->data, in->data, shmap_block_nbytes(in));
  return shmap_psum(ctx, out, "j");
}

/* Over i (manual): psum over i, then a nested map over j. */
static int outer(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *t = shmap_block_alloc(ctx, in->dtype, in->rank, in->shape);
  if (!t)
    return -1;
  memcpy(t->data, in->data, shmap_block_nbytes(in));
  int rc = shmap_psum(ctx, t, "i");
  if (rc)
    return rc;
  const shmap_block *nin[1] = {t};
  shmap_block *nout[1] = {NULL};
  const char *ns = "P(None,'j')", *os = "P(None,'j')";
  rc = shmap_map_nested(ctx, inner_psum, NULL, 1, nin, &ns, 1, nout, &os, NULL);
  if (rc)
    return rc;
  shmap_block *out = shmap_out(ctx, 0, in->dtype, in->rank, in->shape);
  if (!out)
    return -1;
  memcpy(out->data, nout[0]->data, shmap_block_nbytes(nout[0]));
  return 0;
}

static void test_nested(const char *axes)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh");
  if (axes)
    OK(shmap_mesh_set_process_axes(m, axes), "process axes");
  double x[64];
  int64_t shape[2] = {8, 8};
  for (int k = 0; k < 64; k++)
    x[k] = 1.0 / (double)(k + 3);
  shmap_array *a = NULL, *out = NULL;
  OK(shmap_array_from_host(&a, SHMAP_F64, 2, shape, x), "from_host");
  const char *in = "P('i')", *os = "P()";
  shmap_map_opts o = {.manual_axes = "i"};
  OK(shmap_map_ex(m, outer, NULL, 1, &a, &in, 1, &out, &os, &o),
     "map_ex over i with a nested map over j");
  /* The serial reference: s = left fold over i of the (2, 8) row blocks;
   * then each column half j gets the left fold over j of its (2, 4) part
   * (the nested psum), written back to both halves. */
  double s[16], want[16];
  for (int k = 0; k < 16; k++) {
    s[k] = x[k];
    for (int i = 1; i < 4; i++)
      s[k] += x[i * 16 + k];
  }
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 4; c++) {
      double v = s[r * 8 + c] + s[r * 8 + 4 + c];
      want[r * 8 + c] = want[r * 8 + 4 + c] = v;
    }
  if (out)
    expect_array(out, want, axes ? "nested (process axes)" : "nested");
  shmap_array_destroy(out);
  shmap_array_destroy(a);
  shmap_mesh_destroy(m);
}

/* Slices of a map over 'a' that nest differently (what: 0 over 'b' and
 * 'c', with a psum over 'a' from the inner bodies; 1 slice a=1 does not
 * nest; 2 slice a=0 nests twice), over processes: SHMAP_EMISMATCH on every
 * process, naming the nested calls, never a hang. */
static int differ_inner(shmap_ctx *ctx, void *arg)
{
  const int *what = arg;
  double v = 1;
  shmap_block b = {&v, SHMAP_F64, 1, {1}};
  return *what == 0 || *what == 100 ? shmap_psum(shmap_ctx_outer(ctx), &b, "a")
                                    : 0;
}

static int differ_outer(shmap_ctx *ctx, void *arg)
{
  const int *what = arg;
  int a = shmap_axis_index(ctx, "a");
  shmap_map_opts ob = {.manual_axes = "b"}, oc = {.manual_axes = "c"};
  const shmap_map_opts *o = *what == 0 && a == 1 ? &oc : &ob;
  if (*what == 1 && a == 1)
    return 0;
  int rc = shmap_map_nested(ctx, differ_inner, arg, 0, NULL, NULL, 0, NULL,
                            NULL, o);
  if (!rc && *what == 2 && a == 0)
    rc = shmap_map_nested(ctx, differ_inner, arg, 0, NULL, NULL, 0, NULL, NULL,
                          o);
  return rc;
}

static void test_nested_differ(const char *axes)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "a=2, b=2, c=2"), "mesh");
  if (axes)
    OK(shmap_mesh_set_process_axes(m, axes), "process axes");
  shmap_map_opts o = {.manual_axes = "a"};
  static const char *const need[3][2] = {
      {"called shmap_map_nested(over 'b', 0 inputs",
       "called shmap_map_nested(over 'c', 0 inputs"},
      {"called shmap_map_nested(over 'b', 0 inputs", "returned from its body"},
      {"called shmap_map_nested(over 'b', 0 inputs", "returned from its body"},
  };
  for (int what = 0; what < 3; what++) {
    int rc = shmap_map_ex(m, differ_outer, &what, 0, NULL, NULL, 0, NULL,
                          NULL, &o);
    const char *msg = shmap_errmsg();
    EXPECT(rc == SHMAP_EMISMATCH, "nested differ %d (%s): rc %d: %s", what,
           axes ? axes : "default placement", rc, rc ? msg : "");
    for (int k = 0; k < 2 && rc; k++)
      EXPECT(strstr(msg, need[what][k]), "nested differ %d (%s): lacks "
             "\"%s\": %s", what, axes ? axes : "default placement",
             need[what][k], msg);
    /* The same nested map everywhere works after it. */
    int ok = 100;
    OK(shmap_map_ex(m, differ_outer, &ok, 0, NULL, NULL, 0, NULL, NULL, &o),
       "nested after a mismatch");
  }
  shmap_mesh_destroy(m);
}

int main(void)
{
  gethostname(host, sizeof host - 1);
  R = shmap_process_count();
  me = shmap_process_rank();
  test_reshard(NULL);
  if (R <= 2)
    test_reshard("j");
  test_reshard("('j','i')");
  test_replication();
  test_submeshes();
  test_nested(NULL);
  if (R <= 2)
    test_nested("j");
  test_nested_differ(NULL);
  test_nested_differ(R <= 2 ? "b" : "('b', 'c')");
  if (failures)
    fprintf(stderr, "[process %d of %d] %d failure%s\n", me, R, failures,
            failures == 1 ? "" : "s");
  else if (me == 0)
    printf("test_mpi_parts: %d process%s: all passed\n", R, R == 1 ? "" : "es");
  return failures ? 1 : 0;
}
