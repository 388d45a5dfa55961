/* tests/unit/test_trace.c -- routing-trace headers, records, the four stream formats, version
 * rules of the binary payload and parse errors of the text view. */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe/bgz.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "unit.h"
#include "unit_tmp.h"

static uint64_t rnd_state = 88172645463325252u;
static uint64_t rnd(void)
{
    return unit_xorshift(&rnd_state);
}

static void set_shape(moe_trace_hdr_t *h, uint32_t L, uint32_t E, uint32_t K, int weights)
{
    moe_trace_hdr_init(h);
    h->layers = L;
    h->experts = E;
    h->topk = K;
    h->flags = weights ? MOE_TRACE_WEIGHTS : 0;
}

/* Files left in the temporary directory whose name starts with `prefix`. */
static int files_named(const char *prefix)
{
    DIR *d = opendir(unit_tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void write_text_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    fputs(text, fp);
    fclose(fp);
}

/* ------------------------------------------------------------------ header API */

static void test_header(void)
{
    moe_trace_hdr_t h;
    set_shape(&h, 1, 1, 1, 0);
    CHECK_EQ_INT(moe_trace_hdr_check(&h), 0);
    /* Bounds of every shape field. */
    struct { uint32_t L, E, K; int rc; } cases[] = {
        {0, 8, 2, MOE_ERANGE},     {MOE_TRACE_MAX_LAYERS, 8, 2, 0},
        {MOE_TRACE_MAX_LAYERS + 1, 8, 2, MOE_ERANGE},
        {4, 0, 1, MOE_ERANGE},     {4, MOE_TRACE_MAX_EXPERTS, 2, 0},
        {4, MOE_TRACE_MAX_EXPERTS + 1, 2, MOE_ERANGE},
        {4, 8, 0, MOE_ERANGE},     {4, 8, 8, 0},
        {4, 8, 9, MOE_ERANGE},     {4, 1000, MOE_TRACE_MAX_TOPK, 0},
        {4, 1000, MOE_TRACE_MAX_TOPK + 1, MOE_ERANGE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        set_shape(&h, cases[i].L, cases[i].E, cases[i].K, 0);
        CHECK_EQ_INT(moe_trace_hdr_check(&h), cases[i].rc);
    }
    set_shape(&h, 2, 8, 2, 1);
    CHECK_EQ_INT(moe_trace_hdr_check(&h), 0);
    h.flags = 0x80; /* unknown flag */
    CHECK_EQ_INT(moe_trace_hdr_check(&h), MOE_EFORMAT);
    h.flags = 0;

    /* Text lines: '@' first, each ending in a newline; embedded newlines are flattened. */
    CHECK_EQ_INT(moe_trace_hdr_add_line(&h, "@CO\tfirst"), 0);
    CHECK_EQ_INT(moe_trace_hdr_add_line(&h, "@CO\ttwo\nlines\r!"), 0);
    CHECK_STR(h.text, "@CO\tfirst\n@CO\ttwo lines !\n");
    CHECK_EQ_INT(moe_trace_hdr_check(&h), 0);
    char *argv[] = {"moe-trace", "gen", "-n", "1\t2\n3"};
    CHECK_EQ_INT(moe_trace_hdr_add_pg(&h, "moe-trace", 4, argv), 0);
    CHECK_STR(h.text, "@CO\tfirst\n@CO\ttwo lines !\n@PG\tID:moe-trace\tPN:moe-trace\tVN:"
                      PACKAGE_VERSION "\tCL:moe-trace gen -n 1 2 3\n");
    CHECK_EQ_INT(moe_trace_hdr_check(&h), 0);
    /* A second @PG line of the same program gets a unique ID and names its predecessor. */
    CHECK_EQ_INT(moe_trace_hdr_add_pg(&h, "moe-trace", 2, argv), 0);
    CHECK(strstr(h.text, "\n@PG\tID:moe-trace.1\tPN:moe-trace\tVN:" PACKAGE_VERSION
                         "\tCL:moe-trace gen\tPP:moe-trace\n") != NULL);
    CHECK_EQ_INT(moe_trace_hdr_check(&h), 0);
    CHECK_EQ_INT(moe_trace_hdr_add_line(&h, "no at sign"), 0);
    CHECK_EQ_INT(moe_trace_hdr_check(&h), MOE_EFORMAT);
    free(h.text);
    h.text = strdup("@CO\tno newline");
    CHECK_EQ_INT(moe_trace_hdr_check(&h), MOE_EFORMAT);
    free(h.text);
    h.text = strdup("");
    CHECK_EQ_INT(moe_trace_hdr_check(&h), 0);

    /* Deep copy. */
    free(h.text);
    h.text = strdup("@CO\tx\n");
    h.hidden = 4096;
    h.elem_bytes = 2;
    h.ranks = 8;
    moe_trace_hdr_t c;
    moe_trace_hdr_init(&c);
    CHECK_EQ_INT(moe_trace_hdr_copy(&c, &h), 0);
    CHECK(c.text != h.text);
    h.text[4] = 'y';
    CHECK_STR(c.text, "@CO\tx\n");
    CHECK_EQ_INT(c.hidden, 4096);
    CHECK_EQ_INT(c.ranks, 8);
    CHECK_EQ_INT(moe_trace_hdr_copy(&c, &c), 0); /* self copy keeps the text */
    CHECK_STR(c.text, "@CO\tx\n");

    /* Same shape: L, E, K and the weights flag; hidden, ranks and text do not matter. */
    CHECK(moe_trace_hdr_same_shape(&c, &h));
    c.hidden = 1;
    c.ranks = 2;
    CHECK(moe_trace_hdr_same_shape(&c, &h));
    c.layers++;
    CHECK(!moe_trace_hdr_same_shape(&c, &h));
    c.layers--;
    c.experts++;
    CHECK(!moe_trace_hdr_same_shape(&c, &h));
    c.experts--;
    c.topk++;
    CHECK(!moe_trace_hdr_same_shape(&c, &h));
    c.topk--;
    c.flags = MOE_TRACE_WEIGHTS;
    CHECK(!moe_trace_hdr_same_shape(&c, &h));
    moe_trace_hdr_release(&c);
    CHECK(c.text == NULL && c.layers == 0);
    moe_trace_hdr_release(&h);

    /* Printed form. */
    set_shape(&h, 3, 300, 2, 1);
    h.hidden = 7168;
    h.elem_bytes = 2;
    h.ranks = 16;
    moe_trace_hdr_add_line(&h, "@CO\thello");
    FILE *fp = tmpfile();
    CHECK_EQ_INT(moe_trace_hdr_print(fp, &h), 0);
    char buf[512] = {0};
    rewind(fp);
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    CHECK_STR(buf, "@MT\tVN:1.0\tlayers:3\texperts:300\ttopk:2\thidden:7168\telem_bytes:2"
                   "\tranks:16\tweights:1\n@CO\thello\n");
    moe_trace_hdr_release(&h);
    printf("header: bounds, flags, text lines, @PG, copy, same_shape, print\n");
}

/* ------------------------------------------------------------------ record API */

static void test_record(void)
{
    moe_trace_hdr_t h;
    set_shape(&h, 3, 8, 2, 0);
    moe_trace_rec_t r = {0};
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h), 0);
    CHECK(r.ids != NULL && r.weights == NULL && r.cap >= 6);
    uint16_t ok[6] = {0, 7, 3, 4, MOE_EXPERT_NONE, MOE_EXPERT_NONE};
    memcpy(r.ids, ok, sizeof ok);
    r.token = 5;
    char msg[200] = "";
    CHECK_EQ_INT(moe_trace_rec_check(&r, &h, msg, sizeof msg), 0);
    r.ids[3] = 8;
    CHECK_EQ_INT(moe_trace_rec_check(&r, &h, msg, sizeof msg), MOE_ERANGE);
    CHECK_STR(msg, "token 5: layer 1: expert id 8 out of range (8 experts)");
    CHECK_EQ_INT(moe_trace_rec_check(&r, &h, NULL, 0), MOE_ERANGE);
    r.ids[3] = 4;
    r.ids[0] = MOE_EXPERT_NONE;
    CHECK_EQ_INT(moe_trace_rec_check(&r, &h, msg, sizeof msg), MOE_EFORMAT);
    CHECK_STR(msg, "token 5: layer 0: 1 of 2 expert ids missing");
    r.ids[0] = 0;
    r.ids[5] = 1;
    CHECK_EQ_INT(moe_trace_rec_check(&r, &h, msg, sizeof msg), MOE_EFORMAT);
    CHECK(strstr(msg, "layer 2") != NULL);
    r.ids[5] = MOE_EXPERT_NONE;

    /* Gate weights must be finite numbers. */
    moe_trace_hdr_t hw;
    set_shape(&hw, 3, 8, 2, 1);
    CHECK_EQ_INT(moe_trace_rec_init(&r, &hw), 0);
    memcpy(r.ids, ok, sizeof ok);
    for (int i = 0; i < 6; i++)
        r.weights[i] = 0.5f;
    CHECK_EQ_INT(moe_trace_rec_check(&r, &hw, msg, sizeof msg), 0);
    r.weights[2] = NAN;
    CHECK_EQ_INT(moe_trace_rec_check(&r, &hw, msg, sizeof msg), MOE_ERANGE);
    CHECK(strstr(msg, "layer 1") && strstr(msg, "finite"));
    r.weights[2] = -INFINITY;
    CHECK_EQ_INT(moe_trace_rec_check(&r, &hw, msg, sizeof msg), MOE_ERANGE);

    /* Resizing follows the header: larger, weights on, weights off. */
    moe_trace_hdr_t h2;
    set_shape(&h2, 40, 1000, 8, 1);
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h2), 0);
    CHECK(r.cap >= 320 && r.weights != NULL);
    for (int i = 0; i < 320; i++) {
        r.ids[i] = (uint16_t)(i % 1000);
        r.weights[i] = 1.0f;
    }
    CHECK_EQ_INT(moe_trace_rec_check(&r, &h2, NULL, 0), 0);
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h), 0);
    CHECK(r.weights == NULL);
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h2), 0);
    CHECK(r.weights != NULL);
    moe_trace_rec_release(&r);
    CHECK(r.ids == NULL && r.weights == NULL && r.cap == 0);
    moe_trace_rec_release(&r);
    printf("record: check messages, resizing\n");
}

