/* lib/trace/trace_stats.c -- moe-trace stats: counts, distinct ids, per-layer expert load and
 * skew of a trace's records, and the report of them (text, JSON, SGLang's logical_count, vLLM's
 * EPLB load window). */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/io.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "util_internal.h"
#include "moe/trace_map.h"
#include "util_internal.h"

/* Distinct 32-bit values (sequence ids, steps, ranks): open addressing, grows with the number
 * of distinct values, never with the number of tokens. */
typedef struct u32set {
    uint64_t *slot; /* value, or SET_EMPTY */
    size_t cap, n;
    uint32_t last;  /* fast path: runs of the same value */
    int have_last;
} u32set_t;

#define SET_EMPTY UINT64_MAX

struct moe_trace_stats {
    uint32_t layers, experts, topk, hidden, elem_bytes, flags;
    uint64_t tokens, incomplete, missing;
    uint64_t *load;     /* [layers][experts] */
    uint64_t *present;  /* tokens with the layer present, per layer */
    u32set_t seqs, steps, ranks;
};

/* Insert v; returns 1 if it was new. */
static int u32set_put(uint64_t *slot, size_t cap, uint64_t v)
{
    size_t j = moe_hash64(0, v) & (cap - 1);
    while (slot[j] != SET_EMPTY && slot[j] != v)
        j = (j + 1) & (cap - 1);
    int fresh = slot[j] == SET_EMPTY;
    slot[j] = v;
    return fresh;
}

static int u32set_add(u32set_t *s, uint32_t v)
{
    if (s->have_last && s->last == v)
        return 0;
    s->last = v;
    s->have_last = 1;
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        uint64_t *ns = malloc(cap * sizeof *ns);
        if (!ns)
            return -1;
        memset(ns, 0xff, cap * sizeof *ns);
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i] != SET_EMPTY)
                u32set_put(ns, cap, s->slot[i]);
        free(s->slot);
        s->slot = ns;
        s->cap = cap;
    }
    s->n += (size_t)u32set_put(s->slot, s->cap, v);
    return 0;
}

moe_trace_stats_t *moe_trace_stats_new(const moe_trace_hdr_t *h)
{
    moe_trace_stats_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->layers = h->layers, s->experts = h->experts, s->topk = h->topk;
    s->hidden = h->hidden, s->elem_bytes = h->elem_bytes, s->flags = h->flags;
    s->present = calloc(h->layers, sizeof *s->present);
    if (!s->present) {
        moe_trace_stats_free(s);
        return NULL;
    }
    return s;
}

void moe_trace_stats_free(moe_trace_stats_t *s)
{
    if (!s)
        return;
    free(s->load);
    free(s->present);
    free(s->seqs.slot);
    free(s->steps.slot);
    free(s->ranks.slot);
    free(s);
}

/* The per-token part of a count: a token with `miss` missing cells, and its ids. */
static int stats_token(moe_trace_stats_t *s, unsigned miss, uint32_t seq, uint32_t step,
                       uint32_t rank)
{
    s->tokens++;
    s->missing += miss;
    s->incomplete += miss != 0;
    if (u32set_add(&s->seqs, seq) || u32set_add(&s->steps, step) || u32set_add(&s->ranks, rank))
        return MOE_ENOMEM;
    return 0;
}

/* The L x E loads, made with the first record: a header alone, which may declare 4096 layers
 * of 65535 experts, reserves nothing (tests/cli/input_bounds.sh). 0 or MOE_ENOMEM. */
static int need_loads(moe_trace_stats_t *s)
{
    if (!s->load && !(s->load = calloc((size_t)s->layers * s->experts + 1, sizeof *s->load)))
        return MOE_ENOMEM;
    return 0;
}

/* Expert e's load in layer l (0 before any record). */
static uint64_t load_at(const moe_trace_stats_t *s, uint32_t l, uint32_t e)
{
    return s->load ? s->load[(size_t)l * s->experts + e] : 0;
}

