/* SPDX-License-Identifier: MIT */
/*
 * proc.c - the processes of a job: detecting mpirun, initialising and
 * finalising MPI, and placing each mesh's devices on the processes.
 *
 * A program that was not started by mpirun and did not initialise MPI
 * itself never calls into MPI: it is one process running every device, as
 * when the library is built without MPI.
 *
 * Thread level: the library needs MPI_THREAD_MULTIPLE.  Devices are
 * threads, or fibers on a few worker threads, and each waits for its own
 * transfers; with MULTIPLE every device posts and tests its own
 * non-blocking operations, where FUNNELED or SERIALIZED would route every
 * transfer through one thread and add a cross-thread hand-off (a wake-up
 * that costs 100-200 us when cores are shared) to every message.
 */
#include "proc/proc.h"
#include "hash.h"
#include "sched/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#ifdef SHMAP_HAVE_MPI
#include <mpi.h>
#endif

static shmap__proc self = {.rank = 0, .size = 1};
static int init_rc;
static char init_msg[SHMAP__MSG_MAX];
static uv_once_t init_once = UV_ONCE_INIT;
/* Every process's host name (size entries of 64 bytes) under MPI. */
static char (*hosts)[64];
#ifdef SHMAP_HAVE_MPI
/* Per process: 0, or 1 + the number of library calls it had agreed on when
 * it said goodbye (see "Library calls"). */
static _Atomic uint64_t *byes;
/* One process's record in the agreement on a library call. */
typedef struct hrec {
  uint64_t seq;
  uint64_t hash;  /* of the whole description of the call's arguments */
  int32_t rc;     /* this process's verdict on its arguments */
  char what[120];
  char args[200]; /* that description, maybe cut short */
  char msg[360];  /* the reason when rc != 0, maybe cut short */
} hrec;
/* A table of every process's record, for one agreement at a time when
 * the heap refuses one of its own (see shmap__host_agree_call). */
static hrec *spare_recs;
static uv_mutex_t spare_lock;
#endif

#ifdef SHMAP_HAVE_MPI
static MPI_Comm comm = MPI_COMM_NULL;
/* Agreeing on library calls, and goodbyes (see "Library calls" below). */
static MPI_Comm acomm = MPI_COMM_NULL;
#define TAG_BYE 1

void *shmap__proc_comm(void) { return &comm; }

/* Started by a launcher: Open MPI's, MPICH's Hydra, or any PMIx one. */
static bool launched(void)
{
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                     "PMI_RANK", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i]))
      return true;
  return false;
}

static const char *level_name(int level)
{
  switch (level) {
  case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
  case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
  case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
  default: return "MPI_THREAD_MULTIPLE";
  }
}

/* MPI_Finalize deletes MPI_COMM_SELF's attributes first: the moment to
 * free what the library holds, whoever finalises. */
static void say_goodbye(void);

static int self_delete(MPI_Comm c, int key, void *val, void *extra)
{
  (void)c; (void)key; (void)val; (void)extra;
  say_goodbye();
  /* Inside MPI_Finalize: a failure has nobody to go to but MPI. */
  int rc = MPI_SUCCESS;
  if (acomm != MPI_COMM_NULL)
    rc = MPI_Comm_free(&acomm);
  if (comm != MPI_COMM_NULL && rc == MPI_SUCCESS)
    rc = MPI_Comm_free(&comm);
  return rc;
}

static void exit_in_map(void);

static void finalize_at_exit(void)
{
  exit_in_map();
  /* At exit: nobody to tell of a failure. */
  int fin = 0;
  if (SHMAP__MPI_CHECK(MPI_Finalized, &fin) == 0 && !fin)
    (void)SHMAP__MPI_CHECK(MPI_Finalize);
}

static int mpi_fail(int code, const char *what, int err)
{
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, s, &len) != MPI_SUCCESS)
    snprintf(s, sizeof s, "error %d", err);
  return shmap__err(code, "%s failed: %s", what, s);
}

int shmap__mpi_check(int err, const char *fn)
{
  return err == MPI_SUCCESS ? 0 : mpi_fail(SHMAP_ESYS, fn, err);
}

