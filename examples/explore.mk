# SPDX-License-Identifier: MIT
# The teaching example of exploring device interleavings (shmap_explore(3)),
# included by the top Makefile.am.  `make check` runs it (it exits non-zero
# unless the bug is found, replayed and the fix passes) and
# tests/test_explore_example.sh compares its output, the same in both
# scheduling modes, with the expected text.
explore_examples = examples/23_explore
noinst_PROGRAMS += $(explore_examples)
TESTS += $(explore_examples) tests/test_explore_example.sh
EXTRA_DIST += tests/test_explore_example.sh

examples_23_explore_SOURCES = examples/23_explore.c
examples_23_explore_LDADD = src/libshmap.la
