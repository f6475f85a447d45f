/* SPDX-License-Identifier: MIT */
/*
 * transport/mpi.h - the transport between processes over MPI
 * (transport/mpi.c): collectives between processes, failure notices, and
 * the verdict of a map.  Used only when a mesh's devices are spread over
 * several processes; everything else reaches it through its table
 * (transport/comm.h).
 */
#ifndef SHMAP_TRANSPORT_MPI_H
#define SHMAP_TRANSPORT_MPI_H

/* The transport between processes (transport/comm.h), used by a mesh
 * placed on several processes (defined only when built with MPI). */
struct shmap__transport;
extern const struct shmap__transport shmap__mpi_transport;

#endif /* SHMAP_TRANSPORT_MPI_H */
