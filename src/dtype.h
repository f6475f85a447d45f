/* SPDX-License-Identifier: MIT */
/*
 * dtype.h - the table of element types.  Everything that depends on a dtype
 * (its size, its name in messages and traces, how an element is printed,
 * which reductions it allows and their kernels) is read from this table,
 * so a new dtype is one row here plus its kernels in src/ops.c.
 */
#ifndef SHMAP_DTYPE_H
#define SHMAP_DTYPE_H

#include <shmap.h>
#include <stdbool.h>
#include <stddef.h>

/* Elementwise reductions, in the order of the table's kernel columns. */
enum shmap__redop {
  SHMAP__OP_SUM = 0,
  SHMAP__OP_MAX,
  SHMAP__OP_MIN,
  SHMAP__OP_MEAN,
  SHMAP__NOPS
};

/* Instruction sets the kernels are built for; the best one the CPU has is
 * chosen at run time (SHMAP_SIMD=generic|avx2|avx512 picks a lower one). */
enum shmap__isa {
  SHMAP__ISA_GENERIC = 0,
  SHMAP__ISA_AVX2,
  SHMAP__ISA_AVX512,
  SHMAP__NISA
};

/*
 * A fused P-way reduction: dst[i] = src[0][i] op src[1][i] op ... op
 * src[nsrc-1][i], a left fold in the order of src (rank order), for n
 * elements; pmean then divides by `count`.  dst may be one of the sources.
 * Every instruction set's kernel gives the same bits as the serial fold.
 */
typedef void (*shmap__fold_fn)(void *dst, const void *const src[], int nsrc,
                               size_t n, int count);

typedef struct shmap__dtype_info {
  const char *name;  /* "bf16": messages, traces, the gdb printers */
  size_t size;       /* bytes per element */
  int cls;           /* SHMAP_CLASS_* */
  /* Print one element into buf ("1.5", "-3", "true", "1+2j"). */
  void (*format)(const void *elem, char *buf, size_t n);
  /* The result's dtype per reduction (psum of bool is i32, as in JAX). */
  shmap_dtype result[SHMAP__NOPS];
  /* Why a reduction is not allowed on this dtype (NULL: it is), in words
   * that say what to do instead. */
  const char *not_allowed[SHMAP__NOPS];
  /* The kernels per instruction set and reduction (NULL where not
   * allowed). */
  const shmap__fold_fn *kernels[SHMAP__NISA];
  /* A sum accumulates wider than the element across all the terms and
   * rounds once at the end (bf16, f16): a partial sum is then not a term,
   * and a fold may not go in two levels (transport/shm.c). */
  bool rounds_once;
} shmap__dtype_info;

/* The table, indexed by dtype (read by gdb/shmap-gdb.py too). */
extern const shmap__dtype_info shmap__dtypes[SHMAP_NDTYPES];
/* The row of a dtype, or NULL when it is not a valid one. */
const shmap__dtype_info *shmap__dtype(shmap_dtype dtype);
/* Print element `elem` of the dtype (valid or not) into buf. */
void shmap__dtype_format(shmap_dtype dtype, const void *elem, char *buf,
                         size_t n);
/* The kernel the collectives use for (op, dtype): the instruction set of
 * shmap__isa().  NULL when the reduction is not allowed. */
shmap__fold_fn shmap__kernel(int op, shmap_dtype dtype);
/* The kernel of a given instruction set (for tests and benchmarks); NULL
 * when not allowed or not built for it. */
shmap__fold_fn shmap__kernel_isa(int isa, int op, shmap_dtype dtype);
/* The instruction set in use (AVX2 where the CPU has it, unless
 * SHMAP_SIMD names another it has), and whether this CPU can run one. */
int shmap__isa(void);
/* The choice shmap__isa() makes once, made again from SHMAP_SIMD now (for
 * the tests). */
int shmap__isa_choose(void);
int shmap__isa_supported(int isa);
const char *shmap__isa_name(int isa);

/* Kernel tables per instruction set (src/ops.c): [dtype][op]. */
extern const shmap__fold_fn shmap__kern_generic[SHMAP_NDTYPES][SHMAP__NOPS];
extern const shmap__fold_fn shmap__kern_avx2[SHMAP_NDTYPES][SHMAP__NOPS];
extern const shmap__fold_fn shmap__kern_avx512[SHMAP_NDTYPES][SHMAP__NOPS];
/* Whether those tables hold kernels (only x86-64 builds have the SIMD
 * ones; elsewhere they repeat the generic kernels). */
extern const int shmap__kern_built[SHMAP__NISA];

#endif /* SHMAP_DTYPE_H */
