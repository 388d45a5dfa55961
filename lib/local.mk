# lib/local.mk -- the shared pieces (flat lib/).
# This part of libmoecore in one block, included by Makefile.am (the build stays
# non-recursive): its public headers, private headers and sources.
moeinclude_HEADERS += lib/moe/moe.h lib/moe/bgz.h lib/moe/io.h lib/moe/rng.h lib/moe/plot.h
noinst_HEADERS += lib/util_internal.h lib/parse_internal.h lib/rng_internal.h \
	lib/pool_internal.h lib/bsrc_internal.h lib/plot_internal.h lib/textbuf_internal.h \
	lib/json_internal.h
lib_libmoecore_la_SOURCES += lib/moe.c lib/util.c lib/pool.c lib/bsrc.c lib/parse.c \
	lib/numparse.c lib/bgz.c lib/io.c lib/rng.c lib/textbuf.c lib/plot.c lib/plot_font.c \
	lib/json_tok.c
