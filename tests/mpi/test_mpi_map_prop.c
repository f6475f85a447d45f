/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_map_prop.c - property tests of maps and resharding with the
 * devices spread over the processes of an MPI job, against the serial
 * model of tests/refmodel.c (SEMANTICS.md sections 3 and 5), bit for bit.
 *
 * Every process draws the same cases from the same seed (SPMD); each case
 * depends only on the seed and its number.  A case draws a mesh of 4, 8,
 * 12 or 16 devices (1 to 4 axes, so 1, 2 and 4 processes divide it), the
 * default placement or random process axes, and one of:
 *
 *   - a map (shmap_map_flags): one or two inputs of any dtype and rank 1
 *     to 3, each a host array, an array sharded by another spec (read with
 *     the map's in spec: resharded on the way in), an explicit reshard of
 *     one to the in spec, or an array already laid out by it; random in
 *     specs and out specs (replicated dimensions, axes left out, several
 *     axes per dimension, random text styles), SHMAP_NO_CHECK_REP at
 *     random; bodies that transform their block by a function of the
 *     device's axis indices, so outputs that leave out an axis they vary
 *     along fail the replication check.  Then an output (its blocks in the
 *     processes of their devices) is resharded to a random spec, once with
 *     shmap_array_reshard and once by a map reading it with that spec;
 *   - a partial-manual map (shmap_map_ex over random manual axes) of an
 *     array laid out over all axes, and in half the cases a nested map
 *     over random free axes that returns its block and its psum over the
 *     inner axes.
 *
 * The model gives every device's block and the assembled outputs (or a
 * replication error).  Every process checks the outputs' values
 * (shmap_array_to_host), its own devices' blocks and offsets
 * (shmap_array_block; other processes' devices show NULL data),
 * shmap_array_to_host_local, what its own devices' bodies saw, and that
 * every process got the same return code and message.
 *
 * SHMAPTEST_PROP_SEED (default below), SHMAPTEST_PROP_CASES (default 160) and
 * SHMAPTEST_PROP_ONLY=N (case N alone, described) choose the cases; failures
 * print the seed and the case number.  A plain program: Check would fork
 * after MPI_Init.
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpiutil.h"
#include <shmap.h>

#include "../refmodel.h"

#define DEFAULT_SEED 0x5eed3a9fULL
#define DEFAULT_CASES 160
#define MAXDEV 16
#define MAXEL 4096

static int failures, R, me;
static uint64_t g_seed = DEFAULT_SEED;
static char g_desc[4096]; /* the running case, for messages */
/* What the cases covered, printed at the end. */
static long n_maps, n_rep_err, n_unchecked_bad, n_source[4], n_reshard,
    n_partial, n_nested, n_everyone, n_pax;
static unsigned dtypes_seen;

#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "[process %d] %s:%d: %s: ", me, __FILE__, __LINE__,     \
              g_desc);                                                        \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      failures++;                                                             \
    }                                                                         \
  } while (0)

static int same_everywhere(const char *text)
{
  return same_everywhere_of(R, text);
}

/* The outcome of a library call: the same in every process. */
static void expect_agreed(const char *what, int rc)
{
  char text[1024];
  snprintf(text, sizeof text, "%d %s", rc, rc ? shmap_errmsg() : "");
  EXPECT(same_everywhere(text), "%s: processes disagree; here: %s", what,
         text);
}

/* ---- random meshes and specs ------------------------------------------ */

static const char *const POOL[] = {"i", "j", "k", "x", "y",
                                   "data", "model", "pipe", "_a", "b2"};

typedef struct pmesh {
  ref_mesh rm;
  int ndev;
  char text[160];
  char pax[96]; /* process axes; "" for the default placement */
} pmesh;

/* 1 to 4 axes of sizes 1 to 4, 4 to 16 devices, a multiple of 4. */
static void gen_mesh(uint64_t *rng, pmesh *pm)
{
  ref_mesh *m = &pm->rm;
  do {
    int used[10] = {0}, prod = 1;
    memset(pm, 0, sizeof *pm);
    m->naxes = t_rng_range(rng, 1, 4);
    for (int a = 0; a < m->naxes; a++) {
      int p, size = t_rng_range(rng, 1, 4);
      do
        p = t_rng_range(rng, 0, 9);
      while (used[p]);
      used[p] = 1;
      snprintf(m->names[a], sizeof m->names[a], "%s", POOL[p]);
      while (prod * size > MAXDEV)
        size--;
      m->sizes[a] = size;
      prod *= size;
    }
    pm->ndev = prod;
  } while (pm->ndev % 4 != 0);
  for (int a = 0; a < m->naxes; a++) {
    size_t len = strlen(pm->text);
    int sp = t_rng_range(rng, 0, 3);
    snprintf(pm->text + len, sizeof pm->text - len, "%s%s%s=%s%d",
             a ? "," : "", a && sp & 1 ? " " : "", m->names[a],
             sp == 3 ? " " : "", m->sizes[a]);
  }
  /* Process axes: a random ordered subset whose sizes' product 4 divides
   * (so every R of 1, 2 and 4 does), else the default. */
  if (t_rng_range(rng, 0, 2) != 0) {
    int perm[REF_MAX_AXES], prod = 1;
    for (int a = 0; a < m->naxes; a++)
      perm[a] = a;
    for (int a = m->naxes - 1; a > 0; a--) {
      int b = t_rng_range(rng, 0, a), t = perm[a];
      perm[a] = perm[b];
      perm[b] = t;
    }
    int k = t_rng_range(rng, 1, m->naxes);
    size_t len = 0;
    len += (size_t)snprintf(pm->pax, sizeof pm->pax, "(");
    for (int i = 0; i < k; i++) {
      prod *= m->sizes[perm[i]];
      len += (size_t)snprintf(pm->pax + len, sizeof pm->pax - len, "%s'%s'",
                              i ? ", " : "", m->names[perm[i]]);
    }
    snprintf(pm->pax + len, sizeof pm->pax - len, ")");
    if (k == 1)
      snprintf(pm->pax, sizeof pm->pax, "%s", m->names[perm[0]]);
    if (prod % 4 != 0)
      pm->pax[0] = '\0';
  }
}

static shmap_mesh *make_mesh(uint64_t *rng, const pmesh *pm)
{
  shmap_mesh *mesh = NULL;
  int rc;
  if (t_rng_range(rng, 0, 1)) {
    const char *names[REF_MAX_AXES];
    for (int a = 0; a < pm->rm.naxes; a++)
      names[a] = pm->rm.names[a];
    rc = shmap_mesh_create_axes(&mesh, pm->rm.naxes, names, pm->rm.sizes);
  } else {
    rc = shmap_mesh_create(&mesh, pm->text);
  }
  EXPECT(rc == 0, "mesh \"%s\": %s", pm->text, shmap_errmsg());
  if (rc == 0 && pm->pax[0]) {
    rc = shmap_mesh_set_process_axes(mesh, pm->pax);
    EXPECT(rc == 0, "process axes %s: %s", pm->pax, shmap_errmsg());
  }
  if (rc != 0) {
    shmap_mesh_destroy(mesh);
    return NULL;
  }
  return mesh;
}

