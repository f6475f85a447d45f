/* SPDX-License-Identifier: MIT */
/* run.c - one map call from the caller's side: validate, agree, prepare
 * the devices' contexts, run the bodies, then check and assemble the
 * outputs; and one device's part of it. */
#include "map/map.h"

#include "coll/async.h"
#include "hash.h"
#include "settings.h"
#include "proc/proc.h"
#include "rehearse/rehearse.h"
#include "sched/trace.h"
#include "settings.h"
#include "transport/mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one device's part of a map ------------------------------------------ */

/* Device dev's input blocks: borrowed from the arrays when they have the
 * map's layout, else built in its arena.  False on failure. */
static bool device_inputs(shmap__job *job, shmap_ctx *ctx)
{
  int dev = ctx->dev;
  for (int k = 0; k < job->nin; k++) {
    const shmap__in_info *ii = &job->ins[k];
    shmap_array *a = ii->view ? ii->view : job->in[k];
    if (ii->borrow) {
      ctx->in[k] = &a->blocks[dev];
      ctx->shared++;
      continue;
    }
    shmap__chunk *c = shmap__arena_alloc(ctx, a->dtype, a->rank, ii->bshape,
                                         SHMAP__CHUNK_IN, false);
    if (!c) {
      shmap__dev_fail(ctx, "input", SHMAP_ENOMEM, "%s", shmap__errbuf());
      return false;
    }
    shmap__gather_block(a, job->mesh, &ii->spec, ii->bshape, dev,
                        c->block.data, &ctx->moved);
    ctx->built++;
    ctx->in[k] = &c->block;
  }
  return true;
}

/* After the body returned rc (it began at t0): the trace, a failure for
 * a non-zero return, the requests it left open.  Returns when it ended. */
static uint64_t device_body_end(shmap_ctx *ctx, uint64_t t0, int rc)
{
  shmap__dev *self = &ctx->rt->devs[ctx->dev];
  uint64_t t1 = shmap__set_state(self, SHMAP__ST_DONE, 0, shmap__now_state());
  if (shmap__tracing())
    shmap__trace_body(self, t0, t1, ctx->seq, ctx->job_name);
  if (rc != 0)
    shmap__body_returned(ctx, rc);
  /* Requests the body left open fail the map (coll/async.c). */
  shmap__async_body_end(ctx);
  return t1;
}

/* One device's part of a map (the runtime's job function). */
static void run_device(shmap__job *job, int dev)
{
  shmap_ctx *ctx = &job->ctx[dev];
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[dev];
  /* Under MPI another process runs this device: nothing to do here. */
  if (!shmap__dev_local(rt->mesh, dev))
    return;
  if (ctx->host != dev) {
    shmap__map_replica(job, dev);
    return;
  }
  self->ctx = ctx;
  atomic_store_explicit(&self->dbg.nest, shmap__nest_push(0, job->manual),
                        memory_order_relaxed);
  shmap__set_current(ctx);
  /* One clock read per state change that takes time: the watchdog and the
   * trace show when each began (a read is tens of nanoseconds here, and a
   * device of an empty map made five). */
  uint64_t t = shmap__set_state(self, SHMAP__ST_INPUTS, 0, shmap__now_state());
  if (device_inputs(job, ctx) && !atomic_load(&rt->abort)) {
    /* The body is called from here, so that a debugger's backtrace shows
     * it right above this function. */
    uint64_t t0 = shmap__set_state(self, SHMAP__ST_BODY, 0,
                                   ctx->built ? shmap__now_state() : t);
    int rc = job->body(ctx, job->arg);
    t = device_body_end(ctx, t0, rc);
  } else {
    t = shmap__now_state();
  }
  shmap__set_state(self, SHMAP__ST_DONE, 0, t);
  shmap__set_current(NULL);
  self->ctx = NULL;
  atomic_store_explicit(&self->dbg.nest, 0, memory_order_relaxed);
  if (job->replicas)
    shmap__release_replicas(job, dev);
  /* Peers waiting for this device in a collective must learn that it
   * left, in this process or another. */
  shmap__comm_finish(ctx->comm, dev);
}

/* ---- the caller's side ----------------------------------------------------- */

/* A map's tables of inputs and outputs live on the caller's stack when
 * the map has at most this many of each (calloc, unlike malloc, takes the
 * C library's slow path: four per map cost about a quarter of an empty
 * map's instructions). */
