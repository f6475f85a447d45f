/* SPDX-License-Identifier: MIT */
/* coll.h - what the collectives share with their kernels. */
#ifndef SHMAP_COLL_H
#define SHMAP_COLL_H

#include "transport/desc.h"
#include "dtype.h"

/* A kind's reduction (shmap__kind_redop) is a column of the table of
 * collectives (kinds.h). */
#include "kinds.h"

#endif /* SHMAP_COLL_H */
