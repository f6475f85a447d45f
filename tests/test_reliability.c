/* SPDX-License-Identifier: MIT */
/*
 * test_reliability.c - hostile uses of the library that once hung, crashed
 * or corrupted memory, each in both scheduling modes:
 *   - two application threads mapping on one mesh at once (maps are
 *     serialised: every result is right, nothing is corrupted);
 *   - shmap_mesh_destroy of its own mesh inside a body (SHMAP_ESTATE, the
 *     map fails, the mesh still works), of another mesh (works);
 *   - the library's locks: statistics read and reset inside a body,
 *     shmap_trace_stop inside a body (SHMAP_ESTATE), bodies that create and
 *     destroy meshes while another thread starts and stops traces;
 *   - sizes that overflow: block element counts, negative dimensions in
 *     specs, global shapes beyond 2^62 bytes or elements;
 *   - the watchdog's words for a body that runs long without calling the
 *     library while other devices wait (fiber mode);
 *   - fork(): a child process uses the library after its parent did.
 * SHMAPTEST_REL_MAPS sets the number of maps per thread of the two-thread test
 * (default 300).
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define TIMEOUT 300

static const char *const modes[2] = {"threads", "fibers"};

static shmap_mesh *mesh_in(const char *mode, const char *text)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", mode, 1), 0);
  return tu_mesh_new(text);
}

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* ---- two application threads, one mesh ---------------------------------- */

#define N2 4096

typedef struct two {
  shmap_mesh *mesh;
  int maps;
  int id;
  char err[512];
} two;

/* out = all_gather(x) then psum over 'i' of the device's block. */
static int body_two(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *a = shmap_in(ctx, 0);
  if (!a)
    return -1;
  shmap_block *g = NULL;
  int rc = shmap_all_gather(ctx, a, "i", 0, 1, &g);
  if (rc)
    return rc;
  shmap_block *o = shmap_out_copy(ctx, 0, a);
  if (!o)
    return -1;
  if ((rc = shmap_psum(ctx, o, "i")))
    return rc;
  /* The gathered block is the whole input, on every device. */
  const float *gv = g->data;
  for (int e = 0; e < N2; e++)
    if (gv[e] != (float)e)
      return shmap_fail(ctx, "all_gather element %d is %g", e, (double)gv[e]);
  return shmap_block_free(ctx, g);
}

static void *thread_two(void *arg)
{
  two *t = arg;
  float host[N2]; /* one per thread */
  for (int e = 0; e < N2; e++)
    host[e] = (float)e;
  shmap_array *in = NULL;
  if (shmap_array_from_host(&in, SHMAP_F32, 1, (int64_t[]){N2}, host)) {
    snprintf(t->err, sizeof t->err, "from_host: %s", shmap_errmsg());
    return NULL;
  }
  for (int i = 0; i < t->maps && !t->err[0]; i++) {
    shmap_array *out = NULL;
    int rc = shmap_map(t->mesh, body_two, NULL, 1, &in, (const char *[]){"i"},
                       1, &out, (const char *[]){"i"});
    if (rc) {
      snprintf(t->err, sizeof t->err, "map %d: %d: %s", i, rc, shmap_errmsg());
      break;
    }
    float got[N2];
    if (shmap_array_to_host(out, got)) {
      snprintf(t->err, sizeof t->err, "to_host: %s", shmap_errmsg());
    } else {
      /* psum over the 4 devices of blocks of 1024: block k's element j
       * sums the four blocks' element j. */
      for (int e = 0; e < N2 && !t->err[0]; e++) {
        int j = e % (N2 / 4);
        float want = 0;
        for (int k = 0; k < 4; k++)
          want += (float)(k * (N2 / 4) + j);
        if (got[e] != want)
          snprintf(t->err, sizeof t->err, "map %d: element %d is %g, want %g",
                   i, e, (double)got[e], (double)want);
      }
    }
    shmap_array_destroy(out);
  }
  shmap_array_destroy(in);
  return NULL;
}

