/* SPDX-License-Identifier: MIT */
/*
 * pmesh.c - a mesh's own communicator between the processes of a job: the
 * process engine's part of a mesh spread over several processes.
 *
 * Why here.  The processes of a job, the placement of a mesh's devices on
 * them and every exchange the caller of a map makes between processes
 * (agreeing on a library call, a map's outputs, host data, staging) are
 * the business of this folder, and all of them go over the mesh's own
 * communicator.  So the communicator is made, counted and freed here, and
 * a transport between processes (transport/mpi.c) moves a collective's
 * data over the same communicator, with tags below shmap__pmesh.tag_free.
 * The arrow points down: the transport uses this file, never the reverse.
 * Another transport between processes is then one file under transport/
 * and its line in shmap__transport_for(): it opens the mesh here in its
 * mesh_init (the creation's agreement comes with it), counts the messages
 * it sends on the communicator, and quiesces here in its mesh_free.
 *
 * Quiescence.  Notices are never awaited one by one, and a failed map
 * leaves sends nobody receives.  MPI may give a freed communicator's
 * context to the next one made (MPICH does), where such leftovers would
 * match the receives of a new mesh.  So each process counts the messages
 * it sends to and receives from each process on a mesh's communicator
 * (sent, got); destroying the mesh (collective, like MPI_Comm_free)
 * exchanges the counts, receives whatever is still on its way, and only
 * then frees the communicator.
 */
#include "proc/proc.h"

#include <stdlib.h>

#ifdef SHMAP_HAVE_MPI
#include <mpi.h>

/* The communicator lives next to its public description. */
typedef struct pmesh {
  shmap__pmesh pub;
  MPI_Comm comm;
  /* nproc each: the counts quiesce() exchanges, allocated with the mesh
   * so that its release cannot fail for memory half-way. */
  int64_t *mine, *theirs;
} pmesh;

int shmap__proc_tag_ub(void)
{
  int *ub = NULL, flag = 0;
  MPI_Comm world = *(MPI_Comm *)shmap__proc_comm();
  if (SHMAP__MPI_CHECK(MPI_Comm_get_attr, world, MPI_TAG_UB, &ub, &flag) ||
      !flag || !ub)
    return 0;
  return *ub;
}

/* The agreement on a new mesh, with this process's verdict rc. */
static int agree_open(const shmap_mesh *mesh, int rc)
{
  return shmap__host_agree_call(
      mesh->parent ? "shmap_mesh_submesh" : "shmap_mesh_create", mesh,
      mesh->parent ? "creating a sub-mesh" : "creating a mesh", NULL, rc);
}

int shmap__proc_mesh_refuse(const shmap_mesh *mesh, int rc)
{
  const shmap__place *pl = mesh->place;
  if (!pl || pl->nproc == 1)
    return rc;
  return agree_open(mesh, rc);
}

int shmap__proc_mesh_open(shmap_mesh *mesh)
{
  shmap__place *pl = mesh->place;
  if (!pl || pl->nproc == 1)
    return 0;
  pmesh *m = shmap__calloc(1, sizeof *m);
  if (m) {
    m->pub.sent = shmap__calloc((size_t)pl->nproc, sizeof *m->pub.sent);
    m->pub.got = shmap__calloc((size_t)pl->nproc, sizeof *m->pub.got);
    m->mine = shmap__calloc((size_t)pl->nproc, sizeof *m->mine);
    m->theirs = shmap__calloc((size_t)pl->nproc, sizeof *m->theirs);
  }
  int rc = 0;
  /* Out of memory, this process still agrees, with that verdict. */
  if (!m || !m->pub.sent || !m->pub.got || !m->mine || !m->theirs)
    rc = shmap__err(SHMAP_ENOMEM, "out of memory for a mesh's MPI state");
  if ((rc = agree_open(mesh, rc)))
    ;
  else if ((m->pub.tag_free = shmap__proc_tag_ub()) <= 0)
    rc = shmap__err(SHMAP_ESYS, "MPI offers no tags for a new mesh");
  else if ((rc = SHMAP__MPI_CHECK(MPI_Comm_dup,
                                  *(MPI_Comm *)shmap__proc_comm(), &m->comm)))
    ;
  else
    rc = SHMAP__MPI_CHECK(MPI_Comm_set_errhandler, m->comm, MPI_ERRORS_RETURN);
  if (rc) {
    if (m) {
      free(m->pub.sent);
      free(m->pub.got);
      free(m->mine);
      free(m->theirs);
    }
    free(m);
    return rc;
  }
  m->pub.nproc = pl->nproc;
  m->pub.comm = &m->comm;
  pl->pm = &m->pub;
  return 0;
}