#define MAP_FEW 4

/* What one map call holds from its start to its clean-up. */
typedef struct map_frame {
  shmap__job job;
  shmap__spec *ospec;   /* the outputs' resolved specs */
  shmap_array **res;    /* the outputs until they are handed out */
  shmap_block **slots;  /* the contexts' block tables */
  bool locked;          /* the runtime lock and a mesh reference are held */
  const char *rehearse; /* the fabric to rehearse the map on, or NULL */
  bool async_check;     /* SHMAP_ASYNC_CHECK or SHMAP_REPLAY said so */
  shmap__in_info ins_local[MAP_FEW + 1];
  shmap__spec ospec_local[MAP_FEW + 1];
  shmap_array *res_local[MAP_FEW + 1];
} map_frame;

/* Zeroed room for n + 1 elements of `size` bytes: `local` (MAP_FEW + 1 of
 * them) when they fit, else the heap (NULL when out of memory). */
static void *map_table(void *local, size_t n, size_t size)
{
  if (n < MAP_FEW + 1) {
    memset(local, 0, (n + 1) * size);
    return local;
  }
  return shmap__calloc(n + 1, size);
}

static void map_table_free(void *p, const void *local)
{
  if (p != local)
    free(p);
}

/* The tables of inputs and outputs; rc: the verdict so far. */
static int frame_tables(map_frame *f, int rc)
{
  f->job.ins = map_table(f->ins_local, (size_t)f->job.nin, sizeof *f->job.ins);
  f->ospec = map_table(f->ospec_local, (size_t)f->job.nout, sizeof *f->ospec);
  f->res = map_table(f->res_local, (size_t)f->job.nout, sizeof *f->res);
  if (rc == 0 && (!f->job.ins || !f->ospec || !f->res))
    rc = shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
  return rc;
}

/*
 * What a process prepares on its own before the processes agree on the
 * map: the device contexts' tables and, on a mesh's first map, its threads
 * or fibers.  Under MPI a failure here (out of memory, no thread) is this
 * process's verdict in the agreement (proc.c, "Verdicts"), so every
 * process fails the map with its message.  After the agreement nothing
 * of a process's own may fail before its devices run: the others' devices
 * would wait for its devices' messages, which would never come (its
 * devices, once running, tell the others of their failures).
 */
static int frame_local(map_frame *f)
{
  shmap__job *job = &f->job;
  shmap_mesh *mesh = job->mesh;
  /* One allocation for the device contexts' block tables; both arrays are
   * kept from one map to the next. */
  size_t per = (size_t)job->nin + (size_t)job->nout;
  job->ctx = shmap__runtime_take(mesh->rt, 0, (size_t)mesh->ndev * sizeof *job->ctx);
  f->slots = shmap__runtime_take(mesh->rt, 1,
                                 ((size_t)mesh->ndev * per + 1) * sizeof *f->slots);
  if (!job->ctx || !f->slots)
    return shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory for %d devices",
                      mesh->ndev);
  return shmap__runtime_ready(mesh->rt);
}

/* Replicas, staged inputs and one context per device. */
static int frame_prepare(map_frame *f)
{
  shmap__job *job = &f->job;
  shmap_mesh *mesh = job->mesh;
  /* Replicas need each free-axis slice in one process (the host's body
   * and offers are in its memory); under MPI a slice that spans processes
   * makes every device run the body, each process on its own devices. */
  job->replicas = job->manual != shmap__mesh_all(mesh);
  for (int d = 0; job->replicas && mesh->place && d < mesh->ndev; d++)
    job->replicas = mesh->place->owner[d] ==
                    mesh->place->owner[shmap__representative(mesh, job->manual, d)];
  int rc = shmap__map_stage_inputs(job);
  if (rc)
    return rc;
  size_t per = (size_t)job->nin + (size_t)job->nout;
  for (int d = 0; d < mesh->ndev; d++) {
    shmap_ctx *ctx = &job->ctx[d];
    ctx->rt = mesh->rt;
    ctx->job = job;
    ctx->comm = &job->comm;
    ctx->src_wait = shmap__comm_src_wait;
    ctx->dev = d;
    ctx->nin = job->nin;
    ctx->nout = job->nout;
    shmap__mesh_coords(mesh, d, ctx->coords);
    ctx->in = f->slots + (size_t)d * per;
    ctx->out = ctx->in + job->nin;
    ctx->manual = job->manual;
    ctx->host = job->replicas ? shmap__representative(mesh, job->manual, d) : d;
    atomic_store(&ctx->offer, NULL);
    atomic_store(&ctx->body_done, 0);
  }
  return 0;
}

