# lib/import/local.mk -- import/: the router-log readers.
# This part of libmoecore in one block, included by Makefile.am (the build stays
# non-recursive): its public headers, private headers and sources.
moeinclude_HEADERS += lib/moe/import.h
noinst_HEADERS += lib/import/import_readers_internal.h lib/import/import_common_internal.h \
	lib/import/pt_internal.h lib/import/import_dense_internal.h
lib_libmoecore_la_SOURCES += lib/import/import.c lib/import/import_common.c \
	lib/import/import_tokens.c lib/import/import_json.c lib/import/import_csv.c \
	lib/import/import_npy.c lib/import/import_sglang.c lib/import/pt_zip.c lib/import/pt_pickle.c \
	lib/import/import_dense.c lib/import/import_safetensors.c lib/import/import_raw.c \
	lib/import/import_loads.c lib/import/import_run.c lib/import/import_map.c \
	lib/import/import_torch.c lib/import/import_vllm.c lib/import/import_stages.c