START_TEST(test_two_threads_one_mesh)
{
  const char *env = getenv("SHMAPTEST_REL_MAPS");
  int maps = env && *env ? atoi(env) : 300;
  for (int m = 0; m < 2; m++) {
    shmap_mesh *mesh = mesh_in(modes[m], "i=4");
    two t[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
      t[i] = (two){.mesh = mesh, .maps = maps, .id = i};
      ck_assert_int_eq(pthread_create(&th[i], NULL, thread_two, &t[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
      pthread_join(th[i], NULL);
      ck_assert_msg(!t[i].err[0], "%s, thread %d: %s", modes[m], i, t[i].err);
    }
    shmap_stats st;
    ck_assert_int_eq(shmap_mesh_stats(mesh, &st), 0);
    ck_assert_int_eq(st.maps, 2 * (uint64_t)maps);
    ck_assert_int_eq(shmap_mesh_destroy(mesh), 0);
  }
}
END_TEST

/* ---- destroying meshes inside a body --------------------------------------- */

typedef struct destroy_arg {
  shmap_mesh *own, *other;
  _Atomic int rc_own, rc_other;
  char msg[512];
} destroy_arg;

static int body_destroy(shmap_ctx *ctx, void *arg)
{
  destroy_arg *a = arg;
  if (shmap_ctx_device(ctx) != 1)
    return 0;
  int rc = shmap_mesh_destroy(a->other);
  atomic_store(&a->rc_other, rc);
  a->other = NULL;
  rc = shmap_mesh_destroy(a->own);
  snprintf(a->msg, sizeof a->msg, "%s", shmap_errmsg());
  atomic_store(&a->rc_own, rc);
  return rc;
}

static int body_noop(shmap_ctx *ctx, void *arg)
{
  (void)ctx;
  (void)arg;
  return 0;
}

START_TEST(test_destroy_inside_body)
{
  for (int m = 0; m < 2; m++) {
    destroy_arg a = {0};
    a.own = mesh_in(modes[m], "i=2, j=2");
    a.other = mesh_in(modes[m], "k=3");
    /* The other mesh has threads of its own to stop. */
    tu_map_ok(shmap_map(a.other, body_noop, NULL, 0, NULL, NULL, 0, NULL, NULL),
              "map on the other mesh");
    int rc = shmap_map(a.own, body_destroy, &a, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == SHMAP_ESTATE, "%s: map returned %d: %s", modes[m], rc,
                  shmap_errmsg());
    ck_assert_int_eq(atomic_load(&a.rc_other), 0);
    ck_assert_int_eq(atomic_load(&a.rc_own), SHMAP_ESTATE);
    const char *want = "shmap_mesh_destroy on device 1 (i=0, j=1): called from "
                       "inside a body of a map on this mesh";
    ck_assert_msg(has(a.msg, want), "%s: body saw \"%s\"", modes[m], a.msg);
    ck_assert_msg(has(shmap_errmsg(), want), "%s: map said \"%s\"", modes[m],
                  shmap_errmsg());
    /* Nothing was freed: the mesh runs maps and is destroyed normally. */
    tu_map_ok(shmap_map(a.own, body_noop, NULL, 0, NULL, NULL, 0, NULL, NULL),
              "map after the refused destroy");
    ck_assert_int_eq(shmap_mesh_destroy(a.own), 0);
    ck_assert_int_eq(shmap_mesh_destroy(NULL), 0);
  }
}
END_TEST

/* ---- locks: statistics and traces inside bodies ------------------------------- */

typedef struct lock_arg {
  const shmap_mesh *mesh;
  _Atomic int rc_stats, rc_stop, rc_start, bad;
  char stop_msg[512];
  const char *path;
} lock_arg;

static int body_locks(shmap_ctx *ctx, void *arg)
{
  lock_arg *a = arg;
  shmap_stats st;
  int rc = shmap_mesh_stats(a->mesh, &st);
  if (rc)
    atomic_store(&a->rc_stats, rc);
  /* The counters are the previous maps' (one so far). */
  if (st.maps != 1)
    atomic_store(&a->bad, (int)st.maps + 100);
  /* Every device has read the counters before device 0 resets them. */
  float v = 1;
  shmap_block b = {&v, SHMAP_F32, 0, {0}};
  if ((rc = shmap_psum(ctx, &b, "i")))
    return rc;
  if (shmap_ctx_device(ctx) == 0) {
    shmap_mesh_stats_reset((shmap_mesh *)a->mesh);
    rc = shmap_trace_stop();
    snprintf(a->stop_msg, sizeof a->stop_msg, "%s", shmap_errmsg());
    atomic_store(&a->rc_stop, rc);
    atomic_store(&a->rc_start, shmap_trace_start(a->path));
  }
  return 0;
}

START_TEST(test_locks_inside_body)
{
  char path[] = "/tmp/shmap_rel_traceXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  for (int m = 0; m < 2; m++) {
    shmap_mesh *mesh = mesh_in(modes[m], "i=4");
    tu_map_ok(shmap_map(mesh, body_noop, NULL, 0, NULL, NULL, 0, NULL, NULL),
              "first map");
    lock_arg a = {.mesh = mesh, .path = path};
    ck_assert_int_eq(shmap_trace_start(path), 0);
    tu_map_ok(shmap_map(mesh, body_locks, &a, 0, NULL, NULL, 0, NULL, NULL),
              "map reading statistics and stopping a trace");
    ck_assert_int_eq(atomic_load(&a.rc_stats), 0);
    ck_assert_msg(atomic_load(&a.bad) == 0, "%s: a body saw %d maps", modes[m],
                  atomic_load(&a.bad) - 100);
    ck_assert_int_eq(atomic_load(&a.rc_stop), SHMAP_ESTATE);
    ck_assert_msg(has(a.stop_msg, "shmap_trace_stop: called from inside a body"),
                  "%s: %s", modes[m], a.stop_msg);
    /* shmap_trace_start inside a body failed: a trace was still running. */
    ck_assert_int_eq(atomic_load(&a.rc_start), SHMAP_ESTATE);
    ck_assert_int_eq(shmap_trace_stop(), 0);
    shmap_stats st;
    ck_assert_int_eq(shmap_mesh_stats(mesh, &st), 0);
    /* Reset inside the second map, which counted itself when it ended. */
    ck_assert_int_eq(st.maps, 1);
    ck_assert_int_eq(shmap_mesh_destroy(mesh), 0);
  }
  unlink(path);
}
END_TEST

/* Bodies create, use and destroy meshes while another thread starts and
 * stops traces (it waits for the maps; the bodies wait for the registry). */
typedef struct churn {
  shmap_mesh *mesh;
  _Atomic int stop;
  _Atomic int err;
  const char *path;
} churn;

static int body_churn(shmap_ctx *ctx, void *arg)
{
  churn *c = arg;
  if (shmap_ctx_device(ctx) == 0) {
    shmap_mesh *m = NULL;
    if (shmap_mesh_create(&m, "k=2") != 0)
      atomic_store(&c->err, 1);
    else if (shmap_mesh_destroy(m) != 0)
      atomic_store(&c->err, 2);
  }
  float v = 1;
  shmap_block b = {&v, SHMAP_F32, 0, {0}};
  return shmap_psum(ctx, &b, "i");
}

static void *thread_traces(void *arg)
{
  churn *c = arg;
  while (!atomic_load(&c->stop)) {
    if (shmap_trace_start(c->path) == 0 && shmap_trace_stop() != 0)
      atomic_store(&c->err, 3);
  }
  return NULL;
}

START_TEST(test_meshes_in_bodies_while_tracing)
{
  char path[] = "/tmp/shmap_rel_churnXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  for (int m = 0; m < 2; m++) {
    churn c = {.mesh = mesh_in(modes[m], "i=3"), .path = path};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, thread_traces, &c), 0);
    for (int i = 0; i < 200; i++)
      tu_map_ok(shmap_map(c.mesh, body_churn, &c, 0, NULL, NULL, 0, NULL, NULL),
                "map creating and destroying a mesh");
    atomic_store(&c.stop, 1);
    pthread_join(th, NULL);
    ck_assert_msg(atomic_load(&c.err) == 0, "%s: step %d failed: %s", modes[m],
                  atomic_load(&c.err), shmap_errmsg());
    ck_assert_int_eq(shmap_mesh_destroy(c.mesh), 0);
  }
  unlink(path);
}
END_TEST

