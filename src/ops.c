/* SPDX-License-Identifier: MIT */
/* ops.c - the reduction kernels, built for several instruction sets from
 * the one template in kern.h; src/dtype.c picks the set the CPU runs best.
 *
 * Earlier kernels combined two operands per pass (dst op= src), so a
 * P-member fold made P-1 passes over the piece; these fold every member
 * in one pass with the partial results in registers, in rank order, which
 * keeps the serial left fold's bits. */
#include "internal.h"

#include "dtype.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SHMAP__SIMD 1
#else
#define SHMAP__SIMD 0
#endif

/* Generic: 16-byte vectors (SSE2, part of x86-64; other CPUs' compilers
 * lower them to what they have). */
#define KPFX gen_
#define VB 16
#define KATTR
#define KF16 0
#define KTABLE shmap__kern_generic
#include "kern.h"
#undef KPFX
#undef VB
#undef KATTR
#undef KF16
#undef KTABLE

#if SHMAP__SIMD
#define KPFX avx2_
#define VB 32
#define KATTR __attribute__((target("avx2,f16c")))
#define KF16 1
#define KTABLE shmap__kern_avx2
#include "kern.h"
#undef KPFX
#undef VB
#undef KATTR
#undef KF16
#undef KTABLE

#define KPFX avx512_
#define VB 64
#define KATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define KF16 2
#define KTABLE shmap__kern_avx512
#include "kern.h"

const int shmap__kern_built[SHMAP__NISA] = {1, 1, 1};
#else
/* No SIMD copies elsewhere: the tables repeat the generic kernels, and
 * shmap__kern_built keeps them from being chosen. */
#define SAME_AS_GENERIC(name)                                                  \
  const shmap__fold_fn name[SHMAP_NDTYPES][SHMAP__NOPS] = {0};
SAME_AS_GENERIC(shmap__kern_avx2)
SAME_AS_GENERIC(shmap__kern_avx512)
const int shmap__kern_built[SHMAP__NISA] = {1, 0, 0};
#endif
