/* SPDX-License-Identifier: MIT */
/*
 * transport/mpi.h - moving a collective's data between processes with MPI,
 * failure notices between processes, and agreeing on a map's result
 * (transport/mpi.c).  Used only when a mesh's devices are spread over
 * several processes; without MPI every function is a no-op.
 */
#ifndef SHMAP_TRANSPORT_MPI_H
#define SHMAP_TRANSPORT_MPI_H

#include "sched/sched.h"

struct shmap__mpimesh;

/* A mesh placed on several processes gets a communicator of its own
 * (collective over the job's processes: every process creates its meshes
 * in the same order).  0 or an error. */
int shmap__mpi_mesh_init(shmap_mesh *mesh);
/* Every process releases its meshes in the same order: 0, or the
 * mismatch of a process that did not (the mesh's memory is freed
 * either way). */
int shmap__mpi_mesh_free(shmap_mesh *mesh);
/* The mesh's communicator (an MPI_Comm *) and a tag that no map's messages
 * use, for exchanges the caller of a map makes between maps (stage.c,
 * spmd.c); NULL when the mesh is not spread over processes. */
void *shmap__mpi_mesh_comm(const shmap_mesh *mesh, int *tag);

/* The caller of a map, before its devices start and after they finish:
 * the end exchanges every process's result and returns the agreed code
 * (message set): the first failure that began in the lowest-numbered
 * process where one began, else the lowest-numbered process's. */
void shmap__mpi_map_begin(shmap_mesh *mesh);
int shmap__mpi_map_end(shmap_mesh *mesh, int rc, const uint32_t *calls);

/* Device dev returned from its body after `calls` collective calls: tell
 * the other processes, whose devices may wait for it. */
void shmap__mpi_dev_done(shmap__runtime *rt, int dev, uint32_t calls);
/* shmap__fail() recorded the first failure of a map: tell the other
 * processes (unless it came from one of them). */
void shmap__mpi_on_fail(shmap__runtime *rt, int dev, int code,
                        const char *msg);

/* The transport between processes (transport/comm.h), used by a mesh
 * placed on several processes (defined only when built with MPI). */
struct shmap__transport;
extern const struct shmap__transport shmap__mpi_transport;

#endif /* SHMAP_TRANSPORT_MPI_H */
