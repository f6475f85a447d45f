/* SPDX-License-Identifier: MIT */
/*
 * stackframe.c - built with $(STACK_CLASH_CFLAGS) (tests/reliability.mk):
 * the compiler then touches the frame's pages from the top down as it
 * allocates it, so on a stack that is too small the first touch faults in
 * the gap just below the stack, wherever the frame's own first write is.
 */
#include <stddef.h>

#include "stackframe.h"

int tu_probed_frame(int seed)
{
  volatile unsigned char big[TU_PROBED_FRAME];
  for (size_t i = 0; i < ((size_t)16 << 10); i++)
    big[i] = (unsigned char)(seed + (int)i);
  return big[(size_t)seed % TU_PROBED_FRAME];
}
