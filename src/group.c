/* SPDX-License-Identifier: MIT */
/* group.c - groups of devices along mesh axes: sizes, ranks, members. */
#include "internal.h"

int shmap__group_size(const shmap_mesh *mesh, const int axes[], int naxes)
{
  int n = 1;
  for (int k = 0; k < naxes; k++)
    n *= mesh->sizes[axes[k]];
  return n;
}

int shmap__group_count(const shmap_mesh *mesh, const int axes[], int naxes)
{
  return mesh->ndev / shmap__group_size(mesh, axes, naxes);
}

int shmap__group_rank(const shmap_mesh *mesh, const int axes[], int naxes,
                      int dev)
{
  int r = 0;
  for (int k = 0; k < naxes; k++) {
    int a = axes[k];
    r = r * mesh->sizes[a] + dev / mesh->strides[a] % mesh->sizes[a];
  }
  return r;
}

int shmap__group_base(const shmap_mesh *mesh, const int axes[], int naxes,
                      int dev)
{
  int base = dev;
  for (int k = 0; k < naxes; k++) {
    int a = axes[k];
    base -= dev / mesh->strides[a] % mesh->sizes[a] * mesh->strides[a];
  }
  return base;
}

int shmap__group(const shmap_mesh *mesh, const int axes[], int naxes, int dev,
                 int members[], int *rank)
{
  int n = shmap__group_size(mesh, axes, naxes);
  if (rank)
    *rank = shmap__group_rank(mesh, axes, naxes, dev);
  if (members) {
    int base = shmap__group_base(mesh, axes, naxes, dev);
    for (int m = 0; m < n; m++)
      members[m] = shmap__group_member(mesh, axes, naxes, base, m);
  }
  return n;
}

void shmap__group_coords(const shmap_mesh *mesh, const int axes[], int naxes,
                         int r, int coords[])
{
  for (int k = naxes - 1; k >= 0; k--) {
    int a = axes[k];
    coords[a] = r % mesh->sizes[a];
    r /= mesh->sizes[a];
  }
}

int shmap__group_member(const shmap_mesh *mesh, const int axes[], int naxes,
                        int base, int r)
{
  /* One axis (the usual group): r is below its size, no division. */
  if (naxes == 1)
    return base + r * mesh->strides[axes[0]];
  int id = base;
  for (int k = naxes - 1; k >= 0; k--) {
    int a = axes[k];
    id += r % mesh->sizes[a] * mesh->strides[a];
    r /= mesh->sizes[a];
  }
  return id;
}

int shmap__mask_axes(const shmap_mesh *mesh, unsigned mask, int axes[])
{
  int n = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      axes[n++] = a;
  return n;
}

int shmap__representative(const shmap_mesh *mesh, unsigned mask, int dev)
{
  int rep = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      rep += dev / mesh->strides[a] % mesh->sizes[a] * mesh->strides[a];
  return rep;
}
