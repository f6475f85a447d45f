# SPDX-License-Identifier: MIT
# examples fragment: collectives within groups, pbroadcast,
# ragged_all_to_all (a mixture-of-experts layer) and user reductions.
noinst_PROGRAMS += examples/12_moe examples/13_groups examples/14_preduce
TESTS += examples/12_moe examples/13_groups examples/14_preduce
examples_12_moe_SOURCES = examples/12_moe.c
examples_12_moe_LDADD = src/libshmap.la -lm
examples_13_groups_SOURCES = examples/13_groups.c
examples_13_groups_LDADD = src/libshmap.la
examples_14_preduce_SOURCES = examples/14_preduce.c
examples_14_preduce_LDADD = src/libshmap.la -lm
