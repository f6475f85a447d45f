/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_smallperm.c - ppermute of a few hundred bytes over processes,
 * which goes in one exchange of descriptors and data: exact values (a
 * ring shift, a partial permutation whose unnamed destinations get zeros,
 * in place and out of place, one and several devices per process), a
 * mismatch of pairs worded exactly as the same mismatch of a large
 * ppermute (which takes arrive, data and depart) can be, a device that fails
 * while its peers are in the call, and the mesh working afterwards.
 *
 * Meshes "d=N" of N = P and 2P devices for P processes.
 */
#include <shmap.h>

#include "expect.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SMALL 64     /* i32 elements: 256 bytes, the one-exchange path */
#define LARGE 16384  /* 64 KiB: arrive, data and depart */
#define CALLS 5
#define MAXN 64

enum { RING, PARTIAL, MISMATCH, FAIL };

typedef struct parg {
  int mode, n, len;
  bool fresh; /* shmap_ppermute_new */
} parg;

static int32_t term(int d, int e, int k)
{
  return (int32_t)(d * 100003 + e * 31 + k * 7 + 1);
}

/* The pairs of mode `mode` for a group of n as device d sees them: a
 * ring shift by one; the even ranks sending to the next odd one (the
 * even ranks get zeros); or, for a mismatch, device 0's ring shift by
 * two. */
static int pairs_of(int mode, int n, int d, int pairs[][2])
{
  int np = 0;
  for (int r = 0; r < n; r++) {
    if (mode == PARTIAL && r % 2)
      continue;
    int step = mode == MISMATCH && d == 0 && n > 2 ? 2 : 1;
    pairs[np][0] = r;
    pairs[np++][1] = (r + step) % n;
  }
  return np;
}

static int body(shmap_ctx *ctx, void *arg)
{
  const parg *a = arg;
  int d = shmap_ctx_device(ctx);
  int64_t shape[1] = {a->len};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, shape);
  if (!x)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  int pairs[MAXN][2];
  int np = pairs_of(a->mode, a->n, d, pairs);
  for (int k = 0; k < CALLS; k++) {
    int32_t *v = x->data;
    for (int e = 0; e < a->len; e++)
      v[e] = term(d, e, k);
    if (a->mode == FAIL && k == 2 && d == a->n - 1)
      return shmap_fail(ctx, "device %d gives up at call %d", d, k);
    if (a->mode == MISMATCH && d == 0)
      nanosleep(&(struct timespec){0, 20000000}, NULL);
    shmap_block *out = NULL;
    int rc = a->fresh ? shmap_ppermute_new(ctx, x, "d", np,
                                           (const int(*)[2])pairs, &out)
                      : shmap_ppermute(ctx, x, "d", np,
                                       (const int(*)[2])pairs);
    if (rc)
      return rc;
    const int32_t *got = out ? out->data : x->data;
    int src = -1;
    for (int i = 0; i < np; i++)
      if (pairs[i][1] == d)
        src = pairs[i][0];
    for (int e = 0; e < a->len; e++) {
      int32_t want = src < 0 ? 0 : term(src, e, k);
      if (got[e] != want)
        return shmap_fail(ctx, "call %d, element %d: %d, want %d", k, e,
                          got[e], want);
    }
    if (out && (rc = shmap_block_free(ctx, out)))
      return rc;
  }
  return 0;
}

static int run(shmap_mesh *m, parg *a, char *msg, size_t nmsg)
{
  int rc = shmap_map(m, body, a, 0, NULL, NULL, 0, NULL, NULL);
  snprintf(msg, nmsg, "%s", rc ? shmap_errmsg() : "");
  return rc;
}

/* msg with every "[LARGE]" shape written as "[SMALL]". */
static void as_small(char *msg)
{
  char from[32], to[32];
  snprintf(from, sizeof from, "[%d]", LARGE);
  snprintf(to, sizeof to, "[%d]", SMALL);
  for (char *p; (p = strstr(msg, from));) {
    memmove(p + strlen(to), p + strlen(from), strlen(p + strlen(from)) + 1);
    memcpy(p, to, strlen(to));
  }
}

/* The part of a mismatch message that does not depend on which of the two
 * devices noticed it: "collective call #K differs between devices: A
 * called X but B called Y; only A has P; only B has Q" with the two
 * devices in the order of their names, without the noticing device's
 * prefix.  The message itself when it is not of that form. */
