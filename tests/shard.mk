# SPDX-License-Identifier: MIT
# sharded-array tests, included by the top Makefile.am.
# test_shard checks every function of the "sharded arrays on a mesh" part
# of shmap.h (creation, block access, chaining without copies, resharding
# with exact byte counts, errors, the text picture); test_shard_prop
# reshards random arrays between random specs on random meshes and compares
# with tests/refmodel.c.  test_shard_prop runs SHMAPTEST_PROP_CASES cases
# (default 1000) from seed SHMAPTEST_PROP_SEED (printed at the start).
SHARD_TESTS = tests/test_shard tests/test_shard_prop
check_PROGRAMS += $(SHARD_TESTS)
TESTS += $(SHARD_TESTS)

tests_test_shard_SOURCES = tests/test_shard.c tests/refmodel.h \
	tests/testutil.h
tests_test_shard_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_shard_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_shard_prop_SOURCES = tests/test_shard_prop.c \
	tests/refmodel.h \
	tests/testutil.h
tests_test_shard_prop_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_shard_prop_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
