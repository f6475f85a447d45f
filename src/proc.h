/* SPDX-License-Identifier: MIT */
/*
 * proc.h - the processes of a job and the placement of a mesh's devices on
 * them (proc.c).
 *
 * A program started without mpirun is one process that runs every device;
 * nothing here touches MPI then.  Under mpirun (or when the program has
 * initialised MPI itself) each of the R processes of MPI_COMM_WORLD runs
 * ndev/R of each mesh's devices.
 */
#ifndef SHMAP_PROC_H
#define SHMAP_PROC_H

#include "internal.h"

/* This process within the job. */
typedef struct shmap__proc {
  bool mpi;       /* MPI is in use (even with one process) */
  bool own_init;  /* the library called MPI_Init_thread and finalises */
  int rank, size; /* 0 and 1 without MPI */
  char host[64];  /* host name, for messages */
} shmap__proc;

/* Initialise on first use (detect mpirun, initialise MPI when needed).
 * 0, or an error code with the message set; the outcome is kept, so every
 * later call returns the same. */
int shmap__proc_init(void);
/* The process description (after a successful shmap__proc_init). */
const shmap__proc *shmap__proc_self(void);

/* Where a mesh's devices run.  `axes` are the mesh axes whose coordinates
 * choose the process (all axes in mesh order by default, which gives each
 * process a contiguous range of device numbers). */
typedef struct shmap__place {
  int nproc;
  int self;    /* this process's rank */
  int naxes;
  int axes[SHMAP_MAX_AXES];
  int *owner;  /* process of each device */
  int nlocal;  /* devices of this process ... */
  int *local;  /* ... in increasing device number */
  struct shmap__mpimesh *mpi; /* with several processes (transport/mpi.c) */
} shmap__place;

/* Compute a placement of `mesh` over the job's processes (mesh->place is
 * not touched).  SHMAP_EINVAL with a message when the processes cannot
 * share the devices equally. */
int shmap__place_new(const shmap_mesh *mesh, const int axes[], int naxes,
                     shmap__place **out);
void shmap__place_free(shmap__place *p);
/* Place a new mesh by default (contiguous device numbers per process) when
 * MPI is in use; initialises the process runtime first. */
int shmap__place_default(shmap_mesh *mesh);
/* The library's communicator (an MPI_Comm *) under MPI. */
void *shmap__proc_comm(void);

/* True when device `dev` of the mesh runs in this process. */
static inline bool shmap__dev_local(const shmap_mesh *mesh, int dev)
{
  return !mesh->place || mesh->place->owner[dev] == mesh->place->self;
}

/* " on process 1 (host node2)" when the job has several processes, else "". */
void shmap__proc_suffix(const shmap_mesh *mesh, int dev, char *buf, size_t n);

/* Reading sharded array `a` with another spec (`what` names the input):
 * 0 when every piece is in this process, else SHMAP_EINVAL. */
int shmap__proc_reshard_check(const shmap_array *a, const char *what);
/* Wait for one MPI request (an MPI_Request *) without a blocking call:
 * 0 or SHMAP_ESYS with a message. */
int shmap__mpi_wait(void *request);

/* Host data over processes (spmd.c). */
/* Copy every block this process holds into `dst` (row-major, whole). */
void shmap__array_assemble_local(const shmap_array *a, void *dst);
/* Give every process the blocks the others hold: dst already holds this
 * process's (shmap__array_assemble_local); 0 or an error. */
int shmap__array_exchange(const shmap_array *a, void *dst);

#endif /* SHMAP_PROC_H */
