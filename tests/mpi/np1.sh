#!/bin/sh
# SPDX-License-Identifier: MIT
# The MPI tests on 1 process(es); see run.sh.
exec "${top_srcdir:-.}/tests/mpi/run.sh" 1
