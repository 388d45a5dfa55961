/* lib/place/place_replay.c -- moe_place_replay: a trace walked in arrival order under a
 * placement re-fitted from a sliding window, against the static one, with the migration. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/affinity.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/trace.h"
#include "textbuf_internal.h"
#include "util_internal.h"

#define DEFAULT_WINDOW 8192u

enum { DYN = 0, STAT = 1, SIDES = 2 };

/* What is known of one interval, or of the whole trace (the summary). */
typedef struct row {
    uint64_t index, first, tokens;
    const char *refit;                  /* "initial", "yes", "no" */
    uint64_t cells[SIDES][MOE_SCHEMES]; /* present (token, layer) cells */
    uint64_t xfer[SIDES][MOE_SCHEMES];  /* transfers, all phases and link classes */
    double load[SIDES];                 /* worst layer's max/mean; summary: x tokens, summed */
    uint64_t copies, refits;            /* refits: the summary's */
} row_t;

typedef struct replay {
    const moe_place_replay_opts_t *o;
    const char *path;
    moe_topo_t topo;
    uint32_t W, G;
    uint64_t every;
    int top1;
    moe_trace_t *in;
    moe_trace_hdr_t h;
    moe_trace_rec_t *ring; /* token i in slot i % (W + 1): the window before token i survives
                            * reading token i */
    uint64_t read;         /* tokens read so far */
    int eof;               /* the trace's end was seen */
    moe_placement_t *p[SIDES];
    moe_acct_t *a[SIDES];  /* the open interval's */
    uint64_t *since;       /* [L][G] loads of the dynamic placement since it was fitted */
    double copy_bytes;     /* bytes of one expert copy, 0 when unknown */
    row_t cur, sum;
    textbuf_t *tb;
    char *errbuf;
    size_t errlen;
} replay_t;

void moe_place_replay_opts_default(moe_place_replay_opts_t *o)
{
    memset(o, 0, sizeof *o);
    moe_place_opts_default(&o->fit);
}

/* ------------------------------------------------------------------ input */

/* Token i (i <= the tokens read) into *rec: 1, 0 at the end of the trace, or a negative
 * status with the reason in errbuf. */
static int token_at(replay_t *r, uint64_t i, moe_trace_rec_t **rec)
{
    *rec = &r->ring[i % (r->W + 1)];
    if (i < r->read)
        return 1;
    int rc = r->eof ? 0 : moe_trace_read(r->in, *rec);
    if (rc < 0) {
        return util_errf(r->errbuf, r->errlen, rc, "%s", moe_trace_errmsg(r->in)); /* named */
    }
    r->read += rc == 1;
    r->eof = rc == 0;
    return rc;
}

/* Write tokens [from, to) of the ring to the scratch trace `path`. */
static int spool(replay_t *r, const char *path, uint64_t from, uint64_t to)
{
    int st;
    moe_trace_t *t = moe_trace_open(path, "wu", 0, &st, r->errbuf, r->errlen);
    if (!t)
        return st;
    int rc = moe_trace_write_header(t, &r->h);
    for (uint64_t i = from; i < to && !rc; i++)
        rc = moe_trace_write(t, &r->ring[i % (r->W + 1)]);
    if (rc) {
        util_errf(r->errbuf, r->errlen, rc, "%s", moe_trace_errmsg(t));
        moe_trace_abort(t);
        return rc;
    }
    return moe_trace_close(t, r->errbuf, r->errlen);
}

/* ------------------------------------------------------------------ fitting */

/* moe-place fit's work on the scratch trace: its statistics, and for the methods that score
 * candidates its token sample. NULL with *status and the reason in errbuf. */
static moe_placement_t *fit_file(replay_t *r, const char *path, int *status)
{
    const moe_place_replay_opts_t *o = r->o;
    moe_affinity_opts_t ao;
    moe_place_stats_opts(&ao, r->top1);
    moe_affinity_t *a = moe_affinity_count(path, &ao, o->threads, NULL, NULL, status, r->errbuf,
                                           r->errlen);
    moe_place_opts_t fo = o->fit;
    moe_place_tokens_t *s = NULL;
    if (a && (fo.method == MOE_PLACE_AFFINITY || fo.method == MOE_PLACE_EXFLOW)) {
        s = moe_place_tokens_load(path, fo.seed, o->threads, &r->topo, r->top1, fo.scheme,
                                  status, r->errbuf, r->errlen);
        moe_place_tokens_rule(s, fo.replica_rule);
        moe_place_tokens_attach(s, &fo);
    }
    fo.threads = o->threads;
    moe_place_result_t res;
    moe_placement_t *p = a && (s || !fo.score)
                             ? moe_place_fit(a, &r->topo, &fo, &res, status, r->errbuf,
                                             r->errlen)
                             : NULL;
    if (p)
        moe_log(MOE_LOG_INFO, "replay: %s fit: objective %.4f %s, %s, %.2f s",
                moe_place_method_name(fo.method), res.objective, res.units, res.status,
                res.seconds);
    moe_place_tokens_free(s);
    moe_affinity_free(a);
    return p;
}

