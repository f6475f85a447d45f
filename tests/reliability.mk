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
# test_trace       the Chrome trace file, read back with tests/minijson.c,
#                  start/stop states, an unwritable path, SHMAP_TRACE.
#
# tests/valgrind-examples.sh runs every example under valgrind; it is slow
# and not part of TESTS: run `tests/valgrind-examples.sh BUILDDIR` (from the
# source tree) or `$(top_srcdir)/tests/valgrind-examples.sh .` from a build
# directory after `make`.
RELIABILITY_TESTS = \
	tests/test_alloc_fail \
	tests/test_errors_model \
	tests/test_watchdog \
	tests/test_trace
check_PROGRAMS += $(RELIABILITY_TESTS)
TESTS += $(RELIABILITY_TESTS)
EXTRA_DIST += tests/valgrind-examples.sh

tests_test_alloc_fail_SOURCES = tests/test_alloc_fail.c \
	tests/testutil.c tests/testutil.h
tests_test_alloc_fail_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_alloc_fail_LDADD = src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_errors_model_SOURCES = tests/test_errors_model.c \
	tests/testutil.c tests/testutil.h
tests_test_errors_model_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_errors_model_LDADD = src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_watchdog_SOURCES = tests/test_watchdog.c \
	tests/testutil.c tests/testutil.h
tests_test_watchdog_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_watchdog_LDADD = src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_trace_SOURCES = tests/test_trace.c tests/minijson.c tests/minijson.h \
	tests/testutil.c tests/testutil.h
tests_test_trace_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_trace_LDADD = src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

# test_trace_format.sh reads the trace files with Python's json module and
# checks the Trace Event Format's rules (tests/check-trace.py); skipped
# without python3.
TESTS += tests/test_trace_format.sh
EXTRA_DIST += tests/test_trace_format.sh tests/check-trace.py