/* ------------------------------------------------------------------ round trips */

/* Deterministic records for a shape: full range of fields, missing cells, extreme ids. */
static void make_rec(const moe_trace_hdr_t *h, uint64_t i, moe_trace_rec_t *r)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, 0.1f, 1e-30f, 3.4e38f, 1.17549435e-38f,
                                    0.33333334f, 1e-40f, -2.5f};
    moe_trace_rec_init(r, h);
    r->token = i < 3 ? UINT64_MAX - i : i * 1000003u;
    r->seq = i == 1 ? UINT32_MAX : (uint32_t)(i / 7);
    r->pos = i == 2 ? UINT32_MAX : (uint32_t)(i % 7);
    r->step = (uint32_t)(i * 31);
    r->rank = i == 1 ? UINT32_MAX : (uint32_t)(i % 5);
    for (uint32_t l = 0; l < h->layers; l++) {
        int missing = (i + l) % 11 == 3;
        for (uint32_t k = 0; k < h->topk; k++) {
            size_t c = (size_t)l * h->topk + k;
            uint16_t id;
            if (missing)
                id = MOE_EXPERT_NONE;
            else if (i % 13 == 0)
                id = (uint16_t)(h->experts - 1 - k); /* the largest ids (254, 299, 65534) */
            else
                id = (uint16_t)((rnd() % (h->experts / h->topk)) * h->topk + k);
            r->ids[c] = id;
            if (r->weights)
                r->weights[c] = missing ? 0.0f
                                : (i + c) % 4 == 0 ? special[(i + c) % 10]
                                                   : (float)(rnd() % 1000000) / 999983.0f;
        }
    }
}

static int rec_equal(const moe_trace_hdr_t *h, const moe_trace_rec_t *a, const moe_trace_rec_t *b)
{
    size_t n = (size_t)h->layers * h->topk;
    if (a->token != b->token || a->seq != b->seq || a->pos != b->pos || a->step != b->step ||
        a->rank != b->rank || memcmp(a->ids, b->ids, n * sizeof *a->ids) != 0)
        return 0;
    if ((a->weights == NULL) != (b->weights == NULL))
        return 0;
    /* Bit patterns, so -0.0 and 0.0 differ. */
    return !a->weights || memcmp(a->weights, b->weights, n * sizeof *a->weights) == 0;
}

