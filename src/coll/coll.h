/* SPDX-License-Identifier: MIT */
/* coll.h - elementwise kernels used by the collectives. */
#ifndef SHMAP_COLL_H
#define SHMAP_COLL_H

#include "coll/desc.h"

/* dst[i] = dst[i] OP src[i] for n elements. */
typedef void (*shmap__reduce_fn)(void *restrict dst, const void *restrict src,
                                 size_t n);
/* The kernel of a reduction kind (SHMAP__PSUM, PMAX, PMIN, PMEAN) for a
 * dtype; PMEAN sums. */
shmap__reduce_fn shmap__reducer(int kind, shmap_dtype dtype);
/* dst[i] /= divisor (float dtypes). */
void shmap__divide(void *dst, size_t n, shmap_dtype dtype, int divisor);

#endif /* SHMAP_COLL_H */
