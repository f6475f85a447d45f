# SPDX-License-Identifier: MIT
# Examples of parts of a mesh, included by the top Makefile.am.  `make`
# builds them, `make check` runs them; each checks its results bit for bit
# against a serial computation and exits non-zero on a mismatch.
meshparts_examples = examples/09_mlp_2d examples/10_pipeline
noinst_PROGRAMS += $(meshparts_examples)
TESTS += $(meshparts_examples)

examples_09_mlp_2d_SOURCES = examples/09_mlp_2d.c
examples_09_mlp_2d_LDADD = src/libshmap.la

examples_10_pipeline_SOURCES = examples/10_pipeline.c
examples_10_pipeline_LDADD = src/libshmap.la
