/* SPDX-License-Identifier: MIT */
/*
 * test_trace.c - the Chrome trace: shmap_trace_start(path) ...
 * shmap_trace_stop() writes every device's bodies and collectives as JSON.
 *
 * Maps with psum, all_gather and ppermute run on a mesh i=2, j=2 and on a
 * 1-d mesh i=8 (destroyed before the trace stops, so its events come from
 * the library's "mesh gone" path); the file is read back with jansson
 * (duplicate keys refused) and checked: it parses; traceEvents is an
 * array; every event has name, ph, pid and tid; "X" events have ts >= 0 and
 * dur >= 0; per mesh (pid) the thread_name metadata gives exactly one track
 * per device, tids 1..ndev (device d is tid d + 1: trace tools set tid 0
 * aside), named "device 3 (i=1, j=1)"; every event has a cat; each device has
 * exactly one body event per map and one event per collective call, named
 * psum / all_gather / ppermute with args.axes naming the axes and
 * args.bytes equal to the byte size of the block passed; each collective
 * nests inside a body event of its track (1 us slack).
 * States: starting twice is SHMAP_ESTATE, stopping when not started is
 * SHMAP_ESTATE; a path that cannot be written is SHMAP_ESYS at start, and
 * one that becomes unwritable during the recording is SHMAP_ESYS at stop
 * (after which the next trace works).  SHMAP_TRACE=path: the test binary runs itself in a child
 * with that environment and the file written at exit is checked; with a
 * path that cannot be written, the child says so on stderr and runs on.
 * The library's own placement jobs are named for their function.
 * tests/test_trace_format.sh checks the same files with Python's json module
 * against the Trace Event Format's rules (tests/check-trace.py).
 * Consistency beyond the happy path: a map that fails while traced, and a
 * trace started while a map runs, still nest every collective in a body.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmap.h>

#include <jansson.h>

#include "testutil.h"

#define TIMEOUT 60
#define CHILD_ARG "--trace-child"
/* Rounding slack when comparing event times (microseconds). */
#define SLACK_US 1.0

static char *self_argv0;

/* ---- helpers ---------------------------------------------------------------- */

static void tmp_path(char *buf, size_t n, const char *tag)
{
  const char *dir = getenv("TMPDIR");
  snprintf(buf, n, "%s/shmap-trace-%s-%ld.json", dir && *dir ? dir : "/tmp",
           tag, (long)getpid());
}

/* The flags of every parse: the library writes each key once per object,
 * so a repeated key is an error rather than "the last one wins". */
#define JSON_FLAGS JSON_REJECT_DUPLICATES

static json_t *load(const char *path)
{
  size_t len = 0;
  char *text = tu_slurp(path, &len);
  ck_assert_msg(text, "cannot read the trace file %s: %s", path,
                strerror(errno));
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_FLAGS, &err);
  ck_assert_msg(root,
                "the trace file %s does not parse: %s (line %d, column %d)"
                "\n%.2000s",
                path, err.text, err.line, err.column, text);
  free(text);
  return root;
}

/* Member `key` of object v as a string or a number: NULL (false) when v is
 * not an object, has no such member or it has another type. */
static const char *get_str(const json_t *v, const char *key)
{
  return json_string_value(json_object_get(v, key));
}

static bool get_num(const json_t *v, const char *key, double *out)
{
  const json_t *x = json_object_get(v, key);
  if (!json_is_number(x))
    return false;
  *out = json_number_value(x);
  return true;
}

static const char *type_name(const json_t *v)
{
  static const char *const names[] = {
      [JSON_OBJECT] = "object", [JSON_ARRAY] = "array",
      [JSON_STRING] = "string", [JSON_INTEGER] = "number",
      [JSON_REAL] = "number",   [JSON_TRUE] = "boolean",
      [JSON_FALSE] = "boolean", [JSON_NULL] = "null"};
  return names[json_typeof(v)];
}

/* ---- what the maps do, and what the trace must say -------------------------- */

typedef struct coll_spec {
  const char *name;
  const char *axes[3]; /* names args.axes must contain */
  double bytes;
  const char *dtype;    /* args.dtype */
} coll_spec;

typedef struct mesh_spec {
  const char *text;     /* "i=2, j=2" */
  int naxes;
  const char *names[2];
  int sizes[2];
  int ndev;
  coll_spec colls[3];   /* in call order */
} mesh_spec;

/* Mesh i=2, j=2: psum over 'j' of f32[3]; all_gather over 'i' of f64[2,2]
 * (tiled); ppermute over ('i','j') of i32[5] (a ring). */
static const mesh_spec mesh2d = {
    "i=2, j=2", 2, {"i", "j"}, {2, 2}, 4,
    {{"psum", {"j"}, 12, "f32"}, {"all_gather", {"i"}, 32, "f64"},
     {"ppermute", {"i", "j"}, 20, "i32"}}};
