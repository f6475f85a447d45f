/* SPDX-License-Identifier: MIT */
/*
 * test_shard_prop.c - property test of resharding (SEMANTICS.md §3, §8).
 *
 * Each case draws a mesh (1 to 4 axes, at most 16 devices), a dtype, a rank
 * (1 to 3) and two partition specs A and B (random subsets of the axes, in
 * random order, over random dimensions, written in JAX or short form), and
 * a shape divisible under both.  Random bytes are placed in A with
 * shmap_array_from_host_sharded, then
 *   - shmap_array_reshard to B: to_host equals the source exactly, every
 *     block equals the reference slice (tests/refmodel.c), the spec text is
 *     B's canonical form;
 *   - a map reading the A array with in_spec B (implicit reshard), whose
 *     body copies its block out under out_spec B: the same checks, and the
 *     body saw B's block shape;
 *   - a map reading a host array with in_spec B: the same values;
 * and the movement statistics are checked against the exact minimum: a
 * device must fetch from others exactly the part of its new block that is
 * not in its own old block, and copy the rest locally.  In particular
 * bytes_moved never exceeds the naive bound (every byte of every new
 * block), and is 0 whenever each entry of A is a prefix of the same entry
 * of B (pure slicing).  When A and B lay the array out alike, the map
 * shares the blocks and moves nothing.
 *
 * Environment: SHMAPTEST_PROP_CASES (default 1000), SHMAPTEST_PROP_SEED (default
 * below, printed at the start), SHMAPTEST_PROP_ONLY (run one case number).
 */
#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "refmodel.h"
#include "testutil.h"

#define TIMEOUT 240
#define DEFAULT_CASES 1000
#define DEFAULT_SEED 0x5eed5a4dULL
#define MAXDEV 16

static uint64_t g_seed = DEFAULT_SEED;
static long g_cases = DEFAULT_CASES;
static long g_only = -1;

/* Totals over the run, printed at the end. */
static long n_same, n_prefix, n_other, n_empty;
static uint64_t sum_moved, sum_local;

static const shmap_dtype dtypes[] = {SHMAP_F32, SHMAP_F64, SHMAP_I32,
                                     SHMAP_I64};
static const char *const pool[] = {"i", "j", "k", "x", "y", "data", "model",
                                   "z2"};

/* ---- one case's description ------------------------------------------------ */

typedef struct pcase {
  long id;
  ref_mesh m;
  int ndev;
  shmap_dtype dt;
  size_t es;
  int rank;
  int64_t shape[REF_MAX_RANK];
  ref_spec a, b;
  char a_text[256], b_text[256], b_text2[256];
  char a_canon[256], b_canon[256];
  char desc[1400];
} pcase;

/* Canonical JAX form, written from the reference spec. */
static void canon(const ref_mesh *m, const ref_spec *s, char *buf, size_t n) {
  size_t len = 0;
  len += (size_t)snprintf(buf + len, n - len, "P(");
  for (int d = 0; d < s->ndims; d++) {
    if (d)
      len += (size_t)snprintf(buf + len, n - len, ", ");
    if (s->naxes[d] == 0)
      len += (size_t)snprintf(buf + len, n - len, "None");
    else if (s->naxes[d] == 1)
      len += (size_t)snprintf(buf + len, n - len, "'%s'",
                              m->names[s->axes[d][0]]);
    else {
      len += (size_t)snprintf(buf + len, n - len, "(");
      for (int k = 0; k < s->naxes[d]; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s'%s'", k ? ", " : "",
                                m->names[s->axes[d][k]]);
      len += (size_t)snprintf(buf + len, n - len, ")");
    }
  }
  snprintf(buf + len, n - len, ")");
}

/* A random way of writing the spec: JAX form with optional tuples of one
 * name and () for None, or the short form. */
