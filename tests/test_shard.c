/* SPDX-License-Identifier: MIT */
/*
 * test_shard.c - sharded arrays on a mesh (SEMANTICS.md §3, §5, §8; the
 * "sharded arrays on a mesh" part of shmap.h): creation on the devices,
 * the canonical spec text, block access, chaining maps without copies,
 * implicit and explicit resharding with exact byte counts, the mesh
 * reference an array holds, every error with its code and message, and
 * the text picture of shmap_array_visualize.
 *
 * Expected blocks come from tests/refmodel.c (a serial model written from
 * the semantics, independent of the library's layout code); expected byte
 * counts of the reshards are worked out by hand next to each case.
 */
#include <check.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shmap.h>

#include "refmodel.h"
#include "testutil.h"

#define TIMEOUT 60
#define MAXDEV 64

static const shmap_dtype all_dtypes[] = {SHMAP_F32, SHMAP_F64, SHMAP_I32,
                                         SHMAP_I64};

/* ---- helpers -------------------------------------------------------------- */

/* A mesh and the reference model's description of it. */
typedef struct tmesh {
  shmap_mesh *m;
  ref_mesh r;
  int ndev;
} tmesh;

static tmesh tm(const char *text) {
  tmesh t;
  memset(&t, 0, sizeof t);
  t.m = tu_mesh_new(text);
  t.r.naxes = shmap_mesh_naxes(t.m);
  for (int a = 0; a < t.r.naxes; a++) {
    t.r.sizes[a] = shmap_mesh_axis_size(t.m, a);
    snprintf(t.r.names[a], sizeof t.r.names[a], "%s",
             shmap_mesh_axis_name(t.m, a));
  }
  t.ndev = ref_ndev(&t.r);
  ck_assert_int_eq(t.ndev, shmap_mesh_ndevices(t.m));
  return t;
}

/* The reference spec of a test-side notation, independent of the library's
 * parser: entries separated by ',', an entry is '-' (unsplit) or axis names
 * joined by '+' (first name major).  "i+j,-" is P(('i','j'), None). */
static ref_spec rs(const ref_mesh *m, const char *nota) {
  ref_spec s;
  memset(&s, 0, sizeof s);
  if (!*nota)
    return s;
  const char *p = nota;
  for (;;) {
    int d = s.ndims++;
    ck_assert_int_lt(d, REF_MAX_RANK);
    if (*p == '-') {
      p++;
    } else {
      for (;;) {
        size_t n = strcspn(p, "+,");
        int found = -1;
        for (int a = 0; a < m->naxes; a++)
          if (strlen(m->names[a]) == n && strncmp(m->names[a], p, n) == 0)
            found = a;
        ck_assert_msg(found >= 0, "test notation \"%s\": unknown axis", nota);
        s.axes[d][s.naxes[d]++] = found;
        p += n;
        if (*p != '+')
          break;
        p++;
      }
    }
    if (*p == '\0')
      return s;
    ck_assert_int_eq(*p, ',');
    p++;
  }
}

/* Element e of a deterministic test array of dtype dt: distinct values,
 * exact in every dtype, shifted by `salt`.  i64 values exceed 32 bits. */
static void put(shmap_dtype dt, void *buf, int64_t e, int64_t salt) {
  switch (dt) {
  case SHMAP_F32: ((float *)buf)[e] = (float)(e + salt) * 0.5f - 7.25f; break;
  case SHMAP_F64: ((double *)buf)[e] = (double)(e + salt) * 0.125 - 3.0; break;
  case SHMAP_I32: ((int32_t *)buf)[e] = (int32_t)((e + salt) * 3 - 100); break;
  default: ((int64_t *)buf)[e] = (e + salt) * 4294967311LL - 5; break;
  }
}

static void *gen(shmap_dtype dt, int64_t n, int64_t salt) {
  size_t es = shmap_dtype_size(dt);
  void *p = malloc((size_t)(n ? n : 1) * es);
  ck_assert_ptr_nonnull(p);
  for (int64_t e = 0; e < n; e++)
    put(dt, p, e, salt);
  return p;
}

static void expect_host(const shmap_array *a, const void *want, size_t bytes,
                        const char *what) {
  void *got = tu_array_to_host(a, NULL);
  ck_assert_msg(memcmp(got, want, bytes) == 0, "%s: to_host differs", what);
  free(got);
}

static void spec_text(const shmap_array *a, char *buf, size_t len) {
  int n = shmap_array_spec(a, buf, len);
  ck_assert_msg(n >= 0, "shmap_array_spec: %d %s", n, shmap_errmsg());
  ck_assert_int_eq((size_t)n, strlen(buf));
}

static void expect_spec(const shmap_array *a, const char *want) {
  char buf[256];
  spec_text(a, buf, sizeof buf);
  ck_assert_str_eq(buf, want);
}

/* Every device's block of `a` (dtype, rank, shape, offset, contents) equals
 * the reference slice of the global array `src` under spec `s`. */
static void expect_blocks(const shmap_array *a, const tmesh *t,
                          const ref_spec *s, const void *src,
                          const char *what) {
  shmap_dtype dt = shmap_array_dtype(a);
  int rank = shmap_array_rank(a);
  const int64_t *gshape = shmap_array_shape(a);
  size_t es = shmap_dtype_size(dt);
  for (int d = 0; d < t->ndev; d++) {
    shmap_block b;
    int64_t off[SHMAP_MAX_RANK], want_shape[REF_MAX_RANK];
    int c[REF_MAX_AXES];
    memset(&b, 0xa5, sizeof b);
    int rc = shmap_array_block(a, d, &b, off);
    ck_assert_msg(rc == 0, "%s: block %d: %d %s", what, d, rc, shmap_errmsg());
    ck_assert_int_eq(b.dtype, dt);
    ck_assert_int_eq(b.rank, rank);
    int64_t n = 1;
    ref_coords(&t->r, d, c);
    ck_assert_int_eq(ref_block_shape(&t->r, s, rank, gshape, want_shape), 0);
    for (int k = 0; k < rank; k++) {
      ck_assert_msg(b.shape[k] == want_shape[k],
                    "%s: device %d dim %d: block size %lld, want %lld", what,
                    d, k, (long long)b.shape[k], (long long)want_shape[k]);
      int64_t want_off = ref_index(&t->r, s, k, c) * want_shape[k];
      ck_assert_msg(off[k] == want_off,
                    "%s: device %d dim %d: offset %lld, want %lld", what, d,
                    k, (long long)off[k], (long long)want_off);
      n *= want_shape[k];
    }
    ck_assert_int_eq(shmap_block_numel(&b), n);
    void *want = malloc((size_t)(n ? n : 1) * es);
    int64_t bs[REF_MAX_RANK];
    ck_assert_int_eq(ref_slice(&t->r, s, es, rank, gshape, src, d, bs, want),
                     0);
    if (n > 0) {
      ck_assert_ptr_nonnull(b.data);
      ck_assert_msg(memcmp(b.data, want, (size_t)n * es) == 0,
                    "%s: device %d: block contents differ", what, d);
    }
    free(want);
  }
}

static shmap_stats stats(const tmesh *t) {
  shmap_stats s;
  memset(&s, 0xee, sizeof s);
  ck_assert_int_eq(shmap_mesh_stats(t->m, &s), 0);
  return s;
}

#define EXPECT_STATS(st, sh, bu, ho, lo, mo)                                   \
  do {                                                                         \
    shmap_stats s_ = (st);                                                     \
    ck_assert_msg(s_.blocks_shared == (sh) && s_.blocks_built == (bu) &&       \
                      s_.bytes_host == (ho) && s_.bytes_local == (lo) &&       \
                      s_.bytes_moved == (mo),                                  \
                  "stats: shared %llu built %llu host %llu local %llu "        \
                  "moved %llu; want %llu %llu %llu %llu %llu",                 \
                  (unsigned long long)s_.blocks_shared,                        \
                  (unsigned long long)s_.blocks_built,                         \
                  (unsigned long long)s_.bytes_host,                           \
                  (unsigned long long)s_.bytes_local,                          \
                  (unsigned long long)s_.bytes_moved,                          \
                  (unsigned long long)(sh), (unsigned long long)(bu),          \
                  (unsigned long long)(ho), (unsigned long long)(lo),          \
                  (unsigned long long)(mo));                                   \
  } while (0)

static shmap_array *sharded(const tmesh *t, const char *spec, shmap_dtype dt,
                            int rank, const int64_t *shape, const void *data) {
  shmap_array *a = NULL;
  int rc = shmap_array_from_host_sharded(&a, t->m, spec, dt, rank, shape, data);
  ck_assert_msg(rc == 0, "from_host_sharded \"%s\": %d %s", spec, rc,
                shmap_errmsg());
  ck_assert_ptr_nonnull(a);
  return a;
}

static shmap_array *reshard(const shmap_array *a, const char *spec) {
  shmap_array *r = NULL;
  int rc = shmap_array_reshard(&r, a, spec);
  ck_assert_msg(rc == 0, "reshard \"%s\": %d %s", spec, rc, shmap_errmsg());
  ck_assert_ptr_nonnull(r);
  return r;
}

/* ---- bodies ----------------------------------------------------------------- */

/* Records, per device, the data pointer and shape of each input and
 * copies input 0 to output 0 (so the output carries the block seen). */
typedef struct rec {
  const void *in_ptr[2][MAXDEV];
  /* The first bytes of each input block, read while the map runs (the
   * blocks the map built are gone when it returns). */
  unsigned char in_head[2][MAXDEV][64];
  int64_t in_shape[2][MAXDEV][SHMAP_MAX_RANK];
  void *out_ptr[MAXDEV];
  int nin;
  int mode; /* 0: copy out; 1: out = shmap_out then fill; 2: alloc + set */
} rec;

