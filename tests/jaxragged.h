/* SPDX-License-Identifier: MIT */
/*
 * jaxragged.h - JAX's own examples of ragged_all_to_all, with the values
 * JAX gives, for tests/test_coll_groups.c (one process, both scheduling
 * modes) and tests/mpi/test_mpi_groups.c (devices over MPI processes).
 *
 * From the docstring of jax.lax.ragged_all_to_all: the example on an axis
 * of 2.  From JAX's tests/ragged_collective_test.py: axis_index_groups
 * ((0, 1), (2, 3)) on an axis of 4, and the groups of one ((0,), (1,)).
 * JAX has no worked example of several slices per peer; the fourth case
 * follows the docstring's definition (entry i goes to member i / k, the
 * receiver's offsets are all_to_all(output_offsets, tiled=True)) on an
 * axis of 2 with k = 2, worked by hand in its comment.
 *
 * Every mesh has 4 devices (an axis 'r' beside 'x' repeats a case of 2),
 * so that 1, 2 and 4 processes can share it.
 *
 * The cases are static data and one body; each device checks its own
 * result and records it in the case's `bad` array (a device's flag is
 * written in the process that runs it), so the test reads the flags of
 * the devices of its own process.
 */
#ifndef SHMAP_TESTS_JAXRAGGED_H
#define SHMAP_TESTS_JAXRAGGED_H

#include <shmap.h>

#include <stdio.h>
#include <string.h>

#define JR_MAXDEV 4
#define JR_MAXROWS 8
#define JR_MAXK 4

typedef struct jr_case {
  const char *name, *mesh;
  int nx, count;            /* members along 'x'; entries of each array */
  int rows, orows;          /* operand and output rows */
  int ngroups, gsize;       /* 0 groups: none */
  int ranks[JR_MAXDEV];
  int32_t operand[JR_MAXDEV][JR_MAXROWS];
  int64_t in_off[JR_MAXDEV][JR_MAXK], send[JR_MAXDEV][JR_MAXK];
  int64_t out_off[JR_MAXDEV][JR_MAXK], recv[JR_MAXDEV][JR_MAXK];
  int32_t want[JR_MAXDEV][JR_MAXROWS];
} jr_case;

static const jr_case jr_cases[] = {
    /* The docstring's example: axis of size 2. */
    {"docstring",
     "x=2, r=2",
     2, 2, 3, 4, 0, 0, {0},
     {{1, 2, 2}, {3, 4, 0}},
     {{0, 1}, {0, 1}},
     {{1, 2}, {1, 1}},
     {{0, 0}, {1, 2}},
     {{1, 1}, {2, 1}},
     {{1, 3, 0, 0}, {2, 2, 4, 0}}},
    /* test_ragged_all_to_all_axis_index_groups. */
    {"axis_index_groups ((0, 1), (2, 3))",
     "x=4, r=1",
     4, 2, 3, 4, 2, 2, {0, 1, 2, 3},
     {{1, 2, 2}, {3, 4, 0}, {10, 20, 20}, {30, 40, 0}},
     {{0, 1}, {0, 1}, {0, 1}, {0, 1}},
     {{1, 2}, {1, 1}, {1, 2}, {1, 1}},
     {{0, 0}, {1, 2}, {0, 0}, {1, 2}},
     {{1, 1}, {2, 1}, {1, 1}, {2, 1}},
     {{1, 3, 0, 0}, {2, 2, 4, 0}, {10, 30, 0, 0}, {20, 20, 40, 0}}},
    /* test_ragged_all_to_all_degenerate_groups. */
    {"axis_index_groups ((0,), (1,))",
     "x=2, r=2",
     2, 1, 4, 4, 2, 1, {0, 1},
     {{1, 0, 0, 0}, {2, 3, 4, 0}},
     {{0}, {0}},
     {{1}, {3}},
     {{2}, {1}},
     {{1}, {3}},
     {{0, 0, 1, 0}, {0, 2, 3, 4}}},
    /* Two slices per peer.  Member 0 sends [1] and [2, 3] to itself (at
     * rows 0 and 4) and [4], [5] to member 1 (at rows 0 and 5); member 1
     * sends [10], [20] to member 0 (rows 1, 2) and [30], [40] to itself
     * (rows 2, 3).  Member 0 receives sizes 1, 2 from itself and 1, 1 from
     * member 1: [1, 10, 20, 0, 2, 3]; member 1: [4, 0, 30, 40, 0, 5]. */
    {"two slices per peer",
     "x=2, r=2",
     2, 4, 5, 6, 0, 0, {0},
     {{1, 2, 3, 4, 5}, {10, 20, 30, 40, 0}},
     {{0, 1, 3, 4}, {0, 1, 2, 3}},
     {{1, 2, 1, 1}, {1, 1, 1, 1}},
     {{0, 4, 0, 5}, {1, 2, 2, 3}},
     {{1, 2, 1, 1}, {1, 1, 1, 1}},
     {{1, 10, 20, 0, 2, 3}, {4, 0, 30, 40, 0, 5}}},
};

/* Devices of every case's mesh. */
#define JR_NDEV 4

typedef struct jr_run {
  const jr_case *c;
  int bad[JR_NDEV];  /* by device: 1 wrong values, 2 the call failed */
  char why[JR_NDEV][160];
} jr_run;

static int jr_body(shmap_ctx *ctx, void *arg)
{
  jr_run *r = arg;
  const jr_case *c = r->c;
  int dev = shmap_ctx_device(ctx), d = shmap_axis_index(ctx, "x");
  int32_t in[JR_MAXROWS], out[JR_MAXROWS];
  memcpy(in, c->operand[d], sizeof in);
  memset(out, 0, sizeof out);
  shmap_block x = {in, SHMAP_I32, 1, {c->rows}};
  shmap_block y = {out, SHMAP_I32, 1, {c->orows}};
  shmap_groups g = {c->ngroups, c->gsize, c->ranks};
  int rc = shmap_ragged_all_to_all_groups(
      ctx, &x, &y, c->in_off[d], c->send[d], c->out_off[d], c->recv[d],
      c->count, "x", c->ngroups ? &g : NULL);
  if (rc) {
    r->bad[dev] = 2;
    snprintf(r->why[dev], sizeof r->why[dev], "%s", shmap_errmsg());
    return rc;
  }
  for (int k = 0; k < c->orows; k++)
    if (out[k] != c->want[d][k] && !r->bad[dev]) {
      r->bad[dev] = 1;
      snprintf(r->why[dev], sizeof r->why[dev],
               "row %d is %d, JAX gives %d", k, (int)out[k],
               (int)c->want[d][k]);
    }
  return 0;
}

#endif /* SHMAP_TESTS_JAXRAGGED_H */
