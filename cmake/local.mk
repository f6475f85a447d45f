# SPDX-License-Identifier: MIT
# The CMake package (find_package(shmap)), included by the top Makefile.am:
# $(libdir)/cmake/shmap/shmapConfig.cmake and shmapConfigVersion.cmake,
# made from their .in files with the installation directories as paths
# relative to the package's own directory.  tests/test_install.sh builds a
# small CMake project against the installed copy.
cmakeshmapdir = $(libdir)/cmake/shmap
nodist_cmakeshmap_DATA = cmake/shmapConfig.cmake cmake/shmapConfigVersion.cmake
EXTRA_DIST += cmake/shmapConfig.cmake.in cmake/shmapConfigVersion.cmake.in
CLEANFILES += cmake/shmapConfig.cmake cmake/shmapConfigVersion.cmake

# The include directory relative to the package's directory when both are
# under one prefix (so that an installed tree may move), else absolute.
cmake/shmapConfig.cmake: $(srcdir)/cmake/shmapConfig.cmake.in Makefile
	$(AM_V_GEN)$(MKDIR_P) cmake && \
	rel=`realpath -m --relative-to='$(cmakeshmapdir)' '$(includedir)' 2>/dev/null` || rel='$(includedir)'; \
	case $$rel in ../*) ;; *) rel='$(includedir)' ;; esac; \
	mpi=`echo '$(SHMAP_MPI_PKG)' | sed 's/^, *//'`; \
	test -z "$$mpi" || mpi="\"$$mpi\""; \
	priv=`echo $(SHMAP_OPENMP_LIBS) $(SHMAP_MPI_LIBS_PRIVATE) $(LIBS) | sed 's/  */;/g'`; \
	sed -e "s|%cmake_rel_libdir%|../..|g" -e "s|%cmake_rel_includedir%|$$rel|g" \
	    -e 's|%SHMAP_LIB_FILE%|$(SHMAP_LIB_FILE)|g' \
	    -e 's|%SHMAP_LIB_SONAME%|$(SHMAP_LIB_SONAME)|g' \
	    -e 's|%SHMAP_STATIC_LINK%|$(SHMAP_STATIC_LINK)|g' \
	    -e 's|%SHMAP_UV_PKG%|$(SHMAP_UV_PKG)|g' \
	    -e "s|%SHMAP_MPI_PKG_CMAKE%|$$mpi|g" \
	    -e "s|%SHMAP_CMAKE_PRIVATE_LIBS%|$$priv|g" \
	    $(srcdir)/cmake/shmapConfig.cmake.in > $@
cmake/shmapConfigVersion.cmake: $(srcdir)/cmake/shmapConfigVersion.cmake.in Makefile
	$(AM_V_GEN)$(MKDIR_P) cmake && \
	sed -e 's|%PACKAGE_VERSION%|$(PACKAGE_VERSION)|g' \
	    -e 's|%SHMAP_VERSION_MAJOR%|$(SHMAP_VERSION_MAJOR)|g' \
	    $(srcdir)/cmake/shmapConfigVersion.cmake.in > $@