/* A placement fitted on the window before token `at`: tokens [at - W, at), or the first W. */
static moe_placement_t *fit_window(replay_t *r, uint64_t at, int *status)
{
    const char *dir = r->o->tmpdir ? r->o->tmpdir : getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/moe-replay-XXXXXX", dir && *dir ? dir : "/tmp");
    if (moe_scratch_create(path) != 0) {
        *status = util_errf(r->errbuf, r->errlen, MOE_ESYS, "cannot create a temporary file "
                            "in '%s': %s", dir && *dir ? dir : "/tmp", strerror(errno));
        return NULL;
    }
    uint64_t from = at > r->W ? at - r->W : 0, to = at ? at : r->read;
    moe_placement_t *p = NULL;
    if ((*status = spool(r, path, from, to)) == 0)
        p = fit_file(r, path, status);
    moe_scratch_remove(path);
    if (!p) {
        char why[512];
        snprintf(why, sizeof why, "%s", r->errbuf);
        util_errf(r->errbuf, r->errlen, *status, "fit on tokens %" PRIu64 "..%" PRIu64 ": %s",
                  from, to - 1, why);
    }
    return p;
}

/* Copies `next` holds on a rank that `prev` did not (per layer, expert and rank). */
static uint64_t copies_moved(const moe_placement_t *prev, const moe_placement_t *next)
{
    uint64_t n = 0;
    for (uint32_t l = 0; l < next->layers; l++)
        for (uint32_t e = 0; e < next->experts; e++) {
            uint32_t k;
            const uint16_t *rk = moe_placement_ranks(next, l, e, &k);
            for (uint32_t i = 0; i < k; i++)
                n += !moe_placement_holds(prev, l, e, rk[i]);
        }
    return n;
}

/* ------------------------------------------------------------------ accounting */

/* Worst layer's max/mean rank load of [L][G] loads. */
static double worst_load(const uint64_t *load, uint32_t L, uint32_t G)
{
    double worst = 0;
    for (uint32_t l = 0; l < L; l++) {
        uint64_t max = 0, sum = 0;
        for (uint32_t g = 0; g < G; g++) {
            max = load[(size_t)l * G + g] > max ? load[(size_t)l * G + g] : max;
            sum += load[(size_t)l * G + g];
        }
        worst = sum ? fmax(worst, (double)max * G / (double)sum) : worst;
    }
    return worst;
}

/* Open interval k at token `first`: decide and do the re-fit, start the accumulators. */
static int interval_begin(replay_t *r, uint64_t k, uint64_t first)
{
    int st = 0;
    const moe_place_replay_opts_t *o = r->o;
    uint32_t L = r->h.layers;
    r->cur = (row_t){.index = k, .first = first, .refit = k ? "no" : "initial"};
    double load = worst_load(r->since, L, r->G);
    if (k && (o->threshold <= 0 || load > o->threshold)) {
        moe_placement_t *p = fit_window(r, first, &st);
        if (!p)
            return st;
        r->cur.copies = copies_moved(r->p[DYN], p);
        moe_log(MOE_LOG_INFO, "replay: re-fit at token %" PRIu64 " (load since the last fit "
                "%.4f): %" PRIu64 " copies moved", first, load, r->cur.copies);
        if (r->p[DYN] != r->p[STAT])
            moe_placement_free(r->p[DYN]);
        r->p[DYN] = p;
        r->cur.refit = "yes";
        memset(r->since, 0, (size_t)L * r->G * sizeof *r->since);
    }
    moe_acct_opts_t ao;
    moe_acct_opts_default(&ao);
    ao.topk = o->topk;
    ao.replica_rule = o->fit.replica_rule;
    for (int s = 0; s < SIDES; s++)
        if (!(r->a[s] = moe_acct_new(r->p[s], &r->topo, &r->h, &ao, &st, r->errbuf,
                                     r->errlen)))
            return st;
    return 0;
}