/* Count one record given as its ids (L * K, layer-major) and its sequence, step and rank. */
static int stats_count(moe_trace_stats_t *s, const uint16_t *ids, uint32_t seq, uint32_t step,
                       uint32_t rank)
{
    const uint32_t L = s->layers, E = s->experts, K = s->topk;
    unsigned miss = 0;
    if (need_loads(s))
        return MOE_ENOMEM;
    for (uint32_t l = 0; l < L; l++) {
        const uint16_t *id = ids + (size_t)l * K;
        if (id[0] == MOE_EXPERT_NONE) {
            miss++;
            continue;
        }
        uint64_t *ld = s->load + (size_t)l * E;
        for (uint32_t k = 0; k < K; k++)
            ld[id[k]]++;
        s->present[l]++;
    }
    return stats_token(s, miss, seq, step, rank);
}

/* stats_count for ids as the binary codec stores them, `width` bytes each (1: 0xff marks a
 * missing cell; 2: little endian, 0xffff), already validated by the map. Counting from these
 * skips the widened copy, which keeps a block's working set within a core's cache. */
static int stats_count_raw(moe_trace_stats_t *s, const uint8_t *raw, unsigned width, uint32_t seq,
                           uint32_t step, uint32_t rank)
{
    const uint32_t L = s->layers, E = s->experts, K = s->topk;
    unsigned miss = 0;
    if (need_loads(s))
        return MOE_ENOMEM;
    for (uint32_t l = 0; l < L; l++) {
        uint64_t *ld = s->load + (size_t)l * E;
        if (width == 1) {
            const uint8_t *id = raw + (size_t)l * K;
            if (id[0] == 0xff) {
                miss++;
                continue;
            }
            for (uint32_t k = 0; k < K; k++)
                ld[id[k]]++;
        } else {
            const uint8_t *id = raw + (size_t)l * K * 2;
            if (id[0] == 0xff && id[1] == 0xff) {
                miss++;
                continue;
            }
            for (uint32_t k = 0; k < K; k++)
                ld[id[2 * k] | (unsigned)id[2 * k + 1] << 8]++;
        }
        s->present[l]++;
    }
    return stats_token(s, miss, seq, step, rank);
}

int moe_trace_stats_add(moe_trace_stats_t *s, const moe_trace_rec_t *r)
{
    return stats_count(s, r->ids, r->seq, r->step, r->rank);
}

/* Add set b's values to a. */
static int u32set_union(u32set_t *a, const u32set_t *b)
{
    for (size_t i = 0; i < b->cap; i++)
        if (b->slot[i] != SET_EMPTY && u32set_add(a, (uint32_t)b->slot[i]))
            return -1;
    return 0;
}

/* Add the counts of b (same shape) to a. */
static int stats_merge(moe_trace_stats_t *a, const moe_trace_stats_t *b)
{
    if (b->load && need_loads(a))
        return MOE_ENOMEM;
    for (size_t i = 0; b->load && i < (size_t)a->layers * a->experts; i++)
        a->load[i] += b->load[i];
    for (uint32_t l = 0; l < a->layers; l++)
        a->present[l] += b->present[l];
    a->tokens += b->tokens;
    a->missing += b->missing;
    a->incomplete += b->incomplete;
    if (u32set_union(&a->seqs, &b->seqs) || u32set_union(&a->steps, &b->steps) ||
        u32set_union(&a->ranks, &b->ranks))
        return MOE_ENOMEM;
    return 0;
}

/* A scan's state: one set of counts per worker of the map. */
typedef struct stats_scan {
    moe_trace_map_t *m;
    moe_trace_stats_t **w;
    void (*progress)(void *, uint64_t, uint64_t);
    void *arg;
} stats_scan_t;

static int scan_batch(void *arg, int worker, moe_trace_batch_t *b)
{
    stats_scan_t *sc = arg;
    moe_trace_stats_t *s = sc->w[worker];
    const size_t cells = (size_t)s->layers * s->topk;
    for (size_t i = 0; i < b->n; i++) {
        int rc = b->raw ? stats_count_raw(s, b->raw + i * b->raw_stride, b->raw_width, b->seq[i],
                                          b->step[i], b->rank[i])
                        : stats_count(s, b->ids + i * cells, b->seq[i], b->step[i], b->rank[i]);
        if (rc)
            return moe_trace_map_fail(sc->m, MOE_ENOMEM, "out of memory");
    }
    return 0;
}

static void scan_progress(void *arg, uint64_t done, uint64_t total)
{
    stats_scan_t *sc = arg;
    sc->progress(sc->arg, done, total);
}