/* Mesh i=8: psum over 'i' of f64[7]; all_gather over 'i' of i32[3]
 * (untiled); ppermute over 'i' of f32[9] (shift by one). */
static const mesh_spec mesh1d = {
    "i=8", 1, {"i"}, {8}, 8,
    {{"psum", {"i"}, 56, "f64"},
     {"all_gather", {"i"}, 12, "i32"},
     {"ppermute", {"i"}, 36, "f32"}}};

static void dev_name(const mesh_spec *ms, int dev, char *buf, size_t n)
{
  snprintf(buf, n, "device %d (", dev);
  int stride = ms->ndev;
  for (int a = 0; a < ms->naxes; a++) {
    stride /= ms->sizes[a];
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, "%s%s=%d", a ? ", " : "", ms->names[a],
             dev / stride % ms->sizes[a]);
  }
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, ")");
}

typedef struct probe {
  int bad; /* devices whose results were wrong */
} probe;

static int body_2d(shmap_ctx *ctx, void *arg)
{
  probe *p = arg;
  int dev = shmap_ctx_device(ctx);
  float a[3] = {(float)dev, 1, 2};
  shmap_block ba = {a, SHMAP_F32, 1, {3}};
  int rc = shmap_psum(ctx, &ba, "j");
  if (rc)
    return rc;
  double b[4] = {dev, dev, dev, dev};
  shmap_block bb = {b, SHMAP_F64, 2, {2, 2}};
  shmap_block *g = NULL;
  if ((rc = shmap_all_gather(ctx, &bb, "i", 0, 1, &g)))
    return rc;
  int32_t c[5] = {dev, dev, dev, dev, dev};
  shmap_block bc = {c, SHMAP_I32, 1, {5}};
  const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  if ((rc = shmap_ppermute(ctx, &bc, "('i','j')", 4, ring)))
    return rc;
  if (c[0] != (dev + 3) % 4 || a[1] != 2 || g->shape[0] != 4)
    p->bad++;
  return 0;
}

static int body_1d(shmap_ctx *ctx, void *arg)
{
  probe *p = arg;
  int dev = shmap_ctx_device(ctx);
  double a[7] = {dev};
  shmap_block ba = {a, SHMAP_F64, 1, {7}};
  int rc = shmap_psum(ctx, &ba, "i");
  if (rc)
    return rc;
  int32_t b[3] = {dev, 0, 0};
  shmap_block bb = {b, SHMAP_I32, 1, {3}};
  shmap_block *g = NULL;
  if ((rc = shmap_all_gather(ctx, &bb, "i", 0, 0, &g)))
    return rc;
  float c[9] = {(float)dev};
  shmap_block bc = {c, SHMAP_F32, 1, {9}};
  int shift[8][2];
  for (int r = 0; r < 8; r++) {
    shift[r][0] = r;
    shift[r][1] = (r + 1) % 8;
  }
  if ((rc = shmap_ppermute(ctx, &bc, "i", 8, (const int(*)[2])shift)))
    return rc;
  if (a[0] != 28 || c[0] != (float)((dev + 7) % 8) || g->rank != 2)
    p->bad++;
  return 0;
}

static void run_maps(shmap_mesh *m, shmap_body_fn body, int n)
{
  for (int k = 0; k < n; k++) {
    probe p = {0};
    int rc = shmap_map(m, body, &p, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_msg(rc == 0, "map %d fails: %d (%s): %s", k, rc,
                  shmap_strerror(rc), shmap_errmsg());
    ck_assert_msg(p.bad == 0, "map %d: wrong collective results", k);
  }
}

/* ---- checking a trace ------------------------------------------------------- */

static const json_t *events_of(const json_t *root)
{
  ck_assert_msg(json_is_object(root), "the trace is a %s, not an object",
                type_name(root));
  const json_t *ev = json_object_get(root, "traceEvents");
  ck_assert_msg(ev, "the trace has no traceEvents");
  ck_assert_msg(json_is_array(ev), "traceEvents is a %s, not an array",
                type_name(ev));
  return ev;
}

static double num(const json_t *e, const char *key, size_t i)
{
  double v = 0;
  ck_assert_msg(get_num(e, key, &v), "event %zu has no numeric \"%s\"", i,
                key);
  return v;
}

/* Checks every event's common fields.  tid is checked separately
 * (t_every_event_has_tid) except on "X" and thread metadata events. */
static void check_common(const json_t *ev)
{
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const json_t *e = json_array_get(ev, i);
    ck_assert_msg(json_is_object(e), "event %zu is a %s", i, type_name(e));
    const char *name = get_str(e, "name"), *ph = get_str(e, "ph");
    ck_assert_msg(name && *name, "event %zu has no name", i);
    ck_assert_msg(ph && strlen(ph) == 1, "event %zu (%s) has no ph", i, name);
    const char *cat = get_str(e, "cat");
    ck_assert_msg(cat && *cat, "event %zu (%s, ph %s) has no cat", i, name,
                  ph);
    double pid = num(e, "pid", i);
    ck_assert_msg(pid >= 0 && pid == (double)(long)pid,
                  "event %zu: pid %g is not an integer", i, pid);
    if (strcmp(ph, "X") == 0) {
      double ts = num(e, "ts", i), dur = num(e, "dur", i), tid = num(e, "tid", i);
      ck_assert_msg(ts >= 0, "event %zu (%s): ts %g < 0", i, name, ts);
      ck_assert_msg(dur >= 0, "event %zu (%s): dur %g < 0", i, name, dur);
      ck_assert_msg(tid >= 1 && tid == (double)(long)tid,
                    "event %zu: tid %g is not an integer >= 1", i, tid);
    } else {
      ck_assert_msg(strcmp(ph, "M") == 0, "event %zu (%s): unexpected ph %s",
                    i, name, ph);
    }
  }
}

