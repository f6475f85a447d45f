# SPDX-License-Identifier: MIT
# The cluster rehearsal's teaching example (shmap-tutorial(7), "Predicting
# cost on a cluster"), included by the top Makefile.am.
rehearse_examples = examples/22_rehearse
noinst_PROGRAMS += $(rehearse_examples)
TESTS += $(rehearse_examples)

examples_22_rehearse_SOURCES = examples/22_rehearse.c
examples_22_rehearse_LDADD = src/libshmap.la