int moe_trace_stats_scan(moe_trace_stats_t *s, moe_trace_map_t *m,
                         void (*progress)(void *arg, uint64_t done, uint64_t total), void *arg)
{
    const int nw = moe_trace_map_workers(m);
    const moe_trace_hdr_t *h = moe_trace_map_header(m);
    stats_scan_t sc = {m, calloc((size_t)nw, sizeof *sc.w), progress, arg};
    int rc = sc.w ? 0 : MOE_ENOMEM;
    if (sc.w)
        sc.w[0] = s;
    for (int i = 1; i < nw && !rc; i++)
        if (!(sc.w[i] = moe_trace_stats_new(h)))
            rc = MOE_ENOMEM;
    if (rc)
        rc = moe_trace_map_fail(m, rc, "out of memory");
    else {
        moe_trace_map_ops_t ops = {.batch = scan_batch, .progress = progress ? scan_progress : NULL,
                                   .raw_ids = 1,
                                   .fields = MOE_MAP_SEQ | MOE_MAP_STEP | MOE_MAP_RANK};
        rc = moe_trace_map_run(m, &ops, &sc);
    }
    /* Merge in worker order: the sets' contents do not depend on it, the counts are sums. */
    for (int i = 1; i < nw && sc.w; i++) {
        if (!rc && sc.w[i] && stats_merge(s, sc.w[i]))
            rc = moe_trace_map_fail(m, MOE_ENOMEM, "out of memory");
        moe_trace_stats_free(sc.w[i]);
    }
    free(sc.w);
    return rc;
}

#define P(...) UTIL_TRY_PRINTF(t, __VA_ARGS__)

/* One "load LAYER n n ..." line, written in pieces of at most a few KiB. */
static int load_line(struct moe_textout *t, const moe_trace_stats_t *s, uint32_t l)
{
    char buf[4096];
    size_t n = (size_t)snprintf(buf, sizeof buf, "load %u", l);
    for (uint32_t e = 0; e <= s->experts; e++) {
        if (e == s->experts || n > sizeof buf - 32) {
            int st = moe_textout_write(t, buf, n);
            if (st)
                return st;
            n = 0;
        }
        if (e < s->experts)
            n += (size_t)snprintf(buf + n, sizeof buf - n, " %llu",
                                  (unsigned long long)load_at(s, l, e));
    }
    return moe_textout_write(t, "\n", 1);
}

/* One layer's load figures, as the report prints them. */
typedef struct layer_fig {
    uint64_t min, max;
    double mean, cv;
    uint32_t hot; /* the first expert with the largest load */
} layer_fig_t;

static layer_fig_t layer_fig(const moe_trace_stats_t *s, uint32_t l)
{
    const uint32_t E = s->experts;
    layer_fig_t f = {UINT64_MAX, 0, 0, 0, 0};
    uint64_t sum = 0;
    for (uint32_t e = 0; e < E; e++) {
        uint64_t v = load_at(s, l, e);
        f.min = v < f.min ? v : f.min;
        if (v > f.max) {
            f.max = v;
            f.hot = e;
        }
        sum += v;
    }
    double var = 0;
    f.mean = (double)sum / E;
    for (uint32_t e = 0; e < E; e++)
        var += ((double)load_at(s, l, e) - f.mean) * ((double)load_at(s, l, e) - f.mean);
    f.cv = f.mean > 0 ? sqrt(var / E) / f.mean : 0;
    return f;
}

int moe_trace_stats_write(const moe_trace_stats_t *s, int loads, struct moe_textout *t)
{
    const uint32_t L = s->layers, E = s->experts;
    P("tokens %llu\nsequences %zu\nlayers %u\nexperts %u\ntopk %u\n",
      (unsigned long long)s->tokens, s->seqs.n, L, E, s->topk);
    P("steps %zu\nsource_ranks %zu\nweights %s\nhidden %u\nelem_bytes %u\n", s->steps.n,
      s->ranks.n, (s->flags & MOE_TRACE_WEIGHTS) ? "yes" : "no", s->hidden, s->elem_bytes);
    P("missing_cells %llu\nincomplete_tokens %llu\n", (unsigned long long)s->missing,
      (unsigned long long)s->incomplete);
    P("# per-layer expert load: tokens routed to each expert (top-k counts each)\n"
      "# %5s %10s %9s %9s %9s %11s %8s %7s %7s\n",
      "layer", "tokens", "missing", "min", "max", "mean", "max/mean", "cv", "hottest");
    for (uint32_t l = 0; l < L; l++) {
        layer_fig_t f = layer_fig(s, l);
        P("layer %5u %10llu %9llu %9llu %9llu %11.2f %8.3f %7.3f %7u\n", l,
          (unsigned long long)s->present[l], (unsigned long long)(s->tokens - s->present[l]),
          (unsigned long long)f.min, (unsigned long long)f.max, f.mean,
          f.mean > 0 ? f.max / f.mean : 0, f.cv, f.hot);
    }
    for (uint32_t l = 0; loads && l < L; l++) {
        int st = load_line(t, s, l);
        if (st)
            return st;
    }
    return 0;
}