static int rec_body(shmap_ctx *ctx, void *arg) {
  rec *r = arg;
  int d = shmap_ctx_device(ctx);
  for (int k = 0; k < r->nin; k++) {
    const shmap_block *x = shmap_in(ctx, k);
    if (!x)
      return shmap_fail(ctx, "no input %d", k);
    r->in_ptr[k][d] = x->data;
    size_t nb = shmap_block_nbytes(x);
    if (nb)
      memcpy(r->in_head[k][d], x->data, nb < 64 ? nb : 64);
    for (int i = 0; i < x->rank; i++)
      r->in_shape[k][d][i] = x->shape[i];
  }
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *o;
  switch (r->mode) {
  case 0:
    o = shmap_out_copy(ctx, 0, x);
    if (!o)
      return -1;
    break;
  case 1:
    o = shmap_out(ctx, 0, x->dtype, x->rank, x->shape);
    if (!o)
      return -1;
    memcpy(o->data, x->data, shmap_block_nbytes(x));
    break;
  default:
    o = shmap_block_alloc(ctx, x->dtype, x->rank, x->shape);
    if (!o)
      return -1;
    memcpy(o->data, x->data, shmap_block_nbytes(x));
    if (shmap_out_set(ctx, 0, o))
      return -1;
    break;
  }
  r->out_ptr[d] = o->data;
  return 0;
}

static shmap_array *run_rec(const tmesh *t, rec *r, shmap_array *in0,
                            const char *in_spec, const char *out_spec) {
  shmap_array *out = NULL;
  shmap_array *in[1] = {in0};
  const char *is[1] = {in_spec}, *os[1] = {out_spec};
  r->nin = 1;
  int rc = shmap_map(t->m, rec_body, r, 1, in, is, 1, &out, os);
  ck_assert_msg(rc == 0, "map in \"%s\" out \"%s\": %d %s", in_spec, out_spec,
                rc, shmap_errmsg());
  ck_assert_ptr_nonnull(out);
  return out;
}

/* ---- creation --------------------------------------------------------------- */

typedef struct spec_case {
  const char *text;      /* as given to the library */
  const char *nota;      /* reference notation (see rs) */
  const char *canonical; /* shmap_array_spec */
} spec_case;

/* Mesh i=4, j=2; shapes below are divisible by 8 where needed. */
static const spec_case specs_ij[] = {
    {"P()", "", "P()"},
    {"", "", "P()"},
    {"P('i')", "i", "P('i')"},
    {"j", "j", "P('j')"},
    {"P('i', 'j')", "i,j", "P('i', 'j')"},
    {"P('j','i')", "j,i", "P('j', 'i')"},
    {"P(None, 'j')", "-,j", "P(None, 'j')"},
    {"P(('i','j'))", "i+j", "P(('i', 'j'))"},
    {"(j, i), None", "j+i,-", "P(('j', 'i'), None)"},
    {"P(None, ('i','j'))", "-,i+j", "P(None, ('i', 'j'))"},
};
#define NSPECS_IJ (int)(sizeof specs_ij / sizeof specs_ij[0])

START_TEST(from_host_sharded_roundtrip) {
  tmesh t = tm("i=4, j=2");
  const int64_t shapes[2][3] = {{8, 16, 0}, {16, 8, 3}};
  const int ranks[2] = {2, 3};
  for (size_t di = 0; di < 4; di++) {
    shmap_dtype dt = all_dtypes[di];
    size_t es = shmap_dtype_size(dt);
    for (int si = 0; si < 2; si++) {
      int rank = ranks[si];
      const int64_t *shape = shapes[si];
      int64_t n = ref_numel(rank, shape);
      void *src = gen(dt, n, (int64_t)di * 10 + si);
      for (int k = 0; k < NSPECS_IJ; k++) {
        const spec_case *sc = &specs_ij[k];
        ref_spec s = rs(&t.r, sc->nota);
        char what[160];
        snprintf(what, sizeof what, "%s %s rank %d", shmap_dtype_name(dt),
                 sc->text, rank);
        shmap_mesh_stats_reset(t.m);
        shmap_array *a = sharded(&t, sc->text, dt, rank, shape, src);
        /* Each device copied its own block out of the host data. */
        int64_t bshape[REF_MAX_RANK];
        ck_assert_int_eq(ref_block_shape(&t.r, &s, rank, shape, bshape), 0);
        uint64_t bbytes = (uint64_t)ref_numel(rank, bshape) * es;
        EXPECT_STATS(stats(&t), 0, (uint64_t)t.ndev, t.ndev * bbytes, 0, 0);
        ck_assert_ptr_eq(shmap_array_mesh(a), t.m);
        ck_assert_int_eq(shmap_array_dtype(a), dt);
        ck_assert_int_eq(shmap_array_rank(a), rank);
        for (int d = 0; d < rank; d++)
          ck_assert_int_eq(shmap_array_shape(a)[d], shape[d]);
        ck_assert_int_eq(shmap_array_numel(a), n);
        expect_spec(a, sc->canonical);
        expect_host(a, src, (size_t)n * es, what);
        expect_blocks(a, &t, &s, src, what);
        shmap_array_destroy(a);
      }
      free(src);
    }
  }
  shmap_mesh_destroy(t.m);
}
END_TEST

/* shmap_array_init callback: element = its global row-major index (as the
 * dtype), computed from the offset; checks what the library passes. */
typedef struct init_rec {
  const shmap_mesh *mesh;
  const int64_t *gshape;
  int rank;
  atomic_int calls[MAXDEV];
  atomic_int bad; /* a check inside the callback failed */
  int fail_dev;   /* return fail_value on this device (-1: never) */
  int fail_value;
  int by_device; /* fill with the device number instead (not replicated) */
} init_rec;

static int init_cb(shmap_block *b, int device, const int coords[],
                   const int64_t offset[], void *arg) {
  init_rec *r = arg;
  int c[SHMAP_MAX_AXES];
  atomic_fetch_add(&r->calls[device], 1);
  if (shmap_mesh_device_coords(r->mesh, device, c) != 0)
    atomic_store(&r->bad, 1);
  for (int a = 0; a < shmap_mesh_naxes(r->mesh); a++)
    if (c[a] != coords[a])
      atomic_store(&r->bad, 2);
  if (b->rank != r->rank)
    atomic_store(&r->bad, 3);
  /* The block starts zeroed. */
  size_t nb = shmap_block_nbytes(b);
  for (size_t i = 0; i < nb; i++)
    if (((const unsigned char *)b->data)[i] != 0)
      atomic_store(&r->bad, 4);
  if (device == r->fail_dev)
    return r->fail_value;
  int64_t n = shmap_block_numel(b);
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, g = 0, mul = 1;
    for (int d = b->rank - 1; d >= 0; d--) {
      g += (offset[d] + rest % b->shape[d]) * mul;
      rest /= b->shape[d];
      mul *= r->gshape[d];
    }
    /* put(dt, buf, e, salt) stores f(e + salt): store f(g), or
     * f(device) when copies are meant to differ. */
    put(b->dtype, b->data, e, (r->by_device ? device : g) - e);
  }
  return 0;
}

