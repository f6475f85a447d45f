/* SPDX-License-Identifier: MIT */
/* dtype.c - the dtype table, element formatting, 16-bit float conversions
 * and the choice of kernel instruction set. */
#include "internal.h"
#include "settings.h"

#include "dtype.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

/* ---- 16-bit floats ------------------------------------------------------- */

/*
 * These conversions are the library's definition of bf16 and f16 rounding;
 * the SIMD kernels give the same bits (F16C's vcvtps2ph and vcvtph2ps follow
 * the same rules: round to nearest even, subnormals kept, NaN quietened with
 * its payload's upper bits kept).
 */
static uint32_t f32_bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

SHMAP_EXTERN uint16_t shmap_f32_to_bf16(float value)
{
  uint32_t u = f32_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

SHMAP_EXTERN float shmap_bf16_to_f32(uint16_t bits)
{
  return bits_f32((uint32_t)bits << 16);
}

SHMAP_EXTERN uint16_t shmap_f32_to_f16(float value)
{
  uint32_t u = f32_bits(value);
  uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) /* 65520 and above round to infinity */
    return (uint16_t)(s | 0x7c00u);
  if (a >= 0x38800000u) /* normal: rebias, round the 13 dropped bits */
    return (uint16_t)(s | ((a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13));
  /* Subnormal or zero: the value in units of 2^-24, rounded to even. */
  int e = (int)(a >> 23);
  int shift = 126 - e;
  if (shift > 24)
    return (uint16_t)s;
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u)))
    q++;
  return (uint16_t)(s | q);
}