static void spec_put(uint64_t *rng, ref_spec *s, int d, int a)
{
  int pos = t_rng_range(rng, 0, s->naxes[d]);
  for (int k = s->naxes[d]; k > pos; k--)
    s->axes[d][k] = s->axes[d][k - 1];
  s->axes[d][pos] = a;
  s->naxes[d]++;
}

/* A random spec of length <= rank over the axes of `allowed`: each axis of
 * `must` is placed, each other allowed axis with probability 1/2, in
 * random entries in random order. */
static void gen_spec(uint64_t *rng, const ref_mesh *m, int rank,
                     unsigned allowed, unsigned must, ref_spec *s)
{
  memset(s, 0, sizeof *s);
  s->ndims = rank == 0 ? 0 : t_rng_range(rng, must ? 1 : 0, rank);
  if (s->ndims == 0)
    return;
  for (int a = 0; a < m->naxes; a++)
    if (((must >> a) & 1u) ||
        (((allowed >> a) & 1u) && t_rng_range(rng, 0, 1)))
      spec_put(rng, s, t_rng_range(rng, 0, s->ndims - 1), a);
}

/* A spec in a random text style: JAX P(...) with either quote or the short
 * form, random spacing, one-name tuples, None or (), trailing commas. */
static void spec_text(uint64_t *rng, const ref_mesh *m, const ref_spec *s,
                      char *buf, size_t n)
{
  int style = t_rng_range(rng, 0, 2);
  const char *q = style == 0 ? "'" : style == 1 ? "\"" : "";
  const char *sep = t_rng_range(rng, 0, 1) ? ", " : ",";
  size_t len;
  buf[0] = '\0';
  if (style != 2)
    snprintf(buf, n, "P(");
  for (int d = 0; d < s->ndims; d++) {
    len = strlen(buf);
    if (d)
      snprintf(buf + len, n - len, "%s", sep), len = strlen(buf);
    if (s->naxes[d] == 0) {
      snprintf(buf + len, n - len, "%s",
               t_rng_range(rng, 0, 3) ? "None" : "()");
    } else if (s->naxes[d] == 1 && t_rng_range(rng, 0, 3) != 0) {
      snprintf(buf + len, n - len, "%s%s%s", q, m->names[s->axes[d][0]], q);
    } else {
      snprintf(buf + len, n - len, "(");
      for (int k = 0; k < s->naxes[d]; k++) {
        len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s%s%s", k ? sep : "", q,
                 m->names[s->axes[d][k]], q);
      }
      len = strlen(buf);
      snprintf(buf + len, n - len, "%s)", s->naxes[d] == 1 ? "," : "");
    }
  }
  len = strlen(buf);
  if (style != 2)
    snprintf(buf + len, n - len, "%s)",
             s->ndims > 0 && t_rng_range(rng, 0, 4) == 0 ? "," : "");
}

static void mask_text(const ref_mesh *m, unsigned mask, char *buf, size_t n)
{
  size_t len = 0;
  int k = 0;
  len += (size_t)snprintf(buf, n, "(");
  for (int a = 0; a < m->naxes; a++)
    if (mask & (1u << a))
      len += (size_t)snprintf(buf + len, n - len, "%s'%s'", k++ ? ", " : "",
                              m->names[a]);
  snprintf(buf + len, n - len, ")");
  if (k == 1) /* one axis: its name */
    for (int a = 0; a < m->naxes; a++)
      if (mask & (1u << a))
        snprintf(buf, n, "%s", m->names[a]);
}

static int64_t gcd64(int64_t x, int64_t y)
{
  while (y) {
    int64_t t = x % y;
    x = y;
    y = t;
  }
  return x;
}

static int64_t lcm64(int64_t x, int64_t y)
{
  return x / gcd64(x, y) * y;
}

/* ---- data and the bodies' work ------------------------------------------ */

/* Random bytes; bool elements 0 or 1; all elements alike when constant. */
static void fill_bytes(uint64_t *rng, shmap_dtype dt, int64_t n, void *p,
                       int constant)
{
  size_t es = shmap_dtype_size(dt);
  unsigned char *b = p;
  for (int64_t e = 0; e < n; e++)
    for (size_t k = 0; k < es; k++) {
      if (constant && e > 0)
        b[e * (int64_t)es + (int64_t)k] = b[k];
      else
        b[e * (int64_t)es + (int64_t)k] =
            dt == SHMAP_BOOL ? (unsigned char)(t_rng_next(rng) & 1)
                             : (unsigned char)t_rng_next(rng);
    }
}

/* The bodies' work on n elements: bool flips with the parity of delta;
 * any other dtype adds a multiple of delta to each 1-, 2-, 4- or 8-byte
 * word of an element (wrapping), bit patterns of floats included. */
static void transform(shmap_dtype dt, void *p, int64_t n, int delta)
{
  size_t es = shmap_dtype_size(dt);
  size_t w = es > 8 ? 8 : es;
  uint64_t add = (uint64_t)(int64_t)delta * 0x9e3779b97f4a7c15ULL;
  unsigned char *b = p;
  if (delta == 0)
    return;
  if (dt == SHMAP_BOOL) {
    for (int64_t e = 0; e < n; e++)
      b[e] ^= (unsigned char)(delta & 1);
    return;
  }
  for (size_t off = 0; off < (size_t)n * es; off += w) {
    switch (w) {
    case 1:
      b[off] = (unsigned char)(b[off] + add);
      break;
    case 2: {
      uint16_t v;
      memcpy(&v, b + off, 2);
      v = (uint16_t)(v + add);
      memcpy(b + off, &v, 2);
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, b + off, 4);
      v = (uint32_t)(v + add);
      memcpy(b + off, &v, 4);
      break;
    }
    default: {
      uint64_t v;
      memcpy(&v, b + off, 8);
      v += add;
      memcpy(b + off, &v, 8);
      break;
    }
    }
  }
}

/* ---- checking an array against the model --------------------------------- */

/* Values (to_host), every block this process holds and its offset, NULL
 * data for the others' devices, and to_host_local.  gdata: the model's
 * global array laid out by `s`. */
