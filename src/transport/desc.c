/* SPDX-License-Identifier: MIT */
/* desc.c - collective call descriptors: comparing, naming, describing. */
#include "transport/desc.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

uint64_t shmap__pack_op(int kind, const int axes[], int naxes)
{
  uint64_t op = (uint64_t)kind | (uint64_t)naxes << 8;
  for (int k = 0; k < naxes; k++)
    op |= (uint64_t)axes[k] << (12 + 4 * k);
  return op;
}
/* Groups of different sizes (gsize -1): the ranks listed with -1 after
 * each group, or groups[0] -2 when they were too many to list. */
static void unequal_groups_text(const shmap__call *c, char *buf, size_t n)
{
  if (c->groups[0] == -2) {
    shmap__cat(buf, n, ", %d axis_index_groups of different sizes #%016llx",
               c->ngroups, (unsigned long long)c->groups_hash);
    return;
  }
  shmap__cat(buf, n, ", axis_index_groups [[");
  for (int i = 0, g = 0, k = 0; i < SHMAP__GROUP_RANKS_LISTED; i++) {
    if (c->groups[i] == -1) {
      if (++g == c->ngroups)
        break;
      shmap__cat(buf, n, "], [");
      k = 0;
      continue;
    }
    shmap__cat(buf, n, "%s%d", k++ ? ", " : "", c->groups[i]);
  }
  shmap__cat(buf, n, "]]");
}


void shmap__call_format(const shmap_mesh *mesh, const shmap__call *c,
                        char *buf, size_t n)
{
  char shape[200], axes[320];
  if (c->kind == SHMAP__NESTED) {
    /* The agreement's data says nothing: the nested call does. */
    char inner[320];
    shmap__mask_format(mesh, (unsigned)c->source, inner, sizeof inner);
    int nin = (int)(c->op_hash >> 48), nout = (int)(c->op_hash >> 32 & 0xffff);
    if (c->p2) {
      snprintf(buf, n, "shmap_map_nested(return from the body nested over %s)",
               inner);
      return;
    }
    snprintf(buf, n,
             "shmap_map_nested(over %s, %d input%s, %d output%s, specs "
             "#%08llx)",
             inner, nin, nin == 1 ? "" : "s", nout, nout == 1 ? "" : "s",
             (unsigned long long)(c->op_hash & 0xffffffffu));
    return;
  }
  shmap__axes_format(mesh, c->axes, c->naxes, axes, sizeof axes);
  shmap__shape_format((shmap_dtype)c->dtype, c->rank, c->shape, shape,
                      sizeof shape);
  snprintf(buf, n, "%s(", shmap__kind_name(c->kind));
  shmap__cat(buf, n, "%s over %s", shape, axes);
  const char *t = c->tiled ? "tiled" : "untiled";
  switch (c->kind) {
  case SHMAP__PSUM_SCATTER:
    shmap__cat(buf, n, ", scatter_dimension=%d, %s", c->p1, t);
    break;
  case SHMAP__ALL_GATHER:
    shmap__cat(buf, n, ", axis=%d, %s", c->p1, t);
    break;
  case SHMAP__ALL_TO_ALL:
    shmap__cat(buf, n, ", split_axis=%d, concat_axis=%d, %s", c->p1, c->p2, t);
    break;
  case SHMAP__PPERMUTE:
    if (c->npairs <= SHMAP__PAIRS_LISTED) {
      shmap__cat(buf, n, ", pairs [");
      for (int k = 0; k < c->npairs; k++)
        shmap__cat(buf, n, "%s(%d, %d)", k ? ", " : "", c->pairs[k][0],
                   c->pairs[k][1]);
      shmap__cat(buf, n, "]");
    } else {
      shmap__cat(buf, n, ", %d pairs #%016llx", c->npairs,
                 (unsigned long long)c->pairs_hash);
    }
    break;
  case SHMAP__PBROADCAST:
    shmap__cat(buf, n, ", source=%d", c->source);
    break;
  case SHMAP__RAGGED_ALL_TO_ALL:
    shmap__cat(buf, n, ", output rows %d", c->p1);
    break;
  case SHMAP__PREDUCE:
    /* A name too long to carry whole is told apart by its hash. */
    if (memchr(c->op_name, 0, sizeof c->op_name))
      shmap__cat(buf, n, ", op '%s' of width %d", c->op_name, c->p1);
    else
      shmap__cat(buf, n, ", op '%.*s...' #%08llx of width %d",
                 (int)sizeof c->op_name, c->op_name,
                 (unsigned long long)(c->op_hash & 0xffffffffu), c->p1);
    break;
  default:
    break;
  }
  if (c->gsize < 0)
    unequal_groups_text(c, buf, n);
  else if (c->gsize) {
    if (c->ngroups * c->gsize <= SHMAP__GROUP_RANKS_LISTED) {
      shmap__cat(buf, n, ", axis_index_groups [");
      for (int g = 0; g < c->ngroups; g++) {
        shmap__cat(buf, n, "%s[", g ? ", " : "");
        for (int k = 0; k < c->gsize; k++)
          shmap__cat(buf, n, "%s%d", k ? ", " : "", c->groups[g * c->gsize + k]);
        shmap__cat(buf, n, "]");
      }
      shmap__cat(buf, n, "]");
    } else {
      shmap__cat(buf, n, ", %d axis_index_groups of %d #%016llx", c->ngroups,
                 c->gsize, (unsigned long long)c->groups_hash);
    }
  }
  shmap__cat(buf, n, ")");
}