/* Receive every message still addressed to this process on the mesh's
 * communicator (see Quiescence above); every process calls it.  0 or an
 * MPI error (message set).  A message too large for the memory left
 * stops the job (MPI_Abort) rather than leave its sender waiting. */
static int quiesce(pmesh *pm)
{
  shmap__pmesh *m = &pm->pub;
  int64_t *mine = pm->mine, *theirs = pm->theirs;
  for (int p = 0; p < m->nproc; p++)
    mine[p] = atomic_load(&m->sent[p]);
  int rc = SHMAP__MPI_CHECK(MPI_Alltoall, mine, 1, MPI_INT64_T, theirs, 1,
                                  MPI_INT64_T, pm->comm);
  for (int p = 0; rc == 0 && p < m->nproc; p++)
    while (rc == 0 && atomic_load(&m->got[p]) < theirs[p]) {
      MPI_Message msg;
      MPI_Status st;
      int len = 0;
      if ((rc = SHMAP__MPI_CHECK(MPI_Mprobe, p, MPI_ANY_TAG, pm->comm, &msg,
                                 &st)) ||
          (rc = SHMAP__MPI_CHECK(MPI_Get_count, &st, MPI_BYTE, &len)))
        break;
      char *buf = shmap__malloc(len > 0 ? (size_t)len : 1);
      if (!buf)
        MPI_Abort(pm->comm, 1);
      rc = SHMAP__MPI_CHECK(MPI_Mrecv, buf, len, MPI_BYTE, &msg,
                            MPI_STATUS_IGNORE);
      free(buf);
      atomic_fetch_add(&m->got[p], 1);
    }
  /* Until every process has its messages, senders keep theirs moving. */
  if (rc == 0)
    rc = SHMAP__MPI_CHECK(MPI_Barrier, pm->comm);
  return rc;
}

int shmap__proc_mesh_quiesce(shmap_mesh *mesh)
{
  pmesh *pm = mesh->place ? (pmesh *)mesh->place->pm : NULL;
  if (!pm)
    return 0;
  int fin = 0;
  if (SHMAP__MPI_CHECK(MPI_Finalized, &fin) || fin)
    return 0; /* after MPI_Finalize: nothing can be received */
  /* Every process releases the mesh at the same point of its calls; one
   * that does not would leave the others in the exchange: the
   * communicator is then left as it is. */
  int rc = shmap__host_agree("shmap_mesh_destroy", mesh,
                             "releasing a mesh (shmap_mesh_destroy or the "
                             "destroy of its last array)");
  if (rc == 0 && (rc = quiesce(pm)) == 0)
    pm->pub.quiet = true;
  return rc;
}

void shmap__proc_mesh_close(shmap__pmesh *p)
{
  pmesh *pm = (pmesh *)p;
  if (!pm)
    return;
  int fin = 0;
  if (pm->pub.quiet && SHMAP__MPI_CHECK(MPI_Finalized, &fin) == 0 && !fin)
    (void)SHMAP__MPI_CHECK(MPI_Comm_free, &pm->comm);
  free(pm->pub.sent);
  free(pm->pub.got);
  free(pm->mine);
  free(pm->theirs);
  free(pm);
}

void *shmap__proc_mesh_comm(const shmap_mesh *mesh, int *tag)
{
  shmap__pmesh *m = mesh->place ? mesh->place->pm : NULL;
  if (!m)
    return NULL;
  /* A transport's tags end below tag_free (transport/mpi.c, tag_of). */
  *tag = m->tag_free;
  return m->comm;
}

#else /* no MPI */

int shmap__proc_tag_ub(void) { return 0; }
int shmap__proc_mesh_open(shmap_mesh *mesh) { (void)mesh; return 0; }
int shmap__proc_mesh_quiesce(shmap_mesh *mesh) { (void)mesh; return 0; }
void shmap__proc_mesh_close(shmap__pmesh *p) { (void)p; }
void *shmap__proc_mesh_comm(const shmap_mesh *mesh, int *tag)
{
  (void)mesh;
  (void)tag;
  return NULL;
}
#endif
