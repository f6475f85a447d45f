/* SPDX-License-Identifier: MIT */
/*
 * alarm.h - for the test programs that run their own cases (the Check
 * suites and the MPI programs alike; header only): the report of a
 * SIGALRM handler, and the scheduling modes a run covers.
 */
#ifndef SHMAP_TEST_ALARM_H
#define SHMAP_TEST_ALARM_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes `what`, `current` and a newline to stderr with write(2) (which a
 * signal handler may call), then aborts. */
static inline void tu_alarm_abort(const char *what, const char *current)
{
  ssize_t r = write(2, what, strlen(what));
  r = write(2, current, strlen(current));
  r = write(2, "\n", 1);
  (void)r;
  abort();
}

/* Whether a program that runs both scheduling modes runs `mode` now:
 * every mode, unless SHMAP_SCHED names one (tests/mpi/run.sh runs each
 * mode in a run of its own). */
static inline int tu_mode_wanted(const char *mode)
{
  const char *sched = getenv("SHMAP_SCHED");
  return !sched ||
         (strcmp(sched, "threads") != 0 && strcmp(sched, "fibers") != 0) ||
         strcmp(sched, mode) == 0;
}

#endif /* SHMAP_TEST_ALARM_H */
