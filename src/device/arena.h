/* SPDX-License-Identifier: MIT */
/*
 * arena.h - the blocks a device allocates during a map (arena.c).
 *
 * Every block a device gets during a map (its built inputs, its outputs,
 * results of collectives, shmap_block_alloc) is a chunk in the device's
 * arena, a list owned by its context; what the map does not keep is freed
 * when the map ends.  Freed chunks of 4 KiB or more go to a small
 * per-device cache for the next allocation of a similar size.
 */
#ifndef SHMAP_ARENA_H
#define SHMAP_ARENA_H

#include "internal.h"

struct shmap_ctx;
struct shmap__dev;

enum shmap__chunk_kind { SHMAP__CHUNK_IN, SHMAP__CHUNK_OUT, SHMAP__CHUNK_SCRATCH };

typedef struct shmap__chunk {
  struct shmap__chunk *prev, *next;
  int kind;
  size_t cap;        /* bytes of data room */
  size_t off;        /* bytes of the allocation before the header (paged) */
  /* A second buffer for in-place ppermute (shmap__arena_spare): the
   * block's data is the chunk's own room or the spare's, and the other one
   * may still be read by device busy_dev until it finishes its collective
   * call busy_k (busy_dev -1: nobody reads it). */
  struct shmap__chunk *spare;
  int busy_dev;
  uint32_t busy_k;
  shmap_block block; /* data follows the header, 64-byte aligned */
} shmap__chunk;

/* A new block in the device's arena; NULL (message set) on failure. */
shmap__chunk *shmap__arena_alloc(struct shmap_ctx *ctx, shmap_dtype dtype,
                                 int rank, const int64_t shape[], int kind,
                                 bool zero);
void shmap__arena_free(struct shmap_ctx *ctx, shmap__chunk *c);
/* Take a chunk out of the arena without freeing it. */
void shmap__arena_unlink(struct shmap_ctx *ctx, shmap__chunk *c);
/* The arena chunk holding `block`, or NULL when it is not one of ours. */
shmap__chunk *shmap__arena_find(struct shmap_ctx *ctx, const shmap_block *block);
/* Whether the arena's new chunks are paged: their data starts a page and
 * their room is whole pages no other data shares (SHMAP_ASYNC_CHECK=1,
 * set by the map as it starts). */
void shmap__arena_set_paged(bool on);
/* Whether `block` is an arena block whose data fills whole pages of its
 * own (a paged chunk's room); *len is then the bytes of those pages. */
bool shmap__arena_own_pages(struct shmap_ctx *ctx, const shmap_block *block,
                            size_t *len);
/* Free every chunk still in the arena (the end of a map). */
void shmap__arena_clear(struct shmap_ctx *ctx);
/* In-place ppermute: room of at least `bytes` bytes, other than the
 * block's data, that no other device reads and that may become the
 * block's data (shmap__arena_swap): the chunk's own room or its spare
 * (allocated on first use), after the last reader of that room finished.
 * NULL when the block's data is not the chunk's (a user set it), and
 * NULL with *oom true (message set) when out of memory. */
void *shmap__arena_spare(struct shmap_ctx *ctx, shmap__chunk *c, size_t bytes,
                         bool *oom);
/* The block's data becomes `room` (from shmap__arena_spare); the room it
 * had may still be read by device `reader` (-1: nobody) until that device
 * finishes its call number k. */
void shmap__arena_swap(shmap__chunk *c, void *room, int reader, uint32_t k);
/* Whether the block's data is in its spare: a room allocated apart from
 * the block, which may pass to another device's block whole
 * (shmap__arena_adopt). */
bool shmap__arena_in_spare(const shmap__chunk *c);
/* In-place ppermute by handover: `room` is the data of another device's
 * block, in that block's spare; it becomes this block's data and spare.
 * The spare this block had passes to another device the same way, so it
 * is only forgotten here; the chunk's own room keeps its state. */
void shmap__arena_adopt(shmap__chunk *c, const void *room);
/* A chunk leaves the arena for good after the map (every device done):
 * the chunk that holds the block's data, the block described in it, and
 * the other room freed.  Returns c or its spare. */
shmap__chunk *shmap__arena_settle(struct shmap_ctx *ctx, shmap__chunk *c);
/* Free a device's cache (the runtime goes away). */
void shmap__arena_cache_free(struct shmap__dev *d);

#endif /* SHMAP_ARENA_H */
