/* tests/unit/test_bgz.c -- block-gzip container: round trips, block layout, gzip compatibility,
 * and detection of truncated, corrupt and foreign input. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe/bgz.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "unit.h"
#include "unit_tmp.h"

/* Size of the end-of-file block: an empty gzip member with the extra field. */
#define EOF_SIZE 30

/* ------------------------------------------------------------------ helpers */

/* The test's own generator, independent of the library's. */
static uint64_t rnd_state = 0x9E3779B97F4A7C15u;
static uint64_t rnd(void)
{
    return unit_xorshift(&rnd_state);
}

/* A payload cut into writes: the bytes and the size of every moe_bgz_write call. */
typedef struct payload {
    uint8_t *data;
    size_t len;
    size_t *writes;
    size_t nwrites;
} payload_t;

/* Mixed content: incompressible stretches, repetitive text, runs of zeros; write sizes from
 * 1 byte to whole blocks (one write of exactly MOE_BGZ_MAX_BLOCK). */
static void payload_make(payload_t *p, size_t target, int with_max)
{
    memset(p, 0, sizeof *p);
    size_t cap = target + MOE_BGZ_MAX_BLOCK + 1;
    p->data = malloc(cap);
    p->writes = malloc(sizeof *p->writes * (target / 8 + 16));
    while (p->len < target) {
        size_t n;
        uint64_t r = rnd();
        switch (r % 8) {
        case 0: n = 1 + rnd() % 16; break;
        case 1: n = 1 + rnd() % 300000; break;
        case 2: n = 1 + rnd() % 700000; break;
        default: n = 1 + rnd() % 4000; break;
        }
        if (with_max && p->nwrites == 3)
            n = MOE_BGZ_MAX_BLOCK;
        uint8_t *d = p->data + p->len;
        int kind = (int)((r >> 8) % 3);
        for (size_t i = 0; i < n; i++) {
            if (kind == 0)
                d[i] = (uint8_t)rnd();
            else if (kind == 1)
                d[i] = (uint8_t)("routing trace 0123456789\n"[(p->len + i) % 25]);
            else
                d[i] = 0;
        }
        p->len += n;
        p->writes[p->nwrites++] = n;
    }
}

static void payload_free(payload_t *p)
{
    free(p->data);
    free(p->writes);
}

/* Write a payload to fd through a container. Returns the moe_bgz_close status (or the first
 * write failure). */
static int write_fd(int fd, const payload_t *p, int level, int threads)
{
    int st = 0;
    moe_bgz_t *bz = moe_bgz_dopen(fd, 'w', level, threads, "test", NULL, 0, &st);
    if (!bz)
        return st;
    size_t off = 0;
    int rc = 0;
    for (size_t i = 0; i < p->nwrites && rc == 0; i++) {
        rc = moe_bgz_write(bz, p->data + off, p->writes[i]);
        off += p->writes[i];
    }
    int crc = moe_bgz_close(bz);
    return rc ? rc : crc;
}

static int write_file(const char *path, const payload_t *p, int level, int threads)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return MOE_ESYS;
    return write_fd(fd, p, level, threads);
}

/* What a reader got: the concatenated payload and the block lengths. */
typedef struct got {
    uint8_t *data;
    size_t len, cap;
    size_t *blocks;
    size_t nblocks, bcap;
    int status;       /* last return of moe_bgz_read_block: 0 = clean end, < 0 = error */
    uint64_t tell;
    char msg[200];
} got_t;

static void got_free(got_t *g)
{
    free(g->data);
    free(g->blocks);
    memset(g, 0, sizeof *g);
}

/* Read everything from fd (plus an optional sniffed prefix). */
static void read_fd(int fd, int threads, const uint8_t *prefix, size_t plen, got_t *g)
{
    memset(g, 0, sizeof *g);
    int st = 0;
    moe_bgz_t *bz = moe_bgz_dopen(fd, 'r', 0, threads, "test", prefix, plen, &st);
    if (!bz) {
        g->status = st;
        close(fd);
        return;
    }
    const uint8_t *d;
    size_t n;
    int rc;
    while ((rc = moe_bgz_read_block(bz, &d, &n)) == 1) {
        if (g->len + n > g->cap) {
            g->cap = (g->len + n) * 2;
            g->data = realloc(g->data, g->cap);
        }
        memcpy(g->data + g->len, d, n);
        g->len += n;
        if (g->nblocks == g->bcap) {
            g->bcap = g->bcap ? 2 * g->bcap : 64;
            g->blocks = realloc(g->blocks, g->bcap * sizeof *g->blocks);
        }
        g->blocks[g->nblocks++] = n;
    }
    g->status = rc;
    g->tell = moe_bgz_tell(bz);
    snprintf(g->msg, sizeof g->msg, "%s", moe_bgz_errmsg(bz));
    int crc = moe_bgz_close(bz);
    if (rc == 0 && crc != 0)
        g->status = crc;
}