static void round_trip(const char *mode, uint32_t L, uint32_t E, uint32_t K, int weights,
                       uint64_t nrec, int threads)
{
    const char *path = tmp_path("rt.trace");
    moe_trace_hdr_t h;
    set_shape(&h, L, E, K, weights);
    h.hidden = 4096;
    h.elem_bytes = 2;
    h.ranks = 5;
    moe_trace_hdr_add_line(&h, "@CO\tround trip");
    moe_trace_hdr_add_line(&h, "@CO\tsecond line");
    int st = 0;
    char err[256] = "";
    unlink(path);
    moe_trace_t *t = moe_trace_open(path, mode, threads, &st, err, sizeof err);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "open %s: %s\n", mode, err);
        return;
    }
    CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
    moe_trace_rec_t r = {0}, q = {0};
    uint64_t saved = rnd_state;
    for (uint64_t i = 0; i < nrec; i++) {
        make_rec(&h, i, &r);
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
    }
    CHECK_EQ_INT(moe_trace_count(t), nrec);
    /* Written under a temporary name until closed. */
    CHECK(access(path, F_OK) != 0);
    CHECK_EQ_INT(moe_trace_close(t, err, sizeof err), 0);
    CHECK(access(path, F_OK) == 0);
    CHECK_EQ_INT(files_named("rt.trace.tmp"), 0);

    t = moe_trace_open(path, "r", threads, &st, err, sizeof err);
    CHECK(t != NULL);
    if (!t)
        return;
    int binary = mode[1] == 'b' || mode[1] == 'u';
    CHECK_EQ_INT(moe_trace_format(t), binary ? MOE_FMT_BINARY : MOE_FMT_TEXT);
    moe_trace_hdr_t g;
    moe_trace_hdr_init(&g);
    CHECK_EQ_INT(moe_trace_read_header(t, &g), 0);
    CHECK(moe_trace_hdr_same_shape(&g, &h));
    CHECK_EQ_INT(g.hidden, 4096);
    CHECK_EQ_INT(g.elem_bytes, 2);
    CHECK_EQ_INT(g.ranks, 5);
    CHECK_STR(g.text, h.text);
    rnd_state = saved;
    uint64_t n = 0, bad = 0;
    int rc;
    while ((rc = moe_trace_read(t, &q)) == 1) {
        make_rec(&h, n, &r);
        bad += !rec_equal(&h, &r, &q);
        n++;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(n, nrec);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(moe_trace_count(t), nrec);
    CHECK_EQ_INT(moe_trace_size(t) > 0, 1);
    CHECK_EQ_INT(moe_trace_close(t, NULL, 0), 0);
    moe_trace_rec_release(&r);
    moe_trace_rec_release(&q);
    moe_trace_hdr_release(&g);
    moe_trace_hdr_release(&h);
    printf("round trip: mode %-3s L=%u E=%u K=%u weights=%d records=%llu threads=%d\n", mode, L,
           E, K, weights, (unsigned long long)nrec, threads);
}

static void test_round_trips(void)
{
    static const char *const modes[] = {"wb", "wu", "wt", "wz", "wb1", "wz9"};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
        for (int w = 0; w <= 1; w++) {
            round_trip(modes[m], 4, 8, 2, w, 3000, (int)m % 3);
            round_trip(modes[m], 3, 300, 4, w, 500, 0);
        }
    /* Edges of the id width: E = 255 (largest with 1-byte ids), 256, and the maximum. */
    round_trip("wb", 2, 255, 1, 0, 100, 0);
    round_trip("wt", 2, 256, 1, 1, 100, 0);
    round_trip("wb", 2, MOE_TRACE_MAX_EXPERTS, 8, 1, 100, 0);
    round_trip("wt", 2, MOE_TRACE_MAX_EXPERTS, 8, 0, 100, 0);
    /* Many blocks (records never straddle one), several threads. */
    round_trip("wb", 8, 64, 2, 1, 60000, 3);
    round_trip("wu", 8, 64, 2, 0, 60000, 2);
    /* No records at all. */
    round_trip("wb", 1, 1, 1, 0, 0, 0);
    round_trip("wt", 1, 1, 1, 1, 0, 0);

    /* 1-byte ids really are one byte: an E <= 255 trace is smaller in stored form. */
    struct stat a, b;
    round_trip("wu", 4, 255, 2, 0, 1000, 0);
    stat(tmp_path("rt.trace"), &a);
    round_trip("wu", 4, 256, 2, 0, 1000, 0);
    stat(tmp_path("rt.trace"), &b);
    CHECK(b.st_size - a.st_size >= 1000 * 8);
}

/* Text formatting of records: ids, '.', weights, 64-bit tokens. */
static void test_rec_print(void)
{
    moe_trace_hdr_t h;
    set_shape(&h, 3, 300, 2, 1);
    moe_trace_rec_t r = {0};
    moe_trace_rec_init(&r, &h);
    r.token = UINT64_MAX;
    r.seq = UINT32_MAX;
    r.pos = 0;
    r.step = 9;
    r.rank = 1;
    uint16_t ids[6] = {299, 0, MOE_EXPERT_NONE, MOE_EXPERT_NONE, 17, 256};
    float w[6] = {0.5f, 0.25f, 0, 0, 0.1f, 1e-30f};
    memcpy(r.ids, ids, sizeof ids);
    memcpy(r.weights, w, sizeof w);
    FILE *fp = tmpfile();
    CHECK_EQ_INT(moe_trace_rec_print(fp, &h, &r), 0);
    h.flags = 0;
    moe_trace_rec_init(&r, &h);
    memcpy(r.ids, ids, sizeof ids);
    CHECK_EQ_INT(moe_trace_rec_print(fp, &h, &r), 0);
    char buf[512] = {0};
    rewind(fp);
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    CHECK_STR(buf, "18446744073709551615\t4294967295\t0\t9\t1\t299:0.5,0:0.25\t.\t"
                   "17:0.1,256:1e-30\n"
                   "18446744073709551615\t4294967295\t0\t9\t1\t299,0\t.\t17,256\n");
    moe_trace_rec_release(&r);
    printf("record print: ids, missing cells, shortest weights, 64-bit token\n");
}

/* ------------------------------------------------------------------ writer validation */

