/* tests/unit/test_place_cv.c -- the cross-validation split of moe-place fit (lib/place/place_cv.c):
 * every sequence in one fold, every fold used; one long sequence cut into blocks of consecutive
 * tokens dealt in turn; and the affinity scan's token filter counting exactly the tokens outside
 * a fold, on the mask path (E <= 64) and the list path (E > 64). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/affinity.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/trace.h"
#include "unit.h"
#include "unit_tmp.h"

/* Write n top-2 tokens of L = 3 layers of E experts: token t belongs to sequence seq_of(t),
 * its ids a simple function of t. Returns the path. */
static const char *write_trace(const char *name, uint32_t E, uint32_t n, uint32_t nseq,
                               int interleave)
{
    const char *path = tmp_path(name);
    int st;
    char err[256];
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = 3;
    h.experts = E;
    h.topk = 2;
    moe_trace_t *t = moe_trace_open(path, "wb1", 0, &st, err, sizeof err);
    if (!t) {
        fprintf(stderr, "open: %s\n", err);
        exit(99);
    }
    CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
    moe_trace_rec_t r = {0};
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h), 0);
    for (uint32_t i = 0; i < n; i++) {
        r.token = i;
        r.seq = interleave ? (i * 7) % nseq : i / ((n + nseq - 1) / nseq);
        r.pos = i / nseq;
        for (uint32_t j = 0; j < 3; j++) {
            r.ids[j * 2] = (uint16_t)((i + j) % E);
            r.ids[j * 2 + 1] = (uint16_t)((i * 3 + j + 1) % E);
            if (r.ids[j * 2 + 1] == r.ids[j * 2])
                r.ids[j * 2 + 1] = (uint16_t)((r.ids[j * 2] + 1) % E);
        }
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
    }
    CHECK_EQ_INT(moe_trace_close(t, err, sizeof err), 0);
    moe_trace_rec_release(&r);
    return path;
}

typedef struct keep {
    const moe_place_cv_t *cv;
    uint32_t fold;
} keep_t;

static int keep_other(void *ctx, uint64_t token, uint32_t seq)
{
    const keep_t *k = ctx;
    return moe_place_cv_fold(k->cv, token, seq) != k->fold;
}

/* Split `path` (n tokens) into 4 folds and check them; by_seq: folds of whole sequences. */
static void check_split(const char *path, uint32_t n, uint32_t nseq, int by_seq)
{
    int st;
    char err[256];
    moe_topo_t topo;
    CHECK_EQ_INT(moe_topo_uniform(&topo, 1, 4), 0);
    moe_place_tokens_t *s = moe_place_tokens_load(path, 1, 0, &topo, 0, MOE_SCHEME_COHERENT,
                                                  &st, err, sizeof err);
    CHECK(s != NULL);
    moe_place_cv_t *cv = s ? moe_place_cv_new(path, s, 4, 7, 0, &st, err, sizeof err) : NULL;
    CHECK(cv != NULL);
    if (!cv) {
        moe_place_tokens_free(s);
        return;
    }
    uint32_t *fold_of_seq = malloc(nseq * sizeof *fold_of_seq);
    for (uint32_t q = 0; q < nseq; q++)
        fold_of_seq[q] = UINT32_MAX;
    uint64_t per_fold[4] = {0};
    uint32_t last_block = UINT32_MAX, last_fold = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t seq = (i * 7) % nseq;
        if (!by_seq)
            seq = i / ((n + nseq - 1) / nseq);
        uint32_t f = moe_place_cv_fold(cv, i, seq);
        CHECK(f < 4);
        per_fold[f % 4]++;
        if (by_seq) { /* no sequence in two folds */
            if (fold_of_seq[seq] == UINT32_MAX)
                fold_of_seq[seq] = f;
            CHECK_EQ_INT(f, fold_of_seq[seq]);
        } else { /* blocks of 8 consecutive tokens stay together, dealt in turn */
            uint32_t b = i / 8;
            if (b == last_block)
                CHECK_EQ_INT(f, last_fold);
            else if (last_block != UINT32_MAX)
                CHECK_EQ_INT(f, (last_fold + 1) % 4);
            last_block = b;
            last_fold = f;
        }
    }
    uint64_t sum = 0;
    for (int f = 0; f < 4; f++) {
        CHECK(per_fold[f] > 0);
        sum += per_fold[f];
        if (!by_seq) /* 128 tokens in 16 blocks of 8: 4 blocks a fold */
            CHECK_EQ_INT(per_fold[f], 32);
    }
    CHECK_EQ_INT(sum, n);
    /* the scan's filter counts exactly the tokens outside each fold */
    for (uint32_t f = 0; f < 4; f++) {
        keep_t k = {cv, f};
        moe_affinity_opts_t ao;
        moe_affinity_opts_default(&ao);
        ao.shuffle = 0;
        ao.keep = keep_other;
        ao.keep_ctx = &k;
        for (int threads = 0; threads <= 1; threads++) {
            moe_affinity_t *a = moe_affinity_count(path, &ao, threads, NULL, NULL, &st, err,
                                                   sizeof err);
            CHECK(a != NULL);
            moe_affinity_info_t in;
            if (a) {
                moe_affinity_info(a, &in);
                CHECK_EQ_INT(in.tokens, n - per_fold[f]);
                /* each counted token adds K = 2 to layer 0's loads */
                const uint64_t *ld = moe_affinity_load(a, 0);
                uint64_t tot = 0;
                for (uint32_t e = 0; e < in.experts; e++)
                    tot += ld[e];
                CHECK_EQ_INT(tot, 2 * (n - per_fold[f]));
            }
            moe_affinity_free(a);
        }
    }
    /* the filter wants the plain counts: not with the shuffle */
    keep_t k0 = {cv, 0};
    moe_affinity_opts_t ao;
    moe_affinity_opts_default(&ao);
    ao.keep = keep_other;
    ao.keep_ctx = &k0;
    CHECK(moe_affinity_count(path, &ao, 0, NULL, NULL, &st, err, sizeof err) == NULL);
    free(fold_of_seq);
    moe_place_cv_free(cv);
    moe_place_tokens_free(s);
}

int main(void)
{
    if (unit_tmp_init("test_place_cv"))
        return 99;
    /* 40 interleaved sequences of 8 experts (mask path), then 120 experts (list path) */
    check_split(write_trace("seq8.moet", 8, 400, 40, 1), 400, 40, 1);
    check_split(write_trace("seq120.moet", 120, 400, 40, 1), 400, 40, 1);
    /* one sequence of 128 tokens: 16 blocks of 8, four to a fold */
    check_split(write_trace("one.moet", 8, 128, 1, 0), 128, 1, 0);
    unit_tmp_done();
    return unit_done("test_place_cv");
}