static void write_spec(uint64_t *rng, const ref_mesh *m, const ref_spec *s,
                       char *buf, size_t n) {
  int jax = t_rng_range(rng, 0, 2) != 0;
  size_t len = 0;
  if (jax)
    len += (size_t)snprintf(buf + len, n - len, "P(");
  for (int d = 0; d < s->ndims; d++) {
    if (d)
      len += (size_t)snprintf(buf + len, n - len, "%s",
                              t_rng_range(rng, 0, 1) ? ", " : ",");
    const char *q = jax ? (t_rng_range(rng, 0, 3) ? "'" : "\"") : "";
    if (s->naxes[d] == 0) {
      len += (size_t)snprintf(buf + len, n - len, "%s",
                              t_rng_range(rng, 0, 4) ? "None" : "()");
    } else if (s->naxes[d] == 1 && t_rng_range(rng, 0, 3)) {
      len += (size_t)snprintf(buf + len, n - len, "%s%s%s", q,
                              m->names[s->axes[d][0]], q);
    } else {
      len += (size_t)snprintf(buf + len, n - len, "(");
      for (int k = 0; k < s->naxes[d]; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s%s%s",
                                k ? ", " : "", q, m->names[s->axes[d][k]], q);
      len += (size_t)snprintf(buf + len, n - len, "%s)",
                              s->naxes[d] == 1 ? "," : "");
    }
  }
  if (jax)
    snprintf(buf + len, n - len, ")");
}

/* Random subset of the axes in random order, each on a random dimension;
 * the spec is written with its trailing unsplit entries sometimes left
 * out. */
static void random_spec(uint64_t *rng, const ref_mesh *m, int rank,
                        ref_spec *s) {
  int perm[REF_MAX_AXES];
  memset(s, 0, sizeof *s);
  for (int a = 0; a < m->naxes; a++)
    perm[a] = a;
  for (int a = m->naxes - 1; a > 0; a--) {
    int b = t_rng_range(rng, 0, a);
    int t = perm[a];
    perm[a] = perm[b];
    perm[b] = t;
  }
  int last = -1;
  for (int k = 0; k < m->naxes; k++) {
    int d = t_rng_range(rng, -1, rank - 1);
    if (d < 0)
      continue;
    s->axes[d][s->naxes[d]++] = perm[k];
    if (d > last)
      last = d;
  }
  s->ndims = t_rng_range(rng, last + 1, rank);
}

/* B from A by appending unused axes to entries (a pure slice). */
static void extend_spec(uint64_t *rng, const ref_mesh *m, int rank,
                        const ref_spec *a, ref_spec *b) {
  unsigned used = ref_spec_mask(a);
  *b = *a;
  for (int ax = 0; ax < m->naxes; ax++) {
    if ((used & (1u << ax)) || t_rng_range(rng, 0, 2) == 0)
      continue;
    int d = t_rng_range(rng, 0, rank - 1);
    b->axes[d][b->naxes[d]++] = ax;
    if (d >= b->ndims)
      b->ndims = d + 1;
  }
}

static int naxes_at(const ref_spec *s, int d) {
  return d < s->ndims ? s->naxes[d] : 0;
}

/* Same layout after padding. */
static int same_layout(const ref_spec *a, const ref_spec *b, int rank) {
  for (int d = 0; d < rank; d++) {
    int n = naxes_at(a, d);
    if (n != naxes_at(b, d))
      return 0;
    for (int k = 0; k < n; k++)
      if (a->axes[d][k] != b->axes[d][k])
        return 0;
  }
  return 1;
}

/* Each entry of a is a prefix of the same entry of b. */
static int prefix_layout(const ref_spec *a, const ref_spec *b, int rank) {
  for (int d = 0; d < rank; d++) {
    int n = naxes_at(a, d);
    if (n > naxes_at(b, d))
      return 0;
    for (int k = 0; k < n; k++)
      if (a->axes[d][k] != b->axes[d][k])
        return 0;
  }
  return 1;
}

static int64_t gcd64(int64_t x, int64_t y) {
  while (y) {
    int64_t t = x % y;
    x = y;
    y = t;
  }
  return x;
}