static void check_array(shmap_mesh *mesh, const ref_mesh *m, shmap_array *x,
                        const ref_spec *s, shmap_dtype dt, int rank,
                        const int64_t gshape[], const void *gdata,
                        const char *what)
{
  size_t es = shmap_dtype_size(dt);
  int64_t gn = ref_numel(rank, gshape);
  int ndev = ref_ndev(m);
  if (x == NULL || shmap_array_dtype(x) != dt || shmap_array_rank(x) != rank) {
    EXPECT(0, "%s: wrong array (NULL, dtype or rank)", what);
    return;
  }
  for (int d = 0; d < rank; d++)
    if (shmap_array_shape(x)[d] != gshape[d]) {
      EXPECT(0, "%s: dim %d is %" PRId64 ", want %" PRId64, what, d,
             shmap_array_shape(x)[d], gshape[d]);
      return;
    }
  unsigned char *got = malloc((size_t)gn * es + 1);
  int rc = shmap_array_to_host(x, got);
  expect_agreed("to_host", rc);
  EXPECT(rc == 0, "%s: to_host: %s", what, shmap_errmsg());
  if (rc == 0 && memcmp(got, gdata, (size_t)gn * es) != 0) {
    int64_t e = 0;
    while (memcmp(got + e * (int64_t)es, (const char *)gdata + e * (int64_t)es,
                  es) == 0)
      e++;
    EXPECT(0, "%s: to_host differs first at element %" PRId64
           " (row-major, %s[%zu bytes])", what, e, shmap_dtype_name(dt), es);
  }

  /* Global element numbers of each device's block, from the model. */
  int64_t *idx = malloc((size_t)gn * sizeof *idx + 8);
  int64_t *bidx = malloc((size_t)gn * sizeof *bidx + 8);
  unsigned char *want = malloc((size_t)gn * es + 1);
  unsigned char *local = malloc((size_t)gn * es + 1);
  unsigned char *mine = calloc((size_t)gn + 1, 1);
  for (int64_t e = 0; e < gn; e++)
    idx[e] = e;
  /* to_host_local: elements of other processes' blocks stay as they are. */
  for (int64_t e = 0; e < (int64_t)((size_t)gn * es); e++)
    local[e] = (unsigned char)~((const unsigned char *)gdata)[e];
  rc = shmap_array_to_host_local(x, local);
  EXPECT(rc == 0, "%s: to_host_local: %s", what, shmap_errmsg());
  int64_t bshape[REF_MAX_RANK];
  for (int dev = 0; dev < ndev; dev++) {
    shmap_block b;
    int64_t off[SHMAP_MAX_RANK];
    int coords[REF_MAX_AXES];
    int own = shmap_mesh_device_process(mesh, dev) == me;
    rc = shmap_array_block(x, dev, &b, off);
    if (!own) { /* its block is in that process only */
      EXPECT(rc == SHMAP_EINVAL, "%s: block of device %d of process %d: %d",
             what, dev, shmap_mesh_device_process(mesh, dev), rc);
      continue;
    }
    if (rc != 0) {
      EXPECT(0, "%s: block of device %d: %s", what, dev, shmap_errmsg());
      continue;
    }
    ref_slice(m, s, 8, rank, gshape, idx, dev, bshape, bidx);
    ref_slice(m, s, es, rank, gshape, gdata, dev, bshape, want);
    ref_coords(m, dev, coords);
    int64_t bn = ref_numel(rank, bshape);
    int shape_ok = b.dtype == dt && b.rank == rank;
    for (int d = 0; d < rank; d++)
      shape_ok &= b.shape[d] == bshape[d] &&
                  off[d] == ref_index(m, s, d, coords) * bshape[d];
    EXPECT(shape_ok, "%s: device %d: block shape or offset differ", what, dev);
    if (shape_ok && bn > 0 &&
        (b.data == NULL || memcmp(b.data, want, (size_t)bn * es) != 0))
      EXPECT(0, "%s: device %d (process %d): block contents differ", what,
             dev, me);
    for (int64_t e = 0; e < bn; e++)
      mine[bidx[e]] = 1;
  }
  for (int64_t e = 0; e < gn; e++) {
    const unsigned char *w = (const unsigned char *)gdata + e * (int64_t)es;
    int ok = 1;
    for (size_t k = 0; k < es; k++)
      ok &= local[e * (int64_t)es + (int64_t)k] ==
            (mine[e] ? w[k] : (unsigned char)~w[k]);
    if (!ok) {
      EXPECT(0, "%s: to_host_local: element %" PRId64 " (%s this process's "
             "blocks) differs", what, e, mine[e] ? "in" : "outside");
      break;
    }
  }
  free(idx);
  free(bidx);
  free(want);
  free(local);
  free(mine);
  free(got);
}

/* ---- case 1: a map over every axis ---------------------------------------- */

typedef struct pin {
  shmap_dtype dt;
  int rank;
  int64_t gshape[REF_MAX_RANK];
  int source; /* 0 host, 1 sharded by src, 2 reshard of src to spec, 3 spec */
  ref_spec spec, src;
  char text[256], src_text[256];
  void *data;
} pin;

typedef struct pout {
  int src;             /* the input it transforms */
  int w[REF_MAX_AXES]; /* delta = sum of w[a] * index on axis a */
  int api;             /* 0 out_copy, 1 out + memcpy, 2 alloc + out_set */
  ref_spec spec;
  char text[256];
} pout;

typedef struct mcase {
  pmesh pm;
  int nin, nout;
  pin in[2];
  pout out[2];
  unsigned flags;
} mcase;

static int delta_of(const ref_mesh *m, const pout *o, const int idx[])
{
  int delta = 0;
  for (int a = 0; a < m->naxes; a++)
    delta += o->w[a] * idx[a];
  return delta;
}

static int map_body(shmap_ctx *ctx, void *arg)
{
  const mcase *c = arg;
  const ref_mesh *m = &c->pm.rm;
  int idx[REF_MAX_AXES];
  /* The device's indices from the library's axis_index. */
  for (int a = 0; a < m->naxes; a++) {
    idx[a] = shmap_axis_index(ctx, m->names[a]);
    if (idx[a] < 0)
      return shmap_fail(ctx, "axis_index(%s): %s", m->names[a],
                        shmap_errmsg());
  }
  for (int k = 0; k < c->nout; k++) {
    const pout *o = &c->out[k];
    const shmap_block *in = shmap_in(ctx, o->src);
    shmap_block *b;
    if (in == NULL)
      return shmap_fail(ctx, "shmap_in(%d): %s", o->src, shmap_errmsg());
    switch (o->api) {
    case 0:
      b = shmap_out_copy(ctx, k, in);
      break;
    case 1:
      b = shmap_out(ctx, k, in->dtype, in->rank, in->shape);
      if (b != NULL)
        memcpy(b->data, in->data, shmap_block_nbytes(in));
      break;
    default:
      b = shmap_block_alloc(ctx, in->dtype, in->rank, in->shape);
      if (b != NULL)
        memcpy(b->data, in->data, shmap_block_nbytes(in));
      break;
    }
    if (b == NULL)
      return shmap_fail(ctx, "output %d: %s", k, shmap_errmsg());
    transform(b->dtype, b->data, shmap_block_numel(b), delta_of(m, o, idx));
    if (o->api == 2 && shmap_out_set(ctx, k, b) != 0)
      return shmap_fail(ctx, "shmap_out_set(%d): %s", k, shmap_errmsg());
  }
  return 0;
}

