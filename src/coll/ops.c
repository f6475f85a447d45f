/* SPDX-License-Identifier: MIT */
/* ops.c - elementwise reduction kernels, one per (operation, dtype).
 * Each combines exactly two operands per element, so a caller that folds
 * peers in rank order gets a serial left fold, bit for bit.  Integer sums
 * wrap around (computed in unsigned arithmetic, no undefined behaviour). */
#include "coll/coll.h"

/* These loops are the reductions' whole cost: vectorise them even at -O2,
 * where GCC's cheap cost model leaves loops of unknown length scalar.
 * Vectorising an elementwise loop does not change any element's result. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

#define DEF_SUM(NAME, T, EXPR)                                                 \
  static void NAME(void *restrict dst_, const void *restrict src_, size_t n)  \
  {                                                                            \
    T *restrict d = dst_;                                                      \
    const T *restrict s = src_;                                                \
    for (size_t i = 0; i < n; i++)                                             \
      d[i] = EXPR;                                                             \
  }

DEF_SUM(sum_f32, float, d[i] + s[i])
DEF_SUM(sum_f64, double, d[i] + s[i])
DEF_SUM(sum_i32, int32_t, (int32_t)((uint32_t)d[i] + (uint32_t)s[i]))
DEF_SUM(sum_i64, int64_t, (int64_t)((uint64_t)d[i] + (uint64_t)s[i]))
/* max and min propagate NaN: a NaN operand makes the result NaN. */
DEF_SUM(max_f32, float, (s[i] > d[i] || s[i] != s[i]) ? s[i] : d[i])
DEF_SUM(max_f64, double, (s[i] > d[i] || s[i] != s[i]) ? s[i] : d[i])
DEF_SUM(max_i32, int32_t, s[i] > d[i] ? s[i] : d[i])
DEF_SUM(max_i64, int64_t, s[i] > d[i] ? s[i] : d[i])
DEF_SUM(min_f32, float, (s[i] < d[i] || s[i] != s[i]) ? s[i] : d[i])
DEF_SUM(min_f64, double, (s[i] < d[i] || s[i] != s[i]) ? s[i] : d[i])
DEF_SUM(min_i32, int32_t, s[i] < d[i] ? s[i] : d[i])
DEF_SUM(min_i64, int64_t, s[i] < d[i] ? s[i] : d[i])

shmap__reduce_fn shmap__reducer(int kind, shmap_dtype dtype)
{
  static const shmap__reduce_fn table[3][4] = {
      {sum_f32, sum_f64, sum_i32, sum_i64},
      {max_f32, max_f64, max_i32, max_i64},
      {min_f32, min_f64, min_i32, min_i64},
  };
  int row = kind == SHMAP__PMAX ? 1 : kind == SHMAP__PMIN ? 2 : 0;
  return table[row][dtype];
}

void shmap__divide(void *dst, size_t n, shmap_dtype dtype, int divisor)
{
  if (dtype == SHMAP_F32) {
    float *d = dst, v = (float)divisor;
    for (size_t i = 0; i < n; i++)
      d[i] /= v;
  } else if (dtype == SHMAP_F64) {
    double *d = dst, v = (double)divisor;
    for (size_t i = 0; i < n; i++)
      d[i] /= v;
  }
}