START_TEST(zeros_fill_init) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[3] = {8, 16, 2};
  const int rank = 3;
  int64_t n = ref_numel(rank, shape);
  for (size_t di = 0; di < 4; di++) {
    shmap_dtype dt = all_dtypes[di];
    size_t es = shmap_dtype_size(dt);
    void *zero = calloc((size_t)n, es), *want = malloc((size_t)n * es);
    void *arange = gen(dt, n, 0);
    unsigned char value[8];
    put(dt, value, 0, 42);
    for (int64_t e = 0; e < n; e++)
      memcpy((char *)want + e * (int64_t)es, value, es);
    for (int k = 0; k < NSPECS_IJ; k++) {
      const spec_case *sc = &specs_ij[k];
      ref_spec s = rs(&t.r, sc->nota);
      char what[160];
      shmap_array *a = NULL;

      snprintf(what, sizeof what, "zeros %s %s", shmap_dtype_name(dt), sc->text);
      shmap_mesh_stats_reset(t.m);
      ck_assert_int_eq(shmap_array_zeros(&a, t.m, sc->text, dt, rank, shape), 0);
      EXPECT_STATS(stats(&t), 0, 0, 0, 0, 0);
      expect_spec(a, sc->canonical);
      ck_assert_ptr_eq(shmap_array_mesh(a), t.m);
      expect_host(a, zero, (size_t)n * es, what);
      expect_blocks(a, &t, &s, zero, what);
      shmap_array_destroy(a);

      snprintf(what, sizeof what, "fill %s %s", shmap_dtype_name(dt), sc->text);
      a = NULL;
      ck_assert_int_eq(
          shmap_array_fill(&a, t.m, sc->text, dt, rank, shape, value), 0);
      EXPECT_STATS(stats(&t), 0, 0, 0, 0, 0);
      expect_spec(a, sc->canonical);
      expect_host(a, want, (size_t)n * es, what);
      expect_blocks(a, &t, &s, want, what);
      shmap_array_destroy(a);

      snprintf(what, sizeof what, "init %s %s", shmap_dtype_name(dt), sc->text);
      init_rec *r = calloc(1, sizeof *r);
      r->mesh = t.m;
      r->gshape = shape;
      r->rank = rank;
      r->fail_dev = -1;
      a = NULL;
      int rc = shmap_array_init(&a, t.m, sc->text, dt, rank, shape, init_cb, r);
      ck_assert_msg(rc == 0, "%s: %d %s", what, rc, shmap_errmsg());
      ck_assert_int_eq(atomic_load(&r->bad), 0);
      for (int d = 0; d < t.ndev; d++)
        ck_assert_int_eq(atomic_load(&r->calls[d]), 1);
      expect_spec(a, sc->canonical);
      expect_host(a, arange, (size_t)n * es, what);
      expect_blocks(a, &t, &s, arange, what);
      shmap_array_destroy(a);
      free(r);
    }
    free(zero);
    free(want);
    free(arange);
  }
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(empty_and_scalar) {
  tmesh t = tm("i=4, j=2");
  /* An empty array: data may be NULL. */
  const int64_t eshape[2] = {0, 8};
  shmap_array *a = NULL;
  ck_assert_int_eq(shmap_array_from_host_sharded(&a, t.m, "P('i', 'j')",
                                                 SHMAP_F32, 2, eshape, NULL),
                   0);
  ck_assert_int_eq(shmap_array_numel(a), 0);
  ck_assert_int_eq(shmap_array_to_host(a, NULL), 0);
  for (int d = 0; d < t.ndev; d++) {
    shmap_block b;
    int64_t off[2];
    ck_assert_int_eq(shmap_array_block(a, d, &b, off), 0);
    ck_assert_int_eq(b.shape[0], 0);
    ck_assert_int_eq(b.shape[1], 4);
    ck_assert_int_eq(off[0], 0);
    ck_assert_int_eq(off[1], 4 * (d % 2));
  }
  shmap_array *r = reshard(a, "P(None, ('i','j'))");
  ck_assert_int_eq(shmap_array_numel(r), 0);
  shmap_array_destroy(r);
  shmap_array_destroy(a);
  a = NULL;
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "P('i')", SHMAP_I64, 2, eshape),
                   0);
  ck_assert_int_eq(shmap_array_numel(a), 0);
  shmap_array_destroy(a);

  /* Rank 0: one element, held by every device. */
  double x = 2.75, y = 0;
  a = NULL;
  ck_assert_int_eq(
      shmap_array_from_host_sharded(&a, t.m, "P()", SHMAP_F64, 0, NULL, &x), 0);
  expect_spec(a, "P()");
  ck_assert_int_eq(shmap_array_rank(a), 0);
  ck_assert_int_eq(shmap_array_numel(a), 1);
  ck_assert_int_eq(shmap_array_to_host(a, &y), 0);
  ck_assert(y == 2.75);
  for (int d = 0; d < t.ndev; d++) {
    shmap_block b;
    ck_assert_int_eq(shmap_array_block(a, d, &b, NULL), 0);
    ck_assert_int_eq(b.rank, 0);
    ck_assert(*(const double *)b.data == 2.75);
  }
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(spec_canonical_text) {
  tmesh t = tm("i=2, j=2, k=2");
  const int64_t shape[3] = {8, 8, 8};
  static const struct {
    const char *in;
    int rank;
    const char *want;
  } cases[] = {
      {"i, (j,k)", 2, "P('i', ('j', 'k'))"},
      {"P('i', ('j','k'), None)", 3, "P('i', ('j', 'k'), None)"},
      {"P(('i',), None)", 2, "P('i', None)"},
      {"P((), 'i')", 2, "P(None, 'i')"},
      {"", 2, "P()"},
      {"P()", 3, "P()"},
      {"PartitionSpec('j')", 1, "P('j')"},
      {"  P( None ,\"k\" , )  ", 2, "P(None, 'k')"},
      {"None, None, (k, j, i)", 3, "P(None, None, ('k', 'j', 'i'))"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    shmap_array *a = NULL;
    int rc = shmap_array_zeros(&a, t.m, cases[c].in, SHMAP_I32, cases[c].rank,
                               shape);
    ck_assert_msg(rc == 0, "\"%s\": %d %s", cases[c].in, rc, shmap_errmsg());
    expect_spec(a, cases[c].want);
    shmap_array_destroy(a);
  }
  /* Return value like snprintf: the full length, truncated copies. */
  shmap_array *a = NULL;
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "i, (j,k)", SHMAP_I32, 2, shape),
                   0);
  const char *want = "P('i', ('j', 'k'))";
  int len = (int)strlen(want);
  char buf[8];
  memset(buf, 'x', sizeof buf);
  ck_assert_int_eq(shmap_array_spec(a, buf, 4), len);
  ck_assert_str_eq(buf, "P('");
  ck_assert_int_eq(buf[4], 'x');
  ck_assert_int_eq(shmap_array_spec(a, NULL, 0), len);
  ck_assert_int_eq(shmap_array_spec(a, buf, 1), len);
  ck_assert_str_eq(buf, "");
  /* The output of a map carries its out spec, canonically. */
  rec *r = calloc(1, sizeof *r);
  shmap_array *o = run_rec(&t, r, a, "k, (i, j)", "P(('k',), ('i', 'j'),)");
  expect_spec(o, "P('k', ('i', 'j'))");
  shmap_array_destroy(o);
  free(r);
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(block_access) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 12};
  double src[96];
  for (int e = 0; e < 96; e++)
    src[e] = e + 0.5;
  /* P('j', 'i'): rows by j (2 blocks of 4), columns by i (4 blocks of 3);
   * device (i, j) = 2i + j holds rows 4j.., columns 3i... */
  shmap_array *a = sharded(&t, "P('j', 'i')", SHMAP_F64, 2, shape, src);
  const void *ptr[8];
  for (int d = 0; d < 8; d++) {
    int i = d / 2, j = d % 2;
    shmap_block b;
    int64_t off[2] = {-1, -1};
    ck_assert_int_eq(shmap_array_block(a, d, &b, off), 0);
    ck_assert_int_eq(b.dtype, SHMAP_F64);
    ck_assert_int_eq(b.rank, 2);
    ck_assert_int_eq(b.shape[0], 4);
    ck_assert_int_eq(b.shape[1], 3);
    ck_assert_int_eq(off[0], 4 * j);
    ck_assert_int_eq(off[1], 3 * i);
    ck_assert_uint_eq(shmap_block_nbytes(&b), 96);
    const double *v = b.data;
    for (int r = 0; r < 4; r++)
      for (int c = 0; c < 3; c++)
        ck_assert(v[r * 3 + c] == src[(4 * j + r) * 12 + 3 * i + c]);
    ptr[d] = b.data;
    for (int e = 0; e < d; e++)
      ck_assert_ptr_ne(ptr[e], ptr[d]);
    /* The offset argument may be NULL; the view is the same. */
    shmap_block b2;
    ck_assert_int_eq(shmap_array_block(a, d, &b2, NULL), 0);
    ck_assert_ptr_eq(b2.data, b.data);
  }
  shmap_array_destroy(a);

  /* P('i') on i=4, j=2: devices (i,0) and (i,1) hold equal copies of rows
   * 2i, 2i+1, each in its own memory. */
  a = sharded(&t, "P('i')", SHMAP_F64, 2, shape, src);
  for (int d = 0; d < 8; d++) {
    shmap_block b, p;
    int64_t off[2];
    ck_assert_int_eq(shmap_array_block(a, d, &b, off), 0);
    ck_assert_int_eq(b.shape[0], 2);
    ck_assert_int_eq(b.shape[1], 12);
    ck_assert_int_eq(off[0], 2 * (d / 2));
    ck_assert_int_eq(off[1], 0);
    ck_assert(memcmp(b.data, src + 24 * (d / 2), 24 * sizeof(double)) == 0);
    if (d % 2) {
      ck_assert_int_eq(shmap_array_block(a, d - 1, &p, NULL), 0);
      ck_assert_ptr_ne(p.data, b.data);
    }
  }
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(array_mesh_query) {
  tmesh t = tm("i=2");
  const int64_t shape[1] = {4};
  int32_t v[4] = {1, 2, 3, 4};
  shmap_array *h = NULL;
  ck_assert_int_eq(shmap_array_from_host(&h, SHMAP_I32, 1, shape, v), 0);
  ck_assert_ptr_null(shmap_array_mesh(h));
  shmap_array *s = sharded(&t, "i", SHMAP_I32, 1, shape, v);
  ck_assert_ptr_eq(shmap_array_mesh(s), t.m);
  rec *r = calloc(1, sizeof *r);
  shmap_array *o = run_rec(&t, r, h, "P('i')", "P('i')");
  ck_assert_ptr_eq(shmap_array_mesh(o), t.m);
  expect_host(o, v, sizeof v, "map of a host array");
  ck_assert_ptr_null(shmap_array_mesh(NULL));
  ck_assert_int_eq(shmap_array_to_host(h, v), 0);
  shmap_array_destroy(o);
  shmap_array_destroy(s);
  shmap_array_destroy(h);
  free(r);
  shmap_mesh_destroy(t.m);
}
END_TEST

/* ---- chaining maps ---------------------------------------------------------- */

/* out = 2 * x (f32), under out spec = in spec. */
static int twice_body(shmap_ctx *ctx, void *arg) {
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  if (!x)
    return -1;
  shmap_block *o = shmap_out(ctx, 0, x->dtype, x->rank, x->shape);
  if (!o)
    return -1;
  int64_t n = shmap_block_numel(x);
  for (int64_t e = 0; e < n; e++)
    ((float *)o->data)[e] = 2 * ((const float *)x->data)[e];
  return 0;
}

