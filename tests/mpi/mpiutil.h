/* SPDX-License-Identifier: MIT */
/*
 * mpiutil.h - helpers the MPI test programs share.
 */
#ifndef SHMAP_TESTS_MPIUTIL_H
#define SHMAP_TESTS_MPIUTIL_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether every one of the R processes of MPI_COMM_WORLD has the same
 * text (its first 1023 bytes); a collective call. */
static inline int same_everywhere_of(int R, const char *text)
{
  if (R == 1)
    return 1;
  char mine[1024] = {0}, *all = calloc((size_t)R, sizeof mine);
  if (!all)
    return 0;
  snprintf(mine, sizeof mine, "%s", text);
  MPI_Allgather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR,
                MPI_COMM_WORLD);
  int same = 1;
  for (int r = 0; r < R; r++)
    same &= memcmp(all + (size_t)r * sizeof mine, mine, sizeof mine) == 0;
  free(all);
  return same;
}

#endif
