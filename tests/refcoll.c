/* SPDX-License-Identifier: MIT */
/*
 * refcoll.c - serial reference model of the collectives (see refcoll.h).
 *
 * Deliberately naive: every result element is computed on its own from the
 * definition in SEMANTICS.md section 6, so the model shares no structure
 * (and no bugs) with the library's implementation.
 */
#include "refcoll.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------- */

static void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "refcoll: out of memory\n");
    abort();
  }
  return p;
}

static void *xcalloc(size_t k, size_t n)
{
  void *p = calloc(k ? k : 1, n ? n : 1);
  if (!p) {
    fprintf(stderr, "refcoll: out of memory\n");
    abort();
  }
  return p;
}

static void cat(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t n, const char *fmt, ...)
{
  size_t len = strlen(buf);
  if (len + 1 >= n)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, n - len, fmt, ap);
  va_end(ap);
}

/* Multi-index of flat position `flat` in a row-major shape. */
static void unravel(int64_t flat, int rank, const int64_t shape[],
                    int64_t idx[])
{
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
}

static int64_t ravel(const int64_t idx[], int rank, const int64_t shape[])
{
  int64_t f = 0;
  for (int d = 0; d < rank; d++)
    f = f * shape[d] + idx[d];
  return f;
}

static void copy_elem(shmap_block *dst, int64_t di, const shmap_block *src,
                      int64_t si)
{
  size_t es = ref_esize(src->dtype);
  memcpy((char *)dst->data + (size_t)di * es,
         (const char *)src->data + (size_t)si * es, es);
}

/* ---- mesh and groups ------------------------------------------------------ */

int ref_mesh_init(ref_mesh *m, int naxes, const char *const names[],
                  const int sizes[])
{
  memset(m, 0, sizeof *m);
  if (naxes < 1 || naxes > SHMAP_MAX_AXES)
    return -1;
  m->naxes = naxes;
  m->ndev = 1;
  for (int a = 0; a < naxes; a++) {
    if (sizes[a] < 1 || strlen(names[a]) >= REF_NAME_MAX)
      return -1;
    snprintf(m->names[a], REF_NAME_MAX, "%s", names[a]);
    m->sizes[a] = sizes[a];
    m->ndev *= sizes[a];
  }
  return 0;
}

void ref_mesh_text(const ref_mesh *m, char *buf, size_t n)
{
  buf[0] = 0;
  for (int a = 0; a < m->naxes; a++)
    cat(buf, n, "%s%s=%d", a ? ", " : "", m->names[a], m->sizes[a]);
}

void ref_coords(const ref_mesh *m, int dev, int coords[])
{
  for (int a = m->naxes - 1; a >= 0; a--) {
    coords[a] = dev % m->sizes[a];
    dev /= m->sizes[a];
  }
}

int ref_device(const ref_mesh *m, const int coords[])
{
  int dev = 0;
  for (int a = 0; a < m->naxes; a++)
    dev = dev * m->sizes[a] + coords[a];
  return dev;
}

int ref_axis(const ref_mesh *m, const char *name)
{
  for (int a = 0; a < m->naxes; a++)
    if (strcmp(m->names[a], name) == 0)
      return a;
  return -1;
}

int ref_axis_size(const ref_mesh *m, const int axes[], int naxes)
{
  int n = 1;
  for (int k = 0; k < naxes; k++)
    n *= m->sizes[axes[k]];
  return n;
}

int ref_group(const ref_mesh *m, const int axes[], int naxes, int dev,
              int members[], int *rank)
{
  int c[SHMAP_MAX_AXES];
  ref_coords(m, dev, c);
  int n = ref_axis_size(m, axes, naxes);
  if (rank) {
    int r = 0;
    for (int k = 0; k < naxes; k++)
      r = r * m->sizes[axes[k]] + c[axes[k]];
    *rank = r;
  }
  if (members) {
    /* Member of rank r: dev's coordinates with the named axes replaced by
     * the digits of r (row-major, first named axis major). */
    for (int r = 0; r < n; r++) {
      int mc[SHMAP_MAX_AXES];
      memcpy(mc, c, sizeof mc);
      int rest = r;
      for (int k = naxes - 1; k >= 0; k--) {
        mc[axes[k]] = rest % m->sizes[axes[k]];
        rest /= m->sizes[axes[k]];
      }
      members[r] = ref_device(m, mc);
    }
  }
  return n;
}

int ref_axis_index(const ref_mesh *m, const int axes[], int naxes, int dev)
{
  int r;
  ref_group(m, axes, naxes, dev, NULL, &r);
  return r;
}

/* The axis_index_groups the model's collectives use (NULL: none). */
static const int *cur_groups;
static int cur_ngroups, cur_gsize;

void ref_set_groups(int ngroups, int gsize, const int *ranks)
{
  cur_groups = ranks;
  cur_ngroups = ngroups;
  cur_gsize = gsize;
}

/* A collective's group: the group of the axes, or, with groups set, the
 * group holding dev's rank, in the group's listed order. */
static int coll_group(const ref_mesh *m, const int axes[], int naxes, int dev,
                      int members[], int *rank)
{
  int full[SHMAP_MAX_DEVICES], fr;
  int n = ref_group(m, axes, naxes, dev, full, &fr);
  if (!cur_groups) {
    if (members)
      memcpy(members, full, sizeof(int) * (size_t)n);
    if (rank)
      *rank = fr;
    return n;
  }
  for (int g = 0; g < cur_ngroups; g++)
    for (int k = 0; k < cur_gsize; k++)
      if (cur_groups[g * cur_gsize + k] == fr) {
        if (members)
          for (int j = 0; j < cur_gsize; j++)
            members[j] = full[cur_groups[g * cur_gsize + j]];
        if (rank)
          *rank = k;
        return cur_gsize;
      }
  abort(); /* groups that do not cover the ranks: a test's mistake */
}

/* The size of every collective group (groups are of equal size). */
static int coll_size(const ref_mesh *m, const int axes[], int naxes)
{
  return cur_groups ? cur_gsize : ref_axis_size(m, axes, naxes);
}

void ref_axes_text(const ref_mesh *m, const int axes[], int naxes, int style,
                   char *buf, size_t n)
{
  buf[0] = 0;
  if (naxes == 1) {
    cat(buf, n, "%s", m->names[axes[0]]);
    return;
  }
  if (style == 1 || style == 2)
    cat(buf, n, "(");
  for (int k = 0; k < naxes; k++) {
    const char *sep = k == 0 ? "" : (style == 0 || style == 1) ? "," : ", ";
    if (style == 1 || style == 2)
      cat(buf, n, "%s'%s'", sep, m->names[axes[k]]);
    else
      cat(buf, n, "%s%s", sep, m->names[axes[k]]);
  }
  if (style == 1 || style == 2)
    cat(buf, n, ")");
}

