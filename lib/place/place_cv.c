/* lib/place/place_cv.c -- k-fold cross-validation of placement fits: each fold fitted without
 * its tokens, then one accounting pass scoring every fold under its own fit. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/affinity.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/placement.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "pool_internal.h"
#include "util_internal.h"

#define CV_MAX_FOLDS 16u
/* Blocks of consecutive token ids per fold when a trace holds too few sequences to fold: a
 * few, so that no fold is one contiguous stretch of the generation, yet each block long
 * enough that a held-out token's neighbours are mostly held out with it. */
#define CV_BLOCKS_PER_FOLD 4u
/* Tokens a fold fit scores its candidates on, per expert of a layer, and at least (the fit's own
 * sample holds up to 8192 tokens, more than the fold fits can afford: each costs in
 * proportion). On DeepSeek-V2-Lite (64 experts, 8 ranks) the estimate of the transfers then
 * reads 2% above those on the held-out prompts (the fold's whole sample, about 6,100 tokens,
 * 1%; 2048 tokens 3%); fewer tokens fit worse, so the estimate errs on the safe side. */
#define CV_SAMPLE_PER_EXPERT 64u
#define CV_SAMPLE_MIN 2048u

struct moe_place_cv {
    char *path;
    const moe_place_tokens_t *sample;
    uint32_t k;
    uint64_t seed, block, units, tokens;
    int threads;
};

/* A filter of the tokens outside one fold (the fold fit's data). */
typedef struct keep {
    const moe_place_cv_t *cv;
    uint32_t fold;
} keep_t;

uint32_t moe_place_cv_fold(const moe_place_cv_t *cv, uint64_t token, uint32_t seq)
{
    if (cv->block) /* dealt in turn: few blocks, and every fold gets its share */
        return (uint32_t)((token / cv->block + cv->seed) % cv->k);
    return (uint32_t)(moe_hash64(cv->seed ^ UINT64_C(0x63726f737376616c), seq) % cv->k);
}

static int keep_other(void *ctx, uint64_t token, uint32_t seq)
{
    const keep_t *kp = ctx;
    return moe_place_cv_fold(kp->cv, token, seq) != kp->fold;
}

moe_place_cv_t *moe_place_cv_new(const char *path, const moe_place_tokens_t *sample,
                                 uint32_t folds, uint64_t seed, int threads, int *status,
                                 char *errbuf, size_t errlen)
{
    if (folds < 2 || folds > CV_MAX_FOLDS || !sample) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "cross-validation needs 2 to %u folds",
                            CV_MAX_FOLDS);
        return NULL;
    }
    moe_place_cv_t *cv = calloc(1, sizeof *cv);
    if (!cv || !(cv->path = strdup(path))) {
        free(cv);
        *status = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
        return NULL;
    }
    uint64_t runs;
    moe_place_tokens_counts(sample, &cv->tokens, &runs);
    cv->sample = sample;
    cv->k = folds;
    cv->seed = seed;
    cv->threads = threads;
    if (runs < 2 * (uint64_t)folds) {
        uint64_t blocks = (uint64_t)folds * CV_BLOCKS_PER_FOLD;
        cv->block = cv->tokens > blocks ? (cv->tokens + blocks - 1) / blocks : 1;
        cv->units = cv->tokens ? (cv->tokens + cv->block - 1) / cv->block : 0;
    } else {
        cv->units = runs;
    }
    return cv;
}

void moe_place_cv_free(moe_place_cv_t *cv)
{
    if (!cv)
        return;
    free(cv->path);
    free(cv);
}

/* Fit fold f's placement from the tokens outside it: *out, or NULL when nothing is left to
 * fit (a fold holding every token). */