/* How many of the listed pairs and group ranks a descriptor uses: the
 * counts shmap__call_copy copies. */
static size_t pairs_used(const shmap__call *c)
{
  return c->npairs > 0 && c->npairs <= SHMAP__PAIRS_LISTED ? (size_t)c->npairs
                                                           : 0;
}

static size_t ranks_used(const shmap__call *c)
{
  return c->gsize < 0 ? SHMAP__GROUP_RANKS_LISTED
         : c->gsize > 0 && c->ngroups > 0 &&
                 (int64_t)c->ngroups * c->gsize <= SHMAP__GROUP_RANKS_LISTED
             ? (size_t)(c->ngroups * c->gsize)
             : 0;
}

void shmap__call_copy(shmap__call *dst, const shmap__call *src)
{
  size_t np = pairs_used(src), ng = ranks_used(src);
  const size_t p0 = offsetof(shmap__call, pairs),
               g0 = offsetof(shmap__call, gsize),
               r0 = offsetof(shmap__call, groups),
               s0 = offsetof(shmap__call, source),
               n0 = offsetof(shmap__call, op_name);
  memcpy(dst, src, p0);
  memcpy(dst->pairs, src->pairs, np * sizeof src->pairs[0]);
  memcpy((char *)dst + g0, (const char *)src + g0, r0 - g0);
  memcpy(dst->groups, src->groups, ng * sizeof src->groups[0]);
  memcpy((char *)dst + s0, (const char *)src + s0, n0 - s0);
  if (src->kind == SHMAP__PREDUCE)
    memcpy(dst->op_name, src->op_name, sizeof src->op_name);
  else
    dst->op_name[0] = '\0';
}