/* ---- blocks ------------------------------------------------------------------ */

/* The model's own description of the dtypes (not the library's table):
 * size, name, and whether it is a float, signed, unsigned, bool or complex
 * type ('f', 's', 'u', 'b', 'c'). */
static const struct {
  shmap_dtype dt;
  const char *name;
  size_t size;
  char cls;
} dtypes[] = {
    {SHMAP_F32, "f32", 4, 'f'},   {SHMAP_F64, "f64", 8, 'f'},
    {SHMAP_I32, "i32", 4, 's'},   {SHMAP_I64, "i64", 8, 's'},
    {SHMAP_BF16, "bf16", 2, 'f'}, {SHMAP_F16, "f16", 2, 'f'},
    {SHMAP_I8, "i8", 1, 's'},     {SHMAP_U8, "u8", 1, 'u'},
    {SHMAP_I16, "i16", 2, 's'},   {SHMAP_U16, "u16", 2, 'u'},
    {SHMAP_U32, "u32", 4, 'u'},   {SHMAP_U64, "u64", 8, 'u'},
    {SHMAP_BOOL, "bool", 1, 'b'}, {SHMAP_C64, "c64", 8, 'c'},
    {SHMAP_C128, "c128", 16, 'c'},
};
#define NDT ((int)(sizeof dtypes / sizeof dtypes[0]))

static int dt_row(shmap_dtype dt)
{
  for (int k = 0; k < NDT; k++)
    if (dtypes[k].dt == dt)
      return k;
  return -1;
}

size_t ref_esize(shmap_dtype dt)
{
  int k = dt_row(dt);
  return k < 0 ? 0 : dtypes[k].size;
}

const char *ref_dtname(shmap_dtype dt)
{
  int k = dt_row(dt);
  return k < 0 ? "invalid" : dtypes[k].name;
}

char ref_dtclass(shmap_dtype dt)
{
  int k = dt_row(dt);
  return k < 0 ? '?' : dtypes[k].cls;
}

int ref_ndtypes(void)
{
  return NDT;
}

shmap_dtype ref_dtype_at(int k)
{
  return dtypes[k].dt;
}

/* ---- 16-bit floats, from their definitions ----------------------------------- */

/* Decoding computes the value with ldexp; encoding finds the nearest
 * representable value by scaling to an integer significand and rounding
 * half to even in double (exact: every f32 has at most 24 bits).  NaN keeps
 * its sign and the upper bits of its payload, with the quiet bit set. */
static uint32_t bits32(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float from_bits32(uint32_t u)
{
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float ref_bf16_to_f32(uint16_t h)
{
  return from_bits32((uint32_t)h << 16);
}

float ref_f16_to_f32(uint16_t h)
{
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) {
    if (m == 0)
      return sign ? -INFINITY : INFINITY;
    return from_bits32((uint32_t)sign << 31 | 0x7fc00000u | (uint32_t)m << 13);
  }
  double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return (float)(sign ? -v : v);
}

/* Round |v| (finite, >= 0) to a multiple of 2^q, half to even. */
static double round_to_quantum(double v, int q)
{
  double t = ldexp(v, -q), f = floor(t), r = t - f;
  if (r > 0.5 || (r == 0.5 && fmod(f, 2.0) != 0))
    f += 1;
  return ldexp(f, q);
}

/* Encode a float in a format with `mbits` fraction bits, exponent bias
 * `bias` and largest exponent `emax`. */
static uint16_t encode16(float f, int mbits, int bias, int emax)
{
  uint32_t u = bits32(f);
  uint16_t sign = (uint16_t)((u >> 31) << 15);
  int ebits = 15 - mbits;
  uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
  if (isnan(f))
    return (uint16_t)(sign | inf | (1u << (mbits - 1)) |
                      ((u & 0x7fffffu) >> (23 - mbits)));
  double v = fabs((double)f);
  if (isinf(f))
    return sign | inf;
  int e;
  frexp(v, &e); /* v in [2^(e-1), 2^e) */
  int emin = 1 - bias;
  int q = (e - 1 < emin ? emin : e - 1) - mbits;
  double r = round_to_quantum(v, q);
  if (r == 0)
    return sign;
  if (r >= ldexp(2.0, emax))
    return sign | inf;
  frexp(r, &e);
  if (e - 1 < emin) /* subnormal */
    return (uint16_t)(sign | (uint16_t)ldexp(r, bias - 1 + mbits));
  uint16_t frac = (uint16_t)(ldexp(r, -(e - 1) + mbits) - ldexp(1.0, mbits));
  return (uint16_t)(sign | (uint16_t)((e - 1 + bias) << mbits) | frac);
}

uint16_t ref_f32_to_bf16(float f)
{
  return encode16(f, 7, 127, 127);
}

uint16_t ref_f32_to_f16(float f)
{
  return encode16(f, 10, 15, 15);
}

int64_t ref_numel(int rank, const int64_t shape[])
{
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  return n;
}

shmap_block *ref_block_new(shmap_dtype dt, int rank, const int64_t shape[])
{
  shmap_block *b = xcalloc(1, sizeof *b);
  b->dtype = dt;
  b->rank = rank;
  for (int d = 0; d < rank; d++)
    b->shape[d] = shape[d];
  b->data = xcalloc((size_t)ref_numel(rank, shape), ref_esize(dt));
  return b;
}

shmap_block *ref_block_copy(const shmap_block *b)
{
  shmap_block *c = ref_block_new(b->dtype, b->rank, b->shape);
  memcpy(c->data, b->data,
         (size_t)ref_numel(b->rank, b->shape) * ref_esize(b->dtype));
  return c;
}

void ref_block_free(shmap_block *b)
{
  if (b) {
    free(b->data);
    free(b);
  }
}

void ref_blocks_free(shmap_block **bs, int n)
{
  if (!bs)
    return;
  for (int k = 0; k < n; k++) {
    ref_block_free(bs[k]);
    bs[k] = NULL;
  }
}

/* Element i as a pointer. */
static void *elem(const shmap_block *b, int64_t i)
{
  return (char *)b->data + (size_t)i * ref_esize(b->dtype);
}

double ref_get(const shmap_block *b, int64_t i)
{
  const void *p = elem(b, i);
  switch (b->dtype) {
  case SHMAP_F32: return *(const float *)p;
  case SHMAP_F64: return *(const double *)p;
  case SHMAP_I32: return *(const int32_t *)p;
  case SHMAP_I64: return (double)*(const int64_t *)p;
  case SHMAP_BF16: return ref_bf16_to_f32(*(const uint16_t *)p);
  case SHMAP_F16: return ref_f16_to_f32(*(const uint16_t *)p);
  case SHMAP_I8: return *(const int8_t *)p;
  case SHMAP_U8: return *(const uint8_t *)p;
  case SHMAP_I16: return *(const int16_t *)p;
  case SHMAP_U16: return *(const uint16_t *)p;
  case SHMAP_U32: return *(const uint32_t *)p;
  case SHMAP_U64: return (double)*(const uint64_t *)p;
  case SHMAP_BOOL: return *(const uint8_t *)p != 0;
  case SHMAP_C64: return ((const float *)p)[0];
  case SHMAP_C128: return ((const double *)p)[0];
  }
  return 0;
}

void ref_set(shmap_block *b, int64_t i, double v)
{
  void *p = elem(b, i);
  switch (b->dtype) {
  case SHMAP_F32: *(float *)p = (float)v; break;
  case SHMAP_F64: *(double *)p = v; break;
  case SHMAP_I32: *(int32_t *)p = (int32_t)v; break;
  case SHMAP_I64: *(int64_t *)p = (int64_t)v; break;
  case SHMAP_BF16: *(uint16_t *)p = ref_f32_to_bf16((float)v); break;
  case SHMAP_F16: *(uint16_t *)p = ref_f32_to_f16((float)v); break;
  case SHMAP_I8: *(int8_t *)p = (int8_t)v; break;
  case SHMAP_U8: *(uint8_t *)p = (uint8_t)v; break;
  case SHMAP_I16: *(int16_t *)p = (int16_t)v; break;
  case SHMAP_U16: *(uint16_t *)p = (uint16_t)v; break;
  case SHMAP_U32: *(uint32_t *)p = (uint32_t)v; break;
  case SHMAP_U64: *(uint64_t *)p = (uint64_t)v; break;
  case SHMAP_BOOL: *(uint8_t *)p = v != 0; break;
  case SHMAP_C64: ((float *)p)[0] = (float)v; ((float *)p)[1] = 0; break;
  case SHMAP_C128: ((double *)p)[0] = v; ((double *)p)[1] = 0; break;
  }
}

static bool same_shape(const shmap_block *a, const shmap_block *b)
{
  if (a->dtype != b->dtype || a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d])
      return false;
  return true;
}