static void make_case(pcase *c, long id) {
  uint64_t rng = g_seed ^ ((uint64_t)id * 0xd1342543de82ef95ULL);
  memset(c, 0, sizeof *c);
  c->id = id;
  t_rng_next(&rng);

  /* Mesh: distinct names from the pool, at most MAXDEV devices. */
  int naxes = t_rng_range(&rng, 1, 4);
  int names[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int a = 7; a > 0; a--) {
    int b = t_rng_range(&rng, 0, a);
    int t = names[a];
    names[a] = names[b];
    names[b] = t;
  }
  int ndev = 1;
  c->m.naxes = naxes;
  for (int a = 0; a < naxes; a++) {
    int most = MAXDEV / ndev;
    int size = t_rng_range(&rng, 1, most < 4 ? most : 4);
    c->m.sizes[a] = size;
    ndev *= size;
    snprintf(c->m.names[a], sizeof c->m.names[a], "%s", pool[names[a]]);
  }
  c->ndev = ndev;

  c->dt = dtypes[t_rng_range(&rng, 0, 3)];
  c->es = shmap_dtype_size(c->dt);
  c->rank = t_rng_range(&rng, 1, 3);

  random_spec(&rng, &c->m, c->rank, &c->a);
  int kind = t_rng_range(&rng, 0, 9);
  if (kind == 0)
    c->b = c->a; /* same layout, perhaps written differently */
  else if (kind <= 3)
    extend_spec(&rng, &c->m, c->rank, &c->a, &c->b);
  else /* independent; retry a few times to avoid an equal layout */
    for (int tries = 0; tries < 3; tries++) {
      random_spec(&rng, &c->m, c->rank, &c->b);
      if (!same_layout(&c->a, &c->b, c->rank))
        break;
    }

  /* Shape: each dimension a multiple of both counts, rarely empty. */
  int64_t numel = 1;
  for (int d = 0; d < c->rank; d++) {
    int64_t ca = ref_count(&c->m, &c->a, d), cb = ref_count(&c->m, &c->b, d);
    int64_t l = ca / gcd64(ca, cb) * cb;
    int64_t mult = l >= 8 ? 1 : t_rng_range(&rng, 1, 3);
    c->shape[d] = t_rng_range(&rng, 0, 49) == 0 ? 0 : l * mult;
    numel *= c->shape[d];
  }
  (void)numel;

  write_spec(&rng, &c->m, &c->a, c->a_text, sizeof c->a_text);
  write_spec(&rng, &c->m, &c->b, c->b_text, sizeof c->b_text);
  write_spec(&rng, &c->m, &c->b, c->b_text2, sizeof c->b_text2);
  canon(&c->m, &c->a, c->a_canon, sizeof c->a_canon);
  canon(&c->m, &c->b, c->b_canon, sizeof c->b_canon);

  char mesh[160] = "", shape[96] = "";
  for (int a = 0; a < naxes; a++) {
    size_t l = strlen(mesh);
    snprintf(mesh + l, sizeof mesh - l, "%s%s=%d", a ? ", " : "",
             c->m.names[a], c->m.sizes[a]);
  }
  for (int d = 0; d < c->rank; d++) {
    size_t l = strlen(shape);
    snprintf(shape + l, sizeof shape - l, "%s%lld", d ? "," : "",
             (long long)c->shape[d]);
  }
  snprintf(c->desc, sizeof c->desc,
           "case %ld (rerun: SHMAPTEST_PROP_SEED=%" PRIu64
           " SHMAPTEST_PROP_ONLY=%ld): mesh \"%s\", %s[%s], A \"%s\" = %s, "
           "B \"%s\" = %s (also \"%s\")",
           id, g_seed, id, mesh, shmap_dtype_name(c->dt), shape, c->a_text,
           c->a_canon, c->b_text, c->b_canon, c->b_text2);
}

/* ---- checks ------------------------------------------------------------------ */