static void read_file(const char *path, int threads, got_t *g)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        memset(g, 0, sizeof *g);
        g->status = MOE_ESYS;
        return;
    }
    read_fd(fd, threads, NULL, 0, g);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, fp);
    fclose(fp);
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (fp) {
        if (n)
            fwrite(b, 1, n, fp);
        fclose(fp);
    }
}

/* Offsets of the members of a container file (from the size fields), count returned. */
static size_t member_offsets(const uint8_t *f, size_t len, size_t *off, size_t max)
{
    size_t n = 0, o = 0;
    while (o + MOE_BGZ_HEADER_SIZE <= len && n < max) {
        off[n++] = o;
        size_t bsize = (size_t)f[o + 16] | (size_t)f[o + 17] << 8 | (size_t)f[o + 18] << 16 |
                       (size_t)f[o + 19] << 24;
        o += bsize + 1;
    }
    return n;
}

/* Does every block end on a write boundary, and stay within the block size limit? */
static int blocks_respect_writes(const got_t *g, const payload_t *p)
{
    size_t w = 0, wend = 0, bend = 0;
    for (size_t b = 0; b < g->nblocks; b++) {
        if (g->blocks[b] == 0 || g->blocks[b] > MOE_BGZ_MAX_BLOCK)
            return 0;
        bend += g->blocks[b];
        while (wend < bend && w < p->nwrites)
            wend += p->writes[w++];
        if (wend != bend)
            return 0;
    }
    return 1;
}

static int have_gzip(void)
{
    static int have = -1;
    if (have < 0)
        have = system("command -v gzip >/dev/null 2>&1") == 0;
    return have;
}

/* Does `gzip -dc` (an independent inflater, reading concatenated members) give the payload
 * stored in file `ref`? */
static int gzip_equals(const char *path, const char *ref)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' | cmp -s - '%s'", path, ref);
    return system(cmd) == 0;
}

/* Bitwise CRC-32 (the gzip polynomial), to build a foreign gzip member without zlib. */
static uint32_t crc32_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* ------------------------------------------------------------------ round trips */

static void test_round_trips(void)
{
    payload_t p;
    payload_make(&p, 7u << 20, 1);
    static const int levels[] = {0, 1, 6}, threads[] = {0, 1, 3};
    char ref[512];
    snprintf(ref, sizeof ref, "%s", tmp_path("rt.ref"));
    spit(ref, p.data, p.len);
    uint8_t *first[3] = {0};
    size_t first_len[3] = {0};
    for (int li = 0; li < 3; li++) {
        for (int wi = 0; wi < 3; wi++) {
            const char *path = tmp_path("rt.bgz");
            int rc = write_file(path, &p, levels[li], threads[wi]);
            CHECK_EQ_INT(rc, 0);
            size_t flen;
            uint8_t *f = slurp(path, &flen);
            CHECK(f != NULL);
            /* The output depends on the data and level only, never on the thread count. */
            if (wi == 0) {
                first[li] = f;
                first_len[li] = flen;
            } else {
                CHECK(f && flen == first_len[li] && memcmp(f, first[li], flen) == 0);
                free(f);
            }
            for (int ri = 0; ri < 3; ri++) {
                got_t g;
                read_file(path, threads[ri], &g);
                CHECK_EQ_INT(g.status, 0);
                CHECK_EQ_INT(g.len, p.len);
                CHECK(g.len == p.len && memcmp(g.data, p.data, p.len) == 0);
                CHECK(blocks_respect_writes(&g, &p));
                CHECK_EQ_INT(g.tell, flen);
                got_free(&g);
            }
            if (have_gzip())
                CHECK(gzip_equals(path, ref));
            printf("round trip: level %d, %d writer threads, read with 0/1/3 threads%s\n",
                   levels[li], threads[wi], have_gzip() ? "; gzip -dc reads it" : "");
        }
    }
    /* Stored blocks are larger than the payload; compressed ones are smaller. */
    CHECK(first_len[0] > p.len);
    CHECK(first_len[2] < first_len[0]);
    CHECK(first_len[2] <= first_len[1] + first_len[1] / 20);
    for (int li = 0; li < 3; li++)
        free(first[li]);

    payload_free(&p);
}

