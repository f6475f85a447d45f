/* SPDX-License-Identifier: MIT */
/*
 * test_map_prop.c - property tests of the map against the serial reference
 * model (tests/refmodel.c): random meshes, dtypes, ranks, shapes, in and out
 * specs (written in random text styles), bodies that copy their input block
 * to the output, possibly shifted by a function of the device coordinates.
 *
 * Every case's expectation comes from the model: the exact output, or a
 * replication error when some output's blocks differ along an axis its out
 * spec does not name (then, with SHMAP_NO_CHECK_REP, the coordinate-0 copy).
 *
 * Environment: SHMAPTEST_PROP_CASES (default 3000), SHMAPTEST_PROP_SEED (default
 * fixed, printed at start), SHMAPTEST_PROP_ONLY=N runs case N alone (verbose).
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

#include "refmodel.h"
#include "testutil.h"

#define DEFAULT_CASES 3000
#define DEFAULT_SEED 0x5eed2024u
/* Cases per Check test (each has its own timeout) and per mesh. */
#define CHUNK 250
#define PER_MESH 25
#define CHUNK_TIMEOUT 120
#define MAXDEV 16

static uint64_t g_seed = DEFAULT_SEED;
static int g_cases = DEFAULT_CASES;
static long g_only = -1;

/* ---- a case ----------------------------------------------------------------- */

typedef struct pin {
  shmap_dtype dtype;
  int rank;
  int64_t gshape[REF_MAX_RANK];
  ref_spec spec;
  char text[256];
  void *data;
} pin;

typedef struct pout {
  int src;                  /* input it copies */
  int w[REF_MAX_AXES];      /* shift = sum of w[a] * c(a) */
  int api;                  /* 0 out_copy, 1 out + memcpy, 2 alloc + out_set */
  ref_spec spec;
  char text[256];
} pout;

typedef struct pcase {
  long index;
  ref_mesh rm;
  char mesh_text[256];
  int nin, nout;
  pin in[2];
  pout out[2];
  unsigned flags;
  int legal; /* generated so that untiling is legal */
} pcase;

static const char *const POOL[] = {"i", "j", "k", "x", "y",
                                   "data", "model", "pipe", "_a", "b2"};

static size_t esize(shmap_dtype dt) {
  return dt == SHMAP_F32 || dt == SHMAP_I32 ? 4 : 8;
}

static const char *dtname(shmap_dtype dt) {
  static const char *const n[] = {"f32", "f64", "i32", "i64"};
  return (unsigned)dt < 4 ? n[dt] : "?";
}

/* Random mesh: 1-4 axes of size 1-4, at most 16 devices. */
static void gen_mesh(uint64_t *rng, ref_mesh *m, char *text, size_t n) {
  int used[10] = {0};
  int prod = 1;
  memset(m, 0, sizeof *m);
  m->naxes = t_rng_range(rng, 1, 4);
  text[0] = '\0';
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
  /* random spacing */
  for (int a = 0; a < m->naxes; a++) {
    size_t len = strlen(text);
    int sp = t_rng_range(rng, 0, 3);
    snprintf(text + len, n - len, "%s%s%s=%s%d", a ? "," : "",
             a && sp & 1 ? " " : "", m->names[a], sp == 3 ? " " : "",
             m->sizes[a]);
  }
}

/* Insert axis a at a random position of entry d. */
static void spec_put(uint64_t *rng, ref_spec *s, int d, int a) {
  int pos = t_rng_range(rng, 0, s->naxes[d]);
  for (int k = s->naxes[d]; k > pos; k--)
    s->axes[d][k] = s->axes[d][k - 1];
  s->axes[d][pos] = a;
  s->naxes[d]++;
}

/* A random spec of length <= rank: each axis in `must` is placed, each
 * other axis with probability 1/2; axes land in random entries in random
 * order. */
static void gen_spec(uint64_t *rng, const ref_mesh *m, int rank, unsigned must,
                     ref_spec *s) {
  memset(s, 0, sizeof *s);
  s->ndims = rank == 0 ? 0 : t_rng_range(rng, must ? 1 : 0, rank);
  if (s->ndims == 0)
    return;
  for (int a = 0; a < m->naxes; a++)
    if ((must >> a) & 1u || t_rng_range(rng, 0, 1))
      spec_put(rng, s, t_rng_range(rng, 0, s->ndims - 1), a);
}