static void check_array(const pcase *c, const shmap_array *x,
                        const ref_spec *s, const char *canonical,
                        const void *src, const char *what) {
  int64_t numel = ref_numel(c->rank, c->shape);
  char spec[256];
  int n = shmap_array_spec(x, spec, sizeof spec);
  ck_assert_msg(n >= 0 && strcmp(spec, canonical) == 0,
                "%s: %s: spec text \"%s\", want \"%s\"", c->desc, what, spec,
                canonical);
  ck_assert_msg(shmap_array_dtype(x) == c->dt && shmap_array_rank(x) == c->rank &&
                    shmap_array_numel(x) == numel,
                "%s: %s: dtype/rank/numel differ", c->desc, what);
  for (int d = 0; d < c->rank; d++)
    ck_assert_msg(shmap_array_shape(x)[d] == c->shape[d],
                  "%s: %s: dim %d is %lld", c->desc, what, d,
                  (long long)shmap_array_shape(x)[d]);
  size_t bytes = (size_t)numel * c->es;
  unsigned char *got = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(got);
  int rc = shmap_array_to_host(x, got);
  ck_assert_msg(rc == 0, "%s: %s: to_host %d %s", c->desc, what, rc,
                shmap_errmsg());
  if (memcmp(got, src, bytes) != 0) {
    size_t e = 0;
    while (memcmp(got + e * c->es, (const char *)src + e * c->es, c->es) == 0)
      e++;
    ck_abort_msg("%s: %s: to_host differs first at element %zu", c->desc,
                 what, e);
  }
  free(got);

  int64_t bshape[REF_MAX_RANK];
  ck_assert_int_eq(ref_block_shape(&c->m, s, c->rank, c->shape, bshape), 0);
  int64_t bn = ref_numel(c->rank, bshape);
  unsigned char *want = malloc((size_t)(bn ? bn : 1) * c->es);
  ck_assert_ptr_nonnull(want);
  for (int dev = 0; dev < c->ndev; dev++) {
    shmap_block b;
    int64_t off[SHMAP_MAX_RANK], bs[REF_MAX_RANK];
    int coords[REF_MAX_AXES];
    rc = shmap_array_block(x, dev, &b, off);
    ck_assert_msg(rc == 0, "%s: %s: block %d: %d", c->desc, what, dev, rc);
    ref_coords(&c->m, dev, coords);
    ck_assert_msg(b.dtype == c->dt && b.rank == c->rank, "%s: %s: device %d",
                  c->desc, what, dev);
    for (int d = 0; d < c->rank; d++)
      ck_assert_msg(b.shape[d] == bshape[d] &&
                        off[d] == ref_index(&c->m, s, d, coords) * bshape[d],
                    "%s: %s: device %d dim %d: block %lld at %lld, want %lld "
                    "at %lld",
                    c->desc, what, dev, d, (long long)b.shape[d],
                    (long long)off[d], (long long)bshape[d],
                    (long long)(ref_index(&c->m, s, d, coords) * bshape[d]));
    ref_slice(&c->m, s, c->es, c->rank, c->shape, src, dev, bs, want);
    ck_assert_msg(bn == 0 || memcmp(b.data, want, (size_t)bn * c->es) == 0,
                  "%s: %s: device %d: block contents differ", c->desc, what,
                  dev);
  }
  free(want);
}

/* The fewest bytes devices must fetch from peers to build spec b's blocks
 * out of spec a's: the part of each new block outside the device's own old
 * block.  *total gets the bytes of all new blocks. */
static uint64_t min_moved(const pcase *c, uint64_t *total) {
  int64_t ba[REF_MAX_RANK], bb[REF_MAX_RANK];
  ref_block_shape(&c->m, &c->a, c->rank, c->shape, ba);
  ref_block_shape(&c->m, &c->b, c->rank, c->shape, bb);
  int64_t nb = ref_numel(c->rank, bb);
  uint64_t moved = 0;
  *total = 0;
  for (int dev = 0; dev < c->ndev; dev++) {
    int coords[REF_MAX_AXES];
    ref_coords(&c->m, dev, coords);
    int64_t overlap = 1;
    for (int d = 0; d < c->rank; d++) {
      int64_t a0 = ref_index(&c->m, &c->a, d, coords) * ba[d];
      int64_t b0 = ref_index(&c->m, &c->b, d, coords) * bb[d];
      int64_t lo = a0 > b0 ? a0 : b0;
      int64_t hi = a0 + ba[d] < b0 + bb[d] ? a0 + ba[d] : b0 + bb[d];
      overlap *= hi > lo ? hi - lo : 0;
    }
    moved += (uint64_t)(nb - overlap) * c->es;
    *total += (uint64_t)nb * c->es;
  }
  return moved;
}