static int fold_fit(const moe_place_cv_t *cv, const moe_topo_t *topo, const moe_place_opts_t *o,
                    uint32_t f, moe_placement_t **out, char *errbuf, size_t errlen)
{
    keep_t kp = {cv, f};
    const moe_place_sample_t *view = moe_place_tokens_view(cv->sample);
    int top1 = view->sets == 1, st = 0;
    moe_affinity_opts_t ao;
    moe_place_stats_opts(&ao, top1);
    ao.keep = keep_other;
    ao.keep_ctx = &kp;
    *out = NULL;
    moe_affinity_t *a = moe_affinity_count(cv->path, &ao, cv->threads, NULL, NULL, &st, errbuf,
                                           errlen);
    if (!a)
        return st;
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    moe_place_tokens_t *s = NULL;
    moe_place_opts_t fo = *o;
    fo.progress = NULL;
    fo.starts = 1;
    if (in.tokens && o->sample) {
        uint32_t max = in.experts * CV_SAMPLE_PER_EXPERT;
        s = moe_place_tokens_subset(cv->sample, keep_other, &kp,
                                    max > CV_SAMPLE_MIN ? max : CV_SAMPLE_MIN, &st, errbuf,
                                    errlen);
        moe_place_tokens_attach(s, &fo);
    }
    if (in.tokens && (s || !o->sample)) {
        moe_place_result_t res;
        *out = moe_place_fit(a, topo, &fo, &res, &st, errbuf, errlen);
    }
    moe_place_tokens_free(s);
    moe_affinity_free(a);
    return *out || !in.tokens ? 0 : st;
}

/* The contiguous layout of p's shape: expert e on rank e * G / E. */
static moe_placement_t *contiguous(const moe_placement_t *p, int *status)
{
    uint32_t E = p->experts, G = p->ranks;
    moe_placement_t *c = moe_placement_new(p->layers, E, G, p->gpus_per_node, (E + G - 1) / G, 1,
                                           status);
    for (uint32_t l = 0; c && l < p->layers; l++)
        for (uint32_t e = 0; e < E; e++)
            moe_placement_add(c, l, e, (uint32_t)((uint64_t)e * G / E));
    return c;
}

/* Link-weighted transfers per cell of a scheme. */
static double link_cost(const moe_acct_t *a, int scheme, const moe_topo_t *topo)
{
    moe_acct_layer_t t;
    moe_acct_total(a, scheme, &t);
    double c = 0;
    for (int ph = 0; ph < MOE_PHASES; ph++)
        for (int k = 0; k < MOE_LINK_CLASSES; k++)
            c += (double)t.xfer[ph][k] * topo->cost[k];
    return t.cells ? c / (double)t.cells : 0;
}

/* The accumulators of one pass: [0..k) the folds (NULL without a fit), k the fitted
 * placement, k + 1 the contiguous layout, k + 2 the folds pooled. */
typedef struct pass {
    moe_acct_t *a[CV_MAX_FOLDS + 3];
    moe_placement_t *ref;
} pass_t;

static void pass_free(pass_t *ps)
{
    for (size_t i = 0; i < sizeof ps->a / sizeof *ps->a; i++)
        moe_acct_free(ps->a[i]);
    moe_placement_free(ps->ref);
}

/* Fill r's figures from the pass's accumulators. */
static int pass_results(const moe_place_cv_t *cv, pass_t *ps, const moe_topo_t *topo,
                        moe_place_cv_result_t *r)
{
    uint32_t k = cv->k;
    moe_acct_summary_t m;
    for (int s = 0; s < MOE_SCHEMES; s++) {
        if (ps->a[k]) {
            moe_acct_summarise(ps->a[k], s, 0, &m);
            r->in_xfer[s] = m.per_tl;
            r->in_hops[s] = m.hops;
            r->in_load[s] = m.max_load;
            r->in_cost[s] = link_cost(ps->a[k], s, topo);
        }
        double sum = 0, sq = 0;
        uint32_t n = 0;
        for (uint32_t f = 0; f < k; f++) {
            if (!ps->a[f] || !moe_acct_tokens(ps->a[f]))
                continue;
            moe_acct_summarise(ps->a[f], s, 0, &m);
            sum += m.max_load;
            sq += m.max_load * m.max_load;
            r->out_load_max[s] = fmax(r->out_load_max[s], m.max_load);
            n++;
        }
        r->out_load[s] = n ? sum / n : NAN;
        r->out_load_se[s] = n > 1 ? sqrt(fmax(sq - sum * sum / n, 0) / (n - 1) / n) : NAN;
        if (!n)
            r->out_load_max[s] = NAN;
    }
    for (uint32_t f = 0; f < k; f++) /* transfers pooled over the folds */
        if (ps->a[f] && moe_acct_merge(ps->a[k + 2], ps->a[f]))
            return MOE_ENOMEM;
    for (int s = 0; s < MOE_SCHEMES; s++) {
        moe_acct_summarise(ps->a[k + 2], s, 0, &m);
        r->out_xfer[s] = m.per_tl;
        r->out_hops[s] = m.hops;
        r->out_cost[s] = link_cost(ps->a[k + 2], s, topo);
    }
    if (ps->a[k + 1]) {
        moe_acct_summarise(ps->a[k + 1], MOE_SCHEME_VANILLA, 0, &m);
        r->ref_xfer = m.per_tl;
    }
    return 0;
}