/* Packing: unsigned LEB128 integers, signed ones zigzagged first. */
static unsigned char *put_u(unsigned char *p, uint64_t v)
{
  while (v >= 0x80) {
    *p++ = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  *p++ = (unsigned char)v;
  return p;
}

static unsigned char *put_i(unsigned char *p, int64_t v)
{
  return put_u(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static unsigned char *put_h(unsigned char *p, uint64_t v)
{
  memcpy(p, &v, sizeof v);
  return p + sizeof v;
}

size_t shmap__call_pack(const shmap__call *c, unsigned char *buf)
{
  unsigned char *p = buf;
  /* Which of the three hashes follow. */
  *p++ = (unsigned char)((c->pairs_hash != 0) | (c->groups_hash != 0) << 1 |
                         (c->op_hash != 0) << 2);
  p = put_i(p, c->kind);
  p = put_i(p, c->naxes);
  for (int i = 0; i < c->naxes; i++)
    p = put_i(p, c->axes[i]);
  p = put_i(p, c->dtype);
  p = put_i(p, c->rank);
  for (int i = 0; i < c->rank; i++)
    p = put_i(p, c->shape[i]);
  p = put_i(p, c->p1);
  p = put_i(p, c->p2);
  p = put_i(p, c->tiled);
  p = put_i(p, c->npairs);
  for (size_t i = 0; i < pairs_used(c); i++) {
    p = put_i(p, c->pairs[i][0]);
    p = put_i(p, c->pairs[i][1]);
  }
  p = put_i(p, c->gsize);
  p = put_i(p, c->ngroups);
  for (size_t i = 0; i < ranks_used(c); i++)
    p = put_i(p, c->groups[i]);
  p = put_i(p, c->source);
  p = put_i(p, c->hand);
  if (c->pairs_hash)
    p = put_h(p, c->pairs_hash);
  if (c->groups_hash)
    p = put_h(p, c->groups_hash);
  if (c->op_hash)
    p = put_h(p, c->op_hash);
  if (c->kind == SHMAP__PREDUCE) {
    size_t len = strnlen(c->op_name, sizeof c->op_name);
    *p++ = (unsigned char)len;
    memcpy(p, c->op_name, len);
    p += len;
  }
  return (size_t)(p - buf);
}

/* Unpacking: each get_ advances *p within end, false when it would pass
 * it or the integer does not fit. */
typedef struct unpacker {
  const unsigned char *p, *end;
  bool bad;
} unpacker;

static uint64_t get_u(unpacker *u)
{
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (u->p == u->end)
      break;
    unsigned char b = *u->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return v;
  }
  u->bad = true;
  return 0;
}

static int64_t get_i64(unpacker *u)
{
  uint64_t z = get_u(u);
  return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

static int get_int(unpacker *u)
{
  int64_t v = get_i64(u);
  if (v < INT32_MIN || v > INT32_MAX)
    u->bad = true;
  return (int)v;
}

static uint64_t get_h(unpacker *u)
{
  uint64_t v = 0;
  if ((size_t)(u->end - u->p) < sizeof v) {
    u->bad = true;
    return 0;
  }
  memcpy(&v, u->p, sizeof v);
  u->p += sizeof v;
  return v;
}

bool shmap__call_unpack(shmap__call *c, const unsigned char *buf, size_t n)
{
  unpacker u = {buf, buf + n, n == 0};
  memset(c, 0, sizeof *c);
  if (u.bad)
    return false;
  unsigned hashes = *u.p++;
  c->kind = get_int(&u);
  c->naxes = get_int(&u);
  if (u.bad || c->naxes < 0 || c->naxes > SHMAP_MAX_AXES)
    return false;
  for (int i = 0; i < c->naxes; i++)
    c->axes[i] = get_int(&u);
  c->dtype = get_int(&u);
  c->rank = get_int(&u);
  if (u.bad || c->rank < 0 || c->rank > SHMAP_MAX_RANK)
    return false;
  for (int i = 0; i < c->rank; i++)
    c->shape[i] = get_i64(&u);
  c->p1 = get_int(&u);
  c->p2 = get_int(&u);
  c->tiled = get_int(&u);
  c->npairs = get_int(&u);
  for (size_t i = 0; i < pairs_used(c); i++) {
    c->pairs[i][0] = get_int(&u);
    c->pairs[i][1] = get_int(&u);
  }
  c->gsize = get_int(&u);
  c->ngroups = get_int(&u);
  if (u.bad)
    return false;
  for (size_t i = 0; i < ranks_used(c); i++)
    c->groups[i] = get_int(&u);
  c->source = get_int(&u);
  c->hand = get_int(&u);
  if (hashes & 1)
    c->pairs_hash = get_h(&u);
  if (hashes & 2)
    c->groups_hash = get_h(&u);
  if (hashes & 4)
    c->op_hash = get_h(&u);
  if (c->kind == SHMAP__PREDUCE) {
    size_t len = u.p < u.end ? *u.p++ : sizeof c->op_name + 1;
    if (len > sizeof c->op_name || (size_t)(u.end - u.p) < len)
      return false;
    memcpy(c->op_name, u.p, len);
    u.p += len;
  }
  return !u.bad && !(hashes & ~7u) && u.p == u.end;
}

bool shmap__call_equal(const shmap__call *a, const shmap__call *b)
{
  return a->kind == b->kind && a->naxes == b->naxes &&
         memcmp(a->axes, b->axes, (size_t)a->naxes * sizeof a->axes[0]) == 0 &&
         a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0 &&
         a->p1 == b->p1 && a->p2 == b->p2 && a->tiled == b->tiled &&
         a->npairs == b->npairs && a->pairs_hash == b->pairs_hash &&
         a->gsize == b->gsize && a->ngroups == b->ngroups &&
         a->groups_hash == b->groups_hash && a->source == b->source &&
         a->op_hash == b->op_hash;
}

/* "; only device 0 (i=0) has pairs (1, 0), (2, 1)": the pairs of a that
 * b lacks. */
static void pairs_only(char *buf, size_t n, const shmap__call *a,
                       const shmap__call *b, const char *aname)
{
  int shown = 0;
  for (int i = 0; i < a->npairs; i++) {
    bool found = false;
    for (int j = 0; j < b->npairs && !found; j++)
      found = a->pairs[i][0] == b->pairs[j][0] &&
              a->pairs[i][1] == b->pairs[j][1];
    if (found)
      continue;
    if (shown++ == 0)
      shmap__cat(buf, n, "; only %s has pairs ", aname);
    else
      shmap__cat(buf, n, ", ");
    shmap__cat(buf, n, "(%d, %d)", a->pairs[i][0], a->pairs[i][1]);
  }
}

void shmap__call_mismatch(const shmap_mesh *mesh, int me,
                          const shmap__call *mine, int other,
                          const shmap__call *theirs, uint32_t k,
                          uint32_t their_count, char *why, size_t n)
{
  char mn[96], on[96], cm[256], co[256];
  shmap__mesh_devname(mesh, me, mn, sizeof mn);
  shmap__mesh_devname(mesh, other, on, sizeof on);
  shmap__call_format(mesh, mine, cm, sizeof cm);
  if (!theirs && their_count < k)
    snprintf(why, n,
             "%s called %s as its collective call #%u, but %s returned from "
             "its body after %u collective call%s",
             mn, cm, k, on, their_count, their_count == 1 ? "" : "s");
  else if (!theirs)
    snprintf(why, n,
             "%s called %s as its collective call #%u, but %s had already "
             "completed its call #%u with a different group of devices",
             mn, cm, k, on, k);
  else {
    shmap__call_format(mesh, theirs, co, sizeof co);
    snprintf(why, n,
             "collective call #%u differs between devices: %s called %s but "
             "%s called %s",
             k, mn, cm, on, co);
    if (mine->kind == SHMAP__PPERMUTE && theirs->kind == SHMAP__PPERMUTE &&
        mine->pairs_hash != theirs->pairs_hash &&
        mine->npairs <= SHMAP__PAIRS_LISTED &&
        theirs->npairs <= SHMAP__PAIRS_LISTED) {
      pairs_only(why, n, mine, theirs, mn);
      pairs_only(why, n, theirs, mine, on);
    }
  }
}
