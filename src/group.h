/* SPDX-License-Identifier: MIT */
/*
 * group.h - groups of devices (group.c).  The group of a device along some
 * mesh axes is the devices that share its coordinates on every other
 * axis.  Its members are ranked over the group's axes in the order given,
 * the first axis major, so rank r spells the group coordinates in mixed
 * radix; the rank-0 member (coordinate 0 on the group's axes) is the
 * group's base.  Collectives, transports, nested maps and the placement of
 * devices on processes all ask these questions, in this one way.
 */
#ifndef SHMAP_GROUP_H
#define SHMAP_GROUP_H

#include <shmap.h>

/* The number of devices in a group over `axes`. */
int shmap__group_size(const shmap_mesh *mesh, const int axes[], int naxes);
/* The number of groups over `axes`: the mesh's devices over the group size. */
int shmap__group_count(const shmap_mesh *mesh, const int axes[], int naxes);
/* The rank of `dev` in its group over `axes`. */
int shmap__group_rank(const shmap_mesh *mesh, const int axes[], int naxes,
                      int dev);
/* The base of the group of `dev` over `axes`: `dev` with coordinate 0 on
 * every group axis. */
int shmap__group_base(const shmap_mesh *mesh, const int axes[], int naxes,
                      int dev);
/* The group of `dev` over `axes` (in order): its members' device numbers in
 * rank order (when members is not NULL), and its rank.  Returns the group
 * size. */
int shmap__group(const shmap_mesh *mesh, const int axes[], int naxes, int dev,
                 int members[], int *rank);
/* The device of rank r in the group over `axes` whose rank-0 member is
 * device `base` (O(naxes)). */
int shmap__group_member(const shmap_mesh *mesh, const int axes[], int naxes,
                        int base, int r);
/* The coordinates of rank r on the group's axes, into coords[axes[k]]
 * (the other entries of coords are left as they are). */
void shmap__group_coords(const shmap_mesh *mesh, const int axes[], int naxes,
                         int r, int coords[]);

/* A set of axes as a mask (bit a for axis a): the axes in mesh order, into
 * axes[]; returns their number. */
int shmap__mask_axes(const shmap_mesh *mesh, unsigned mask, int axes[]);
/* The device with the same coordinates as `dev` on the axes in `mask` and
 * coordinate 0 on every other axis. */
int shmap__representative(const shmap_mesh *mesh, unsigned mask, int dev);

#endif /* SHMAP_GROUP_H */