/* The devices' counts of one map, into the mesh's statistics. */
static void frame_stats(const shmap__job *job)
{
  shmap_stats st = {.maps = 1};
  for (int d = 0; d < job->mesh->ndev; d++) {
    const shmap_ctx *ctx = &job->ctx[d];
    st.blocks_shared += ctx->shared;
    st.blocks_built += ctx->built;
    st.bytes_host += ctx->moved.host;
    st.bytes_local += ctx->moved.local;
    st.bytes_moved += ctx->moved.moved;
    st.bytes_remote += ctx->remote;
  }
  shmap__mesh_stats_add(job->mesh, &st);
}

/* The bodies on every device.  One map at a time per mesh, from the
 * devices' start to the clean-up (outputs and freed blocks go back to the
 * devices' caches): a map from a second application thread waits here for
 * the first.  The map holds a reference to the mesh, so that a destroy
 * from another thread takes effect when the map returns. */
static int frame_run(map_frame *f)
{
  shmap__job *job = &f->job;
  shmap__runtime *rt = job->mesh->rt;
  shmap__mesh_retain(job->mesh);
  shmap__runtime_lock(rt);
  f->locked = true;
  int rc = shmap__comm_open(&job->comm, rt);
  /* Off by default: one branch on a pointer that is NULL. */
  shmap__rehearsal *rh = NULL;
  if (f->rehearse && rc == 0)
    rh = shmap__rehearse_begin(rt, f->rehearse);
  /* Contexts start zeroed (shmap__runtime_take): counting is off. */
  for (int d = 0; rh && d < job->mesh->ndev; d++)
    job->ctx[d].mem.on = true;
  /* Under SHMAP_ASYNC_CHECK=1 blocks get pages of their own, which an
   * asynchronous collective's start may protect until its wait. */
  rt->async_check = f->async_check || shmap__setting_async_forced();
  shmap__arena_set_paged(rt->async_check);
  if (rc == 0) {
    shmap__proc_map_running(1);
    rc = shmap__runtime_run(rt, job, run_device);
    shmap__proc_map_running(-1);
    shmap__comm_close(&job->comm, rc != 0 || atomic_load(&rt->failed_dev) >= 0);
  }
  if (rh)
    shmap__rehearse_end(rh, job->ctx,
                        rc ? rc : atomic_load(&rt->failed_dev) >= 0);
  if (rc == 0)
    frame_stats(job);
  if (rc == 0 && atomic_load(&rt->failed_dev) >= 0) {
    rc = rt->fail_code;
    shmap__err_set(rt->fail_msg);
  }
  return rc;
}

/* The clean-up: what the map did not hand out goes back. */
static void frame_free(map_frame *f)
{
  shmap__job *job = &f->job;
  shmap_mesh *mesh = job->mesh;
  if (f->res)
    for (int k = 0; k < job->nout; k++)
      shmap_array_destroy(f->res[k]);
  if (job->ctx)
    for (int d = 0; d < mesh->ndev; d++)
      shmap__arena_clear(&job->ctx[d]);
  shmap__runtime_give(mesh->rt, 0, job->ctx);
  if (job->ins)
    for (int k = 0; k < job->nin; k++)
      shmap__stage_free(job->ins[k].view);
  map_table_free(job->ins, f->ins_local);
  shmap__runtime_give(mesh->rt, 1, f->slots);
  if (f->locked) {
    shmap__runtime_unlock(mesh->rt);
    shmap__mesh_release(mesh);
  }
  map_table_free(f->ospec, f->ospec_local);
  map_table_free(f->res, f->res_local);
}

/* flags_op: the public function whose flags to check (NULL: the
 * library's own map, flags not checked).  Under MPI a process that
 * rejects the call still takes part in the agreement, so that every
 * process rejects it (proc.c, "Verdicts"); only a NULL mesh, a mesh of
 * the parent of a fork and a call from a body return at once. */