static void test_writer_errors(void)
{
    const char *path = tmp_path("werr.trace");
    char err[256] = "";
    int st = 0;
    static const char *const modes[] = {"wb", "wt", "wz"};
    for (size_t m = 0; m < 3; m++) {
        /* A bad header: nothing written, nothing left behind. */
        moe_trace_t *t = moe_trace_open(path, modes[m], 0, &st, err, sizeof err);
        moe_trace_hdr_t h;
        set_shape(&h, 2, 4, 5, 0);
        CHECK_EQ_INT(moe_trace_write_header(t, &h), MOE_ERANGE);
        CHECK(moe_trace_close(t, err, sizeof err) != 0);
        CHECK(strstr(err, "top-5") != NULL);
        CHECK(access(path, F_OK) != 0);
        CHECK_EQ_INT(files_named("werr.trace"), 0);

        /* A record with an out-of-range id fails the whole output. */
        t = moe_trace_open(path, modes[m], 0, &st, err, sizeof err);
        set_shape(&h, 2, 4, 2, 0);
        moe_trace_rec_t r = {0};
        CHECK_EQ_INT(moe_trace_write(t, &r), MOE_EINVAL); /* before the header */
        t = (moe_trace_abort(t), moe_trace_open(path, modes[m], 0, &st, err, sizeof err));
        CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
        moe_trace_rec_init(&r, &h);
        uint16_t good[4] = {0, 1, 2, 3}, bad[4] = {0, 1, 4, 3};
        memcpy(r.ids, good, sizeof good);
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
        memcpy(r.ids, bad, sizeof bad);
        CHECK_EQ_INT(moe_trace_write(t, &r), MOE_ERANGE);
        CHECK(strstr(moe_trace_errmsg(t), "expert id 4 out of range") != NULL);
        memcpy(r.ids, good, sizeof good);
        CHECK_EQ_INT(moe_trace_write(t, &r), MOE_ERANGE); /* the first error sticks */
        CHECK_EQ_INT(moe_trace_close(t, err, sizeof err), MOE_ERANGE);
        CHECK(strstr(err, "out of range") != NULL);
        CHECK(access(path, F_OK) != 0);
        CHECK_EQ_INT(files_named("werr.trace"), 0);

        /* A second header is refused (and fails the output). */
        t = moe_trace_open(path, modes[m], 0, &st, err, sizeof err);
        CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
        CHECK_EQ_INT(moe_trace_write_header(t, &h), MOE_EINVAL);
        CHECK(moe_trace_close(t, err, sizeof err) != 0);
        CHECK(access(path, F_OK) != 0);

        /* No header at all is an error too. */
        t = moe_trace_open(path, modes[m], 0, &st, err, sizeof err);
        CHECK(moe_trace_close(t, err, sizeof err) != 0);
        CHECK(access(path, F_OK) != 0);

        /* Abort discards a good output. */
        t = moe_trace_open(path, modes[m], 0, &st, err, sizeof err);
        CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
        moe_trace_abort(t);
        CHECK(access(path, F_OK) != 0);
        CHECK_EQ_INT(files_named("werr.trace"), 0);
        moe_trace_rec_release(&r);
    }
    /* Bad modes and unwritable places. */
    CHECK(moe_trace_open(path, "wx", 0, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_EINVAL);
    CHECK(moe_trace_open(path, "a", 0, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_EINVAL);
    CHECK(moe_trace_open("/nonexistent-dir/x.moet", "wb", 0, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESYS);
    CHECK(strstr(err, "/nonexistent-dir/x.moet") != NULL);
    CHECK(moe_trace_open(tmp_path("missing.moet"), "r", 0, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESYS);
    CHECK(strstr(err, "No such file") != NULL);
    CHECK(moe_trace_open(unit_tmpdir, "r", 0, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESYS);
    moe_trace_abort(NULL);
    CHECK_EQ_INT(moe_trace_close(NULL, NULL, 0), 0);
    printf("writer: bad header, bad id, no header, abort, bad modes, unwritable paths\n");
}

/* ------------------------------------------------------------------ hand-made payloads */

/* The payload layout of moe-trace(5), written independently of the codec. */
static size_t put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
    return 4;
}

typedef struct raw {
    uint8_t major, minor;
    const char *magic;
    char kind;
    uint32_t L, E, K, flags;
    const char *text;
    uint32_t text_len;     /* stored text length (normally strlen(text)) */
    uint32_t hdr_extra;    /* bytes a newer minor appends to the header body */
    int32_t body_adjust;   /* added to the stored body length */
    uint32_t rec_extra;    /* bytes a newer minor appends to every record */
    int32_t rec_adjust;    /* added to every stored record length */
    int split_record;      /* put a block boundary inside the second record */
    uint8_t bad_id;        /* if non-zero, the first id of the first record */
    uint32_t nrec;
} raw_t;

static void raw_defaults(raw_t *r)
{
    memset(r, 0, sizeof *r);
    r->major = 1;
    r->magic = "MOEF";
    r->kind = 'T';
    r->L = 2;
    r->E = 8;
    r->K = 2;
    r->text = "@CO\thand made\n";
    r->text_len = (uint32_t)strlen(r->text);
    r->nrec = 3;
}

static void write_raw(const char *path, const raw_t *r)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int st;
    moe_bgz_t *bz = moe_bgz_dopen(fd, 'w', 6, 0, path, NULL, 0, &st);
    uint8_t buf[4096];
    size_t o = 0;
    memcpy(buf, r->magic, 4);
    buf[4] = (uint8_t)r->kind;
    buf[5] = r->major;
    buf[6] = r->minor;
    buf[7] = 0;
    o = 8;
    o += put32(buf + o, (uint32_t)((int32_t)(32 + r->text_len + r->hdr_extra) + r->body_adjust));
    const uint32_t f[8] = {r->L, r->E, r->K, 1024, 2, 4, r->flags, r->text_len};
    for (int i = 0; i < 8; i++)
        o += put32(buf + o, f[i]);
    memcpy(buf + o, r->text, r->text_len);
    o += r->text_len;
    memset(buf + o, 0xAB, r->hdr_extra);
    o += r->hdr_extra;
    moe_bgz_write(bz, buf, o);
    int w = (r->flags & MOE_TRACE_WEIGHTS) != 0;
    for (uint32_t i = 0; i < r->nrec; i++) {
        o = 0;
        uint32_t n = r->L * r->K;
        uint32_t len = 24 + n + (w ? 4 * n : 0) + r->rec_extra;
        o += put32(buf + o, (uint32_t)((int32_t)len + r->rec_adjust));
        o += put32(buf + o, 100 + i);
        o += put32(buf + o, i == 1 ? 0x80000000u : 0); /* token high word */
        o += put32(buf + o, i / 2);
        o += put32(buf + o, i);
        o += put32(buf + o, 7);
        o += put32(buf + o, i % 4);
        for (uint32_t c = 0; c < n; c++)
            buf[o++] = i == 0 && c == 0 && r->bad_id ? r->bad_id : (uint8_t)((i + c) % r->E);
        for (uint32_t c = 0; w && c < n; c++) {
            float x = 0.5f;
            uint32_t u;
            memcpy(&u, &x, 4);
            o += put32(buf + o, u);
        }
        memset(buf + o, 0xCD, r->rec_extra);
        o += r->rec_extra;
        if (r->split_record && i == 1) {
            moe_bgz_write(bz, buf, 10);
            moe_bgz_flush(bz);
            moe_bgz_write(bz, buf + 10, o - 10);
        } else {
            moe_bgz_write(bz, buf, o);
        }
    }
    moe_bgz_close(bz);
}

/* Open a trace and read it through; returns the first negative status or the record count,
 * with the message copied to msg. */
static long read_through(const char *path, moe_trace_hdr_t *h, moe_trace_rec_t *last, char *msg,
                         size_t n)
{
    int st = 0;
    msg[0] = '\0';
    moe_trace_t *t = moe_trace_open(path, "r", 0, &st, msg, n);
    if (!t)
        return st;
    moe_trace_hdr_init(h);
    long count = 0;
    int rc = moe_trace_read_header(t, h);
    moe_trace_rec_t r = {0};
    while (rc >= 0 && (rc = moe_trace_read(t, &r)) == 1) {
        count++;
        if (last) {
            moe_trace_rec_init(last, h);
            last->token = r.token;
            last->seq = r.seq;
            last->pos = r.pos;
            last->step = r.step;
            last->rank = r.rank;
            memcpy(last->ids, r.ids, (size_t)h->layers * h->topk * sizeof *r.ids);
        }
    }
    if (rc < 0)
        snprintf(msg, n, "%s", moe_trace_errmsg(t));
    moe_trace_rec_release(&r);
    moe_trace_close(t, NULL, 0);
    return rc < 0 ? rc : count;
}

static void test_versions(void)
{
    const char *path = tmp_path("raw.moet");
    raw_t r;
    moe_trace_hdr_t h;
    moe_trace_rec_t last = {0};
    char msg[300];

    /* The hand-made current-version file reads as written. */
    raw_defaults(&r);
    write_raw(path, &r);
    CHECK_EQ_INT(read_through(path, &h, &last, msg, sizeof msg), 3);
    CHECK_EQ_INT(h.layers, 2);
    CHECK_EQ_INT(h.hidden, 1024);
    CHECK_EQ_INT(h.ranks, 4);
    CHECK_STR(h.text, "@CO\thand made\n");
    CHECK(last.token == 102 && last.seq == 1 && last.pos == 2 && last.rank == 2);
    moe_trace_hdr_release(&h);

    /* A newer major version is refused with a clear message. */
    r.major = 2;
    write_raw(path, &r);
    CHECK_EQ_INT(read_through(path, &h, NULL, msg, sizeof msg), MOE_EVERSION);
    CHECK(strstr(msg, "version 2.0 is newer") != NULL);
    moe_trace_hdr_release(&h);

    /* A newer minor version: longer header body and longer records are skipped over. */
    raw_defaults(&r);
    r.minor = 9;
    r.hdr_extra = 20;
    r.rec_extra = 13;
    r.flags = MOE_TRACE_WEIGHTS;
    r.nrec = 5;
    write_raw(path, &r);
    CHECK_EQ_INT(read_through(path, &h, &last, msg, sizeof msg), 5);
    CHECK(last.token == 104 && last.seq == 2 && last.pos == 4 && last.step == 7);
    CHECK(last.ids[0] == 4 && last.ids[3] == 7);
    CHECK_STR(h.text, "@CO\thand made\n");
    moe_trace_hdr_release(&h);
    r.major = 0; /* there never was a version 0 */
    write_raw(path, &r);
    CHECK_EQ_INT(read_through(path, &h, NULL, msg, sizeof msg), MOE_EVERSION);
    CHECK(strstr(msg, "unsupported trace format version 0.9") != NULL);
    moe_trace_hdr_release(&h);

    /* Token ids use all 64 bits. */
    raw_defaults(&r);
    write_raw(path, &r);
    int st;
    moe_trace_t *t = moe_trace_open(path, "r", 0, &st, NULL, 0);
    moe_trace_read_header(t, &h);
    moe_trace_rec_t q = {0};
    moe_trace_read(t, &q);
    moe_trace_read(t, &q);
    CHECK(q.token == (UINT64_C(0x80000000) << 32 | 101));
    moe_trace_rec_release(&q);
    moe_trace_close(t, NULL, 0);
    moe_trace_hdr_release(&h);

    /* Damaged payloads. */
    struct {
        const char *what;
        int rc;
        const char *msg;
    } cases[] = {
        {"bad magic", MOE_EFORMAT, "bad magic"},
        {"other kind", MOE_EFORMAT, "not a routing trace"},
        {"short body", MOE_ECORRUPT, "corrupt trace header"},
        {"body past block", MOE_ECORRUPT, "corrupt trace header"},
        {"text past body", MOE_ECORRUPT, "corrupt trace header"},
        {"NUL in text", MOE_EFORMAT, "invalid trace header"},
        {"bad shape", MOE_ERANGE, "invalid trace header"},
        {"short record", MOE_ECORRUPT, "corrupt record 1"},
        {"record past block", MOE_ECORRUPT, "corrupt record"},
        {"split record", MOE_ECORRUPT, "corrupt record 2"},
        {"id out of range", MOE_ERANGE, "record 1: token 100: layer 0: expert id 9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        raw_defaults(&r);
        switch (i) {
        case 0: r.magic = "MOEX"; break;
        case 1: r.kind = 'P'; break;
        case 2: r.body_adjust = -(int32_t)(r.text_len + 1); break;
        case 3: r.body_adjust = 4000; break;
        case 4: r.text_len += 1; r.text = "@CO\thand made\n\0" ; r.body_adjust = -1; break;
        case 5: r.text = "@CO\thand\0made\n"; break;
        case 6: r.K = 9; break;
        case 7: r.rec_adjust = -1; break;
        case 8: r.rec_adjust = 1000; break;
        case 9: r.split_record = 1; break;
        case 10: r.bad_id = 9; break;
        }
        write_raw(path, &r);
        long rc = read_through(path, &h, NULL, msg, sizeof msg);
        CHECK_EQ_INT(rc, cases[i].rc);
        CHECK(strstr(msg, cases[i].msg) != NULL);
        if (rc != cases[i].rc || !strstr(msg, cases[i].msg))
            fprintf(stderr, "case '%s': %ld: %s\n", cases[i].what, rc, msg);
        moe_trace_hdr_release(&h);
    }

    /* A container with no payload at all. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    moe_bgz_close(moe_bgz_dopen(fd, 'w', 6, 0, path, NULL, 0, &st));
    CHECK_EQ_INT(read_through(path, &h, NULL, msg, sizeof msg), MOE_EEMPTY);
    moe_trace_hdr_release(&h);
    moe_trace_rec_release(&last);
    printf("versions: newer major refused, newer minor skipped, %zu damaged payloads\n",
           sizeof cases / sizeof *cases);
}

/* ------------------------------------------------------------------ text view parsing */

static void test_text_errors(void)
{
    const char *mt = "@MT\tVN:1.0\tlayers:2\texperts:8\ttopk:2\thidden:0\telem_bytes:0"
                     "\tranks:0\tweights:0\n";
    const char *mtw = "@MT\tVN:1.0\tlayers:2\texperts:8\ttopk:2\tweights:1\n";
    struct {
        const char *hdr, *body;
        long rc;
        const char *msg;
    } cases[] = {
        /* accepted */
        {mt, "", 0, NULL},
        {mt, "1\t0\t0\t0\t0\t1,2\t3,4\n2\t0\t1\t0\t0\t.\t5,6\n", 2, NULL},
        {mt, "1\t0\t0\t0\t0\t1,2\t3,4\r\n# comment\n2\t0\t1\t0\t0\t.\t5,6", 2, NULL},
        {"@MT\tVN:1.7\tlayers:2\texperts:8\ttopk:2\tfuture:xyz\n", "1\t0\t0\t0\t0\t1,2\t3,4\n", 1,
         NULL},
        {mtw, "1\t0\t0\t0\t0\t1:0.5,2:0.25\t3:1e-3,4:0\n", 1, NULL},
        {mt, "18446744073709551615\t4294967295\t4294967295\t4294967295\t4294967295\t7,7\t0,0\n",
         1, NULL},
        /* header errors */
        {"@HD\tVN:1.0\n", "", MOE_EFORMAT, "not a moeflow trace"},
        {"layers:2\n", "", MOE_EFORMAT, "not a moeflow trace"},
        {"@MT\tlayers:2\texperts:8\ttopk:2\n", "", MOE_EFORMAT, "missing VN"},
        {"@MT\tVN:x\tlayers:2\texperts:8\ttopk:2\n", "", MOE_EFORMAT, "bad version"},
        {"@MT\tVN:2.0\tlayers:2\texperts:8\ttopk:2\n", "", MOE_EVERSION, "version 2.0 is newer"},
        {"@MT\tVN:1.0\tlayers:two\texperts:8\ttopk:2\n", "", MOE_EFORMAT, "bad value for layers"},
        {"@MT\tVN:1.0\tlayers:2\texperts:8\n", "", MOE_ERANGE, "invalid shape"},
        {"@MT\tVN:1.0\tlayers:2\texperts:2\ttopk:3\n", "", MOE_ERANGE, "invalid shape"},
        {"@MT\tVN:1.0\tlayers:2\texperts:70000\ttopk:3\n", "", MOE_ERANGE, "invalid shape"},
        {"@MT\tVN:1.0\tlayers\n", "", MOE_EFORMAT, "malformed field"},
        {"", "", MOE_EEMPTY, "empty"},
        /* record errors */
        {mt, "1\t0\t0\t0\t0\t1,x\t3,4\n", MOE_EFORMAT, "line 2: non-numeric expert id"},
        {mt, "1\t0\t0\t0\t0\t1,2\t3,4\n1\t0\t0\t0\t0\t-1,2\t3,4\n", MOE_EFORMAT,
         "line 3: non-numeric"},
        {mt, "1\t0\t0\t0\t0\t1\t3,4\n", MOE_EFORMAT, "wrong number of expert ids"},
        {mt, "1\t0\t0\t0\t0\t1,2,3\t3,4\n", MOE_EFORMAT, "wrong number of expert ids"},
        {mt, "1\t0\t0\t0\t0\t1,2\n", MOE_EFORMAT, "too few layer columns"},
        {mt, "1\t0\t0\t0\t0\t1,2\t3,4\t5,6\n", MOE_EFORMAT, "too many layer columns"},
        {mt, "1\t0\t0\t0\t1,2\t3,4\n", MOE_EFORMAT, "expected token, seq, pos"},
        {mt, "x\t0\t0\t0\t0\t1,2\t3,4\n", MOE_EFORMAT, "expected token, seq, pos"},
        {mt, "18446744073709551616\t0\t0\t0\t0\t1,2\t3,4\n", MOE_EFORMAT, "expected token"},
        {mt, "1\t4294967296\t0\t0\t0\t1,2\t3,4\n", MOE_EFORMAT, "expected token"},
        {mt, "1\t0\t0\t0\t0\t1,8\t3,4\n", MOE_ERANGE, "line 2: expert id 8 out of range"},
        {mt, "1\t0\t0\t0\t0\t1,65535\t3,4\n", MOE_ERANGE, "out of range"},
        {mt, "1\t0\t0\t0\t0\t1,99999999999\t3,4\n", MOE_ERANGE, "out of range"},
        {mt, "1\t0\t0\t0\t0\t1,2\t3,4\n@CO\tlate\n", MOE_EFORMAT, "line 3: header line after"},
        {mt, "1\t0\t0\t0\t0\t1,2\t3,4\n\n\n2\t0\t0\t0\t0\t1,2\t3,4\n", 2, NULL},
        {mt, "# comment\n\n1\t0\t0\t0\t0\t1,2\t3,4\n", 1, NULL},
        {mt, "1\t0\t0\t0\t0\t1,2\t3,4\n \n", MOE_EFORMAT, "line 3"},
        {mtw, "1\t0\t0\t0\t0\t1,2\t3,4\n", MOE_EFORMAT, "missing gate weight"},
        {mtw, "1\t0\t0\t0\t0\t1:0.5,2:abc\t3:1,4:1\n", MOE_EFORMAT, "bad gate weight"},
        {mtw, "1\t0\t0\t0\t0\t1:0.5,2:nan\t3:1,4:1\n", MOE_EFORMAT, "bad gate weight"},
        {mtw, "1\t0\t0\t0\t0\t1:0.5,2:1e99\t3:1,4:1\n", MOE_EFORMAT, "bad gate weight"},
        {mtw, "1\t0\t0\t0\t0\t1:0.5,2:0x1p-1\t3:1,4:1\n", MOE_EFORMAT, "bad gate weight"},
        {mtw, "1\t0\t0\t0\t0\t1:0.5,2:1e-50\t3:1,4:1\n", MOE_EFORMAT,
         "gate weight below float's smallest (1.4e-45)"},
        {mt, "1\t0\t0\t0\t0\t1:0.5,2\t3,4\n", MOE_EFORMAT, "wrong number of expert ids"},
    };
    const char *path = tmp_path("view.txt");
    char msg[300];
    moe_trace_hdr_t h;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", cases[i].hdr, cases[i].body);
        write_text_file(path, text);
        long rc = read_through(path, &h, NULL, msg, sizeof msg);
        CHECK_EQ_INT(rc, cases[i].rc);
        if (cases[i].msg)
            CHECK(strstr(msg, cases[i].msg) != NULL);
        if (rc != cases[i].rc || (cases[i].msg && !strstr(msg, cases[i].msg)))
            fprintf(stderr, "text case %zu: got %ld '%s'\n", i, rc, msg);
        moe_trace_hdr_release(&h);
    }
    /* The same view gzipped reads the same way (and a cut gzip stream is truncated). */
    const char *gzpath = tmp_path("view.txt.gz");
    char text[512], cmd[1200];
    snprintf(text, sizeof text, "%s%s", mt, "1\t0\t0\t0\t0\t1,2\t3,4\n2\t0\t1\t0\t0\t.\t5,6\n");
    write_text_file(path, text);
    snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", path, gzpath);
    if (system("command -v gzip >/dev/null 2>&1") == 0 && system(cmd) == 0) {
        CHECK_EQ_INT(read_through(gzpath, &h, NULL, msg, sizeof msg), 2);
        moe_trace_hdr_release(&h);
        FILE *fp = fopen(gzpath, "rb");
        uint8_t gzb[512];
        size_t gzn = fread(gzb, 1, sizeof gzb, fp);
        fclose(fp);
        fp = fopen(gzpath, "wb");
        fwrite(gzb, 1, gzn - 6, fp);
        fclose(fp);
        CHECK_EQ_INT(read_through(gzpath, &h, NULL, msg, sizeof msg), MOE_ETRUNC);
        moe_trace_hdr_release(&h);
    } else {
        printf("text view: gzipped cases skipped (no gzip)\n");
    }
    printf("text view: %zu parse cases, gzipped view, cut gzipped view\n",
           sizeof cases / sizeof *cases);
}

/* Text weights are the shortest decimals that read back as the same float. */
static void test_weight_digits(void)
{
    moe_trace_hdr_t h;
    set_shape(&h, 1, 4, 1, 1);
    moe_trace_rec_t r = {0};
    moe_trace_rec_init(&r, &h);
    r.ids[0] = 1;
    const char *path = tmp_path("w.txt");
    int st, bad = 0;
    moe_trace_t *t = moe_trace_open(path, "wt", 0, &st, NULL, 0);
    moe_trace_write_header(t, &h);
    float vals[2000];
    for (int i = 0; i < 2000; i++) {
        uint32_t u = (uint32_t)rnd();
        float f;
        memcpy(&f, &u, 4);
        vals[i] = isfinite(f) ? f : (float)i / 7.0f;
        if (i < 4) /* subnormals, which strtof reports with ERANGE */
            vals[i] = (float)(i + 1) * 1e-42f;
        r.weights[0] = vals[i];
        r.token = (uint64_t)i;
        moe_trace_write(t, &r);
    }
    CHECK_EQ_INT(moe_trace_close(t, NULL, 0), 0);
    t = moe_trace_open(path, "r", 0, &st, NULL, 0);
    moe_trace_hdr_t g;
    moe_trace_hdr_init(&g);
    moe_trace_read_header(t, &g);
    int n = 0;
    while (moe_trace_read(t, &r) == 1 && n < 2000)
        bad += memcmp(&r.weights[0], &vals[n++], 4) != 0;
    CHECK_EQ_INT(n, 2000);
    CHECK_EQ_INT(bad, 0);
    moe_trace_close(t, NULL, 0);
    moe_trace_hdr_release(&g);
    moe_trace_rec_release(&r);
    printf("text weights: 2000 random finite floats (subnormals too) round trip bit-exactly\n");
}

/* moe_layer_map_*: the importers' @CO lines read back (moe/trace.h), the options, the lines
 * written, and slice's header. */
static void check_ids(const moe_layer_map_t *m, const uint32_t *want, uint32_t n, uint32_t N)
{
    CHECK_EQ_INT(m->layers, n);
    CHECK_EQ_INT(m->model_layers, N);
    CHECK(m->id != NULL);
    for (uint32_t i = 0; m->id && i < n; i++)
        CHECK_EQ_INT(m->id[i], want[i]);
}

static void test_layer_map(void)
{
    moe_layer_map_t m;
    char err[256];
    static const uint32_t mg[] = {1, 3, 4, 5};
    /* Megatron's sparse ids, two lines; the count unknown */
    CHECK_EQ_INT(moe_layer_map_read("@CO\tsource: x\n@CO\tmegatron: layers 0..1 are model "
                                    "layers 1,3\n@CO\tmegatron: layers 2..3 are model layers "
                                    "4-5\n", 4, &m, err, sizeof err), 0);
    check_ids(&m, mg, 4, 0);
    char *list = moe_layer_map_list(&m);
    CHECK_STR(list, "1,3-5");
    free(list);
    /* --model-layers adds the count; a disagreeing list is refused */
    CHECK_EQ_INT(moe_layer_map_set(&m, 6, -1, NULL, err, sizeof err), 0);
    check_ids(&m, mg, 4, 6);
    CHECK_EQ_INT(moe_layer_map_set(&m, 0, 1, NULL, err, sizeof err), MOE_EINVAL);
    CHECK(strstr(err, "are not the model layers the input records (1,3-5)") != NULL);
    CHECK_EQ_INT(moe_layer_map_set(&m, 7, -1, NULL, err, sizeof err), MOE_EINVAL);
    CHECK_STR(err, "7 model layers given, the input records 6");
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    CHECK_EQ_INT(moe_layer_map_comment(&m, &h), 0);
    CHECK_STR(h.text, "@CO\tmodel-layers: layers 0..3 are model layers 1,3-5 of 6\n");
    moe_layer_map_release(&m);
    /* the dense reader's line with its count, SGLang's line */
    static const uint32_t ds[] = {1, 2, 3};
    CHECK_EQ_INT(moe_layer_map_read("@CO\tdense: layers 0..2 are model layers 1-3 of 4\n", 3,
                                    &m, err, sizeof err), 0);
    check_ids(&m, ds, 3, 4);
    CHECK(!moe_layer_map_identity(&m));
    moe_layer_map_release(&m);
    CHECK_EQ_INT(moe_layer_map_read("@CO\tsglang: model layers 1-3 of 4 (trace layer i = the "
                                    "i-th of them)\n", 3, &m, err, sizeof err), 0);
    check_ids(&m, ds, 3, 4);
    /* agreeing sources combine; the count from the one that has it */
    moe_layer_map_release(&m);
    CHECK_EQ_INT(moe_layer_map_read("@CO\tmegatron: layers 0..2 are model layers 1-3\n"
                                    "@CO\tsglang: model layers 1-3 of 4 (x)\n", 3, &m, err,
                                    sizeof err), 0);
    check_ids(&m, ds, 3, 4);
    moe_layer_map_release(&m);
    /* no lines: unknown, the identity */
    CHECK_EQ_INT(moe_layer_map_read("@CO\tmodel: deepseek (a free comment)\n", 3, &m, err,
                                    sizeof err), 0);
    CHECK(m.id == NULL && m.model_layers == 0 && moe_layer_map_identity(&m));
    CHECK_EQ_INT(moe_layer_map_model(&m, 2), 2);
    /* the options: first MoE layer and count; a list; their errors */
    CHECK_EQ_INT(moe_layer_map_set(&m, 4, 1, NULL, err, sizeof err), 0);
    check_ids(&m, ds, 3, 4);
    moe_layer_map_release(&m);
    moe_layer_map_init(&m, 3);
    CHECK_EQ_INT(moe_layer_map_set(&m, 4, -1, "1-3", err, sizeof err), 0);
    check_ids(&m, ds, 3, 4);
    moe_layer_map_release(&m);
    moe_layer_map_init(&m, 3);
    CHECK_EQ_INT(moe_layer_map_set(&m, 0, -1, "3,1,2", err, sizeof err), MOE_EINVAL);
    CHECK(strstr(err, "invalid list of MoE layers '3,1,2'") != NULL);
    CHECK_EQ_INT(moe_layer_map_set(&m, 0, -1, "1-9", err, sizeof err), MOE_EINVAL);
    CHECK_STR(err, "the list of MoE layers names more than 3 layers, the input has 3");
    CHECK_EQ_INT(moe_layer_map_set(&m, 4, -1, NULL, err, sizeof err), MOE_EINVAL);
    CHECK(strstr(err, "which are dense is unknown") != NULL);
    CHECK_EQ_INT(moe_layer_map_set(&m, 3, 2, NULL, err, sizeof err), MOE_ERANGE);
    CHECK_STR(err, "model layer 3 out of range (3 model layers)");
    CHECK_EQ_INT(moe_layer_map_set(&m, 0, 1, "1-3", err, sizeof err), MOE_EINVAL);
    CHECK(m.id == NULL); /* a failed set leaves m as it was */
    /* lines that do not map the layers: MTP, a gap, too few, disagreeing sources */
    static const char *const bad[] = {
        "@CO\tmegatron: layers 0..2 are model layers 1,2,mtp0.1\n",
        "@CO\tmegatron: layers 0..0 are model layers 1\n@CO\tmegatron: layers 2..2 are "
        "model layers 4\n",
        "@CO\tdense: layers 0..1 are model layers 1-2 of 4\n",
        "@CO\tdense: layers 0..2 are model layers 1-3\n@CO\tsglang: model layers 0-2 of 3 "
        "(x)\n",
        "@CO\tdense: layers 0..2 are model layers 3,2,1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(moe_layer_map_read(bad[i], 3, &m, err, sizeof err) == MOE_EFORMAT);
        CHECK(m.id == NULL);
    }
    /* model-layers lines take precedence, the last set of them counts (slice of a slice) */
    CHECK_EQ_INT(moe_layer_map_read("@CO\tdense: layers 0..9 are model layers 1-10 of 11\n"
                                    "@CO\tmodel-layers: layers 0..4 are model layers 1-5 of 11\n"
                                    "@CO\tmodel-layers: layers 0..2 are model layers 2-4 of 11\n",
                                    3, &m, err, sizeof err), 0);
    static const uint32_t sl[] = {2, 3, 4};
    check_ids(&m, sl, 3, 11);
    moe_layer_map_release(&m);
    /* slice: layers 1..2 of a trace of model layers 2..4 */
    moe_trace_hdr_t in, out;
    moe_trace_hdr_init(&in);
    in.layers = 3;
    moe_trace_hdr_add_line(&in, "@CO\tdense: layers 0..2 are model layers 2-4 of 11");
    CHECK_EQ_INT(moe_layer_map_slice(&in, 1, 2, &out), 0);
    CHECK_EQ_INT(out.layers, 2);
    CHECK_STR(out.text, "@CO\tdense: layers 0..2 are model layers 2-4 of 11\n"
                        "@CO\tmodel-layers: layers 0..1 are model layers 3-4 of 11\n");
    CHECK_EQ_INT(moe_layer_map_read(out.text, 2, &m, err, sizeof err), 0);
    static const uint32_t s2[] = {3, 4};
    check_ids(&m, s2, 2, 11);
    moe_layer_map_release(&m);
    moe_trace_hdr_release(&out);
    moe_trace_hdr_release(&in);
    /* a long sparse list is cut into lines that read back */
    moe_layer_map_init(&m, 600);
    m.id = malloc(600 * sizeof *m.id);
    for (uint32_t i = 0; m.id && i < 600; i++)
        m.id[i] = 2 * i;
    m.model_layers = 1200;
    CHECK_EQ_INT(moe_layer_map_comment(&m, &h), 0);
    moe_layer_map_t back;
    CHECK_EQ_INT(moe_layer_map_read(h.text, 600, &back, err, sizeof err), 0);
    CHECK(back.id && m.id && !memcmp(back.id, m.id, 600 * sizeof *m.id));
    CHECK_EQ_INT(back.model_layers, 1200);
    size_t lines = 0;
    for (const char *p = h.text; p && *p; p++)
        lines += *p == '\n';
    CHECK(lines > 2);
    moe_layer_map_release(&back);
    moe_layer_map_release(&m);
    moe_trace_hdr_release(&h);
}

int main(void)
{
    if (unit_tmp_init("test_trace"))
        return 1;
    moe_log_set_level(MOE_LOG_OFF);
    test_header();
    test_record();
    test_round_trips();
    test_rec_print();
    test_writer_errors();
    test_versions();
    test_text_errors();
    test_weight_digits();
    test_layer_map();
    unit_tmp_done();
    return unit_done("test_trace");
}
