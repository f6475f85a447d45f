/* SPDX-License-Identifier: MIT */
/*
 * alarm.h - the report of a test's SIGALRM handler: a call that did not
 * return in time says which case it was, then the test aborts.  Header
 * only, for the Check suites and the MPI test programs alike.
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

#endif /* SHMAP_TEST_ALARM_H */