/* The pid of the mesh described as `text`, from its process_name. */
static long pid_of(const json_t *ev, const char *text)
{
  char want[64];
  snprintf(want, sizeof want, "mesh %s (", text);
  long pid = -1;
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const json_t *e = json_array_get(ev, i);
    const char *name = get_str(e, "name");
    if (!name || strcmp(name, "process_name") != 0)
      continue;
    const char *pname = get_str(json_object_get(e, "args"), "name");
    ck_assert_msg(pname, "process_name event %zu has no args.name", i);
    if (strncmp(pname, want, strlen(want)) == 0) {
      ck_assert_msg(pid < 0, "two processes are named \"%s...\"", want);
      pid = (long)num(e, "pid", i);
    }
  }
  ck_assert_msg(pid >= 0, "no process_name \"%s...\" in the trace", want);
  return pid;
}

/* One mesh's tracks and events: nmaps maps ran during the trace. */
static void check_mesh(const json_t *ev, const mesh_spec *ms, int nmaps)
{
  long pid = pid_of(ev, ms->text);
  int tracks[64] = {0}, bodies[64] = {0}, colls[64][3];
  memset(colls, 0, sizeof colls);
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const json_t *e = json_array_get(ev, i);
    if ((long)num(e, "pid", i) != pid)
      continue;
    const char *name = get_str(e, "name"), *ph = get_str(e, "ph");
    if (strcmp(ph, "M") == 0) {
      if (strcmp(name, "thread_name") != 0)
        continue;
      double tid = num(e, "tid", i);
      ck_assert_msg(tid >= 1 && tid <= ms->ndev,
                    "mesh %s: a thread_name track has tid %g outside [1, %d] "
                    "(device d is tid d + 1)", ms->text, tid, ms->ndev);
      int t = (int)tid - 1;
      tracks[t]++;
      char want[96];
      dev_name(ms, t, want, sizeof want);
      const char *tname = get_str(json_object_get(e, "args"), "name");
      ck_assert_msg(tname && strcmp(tname, want) == 0,
                    "mesh %s: track %d is named \"%s\", want \"%s\"", ms->text,
                    t, tname ? tname : "(none)", want);
      continue;
    }
    double tid = num(e, "tid", i);
    ck_assert_msg(tid >= 1 && tid <= ms->ndev,
                  "mesh %s: event %zu (%s) has tid %g outside [1, %d]",
                  ms->text, i, name, tid, ms->ndev);
    int t = (int)tid - 1;
    const json_t *args = json_object_get(e, "args");
    if (strcmp(get_str(e, "cat"), "placement") == 0)
      continue; /* the library's own jobs: see t_placement_named */
    if (strcmp(name, "body") == 0) {
      bodies[t]++;
      double nc = -1;
      ck_assert_msg(get_num(args, "collectives", &nc) && nc == 3,
                    "mesh %s, device %d: a body event says %g collectives, "
                    "want 3", ms->text, t, nc);
      continue;
    }
    int c = 0;
    while (c < 3 && strcmp(ms->colls[c].name, name) != 0)
      c++;
    ck_assert_msg(c < 3, "mesh %s, device %d: unexpected event \"%s\"",
                  ms->text, t, name);
    colls[t][c]++;
    const coll_spec *cs = &ms->colls[c];
    const char *axes = get_str(args, "axes");
    double bytes = -1, call = -1;
    ck_assert_msg(axes, "mesh %s, device %d: %s event without args.axes",
                  ms->text, t, name);
    for (int a = 0; a < 3 && cs->axes[a]; a++) {
      char q[16];
      snprintf(q, sizeof q, "'%s'", cs->axes[a]);
      ck_assert_msg(strstr(axes, q),
                    "mesh %s, device %d: %s args.axes \"%s\" does not name "
                    "%s", ms->text, t, name, axes, q);
    }
    ck_assert_msg(get_num(args, "bytes", &bytes) && bytes == cs->bytes,
                  "mesh %s, device %d: %s args.bytes is %g, want %g (the "
                  "block's byte size)", ms->text, t, name, bytes, cs->bytes);
    const char *dt = get_str(args, "dtype");
    ck_assert_msg(dt && strcmp(dt, cs->dtype) == 0,
                  "mesh %s, device %d: %s args.dtype is %s, want %s", ms->text,
                  t, name, dt ? dt : "(none)", cs->dtype);
    ck_assert_msg(get_num(args, "call", &call) && call == c + 1,
                  "mesh %s, device %d: %s args.call is %g, want %d", ms->text,
                  t, name, call, c + 1);
    /* It nests inside a body event of the same track. */
    double ts = num(e, "ts", i), end = ts + num(e, "dur", i);
    bool nested = false;
    for (size_t j = 0; j < json_array_size(ev) && !nested; j++) {
      const json_t *b = json_array_get(ev, j);
      const char *bn = get_str(b, "name");
      if (strcmp(bn, "body") != 0 || (long)num(b, "pid", j) != pid ||
          num(b, "tid", j) != tid)
        continue;
      double bts = num(b, "ts", j), bend = bts + num(b, "dur", j);
      nested = ts >= bts - SLACK_US && end <= bend + SLACK_US;
    }
    ck_assert_msg(nested,
                  "mesh %s, device %d: %s [%.3f, %.3f] us is inside no body "
                  "event of its track", ms->text, t, name, ts, end);
  }
  for (int t = 0; t < ms->ndev; t++) {
    ck_assert_msg(tracks[t] == 1, "mesh %s: device %d has %d thread_name "
                  "tracks, want 1", ms->text, t, tracks[t]);
    ck_assert_msg(bodies[t] == nmaps, "mesh %s: device %d has %d body events, "
                  "want %d (one per map)", ms->text, t, bodies[t], nmaps);
    for (int c = 0; c < 3; c++)
      ck_assert_msg(colls[t][c] == nmaps,
                    "mesh %s: device %d has %d %s events, want %d", ms->text,
                    t, colls[t][c], ms->colls[c].name, nmaps);
  }
}