static int init_mpi(void)
{
  int inited = 0, fin = 0, provided = 0, rc;
  if ((rc = SHMAP__MPI_CHECK(MPI_Initialized, &inited)) ||
      (rc = SHMAP__MPI_CHECK(MPI_Finalized, &fin)))
    return rc;
  if (fin) {
    if (!launched())
      return 0;
    return shmap__err(SHMAP_ESTATE,
                      "MPI was already finalised: create meshes before "
                      "MPI_Finalize");
  }
  if (!inited && !launched())
    return 0; /* a plain run: no MPI at all */
  if (!inited) {
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      return mpi_fail(SHMAP_ESYS, "MPI_Init_thread", rc);
    self.own_init = true;
    atexit(finalize_at_exit);
  } else if ((rc = SHMAP__MPI_CHECK(MPI_Query_thread, &provided))) {
    return rc;
  }
  if (provided < MPI_THREAD_MULTIPLE)
    return shmap__err(SHMAP_ESTATE,
                      "MPI provides the thread level %s but libshmap needs "
                      "MPI_THREAD_MULTIPLE (its devices call MPI from several "
                      "threads): %s",
                      level_name(provided),
                      self.own_init ? "this MPI library cannot provide it"
                                    : "initialise MPI with MPI_Init_thread("
                                      "..., MPI_THREAD_MULTIPLE, ...) or let "
                                      "libshmap initialise it");
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm)) != MPI_SUCCESS ||
      (rc = MPI_Comm_dup(MPI_COMM_WORLD, &acomm)) != MPI_SUCCESS)
    return mpi_fail(SHMAP_ESYS, "MPI_Comm_dup", rc);
  if ((rc = SHMAP__MPI_CHECK(MPI_Comm_set_errhandler, comm,
                             MPI_ERRORS_RETURN)) ||
      (rc = SHMAP__MPI_CHECK(MPI_Comm_set_errhandler, acomm,
                             MPI_ERRORS_RETURN)))
    return rc;
  if (!self.own_init)
    atexit(exit_in_map);
  int key;
  if ((rc = SHMAP__MPI_CHECK(MPI_Comm_create_keyval, MPI_COMM_NULL_COPY_FN,
                             self_delete, &key, NULL)) ||
      (rc = SHMAP__MPI_CHECK(MPI_Comm_set_attr, MPI_COMM_SELF, key, NULL)) ||
      (rc = SHMAP__MPI_CHECK(MPI_Comm_rank, comm, &self.rank)) ||
      (rc = SHMAP__MPI_CHECK(MPI_Comm_size, comm, &self.size)))
    return rc;
  self.mpi = true;
  hosts = shmap__calloc((size_t)self.size, sizeof *hosts);
  byes = shmap__calloc((size_t)self.size, sizeof *byes);
  spare_recs = shmap__calloc((size_t)self.size, sizeof *spare_recs);
  if (!hosts || !byes || !spare_recs || uv_mutex_init(&spare_lock) != 0)
    return shmap__err(SHMAP_ENOMEM, "out of memory for %d process names",
                      self.size);
  memcpy(hosts[self.rank], self.host, sizeof self.host);
  /* Every process initialises here in the same order of library calls,
   * before any map, so nothing can be failing yet. */
  rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hosts, 64, MPI_CHAR,
                     comm);
  if (rc != MPI_SUCCESS)
    return mpi_fail(SHMAP_ESYS, "MPI_Allgather of the host names", rc);
  return 0;
}
#else
void *shmap__proc_comm(void) { return NULL; }
int shmap__mpi_check(int err, const char *fn)
{
  (void)fn;
  return err;
}
#endif

static void init(void)
{
  if (gethostname(self.host, sizeof self.host - 1) != 0)
    strcpy(self.host, "?");
#ifdef SHMAP_HAVE_MPI
  init_rc = init_mpi();
  if (init_rc)
    snprintf(init_msg, sizeof init_msg, "%s", shmap__errbuf());
#endif
}

int shmap__proc_init(void)
{
  uv_once(&init_once, init);
  if (init_rc)
    shmap__err_set(init_msg);
  return init_rc;
}

const shmap__proc *shmap__proc_self(void) { return &self; }

static const char *host_of(int rank)
{
  return hosts && rank >= 0 && rank < self.size ? hosts[rank] : self.host;
}

