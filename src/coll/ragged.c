/* SPDX-License-Identifier: MIT */
/*
 * ragged.c - pbroadcast and ragged_all_to_all: collectives whose pieces
 * are chosen by the members (a source rank, per-peer rows) rather than by
 * the shapes alone.
 */
#include "coll/groups.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pbroadcast ------------------------------------------------------------- */

static int plan_pbroadcast(shmap_ctx *ctx, const shmap_block *x,
                           const char *axes, int source, shmap__plan *p)
{
  int rc = shmap__plan_prepare(ctx, SHMAP__PBROADCAST, x, axes, NULL, p);
  if (rc)
    return rc;
  if (source < 0 || source >= p->c.n)
    return shmap__dev_fail(ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                           "source %d is outside [0, %d) (the group size)",
                           source, p->c.n);
  p->c.call.source = source;
  p->orank = x->rank;
  memcpy(p->oshape, x->shape, sizeof p->oshape);
  return 0;
}

/* Every member but the source copies the source's block into `to`; only
 * the source's block is read, so `to` may be the member's own input. */
static int pbroadcast_into(shmap__plan *p, void *to)
{
  shmap__coll *c = &p->c;
  const shmap_block *x = p->x;
  size_t bytes = shmap_block_nbytes(x);
  int src = c->call.source;
  int rc = shmap__comm_arrive(c);
  if (rc)
    return rc;
  int64_t sh[1] = {shmap_block_numel(x)}, st[1] = {1};
  shmap__box whole = {0, 1, sh, st};
  if (bytes && c->rank == src && shmap__comm_two_sided(c))
    for (int r = 0; r < c->n; r++)
      if (r != src)
        shmap__comm_send(c, r, &whole);
  if (bytes && c->rank != src)
    shmap__comm_get(c, src, &whole, to, st);
  else if (bytes && to != x->data)
    memcpy(to, x->data, bytes);
  return shmap__comm_depart(c, bytes);
}

static int pbroadcast_new_algo(shmap__plan *p, shmap_block *res)
{
  return pbroadcast_into(p, res->data);
}

SHMAP_EXTERN int shmap_pbroadcast(shmap_ctx *ctx, shmap_block *x,
                                  const char *axes, int source)
{
  shmap__plan p;
  int rc = plan_pbroadcast(ctx, x, axes, source, &p);
  if (rc)
    return rc;
  p.c.call.dst = x->data;
  return pbroadcast_into(&p, x->data);
}

SHMAP_EXTERN int shmap_pbroadcast_new(shmap_ctx *ctx, const shmap_block *x,
                                      const char *axes, int source,
                                      shmap_block **out)
{
  if (out)
    *out = NULL;
  shmap__plan p;
  int rc = plan_pbroadcast(ctx, x, axes, source, &p);
  if (rc)
    return rc;
  if (!out)
    return shmap__plan_out_null(&p);
  return shmap__into_new_block(&p, pbroadcast_new_algo, out);
}

/* ---- ragged_all_to_all ------------------------------------------------------ */

/*
 * A receiver knows how many rows each peer sends it (recv_sizes) but not
 * where they start in the peer's operand nor where the peer wants them in
 * the receiver's output (JAX's output_offsets are the sender's).  So the
 * call is two rounds of the group: first every member publishes, per
 * slice, its (input offset, send size, output offset) and each takes the
 * triples meant for it; then the rows move.  Both rounds carry the same
 * descriptor, so a member that stops after the first (its received sizes
 * disagree with its recv_sizes) fails the map and releases the others from
 * the second.
 *
 * As in JAX, the four arrays have `count` entries, a multiple of the
 * group's size gn: with k = count / gn slices per peer, entry i goes to
 * the member of group rank i / k, and the k slices a member receives from
 * member s are its entries [s k, s k + k).  With axis_index_groups the
 * rounds still involve every member of the axes (the descriptor is agreed
 * by all), but rows move only within a group.
 */

enum { META_IN, META_SIZE, META_OUT, META_N };

