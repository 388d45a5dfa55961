/* tests/fuzz/fuzz_handoff.c -- libFuzzer target: the readers of what other systems hand over
 * besides traces. The input is read as a table of numbers (moe_import_table: a torch.save
 * dict, a JSON file, inline JSON), as SGLang's --init-expert-location (moe_place_import, with
 * the export round trip of what it accepts), as per-layer loads (moe_import_loads), and as the
 * physical map of a fixed raw trace of slot ids and of fixed loads of six slots per layer. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe/import.h"
#include "moe/place.h"
#include "moe/placement.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A second in-memory file holding fixed bytes (fuzz_path holds the input). */
static int fixed_path(int *fd, const void *bytes, size_t n, char *path, size_t len)
{
    if (*fd < 0) {
        if ((*fd = memfd_create("moe-fuzz-fixed", 0)) < 0)
            return -1;
        if (pwrite(*fd, bytes, n, 0) != (ssize_t)n)
            return -1;
    }
    snprintf(path, len, "/proc/self/fd/%d", *fd);
    return 0;
}

static int discard(void *ctx, const void *buf, size_t len)
{
    (void)ctx;
    (void)buf;
    (void)len;
    return 0;
}

/* The trace: int16 slot ids, 4 tokens x 2 layers x top-2, slots 0..5 as in the seeds' maps. */
static void physical_trace(const char *map)
{
    static int fd = -1;
    static const int16_t ids[16] = {0, 5, 1, 4, 2, 3, 3, 2, 4, 1, 5, 0, 0, 1, 4, 5};
    char path[64], err[256];
    if (fixed_path(&fd, ids, sizeof ids, path, sizeof path) != 0)
        return;
    moe_import_opts_t o = {0};
    o.format = MOE_IMPORT_RAW;
    o.shape = "2,2";
    o.dtype = "int16";
    o.physical_map = map;
    int st;
    moe_importer_t *im = moe_import_open(&o, path, 1, &st, err, sizeof err);
    if (!im)
        return;
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    if (moe_import_header(im, &h) == 0) {
        moe_trace_rec_t r = {0};
        for (int n = 0; n < 100 && moe_import_next(im, &r) == 1; n++)
            ;
        moe_trace_rec_release(&r);
    }
    moe_trace_hdr_release(&h);
    moe_import_close(im);
}

static void loads(const char *path, const char *map)
{
    moe_loads_t l;
    char err[256];
    memset(&l, 0, sizeof l);
    if (moe_import_loads(path, map, 0, &l, err, sizeof err) == 0)
        moe_loads_free(&l);
}

static void table(const char *path)
{
    static const char *const keys[] = {"physical_to_logical_map", "logical_count"};
    moe_table_t t;
    char err[256];
    memset(&t, 0, sizeof t);
    if (moe_import_table(path, keys, 2, &t, err, sizeof err) == 0)
        moe_table_free(&t);
}

static void placement(const char *path, uint32_t ranks)
{
    char err[256];
    int st;
    moe_placement_t *p = moe_place_import(path, MOE_PLACEMENT_SGLANG, 0, ranks, 0, &st, err,
                                          sizeof err);
    if (!p)
        return;
    /* what was read is a placement every writer takes (SGLang's may refuse empty slots) */
    if (moe_placement_export(p, MOE_PLACEMENT_TEXT, discard, NULL, err, sizeof err) != 0 ||
        moe_placement_export(p, MOE_PLACEMENT_EPLB, discard, NULL, err, sizeof err) != 0)
        abort();
    moe_placement_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int loads_fd = -1;
    static const char counts[] =
        "{\"logical_count\": [[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]]}\n";
    char path[64], fixed[64];
    if (fuzz_path(data, size, path, sizeof path) != 0)
        return 0;
    table(path);
    placement(path, 1 + (uint32_t)(size % 4));
    loads(path, NULL);
    physical_trace(path);
    if (fixed_path(&loads_fd, counts, sizeof counts - 1, fixed, sizeof fixed) == 0)
        loads(fixed, path);
    /* inline JSON: a name that is no file and starts with '{' */
    if (size && size < 4096 && data[0] == '{' && !memchr(data, 0, size)) {
        char *s = malloc(size + 1);
        if (!s)
            return 0;
        memcpy(s, data, size);
        s[size] = 0;
        table(s);
        placement(s, 1 + (uint32_t)(size % 4));
        free(s);
    }
    return 0;
}
