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

# The tutorial's programs (shmap-tutorial(7)): the four cases of a sharded
# matmul, and the exercises' answers checked by running them.
tutorial_examples = examples/20_sharded_matmul examples/21_exercises
noinst_PROGRAMS += $(tutorial_examples)
TESTS += $(tutorial_examples)

examples_20_sharded_matmul_SOURCES = examples/20_sharded_matmul.c
examples_20_sharded_matmul_LDADD = src/libshmap.la

examples_21_exercises_SOURCES = examples/21_exercises.c
examples_21_exercises_LDADD = src/libshmap.la
