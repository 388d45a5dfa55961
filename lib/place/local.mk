# lib/place/local.mk -- place/: the placement methods.
# This part of libmoecore in one block, included by Makefile.am (the build stays
# non-recursive): its public headers, private headers and sources.
moeinclude_HEADERS += lib/moe/place.h
noinst_HEADERS += lib/place/place_internal.h lib/place/place_lp_internal.h
lib_libmoecore_la_SOURCES += lib/place/place_tokens.c lib/place/place_cv.c \
	lib/place/place_replay.c lib/place/place_exflow.c lib/place/place_model.c \
	lib/place/place_search.c lib/place/place_bound.c lib/place/place_chain.c lib/place/place_fit.c \
	lib/place/place_import.c lib/place/place_affinity.c lib/place/place_anneal.c \
	lib/place/place_replica.c lib/place/place_assign.c lib/place/place_fill.c \
	lib/place/place_groups.c