const char *shmap__proc_host(int rank) { return host_of(rank); }

void shmap__proc_suffix(const shmap_mesh *mesh, int dev, char *buf, size_t n)
{
  buf[0] = '\0';
  if (mesh->place && mesh->place->nproc > 1) {
    int r = mesh->place->owner[dev];
    snprintf(buf, n, " on process %d (host %s)", r, host_of(r));
  }
}


/* An empty placement of the mesh's devices, or SHMAP_ENOMEM. */
static int place_alloc(const shmap_mesh *mesh, shmap__place **out)
{
  shmap__place *p = shmap__calloc(1, sizeof *p);
  if (p) {
    p->owner = shmap__calloc((size_t)mesh->ndev, sizeof *p->owner);
    p->local = shmap__calloc((size_t)mesh->ndev, sizeof *p->local);
  }
  if (!p || !p->owner || !p->local) {
    shmap__place_free(p);
    return shmap__err(SHMAP_ENOMEM, "out of memory placing %d devices",
                      mesh->ndev);
  }
  *out = p;
  return 0;
}

/* ---- placement ---------------------------------------------------------- */

void shmap__place_free(shmap__place *p)
{
  if (p) {
    shmap__proc_mesh_close(p->pm);
    free(p->owner);
    free(p->local);
    free(p);
  }
}

static void mesh_text(const shmap_mesh *mesh, char *buf, size_t n)
{
  buf[0] = '\0';
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(buf, n, "%s%s=%d", a ? ", " : "", mesh->names[a], mesh->sizes[a]);
}

int shmap__place_new(const shmap_mesh *mesh, const int axes[], int naxes,
                     shmap__place **out)
{
  int R = self.size;
  long long P = 1;
  for (int i = 0; i < naxes; i++)
    P *= mesh->sizes[axes[i]];
  if (P % R != 0) {
    char mt[320], at[320];
    mesh_text(mesh, mt, sizeof mt);
    if (naxes == mesh->naxes)
      return shmap__err(SHMAP_EINVAL,
                        "mesh \"%s\" has %d devices, which the %d processes of "
                        "this MPI job cannot share equally: the number of "
                        "processes must divide the number of devices",
                        mt, mesh->ndev, R);
    shmap__axes_format(mesh, axes, naxes, at, sizeof at);
    return shmap__err(SHMAP_EINVAL,
                      "process axes %s of mesh \"%s\" have %lld coordinate%s, "
                      "which the %d processes of this MPI job cannot share "
                      "equally: the number of processes must divide the "
                      "product of the process axes' sizes",
                      at, mt, P, P == 1 ? "" : "s", R);
  }
  shmap__place *p;
  int rc = place_alloc(mesh, &p);
  if (rc)
    return rc;
  p->nproc = R;
  p->self = self.rank;
  p->naxes = naxes;
  memcpy(p->axes, axes, sizeof(int) * (size_t)naxes);
  long long per = P / R;
  int c[SHMAP_MAX_AXES];
  for (int d = 0; d < mesh->ndev; d++) {
    shmap__mesh_coords(mesh, d, c);
    long long idx = 0;
    for (int i = 0; i < naxes; i++)
      idx = idx * mesh->sizes[axes[i]] + c[axes[i]];
    p->owner[d] = (int)(idx / per);
    if (p->owner[d] == p->self)
      p->local[p->nlocal++] = d;
  }
  *out = p;
  return 0;
}

/* A new mesh: place it when MPI is in use.  Called by mesh.c. */
int shmap__place_default(shmap_mesh *mesh)
{
  int rc = shmap__proc_init();
  if (rc)
    return rc;
  if (!self.mpi)
    return 0;
  int axes[SHMAP_MAX_AXES];
  for (int a = 0; a < mesh->naxes; a++)
    axes[a] = a;
  return shmap__place_new(mesh, axes, mesh->naxes, &mesh->place);
}

int shmap__place_sub(shmap_mesh *mesh, const shmap_mesh *parent,
                     const int pdev[])
{
  if (!parent->place)
    return 0;
  const shmap__place *pp = parent->place;
  shmap__place *p;
  int rc = place_alloc(mesh, &p);
  if (rc)
    return rc;
  p->nproc = pp->nproc;
  p->self = pp->self;
  p->naxes = 0; /* chosen by the parent's placement, not by axes */
  for (int d = 0; d < mesh->ndev; d++) {
    p->owner[d] = pp->owner[pdev[d]];
    if (p->owner[d] == p->self)
      p->local[p->nlocal++] = d;
  }
  mesh->place = p;
  return 0;
}

