/* tests/unit/test_trace_ops.c -- the trace operations that write to a caller's sink: copy,
 * split, the exact-size samples and the import of several inputs (moe/trace.h, moe/import.h). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "moe/import.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "unit.h"
#include "unit_tmp.h"

/* A sink that keeps what it is given: the header's shape, each record's token, sequence and
 * first expert id; with fail_at > 0 the fail_at-th record fails with MOE_ESYS. */
typedef struct mem_sink {
    int begun;
    moe_trace_hdr_t h;
    uint64_t token[64];
    uint32_t seq[64], id0[64];
    int n, fail_at;
} mem_sink_t;

static int mem_begin(void *ctx, const moe_trace_hdr_t *h)
{
    mem_sink_t *m = ctx;
    m->begun++;
    m->h = *h;
    m->h.text = NULL; /* not kept: the caller's */
    return 0;
}

static int mem_put(void *ctx, const moe_trace_rec_t *r)
{
    mem_sink_t *m = ctx;
    if (m->fail_at && m->n + 1 == m->fail_at)
        return MOE_ESYS;
    if (m->n == 64)
        return MOE_ERANGE;
    m->token[m->n] = r->token;
    m->seq[m->n] = r->seq;
    m->id0[m->n] = r->ids[0];
    m->n++;
    return 0;
}

static moe_trace_sink_t sink_of(mem_sink_t *m)
{
    memset(m, 0, sizeof *m);
    return (moe_trace_sink_t){mem_begin, mem_put, m};
}

/* The test trace: 10 tokens, 2 layers, 4 experts, top-1; token t is in sequence t / 3 (sizes
 * 3, 3, 3, 1) and routed to expert t % 4 in both layers. */
static void write_trace(const char *path)
{
    int st;
    moe_trace_t *t = moe_trace_open(path, "wb", 0, &st, NULL, 0);
    CHECK(t != NULL);
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = 2, h.experts = 4, h.topk = 1;
    CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
    moe_trace_rec_t r = {0};
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h), 0);
    for (uint32_t i = 0; i < 10; i++) {
        r.token = i, r.seq = i / 3, r.pos = i % 3;
        r.ids[0] = r.ids[1] = (uint16_t)(i % 4);
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
    }
    moe_trace_rec_release(&r);
    CHECK_EQ_INT(moe_trace_close(t, NULL, 0), 0);
}

static moe_trace_t *open_trace(const char *path, moe_trace_hdr_t *h)
{
    int st;
    moe_trace_t *t = moe_trace_open(path, "r", 0, &st, NULL, 0);
    CHECK(t != NULL);
    moe_trace_hdr_init(h);
    CHECK_EQ_INT(moe_trace_read_header(t, h), 0);
    return t;
}

static int even_token(void *ctx, const moe_trace_hdr_t *h, moe_trace_rec_t *r)
{
    (void)ctx, (void)h;
    return r->token % 2 == 0;
}

