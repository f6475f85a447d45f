# SPDX-License-Identifier: MIT
# sharded-array examples, included by the top Makefile.am.
# `make` builds them, `make check` runs them; each checks its own results
# and exits non-zero on a mismatch.
shard_examples = examples/07_visualize examples/08_chained_sgd
noinst_PROGRAMS += $(shard_examples)
TESTS += $(shard_examples)

examples_07_visualize_SOURCES = examples/07_visualize.c
examples_07_visualize_LDADD = src/libshmap.la

examples_08_chained_sgd_SOURCES = examples/08_chained_sgd.c
examples_08_chained_sgd_LDADD = src/libshmap.la
