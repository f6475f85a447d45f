/* SPDX-License-Identifier: MIT */
/* coll.h - what the collectives share with their kernels. */
#ifndef SHMAP_COLL_H
#define SHMAP_COLL_H

#include "transport/desc.h"
#include "dtype.h"

/* The table's reduction (SHMAP__OP_*) for a collective kind (SHMAP__PSUM,
 * PMAX, PMIN, PMEAN, PSUM_SCATTER). */
int shmap__kind_redop(int kind);

#endif /* SHMAP_COLL_H */
