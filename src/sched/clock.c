/* SPDX-License-Identifier: MIT */
/* clock.c - the library's clock (trace.h): what every wait, state change
 * and trace event is timed with. */
#include "sched/trace.h"

#include <time.h>
#include <uv.h>

uint64_t shmap__now(void) { return uv_hrtime(); }

uint64_t shmap__now_coarse(void)
{
#ifdef CLOCK_MONOTONIC_COARSE
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
  return uv_hrtime();
}

uint64_t shmap__now_state(void)
{
  return shmap__tracing() ? shmap__now() : shmap__now_coarse();
}