static int copy_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  if (x == NULL)
    return shmap_fail(ctx, "shmap_in(0): %s", shmap_errmsg());
  return shmap_out_copy(ctx, 0, x) ? 0 : shmap_fail(ctx, "out_copy");
}

static void describe_map(long id, const mcase *c)
{
  size_t len;
  snprintf(g_desc, sizeof g_desc,
           "seed %" PRIu64 " case %ld (rerun: SHMAPTEST_PROP_SEED=%" PRIu64
           " SHMAPTEST_PROP_ONLY=%ld): map on mesh \"%s\" (processes over %s)%s",
           g_seed, id, g_seed, id, c->pm.text,
           c->pm.pax[0] ? c->pm.pax : "(default)",
           c->flags & SHMAP_NO_CHECK_REP ? ", SHMAP_NO_CHECK_REP" : "");
  for (int k = 0; k < c->nin; k++) {
    const pin *in = &c->in[k];
    len = strlen(g_desc);
    snprintf(g_desc + len, sizeof g_desc - len, "; in[%d] %s[",
             k, shmap_dtype_name(in->dt));
    for (int d = 0; d < in->rank; d++) {
      len = strlen(g_desc);
      snprintf(g_desc + len, sizeof g_desc - len, "%s%" PRId64, d ? "," : "",
               in->gshape[d]);
    }
    len = strlen(g_desc);
    if (in->source == 1 || in->source == 2)
      snprintf(g_desc + len, sizeof g_desc - len, "] %s \"%s\"",
               in->source == 1 ? "sharded by" : "resharded from",
               in->src_text);
    else
      snprintf(g_desc + len, sizeof g_desc - len, "] %s",
               in->source == 0 ? "from host" : "sharded by the in spec");
    len = strlen(g_desc);
    snprintf(g_desc + len, sizeof g_desc - len, ", in spec \"%s\"",
             in->text);
  }
  for (int k = 0; k < c->nout; k++) {
    const pout *o = &c->out[k];
    len = strlen(g_desc);
    snprintf(g_desc + len, sizeof g_desc - len, "; out[%d] = in[%d] + (", k,
             o->src);
    for (int a = 0; a < c->pm.rm.naxes; a++) {
      len = strlen(g_desc);
      snprintf(g_desc + len, sizeof g_desc - len, "%s%d*%s", a ? " + " : "",
               o->w[a], c->pm.rm.names[a]);
    }
    len = strlen(g_desc);
    snprintf(g_desc + len, sizeof g_desc - len, ") via %s, out spec \"%s\"",
             o->api == 0 ? "shmap_out_copy"
             : o->api == 1 ? "shmap_out"
                           : "shmap_out_set",
             o->text);
  }
}

static void gen_map_case(uint64_t *rng, mcase *c)
{
  const ref_mesh *m = &c->pm.rm;
  unsigned all = (1u << m->naxes) - 1u;
  c->nin = t_rng_range(rng, 0, 3) == 0 ? 2 : 1;
  c->nout = t_rng_range(rng, 0, 3) == 0 ? 2 : 1;
  int legal = t_rng_range(rng, 0, 9) < 6;
  c->flags = t_rng_range(rng, 0, 9) < 3 ? SHMAP_NO_CHECK_REP : 0u;
  for (int k = 0; k < c->nin; k++) {
    pin *in = &c->in[k];
    int64_t n = 1;
    in->dt = (shmap_dtype)t_rng_range(rng, 0, SHMAP_NDTYPES - 1);
    in->rank = t_rng_range(rng, 1, 3);
    in->source = t_rng_range(rng, 0, 3);
    gen_spec(rng, m, in->rank, all, 0, &in->spec);
    gen_spec(rng, m, in->rank, all, 0, &in->src);
    if (in->source == 0 || in->source == 3)
      in->src = in->spec;
    for (int d = 0; d < in->rank; d++) {
      int64_t l = lcm64(ref_count(m, &in->spec, d), ref_count(m, &in->src, d));
      in->gshape[d] = l * t_rng_range(rng, 1, l >= 8 ? 1 : 3);
      if (t_rng_range(rng, 0, 39) == 0)
        in->gshape[d] = 0;
      n *= in->gshape[d];
    }
    /* Each count divides the device count: at most 16^3 elements when
     * every dimension is one multiple of its lcm. */
    for (int d = 0; d < in->rank && n > MAXEL; d++) {
      in->gshape[d] =
          lcm64(ref_count(m, &in->spec, d), ref_count(m, &in->src, d));
      n = ref_numel(in->rank, in->gshape);
    }
    spec_text(rng, m, &in->spec, in->text, sizeof in->text);
    spec_text(rng, m, &in->src, in->src_text, sizeof in->src_text);
  }
  for (int k = 0; k < c->nout; k++) {
    pout *o = &c->out[k];
    unsigned must = 0;
    o->src = t_rng_range(rng, 0, c->nin - 1);
    o->api = t_rng_range(rng, 0, 2);
    for (int a = 0; a < m->naxes; a++)
      o->w[a] = t_rng_range(rng, 0, 2) == 0 ? t_rng_range(rng, 1, 4) : 0;
    if (legal) {
      /* name every axis the block may vary along */
      must = ref_spec_mask(&c->in[o->src].spec);
      for (int a = 0; a < m->naxes; a++)
        if (o->w[a])
          must |= 1u << a;
    }
    gen_spec(rng, m, c->in[o->src].rank, all, must & all, &o->spec);
    spec_text(rng, m, &o->spec, o->text, sizeof o->text);
  }
  for (int k = 0; k < c->nin; k++) {
    pin *in = &c->in[k];
    int64_t n = ref_numel(in->rank, in->gshape);
    in->data = malloc((size_t)n * shmap_dtype_size(in->dt) + 1);
    fill_bytes(rng, in->dt, n, in->data, t_rng_range(rng, 0, 9) == 0);
  }
}

/* Device numbers named "device N" in msg, in order (at most max). */
static int named_devices(const char *msg, int devs[], int max)
{
  int n = 0;
  for (const char *p = strstr(msg, "device "); p != NULL && n < max;
       p = strstr(p + 7, "device ")) {
    char *end;
    long v = strtol(p + 7, &end, 10);
    if (end != p + 7) {
      int dup = 0;
      for (int k = 0; k < n; k++)
        dup |= devs[k] == (int)v;
      if (!dup)
        devs[n++] = (int)v;
    }
  }
  return n;
}

