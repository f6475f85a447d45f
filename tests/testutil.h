/* SPDX-License-Identifier: MIT */
/*
 * testutil.h - helpers shared by the Check test programs: creating meshes
 * and arrays with the call's success asserted, reading arrays back, running
 * a suite.  They use only the public API (include/shmap.h) and Check, not
 * the reference models, so that any test program may link them.
 */
#ifndef SHMAP_TESTUTIL_H
#define SHMAP_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include <shmap.h>

/* TU_ASAN, TU_TSAN: 1 in a build under AddressSanitizer or
 * ThreadSanitizer (GCC's and clang's spellings), else 0; TU_SANITIZED:
 * either.  Tests use them to scale work that a sanitizer slows tenfold,
 * never to skip what they check. */
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif
#ifndef TU_ASAN
#define TU_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_TSAN 1
#endif
#endif
#ifndef TU_TSAN
#define TU_TSAN 0
#endif
#define TU_SANITIZED (TU_ASAN || TU_TSAN)

/* shmap_mesh_create(text); asserts it succeeds. */
shmap_mesh *tu_mesh_new(const char *text);

/* shmap_array_from_host; asserts it succeeds. */
shmap_array *tu_array_from_host(shmap_dtype dt, int rank,
                                const int64_t shape[], const void *data);

/* An array holding a host block's dtype, shape and data. */
shmap_array *tu_array_from_block(const shmap_block *b);

/* All of an array's values (malloc'ed, at least one byte); asserts that
 * shmap_array_to_host succeeds.  *nbytes, when not NULL, gets their size. */
void *tu_array_to_host(const shmap_array *a, size_t *nbytes);

/* Reads an array into *got: its dtype, rank, shape and values (got->data
 * calloc'ed, at least one byte; the caller frees it).  Asserts `a` is set,
 * its rank is in range and shmap_array_to_host succeeds; `what` names the
 * array in failure messages. */
void tu_array_to_block(const shmap_array *a, shmap_block *got,
                       const char *what);

/* Sets SHMAP_SCHED for the meshes created next: threads for an even
 * index (a Check loop test's _i, a case number), fibers for an odd one. */
void tu_set_sched(int index);

/* An f32 array of the given shape holding 0, 1, 2, ... (exact values). */
shmap_array *tu_arange_f32(int rank, const int64_t shape[]);

/* Asserts that a map returned 0 (code, its name and the message if not). */
void tu_map_ok(int rc, const char *what);

/* Sleeps ms milliseconds (resumes after signals). */
void tu_sleep_ms(int ms);

/* A file's contents, NUL-terminated (malloc'ed), or NULL if it cannot be
 * read; *len, when not NULL, gets its length. */
char *tu_slurp(const char *path, size_t *len);

/* Runs every test of s (and frees it); EXIT_SUCCESS if all passed. */
int tu_run_suite(Suite *s);

#endif
