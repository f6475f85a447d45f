/* SPDX-License-Identifier: MIT */
/*
 * algo.c - the collectives' algorithms, written against the transport
 * interface (transport/comm.h) alone: which piece of which member's buffer
 * goes where.  Each member computes both what it takes from its peers and,
 * for a two-sided transport, what each peer takes from it; every member
 * runs the same code on the same agreed descriptor, so the two agree.
 *
 * Reductions fold the members in rank order, so results are bitwise equal
 * to a serial left fold whatever the placement and the thread timing.
 */
#include "coll/plan.h"

#include <stdlib.h>
#include <string.h>

/* A contiguous box of `count` elements at element `off`. */
#define RUN(name, off_, count_)                                                \
  int64_t name##_shape[1] = {(int64_t)(count_)}, name##_str[1] = {1};          \
  shmap__box name = {(size_t)(off_) * c->esize, 1, name##_shape, name##_str}

/* Enter a call that may take the transport's one-operation path for a few
 * hundred bytes (shmap__comm_allreduce_small, when `small` and the
 * transport has it): true when it did, the call then over; else false,
 * after arrive.  *rc is the result either way. */
static bool small_or_arrive(shmap__coll *c, bool small, size_t count,
                            const shmap__fold *fold, size_t off, size_t n,
                            uint64_t bytes, int *rc)
{
  *rc = small ? shmap__comm_allreduce_small(c, count, fold, off, n, bytes) : 1;
  if (*rc <= 0)
    return true;
  *rc = shmap__comm_arrive(c);
  return false;
}

/* ---- psum, pmax, pmin, pmean --------------------------------------------- */

/* Fused reduce-scatter + all-gather: member r folds chunk r of every
 * member's buffer in rank order and the result goes back to all.  Chunks
 * are rounded to 64 bytes, so the last members' chunks may be short or
 * empty. */
int shmap__algo_allreduce(shmap__plan *p, shmap_block *x)
{
  shmap__coll *c = &p->c;
  /* A few hundred bytes: one round trip, each member folding them all. */
  size_t numel = shmap__valid_numel(x);
  int rc;
  if (small_or_arrive(c, true, numel, &p->fold, 0, numel,
                      shmap__valid_nbytes(x), &rc) ||
      rc)
    return rc;
  /* Or the transport's own route for the whole fold (between two
   * processes: transport/mpi.c). */
  if (shmap__comm_allreduce_whole(c, numel, &p->fold) != 1)
    return shmap__comm_depart(c, shmap__valid_nbytes(x));
  size_t es = c->esize;
  size_t align = 64 / es;
  size_t chunk = (numel + (size_t)c->n - 1) / (size_t)c->n;
  chunk = (chunk + align - 1) / align * align;
  /* Elements [lo, hi) of member r's chunk. */
#define CHUNK_LO(r) (chunk * (size_t)(r) < numel ? chunk * (size_t)(r) : numel)
#define CHUNK_HI(r) (CHUNK_LO(r) + chunk < numel ? CHUNK_LO(r) + chunk : numel)
  bool two = shmap__comm_two_sided(c);
  if (two)
    for (int r = 0; r < c->n; r++)
      if (r != c->rank && CHUNK_LO(r) < CHUNK_HI(r)) {
        RUN(piece, CHUNK_LO(r), CHUNK_HI(r) - CHUNK_LO(r));
        shmap__comm_send(c, r, &piece);
      }
  size_t lo = CHUNK_LO(c->rank), hi = CHUNK_HI(c->rank);
  if (lo < hi)
    shmap__comm_allreduce(c, lo, hi - lo, &p->fold);
  if (two) {
    /* The results come back in the result's elements, which may be wider
     * than the terms (a bool sum is i32): receive them as such. */
    c->esize = p->fold.out_esize;
    for (int r = 0; r < c->n; r++)
      if (r != c->rank && CHUNK_LO(r) < CHUNK_HI(r)) {
        RUN(piece, CHUNK_LO(r), CHUNK_HI(r) - CHUNK_LO(r));
        shmap__comm_recv(c, r, &piece);
      }
    c->esize = es;
  }
#undef CHUNK_LO
#undef CHUNK_HI
  return shmap__comm_depart(c, shmap__valid_nbytes(x));
}

int shmap__algo_allreduce_new(shmap__plan *p, shmap_block *res)
{
  /* allreduce reads src (the input) and writes every member's dst. */
  return shmap__algo_allreduce(p, res);
}

/* ---- psum_scatter --------------------------------------------------------- */

/* View the input as [outer, S, inner]: member r keeps rows [r*m, (r+1)*m)
 * of S, each run of m*inner elements folded over the members.  With one
 * run per member (outer 1) and a few hundred bytes, the call takes the
 * small reductions' single round trip, each member keeping its run of
 * the fold. */
int shmap__algo_reduce_scatter(shmap__plan *p, shmap_block *res)
{
  shmap__coll *c = &p->c;
  const shmap_block *x = p->x;
  int d = c->call.p1;
  int64_t m = shmap__sdiv(x->shape[d], c->n);
  int64_t outer = shmap__numel(d, x->shape);
  int64_t inner = shmap__numel(x->rank - d - 1, x->shape + d + 1);
  size_t run = (size_t)(m * inner);
  int rc;
  if (small_or_arrive(c, outer == 1, shmap__valid_numel(x), &p->fold,
                      (size_t)c->rank * run, run, shmap__valid_nbytes(x), &rc) ||
      rc)
    return rc;
  if (run > 0 && shmap__comm_two_sided(c))
    for (int64_t o = 0; o < outer; o++)
      for (int r = 0; r < c->n; r++)
        if (r != c->rank) {
          RUN(piece, ((size_t)o * (size_t)x->shape[d] + (size_t)(r * m)) *
                         (size_t)inner, run);
          shmap__comm_send(c, r, &piece);
        }
  if (run > 0)
    for (int64_t o = 0; o < outer; o++) {
      size_t off = ((size_t)o * (size_t)x->shape[d] + (size_t)(c->rank * m)) *
                   (size_t)inner;
      shmap__comm_reduce(c, off, run, &p->fold,
                         (char *)res->data + (size_t)o * run *
                                                 p->fold.out_esize);
    }
  return shmap__comm_depart(c, shmap__valid_nbytes(x));
}

/* ---- all_gather ----------------------------------------------------------- */

/* The "fold" of a small all_gather: the members' blocks one after the
 * other, in rank order.  `es` (the fold's count) is the element size. */
static void concat_fold(void *dst, const void *const src[], int nsrc, size_t n,
                        int es)
{
  size_t bytes = n * (size_t)es;
  for (int r = 0; r < nsrc; r++)
    shmap__copy((char *)dst + (size_t)r * bytes, src[r], bytes);
}

/* The block of the member at position k of the group (the whole axes
 * without axis_index_groups) lands at position k along the gathered axis.
 *
 * Gathered along axis 0, the result is the blocks one after the other;
 * when it is a few hundred bytes, the call takes the small reductions'
 * single round trip (shmap__comm_allreduce_small), each member publishing
 * its block and concatenating all of them instead of folding: a result
 * "element" is then the whole row of n blocks' elements, so that the
 * transport's size check and result copies cover it. */
int shmap__algo_all_gather(shmap__plan *p, shmap_block *res)
{
  shmap__coll *c = &p->c;
  const shmap_block *x = p->x;
  shmap__fold cat = {concat_fold, (int)c->esize, c->esize * (size_t)c->n,
                     false, false};
  size_t numel = shmap__valid_numel(x);
  int rc;
  if (small_or_arrive(c, c->call.p1 == 0 && !p->groups, numel, &cat, 0, numel,
                      shmap__valid_nbytes(x), &rc) ||
      rc)
    return rc;
  int a = c->call.p1, tiled = c->call.tiled, orank = p->orank, g = p->gn;
  size_t es = c->esize;
  int64_t ostr[SHMAP_MAX_RANK], dstr[SHMAP_MAX_RANK], xstr[SHMAP_MAX_RANK];
  shmap__strides(orank, p->oshape, ostr);
  shmap__strides(x->rank, x->shape, xstr);
  for (int i = 0, j = 0; i < orank; i++)
    if (tiled || i != a)
      dstr[j++] = ostr[i];
  int64_t step = tiled ? x->shape[a] * ostr[a] : ostr[a];
  shmap__box mine = {0, x->rank, x->shape, xstr};
  bool any = shmap__valid_numel(x) > 0;
  if (any && shmap__comm_two_sided(c))
    for (int k = 0; k < g; k++)
      if (k != p->grank)
        shmap__comm_send(c, shmap__plan_member(p, k), &mine);
  if (any)
    for (int k = 0; k < g; k++)
      shmap__comm_get(c, shmap__plan_member(p, k), &mine,
                      (char *)res->data + (size_t)(k * step) * es, dstr);
  return shmap__comm_depart(c, shmap__valid_nbytes(x));
}

/* ---- all_to_all ----------------------------------------------------------- */

/* The "fold" of a small all_to_all split and concatenated along axis 0:
 * every member's block is n chunks of m elements, and member r's result is
 * chunk r of every member's block, in rank order.  `mes` (the fold's
 * count) is m * 32 + the element size (at most 16).  A transport calls it
 * either with n == m and each source at chunk r of a member's block (the
 * result of the calling member), or with n the whole block and each
 * source at its start (a group leader's result for every member: then
 * chunk r of each block goes to result row r, each row m * nsrc elements,
 * so that member r's part is at element r * m of rows of nsrc elements,
 * as the transport takes it). */
static void chunks_fold(void *dst, const void *const src[], int nsrc,
                        size_t n, int mes)
{
  size_t m = (size_t)mes / 32, es = (size_t)mes % 32, bytes = m * es;
  size_t rows = m ? shmap__udiv(n, m) : 0;
  if (rows <= 1 || nsrc == 1) {
    concat_fold(dst, src, nsrc, n, (int)es);
    return;
  }
  for (size_t r = 0; r < rows; r++)
    for (int k = 0; k < nsrc; k++)
      shmap__copy((char *)dst + (r * (size_t)nsrc + (size_t)k) * bytes,
                  (const char *)src[k] + r * bytes, bytes);
}

/* The member at position r of the group takes chunk r (along split_axis)
 * of the block of the member at position k and puts it at position k along
 * concat_axis.
 *
 * Split and concatenated along axis 0, both the chunks and the result
 * are runs of elements: when every member's result for all members (n
 * blocks, what a group leader may hold) is a few hundred bytes the call
 * takes the small reductions' single round trip, as all_gather does, each
 * member keeping chunk r of every member's block (chunks_fold). */
int shmap__algo_all_to_all(shmap__plan *p, shmap_block *res)
{
  shmap__coll *c = &p->c;
  const shmap_block *x = p->x;
  size_t numel = shmap__valid_numel(x), m = shmap__udiv(numel, (size_t)c->n);
  shmap__fold cut = {chunks_fold, (int)(m * 32 + c->esize),
                     c->esize * (size_t)c->n, false, false};
  int rc;
  bool small = c->call.p1 == 0 && c->call.p2 == 0 && !p->groups;
  if (small_or_arrive(c, small, numel, &cut, (size_t)c->rank * m, m,
                      shmap__valid_nbytes(x), &rc) ||
      rc)
    return rc;
  int sa = c->call.p1, ca = c->call.p2, tiled = c->call.tiled;
  int rank = x->rank, n = p->gn;
  size_t es = c->esize;
  int64_t cshape[SHMAP_MAX_RANK], xstr[SHMAP_MAX_RANK], sstr[SHMAP_MAX_RANK];
  shmap__strides(rank, x->shape, xstr);
  int crank = 0;
  for (int i = 0; i < rank; i++) {
    if (!tiled && i == sa)
      continue;
    cshape[crank] = i == sa ? shmap__sdiv(x->shape[i], n) : x->shape[i];
    sstr[crank++] = xstr[i];
  }
  int64_t ostr[SHMAP_MAX_RANK], dstr[SHMAP_MAX_RANK];
  shmap__strides(rank, p->oshape, ostr);
  for (int i = 0, j = 0; i < rank; i++)
    if (tiled || i != ca)
      dstr[j++] = ostr[i];
  int64_t src_step = (tiled ? shmap__sdiv(x->shape[sa], n) : 1) * xstr[sa];
  int64_t dst_step = (tiled ? cshape[ca] : 1) * ostr[ca];
  bool any = shmap__numel(crank, cshape) > 0;
  if (any && shmap__comm_two_sided(c))
    for (int k = 0; k < n; k++)
      if (k != p->grank) {
        shmap__box piece = {(size_t)(k * src_step) * es, crank, cshape, sstr};
        shmap__comm_send(c, shmap__plan_member(p, k), &piece);
      }
  shmap__box from = {(size_t)(p->grank * src_step) * es, crank, cshape, sstr};
  if (any)
    for (int k = 0; k < n; k++)
      shmap__comm_get(c, shmap__plan_member(p, k), &from,
                      (char *)res->data + (size_t)(k * dst_step) * es, dstr);
  return shmap__comm_depart(c, shmap__valid_nbytes(x));
}

/* ---- ppermute ------------------------------------------------------------- */

/* The "fold" of a small ppermute: the term of the member this one
 * receives from, or zeros when it receives from none.  `fes` (the fold's
 * count) is (that member's rank + 1) * 32 + the element size (at most
 * 16); the transport calls it with this member's own result only (own). */
static void pick_fold(void *dst, const void *const src[], int nsrc, size_t n,
                      int fes)
{
  int from = fes / 32 - 1;
  size_t bytes = n * (size_t)(fes % 32);
  if (from >= 0 && from < nsrc)
    shmap__copy(dst, src[from], bytes);
  else
    shmap__zero(dst, bytes);
}

/* A ppermute of a few hundred bytes in a group of a few members takes the
 * small reductions' single round trip: every member publishes a copy of
 * its block with its call, and copies its source's from there, so no
 * member reads another's buffer (nothing to wait for after the call, in
 * place or not).  True when it did, the call then over, with *rc its
 * result; else false, nothing done. */
static bool ppermute_small(shmap__plan *p, size_t bytes, int *rc)
{
  shmap__coll *c = &p->c;
  size_t numel = c->esize ? shmap__udiv(bytes, c->esize) : 0;
  shmap__fold pick = {pick_fold, (p->from + 1) * 32 + (int)c->esize,
                      c->esize, false, true};
  *rc = shmap__comm_allreduce_small(c, numel, &pick, 0, numel, bytes);
  return *rc <= 0;
}

/* Out of place, the incoming block goes straight into the result: no
 * member writes a buffer another reads. */
int shmap__algo_ppermute_new(shmap__plan *p, shmap_block *res)
{
  shmap__coll *c = &p->c;
  size_t bytes = shmap__valid_nbytes(res);
  int rc;
  if (ppermute_small(p, bytes, &rc) || (rc = shmap__comm_arrive(c)))
    return rc;
  size_t numel = shmap__valid_numel(res);
  RUN(whole, 0, numel);
  if (bytes && p->to >= 0 && p->to != c->rank && shmap__comm_two_sided(c))
    shmap__comm_send(c, p->to, &whole);
  if (bytes && p->from >= 0)
    shmap__comm_get(c, p->from, &whole, res->data, whole_str);
  else if (bytes)
    memset(res->data, 0, bytes);
  return shmap__comm_depart(c, bytes);
}

/* In place, for a block in the device's arena: the incoming block is
 * written once, into a room of the block's chunk that no peer reads (its
 * spare, or its own room when the data is in the spare), and the block's
 * data then points there; the room it leaves may still be read by the
 * member this device sends to, which the next use of that room waits for
 * (shmap__arena_spare, shmap__arena_free).  One copy, and no wait for the
 * reader here.
 *
 * No copy at all when the transport hands buffers over: a block whose
 * data is in its spare (after the first call of a loop) offers that
 * room, and when every member of this member's cycle of the permutation
 * offers, each takes its source's room as its data and spare
 * (shmap__comm_handover, shmap__arena_adopt). */
static int ppermute_swap(shmap__plan *p, shmap_block *x, shmap__chunk *ch,
                         void *into)
{
  shmap__coll *c = &p->c;
  size_t bytes = shmap__valid_nbytes(x);
  if (shmap__arena_in_spare(ch) && p->from >= 0 && p->from != c->rank &&
      p->to >= 0 && p->to != c->rank)
    c->call.hand = p->from + 1;
  int rc = shmap__comm_arrive(c);
  if (rc)
    return rc;
  const void *room = shmap__comm_handover(c);
  if (room) {
    /* Taken whatever depart says: the room this block had is now its
     * destination's. */
    shmap__arena_adopt(ch, room);
    bool deferred;
    return shmap__comm_depart_deferred(c, bytes, &deferred);
  }
  size_t numel = shmap__valid_numel(x);
  RUN(whole, 0, numel);
  if (p->to >= 0 && p->to != c->rank && shmap__comm_two_sided(c))
    shmap__comm_send(c, p->to, &whole);
  if (p->from >= 0)
    shmap__comm_get(c, p->from, &whole, into, whole_str);
  else
    shmap__zero(into, bytes);
  bool deferred;
  rc = shmap__comm_depart_deferred(c, bytes, &deferred);
  if (rc)
    return rc;
  int reader = deferred && p->to >= 0 && p->to != c->rank
                   ? shmap__comm_member(c, p->to)
                   : -1;
  shmap__arena_swap(ch, into, reader, c->k);
  return 0;
}

/* Otherwise the incoming block waits in a scratch block of the device's
 * arena until every member has read its source; only then is the input
 * overwritten in place. */
int shmap__algo_ppermute(shmap__plan *p, shmap_block *x)
{
  shmap__coll *c = &p->c;
  shmap_ctx *ctx = c->ctx;
  size_t bytes = shmap__valid_nbytes(x);
  int small_rc;
  if (ppermute_small(p, bytes, &small_rc))
    return small_rc;
  shmap__chunk *ch = bytes ? shmap__arena_find(ctx, x) : NULL;
  bool oom = false;
  void *into = ch ? shmap__arena_spare(ctx, ch, bytes, &oom) : NULL;
  if (oom)
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM, "%s",
                           shmap__errbuf());
  if (into)
    return ppermute_swap(p, x, ch, into);
  shmap__chunk *tmp = NULL;
  if (p->from >= 0 && bytes &&
      !(tmp = shmap__arena_alloc(ctx, x->dtype, x->rank, x->shape,
                                 SHMAP__CHUNK_SCRATCH, false)))
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM, "%s",
                           shmap__errbuf());
  int rc = shmap__comm_arrive(c);
  if (rc) {
    if (tmp)
      shmap__arena_free(ctx, tmp);
    return rc;
  }
  size_t numel = shmap__valid_numel(x);
  RUN(whole, 0, numel);
  if (bytes && p->to >= 0 && p->to != c->rank && shmap__comm_two_sided(c))
    shmap__comm_send(c, p->to, &whole);
  if (tmp)
    shmap__comm_get(c, p->from, &whole, tmp->block.data, whole_str);
  rc = shmap__comm_depart(c, bytes);
  /* Every member has read what it needs: now overwrite in place. */
  if (tmp) {
    if (!rc)
      memcpy(x->data, tmp->block.data, bytes);
    shmap__arena_free(ctx, tmp);
  } else if (bytes && !rc) {
    memset(x->data, 0, bytes);
  }
  return rc;
}