/* A writer feeding a pipe that the reader drains at the same time. */
typedef struct pipe_job {
    int fd, level, threads, rc;
    const payload_t *p;
} pipe_job_t;

static void *pipe_writer(void *arg)
{
    pipe_job_t *j = arg;
    j->rc = write_fd(j->fd, j->p, j->level, j->threads);
    return NULL;
}

static void test_pipes(void)
{
    payload_t p;
    payload_make(&p, 3u << 20, 0);
    static const int cfg[][3] = {{0, 0, 0}, {6, 3, 1}, {1, 1, 3}, {6, 0, 3}};
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++) {
        int fds[2];
        CHECK(pipe(fds) == 0);
        pipe_job_t j = {fds[1], cfg[i][0], cfg[i][1], -99, &p};
        pthread_t th;
        pthread_create(&th, NULL, pipe_writer, &j);
        got_t g;
        read_fd(fds[0], cfg[i][2], NULL, 0, &g);
        pthread_join(th, NULL);
        CHECK_EQ_INT(j.rc, 0);
        CHECK_EQ_INT(g.status, 0);
        CHECK(g.len == p.len && memcmp(g.data, p.data, p.len) == 0);
        CHECK(blocks_respect_writes(&g, &p));
        got_free(&g);
        printf("pipe: level %d, writer %d threads, reader %d threads\n", cfg[i][0], cfg[i][1],
               cfg[i][2]);
    }

    /* A sniffed prefix (what the format detector read) is consumed before the descriptor. */
    const char *path = tmp_path("prefix.bgz");
    CHECK_EQ_INT(write_file(path, &p, 1, 0), 0);
    static const size_t plens[] = {1, 7, 16, MOE_BGZ_HEADER_SIZE, 100};
    for (size_t i = 0; i < sizeof plens / sizeof *plens; i++) {
        int fd = open(path, O_RDONLY);
        uint8_t pre[100];
        CHECK_EQ_INT(moe_read_full(fd, pre, plens[i]), plens[i]);
        got_t g;
        read_fd(fd, (int)i % 2, pre, plens[i], &g);
        CHECK_EQ_INT(g.status, 0);
        CHECK(g.len == p.len && memcmp(g.data, p.data, p.len) == 0);
        got_free(&g);
    }
    printf("sniffed prefix of 1, 7, 16, 20, 100 bytes\n");
    payload_free(&p);
}

/* ------------------------------------------------------------------ block layout */