/* Record maps on both meshes: 2 on i=2, j=2 (which ran one before the
 * trace started), 3 on i=8 (destroyed before the trace stops). */
static void traced_session(const char *path)
{
  shmap_mesh *a = tu_mesh_new(mesh2d.text);
  run_maps(a, body_2d, 1); /* before the trace: not in it */
  int rc = shmap_trace_start(path);
  ck_assert_msg(rc == 0, "shmap_trace_start(%s) = %d: %s", path, rc,
                shmap_errmsg());
  shmap_mesh *b = tu_mesh_new(mesh1d.text);
  run_maps(a, body_2d, 2);
  run_maps(b, body_1d, 3);
  shmap_mesh_destroy(b);
  rc = shmap_trace_stop();
  ck_assert_msg(rc == 0, "shmap_trace_stop() = %d: %s", rc, shmap_errmsg());
  shmap_mesh_destroy(a);
}

static int count_named(const json_t *ev, const char *name)
{
  int n = 0;
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const char *en = get_str(json_array_get(ev, i), "name");
    n += en && strcmp(en, name) == 0;
  }
  return n;
}

static void check_session(const char *path)
{
  json_t *root = load(path);
  const json_t *ev = events_of(root);
  check_common(ev);
  ck_assert_msg(count_named(ev, "process_name") == 2,
                "the trace names %d processes, want 2 (one per mesh)",
                count_named(ev, "process_name"));
  check_mesh(ev, &mesh2d, 2);
  check_mesh(ev, &mesh1d, 3);
  json_decref(root);
}

/* ---- tests --------------------------------------------------------------- */

/* _i: 0 threads, 1 fibers */
START_TEST(t_trace_maps)
{
  tu_set_sched(_i);
  char path[256];
  tmp_path(path, sizeof path, "maps");
  traced_session(path);
  check_session(path);
  unlink(path);
}
END_TEST

/* Every event has name, ph, pid and tid, metadata included.
 * (The Trace Event Format lets process-wide metadata such as process_name
 * leave tid out; the requirement here is stricter.) */
START_TEST(t_every_event_has_tid)
{
  char path[256];
  tmp_path(path, sizeof path, "tid");
  traced_session(path);
  json_t *root = load(path);
  const json_t *ev = events_of(root);
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const json_t *e = json_array_get(ev, i);
    double v;
    ck_assert_msg(get_str(e, "name") && get_str(e, "ph") &&
                      get_num(e, "pid", &v),
                  "event %zu lacks name, ph or pid", i);
    ck_assert_msg(get_num(e, "tid", &v),
                  "event %zu (\"%s\", ph \"%s\") has no tid", i,
                  get_str(e, "name"), get_str(e, "ph"));
  }
  json_decref(root);
  unlink(path);
}
END_TEST