/* The pass's map state: per worker, accumulators [0..k) of the folds (NULL without a fit), k of
 * the fitted placement (or NULL), k + 1 of the contiguous layout. */
typedef struct scan {
    const moe_place_cv_t *cv;
    moe_trace_map_t *m;
    moe_acct_t **acc;       /* [workers][k + 2] */
    uint64_t *tokens;       /* [workers] */
    size_t LK;
    uint32_t G;
} scan_t;

static int scan_batch(void *arg, int wk, moe_trace_batch_t *b)
{
    scan_t *sc = arg;
    uint32_t k = sc->cv->k;
    moe_acct_t **acc = sc->acc + (size_t)wk * (k + 2);
    for (size_t r = 0; r < b->n; r++) {
        const uint16_t *ids = b->ids + r * sc->LK;
        const float *w = b->weights ? b->weights + r * sc->LK : NULL;
        moe_acct_t *use[3] = {acc[moe_place_cv_fold(sc->cv, b->token[r], b->seq[r])], acc[k],
                              acc[k + 1]};
        for (int i = 0; i < 3; i++)
            if (use[i] && moe_acct_token(use[i], ids, w, b->token[r], b->seq[r], b->rank[r]))
                return moe_trace_map_fail(sc->m, MOE_ERANGE, "token %" PRIu64 ": recorded rank "
                                          "%u is not below %u", b->token[r], b->rank[r], sc->G);
    }
    sc->tokens[wk] += b->n;
    return 0;
}

/* One pass over the trace on the map's workers: each token into its fold's accumulator (when
 * that fold has a fit), the fitted placement's and the contiguous layout's; the workers' counts
 * merged in worker order (integer sums: the same for any thread count). */