/* Close the open interval: its figures into r->cur, the sums and the load since the fit. */
static void interval_end(replay_t *r)
{
    row_t *c = &r->cur, *t = &r->sum;
    uint32_t L = r->h.layers;
    int scheme = r->o->fit.scheme;
    c->tokens = moe_acct_tokens(r->a[DYN]);
    for (int s = 0; s < SIDES; s++) {
        for (int m = 0; m < MOE_SCHEMES; m++) {
            moe_acct_layer_t tot;
            moe_acct_total(r->a[s], m, &tot);
            c->cells[s][m] = tot.cells;
            for (int ph = 0; ph < MOE_PHASES; ph++)
                for (int lc = 0; lc < MOE_LINK_CLASSES; lc++)
                    c->xfer[s][m] += tot.xfer[ph][lc];
            t->cells[s][m] += c->cells[s][m];
            t->xfer[s][m] += c->xfer[s][m];
        }
        for (uint32_t l = 0; l < L; l++)
            c->load[s] = fmax(c->load[s], moe_acct_imbalance(r->a[s], scheme, l));
        t->load[s] += c->load[s] * (double)c->tokens;
    }
    for (uint32_t l = 0; l < L; l++) {
        const uint64_t *ld = moe_acct_load(r->a[DYN], scheme, l);
        for (uint32_t g = 0; g < r->G; g++)
            r->since[(size_t)l * r->G + g] += ld[g];
    }
    t->tokens += c->tokens;
    t->index++;
    t->copies += c->copies;
    t->refits += c->refit[0] == 'y';
    for (int s = 0; s < SIDES; s++) {
        moe_acct_free(r->a[s]);
        r->a[s] = NULL;
    }
}

/* ------------------------------------------------------------------ report */

/* Transfers per cell, or 0 without cells. */
static double per_cell(const row_t *w, int side, int scheme)
{
    return w->cells[side][scheme] ? (double)w->xfer[side][scheme] / (double)w->cells[side][scheme]
                                  : 0;
}

/* The figures of a row (transfers, load, copies, bytes) in the table's or JSON's form. */
static int write_figures(replay_t *r, const row_t *w, double load_dyn, double load_stat)
{
    char bytes[32] = "NA";
    if (r->copy_bytes > 0)
        snprintf(bytes, sizeof bytes, "%.0f", (double)w->copies * r->copy_bytes);
    if (r->o->json)
        return tb_fmt(r->tb, "\"coherent\": {\"dynamic\": %.6g, \"static\": %.6g}, "
                             "\"vanilla\": {\"dynamic\": %.6g, \"static\": %.6g}, "
                             "\"max_load\": {\"dynamic\": %.6g, \"static\": %.6g}, "
                             "\"copies\": %" PRIu64 ", \"bytes_moved\": %s}",
                      per_cell(w, DYN, MOE_SCHEME_COHERENT), per_cell(w, STAT, MOE_SCHEME_COHERENT),
                      per_cell(w, DYN, MOE_SCHEME_VANILLA), per_cell(w, STAT, MOE_SCHEME_VANILLA),
                      load_dyn, load_stat, w->copies, r->copy_bytes > 0 ? bytes : "null");
    return tb_fmt(r->tb, "\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%" PRIu64 "\t%s\n",
                  per_cell(w, DYN, MOE_SCHEME_COHERENT), per_cell(w, STAT, MOE_SCHEME_COHERENT),
                  per_cell(w, DYN, MOE_SCHEME_VANILLA), per_cell(w, STAT, MOE_SCHEME_VANILLA),
                  load_dyn, load_stat, w->copies, bytes);
}

static int write_interval(replay_t *r)
{
    const row_t *c = &r->cur;
    if (r->o->json)
        tb_fmt(r->tb, "%s\n  {\"interval\": %" PRIu64 ", \"first_token\": %" PRIu64 ", "
                      "\"tokens\": %" PRIu64 ", \"refit\": \"%s\", ", c->index ? "," : "",
               c->index, c->first, c->tokens, c->refit);
    else
        tb_fmt(r->tb, "INTERVAL\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%s", c->index, c->first,
               c->tokens, c->refit);
    return write_figures(r, c, c->load[DYN], c->load[STAT]);
}