START_TEST(chain_shares_blocks) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 16};
  float src[128], twice[128];
  for (int e = 0; e < 128; e++) {
    src[e] = (float)e - 60;
    twice[e] = 2 * src[e];
  }
  ref_spec s = rs(&t.r, "i,j");
  shmap_array *a = sharded(&t, "P('i', 'j')", SHMAP_F32, 2, shape, src);
  shmap_array *b = NULL;
  const char *ij[1] = {"P('i', 'j')"};
  int rc = shmap_map(t.m, twice_body, NULL, 1, &a, ij, 1, &b, ij);
  ck_assert_msg(rc == 0, "%d %s", rc, shmap_errmsg());
  expect_blocks(b, &t, &s, twice, "2x");

  /* The same spec, written three ways: every body reads the very block the
   * array keeps on its device. */
  static const char *const same[] = {"P('i', 'j')", "i, j", "P(('i',), 'j')"};
  for (int w = 0; w < 3; w++) {
    rec *r = calloc(1, sizeof *r);
    shmap_mesh_stats_reset(t.m);
    shmap_array *c = run_rec(&t, r, b, same[w], "P('i', 'j')");
    shmap_stats st = stats(&t);
    ck_assert_uint_eq(st.maps, 1);
    EXPECT_STATS(st, (uint64_t)t.ndev, 0, 0, 0, 0);
    for (int d = 0; d < t.ndev; d++) {
      shmap_block blk;
      ck_assert_int_eq(shmap_array_block(b, d, &blk, NULL), 0);
      ck_assert_msg(r->in_ptr[0][d] == blk.data,
                    "\"%s\": device %d saw %p, the array keeps %p", same[w],
                    d, r->in_ptr[0][d], blk.data);
      ck_assert_int_eq(r->in_shape[0][d][0], 2);
      ck_assert_int_eq(r->in_shape[0][d][1], 8);
    }
    expect_host(c, twice, sizeof twice, "chained copy");
    shmap_array_destroy(c);
    free(r);
  }
  /* An array made by from_host_sharded chains the same way. */
  rec *r = calloc(1, sizeof *r);
  shmap_mesh_stats_reset(t.m);
  shmap_array *c = run_rec(&t, r, a, "i, j", "i, j");
  EXPECT_STATS(stats(&t), (uint64_t)t.ndev, 0, 0, 0, 0);
  for (int d = 0; d < t.ndev; d++) {
    shmap_block blk;
    ck_assert_int_eq(shmap_array_block(a, d, &blk, NULL), 0);
    ck_assert_ptr_eq(r->in_ptr[0][d], blk.data);
  }
  shmap_array_destroy(c);
  free(r);
  shmap_array_destroy(b);
  shmap_array_destroy(a);

  /* A spec shorter than the rank equals its padded form; P() equals an
   * all-None spec. */
  static const struct {
    const char *made, *read;
  } pads[] = {{"P('i')", "P('i', None)"},
              {"P('i', None)", "i"},
              {"P()", "P(None, None)"},
              {"None, None", ""},
              {"P(None, 'j')", "P((), ('j',))"}};
  for (size_t k = 0; k < sizeof pads / sizeof pads[0]; k++) {
    a = sharded(&t, pads[k].made, SHMAP_F32, 2, shape, src);
    r = calloc(1, sizeof *r);
    shmap_mesh_stats_reset(t.m);
    c = run_rec(&t, r, a, pads[k].read, pads[k].made);
    EXPECT_STATS(stats(&t), (uint64_t)t.ndev, 0, 0, 0, 0);
    for (int d = 0; d < t.ndev; d++) {
      shmap_block blk;
      ck_assert_int_eq(shmap_array_block(a, d, &blk, NULL), 0);
      ck_assert_msg(r->in_ptr[0][d] == blk.data, "made %s read %s: copied",
                    pads[k].made, pads[k].read);
    }
    expect_host(c, src, sizeof src, pads[k].read);
    shmap_array_destroy(c);
    shmap_array_destroy(a);
    free(r);
  }
  shmap_mesh_destroy(t.m);
}
END_TEST

/* The output array keeps the very blocks the bodies declared. */
START_TEST(outputs_keep_device_blocks) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 16};
  int64_t src[128];
  for (int e = 0; e < 128; e++)
    src[e] = (int64_t)e << 35;
  shmap_array *a = sharded(&t, "P('i', 'j')", SHMAP_I64, 2, shape, src);
  for (int mode = 0; mode < 3; mode++) {
    rec *r = calloc(1, sizeof *r);
    r->mode = mode;
    shmap_array *o = run_rec(&t, r, a, "P('i', 'j')", "P('i', 'j')");
    for (int d = 0; d < t.ndev; d++) {
      shmap_block blk;
      ck_assert_int_eq(shmap_array_block(o, d, &blk, NULL), 0);
      ck_assert_msg(blk.data == r->out_ptr[d],
                    "mode %d device %d: output block moved", mode, d);
    }
    expect_host(o, src, sizeof src, "copy");
    shmap_array_destroy(o);
    free(r);
  }
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(host_input_copied_per_device) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 16};
  float src[128];
  for (int e = 0; e < 128; e++)
    src[e] = (float)e;
  shmap_array *h = NULL;
  ck_assert_int_eq(shmap_array_from_host(&h, SHMAP_F32, 2, shape, src), 0);
  /* P('i', 'j'): 8 blocks of f32[2,8] (64 bytes). */
  rec *r = calloc(1, sizeof *r);
  shmap_mesh_stats_reset(t.m);
  shmap_array *o = run_rec(&t, r, h, "P('i', 'j')", "P('i', 'j')");
  EXPECT_STATS(stats(&t), 0, 8, 8 * 64, 0, 0);
  ref_spec s = rs(&t.r, "i,j");
  expect_blocks(o, &t, &s, src, "host in");
  shmap_array_destroy(o);
  /* P('i'): devices along j each get their own copy: 8 x 128 bytes. */
  shmap_mesh_stats_reset(t.m);
  o = run_rec(&t, r, h, "P('i')", "P('i')");
  EXPECT_STATS(stats(&t), 0, 8, 8 * 128, 0, 0);
  for (int d = 1; d < 8; d++)
    ck_assert_ptr_ne(r->in_ptr[0][d], r->in_ptr[0][d - 1]);
  shmap_array_destroy(o);
  free(r);
  shmap_array_destroy(h);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(implicit_reshard) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {16, 8};
  float src[128];
  for (int e = 0; e < 128; e++)
    src[e] = (float)e * 0.25f;
  shmap_array *a = sharded(&t, "P('i', None)", SHMAP_F32, 2, shape, src);
  /* Read as P(None, 'i'): each device builds f32[16,2] from the 4 devices
   * with its j holding the rows: 4 pieces of f32[4,2] (32 bytes), one its
   * own.  Local 8 x 32 = 256, moved 8 x 96 = 768. */
  rec *r = calloc(1, sizeof *r);
  shmap_mesh_stats_reset(t.m);
  shmap_array *o = run_rec(&t, r, a, "P(None, 'i')", "P(None, 'i')");
  EXPECT_STATS(stats(&t), 0, 8, 0, 256, 768);
  for (int d = 0; d < 8; d++) {
    ck_assert_int_eq(r->in_shape[0][d][0], 16);
    ck_assert_int_eq(r->in_shape[0][d][1], 2);
    shmap_block blk;
    ck_assert_int_eq(shmap_array_block(a, d, &blk, NULL), 0);
    ck_assert_ptr_ne(r->in_ptr[0][d], blk.data);
  }
  ref_spec s = rs(&t.r, "-,i");
  expect_blocks(o, &t, &s, src, "implicit all-to-all");
  expect_host(o, src, sizeof src, "implicit all-to-all");
  expect_spec(o, "P(None, 'i')");
  shmap_array_destroy(o);

  /* Two inputs: one read as it is laid out (shared), one resharded. */
  shmap_array *b = sharded(&t, "P(('i', 'j'))", SHMAP_F32, 2, shape, src);
  shmap_array *in[2] = {b, a};
  const char *is[2] = {"P(('i', 'j'))", "P(('i', 'j'))"};
  const char *os[1] = {"P(('i', 'j'))"};
  r->nin = 2;
  shmap_mesh_stats_reset(t.m);
  o = NULL;
  int rc = shmap_map(t.m, rec_body, r, 2, in, is, 1, &o, os);
  ck_assert_msg(rc == 0, "%d %s", rc, shmap_errmsg());
  /* Input 1: P('i') -> P(('i','j')) is a slice of the own block: 8 blocks
   * of f32[2,8] (64 bytes) copied locally. */
  EXPECT_STATS(stats(&t), 8, 8, 0, 512, 0);
  for (int d = 0; d < 8; d++) {
    shmap_block blk;
    ck_assert_int_eq(shmap_array_block(b, d, &blk, NULL), 0);
    ck_assert_ptr_eq(r->in_ptr[0][d], blk.data);
    ck_assert(memcmp(r->in_head[1][d], src + 16 * d, 64) == 0);
  }
  shmap_array_destroy(o);
  shmap_array_destroy(b);
  free(r);
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

/* ---- explicit reshard ----------------------------------------------------------- */

typedef struct reshard_case {
  const char *from, *from_nota, *to, *to_nota, *canonical;
  int64_t rows, cols;
  uint64_t local, moved; /* expected totals over the 8 devices */
} reshard_case;

