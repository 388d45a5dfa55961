/* tests/fuzz/fuzz_common.h -- present a fuzzer's bytes to the library as a file path. */
#ifndef MOE_FUZZ_COMMON_H
#define MOE_FUZZ_COMMON_H

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

#endif