/* Write a spec in a random text style: JAX P(...) with either quote, or
 * the short form; random spacing, one-name tuples, trailing commas. */
static void spec_text(uint64_t *rng, const ref_mesh *m, const ref_spec *s,
                      char *buf, size_t n) {
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
      snprintf(buf + len, n - len, "None");
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

static void fill_data(uint64_t *rng, shmap_dtype dt, int64_t n, void *p,
                      int constant) {
  int64_t base = t_rng_range(rng, -1000, 1000);
  for (int64_t e = 0; e < n; e++) {
    int64_t v = constant ? 0 : e;
    switch (dt) {
    case SHMAP_F32:
      ((float *)p)[e] = (float)(base + v) + 0.5f;
      break;
    case SHMAP_F64:
      ((double *)p)[e] = (double)base + (double)v * 0.25;
      break;
    case SHMAP_I32:
      ((int32_t *)p)[e] = (int32_t)(base + 3 * v);
      break;
    case SHMAP_I64:
      ((int64_t *)p)[e] = base * ((int64_t)1 << 36) + v;
      break;
    default: /* the map properties draw only the four dtypes above */
      ck_abort_msg("fill_data: dtype %d not drawn here", (int)dt);
    }
  }
}

/* Add `delta` to each of n elements (the body's transformation). */
static void add_delta(shmap_dtype dt, void *p, int64_t n, int delta) {
  for (int64_t e = 0; e < n; e++)
    switch (dt) {
    case SHMAP_F32:
      ((float *)p)[e] += (float)delta;
      break;
    case SHMAP_F64:
      ((double *)p)[e] += (double)delta;
      break;
    case SHMAP_I32:
      ((int32_t *)p)[e] += delta;
      break;
    case SHMAP_I64:
      ((int64_t *)p)[e] += delta;
      break;
    default:
      ck_abort_msg("add_delta: dtype %d not drawn here", (int)dt);
    }
}

static int delta_of(const pout *o, int naxes, const int c[]) {
  int delta = 0;
  for (int a = 0; a < naxes; a++)
    delta += o->w[a] * c[a];
  return delta;
}

static void gen_case(uint64_t seed, long index, pcase *pc) {
  uint64_t mrng = seed ^ (0xa0761d6478bd642fULL * (uint64_t)(index / PER_MESH + 1));
  uint64_t rng = seed ^ (0xe7037ed1a0b428dbULL * (uint64_t)(index + 1));
  unsigned all;
  t_rng_next(&mrng);
  t_rng_next(&rng);
  memset(pc, 0, sizeof *pc);
  pc->index = index;
  gen_mesh(&mrng, &pc->rm, pc->mesh_text, sizeof pc->mesh_text);
  all = (1u << pc->rm.naxes) - 1u;

  pc->nin = t_rng_range(&rng, 0, 4) == 0 ? 2 : 1;
  pc->nout = t_rng_range(&rng, 0, 4) == 0 ? 2 : 1;
  pc->legal = t_rng_range(&rng, 0, 9) < 6;
  pc->flags = t_rng_range(&rng, 0, 9) < 3 ? SHMAP_NO_CHECK_REP : 0u;
  for (int k = 0; k < pc->nin; k++) {
    pin *in = &pc->in[k];
    int64_t bshape[REF_MAX_RANK];
    in->dtype = (shmap_dtype)t_rng_range(&rng, 0, 3);
    in->rank = t_rng_range(&rng, 1, 4);
    gen_spec(&rng, &pc->rm, in->rank, 0, &in->spec);
    for (int d = 0; d < in->rank; d++)
      bshape[d] = t_rng_range(&rng, 1, 3);
    ref_global_shape(&pc->rm, &in->spec, in->rank, bshape, in->gshape);
    spec_text(&rng, &pc->rm, &in->spec, in->text, sizeof in->text);
  }
  for (int k = 0; k < pc->nout; k++) {
    pout *o = &pc->out[k];
    unsigned must = 0;
    o->src = t_rng_range(&rng, 0, pc->nin - 1);
    o->api = t_rng_range(&rng, 0, 2);
    /* shift along a random subset of axes */
    for (int a = 0; a < pc->rm.naxes; a++)
      if (t_rng_range(&rng, 0, 2) == 0)
        o->w[a] = t_rng_range(&rng, 1, 4);
    if (pc->legal) {
      /* name every axis the block may vary along */
      must = ref_spec_mask(&pc->in[o->src].spec);
      for (int a = 0; a < pc->rm.naxes; a++)
        if (o->w[a])
          must |= 1u << a;
    }
    gen_spec(&rng, &pc->rm, pc->in[o->src].rank, must & all, &o->spec);
    spec_text(&rng, &pc->rm, &o->spec, o->text, sizeof o->text);
  }
  /* data last, so the rest of a case does not depend on its size */
  for (int k = 0; k < pc->nin; k++) {
    pin *in = &pc->in[k];
    int64_t n = ref_numel(in->rank, in->gshape);
    int constant = t_rng_range(&rng, 0, 9) == 0;
    in->data = malloc((size_t)n * esize(in->dtype));
    ck_assert_ptr_nonnull(in->data);
    fill_data(&rng, in->dtype, n, in->data, constant);
  }
}

static void free_case(pcase *pc) {
  for (int k = 0; k < pc->nin; k++)
    free(pc->in[k].data);
}

static void describe(const pcase *pc, char *buf, size_t n) {
  size_t len;
  snprintf(buf, n,
           "case %ld (rerun: SHMAPTEST_PROP_SEED=%" PRIu64 " SHMAPTEST_PROP_ONLY=%ld): "
           "mesh \"%s\"%s",
           pc->index, g_seed, pc->index, pc->mesh_text,
           pc->flags & SHMAP_NO_CHECK_REP ? ", SHMAP_NO_CHECK_REP" : "");
  for (int k = 0; k < pc->nin; k++) {
    len = strlen(buf);
    snprintf(buf + len, n - len, "; in[%d] %s[", k, dtname(pc->in[k].dtype));
    for (int d = 0; d < pc->in[k].rank; d++) {
      len = strlen(buf);
      snprintf(buf + len, n - len, "%s%" PRId64, d ? "," : "",
               pc->in[k].gshape[d]);
    }
    len = strlen(buf);
    snprintf(buf + len, n - len, "] spec \"%s\"", pc->in[k].text);
  }
  for (int k = 0; k < pc->nout; k++) {
    len = strlen(buf);
    snprintf(buf + len, n - len, "; out[%d] = in[%d] + (", k, pc->out[k].src);
    for (int a = 0; a < pc->rm.naxes; a++) {
      len = strlen(buf);
      snprintf(buf + len, n - len, "%s%d*%s", a ? " + " : "", pc->out[k].w[a],
               pc->rm.names[a]);
    }
    len = strlen(buf);
    snprintf(buf + len, n - len, ") via %s, spec \"%s\"",
             pc->out[k].api == 0   ? "shmap_out_copy"
             : pc->out[k].api == 1 ? "shmap_out"
                                   : "shmap_out_set",
             pc->out[k].text);
  }
}

/* ---- the body -------------------------------------------------------------- */

static int body(shmap_ctx *ctx, void *arg) {
  const pcase *pc = arg;
  int c[SHMAP_MAX_AXES];
  if (shmap_mesh_device_coords(shmap_ctx_mesh(ctx), shmap_ctx_device(ctx), c))
    return shmap_fail(ctx, "device_coords: %s", shmap_errmsg());
  for (int k = 0; k < pc->nout; k++) {
    const pout *o = &pc->out[k];
    const shmap_block *in = shmap_in(ctx, o->src);
    shmap_block *b;
    if (in == NULL)
      return shmap_fail(ctx, "shmap_in(%d) is NULL", o->src);
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
      return shmap_fail(ctx, "creating output %d: %s", k, shmap_errmsg());
    add_delta(b->dtype, b->data, shmap_block_numel(b),
              delta_of(o, pc->rm.naxes, c));
    if (o->api == 2 && shmap_out_set(ctx, k, b) != 0)
      return shmap_fail(ctx, "shmap_out_set(%d): %s", k, shmap_errmsg());
  }
  return 0;
}

/* ---- expectations ---------------------------------------------------------- */

typedef struct pexp {
  int64_t gshape[REF_MAX_RANK];
  void *gdata;
  void *blocks[MAXDEV];
  int rep_bad; /* replication violated */
  ref_rep_err rep;
} pexp;

static void format_elem(shmap_dtype dt, const void *p, int64_t e, char *buf,
                        size_t n) {
  switch (dt) {
  case SHMAP_F32:
    snprintf(buf, n, "%.9g", (double)((const float *)p)[e]);
    break;
  case SHMAP_F64:
    snprintf(buf, n, "%.17g", ((const double *)p)[e]);
    break;
  case SHMAP_I32:
    snprintf(buf, n, "%" PRId32, ((const int32_t *)p)[e]);
    break;
  case SHMAP_I64:
    snprintf(buf, n, "%" PRId64, ((const int64_t *)p)[e]);
    break;
  default:
    ck_abort_msg("format_elem: dtype %d not drawn here", (int)dt);
  }
}

static void expect_outputs(const pcase *pc, pexp ex[2]) {
  int ndev = ref_ndev(&pc->rm);
  for (int k = 0; k < pc->nout; k++) {
    const pout *o = &pc->out[k];
    const pin *in = &pc->in[o->src];
    size_t es = esize(in->dtype);
    int64_t bshape[REF_MAX_RANK], bn;
    ck_assert_int_eq(ref_block_shape(&pc->rm, &in->spec, in->rank, in->gshape,
                                     bshape),
                     0);
    bn = ref_numel(in->rank, bshape);
    for (int dev = 0; dev < ndev; dev++) {
      int c[REF_MAX_AXES];
      int64_t bs[REF_MAX_RANK];
      ex[k].blocks[dev] = malloc((size_t)bn * es);
      ck_assert_int_eq(ref_slice(&pc->rm, &in->spec, es, in->rank, in->gshape,
                                 in->data, dev, bs, ex[k].blocks[dev]),
                       0);
      ref_coords(&pc->rm, dev, c);
      add_delta(in->dtype, ex[k].blocks[dev], bn,
                delta_of(o, pc->rm.naxes, c));
    }
    ref_global_shape(&pc->rm, &o->spec, in->rank, bshape, ex[k].gshape);
    ex[k].gdata =
        malloc((size_t)ref_numel(in->rank, ex[k].gshape) * es + 1);
    ex[k].rep_bad = ref_assemble(&pc->rm, &o->spec, es, in->rank, bshape,
                                 (const void *const *)ex[k].blocks,
                                 ex[k].gshape, ex[k].gdata, &ex[k].rep);
  }
}

static void free_exp(const pcase *pc, pexp ex[2]) {
  for (int k = 0; k < pc->nout; k++) {
    for (int dev = 0; dev < ref_ndev(&pc->rm); dev++)
      free(ex[k].blocks[dev]);
    free(ex[k].gdata);
  }
}

/* Device numbers named "device N" in msg, in order (at most max). */
static int named_devices(const char *msg, int devs[], int max) {
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

/* True when devices a and b share coordinates on the axes output k names
 * and their blocks of output k differ. */
static int pair_differs(const pcase *pc, const pexp ex[2], int k, int a,
                        int b) {
  int ca[REF_MAX_AXES], cb[REF_MAX_AXES];
  unsigned mask = ref_spec_mask(&pc->out[k].spec);
  const pin *in = &pc->in[pc->out[k].src];
  int64_t bshape[REF_MAX_RANK];
  int ndev = ref_ndev(&pc->rm);
  if (a < 0 || b < 0 || a >= ndev || b >= ndev)
    return 0;
  ref_coords(&pc->rm, a, ca);
  ref_coords(&pc->rm, b, cb);
  for (int x = 0; x < pc->rm.naxes; x++)
    if ((mask >> x) & 1u && ca[x] != cb[x])
      return 0;
  ref_block_shape(&pc->rm, &in->spec, in->rank, in->gshape, bshape);
  return memcmp(ex[k].blocks[a], ex[k].blocks[b],
                (size_t)ref_numel(in->rank, bshape) * esize(in->dtype)) != 0;
}

/* Run one case; returns 0 when it passed, else fills `why`. */
static int run_case(shmap_mesh *mesh, const pcase *pc, char *why, size_t n) {
  shmap_array *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
  const char *is[2], *os[2];
  pexp ex[2];
  int rc, any_bad = 0, fail = 0;
  memset(ex, 0, sizeof ex);
  for (int k = 0; k < pc->nin; k++) {
    rc = shmap_array_from_host(&in[k], pc->in[k].dtype, pc->in[k].rank,
                               pc->in[k].gshape, pc->in[k].data);
    if (rc != 0) {
      snprintf(why, n, "from_host: %d %s", rc, shmap_errmsg());
      return 1;
    }
    is[k] = pc->in[k].text;
  }
  for (int k = 0; k < pc->nout; k++)
    os[k] = pc->out[k].text;
  expect_outputs(pc, ex);
  for (int k = 0; k < pc->nout; k++)
    any_bad |= ex[k].rep_bad;

  rc = shmap_map_flags(mesh, body, (void *)pc, pc->nin, in, is, pc->nout, out,
                       os, pc->flags);

  if (any_bad && !(pc->flags & SHMAP_NO_CHECK_REP)) {
    const char *msg = shmap_errmsg();
    int devs[4], nd, ok = 0;
    if (rc != SHMAP_EREPLICATION) {
      snprintf(why, n, "map returned %d (%s), want SHMAP_EREPLICATION "
               "(model: output %d, device %d differs from device %d at "
               "element %" PRId64 "); message: %s",
               rc, shmap_strerror(rc), ex[0].rep_bad ? 0 : 1,
               ex[ex[0].rep_bad ? 0 : 1].rep.dev_b,
               ex[ex[0].rep_bad ? 0 : 1].rep.dev_a,
               ex[ex[0].rep_bad ? 0 : 1].rep.elem, msg);
      fail = 1;
      goto done;
    }
    for (int k = 0; k < pc->nout; k++)
      if (out[k] != NULL) {
        snprintf(why, n, "failed map set out[%d]", k);
        fail = 1;
        goto done;
      }
    /* the two devices named must really differ along an untiled axis */
    nd = named_devices(msg, devs, 4);
    for (int k = 0; k < pc->nout && nd >= 2; k++)
      ok |= pair_differs(pc, ex, k, devs[0], devs[1]);
    if (!ok) {
      snprintf(why, n, "replication message does not name two devices "
               "whose blocks differ along an untiled axis: %s", msg);
      fail = 1;
    }
    goto done;
  }

  if (rc != 0) {
    snprintf(why, n, "map returned %d (%s), want 0; message: %s", rc,
             shmap_strerror(rc), shmap_errmsg());
    fail = 1;
    goto done;
  }
  for (int k = 0; k < pc->nout && !fail; k++) {
    const pin *src = &pc->in[pc->out[k].src];
    size_t es = esize(src->dtype);
    int64_t gn = ref_numel(src->rank, ex[k].gshape);
    void *got;
    if (out[k] == NULL || shmap_array_dtype(out[k]) != src->dtype ||
        shmap_array_rank(out[k]) != src->rank) {
      snprintf(why, n, "out[%d]: wrong array (NULL, dtype or rank)", k);
      fail = 1;
      break;
    }
    for (int d = 0; d < src->rank; d++)
      if (shmap_array_shape(out[k])[d] != ex[k].gshape[d]) {
        snprintf(why, n, "out[%d] dim %d is %" PRId64 ", want %" PRId64, k, d,
                 shmap_array_shape(out[k])[d], ex[k].gshape[d]);
        fail = 1;
      }
    if (fail)
      break;
    got = malloc((size_t)gn * es + 1);
    shmap_array_to_host(out[k], got);
    if (memcmp(got, ex[k].gdata, (size_t)gn * es) != 0) {
      for (int64_t e = 0; e < gn; e++)
        if (memcmp((char *)got + e * es, (char *)ex[k].gdata + e * es, es)) {
          char g[64], w[64];
          format_elem(src->dtype, got, e, g, sizeof g);
          format_elem(src->dtype, ex[k].gdata, e, w, sizeof w);
          snprintf(why, n, "out[%d] element %" PRId64 " (row-major) is %s, "
                   "want %s", k, e, g, w);
          break;
        }
      fail = 1;
    }
    free(got);
  }

done:
  for (int k = 0; k < 2; k++) {
    shmap_array_destroy(in[k]);
    shmap_array_destroy(out[k]);
  }
  free_exp(pc, ex);
  return fail;
}

static shmap_mesh *make_mesh(const pcase *pc) {
  shmap_mesh *m = NULL;
  int rc;
  /* every other group through create_axes */
  if ((pc->index / PER_MESH) % 2) {
    const char *names[REF_MAX_AXES];
    for (int a = 0; a < pc->rm.naxes; a++)
      names[a] = pc->rm.names[a];
    rc = shmap_mesh_create_axes(&m, pc->rm.naxes, names, pc->rm.sizes);
  } else {
    rc = shmap_mesh_create(&m, pc->mesh_text);
  }
  ck_assert_msg(rc == 0, "mesh \"%s\": %d %s", pc->mesh_text, rc,
                shmap_errmsg());
  return m;
}

static void run_range(long first, long last) {
  shmap_mesh *mesh = NULL;
  long mesh_group = -1;
  static char why[4096], desc[4096];
  for (long i = first; i < last; i++) {
    pcase pc;
    if (g_only >= 0 && i != g_only)
      continue;
    gen_case(g_seed, i, &pc);
    if (i / PER_MESH != mesh_group) {
      shmap_mesh_destroy(mesh);
      mesh = make_mesh(&pc);
      mesh_group = i / PER_MESH;
    }
    why[0] = '\0';
    if (g_only >= 0) {
      describe(&pc, desc, sizeof desc);
      printf("%s\n", desc);
    }
    if (run_case(mesh, &pc, why, sizeof why) != 0) {
      describe(&pc, desc, sizeof desc);
      free_case(&pc);
      shmap_mesh_destroy(mesh);
      ck_abort_msg("%s: %s", desc, why);
    }
    free_case(&pc);
  }
  shmap_mesh_destroy(mesh);
}

START_TEST(prop_chunk) {
  long first = (long)_i * CHUNK;
  long last = first + CHUNK < g_cases ? first + CHUNK : g_cases;
  run_range(first, last);
}
END_TEST

/* The generator produces both kinds of case in good numbers. */
START_TEST(prop_mix) {
  long legal = 0, rep = 0, unchecked_rep = 0, two = 0, n = 0;
  long lim = g_cases < 1000 ? g_cases : 1000;
  for (long i = 0; i < lim; i++) {
    pcase pc;
    pexp ex[2];
    int bad = 0;
    gen_case(g_seed, i, &pc);
    memset(ex, 0, sizeof ex);
    expect_outputs(&pc, ex);
    for (int k = 0; k < pc.nout; k++)
      bad |= ex[k].rep_bad;
    legal += pc.legal;
    rep += bad && !(pc.flags & SHMAP_NO_CHECK_REP);
    unchecked_rep += bad && (pc.flags & SHMAP_NO_CHECK_REP);
    two += pc.nin == 2 || pc.nout == 2;
    if (pc.legal)
      ck_assert_msg(!bad, "case %ld generated as legal but the model finds a "
                    "replication violation", i);
    n++;
    free_exp(&pc, ex);
    free_case(&pc);
  }
  if (getenv("SHMAPTEST_PROP_VERBOSE"))
    printf("mix of %ld cases: %ld legal, %ld expect EREPLICATION, %ld "
           "unchecked with differing copies, %ld with two inputs or outputs\n",
           n, legal, rep, unchecked_rep, two);
  if (n >= 500) {
    ck_assert_msg(rep >= n / 10, "only %ld replication cases of %ld", rep, n);
    ck_assert_msg(unchecked_rep >= n / 40, "only %ld unchecked bad of %ld",
                  unchecked_rep, n);
    ck_assert_msg(two >= n / 10, "only %ld multi cases of %ld", two, n);
  }
}
END_TEST

/* ---- the model against hand values ------------------------------------------ */

START_TEST(model_seed_tile) {
  /* mesh i=4,j=2; arange(144) (12,12) in P('i',None), out P('i','j') */
  ref_mesh m = {2, {4, 2}, {"i", "j"}};
  ref_spec in = {2, {1, 0}, {{0}, {0}}};
  ref_spec out = {2, {1, 1}, {{0}, {1}}};
  int64_t g[2] = {12, 12}, b[2], og[2];
  float x[144], blocks[8][36], y[288];
  const void *bp[8];
  ref_rep_err err;
  for (int e = 0; e < 144; e++)
    x[e] = (float)e;
  for (int dev = 0; dev < 8; dev++) {
    ck_assert_int_eq(ref_slice(&m, &in, 4, 2, g, x, dev, b, blocks[dev]), 0);
    ck_assert_int_eq(b[0], 3);
    ck_assert_int_eq(b[1], 12);
    bp[dev] = blocks[dev];
  }
  ck_assert(blocks[5][0] == 2 * 3 * 12.0f); /* device 5 = (2,1): rows 6-8 */
  ck_assert_int_eq(ref_assemble(&m, &out, 4, 2, b, bp, og, y, &err), 0);
  ck_assert_int_eq(og[0], 12);
  ck_assert_int_eq(og[1], 24);
  for (int r = 0; r < 12; r++)
    for (int c = 0; c < 24; c++)
      ck_assert(y[r * 24 + c] == (float)(r * 12 + c % 12));
}
END_TEST

START_TEST(model_block_transpose) {
  /* mesh i=2,j=2; blocks [c(i)*2+c(j)], out P(('j','i')) -> [0,2,1,3] */
  ref_mesh m = {2, {2, 2}, {"i", "j"}};
  ref_spec out = {1, {2}, {{1, 0}}};
  ref_spec bad = {1, {1}, {{1}}};
  int32_t v[4] = {0, 1, 2, 3}, y[4];
  const void *bp[4] = {&v[0], &v[1], &v[2], &v[3]};
  int64_t b[1] = {1}, og[1];
  ref_rep_err err;
  ck_assert_int_eq(ref_assemble(&m, &out, 4, 1, b, bp, og, y, &err), 0);
  ck_assert_int_eq(og[0], 4);
  ck_assert_int_eq(y[0], 0);
  ck_assert_int_eq(y[1], 2);
  ck_assert_int_eq(y[2], 1);
  ck_assert_int_eq(y[3], 3);
  /* out P('j'): device 2 = (1,0) differs from device 0 at element 0 */
  ck_assert_int_eq(ref_assemble(&m, &bad, 4, 1, b, bp, og, y, &err), 1);
  ck_assert_int_eq(err.dev_a, 0);
  ck_assert_int_eq(err.dev_b, 2);
  ck_assert_int_eq(err.elem, 0);
  ck_assert_int_eq(og[0], 2);
  ck_assert_int_eq(y[0], 0); /* the coordinate-0 copy */
  ck_assert_int_eq(y[1], 1);
  /* slicing: P(('j','i')) on [10,20,30,40]: device (i=1,j=0) gets 20 */
  {
    int32_t x[4] = {10, 20, 30, 40}, blk[1];
    int64_t g[1] = {4}, bs[1];
    ck_assert_int_eq(ref_slice(&m, &out, 4, 1, g, x, 2, bs, blk), 0);
    ck_assert_int_eq(bs[0], 1);
    ck_assert_int_eq(blk[0], 20);
    ck_assert_int_eq(ref_slice(&m, &out, 4, 1, g, x, 1, bs, blk), 0);
    ck_assert_int_eq(blk[0], 30);
    g[0] = 6;
    ck_assert_int_eq(ref_slice(&m, &out, 4, 1, g, x, 1, bs, blk), -1);
  }
}
END_TEST

static Suite *prop_suite(void) {
  Suite *s = suite_create("map_prop");
  TCase *tc = tcase_create("model");
  int nchunks = (g_cases + CHUNK - 1) / CHUNK;
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, model_seed_tile);
  tcase_add_test(tc, model_block_transpose);
  tcase_add_test(tc, prop_mix);
  suite_add_tcase(s, tc);

  tc = tcase_create("random_maps");
  tcase_set_timeout(tc, CHUNK_TIMEOUT);
  if (g_only >= 0)
    tcase_add_loop_test(tc, prop_chunk, (int)(g_only / CHUNK),
                        (int)(g_only / CHUNK) + 1);
  else
    tcase_add_loop_test(tc, prop_chunk, 0, nchunks);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  const char *e;
  if ((e = getenv("SHMAPTEST_PROP_SEED")) != NULL && *e)
    g_seed = strtoull(e, NULL, 0);
  if ((e = getenv("SHMAPTEST_PROP_CASES")) != NULL && *e)
    g_cases = atoi(e);
  if ((e = getenv("SHMAPTEST_PROP_ONLY")) != NULL && *e) {
    g_only = atol(e);
    if (g_cases <= g_only)
      g_cases = (int)g_only + 1;
  }
  if (g_cases < 0)
    g_cases = 0;
  printf("test_map_prop: seed %" PRIu64 " (SHMAPTEST_PROP_SEED), %d cases "
         "(SHMAPTEST_PROP_CASES)\n",
         g_seed, g_cases);
  fflush(stdout);
  return tu_run_suite(prop_suite());
}