/* Mesh i=4, j=2, f32 arrays (4-byte elements).  The counts: */
static const reshard_case cheap[] = {
    /* Adding axes is a slice of the own block: f32[4,8] -> f32[2,8], so
     * 8 x 64 bytes local, nothing moved. */
    {"P('i')", "i", "P(('i','j'))", "i+j", "P(('i', 'j'))", 16, 8, 512, 0},
    /* P() -> P('i','j'): every device slices f32[4,4] out of the whole. */
    {"P()", "", "P('i', 'j')", "i,j", "P('i', 'j')", 16, 8, 512, 0},
    {"P('i')", "i", "P('i', 'j')", "i,j", "P('i', 'j')", 16, 8, 512, 0},
    {"P(None, 'j')", "-,j", "P(('i'), ('j'))", "i,j", "P('i', 'j')", 16, 8,
     512, 0},
    /* All-gather over j: f32[2,8] -> f32[4,8] (128 bytes); half of it is
     * the own block, half comes from the partner along j: 8 x 64 local,
     * 8 x 64 moved ((n-1)/n = 1/2 of each new block). */
    {"P(('i','j'))", "i+j", "P('i')", "i", "P('i')", 16, 8, 512, 512},
    /* All-gather over everything: new block f32[16,8] (512 bytes), 64 of
     * them own, 448 from the 7 others: 8 x 64 local, 8 x 448 moved. */
    {"P(('i','j'))", "i+j", "P()", "", "P()", 16, 8, 512, 3584},
    /* Gather the columns over j: f32[4,4] -> f32[4,8]. */
    {"P('i', 'j')", "i,j", "P('i')", "i", "P('i')", 16, 8, 512, 512},
    /* All-to-all over i: f32[4,8] -> f32[16,2] (128 bytes), one f32[4,2]
     * piece (32 bytes) own, three from the devices with the same j. */
    {"P('i', None)", "i,-", "P(None, 'i')", "-,i", "P(None, 'i')", 16, 8,
     256, 768},
    /* All-to-all over all 8 devices on f32[16,16]: f32[2,16] -> f32[16,2]
     * (128 bytes), f32[2,2] (16 bytes) own: 8 x 16 local, 8 x 112 moved. */
    {"P(('i','j'), None)", "i+j,-", "P(None, ('i','j'))", "-,i+j",
     "P(None, ('i', 'j'))", 16, 16, 128, 896},
    /* Permute: P(('i','j')) has block index 2i+j, P(('j','i')) 4j+i; they
     * agree only on devices (0,0) and (3,1), the 6 others fetch a whole
     * f32[2,8] block (64 bytes): 2 x 64 local, 6 x 64 moved. */
    {"P(('i','j'))", "i+j", "P(('j','i'))", "j+i", "P(('j', 'i'))", 16, 8,
     128, 384},
    /* The example of shmap_array_reshard(3): f32[8,16] P('i') ->
     * P(None, ('i','j')): f32[8,2] blocks, 4 of 16 elements own. */
    {"P('i')", "i", "P(None, ('i', 'j'))", "-,i+j", "P(None, ('i', 'j'))", 8,
     16, 128, 384},
};

START_TEST(reshard_exact_bytes) {
  tmesh t = tm("i=4, j=2");
  for (size_t k = 0; k < sizeof cheap / sizeof cheap[0]; k++) {
    const reshard_case *c = &cheap[k];
    int64_t shape[2] = {c->rows, c->cols};
    int64_t n = c->rows * c->cols;
    float *src = gen(SHMAP_F32, n, (int64_t)k);
    ref_spec sa = rs(&t.r, c->from_nota), sb = rs(&t.r, c->to_nota);
    char what[160];
    snprintf(what, sizeof what, "%s -> %s", c->from, c->to);
    shmap_array *a = sharded(&t, c->from, SHMAP_F32, 2, shape, src);
    shmap_mesh_stats_reset(t.m);
    shmap_array *b = reshard(a, c->to);
    shmap_stats st = stats(&t);
    ck_assert_msg(st.blocks_built == 8 && st.blocks_shared == 0 &&
                      st.bytes_host == 0 && st.bytes_local == c->local &&
                      st.bytes_moved == c->moved,
                  "%s: built %llu shared %llu host %llu local %llu moved "
                  "%llu; want 8 0 0 %llu %llu",
                  what, (unsigned long long)st.blocks_built,
                  (unsigned long long)st.blocks_shared,
                  (unsigned long long)st.bytes_host,
                  (unsigned long long)st.bytes_local,
                  (unsigned long long)st.bytes_moved,
                  (unsigned long long)c->local, (unsigned long long)c->moved);
    ck_assert_ptr_eq(shmap_array_mesh(b), t.m);
    ck_assert_int_eq(shmap_array_dtype(b), SHMAP_F32);
    ck_assert_int_eq(shmap_array_shape(b)[0], c->rows);
    ck_assert_int_eq(shmap_array_shape(b)[1], c->cols);
    expect_spec(b, c->canonical);
    expect_host(b, src, (size_t)n * 4, what);
    expect_blocks(b, &t, &sb, src, what);
    /* The source is unchanged and still laid out as before. */
    expect_blocks(a, &t, &sa, src, what);
    /* The same move through a map's input costs the same. */
    rec *r = calloc(1, sizeof *r);
    shmap_mesh_stats_reset(t.m);
    shmap_array *o = run_rec(&t, r, a, c->to, c->to);
    st = stats(&t);
    ck_assert_msg(st.bytes_local == c->local && st.bytes_moved == c->moved &&
                      st.blocks_built == 8,
                  "%s via a map: local %llu moved %llu", what,
                  (unsigned long long)st.bytes_local,
                  (unsigned long long)st.bytes_moved);
    expect_blocks(o, &t, &sb, src, what);
    /* And back. */
    shmap_array *back = reshard(b, c->from);
    expect_blocks(back, &t, &sa, src, what);
    char from_text[128];
    spec_text(a, from_text, sizeof from_text);
    expect_spec(back, from_text);
    shmap_array_destroy(back);
    shmap_array_destroy(o);
    free(r);
    shmap_array_destroy(b);
    shmap_array_destroy(a);
    free(src);
  }
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(reshard_small_mesh_permute) {
  /* Mesh i=2, j=2, f64[8,8]: P('i','j') -> P('j','i') keeps the f64[4,4]
   * blocks of devices 0 and 3 (i == j) and swaps those of 1 and 2. */
  tmesh t = tm("i=2, j=2");
  const int64_t shape[2] = {8, 8};
  double *src = gen(SHMAP_F64, 64, 3);
  shmap_array *a = sharded(&t, "P('i', 'j')", SHMAP_F64, 2, shape, src);
  shmap_mesh_stats_reset(t.m);
  shmap_array *b = reshard(a, "P('j', 'i')");
  EXPECT_STATS(stats(&t), 0, 4, 0, 2 * 128, 2 * 128);
  ref_spec s = rs(&t.r, "j,i");
  expect_blocks(b, &t, &s, src, "swap");
  shmap_array_destroy(b);
  shmap_array_destroy(a);
  free(src);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(reshard_same_spec_copies) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 8};
  int32_t src[64];
  for (int e = 0; e < 64; e++)
    src[e] = e * 11;
  shmap_array *a = sharded(&t, "P('i')", SHMAP_I32, 2, shape, src);
  shmap_array *b = reshard(a, "i");
  for (int d = 0; d < 8; d++) {
    shmap_block x, y;
    ck_assert_int_eq(shmap_array_block(a, d, &x, NULL), 0);
    ck_assert_int_eq(shmap_array_block(b, d, &y, NULL), 0);
    ck_assert_ptr_ne(x.data, y.data);
  }
  /* The copy outlives its source. */
  shmap_array_destroy(a);
  ref_spec s = rs(&t.r, "i");
  expect_blocks(b, &t, &s, src, "copy");
  expect_host(b, src, sizeof src, "copy");
  shmap_array_destroy(b);
  shmap_mesh_destroy(t.m);
}
END_TEST

/* ---- lifetime ----------------------------------------------------------------- */

/* Threads of this process (Linux: entries of /proc/self/task), or -1. */
static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

/* The threads fewer than `before` once a destroy has joined its threads:
 * pthread_join returns when a thread's kernel task clears its id, which
 * comes before the task leaves /proc/self/task, so a joined thread may
 * still be listed for a moment (on a loaded machine, long enough to
 * count).  Polled for up to 10 s. */
static int threads_gone(int before, int expect) {
  int gone = before - count_threads();
  for (int i = 0; i < 1000 && gone < expect; i++) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
    gone = before - count_threads();
  }
  return gone;
}

START_TEST(array_keeps_mesh_alive) {
  /* One thread per device, so the thread count shows the mesh's threads
   * (fiber mode would run them on a few workers). */
  setenv("SHMAP_SCHED", "threads", 1);
  int base = count_threads();
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 8};
  float src[64];
  for (int e = 0; e < 64; e++)
    src[e] = (float)e;
  shmap_array *a = sharded(&t, "P('i', 'j')", SHMAP_F32, 2, shape, src);
  shmap_array *z = NULL;
  ck_assert_int_eq(shmap_array_zeros(&z, t.m, "P()", SHMAP_F32, 2, shape), 0);
  shmap_mesh *m = t.m;
  shmap_mesh_destroy(t.m);
  t.m = NULL;
  /* The device threads still run: the arrays hold the mesh. */
  if (base > 0)
    ck_assert_int_gt(count_threads(), base);
  /* The arrays still work, and so does their mesh. */
  ck_assert_ptr_eq(shmap_array_mesh(a), m);
  ck_assert_int_eq(shmap_mesh_ndevices(shmap_array_mesh(a)), 8);
  expect_host(a, src, sizeof src, "after mesh destroy");
  expect_spec(a, "P('i', 'j')");
  shmap_block blk;
  ck_assert_int_eq(shmap_array_block(a, 7, &blk, NULL), 0);
  ck_assert(((const float *)blk.data)[0] == 6 * 8 + 4);
  shmap_array *b = reshard(a, "P(None, 'i')");
  expect_host(b, src, sizeof src, "resharded after mesh destroy");
  rec *r = calloc(1, sizeof *r);
  shmap_mesh_stats_reset(m);
  shmap_array *o = NULL, *in[1] = {b};
  const char *is[1] = {"P(None, 'i')"};
  r->nin = 1;
  ck_assert_int_eq(shmap_map(m, rec_body, r, 1, in, is, 1, &o, is), 0);
  shmap_stats st;
  ck_assert_int_eq(shmap_mesh_stats(m, &st), 0);
  ck_assert_uint_eq(st.blocks_shared, 8);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(shmap_array_visualize(o, f), 0);
  fclose(f);
  shmap_array_destroy(a);
  shmap_array_destroy(z);
  shmap_array_destroy(b);
  expect_host(o, src, sizeof src, "last array");
  int running = count_threads();
  if (base > 0)
    ck_assert_int_gt(running, base);
  shmap_array_destroy(o); /* the last reference: the mesh goes too */
  /* ... and with it its 8 device threads (ASan's leak check sees the
   * memory). */
  if (base > 0)
    ck_assert_int_eq(threads_gone(running, 8), 8);
  free(r);
}
END_TEST

