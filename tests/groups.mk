# SPDX-License-Identifier: MIT
# tests fragment for axis_index_groups, pbroadcast, ragged_all_to_all and
# user-defined reductions, included by the top Makefile.am.
check_PROGRAMS += tests/test_coll_groups
TESTS += tests/test_coll_groups
tests_test_coll_groups_SOURCES = tests/test_coll_groups.c \
	tests/refcoll.h tests/testutil.h tests/jaxragged.h \
	tests/jaxgroups.h
tests_test_coll_groups_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_coll_groups_LDADD = tests/librefcoll.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS) -lm