START_TEST(t_states)
{
  char p1[256], p2[256];
  tmp_path(p1, sizeof p1, "state1");
  tmp_path(p2, sizeof p2, "state2");
  ck_assert_int_eq(shmap_trace_stop(), SHMAP_ESTATE);
  ck_assert_msg(shmap_errmsg()[0], "stop when not started: empty message");
  ck_assert_int_eq(shmap_trace_start(NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_trace_start(""), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_trace_start(p1), 0);
  int rc = shmap_trace_start(p2);
  ck_assert_msg(rc == SHMAP_ESTATE, "starting twice = %d, want SHMAP_ESTATE",
                rc);
  ck_assert_msg(strstr(shmap_errmsg(), p1),
                "starting twice: the message does not name the trace being "
                "recorded (%s): %s", p1, shmap_errmsg());
  ck_assert_int_eq(shmap_trace_stop(), 0);
  ck_assert_int_eq(shmap_trace_stop(), SHMAP_ESTATE);
  ck_assert_msg(access(p2, F_OK) != 0, "the refused start created %s", p2);
  json_t *root = load(p1);
  check_common(events_of(root));
  json_decref(root);
  unlink(p1);

  /* A path that cannot be written at all: shmap_trace_start checks it
   * and refuses with SHMAP_ESYS, naming it; nothing is recorded. */
  const char *bad = "/nonexistent-shmap-dir/sub/trace.json";
  rc = shmap_trace_start(bad);
  ck_assert_msg(rc == SHMAP_ESYS, "start with an unwritable path = %d (%s), "
                "want SHMAP_ESYS", rc, shmap_strerror(rc));
  ck_assert_msg(strstr(shmap_errmsg(), bad),
                "the message does not name the path: %s", shmap_errmsg());
  ck_assert_int_eq(shmap_trace_stop(), SHMAP_ESTATE);

  /* A path that stops being writable during the recording (its directory
   * goes away): SHMAP_ESYS at stop, naming it; the recording has ended
   * anyway, and the next trace works. */
  char dir[] = "/tmp/shmap-trace-dir-XXXXXX", gone[320];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(gone, sizeof gone, "%s/trace.json", dir);
  ck_assert_int_eq(shmap_trace_start(gone), 0);
  shmap_mesh *m = tu_mesh_new(mesh2d.text);
  run_maps(m, body_2d, 1);
  unlink(gone); /* shmap_trace_start may have created it */
  ck_assert_int_eq(rmdir(dir), 0);
  rc = shmap_trace_stop();
  ck_assert_msg(rc == SHMAP_ESYS, "stop with an unwritable path = %d (%s), "
                "want SHMAP_ESYS", rc, shmap_strerror(rc));
  ck_assert_msg(strstr(shmap_errmsg(), gone),
                "the message does not name the path: %s", shmap_errmsg());
  ck_assert_int_eq(shmap_trace_stop(), SHMAP_ESTATE);
  ck_assert_int_eq(shmap_trace_start(p2), 0);
  run_maps(m, body_2d, 2);
  ck_assert_int_eq(shmap_trace_stop(), 0);
  shmap_mesh_destroy(m);
  root = load(p2);
  const json_t *ev = events_of(root);
  check_common(ev);
  /* Only this recording's maps: the failed one's events are gone. */
  check_mesh(ev, &mesh2d, 2);
  json_decref(root);
  unlink(p2);
}
END_TEST

/* A trace started while a map runs: what it records must still be
 * consistent (each collective inside a body of its track). */
typedef struct bg {
  shmap_mesh *m;
  int rc;
} bg;

static int body_late(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  tu_sleep_ms(300);
  return body_2d(ctx, &(probe){0});
}

static void *bg_map(void *arg)
{
  bg *b = arg;
  b->rc = shmap_map(b->m, body_late, NULL, 0, NULL, NULL, 0, NULL, NULL);
  return NULL;
}

START_TEST(t_start_during_map)
{
  char path[256];
  tmp_path(path, sizeof path, "during");
  bg b = {tu_mesh_new(mesh2d.text), -100};
  run_maps(b.m, body_2d, 1);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, bg_map, &b), 0);
  tu_sleep_ms(100);
  ck_assert_int_eq(shmap_trace_start(path), 0);
  pthread_join(t, NULL);
  ck_assert_msg(b.rc == 0, "the map fails: %d", b.rc);
  run_maps(b.m, body_2d, 1);
  ck_assert_int_eq(shmap_trace_stop(), 0);
  shmap_mesh_destroy(b.m);
  json_t *root = load(path);
  const json_t *ev = events_of(root);
  check_common(ev);
  /* Count what was recorded and check nesting through check_mesh's rules:
   * the map started before the trace may be left out entirely, but not
   * half (collectives without their body). */
  size_t bodies = 0, colls = 0;
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const char *ph = get_str(json_array_get(ev, i), "ph");
    const char *name = get_str(json_array_get(ev, i), "name");
    if (strcmp(ph, "X") != 0)
      continue;
    if (strcmp(name, "body") == 0)
      bodies++;
    else
      colls++;
  }
  ck_assert_msg(colls == 3 * bodies,
                "a trace started while a map ran has %zu body events but %zu "
                "collective events (want 3 per body: collectives recorded "
                "without their body)", bodies, colls);
  check_mesh(ev, &mesh2d, (int)(bodies / 4));
  json_decref(root);
  unlink(path);
}
END_TEST