/* A sharded input as the case says: host, sharded by src, resharded. */
static int make_input(shmap_mesh *mesh, const ref_mesh *m, const pin *in,
                      shmap_array **out)
{
  int rc;
  *out = NULL;
  if (in->source == 0) {
    rc = shmap_array_from_host(out, in->dt, in->rank, in->gshape, in->data);
    EXPECT(rc == 0, "from_host: %s", shmap_errmsg());
    return rc;
  }
  const char *text = in->source == 3 ? in->text : in->src_text;
  const ref_spec *s = in->source == 3 ? &in->spec : &in->src;
  shmap_array *a = NULL;
  rc = shmap_array_from_host_sharded(&a, mesh, text, in->dt, in->rank,
                                     in->gshape, in->data);
  EXPECT(rc == 0, "from_host_sharded \"%s\": %s", text, shmap_errmsg());
  if (rc)
    return rc;
  check_array(mesh, m, a, s, in->dt, in->rank, in->gshape, in->data,
              "the sharded input");
  if (in->source != 2) {
    *out = a;
    return 0;
  }
  rc = shmap_array_reshard(out, a, in->text);
  expect_agreed("reshard of an input", rc);
  EXPECT(rc == 0, "reshard \"%s\" -> \"%s\": %s", in->src_text, in->text,
         shmap_errmsg());
  if (rc == 0)
    check_array(mesh, m, *out, &in->spec, in->dt, in->rank, in->gshape,
                in->data, "the resharded input");
  shmap_array_destroy(a);
  return rc;
}

static void run_map_case(uint64_t *rng, long id, mcase *c, shmap_mesh *mesh)
{
  const ref_mesh *m = &c->pm.rm;
  int ndev = c->pm.ndev;
  shmap_array *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
  const char *is[2], *os[2];
  void *blocks[2][MAXDEV];
  int64_t bshape[2][REF_MAX_RANK], gshape[2][REF_MAX_RANK];
  void *gdata[2] = {NULL, NULL};
  int rep_bad[2] = {0, 0};
  ref_rep_err rep[2];
  memset(blocks, 0, sizeof blocks);
  (void)id;

  for (int k = 0; k < c->nin; k++) {
    if (make_input(mesh, m, &c->in[k], &in[k]) != 0)
      goto done;
    is[k] = c->in[k].text;
  }
  /* The model: each device's block of its input, transformed. */
  for (int k = 0; k < c->nout; k++) {
    const pout *o = &c->out[k];
    const pin *src = &c->in[o->src];
    size_t es = shmap_dtype_size(src->dt);
    os[k] = o->text;
    ref_block_shape(m, &src->spec, src->rank, src->gshape, bshape[k]);
    int64_t bn = ref_numel(src->rank, bshape[k]);
    for (int dev = 0; dev < ndev; dev++) {
      int coords[REF_MAX_AXES];
      int64_t bs[REF_MAX_RANK];
      blocks[k][dev] = malloc((size_t)bn * es + 1);
      ref_slice(m, &src->spec, es, src->rank, src->gshape, src->data, dev, bs,
                blocks[k][dev]);
      ref_coords(m, dev, coords);
      transform(src->dt, blocks[k][dev], bn, delta_of(m, o, coords));
    }
    ref_global_shape(m, &o->spec, src->rank, bshape[k], gshape[k]);
    gdata[k] = malloc((size_t)ref_numel(src->rank, gshape[k]) * es + 1);
    rep_bad[k] = ref_assemble(m, &o->spec, es, src->rank, bshape[k],
                              (const void *const *)blocks[k], gshape[k],
                              gdata[k], &rep[k]);
  }

  int rc = shmap_map_flags(mesh, map_body, c, c->nin, in, is, c->nout, out, os,
                           c->flags);
  n_maps++;
  for (int k = 0; k < c->nin; k++) {
    n_source[c->in[k].source]++;
    dtypes_seen |= 1u << c->in[k].dt;
  }
  if ((rep_bad[0] || rep_bad[1]) && !(c->flags & SHMAP_NO_CHECK_REP))
    n_rep_err++;
  else if (rep_bad[0] || rep_bad[1])
    n_unchecked_bad++;
  expect_agreed("map", rc);
  if ((rep_bad[0] || rep_bad[1]) && !(c->flags & SHMAP_NO_CHECK_REP)) {
    const char *msg = shmap_errmsg();
    int k0 = rep_bad[0] ? 0 : 1;
    EXPECT(rc == SHMAP_EREPLICATION,
           "map returned %d (%s), want SHMAP_EREPLICATION (model: output %d, "
           "device %d differs from device %d at element %" PRId64 "); "
           "message: %s", rc, shmap_strerror(rc), k0, rep[k0].dev_b,
           rep[k0].dev_a, rep[k0].elem, rc ? msg : "");
    if (rc != SHMAP_EREPLICATION)
      goto done;
    EXPECT(out[0] == NULL && out[1] == NULL, "a failed map set outputs");
    /* The two devices named differ along an axis the out spec leaves out. */
    int devs[4], nd = named_devices(msg, devs, 4), ok = 0;
    for (int k = 0; k < c->nout && nd >= 2; k++) {
      int ca[REF_MAX_AXES], cb[REF_MAX_AXES], same = 1;
      unsigned mask = ref_spec_mask(&c->out[k].spec);
      if (devs[0] >= ndev || devs[1] >= ndev)
        break;
      ref_coords(m, devs[0], ca);
      ref_coords(m, devs[1], cb);
      for (int a = 0; a < m->naxes; a++)
        if (((mask >> a) & 1u) && ca[a] != cb[a])
          same = 0;
      ok |= same && memcmp(blocks[k][devs[0]], blocks[k][devs[1]],
                           (size_t)ref_numel(c->in[c->out[k].src].rank,
                                             bshape[k]) *
                               shmap_dtype_size(c->in[c->out[k].src].dt)) != 0;
    }
    EXPECT(ok, "the replication error does not name two devices whose "
           "blocks differ along an axis the out spec leaves out: %s", msg);
    goto done;
  }
  EXPECT(rc == 0, "map returned %d (%s), want 0: %s", rc, shmap_strerror(rc),
         rc ? shmap_errmsg() : "");
  if (rc != 0)
    goto done;
  for (int k = 0; k < c->nout; k++) {
    const pin *src = &c->in[c->out[k].src];
    char what[32];
    snprintf(what, sizeof what, "out[%d]", k);
    check_array(mesh, m, out[k], &c->out[k].spec, src->dt, src->rank,
                gshape[k], gdata[k], what);
  }

  /* Resharding an output whose blocks the processes hold: to a random
   * spec, explicitly and by a map reading it with that spec. */
  if (out[0] != NULL && t_rng_range(rng, 0, 1)) {
    const pin *src = &c->in[c->out[0].src];
    int rank = src->rank;
    ref_spec b;
    char btext[256];
    unsigned all = (1u << m->naxes) - 1u;
    int tries = 0;
    do { /* a spec that divides the output's shape */
      gen_spec(rng, m, rank, all, 0, &b);
      int64_t bs[REF_MAX_RANK];
      if (ref_block_shape(m, &b, rank, gshape[0], bs) == 0)
        break;
      memset(&b, 0, sizeof b);
    } while (++tries < 8);
    spec_text(rng, m, &b, btext, sizeof btext);
    size_t len = strlen(g_desc);
    snprintf(g_desc + len, sizeof g_desc - len, "; out[0] resharded to \"%s\"",
             btext);
    shmap_array *r = NULL, *o = NULL;
    n_reshard++;
    rc = shmap_array_reshard(&r, out[0], btext);
    expect_agreed("reshard", rc);
    EXPECT(rc == 0, "reshard: %s", shmap_errmsg());
    if (rc == 0)
      check_array(mesh, m, r, &b, src->dt, rank, gshape[0], gdata[0],
                  "out[0] resharded");
    const char *bt = btext;
    rc = shmap_map(mesh, copy_body, NULL, 1, &out[0], &bt, 1, &o, &bt);
    expect_agreed("map reading out[0]", rc);
    EXPECT(rc == 0, "map reading out[0] with the new spec: %s",
           shmap_errmsg());
    if (rc == 0)
      check_array(mesh, m, o, &b, src->dt, rank, gshape[0], gdata[0],
                  "out[0] read with the new spec");
    shmap_array_destroy(o);
    shmap_array_destroy(r);
  }

done:
  for (int k = 0; k < 2; k++) {
    shmap_array_destroy(in[k]);
    shmap_array_destroy(out[k]);
    free(gdata[k]);
    for (int dev = 0; dev < MAXDEV; dev++)
      free(blocks[k][dev]);
  }
}

