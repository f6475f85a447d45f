/* SPDX-License-Identifier: MIT */
/*
 * test_desc_pack.c - call descriptors as the MPI transport sends them
 * (shmap__call_pack and shmap__call_unpack in transport/desc.c): random
 * descriptors of every kind come back exactly as shmap__call_copy copies
 * them, the largest one fits SHMAP__CALL_PACKED_MAX, and bytes that are
 * not one packed descriptor (every prefix of one, any byte changed, random
 * bytes) are refused or read within their length.
 *
 * SHMAPTEST_DESC_CASES random descriptors (default 10000) from seed
 * SHMAPTEST_DESC_SEED (printed at the start).
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "testutil.h"
#include "transport/desc.h"

#define TIMEOUT 60

static uint64_t rng_state;

static uint64_t rnd(void)
{
  /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A value of every magnitude: small ones most often, the extremes of
 * int and int64 too. */
static int64_t rnd_i64(void)
{
  switch (rnd() % 6) {
  case 0: return (int64_t)(rnd() % 8);
  case 1: return -(int64_t)(rnd() % 3) - 1;
  case 2: return (int64_t)(rnd() % 100000);
  case 3: return (int64_t)rnd();
  case 4: return rnd() & 1 ? INT64_MAX : INT64_MIN;
  default: return rnd() & 1 ? INT32_MAX : INT32_MIN;
  }
}

static int rnd_int(void)
{
  int64_t v = rnd_i64();
  return v < INT32_MIN || v > INT32_MAX ? (int)(int32_t)v : (int)v;
}

static uint64_t rnd_hash(void) { return rnd() % 3 == 0 ? 0 : rnd(); }

/* A random descriptor filled in whole (the unused parts of its lists
 * too, which the packing must leave out), with data pointers. */
static void rnd_call(shmap__call *c)
{
  memset(c, 0xa5, sizeof *c);
  c->kind = (int)(rnd() % (SHMAP__NKINDS + 1));
  c->naxes = (int)(rnd() % (SHMAP_MAX_AXES + 1));
  for (int i = 0; i < SHMAP_MAX_AXES; i++)
    c->axes[i] = rnd_int();
  c->dtype = rnd_int();
  c->rank = (int)(rnd() % (SHMAP_MAX_RANK + 1));
  for (int i = 0; i < SHMAP_MAX_RANK; i++)
    c->shape[i] = rnd_i64();
  c->p1 = rnd_int();
  c->p2 = rnd_int();
  c->tiled = (int)(rnd() % 2);
  switch (rnd() % 3) {
  case 0: c->npairs = 0; break;
  case 1: c->npairs = (int)(rnd() % (SHMAP__PAIRS_LISTED + 1)); break;
  default: c->npairs = rnd_int(); break;
  }
  c->pairs_hash = rnd_hash();
  for (int i = 0; i < SHMAP__PAIRS_LISTED; i++) {
    c->pairs[i][0] = rnd_int();
    c->pairs[i][1] = rnd_int();
  }
  switch (rnd() % 4) {
  case 0: c->gsize = 0; c->ngroups = 0; break;
  case 1: c->gsize = -1; c->ngroups = (int)(rnd() % 9); break;
  case 2:
    c->gsize = 1 + (int)(rnd() % 8);
    c->ngroups = 1 + (int)(rnd() % 8);
    break;
  default: c->gsize = rnd_int(); c->ngroups = rnd_int(); break;
  }
  c->groups_hash = rnd_hash();
  for (int i = 0; i < SHMAP__GROUP_RANKS_LISTED; i++)
    c->groups[i] = rnd_int();
  c->source = rnd_int();
  c->op_hash = rnd_hash();
  c->src = &rng_state;
  c->dst = &rng_state;
  c->hand = rnd_int();
  size_t len = rnd() % (sizeof c->op_name + 1);
  for (size_t i = 0; i < sizeof c->op_name; i++)
    c->op_name[i] = i < len ? (char)(' ' + rnd() % 95) : '\0';
}

/* The descriptor a receiver must get: shmap__call_copy's copy, data
 * pointers NULL, on a zeroed struct (the parts a copy leaves alone). */
static void expected(shmap__call *e, const shmap__call *c)
{
  memset(e, 0, sizeof *e);
  shmap__call_copy(e, c);
  e->src = NULL;
  e->dst = NULL;
}

