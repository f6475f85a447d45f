/* SPDX-License-Identifier: MIT */
/*
 * test_rehearse.c - rehearsed maps, in thread and fiber mode: a kernel's
 * predicted time on a small described fabric equals the alpha-beta values
 * computed by hand for each collective, annotated compute is priced as a
 * roofline, a request waited after compute costs only what the compute
 * did not hide, ppermute messages that share a link wait for each other,
 * a collective over two levels takes both, and SHMAP_REHEARSE turns a
 * rehearsal on without the option.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define TIMEOUT 30
#define NMODES 2
static const char *const modes[NMODES] = {"threads", "fibers"};

static void set_mode(int i)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", modes[i % NMODES], 1), 0);
  ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
}

/* A ring of 1e9 B/s per direction and 1 us per hop; a slow switch of
 * 1e8 B/s; a device of 1e12 FLOP/s, 1e11 B/s and 1e9 bytes. */
static const char fabric_text[] =
    "{\"name\":\"small\",\"device\":{\"flops\":1e12,"
    "\"memory_bandwidth\":1e11,\"memory_bytes\":1e9},"
    "\"levels\":[{\"name\":\"fast\",\"topology\":\"ring\",\"bandwidth\":1e9,"
    "\"hop_latency\":1e-6},{\"name\":\"slow\",\"topology\":\"switch\","
    "\"bandwidth\":1e8,\"hop_latency\":1e-5}],"
    "\"axes\":[{\"name\":\"i\",\"level\":\"slow\"},{\"name\":\"j\","
    "\"level\":\"fast\"}]}";

static char fabric_path[64];

/* The fabric above, with `memory` bytes per device when not NULL. */
static void fabric_file_mem(const char *memory)
{
  snprintf(fabric_path, sizeof fabric_path, "/tmp/shmap-rh-%d.json",
           (int)getpid());
  FILE *f = fopen(fabric_path, "w");
  ck_assert_ptr_nonnull(f);
  const char *at = strstr(fabric_text, "1e9}");
  if (memory)
    fprintf(f, "%.*s%s%s", (int)(at - fabric_text), fabric_text, memory,
            at + 3);
  else
    fputs(fabric_text, f);
  fclose(f);
}

static void fabric_file(void) { fabric_file_mem(NULL); }

enum { K_PSUM, K_OVERLAP, K_SHIFT1, K_SHIFT2, K_GATHER, K_A2A, K_SCATTER,
       K_MEASURED, K_TWO_LEVELS, K_GROUPS, K_RAGGED };

/* 1e6 f32 (4e6 bytes) per device, annotated compute of 1e9 FLOP (1 ms on
 * the device) where the case says. */
static int kernel(shmap_ctx *ctx, void *arg)
{
  int kind = *(int *)arg;
  int64_t shape[1] = {1000000};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, shape), *y = NULL;
  if (!x)
    return -1;
  int pairs[4][2], shift = kind == K_SHIFT2 ? 2 : 1;
  for (int r = 0; r < 4; r++)
    pairs[r][0] = r, pairs[r][1] = (r + shift) % 4;
  shmap_request *req;
  switch (kind) {
  case K_PSUM:
    shmap_cost(ctx, 1e9, 0);
    return shmap_psum(ctx, x, "j");
  case K_OVERLAP:
    if (shmap_psum_start(ctx, x, "j", &req))
      return -1;
    shmap_cost(ctx, 1e9, 0);
    return shmap_wait(ctx, &req);
  case K_SHIFT1:
  case K_SHIFT2:
    shmap_cost(ctx, 0, 0);
    return shmap_ppermute(ctx, x, "j", 4, pairs);
  case K_GATHER:
    shmap_cost(ctx, 0, 0);
    return shmap_all_gather(ctx, x, "j", 0, 1, &y);
  case K_A2A:
    shmap_cost(ctx, 0, 0);
    return shmap_all_to_all(ctx, x, "j", 0, 0, 1, &y);
  case K_SCATTER:
    shmap_cost(ctx, 0, 0);
    return shmap_psum_scatter(ctx, x, "j", 0, 1, &y);
  case K_TWO_LEVELS:
    shmap_cost(ctx, 0, 0);
    return shmap_psum(ctx, x, "('i', 'j')");
  case K_RAGGED: {
    /* A quarter of the block to each member of the group along 'j'. */
    int64_t q = 250000, in_off[4], sizes[4], out_off[4];
    int me = shmap_axis_index(ctx, "j");
    for (int r = 0; r < 4; r++)
      in_off[r] = r * q, sizes[r] = q, out_off[r] = me * q;
    y = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
    shmap_cost(ctx, 0, 0);
    return y ? shmap_ragged_all_to_all(ctx, x, y, in_off, sizes, out_off,
                                       sizes, "j")
             : -1;
  }
  case K_GROUPS: {
    static const int ranks[4] = {0, 1, 2, 3};
    shmap_groups g = {2, 2, ranks};
    shmap_cost(ctx, 0, 0);
    return shmap_psum_groups(ctx, x, "j", &g);
  }
  default:
    return shmap_psum(ctx, x, "j");
  }
}