/* ---- case 2: partial-manual and nested maps ------------------------------ */

typedef struct ncase {
  pmesh pm;
  unsigned manual, inner; /* inner == 0: no nested map */
  ref_spec src, in, nin;  /* array layout, outer in spec, nested spec */
  char src_text[256], in_text[256], nin_text[256], manual_text[96],
      inner_text[96];
  shmap_dtype dt;
  size_t es;
  int rank;
  int64_t shape[3];
  void *global;
  /* What the bodies of this process's devices saw. */
  unsigned char outer_seen[MAXDEV][MAXEL * 8];
  int64_t outer_shape[MAXDEV][3];
  unsigned char inner_seen[MAXDEV][MAXEL * 8];
  int64_t inner_shape[MAXDEV][3];
  int outer_ran[MAXDEV], inner_ran[MAXDEV];
} ncase;

/* The dtypes the nested psum is modelled for: integers (sums wrap) and
 * floats holding small integers (sums exact in any order). */
static const shmap_dtype NESTED_DTYPES[] = {
    SHMAP_I32, SHMAP_I64, SHMAP_I8, SHMAP_U8, SHMAP_I16,
    SHMAP_U16, SHMAP_U32, SHMAP_U64, SHMAP_F32, SHMAP_F64};

static int64_t get_int(shmap_dtype dt, const void *p, int64_t e)
{
  size_t es = shmap_dtype_size(dt);
  if (dt == SHMAP_F32)
    return (int64_t)((const float *)p)[e];
  if (dt == SHMAP_F64)
    return (int64_t)((const double *)p)[e];
  uint64_t u = 0;
  memcpy(&u, (const char *)p + e * (int64_t)es, es); /* little-endian */
  return (int64_t)u;
}

static void set_int(shmap_dtype dt, void *p, int64_t e, int64_t v)
{
  size_t es = shmap_dtype_size(dt);
  if (dt == SHMAP_F32)
    ((float *)p)[e] = (float)v;
  else if (dt == SHMAP_F64)
    ((double *)p)[e] = (double)v;
  else
    memcpy((char *)p + e * (int64_t)es, &v, es);
}

static int at_zero(const ref_mesh *m, int dev, unsigned mask)
{
  int coords[REF_MAX_AXES];
  ref_coords(m, dev, coords);
  for (int a = 0; a < m->naxes; a++)
    if ((mask & (1u << a)) && coords[a] != 0)
      return 0;
  return 1;
}

static int inner_body(shmap_ctx *ctx, void *arg)
{
  ncase *c = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return shmap_fail(ctx, "nested shmap_in: %s", shmap_errmsg());
  c->inner_ran[dev]++;
  memcpy(c->inner_seen[dev], x->data, shmap_block_nbytes(x));
  memcpy(c->inner_shape[dev], x->shape, sizeof c->inner_shape[dev]);
  if (!shmap_out_copy(ctx, 0, x))
    return shmap_fail(ctx, "nested out 0: %s", shmap_errmsg());
  shmap_block *s = shmap_out_copy(ctx, 1, x);
  return s ? shmap_psum(ctx, s, c->inner_text)
           : shmap_fail(ctx, "nested out 1: %s", shmap_errmsg());
}

static int outer_body(shmap_ctx *ctx, void *arg)
{
  ncase *c = arg;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return shmap_fail(ctx, "shmap_in: %s", shmap_errmsg());
  c->outer_ran[dev]++;
  memcpy(c->outer_seen[dev], x->data, shmap_block_nbytes(x));
  memcpy(c->outer_shape[dev], x->shape, sizeof c->outer_shape[dev]);
  if (!c->inner)
    return shmap_out_copy(ctx, 0, x) ? 0 : shmap_fail(ctx, "out_copy");
  shmap_block *out[2];
  shmap_map_opts o = {.manual_axes = c->inner_text};
  const char *is[] = {c->nin_text}, *os[] = {c->nin_text, "P()"};
  int rc = shmap_map_nested(ctx, inner_body, c, 1, &x, is, 2, out, os, &o);
  if (rc)
    return rc;
  if (shmap_out_set(ctx, 0, out[0]) || shmap_out_set(ctx, 1, out[1]))
    return shmap_fail(ctx, "out_set: %s", shmap_errmsg());
  return 0;
}

/* A random spec over the axes of mask, each in a random dimension or not
 * at all, in random order. */