bool ref_block_same(const shmap_block *got, const shmap_block *want)
{
  if (!got || !want)
    return got == want;
  if (!same_shape(got, want))
    return false;
  size_t nb = (size_t)ref_numel(want->rank, want->shape) *
              ref_esize(want->dtype);
  return nb == 0 || memcmp(got->data, want->data, nb) == 0;
}

void ref_shape_text(shmap_dtype dt, int rank, const int64_t shape[],
                    char *buf, size_t n)
{
  buf[0] = 0;
  cat(buf, n, "%s[", ref_dtname(dt));
  for (int d = 0; d < rank; d++)
    cat(buf, n, "%s%" PRId64, d ? "," : "", shape[d]);
  cat(buf, n, "]");
}

static void elem_text(const shmap_block *b, int64_t i, char *buf, size_t n)
{
  const void *p = elem(b, i);
  switch (ref_dtclass(b->dtype)) {
  case 'f':
    if (b->dtype == SHMAP_F64)
      cat(buf, n, "%.17g", *(const double *)p);
    else
      cat(buf, n, "%.9g", ref_get(b, i));
    break;
  case 's':
  case 'u': {
    uint64_t v = 0;
    size_t es = ref_esize(b->dtype);
    memcpy(&v, p, es); /* little-endian */
    if (ref_dtclass(b->dtype) == 's') {
      if (es < 8 && (v >> (8 * es - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * es);
      cat(buf, n, "%" PRId64, (int64_t)v);
    } else {
      cat(buf, n, "%" PRIu64, v);
    }
    break;
  }
  case 'b':
    cat(buf, n, "%s(%u)", *(const uint8_t *)p ? "true" : "false",
        (unsigned)*(const uint8_t *)p);
    break;
  case 'c':
    if (b->dtype == SHMAP_C64)
      cat(buf, n, "%.9g%+.9gj", (double)((const float *)p)[0],
          (double)((const float *)p)[1]);
    else
      cat(buf, n, "%.17g%+.17gj", ((const double *)p)[0],
          ((const double *)p)[1]);
    break;
  }
}

void ref_block_text(const shmap_block *b, int maxel, char *buf, size_t n)
{
  buf[0] = 0;
  if (!b) {
    cat(buf, n, "(none)");
    return;
  }
  char sh[128];
  ref_shape_text(b->dtype, b->rank, b->shape, sh, sizeof sh);
  cat(buf, n, "%s {", sh);
  int64_t ne = ref_numel(b->rank, b->shape);
  for (int64_t i = 0; i < ne && i < maxel; i++) {
    if (i)
      cat(buf, n, ", ");
    elem_text(b, i, buf, n);
  }
  if (ne > maxel)
    cat(buf, n, ", ...");
  cat(buf, n, "}");
}

void ref_block_diff(const shmap_block *got, const shmap_block *want,
                    char *buf, size_t n)
{
  buf[0] = 0;
  char g[128], w[128];
  if (!got || !want) {
    cat(buf, n, "got %s, want %s", got ? "a block" : "no block",
        want ? "a block" : "no block");
    return;
  }
  if (!same_shape(got, want)) {
    ref_shape_text(got->dtype, got->rank, got->shape, g, sizeof g);
    ref_shape_text(want->dtype, want->rank, want->shape, w, sizeof w);
    cat(buf, n, "got shape %s, want %s", g, w);
    return;
  }
  size_t es = ref_esize(want->dtype);
  int64_t ne = ref_numel(want->rank, want->shape);
  for (int64_t i = 0; i < ne; i++) {
    if (memcmp((const char *)got->data + (size_t)i * es,
               (const char *)want->data + (size_t)i * es, es) != 0) {
      int64_t idx[SHMAP_MAX_RANK];
      unravel(i, want->rank, want->shape, idx);
      cat(buf, n, "first difference at [");
      for (int d = 0; d < want->rank; d++)
        cat(buf, n, "%s%" PRId64, d ? "," : "", idx[d]);
      cat(buf, n, "]: got ");
      elem_text(got, i, buf, n);
      cat(buf, n, ", want ");
      elem_text(want, i, buf, n);
      return;
    }
  }
  cat(buf, n, "equal");
}

/* ---- reductions -------------------------------------------------------------- */

/*
 * Reductions of one element, from the rules in shmap(7):
 *  - float sums and means: IEEE arithmetic in rank order; bf16 and f16 in
 *    f32, rounded once at the end (after the division of a mean);
 *  - float max and min: IEEE 754-2019 maximum and minimum (NaN wins, the
 *    first in rank order; -0 < +0);
 *  - integer sums wrap around in the type's width;
 *  - bool: psum counts the true values (i32), pmax is any, pmin is all;
 *  - complex: per component.
 */
static double fmaxmin(ref_redop op, double a, double x, int *take_x)
{
  *take_x = 0;
  if (isnan(a))
    return a;
  if (isnan(x) || (op == REF_MAX ? x > a : x < a) ||
      (x == a && signbit(x) != signbit(a) &&
       (op == REF_MAX ? !signbit(x) : signbit(x))))
    *take_x = 1;
  return *take_x ? x : a;
}

static float fold_f32(ref_redop op, const float *v, int n)
{
  float acc = v[0];
  for (int r = 1; r < n; r++) {
    int t;
    if (op == REF_SUM || op == REF_MEAN)
      acc = acc + v[r];
    else {
      fmaxmin(op, acc, v[r], &t);
      if (t)
        acc = v[r];
    }
  }
  if (op == REF_MEAN)
    acc = acc / (float)n;
  return acc;
}

static double fold_f64(ref_redop op, const double *v, int n)
{
  double acc = v[0];
  for (int r = 1; r < n; r++) {
    int t;
    if (op == REF_SUM || op == REF_MEAN)
      acc = acc + v[r];
    else {
      fmaxmin(op, acc, v[r], &t);
      if (t)
        acc = v[r];
    }
  }
  if (op == REF_MEAN)
    acc = acc / (double)n;
  return acc;
}

static void fold(ref_redop op, shmap_block *const in[], const int mem[],
                 int n, int64_t e, shmap_block *out)
{
  shmap_dtype dt = in[mem[0]]->dtype;
  size_t es = ref_esize(dt);
  void *o = elem(out, e);
  /* The members' values (real parts, then imaginary ones); on the stack
   * for the usual group sizes, since this runs once per element. */
  float vf_stack[128];
  double vd_stack[128];
  float *vf = n <= 64 ? vf_stack : xmalloc(sizeof(float) * 2 * (size_t)n);
  double *vd = n <= 64 ? vd_stack : xmalloc(sizeof(double) * 2 * (size_t)n);
  for (int r = 0; r < n; r++) {
    const void *p = elem(in[mem[r]], e);
    switch (dt) {
    case SHMAP_F32: vf[r] = *(const float *)p; break;
    case SHMAP_BF16: vf[r] = ref_bf16_to_f32(*(const uint16_t *)p); break;
    case SHMAP_F16: vf[r] = ref_f16_to_f32(*(const uint16_t *)p); break;
    case SHMAP_F64: vd[r] = *(const double *)p; break;
    case SHMAP_C64:
      vf[r] = ((const float *)p)[0];
      vf[n + r] = ((const float *)p)[1];
      break;
    case SHMAP_C128:
      vd[r] = ((const double *)p)[0];
      vd[n + r] = ((const double *)p)[1];
      break;
    default: break;
    }
  }
  switch (ref_dtclass(dt)) {
  case 'f':
    if (dt == SHMAP_F32)
      *(float *)o = fold_f32(op, vf, n);
    else if (dt == SHMAP_F64)
      *(double *)o = fold_f64(op, vd, n);
    else if (dt == SHMAP_BF16)
      *(uint16_t *)o = ref_f32_to_bf16(fold_f32(op, vf, n));
    else
      *(uint16_t *)o = ref_f32_to_f16(fold_f32(op, vf, n));
    break;
  case 'c':
    if (dt == SHMAP_C64) {
      ((float *)o)[0] = fold_f32(op, vf, n);
      ((float *)o)[1] = fold_f32(op, vf + n, n);
    } else {
      ((double *)o)[0] = fold_f64(op, vd, n);
      ((double *)o)[1] = fold_f64(op, vd + n, n);
    }
    break;
  case 'b': {
    int32_t cnt = 0;
    for (int r = 0; r < n; r++)
      cnt += *(const uint8_t *)elem(in[mem[r]], e) != 0;
    if (op == REF_SUM)
      *(int32_t *)o = cnt;
    else
      *(uint8_t *)o = op == REF_MAX ? cnt > 0 : cnt == n;
    break;
  }
  case 's':
  case 'u': {
    /* Widen to 64 bits (sign-extended for signed types), fold, keep the
     * low bytes: a sum modulo 2^(8*size). */
    int sgn = ref_dtclass(dt) == 's';
    uint64_t acc = 0;
    for (int r = 0; r < n; r++) {
      uint64_t v = 0;
      memcpy(&v, elem(in[mem[r]], e), es); /* little-endian */
      if (sgn && es < 8 && (v >> (8 * es - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * es);
      if (r == 0 || op == REF_SUM)
        acc = r == 0 ? v : acc + v;
      else if (op == REF_MAX)
        acc = (sgn ? (int64_t)v > (int64_t)acc : v > acc) ? v : acc;
      else
        acc = (sgn ? (int64_t)v < (int64_t)acc : v < acc) ? v : acc;
    }
    memcpy(o, &acc, es);
    break;
  }
  }
  if (vf != vf_stack)
    free(vf);
  if (vd != vd_stack)
    free(vd);
}

/* The dtype of a reduction's result. */
shmap_dtype ref_reduce_dtype(ref_redop op, shmap_dtype dt)
{
  return dt == SHMAP_BOOL && op == REF_SUM ? SHMAP_I32 : dt;
}

/* Which reductions a dtype allows, and the code otherwise. */
int ref_reduce_allowed(ref_redop op, shmap_dtype dt)
{
  char c = ref_dtclass(dt);
  if (op == REF_MEAN && (c == 's' || c == 'u' || c == 'b'))
    return SHMAP_EDTYPE;
  if ((op == REF_MAX || op == REF_MIN) && c == 'c')
    return SHMAP_EDTYPE;
  return 0;
}

int ref_reduce(const ref_mesh *m, const int axes[], int naxes, ref_redop op,
               shmap_block *const in[], shmap_block *out[])
{
  int rc = ref_reduce_allowed(op, in[0]->dtype);
  if (rc)
    return rc;
  int *mem = xmalloc(sizeof(int) * (size_t)m->ndev);
  for (int dev = 0; dev < m->ndev; dev++) {
    int n = coll_group(m, axes, naxes, dev, mem, NULL);
    const shmap_block *x = in[dev];
    out[dev] = ref_block_new(ref_reduce_dtype(op, x->dtype), x->rank, x->shape);
    int64_t ne = ref_numel(x->rank, x->shape);
    for (int64_t e = 0; e < ne; e++)
      fold(op, in, mem, n, e, out[dev]);
  }
  free(mem);
  return 0;
}

/* ---- psum_scatter ------------------------------------------------------------ */

int ref_psum_scatter(const ref_mesh *m, const int axes[], int naxes,
                     shmap_block *const in[], int dim, int tiled,
                     shmap_block *out[])
{
  const shmap_block *x0 = in[0];
  int n = coll_size(m, axes, naxes);
  if (dim < -x0->rank || dim >= x0->rank)
    return SHMAP_EINVAL;
  if (dim < 0)
    dim += x0->rank;
  if (tiled ? x0->shape[dim] % n != 0 : x0->shape[dim] != n)
    return SHMAP_ESHAPE;
  shmap_block **sum = xcalloc((size_t)m->ndev, sizeof *sum);
  ref_reduce(m, axes, naxes, REF_SUM, in, sum);
  for (int dev = 0; dev < m->ndev; dev++) {
    int r;
    coll_group(m, axes, naxes, dev, NULL, &r);
    const shmap_block *s = sum[dev];
    int64_t chunk = tiled ? s->shape[dim] / n : 1;
    int64_t osh[SHMAP_MAX_RANK] = {0};
    int orank = 0;
    for (int d = 0; d < s->rank; d++) {
      if (d == dim) {
        if (tiled)
          osh[orank++] = chunk;
      } else {
        osh[orank++] = s->shape[d];
      }
    }
    out[dev] = ref_block_new(s->dtype, orank, osh);
    int64_t ne = ref_numel(orank, osh);
    for (int64_t e = 0; e < ne; e++) {
      int64_t o[SHMAP_MAX_RANK] = {0}, i[SHMAP_MAX_RANK] = {0};
      unravel(e, orank, osh, o);
      /* Index into the sum: dimension dim at r*chunk + (o[dim] if tiled). */
      int k = 0;
      for (int d = 0; d < s->rank; d++) {
        if (d == dim)
          i[d] = (int64_t)r * chunk + (tiled ? o[k++] : 0);
        else
          i[d] = o[k++];
      }
      copy_elem(out[dev], e, s, ravel(i, s->rank, s->shape));
    }
  }
  ref_blocks_free(sum, m->ndev);
  free(sum);
  return 0;
}

/* ---- all_gather ---------------------------------------------------------------- */

int ref_all_gather(const ref_mesh *m, const int axes[], int naxes,
                   shmap_block *const in[], int axis, int tiled,
                   shmap_block *out[])
{
  const shmap_block *x0 = in[0];
  int lim = tiled ? x0->rank : x0->rank + 1;
  if (tiled && x0->rank == 0)
    return SHMAP_ESHAPE;
  if (axis < -lim || axis >= lim)
    return SHMAP_EINVAL;
  if (!tiled && x0->rank + 1 > SHMAP_MAX_RANK)
    return SHMAP_ESHAPE;
  if (axis < 0)
    axis += lim;
  int *mem = xmalloc(sizeof(int) * (size_t)m->ndev);
  for (int dev = 0; dev < m->ndev; dev++) {
    int n = coll_group(m, axes, naxes, dev, mem, NULL);
    const shmap_block *x = in[dev];
    int64_t osh[SHMAP_MAX_RANK] = {0};
    int orank;
    if (tiled) {
      orank = x->rank;
      for (int d = 0; d < x->rank; d++)
        osh[d] = x->shape[d] * (d == axis ? n : 1);
    } else {
      orank = x->rank + 1;
      for (int d = 0, k = 0; d < orank; d++)
        osh[d] = d == axis ? n : x->shape[k++];
    }
    out[dev] = ref_block_new(x->dtype, orank, osh);
    int64_t ne = ref_numel(orank, osh);
    for (int64_t e = 0; e < ne; e++) {
      int64_t o[SHMAP_MAX_RANK] = {0}, i[SHMAP_MAX_RANK] = {0};
      unravel(e, orank, osh, o);
      int src;
      if (tiled) {
        src = (int)(o[axis] / x->shape[axis]);
        memcpy(i, o, sizeof(int64_t) * (size_t)orank);
        i[axis] = o[axis] % x->shape[axis];
      } else {
        src = (int)o[axis];
        for (int d = 0, k = 0; d < orank; d++)
          if (d != axis)
            i[k++] = o[d];
      }
      copy_elem(out[dev], e, in[mem[src]], ravel(i, x->rank, x->shape));
    }
  }
  free(mem);
  return 0;
}

/* ---- all_to_all ---------------------------------------------------------------- */

int ref_all_to_all(const ref_mesh *m, const int axes[], int naxes,
                   shmap_block *const in[], int split, int concat, int tiled,
                   shmap_block *out[])
{
  const shmap_block *x0 = in[0];
  int n = coll_size(m, axes, naxes);
  int rk = x0->rank;
  if (split < -rk || split >= rk || concat < -rk || concat >= rk)
    return SHMAP_EINVAL;
  if (split < 0)
    split += rk;
  if (concat < 0)
    concat += rk;
  if (tiled ? x0->shape[split] % n != 0 : x0->shape[split] != n)
    return SHMAP_ESHAPE;
  int *mem = xmalloc(sizeof(int) * (size_t)m->ndev);
  for (int dev = 0; dev < m->ndev; dev++) {
    int me;
    coll_group(m, axes, naxes, dev, mem, &me);
    const shmap_block *x = in[dev];
    int64_t osh[SHMAP_MAX_RANK] = {0};
    if (tiled) {
      for (int d = 0; d < rk; d++)
        osh[d] = x->shape[d];
      osh[split] /= n;
      osh[concat] *= n;
    } else {
      /* Remove split, then insert n at concat. */
      int64_t tmp[SHMAP_MAX_RANK];
      for (int d = 0, k = 0; d < rk; d++)
        if (d != split)
          tmp[k++] = x->shape[d];
      for (int d = 0, k = 0; d < rk; d++)
        osh[d] = d == concat ? n : tmp[k++];
    }
    out[dev] = ref_block_new(x->dtype, rk, osh);
    int64_t ne = ref_numel(rk, osh);
    int64_t chunk = tiled ? x->shape[split] / n : 1;
    for (int64_t e = 0; e < ne; e++) {
      int64_t o[SHMAP_MAX_RANK] = {0}, i[SHMAP_MAX_RANK] = {0};
      unravel(e, rk, osh, o);
      int src;
      if (tiled) {
        int64_t base = osh[concat] / n; /* size of one received piece */
        src = (int)(o[concat] / base);
        memcpy(i, o, sizeof(int64_t) * (size_t)rk);
        i[concat] = o[concat] % base;
        i[split] += (int64_t)me * chunk;
      } else {
        src = (int)o[concat];
        int64_t tmp[SHMAP_MAX_RANK];
        for (int d = 0, k = 0; d < rk; d++)
          if (d != concat)
            tmp[k++] = o[d];
        for (int d = 0, k = 0; d < rk; d++)
          i[d] = d == split ? me : tmp[k++];
      }
      copy_elem(out[dev], e, in[mem[src]], ravel(i, rk, x->shape));
    }
  }
  free(mem);
  return 0;
}

/* ---- ppermute ---------------------------------------------------------------- */

int ref_ppermute(const ref_mesh *m, const int axes[], int naxes,
                 shmap_block *const in[], int npairs, const int pairs[][2],
                 shmap_block *out[])
{
  int n = ref_axis_size(m, axes, naxes);
  if (npairs < 0 || (npairs > 0 && !pairs))
    return SHMAP_EINVAL;
  for (int p = 0; p < npairs; p++) {
    if (pairs[p][0] < 0 || pairs[p][0] >= n || pairs[p][1] < 0 ||
        pairs[p][1] >= n)
      return SHMAP_EINVAL;
    for (int q = 0; q < p; q++)
      if (pairs[q][0] == pairs[p][0] || pairs[q][1] == pairs[p][1])
        return SHMAP_EINVAL;
  }
  int *mem = xmalloc(sizeof(int) * (size_t)m->ndev);
  for (int dev = 0; dev < m->ndev; dev++) {
    int me;
    ref_group(m, axes, naxes, dev, mem, &me);
    const shmap_block *x = in[dev];
    out[dev] = ref_block_new(x->dtype, x->rank, x->shape);
    for (int p = 0; p < npairs; p++) {
      if (pairs[p][1] != me)
        continue;
      const shmap_block *s = in[mem[pairs[p][0]]];
      int64_t ne = ref_numel(x->rank, x->shape);
      for (int64_t e = 0; e < ne; e++)
        copy_elem(out[dev], e, s, e);
    }
  }
  free(mem);
  return 0;
}

/* ---- pbroadcast ------------------------------------------------------------- */

int ref_pbroadcast(const ref_mesh *m, const int axes[], int naxes,
                   shmap_block *const in[], int source, shmap_block *out[])
{
  if (source < 0 || source >= ref_axis_size(m, axes, naxes))
    return SHMAP_EINVAL;
  int *mem = xmalloc(sizeof(int) * (size_t)m->ndev);
  for (int dev = 0; dev < m->ndev; dev++) {
    ref_group(m, axes, naxes, dev, mem, NULL);
    out[dev] = ref_block_copy(in[mem[source]]);
  }
  free(mem);
  return 0;
}

/* ---- specs ----------------------------------------------------------------------- */

static int64_t entry_count(const ref_mesh *m, const ref_spec *s, int d)
{
  if (d >= s->ndims)
    return 1;
  int64_t c = 1;
  for (int k = 0; k < s->naxes[d]; k++)
    c *= m->sizes[s->axes[d][k]];
  return c;
}

static int64_t entry_index(const ref_mesh *m, const ref_spec *s, int d,
                           const int coords[])
{
  if (d >= s->ndims)
    return 0;
  int64_t idx = 0;
  for (int k = 0; k < s->naxes[d]; k++)
    idx = idx * m->sizes[s->axes[d][k]] + coords[s->axes[d][k]];
  return idx;
}

shmap_block *ref_split(const ref_mesh *m, const ref_spec *s,
                       const shmap_block *g, int dev)
{
  int c[SHMAP_MAX_AXES];
  ref_coords(m, dev, c);
  int64_t bsh[SHMAP_MAX_RANK], off[SHMAP_MAX_RANK];
  for (int d = 0; d < g->rank; d++) {
    bsh[d] = g->shape[d] / entry_count(m, s, d);
    off[d] = entry_index(m, s, d, c) * bsh[d];
  }
  shmap_block *b = ref_block_new(g->dtype, g->rank, bsh);
  int64_t ne = ref_numel(g->rank, bsh);
  for (int64_t e = 0; e < ne; e++) {
    int64_t i[SHMAP_MAX_RANK];
    unravel(e, g->rank, bsh, i);
    for (int d = 0; d < g->rank; d++)
      i[d] += off[d];
    copy_elem(b, e, g, ravel(i, g->rank, g->shape));
  }
  return b;
}

shmap_block *ref_assemble(const ref_mesh *m, const ref_spec *s,
                          shmap_block *const blocks[])
{
  const shmap_block *b0 = blocks[0];
  int rk = b0->rank;
  int64_t gsh[SHMAP_MAX_RANK];
  for (int d = 0; d < rk; d++)
    gsh[d] = b0->shape[d] * entry_count(m, s, d);
  shmap_block *g = ref_block_new(b0->dtype, rk, gsh);
  bool named[SHMAP_MAX_AXES] = {false};
  for (int d = 0; d < s->ndims; d++)
    for (int k = 0; k < s->naxes[d]; k++)
      named[s->axes[d][k]] = true;
  for (int dev = 0; dev < m->ndev; dev++) {
    int c[SHMAP_MAX_AXES];
    ref_coords(m, dev, c);
    bool rep = true;
    for (int a = 0; a < m->naxes; a++)
      if (!named[a] && c[a] != 0)
        rep = false;
    if (!rep)
      continue;
    int64_t off[SHMAP_MAX_RANK];
    for (int d = 0; d < rk; d++)
      off[d] = entry_index(m, s, d, c) * b0->shape[d];
    int64_t ne = ref_numel(rk, b0->shape);
    for (int64_t e = 0; e < ne; e++) {
      int64_t i[SHMAP_MAX_RANK];
      unravel(e, rk, b0->shape, i);
      for (int d = 0; d < rk; d++)
        i[d] += off[d];
      copy_elem(g, ravel(i, rk, gsh), blocks[dev], e);
    }
  }
  return g;
}

/* ---- random numbers ---------------------------------------------------------------- */

uint64_t ref_rng_next(ref_rng *r)
{
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int ref_rng_int(ref_rng *r, int lo, int hi)
{
  uint64_t span = (uint64_t)((int64_t)hi - lo + 1);
  return lo + (int)(ref_rng_next(r) % span);
}

void ref_fill_random(ref_rng *r, shmap_block *b)
{
  int64_t ne = ref_numel(b->rank, b->shape);
  size_t es = ref_esize(b->dtype);
  for (int64_t i = 0; i < ne; i++) {
    void *p = elem(b, i);
    for (int part = 0; part < (ref_dtclass(b->dtype) == 'c' ? 2 : 1); part++) {
      uint64_t u = ref_rng_next(r);
      double mant = 1.0 + (double)(u >> 11) * 0x1.0p-53; /* [1, 2) */
      /* f16 reaches only 65504: smaller magnitudes keep its sums finite. */
      int e = b->dtype == SHMAP_F16 ? (int)((u >> 3) % 21) - 10
                                    : (int)((u >> 3) % 41) - 20;
      double sign = (u & 1) ? -1.0 : 1.0;
      double v = sign * ldexp(mant, e);
      switch (b->dtype) {
      case SHMAP_F32: *(float *)p = (float)v; break;
      case SHMAP_F64: *(double *)p = v; break;
      case SHMAP_BF16: *(uint16_t *)p = ref_f32_to_bf16((float)v); break;
      case SHMAP_F16: *(uint16_t *)p = ref_f32_to_f16((float)v); break;
      case SHMAP_C64: ((float *)p)[part] = (float)v; break;
      case SHMAP_C128: ((double *)p)[part] = v; break;
      case SHMAP_I32: *(int32_t *)p = (int32_t)(u % 2001) - 1000; break;
      case SHMAP_I64: *(int64_t *)p = (int64_t)(u % 2000001) - 1000000; break;
      /* Now and then a byte other than 0 and 1: true all the same. */
      case SHMAP_BOOL:
        *(uint8_t *)p = (uint8_t)(u % 7 == 0 ? (u >> 8) % 256 : (u >> 8) & 1);
        break;
      /* The other integers take any bits: their sums wrap around. */
      default: memcpy(p, &u, es); break;
      }
    }
  }
}

uint64_t ref_seed(uint64_t dflt)
{
  const char *s = getenv("SHMAPTEST_PROP_SEED");
  if (s && *s)
    return strtoull(s, NULL, 0);
  return dflt;
}

/* ---- capture ----------------------------------------------------------------------- */

ref_cap *ref_cap_new(int ndev)
{
  ref_cap *c = xcalloc(1, sizeof *c);
  c->ndev = ndev;
  c->blk = xcalloc((size_t)ndev, sizeof *c->blk);
  c->rc = xcalloc((size_t)ndev, sizeof *c->rc);
  c->val = xcalloc((size_t)ndev, sizeof *c->val);
  c->msg = xcalloc((size_t)ndev, sizeof *c->msg);
  for (int d = 0; d < ndev; d++)
    c->rc[d] = 1; /* "never ran" */
  return c;
}

void ref_cap_free(ref_cap *c)
{
  if (!c)
    return;
  ref_blocks_free(c->blk, c->ndev);
  free(c->blk);
  free(c->rc);
  free(c->val);
  free(c->msg);
  free(c);
}

void ref_cap_put(ref_cap *c, int dev, const shmap_block *b)
{
  if (dev < 0 || dev >= c->ndev)
    return;
  ref_block_free(c->blk[dev]);
  c->blk[dev] = b ? ref_block_copy(b) : NULL;
}

void ref_cap_rc(ref_cap *c, int dev, int rc)
{
  if (dev < 0 || dev >= c->ndev)
    return;
  c->rc[dev] = rc;
  const char *m = shmap_errmsg();
  snprintf(c->msg[dev], REF_MSG_MAX, "%s", rc && m ? m : "");
}

bool ref_has(const char *hay, const char *needle)
{
  return hay && needle && strstr(hay, needle) != NULL;
}

/* ---- ops -------------------------------------------------------------------------- */

const char *ref_kind_name(ref_kind k)
{
  static const char *const names[RK_NKINDS] = {
      "psum",         "pmax",       "pmin",       "pmean",
      "psum_scatter", "all_gather", "all_to_all", "ppermute"};
  if (k == RK_PBROADCAST)
    return "pbroadcast";
  return k >= 0 && k < RK_NKINDS ? names[k] : "?";
}

bool ref_kind_inplace(ref_kind k)
{
  return k == RK_PSUM || k == RK_PMAX || k == RK_PMIN || k == RK_PMEAN ||
         k == RK_PPERMUTE || k == RK_PBROADCAST;
}

void ref_op_axes(const ref_mesh *m, ref_op *op, const int axes[], int naxes,
                 int style)
{
  op->naxes = naxes;
  for (int k = 0; k < naxes; k++)
    op->axes[k] = axes[k];
  ref_axes_text(m, axes, naxes, style, op->text, sizeof op->text);
}

void ref_op_text(const ref_op *op, char *buf, size_t n)
{
  buf[0] = 0;
  cat(buf, n, "%s%s(\"%s\"", ref_kind_name(op->kind),
      op->outplace ? "_new" : "", op->text);
  switch (op->kind) {
  case RK_PSUM_SCATTER:
    cat(buf, n, ", scatter_dimension=%d, tiled=%d", op->dim, op->tiled);
    break;
  case RK_ALL_GATHER:
    cat(buf, n, ", axis=%d, tiled=%d", op->dim, op->tiled);
    break;
  case RK_ALL_TO_ALL:
    cat(buf, n, ", split_axis=%d, concat_axis=%d, tiled=%d", op->dim,
        op->dim2, op->tiled);
    break;
  case RK_PPERMUTE:
    cat(buf, n, ", pairs=[");
    for (int p = 0; p < op->npairs; p++)
      cat(buf, n, "%s(%d,%d)", p ? "," : "", op->pairs[p][0],
          op->pairs[p][1]);
    cat(buf, n, "]");
    break;
  case RK_PBROADCAST:
    cat(buf, n, ", source=%d", op->dim);
    break;
  default:
    break;
  }
  if (op->groups) {
    cat(buf, n, ", axis_index_groups=[");
    for (int g = 0; g < op->ngroups; g++) {
      cat(buf, n, "%s[", g ? "," : "");
      for (int k = 0; k < op->gsize; k++)
        cat(buf, n, "%s%d", k ? "," : "", op->groups[g * op->gsize + k]);
      cat(buf, n, "]");
    }
    cat(buf, n, "]");
  }
  cat(buf, n, ")");
}

static int apply(const ref_mesh *m, const ref_op *op, shmap_block *const in[],
                 shmap_block *out[]);

int ref_apply(const ref_mesh *m, const ref_op *op, shmap_block *const in[],
              shmap_block *out[])
{
  if (op->groups)
    ref_set_groups(op->ngroups, op->gsize, op->groups);
  int rc = apply(m, op, in, out);
  ref_set_groups(0, 0, NULL);
  return rc;
}

static int apply(const ref_mesh *m, const ref_op *op, shmap_block *const in[],
                 shmap_block *out[])
{
  switch (op->kind) {
  case RK_PSUM:
    return ref_reduce(m, op->axes, op->naxes, REF_SUM, in, out);
  case RK_PMAX:
    return ref_reduce(m, op->axes, op->naxes, REF_MAX, in, out);
  case RK_PMIN:
    return ref_reduce(m, op->axes, op->naxes, REF_MIN, in, out);
  case RK_PMEAN:
    return ref_reduce(m, op->axes, op->naxes, REF_MEAN, in, out);
  case RK_PSUM_SCATTER:
    return ref_psum_scatter(m, op->axes, op->naxes, in, op->dim, op->tiled,
                            out);
  case RK_ALL_GATHER:
    return ref_all_gather(m, op->axes, op->naxes, in, op->dim, op->tiled,
                          out);
  case RK_ALL_TO_ALL:
    return ref_all_to_all(m, op->axes, op->naxes, in, op->dim, op->dim2,
                          op->tiled, out);
  case RK_PPERMUTE:
    return ref_ppermute(m, op->axes, op->naxes, in, op->npairs,
                        (const int(*)[2])op->pairs, out);
  case RK_PBROADCAST:
    return ref_pbroadcast(m, op->axes, op->naxes, in, op->dim, out);
  default:
    return SHMAP_EINVAL;
  }
}

/* The _groups forms of the library's collectives. */
static int call_groups(shmap_ctx *ctx, const ref_op *op, shmap_block *x,
                       shmap_block **res)
{
  shmap_groups g = {op->ngroups, op->gsize, op->groups};
  int rc;
  if (op->outplace)
    switch (op->kind) {
    case RK_PSUM: return shmap_psum_groups_new(ctx, x, op->text, &g, res);
    case RK_PMAX: return shmap_pmax_groups_new(ctx, x, op->text, &g, res);
    case RK_PMIN: return shmap_pmin_groups_new(ctx, x, op->text, &g, res);
    case RK_PMEAN: return shmap_pmean_groups_new(ctx, x, op->text, &g, res);
    default: break;
    }
  switch (op->kind) {
  case RK_PSUM: rc = shmap_psum_groups(ctx, x, op->text, &g); break;
  case RK_PMAX: rc = shmap_pmax_groups(ctx, x, op->text, &g); break;
  case RK_PMIN: rc = shmap_pmin_groups(ctx, x, op->text, &g); break;
  case RK_PMEAN: rc = shmap_pmean_groups(ctx, x, op->text, &g); break;
  case RK_PSUM_SCATTER:
    return shmap_psum_scatter_groups(ctx, x, op->text, &g, op->dim, op->tiled,
                                     res);
  case RK_ALL_GATHER:
    return shmap_all_gather_groups(ctx, x, op->text, &g, op->dim, op->tiled,
                                   res);
  case RK_ALL_TO_ALL:
    return shmap_all_to_all_groups(ctx, x, op->text, &g, op->dim, op->dim2,
                                   op->tiled, res);
  default:
    return SHMAP_EINVAL;
  }
  if (rc == 0)
    *res = x;
  return rc;
}

int ref_call(shmap_ctx *ctx, const ref_op *op, shmap_block *x,
             shmap_block **res)
{
  *res = NULL;
  int rc;
  if (op->groups)
    return call_groups(ctx, op, x, res);
  if (op->kind == RK_PBROADCAST) {
    if (op->outplace)
      return shmap_pbroadcast_new(ctx, x, op->text, op->dim, res);
    rc = shmap_pbroadcast(ctx, x, op->text, op->dim);
    if (rc == 0)
      *res = x;
    return rc;
  }
  if (op->outplace)
    switch (op->kind) {
    case RK_PSUM:
      return shmap_psum_new(ctx, x, op->text, res);
    case RK_PMAX:
      return shmap_pmax_new(ctx, x, op->text, res);
    case RK_PMIN:
      return shmap_pmin_new(ctx, x, op->text, res);
    case RK_PMEAN:
      return shmap_pmean_new(ctx, x, op->text, res);
    case RK_PPERMUTE:
      return shmap_ppermute_new(ctx, x, op->text, op->npairs,
                                (const int(*)[2])op->pairs, res);
    default:
      break;
    }
  switch (op->kind) {
  case RK_PSUM:
    rc = shmap_psum(ctx, x, op->text);
    break;
  case RK_PMAX:
    rc = shmap_pmax(ctx, x, op->text);
    break;
  case RK_PMIN:
    rc = shmap_pmin(ctx, x, op->text);
    break;
  case RK_PMEAN:
    rc = shmap_pmean(ctx, x, op->text);
    break;
  case RK_PPERMUTE:
    rc = shmap_ppermute(ctx, x, op->text, op->npairs,
                        (const int(*)[2])op->pairs);
    break;
  case RK_PSUM_SCATTER:
    return shmap_psum_scatter(ctx, x, op->text, op->dim, op->tiled, res);
  case RK_ALL_GATHER:
    return shmap_all_gather(ctx, x, op->text, op->dim, op->tiled, res);
  case RK_ALL_TO_ALL:
    return shmap_all_to_all(ctx, x, op->text, op->dim, op->dim2, op->tiled,
                            res);
  default:
    return SHMAP_EINVAL;
  }
  if (rc == 0)
    *res = x;
  return rc;
}

/* ---- jobs --------------------------------------------------------------------------- */

int ref_job_body(shmap_ctx *ctx, void *arg)
{
  ref_job *job = arg;
  int dev = shmap_ctx_device(ctx);
  if (dev < 0 || dev >= job->m->ndev)
    return shmap_fail(ctx, "job: bad device number %d", dev);
  const shmap_block *src = job->in[dev];
  size_t nb = (size_t)ref_numel(src->rank, src->shape) * ref_esize(src->dtype);
  shmap_block own = *src;
  void *buf = NULL;
  shmap_block *x;
  if (job->mem == 0) {
    x = shmap_block_alloc(ctx, src->dtype, src->rank, src->shape);
    if (!x) {
      ref_cap_rc(job->cap, dev, SHMAP_ENOMEM);
      return shmap_fail(ctx, "job: shmap_block_alloc failed: %s",
                        shmap_errmsg());
    }
  } else {
    buf = xmalloc(nb);
    own.data = buf;
    x = &own;
  }
  if (nb)
    memcpy(x->data, src->data, nb);
  int rc = 0;
  for (int k = 0; k < job->nops; k++) {
    shmap_block *res = NULL;
    rc = ref_call(ctx, &job->ops[k], x, &res);
    if (rc != 0)
      break;
    if (res != x) {
      /* x was the result of an earlier shape-changing op or the alloc'd
       * copy: free it early when asked. */
      if (job->free_early && x != &own) {
        int frc = shmap_block_free(ctx, x);
        if (frc != 0) {
          rc = frc;
          break;
        }
      }
      x = res;
    }
  }
  ref_cap_rc(job->cap, dev, rc);
  if (rc == 0)
    ref_cap_put(job->cap, dev, x);
  free(buf);
  return rc;
}

int ref_job_run(shmap_mesh *mesh, ref_job *job)
{
  return shmap_map(mesh, ref_job_body, job, 0, NULL, NULL, 0, NULL, NULL);
}

int ref_job_model(const ref_job *job, shmap_block *out[])
{
  int nd = job->m->ndev;
  shmap_block **cur = xcalloc((size_t)nd, sizeof *cur);
  for (int d = 0; d < nd; d++)
    cur[d] = ref_block_copy(job->in[d]);
  for (int k = 0; k < job->nops; k++) {
    shmap_block **nxt = xcalloc((size_t)nd, sizeof *nxt);
    int rc = ref_apply(job->m, &job->ops[k], cur, nxt);
    ref_blocks_free(cur, nd);
    free(cur);
    if (rc != 0) {
      free(nxt);
      return rc;
    }
    cur = nxt;
  }
  for (int d = 0; d < nd; d++)
    out[d] = cur[d];
  free(cur);
  return 0;
}
