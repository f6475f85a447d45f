/* SPDX-License-Identifier: MIT */
/* arena.c - the blocks a device allocates during a map, and the few large
 * freed blocks each device keeps for its next allocations (arena.h). */
#include "device/arena.h"

#include "device/device.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_HDR ((sizeof(shmap__chunk) + 63) & ~(size_t)63)

/*
 * With SHMAP_ASYNC_CHECK=1 every chunk is paged: its data starts a page
 * and its room is whole pages, with the header alone at the end of the
 * page before, so that an asynchronous collective may take its result's
 * pages away from the body until the wait (coll/async.c) without taking
 * anything else.  The header still sits just before the room (room() and
 * shmap__arena_adopt count on it); `off` is how far the allocation starts
 * before the header, 0 for a chunk that is not paged.  The map sets the
 * switch as it starts (shmap__arena_set_paged), so a map's allocations
 * test one flag.
 */
static _Atomic bool paged_on;

void shmap__arena_set_paged(bool on)
{
  atomic_store_explicit(&paged_on, on, memory_order_relaxed);
}

static size_t round_page(size_t bytes)
{
  size_t pg = shmap__page_size();
  return (bytes + pg - 1) & ~(pg - 1);
}

/* A chunk of `bytes` bytes of room, paged or not; NULL when out of
 * memory. */
static shmap__chunk *chunk_new(size_t bytes, bool paged)
{
  if (!paged) {
    shmap__chunk *c = shmap__alloc(CHUNK_HDR + bytes, false);
    if (c) {
      c->cap = bytes;
      c->off = 0;
    }
    return c;
  }
  size_t pg = shmap__page_size(), cap = round_page(bytes);
  char *base = cap >= bytes && cap <= SIZE_MAX - pg
                   ? shmap__alloc_pages(pg + cap)
                   : NULL;
  if (!base)
    return NULL;
  shmap__chunk *c = (shmap__chunk *)(base + pg - CHUNK_HDR);
  c->cap = cap;
  c->off = pg - CHUNK_HDR;
  return c;
}

static void chunk_free(shmap__chunk *c)
{
  if (c)
    free((char *)c - c->off);
}

/*
 * Blocks of a page or more freed by a device (results of collectives freed
 * in a loop, blocks built for a map's inputs) are kept for its next
 * allocation of a similar size: a fresh allocation of megabytes is mostly
 * page faults, and so are smaller ones when hundreds of devices free
 * theirs at once (the C library gives the freed top of its heap back to
 * the kernel, and the next call faults it in again: an all_gather of 16
 * floats per device at P=256 took 7 ms a call with a busy process on
 * one core, and 1.7 ms keeping its 16 KiB results).  A few per device,
 * and only up to a bound.
 */
#define CACHE_MIN ((size_t)4 << 10)
#define CACHE_MAX ((size_t)64 << 20)

/* Smaller blocks cost no page faults, but a fresh one costs the C
 * library's aligned allocation and its free (about 1,000 instructions,
 * more than a small psum's whole transport): the result of a small
 * psum_scatter, all_gather or all_to_all freed in a loop took that on
 * every call.  Each device keeps the last small block it freed, apart
 * from the large ones so that it never displaces them. */
#define SMALL_MIN ((size_t)64)

/* A cached chunk for `bytes` bytes; a paged one when `paged` (its size
 * rules then count whole pages). */
static shmap__chunk *cache_take(shmap_ctx *ctx, size_t bytes, bool paged)
{
  if (paged)
    bytes = round_page(bytes);
  shmap__dev *d = &ctx->rt->devs[ctx->dev];
  if (bytes < CACHE_MIN) {
    shmap__chunk *c = d->arena.small;
    if (paged || !c || c->cap < bytes || c->cap / 2 > bytes)
      return NULL;
    d->arena.small = NULL;
    return c;
  }
  for (int i = 0; i < SHMAP__CACHE; i++) {
    shmap__chunk *c = d->arena.cache[i];
    if (c && c->cap >= bytes && c->cap / 2 <= bytes && (c->off || !paged)) {
      d->arena.cache[i] = NULL;
      return c;
    }
  }
  return NULL;
}

/* Keep a chunk in device d's cache, or free it.  A full cache gives up
 * the chunk put there longest ago: a loop over blocks of one size then
 * reuses its own after the first call, whatever sizes came before (keeping
 * the largest instead left a loop over smaller blocks a fresh allocation,
 * and its page faults, per call). */