/* Every collective event lies inside a body event of its track. */
static void check_nesting(const json_t *ev)
{
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const json_t *e = json_array_get(ev, i);
    const char *name = get_str(e, "name");
    if (strcmp(get_str(e, "ph"), "X") != 0 || strcmp(name, "body") == 0)
      continue;
    double pid = num(e, "pid", i), tid = num(e, "tid", i);
    double ts = num(e, "ts", i), end = ts + num(e, "dur", i);
    bool nested = false;
    for (size_t j = 0; j < json_array_size(ev) && !nested; j++) {
      const json_t *b = json_array_get(ev, j);
      if (strcmp(get_str(b, "name"), "body") != 0 ||
          num(b, "pid", j) != pid || num(b, "tid", j) != tid)
        continue;
      double bts = num(b, "ts", j), bend = bts + num(b, "dur", j);
      nested = ts >= bts - SLACK_US && end <= bend + SLACK_US;
    }
    ck_assert_msg(nested, "%s event %zu (pid %g, tid %g) [%.3f, %.3f] us is "
                  "inside no body event of its track", name, i, pid, tid, ts,
                  end);
  }
}

/* A map that fails while traced: device 1 returns -1 after 50 ms while the
 * others wait in psum.  The trace stays consistent: it parses, every device
 * has its body, the canceled calls nest in their bodies. */
static int body_fails(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  if (dev == 1) {
    tu_sleep_ms(50);
    return -1;
  }
  float a[3] = {0};
  shmap_block ba = {a, SHMAP_F32, 1, {3}};
  return shmap_psum(ctx, &ba, "i, j");
}

START_TEST(t_failed_map_traced)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", "threads", 1), 0);
  char path[256];
  tmp_path(path, sizeof path, "failed");
  shmap_mesh *m = tu_mesh_new(mesh2d.text);
  ck_assert_int_eq(shmap_trace_start(path), 0);
  int rc = shmap_map(m, body_fails, NULL, 0, NULL, NULL, 0, NULL, NULL);
  ck_assert_msg(rc == SHMAP_EBODY, "the failing map returned %d", rc);
  run_maps(m, body_2d, 1);
  ck_assert_int_eq(shmap_trace_stop(), 0);
  shmap_mesh_destroy(m);
  json_t *root = load(path);
  const json_t *ev = events_of(root);
  check_common(ev);
  check_nesting(ev);
  ck_assert_msg(count_named(ev, "body") == 8,
                "%d body events, want 8 (4 devices, 2 maps)",
                count_named(ev, "body"));
  json_decref(root);
  unlink(path);
}
END_TEST

/* The library's own allocation hook (src/alloc.c). */
void shmap__test_fail_alloc(long k);

static int body_psum_only(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  float v[4] = {1, 2, 3, 4};
  shmap_block b = {v, SHMAP_F32, 1, {4}};
  return shmap_psum(ctx, &b, "i");
}

/* Events that cannot be stored for lack of memory are not lost silently:
 * the file is still written and shmap_trace_stop says how many are
 * missing.  Walk the failing allocation until one hits the recorder
 * rather than the map itself. */
START_TEST(t_dropped_events_reported)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", "threads", 1), 0);
  char path[256];
  tmp_path(path, sizeof path, "dropped");
  shmap_mesh *m = tu_mesh_new(mesh2d.text);
  /* a first map starts the threads outside the walk */
  ck_assert_int_eq(shmap_map(m, body_psum_only, NULL, 0, NULL, NULL, 0, NULL,
                             NULL), 0);
  bool seen = false;
  for (long k = 1; k <= 40 && !seen; k++) {
    ck_assert_int_eq(shmap_trace_start(path), 0);
    shmap__test_fail_alloc(k);
    int rc = shmap_map(m, body_psum_only, NULL, 0, NULL, NULL, 0, NULL, NULL);
    shmap__test_fail_alloc(0);
    int stop = shmap_trace_stop();
    if (rc != 0) {
      ck_assert_msg(rc == SHMAP_ENOMEM, "k=%ld: map returned %d", k, rc);
      ck_assert_int_eq(stop, 0);
      continue;
    }
    if (stop == SHMAP_ENOMEM) {
      ck_assert_msg(strstr(shmap_errmsg(), "could not be recorded") != NULL,
                    "k=%ld: message: %s", k, shmap_errmsg());
      json_t *root = load(path); /* written anyway, and valid */
      check_common(events_of(root));
      json_decref(root);
      seen = true;
    } else {
      ck_assert_msg(stop == 0, "k=%ld: stop returned %d", k, stop);
    }
  }
  ck_assert_msg(seen, "no failing allocation reached the trace recorder");
  shmap_mesh_destroy(m);
  unlink(path);
}
END_TEST

