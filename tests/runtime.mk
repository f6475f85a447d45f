# SPDX-License-Identifier: MIT
# runtime tests, included by the top Makefile.am.
#
# test_fail_scale  one failing device on a mesh of 4096 devices, in thread
#                  and fiber mode (1024 under a sanitizer): the map returns the failure (and a
#                  correct map follows) within a generous Check timeout;
#                  nothing is timed.
RUNTIME_TESTS = tests/test_fail_scale
check_PROGRAMS += $(RUNTIME_TESTS)
TESTS += $(RUNTIME_TESTS)

tests_test_fail_scale_SOURCES = tests/test_fail_scale.c \
	tests/testutil.h
tests_test_fail_scale_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_fail_scale_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