static int account(const moe_place_cv_t *cv, const moe_topo_t *topo, const moe_place_opts_t *o,
                   moe_placement_t *const *fits, const moe_placement_t *fitted,
                   moe_place_cv_result_t *r, char *errbuf, size_t errlen)
{
    int st = 0;
    uint32_t k = cv->k;
    pass_t ps;
    memset(&ps, 0, sizeof ps);
    scan_t sc = {.cv = cv};
    moe_trace_map_t *m = moe_trace_map_open(cv->path, cv->threads, &st, errbuf, errlen);
    int nw = m ? moe_trace_map_workers(m) : 0;
    const moe_trace_hdr_t *h = m ? moe_trace_map_header(m) : NULL;
    const moe_placement_t *any = fitted;
    for (uint32_t f = 0; f < k; f++)
        any = any ? any : fits[f];
    if (m) {
        sc.m = m;
        sc.LK = (size_t)h->layers * h->topk;
        sc.G = any->ranks;
        sc.acc = calloc((size_t)nw * (k + 2), sizeof *sc.acc);
        sc.tokens = calloc((size_t)nw, sizeof *sc.tokens);
        /* the baseline belongs with a fitted placement's figures (tuning's folds have none) */
        if (!sc.acc || !sc.tokens || (fitted && !(ps.ref = contiguous(any, &st))))
            st = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    }
    moe_acct_opts_t ao;
    moe_acct_opts_default(&ao);
    ao.topk = moe_place_tokens_view(cv->sample)->sets == 1 ? 1 : 0;
    ao.replica_rule = o->replica_rule;
    for (int w = 0; !st && w < nw; w++)
        for (uint32_t i = 0; !st && i < k + 2; i++) {
            const moe_placement_t *p = i < k ? fits[i] : i == k ? fitted : ps.ref;
            if (p && !(sc.acc[(size_t)w * (k + 2) + i] = moe_acct_new(p, topo, h, &ao, &st,
                                                                      errbuf, errlen)))
                break;
        }
    if (!st && !(ps.a[k + 2] = moe_acct_new(any, topo, h, &ao, &st, errbuf, errlen)))
        st = st ? st : MOE_ENOMEM;
    if (!st) {
        moe_trace_map_ops_t ops = {0};
        ops.batch = scan_batch;
        ops.fields = MOE_MAP_TOKEN | MOE_MAP_SEQ | MOE_MAP_RANK;
        if ((st = moe_trace_map_run(m, &ops, &sc)) != 0) {
            util_errf(errbuf, errlen, st, "%s", moe_trace_map_errmsg(m)); /* names the trace */
        }
    }
    for (int w = 0; w < nw && sc.acc; w++)
        for (uint32_t i = 0; i < k + 2; i++) {
            moe_acct_t **a = &sc.acc[(size_t)w * (k + 2) + i];
            if (w == 0)
                ps.a[i] = *a; /* worker 0's become the pass's */
            else if (*a && !st && moe_acct_merge(ps.a[i], *a))
                st = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
            if (w > 0)
                moe_acct_free(*a);
        }
    for (int w = 0; w < nw && sc.tokens; w++)
        r->tokens += sc.tokens[w];
    if (!st && (st = pass_results(cv, &ps, topo, r)) != 0)
        util_errf(errbuf, errlen, st, "out of memory");
    pass_free(&ps);
    free(sc.acc);
    free(sc.tokens);
    moe_trace_map_close(m);
    return st;
}

/* The fold fits, shared by workers: each takes the next fold. */
typedef struct folds_job {
    const moe_place_cv_t *cv;
    const moe_topo_t *topo;
    moe_place_opts_t o;
    moe_placement_t **fits;
    int rc[CV_MAX_FOLDS];
    char err[CV_MAX_FOLDS][256];
    uint32_t next;
} folds_job_t;

/* A worker of the job: folds from the common counter until none is left (any share). */
static void folds_share(void *arg, int share)
{
    (void)share;
    folds_job_t *jb = arg;
    for (;;) {
        uint32_t f = __atomic_fetch_add(&jb->next, 1, __ATOMIC_RELAXED);
        if (f >= jb->cv->k)
            return;
        double t = util_now();
        jb->rc[f] = fold_fit(jb->cv, jb->topo, &jb->o, f, &jb->fits[f], jb->err[f],
                             sizeof jb->err[f]);
        moe_log(MOE_LOG_INFO, "cross-validation: fold %u of %u fitted in %.2f s", f + 1,
                jb->cv->k, util_now() - t);
    }
}

/* Fit every fold: the folds shared by 1 + threads workers, each fit on one thread (so that
 * the placements are those of a serial run), or one after the other on all threads. */
static int fit_folds(const moe_place_cv_t *cv, const moe_topo_t *topo,
                     const moe_place_opts_t *o, moe_placement_t **fits, char *errbuf,
                     size_t errlen)
{
    folds_job_t *jb = calloc(1, sizeof *jb);
    if (!jb)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    moe_place_cv_t one = *cv;
    *jb = (folds_job_t){.cv = &one, .topo = topo, .o = *o, .fits = fits};
    int workers = o->threads > 0 ? o->threads + 1 : 1;
    workers = workers > (int)cv->k ? (int)cv->k : workers;
    if (workers > 1) {
        one.threads = 0;
        jb->o.threads = 0;
    }
    pool_run(workers, folds_share, jb);
    int rc = 0;
    for (uint32_t f = 0; f < cv->k && !rc; f++)
        if ((rc = jb->rc[f]) != 0)
            snprintf(errbuf, errlen, "%s", jb->err[f]);
    free(jb);
    return rc;
}

