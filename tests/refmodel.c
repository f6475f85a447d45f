/* SPDX-License-Identifier: MIT */
/*
 * refmodel.c - serial reference model of splitting inputs (SEMANTICS.md §3)
 * and assembling outputs (§5).  Per-element index math only; independent of
 * the library's layout code.
 */
#include "refmodel.h"

#include <stdlib.h>
#include <string.h>

int ref_ndev(const ref_mesh *m) {
  int n = 1;
  for (int a = 0; a < m->naxes; a++)
    n *= m->sizes[a];
  return n;
}

void ref_coords(const ref_mesh *m, int dev, int coords[]) {
  /* The last axis varies fastest. */
  for (int a = m->naxes - 1; a >= 0; a--) {
    coords[a] = dev % m->sizes[a];
    dev /= m->sizes[a];
  }
}

int ref_dev(const ref_mesh *m, const int coords[]) {
  int dev = 0;
  for (int a = 0; a < m->naxes; a++)
    dev = dev * m->sizes[a] + coords[a];
  return dev;
}

int64_t ref_numel(int rank, const int64_t shape[]) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  return n;
}

int64_t ref_count(const ref_mesh *m, const ref_spec *s, int d) {
  int64_t n = 1;
  if (d >= s->ndims)
    return 1;
  for (int k = 0; k < s->naxes[d]; k++)
    n *= m->sizes[s->axes[d][k]];
  return n;
}

int64_t ref_index(const ref_mesh *m, const ref_spec *s, int d,
                  const int coords[]) {
  int64_t idx = 0;
  if (d >= s->ndims)
    return 0;
  for (int k = 0; k < s->naxes[d]; k++) {
    int a = s->axes[d][k];
    idx = idx * m->sizes[a] + coords[a];
  }
  return idx;
}

int ref_block_shape(const ref_mesh *m, const ref_spec *s, int rank,
                    const int64_t gshape[], int64_t bshape[]) {
  if (s->ndims > rank)
    return -1;
  for (int d = 0; d < rank; d++) {
    int64_t c = ref_count(m, s, d);
    if (gshape[d] % c != 0)
      return -1;
    bshape[d] = gshape[d] / c;
  }
  return 0;
}

void ref_global_shape(const ref_mesh *m, const ref_spec *s, int rank,
                      const int64_t bshape[], int64_t gshape[]) {
  for (int d = 0; d < rank; d++)
    gshape[d] = bshape[d] * ref_count(m, s, d);
}

unsigned ref_spec_mask(const ref_spec *s) {
  unsigned mask = 0;
  for (int d = 0; d < s->ndims; d++)
    for (int k = 0; k < s->naxes[d]; k++)
      mask |= 1u << s->axes[d][k];
  return mask;
}

/* Multi-index of the flat row-major index `flat` in `shape`. */
static void unflatten(int rank, const int64_t shape[], int64_t flat,
                      int64_t idx[]) {
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
}

static int64_t flatten(int rank, const int64_t shape[], const int64_t idx[]) {
  int64_t flat = 0;
  for (int d = 0; d < rank; d++)
    flat = flat * shape[d] + idx[d];
  return flat;
}

int ref_slice(const ref_mesh *m, const ref_spec *s, size_t esize, int rank,
              const int64_t gshape[], const void *gdata, int dev,
              int64_t bshape[], void *bdata) {
  int coords[REF_MAX_AXES];
  int64_t b[REF_MAX_RANK], g[REF_MAX_RANK];
  int64_t n;
  if (ref_block_shape(m, s, rank, gshape, bshape) != 0)
    return -1;
  ref_coords(m, dev, coords);
  n = ref_numel(rank, bshape);
  for (int64_t e = 0; e < n; e++) {
    unflatten(rank, bshape, e, b);
    /* Global index: block index along d times the block size, plus the
     * position inside the block. */
    for (int d = 0; d < rank; d++)
      g[d] = ref_index(m, s, d, coords) * bshape[d] + b[d];
    memcpy((char *)bdata + (size_t)e * esize,
           (const char *)gdata + (size_t)flatten(rank, gshape, g) * esize,
           esize);
  }
  return 0;
}

int ref_assemble(const ref_mesh *m, const ref_spec *s, size_t esize, int rank,
                 const int64_t bshape[], const void *const blocks[],
                 int64_t gshape[], void *gdata, ref_rep_err *err) {
  int ndev = ref_ndev(m);
  unsigned mask = ref_spec_mask(s);
  int64_t g[REF_MAX_RANK], b[REF_MAX_RANK];
  int64_t bn = ref_numel(rank, bshape), gn;
  int coords[REF_MAX_AXES];

  ref_global_shape(m, s, rank, bshape, gshape);
  gn = ref_numel(rank, gshape);

  /* Every global element comes from exactly one device: decode the block
   * index along each entry back into coordinates on the entry's axes
   * (last axis of the entry fastest); axes the spec does not name are at
   * coordinate 0. */
  for (int64_t e = 0; e < gn; e++) {
    unflatten(rank, gshape, e, g);
    for (int a = 0; a < m->naxes; a++)
      coords[a] = 0;
    for (int d = 0; d < rank; d++) {
      int64_t idx = g[d] / bshape[d];
      b[d] = g[d] % bshape[d];
      if (d < s->ndims)
        for (int k = s->naxes[d] - 1; k >= 0; k--) {
          int a = s->axes[d][k];
          coords[a] = (int)(idx % m->sizes[a]);
          idx /= m->sizes[a];
        }
    }
    memcpy((char *)gdata + (size_t)e * esize,
           (const char *)blocks[ref_dev(m, coords)] +
               (size_t)flatten(rank, bshape, b) * esize,
           esize);
  }

  if (err == NULL)
    return 0;
  /* Replication: every device must hold the same block as the device that
   * shares its coordinates on the named axes and is at 0 elsewhere. */
  for (int dev = 0; dev < ndev; dev++) {
    int rep;
    ref_coords(m, dev, coords);
    for (int a = 0; a < m->naxes; a++)
      if (!(mask & (1u << a)))
        coords[a] = 0;
    rep = ref_dev(m, coords);
    if (rep == dev)
      continue;
    for (int64_t e = 0; e < bn; e++)
      if (memcmp((const char *)blocks[dev] + (size_t)e * esize,
                 (const char *)blocks[rep] + (size_t)e * esize, esize) != 0) {
        err->dev_a = rep;
        err->dev_b = dev;
        err->elem = e;
        return 1;
      }
  }
  return 0;
}