static void check_stats(const pcase *c, shmap_mesh *mesh, int same,
                        int prefix, uint64_t want_moved, uint64_t total,
                        int via_map, const char *what) {
  shmap_stats st;
  ck_assert_int_eq(shmap_mesh_stats(mesh, &st), 0);
  char got[200];
  snprintf(got, sizeof got,
           "shared %llu built %llu host %llu local %llu moved %llu",
           (unsigned long long)st.blocks_shared,
           (unsigned long long)st.blocks_built,
           (unsigned long long)st.bytes_host,
           (unsigned long long)st.bytes_local,
           (unsigned long long)st.bytes_moved);
  /* Never more than the naive bound: every byte of every new block. */
  ck_assert_msg(st.bytes_moved <= total, "%s: %s: %s exceeds the bound %llu",
                c->desc, what, got, (unsigned long long)total);
  ck_assert_msg(st.bytes_host == 0, "%s: %s: %s", c->desc, what, got);
  if (prefix)
    ck_assert_msg(st.bytes_moved == 0, "%s: %s: pure slice moved bytes: %s",
                  c->desc, what, got);
  if (same) {
    ck_assert_msg(st.bytes_moved == 0, "%s: %s: %s", c->desc, what, got);
    if (via_map)
      ck_assert_msg(st.blocks_shared == (uint64_t)c->ndev &&
                        st.blocks_built == 0 && st.bytes_local == 0,
                    "%s: %s: equal specs must share: %s", c->desc, what, got);
    return;
  }
  ck_assert_msg(st.blocks_built == (uint64_t)c->ndev && st.blocks_shared == 0,
                "%s: %s: %s, want %d built", c->desc, what, got, c->ndev);
  ck_assert_msg(st.bytes_moved == want_moved &&
                    st.bytes_local == total - want_moved,
                "%s: %s: %s, want local %llu moved %llu (the minimum)",
                c->desc, what, got, (unsigned long long)(total - want_moved),
                (unsigned long long)want_moved);
}

typedef struct body_rec {
  int rank;
  int64_t seen[MAXDEV][REF_MAX_RANK];
} body_rec;

static int copy_body(shmap_ctx *ctx, void *arg) {
  body_rec *r = arg;
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return -1;
  int d = shmap_ctx_device(ctx);
  for (int k = 0; k < x->rank && k < REF_MAX_RANK; k++)
    r->seen[d][k] = x->shape[k];
  return shmap_out_copy(ctx, 0, x) ? 0 : -1;
}

