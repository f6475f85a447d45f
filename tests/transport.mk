# SPDX-License-Identifier: MIT
# tests fragment for the shared-memory transport's protocols, included by
# the top Makefile.am: in-place ppermute on blocks the devices own (one
# copy, readers waited for at the next use of a buffer, or buffers passed
# around cycles of the permutation) and small reductions in one round trip
# (folded by every member, or by rank 0 alone in groups of more than 64).
TRANSPORT_TESTS = tests/test_ppermute_inplace tests/test_small_reduce \
	tests/test_ppermute_handover
check_PROGRAMS += $(TRANSPORT_TESTS)
TESTS += $(TRANSPORT_TESTS)

tests_test_ppermute_inplace_SOURCES = tests/test_ppermute_inplace.c \
	tests/testutil.h
tests_test_ppermute_inplace_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_ppermute_inplace_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_small_reduce_SOURCES = tests/test_small_reduce.c \
	tests/testutil.h
tests_test_small_reduce_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_small_reduce_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_ppermute_handover_SOURCES = tests/test_ppermute_handover.c \
	tests/testutil.h
tests_test_ppermute_handover_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_ppermute_handover_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
