# SPDX-License-Identifier: MIT
# The tutorial's page, included by the top Makefile.am.  doc/tutorial.html
# is made from man/shmap-tutorial.7 (doc/render-tutorial.py) with the
# pictures the examples draw from a run, inline; `make check` makes it
# (check_DATA) and tests/test_tutorial.sh checks it, and
# `make doc/tutorial.html` makes it alone.  It needs python3.
check_DATA = doc/tutorial.html
doc/tutorial.html: $(srcdir)/man/shmap-tutorial.7 $(srcdir)/doc/render-tutorial.py \
		examples/07_visualize$(EXEEXT) examples/19_collective_pictures$(EXEEXT)
	$(AM_V_GEN)rm -rf doc/pictures && $(MKDIR_P) doc/pictures && \
	examples/07_visualize doc/pictures >/dev/null && \
	examples/19_collective_pictures doc/pictures >/dev/null && \
	python3 $(srcdir)/doc/render-tutorial.py $(srcdir)/man/shmap-tutorial.7 \
	  doc/pictures $@.tmp && mv $@.tmp $@
CLEANFILES += doc/tutorial.html doc/tutorial.html.tmp
EXTRA_DIST += doc/render-tutorial.py

TESTS += tests/test_tutorial.sh
EXTRA_DIST += tests/test_tutorial.sh tests/check-tutorial.py