/* ---- waiting for one request --------------------------------------------- */

#ifdef SHMAP_HAVE_MPI
typedef struct reqs_wait {
  MPI_Request *reqs;
  int n, rc;
} reqs_wait;

/* One MPI_Test per request: MPICH declares MPI_STATUSES_IGNORE as a
 * zero-length array, which GCC's -Wstringop-overflow rejects in
 * MPI_Testall.  A completed request tests as complete again. */
static void check_byes(void);

static bool reqs_done(void *arg)
{
  reqs_wait *w = arg;
  int done = 1;
  check_byes();
  for (int k = 0; k < w->n; k++) {
    int one = 0;
    int rc = MPI_Test(&w->reqs[k], &one, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      w->rc = rc;
      return true;
    }
    done &= one;
  }
  return done;
}

int shmap__mpi_wait_all(int n, void *requests, const char *what)
{
  /* Polled (a peer may still be computing for seconds, and its cores may
   * be ours: shmap__poll_until yields them, then naps). */
  reqs_wait w = {.reqs = requests, .n = n, .rc = MPI_SUCCESS};
  shmap__poll_until(NULL, NULL, reqs_done, &w, NULL);
  return w.rc != MPI_SUCCESS ? mpi_fail(SHMAP_ESYS, what, w.rc) : 0;
}

int shmap__mpi_wait(void *request)
{
  return shmap__mpi_wait_all(1, request, "waiting for another process");
}

/*
 * Library calls.  Every process makes the same library calls in the same
 * order; a program that does not (a process skipping a call after a
 * check that came out differently, say) would otherwise leave the others
 * waiting in an MPI operation that never completes.  So every call that
 * exchanges data between processes outside a map (a map itself,
 * shmap_array_to_host, a transfer, creating and releasing a mesh) first
 * agrees on what it is: one small gather, over the mesh's communicator, of
 * a description naming the call and its mesh.  Processes in different
 * calls on one mesh meet there, since each call's first operation on that
 * communicator is that gather, and each returns the same SHMAP_EMISMATCH
 * error naming both calls; no process goes on into its call's own
 * exchange.  (Calls on different meshes may legitimately come in different
 * orders, from threads of their own, so two processes waiting on two
 * different meshes are not told apart from slow ones.)
 *
 * Verdicts.  The description also carries each process's verdict on its
 * own arguments (0, or the error code and the start of its message) and
 * a description of the arguments that must be equal everywhere (specs,
 * counts, flags, shapes of host inputs).  A call that one process rejects
 * is thus rejected on every process, with the code of the lowest process
 * that rejected it and a message naming that process and its reason; a
 * call made with different arguments is a SHMAP_EMISMATCH naming two
 * processes' arguments.  Either way no process goes on into the call's
 * own exchange, and the next call pairs as it should.
 *
 * Goodbyes.  A process that ends (MPI_Finalize, which exit() reaches
 * through the library's own finalisation) first tells every other process
 * how many calls it agreed on.  A process waiting in a later call, which
 * that process will never join, reports it and aborts the job
 * (MPI_Abort) instead of hanging.  A process that calls exit() while a map
 * runs (from a body, say) aborts the job at once: the other processes'
 * devices wait for its devices.
 */

static _Atomic uint64_t host_seq; /* calls agreed on (or being agreed on) */
static const char *_Atomic host_op;
static _Atomic int maps_running;

void shmap__proc_map_running(int delta) { atomic_fetch_add(&maps_running, delta); }

/* After a message on stderr: the launcher forwards a process's output
 * through a pipe, and MPICH's tears the job down on MPI_Abort before it
 * has read the last lines; a moment first keeps the message. */