/* Layer l's loads as a JSON list. */
static int json_loads(const moe_trace_stats_t *s, uint32_t l, struct moe_textout *t)
{
    for (uint32_t e = 0; e < s->experts; e++)
        P("%s%llu", e ? "," : "[", (unsigned long long)load_at(s, l, e));
    P("]");
    return 0;
}

/* The report's figures as one JSON object, keys named as the text report's (numbers with six
 * significant digits, as moe-place eval --json writes them; every one is finite). */
static int stats_json(const moe_trace_stats_t *s, int loads, struct moe_textout *t)
{
    P("{\"tokens\": %llu, \"sequences\": %zu, \"layers\": %u, \"experts\": %u, "
      "\"topk\": %u, \"steps\": %zu, \"source_ranks\": %zu, \"weights\": %s, "
      "\"hidden\": %u, \"elem_bytes\": %u, \"missing_cells\": %llu, "
      "\"incomplete_tokens\": %llu,\n \"per_layer\": [", (unsigned long long)s->tokens,
      s->seqs.n, s->layers, s->experts, s->topk, s->steps.n, s->ranks.n,
      (s->flags & MOE_TRACE_WEIGHTS) ? "true" : "false", s->hidden, s->elem_bytes,
      (unsigned long long)s->missing, (unsigned long long)s->incomplete);
    for (uint32_t l = 0; l < s->layers; l++) {
        layer_fig_t f = layer_fig(s, l);
        P("%s\n  {\"layer\": %u, \"tokens\": %llu, \"missing\": %llu, \"min\": %llu, "
          "\"max\": %llu, \"mean\": %.6g, \"max_mean\": %.6g, \"cv\": %.6g, "
          "\"hottest\": %u", l ? "," : "", l, (unsigned long long)s->present[l],
          (unsigned long long)(s->tokens - s->present[l]), (unsigned long long)f.min,
          (unsigned long long)f.max, f.mean, f.mean > 0 ? f.max / f.mean : 0, f.cv, f.hot);
        if (loads) {
            P(", \"loads\": ");
            int st = json_loads(s, l, t);
            if (st)
                return st;
        }
        P("}");
    }
    P("]}\n");
    return 0;
}

/* SGLang's logical_count (see moe/trace.h): its stat-mode recorder dumps (steps, layers,
 * experts) and its init_by_eplb sums over the steps, so one step carries the whole trace. One
 * row per model layer of m (the trace's layers when m is NULL or unknown), zero for those the
 * trace does not hold. */
static int stats_sglang(const moe_trace_stats_t *s, const moe_layer_map_t *m,
                        struct moe_textout *t)
{
    uint32_t rows = m && m->model_layers ? m->model_layers : s->layers;
    P("{\"logical_count\":[[\n");
    for (uint32_t r = 0, l = 0; r < rows; r++) {
        if (l < s->layers && (!m || !m->id || m->id[l] == r)) {
            int st = json_loads(s, l++, t);
            if (st)
                return st;
        } else {
            for (uint32_t e = 0; e < s->experts; e++)
                P("%s0", e ? "," : "[");
            P("]");
        }
        P("%s\n", r + 1 < rows ? "," : "");
    }
    P("]]}\n");
    return 0;
}

