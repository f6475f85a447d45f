/* SPDX-License-Identifier: MIT */
/*
 * arena.h - the blocks a device allocates during a map (arena.c).
 *
 * Every block a device gets during a map (its built inputs, its outputs,
 * results of collectives, shmap_block_alloc) is a chunk in the device's
 * arena, a list owned by its context; what the map does not keep is freed
 * when the map ends.  Large freed chunks go to a small per-device cache
 * for the next allocation of a similar size.
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
/* Free every chunk still in the arena (the end of a map). */
void shmap__arena_clear(struct shmap_ctx *ctx);
/* Free a device's cache (the runtime goes away). */
void shmap__arena_cache_free(struct shmap__dev *d);

#endif /* SHMAP_ARENA_H */