static void test_copy(void)
{
    const char *path = tmp_path("ten.moet");
    write_trace(path);
    moe_trace_hdr_t h;
    mem_sink_t m;
    moe_trace_sink_t s = sink_of(&m);
    char err[256] = "untouched";
    moe_trace_t *t = open_trace(path, &h);
    CHECK_EQ_INT(moe_trace_copy(t, &h, even_token, NULL, 3, &s, NULL, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(m.begun, 0); /* the caller begins the output */
    CHECK_EQ_INT(m.n, 3);
    CHECK_EQ_INT(m.token[0], 0);
    CHECK_EQ_INT(m.token[2], 4);
    moe_trace_close(t, NULL, 0);

    /* A sink's failure is returned as it is, errbuf left alone. */
    s = sink_of(&m);
    m.fail_at = 2;
    t = open_trace(path, &h);
    CHECK_EQ_INT(moe_trace_copy(t, &h, NULL, NULL, UINT64_MAX, &s, NULL, NULL, err, sizeof err),
                 MOE_ESYS);
    CHECK_STR(err, "untouched");
    CHECK_EQ_INT(m.n, 1);
    moe_trace_close(t, NULL, 0);
    moe_trace_hdr_release(&h);
}

static void test_split(void)
{
    const char *path = tmp_path("ten.moet");
    moe_trace_hdr_t h;
    moe_ranges_t ids = {0};
    CHECK_EQ_INT(moe_ranges_parse(&ids, "1,3", UINT32_MAX), 0);
    mem_sink_t a, b;
    moe_trace_sink_t train = sink_of(&a), test = sink_of(&b);
    char err[256];
    moe_trace_t *t = open_trace(path, &h);
    CHECK_EQ_INT(moe_trace_split(t, &h, &ids, 1, 0, &train, &test, err, sizeof err), 0);
    CHECK_EQ_INT(a.begun, 1);
    CHECK_EQ_INT(b.begun, 1);
    CHECK_EQ_INT(a.n, 4); /* sequences 1 (tokens 3-5) and 3 (token 9) */
    CHECK_EQ_INT(a.token[0], 3);
    CHECK_EQ_INT(a.token[3], 9);
    CHECK_EQ_INT(b.n, 6);
    moe_trace_close(t, NULL, 0);
    moe_ranges_free(&ids);

    /* Without ids the seeded ratio decides: 1 keeps every sequence for training. */
    train = sink_of(&a), test = sink_of(&b);
    t = open_trace(path, &h);
    CHECK_EQ_INT(moe_trace_split(t, &h, NULL, 7, 1.0, &train, &test, err, sizeof err), 0);
    CHECK_EQ_INT(a.n, 10);
    CHECK_EQ_INT(b.n, 0);
    moe_trace_close(t, NULL, 0);
    moe_trace_hdr_release(&h);
    CHECK(!moe_hash_keep(3, 42, 0.0));
    CHECK(moe_hash_keep(3, 42, 1.0));
}

static void test_samples(void)
{
    const char *path = tmp_path("ten.moet");
    moe_trace_hdr_t h;
    mem_sink_t m;
    moe_trace_sink_t s = sink_of(&m);
    char err[256];
    moe_trace_t *t = open_trace(path, &h);
    CHECK_EQ_INT(moe_trace_sample_tokens(t, &h, 4, 5, &s, err, sizeof err), 0);
    CHECK_EQ_INT(m.begun, 1);
    CHECK_EQ_INT(m.n, 4);
    for (int i = 1; i < m.n; i++)
        CHECK(m.token[i - 1] < m.token[i]); /* in input order */
    moe_trace_close(t, NULL, 0);

    /* Two whole sequences, read again from the file. */
    s = sink_of(&m);
    t = open_trace(path, &h);
    CHECK_EQ_INT(moe_trace_sample_seqs(t, &h, path, 0, 2, 5, &s, err, sizeof err), 0);
    int per_seq[4] = {0}, kept = 0;
    for (int i = 0; i < m.n; i++)
        per_seq[m.seq[i]]++;
    for (int q = 0; q < 4; q++) {
        kept += per_seq[q] > 0;
        CHECK(per_seq[q] == 0 || per_seq[q] == (q < 3 ? 3 : 1));
    }
    CHECK_EQ_INT(kept, 2);
    moe_trace_close(t, NULL, 0);

    /* A second pass that cannot open its file says why. */
    s = sink_of(&m);
    t = open_trace(path, &h);
    CHECK(moe_trace_sample_seqs(t, &h, tmp_path("gone.moet"), 0, 2, 5, &s, err, sizeof err) < 0);
    CHECK(strstr(err, "gone.moet") != NULL);
    CHECK_EQ_INT(m.begun, 0);
    moe_trace_close(t, NULL, 0);
    moe_trace_hdr_release(&h);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

static void test_import_run(void)
{
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s", tmp_path("a.tokens"));
    snprintf(b, sizeof b, "%s", tmp_path("b.tokens"));
    snprintf(c, sizeof c, "%s", tmp_path("c.tokens"));
    write_text(a, "1,0 3,2\n2,3 1,0\n");
    write_text(b, "0,1 2,5\n");
    write_text(c, "0,1 2,0 3,1\n");
    char *two[] = {a, b}, *mismatch[] = {a, c};
    moe_import_job_t job;
    memset(&job, 0, sizeof job);
    job.inputs = two;
    job.ninputs = 2;
    job.hidden = 64;
    mem_sink_t m;
    moe_trace_sink_t s = sink_of(&m);
    moe_import_report_t total;
    char err[256];

    /* E inferred through the spool: the largest id + 1; tokens numbered across inputs. */
    CHECK_EQ_INT(moe_import_run(&job, &s, &total, err, sizeof err), 0);
    CHECK_EQ_INT(m.begun, 1);
    CHECK_EQ_INT(m.h.experts, 6);
    CHECK_EQ_INT(m.h.layers, 2);
    CHECK_EQ_INT(m.h.topk, 2);
    CHECK_EQ_INT(m.h.hidden, 64);
    CHECK_EQ_INT(m.h.ranks, 1);
    CHECK_EQ_INT(m.n, 3);
    CHECK_EQ_INT(m.token[2], 2);
    CHECK_EQ_INT(m.id0[2], 0);
    CHECK_EQ_INT(total.tokens, 3);
    CHECK_EQ_INT(total.max_id, 5);

    /* With E given, an id at or above it fails naming the input (the reader's own check). */
    job.io.experts = 5;
    s = sink_of(&m);
    CHECK(moe_import_run(&job, &s, &total, err, sizeof err) < 0);
    CHECK(strstr(err, "b.tokens': line 1: group 2: expert id 5 out of range") != NULL);
    CHECK_EQ_INT(m.n, 2);

    /* Inputs of different shapes. */
    job.inputs = mismatch;
    s = sink_of(&m);
    CHECK_EQ_INT(moe_import_run(&job, &s, &total, err, sizeof err), MOE_ESHAPE);
    CHECK(strstr(err, "c.tokens': 3 layers, top-2, but '") != NULL);
}

int main(void)
{
    if (unit_tmp_init("test_trace_ops"))
        return 1;
    moe_log_set_level(MOE_LOG_OFF);
    test_copy();
    test_split();
    test_samples();
    test_import_run();
    unit_tmp_done();
    return unit_done("test_trace_ops");
}
