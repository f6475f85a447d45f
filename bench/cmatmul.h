/* SPDX-License-Identifier: MIT */
/*
 * cmatmul.h - the collective matmul cases of bench/run (bench/cmatmul.c).
 */
#ifndef BENCH_CMATMUL_H
#define BENCH_CMATMUL_H

#include <stdio.h>

typedef struct cm_result cm_result;

/* Measure the all-gather (one and both directions) and reduce-scatter
 * matmuls of side N for each P in ps and N in ns (N divisible by 2P), each
 * local, blocking and overlapped, reps samples each (median).  Returns the
 * number of results stored in *results (free() it), or -1. */
int cmatmul_measure(const int ps[], int nps, const int ns[], int nn, int reps,
                    int verbose, cm_result **results);
/* One line per result, after a '#' line saying what they are;
 * `bandwidth` (bytes per microsecond) gives the transfers' roofline. */
void cmatmul_print(FILE *f, const cm_result *results, int count,
                   double bandwidth);

#endif
