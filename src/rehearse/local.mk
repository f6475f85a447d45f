# SPDX-License-Identifier: MIT
# The cluster rehearsal: fabrics (presets and JSON files), the alpha-beta
# prices of collectives, and the rehearsal of a map's recorded events.
src_libshmap_core_la_SOURCES += src/rehearse/fabric.c src/rehearse/price.c \
	src/rehearse/rehearse.c src/rehearse/spread.c
noinst_HEADERS += src/rehearse/fabric.h src/rehearse/rehearse.h \
	src/rehearse/spread.h
