# lib/cost/local.mk -- cost/: the papers' models, simulate, Megatron.
# This part of libmoecore in one block, included by Makefile.am (the build stays
# non-recursive): its public headers, private headers and sources.
moeinclude_HEADERS += lib/moe/cost.h lib/moe/costcfg.h lib/moe/mcore.h lib/moe/sim.h
noinst_HEADERS += lib/cost/sim_internal.h
lib_libmoecore_la_SOURCES += lib/cost/cost_exflow.c lib/cost/cost_monta.c lib/cost/cost_mpmoe.c \
	lib/cost/cost_janus.c lib/cost/cost_config.c lib/cost/mpmoe_profile.c lib/cost/monta_plot.c \
	lib/cost/cost_write.c lib/cost/cost_iter.c lib/cost/cost_hfmodel.c lib/cost/cost_mcore.c \
	lib/cost/cost_mcore_write.c lib/cost/sim.c lib/cost/sim_model.c lib/cost/sim_train.c \
	lib/cost/sim_report.c lib/cost/sim_nccl.c lib/cost/sim_write.c