static void mask_spec(uint64_t *rng, unsigned mask, int naxes, int rank,
                      ref_spec *s)
{
  memset(s, 0, sizeof *s);
  s->ndims = t_rng_range(rng, 0, rank);
  int order[REF_MAX_AXES], n = 0;
  for (int a = 0; a < naxes; a++)
    if (mask & (1u << a))
      order[n++] = a;
  for (int i = n - 1; i > 0; i--) {
    int j = t_rng_range(rng, 0, i), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int i = 0; i < n && s->ndims > 0; i++) {
    int d = t_rng_range(rng, -1, s->ndims - 1);
    if (d >= 0)
      s->axes[d][s->naxes[d]++] = order[i];
  }
}

static void run_nested_case(uint64_t *rng, long id, ncase *c,
                            shmap_mesh *mesh)
{
  const ref_mesh *m = &c->pm.rm;
  int ndev = c->pm.ndev;
  unsigned all = (1u << m->naxes) - 1u;
  do
    c->manual = (unsigned)t_rng_next(rng) & all;
  while (!c->manual);
  unsigned free_axes = all & ~c->manual;
  c->inner = 0;
  if (free_axes && t_rng_range(rng, 0, 1))
    do
      c->inner = (unsigned)t_rng_next(rng) & free_axes;
    while (!c->inner);
  c->dt = NESTED_DTYPES[t_rng_range(
      rng, 0, (int)(sizeof NESTED_DTYPES / sizeof NESTED_DTYPES[0]) - 1)];
  c->es = shmap_dtype_size(c->dt);
  c->rank = t_rng_range(rng, 1, 3);
  mask_spec(rng, all, m->naxes, c->rank, &c->src);
  mask_spec(rng, c->manual, m->naxes, c->rank, &c->in);
  mask_spec(rng, c->inner, m->naxes, c->rank, &c->nin);
  for (int d = 0; d < c->rank; d++)
    c->shape[d] = t_rng_range(rng, 1, 2) *
                  lcm64(ref_count(m, &c->src, d),
                        ref_count(m, &c->in, d) * ref_count(m, &c->nin, d));
  for (int d = 0; d < c->rank && ref_numel(c->rank, c->shape) > MAXEL; d++)
    c->shape[d] = lcm64(ref_count(m, &c->src, d),
                        ref_count(m, &c->in, d) * ref_count(m, &c->nin, d));
  spec_text(rng, m, &c->src, c->src_text, sizeof c->src_text);
  spec_text(rng, m, &c->in, c->in_text, sizeof c->in_text);
  spec_text(rng, m, &c->nin, c->nin_text, sizeof c->nin_text);
  mask_text(m, c->manual, c->manual_text, sizeof c->manual_text);
  mask_text(m, c->inner, c->inner_text, sizeof c->inner_text);
  int64_t n = ref_numel(c->rank, c->shape);
  c->global = malloc((size_t)n * c->es + 1);
  for (int64_t e = 0; e < n; e++)
    set_int(c->dt, c->global, e, (int64_t)(t_rng_next(rng) % 2001) - 1000);
  char shape[64] = "";
  for (int d = 0; d < c->rank; d++) {
    size_t len = strlen(shape);
    snprintf(shape + len, sizeof shape - len, "%s%" PRId64, d ? "," : "",
             c->shape[d]);
  }
  snprintf(g_desc, sizeof g_desc,
           "seed %" PRIu64 " case %ld (rerun: SHMAPTEST_PROP_SEED=%" PRIu64
           " SHMAPTEST_PROP_ONLY=%ld): map_ex on mesh \"%s\" (processes over %s),"
           " manual %s, %s[%s] laid out \"%s\", in spec \"%s\", nested over "
           "%s with \"%s\"",
           g_seed, id, g_seed, id, c->pm.text,
           c->pm.pax[0] ? c->pm.pax : "(default)", c->manual_text,
           shmap_dtype_name(c->dt), shape, c->src_text, c->in_text,
           c->inner ? c->inner_text : "(none)", c->nin_text);

  shmap_array *x = NULL, *y[2] = {NULL, NULL};
  int rc = shmap_array_from_host_sharded(&x, mesh, c->src_text, c->dt,
                                         c->rank, c->shape, c->global);
  EXPECT(rc == 0, "from_host_sharded: %s", shmap_errmsg());
  if (rc != 0) {
    free(c->global);
    return;
  }
  shmap_map_opts o = {.manual_axes = c->manual_text};
  const char *is[] = {c->in_text}, *os[] = {c->in_text, c->in_text};
  rc = shmap_map_ex(mesh, outer_body, c, 1, &x, is, c->inner ? 2 : 1, y, os,
                    &o);
  expect_agreed("map_ex", rc);
  EXPECT(rc == 0, "map_ex: %d %s", rc, shmap_errmsg());
  if (rc != 0)
    goto done;

  /* One outer body per coordinate of the manual axes, on the device at
   * coordinate 0 of the free axes (its host); one nested body per
   * coordinate of the manual and inner axes.  Under MPI, when some
   * device's host is in another process, every device runs the outer body
   * and the nested one (shmap_map_ex(3)).  Checked for this process's
   * devices. */
  int everyone = 0;
  for (int dev = 0; dev < ndev; dev++) {
    int coords[REF_MAX_AXES];
    ref_coords(m, dev, coords);
    for (int a = 0; a < m->naxes; a++)
      if (free_axes & (1u << a))
        coords[a] = 0;
    everyone |= shmap_mesh_device_process(mesh, dev) !=
                shmap_mesh_device_process(mesh, ref_dev(m, coords));
  }
  n_partial++;
  n_nested += c->inner != 0;
  n_everyone += everyone;
  unsigned char *want = malloc((size_t)MAXEL * c->es);
  unsigned char *iw = malloc((size_t)MAXEL * c->es);
  for (int dev = 0; dev < ndev; dev++) {
    int64_t ob[3] = {0}, ib[3] = {0};
    if (shmap_mesh_device_process(mesh, dev) != me)
      continue;
    ref_slice(m, &c->in, c->es, c->rank, c->shape, c->global, dev, ob, want);
    int outer_runs = everyone || at_zero(m, dev, free_axes);
    int inner_runs =
        c->inner && (everyone || at_zero(m, dev, free_axes & ~c->inner));
    EXPECT(c->outer_ran[dev] == outer_runs,
           "device %d ran the body %d times, want %d", dev, c->outer_ran[dev],
           outer_runs);
    EXPECT(c->inner_ran[dev] == inner_runs,
           "device %d ran the nested body %d times, want %d", dev,
           c->inner_ran[dev], inner_runs);
    if (outer_runs && c->outer_ran[dev]) {
      int ok = 1;
      for (int d = 0; d < c->rank; d++)
        ok &= c->outer_shape[dev][d] == ob[d];
      EXPECT(ok && memcmp(want, c->outer_seen[dev],
                          (size_t)ref_numel(c->rank, ob) * c->es) == 0,
             "device %d: the outer body saw another block", dev);
    }
    if (inner_runs && c->inner_ran[dev]) {
      int ok = 1;
      ref_slice(m, &c->nin, c->es, c->rank, ob, want, dev, ib, iw);
      for (int d = 0; d < c->rank; d++)
        ok &= c->inner_shape[dev][d] == ib[d];
      EXPECT(ok && memcmp(iw, c->inner_seen[dev],
                          (size_t)ref_numel(c->rank, ib) * c->es) == 0,
             "device %d: the nested body saw another block", dev);
    }
  }
  free(want);
  free(iw);
  /* Output 0 is the input, laid out by the in spec. */
  check_array(mesh, m, y[0], &c->in, c->dt, c->rank, c->shape, c->global,
              "output 0");
  if (c->inner) {
    /* Output 1: per device, the psum over the inner group of the nested
     * blocks, assembled by the outer spec. */
    void *blocks[MAXDEV];
    int64_t ib[3] = {0}, ob[3], gshape[3];
    unsigned char *outer = malloc((size_t)MAXEL * c->es);
    unsigned char *pb = malloc((size_t)MAXEL * c->es);
    for (int dev = 0; dev < ndev; dev++) {
      int coords[REF_MAX_AXES];
      ref_slice(m, &c->in, c->es, c->rank, c->shape, c->global, dev, ob,
                outer);
      ref_coords(m, dev, coords);
      int64_t nb = 0;
      int64_t *sum = calloc(MAXEL, sizeof *sum);
      for (int peer = 0; peer < ndev; peer++) {
        int pc[REF_MAX_AXES], same = 1;
        ref_coords(m, peer, pc);
        for (int a = 0; a < m->naxes; a++)
          if (!(c->inner & (1u << a)) && pc[a] != coords[a])
            same = 0;
        if (!same)
          continue;
        ref_slice(m, &c->nin, c->es, c->rank, ob, outer, peer, ib, pb);
        nb = ref_numel(c->rank, ib);
        for (int64_t e = 0; e < nb; e++)
          sum[e] = (int64_t)((uint64_t)sum[e] + (uint64_t)get_int(c->dt, pb, e));
      }
      blocks[dev] = malloc((size_t)(nb ? nb : 1) * c->es);
      for (int64_t e = 0; e < nb; e++)
        set_int(c->dt, blocks[dev], e, sum[e]);
      free(sum);
    }
    ref_global_shape(m, &c->in, c->rank, ib, gshape);
    int64_t gn = ref_numel(c->rank, gshape);
    void *g = malloc((size_t)gn * c->es + 1);
    ref_rep_err err;
    EXPECT(ref_assemble(m, &c->in, c->es, c->rank, ib,
                        (const void *const *)blocks, gshape, g, &err) == 0,
           "the model's sums differ along a free axis");
    check_array(mesh, m, y[1], &c->in, c->dt, c->rank, gshape, g,
                "output 1 (the nested psums)");
    free(g);
    free(outer);
    free(pb);
    for (int dev = 0; dev < ndev; dev++)
      free(blocks[dev]);
  }
done:
  shmap_array_destroy(y[0]);
  shmap_array_destroy(y[1]);
  shmap_array_destroy(x);
  free(c->global);
}

