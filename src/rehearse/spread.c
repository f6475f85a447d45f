/* SPDX-License-Identifier: MIT */
/*
 * spread.c - the records of a rehearsal over the processes of a job: an
 * all-gather on the mesh's own communicator, between maps (the caller of
 * the map makes it after every device is done), so that it pairs with no
 * map's messages and no other mesh's exchanges.
 */
#include "rehearse/spread.h"

#include "proc/proc.h"

#include <stdlib.h>
#include <string.h>

#ifdef SHMAP_HAVE_MPI
#include <mpi.h>

#define GATHER "exchanging a rehearsal's records between processes"

static int gather_mpi(MPI_Comm *comm, const shmap__rrec *mine, size_t n,
                      shmap__rrec **all, size_t *nall)
{
  int np;
  MPI_Comm_size(*comm, &np);
  int *counts = calloc((size_t)np * 2, sizeof *counts);
  if (!counts)
    return shmap__err(SHMAP_ENOMEM, "%s: out of memory", GATHER);
  int *displs = counts + np;
  int bytes = (int)(n * sizeof *mine);
  int rc = shmap__mpi_check(
      MPI_Allgather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, *comm), GATHER);
  size_t total = 0;
  for (int p = 0; p < np && !rc; p++) {
    displs[p] = (int)total;
    total += (size_t)counts[p];
  }
  *all = rc ? NULL : malloc(total ? total : 1);
  if (!rc && !*all)
    rc = shmap__err(SHMAP_ENOMEM, "%s: out of memory", GATHER);
  if (!rc)
    rc = shmap__mpi_check(MPI_Allgatherv(mine, bytes, MPI_BYTE, *all, counts,
                                         displs, MPI_BYTE, *comm),
                          GATHER);
  free(counts);
  if (rc) {
    free(*all);
    *all = NULL;
    return rc;
  }
  *nall = total / sizeof *mine;
  return 0;
}
#endif

int shmap__rehearse_gather(const shmap_mesh *mesh, const shmap__rrec *mine,
                           size_t n, shmap__rrec **all, size_t *nall)
{
#ifdef SHMAP_HAVE_MPI
  int tag;
  MPI_Comm *comm = shmap__proc_mesh_comm(mesh, &tag);
  if (comm)
    return gather_mpi(comm, mine, n, all, nall);
#else
  (void)mesh;
#endif
  *all = malloc(n ? n * sizeof *mine : 1);
  if (!*all)
    return shmap__err(SHMAP_ENOMEM, "rehearsal: out of memory");
  if (n)
    memcpy(*all, mine, n * sizeof *mine);
  *nall = n;
  return 0;
}