/* Arrays destroyed first: the mesh lives on with the user's handle. */
START_TEST(mesh_outlives_arrays) {
  /* One thread per device, so the thread count shows the mesh's threads
   * (fiber mode would run them on a few workers). */
  setenv("SHMAP_SCHED", "threads", 1);
  int base = count_threads();
  tmesh t = tm("i=2, j=2");
  const int64_t shape[1] = {4};
  shmap_array *a = NULL, *b = NULL;
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "i", SHMAP_I32, 1, shape), 0);
  ck_assert_int_eq(shmap_array_zeros(&b, t.m, "j", SHMAP_I32, 1, shape), 0);
  shmap_array_destroy(a);
  shmap_array_destroy(b);
  ck_assert_int_eq(shmap_mesh_ndevices(t.m), 4);
  a = NULL;
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "P()", SHMAP_I32, 1, shape), 0);
  shmap_array_destroy(a);
  int running = count_threads();
  shmap_mesh_destroy(t.m);
  if (base > 0)
    ck_assert_int_eq(threads_gone(running, 4), 4);
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

static shmap_array *const SENTINEL = (shmap_array *)(uintptr_t)0x10;

typedef enum { C_FROM_HOST, C_ZEROS, C_FILL, C_INIT, C_RESHARD, C_COUNT } cfn;
static const char *const cfn_name[C_COUNT] = {
    "shmap_array_from_host_sharded", "shmap_array_zeros", "shmap_array_fill",
    "shmap_array_init", "shmap_array_reshard"};

static int zero_init(shmap_block *b, int device, const int coords[],
                     const int64_t offset[], void *arg) {
  (void)b, (void)device, (void)coords, (void)offset, (void)arg;
  return 0;
}

/* Create through function f with the given spec and shape (reshard starts
 * from a replicated array of that shape). */
static int create(cfn f, shmap_mesh *m, shmap_array **out, const char *spec,
                  int rank, const int64_t *shape) {
  static double data[4096];
  double one = 1;
  switch (f) {
  case C_FROM_HOST:
    return shmap_array_from_host_sharded(out, m, spec, SHMAP_F64, rank, shape,
                                         data);
  case C_ZEROS: return shmap_array_zeros(out, m, spec, SHMAP_F64, rank, shape);
  case C_FILL:
    return shmap_array_fill(out, m, spec, SHMAP_F64, rank, shape, &one);
  case C_INIT:
    return shmap_array_init(out, m, spec, SHMAP_F64, rank, shape, zero_init,
                            NULL);
  default: {
    shmap_array *src = NULL;
    int rc = shmap_array_zeros(&src, m, "P()", SHMAP_F64, rank, shape);
    ck_assert_msg(rc == 0, "%d %s", rc, shmap_errmsg());
    rc = shmap_array_reshard(out, src, spec);
    shmap_array_destroy(src);
    return rc;
  }
  }
}