static int write_header(replay_t *r)
{
    const moe_place_replay_opts_t *o = r->o;
    const moe_trace_hdr_t *h = &r->h;
    const char *tname = o->trace_name ? o->trace_name : r->path;
    char thr[32] = "none", bytes[96] = "unknown (give --ffn, and --hidden and --elem-bytes "
                                       "where the trace lacks them)";
    if (o->threshold > 0)
        snprintf(thr, sizeof thr, "%g", o->threshold);
    uint32_t H = o->hidden ? o->hidden : h->hidden, B = o->elem_bytes ? o->elem_bytes
                                                                       : h->elem_bytes;
    if (r->copy_bytes > 0)
        snprintf(bytes, sizeof bytes, "%.0f bytes (%u x hidden %u x ffn %u x %u bytes, %s)",
                 r->copy_bytes, moe_expert_mats(o->expert), H, o->ffn, B,
                 moe_expert_name(o->expert));
    if (o->json) {
        char cb[32] = "null";
        if (r->copy_bytes > 0)
            snprintf(cb, sizeof cb, "%.0f", r->copy_bytes);
        tb_str(r->tb, "{\"trace\": ");
        tb_json_str(r->tb, tname);
        return tb_fmt(r->tb, ", \"layers\": %u, \"experts\": %u, \"topk\": %u, \"ranks\": %u, "
                             "\"method\": \"%s\", \"scheme\": \"%s\", \"window\": %u, "
                             "\"every\": %" PRIu64 ", \"threshold\": %s, \"copy_bytes\": %s, "
                             "\"intervals\": [", h->layers, h->experts, h->topk, r->G,
                      moe_place_method_name(o->fit.method), moe_scheme_name(o->fit.scheme),
                      r->W, r->every, o->threshold > 0 ? thr : "null", cb);
    }
    tb_fmt(r->tb, "# moe-place replay\n# trace: %s: %u layers x %u experts, top-%u (%u used)\n"
                  "# ranks: %u (%u node%s x %u), method %s, scheme %s (the load's)\n",
           tname, h->layers, h->experts, h->topk, o->topk ? o->topk : h->topk, r->G,
           r->topo.nodes, r->topo.nodes == 1 ? "" : "s", r->topo.gpus_per_node,
           moe_place_method_name(o->fit.method), moe_scheme_name(o->fit.scheme));
    if (o->initial_name)
        tb_fmt(r->tb, "# static: %s, never re-fitted\n", o->initial_name);
    else
        tb_fmt(r->tb, "# static: fitted on the first %u tokens (in-sample for them), never "
                      "re-fitted\n", r->W);
    return tb_fmt(r->tb, "# dynamic: re-fitted every %" PRIu64 " tokens on the last %u before "
                         "it; threshold (worst-layer max/mean load since the last fit): %s\n"
                         "# copy: %s\n#INTERVAL\tinterval\tfirst_token\ttokens\trefit\t"
                         "coherent_dynamic\tcoherent_static\tvanilla_dynamic\tvanilla_static\t"
                         "load_dynamic\tload_static\tcopies\tbytes_moved\n",
                  r->every, r->W, thr, bytes);
}

static int write_summary(replay_t *r)
{
    const row_t *t = &r->sum;
    double n = t->tokens ? (double)t->tokens : 1;
    if (r->o->json)
        tb_fmt(r->tb, "\n],\n\"summary\": {\"tokens\": %" PRIu64 ", \"intervals\": %" PRIu64
                      ", \"refits\": %" PRIu64 ", ", t->tokens, t->index, t->refits);
    else
        tb_fmt(r->tb, "#SUMMARY\ttokens\tintervals\trefits\tcoherent_dynamic\tcoherent_static\t"
                      "vanilla_dynamic\tvanilla_static\tload_dynamic\tload_static\tcopies\t"
                      "bytes_moved\nSUMMARY\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64, t->tokens,
               t->index, t->refits);
    int rc = write_figures(r, t, t->load[DYN] / n, t->load[STAT] / n);
    return rc || !r->o->json ? rc : tb_fmt(r->tb, "}\n");
}

/* ------------------------------------------------------------------ the walk */

/* Read the first window, fit (or take) the first placement, write the header. */
static int replay_start(replay_t *r, const moe_placement_t *initial)
{
    int st = 0;
    moe_trace_rec_t *rec;
    while (r->read < r->W && (st = token_at(r, r->read, &rec)) == 1)
        ;
    if (st < 0)
        return st;
    if (!r->read)
        return util_errf(r->errbuf, r->errlen, MOE_EEMPTY, "'%s': no tokens", r->path);
    r->p[STAT] = initial ? moe_placement_dup(initial) : fit_window(r, 0, &st);
    if (!r->p[STAT])
        return initial ? util_errf(r->errbuf, r->errlen, MOE_ENOMEM, "out of memory") : st;
    r->p[DYN] = r->p[STAT];
    return write_header(r);
}