/* SHMAP_TRACE: the child records everything and writes at exit. */
static int trace_child(void)
{
  shmap_mesh *a = NULL, *b = NULL;
  if (shmap_mesh_create(&a, mesh2d.text) || shmap_mesh_create(&b, mesh1d.text))
    return 2;
  for (int k = 0; k < 3; k++) {
    probe p = {0};
    if (k < 2 && shmap_map(a, body_2d, &p, 0, NULL, NULL, 0, NULL, NULL))
      return 3;
    if (shmap_map(b, body_1d, &p, 0, NULL, NULL, 0, NULL, NULL) || p.bad)
      return 4;
  }
  shmap_mesh_destroy(b);
  /* The library's own jobs too (tests/check-trace.py sees them). */
  shmap_array *z = NULL, *r = NULL;
  if (shmap_array_zeros(&z, a, "P('i')", SHMAP_F32, 1, (int64_t[]){8}) ||
      shmap_array_reshard(&r, z, "P('j')"))
    return 5;
  shmap_array_destroy(r);
  shmap_array_destroy(z);
  /* a stays alive: written from the live-mesh path at exit */
  return 0;
}

START_TEST(t_env)
{
  char path[256];
  tmp_path(path, sizeof path, "env");
  unlink(path);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv("SHMAP_TRACE", path, 1);
    execl("/proc/self/exe", self_argv0, CHILD_ARG, (char *)NULL);
    _exit(127);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the child (SHMAP_TRACE=%s) failed: status 0x%x", path, status);
  ck_assert_msg(access(path, R_OK) == 0,
                "SHMAP_TRACE=%s: no file written at exit", path);
  json_t *root = load(path);
  const json_t *ev = events_of(root);
  check_common(ev);
  check_mesh(ev, &mesh2d, 2);
  check_mesh(ev, &mesh1d, 3);
  json_decref(root);
  unlink(path);
}
END_TEST

/* The library's own jobs (placing, making and resharding arrays run as maps
 * on the devices) show under the public function's name in category
 * "placement", never as a user's "body": one event per device and call. */
static int init_iota(shmap_block *b, int device, const int coords[],
                     const int64_t offset[], void *arg)
{
  (void)device, (void)coords, (void)arg;
  float *f = b->data;
  for (int64_t k = 0; k < shmap_block_numel(b); k++)
    f[k] = (float)(offset[0] + k);
  return 0;
}

START_TEST(t_placement_named)
{
  tu_set_sched(_i);
  char path[256];
  tmp_path(path, sizeof path, "placement");
  shmap_mesh *m = tu_mesh_new(mesh2d.text);
  ck_assert_int_eq(shmap_trace_start(path), 0);
  static const float host[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const float one = 1;
  shmap_array *a, *b, *c, *d, *e;
  ck_assert_int_eq(shmap_array_from_host_sharded(&a, m, "P('i')", SHMAP_F32,
                                                 1, (int64_t[]){8}, host), 0);
  ck_assert_int_eq(shmap_array_reshard(&b, a, "P('j')"), 0);
  ck_assert_int_eq(shmap_array_zeros(&c, m, "P('i')", SHMAP_F32, 1,
                                     (int64_t[]){8}), 0);
  ck_assert_int_eq(shmap_array_fill(&d, m, "P('j')", SHMAP_F32, 1,
                                    (int64_t[]){8}, &one), 0);
  ck_assert_int_eq(shmap_array_init(&e, m, "P(('i','j'))", SHMAP_F32, 1,
                                    (int64_t[]){8}, init_iota, NULL), 0);
  run_maps(m, body_2d, 1);
  ck_assert_int_eq(shmap_trace_stop(), 0);
  shmap_array *all[] = {a, b, c, d, e};
  for (int k = 0; k < 5; k++)
    shmap_array_destroy(all[k]);
  shmap_mesh_destroy(m);

  json_t *root = load(path);
  const json_t *ev = events_of(root);
  check_common(ev);
  check_mesh(ev, &mesh2d, 1);
  static const char *jobs[] = {"shmap_array_from_host_sharded",
                               "shmap_array_reshard", "shmap_array_zeros",
                               "shmap_array_fill", "shmap_array_init"};
  for (int k = 0; k < 5; k++) {
    int n = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
      const json_t *x = json_array_get(ev, i);
      if (strcmp(get_str(x, "name"), jobs[k]) != 0)
        continue;
      n++;
      ck_assert_msg(strcmp(get_str(x, "cat"), "placement") == 0 &&
                        strcmp(get_str(x, "ph"), "X") == 0,
                    "%s event %zu: cat \"%s\", ph \"%s\"; want an X event "
                    "of category placement", jobs[k], i,
                    get_str(x, "cat"), get_str(x, "ph"));
    }
    ck_assert_msg(n == 4, "%d %s events, want 4 (one per device)", n,
                  jobs[k]);
  }
  ck_assert_msg(count_named(ev, "body") == 4,
                "%d body events, want 4: the library's jobs are not bodies",
                count_named(ev, "body"));
  json_decref(root);
  unlink(path);
}
END_TEST

