# lib/acct/local.mk -- acct/: placements, topologies, the accounting.
# This part of libmoecore in one block, included by Makefile.am (the build stays
# non-recursive): its public headers, private headers and sources.
moeinclude_HEADERS += lib/moe/topo.h lib/moe/placement.h lib/moe/acct.h
noinst_HEADERS += lib/acct/placement_io_internal.h lib/acct/acct_internal.h
lib_libmoecore_la_SOURCES += lib/acct/topo.c lib/acct/placement.c lib/acct/placement_io.c \
	lib/acct/placement_common.c lib/acct/placement_text.c lib/acct/placement_exflow.c \
	lib/acct/placement_eplb.c lib/acct/placement_sglang.c lib/acct/topo_io.c lib/acct/acct_inputs.c \
	lib/acct/acct_write.c lib/acct/acct.c lib/acct/acct_replica.c lib/acct/acct_deepep.c \
	lib/acct/acct_compare.c
