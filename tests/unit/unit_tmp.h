/* tests/unit/unit_tmp.h -- what the unit tests share besides assertions: a temporary directory
 * of their own (made by unit_tmp_init, removed with its files by unit_tmp_done), file names in
 * it, files written there, and the xorshift generator their random cases draw from. */
#ifndef MOE_TESTS_UNIT_TMP_H
#define MOE_TESTS_UNIT_TMP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

static char unit_tmpdir[512];

/* Make the directory "$TMPDIR/NAME.XXXXXX" (or under /tmp): 0, or -1 after a message. */
static inline int unit_tmp_init(const char *name)
{
    const char *t = getenv("TMPDIR");
    snprintf(unit_tmpdir, sizeof unit_tmpdir, "%s/%s.XXXXXX", t && *t ? t : "/tmp", name);
    if (!mkdtemp(unit_tmpdir)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* Remove the directory and everything in it: 0, or -1 after a message. */
static inline int unit_tmp_done(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", unit_tmpdir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", unit_tmpdir);
        return -1;
    }
    return 0;
}

/* The path of NAME in the directory; the last 32 results stay valid. */
static inline const char *tmp_path(const char *name)
{
    static char buf[32][600];
    static int i;
    i = (i + 1) % 32;
    snprintf(buf[i], sizeof buf[i], "%s/%s", unit_tmpdir, name);
    return buf[i];
}

/* Write len bytes to NAME in the directory (a failed write is a failed check); its path. */
static inline const char *tmp_write(const char *name, const void *data, size_t len)
{
    const char *path = tmp_path(name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (fp) {
        CHECK(fwrite(data, 1, len, fp) == len);
        CHECK(fclose(fp) == 0);
    }
    return path;
}

/* The same for a string. */
static inline const char *tmp_write_text(const char *name, const char *text)
{
    return tmp_write(name, text, strlen(text));
}

/* Marsaglia's xorshift64 step on *state (never 0). */
static inline uint64_t unit_xorshift(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

#endif
