/* SPDX-License-Identifier: MIT */
/*
 * kinds.h - the collectives as one table.  Every list indexed by a
 * collective kind (the enum, the names that messages, traces, the watchdog
 * and the gdb extension show, the reduction a kind folds with) is made
 * from SHMAP__KIND_MAP, so that a new collective is one row here.  The
 * table sits in the base layer because the scheduler's trace and watchdog
 * record and name kinds before any transport or collective exists.
 */
#ifndef SHMAP_KINDS_H
#define SHMAP_KINDS_H

#include "dtype.h"
#include "internal.h"

/* X(enum suffix, name, reduction): the reduction is the dtype table's
 * column (SHMAP__OP_*) a kind folds with, or -1 for a kind that moves data
 * without folding it.  Kinds are numbered from 1 in the order of the rows
 * (0 is no collective), and packed op words (shmap__pack_op) carry them,
 * so rows are only ever appended. */
#define SHMAP__KIND_MAP(X)                                                   \
  X(PSUM, "psum", SHMAP__OP_SUM)                                             \
  X(PMAX, "pmax", SHMAP__OP_MAX)                                             \
  X(PMIN, "pmin", SHMAP__OP_MIN)                                             \
  X(PMEAN, "pmean", SHMAP__OP_MEAN)                                          \
  X(PSUM_SCATTER, "psum_scatter", SHMAP__OP_SUM)                             \
  X(ALL_GATHER, "all_gather", -1)                                            \
  X(ALL_TO_ALL, "all_to_all", -1)                                            \
  X(PPERMUTE, "ppermute", -1)                                                \
  X(PBROADCAST, "pbroadcast", -1)                                            \
  X(RAGGED_ALL_TO_ALL, "ragged_all_to_all", -1)                              \
  /* the operation is the caller's (its name travels in the descriptor) */   \
  X(PREDUCE, "preduce", -1)                                                  \
  /* Not a collective of the API: the agreement of the body instances of a  \
   * map on a nested map they start (map.c), an all_gather of one word     \
   * whose descriptor describes the nested call (see shmap__call). */       \
  X(NESTED, "shmap_map_nested", -1)

#define SHMAP__KIND_ENUM(id, name, redop) SHMAP__##id,
enum shmap__kind {
  SHMAP__KIND_NONE = 0,
  SHMAP__KIND_MAP(SHMAP__KIND_ENUM)
  SHMAP__NKINDS
};
#undef SHMAP__KIND_ENUM
#define SHMAP__KIND_LAST (SHMAP__NKINDS - 1)

/* The longest kind name with its NUL: the size of a union of one char
 * array per name. */
#define SHMAP__KIND_NAME_SIZE(id, name, redop) char id[sizeof name];
union shmap__kind_name_sizes { SHMAP__KIND_MAP(SHMAP__KIND_NAME_SIZE) };
#undef SHMAP__KIND_NAME_SIZE
#define SHMAP__KIND_NAME_MAX sizeof(union shmap__kind_name_sizes)
/* A call as messages name it: "ragged_all_to_all over ('i', 'j')". */
#define SHMAP__CALLNAME_MAX \
  (SHMAP__KIND_NAME_MAX + sizeof " over " - 1 + SHMAP__AXES_MAX)

/* The names by kind, "?" for kind 0.  An array rather than only a
 * function so that the gdb extension reads the names from the library. */
extern const char *const shmap__kind_names[SHMAP__NKINDS];

/* "psum", "all_gather", ... for a collective kind ("?" if unknown). */
const char *shmap__kind_name(int kind);
/* The dtype table's reduction (SHMAP__OP_*) a kind folds with, or -1. */
int shmap__kind_redop(int kind);

#endif /* SHMAP_KINDS_H */