/* The walk: every token accounted under both placements, intervals opened and closed. */
static int replay_walk(replay_t *r)
{
    uint64_t i = 0, k = 0, start = 0;
    int rc = 0, open = 0;
    moe_trace_rec_t *rec;
    while (!r->tb->err && (rc = token_at(r, i, &rec)) == 1) {
        if (!open && (rc = interval_begin(r, k, i)) != 0)
            return rc;
        open = 1;
        int bad = 0;
        for (int s = 0; s < SIDES && !bad; s++)
            bad = moe_acct_token(r->a[s], rec->ids, rec->weights, rec->token, rec->seq,
                                 rec->rank);
        if (bad)
            return util_errf(r->errbuf, r->errlen, bad, "'%s': token %" PRIu64 ": recorded "
                             "rank %u out of range (%u ranks)", r->path, i, rec->rank, r->G);
        if (++i - start == r->every) {
            interval_end(r);
            write_interval(r);
            tb_flush(r->tb); /* a line per interval as it ends: a long replay shows its way */
            open = 0;
            start = i;
            k++;
        }
    }
    if (rc < 0)
        return rc;
    if (open) {
        interval_end(r);
        write_interval(r);
    }
    return r->tb->err ? r->tb->err : write_summary(r);
}

int moe_place_replay(const char *path, const moe_topo_t *topo, const moe_placement_t *initial,
                     const moe_place_replay_opts_t *o,
                     int (*fn)(void *ctx, const void *buf, size_t len), void *ctx,
                     char *errbuf, size_t errlen)
{
    replay_t r = {.o = o, .path = path, .topo = *topo, .G = moe_topo_ranks(topo),
                  .errbuf = errbuf, .errlen = errlen};
    r.W = o->window ? o->window : DEFAULT_WINDOW;
    r.every = o->every ? o->every : r.W;
    r.top1 = o->topk == 1 || o->fit.method == MOE_PLACE_EXFLOW;
    errbuf[0] = 0;
    int st, rc = 0;
    if (!(r.in = moe_trace_open(path, "r", o->threads, &st, errbuf, errlen)))
        return st;
    if ((rc = moe_trace_read_header(r.in, &r.h)) != 0)
        rc = util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(r.in));
    else if (initial && (initial->layers != r.h.layers || initial->experts != r.h.experts))
        rc = util_errf(errbuf, errlen, MOE_ESHAPE, "the placement is for %u layers x %u "
                       "experts, '%s' has %u x %u", initial->layers, initial->experts, path,
                       r.h.layers, r.h.experts);
    uint32_t H = o->hidden ? o->hidden : r.h.hidden, B = o->elem_bytes ? o->elem_bytes
                                                                        : r.h.elem_bytes;
    r.copy_bytes = (double)moe_expert_mats(o->expert) * H * o->ffn * B;
    r.ring = calloc((size_t)r.W + 1, sizeof *r.ring);
    r.since = calloc((size_t)r.h.layers * r.G + 1, sizeof *r.since);
    r.tb = malloc(sizeof *r.tb);
    if (r.tb)
        tb_init(r.tb, fn, ctx);
    if (!rc && (!r.ring || !r.since || !r.tb))
        rc = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    if (!rc) {
        rc = replay_start(&r, initial);
        rc = rc ? rc : replay_walk(&r);
        int end = rc ? 0 : tb_end(r.tb); /* after a failure, the buffered rest is dropped */
        rc = rc ? rc : end;
    }
    if (rc && r.tb && r.tb->err == rc)
        errbuf[0] = 0; /* the sink's failure: the caller names its output */
    for (int s = 0; s < SIDES; s++)
        moe_acct_free(r.a[s]);
    if (r.p[DYN] != r.p[STAT])
        moe_placement_free(r.p[DYN]);
    moe_placement_free(r.p[STAT]);
    for (uint32_t i = 0; r.ring && i <= r.W; i++)
        moe_trace_rec_release(&r.ring[i]);
    free(r.ring);
    free(r.since);
    free(r.tb);
    moe_trace_hdr_release(&r.h);
    moe_trace_close(r.in, NULL, 0);
    return rc;
}