/* Every field a reader of a descriptor may look at: the compared ones,
 * the listed pairs and ranks as far as used, hand, and a preduce's name. */
static void assert_same(const shmap__call *got, const shmap__call *want,
                        uint64_t seed, int i)
{
  ck_assert_msg(shmap__call_equal(got, want), "case %d (seed %" PRIu64
                "): unpacked descriptor differs", i, seed);
  ck_assert_msg(memcmp(got->axes, want->axes,
                       (size_t)want->naxes * sizeof want->axes[0]) == 0 &&
                    memcmp(got->shape, want->shape,
                           (size_t)want->rank * sizeof want->shape[0]) == 0,
                "case %d (seed %" PRIu64 "): axes or shape differ", i, seed);
  for (int a = got->naxes; a < SHMAP_MAX_AXES; a++)
    ck_assert_int_eq(got->axes[a], 0);
  for (int d = got->rank; d < SHMAP_MAX_RANK; d++)
    ck_assert_int_eq(got->shape[d], 0);
  /* The lists from the pairs on: shmap__call_copy leaves what it does not
   * use as it was (zeros here), and so does unpacking. */
  ck_assert_msg(memcmp(got->pairs, want->pairs, sizeof got->pairs) == 0 &&
                    memcmp(got->groups, want->groups, sizeof got->groups) == 0,
                "case %d (seed %" PRIu64 "): lists differ", i, seed);
  ck_assert(got->p1 == want->p1 && got->p2 == want->p2 &&
            got->tiled == want->tiled && got->npairs == want->npairs &&
            got->pairs_hash == want->pairs_hash && got->gsize == want->gsize &&
            got->ngroups == want->ngroups &&
            got->groups_hash == want->groups_hash &&
            got->source == want->source && got->op_hash == want->op_hash &&
            got->kind == want->kind && got->dtype == want->dtype);
  ck_assert(got->src == NULL && got->dst == NULL);
  ck_assert_int_eq(got->hand, want->hand);
  ck_assert_msg(memcmp(got->op_name, want->op_name, sizeof got->op_name) == 0,
                "case %d (seed %" PRIu64 "): op_name differs", i, seed);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
  const char *s = getenv(name);
  return s && *s ? strtoull(s, NULL, 0) : dflt;
}

START_TEST(roundtrip_random)
{
  uint64_t seed = env_u64("SHMAPTEST_DESC_SEED", (uint64_t)time(NULL));
  int cases = (int)env_u64("SHMAPTEST_DESC_CASES", 10000);
  printf("test_desc_pack: %d cases from SHMAPTEST_DESC_SEED=%" PRIu64 "\n",
         cases, seed);
  rng_state = seed;
  unsigned char buf[SHMAP__CALL_PACKED_MAX + 16], bad[sizeof buf];
  for (int i = 0; i < cases; i++) {
    shmap__call c, want, got;
    rnd_call(&c);
    expected(&want, &c);
    memset(buf, 0xee, sizeof buf);
    size_t n = shmap__call_pack(&c, buf);
    ck_assert_uint_le(n, SHMAP__CALL_PACKED_MAX);
    ck_assert_uint_eq(buf[n], 0xee); /* nothing written past n */
    ck_assert_msg(shmap__call_unpack(&got, buf, n),
                  "case %d (seed %" PRIu64 "): its own packing refused", i,
                  seed);
    assert_same(&got, &want, seed, i);
    /* The copy packs to the same bytes. */
    unsigned char again[sizeof buf];
    ck_assert_uint_eq(shmap__call_pack(&got, again), n);
    ck_assert(memcmp(again, buf, n) == 0);
    /* Any proper prefix, or the bytes with one more, is not a
     * descriptor. */
    for (size_t m = 0; m < n; m++)
      ck_assert_msg(!shmap__call_unpack(&got, buf, m),
                    "case %d (seed %" PRIu64 "): prefix of %zu of %zu bytes "
                    "taken",
                    i, seed, m, n);
    buf[n] = 0;
    ck_assert(!shmap__call_unpack(&got, buf, n + 1));
    /* A changed byte: refused, or read within the n bytes (under the
     * sanitizers, any read past them is an error). */
    memcpy(bad, buf, n);
    bad[rnd() % n] ^= (unsigned char)(1 + rnd() % 255);
    unsigned char *heap = malloc(n);
    ck_assert_ptr_nonnull(heap);
    memcpy(heap, bad, n);
    if (shmap__call_unpack(&got, heap, n)) {
      ck_assert_int_ge(got.naxes, 0);
      ck_assert_int_le(got.naxes, SHMAP_MAX_AXES);
      ck_assert_int_ge(got.rank, 0);
      ck_assert_int_le(got.rank, SHMAP_MAX_RANK);
    }
    free(heap);
  }
}
END_TEST

