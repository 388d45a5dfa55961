/* tests/unit/test_trace_map.c -- the parallel trace map: every record exactly once whatever the
 * thread count, file order in the ordered stage, raw ids, the sequential fallback, and errors
 * reported as the sequential reader reports them. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "moe/gen.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "moe/trace_map.h"
#include "unit.h"
#include "unit_tmp.h"

/* Write a generated trace (mode "wb1", "wu", "wt", ...). */
static void make_trace(const char *path, const char *mode, uint64_t tokens)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.layers = 5;
    p.experts = 12;
    p.topk = 3;
    p.tokens = tokens;
    p.sequences = 50;
    p.steps = 7;
    p.seed = 77;
    int st;
    char err[256];
    moe_gen_t *g = moe_gen_new(&p, &st, err, sizeof err);
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    moe_gen_header(g, &h);
    moe_trace_t *t = moe_trace_open(path, mode, 0, &st, err, sizeof err);
    CHECK(t != NULL);
    CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
    moe_trace_rec_t r = {0};
    moe_trace_rec_init(&r, &h);
    while (moe_gen_next(g, &r) == 1)
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
    CHECK_EQ_INT(moe_trace_close(t, NULL, 0), 0);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
    moe_gen_free(g);
}

/* What the sequential reader sees: records, a checksum of all fields and ids. */
typedef struct digest {
    uint64_t n, sum, order;
} digest_t;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15u + (h << 6) + (h >> 2);
    return h;
}

static uint64_t rec_hash(uint64_t token, uint32_t seq, uint32_t pos, uint32_t step,
                         uint32_t rank, const uint16_t *ids, size_t nid)
{
    uint64_t h = mix(mix(mix(mix(mix(0, token), seq), pos), step), rank);
    for (size_t i = 0; i < nid; i++)
        h = mix(h, ids[i]);
    return h;
}

static digest_t sequential_digest(const char *path)
{
    digest_t d = {0, 0, 0};
    int st;
    moe_trace_t *t = moe_trace_open(path, "r", 0, &st, NULL, 0);
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    moe_trace_read_header(t, &h);
    moe_trace_rec_t r = {0};
    while (moe_trace_read(t, &r) == 1) {
        uint64_t x = rec_hash(r.token, r.seq, r.pos, r.step, r.rank, r.ids,
                              (size_t)h.layers * h.topk);
        d.sum += x;
        d.order = mix(d.order, x);
        d.n++;
    }
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
    moe_trace_close(t, NULL, 0);
    return d;
}

/* The map's view: an unordered sum in `batch` (per worker), the file order in `ordered`. */
typedef struct ctx {
    moe_trace_map_t *m;
    size_t nid;
    uint64_t sum[8], n[8];
    uint64_t order, ordered_n, next_index, ordered_end;
    int order_ok, raw_seen, finish_calls;
    int want_raw;
    pthread_mutex_t mu;
} ctx_t;