SHMAP_EXTERN float shmap_f16_to_f32(uint16_t bits)
{
  uint32_t s = (uint32_t)(bits & 0x8000u) << 16;
  uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
  if (e == 0x1f)
    return bits_f32(s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
  if (e)
    return bits_f32(s | ((e + 112u) << 23) | (m << 13));
  float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
  return bits_f32(s | f32_bits(v));
}

/* ---- element formatting -------------------------------------------------- */

#define FMT(NAME, T, SPEC, CAST)                                               \
  static void NAME(const void *p, char *buf, size_t n)                         \
  {                                                                            \
    T v;                                                                       \
    memcpy(&v, p, sizeof v);                                                   \
    snprintf(buf, n, SPEC, CAST v);                                            \
  }

FMT(fmt_f32, float, "%.9g", (double))
FMT(fmt_f64, double, "%.17g", (double))
FMT(fmt_i8, int8_t, "%d", (int))
FMT(fmt_u8, uint8_t, "%u", (unsigned))
FMT(fmt_i16, int16_t, "%d", (int))
FMT(fmt_u16, uint16_t, "%u", (unsigned))
FMT(fmt_i32, int32_t, "%ld", (long))
FMT(fmt_u32, uint32_t, "%lu", (unsigned long))
FMT(fmt_i64, int64_t, "%lld", (long long))
FMT(fmt_u64, uint64_t, "%llu", (unsigned long long))

/* 16-bit floats print as the shortest decimal that reads back as the same
 * f32 value, which is exact for them. */
static void fmt_bf16(const void *p, char *buf, size_t n)
{
  uint16_t h;
  memcpy(&h, p, sizeof h);
  snprintf(buf, n, "%.9g", (double)shmap_bf16_to_f32(h));
}

static void fmt_f16(const void *p, char *buf, size_t n)
{
  uint16_t h;
  memcpy(&h, p, sizeof h);
  snprintf(buf, n, "%.9g", (double)shmap_f16_to_f32(h));
}

static void fmt_bool(const void *p, char *buf, size_t n)
{
  unsigned char b;
  memcpy(&b, p, 1);
  if (b <= 1)
    snprintf(buf, n, "%s", b ? "true" : "false");
  else
    snprintf(buf, n, "true (byte %u)", (unsigned)b);
}

static void fmt_c64(const void *p, char *buf, size_t n)
{
  float v[2];
  memcpy(v, p, sizeof v);
  snprintf(buf, n, "%.9g%+.9gj", (double)v[0], (double)v[1]);
}

static void fmt_c128(const void *p, char *buf, size_t n)
{
  double v[2];
  memcpy(v, p, sizeof v);
  snprintf(buf, n, "%.17g%+.17gj", v[0], v[1]);
}

/* ---- the table -------------------------------------------------------------- */

#define NO_MEAN_INT                                                            \
  "pmean needs a float or complex dtype: psum, then divide by "               \
  "shmap_axis_size() with the integer rounding you want, or convert the "      \
  "block to f32 or f64 first"
#define NO_ORDER_COMPLEX                                                       \
  "complex numbers have no order: reduce their real parts or absolute "        \
  "values (a float block) instead"

#define KERNELS(D)                                                             \
  {shmap__kern_generic[D], shmap__kern_avx2[D], shmap__kern_avx512[D]}
#define SAME4(D) {D, D, D, D}

/* Not static: the gdb extension reads the names, sizes and classes from
 * here, so it knows every dtype this library knows. */
const shmap__dtype_info shmap__dtypes[SHMAP_NDTYPES] = {
    [SHMAP_F32] = {"f32", 4, SHMAP_CLASS_FLOAT, fmt_f32, SAME4(SHMAP_F32),
                   {0}, KERNELS(SHMAP_F32)},
    [SHMAP_F64] = {"f64", 8, SHMAP_CLASS_FLOAT, fmt_f64, SAME4(SHMAP_F64),
                   {0}, KERNELS(SHMAP_F64)},
    [SHMAP_I32] = {"i32", 4, SHMAP_CLASS_SIGNED, fmt_i32, SAME4(SHMAP_I32),
                   {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_I32)},
    [SHMAP_I64] = {"i64", 8, SHMAP_CLASS_SIGNED, fmt_i64, SAME4(SHMAP_I64),
                   {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_I64)},
    [SHMAP_BF16] = {"bf16", 2, SHMAP_CLASS_FLOAT, fmt_bf16, SAME4(SHMAP_BF16),
                    {0}, KERNELS(SHMAP_BF16), true},
    [SHMAP_F16] = {"f16", 2, SHMAP_CLASS_FLOAT, fmt_f16, SAME4(SHMAP_F16),
                   {0}, KERNELS(SHMAP_F16), true},
    [SHMAP_I8] = {"i8", 1, SHMAP_CLASS_SIGNED, fmt_i8, SAME4(SHMAP_I8),
                  {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_I8)},
    [SHMAP_U8] = {"u8", 1, SHMAP_CLASS_UNSIGNED, fmt_u8, SAME4(SHMAP_U8),
                  {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_U8)},
    [SHMAP_I16] = {"i16", 2, SHMAP_CLASS_SIGNED, fmt_i16, SAME4(SHMAP_I16),
                   {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_I16)},
    [SHMAP_U16] = {"u16", 2, SHMAP_CLASS_UNSIGNED, fmt_u16, SAME4(SHMAP_U16),
                   {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_U16)},
    [SHMAP_U32] = {"u32", 4, SHMAP_CLASS_UNSIGNED, fmt_u32, SAME4(SHMAP_U32),
                   {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_U32)},
    [SHMAP_U64] = {"u64", 8, SHMAP_CLASS_UNSIGNED, fmt_u64, SAME4(SHMAP_U64),
                   {[SHMAP__OP_MEAN] = NO_MEAN_INT}, KERNELS(SHMAP_U64)},
    [SHMAP_BOOL] = {"bool", 1, SHMAP_CLASS_BOOL, fmt_bool,
                    {SHMAP_I32, SHMAP_BOOL, SHMAP_BOOL, SHMAP_BOOL},
                    {[SHMAP__OP_MEAN] = "pmean is not defined on bool: psum "
                                        "gives the count of true values as "
                                        "i32; convert that to f32 and divide "
                                        "by shmap_axis_size() for a fraction"},
                    KERNELS(SHMAP_BOOL)},
    [SHMAP_C64] = {"c64", 8, SHMAP_CLASS_COMPLEX, fmt_c64, SAME4(SHMAP_C64),
                   {[SHMAP__OP_MAX] = NO_ORDER_COMPLEX,
                    [SHMAP__OP_MIN] = NO_ORDER_COMPLEX},
                   KERNELS(SHMAP_C64)},
    [SHMAP_C128] = {"c128", 16, SHMAP_CLASS_COMPLEX, fmt_c128,
                    SAME4(SHMAP_C128),
                    {[SHMAP__OP_MAX] = NO_ORDER_COMPLEX,
                     [SHMAP__OP_MIN] = NO_ORDER_COMPLEX},
                    KERNELS(SHMAP_C128)},
};

const shmap__dtype_info *shmap__dtype(shmap_dtype dtype)
{
  unsigned d = (unsigned)dtype;
  return d < SHMAP_NDTYPES ? &shmap__dtypes[d] : NULL;
}

void shmap__dtype_format(shmap_dtype dtype, const void *elem, char *buf,
                         size_t n)
{
  const shmap__dtype_info *t = shmap__dtype(dtype);
  if (t)
    t->format(elem, buf, n);
  else
    snprintf(buf, n, "?");
}

SHMAP_EXTERN size_t shmap_dtype_size(shmap_dtype dtype)
{
  const shmap__dtype_info *t = shmap__dtype(dtype);
  return t ? t->size : 0;
}

SHMAP_EXTERN const char *shmap_dtype_name(shmap_dtype dtype)
{
  const shmap__dtype_info *t = shmap__dtype(dtype);
  return t ? t->name : "invalid";
}

SHMAP_EXTERN int shmap_dtype_class(shmap_dtype dtype)
{
  const shmap__dtype_info *t = shmap__dtype(dtype);
  if (!t)
    return shmap__err(SHMAP_EDTYPE, "shmap_dtype_class: invalid dtype %d",
                      (int)dtype);
  return t->cls;
}

/* ---- instruction sets ------------------------------------------------------- */

static const char *const isa_names[SHMAP__NISA] = {"generic", "avx2",
                                                   "avx512"};

const char *shmap__isa_name(int isa)
{
  return isa >= 0 && isa < SHMAP__NISA ? isa_names[isa] : "?";
}

#if defined(__x86_64__) && defined(__GNUC__)
/* F16C (CPUID leaf 1, ECX bit 29), asked of the processor directly: not
 * every compiler's __builtin_cpu_supports knows the name (clang 14 does
 * not).  The AVX state it needs is covered by the "avx2" check beside it. */
static int cpu_has_f16c(void)
{
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  return (c & bit_F16C) != 0;
}
#endif

int shmap__isa_supported(int isa)
{
  if (isa == SHMAP__ISA_GENERIC)
    return 1;
  if (isa < 0 || isa >= SHMAP__NISA || !shmap__kern_built[isa])
    return 0;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (isa == SHMAP__ISA_AVX2)
    return __builtin_cpu_supports("avx2") && cpu_has_f16c();
  if (isa == SHMAP__ISA_AVX512)
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#endif
  return 0;
}

int shmap__isa_choose(void)
{
  int best = SHMAP__ISA_GENERIC;
  for (int i = SHMAP__NISA - 1; i > 0; i--)
    if (shmap__isa_supported(i)) {
      best = i;
      break;
    }
  /* The default stops at AVX2: on many Xeons 512-bit instructions lower
   * the core's clock for a while after the last one, for all the code it
   * runs, and on the 2-core VM of BENCHMARKS.md that made 256-byte calls
   * at P=2 5-10% slower, more than the wider folds gained on large ones.
   * SHMAP_SIMD may ask for any set the processor has (one it lacks would
   * fault, and is not used). */
  int isa = best == SHMAP__ISA_AVX512 && shmap__isa_supported(SHMAP__ISA_AVX2)
                ? SHMAP__ISA_AVX2
                : best;
  int asked = shmap__setting_simd(isa_names, SHMAP__NISA);
  if (asked >= 0 && shmap__isa_supported(asked))
    isa = asked;
  return isa;
}

/* -1 until chosen; every thread that races to choose chooses alike. */
static _Atomic int chosen_isa = -1;

int shmap__isa(void)
{
  int isa = atomic_load_explicit(&chosen_isa, memory_order_relaxed);
  if (isa >= 0)
    return isa;
  isa = shmap__isa_choose();
  atomic_store_explicit(&chosen_isa, isa, memory_order_relaxed);
  return isa;
}

shmap__fold_fn shmap__kernel_isa(int isa, int op, shmap_dtype dtype)
{
  const shmap__dtype_info *t = shmap__dtype(dtype);
  if (!t || op < 0 || op >= SHMAP__NOPS || isa < 0 || isa >= SHMAP__NISA ||
      !shmap__kern_built[isa])
    return NULL;
  return t->kernels[isa][op];
}

shmap__fold_fn shmap__kernel(int op, shmap_dtype dtype)
{
  return shmap__kernel_isa(shmap__isa(), op, dtype);
}