static void run_case(long id) {
  pcase *c = malloc(sizeof *c);
  ck_assert_ptr_nonnull(c);
  make_case(c, id);
  const char *names[REF_MAX_AXES];
  for (int a = 0; a < c->m.naxes; a++)
    names[a] = c->m.names[a];
  shmap_mesh *mesh = NULL;
  int rc = shmap_mesh_create_axes(&mesh, c->m.naxes, names, c->m.sizes);
  ck_assert_msg(rc == 0, "%s: mesh: %d %s", c->desc, rc, shmap_errmsg());

  int64_t numel = ref_numel(c->rank, c->shape);
  size_t bytes = (size_t)numel * c->es;
  unsigned char *src = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(src);
  uint64_t rng = g_seed + (uint64_t)id;
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t v = t_rng_next(&rng);
    memcpy(src + i, &v, bytes - i < 8 ? bytes - i : 8);
  }

  int same = same_layout(&c->a, &c->b, c->rank);
  int prefix = prefix_layout(&c->a, &c->b, c->rank);
  uint64_t total;
  uint64_t want_moved = min_moved(c, &total);
  if (same)
    n_same++;
  else if (prefix)
    n_prefix++;
  else
    n_other++;
  if (numel == 0)
    n_empty++;
  if (prefix)
    ck_assert_msg(want_moved == 0, "%s: test model: prefix but %llu", c->desc,
                  (unsigned long long)want_moved);

  /* Place in A. */
  shmap_array *a = NULL;
  rc = shmap_array_from_host_sharded(&a, mesh, c->a_text, c->dt, c->rank,
                                     c->shape, src);
  ck_assert_msg(rc == 0, "%s: from_host_sharded A: %d %s", c->desc, rc,
                shmap_errmsg());
  check_array(c, a, &c->a, c->a_canon, src, "A");

  /* Explicit reshard to B. */
  shmap_mesh_stats_reset(mesh);
  shmap_array *b = NULL;
  rc = shmap_array_reshard(&b, a, c->b_text);
  ck_assert_msg(rc == 0, "%s: reshard: %d %s", c->desc, rc, shmap_errmsg());
  check_stats(c, mesh, same, prefix, want_moved, total, 0, "reshard");
  check_array(c, b, &c->b, c->b_canon, src, "reshard");
  if (!same) {
    shmap_stats st;
    shmap_mesh_stats(mesh, &st);
    sum_moved += st.bytes_moved;
    sum_local += st.bytes_local;
  }

  /* Implicit reshard: a map reads A with in_spec B. */
  body_rec *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  shmap_array *o = NULL, *in[1] = {a};
  const char *is[1] = {c->b_text}, *os[1] = {c->b_text2};
  shmap_mesh_stats_reset(mesh);
  rc = shmap_map(mesh, copy_body, r, 1, in, is, 1, &o, os);
  ck_assert_msg(rc == 0, "%s: map: %d %s", c->desc, rc, shmap_errmsg());
  check_stats(c, mesh, same, prefix, want_moved, total, 1, "map");
  check_array(c, o, &c->b, c->b_canon, src, "map");
  int64_t bshape[REF_MAX_RANK];
  ref_block_shape(&c->m, &c->b, c->rank, c->shape, bshape);
  for (int dev = 0; dev < c->ndev; dev++)
    for (int d = 0; d < c->rank; d++)
      ck_assert_msg(r->seen[dev][d] == bshape[d],
                    "%s: body on device %d saw dim %d = %lld", c->desc, dev, d,
                    (long long)r->seen[dev][d]);
  shmap_array_destroy(o);

  /* A host array read with in_spec B: each device copies its block. */
  shmap_array *h = NULL;
  rc = shmap_array_from_host(&h, c->dt, c->rank, c->shape, src);
  ck_assert_int_eq(rc, 0);
  in[0] = h;
  o = NULL;
  shmap_mesh_stats_reset(mesh);
  rc = shmap_map(mesh, copy_body, r, 1, in, is, 1, &o, os);
  ck_assert_msg(rc == 0, "%s: host map: %d %s", c->desc, rc, shmap_errmsg());
  shmap_stats st;
  shmap_mesh_stats(mesh, &st);
  ck_assert_msg(st.bytes_host == total && st.bytes_moved == 0 &&
                    st.bytes_local == 0 && st.blocks_built == (uint64_t)c->ndev,
                "%s: host map: host %llu local %llu moved %llu built %llu",
                c->desc, (unsigned long long)st.bytes_host,
                (unsigned long long)st.bytes_local,
                (unsigned long long)st.bytes_moved,
                (unsigned long long)st.blocks_built);
  check_array(c, o, &c->b, c->b_canon, src, "host map");
  shmap_array_destroy(o);
  shmap_array_destroy(h);

  /* And back from B to A. */
  shmap_array *back = NULL;
  rc = shmap_array_reshard(&back, b, c->a_text);
  ck_assert_msg(rc == 0, "%s: reshard back: %d %s", c->desc, rc,
                shmap_errmsg());
  check_array(c, back, &c->a, c->a_canon, src, "back");
  shmap_array_destroy(back);

  shmap_array_destroy(b);
  shmap_array_destroy(a);
  shmap_mesh_destroy(mesh);
  free(r);
  free(src);
  free(c);
}