static void test_layout(void)
{
    const char *path = tmp_path("layout.bgz");
    int st = 0;

    /* No writes: the file is exactly the end-of-file block, and reads as empty. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    moe_bgz_t *bz = moe_bgz_dopen(fd, 'w', 6, 0, path, NULL, 0, &st);
    CHECK(bz != NULL);
    CHECK_EQ_INT(moe_bgz_close(bz), 0);
    size_t len;
    uint8_t *f = slurp(path, &len);
    CHECK_EQ_INT(len, EOF_SIZE);
    CHECK(moe_bgz_is_bgz(f, len));
    free(f);
    got_t g;
    read_file(path, 0, &g);
    CHECK_EQ_INT(g.status, 0);
    CHECK_EQ_INT(g.len, 0);
    CHECK_EQ_INT(g.nblocks, 0);
    got_free(&g);

    /* flush closes a block; small writes share one; writes are never split. */
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    bz = moe_bgz_dopen(fd, 'w', 6, 2, path, NULL, 0, &st);
    CHECK_EQ_INT(moe_bgz_write(bz, "abc", 3), 0);
    CHECK_EQ_INT(moe_bgz_write(bz, "defg", 4), 0);
    CHECK_EQ_INT(moe_bgz_flush(bz), 0);
    CHECK_EQ_INT(moe_bgz_flush(bz), 0); /* nothing pending: no empty block */
    CHECK_EQ_INT(moe_bgz_write(bz, "hi", 2), 0);
    uint8_t *big = calloc(1, MOE_BGZ_MAX_BLOCK + 1);
    CHECK_EQ_INT(moe_bgz_write(bz, big, MOE_BGZ_MAX_BLOCK + 1), MOE_EINVAL);
    CHECK(strlen(moe_bgz_errmsg(bz)) > 0);
    moe_bgz_close(bz);
    free(big);

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    bz = moe_bgz_dopen(fd, 'w', 6, 0, path, NULL, 0, &st);
    CHECK_EQ_INT(moe_bgz_write(bz, "abc", 3), 0);
    CHECK_EQ_INT(moe_bgz_write(bz, "defg", 4), 0);
    CHECK_EQ_INT(moe_bgz_flush(bz), 0);
    CHECK_EQ_INT(moe_bgz_write(bz, "hi", 2), 0);
    CHECK_EQ_INT(moe_bgz_close(bz), 0);
    read_file(path, 1, &g);
    CHECK_EQ_INT(g.status, 0);
    CHECK_EQ_INT(g.nblocks, 2);
    if (g.nblocks == 2) {
        CHECK_EQ_INT(g.blocks[0], 7);
        CHECK_EQ_INT(g.blocks[1], 2);
    }
    CHECK(g.len == 9 && memcmp(g.data, "abcdefghi", 9) == 0);
    got_free(&g);

    /* Every member carries its size: walking the size fields lands exactly on the end, and
     * the last member is the end-of-file block. */
    payload_t p;
    payload_make(&p, 2u << 20, 0);
    CHECK_EQ_INT(write_file(path, &p, 6, 1), 0);
    f = slurp(path, &len);
    size_t off[4096];
    size_t n = member_offsets(f, len, off, 4096);
    CHECK(n >= 3);
    size_t last = off[n - 1];
    CHECK_EQ_INT(len - last, EOF_SIZE);
    for (size_t i = 0; i < n; i++)
        CHECK(moe_bgz_is_bgz(f + off[i], len - off[i]));
    /* Blocks reach the target size before being closed (except the last data block). */
    read_file(path, 0, &g);
    for (size_t i = 0; i + 1 < g.nblocks; i++)
        CHECK(g.blocks[i] >= MOE_BGZ_TARGET_BLOCK);
    CHECK_EQ_INT(g.nblocks, n - 1);
    got_free(&g);
    free(f);
    payload_free(&p);

    /* Format sniffing. */
    static const uint8_t plain_gz[16] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    CHECK(!moe_bgz_is_bgz(plain_gz, 16));
    uint8_t eof[EOF_SIZE];
    int efd = open(tmp_path("eof.bgz"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    moe_bgz_close(moe_bgz_dopen(efd, 'w', 0, 0, "eof", NULL, 0, &st));
    f = slurp(tmp_path("eof.bgz"), &len);
    CHECK_EQ_INT(len, EOF_SIZE);
    memcpy(eof, f, EOF_SIZE);
    free(f);
    CHECK(moe_bgz_is_bgz(eof, 16));
    CHECK(!moe_bgz_is_bgz(eof, 15));
    printf("layout: empty container, flush, write limit, member sizes, sniffing\n");
}

/* ------------------------------------------------------------------ bad input */

static int read_bytes_status(const uint8_t *b, size_t n, int threads, got_t *g)
{
    const char *path = tmp_path("bad.bgz");
    spit(path, b, n);
    read_file(path, threads, g);
    return g->status;
}

static void test_truncated(void)
{
    payload_t p;
    payload_make(&p, 1u << 20, 0);
    const char *path = tmp_path("trunc.bgz");
    CHECK_EQ_INT(write_file(path, &p, 6, 0), 0);
    size_t len;
    uint8_t *f = slurp(path, &len);
    size_t off[1024];
    size_t n = member_offsets(f, len, off, 1024);
    CHECK(n >= 4);
    /* Cut points: inside the first header, inside the first block's data, exactly at a block
     * boundary, inside the next block's header (before and after its size field), one byte
     * short of the end, and the end-of-file block removed whole. */
    size_t cuts[] = {2,          10,          19,          off[1] / 2,  off[1],
                     off[1] + 5, off[1] + 18, off[2] - 3,  len - EOF_SIZE, len - EOF_SIZE + 1,
                     len - 1,    off[n - 1] + 12};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        for (int th = 0; th <= 2; th += 2) {
            got_t g;
            int rc = read_bytes_status(f, cuts[i], th, &g);
            if (rc != MOE_ETRUNC)
                fprintf(stderr, "cut at %zu of %zu (threads %d): status %d (%s)\n", cuts[i],
                        len, th, rc, g.msg);
            CHECK_EQ_INT(rc, MOE_ETRUNC);
            CHECK(strstr(g.msg, "truncated") != NULL);
            /* Whatever was delivered is a prefix of the payload. */
            CHECK(g.len <= p.len && (g.len == 0 || memcmp(g.data, p.data, g.len) == 0));
            got_free(&g);
        }
    }
    /* Without the end-of-file block every data block is still delivered before the error. */
    got_t g;
    CHECK_EQ_INT(read_bytes_status(f, len - EOF_SIZE, 3, &g), MOE_ETRUNC);
    CHECK(g.len == p.len && memcmp(g.data, p.data, p.len) == 0);
    CHECK(strstr(g.msg, "end-of-file") != NULL);
    got_free(&g);
    /* Empty input has no end-of-file block either. */
    CHECK_EQ_INT(read_bytes_status(f, 0, 0, &g), MOE_ETRUNC);
    CHECK_EQ_INT(g.len, 0);
    got_free(&g);
    printf("truncated: %zu cut points, missing end-of-file block, empty file\n",
           sizeof cuts / sizeof *cuts);
    free(f);
    payload_free(&p);
}

static void test_corrupt(void)
{
    payload_t p;
    payload_make(&p, 1u << 20, 0);
    for (int level = 0; level <= 6; level += 6) {
        const char *path = tmp_path("corrupt.bgz");
        CHECK_EQ_INT(write_file(path, &p, level, 0), 0);
        size_t len;
        uint8_t *f = slurp(path, &len);
        size_t off[1024];
        size_t n = member_offsets(f, len, off, 1024);
        CHECK(n >= 4);
        /* A flipped bit in block 2's deflate data, then in its CRC. */
        size_t data_at = off[2] + MOE_BGZ_HEADER_SIZE + (off[3] - off[2]) / 2;
        size_t crc_at = off[3] - 8;
        size_t where[] = {data_at, crc_at, off[1] - MOE_BGZ_FOOTER_SIZE - 1};
        for (size_t w = 0; w < sizeof where / sizeof *where; w++) {
            for (int th = 0; th <= 3; th += 3) {
                f[where[w]] ^= 0x10;
                got_t g;
                int rc = read_bytes_status(f, len, th, &g);
                f[where[w]] ^= 0x10;
                CHECK_EQ_INT(rc, MOE_ECORRUPT);
                CHECK(strstr(g.msg, "offset") != NULL);
                /* Blocks before the bad one were delivered intact. */
                CHECK(g.len <= p.len && (g.len == 0 || memcmp(g.data, p.data, g.len) == 0));
                CHECK_EQ_INT(g.nblocks, w < 2 ? 2 : 0);
                got_free(&g);
            }
        }
        /* An absurd size field. */
        uint8_t save[4];
        memcpy(save, f + off[1] + 16, 4);
        memset(f + off[1] + 16, 0xff, 4);
        got_t g;
        CHECK_EQ_INT(read_bytes_status(f, len, 0, &g), MOE_ECORRUPT);
        got_free(&g);
        memset(f + off[1] + 16, 0, 4);
        CHECK_EQ_INT(read_bytes_status(f, len, 0, &g), MOE_ECORRUPT);
        got_free(&g);
        memcpy(f + off[1] + 16, save, 4);
        /* An ISIZE above the block limit. */
        f[off[2] - 1] = 0x7f;
        CHECK_EQ_INT(read_bytes_status(f, len, 1, &g), MOE_ECORRUPT);
        got_free(&g);
        free(f);
        printf("corrupt: level %d: flipped data, CRC and last data byte; bad size fields\n",
               level);
    }
    payload_free(&p);
}

static void test_foreign(void)
{
    got_t g;
    /* A gzip file of another kind (no 'MF' extra field). */
    static const uint8_t text[13] = "hello, world\n";
    uint8_t member[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, /* stored block: */ 1, 13, 0,
                          (uint8_t)~13, 0xff};
    memcpy(member + 15, text, 13);
    uint32_t crc = crc32_bitwise(text, 13);
    for (int i = 0; i < 4; i++)
        member[28 + i] = (uint8_t)(crc >> (8 * i));
    member[32] = 13;
    const char *gzpath = tmp_path("plain.gz");
    spit(gzpath, member, 36);
    if (have_gzip()) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "gzip -dc '%s' | grep -q '^hello, world$'", gzpath);
        CHECK(system(cmd) == 0); /* it is a valid gzip file */
    }
    read_file(gzpath, 0, &g);
    CHECK_EQ_INT(g.status, MOE_EFORMAT);
    CHECK(strstr(g.msg, "not a block-gzip") != NULL);
    got_free(&g);
    /* Random bytes, text, a lone byte. */
    uint8_t junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)rnd();
    junk[0] = 0x55;
    CHECK_EQ_INT(read_bytes_status(junk, sizeof junk, 2, &g), MOE_EFORMAT);
    got_free(&g);
    const char *view = "@MT\tVN:1.0\tlayers:1\n0\t0\t0\t0\t0\t1,2\n";
    CHECK_EQ_INT(read_bytes_status((const uint8_t *)view, strlen(view), 0, &g), MOE_EFORMAT);
    got_free(&g);
    CHECK_EQ_INT(read_bytes_status((const uint8_t *)"x", 1, 0, &g), MOE_EFORMAT);
    got_free(&g);
    /* A good container followed by garbage. */
    payload_t p;
    payload_make(&p, 100000, 0);
    const char *path = tmp_path("tail.bgz");
    CHECK_EQ_INT(write_file(path, &p, 6, 0), 0);
    size_t len;
    uint8_t *f = slurp(path, &len);
    f = realloc(f, len + 64);
    memcpy(f + len, junk + 1, 64);
    CHECK_EQ_INT(read_bytes_status(f, len + 64, 0, &g), MOE_EFORMAT);
    got_free(&g);
    free(f);
    payload_free(&p);
    printf("foreign input: plain gzip, random bytes, text, trailing garbage\n");
}