int moe_place_cv_run(moe_place_cv_t *cv, const moe_topo_t *topo, const moe_place_opts_t *o,
                     const moe_placement_t *fitted, int folds, moe_place_cv_result_t *out,
                     char *errbuf, size_t errlen)
{
    double t0 = util_now();
    memset(out, 0, sizeof *out);
    out->folds = cv->k;
    out->block = cv->block;
    out->units = cv->units;
    moe_placement_t *fits[CV_MAX_FOLDS] = {0};
    int rc = folds ? fit_folds(cv, topo, o, fits, errbuf, errlen) : 0;
    for (uint32_t f = 0; f < cv->k; f++)
        out->done += fits[f] != NULL;
    if (!rc && (out->done || fitted))
        rc = account(cv, topo, o, fits, fitted, out, errbuf, errlen);
    for (uint32_t f = 0; f < cv->k; f++)
        moe_placement_free(fits[f]);
    out->seconds = util_now() - t0;
    return rc;
}

/* The @FT fields recording a cross-validation of `scheme`'s figures (moe-place(5)):
 * "\tcv_folds:K\tcv_done:D\tcv_unit:..."; 0, or MOE_ENOMEM when len is too short. */
static int cv_fields(const moe_place_cv_result_t *r, int scheme, int top1, char *buf,
                     size_t len)
{
    int n = snprintf(buf, len, "\tcv_folds:%u\tcv_done:%u\tcv_unit:%s", r->folds, r->done,
                     r->block ? "tokens" : "sequence");
    if (r->block)
        n += snprintf(buf + n, len - (size_t)n, "\tcv_block:%" PRIu64, r->block);
    n += snprintf(buf + n, len - (size_t)n, "\tcv_units:%" PRIu64 "\tin_xfer:%.4f\tin_load:%.4f",
                  r->units, r->in_xfer[scheme], r->in_load[scheme]);
    if (r->done)
        n += snprintf(buf + n, len - (size_t)n, "\theld_xfer:%.4f\theld_load:%.4f"
                      "\theld_load_max:%.4f", r->out_xfer[scheme], r->out_load[scheme],
                      r->out_load_max[scheme]);
    if (top1)
        n += snprintf(buf + n, len - (size_t)n, "\tin_hops:%.4f", r->in_hops[scheme]);
    if (top1 && r->done)
        n += snprintf(buf + n, len - (size_t)n, "\theld_hops:%.4f", r->out_hops[scheme]);
    n += snprintf(buf + n, len - (size_t)n, "\tvanilla_contiguous:%.4f", r->ref_xfer);
    if (r->tuned)
        n += snprintf(buf + n, len - (size_t)n, "\ttuned:%u", r->tuned);
    return n < 0 || (size_t)n >= len ? MOE_ENOMEM : 0;
}

/* Append `fields` to the fit's @FT line, the last header line moe_place_fit wrote. */
static int append_ft(moe_placement_t *p, const char *fields)
{
    size_t n = p->text ? strlen(p->text) : 0, k = strlen(fields);
    size_t at = n >= 2 ? n - 1 : 0;
    while (at > 0 && p->text[at - 1] != '\n')
        at--;
    if (n < 2 || strncmp(p->text + at, "@FT\t", 4) != 0)
        return MOE_EINVAL;
    char *t = realloc(p->text, n + k + 1);
    if (!t)
        return MOE_ENOMEM;
    memcpy(t + n - 1, fields, k); /* over the line's '\n' */
    t[n - 1 + k] = '\n';
    t[n + k] = 0;
    p->text = t;
    return 0;
}

/* ------------------------------------------------------------------ fit with cross-validation */

#define MAX_SETTINGS 32u

/* The ways to spend `memory` (slots per rank as a multiple of E/G) with the method: every
 * expert-parallel group size P (G first, then smaller) whose groups hold all experts in the
 * slots, the rest as replicas where the method places them. */
