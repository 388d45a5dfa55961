# lib/trace/local.mk -- trace/: the routing-trace formats, trace map and generator.
# This part of libmoecore in one block, included by Makefile.am (the build stays
# non-recursive): its public headers, private headers and sources.
moeinclude_HEADERS += lib/moe/trace.h lib/moe/gen.h lib/moe/trace_map.h
noinst_HEADERS += lib/trace/trace_codec_internal.h
lib_libmoecore_la_SOURCES += lib/trace/trace.c lib/trace/trace_bin.c lib/trace/trace_text.c \
	lib/trace/trace_hdr.c lib/trace/gen.c lib/trace/trace_stats.c lib/trace/trace_sample.c \
	lib/trace/trace_copy.c lib/trace/trace_layers.c lib/trace/trace_map.c