static void test_write_errors(void)
{
    payload_t p;
    payload_make(&p, 1u << 20, 0);
    int fd = open("/dev/full", O_WRONLY);
    if (fd >= 0) {
        for (int th = 0; th <= 2; th += 2) {
            int fd2 = th ? open("/dev/full", O_WRONLY) : fd;
            CHECK_EQ_INT(write_fd(fd2, &p, 1, th), MOE_ESYS);
        }
        /* Even an empty container fails when its end-of-file block cannot be written. */
        fd = open("/dev/full", O_WRONLY);
        int st;
        moe_bgz_t *bz = moe_bgz_dopen(fd, 'w', 6, 0, "full", NULL, 0, &st);
        CHECK_EQ_INT(moe_bgz_close(bz), MOE_ESYS);
        printf("write errors: /dev/full\n");
    }
    /* A reader that went away: EPIPE, reported, not a crash. */
    signal(SIGPIPE, SIG_IGN);
    int fds[2];
    CHECK(pipe(fds) == 0);
    close(fds[0]);
    CHECK_EQ_INT(write_fd(fds[1], &p, 0, 1), MOE_ESYS);
    printf("write errors: closed pipe\n");
    payload_free(&p);
    CHECK(moe_bgz_close(NULL) == 0);
}

/* Read every member of f[0..len) with moe_bgz_read_member and inflate it with
 * moe_bgz_inflate_member (the parallel trace map's path) into g; member offsets into off. */
