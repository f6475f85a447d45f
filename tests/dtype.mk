# SPDX-License-Identifier: MIT
# tests fragment for the dtype table and the reduction kernels, included by
# the top Makefile.am.  test_dtype reaches internal functions (the kernels
# of each instruction set) through libshmap_core.
check_PROGRAMS += tests/test_dtype
TESTS += tests/test_dtype
tests_test_dtype_SOURCES = tests/test_dtype.c tests/refcoll.h \
	tests/testutil.h
tests_test_dtype_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_dtype_LDADD = tests/librefcoll.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
