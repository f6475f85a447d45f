# SPDX-License-Identifier: MIT
# tests fragment, included by the top Makefile.am: exploring device
# interleavings (shmap_explore(3)).  test_explore finds seeded bugs under
# exploring schedules and replays them; explore-transport.sh runs the
# transport's own tests under a few exploring schedules, time-bounded.
EXPLORE_TESTS = tests/test_explore
check_PROGRAMS += $(EXPLORE_TESTS)
TESTS += $(EXPLORE_TESTS) tests/explore-transport.sh
EXTRA_DIST += tests/explore-transport.sh

tests_test_explore_SOURCES = tests/test_explore.c \
	tests/testutil.h
tests_test_explore_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_explore_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
