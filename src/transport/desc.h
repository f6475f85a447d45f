/* SPDX-License-Identifier: MIT */
/*
 * desc.h - collective call descriptors (desc.c): what a device announces
 * about one collective call, so that the members of its group can check
 * that they all make the same call, and the names and messages that
 * describe a call.
 */
#ifndef SHMAP_DESC_H
#define SHMAP_DESC_H

#include "internal.h"
#include "kinds.h"

/* The bytes of a shmap_preduce operation's name a descriptor carries for
 * messages (members compare the whole name's hash; a longer name is shown
 * as these bytes, "..." and the hash). */
#define SHMAP__OP_NAME_LISTED 40

/* axis_index_groups a descriptor lists itself (ranks, group by group), so
 * that a mismatch message can show them; larger layouts by hash only. */
#define SHMAP__GROUP_RANKS_LISTED 32

/* ppermute pairs a descriptor carries itself (sorted by destination), so
 * that a mismatch message can list the pairs that differ; calls with more
 * pairs are compared and described by their hash only. */
#define SHMAP__PAIRS_LISTED 16

/* One collective call of one device.  Every field but the data pointers
 * takes part in the agreement: members of a group whose descriptors
 * differ (shmap__call_equal) make mismatched calls. */
typedef struct shmap__call {
  int kind;
  int naxes;
  int axes[SHMAP_MAX_AXES];
  int dtype;
  int rank;
  int64_t shape[SHMAP_MAX_RANK];
  int p1, p2;          /* scatter_dimension / axis / split and concat axes */
  int tiled;
  int npairs;
  uint64_t pairs_hash;
  int pairs[SHMAP__PAIRS_LISTED][2]; /* the first npairs, when that many */
  /* axis_index_groups (coll/groups.c): groups of gsize ranks (0: the
   * whole group of the axes), their hash, and the ranks when few. */
  int gsize, ngroups;
  uint64_t groups_hash;
  int groups[SHMAP__GROUP_RANKS_LISTED];
  /* pbroadcast: the source; preduce: the hash of the operation's name
   * (p1 holds its width); the agreement on a nested map: the nested map's
   * manual axes (a mask) in source and, in op_hash, its input count (bits
   * 48-63), output count (bits 32-47) and a hash of its specs; p2 is 1 for
   * the agreement when the inner body returns. */
  int source;
  uint64_t op_hash;
  /* This device's data for the call: the buffer its peers read (src) and
   * the one they may write (dst); the same buffer for in-place calls.
   * Meaningful only in the device's own address space. */
  const void *src;
  void *dst;
  /* In-place ppermute on shm: this member's source rank + 1 when its
   * data buffer may pass to its destination and it can take its source's
   * (0: not).  Not part of the agreement; see shm_handover. */
  int hand;
  /* preduce: the start of the operation's name, for messages (the
   * agreement compares op_hash); copied into a history only for preduce. */
  char op_name[SHMAP__OP_NAME_LISTED];
} shmap__call;

/* *dst = *src, the listed pairs and group ranks only as far as they are
 * used (readers stop there): a transport's history takes a descriptor on
 * every call, and those lists are half of its bytes. */
void shmap__call_copy(shmap__call *dst, const shmap__call *src);
/* The most bytes shmap__call_pack writes: each int as up to 5 bytes,
 * each shape extent up to 10, each hash 8, the listed pairs and group
 * ranks, and a preduce's name with its length. */
#define SHMAP__CALL_PACKED_MAX                                                 \
  (1 + 5 * 15 + 5 * SHMAP_MAX_AXES + 10 * SHMAP_MAX_RANK + 8 * 3 +            \
   5 * 2 * SHMAP__PAIRS_LISTED + 5 * SHMAP__GROUP_RANKS_LISTED + 1 +           \
   SHMAP__OP_NAME_LISTED)
/* The descriptor as a transport sends it between processes: the fields
 * that are in use, as variable-length integers, in at most
 * SHMAP__CALL_PACKED_MAX bytes (a psum's takes about 20, against the
 * struct's 500 or so).  Returns the bytes written to buf.  The data
 * pointers are not sent. */
size_t shmap__call_pack(const shmap__call *c, unsigned char *buf);
/* The descriptor packed in the n bytes at buf into *c: every part a
 * reader looks at as shmap__call_copy would have copied the packed one,
 * and zeros elsewhere (the axes and extents past naxes and rank, the
 * unused parts of the lists, the data pointers).  false when those bytes
 * are not one descriptor packed whole. */
bool shmap__call_unpack(shmap__call *c, const unsigned char *buf, size_t n);
/* Whether two descriptors describe the same call (data pointers aside). */
bool shmap__call_equal(const shmap__call *a, const shmap__call *b);
/* "psum(f32[8] over 'j')" and the like, into buf. */
void shmap__call_format(const shmap_mesh *mesh, const shmap__call *c,
                        char *buf, size_t n);
/* The message of a mismatch found by device `me` at its call number k
 * (`mine`) against device `other`, which had entered `their_count` calls:
 * `theirs` is other's call number k when known, or NULL when other either
 * returned from its body first (their_count < k) or made call k with
 * another group (their_count >= k).  Every transport words mismatches with
 * this, so that they read the same whatever carried the descriptors. */
void shmap__call_mismatch(const shmap_mesh *mesh, int me,
                          const shmap__call *mine, int other,
                          const shmap__call *theirs, uint32_t k,
                          uint32_t their_count, char *why, size_t n);

/* A collective as one word: kind, number of axes and the axes (traces,
 * the watchdog and the gdb extension decode it). */
uint64_t shmap__pack_op(int kind, const int axes[], int naxes);

#endif /* SHMAP_DESC_H */
