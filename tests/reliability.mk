# SPDX-License-Identifier: MIT
# reliability tests, included by the top Makefile.am.
#
# test_alloc_fail  makes the k-th library allocation fail (k = 1, 2, ...)
#                  during mesh creation, host import/export, a full map
#                  (first map on a fresh mesh and a later one; thread and
#                  fiber modes) and sharded import + reshard + export, and
#                  checks the code, the message, the outputs, that the
#                  objects still work, and (AddressSanitizer build) leaks.
# test_errors_model  one failing device while 15 others wait in a
#                  collective (16 devices, thread and fiber modes, 20 runs
#                  of each case): prompt return, the first failure's code and
#                  message, canceled peers, a usable mesh afterwards.
# test_watchdog    the watchdog's report on stderr, its argument checks and
#                  SHMAP_WATCHDOG.
# test_trace       the Chrome trace file, read back with jansson,
#                  start/stop states, an unwritable path, SHMAP_TRACE.
# test_reliability two application threads mapping on one mesh, a body
#                  destroying its mesh, statistics and traces inside bodies,
#                  meshes made in bodies while traces start and stop, size
#                  overflow (SHMAPTEST_REL_MAPS: maps per thread, default 300).
# test_reliability_settings  SHMAP_* parsers; a bad value is reported once
#                  on stderr with the accepted values, and the default used.
# test_reliability_stack  a 700 KiB stack buffer survives collectives; a
#                  stack overflow names the device before SIGSEGV, also by
#                  one frame far larger than a stack (tests/stackframe.c,
#                  built with stack probes when the compiler has them).
# test_reliability_mismatch  random collective sequences in which one device
#                  deviates (kind, axes, order, axis_index_groups, early
#                  return), and random
#                  pairs of sequences against a serial model of the rule:
#                  SHMAP_EMISMATCH naming both calls, never a hang.
#                  SHMAPTEST_MISMATCH_CASES (default 2000 per mode and kind of
#                  case) and SHMAPTEST_MISMATCH_SEED set the run.
#
# tests/valgrind-examples.sh runs every example under valgrind; it is slow
# and not part of TESTS: run `tests/valgrind-examples.sh BUILDDIR` (from the
# source tree) or `$(top_srcdir)/tests/valgrind-examples.sh .` from a build
# directory after `make`.
RELIABILITY_TESTS = \
	tests/test_alloc_fail \
	tests/test_errors_model \
	tests/test_watchdog \
	tests/test_trace \
	tests/test_reliability_mismatch \
	tests/test_reliability \
	tests/test_reliability_settings \
	tests/test_reliability_stack
check_PROGRAMS += $(RELIABILITY_TESTS)
TESTS += $(RELIABILITY_TESTS)
EXTRA_DIST += tests/valgrind-examples.sh tests/valgrind.supp

tests_test_alloc_fail_SOURCES = tests/test_alloc_fail.c \
	tests/testutil.h
tests_test_alloc_fail_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_alloc_fail_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_errors_model_SOURCES = tests/test_errors_model.c \
	tests/testutil.h
tests_test_errors_model_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_errors_model_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_watchdog_SOURCES = tests/test_watchdog.c \
	tests/testutil.h
tests_test_watchdog_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_watchdog_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_trace_SOURCES = tests/test_trace.c \
	tests/testutil.h
tests_test_trace_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_trace_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS) $(JANSSON_LIBS)

tests_test_reliability_mismatch_SOURCES = tests/test_reliability_mismatch.c tests/alarm.h \
	tests/testutil.h
tests_test_reliability_mismatch_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_reliability_mismatch_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_reliability_SOURCES = tests/test_reliability.c \
	tests/testutil.h
tests_test_reliability_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_reliability_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_reliability_settings_SOURCES = tests/test_reliability_settings.c \
	tests/testutil.h
tests_test_reliability_settings_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_reliability_settings_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_reliability_stack_SOURCES = tests/test_reliability_stack.c \
	tests/testutil.h
tests_test_reliability_stack_LDADD = tests/libtestutil.la tests/libstackframe.la \
	src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
# The test's own frames have no stack probes (some compilers add them by
# default), so that its 512 KiB frame shows what the gap catches alone.
check_LTLIBRARIES += tests/libstackframe.la
tests_libstackframe_la_SOURCES = tests/stackframe.c tests/stackframe.h
tests_libstackframe_la_CFLAGS = $(AM_CFLAGS) $(STACK_CLASH_CFLAGS)
if STACK_CLASH
tests_test_reliability_stack_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	-fno-stack-clash-protection -DSTACK_PROBED=1
else
tests_test_reliability_stack_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
endif

# test_trace_format.sh reads the trace files with Python's json module and
# checks the Trace Event Format's rules (tests/check-trace.py); skipped
# without python3.
TESTS += tests/test_trace_format.sh
EXTRA_DIST += tests/test_trace_format.sh tests/check-trace.py
