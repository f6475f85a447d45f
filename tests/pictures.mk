# SPDX-License-Identifier: MIT
# The pictures checked in a headless browser, included by the top
# Makefile.am.  test_pictures.sh renders the sharding and BEFORE/AFTER SVGs
# of the examples and a timeline of trace_prog's trace with Chromium and
# compares the screenshots with what the runs did; it is skipped where no
# Chromium is installed.
check_PROGRAMS += tests/pictures/trace_prog
tests_pictures_trace_prog_SOURCES = tests/pictures/trace_prog.c
tests_pictures_trace_prog_LDADD = src/libshmap.la

TESTS += tests/test_pictures.sh
EXTRA_DIST += tests/test_pictures.sh tests/check-pictures.py

# The SVG document itself, element by element, and the errors.
check_PROGRAMS += tests/test_svg
TESTS += tests/test_svg
tests_test_svg_SOURCES = tests/test_svg.c tests/testutil.h
tests_test_svg_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_svg_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