static int read_members(const uint8_t *f, size_t len, got_t *g, size_t *off, size_t maxoff)
{
    memset(g, 0, sizeof *g);
    const char *path = tmp_path("members.bgz");
    spit(path, f, len);
    int fd = open(path, O_RDONLY), st = 0;
    moe_bgz_t *bz = moe_bgz_dopen(fd, 'r', 0, 0, "test", NULL, 0, &st);
    moe_bgz_inflater_t *z = moe_bgz_inflater_new();
    if (!bz || !z) {
        moe_bgz_inflater_free(z);
        moe_bgz_close(bz);
        return g->status = bz ? MOE_ENOMEM : st;
    }
    uint8_t *c = NULL, *u = NULL;
    size_t ccap = 0, clen = 0, ucap = 0;
    uint64_t at = 0;
    int rc;
    while ((rc = moe_bgz_read_member(bz, &c, &ccap, &clen, &at)) == 1) {
        if (g->nblocks < maxoff)
            off[g->nblocks] = (size_t)at;
        CHECK_EQ_INT(moe_bgz_member_isize(c, clen), c[clen - 4] | c[clen - 3] << 8 |
                                                        c[clen - 2] << 16 | c[clen - 1] << 24);
        ptrdiff_t n = moe_bgz_inflate_member(z, c, clen, at, &u, &ucap, g->msg, sizeof g->msg);
        if (n < 0) {
            rc = (int)n;
            break;
        }
        /* The unchecked peek gives the same first bytes. */
        uint8_t peek[100];
        size_t want = n < 100 ? (size_t)n : 100;
        CHECK_EQ_INT(moe_bgz_inflate_prefix(c, clen, peek, want), want);
        CHECK(memcmp(peek, u, want) == 0);
        g->data = realloc(g->data, g->len + (size_t)n + 1);
        memcpy(g->data + g->len, u, (size_t)n);
        g->len += (size_t)n;
        g->nblocks++;
    }
    if (rc < 0 && !g->msg[0])
        snprintf(g->msg, sizeof g->msg, "%s", moe_bgz_errmsg(bz));
    g->status = rc;
    free(c);
    free(u);
    moe_bgz_inflater_free(z);
    moe_bgz_close(bz);
    return rc;
}

