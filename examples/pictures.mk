# SPDX-License-Identifier: MIT
# Pictures the library draws from a run, included by the top Makefile.am.
# 19_collective_pictures runs every collective on a 4-device mesh, checks
# the results against a serial computation and writes a BEFORE/AFTER SVG
# per collective into collective-pictures/ (the tutorial's pictures).
picture_examples = examples/19_collective_pictures
noinst_PROGRAMS += $(picture_examples)
TESTS += $(picture_examples)

examples_19_collective_pictures_SOURCES = examples/19_collective_pictures.c
examples_19_collective_pictures_LDADD = src/libshmap.la