static void abort_job(void)
{
  fflush(stderr);
  struct timespec ts = {0, 200000000};
  nanosleep(&ts, NULL);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void shmap__proc_abort(const char *why)
{
  fprintf(stderr, "libshmap: process %d (host %s): %s: aborting the job\n",
          self.rank, self.host, why);
  abort_job();
}

static void exit_in_map(void)
{
  int fin = 0;
  if (SHMAP__MPI_CHECK(MPI_Finalized, &fin) || fin || !self.mpi ||
      self.size < 2 || atomic_load(&maps_running) == 0)
    return;
  fprintf(stderr,
          "libshmap: process %d (host %s) exits while a map runs; the other "
          "processes' devices would wait for its devices: aborting the job\n",
          self.rank, self.host);
  abort_job();
}

static void take_byes(void);

static void say_goodbye(void)
{
  if (acomm == MPI_COMM_NULL || self.size < 2 || !byes)
    return;
  uint64_t seq = atomic_load(&host_seq);
  MPI_Request *r = shmap__calloc((size_t)self.size, sizeof *r);
  if (!r)
    return; /* the others then wait, as without goodbyes */
  int n = 0;
  for (int p = 0; p < self.size; p++)
    if (p != self.rank &&
        SHMAP__MPI_CHECK(MPI_Isend, &seq, 1, MPI_UINT64_T, p, TAG_BYE, acomm,
                         &r[n]) == 0)
      n++;
  /* Then wait for everybody's goodbye, outside MPI_Finalize: a process
   * that waits for this one in a later call aborts the job meanwhile (see
   * check_byes), and MPI_Abort ends a job cleanly only while no process
   * is inside MPI_Finalize. */
  for (;;) {
    take_byes();
    int missing = 0;
    for (int p = 0; p < self.size; p++)
      missing += p != self.rank && !atomic_load(&byes[p]);
    if (!missing)
      break;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  /* The job is ending: a send that fails leaves its message set. */
  for (int i = 0; i < n; i++)
    (void)SHMAP__MPI_CHECK(MPI_Wait, &r[i], MPI_STATUS_IGNORE);
  free(r);
}

/* Receive the goodbyes that arrived. */
static void take_byes(void)
{
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (SHMAP__MPI_CHECK(MPI_Iprobe, MPI_ANY_SOURCE, TAG_BYE, acomm, &flag,
                         &st) ||
        !flag)
      break;
    uint64_t seq = 0;
    if (SHMAP__MPI_CHECK(MPI_Recv, &seq, 1, MPI_UINT64_T, st.MPI_SOURCE,
                         TAG_BYE, acomm, MPI_STATUS_IGNORE))
      break;
    atomic_store(&byes[st.MPI_SOURCE], seq + 1);
  }
}

/* Take in goodbyes; abort the job when a process that said one will never
 * join the call this process is in. */
static void check_byes(void)
{
  if (acomm == MPI_COMM_NULL || !byes)
    return;
  take_byes();
  uint64_t cur = atomic_load(&host_seq);
  for (int p = 0; p < self.size; p++) {
    uint64_t b = atomic_load(&byes[p]);
    if (!b || b - 1 >= cur)
      continue;
    const char *op = atomic_load(&host_op);
    fprintf(stderr,
            "libshmap: process %d (host %s) ended after %llu library calls "
            "that exchange data between processes, while process %d (host "
            "%s) waits for it in %s (call %llu): aborting the job (every "
            "process must make the same library calls; see shmap-mpi(7))\n",
            p, host_of(p), (unsigned long long)(b - 1), self.rank, self.host,
            op ? op : "a library call", (unsigned long long)cur);
    abort_job();
  }
}

static uint64_t text_hash(const char *s)
{
  return shmap__hash_str(shmap__hash_init(), s);
}

/* `msg` without a leading "op: " (the agreed message names op once). */
static const char *reason_of(const char *op, const char *msg)
{
  size_t n = strlen(op);
  if (strncmp(msg, op, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
    return msg + n + 2;
  return msg;
}

/* Copy at most n - 1 bytes of s, marking a cut with "...". */
static void copy_cut(char *dst, size_t n, const char *s)
{
  size_t len = strlen(s);
  if (len < n) {
    memcpy(dst, s, len + 1);
    return;
  }
  memcpy(dst, s, n - 4);
  memcpy(dst + n - 4, "...", 4);
}

/* Whether two processes are in the same call.  A process that rejected
 * the creation of a mesh has no mesh to describe ("creating a mesh" where
 * the others say "creating a mesh (mesh 3: i=4)"): the names of the calls
 * are compared then. */
static bool same_call(const hrec *a, const hrec *b)
{
  if (strcmp(a->what, b->what) == 0)
    return true;
  const hrec *bare = a->rc && !strstr(a->what, " (mesh ")   ? a
                     : b->rc && !strstr(b->what, " (mesh ") ? b
                                                            : NULL;
  if (!bare)
    return false;
  const char *full = (bare == a ? b : a)->what;
  size_t n = strlen(bare->what);
  return strncmp(full, bare->what, n) == 0 &&
         strncmp(full + n, " (mesh ", 7) == 0;
}

int shmap__host_agree_call(const char *op, const shmap_mesh *mesh,
                           const char *what, const char *args, int rc)
{
  if (!self.mpi || self.size < 2)
    return rc;
  /* A process out of memory still takes part, with that as its verdict:
   * the others would wait for it for ever.  The spare table, kept from
   * the start, serves one such agreement at a time. */
  hrec *all = shmap__calloc((size_t)self.size, sizeof *all);
  bool spare = !all;
  if (spare) {
    uv_mutex_lock(&spare_lock);
    all = spare_recs;
    memset(all, 0, (size_t)self.size * sizeof *all);
    if (!rc)
      rc = shmap__err(SHMAP_ENOMEM, "out of memory");
  }
  char reason[SHMAP__MSG_MAX];
  snprintf(reason, sizeof reason, "%s", rc ? shmap__errbuf() : "");
  uint64_t seq = atomic_fetch_add(&host_seq, 1) + 1;
  atomic_store(&host_op, op);
  hrec *mine = &all[self.rank];
  mine->seq = seq;
  mine->rc = rc;
  if (rc)
    copy_cut(mine->msg, sizeof mine->msg, reason_of(op, reason));
  if (args) {
    mine->hash = text_hash(args);
    copy_cut(mine->args, sizeof mine->args, args);
  }
  char axes[80] = "";
  for (int a = 0; mesh && a < mesh->naxes; a++)
    shmap__cat(axes, sizeof axes, "%s%s=%d", a ? ", " : "", mesh->names[a],
               mesh->sizes[a]);
  if (mesh)
    snprintf(mine->what, sizeof mine->what, "%s (mesh %d: %s)", what,
             mesh->serial, axes);
  else
    snprintf(mine->what, sizeof mine->what, "%s", what);
  /* Over the mesh's own communicator: calls on different meshes may come
   * from different threads, in an order that differs between processes
   * (a pipeline with a thread per stage); the calls on one mesh may not.
   * A mesh being created has none yet: meshes are created in the same
   * order everywhere. */
  int tag;
  MPI_Comm *mc = mesh ? shmap__proc_mesh_comm(mesh, &tag) : NULL;
  MPI_Request req;
  int arc = SHMAP__MPI_CHECK(MPI_Iallgather, MPI_IN_PLACE, 0,
                             MPI_DATATYPE_NULL, all, (int)sizeof *all,
                             MPI_BYTE, mc ? *mc : acomm, &req);
  if (arc == 0)
    arc = shmap__mpi_wait_all(1, &req, "agreeing on a library call");
  for (int p = 0; p < self.size; p++) {
    all[p].what[sizeof all[p].what - 1] = '\0';
    all[p].args[sizeof all[p].args - 1] = '\0';
    all[p].msg[sizeof all[p].msg - 1] = '\0';
  }
  for (int p = 1; arc == 0 && p < self.size; p++)
    if (!same_call(&all[p], &all[0]))
      arc = shmap__err(SHMAP_EMISMATCH,
                       "%s: the processes made different library calls: "
                       "process 0 (host %s) is in %s, its call %llu, and "
                       "process %d (host %s) in %s, its call %llu (every "
                       "process must make the same library calls in the same "
                       "order; see shmap-mpi(7))",
                       op, host_of(0), all[0].what,
                       (unsigned long long)all[0].seq, p, host_of(p),
                       all[p].what, (unsigned long long)all[p].seq);
  /* The same call everywhere: the lowest process that rejected it speaks
   * for all (its code, its reason). */
  for (int p = 0; arc == 0 && p < self.size; p++)
    if (all[p].rc != 0)
      arc = shmap__err(all[p].rc,
                       "%s: process %d (host %s) rejected the call: %s", op,
                       p, host_of(p), all[p].msg);
  for (int p = 1; arc == 0 && p < self.size; p++)
    if (all[p].hash != all[0].hash)
      arc = shmap__err(SHMAP_EMISMATCH,
                       "%s: the processes made the same call with different "
                       "arguments: process 0 (host %s) passed %s and process "
                       "%d (host %s) passed %s, in their call %llu (every "
                       "process must pass the same specs, counts and flags; "
                       "see shmap-mpi(7))",
                       op, host_of(0), all[0].args, p, host_of(p),
                       all[p].args, (unsigned long long)all[0].seq);
  if (spare)
    uv_mutex_unlock(&spare_lock);
  else
    free(all);
  return arc;
}

int shmap__host_agree(const char *op, const shmap_mesh *mesh, const char *what)
{
  return shmap__host_agree_call(op, mesh, what, NULL, 0);
}

int shmap__host_agree_entry(const char *op, const shmap_mesh *mesh,
                            const char *what, const char *args, int rc)
{
  if (!mesh || !mesh->place || mesh->place->nproc < 2 || shmap__current())
    return rc;
  return shmap__host_agree_call(op, mesh, what, args, rc);
}

#else
int shmap__host_agree_call(const char *op, const shmap_mesh *mesh,
                           const char *what, const char *args, int rc)
{
  (void)op; (void)mesh; (void)what; (void)args;
  return rc;
}
int shmap__host_agree(const char *op, const shmap_mesh *mesh, const char *what)
{
  (void)op; (void)mesh; (void)what;
  return 0;
}
int shmap__host_agree_entry(const char *op, const shmap_mesh *mesh,
                            const char *what, const char *args, int rc)
{
  (void)op; (void)mesh; (void)what; (void)args;
  return rc;
}
void shmap__proc_map_running(int delta) { (void)delta; }
#endif

/* ---- public --------------------------------------------------------------- */

SHMAP_EXTERN int shmap_process_rank(void)
{
  int rc = shmap__proc_init();
  return rc ? rc : self.rank;
}

SHMAP_EXTERN int shmap_process_count(void)
{
  int rc = shmap__proc_init();
  return rc ? rc : self.size;
}

SHMAP_EXTERN int shmap_mesh_set_process_axes(shmap_mesh *mesh, const char *axes)
{
  const char *op = "shmap_mesh_set_process_axes";
  if (!mesh || !axes)
    return shmap__err(SHMAP_EINVAL, "%s: NULL argument", op);
  int ax[SHMAP_MAX_AXES], n = 0;
  int rc = shmap__axes_parse(mesh, op, axes, ax, &n);
  if (rc)
    return rc;
  if (mesh->parent)
    return shmap__err(SHMAP_ESTATE,
                      "%s: a sub-mesh's devices run in the processes of its "
                      "parent's devices; choose the process axes of the root "
                      "mesh before slicing it", op);
  shmap__runtime *rt = mesh->rt;
  shmap__runtime_lock(rt);
  if (rt->devs || atomic_load(&mesh->refs) > 1) {
    shmap__runtime_unlock(rt);
    return shmap__err(SHMAP_ESTATE,
                      "%s: the mesh already %s; choose the process axes right "
                      "after creating it",
                      op, rt->devs ? "ran a map" : "holds sharded arrays");
  }
  shmap__place *p = NULL;
  if (self.mpi && (rc = shmap__place_new(mesh, ax, n, &p)) == 0) {
    p->pm = mesh->place->pm; /* the mesh keeps its communicator */
    mesh->place->pm = NULL;
    shmap__place_free(mesh->place);
    mesh->place = p;
  }
  shmap__runtime_unlock(rt);
  return rc;
}

SHMAP_EXTERN int shmap_mesh_device_process(const shmap_mesh *mesh, int device)
{
  if (!mesh)
    return shmap__err(SHMAP_EINVAL, "shmap_mesh_device_process: mesh is NULL");
  if (device < 0 || device >= mesh->ndev)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_mesh_device_process: device %d is out of range "
                      "[0, %d)", device, mesh->ndev);
  return mesh->place ? mesh->place->owner[device] : 0;
}