/* ---- cases ----------------------------------------------------------------- */

/* After 10 failures in any process, every process stops (together: the
 * processes must keep making the same calls). */
static int stop_now(void)
{
  int mine = failures, most = mine;
  if (R > 1)
    MPI_Allreduce(&mine, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return most >= 10;
}

static void run_case(long id, int verbose)
{
  uint64_t rng = g_seed ^ (0xe7037ed1a0b428dbULL * (uint64_t)(id + 1));
  t_rng_next(&rng);
  pmesh pm;
  gen_mesh(&rng, &pm);
  snprintf(g_desc, sizeof g_desc, "seed %" PRIu64 " case %ld: mesh \"%s\"",
           g_seed, id, pm.text);
  shmap_mesh *mesh = make_mesh(&rng, &pm);
  if (mesh == NULL)
    return;
  n_pax += pm.pax[0] != '\0';
  if (t_rng_range(&rng, 0, 2) != 0) {
    mcase *c = calloc(1, sizeof *c);
    c->pm = pm;
    gen_map_case(&rng, c);
    describe_map(id, c);
    if (verbose)
      printf("%s\n", g_desc);
    run_map_case(&rng, id, c, mesh);
    for (int k = 0; k < c->nin; k++)
      free(c->in[k].data);
    free(c);
  } else {
    ncase *c = calloc(1, sizeof *c);
    c->pm = pm;
    run_nested_case(&rng, id, c, mesh);
    if (verbose)
      printf("%s\n", g_desc);
    free(c);
  }
  shmap_mesh_destroy(mesh);
}

int main(void)
{
  R = shmap_process_count();
  me = shmap_process_rank();
  const char *e;
  long cases = DEFAULT_CASES, only = -1;
  if ((e = getenv("SHMAPTEST_PROP_SEED")) != NULL && *e)
    g_seed = strtoull(e, NULL, 0);
  if ((e = getenv("SHMAPTEST_PROP_CASES")) != NULL && *e)
    cases = strtol(e, NULL, 0);
  if ((e = getenv("SHMAPTEST_PROP_ONLY")) != NULL && *e)
    only = strtol(e, NULL, 0);
  if (me == 0) {
    printf("test_mpi_map_prop: %d process%s, seed %" PRIu64
           " (SHMAPTEST_PROP_SEED), %ld cases (SHMAPTEST_PROP_CASES)\n",
           R, R == 1 ? "" : "es", g_seed, cases);
    fflush(stdout);
  }
  if (only >= 0)
    run_case(only, me == 0);
  else
    for (long id = 0; id < cases && !stop_now(); id++)
      run_case(id, 0);
  if (failures)
    fprintf(stderr, "[process %d of %d] %d failure%s (seed %" PRIu64 ")\n",
            me, R, failures, failures == 1 ? "" : "s", g_seed);
  else if (me == 0) {
    int nd = 0;
    for (int k = 0; k < SHMAP_NDTYPES; k++)
      nd += (dtypes_seen >> k) & 1u;
    printf("test_mpi_map_prop: %ld maps (%ld expecting SHMAP_EREPLICATION, "
           "%ld unchecked with differing copies; inputs: %ld from host, %ld "
           "resharded by the map, %ld resharded before, %ld in place; %d "
           "dtypes), %ld outputs resharded, %ld partial-manual maps (%ld "
           "nested, %ld with every device running the body), %ld meshes "
           "with process axes\n",
           n_maps, n_rep_err, n_unchecked_bad, n_source[0], n_source[1],
           n_source[2], n_source[3], nd, n_reshard, n_partial, n_nested,
           n_everyone, n_pax);
    printf("test_mpi_map_prop: all passed\n");
  }
  return failures ? 1 : 0;
}
