/* SPDX-License-Identifier: MIT */
/*
 * kern.h - the fused reduction kernels, written once and compiled once per
 * instruction set by src/ops.c, which defines before including it:
 *   KPFX    a prefix for this copy's functions and types;
 *   VB      the vector width in bytes (16, 32 or 64);
 *   KATTR   the target attribute of every function (empty for generic);
 *   KF16    0: convert f16 in C, 1: with F16C (256-bit), 2: with AVX-512;
 *   KTABLE  the name of this copy's kernel table.
 *
 * Each kernel keeps a few vectors of every source's elements in registers
 * and folds the sources into them in rank order, so an element's result is
 * the serial left fold whatever the vector width: lanes never interact, the
 * tail loop applies the same operation per element, and nothing is
 * reassociated.  bf16 and f16 are folded in f32 and rounded once.
 */

#define KCAT2(a, b) a##b
#define KCAT(a, b) KCAT2(a, b)
#define KN(x) KCAT(KPFX, x)

typedef float KN(vf32) __attribute__((vector_size(VB)));
typedef double KN(vf64) __attribute__((vector_size(VB)));
typedef int8_t KN(vi8) __attribute__((vector_size(VB)));
typedef uint8_t KN(vu8) __attribute__((vector_size(VB)));
typedef int16_t KN(vi16) __attribute__((vector_size(VB)));
typedef uint16_t KN(vu16) __attribute__((vector_size(VB)));
typedef int32_t KN(vi32) __attribute__((vector_size(VB)));
typedef uint32_t KN(vu32) __attribute__((vector_size(VB)));
typedef int64_t KN(vi64) __attribute__((vector_size(VB)));
typedef uint64_t KN(vu64) __attribute__((vector_size(VB)));

/* ---- per-element and per-vector operations --------------------------------- */

/* Integer sums are computed unsigned: they wrap around, with no undefined
 * behaviour, and give the two's complement bits signed types expect. */
#define OP_ADD(a, b) ((a) + (b))
/* Select x where mask m is set, else a (masks are all ones or all zeros). */
#define SEL(VT, m, x, a) ((((VT)(m)) & (x)) | (~((VT)(m)) & (a)))

/*
 * Float max and min follow IEEE 754-2019 maximum and minimum: a NaN
 * operand makes the result NaN (the first NaN in rank order), and -0 is
 * less than +0 (for equal operands the bits are ANDed for max, ORed for
 * min, which only matters for zeros of two signs).
 */