typedef struct ragged_args {
  const shmap_block *operand;
  shmap_block *output;
  const int64_t *in_off, *send, *out_off, *recv;
  int64_t count; /* entries of each array */
  int k;         /* slices per peer: count / gn */
} ragged_args;

static int ragged_fail(shmap__plan *p, const char *fmt, ...)
    SHMAP__PRINTF(2, 3);
static int ragged_fail(shmap__plan *p, const char *fmt, ...)
{
  char msg[SHMAP__MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return shmap__dev_fail(p->c.ctx, shmap__coll_opname(&p->c), SHMAP_EINVAL,
                         "%s", msg);
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
  const char *x = a, *y = b;
  return an && bn && x < y + bn && y < x + an;
}

/* The blocks: dtypes, row shapes, overlap. */
static int ragged_check_blocks(shmap__plan *p, const ragged_args *a)
{
  shmap__coll *c = &p->c;
  const char *op = shmap__coll_opname(c);
  const shmap_block *operand = a->operand, *output = a->output;
  if (!shmap__block_valid(output))
    return shmap__block_check(c->ctx, op, "the output", output);
  char os[SHMAP__SHAPE_MAX], xs[SHMAP__SHAPE_MAX];
  shmap__shape_format(operand->dtype, operand->rank, operand->shape, xs,
                      sizeof xs);
  shmap__shape_format(output->dtype, output->rank, output->shape, os,
                      sizeof os);
  if (operand->rank < 1)
    return shmap__dev_fail(c->ctx, op, SHMAP_ESHAPE,
                           "the operand %s has no rows (rank 0)", xs);
  bool same = output->dtype == operand->dtype && output->rank == operand->rank;
  for (int d = 1; same && d < operand->rank; d++)
    same = output->shape[d] == operand->shape[d];
  if (!same)
    return shmap__dev_fail(c->ctx, op, SHMAP_ESHAPE,
                           "the output %s must have the operand's dtype and "
                           "row shape (the operand is %s)",
                           os, xs);
  if (overlaps(operand->data, shmap_block_nbytes(operand), output->data,
               shmap_block_nbytes(output)))
    return ragged_fail(p, "the output overlaps the operand");
  return 0;
}

/* Local checks: the arrays, and every offset and size against this
 * member's blocks.  An output offset is checked against the receiver's
 * output, once the first round has agreed that every output has as many
 * rows (ragged_check_out). */
static int ragged_check(shmap__plan *p, ragged_args *a)
{
  int rc = ragged_check_blocks(p, a);
  if (rc)
    return rc;
  if (!a->in_off || !a->send || !a->out_off || !a->recv)
    return ragged_fail(p, "%s is NULL",
                       !a->in_off  ? "input_offsets"
                       : !a->send  ? "send_sizes"
                       : !a->out_off ? "output_offsets"
                                     : "recv_sizes");
  if (a->count == 0)
    a->count = p->gn;
  if (a->count < 1 || a->count % p->gn || a->count / p->gn > INT32_MAX / 4)
    return ragged_fail(p,
                       "count %lld is not a positive multiple of the group's "
                       "%d members",
                       (long long)a->count, p->gn);
  a->k = (int)(a->count / p->gn);
  int64_t rows = a->operand->shape[0], orows = a->output->shape[0];
  for (int64_t j = 0; j < a->count; j++) {
    if (a->in_off[j] < 0 || a->send[j] < 0 ||
        a->in_off[j] > rows - a->send[j])
      return ragged_fail(p,
                         "input_offsets[%lld] = %lld with send_sizes[%lld] = "
                         "%lld is outside the operand's %lld rows",
                         (long long)j, (long long)a->in_off[j], (long long)j,
                         (long long)a->send[j], (long long)rows);
    if (a->out_off[j] < 0)
      return ragged_fail(p, "output_offsets[%lld] = %lld is negative",
                         (long long)j, (long long)a->out_off[j]);
    if (a->recv[j] < 0 || a->recv[j] > orows)
      return ragged_fail(p,
                         "recv_sizes[%lld] = %lld is outside [0, %lld] (the "
                         "output's rows)",
                         (long long)j, (long long)a->recv[j],
                         (long long)orows);
  }
  return 0;
}

/* After the first round, which agreed that every member's output has this
 * member's number of rows: this member's slices fit in their receivers'
 * outputs. */
static int ragged_check_out(shmap__plan *p, const ragged_args *a)
{
  int64_t orows = a->output->shape[0];
  for (int64_t j = 0; j < a->count; j++)
    if (a->out_off[j] > orows - a->send[j])
      return ragged_fail(p,
                         "output_offsets[%lld] = %lld with send_sizes[%lld] = "
                         "%lld is outside the receiver's output's %lld rows",
                         (long long)j, (long long)a->out_off[j], (long long)j,
                         (long long)a->send[j], (long long)orows);
  return 0;
}

/* After the first round: what each peer sends must be what this member
 * expects, and no two received slices may land on the same output rows.
 * got holds gn * k triples: peer s's slice j at s * k + j. */
static int ragged_agree(shmap__plan *p, const ragged_args *a,
                        const int64_t *got)
{
  int n = p->gn * a->k, k = a->k;
  for (int i = 0; i < n; i++)
    if (got[i * META_N + META_SIZE] != a->recv[i])
      return ragged_fail(p,
                         "recv_sizes[%d] = %lld, but rank %d sends %lld rows "
                         "to this rank (its send_sizes[%d])",
                         i, (long long)a->recv[i], i / k,
                         (long long)got[i * META_N + META_SIZE],
                         p->grank * k + i % k);
  for (int s = 0; s < n; s++)
    for (int t = s + 1; t < n; t++) {
      int64_t a0 = got[s * META_N + META_OUT],
              a1 = a0 + got[s * META_N + META_SIZE];
      int64_t b0 = got[t * META_N + META_OUT],
              b1 = b0 + got[t * META_N + META_SIZE];
      if (a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1)
        return ragged_fail(p,
                           "rows [%lld, %lld) from rank %d and rows [%lld, "
                           "%lld) from rank %d overlap in the output",
                           (long long)a0, (long long)a1, s / k, (long long)b0,
                           (long long)b1, t / k);
    }
  return 0;
}

/* Round 1: member g of the group takes entries [g k, g k + k) of every
 * member's table of triples. */
static int ragged_meta(shmap__plan *p, const ragged_args *a, int64_t *mine,
                       int64_t *got)
{
  shmap__coll *c = &p->c;
  int k = a->k, me = c->rank;
  for (int64_t j = 0; j < a->count; j++) {
    mine[j * META_N + META_IN] = a->in_off[j];
    mine[j * META_N + META_SIZE] = a->send[j];
    mine[j * META_N + META_OUT] = a->out_off[j];
  }
  c->esize = sizeof(int64_t);
  c->call.src = mine;
  c->call.dst = got;
  c->call.p2 = 2 * k;
  int rc = shmap__comm_arrive(c);
  if (rc)
    return rc;
  size_t per = (size_t)k * META_N; /* int64s each peer takes */
  int64_t msh[1] = {(int64_t)per}, mst[1] = {1};
  if (shmap__comm_two_sided(c))
    for (int g = 0; g < p->gn; g++)
      if (shmap__plan_member(p, g) != me) {
        shmap__box row = {(size_t)g * per * sizeof(int64_t), 1, msh, mst};
        shmap__comm_send(c, shmap__plan_member(p, g), &row);
      }
  shmap__box myrow = {(size_t)p->grank * per * sizeof(int64_t), 1, msh, mst};
  for (int s = 0; s < p->gn; s++)
    shmap__comm_get(c, shmap__plan_member(p, s), &myrow, got + s * per, mst);
  return shmap__comm_depart(c, sizeof(int64_t) * per * (size_t)p->gn);
}

/* Round 2: the rows.  A row is `inner` elements, contiguous; pieces pass
 * between a pair of members in the order of their entries. */
static int ragged_rows(shmap__plan *p, const ragged_args *a, size_t es,
                       const int64_t *got)
{
  shmap__coll *c = &p->c;
  int k = a->k, me = c->rank;
  c->esize = es;
  c->call.src = a->operand->data;
  c->call.dst = a->output->data;
  c->call.p2 = 2 * k + 1;
  size_t inner = (size_t)shmap__numel(a->operand->rank - 1,
                                      a->operand->shape + 1);
  uint64_t bytes = 0;
  int rc = shmap__comm_arrive(c);
  if (rc)
    return rc;
  if (inner && shmap__comm_two_sided(c))
    for (int64_t j = 0; j < a->count; j++) {
      int to = shmap__plan_member(p, (int)(j / k));
      if (to != me && a->send[j] > 0) {
        int64_t sh[1] = {a->send[j] * (int64_t)inner}, st[1] = {1};
        shmap__box piece = {(size_t)a->in_off[j] * inner * es, 1, sh, st};
        shmap__comm_send(c, to, &piece);
      }
    }
  for (int i = 0; i < p->gn * k && inner; i++) {
    const int64_t *t = got + (size_t)i * META_N;
    if (t[META_SIZE] <= 0)
      continue;
    int64_t sh[1] = {t[META_SIZE] * (int64_t)inner}, st[1] = {1};
    shmap__box piece = {(size_t)t[META_IN] * inner * es, 1, sh, st};
    shmap__comm_get(c, shmap__plan_member(p, i / k), &piece,
                    (char *)a->output->data + (size_t)t[META_OUT] * inner * es,
                    st);
    bytes += (uint64_t)t[META_SIZE] * inner * es;
  }
  return shmap__comm_depart(c, bytes);
}

SHMAP_EXTERN int shmap_ragged_all_to_all_groups(
    shmap_ctx *ctx, const shmap_block *operand, shmap_block *output,
    const int64_t input_offsets[], const int64_t send_sizes[],
    const int64_t output_offsets[], const int64_t recv_sizes[],
    int64_t count, const char *axes, const shmap_groups *groups)
{
  shmap__plan p;
  ragged_args a = {operand,    output,     input_offsets, send_sizes,
                   output_offsets, recv_sizes, count,         0};
  int rc = shmap__plan_prepare(ctx, SHMAP__RAGGED_ALL_TO_ALL, operand, axes,
                               groups, &p);
  if (rc || (rc = ragged_check(&p, &a)))
    return rc;
  shmap__coll *c = &p.c;
  /* Every member's output has as many rows: the first round's descriptor
   * carries them, so a member whose output differs gets the mismatch
   * error before any offset is judged against the wrong output. */
  c->call.p1 = output->shape[0] > INT32_MAX ? -1 : (int)output->shape[0];
  size_t ntab = (size_t)META_N * (size_t)a.count;
  int64_t *mine = shmap__malloc(sizeof(int64_t) * ntab);
  int64_t *got = shmap__malloc(sizeof(int64_t) * ntab);
  if (!mine || !got) {
    free(mine);
    free(got);
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  }
  size_t es = c->esize;
  if (!(rc = ragged_meta(&p, &a, mine, got)) &&
      !(rc = ragged_check_out(&p, &a)) && !(rc = ragged_agree(&p, &a, got)))
    rc = ragged_rows(&p, &a, es, got);
  free(mine);
  free(got);
  return rc;
}

SHMAP_EXTERN int shmap_ragged_all_to_all(
    shmap_ctx *ctx, const shmap_block *operand, shmap_block *output,
    const int64_t input_offsets[], const int64_t send_sizes[],
    const int64_t output_offsets[], const int64_t recv_sizes[],
    const char *axes)
{
  /* One slice per member: count 0 stands for the group's size, which only
   * the plan knows. */
  return shmap_ragged_all_to_all_groups(ctx, operand, output, input_offsets,
                                        send_sizes, output_offsets,
                                        recv_sizes, 0, axes, NULL);
}