static void caches_free(shmap__runtime *rt)
{
  if (rt->devs)
    for (int d = 0; d < rt->ndev; d++)
      shmap__arena_cache_free(&rt->devs[d]);
}
static const shmap__rt_hooks arena_hooks = {.destroy = caches_free};
static _Atomic bool hooked; /* arena_hooks registered (once per process) */

static void cache_put(shmap__dev *d, shmap__chunk *c)
{
  bool small = c->cap < CACHE_MIN && c->cap >= SMALL_MIN && !c->off;
  if (!small && (c->cap < CACHE_MIN || c->cap > CACHE_MAX)) {
    chunk_free(c);
    return;
  }
  /* The caches are freed with their runtime. */
  if (!atomic_load_explicit(&hooked, memory_order_acquire)) {
    shmap__runtime_hooks(&arena_hooks);
    atomic_store_explicit(&hooked, true, memory_order_release);
  }
  if (small) {
    chunk_free(d->arena.small);
    d->arena.small = c;
    return;
  }
  int k = 0;
  for (int i = 0; i < SHMAP__CACHE; i++) {
    if (!d->arena.cache[i]) {
      k = i;
      break;
    }
    if (d->arena.put_at[i] < d->arena.put_at[k])
      k = i;
  }
  chunk_free(d->arena.cache[k]);
  d->arena.cache[k] = c;
  d->arena.put_at[k] = ++d->arena.nput;
}

void shmap__blocks_release(shmap_mesh *mesh, void **mem)
{
  shmap__runtime *rt = mesh->rt;
  /* Give the blocks back to their devices when no map runs (a map may be
   * running on another thread, or this may be a body of this mesh). */
  if (rt->devs && shmap__runtime_trylock(rt)) {
    for (int d = 0; d < mesh->ndev; d++)
      if (mem[d]) /* NULL: the block of another process's device */
        cache_put(&rt->devs[d], mem[d]);
    shmap__runtime_unlock(rt);
    return;
  }
  for (int d = 0; d < mesh->ndev; d++)
    chunk_free(mem[d]);
}

/* A rehearsal's count of the device's blocks (device.h): `sign` 1 for a
 * new chunk, -1 for a freed one. */
static void mem_count(shmap_ctx *ctx, const shmap__chunk *c, int sign)
{
  struct shmap__memcount *m = &ctx->mem;
  int k = c->kind >= 0 && c->kind < 3 ? c->kind : SHMAP__CHUNK_SCRATCH;
  m->n[k] += sign;
  m->bytes[k] += sign > 0 ? c->cap : -(uint64_t)c->cap;
  m->live += sign > 0 ? c->cap : -(uint64_t)c->cap;
  if (m->live > m->peak) {
    m->peak = m->live;
    memcpy(m->npeak, m->n, sizeof m->n);
    memcpy(m->bpeak, m->bytes, sizeof m->bytes);
  }
}

shmap__chunk *shmap__arena_alloc(shmap_ctx *ctx, shmap_dtype dtype, int rank,
                                 const int64_t shape[], int kind, bool zero)
{
  size_t bytes = (size_t)shmap__numel(rank, shape) * shmap_dtype_size(dtype);
  bool paged = atomic_load_explicit(&paged_on, memory_order_relaxed);
  shmap__chunk *c = cache_take(ctx, bytes, paged);
  if (!c)
    c = chunk_new(bytes, paged);
  if (!c) {
    char s[SHMAP__SHAPE_MAX];
    shmap__shape_format(dtype, rank, shape, s, sizeof s);
    shmap__err(SHMAP_ENOMEM, "out of memory allocating a %s block (%zu bytes)",
               s, bytes);
    return NULL;
  }
  c->kind = kind;
  c->spare = NULL;
  c->busy_dev = -1;
  c->busy_k = 0;
  c->block.data = (char *)c + CHUNK_HDR;
  c->block.dtype = dtype;
  c->block.rank = rank;
  memset(c->block.shape, 0, sizeof c->block.shape);
  if (rank)
    memcpy(c->block.shape, shape, (size_t)rank * sizeof shape[0]);
  if (zero)
    memset(c->block.data, 0, bytes);
  c->prev = NULL;
  c->next = ctx->arena;
  if (ctx->arena)
    ctx->arena->prev = c;
  ctx->arena = c;
  if (ctx->mem.on)
    mem_count(ctx, c, 1);
  return c;
}