#define FLOAT_MINMAX(T, U, VF, VI, NAME, CMP, MERGE)                            \
  KATTR static inline T KN(s##NAME)(T a, T x)                                  \
  {                                                                            \
    if (a != a)                                                                \
      return a;                                                                \
    if (x != x)                                                                \
      return x;                                                                \
    if (x CMP a)                                                               \
      return x;                                                                \
    if (x == a) {                                                              \
      U ua, ux;                                                                \
      memcpy(&ua, &a, sizeof ua);                                              \
      memcpy(&ux, &x, sizeof ux);                                              \
      ua = ua MERGE ux;                                                        \
      memcpy(&a, &ua, sizeof ua);                                              \
    }                                                                          \
    return a;                                                                  \
  }                                                                            \
  KATTR static inline VF KN(v##NAME)(VF a, VF x)                               \
  {                                                                            \
    VI ia = (VI)a, ix = (VI)x;                                                 \
    VI better = (VI)(x CMP a), eq = (VI)(x == a);                              \
    VI nan = (VI)(x != x) & ~(VI)(a != a);                                     \
    VI r = SEL(VI, better, ix, ia);                                            \
    r = SEL(VI, eq, ia MERGE ix, r);                                           \
    r = SEL(VI, nan, ix, r);                                                   \
    return (VF)r;                                                              \
  }

FLOAT_MINMAX(float, uint32_t, KN(vf32), KN(vi32), max_f32, >, &)
FLOAT_MINMAX(float, uint32_t, KN(vf32), KN(vi32), min_f32, <, |)
FLOAT_MINMAX(double, uint64_t, KN(vf64), KN(vi64), max_f64, >, &)
FLOAT_MINMAX(double, uint64_t, KN(vf64), KN(vi64), min_f64, <, |)

/*
 * The folds above pass the first NaN on with its bits, a signalling one
 * too (the comparisons never produce a value), and a member alone passes
 * its input on: max and min of f32 and f64 set the quiet bit of a NaN
 * result once, after the fold -- a compare, an and and an or per vector,
 * as bf16 and f16 get it from their rounding.  Sign and payload stay.
 */
#define FLOAT_QUIET(T, U, VF, VI, S, QBIT)                                     \
  KATTR static inline T KN(squiet_##S)(T a)                                    \
  {                                                                            \
    if (a == a)                                                                \
      return a;                                                                \
    U u;                                                                       \
    memcpy(&u, &a, sizeof u);                                                  \
    u |= QBIT;                                                                 \
    memcpy(&a, &u, sizeof u);                                                  \
    return a;                                                                  \
  }                                                                            \
  KATTR static inline VF KN(vquiet_##S)(VF a)                                  \
  {                                                                            \
    VI nan = (VI)(a != a);                                                     \
    return (VF)((VI)a | (nan & (QBIT)));                                       \
  }

FLOAT_QUIET(float, uint32_t, KN(vf32), KN(vi32), f32, (int32_t)0x00400000)
FLOAT_QUIET(double, uint64_t, KN(vf64), KN(vi64), f64,
            (int64_t)0x0008000000000000)
#define FIN_KEEP(x) (x)

#define SOP_ADD(a, x) ((a) + (x))
#define VOP_ADD(a, x) ((a) + (x))

/* ---- f32, f64 and the integers: fold vectors of the element type ------------ */

/* Two vectors per step, so consecutive additions of a chain overlap. */
#define FOLD_KERNEL(NAME, T, VT, VOP, SOP, MEAN, VFIN, SFIN)                   \
  KATTR static void KN(NAME)(void *dst, const void *const src[], int ns,       \
                             size_t n, int count)                             \
  {                                                                            \
    T *d = dst;                                                                \
    const size_t w = sizeof(VT) / sizeof(T);                                   \
    size_t i = 0;                                                              \
    (void)count;                                                               \
    for (; i + 2 * w <= n; i += 2 * w) {                                       \
      VT a0, a1, b0, b1;                                                       \
      memcpy(&a0, (const T *)src[0] + i, sizeof a0);                           \
      memcpy(&a1, (const T *)src[0] + i + w, sizeof a1);                       \
      for (int r = 1; r < ns; r++) {                                           \
        const T *s = (const T *)src[r] + i;                                    \
        memcpy(&b0, s, sizeof b0);                                             \
        memcpy(&b1, s + w, sizeof b1);                                         \
        a0 = VOP(a0, b0);                                                      \
        a1 = VOP(a1, b1);                                                      \
      }                                                                        \
      if (MEAN && count) {                                                     \
        a0 = a0 / (T)count;                                                    \
        a1 = a1 / (T)count;                                                    \
      }                                                                        \
      a0 = VFIN(a0);                                                           \
      a1 = VFIN(a1);                                                           \
      memcpy(d + i, &a0, sizeof a0);                                           \
      memcpy(d + i + w, &a1, sizeof a1);                                       \
    }                                                                          \
    for (; i < n; i++) {                                                       \
      T a = ((const T *)src[0])[i];                                            \
      for (int r = 1; r < ns; r++)                                             \
        a = SOP(a, ((const T *)src[r])[i]);                                    \
      if (MEAN && count)                                                       \
        a = a / (T)count;                                                      \
      d[i] = SFIN(a);                                                          \
    }                                                                          \
  }

FOLD_KERNEL(sum_f32, float, KN(vf32), VOP_ADD, SOP_ADD, 1, FIN_KEEP,
            FIN_KEEP)
FOLD_KERNEL(sum_f64, double, KN(vf64), VOP_ADD, SOP_ADD, 1, FIN_KEEP,
            FIN_KEEP)
FOLD_KERNEL(max_f32, float, KN(vf32), KN(vmax_f32), KN(smax_f32), 0,
            KN(vquiet_f32), KN(squiet_f32))
FOLD_KERNEL(min_f32, float, KN(vf32), KN(vmin_f32), KN(smin_f32), 0,
            KN(vquiet_f32), KN(squiet_f32))
FOLD_KERNEL(max_f64, double, KN(vf64), KN(vmax_f64), KN(smax_f64), 0,
            KN(vquiet_f64), KN(squiet_f64))
FOLD_KERNEL(min_f64, double, KN(vf64), KN(vmin_f64), KN(smin_f64), 0,
            KN(vquiet_f64), KN(squiet_f64))

#define INT_KERNELS(S, T, VT, UT, VU)                                          \
  FOLD_KERNEL(sum_##S, UT, VU, VOP_ADD, SOP_ADD, 0, FIN_KEEP, FIN_KEEP)        \
  KATTR static inline VT KN(vmax_##S)(VT a, VT x)                              \
  {                                                                            \
    return SEL(VT, x > a, x, a);                                               \
  }                                                                            \
  KATTR static inline VT KN(vmin_##S)(VT a, VT x)                              \
  {                                                                            \
    return SEL(VT, x < a, x, a);                                               \
  }                                                                            \
  KATTR static inline T KN(smax_##S)(T a, T x) { return x > a ? x : a; }       \
  KATTR static inline T KN(smin_##S)(T a, T x) { return x < a ? x : a; }       \
  FOLD_KERNEL(max_##S, T, VT, KN(vmax_##S), KN(smax_##S), 0, FIN_KEEP,        \
              FIN_KEEP)                                                        \
  FOLD_KERNEL(min_##S, T, VT, KN(vmin_##S), KN(smin_##S), 0, FIN_KEEP,        \
              FIN_KEEP)

INT_KERNELS(i8, int8_t, KN(vi8), uint8_t, KN(vu8))
INT_KERNELS(u8, uint8_t, KN(vu8), uint8_t, KN(vu8))
INT_KERNELS(i16, int16_t, KN(vi16), uint16_t, KN(vu16))
INT_KERNELS(u16, uint16_t, KN(vu16), uint16_t, KN(vu16))
INT_KERNELS(i32, int32_t, KN(vi32), uint32_t, KN(vu32))
INT_KERNELS(u32, uint32_t, KN(vu32), uint32_t, KN(vu32))
INT_KERNELS(i64, int64_t, KN(vi64), uint64_t, KN(vu64))
INT_KERNELS(u64, uint64_t, KN(vu64), uint64_t, KN(vu64))

/* ---- complex: sums and means are per component ------------------------------ */

KATTR static void KN(sum_c64)(void *dst, const void *const src[], int ns,
                              size_t n, int count)
{
  KN(sum_f32)(dst, src, ns, 2 * n, count);
}

KATTR static void KN(sum_c128)(void *dst, const void *const src[], int ns,
                               size_t n, int count)
{
  KN(sum_f64)(dst, src, ns, 2 * n, count);
}

/* ---- bf16 and f16: fold in f32, round once ------------------------------------ */

#if KF16 == 1
KATTR static inline KN(vf32) KN(load_f16)(const uint16_t *p)
{
  return (KN(vf32))_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
KATTR static inline void KN(store_f16)(uint16_t *p, KN(vf32) f)
{
  _mm_storeu_si128((__m128i *)p,
                   _mm256_cvtps_ph((__m256)f, _MM_FROUND_TO_NEAREST_INT |
                                                  _MM_FROUND_NO_EXC));
}
#elif KF16 == 2
KATTR static inline KN(vf32) KN(load_f16)(const uint16_t *p)
{
  return (KN(vf32))_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
KATTR static inline void KN(store_f16)(uint16_t *p, KN(vf32) f)
{
  _mm256_storeu_si256((__m256i *)p,
                      _mm512_cvtps_ph((__m512)f, _MM_FROUND_TO_NEAREST_INT |
                                                     _MM_FROUND_NO_EXC));
}
#else
KATTR static inline KN(vf32) KN(load_f16)(const uint16_t *p)
{
  KN(vf32) f;
  for (size_t j = 0; j < sizeof f / sizeof f[0]; j++)
    f[j] = shmap_f16_to_f32(p[j]);
  return f;
}
KATTR static inline void KN(store_f16)(uint16_t *p, KN(vf32) f)
{
  for (size_t j = 0; j < sizeof f / sizeof f[0]; j++)
    p[j] = shmap_f32_to_f16(f[j]);
}
#endif

#define HALF_KERNEL(NAME, FMT, VOP, SOP, MEAN)                                 \
  KATTR static void KN(NAME)(void *dst, const void *const src[], int ns,       \
                             size_t n, int count)                             \
  {                                                                            \
    uint16_t *d = dst;                                                         \
    const size_t w = sizeof(KN(vf32)) / sizeof(float);                        \
    size_t i = 0;                                                              \
    (void)count;                                                               \
    for (; i + 2 * w <= n; i += 2 * w) {                                       \
      const uint16_t *s0 = (const uint16_t *)src[0] + i;                       \
      KN(vf32) a0 = KN(load_##FMT)(s0), a1 = KN(load_##FMT)(s0 + w);           \
      for (int r = 1; r < ns; r++) {                                           \
        const uint16_t *s = (const uint16_t *)src[r] + i;                      \
        a0 = VOP(a0, KN(load_##FMT)(s));                                       \
        a1 = VOP(a1, KN(load_##FMT)(s + w));                                   \
      }                                                                        \
      if (MEAN && count) {                                                     \
        a0 = a0 / (float)count;                                                \
        a1 = a1 / (float)count;                                                \
      }                                                                        \
      KN(store_##FMT)(d + i, a0);                                              \
      KN(store_##FMT)(d + i + w, a1);                                          \
    }                                                                          \
    for (; i < n; i++) {                                                       \
      float a = shmap_##FMT##_to_f32(((const uint16_t *)src[0])[i]);           \
      for (int r = 1; r < ns; r++)                                             \
        a = SOP(a, shmap_##FMT##_to_f32(((const uint16_t *)src[r])[i]));       \
      if (MEAN && count)                                                       \
        a = a / (float)count;                                                  \
      d[i] = shmap_f32_to_##FMT(a);                                            \
    }                                                                          \
  }

/*
 * bf16 is the upper half of an f32, so a vector of 32-bit words holds two
 * bf16 elements per word that need no conversion: the word shifted left
 * by 16 is the even element as an f32, the word with its low half cleared
 * the odd one.  Folding evens and odds as two f32 vectors keeps every
 * element in its own lane (the same bits as any other order of lanes),
 * and the rounded halves are put back together at the end.
 */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define BF_EVEN(x) ((x) & 0xffff0000u)
#define BF_ODD(x) ((x) << 16)
#define BF_JOIN(e, o) (((e) << 16) | (o))
#else
#define BF_EVEN(x) ((x) << 16)
#define BF_ODD(x) ((x) & 0xffff0000u)
#define BF_JOIN(e, o) ((e) | ((o) << 16))
#endif

/* The bf16 bits (in the low half of each word) nearest to each f32. */
KATTR static inline KN(vu32) KN(round_bf16)(KN(vf32) f)
{
  KN(vu32) u = (KN(vu32))f;
  KN(vu32) nan = (KN(vu32))((u & 0x7fffffffu) > 0x7f800000u);
  KN(vu32) r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return SEL(KN(vu32), nan, (u >> 16) | 0x40u, r);
}

#define BF16_KERNEL(NAME, VOP, SOP, MEAN)                                      \
  KATTR static void KN(NAME)(void *dst, const void *const src[], int ns,       \
                             size_t n, int count)                             \
  {                                                                            \
    uint16_t *d = dst;                                                         \
    const size_t w = 2 * sizeof(KN(vu32)) / sizeof(uint32_t);                  \
    size_t i = 0;                                                              \
    (void)count;                                                               \
    for (; i + w <= n; i += w) {                                               \
      KN(vu32) x;                                                              \
      memcpy(&x, (const uint16_t *)src[0] + i, sizeof x);                      \
      KN(vf32) ev = (KN(vf32))BF_EVEN(x), od = (KN(vf32))BF_ODD(x);            \
      for (int r = 1; r < ns; r++) {                                           \
        memcpy(&x, (const uint16_t *)src[r] + i, sizeof x);                    \
        ev = VOP(ev, (KN(vf32))BF_EVEN(x));                                    \
        od = VOP(od, (KN(vf32))BF_ODD(x));                                     \
      }                                                                        \
      if (MEAN && count) {                                                     \
        ev = ev / (float)count;                                                \
        od = od / (float)count;                                                \
      }                                                                        \
      x = BF_JOIN(KN(round_bf16)(ev), KN(round_bf16)(od));                     \
      memcpy(d + i, &x, sizeof x);                                             \
    }                                                                          \
    for (; i < n; i++) {                                                       \
      float a = shmap_bf16_to_f32(((const uint16_t *)src[0])[i]);              \
      for (int r = 1; r < ns; r++)                                             \
        a = SOP(a, shmap_bf16_to_f32(((const uint16_t *)src[r])[i]));          \
      if (MEAN && count)                                                       \
        a = a / (float)count;                                                  \
      d[i] = shmap_f32_to_bf16(a);                                             \
    }                                                                          \
  }

BF16_KERNEL(sum_bf16, VOP_ADD, SOP_ADD, 1)
BF16_KERNEL(max_bf16, KN(vmax_f32), KN(smax_f32), 0)
BF16_KERNEL(min_bf16, KN(vmin_f32), KN(smin_f32), 0)
HALF_KERNEL(sum_f16, f16, VOP_ADD, SOP_ADD, 1)
HALF_KERNEL(max_f16, f16, KN(vmax_f32), KN(smax_f32), 0)
HALF_KERNEL(min_f16, f16, KN(vmin_f32), KN(smin_f32), 0)

/* ---- bool: any (pmax), all (pmin), and the count of true values (psum) ------ */

#define BOOL_KERNEL(NAME, VOP, SOP)                                            \
  KATTR static void KN(NAME)(void *dst, const void *const src[], int ns,       \
                             size_t n, int count)                             \
  {                                                                            \
    uint8_t *d = dst;                                                          \
    const size_t w = sizeof(KN(vu8));                                          \
    size_t i = 0;                                                              \
    (void)count;                                                               \
    for (; i + w <= n; i += w) {                                               \
      KN(vu8) a, b;                                                            \
      memcpy(&a, (const uint8_t *)src[0] + i, sizeof a);                       \
      a = (KN(vu8))(a != 0);                                                   \
      for (int r = 1; r < ns; r++) {                                           \
        memcpy(&b, (const uint8_t *)src[r] + i, sizeof b);                     \
        a = a VOP (KN(vu8))(b != 0);                                           \
      }                                                                        \
      a &= 1;                                                                  \
      memcpy(d + i, &a, sizeof a);                                             \
    }                                                                          \
    for (; i < n; i++) {                                                       \
      int a = ((const uint8_t *)src[0])[i] != 0;                               \
      for (int r = 1; r < ns; r++)                                             \
        a = a SOP (((const uint8_t *)src[r])[i] != 0);                         \
      d[i] = (uint8_t)a;                                                       \
    }                                                                          \
  }

BOOL_KERNEL(any_bool, |, |)
BOOL_KERNEL(all_bool, &, &)

/* psum of bool: dst is i32. */
KATTR static void KN(count_bool)(void *dst, const void *const src[], int ns,
                                 size_t n, int count)
{
  int32_t *d = dst;
  const size_t w = sizeof(KN(vi32)) / sizeof(int32_t);
  size_t i = 0;
  (void)count;
  for (; i + w <= n; i += w) {
    KN(vi32) a = {0};
    for (int r = 0; r < ns; r++) {
      const uint8_t *s = (const uint8_t *)src[r] + i;
      KN(vi32) b = {0};
      for (size_t j = 0; j < w; j++)
        b[j] = s[j] != 0;
      a += b;
    }
    memcpy(d + i, &a, sizeof a);
  }
  for (; i < n; i++) {
    int32_t a = 0;
    for (int r = 0; r < ns; r++)
      a += ((const uint8_t *)src[r])[i] != 0;
    d[i] = a;
  }
}

/* ---- the table ----------------------------------------------------------------- */

const shmap__fold_fn KTABLE[SHMAP_NDTYPES][SHMAP__NOPS] = {
    [SHMAP_F32] = {KN(sum_f32), KN(max_f32), KN(min_f32), KN(sum_f32)},
    [SHMAP_F64] = {KN(sum_f64), KN(max_f64), KN(min_f64), KN(sum_f64)},
    [SHMAP_I32] = {KN(sum_i32), KN(max_i32), KN(min_i32), NULL},
    [SHMAP_I64] = {KN(sum_i64), KN(max_i64), KN(min_i64), NULL},
    [SHMAP_BF16] = {KN(sum_bf16), KN(max_bf16), KN(min_bf16), KN(sum_bf16)},
    [SHMAP_F16] = {KN(sum_f16), KN(max_f16), KN(min_f16), KN(sum_f16)},
    [SHMAP_I8] = {KN(sum_i8), KN(max_i8), KN(min_i8), NULL},
    [SHMAP_U8] = {KN(sum_u8), KN(max_u8), KN(min_u8), NULL},
    [SHMAP_I16] = {KN(sum_i16), KN(max_i16), KN(min_i16), NULL},
    [SHMAP_U16] = {KN(sum_u16), KN(max_u16), KN(min_u16), NULL},
    [SHMAP_U32] = {KN(sum_u32), KN(max_u32), KN(min_u32), NULL},
    [SHMAP_U64] = {KN(sum_u64), KN(max_u64), KN(min_u64), NULL},
    [SHMAP_BOOL] = {KN(count_bool), KN(any_bool), KN(all_bool), NULL},
    [SHMAP_C64] = {KN(sum_c64), NULL, NULL, KN(sum_c64)},
    [SHMAP_C128] = {KN(sum_c128), NULL, NULL, KN(sum_c128)},
};

#undef KN