/* The member-level reader: the same payload, blocks and errors as the streaming reader. */
static void test_members(void)
{
    payload_t p;
    payload_make(&p, 1u << 20, 0);
    char path[300]; /* tmp_path's buffer is reused by the helpers */
    snprintf(path, sizeof path, "%s", tmp_path("m.bgz"));
    CHECK_EQ_INT(write_file(path, &p, 6, 0), 0);
    size_t len;
    uint8_t *f = slurp(path, &len);
    size_t off[1024], moff[1024];
    size_t n = member_offsets(f, len, off, 1024);
    got_t g, s;
    CHECK_EQ_INT(read_members(f, len, &g, moff, 1024), 0);
    read_file(path, 0, &s);
    CHECK(g.len == p.len && memcmp(g.data, p.data, p.len) == 0);
    CHECK_EQ_INT(g.nblocks, s.nblocks);
    CHECK_EQ_INT(g.nblocks, n - 1); /* every member but the end-of-file marker */
    for (size_t i = 0; i + 1 < n && i < 1024; i++)
        CHECK_EQ_INT(moff[i], off[i]);
    got_free(&g);
    got_free(&s);
    /* Damage: flipped data, no end-of-file block, a gzip flag other than FEXTRA. */
    f[off[1] + MOE_BGZ_HEADER_SIZE + 10] ^= 0x10;
    CHECK_EQ_INT(read_members(f, len, &g, moff, 1024), MOE_ECORRUPT);
    CHECK(strstr(g.msg, "corrupt data") != NULL);
    got_free(&g);
    f[off[1] + MOE_BGZ_HEADER_SIZE + 10] ^= 0x10;
    CHECK_EQ_INT(read_members(f, len - EOF_SIZE, &g, moff, 1024), MOE_ETRUNC);
    CHECK_STR(g.msg, "truncated file (no end-of-file block)");
    got_free(&g);
    for (int bit = 0; bit < 8; bit++) {
        if (bit == 2)
            continue;
        f[off[1] + 3] = (uint8_t)(4 | 1 << bit);
        CHECK_EQ_INT(read_members(f, len, &g, moff, 1024), MOE_EFORMAT);
        CHECK(strstr(g.msg, "gzip header flags") != NULL);
        CHECK_EQ_INT(g.nblocks, 1);
        got_free(&g);
        read_file(path, bit & 1 ? 2 : 0, &s); /* the streaming reader too (file unchanged) */
        CHECK_EQ_INT(s.status, 0);
        got_free(&s);
        CHECK_EQ_INT(read_bytes_status(f, len, bit & 1 ? 2 : 0, &s), MOE_EFORMAT);
        CHECK(strstr(s.msg, "gzip header flags") != NULL);
        got_free(&s);
    }
    free(f);
    payload_free(&p);
    printf("members: %zu read whole and inflated; corrupt, truncated and flagged members\n",
           n - 1);
}

int main(void)
{
    if (unit_tmp_init("test_bgz"))
        return 1;
    test_round_trips();
    test_pipes();
    test_layout();
    test_truncated();
    test_corrupt();
    test_foreign();
    test_write_errors();
    test_members();
    unit_tmp_done();
    return unit_done("test_bgz");
}