/* ---- sizes ------------------------------------------------------------------------ */

START_TEST(test_size_overflow)
{
  const int64_t big = ((int64_t)1 << 40);
  shmap_block b = {NULL, SHMAP_F32, 2, {big + 1, big}};
  ck_assert_int_eq(shmap_block_numel(&b), SHMAP_ESHAPE);
  ck_assert_msg(has(shmap_errmsg(), "shmap_block_numel: the shape is too large: "
                                    "at dimension 1"), "%s", shmap_errmsg());
  ck_assert_uint_eq(shmap_block_nbytes(&b), 0);
  ck_assert_msg(has(shmap_errmsg(), "shmap_block_nbytes: the shape is too large"),
                "%s", shmap_errmsg());
  shmap_block neg = {NULL, SHMAP_F32, 1, {-3}};
  ck_assert_int_eq(shmap_block_numel(&neg), SHMAP_ESHAPE);
  ck_assert_msg(has(shmap_errmsg(), "dimension 0 has negative size -3"), "%s",
                shmap_errmsg());
  /* Zero elements, but strides of the other dimensions still multiply. */
  shmap_block ok = {NULL, SHMAP_F64, 3, {0, big, 4}};
  ck_assert_int_eq(shmap_block_numel(&ok), 0);
  shmap_block wide = {NULL, SHMAP_F64, 3, {0, big, big}};
  ck_assert_int_eq(shmap_block_numel(&wide), SHMAP_ESHAPE);
  shmap_block fine = {NULL, SHMAP_F64, 2, {3, 5}};
  ck_assert_int_eq(shmap_block_numel(&fine), 15);
  ck_assert_uint_eq(shmap_block_nbytes(&fine), 120);

  shmap_mesh *mesh = tu_mesh_new("i=4, j=8");
  ck_assert_int_eq(shmap_spec_check(mesh, "i", 1, (int64_t[]){-4}), SHMAP_ESHAPE);
  ck_assert_msg(has(shmap_errmsg(), "spec \"i\": dimension 0 has negative size -4"),
                "%s", shmap_errmsg());
  ck_assert_int_eq(shmap_spec_check(mesh, "i", 1, (int64_t[]){INT64_MIN}),
                   SHMAP_ESHAPE);
  ck_assert_int_eq(shmap_spec_check(mesh, "", 2, (int64_t[]){4, -1}),
                   SHMAP_ESHAPE);
  ck_assert_int_eq(shmap_spec_check(mesh, "i", 2, (int64_t[]){big, big}),
                   SHMAP_ESHAPE);
  ck_assert_int_eq(shmap_spec_check(mesh, "i", 1, (int64_t[]){8}), 0);
  shmap_mesh_destroy(mesh);
}
END_TEST