START_TEST(reshard_random) {
  if (g_only >= 0) {
    run_case(g_only);
    return;
  }
  for (long id = 0; id < g_cases; id++)
    run_case(id);
  printf("test_shard_prop: %ld cases: %ld same layout, %ld pure slices, %ld "
         "others (%ld empty); %llu bytes moved, %llu local\n",
         g_cases, n_same, n_prefix, n_other, n_empty,
         (unsigned long long)sum_moved, (unsigned long long)sum_local);
  /* The generator reaches every kind of case. */
  if (g_cases >= 200)
    ck_assert_msg(n_same > 0 && n_prefix > 0 && n_other > 0 && n_empty > 0,
                  "generator coverage: %ld %ld %ld %ld", n_same, n_prefix,
                  n_other, n_empty);
}
END_TEST

/* The test model itself: known minima for hand-worked cases, so a wrong
 * model cannot agree with a wrong library by accident. */
START_TEST(model_self_check) {
  pcase c;
  memset(&c, 0, sizeof c);
  c.m.naxes = 2;
  c.m.sizes[0] = 4;
  c.m.sizes[1] = 2;
  c.ndev = 8;
  c.es = 4;
  c.rank = 2;
  c.shape[0] = 16;
  c.shape[1] = 8;
  uint64_t total;
  /* P(('i','j')) -> P('i'): all-gather over j, half of each new block. */
  c.a.ndims = 1;
  c.a.naxes[0] = 2;
  c.a.axes[0][0] = 0;
  c.a.axes[0][1] = 1;
  c.b.ndims = 1;
  c.b.naxes[0] = 1;
  c.b.axes[0][0] = 0;
  ck_assert_uint_eq(min_moved(&c, &total), 512);
  ck_assert_uint_eq(total, 1024);
  ck_assert(!prefix_layout(&c.a, &c.b, 2));
  /* Reversed: adding j is a slice. */
  ref_spec t = c.a;
  c.a = c.b;
  c.b = t;
  ck_assert_uint_eq(min_moved(&c, &total), 0);
  ck_assert(prefix_layout(&c.a, &c.b, 2));
  /* P('i', None) -> P(None, 'i'): all-to-all, 3/4 of each block. */
  memset(&c.a, 0, sizeof c.a);
  memset(&c.b, 0, sizeof c.b);
  c.a.ndims = 1;
  c.a.naxes[0] = 1;
  c.b.ndims = 2;
  c.b.naxes[1] = 1;
  ck_assert_uint_eq(min_moved(&c, &total), 768);
  /* P(('i','j')) -> P(('j','i')): 6 of 8 devices fetch a whole block. */
  memset(&c.a, 0, sizeof c.a);
  memset(&c.b, 0, sizeof c.b);
  c.a.ndims = c.b.ndims = 1;
  c.a.naxes[0] = c.b.naxes[0] = 2;
  c.a.axes[0][1] = 1;
  c.b.axes[0][0] = 1;
  ck_assert_uint_eq(min_moved(&c, &total), 384);
  ck_assert(!same_layout(&c.a, &c.b, 2));
  char buf[64];
  snprintf(c.m.names[0], 32, "i");
  snprintf(c.m.names[1], 32, "j");
  canon(&c.m, &c.b, buf, sizeof buf);
  ck_assert_str_eq(buf, "P(('j', 'i'))");
}
END_TEST

int main(void) {
  const char *e;
  if ((e = getenv("SHMAPTEST_PROP_SEED")) != NULL && *e)
    g_seed = strtoull(e, NULL, 0);
  if ((e = getenv("SHMAPTEST_PROP_CASES")) != NULL && *e)
    g_cases = strtol(e, NULL, 0);
  if ((e = getenv("SHMAPTEST_PROP_ONLY")) != NULL && *e)
    g_only = strtol(e, NULL, 0);
  printf("test_shard_prop: seed %" PRIu64 " (SHMAPTEST_PROP_SEED), %ld cases "
         "(SHMAPTEST_PROP_CASES)\n",
         g_seed, g_cases);
  fflush(stdout);

  Suite *s = suite_create("shard_prop");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, model_self_check);
  suite_add_tcase(s, tc);
  tc = tcase_create("reshard");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, reshard_random);
  suite_add_tcase(s, tc);

  return tu_run_suite(s);
}
