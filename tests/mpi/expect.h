/* SPDX-License-Identifier: MIT */
/*
 * expect.h - how the MPI test programs count failures (header only).
 * EXPECT(cond, fmt, ...) prints "[process ME] FILE:LINE: message" on
 * stderr and counts a failure when cond is false, and the test goes on;
 * main() returns nonzero when `failures` is (expect_report).  `me` is the
 * process's rank, which main() sets.  expect_mesh creates a mesh so.
 */
#ifndef SHMAP_TESTS_EXPECT_H
#define SHMAP_TESTS_EXPECT_H

#include <shmap.h>

#include <stdio.h>

static int failures, me;

#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "[process %d] %s:%d: ", me, __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      failures++;                                                             \
    }                                                                         \
  } while (0)

/* shmap_mesh_create(m, text), a failure counted with its message: 0 or
 * the error code. */
static inline int expect_mesh(shmap_mesh **m, const char *text)
{
  *m = NULL;
  int rc = shmap_mesh_create(m, text);
  EXPECT(rc == 0, "shmap_mesh_create(%s): %d %s", text, rc, shmap_errmsg());
  return rc;
}

/* main()'s end: "PROG: R processes, all passed" from process 0, or the
 * failures counted on each failing process; the exit status. */
static inline int expect_report(const char *prog, int R)
{
  if (failures)
    fprintf(stderr, "[process %d of %d] %d failure%s\n", me, R, failures,
            failures == 1 ? "" : "s");
  else if (me == 0)
    printf("%s: %d process%s, all passed\n", prog, R, R == 1 ? "" : "es");
  return failures ? 1 : 0;
}

#endif
