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
 * call is two rounds of the group: first every member publishes, per peer,
 * its (input offset, send size, output offset) and each takes the triples
 * meant for it; then the rows move.  Both rounds carry the same
 * descriptor, so a member that stops after the first (its received sizes
 * disagree with its recv_sizes) fails the map and releases the others from
 * the second.
 */

enum { META_IN, META_SIZE, META_OUT, META_N };

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

/* Local checks: the blocks, and every offset and size against them. */
static int ragged_check(shmap__plan *p, const shmap_block *operand,
                        const shmap_block *output, const int64_t in_off[],
                        const int64_t send[], const int64_t out_off[],
                        const int64_t recv[])
{
  shmap__coll *c = &p->c;
  const char *op = shmap__coll_opname(c);
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
  if (!in_off || !send || !out_off || !recv)
    return ragged_fail(p, "%s is NULL",
                       !in_off  ? "input_offsets"
                       : !send  ? "send_sizes"
                       : !out_off ? "output_offsets"
                                  : "recv_sizes");
  int64_t rows = operand->shape[0], orows = output->shape[0];
  for (int j = 0; j < c->n; j++) {
    if (in_off[j] < 0 || send[j] < 0 || in_off[j] > rows - send[j])
      return ragged_fail(p,
                         "input_offsets[%d] = %lld with send_sizes[%d] = %lld "
                         "is outside the operand's %lld rows",
                         j, (long long)in_off[j], j, (long long)send[j],
                         (long long)rows);
    if (out_off[j] < 0 || out_off[j] > orows - send[j])
      return ragged_fail(p,
                         "output_offsets[%d] = %lld with send_sizes[%d] = %lld "
                         "is outside the output's %lld rows",
                         j, (long long)out_off[j], j, (long long)send[j],
                         (long long)orows);
    if (recv[j] < 0 || recv[j] > orows)
      return ragged_fail(p,
                         "recv_sizes[%d] = %lld is outside [0, %lld] (the "
                         "output's rows)",
                         j, (long long)recv[j], (long long)orows);
  }
  return 0;
}

/* After the first round: what each peer sends must be what this member
 * expects, and no two peers' rows may land on the same output rows. */
static int ragged_agree(shmap__plan *p, const int64_t *got,
                        const int64_t recv[])
{
  int n = p->c.n;
  for (int s = 0; s < n; s++)
    if (got[s * META_N + META_SIZE] != recv[s])
      return ragged_fail(p,
                         "recv_sizes[%d] = %lld, but rank %d sends %lld rows "
                         "to this rank (its send_sizes[%d])",
                         s, (long long)recv[s], s,
                         (long long)got[s * META_N + META_SIZE], p->c.rank);
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
                           (long long)a0, (long long)a1, s, (long long)b0,
                           (long long)b1, t);
    }
  return 0;
}

SHMAP_EXTERN int shmap_ragged_all_to_all(
    shmap_ctx *ctx, const shmap_block *operand, shmap_block *output,
    const int64_t input_offsets[], const int64_t send_sizes[],
    const int64_t output_offsets[], const int64_t recv_sizes[],
    const char *axes)
{
  shmap__plan p;
  int rc = shmap__plan_prepare(ctx, SHMAP__RAGGED_ALL_TO_ALL, operand, axes,
                               NULL, &p);
  if (rc || (rc = ragged_check(&p, operand, output, input_offsets, send_sizes,
                               output_offsets, recv_sizes)))
    return rc;
  shmap__coll *c = &p.c;
  int n = c->n, me = c->rank;
  /* The output's rows must agree too: offsets were checked against ours. */
  c->call.p1 = output->shape[0] > INT32_MAX ? -1 : (int)output->shape[0];
  int64_t *mine = shmap__malloc(sizeof(int64_t) * META_N * (size_t)n);
  int64_t *got = shmap__malloc(sizeof(int64_t) * META_N * (size_t)n);
  if (!mine || !got) {
    free(mine);
    free(got);
    return shmap__dev_fail(ctx, shmap__coll_opname(c), SHMAP_ENOMEM,
                           "out of memory");
  }
  for (int j = 0; j < n; j++) {
    mine[j * META_N + META_IN] = input_offsets[j];
    mine[j * META_N + META_SIZE] = send_sizes[j];
    mine[j * META_N + META_OUT] = output_offsets[j];
  }
  /* Round 1: member s takes the triple at row s of every member's table. */
  size_t es = c->esize;
  c->esize = sizeof(int64_t);
  c->call.src = mine;
  c->call.dst = got;
  c->call.p2 = 0;
  if ((rc = shmap__comm_arrive(c)))
    goto out;
  int64_t msh[1] = {META_N}, mst[1] = {1};
  if (shmap__comm_two_sided(c))
    for (int r = 0; r < n; r++)
      if (r != me) {
        shmap__box row = {(size_t)r * META_N * sizeof(int64_t), 1, msh, mst};
        shmap__comm_send(c, r, &row);
      }
  shmap__box myrow = {(size_t)me * META_N * sizeof(int64_t), 1, msh, mst};
  for (int s = 0; s < n; s++)
    shmap__comm_get(c, s, &myrow, got + s * META_N, mst);
  if ((rc = shmap__comm_depart(c, sizeof(int64_t) * META_N * (size_t)n)))
    goto out;
  if ((rc = ragged_agree(&p, got, recv_sizes)))
    goto out;
  /* Round 2: the rows.  A row is `inner` elements, contiguous. */
  c->esize = es;
  c->call.src = operand->data;
  c->call.dst = output->data;
  c->call.p2 = 1;
  size_t inner = (size_t)shmap__numel(operand->rank - 1, operand->shape + 1);
  uint64_t bytes = 0;
  if ((rc = shmap__comm_arrive(c)))
    goto out;
  if (inner && shmap__comm_two_sided(c))
    for (int r = 0; r < n; r++)
      if (r != me && send_sizes[r] > 0) {
        int64_t sh[1] = {send_sizes[r] * (int64_t)inner}, st[1] = {1};
        shmap__box piece = {(size_t)input_offsets[r] * inner * es, 1, sh, st};
        shmap__comm_send(c, r, &piece);
      }
  for (int s = 0; s < n && inner; s++) {
    int64_t cnt = got[s * META_N + META_SIZE];
    if (cnt <= 0)
      continue;
    int64_t sh[1] = {cnt * (int64_t)inner}, st[1] = {1};
    shmap__box piece = {(size_t)got[s * META_N + META_IN] * inner * es, 1, sh,
                        st};
    shmap__comm_get(c, s,  &piece,
                    (char *)output->data +
                        (size_t)got[s * META_N + META_OUT] * inner * es,
                    st);
    bytes += (uint64_t)cnt * inner * es;
  }
  rc = shmap__comm_depart(c, bytes);
out:
  free(mine);
  free(got);
  return rc;
}
