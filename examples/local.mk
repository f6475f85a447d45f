# SPDX-License-Identifier: MIT
# examples fragment, included by the top Makefile.am
#
# The tutorial programs.  `make` builds them, `make check` runs them; each
# compares its result with a serial computation and exits non-zero on a
# mismatch.

shmap_examples = \
	examples/01_hello \
	examples/02_shapes \
	examples/03_matmul_basic \
	examples/04_matmul_reduce_scatter \
	examples/05_ring_allreduce \
	examples/06_transpose

noinst_PROGRAMS += $(shmap_examples)
TESTS += $(shmap_examples)

examples_01_hello_SOURCES = examples/01_hello.c
examples_01_hello_LDADD = src/libshmap.la

examples_02_shapes_SOURCES = examples/02_shapes.c
examples_02_shapes_LDADD = src/libshmap.la

examples_03_matmul_basic_SOURCES = examples/03_matmul_basic.c
examples_03_matmul_basic_LDADD = src/libshmap.la

examples_04_matmul_reduce_scatter_SOURCES = examples/04_matmul_reduce_scatter.c
examples_04_matmul_reduce_scatter_LDADD = src/libshmap.la

examples_05_ring_allreduce_SOURCES = examples/05_ring_allreduce.c
examples_05_ring_allreduce_LDADD = src/libshmap.la

examples_06_transpose_SOURCES = examples/06_transpose.c
examples_06_transpose_LDADD = src/libshmap.la