static void batch_ids(const moe_trace_batch_t *b, size_t r, size_t nid, uint16_t *ids)
{
    if (!b->raw) {
        for (size_t i = 0; i < nid; i++)
            ids[i] = b->ids[r * nid + i];
        return;
    }
    const uint8_t *p = b->raw + r * b->raw_stride;
    for (size_t i = 0; i < nid; i++)
        ids[i] = b->raw_width == 1 ? (p[i] == 0xff ? MOE_EXPERT_NONE : p[i])
                                   : (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
}

static int on_batch(void *arg, int w, moe_trace_batch_t *b)
{
    ctx_t *c = arg;
    uint16_t ids[64];
    if (b->raw) /* any worker: an atomic store */
        __atomic_store_n(&c->raw_seen, 1, __ATOMIC_RELAXED);
    for (size_t r = 0; r < b->n; r++) {
        batch_ids(b, r, c->nid, ids);
        uint64_t x = rec_hash(b->token[r], b->seq[r], b->pos[r], b->step[r], b->rank[r], ids,
                              c->nid);
        c->sum[w] += x;
        c->n[w]++;
        memcpy(b->scratch + r * 8, &x, 8); /* handed to `ordered` */
    }
    b->user = b->n;
    return 0;
}

static int on_ordered(void *arg, int w, moe_trace_batch_t *b)
{
    ctx_t *c = arg;
    (void)w;
    if (!b) {
        c->ordered_end++;
        return 0;
    }
    if (b->index != c->next_index || b->first != c->ordered_n || b->user != b->n)
        c->order_ok = 0;
    c->next_index++;
    for (size_t r = 0; r < b->n; r++) {
        uint64_t x;
        memcpy(&x, b->scratch + r * 8, 8);
        c->order = mix(c->order, x);
    }
    c->ordered_n += b->n;
    return 0;
}

static int on_finish(void *arg, int w)
{
    ctx_t *c = arg;
    (void)w;
    pthread_mutex_lock(&c->mu);
    c->finish_calls++;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void check_map(const char *path, int threads, int raw, int expect_parallel)
{
    digest_t want = sequential_digest(path);
    int st;
    char err[256];
    moe_trace_map_t *m = moe_trace_map_open(path, threads, &st, err, sizeof err);
    CHECK(m != NULL);
    if (!m)
        return;
    CHECK_EQ_INT(moe_trace_map_parallel(m), expect_parallel);
    int nw = moe_trace_map_workers(m);
    CHECK(nw >= 1 && nw <= 8);
    ctx_t c;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    c.m = m;
    c.order_ok = 1;
    const moe_trace_hdr_t *h = moe_trace_map_header(m);
    c.nid = (size_t)h->layers * h->topk;
    moe_trace_map_ops_t ops = {.batch = on_batch, .ordered = on_ordered, .finish = on_finish,
                               .scratch = 8, .raw_ids = raw};
    CHECK_EQ_INT(moe_trace_map_run(m, &ops, &c), 0);
    uint64_t sum = 0, n = 0;
    for (int i = 0; i < nw; i++) {
        sum += c.sum[i];
        n += c.n[i];
    }
    CHECK_EQ_INT(n, want.n);
    CHECK(sum == want.sum);
    CHECK(c.order == want.order);
    CHECK(c.order_ok);
    CHECK_EQ_INT(c.ordered_n, want.n);
    CHECK_EQ_INT(c.ordered_end, 1);
    CHECK_EQ_INT(c.finish_calls, nw);
    CHECK_EQ_INT(moe_trace_map_count(m), want.n);
    if (raw && expect_parallel)
        CHECK(c.raw_seen);
    moe_trace_map_close(m);
    pthread_mutex_destroy(&c.mu);
}

static void test_all_records(void)
{
    make_trace(tmp_path("b.moet"), "wb1", 30000); /* several blocks */
    make_trace(tmp_path("u.moet"), "wu", 5000);
    make_trace(tmp_path("t.txt"), "wt", 3000);
    for (int threads = 0; threads <= 3; threads++)
        for (int raw = 0; raw <= 1; raw++) {
            check_map(tmp_path("b.moet"), threads, raw, 1);
            check_map(tmp_path("u.moet"), threads, raw, 1);
            check_map(tmp_path("t.txt"), threads, raw, 0);
        }
}

/* An error in the file: the map's message and status are the sequential reader's. */
static void check_error_like_reader(const char *path, int threads)
{
    int st;
    char err[256], rerr[256] = "";
    moe_trace_t *t = moe_trace_open(path, "r", 0, &st, rerr, sizeof rerr);
    int want = 0;
    if (t) {
        moe_trace_hdr_t h;
        moe_trace_hdr_init(&h);
        want = moe_trace_read_header(t, &h);
        moe_trace_rec_t r = {0};
        while (want == 0 && (want = moe_trace_read(t, &r)) == 1)
            want = 0;
        snprintf(rerr, sizeof rerr, "%s", moe_trace_errmsg(t));
        moe_trace_rec_release(&r);
        moe_trace_hdr_release(&h);
        moe_trace_close(t, NULL, 0);
    } else {
        want = st;
    }
    CHECK(want < 0);
    moe_trace_map_t *m = moe_trace_map_open(path, threads, &st, err, sizeof err);
    int got = m ? 0 : st;
    const char *msg = err;
    if (m) {
        ctx_t c;
        memset(&c, 0, sizeof c);
        pthread_mutex_init(&c.mu, NULL);
        c.order_ok = 1;
        c.nid = (size_t)moe_trace_map_header(m)->layers * moe_trace_map_header(m)->topk;
        moe_trace_map_ops_t ops = {.batch = on_batch, .ordered = on_ordered, .scratch = 8,
                                   .raw_ids = 1};
        got = moe_trace_map_run(m, &ops, &c);
        msg = moe_trace_map_errmsg(m);
        pthread_mutex_destroy(&c.mu);
    }
    CHECK_EQ_INT(got, want);
    CHECK_STR(msg, rerr);
    moe_trace_map_close(m);
}

static void truncate_copy(const char *src, const char *dst, long cut)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    fseek(in, 0, SEEK_END);
    long n = ftell(in) - cut;
    fseek(in, 0, SEEK_SET);
    for (long i = 0; i < n; i++)
        fputc(fgetc(in), out);
    fclose(in);
    fclose(out);
}

static void test_errors(void)
{
    const char *b = tmp_path("b.moet");
    truncate_copy(b, tmp_path("noeof.moet"), 30);
    truncate_copy(b, tmp_path("cut.moet"), 3000);
    for (int threads = 0; threads <= 2; threads++) {
        check_error_like_reader(tmp_path("noeof.moet"), threads);
        check_error_like_reader(tmp_path("cut.moet"), threads);
    }
    const char *dir = getenv("top_srcdir");
    char path[1024];
    static const char *fixtures[] = {"tests/data/affinity/badid.moet",
                                     "tests/data/affinity/partial.moet",
                                     "tests/data/trace_v2.moet", "tests/data/trace_badmagic.moet"};
    for (size_t i = 0; dir && i < sizeof fixtures / sizeof *fixtures; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, fixtures[i]);
        check_error_like_reader(path, 0);
        check_error_like_reader(path, 2);
    }
    int st;
    char err[256];
    CHECK(moe_trace_map_open(tmp_path("missing.moet"), 1, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESYS);
    CHECK(strstr(err, "cannot open") != NULL);
}

/* A callback failure stops the run with its status and message. */
static int failing_batch(void *arg, int w, moe_trace_batch_t *b)
{
    (void)w;
    if (b->index == 3)
        return moe_trace_map_fail(arg, MOE_ERANGE, "stop at batch %llu",
                                  (unsigned long long)b->index);
    return 0;
}

static void test_callback_failure(void)
{
    for (int threads = 0; threads <= 2; threads++) {
        int st;
        moe_trace_map_t *m = moe_trace_map_open(tmp_path("b.moet"), threads, &st, NULL, 0);
        moe_trace_map_ops_t ops = {.batch = failing_batch};
        CHECK_EQ_INT(moe_trace_map_run(m, &ops, m), MOE_ERANGE);
        char want[1100]; /* the map names its file first (doc/ARCHITECTURE's message rule) */
        snprintf(want, sizeof want, "'%s': stop at batch 3", tmp_path("b.moet"));
        CHECK_STR(moe_trace_map_errmsg(m), want);
        CHECK_EQ_INT(moe_trace_map_run(m, &ops, m), MOE_EINVAL); /* one run per map */
        moe_trace_map_close(m);
    }
    moe_trace_map_close(NULL);
}

int main(void)
{
    if (unit_tmp_init("moe-map"))
        return 99;
    test_all_records();
    test_errors();
    test_callback_failure();
    if (unit_tmp_done())
        return 99;
    return unit_done("test_trace_map");
}
