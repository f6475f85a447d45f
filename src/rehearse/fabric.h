/* SPDX-License-Identifier: MIT */
/*
 * fabric.h - a described cluster (fabric.c) and the price of a collective
 * on it (price.c).  A fabric maps each axis of a mesh to a link class
 * (topology, bandwidth per direction, latency per hop and per call) and
 * gives one device's peak FLOP/s, memory bandwidth and memory capacity.
 */
#ifndef SHMAP_FABRIC_H
#define SHMAP_FABRIC_H

#include "internal.h"

/* How the devices along one axis are wired. */
enum shmap__topo {
  SHMAP__TOPO_RING,   /* a ring (a torus axis with its wraparound link) */
  SHMAP__TOPO_LINE,   /* a torus axis without wraparound */
  SHMAP__TOPO_SWITCH, /* every device has one port into a switch */
  SHMAP__TOPO_FULL    /* a link between every two devices */
};

#define SHMAP__FABRIC_NAME_MAX 64
#define SHMAP__FABRIC_LEVELS 8
#define SHMAP__FABRIC_SOURCE_MAX 256

/* One link class: the axes mapped to it share it. */
typedef struct shmap__level {
  char name[SHMAP__FABRIC_NAME_MAX];
  int topo;        /* enum shmap__topo */
  double bw;       /* bytes per second per link per direction (for a
                      switch: per device port per direction) */
  double hop;      /* seconds per hop */
  double call;     /* seconds per call (software and launch latency) */
} shmap__level;

struct shmap_fabric {
  char name[SHMAP__FABRIC_NAME_MAX];
  char source[SHMAP__FABRIC_SOURCE_MAX]; /* the preset's name or file */
  double flops;    /* peak FLOP/s of one device */
  double membw;    /* memory bandwidth of one device, bytes per second */
  double memcap;   /* memory capacity of one device, bytes */
  int nlevels;
  shmap__level levels[SHMAP__FABRIC_LEVELS];
  /* Mesh axes to levels: by name when the name is listed, else axis k of
   * the mesh takes the level of the k-th listed entry (the last entry's
   * for axes past the list). */
  int naxes;
  char axis_names[SHMAP_MAX_AXES][SHMAP__FABRIC_NAME_MAX];
  int axis_level[SHMAP_MAX_AXES];
};

/* The level of axis `a` of `mesh` on `f`. */
const shmap__level *shmap__fabric_axis(const shmap_fabric *f,
                                       const shmap_mesh *mesh, int a);
/* "ring", "torus-nowrap", ... */
const char *shmap__topo_name(int topo);

/* One phase of a collective: `n` members along one level.  The price of
 * a whole collective over several axes is the sum of its phases' (see
 * price.c). */
typedef struct shmap__phase {
  const shmap__level *lv;
  int n;      /* members along the level */
  int naxes;  /* torus axes of the level the phase spans at once */
  int hops;   /* the latency-bound term's hops; 0: the topology's for n
                 members along one axis */
} shmap__phase;

/* Seconds of one collective phase; `bytes` as each function says. */
/* all_gather: `bytes` of the gathered result on one device. */
double shmap__price_all_gather(const shmap__phase *p, double bytes);
/* psum_scatter: `bytes` of the input on one device. */
double shmap__price_reduce_scatter(const shmap__phase *p, double bytes);
/* psum (reduce-scatter then all-gather): `bytes` of the block. */
double shmap__price_all_reduce(const shmap__phase *p, double bytes);
/* all_to_all: `bytes` of one device's input (the bisection rule). */
double shmap__price_all_to_all(const shmap__phase *p, double bytes);
/* A point-to-point message of `bytes` over `hops` hops sharing its
 * busiest link with `load` messages (itself included). */
double shmap__price_p2p(const shmap__level *lv, double bytes, int hops,
                        int load);
/* The compute roofline of one device: max(flops / peak, bytes / membw). */
double shmap__price_compute(const shmap_fabric *f, double flops,
                            double bytes);

#endif /* SHMAP_FABRIC_H */
