/* SPDX-License-Identifier: MIT */
/*
 * refmodel.h - a serial reference model of SEMANTICS.md sections 3 and 5
 * for the core tests, plus a few small helpers those tests share.
 *
 * The model is written from the text of the semantics, independently of
 * src/layout.c: it never calls a shmap__ function.  It keeps its own mesh
 * and spec descriptions (mesh axis numbers per spec entry) and does every
 * index computation per element, the slow and obvious way.
 */
#ifndef SHMAP_TESTS_REFMODEL_H
#define SHMAP_TESTS_REFMODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define REF_MAX_AXES 8
#define REF_MAX_RANK 8

/* A mesh: axis sizes in declaration order (names are only for printing). */
typedef struct ref_mesh {
  int naxes;
  int sizes[REF_MAX_AXES];
  char names[REF_MAX_AXES][32];
} ref_mesh;

/* A spec: for each entry, the mesh axis numbers it names, in order.  A spec
 * shorter than an array's rank is padded with unsplit entries. */
typedef struct ref_spec {
  int ndims;
  int naxes[REF_MAX_RANK];
  int axes[REF_MAX_RANK][REF_MAX_AXES];
} ref_spec;

/* Where the first replication violation was found (see ref_assemble). */
typedef struct ref_rep_err {
  int dev_a;    /* the device whose copy is used (coordinate 0 elsewhere) */
  int dev_b;    /* the first device, in device order, whose block differs */
  int64_t elem; /* first differing element (row-major index in the block) */
} ref_rep_err;

int ref_ndev(const ref_mesh *m);
/* Row-major coordinates of `dev`, the last axis varying fastest. */
void ref_coords(const ref_mesh *m, int dev, int coords[]);
int ref_dev(const ref_mesh *m, const int coords[]);

int64_t ref_numel(int rank, const int64_t shape[]);
/* Number of blocks along entry d (product of its axes' sizes; 1 when the
 * entry is unsplit or past the end of the spec). */
int64_t ref_count(const ref_mesh *m, const ref_spec *s, int d);
/* Block index along entry d of the device at `coords` (row-major over the
 * entry's axes, first axis major). */
int64_t ref_index(const ref_mesh *m, const ref_spec *s, int d,
                  const int coords[]);

/* Block shape of a global shape; -1 when a dimension is not divisible or
 * the spec is longer than the rank, else 0. */
int ref_block_shape(const ref_mesh *m, const ref_spec *s, int rank,
                    const int64_t gshape[], int64_t bshape[]);
void ref_global_shape(const ref_mesh *m, const ref_spec *s, int rank,
                      const int64_t bshape[], int64_t gshape[]);

/* Section 3: the block of device `dev` of a global array (row-major,
 * elements of esize bytes) under spec `s`.  bdata receives numel(bshape)
 * elements.  Returns -1 on a divisibility or rank error, else 0. */
int ref_slice(const ref_mesh *m, const ref_spec *s, size_t esize, int rank,
              const int64_t gshape[], const void *gdata, int dev,
              int64_t bshape[], void *bdata);

/* Section 5: assemble the global output from every device's block
 * (blocks[dev], all of shape bshape).  Axes the spec does not name untile:
 * the copy at coordinate 0 of those axes is used.  When err is not NULL,
 * every device's block is compared bitwise with the copy that is used; the
 * first device (in device order) that differs is reported and 1 returned.
 * Returns 0 when the blocks agree (or err is NULL).  gdata receives
 * numel(gshape) elements in every case. */
int ref_assemble(const ref_mesh *m, const ref_spec *s, size_t esize, int rank,
                 const int64_t bshape[], const void *const blocks[],
                 int64_t gshape[], void *gdata, ref_rep_err *err);

/* The mask of mesh axes named anywhere in a spec. */
unsigned ref_spec_mask(const ref_spec *s);

/* ---- helpers for the tests ------------------------------------------- */

/* True when `hay` contains `needle`. */
static inline int t_has(const char *hay, const char *needle) {
  return hay != NULL && needle != NULL && strstr(hay, needle) != NULL;
}

/* True when `hay` contains the decimal number v as a whole token (not part
 * of a longer run of digits). */
static inline int t_has_int(const char *hay, long long v) {
  char num[32];
  size_t len;
  const char *p;
  if (hay == NULL)
    return 0;
  snprintf(num, sizeof num, "%lld", v);
  len = strlen(num);
  for (p = strstr(hay, num); p != NULL; p = strstr(p + 1, num)) {
    int before = p > hay && p[-1] >= '0' && p[-1] <= '9';
    int after = p[len] >= '0' && p[len] <= '9';
    if (!before && !after)
      return 1;
  }
  return 0;
}

/* Number of (non-overlapping) occurrences of needle in hay. */
static inline int t_count(const char *hay, const char *needle) {
  int n = 0;
  const char *p;
  size_t len = strlen(needle);
  if (hay == NULL || len == 0)
    return 0;
  for (p = strstr(hay, needle); p != NULL; p = strstr(p + len, needle))
    n++;
  return n;
}

/* True when `hay` names device `dev` ("device 5"). */
static inline int t_has_dev(const char *hay, int dev) {
  char buf[32];
  const char *p;
  size_t len;
  if (hay == NULL)
    return 0;
  snprintf(buf, sizeof buf, "device %d", dev);
  len = strlen(buf);
  for (p = strstr(hay, buf); p != NULL; p = strstr(p + 1, buf))
    if (!(p[len] >= '0' && p[len] <= '9'))
      return 1;
  return 0;
}

/* splitmix64: a small deterministic generator for the property tests. */
static inline uint64_t t_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static inline int t_rng_range(uint64_t *state, int lo, int hi) {
  return lo + (int)(t_rng_next(state) % (uint64_t)(hi - lo + 1));
}

#endif /* SHMAP_TESTS_REFMODEL_H */