typedef struct out_arg {
  int64_t shape[2];
  const shmap_block *user; /* also pass this block to a psum */
} out_arg;

static int body_out(shmap_ctx *ctx, void *arg)
{
  out_arg *a = arg;
  if (a->user)
    return shmap_psum(ctx, (shmap_block *)a->user, "i");
  return shmap_out(ctx, 0, SHMAP_F32, 2, a->shape) ? 0 : -1;
}

START_TEST(test_global_shape_overflow)
{
  for (int m = 0; m < 2; m++) {
    shmap_mesh *mesh = mesh_in(modes[m], "i=4, j=8");
    shmap_array *out = NULL;
    /* A block f32[0, 2^59] tiled 32 times: a dimension of 2^64. */
    out_arg a = {{0, (int64_t)1 << 59}, NULL};
    int rc = shmap_map(mesh, body_out, &a, 0, NULL, NULL, 1, &out,
                       (const char *[]){"P(None, ('i', 'j'))"});
    ck_assert_msg(rc == SHMAP_ESHAPE, "%s: %d: %s", modes[m], rc, shmap_errmsg());
    ck_assert_msg(has(shmap_errmsg(), "output 0: dimension 1 of the global shape "
                                      "would be 576460752303423488 x 32"),
                  "%s", shmap_errmsg());
    ck_assert_ptr_null(out);
    /* f32[0, 2^58] tiled 32 times: 2^63, past the 2^62 limit. */
    a.shape[1] = (int64_t)1 << 58;
    rc = shmap_map(mesh, body_out, &a, 0, NULL, NULL, 1, &out,
                   (const char *[]){"P(None, ('i', 'j'))"});
    ck_assert_msg(rc == SHMAP_ESHAPE, "%s: %d: %s", modes[m], rc, shmap_errmsg());
    /* The block itself too large. */
    a.shape[0] = ((int64_t)1 << 40) + 1;
    a.shape[1] = (int64_t)1 << 40;
    rc = shmap_map(mesh, body_out, &a, 0, NULL, NULL, 1, &out,
                   (const char *[]){"P()"});
    ck_assert_msg(rc == SHMAP_ESHAPE, "%s: %d: %s", modes[m], rc, shmap_errmsg());
    ck_assert_msg(has(shmap_errmsg(), "the shape is too large"), "%s",
                  shmap_errmsg());
    /* A user block whose element count overflows, passed to a psum. */
    float f = 0;
    shmap_block u = {&f, SHMAP_F32, 2, {((int64_t)1 << 40) + 1, (int64_t)1 << 40}};
    out_arg b = {{0, 0}, &u};
    rc = shmap_map(mesh, body_out, &b, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == SHMAP_ESHAPE, "%s: %d: %s", modes[m], rc, shmap_errmsg());
    ck_assert_msg(has(shmap_errmsg(), "psum over 'i'") &&
                      has(shmap_errmsg(), "the input block: the shape is too large"),
                  "%s", shmap_errmsg());
    /* A reasonable one still works. */
    a.shape[0] = 0;
    a.shape[1] = 3;
    tu_map_ok(shmap_map(mesh, body_out, &a, 0, NULL, NULL, 1, &out,
                        (const char *[]){"P(None, ('i', 'j'))"}),
              "zero-sized output");
    ck_assert_int_eq(shmap_array_shape(out)[1], 96);
    shmap_array_destroy(out);
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

/* ---- the watchdog names user synchronisation in fiber mode ------------------- */

typedef struct spin_arg {
  _Atomic int flag;
  _Atomic int gave_up;
} spin_arg;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Device 0 waits for a flag device 1 sets: fine with threads, a hang in
 * fiber mode when both share a worker (device 0 gives up after 3 s). */
static int body_spin(shmap_ctx *ctx, void *arg)
{
  spin_arg *a = arg;
  if (shmap_ctx_device(ctx) == 1) {
    atomic_store(&a->flag, 1);
    return 0;
  }
  double t0 = now_s();
  while (!atomic_load(&a->flag))
    if (now_s() - t0 > 3.0) {
      atomic_store(&a->gave_up, 1);
      break;
    }
  return 0;
}

START_TEST(test_watchdog_names_user_sync)
{
  for (int m = 0; m < 2; m++) {
    ck_assert_int_eq(setenv("SHMAP_WORKERS", "1", 1), 0);
    shmap_mesh *mesh = mesh_in(modes[m], "i=2");
    char path[] = "/tmp/shmap_rel_wdXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    ck_assert_int_eq(shmap_set_watchdog(0.5), 0);
    spin_arg a = {0};
    int rc = shmap_map(mesh, body_spin, &a, 0, NULL, NULL, 0, NULL, NULL);
    shmap_set_watchdog(0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *err = tu_slurp(path, NULL);
    unlink(path);
    ck_assert_ptr_nonnull(err);
    tu_map_ok(rc, "map with a spin");
    const char *hint = "likely cause: device 0 (i=0) has run its body for ";
    if (m == 0) {
      ck_assert_msg(!atomic_load(&a.gave_up), "threads: device 1 never set the "
                    "flag");
      ck_assert_msg(!strstr(err, "likely cause"), "threads: %s", err);
    } else {
      ck_assert(atomic_load(&a.gave_up));
      ck_assert_msg(strstr(err, hint) &&
                        strstr(err, "without calling a collective while device "
                                    "1 (i=1), which shares its worker thread, "
                                    "cannot start or resume; in fiber mode") &&
                        strstr(err, "devices may synchronise only through "
                                    "collectives"),
                    "fibers: stderr:\n%s", err);
    }
    free(err);
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

/* ---- fork() ------------------------------------------------------------------- */

#define BIGN ((int64_t)8 << 20) /* 32 MiB of f32: copies run on OpenMP */

static int body_copy(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *a = shmap_in(ctx, 0);
  if (!a || !shmap_out_copy(ctx, 0, a))
    return -1;
  float v = 1;
  shmap_block b = {&v, SHMAP_F32, 0, {0}};
  return shmap_psum(ctx, &b, "i");
}

/* One round trip of a large array through a map: 0 when right. */
static int round_trip(shmap_mesh *mesh, float *host, float *back)
{
  shmap_array *in = NULL, *out = NULL;
  if (shmap_array_from_host(&in, SHMAP_F32, 1, (int64_t[]){BIGN}, host))
    return 1;
  int rc = shmap_map(mesh, body_copy, NULL, 1, &in, (const char *[]){"i"}, 1,
                     &out, (const char *[]){"i"});
  shmap_array_destroy(in);
  if (rc)
    return 2;
  memset(back, 0, (size_t)BIGN * sizeof *back);
  rc = shmap_array_to_host(out, back);
  shmap_array_destroy(out);
  if (rc || memcmp(host, back, (size_t)BIGN * sizeof *back))
    return 3;
  return 0;
}

/* In the child: 0, or the number of the step that failed. */
static int child_steps(shmap_mesh *parent_mesh, shmap_array *parent_out,
                       float *host, float *back)
{
  alarm(60);
  /* Large copies of host arrays and of the parent's sharded array. */
  shmap_array *h = NULL;
  if (shmap_array_from_host(&h, SHMAP_F32, 1, (int64_t[]){BIGN}, host))
    return 10;
  if (shmap_array_to_host(h, back) || memcmp(host, back, (size_t)BIGN * 4))
    return 11;
  shmap_array_destroy(h);
  memset(back, 0, (size_t)BIGN * 4);
  if (shmap_array_to_host(parent_out, back) || memcmp(host, back, (size_t)BIGN * 4))
    return 12;
  shmap_array_destroy(parent_out);
  /* A map on the parent's mesh: refused, with a message. */
  if (shmap_map(parent_mesh, body_noop, NULL, 0, NULL, NULL, 0, NULL, NULL) !=
          SHMAP_ESTATE ||
      !strstr(shmap_errmsg(), "belong to the process that forked this one"))
    return 13;
  if (shmap_mesh_destroy(parent_mesh) != 0)
    return 14;
#if defined(__SANITIZE_THREAD__)
  /* ThreadSanitizer does not support starting threads in the child of a
   * multi-threaded process (it stops the process): the new mesh is
   * checked by the other builds. */
  return 0;
#endif
  /* A new mesh works. */
  shmap_mesh *m = NULL;
  if (shmap_mesh_create(&m, "i=4"))
    return 15;
  int rc = round_trip(m, host, back);
  if (rc)
    return 20 + rc;
  shmap_mesh_destroy(m);
  return 0;
}

START_TEST(test_fork)
{
  float *host = malloc((size_t)BIGN * sizeof *host);
  float *back = malloc((size_t)BIGN * sizeof *back);
  ck_assert(host && back);
  for (int64_t e = 0; e < BIGN; e++)
    host[e] = (float)(e % 1000003);
  for (int m = 0; m < 2; m++) {
    shmap_mesh *mesh = mesh_in(modes[m], "i=4");
    ck_assert_int_eq(round_trip(mesh, host, back), 0);
    shmap_array *in = NULL, *out = NULL;
    ck_assert_int_eq(shmap_array_from_host(&in, SHMAP_F32, 1, (int64_t[]){BIGN},
                                           host), 0);
    tu_map_ok(shmap_map(mesh, body_copy, NULL, 1, &in, (const char *[]){"i"}, 1,
                        &out, (const char *[]){"i"}), "map before fork");
    shmap_array_destroy(in);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
      _exit(child_steps(mesh, out, host, back));
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "%s: the child failed at step %d (status 0x%x)", modes[m],
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1, status);
    /* The parent goes on as before. */
    shmap_array_destroy(out);
    ck_assert_int_eq(round_trip(mesh, host, back), 0);
    shmap_mesh_destroy(mesh);
  }
  free(host);
  free(back);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("reliability");
  struct {
    const char *name;
    const TTest *test;
  } cases[] = {
      {"two_threads", test_two_threads_one_mesh},
      {"destroy_in_body", test_destroy_inside_body},
      {"locks", test_locks_inside_body},
      {"meshes_while_tracing", test_meshes_in_bodies_while_tracing},
      {"sizes", test_size_overflow},
      {"global_shape", test_global_shape_overflow},
      {"watchdog", test_watchdog_names_user_sync},
      {"fork", test_fork},
  };
  /* One tcase per area (CK_RUN_CASE=locks runs one). */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    TCase *tc = tcase_create(cases[i].name);
    tcase_set_timeout(tc, TIMEOUT);
    tcase_add_test(tc, cases[i].test);
    suite_add_tcase(s, tc);
  }
  return tu_run_suite(s);
}