START_TEST(err_specs_each_creator) {
  tmesh t = tm("i=4, j=2");
  const int64_t good[2] = {8, 8}, bad[2] = {6, 8};
  for (int f = 0; f < C_COUNT; f++) {
    const char *fn = cfn_name[f];
    shmap_array *a = SENTINEL;
    const char *msg;

    int rc = create((cfn)f, t.m, &a, "P('k')", 2, good);
    msg = shmap_errmsg();
    ck_assert_msg(rc == SHMAP_EAXIS, "%s unknown axis: %d %s", fn, rc, msg);
    ck_assert_ptr_null(a);
    ck_assert_msg(t_has(msg, "'k'") && t_has(msg, fn) &&
                      t_has(msg, "unknown axis"),
                  "%s: message \"%s\"", fn, msg);

    a = SENTINEL;
    rc = create((cfn)f, t.m, &a, "P('i', 'i')", 2, good);
    msg = shmap_errmsg();
    ck_assert_msg(rc == SHMAP_EAXIS, "%s duplicate: %d %s", fn, rc, msg);
    ck_assert_ptr_null(a);
    ck_assert_msg(t_has(msg, "'i'") && t_has(msg, "more than once"),
                  "%s: message \"%s\"", fn, msg);

    a = SENTINEL;
    rc = create((cfn)f, t.m, &a, "P('i')", 2, bad);
    msg = shmap_errmsg();
    ck_assert_msg(rc == SHMAP_ESHAPE, "%s not divisible: %d %s", fn, rc, msg);
    ck_assert_ptr_null(a);
    ck_assert_msg(t_has(msg, fn) && t_has(msg, "dimension 0") &&
                      t_has_int(msg, 6) && t_has_int(msg, 4) &&
                      t_has(msg, "'i'"),
                  "%s: message \"%s\"", fn, msg);

    /* Divisible by each axis, not by the group: 6 over ('j','i') = 8. */
    a = SENTINEL;
    const int64_t bad2[2] = {8, 6};
    rc = create((cfn)f, t.m, &a, "P(None, ('j', 'i'))", 2, bad2);
    msg = shmap_errmsg();
    ck_assert_msg(rc == SHMAP_ESHAPE, "%s group: %d %s", fn, rc, msg);
    ck_assert_ptr_null(a);
    ck_assert_msg(t_has(msg, "dimension 1") && t_has_int(msg, 8) &&
                      t_has(msg, "('j', 'i')"),
                  "%s: message \"%s\"", fn, msg);

    a = SENTINEL;
    rc = create((cfn)f, t.m, &a, "P('i', 'j', None)", 2, good);
    msg = shmap_errmsg();
    ck_assert_msg(rc == SHMAP_ESHAPE, "%s too long: %d %s", fn, rc, msg);
    ck_assert_ptr_null(a);
    ck_assert_msg(t_has(msg, fn) && t_has(msg, "length 3") &&
                      t_has(msg, "rank 2"),
                  "%s: message \"%s\"", fn, msg);

    a = SENTINEL;
    rc = create((cfn)f, t.m, &a, "P('i'", 2, good);
    ck_assert_msg(rc == SHMAP_ESYNTAX, "%s syntax: %d %s", fn, rc,
                  shmap_errmsg());
    ck_assert_ptr_null(a);
  }
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(err_null_and_bad_args) {
  tmesh t = tm("i=2");
  const int64_t shape[1] = {4};
  float data[4] = {0}, one = 1;
  shmap_array *a = SENTINEL;
  /* NULL output pointer. */
  ck_assert_int_eq(shmap_array_from_host_sharded(NULL, t.m, "i", SHMAP_F32, 1,
                                                 shape, data),
                   SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_zeros(NULL, t.m, "i", SHMAP_F32, 1, shape),
                   SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_fill(NULL, t.m, "i", SHMAP_F32, 1, shape, &one),
                   SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_init(NULL, t.m, "i", SHMAP_F32, 1, shape,
                                    zero_init, NULL),
                   SHMAP_EINVAL);
  /* NULL mesh, spec, shape, data, value, init. */
  /* Each must return SHMAP_EINVAL and set the output to NULL (the man
   * pages: "with *array set to NULL (when array is not NULL)"); calls that
   * leave it set are collected and reported together. */
  char left_set[1024] = "";
#define NULLCASE(call)                                                         \
  do {                                                                         \
    a = SENTINEL;                                                              \
    int rc_ = (call);                                                          \
    ck_assert_msg(rc_ == SHMAP_EINVAL, "%s: %d %s", #call, rc_,                \
                  shmap_errmsg());                                             \
    if (a != NULL) {                                                           \
      size_t l_ = strlen(left_set);                                            \
      snprintf(left_set + l_, sizeof left_set - l_, "\n  %s", #call);          \
    }                                                                          \
  } while (0)
  NULLCASE(shmap_array_from_host_sharded(&a, NULL, "i", SHMAP_F32, 1, shape,
                                         data));
  NULLCASE(shmap_array_from_host_sharded(&a, t.m, NULL, SHMAP_F32, 1, shape,
                                         data));
  NULLCASE(shmap_array_from_host_sharded(&a, t.m, "i", SHMAP_F32, 1, NULL,
                                         data));
  NULLCASE(shmap_array_from_host_sharded(&a, t.m, "i", SHMAP_F32, 1, shape,
                                         NULL));
  NULLCASE(shmap_array_zeros(&a, NULL, "i", SHMAP_F32, 1, shape));
  NULLCASE(shmap_array_zeros(&a, t.m, NULL, SHMAP_F32, 1, shape));
  NULLCASE(shmap_array_zeros(&a, t.m, "i", SHMAP_F32, 1, NULL));
  NULLCASE(shmap_array_fill(&a, NULL, "i", SHMAP_F32, 1, shape, &one));
  NULLCASE(shmap_array_fill(&a, t.m, NULL, SHMAP_F32, 1, shape, &one));
  NULLCASE(shmap_array_fill(&a, t.m, "i", SHMAP_F32, 1, shape, NULL));
  NULLCASE(shmap_array_init(&a, NULL, "i", SHMAP_F32, 1, shape, zero_init,
                            NULL));
  NULLCASE(shmap_array_init(&a, t.m, NULL, SHMAP_F32, 1, shape, zero_init,
                            NULL));
  NULLCASE(shmap_array_init(&a, t.m, "i", SHMAP_F32, 1, shape, NULL, NULL));
  /* Bad dtype, rank, sizes. */
  a = SENTINEL;
  ck_assert_int_eq(
      shmap_array_zeros(&a, t.m, "i", (shmap_dtype)SHMAP_NDTYPES, 1, shape), SHMAP_EDTYPE);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  const int64_t big[9] = {2, 1, 1, 1, 1, 1, 1, 1, 1};
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "i", SHMAP_F32, 9, big),
                   SHMAP_ESHAPE);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "i", SHMAP_F32, -1, shape),
                   SHMAP_ESHAPE);
  ck_assert_ptr_null(a);
  a = SENTINEL;
  const int64_t neg[1] = {-2};
  ck_assert_int_eq(shmap_array_fill(&a, t.m, "P()", SHMAP_F32, 1, neg, &one),
                   SHMAP_ESHAPE);
  ck_assert_ptr_null(a);

  /* Queries and reshard with NULLs. */
  shmap_array *s = sharded(&t, "i", SHMAP_F32, 1, shape, data);
  shmap_block blk;
  char buf[32];
  ck_assert_int_eq(shmap_array_reshard(NULL, s, "P()"), SHMAP_EINVAL);
  NULLCASE(shmap_array_reshard(&a, NULL, "P()"));
  NULLCASE(shmap_array_reshard(&a, s, NULL));
  ck_assert_int_eq(shmap_array_spec(NULL, buf, sizeof buf), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_spec(s, NULL, 5), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_block(NULL, 0, &blk, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_block(s, 0, NULL, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_visualize(NULL, stdout), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_array_visualize(s, NULL), SHMAP_EINVAL);
  shmap_stats st;
  ck_assert_int_eq(shmap_mesh_stats(NULL, &st), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_stats(t.m, NULL), SHMAP_EINVAL);
  shmap_mesh_stats_reset(NULL); /* ignored */
  shmap_array_destroy(NULL);
  shmap_array_destroy(s);
#undef NULLCASE
  ck_assert_msg(left_set[0] == '\0',
                "failed with SHMAP_EINVAL but left the output set:%s",
                left_set);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(err_host_array_has_no_sharding) {
  const int64_t shape[1] = {4};
  int32_t v[4] = {1, 2, 3, 4};
  shmap_array *h = NULL, *r = SENTINEL;
  ck_assert_int_eq(shmap_array_from_host(&h, SHMAP_I32, 1, shape, v), 0);
  ck_assert_int_eq(shmap_array_reshard(&r, h, "P()"), SHMAP_EINVAL);
  ck_assert_ptr_null(r);
  ck_assert_msg(t_has(shmap_errmsg(), "host"), "%s", shmap_errmsg());
  char buf[32];
  ck_assert_int_eq(shmap_array_spec(h, buf, sizeof buf), SHMAP_EINVAL);
  ck_assert_msg(t_has(shmap_errmsg(), "host"), "%s", shmap_errmsg());
  shmap_block blk;
  ck_assert_int_eq(shmap_array_block(h, 0, &blk, NULL), SHMAP_EINVAL);
  ck_assert_msg(t_has(shmap_errmsg(), "host"), "%s", shmap_errmsg());
  shmap_array_destroy(h);
}
END_TEST

START_TEST(err_array_on_other_mesh) {
  tmesh t1 = tm("i=4"), t2 = tm("i=4");
  const int64_t shape[1] = {8};
  float v[8] = {0};
  shmap_array *a = sharded(&t1, "P('i')", SHMAP_F32, 1, shape, v);
  shmap_array *o = SENTINEL, *in[1] = {a};
  const char *is[1] = {"P('i')"};
  rec *r = calloc(1, sizeof *r);
  r->nin = 1;
  shmap_mesh_stats_reset(t2.m);
  int rc = shmap_map(t2.m, rec_body, r, 1, in, is, 1, &o, is);
  ck_assert_int_eq(rc, SHMAP_EINVAL);
  ck_assert_ptr_null(o);
  ck_assert_msg(t_has(shmap_errmsg(), "another mesh") &&
                    t_has(shmap_errmsg(), "input 0"),
                "%s", shmap_errmsg());
  ck_assert_uint_eq(stats(&t2).maps, 0);
  /* The same array works on its own mesh. */
  o = NULL;
  ck_assert_int_eq(shmap_map(t1.m, rec_body, r, 1, in, is, 1, &o, is), 0);
  shmap_array_destroy(o);
  free(r);
  shmap_array_destroy(a);
  shmap_mesh_destroy(t1.m);
  shmap_mesh_destroy(t2.m);
}
END_TEST

START_TEST(err_block_device_range) {
  tmesh t = tm("i=4, j=2");
  shmap_array *a = NULL;
  const int64_t shape[1] = {8};
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "i", SHMAP_F32, 1, shape), 0);
  shmap_block blk;
  int64_t off[1];
  ck_assert_int_eq(shmap_array_block(a, -1, &blk, off), SHMAP_EINVAL);
  ck_assert_msg(t_has(shmap_errmsg(), "out of range") &&
                    t_has_int(shmap_errmsg(), -1),
                "%s", shmap_errmsg());
  ck_assert_int_eq(shmap_array_block(a, 8, &blk, off), SHMAP_EINVAL);
  ck_assert_msg(t_has(shmap_errmsg(), "device 8") &&
                    t_has(shmap_errmsg(), "out of range"),
                "%s", shmap_errmsg());
  ck_assert_int_eq(shmap_array_block(a, 7, &blk, off), 0);
  ck_assert_int_eq(off[0], 6);
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(err_visualize_rank3) {
  tmesh t = tm("i=2");
  shmap_array *a = NULL;
  const int64_t shape[3] = {2, 2, 2};
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "i", SHMAP_F32, 3, shape), 0);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(shmap_array_visualize(a, f), SHMAP_ESHAPE);
  ck_assert_msg(t_has(shmap_errmsg(), "rank 3"), "%s", shmap_errmsg());
  fclose(f);
  free(text);
  shmap_array_destroy(a);
  /* A host array of rank 3 too. */
  float v[8] = {0};
  ck_assert_int_eq(shmap_array_from_host(&a, SHMAP_F32, 3, shape, v), 0);
  ck_assert_int_eq(shmap_array_visualize(a, stdout), SHMAP_ESHAPE);
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(err_init_callback_fails) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 8};
  init_rec *r = calloc(1, sizeof *r);
  r->mesh = t.m;
  r->gshape = shape;
  r->rank = 2;
  r->fail_dev = 5;
  r->fail_value = 7;
  shmap_array *a = SENTINEL;
  int rc = shmap_array_init(&a, t.m, "P('i', 'j')", SHMAP_I32, 2, shape,
                            init_cb, r);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == SHMAP_EBODY, "%d %s", rc, msg);
  ck_assert_ptr_null(a);
  ck_assert_msg(t_has_dev(msg, 5) && t_has_int(msg, 7) &&
                    t_has(msg, "shmap_array_init"),
                "message \"%s\"", msg);
  /* A negative return is a failure too. */
  r->fail_dev = 0;
  r->fail_value = -3;
  a = SENTINEL;
  rc = shmap_array_init(&a, t.m, "P()", SHMAP_F64, 2, shape, init_cb, r);
  msg = shmap_errmsg();
  ck_assert_msg(rc == SHMAP_EBODY, "%d %s", rc, msg);
  ck_assert_ptr_null(a);
  ck_assert_msg(t_has_dev(msg, 0) && t_has(msg, "-3"), "message \"%s\"", msg);
  /* The mesh still works afterwards. */
  r->fail_dev = -1;
  a = NULL;
  ck_assert_int_eq(shmap_array_init(&a, t.m, "P('i', 'j')", SHMAP_I32, 2,
                                    shape, init_cb, r),
                   0);
  shmap_array_destroy(a);
  free(r);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(err_init_not_replicated) {
  tmesh t = tm("i=4, j=2");
  const int64_t shape[2] = {8, 8};
  init_rec *r = calloc(1, sizeof *r);
  r->mesh = t.m;
  r->gshape = shape;
  r->rank = 2;
  r->fail_dev = -1;
  r->by_device = 1;
  /* P('i'): devices (i,0) and (i,1) hold copies but fill them with their
   * own device numbers. */
  shmap_array *a = SENTINEL;
  int rc =
      shmap_array_init(&a, t.m, "P('i')", SHMAP_I64, 2, shape, init_cb, r);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == SHMAP_EREPLICATION, "%d %s", rc, msg);
  ck_assert_ptr_null(a);
  ck_assert_msg(t_has(msg, "'j'") && t_has_dev(msg, 0) && t_has_dev(msg, 1),
                "message \"%s\"", msg);
  /* A spec that names every axis has no copies: the same callback works. */
  a = NULL;
  ck_assert_int_eq(
      shmap_array_init(&a, t.m, "P('i', 'j')", SHMAP_I64, 2, shape, init_cb, r),
      0);
  shmap_array_destroy(a);
  free(r);
  shmap_mesh_destroy(t.m);
}
END_TEST

/* Creation functions cannot run inside a body. */
typedef struct nested {
  int rc_zeros[MAXDEV], rc_reshard[MAXDEV];
  shmap_array *src;
} nested;

static int nested_body(shmap_ctx *ctx, void *arg) {
  nested *n = arg;
  int d = shmap_ctx_device(ctx);
  const int64_t shape[1] = {4};
  shmap_array *a = SENTINEL, *b = SENTINEL;
  n->rc_zeros[d] = shmap_array_zeros(&a, (shmap_mesh *)shmap_ctx_mesh(ctx),
                                     "P()", SHMAP_F32, 1, shape);
  if (a != NULL)
    n->rc_zeros[d] = 1000;
  n->rc_reshard[d] = shmap_array_reshard(&b, n->src, "P()");
  if (b != NULL)
    n->rc_reshard[d] = 1000;
  return 0;
}

