/* SPDX-License-Identifier: MIT */
/*
 * jaxgroups.h - reductions within axis_index_groups as JAX computes them,
 * for tests/test_coll_groups.c (one process, both scheduling modes) and
 * tests/mpi/test_mpi_groups.c (devices over MPI processes).
 *
 * The first two cases are the examples of jax.lax.psum's docstring (an
 * axis of 4, groups [[0, 1], [2, 3]], x = arange(4) and x =
 * arange(16).reshape(4, 4), a row per device).  JAX's psum, pmax and pmin
 * also take groups of different sizes (they only check that the groups
 * cover every index once): the other cases reduce within such groups,
 * listed with shmap_groups's size 0 (each group ended by -1), the result
 * of every member being its own group's reduction.
 *
 * Each device checks its own row and records it in the run's `bad` array
 * (written in the process that runs the device).
 */
#ifndef SHMAP_TESTS_JAXGROUPS_H
#define SHMAP_TESTS_JAXGROUPS_H

#include <shmap.h>

#include <stdio.h>

enum { JG_SUM, JG_MAX, JG_MIN };

typedef struct jg_case {
  const char *name;
  int op, cols;           /* cols: 1 (arange(4)) or 4 (arange(16)) */
  int ngroups, size;      /* shmap_groups */
  int ranks[8];
  int32_t want[4][4];     /* by device */
} jg_case;

static const jg_case jg_cases[] = {
    {"psum docstring, x = arange(4)", JG_SUM, 1, 2, 2, {0, 1, 2, 3},
     {{1}, {1}, {5}, {5}}},
    {"psum docstring, x = arange(16).reshape(4, 4)", JG_SUM, 4, 2, 2,
     {0, 1, 2, 3},
     {{4, 6, 8, 10}, {4, 6, 8, 10}, {20, 22, 24, 26}, {20, 22, 24, 26}}},
    {"psum docstring groups, listed with size 0", JG_SUM, 4, 2, 0,
     {0, 1, -1, 2, 3, -1},
     {{4, 6, 8, 10}, {4, 6, 8, 10}, {20, 22, 24, 26}, {20, 22, 24, 26}}},
    {"psum over [[0, 1, 2], [3]]", JG_SUM, 4, 2, 0, {0, 1, 2, -1, 3, -1},
     {{12, 15, 18, 21}, {12, 15, 18, 21}, {12, 15, 18, 21}, {12, 13, 14, 15}}},
    {"pmax over [[0, 1, 2], [3]]", JG_MAX, 4, 2, 0, {0, 1, 2, -1, 3, -1},
     {{8, 9, 10, 11}, {8, 9, 10, 11}, {8, 9, 10, 11}, {12, 13, 14, 15}}},
    {"pmin over [[3], [2, 0, 1]]", JG_MIN, 4, 2, 0, {3, -1, 2, 0, 1, -1},
     {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {12, 13, 14, 15}}},
    {"psum over [[3, 0], [1], [2]]", JG_SUM, 4, 3, 0,
     {3, 0, -1, 1, -1, 2, -1},
     {{12, 14, 16, 18}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 14, 16, 18}}},
};

typedef struct jg_run {
  const jg_case *c;
  int bad[4];
  char why[4][200];
} jg_run;

/* On a mesh i=4 (device d is rank d of 'i'). */
static int jg_body(shmap_ctx *ctx, void *arg)
{
  jg_run *r = arg;
  const jg_case *c = r->c;
  int d = shmap_ctx_device(ctx);
  int32_t v[4];
  for (int k = 0; k < c->cols; k++)
    v[k] = c->cols * d + k;
  shmap_block x = {v, SHMAP_I32, 1, {c->cols}};
  shmap_groups g = {c->ngroups, c->size, c->ranks};
  int rc = c->op == JG_SUM   ? shmap_psum_groups(ctx, &x, "i", &g)
           : c->op == JG_MAX ? shmap_pmax_groups(ctx, &x, "i", &g)
                             : shmap_pmin_groups(ctx, &x, "i", &g);
  if (rc) {
    r->bad[d] = 2;
    snprintf(r->why[d], sizeof r->why[d], "%s", shmap_errmsg());
    return rc;
  }
  for (int k = 0; k < c->cols; k++)
    if (v[k] != c->want[d][k] && !r->bad[d]) {
      r->bad[d] = 1;
      snprintf(r->why[d], sizeof r->why[d], "element %d is %d, JAX gives %d",
               k, (int)v[k], (int)c->want[d][k]);
    }
  return 0;
}

#endif /* SHMAP_TESTS_JAXGROUPS_H */
