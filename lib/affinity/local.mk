# lib/affinity/local.mk -- affinity/: counts, tables, figures.
# This part of libmoecore in one block, included by Makefile.am (the build stays
# non-recursive): its public headers, private headers and sources.
moeinclude_HEADERS += lib/moe/affinity.h
noinst_HEADERS += lib/affinity/affinity_internal.h lib/affinity/affinity_count_internal.h
lib_libmoecore_la_SOURCES += lib/affinity/affinity.c lib/affinity/affinity_kern.c \
	lib/affinity/affinity_stats.c lib/affinity/affinity_table.c lib/affinity/affinity_plot.c