/* The last report, parsed. */
static json_t *report(void)
{
  char buf[8192];
  int n = shmap_rehearse_report(buf, sizeof buf);
  ck_assert_int_gt(n, 0);
  ck_assert_int_lt(n, (int)sizeof buf);
  json_error_t e;
  json_t *j = json_loads(buf, 0, &e);
  ck_assert_msg(j != NULL, "report is not JSON: %s", buf);
  return j;
}

static double num(json_t *o, const char *key)
{
  json_t *v = json_object_get(o, key);
  ck_assert_msg(json_is_number(v), "no number %s", key);
  return json_number_value(v);
}

#define EQ(x, want) ck_assert_double_eq_tol((x), (want), (want) * 1e-9)

/* The first note of the last report run() read ("" with none). */
static char first_note[256];

/* Rehearse `kind` on mesh "i=2, j=4"; the predicted time and the exposed
 * communication of device (i=0, j=0). */
static void run(int kind, double *pred, double *exposed)
{
  fabric_file();
  shmap_mesh *m = tu_mesh_new("i=2, j=4");
  shmap_map_opts o = {.rehearse = fabric_path};
  tu_map_ok(shmap_map_ex(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL, &o),
            "rehearsed map");
  json_t *j = report();
  *pred = num(j, "predicted_s");
  json_t *d0 = json_array_get(json_object_get(j, "devices"), 0);
  *exposed = num(d0, "exposed_comm_s");
  json_t *n0 = json_array_get(json_object_get(j, "notes"), 0);
  snprintf(first_note, sizeof first_note, "%s",
           n0 ? json_string_value(n0) : "");
  ck_assert_str_eq(json_string_value(json_object_get(j, "fabric")), "small");
  ck_assert_str_eq(json_string_value(json_object_get(d0, "compute_from")),
                   kind == K_MEASURED ? "measured here" : "annotations");
  json_decref(j);
  shmap_mesh_destroy(m);
  unlink(fabric_path);
}

/* A fabric named in the options that cannot be loaded fails the map with
 * the loader's message; the mesh then runs the next map. */
