/* tests/fuzz/fuzz_placement.c -- libFuzzer target: one placement reader, chosen at build time
 * with -DFUZZ_FORMAT=MOE_PLACEMENT_<TEXT|EXFLOW|EPLB|SGLANG>, and the round trips of what it
 * accepts. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe/placement.h"

#ifndef FUZZ_FORMAT
#define FUZZ_FORMAT MOE_PLACEMENT_TEXT
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct buf {
    char *p;
    size_t n, cap;
} buf_t;

static int sink(void *ctx, const void *data, size_t len)
{
    buf_t *b = ctx;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + len)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return MOE_ENOMEM;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
    return 0;
}

/* A second in-memory file for what the library wrote (fuzz_path holds the input). */
static int out_path(const buf_t *b, char *path, size_t n)
{
    static int fd = -1;
    if (fd < 0 && (fd = memfd_create("moe-fuzz-out", 0)) < 0)
        return -1;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, b->p, b->n, 0) != (ssize_t)b->n)
        return -1;
    snprintf(path, n, "/proc/self/fd/%d", fd);
    return 0;
}

/* Export in a format, import that, export again: the same bytes. ExFlow's CSV may refuse
 * replicas, and its import sets capacity to ceil(E / ranks), which a placement may exceed;
 * SGLang's JSON refuses empty slots. */
static void round_trip(const moe_placement_t *p, int format)
{
    buf_t a = {0}, b = {0};
    char err[256], path[64];
    int st;
    if (moe_placement_export(p, format, sink, &a, err, sizeof err) != 0) {
        if (format != MOE_PLACEMENT_EXFLOW && format != MOE_PLACEMENT_SGLANG)
            abort();
    } else if (out_path(&a, path, sizeof path) == 0) {
        moe_placement_t *q = moe_placement_import(path, format, p->experts, p->ranks,
                                                  p->gpus_per_node, &st, err, sizeof err);
        if (!q && !(format == MOE_PLACEMENT_EXFLOW && st == MOE_ERANGE))
            abort();
        if (q && (moe_placement_export(q, format, sink, &b, err, sizeof err) != 0 ||
                  a.n != b.n || memcmp(a.p, b.p, a.n) != 0))
            abort();
        moe_placement_free(q);
    }
    free(a.p);
    free(b.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    int st;
    if (FUZZ_FORMAT == MOE_PLACEMENT_TEXT)
        moe_placement_free(moe_placement_parse((const char *)data, size, "fuzz", &st, err,
                                               sizeof err));
    if (fuzz_path(data, size, path, sizeof path) != 0)
        return 0;
    /* eplb.py's bare phy2log and SGLang's map need the number of ranks from the caller */
    uint32_t ranks = (FUZZ_FORMAT == MOE_PLACEMENT_EPLB && size && data[0] == '[') ||
                             FUZZ_FORMAT == MOE_PLACEMENT_SGLANG
                         ? 1 + size % 4
                         : 0;
    moe_placement_t *p = moe_placement_import(path, FUZZ_FORMAT, 0, ranks, 0, &st, err,
                                              sizeof err);
    if (!p)
        return 0;
    round_trip(p, MOE_PLACEMENT_TEXT);
    round_trip(p, MOE_PLACEMENT_EXFLOW);
    round_trip(p, MOE_PLACEMENT_EPLB);
    round_trip(p, MOE_PLACEMENT_SGLANG);
    moe_placement_free(p);
    return 0;
}