static void canon(const char *msg, char *out, size_t n)
{
  char a[2][512], only[2][512];
  const char *t = strstr(msg, "collective call #");
  const char *d = t ? strstr(t, " differs between devices: ") : NULL;
  const char *c1 = d ? strstr(d += 26, " called ") : NULL;
  const char *b = c1 ? strstr(c1, " but ") : NULL;
  const char *o1 = b ? strstr(b, "; only ") : NULL;
  const char *o2 = o1 ? strstr(o1 + 7, "; only ") : NULL;
  if (!o2) {
    snprintf(out, n, "%s", msg);
    return;
  }
  snprintf(a[0], sizeof a[0], "%.*s", (int)(b - d), d);
  snprintf(a[1], sizeof a[1], "%.*s", (int)(o1 - (b + 5)), b + 5);
  snprintf(only[0], sizeof only[0], "%.*s", (int)(o2 - (o1 + 7)), o1 + 7);
  snprintf(only[1], sizeof only[1], "%s", o2 + 7);
  int i = strcmp(a[0], a[1]) > 0, j = strcmp(only[0], only[1]) > 0;
  snprintf(out, n, "%.*s| %s | %s | only %s | only %s", (int)(d - t), t,
           a[i], a[1 - i], only[j], only[1 - j]);
}

/* A mismatch of pairs (device 0 differs), small and large.  Which
 * device's view the message gives depends on which one noticed first, on
 * either path: the messages are compared without it (canon), and the two
 * are run in turn until some small message equals some large one.  Every
 * process gets the same messages, so all decide alike. */
#define TRIES 20
static char seen[2][TRIES][1024];

static void mismatches(shmap_mesh *m, int n)
{
  bool same = false;
  int t = 0;
  for (; t < TRIES && !same; t++) {
    for (int big = 0; big < 2; big++) {
      parg a = {.mode = MISMATCH, .n = n, .len = big ? LARGE : SMALL};
      int rc = run(m, &a, seen[big][t], sizeof seen[big][t]);
      EXPECT(rc == SHMAP_EMISMATCH, "n=%d len %d mismatch: %d %s", n, a.len,
             rc, seen[big][t]);
      if (big)
        as_small(seen[big][t]);
    }
    for (int i = 0; i <= t && !same; i++) {
      char x[1024], y[1024], u[1024], v[1024];
      canon(seen[0][t], x, sizeof x);
      canon(seen[1][i], y, sizeof y);
      canon(seen[0][i], u, sizeof u);
      canon(seen[1][t], v, sizeof v);
      same = strcmp(x, y) == 0 || strcmp(u, v) == 0;
    }
  }
  EXPECT(same,
         "n=%d: the mismatch reads\n  %s\nwhere a large ppermute's reads\n"
         "  %s", n, seen[0][t - 1], seen[1][t - 1]);
}

static void one(int n)
{
  char text[32], msg[1024];
  snprintf(text, sizeof text, "d=%d", n);
  shmap_mesh *m = NULL;
  int rc = expect_mesh(&m, text);
  if (rc)
    return;
  for (int mode = RING; mode <= PARTIAL; mode++)
    for (int fresh = 0; fresh < 2; fresh++)
      for (int len = SMALL; len <= LARGE; len += LARGE - SMALL) {
        parg a = {.mode = mode, .n = n, .len = len, .fresh = fresh};
        rc = run(m, &a, msg, sizeof msg);
        EXPECT(rc == 0, "n=%d mode %d fresh %d len %d: %d %s", n, mode,
               fresh, len, rc, msg);
      }
  if (n > 2)
    mismatches(m, n);
  parg f = {.mode = FAIL, .n = n, .len = SMALL};
  rc = run(m, &f, msg, sizeof msg);
  char want[128];
  snprintf(want, sizeof want, "device %d gives up at call 2", n - 1);
  EXPECT(rc == SHMAP_EBODY && strstr(msg, want),
         "n=%d failure: %d (%s) %s", n, rc, shmap_strerror(rc), msg);
  parg a = {.mode = RING, .n = n, .len = SMALL};
  rc = run(m, &a, msg, sizeof msg);
  EXPECT(rc == 0, "n=%d after the failure: %d %s", n, rc, msg);
  shmap_mesh_destroy(m);
}

int main(void)
{
  alarm(240); /* run.sh bounds the run too */
  me = shmap_process_rank();
  int R = shmap_process_count();
  one(R);
  one(2 * R);
  return expect_report("test_mpi_smallperm", R);
}
