/* SPDX-License-Identifier: MIT */
/*
 * stackframe.h - a function with a 16 MiB stack frame, built with stack
 * probes (-fstack-clash-protection) when the compiler has them; for
 * tests/test_reliability_stack.c.
 */
#ifndef SHMAP_TESTS_STACKFRAME_H
#define SHMAP_TESTS_STACKFRAME_H

/* 16 MiB, far more than the gap below a device's stack. */
#define TU_PROBED_FRAME ((size_t)16 << 20)

/* Keeps a frame of TU_PROBED_FRAME bytes and writes its lowest 16 KiB
 * first, from the bottom up; returns one of the bytes. */
int tu_probed_frame(int seed);

#endif
