/* SPDX-License-Identifier: MIT */
/*
 * price.c - the alpha-beta price of one collective phase on one level of
 * a fabric, after the published rules (the "How to Scale Your Model"
 * book's ICI and GPU chapters, and JAX's roofline for the bytes a call
 * moves): a phase costs its level's per-call latency plus the larger of
 * its latency-bound time (hops x hop latency) and its bandwidth-bound time
 * (bytes over the bandwidth the topology gives).  shmap-rehearse(7) lists
 * every rule with its source.
 */
#include "rehearse/fabric.h"

/* The bandwidth one device receives at in a gather along the level, in
 * bytes per second: both directions of a ring, one of a line (the ends
 * have no second neighbour, and the book prices a torus axis without
 * wraparound at half its ring), its switch port, or every peer's link at
 * once.  Torus axes of one level gathered together add their links. */
static double gather_bw(const shmap__phase *p)
{
  const shmap__level *lv = p->lv;
  int na = p->naxes > 0 ? p->naxes : 1;
  switch (lv->topo) {
  case SHMAP__TOPO_RING:
    return 2 * lv->bw * na;
  case SHMAP__TOPO_LINE:
    return lv->bw * na;
  case SHMAP__TOPO_FULL:
    return lv->bw * (p->n - 1);
  default:
    return lv->bw;
  }
}

/* The hops of a ring algorithm's latency-bound term: half the ring in
 * each direction, the whole line, one step per peer through a switch, one
 * link to everyone. */
static int gather_hops(const shmap__phase *p)
{
  if (p->hops > 0)
    return p->hops;
  switch (p->lv->topo) {
  case SHMAP__TOPO_RING:
    return p->n / 2;
  case SHMAP__TOPO_FULL:
    return 1;
  default:
    return p->n - 1;
  }
}

static double max2(double a, double b) { return a > b ? a : b; }

double shmap__price_all_gather(const shmap__phase *p, double bytes)
{
  if (p->n <= 1)
    return 0;
  double t_bw = bytes * (p->n - 1) / ((double)p->n * gather_bw(p));
  return p->lv->call + max2(gather_hops(p) * p->lv->hop, t_bw);
}

double shmap__price_reduce_scatter(const shmap__phase *p, double bytes)
{
  return shmap__price_all_gather(p, bytes);
}

double shmap__price_all_reduce(const shmap__phase *p, double bytes)
{
  if (p->n <= 1)
    return 0;
  /* A reduce-scatter and an all-gather of its result, in one call. */
  return shmap__price_reduce_scatter(p, bytes) +
         shmap__price_all_gather(p, bytes) - p->lv->call;
}

double shmap__price_all_to_all(const shmap__phase *p, double bytes)
{
  int n = p->n;
  if (n <= 1)
    return 0;
  const shmap__level *lv = p->lv;
  /* The bisection rule: half the members send a 1/n piece to each member
   * of the other half, in each direction, over the links that cross the
   * cut; no device sends faster than its links let it. */
  double lo = n / 2, hi = n - n / 2;
  double crossing = lo * hi * bytes / n, links, egress;
  int hops;
  switch (lv->topo) {
  case SHMAP__TOPO_RING:
    links = 2, egress = 2 * lv->bw, hops = n / 2;
    break;
  case SHMAP__TOPO_LINE:
    links = 1, egress = 2 * lv->bw, hops = n - 1;
    break;
  case SHMAP__TOPO_FULL:
    links = lo * hi, egress = (n - 1) * lv->bw, hops = 1;
    break;
  default:
    links = lo, egress = lv->bw, hops = 1;
    break;
  }
  double t_bw = max2(crossing / (links * lv->bw),
                     bytes * (n - 1) / (n * egress));
  return lv->call + max2(hops * lv->hop, t_bw);
}

double shmap__price_p2p(const shmap__level *lv, double bytes, int hops,
                        int load)
{
  if (hops <= 0)
    return 0;
  return lv->call + max2(hops * lv->hop, (load > 0 ? load : 1) * bytes / lv->bw);
}

double shmap__price_compute(const shmap_fabric *f, double flops, double bytes)
{
  return max2(flops / f->flops, bytes / f->membw);
}