void shmap__arena_unlink(shmap_ctx *ctx, shmap__chunk *c)
{
  if (c->prev)
    c->prev->next = c->next;
  else
    ctx->arena = c->next;
  if (c->next)
    c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

static void *room(shmap__chunk *c) { return (char *)c + CHUNK_HDR; }

/* Wait until nobody reads the room the block's data is not in.  The
 * reader is another device in a collective call, so the wait is the
 * transport's (ctx->src_wait, which the map sets). */
static void settle_busy(shmap_ctx *ctx, shmap__chunk *c)
{
  if (c->busy_dev >= 0) {
    if (ctx->src_wait)
      ctx->src_wait(ctx, c->busy_dev, c->busy_k);
    c->busy_dev = -1;
  }
}

void shmap__arena_free(shmap_ctx *ctx, shmap__chunk *c)
{
  shmap__arena_unlink(ctx, c);
  if (ctx->mem.on)
    mem_count(ctx, c, -1);
  settle_busy(ctx, c);
  shmap__dev *d = &ctx->rt->devs[ctx->dev];
  if (c->spare) {
    cache_put(d, c->spare);
    c->spare = NULL;
  }
  cache_put(d, c);
}

void *shmap__arena_spare(shmap_ctx *ctx, shmap__chunk *c, size_t bytes,
                         bool *oom)
{
  void *data = c->block.data;
  *oom = false;
  if (bytes > c->cap ||
      (data != room(c) && !(c->spare && data == room(c->spare))))
    return NULL;
  if (!c->spare) {
    shmap__chunk *s = cache_take(ctx, c->cap, c->off != 0);
    if (!s)
      s = chunk_new(c->cap, c->off != 0);
    if (!s) {
      char sh[SHMAP__SHAPE_MAX];
      shmap__shape_format(c->block.dtype, c->block.rank, c->block.shape, sh,
                          sizeof sh);
      shmap__err(SHMAP_ENOMEM,
                 "out of memory allocating a second %s block (%zu bytes)", sh,
                 c->cap);
      *oom = true;
      return NULL;
    }
    s->prev = s->next = s->spare = NULL;
    s->kind = SHMAP__CHUNK_SCRATCH;
    s->busy_dev = -1;
    s->block = c->block;
    s->block.data = room(s);
    c->spare = s;
  }
  if (bytes > c->spare->cap)
    return NULL;
  settle_busy(ctx, c);
  return data == room(c) ? room(c->spare) : room(c);
}

void shmap__arena_swap(shmap__chunk *c, void *r, int reader, uint32_t k)
{
  c->block.data = r;
  c->busy_dev = reader;
  c->busy_k = k;
}

bool shmap__arena_in_spare(const shmap__chunk *c)
{
  return c->spare && c->block.data == room(c->spare);
}

void shmap__arena_adopt(shmap__chunk *c, const void *r)
{
  /* A room starts CHUNK_HDR bytes into its chunk (room()). */
  c->spare = (shmap__chunk *)((char *)(uintptr_t)r - CHUNK_HDR);
  c->block.data = (void *)(uintptr_t)r;
}

shmap__chunk *shmap__arena_settle(shmap_ctx *ctx, shmap__chunk *c)
{
  shmap__chunk *s = c->spare;
  if (!s)
    return c;
  settle_busy(ctx, c);
  shmap__dev *d = &ctx->rt->devs[ctx->dev];
  c->spare = NULL;
  if (c->block.data != room(s)) {
    cache_put(d, s);
    return c;
  }
  s->block = c->block;
  s->kind = c->kind;
  cache_put(d, c);
  return s;
}

shmap__chunk *shmap__arena_find(shmap_ctx *ctx, const shmap_block *block)
{
  for (shmap__chunk *c = ctx->arena; c; c = c->next)
    if (&c->block == block)
      return c;
  return NULL;
}

bool shmap__arena_own_pages(shmap_ctx *ctx, const shmap_block *block,
                            size_t *len)
{
  size_t nbytes = shmap_block_nbytes(block);
  shmap__chunk *c = nbytes ? shmap__arena_find(ctx, block) : NULL;
  if (!c || !c->off || block->data != room(c) ||
      (uintptr_t)block->data % shmap__page_size() || nbytes > c->cap)
    return false;
  *len = round_page(nbytes);
  return true;
}

void shmap__arena_clear(shmap_ctx *ctx)
{
  while (ctx->arena)
    shmap__arena_free(ctx, ctx->arena);
}

void shmap__arena_cache_free(shmap__dev *d)
{
  for (int i = 0; i < SHMAP__CACHE; i++) {
    chunk_free(d->arena.cache[i]);
    d->arena.cache[i] = NULL;
  }
  chunk_free(d->arena.small);
  d->arena.small = NULL;
}