START_TEST(bad_fabric)
{
  set_mode(_i);
  shmap_mesh *m = tu_mesh_new("i=2, j=4");
  int kind = 0;
  shmap_map_opts o = {.rehearse = "tpu-v9"};
  ck_assert_int_eq(
      shmap_map_ex(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL, &o),
      SHMAP_EINVAL);
  ck_assert_str_eq(shmap_errmsg(),
                   "shmap_map_ex: rehearse: shmap_fabric_load: 'tpu-v9' is "
                   "no preset (tpu-v5e-16x16, h100-8, h100-multinode) and "
                   "no .json file");
  o.rehearse = "/nonexistent/fabric.json";
  ck_assert_int_ne(
      shmap_map_ex(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL, &o), 0);
  ck_assert_ptr_nonnull(strstr(shmap_errmsg(), "shmap_map_ex: rehearse: "));
  ck_assert_ptr_nonnull(strstr(shmap_errmsg(), "/nonexistent/fabric.json"));
  o.rehearse = NULL;
  tu_map_ok(shmap_map_ex(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL, &o),
            "the next map");
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(collectives)
{
  set_mode(_i);
  double p, x;
  /* 1 ms of compute, then a psum of 4e6 bytes over a ring of 4:
   * 2 * 4e6 * 3/4 / 2e9. */
  run(K_PSUM, &p, &x);
  EQ(p, 1e-3 + 3e-3);
  EQ(x, 3e-3);
  /* all_gather into 1.6e7 bytes: 1.6e7 * 3/4 / 2e9. */
  run(K_GATHER, &p, &x);
  EQ(p, 6e-3);
  /* all_to_all: 2 * 2 * 1e6 bytes cross the cut on 2 links of 1e9. */
  run(K_A2A, &p, &x);
  EQ(p, 2e-3);
  /* psum_scatter: 4e6 * 3/4 / 2e9. */
  run(K_SCATTER, &p, &x);
  EQ(p, 1.5e-3);
  /* Over both levels: reduce-scatter on the ring (1.5 ms), then on the
   * switch of 2 (1e6 / 2 / 1e8 = 5 ms), and the all-gathers back. */
  run(K_TWO_LEVELS, &p, &x);
  EQ(p, 2 * (1.5e-3 + 5e-3));
  ck_assert_str_eq(first_note, "");
  /* Groups of 2 along 'j': a psum over a ring of 2, 2 * 4e6 / 2 / 2e9,
   * and the report says how it priced them. */
  /* ragged_all_to_all from the bytes each member received, 4e6: as the
   * all_to_all above, after the exchange of sizes (3 x 4 int64 per
   * member, latency bound: 2 hops of 1 us). */
  run(K_RAGGED, &p, &x);
  EQ(p, 2e-3 + 2e-6);
  run(K_GROUPS, &p, &x);
  EQ(p, 2e-3);
  ck_assert_str_eq(first_note, "axis_index_groups priced as groups of 2 on "
                               "level fast, as if their members were "
                               "neighbours");
}
END_TEST

START_TEST(overlap_and_contention)
{
  set_mode(_i);
  double p, x;
  /* The psum (3 ms) started before 1 ms of compute and waited after it:
   * 2 ms exposed. */
  run(K_OVERLAP, &p, &x);
  EQ(p, 3e-3);
  EQ(x, 2e-3);
  /* A shift by one: one message per link, 4e6 / 1e9. */
  run(K_SHIFT1, &p, &x);
  EQ(p, 4e-3);
  /* A shift by two on a ring of 4: two hops, and two messages share a
   * link in each direction. */
  run(K_SHIFT2, &p, &x);
  EQ(p, 8e-3);
  /* Compute measured here: at least the communication. */
  run(K_MEASURED, &p, &x);
  ck_assert(p >= 3e-3 && x <= p);
}
END_TEST

START_TEST(environment)
{
  set_mode(_i);
  fabric_file();
  char out[64];
  snprintf(out, sizeof out, "/tmp/shmap-rh-%d.out", (int)getpid());
  unlink(out);
  ck_assert_int_eq(setenv("SHMAP_REHEARSE", fabric_path, 1), 0);
  ck_assert_int_eq(setenv("SHMAP_REHEARSE_OUT", out, 1), 0);
  shmap_mesh *m = tu_mesh_new("i=2, j=4");
  int kind = K_PSUM;
  tu_map_ok(shmap_map(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL), "map");
  tu_map_ok(shmap_map(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL), "map");
  shmap_mesh_destroy(m);
  size_t len;
  char *text = tu_slurp(out, &len);
  ck_assert_ptr_nonnull(text);
  int lines = 0;
  for (size_t i = 0; i < len; i++)
    lines += text[i] == '\n';
  ck_assert_int_eq(lines, 2);
  ck_assert_ptr_nonnull(strstr(text, "\"predicted_s\":0.004"));
  free(text);
  unlink(out);
  unlink(fabric_path);
  unsetenv("SHMAP_REHEARSE");
  unsetenv("SHMAP_REHEARSE_OUT");
}
END_TEST

START_TEST(memory_overflow)
{
  set_mode(_i);
  /* 1e7 bytes per device: the 4e6-byte block and its 1.6e7-byte
   * all_gather do not fit. */
  fabric_file_mem("1e7");
  shmap_mesh *m = tu_mesh_new("i=2, j=4");
  shmap_map_opts o = {.rehearse = fabric_path};
  int kind = K_GATHER;
  tu_map_ok(shmap_map_ex(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL, &o),
            "rehearsed map");
  json_t *j = report();
  json_t *over = json_object_get(j, "memory_overflow");
  ck_assert_int_eq((int)json_array_size(over), 8);
  ck_assert_str_eq(json_string_value(json_array_get(over, 5)),
                   "map 1: device 5 (i=1, j=1) holds 20000000 bytes of "
                   "blocks at its peak, over the 10000000 bytes of a small "
                   "device; live then: 0 input blocks (0 bytes), 0 output "
                   "blocks (0 bytes), 2 scratch blocks (20000000 bytes)");
  json_t *d0 = json_array_get(json_object_get(j, "devices"), 0);
  ck_assert_int_eq((int)json_integer_value(json_object_get(d0, "peak_bytes")),
                   20000000);
  json_decref(j);
  shmap_mesh_destroy(m);
  unlink(fabric_path);
}
END_TEST

/* With a trace recording, each device has a second track with its
 * predicted schedule: the psum 1 ms after the body's start, for 3 ms. */
START_TEST(trace_timeline)
{
  set_mode(_i);
  fabric_file();
  char trace[64];
  snprintf(trace, sizeof trace, "/tmp/shmap-rh-%d.trace", (int)getpid());
  ck_assert_int_eq(shmap_trace_start(trace), 0);
  shmap_mesh *m = tu_mesh_new("i=2, j=4");
  shmap_map_opts o = {.rehearse = fabric_path};
  int kind = K_PSUM;
  tu_map_ok(shmap_map_ex(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL, &o),
            "rehearsed map");
  shmap_mesh_destroy(m);
  ck_assert_int_eq(shmap_trace_stop(), 0);
  json_error_t e;
  json_t *t = json_load_file(trace, 0, &e);
  ck_assert_ptr_nonnull(t);
  json_t *evs = json_object_get(t, "traceEvents");
  int psums = 0, bodies = 0, tracks = 0;
  for (size_t i = 0; i < json_array_size(evs); i++) {
    json_t *ev = json_array_get(evs, i);
    const char *name = json_string_value(json_object_get(ev, "name"));
    const char *cat = json_string_value(json_object_get(ev, "cat"));
    json_t *args = json_object_get(ev, "args");
    if (strcmp(name, "thread_name") == 0 &&
        strstr(json_string_value(json_object_get(args, "name")), "predicted"))
      tracks++;
    if (strcmp(cat, "predicted") != 0)
      continue;
    double dur = json_number_value(json_object_get(ev, "dur"));
    if (strcmp(name, "psum") == 0) {
      ck_assert_double_eq_tol(dur, 3000.0, 1e-6);
      ck_assert_str_eq(
          json_string_value(json_object_get(args, "fabric")), "small");
      psums++;
    } else if (strcmp(name, "body") == 0) {
      ck_assert_double_eq_tol(dur, 4000.0, 1e-6);
      bodies++;
    }
  }
  ck_assert_int_eq(tracks, 8);
  ck_assert_int_eq(psums, 8);
  ck_assert_int_eq(bodies, 8);
  json_decref(t);
  unlink(trace);
  unlink(fabric_path);
}
END_TEST

static Suite *rehearse_suite(void)
{
  Suite *s = suite_create("rehearse");
  TCase *tc = tcase_create("maps");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_loop_test(tc, bad_fabric, 0, NMODES);
  tcase_add_loop_test(tc, collectives, 0, NMODES);
  tcase_add_loop_test(tc, overlap_and_contention, 0, NMODES);
  tcase_add_loop_test(tc, environment, 0, NMODES);
  tcase_add_loop_test(tc, memory_overflow, 0, NMODES);
  tcase_add_loop_test(tc, trace_timeline, 0, NMODES);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(rehearse_suite()); }
