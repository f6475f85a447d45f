# SPDX-License-Identifier: MIT
# Examples of communication under computation and of the parallelism
# ladder, included by the top Makefile.am.  `make` builds them; `make
# check` runs each in both scheduling modes (examples/overlap-modes.sh),
# and each checks its results against a serial computation.
overlap_examples = examples/15_collective_matmul examples/16_ring_attention \
	examples/17_mlp_ladder
noinst_PROGRAMS += $(overlap_examples)
TESTS += examples/overlap-modes.sh
EXTRA_DIST += examples/overlap-modes.sh

examples_15_collective_matmul_SOURCES = examples/15_collective_matmul.c
examples_15_collective_matmul_LDADD = src/libshmap.la -lm

examples_16_ring_attention_SOURCES = examples/16_ring_attention.c
examples_16_ring_attention_LDADD = src/libshmap.la -lm

examples_17_mlp_ladder_SOURCES = examples/17_mlp_ladder.c
examples_17_mlp_ladder_LDADD = src/libshmap.la
