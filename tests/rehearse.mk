# SPDX-License-Identifier: MIT
# tests fragment, included by the top Makefile.am
# The cluster rehearsal: pricing rules, fabric files, and rehearsed maps.
REHEARSE_TESTS = tests/test_rehearse_price
check_PROGRAMS += $(REHEARSE_TESTS)
TESTS += $(REHEARSE_TESTS)

tests_test_rehearse_price_SOURCES = tests/test_rehearse_price.c \
	tests/testutil.h
tests_test_rehearse_price_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_rehearse_price_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

REHEARSE_MAP_TESTS = tests/test_rehearse
check_PROGRAMS += $(REHEARSE_MAP_TESTS)
TESTS += $(REHEARSE_MAP_TESTS)
tests_test_rehearse_SOURCES = tests/test_rehearse.c \
	tests/testutil.h
tests_test_rehearse_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_rehearse_LDADD = tests/libtestutil.la src/libshmap.la $(CHECK_LIBS) $(UV_LIBS) \
	$(JANSSON_LIBS)

# The teaching example (examples/rehearse.mk), its figures checked in both
# scheduling modes.
TESTS += tests/test_rehearse_example.sh
EXTRA_DIST += tests/test_rehearse_example.sh

# The same predictions on 1, 2 and 4 processes (skipped without MPI).
TESTS += tests/test_rehearse_mpi.sh
EXTRA_DIST += tests/test_rehearse_mpi.sh
if BUILD_MPI
check_PROGRAMS += tests/mpi/test_mpi_rehearse
tests_mpi_test_mpi_rehearse_SOURCES = tests/mpi/test_mpi_rehearse.c
tests_mpi_test_mpi_rehearse_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_mpi_test_mpi_rehearse_LDADD = src/libshmap.la $(JANSSON_LIBS)
endif

# The calibration round trip: bench/calibrate's file for this machine loads
# and prices collectives to its alpha and beta.
check_PROGRAMS += tests/test_rehearse_calibrate
tests_test_rehearse_calibrate_SOURCES = tests/test_rehearse_calibrate.c
tests_test_rehearse_calibrate_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_test_rehearse_calibrate_LDADD = src/libshmap_core.la $(UV_LIBS) \
	$(JANSSON_LIBS)
TESTS += tests/test_rehearse_calibrate.sh
EXTRA_DIST += tests/test_rehearse_calibrate.sh