static int map_once(const char *flags_op, shmap_mesh *mesh, shmap_body_fn body,
                    void *arg, int nin, shmap_array *const in[],
                    const char *const in_specs[], int nout, shmap_array *out[],
                    const char *const out_specs[], unsigned flags,
                    const char *manual_text, const char *rehearse,
                    int rc_opts, bool async_check)
{
  int rc = shmap__map_check_args(flags_op, mesh, body, nin, in, in_specs,
                                 nout, out, out_specs, flags);
  if (rc == 0)
    rc = rc_opts;
  if (!mesh)
    return rc;
  int now = shmap__map_check_caller(mesh, rc);
  if (now)
    return now;
  if (rc) {
    nin = nout = 0; /* the tables below stay empty, out[] untouched */
    in = NULL;
  }
  for (int k = 0; k < nout; k++)
    out[k] = NULL;
  map_frame f;
  f.job = (shmap__job){.mesh = mesh, .body = body, .arg = arg, .nin = nin,
                       .nout = nout, .in = in,
                       .manual = shmap__mesh_all(mesh)};
  f.slots = NULL;
  f.locked = false;
  f.async_check = async_check;
  /* The library's own maps (placing arrays) are not the user's kernel. */
  f.rehearse = flags_op ? shmap__rehearse_spec(rehearse) : NULL;
  if (rc == 0)
    rc = shmap__map_manual(&f.job, manual_text);
  rc = frame_tables(&f, rc);
  if (rc == 0)
    rc = shmap__map_check_specs(&f.job, in_specs, out_specs, f.ospec);
  if (rc == 0)
    rc = frame_local(&f);
  rc = shmap__map_agree(&f.job, f.ospec, flags, rc);
  if (rc == 0)
    rc = frame_prepare(&f);
  if (rc == 0) {
    rc = frame_run(&f);
    /* The lock stays held until the clean-up (see frame_run). */
    rc = shmap__map_outputs(&f.job, out_specs, f.ospec, flags, f.res, rc);
  }
  for (int k = 0; k < nout && rc == 0; k++) {
    out[k] = f.res[k];
    f.res[k] = NULL;
  }
  frame_free(&f);
  if (rc == 0 && mesh->rt->explore)
    shmap__explore_outputs(mesh->rt->explore, out, nout);
  return rc;
}

/* A map call's arguments, to make it again (SHMAP_EXPLORE). */
typedef struct map_call {
  const char *flags_op;
  shmap_mesh *mesh;
  shmap_body_fn body;
  void *arg;
  int nin, nout;
  shmap_array *const *in;
  const char *const *in_specs, *const *out_specs;
  unsigned flags;
  const char *manual_text, *rehearse;
  int rc_opts;
  bool async_check;
} map_call;

static int map_again(void *call, shmap_array *out[])
{
  map_call *c = call;
  return map_once(c->flags_op, c->mesh, c->body, c->arg, c->nin, c->in,
                  c->in_specs, c->nout, out, c->out_specs, c->flags,
                  c->manual_text, c->rehearse, c->rc_opts, c->async_check);
}

/* The map once, or under a schedule of the exploring mode (`schedule`:
 * its text), or under SHMAP_EXPLORE's schedules. */
static int map_run(const char *flags_op, shmap_mesh *mesh, shmap_body_fn body,
                   void *arg, int nin, shmap_array *const in[],
                   const char *const in_specs[], int nout, shmap_array *out[],
                   const char *const out_specs[], unsigned flags,
                   const char *manual_text, const char *rehearse,
                   int rc_opts, const char *schedule)
{
  /* One pass over the environment per map. */
  shmap__map_env env;
  shmap__settings_map(&env);
  map_call c = {flags_op, mesh,       body,    arg,          nin,
                nout,     in,         in_specs, out_specs,   flags,
                manual_text, rehearse, rc_opts, env.async_check};
  bool free_rt = mesh && !shmap__current() && mesh->rt && !mesh->rt->explore;
  if (schedule && free_rt && rc_opts == 0) {
    shmap__explore x = {0};
    snprintf(x.text, sizeof x.text, "%s", schedule);
    x.hash = x.out_hash = shmap__hash_init();
    mesh->rt->explore = &x;
    shmap__setting_async_check_force(1); /* as under shmap_explore() */
    int rc = map_again(&c, out);
    shmap__setting_async_check_force(-1);
    mesh->rt->explore = NULL;
    shmap__explore_free(&x);
    return rc;
  }
  int n = free_rt && nout >= 0 && (nout == 0 || out) ? env.explore : 0;
  if (n > 0 && rc_opts == 0) {
    /* Refused through the map's agreement, so that a process whose
     * environment differs fails with the others instead of waiting. */
    c.rc_opts = shmap__explore_one_process(mesh, "SHMAP_EXPLORE");
    if (c.rc_opts == 0)
      return shmap__explore_map(mesh, n, map_again, &c, out, nout);
  }
  return map_again(&c, out);
}