static uint32_t memory_settings(const moe_place_opts_t *o, double memory, uint32_t E,
                                const moe_topo_t *topo, moe_place_opts_t *out, uint32_t max)
{
    uint32_t G = moe_topo_ranks(topo), g = topo->gpus_per_node, n = 0;
    uint32_t c = (uint32_t)floor(memory * E / G + 1e-9);
    int reps = o->method == MOE_PLACE_BALANCED || o->method == MOE_PLACE_AFFINITY;
    for (uint32_t P = G; P >= 1 && n < max; P--) {
        if (G % P || (P < g ? g % P : P % g) || (uint64_t)c * P < E)
            continue;
        uint32_t r = c * P - E;
        if ((r && (!reps || P < 2 || r > 254u * E)) || (r + 1 < P ? r + 1 : P) * (G / P) > 255)
            continue;
        out[n] = *o;
        out[n].ep_size = P == G ? 0 : P;
        out[n].replicas = r;
        out[n].fill_slots = 1;
        n++;
    }
    return n;
}

/* The setting tuning keeps, of n cross-validated ones (r[i].done > 0 for those that count):
 * the least held-out link-weighted cost among those whose held-out load keeps the target;
 * if none does, among those whose load is within one standard error (over the folds) of the
 * least load -- loads the folds cannot tell apart -- the least cost (the "one standard
 * error" rule of cross-validation). UINT32_MAX when none counts. */
static uint32_t choose(const moe_place_cv_result_t *r, uint32_t n, int s, double target)
{
    uint32_t best = UINT32_MAX, least = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        if (!r[i].done)
            continue;
        if (least == UINT32_MAX || r[i].out_load[s] < r[least].out_load[s])
            least = i;
        if (target > 0 && r[i].out_load[s] <= target &&
            (best == UINT32_MAX || r[i].out_cost[s] < r[best].out_cost[s]))
            best = i;
    }
    if (best != UINT32_MAX || least == UINT32_MAX)
        return best;
    double se = r[least].out_load_se[s], within = r[least].out_load[s] + (se > 0 ? se : 0);
    for (uint32_t i = 0; i < n; i++)
        if (r[i].done && r[i].out_load[s] <= within &&
            (best == UINT32_MAX || r[i].out_cost[s] < r[best].out_cost[s]))
            best = i;
    return best;
}

/* The progress of a cross-validated fit, in fits: each fold's and the final one. */
typedef struct ticks {
    const moe_place_opts_t *o;
    uint64_t done, total;
} ticks_t;

static void tick(ticks_t *t, uint64_t n)
{
    t->done += n;
    if (t->o->progress && t->total)
        t->o->progress(t->o->progress_ctx, t->done, t->total);
}

