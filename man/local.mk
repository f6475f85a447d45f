# SPDX-License-Identifier: MIT
# man fragment, included by the top Makefile.am
#
# The source pages, man/<name>.1, man/<name>.3 and man/<name>.7, are listed in
# SHMAP_MAN_PAGES (not dist_man_MANS): every public function has a page of
# its own or is listed in the NAME section of a shared page.  The pages are
# written without a version and without ".so" links, so "man -l man/<name>.3"
# reads each of them from the source tree.  The build makes the installed
# pages in man/gen/man1, man/gen/man3 and man/gen/man7 (man/build-man.sh):
# the version from configure.ac in each .TH line, and a ".so" link page for
# every other name of a shared page.
# tests/check-man.sh checks the pages and this list; tests/check-man-examples.sh
# compiles and runs every page's EXAMPLE program.
SHMAP_MAN_PAGES =

# Asynchronous collectives.
SHMAP_MAN_PAGES += man/shmap_ppermute_start.3 man/shmap_wait.3

# Overview, debugging, and the tutorial.
SHMAP_MAN_PAGES += man/shmap.7 man/shmap-debugging.7 man/shmap-tutorial.7

# Processes (MPI), and the merger of their traces.
SHMAP_MAN_PAGES += man/shmap-mpi.7 man/shmap-trace-merge.1 \
	man/shmap-trace-timeline.1 \
	man/shmap_process_rank.3 \
	man/shmap_mesh_set_process_axes.3 \
	man/shmap_array_to_host_local.3

# Errors and dtypes.
SHMAP_MAN_PAGES += \
	man/shmap_strerror.3 \
	man/shmap_dtype_size.3

# Reductions and ppermute out of place.
SHMAP_MAN_PAGES += \
	man/shmap_psum_new.3

# Groups within the axes, pbroadcast, ragged_all_to_all, user reductions.
SHMAP_MAN_PAGES += \
	man/shmap_psum_groups.3 \
	man/shmap_pbroadcast.3 \
	man/shmap_ragged_all_to_all.3 \
	man/shmap_preduce.3

# Meshes.
SHMAP_MAN_PAGES += \
	man/shmap_mesh_create.3 \
	man/shmap_mesh_axis_name.3

# Partition specs and global arrays.
SHMAP_MAN_PAGES += \
	man/shmap_spec_check.3 \
	man/shmap_array_from_host.3

# Sharded arrays and data movement statistics.
SHMAP_MAN_PAGES += \
	man/shmap_array_zeros.3 \
	man/shmap_array_reshard.3 \
	man/shmap_array_block.3 \
	man/shmap_array_visualize.3 \
	man/shmap_array_visualize_svg.3 \
	man/shmap_mesh_stats.3

# Debugging.
SHMAP_MAN_PAGES += \
	man/shmap_set_watchdog.3 \
	man/shmap_trace_start.3

# Blocks.
SHMAP_MAN_PAGES += \
	man/shmap_block_numel.3 \
	man/shmap_block_alloc.3

# The map and what a body calls.
SHMAP_MAN_PAGES += \
	man/shmap_map.3 \
	man/shmap_ctx_device.3 \
	man/shmap_in.3 \
	man/shmap_out.3 \
	man/shmap_fail.3

# Collectives.
SHMAP_MAN_PAGES += \
	man/shmap_axis_index.3 \
	man/shmap_psum.3 \
	man/shmap_pmean.3 \
	man/shmap_psum_scatter.3 \
	man/shmap_all_gather.3 \
	man/shmap_all_to_all.3 \
	man/shmap_ppermute.3

# The version page.
SHMAP_MAN_PAGES += man/shmap_version.3

EXTRA_DIST += $(SHMAP_MAN_PAGES) man/build-man.sh

# The installed pages, made whenever a page or the version changes (the
# version is in the Makefile, which configure rewrites).
noinst_DATA = man/gen.stamp
man/gen.stamp: $(SHMAP_MAN_PAGES) $(srcdir)/man/build-man.sh Makefile
	$(AM_V_GEN)pages=; for p in $(SHMAP_MAN_PAGES); do pages="$$pages $(srcdir)/$$p"; done; \
	$(SHELL) $(srcdir)/man/build-man.sh '$(PACKAGE_VERSION)' man/gen $$pages && \
	echo '$(PACKAGE_VERSION)' > $@
CLEANFILES += man/gen.stamp

install-data-local: man/gen.stamp
	@for d in man/gen/man*; do \
	  test -d "$$d" || continue; \
	  dest="$(DESTDIR)$(mandir)/$${d##*/}"; \
	  echo " $(MKDIR_P) '$$dest' && $(INSTALL_DATA) $$d/* '$$dest'"; \
	  $(MKDIR_P) "$$dest" && $(INSTALL_DATA) $$d/* "$$dest" || exit 1; \
	done

uninstall-local: man/gen.stamp
	@for f in man/gen/man*/*; do \
	  test -f "$$f" || continue; \
	  echo " rm -f '$(DESTDIR)$(mandir)/$${f#man/gen/}'"; \
	  rm -f "$(DESTDIR)$(mandir)/$${f#man/gen/}"; \
	done

clean-local:
	-rm -rf man/gen collective-pictures doc/pictures

TESTS += tests/check-man.sh
EXTRA_DIST += tests/check-man.sh

# Parts of a mesh: maps over some axes, nested maps, sub-meshes, transfers.
SHMAP_MAN_PAGES += \
	man/shmap_map_ex.3 \
	man/shmap_map_nested.3 \
	man/shmap_ctx_outer.3 \
	man/shmap_mesh_slice.3 \
	man/shmap_mesh_parent.3 \
	man/shmap_array_transfer.3

# Cluster rehearsal.
SHMAP_MAN_PAGES += man/shmap_rehearse.3 man/shmap-rehearse.7 \
	man/shmap-rehearse.1

# Exploring device interleavings.
SHMAP_MAN_PAGES += man/shmap_explore.3