/* The longest descriptor: every list in use, every integer at its
 * longest, every hash, a preduce's longest name. */
START_TEST(largest_fits)
{
  shmap__call c, want, got;
  memset(&c, 0, sizeof c);
  c.kind = SHMAP__PREDUCE;
  c.naxes = SHMAP_MAX_AXES;
  for (int i = 0; i < SHMAP_MAX_AXES; i++)
    c.axes[i] = INT32_MIN;
  c.dtype = c.p1 = c.p2 = c.tiled = c.source = c.hand = INT32_MIN;
  c.rank = SHMAP_MAX_RANK;
  for (int i = 0; i < SHMAP_MAX_RANK; i++)
    c.shape[i] = INT64_MIN;
  c.npairs = SHMAP__PAIRS_LISTED;
  for (int i = 0; i < SHMAP__PAIRS_LISTED; i++)
    c.pairs[i][0] = c.pairs[i][1] = INT32_MIN;
  c.gsize = -1;
  c.ngroups = INT32_MIN;
  for (int i = 0; i < SHMAP__GROUP_RANKS_LISTED; i++)
    c.groups[i] = INT32_MIN;
  c.pairs_hash = c.groups_hash = c.op_hash = UINT64_MAX;
  memset(c.op_name, 'x', sizeof c.op_name);
  unsigned char buf[SHMAP__CALL_PACKED_MAX];
  size_t n = shmap__call_pack(&c, buf);
  ck_assert_uint_le(n, SHMAP__CALL_PACKED_MAX);
  ck_assert(shmap__call_unpack(&got, buf, n));
  expected(&want, &c);
  assert_same(&got, &want, 0, 0);
}
END_TEST

/* A psum's descriptor is small: with 220 bytes of terms, the message of
 * the MPI transport (8 bytes, the descriptor, padding to 16) stays within
 * the 256 bytes Open MPI sends inline over shared memory. */
START_TEST(psum_is_small)
{
  shmap__call c;
  memset(&c, 0, sizeof c);
  c.kind = SHMAP__PSUM;
  c.naxes = 2;
  c.axes[1] = 1;
  c.dtype = SHMAP_F32;
  c.rank = 2;
  c.shape[0] = 1024;
  c.shape[1] = 4096;
  unsigned char buf[SHMAP__CALL_PACKED_MAX];
  ck_assert_uint_le(shmap__call_pack(&c, buf), 24);
}
END_TEST

/* Bytes that are not a descriptor at all. */
START_TEST(random_bytes)
{
  rng_state = 12345;
  shmap__call got;
  for (int i = 0; i < 20000; i++) {
    size_t n = rnd() % 64;
    unsigned char *b = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(b);
    for (size_t j = 0; j < n; j++)
      b[j] = (unsigned char)rnd();
    if (shmap__call_unpack(&got, b, n)) {
      ck_assert_int_ge(got.naxes, 0);
      ck_assert_int_le(got.rank, SHMAP_MAX_RANK);
    }
    free(b);
  }
  /* An integer of more than ten bytes, a count out of range. */
  unsigned char longint[16];
  memset(longint, 0x80, sizeof longint);
  longint[0] = 0;
  ck_assert(!shmap__call_unpack(&got, longint, sizeof longint));
  unsigned char axes[] = {0, 2, 2 * (SHMAP_MAX_AXES + 1)};
  ck_assert(!shmap__call_unpack(&got, axes, sizeof axes));
}
END_TEST

static Suite *desc_suite(void)
{
  Suite *s = suite_create("desc_pack");
  TCase *tc = tcase_create("pack");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, roundtrip_random);
  tcase_add_test(tc, largest_fits);
  tcase_add_test(tc, psum_is_small);
  tcase_add_test(tc, random_bytes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(desc_suite()); }