START_TEST(err_inside_body) {
  tmesh t = tm("i=2");
  nested *n = calloc(1, sizeof *n);
  ck_assert_int_eq(shmap_array_zeros(&n->src, t.m, "i", SHMAP_F32, 1,
                                     (const int64_t[]){4}),
                   0);
  /* The refused call fails the body's device and so the map (shmap_map(3):
   * "a call inside a body failed and so failed the map").  A device whose
   * body never started (released by the failure) records 0. */
  int rc = shmap_map(t.m, nested_body, n, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == SHMAP_ESTATE, "%d %s", rc, shmap_errmsg());
  ck_assert_msg(t_has(shmap_errmsg(), "inside a body"), "%s", shmap_errmsg());
  int refused = 0;
  for (int d = 0; d < 2; d++) {
    ck_assert_msg(n->rc_zeros[d] == SHMAP_ESTATE || n->rc_zeros[d] == 0,
                  "device %d: zeros gave %d", d, n->rc_zeros[d]);
    ck_assert_int_eq(n->rc_reshard[d], n->rc_zeros[d]);
    refused += n->rc_zeros[d] == SHMAP_ESTATE;
  }
  ck_assert_int_ge(refused, 1);
  /* The mesh works afterwards. */
  shmap_array *b = reshard(n->src, "P()");
  shmap_array_destroy(b);
  shmap_array_destroy(n->src);
  free(n);
  shmap_mesh_destroy(t.m);
}
END_TEST

/* ---- visualize ---------------------------------------------------------------- */

static char *picture(const shmap_array *a) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  int rc = shmap_array_visualize(a, f);
  ck_assert_msg(rc == 0, "visualize: %d %s", rc, shmap_errmsg());
  fclose(f);
  return text;
}

static void expect_picture(const tmesh *t, const char *spec, shmap_dtype dt,
                           int rank, const int64_t *shape, const char *want) {
  shmap_array *a = NULL;
  int rc = shmap_array_zeros(&a, t->m, spec, dt, rank, shape);
  ck_assert_msg(rc == 0, "%s: %d %s", spec, rc, shmap_errmsg());
  char *got = picture(a);
  ck_assert_msg(strcmp(got, want) == 0, "%s:\ngot:\n%s\nwant:\n%s", spec, got,
                want);
  free(got);
  shmap_array_destroy(a);
}

START_TEST(visualize_2d) {
  tmesh t = tm("i=2, j=2");
  const int64_t shape[2] = {8, 8};
  expect_picture(&t, "P('i', 'j')", SHMAP_F32, 2, shape,
                 "f32[8,8] sharded P('i', 'j') over mesh i=2, j=2: 2x2 blocks "
                 "of f32[4,4]\n"
                 "+----+----+\n"
                 "| d0 | d1 |\n"
                 "+----+----+\n"
                 "| d2 | d3 |\n"
                 "+----+----+\n");
  expect_picture(&t, "j, i", SHMAP_F32, 2, shape,
                 "f32[8,8] sharded P('j', 'i') over mesh i=2, j=2: 2x2 blocks "
                 "of f32[4,4]\n"
                 "+----+----+\n"
                 "| d0 | d2 |\n"
                 "+----+----+\n"
                 "| d1 | d3 |\n"
                 "+----+----+\n");
  expect_picture(&t, "P('i')", SHMAP_F32, 2, shape,
                 "f32[8,8] sharded P('i') over mesh i=2, j=2: 2x1 blocks of "
                 "f32[4,8]\n"
                 "+-------+\n"
                 "| d0 d1 |\n"
                 "+-------+\n"
                 "| d2 d3 |\n"
                 "+-------+\n");
  expect_picture(&t, "P(None, 'j')", SHMAP_F64, 2, shape,
                 "f64[8,8] sharded P(None, 'j') over mesh i=2, j=2: 1x2 "
                 "blocks of f64[8,4]\n"
                 "+-------+-------+\n"
                 "| d0 d2 | d1 d3 |\n"
                 "+-------+-------+\n");
  expect_picture(&t, "P()", SHMAP_I32, 2, shape,
                 "i32[8,8] sharded P() over mesh i=2, j=2: 1x1 blocks of "
                 "i32[8,8]\n"
                 "+-------------+\n"
                 "| d0 d1 d2 d3 |\n"
                 "+-------------+\n");
  expect_picture(&t, "P(('i','j'))", SHMAP_I64, 2, shape,
                 "i64[8,8] sharded P(('i', 'j')) over mesh i=2, j=2: 4x1 "
                 "blocks of i64[2,8]\n"
                 "+----+\n| d0 |\n+----+\n| d1 |\n+----+\n| d2 |\n+----+\n"
                 "| d3 |\n+----+\n");
  expect_picture(&t, "P(('j','i'))", SHMAP_F32, 2, shape,
                 "f32[8,8] sharded P(('j', 'i')) over mesh i=2, j=2: 4x1 "
                 "blocks of f32[2,8]\n"
                 "+----+\n| d0 |\n+----+\n| d2 |\n+----+\n| d1 |\n+----+\n"
                 "| d3 |\n+----+\n");
  /* Host arrays are described, not drawn. */
  float v[64] = {0};
  shmap_array *h = NULL;
  ck_assert_int_eq(shmap_array_from_host(&h, SHMAP_F32, 2, shape, v), 0);
  char *got = picture(h);
  ck_assert_str_eq(got, "f32[8,8] on the host (not sharded)\n");
  free(got);
  shmap_array_destroy(h);
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(visualize_1d) {
  tmesh t = tm("i=4");
  const int64_t shape[1] = {8};
  expect_picture(&t, "P('i')", SHMAP_F32, 1, shape,
                 "f32[8] sharded P('i') over mesh i=4: 1x4 blocks of f32[2]\n"
                 "+----+----+----+----+\n"
                 "| d0 | d1 | d2 | d3 |\n"
                 "+----+----+----+----+\n");
  expect_picture(&t, "P()", SHMAP_F32, 1, shape,
                 "f32[8] sharded P() over mesh i=4: 1x1 blocks of f32[8]\n"
                 "+-------------+\n"
                 "| d0 d1 d2 d3 |\n"
                 "+-------------+\n");
  /* Rank 0: one cell. */
  shmap_array *a = NULL;
  float x = 1;
  ck_assert_int_eq(
      shmap_array_from_host_sharded(&a, t.m, "P()", SHMAP_F32, 0, NULL, &x), 0);
  char *got = picture(a);
  ck_assert_str_eq(got, "f32[] sharded P() over mesh i=4: 1x1 blocks of f32[]\n"
                        "+-------------+\n"
                        "| d0 d1 d2 d3 |\n"
                        "+-------------+\n");
  free(got);
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);

  /* Cells of different widths are centred, the odd space on the right. */
  t = tm("i=4, j=3");
  const int64_t six[1] = {6};
  expect_picture(&t, "j", SHMAP_I32, 1, six,
                 "i32[6] sharded P('j') over mesh i=4, j=3: 1x3 blocks of "
                 "i32[2]\n"
                 "+--------------+--------------+--------------+\n"
                 "| d0 d3 d6 d9  | d1 d4 d7 d10 | d2 d5 d8 d11 |\n"
                 "+--------------+--------------+--------------+\n");
  shmap_mesh_destroy(t.m);

  /* More than six holders are abbreviated. */
  t = tm("i=8");
  const int64_t sixteen[1] = {16};
  expect_picture(&t, "P()", SHMAP_F64, 1, sixteen,
                 "f64[16] sharded P() over mesh i=8: 1x1 blocks of f64[16]\n"
                 "+---------------------------+\n"
                 "| d0 d1 d2 d3 d4 d5 +2 more |\n"
                 "+---------------------------+\n");
  shmap_mesh_destroy(t.m);
}
END_TEST

START_TEST(visualize_to_tmpfile) {
  tmesh t = tm("i=2, j=2");
  const int64_t shape[2] = {4, 4};
  shmap_array *a = NULL;
  ck_assert_int_eq(shmap_array_zeros(&a, t.m, "P('i', 'j')", SHMAP_F32, 2,
                                     shape),
                   0);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(shmap_array_visualize(a, f), 0);
  rewind(f);
  char buf[512];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  ck_assert_str_eq(buf, "f32[4,4] sharded P('i', 'j') over mesh i=2, j=2: "
                        "2x2 blocks of f32[2,2]\n"
                        "+----+----+\n| d0 | d1 |\n+----+----+\n"
                        "| d2 | d3 |\n+----+----+\n");
  shmap_array_destroy(a);
  shmap_mesh_destroy(t.m);
}
END_TEST

/* ---- suite -------------------------------------------------------------------- */

static Suite *shard_suite(void) {
  Suite *s = suite_create("shard");
  TCase *tc = tcase_create("create");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, from_host_sharded_roundtrip);
  tcase_add_test(tc, zeros_fill_init);
  tcase_add_test(tc, empty_and_scalar);
  tcase_add_test(tc, spec_canonical_text);
  tcase_add_test(tc, block_access);
  tcase_add_test(tc, array_mesh_query);
  suite_add_tcase(s, tc);

  tc = tcase_create("chain");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, chain_shares_blocks);
  tcase_add_test(tc, outputs_keep_device_blocks);
  tcase_add_test(tc, host_input_copied_per_device);
  tcase_add_test(tc, implicit_reshard);
  suite_add_tcase(s, tc);

  tc = tcase_create("reshard");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, reshard_exact_bytes);
  tcase_add_test(tc, reshard_small_mesh_permute);
  tcase_add_test(tc, reshard_same_spec_copies);
  suite_add_tcase(s, tc);

  tc = tcase_create("lifetime");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, array_keeps_mesh_alive);
  tcase_add_test(tc, mesh_outlives_arrays);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, err_specs_each_creator);
  tcase_add_test(tc, err_null_and_bad_args);
  tcase_add_test(tc, err_host_array_has_no_sharding);
  tcase_add_test(tc, err_array_on_other_mesh);
  tcase_add_test(tc, err_block_device_range);
  tcase_add_test(tc, err_visualize_rank3);
  tcase_add_test(tc, err_init_callback_fails);
  tcase_add_test(tc, err_init_not_replicated);
  tcase_add_test(tc, err_inside_body);
  suite_add_tcase(s, tc);

  tc = tcase_create("visualize");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, visualize_2d);
  tcase_add_test(tc, visualize_1d);
  tcase_add_test(tc, visualize_to_tmpfile);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return tu_run_suite(shard_suite());
}
