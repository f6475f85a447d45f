/* SPDX-License-Identifier: MIT */
/*
 * hash.h - the library's one hash: FNV-1a, 64 bits, chained.  Callers mix
 * what must agree between devices (calls, specs, pairs, groups) into one
 * word and compare words before comparing the things themselves.  A value
 * only has to agree between devices and processes of one build.
 */
#ifndef SHMAP_HASH_H
#define SHMAP_HASH_H

#include <stddef.h>
#include <stdint.h>

#define SHMAP__FNV_BASIS 14695981039346656037ull
#define SHMAP__FNV_PRIME 1099511628211ull

/* The start of a chain. */
static inline uint64_t shmap__hash_init(void) { return SHMAP__FNV_BASIS; }

/* `v` mixed in as one word. */
static inline uint64_t shmap__hash_u64(uint64_t h, uint64_t v)
{
  return (h ^ v) * SHMAP__FNV_PRIME;
}

/* The `n` bytes at `p` mixed in one by one. */
static inline uint64_t shmap__hash_bytes(uint64_t h, const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * SHMAP__FNV_PRIME;
  return h;
}

/* The characters of `s` (none for NULL) mixed in one by one, without the
 * terminating NUL. */
static inline uint64_t shmap__hash_str(uint64_t h, const char *s)
{
  for (; s && *s; s++)
    h = (h ^ (unsigned char)*s) * SHMAP__FNV_PRIME;
  return h;
}

#endif