/* SHMAP_TRACE naming a file that cannot be written: the program runs as
 * usual, and says once on stderr that no trace will be written and why. */
START_TEST(t_env_unwritable)
{
  const char *bad = "/nonexistent-shmap-dir/t.json";
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    setenv("SHMAP_TRACE", bad, 1);
    execl("/proc/self/exe", self_argv0, CHILD_ARG, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char err[4096];
  size_t len = 0;
  ssize_t n;
  while (len < sizeof err - 1 &&
         (n = read(fds[0], err + len, sizeof err - 1 - len)) > 0)
    len += (size_t)n;
  err[len] = 0;
  close(fds[0]);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the child (SHMAP_TRACE=%s) failed: status 0x%x; stderr:\n%s",
                bad, status, err);
  char want[256];
  snprintf(want, sizeof want,
           "shmap: SHMAP_TRACE=%s: no trace will be written: "
           "shmap_trace_start: cannot write %s: No such file or directory\n",
           bad, bad);
  ck_assert_msg(strcmp(err, want) == 0, "stderr is\n%s\nwant\n%s", err,
                want);
}
END_TEST

/* The reader is strict: what it must accept and refuse, so that "the trace
 * parses" means valid JSON (RFC 8259), not what a lenient reader takes. */
START_TEST(t_reader_strict)
{
  static const char *good[] = {
      "{}", "[]", " [1, -2.5e3, 0, 0.25, true, false, null] ",
      "{\"a\":{\"b\":[{\"c\":\"d\\\"\\\\\\/\\n\\u00e9\\ud83d\\ude00\"}]}}",
      "\"\"", "-0", "1E+2"};
  static const char *bad[] = {
      "", "[1,]", "{\"a\":1,}", "{a:1}", "[01]", "[1.]", "[.5]", "[1e]",
      "\"a\nb\"", "[\"\\x\"]", "[\"\\ud83d\"]", "{\"a\" 1}", "[1] x", "[",
      "{\"a\":}", "tru", "[-]", "[1 2]", "'a'", "{\"a\":1,\"a\":2}"};
  json_error_t err;
  for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
    json_t *v = json_loadb(good[k], strlen(good[k]),
                           JSON_FLAGS | JSON_DECODE_ANY, &err);
    ck_assert_msg(v, "the reader refuses %s: %s", good[k], err.text);
    json_decref(v);
  }
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    json_t *v = json_loadb(bad[k], strlen(bad[k]),
                           JSON_FLAGS | JSON_DECODE_ANY, &err);
    ck_assert_msg(!v, "the reader accepts %s", bad[k]);
    ck_assert_msg(err.text[0], "the reader refuses %s without a message",
                  bad[k]);
  }
  const char *t = "{\"x\":[1,{\"s\":\"caf\\u00e9\"}],\"n\":-12.5}";
  json_t *v = json_loadb(t, strlen(t), JSON_FLAGS, &err);
  ck_assert_ptr_nonnull(v);
  double n = 0;
  ck_assert(get_num(v, "n", &n) && n == -12.5);
  const json_t *x = json_object_get(v, "x");
  ck_assert(json_is_array(x) && json_array_size(x) == 2);
  ck_assert_str_eq(get_str(json_array_get(x, 1), "s"), "caf\xc3\xa9");
  json_decref(v);
}
END_TEST

static Suite *suite(void)
{
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("trace");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, t_reader_strict);
  tcase_add_loop_test(tc, t_trace_maps, 0, 2);
  tcase_add_test(tc, t_every_event_has_tid);
  tcase_add_test(tc, t_states);
  tcase_add_test(tc, t_failed_map_traced);
  tcase_add_test(tc, t_dropped_events_reported);
  tcase_add_test(tc, t_start_during_map);
  tcase_add_test(tc, t_env);
  tcase_add_test(tc, t_env_unwritable);
  tcase_add_loop_test(tc, t_placement_named, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv)
{
  self_argv0 = argv[0];
  if (argc > 1 && strcmp(argv[1], CHILD_ARG) == 0)
    return trace_child();
  return tu_run_suite(suite());
}
