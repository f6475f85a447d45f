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
  struct shmap__pmesh *pm; /* with several processes: the mesh's own
                              communicator (pmesh.c) */
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
/* Place sub-mesh `mesh` over devices pdev[] of `parent`: each device runs
 * in the process of its parent device (a process may run none). */
int shmap__place_sub(shmap_mesh *mesh, const shmap_mesh *parent,
                     const int pdev[]);
/* The library's job-wide communicator (an MPI_Comm *) under MPI: only
 * creating a mesh uses it; every exchange of a call on a mesh goes over
 * that mesh's own (shmap__proc_mesh_comm), so calls on different meshes
 * from different threads never pair. */
void *shmap__proc_comm(void);

/* ---- a mesh's own communicator (pmesh.c) ------------------------------ */

/* What a mesh spread over several processes has of its own: a
 * communicator for the exchanges of the map's caller (tag tag_free) and of
 * a transport between processes (tags below tag_free), and the messages
 * each process sent to and received from each other one on it, which
 * whoever sends or receives there counts (see pmesh.c, Quiescence). */
typedef struct shmap__pmesh {
  void *comm;             /* an MPI_Comm * */
  int nproc;
  int tag_free;           /* MPI_TAG_UB: above every transport tag */
  _Atomic int64_t *sent;  /* nproc: messages sent to each process */
  _Atomic int64_t *got;   /* nproc: received (or posted to be) from each */
  bool quiet;             /* quiesced: the communicator may be freed */
} shmap__pmesh;

/* The largest tag MPI offers (MPI_TAG_UB), 0 without MPI. */
int shmap__proc_tag_ub(void);
/* A mesh placed on several processes: agree on its creation with every
 * process (collective over the job: every process creates its meshes in
 * the same order) and make its communicator (mesh->place->pm).  A no-op
 * with one process.  0 or an error. */
int shmap__proc_mesh_open(shmap_mesh *mesh);
/* A process that cannot open such a mesh (rc, message set: out of memory
 * before shmap__proc_mesh_open) still takes part in that agreement, with
 * rc as its verdict, since the others wait for it there: the agreement's
 * result (the code and message of the lowest process that refused). */
int shmap__proc_mesh_refuse(const shmap_mesh *mesh, int rc);
/* Every process releases its meshes in the same order: agree on the
 * release, then receive every message still on its way on the mesh's
 * communicator.  0, or the mismatch of a process that did not (the
 * communicator is then left as it is). */
int shmap__proc_mesh_quiesce(shmap_mesh *mesh);
/* Free it (shmap__place_free calls this; the communicator itself only
 * when quiesced). */
void shmap__proc_mesh_close(shmap__pmesh *pm);
/* The mesh's communicator (an MPI_Comm *) and a tag that no map's messages
 * use, for exchanges the caller of a map makes between maps (stage.c,
 * spmd.c); NULL when the mesh is not spread over processes. */
void *shmap__proc_mesh_comm(const shmap_mesh *mesh, int *tag);

/* The result of MPI function `fn` called with the arguments that follow:
 * 0, or SHMAP_ESYS with the message "fn failed: " and MPI's description
 * of the error (MPI_Error_string).  Every MPI call of the library goes
 * through it (MPI_ERRORS_RETURN is set on every communicator it uses). */
#define SHMAP__MPI_CHECK(fn, ...) shmap__mpi_check(fn(__VA_ARGS__), #fn)
int shmap__mpi_check(int err, const char *fn);

/* True when device `dev` of the mesh runs in this process. */
static inline bool shmap__dev_local(const shmap_mesh *mesh, int dev)
{
  return !mesh->place || mesh->place->owner[dev] == mesh->place->self;
}

/* End the whole job (MPI_Abort) after a message on stderr naming this
 * process and `why`: for a failure the other processes cannot be told of
 * in a way that releases them. */
void shmap__proc_abort(const char *why);

/* The host name of process `rank` (this process's when unknown). */
const char *shmap__proc_host(int rank);
/* " on process 1 (host node2)" when the job has several processes, else "". */
void shmap__proc_suffix(const shmap_mesh *mesh, int dev, char *buf, size_t n);