int shmap__map(shmap_mesh *mesh, shmap_body_fn body, void *arg, int nin,
               shmap_array *const in[], const char *const in_specs[],
               int nout, shmap_array *out[], const char *const out_specs[],
               unsigned flags)
{
  return map_run(NULL, mesh, body, arg, nin, in, in_specs, nout, out,
                 out_specs, flags, NULL, NULL, 0, NULL);
}

SHMAP_EXTERN int shmap_map_flags(shmap_mesh *mesh, shmap_body_fn body,
                                 void *arg, int nin, shmap_array *const in[],
                                 const char *const in_specs[], int nout,
                                 shmap_array *out[],
                                 const char *const out_specs[], unsigned flags)
{
  return map_run("shmap_map", mesh, body, arg, nin, in, in_specs, nout, out,
                 out_specs, flags, NULL, NULL, 0, NULL);
}

/* A schedule in the options: valid, and for a mesh whose devices all run
 * here; 0 or SHMAP_EINVAL with the message (refused through the map's
 * agreement, as the other options are). */
static int schedule_check(const shmap_mesh *mesh, const char *schedule)
{
  char st;
  int depth;
  uint64_t seed;
  if (!shmap__parse_schedule(schedule, &st, &depth, &seed))
    return shmap__err(SHMAP_EINVAL, "shmap_map_ex: schedule \"%.60s\" is "
                      "not valid (r.SEED or pDEPTH.SEED)", schedule);
  return mesh ? shmap__explore_one_process(mesh, "shmap_map_ex") : 0;
}

/* A fabric the caller named that cannot be loaded fails the map (the
 * setting SHMAP_REHEARSE instead only warns): 0 or its error code. */
static int rehearse_check(const char *spec)
{
  shmap_fabric *f;
  int code = shmap_fabric_load(&f, spec);
  if (code == 0) {
    shmap_fabric_free(f);
    return 0;
  }
  char why[SHMAP__MSG_MAX];
  snprintf(why, sizeof why, "%s", shmap_errmsg());
  return shmap__err(code, "shmap_map_ex: rehearse: %s", why);
}

SHMAP_EXTERN int shmap_map_ex(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                              int nin, shmap_array *const in[],
                              const char *const in_specs[], int nout,
                              shmap_array *out[],
                              const char *const out_specs[],
                              const shmap_map_opts *opts)
{
  static const shmap_map_opts defaults;
  if (!opts)
    opts = &defaults;
  /* A refusal of the options still takes part in the agreement under MPI
   * (map_run), so that uninitialised options on one process fail the call
   * on every process instead of leaving the others waiting. */
  int k = shmap__map_opts_reserved(opts), rc_opts = 0;
  if (k >= 0)
    rc_opts = shmap__err(SHMAP_EINVAL, "shmap_map_ex: " SHMAP__OPTS_RESERVED_MSG,
                         k, (unsigned long long)opts->reserved[k]);
  else if (opts->rehearse && *opts->rehearse)
    rc_opts = rehearse_check(opts->rehearse);
  if (rc_opts == 0 && opts->schedule)
    rc_opts = schedule_check(mesh, opts->schedule);
  return map_run("shmap_map_ex", mesh, body, arg, nin, in, in_specs, nout,
                 out, out_specs, opts->flags, opts->manual_axes,
                 opts->rehearse, rc_opts, opts->schedule);
}

SHMAP_EXTERN int shmap_map(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                           int nin, shmap_array *const in[],
                           const char *const in_specs[], int nout,
                           shmap_array *out[], const char *const out_specs[])
{
  return shmap_map_flags(mesh, body, arg, nin, in, in_specs, nout, out,
                         out_specs, 0);
}