moe_placement_t *moe_place_fit_cv(const char *path, const moe_affinity_t *a,
                                  const moe_place_tokens_t *s, const moe_topo_t *topo,
                                  moe_place_opts_t *o, const moe_place_cv_opts_t *c,
                                  moe_place_result_t *res, moe_place_cv_result_t *cvr,
                                  int *status, char *errbuf, size_t errlen)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    moe_place_opts_t set[MAX_SETTINGS];
    uint32_t n = 1;
    set[0] = *o;
    memset(cvr, 0, sizeof *cvr);
    if (c->memory > 0 &&
        !(n = memory_settings(o, c->memory, in.experts, topo, set, MAX_SETTINGS))) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "--memory %g: %u slots per rank hold "
                            "no layout of %u experts on %u ranks with the %s method", c->memory,
                            (uint32_t)floor(c->memory * in.experts / moe_topo_ranks(topo) + 1e-9),
                            in.experts, moe_topo_ranks(topo), moe_place_method_name(o->method));
        return NULL;
    }
    if (!c->tune) { /* without tuning: the most groups (measured best on DeepSeek-V2-Lite) */
        set[0] = set[n - 1];
        n = 1;
    }
    moe_place_cv_t *cv = c->folds >= 2 && s ? moe_place_cv_new(path, s, c->folds, o->seed,
                                                             o->threads, status, errbuf, errlen)
                                            : NULL;
    if (c->folds >= 2 && s && !cv)
        return NULL;
    int rc = 0;
    uint32_t best = 0, tried = 0;
    moe_place_cv_result_t r, *tr = NULL;
    /* without folds the method reports its own progress (exflow's stages) */
    ticks_t tk = {o, 0, cv ? (uint64_t)cv->k * ((c->tune ? MAX_SETTINGS : 0) + 1) + 1 : 0};
    tick(&tk, 0);
    if (c->tune && cv) {
        /* the fit's bound is a margin under the held-out target: tighter ones, and none */
        static const double margin[] = {1.0, 0.5, 0.25, -1};
        double target = o->max_imbalance;
        uint32_t m = target > 1 ? 4 : 1, base = n;
        for (uint32_t i = 0; i < base; i++)
            for (uint32_t k = 1; k < m && n < MAX_SETTINGS; k++) {
                set[n] = set[i];
                set[n++].max_imbalance = margin[k] < 0 ? 0 : 1 + (target - 1) * margin[k];
            }
        if (!(tr = calloc(n, sizeof *tr)))
            rc = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
        tk.total = (uint64_t)cv->k * (n + 1) + 1;
        for (uint32_t i = 0; i < n && !rc; i++) {
            rc = moe_place_cv_run(cv, topo, &set[i], NULL, 1, &tr[i], errbuf, errlen);
            tick(&tk, cv->k);
            moe_log(MOE_LOG_INFO, "tune: bound %.3f, %u replicas, ep-size %u: held-out %.4f "
                    "(link-weighted), load %.3f +- %.3f", set[i].max_imbalance, set[i].replicas,
                    set[i].ep_size, tr[i].out_cost[o->scheme], tr[i].out_load[o->scheme],
                    tr[i].out_load_se[o->scheme]);
        }
        tried = rc ? 0 : n;
        best = rc ? 0 : choose(tr, n, o->scheme, target);
        if (!rc && best == UINT32_MAX)
            rc = util_errf(errbuf, errlen, MOE_EINVAL, "--tune: no setting could be "
                           "cross-validated (too few tokens in the folds)");
    }
    moe_placement_t *p = NULL;
    if (!rc) {
        moe_place_opts_t fo = set[best];
        if (cv)
            fo.progress = NULL; /* counted here, as one fit */
        p = moe_place_fit(a, topo, &fo, res, &rc, errbuf, errlen);
        tick(&tk, 1);
    }
    if (p && cv) {
        /* by default only models whose fold fits take seconds (tuning has fitted them) */
        uint64_t cells = (uint64_t)in.layers * in.experts * in.experts;
        int folds = !c->tune && (c->forced || cells <= MOE_PLACE_CV_AUTO_CELLS);
        if (!c->tune && !folds)
            moe_log(MOE_LOG_INFO, "cross-validation skipped: %u layers x %u experts is past "
                    "the default's size (give --cv to run it)", in.layers, in.experts);
        rc = moe_place_cv_run(cv, topo, &set[best], p, folds, &r, errbuf, errlen);
        tick(&tk, cv->k);
        if (!rc && tried) { /* the chosen setting's folds: already fitted */
            const moe_place_cv_result_t *b = &tr[best];
            memcpy(r.out_xfer, b->out_xfer, sizeof r.out_xfer);
            memcpy(r.out_cost, b->out_cost, sizeof r.out_cost);
            memcpy(r.out_hops, b->out_hops, sizeof r.out_hops);
            memcpy(r.out_load, b->out_load, sizeof r.out_load);
            memcpy(r.out_load_max, b->out_load_max, sizeof r.out_load_max);
            memcpy(r.out_load_se, b->out_load_se, sizeof r.out_load_se);
            r.done = b->done;
        }
        r.tuned = tried;
        char fields[512];
        *cvr = r;
        if (!rc && (rc = cv_fields(&r, o->scheme, in.top1, fields, sizeof fields)) == 0)
            rc = append_ft(p, fields);
        if (rc == MOE_ENOMEM)
            util_errf(errbuf, errlen, rc, "out of memory");
    }
    moe_place_cv_free(cv);
    free(tr);
    if (rc) {
        moe_placement_free(p);
        *status = rc;
        return NULL;
    }
    *o = set[best];
    *status = 0;
    return p;
}
