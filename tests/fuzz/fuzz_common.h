/* tests/fuzz/fuzz_common.h -- present a fuzzer's bytes to the library as a file path. */
#ifndef MOE_FUZZ_COMMON_H
#define MOE_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "moe/moe.h"

/* The library opens inputs by path, as the tools do; an in-memory file (memfd) reached through
 * /proc/self/fd gives it the fuzzer's bytes without touching the disk. */
static int fuzz_path(const uint8_t *data, size_t size, char *path, size_t n)
{
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("moe-fuzz", 0);
        if (fd < 0)
            return -1;
        moe_log_set_level(MOE_LOG_OFF);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        return -1;
    snprintf(path, n, "/proc/self/fd/%d", fd);
    return 0;
}

/* The bound of tests/README ("Work and memory bounded by the input"): a reader yields at most
 * one record per byte of its input after decompression, and gzip inflates at most 1032:1; a
 * record count past this is a finding (a crash libFuzzer reports with the input), not a walk
 * cut short, so that an input that declares far more than it holds cannot hide behind the
 * harness. The allowance covers small inputs. */
#define FUZZ_RECORDS_PER_BYTE 1032u
#define FUZZ_ALLOWANCE 4096u

static inline void fuzz_check_records(uint64_t records, size_t size)
{
    if (records > (uint64_t)FUZZ_RECORDS_PER_BYTE * size + FUZZ_ALLOWANCE)
        __builtin_trap(); /* work out of proportion to the input */
}

#include "moe/import.h"

/* Read every record of an opened importer, checking the bound as they come. */
static inline void fuzz_drain(moe_importer_t *im, size_t size)
{
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    if (moe_import_header(im, &h) == 0) {
        moe_trace_rec_t r = {0};
        uint64_t n = 0;
        while (moe_import_next(im, &r) == 1)
            fuzz_check_records(++n, size);
        moe_trace_rec_release(&r);
    }
    moe_trace_hdr_release(&h);
}

#endif