/* Wait for one MPI request (an MPI_Request *) without a blocking call:
 * 0 or SHMAP_ESYS with a message. */
int shmap__mpi_wait(void *request);
/* The same for n requests (an MPI_Request array); `what` names the
 * exchange in the message. */
int shmap__mpi_wait_all(int n, void *requests, const char *what);

/* Host data over processes (spmd.c). */
/* Copy every block this process holds into `dst` (row-major, whole). */
void shmap__array_assemble_local(const shmap_array *a, void *dst);
/* Under MPI with several processes: agree with every other process that
 * it makes the same library call (`what`, on `mesh` if not NULL) before
 * the call exchanges data between processes outside a map (proc.c,
 * "Library calls").  0, or SHMAP_EMISMATCH (message set, prefixed `op`)
 * in every process.  A no-op with one process. */
int shmap__host_agree(const char *op, const shmap_mesh *mesh, const char *what);
/* The same, with this process's verdict on its arguments: `rc` (0, or an
 * error code whose message is set) and `args`, a description of the
 * arguments every process must pass alike (NULL: none).  Every process
 * returns the same: SHMAP_EMISMATCH for different calls; else the code of
 * the lowest process that rejected the call, the message naming that
 * process and its reason; else SHMAP_EMISMATCH when the arguments differ;
 * else 0.  With one process: `rc`, its message untouched. */
int shmap__host_agree_call(const char *op, const shmap_mesh *mesh,
                           const char *what, const char *args, int rc);
/* shmap__host_agree_call at the start of a public call on `mesh` (which
 * may be NULL): a no-op returning rc with one process, without a mesh, or
 * from inside a body (the body's map fails instead). */
int shmap__host_agree_entry(const char *op, const shmap_mesh *mesh,
                            const char *what, const char *args, int rc);
/* A map starts (+1) or ends (-1) in this process: exit() meanwhile aborts
 * the job. */
void shmap__proc_map_running(int delta);

/* Give every process the blocks the others hold: dst already holds this
 * process's (shmap__array_assemble_local); 0 or an error. */
int shmap__array_exchange(const shmap_array *a, void *dst);

/* A map's outputs over processes (spmd.c); every process calls these with
 * the same arguments after the map's result was agreed (success). */
/* Compare the outputs' descriptions over every process (tab[d*nout+k]:
 * device d's output k, NULL when not declared or not in this process)
 * and set out[k] to the lowest device's: 0, or the error one process
 * would report for the lowest device that differs. */
int shmap__proc_outputs(const shmap_mesh *mesh, int nout,
                        const shmap_block *const tab[], shmap_block *out);
/* For blocks data[] (per device, this process's), equal along the axes
 * outside `mask`: rep[d] = the block of d's representative for every local
 * d, received from its process when that is another one (*owned is then
 * the memory to free, *received the bytes received).  0 or an error. */
int shmap__proc_rep_blocks(const shmap_mesh *mesh, unsigned mask,
                           const void *const data[], size_t bytes,
                           const void **rep, void **owned,
                           uint64_t *received);
/* Every process returns the error of the lowest device `dev` any process
 * reports with rc != 0 (message set), or 0. */
int shmap__proc_agree_first(const shmap_mesh *mesh, int dev, int rc);

/* Pieces of a sharded array for a new layout (stage.c). */
/* Whether building blocks of `a` on mesh `tmesh` may need pieces that
 * other processes hold. */
bool shmap__stage_needed(const shmap_array *a, const shmap_mesh *tmesh);
/* Receive the pieces this process's devices of `tmesh` need for blocks of
 * shape tbshape under tspec and other processes hold; *view is then read
 * in place of `a` (NULL when nothing had to move: read `a`).  Every
 * process calls it with the same arguments.  0 or an error (the same in
 * every process). */
int shmap__stage(const shmap_array *a, shmap_mesh *tmesh,
                 const shmap__spec *tspec, const int64_t tbshape[],
                 const char *op, shmap_array **view);
void shmap__stage_free(shmap_array *view);

#endif /* SHMAP_PROC_H */