int moe_trace_stats_write_sglang(const moe_trace_stats_t *s, const moe_trace_hdr_t *h,
                                 uint32_t model_layers, int64_t first, const char *list,
                                 struct moe_textout *t, char *err, size_t errlen)
{
    moe_layer_map_t m;
    int rc = moe_layer_map_read(h->text, s->layers, &m, err, errlen);
    if (!rc && (model_layers || first >= 0 || list))
        rc = moe_layer_map_set(&m, model_layers, first, list, err, errlen);
    if (!rc && m.id && !m.model_layers)
        rc = util_errf(err, errlen, MOE_EINVAL, "the trace records its model layers but not "
                       "how many the model has; SGLang's logical_count has a row for every "
                       "model layer (give --model-layers)");
    if (!rc)
        rc = stats_sglang(s, &m, t);
    else if (rc != MOE_ENOMEM)
        rc = MOE_EINVAL;
    moe_layer_map_release(&m);
    return rc;
}

int moe_trace_stats_write_as(const moe_trace_stats_t *s, int form, int loads,
                             struct moe_textout *t)
{
    switch (form) {
    case MOE_STATS_TEXT: return moe_trace_stats_write(s, loads, t);
    case MOE_STATS_JSON: return stats_json(s, loads, t);
    case MOE_STATS_SGLANG: return stats_sglang(s, NULL, t);
    }
    return MOE_EINVAL;
}

size_t moe_trace_stats_sequences(const moe_trace_stats_t *s)
{
    return s->seqs.n;
}

size_t moe_trace_stats_seq_ids(const moe_trace_stats_t *s, uint32_t *ids)
{
    size_t m = 0;
    for (size_t i = 0; i < s->seqs.cap; i++)
        if (s->seqs.slot[i] != SET_EMPTY)
            ids[m++] = (uint32_t)s->seqs.slot[i];
    return m;
}

/* ------------------------------------------------------------------ vLLM's load window */

/* Little-endian bytes of v. */
static void le64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

int moe_trace_load_window(moe_trace_t *in, uint64_t window,
                          int (*fn)(void *ctx, const void *buf, size_t len), void *ctx,
                          char *errbuf, size_t errlen)
{
    moe_trace_hdr_t h;
    moe_trace_rec_t r = {0};
    uint64_t *c = NULL, W = 0, tok = 0;
    size_t cap = 0;
    moe_trace_hdr_init(&h);
    int st = moe_trace_read_header(in, &h);
    if (st < 0)
        return util_errf(errbuf, errlen, st, "%s", moe_trace_errmsg(in));
    const size_t LE = (size_t)h.layers * h.experts;
    while ((st = moe_trace_read(in, &r)) == 1) {
        if (W == 0 || (window && tok == W * window)) { /* a new window starts */
            if (util_grow((void **)&c, &cap, (W + 1) * LE, sizeof *c) < 0) {
                st = MOE_ENOMEM;
                break;
            }
            memset(c + W * LE, 0, LE * sizeof *c);
            W++;
        }
        uint64_t *w = c + (W - 1) * LE;
        for (uint32_t l = 0; l < h.layers; l++) /* as stats_count: missing cells not counted */
            for (uint32_t k = 0; k < h.topk && r.ids[l * h.topk] != MOE_EXPERT_NONE; k++)
                w[(size_t)l * h.experts + r.ids[l * h.topk + k]]++;
        tok++;
    }
    if (st == 0 && W == 0)
        st = util_errf(errbuf, errlen, MOE_EEMPTY, "no tokens in the trace");
    else if (st < 0)
        util_errf(errbuf, errlen, st, "%s", st == MOE_ENOMEM ? "out of memory"
                                                             : moe_trace_errmsg(in));
    if (st == 0) {
        /* safetensors (huggingface/safetensors, "Format"): 8-byte header length, the JSON
         * header padded with spaces to a multiple of 8, then the tensor's bytes. */
        char json[160];
        uint8_t b[8];
        int n = snprintf(json, sizeof json, "{\"expert_load_window\":{\"dtype\":\"I64\","
                         "\"shape\":[%llu,%u,%u],\"data_offsets\":[0,%llu]}}",
                         (unsigned long long)W, h.layers, h.experts,
                         (unsigned long long)(W * LE * 8));
        while (n % 8)
            json[n++] = ' ';
        le64(b, (uint64_t)n);
        st = fn(ctx, b, 8);
        st = st ? st : fn(ctx, json, (size_t)n);
        for (size_t i = 0; st == 0 && i < W * LE; i++) {
            le64(b, c[i]);
            st = fn(ctx, b, 8);
        }
    }
    free(c);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
    return st;
}
