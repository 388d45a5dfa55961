/* affinity/affinity.c -- inter-layer expert affinity: the streaming scan over a trace map (real
 * counts, the windowed shuffle baseline, convergence bands, step windows) and the statistics. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affinity_internal.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "rng_internal.h"
#include "util_internal.h"

#define CHUNK 2048u           /* shuffled records counted per task */
#define MAX_STEP_LOCALS 4     /* by-step: windows a worker keeps counters for at once */
/* Bound on the count tables: a table header (or a trace shape) asking for more is refused up
 * front, before any allocation, so a small hostile table cannot claim gigabytes. */
#define MAX_TABLE_BYTES (UINT64_C(1) << 30)

void moe_affinity_opts_default(moe_affinity_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->hops = 1;
    o->coact = 1;
    o->shuffle = 1;
    o->seed = 1;
    o->window = 8192;
}

/* ------------------------------------------------------------------ object */


moe_affinity_t *aff_alloc(const moe_trace_hdr_t *h, const moe_affinity_opts_t *o, int *status,
                          char *errbuf, size_t errlen)
{
    int dummy;
    status = status ? status : &dummy;
    uint32_t L = h->layers, E = h->experts, hops = o->hops;
    if (moe_trace_hdr_check(h)) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "invalid trace shape");
        return NULL;
    }
    if (L == 1)
        hops = 0; /* one layer: loads and co-activation only */
    else if (hops < 1 || hops > L - 1 || hops > MOE_AFF_MAX_HOPS) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "--hops %u out of range for %u layers "
                          "(1 to %u)", o->hops, L,
                          L - 1 < MOE_AFF_MAX_HOPS ? L - 1 : MOE_AFF_MAX_HOPS);
        return NULL;
    }
    uint64_t npairs = 0;
    for (uint32_t d = 1; d <= hops; d++)
        npairs += L - d;
    uint64_t groups = o->bands ? (uint64_t)o->bands + 1 : 1;
    uint64_t bytes = (npairs * E * E * 8) * (groups + (o->shuffle != 0)) +
                     (o->coact ? (uint64_t)L * E * E * 8 : 0);
    if (bytes > MAX_TABLE_BYTES) {
        *status = util_errf(errbuf, errlen, MOE_ENOMEM, "affinity tables for %u layers, %u "
                          "experts and %llu pairs need %.1f GiB (limit 1 GiB)", L, E,
                          (unsigned long long)npairs, (double)bytes / (1u << 30));
        return NULL;
    }
    moe_affinity_t *a = calloc(1, sizeof *a);
    int rc = a ? 0 : MOE_ENOMEM;
    if (!rc) {
        a->o = *o;
        a->o.hops = hops;
        moe_trace_hdr_init(&a->hdr);
        rc = moe_trace_hdr_copy(&a->hdr, h);
    }
    if (!rc)
        rc = aff_shape_init(&a->s, L, E, h->topk, hops, o->top1, o->coact);
    if (!rc && !o->step_window && !o->bands)
        rc = aff_tot_init(&a->real, &a->s, o->coact);
    if (!rc && o->shuffle && !o->step_window && !o->bands)
        rc = aff_tot_init(&a->shuf, &a->s, 0);
    if (rc) {
        moe_affinity_free(a);
        *status = util_errf(errbuf, errlen, rc, "out of memory");
        return NULL;
    }
    return a;
}

moe_affinity_t *moe_affinity_new(const moe_trace_hdr_t *h, const moe_affinity_opts_t *o,
                                 int *status, char *errbuf, size_t errlen)
{
    moe_affinity_opts_t oo = *o;
    if (oo.step_window || oo.bands) { /* these modes count transitions and loads only */
        oo.shuffle = 0;
        oo.coact = 0;
    }
    if (oo.window == 0)
        oo.window = 8192;
    if (oo.keep && (oo.shuffle || oo.step_window || oo.bands)) {
        if (status)
            *status = MOE_EINVAL;
        util_errf(errbuf, errlen, MOE_EINVAL, "a token filter counts without the shuffle, "
                  "by-step or convergence modes");
        return NULL;
    }
    if (!aff_kernel(oo.kernel)) {
        if (status)
            *status = MOE_EINVAL;
        util_errf(errbuf, errlen, MOE_EINVAL, "counting kernel %d is not available on this CPU",
                oo.kernel);
        return NULL;
    }
    return aff_alloc(h, &oo, status, errbuf, errlen);
}

moe_affinity_t *moe_affinity_from_loads(uint32_t layers, uint32_t experts, const uint64_t *load,
                                        int *status, char *errbuf, size_t errlen)
{
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = layers;
    h.experts = experts;
    h.topk = 1;
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.coact = 0;
    o.shuffle = 0;
    moe_affinity_t *a = aff_alloc(&h, &o, status, errbuf, errlen);
    if (!a)
        return NULL;
    /* tokens: the largest layer's total, so that a fit sees a non-empty input */
    for (uint32_t l = 0; l < layers; l++) {
        uint64_t sum = 0;
        for (uint32_t e = 0; e < experts; e++)
            sum += a->real.setload[(size_t)l * experts + e] = load[(size_t)l * experts + e];
        a->real.tokens = sum > a->real.tokens ? sum : a->real.tokens;
    }
    return a;
}

int moe_affinity_set_source(moe_affinity_t *a, const char *name)
{
    char *s = strdup(name);
    if (!s)
        return MOE_ENOMEM;
    free(a->source);
    a->source = s;
    return 0;
}

const char *moe_affinity_kernel_name(const moe_affinity_t *a)
{
    const aff_kern_t *k = aff_kernel(a->o.kernel);
    return !a->s.mask ? "list" : k ? k->name : "unavailable";
}

void moe_affinity_free(moe_affinity_t *a)
{
    if (!a)
        return;
    aff_tot_release(&a->real);
    aff_tot_release(&a->shuf);
    for (size_t i = 0; i < a->ngroups; i++)
        aff_tot_release(&a->groups[i]);
    free(a->groups);
    aff_shape_release(&a->s);
    moe_trace_hdr_release(&a->hdr);
    free(a->source);
    free(a);
}

/* ------------------------------------------------------------------ scan machinery */

/*
 * How a scan runs on the trace map's workers.
 *
 * Table mode with the shuffle: the batch callback turns records into sets (masks, or id
 * lists for E > 64), left in the batch scratch, and counts what needs no other token: loads,
 * missing cells, the trace's exclusions (and, on the list path, the trace's transitions). The
 * ordered callback appends the sets to the shuffle window being filled (file order). A full
 * window becomes one task per layer j, which any worker takes between batches (and all
 * workers at the end):
 *   partners: P(d, j) = sigma_j(sigma_j+1(... sigma_j+d-1(S_j+d))) for d = 1..hops, where
 *     sigma_i is a uniform random permutation of the window seeded by (seed, window, i) and
 *     sigma(X) is the cells of X permuted by sigma;
 *   counting: the trace's co-activation and transitions of layer j and the shuffle's
 *     transitions (set of layer j with its partners), in one pass over layer j's set bits.
 * P(d, j)[t] is the layer j+d cell of shuffled token t, the shuffled trace being layer 0 in
 * place and layer i permuted by sigma_i-1 ... sigma_0: each layer independently uniformly
 * permuted, because a product with an independent uniform permutation is uniform. The
 * partners of a task are built in the worker's own buffers, so they are still in cache when
 * counted. Small counters overflow per matrix, so each layer's matrices keep their own count
 * of tokens since their last flush.
 *
 * Otherwise (no shuffle, convergence bands, step windows) batches are counted directly.
 */

typedef struct aff_win {
    uint8_t *cells;        /* [L][window] set cells (cs bytes: a mask, or a list of ids) */
    uint64_t *full;        /* mask path, top1 with co-activation: [L][window] full cells */
    uint32_t n;            /* records in it */
    int missing;           /* some cell of it is missing */
    uint64_t index;        /* window number (seeds its permutations) */
    uint32_t ntasks, next_task, done_tasks; /* one task per layer */
    struct aff_win *next;
} aff_win_t;

typedef struct aff_worker {
    aff_loc_t real, shuf;
    aff_loc_t *groups;     /* convergence bands [bands + 1] or step windows (a few) */
    size_t ngroups;
    uint64_t tick;         /* by-step: LRU clock */
    uint64_t *lru;
    aff_scr_t scr;         /* list path: the token being counted */
    uint64_t *full, *set;  /* mask path without windows: masks of a batch, [L][n] */
    size_t mcap;           /* records the mask buffers hold */
    void *tiles;           /* vector kernels: u8 tiles, (1 + 2 hops) * AFF_TILE_BYTES */
    uint8_t *part;         /* window tasks: partners [hops][window] cells, then one spare */
    int ready;             /* initialised (by its own thread, on its first callback) */
} aff_worker_t;

typedef struct aff_scan {
    moe_affinity_t *a;
    moe_trace_map_t *m;
    const aff_kern_t *kern;
    int nw;
    aff_worker_t *w;
    pthread_mutex_t mu;    /* totals, windows, groups */
    int windows;           /* the shuffle runs on windows */
    int real_in_windows;   /* ... and so does the real count (mask path) */
    int need_full;         /* mask path, top1 with co-activation: full cells too */
    size_t cs;             /* cell bytes */
    aff_win_t *fill, *ready, *free_wins; /* ready: windows with tasks left, in order */
    int nready;            /* windows in `ready` (read without the lock: atomic) */
    aff_win_t **wins;      /* every window allocated, for freeing */
    int nwins, max_wins;
    uint64_t win_index;
    aff_tot_t **steps;     /* by-step: totals per window of steps, sorted by key */
    size_t nsteps, steps_cap;
    uint64_t bytes;        /* memory of the step totals so far */
    uint32_t *runs;        /* convergence: sequence runs per band */
    uint32_t last_seq;
    int have_last;
    void (*progress)(void *, uint64_t, uint64_t);
    void *pctx;
} aff_scan_t;

/* Uniform integer in [0, n) for n < 2^32 (Lemire's multiply-and-reject on 32-bit halves):
 * each 64-bit output serves two draws. */
typedef struct rng32 {
    moe_rng_t r;
    uint64_t word;
    int half; /* a second 32-bit half is left in word */
} rng32_t;

static inline uint32_t rng_u32(rng32_t *g)
{
    if (g->half) {
        g->half = 0;
        return (uint32_t)(g->word >> 32);
    }
    g->word = rng_next_inline(&g->r);
    g->half = 1;
    return (uint32_t)g->word;
}

static inline uint32_t rng_below32(rng32_t *g, uint32_t n)
{
    uint64_t x = (uint64_t)rng_u32(g) * n;
    uint32_t lo = (uint32_t)x;
    if (lo < n) {
        uint32_t threshold = (0u - n) % n;
        while (lo < threshold) {
            x = (uint64_t)rng_u32(g) * n;
            lo = (uint32_t)x;
        }
    }
    return (uint32_t)(x >> 32);
}

static void lock(aff_scan_t *sc)
{
    if (sc->nw > 1)
        pthread_mutex_lock(&sc->mu);
}

static void unlock(aff_scan_t *sc)
{
    if (sc->nw > 1)
        pthread_mutex_unlock(&sc->mu);
}

static void flush_locked(aff_scan_t *sc, aff_loc_t *lc)
{
    lock(sc);
    aff_loc_flush(&sc->a->s, lc);
    unlock(sc);
}

/* ------------------------------------------------------------------ sets of records */

/* Bit i: expert masks by table lookup (a variable shift costs three uops on x86). */
static const uint64_t bit64[64] = {
#define B4(i) UINT64_C(1) << (i), UINT64_C(1) << ((i) + 1), UINT64_C(1) << ((i) + 2), \
              UINT64_C(1) << ((i) + 3)
    B4(0), B4(4), B4(8), B4(12), B4(16), B4(20), B4(24), B4(28),
    B4(32), B4(36), B4(40), B4(44), B4(48), B4(52), B4(56), B4(60),
#undef B4
};

/* The expert set of one cell as a 64-bit mask, from decoded (uint16_t) or raw stored (uint8_t)
 * ids: independent lookups combined as a tree for the common top-k. One body, two types. */
#define DEFINE_CELL_MASK(name, T)                                                             \
    static inline uint64_t name(const T *c, uint32_t K)                                       \
    {                                                                                         \
        switch (K) {                                                                          \
        case 1: return bit64[c[0]];                                                           \
        case 2: return bit64[c[0]] | bit64[c[1]];                                             \
        case 4: return (bit64[c[0]] | bit64[c[1]]) | (bit64[c[2]] | bit64[c[3]]);             \
        case 6:                                                                               \
            return (bit64[c[0]] | bit64[c[1]]) | (bit64[c[2]] | bit64[c[3]]) |                \
                   (bit64[c[4]] | bit64[c[5]]);                                               \
        case 8:                                                                               \
            return ((bit64[c[0]] | bit64[c[1]]) | (bit64[c[2]] | bit64[c[3]])) |              \
                   ((bit64[c[4]] | bit64[c[5]]) | (bit64[c[6]] | bit64[c[7]]));               \
        default: {                                                                            \
            uint64_t m = 0;                                                                   \
            for (uint32_t k = 0; k < K; k++)                                                  \
                m |= bit64[c[k]];                                                             \
            return m;                                                                         \
        }                                                                                     \
        }                                                                                     \
    }
DEFINE_CELL_MASK(cell_mask, uint16_t)
DEFINE_CELL_MASK(raw_mask, uint8_t)

/* batch_masks (below) with the ids read from the stored bytes (raw: E <= 64, one byte per id,
 * 0xff = missing) or from the decoded ids. Inline with a constant `raw` at each call, so the
 * compiler can keep the two loops apart. */
static inline int masks_of(const aff_shape_t *s, const moe_trace_batch_t *b, uint64_t *full,
                           uint64_t *set, const int raw)
{
    uint64_t missing = 0;
    const uint32_t L = s->L, K = s->K;
    const size_t n = b->n;
    for (size_t r = 0; r < n; r++) {
        const uint8_t *r8 = raw ? b->raw + r * b->raw_stride : NULL;
        const uint16_t *r16 = raw ? NULL : b->ids + r * (size_t)L * K;
        const float *wt = b->weights ? b->weights + r * (size_t)L * K : NULL;
        for (uint32_t j = 0; j < L; j++) {
            const size_t c = (size_t)j * K; /* the cell's first id */
            uint64_t m = raw ? (r8[c] != 0xff ? raw_mask(r8 + c, K) : 0)
                             : (r16[c] != MOE_EXPERT_NONE ? cell_mask(r16 + c, K) : 0);
            missing |= m == 0;
            full[j * n + r] = m;
            if (s->top1) {
                uint32_t top = 0;
                for (uint32_t k = 1; wt && k < K; k++)
                    top = wt[c + k] > wt[c + top] ? k : top;
                set[j * n + r] = m ? bit64[raw ? r8[c + top] : r16[c + top]] : 0;
            }
        }
    }
    return missing != 0;
}

/* Masks of the records of batch b, layer-major: full[j * n + r] (the top-k cell) and, with
 * top1, set[j * n + r] (the top-1 expert). Mask path. Returns whether some cell of the batch is
 * missing. */
static int batch_masks(const aff_shape_t *s, const moe_trace_batch_t *b, uint64_t *full,
                       uint64_t *set)
{
    if (b->raw && b->raw_width == 1 && !s->top1) {
        int rc = aff_masks_fast(b->raw, b->raw_stride, b->n, s->L, s->K, full);
        if (rc >= 0)
            return rc;
    }
    if (b->raw && b->raw_width == 1)
        return masks_of(s, b, full, set, 1);
    return masks_of(s, b, full, set, 0);
}

/* Sets of record r of batch b into w->scr (list path). */
static void record_lists(const aff_shape_t *s, aff_worker_t *w, const moe_trace_batch_t *b,
                         size_t r)
{
    const uint32_t L = s->L, K = s->K;
    const uint16_t *ids = b->ids + r * (size_t)L * K;
    const float *wt = b->weights ? b->weights + r * (size_t)L * K : NULL;
    aff_scr_t *x = &w->scr;
    for (uint32_t j = 0; j < L; j++, ids += K) {
        uint32_t top = 0;
        if (s->top1 && wt)
            for (uint32_t k = 1; k < K; k++)
                top = wt[(size_t)j * K + k] > wt[(size_t)j * K + top] ? k : top;
        uint16_t *f = x->full + (size_t)j * K, *st = x->set + (size_t)j * s->S;
        uint32_t nf = 0;
        if (ids[0] != MOE_EXPERT_NONE) {
            x->stamp_now++;
            if (x->stamp_now == 0) { /* wrapped: forget old stamps */
                memset(x->stamp, 0, s->E * sizeof *x->stamp);
                x->stamp_now = 1;
            }
            for (uint32_t k = 0; k < K; k++)
                if (x->stamp[ids[k]] != x->stamp_now) {
                    x->stamp[ids[k]] = x->stamp_now;
                    f[nf++] = ids[k];
                }
        }
        x->nfull[j] = nf;
        if (s->top1) {
            x->nset[j] = nf ? 1 : 0;
            st[0] = nf ? ids[top] : MOE_EXPERT_NONE;
        } else {
            memcpy(st, f, nf * sizeof *f);
            x->nset[j] = nf;
        }
    }
}

/* Store the sets in w->scr of record r as cells in the batch scratch (list path). */
static void record_cells(const aff_scan_t *sc, const aff_worker_t *w, moe_trace_batch_t *b,
                         size_t r)
{
    const aff_shape_t *s = &sc->a->s;
    for (uint32_t j = 0; j < s->L; j++) {
        uint16_t cell[MOE_TRACE_MAX_TOPK];
        for (uint32_t k = 0; k < s->S; k++)
            cell[k] = k < w->scr.nset[j] ? w->scr.set[(size_t)j * s->S + k] : MOE_EXPERT_NONE;
        memcpy(b->scratch + ((size_t)j * b->n + r) * sc->cs, cell, sc->cs);
    }
}

/* Number of ids in a list-path cell. */
static uint32_t cell_len(const uint16_t *c, uint32_t S)
{
    uint32_t n = 0;
    while (n < S && c[n] != MOE_EXPERT_NONE)
        n++;
    return n;
}

/* ------------------------------------------------------------------ counting */

/* Count n tokens into lc in pieces that keep its small counters from overflowing. */
static void count_masks(aff_scan_t *sc, aff_worker_t *w, aff_loc_t *lc, const uint64_t *full,
                        const uint64_t *set, size_t stride, size_t n)
{
    for (size_t t0 = 0; t0 < n;) {
        if (lc->pending == lc->limit)
            flush_locked(sc, lc);
        size_t k = lc->limit - lc->pending;
        k = k < n - t0 ? k : n - t0;
        aff_count_batch(&sc->a->s, sc->kern, lc, w->tiles, full + t0, set + t0, stride, k);
        lc->pending += (uint32_t)k;
        lc->tokens += k;
        t0 += k;
    }
}

/* Count the token in w->scr into lc (list path). */
static void count_list(aff_scan_t *sc, aff_worker_t *w, aff_loc_t *lc)
{
    if (lc->pending == lc->limit)
        flush_locked(sc, lc);
    lc->pending++;
    lc->tokens++;
    aff_count_lists(&sc->a->s, lc, &w->scr);
}

/* ------------------------------------------------------------------ shuffle windows */

/*
 * Apply the permutation sigma_i of a window to its n cells (cs bytes each): dst = src in the
 * order of an "inside-out" Fisher-Yates shuffle seeded by (seed, window, i), dst[k] taking a
 * uniformly drawn earlier position's cell. The same i gives the same permutation whatever the
 * cells.
 */
static void permute_cells(const aff_scan_t *sc, const aff_win_t *win, uint32_t i,
                          const uint8_t *src, uint8_t *dst)
{
    const size_t cs = sc->cs, n = win->n;
    rng32_t rng = {{{0}}, 0, 0};
    moe_rng_seed(&rng.r, moe_hash64(sc->a->o.seed, (win->index << 12) | i));
    if (cs == 8) { /* masks: the same draws as below, the generator's state in registers */
        const uint64_t *s8 = (const uint64_t *)src;
        uint64_t *d8 = (uint64_t *)dst;
        uint64_t x0 = rng.r.s[0], x1 = rng.r.s[1], x2 = rng.r.s[2], x3 = rng.r.s[3];
#define XOSHIRO_NEXT(out)                                                                  \
    do {                                                                                   \
        uint64_t m_ = x1 * 5, t_ = x1 << 17;                                               \
        (out) = ((m_ << 7) | (m_ >> 57)) * 9;                                              \
        x2 ^= x0;                                                                          \
        x3 ^= x1;                                                                          \
        x1 ^= x2;                                                                          \
        x0 ^= x3;                                                                          \
        x2 ^= t_;                                                                          \
        x3 = (x3 << 45) | (x3 >> 19);                                                      \
    } while (0)
        /* Lemire's draw below k + 1 from a 32-bit half; the rare rejections draw again */
#define DRAW(half, k, r)                                                                   \
    do {                                                                                   \
        uint32_t n_ = (uint32_t)(k) + 1;                                                   \
        uint64_t y_ = (uint64_t)(half) * n_;                                               \
        if ((uint32_t)y_ < n_) {                                                           \
            uint32_t th_ = (0u - n_) % n_;                                                 \
            while ((uint32_t)y_ < th_) {                                                   \
                uint32_t h_;                                                               \
                if (pend) {                                                                \
                    h_ = (uint32_t)(word >> 32);                                           \
                    pend = 0;                                                              \
                } else {                                                                   \
                    XOSHIRO_NEXT(word);                                                    \
                    h_ = (uint32_t)word;                                                   \
                    pend = 1;                                                              \
                }                                                                          \
                y_ = (uint64_t)h_ * n_;                                                    \
            }                                                                              \
        }                                                                                  \
        (r) = (size_t)(y_ >> 32);                                                          \
    } while (0)
        uint64_t word = 0;
        int pend = 0; /* the high half of `word` is still to be used */
        for (size_t k = 0; k < n; k++) {
            uint32_t h;
            if (pend) {
                h = (uint32_t)(word >> 32);
                pend = 0;
            } else {
                XOSHIRO_NEXT(word);
                h = (uint32_t)word;
                pend = 1;
            }
            size_t r;
            DRAW(h, k, r);
            uint64_t v = s8[k];
            d8[k] = d8[r]; /* r == k: overwritten just below */
            d8[r] = v;
        }
#undef DRAW
#undef XOSHIRO_NEXT
        return;
    }
    for (size_t k = 0; k < n; k++) {
        size_t r = rng_below32(&rng, (uint32_t)(k + 1));
        if (r != k)
            memcpy(dst + k * cs, dst + r * cs, cs);
        memcpy(dst + r * cs, src + k * cs, cs);
    }
}

/* The partners of layer j for hop d: sigma_j(sigma_j+1(... sigma_j+d-1(layer j+d))), built in
 * w->part + (d - 1) * window cells, with the spare buffer after the hops as scratch. */
static uint8_t *build_partners(const aff_scan_t *sc, aff_worker_t *w, const aff_win_t *win,
                               uint32_t d, uint32_t j)
{
    const size_t W = sc->a->o.window, cs = sc->cs, L = sc->a->s.L;
    uint8_t *out = w->part + (size_t)(d - 1) * W * cs;
    uint8_t *spare = w->part + (size_t)sc->a->s.hops * W * cs;
    (void)L;
    /* apply sigma_j+d-1 first, sigma_j last, alternating between `out` and `spare` so the last
     * application lands in `out` */
    const uint8_t *src = win->cells + (size_t)(j + d) * W * cs;
    uint8_t *bufs[2] = {(d % 2) ? out : spare, (d % 2) ? spare : out};
    for (uint32_t k = 0; k < d; k++) {
        uint8_t *dst = bufs[k % 2];
        permute_cells(sc, win, j + d - 1 - k, src, dst);
        src = dst;
    }
    return out;
}

/* Flush layer j's small counters of lc when n more tokens would overflow them. */
static void reserve_layer(aff_scan_t *sc, aff_loc_t *lc, uint32_t j, uint32_t n)
{
    if (lc->lpend[j] + n <= lc->limit)
        return;
    lock(sc);
    aff_loc_flush_layer(&sc->a->s, lc, j);
    unlock(sc);
}

/* A window task, mask path: layer j's co-activation and transitions, and its shuffled
 * transitions. */
static void run_layer_masks(aff_scan_t *sc, aff_worker_t *w, const aff_win_t *win, uint32_t j)
{
    const aff_shape_t *s = &sc->a->s;
    const size_t W = sc->a->o.window, mat = (size_t)AFF_ROW * AFF_ROW;
    const uint32_t n = win->n;
    const uint64_t *set = (const uint64_t *)win->cells;
    const uint64_t *full = win->full ? win->full : set;
    const uint64_t *A = set + j * W;
    uint16_t *dst[1 + 2 * MOE_AFF_MAX_HOPS];
    const uint64_t *src[1 + 2 * MOE_AFF_MAX_HOPS];
    const uint64_t *part[MOE_AFF_MAX_HOPS];
    aff_loc_t *r = &w->real, *f = &w->shuf;
    int m = 0;
    reserve_layer(sc, r, j, n);
    reserve_layer(sc, f, j, n);
    if (r->co && !s->top1) { /* top-k: the co-activation rows share the set bits */
        dst[m] = (uint16_t *)r->co + j * mat;
        src[m++] = A;
    }
    for (uint32_t d = 1; d <= s->hops && j + d < s->L; d++) {
        uint32_t p = aff_pair(s, d, j);
        part[d - 1] = (const uint64_t *)build_partners(sc, w, win, d, j);
        dst[m] = (uint16_t *)r->tr + p * mat;
        src[m++] = set + (j + d) * W;
        dst[m] = (uint16_t *)f->tr + p * mat;
        src[m++] = part[d - 1];
    }
    if (m)
        aff_rows_multi(sc->kern, w->tiles, dst, A, src, m, n, r->co_upper && !s->top1);
    if (r->co && s->top1)
        sc->kern->rows(w->tiles, (uint16_t *)r->co + j * mat, full + j * W, full + j * W, n);
    r->lpend[j] += n;
    f->lpend[j] += n;
    r->pending = f->pending = 1; /* something to flush */
    for (uint32_t d = 1; win->missing && d <= s->hops && j + d < s->L; d++)
        aff_count_exclusions(s, f, aff_pair(s, d, j), A, part[d - 1], n);
}

/* A window task, list path: the shuffled transitions of layer j (the trace's were counted per
 * batch). */
static void run_layer_lists(aff_scan_t *sc, aff_worker_t *w, const aff_win_t *win, uint32_t j)
{
    const aff_shape_t *s = &sc->a->s;
    const size_t W = sc->a->o.window, cs = sc->cs, ee = (size_t)s->E * s->E;
    aff_loc_t *lc = &w->shuf;
    uint32_t *tr = lc->tr;
    reserve_layer(sc, lc, j, win->n);
    for (uint32_t d = 1; d <= s->hops && j + d < s->L; d++) {
        const uint8_t *P = build_partners(sc, w, win, d, j);
        uint32_t p = aff_pair(s, d, j);
        for (uint32_t t = 0; t < win->n; t++) {
            uint16_t x[MOE_TRACE_MAX_TOPK], y[MOE_TRACE_MAX_TOPK];
            memcpy(x, win->cells + ((size_t)j * W + t) * cs, cs);
            memcpy(y, P + (size_t)t * cs, cs);
            uint32_t nx = cell_len(x, s->S), ny = cell_len(y, s->S);
            if (!nx || !ny) {
                lc->excl[p]++;
                for (uint32_t a = 0; a < nx; a++)
                    lc->missrow[(size_t)p * s->E + x[a]]++;
                continue;
            }
            for (uint32_t a = 0; a < nx; a++)
                for (uint32_t q = 0; q < ny; q++)
                    tr[p * ee + (size_t)x[a] * s->E + y[q]]++;
        }
    }
    lc->lpend[j] += win->n;
    lc->pending = 1;
}

/* Take one task of the ready windows and run it. 1 if one was run, 0 if none is available now
 * (the others are in other workers' hands). */
static int take_task(aff_scan_t *sc, aff_worker_t *w)
{
    lock(sc);
    aff_win_t *win = NULL;
    uint32_t task = 0;
    for (aff_win_t *x = sc->ready; x; x = x->next)
        if (x->next_task < x->ntasks) {
            win = x;
            task = x->next_task++;
            break;
        }
    unlock(sc);
    if (!win)
        return 0;
    if (sc->a->s.mask)
        run_layer_masks(sc, w, win, task);
    else
        run_layer_lists(sc, w, win, task);
    lock(sc);
    if (++win->done_tasks == win->ntasks) { /* counted: back to the pool */
        aff_win_t **pp = &sc->ready;
        while (*pp != win)
            pp = &(*pp)->next;
        *pp = win->next;
        win->next = sc->free_wins;
        sc->free_wins = win;
        __atomic_sub_fetch(&sc->nready, 1, __ATOMIC_RELEASE);
    }
    unlock(sc);
    return 1;
}

/* The window being filled is complete: queue its tasks, one per layer. */
static void window_ready(aff_scan_t *sc)
{
    aff_win_t *win = sc->fill;
    sc->fill = NULL;
    win->next = NULL;
    win->ntasks = sc->a->s.mask ? sc->a->s.L : sc->a->s.L - 1;
    win->next_task = win->done_tasks = 0;
    lock(sc);
    aff_win_t **pp = &sc->ready;
    while (*pp)
        pp = &(*pp)->next;
    *pp = win;
    __atomic_add_fetch(&sc->nready, 1, __ATOMIC_RELEASE);
    unlock(sc);
}

/* A window to fill next; runs pending tasks itself while the pool is exhausted. NULL on
 * ENOMEM. */
static aff_win_t *window_new(aff_scan_t *sc, aff_worker_t *w)
{
    const aff_shape_t *s = &sc->a->s;
    const size_t W = sc->a->o.window;
    aff_win_t *win = NULL;
    int fresh = 0;
    for (;;) {
        lock(sc);
        if (sc->free_wins) {
            win = sc->free_wins;
            sc->free_wins = win->next;
        } else if (sc->nwins < sc->max_wins) {
            fresh = 1; /* allocate below, outside the lock */
        }
        unlock(sc);
        if (win || fresh)
            break;
        if (take_task(sc, w) == 0) /* the remaining tasks are in other workers' hands */
            sched_yield();
    }
    if (fresh) { /* only the ordered stage allocates windows: no race on nwins */
        win = calloc(1, sizeof *win);
        if (!win)
            return NULL;
        sc->wins[sc->nwins++] = win;
        size_t cb = (size_t)s->L * W * sc->cs;
        size_t fb = sc->need_full ? (size_t)s->L * W * sizeof *win->full : 0;
        win->cells = aff_big_alloc(cb + fb + 64, 0);
        if (!win->cells)
            return NULL;
        if (fb)
            win->full = (uint64_t *)(win->cells + cb);
    }
    win->n = 0;
    win->missing = 0;
    win->index = sc->win_index++;
    return win;
}

/* Append records [r0, r0 + cnt) of batch b to the window being filled (layer-major). The batch
 * scratch holds [L][n] set cells, then (need_full) [L][n] full masks. */
static void window_insert(aff_scan_t *sc, const moe_trace_batch_t *b, size_t r0, uint32_t cnt)
{
    const size_t cs = sc->cs, W = sc->a->o.window, L = sc->a->s.L;
    aff_win_t *win = sc->fill;
    for (size_t j = 0; j < L; j++)
        memcpy(win->cells + (j * W + win->n) * cs, b->scratch + (j * b->n + r0) * cs, cnt * cs);
    if (win->full) {
        const uint64_t *f = (const uint64_t *)(b->scratch + L * b->n * cs);
        for (size_t j = 0; j < L; j++)
            memcpy(win->full + j * W + win->n, f + j * b->n + r0, cnt * sizeof *f);
    }
    win->missing |= b->user != 0; /* the batch had a missing cell */
    win->n += cnt;
}

/* ------------------------------------------------------------------ map callbacks */

static aff_loc_t *group_local(aff_scan_t *sc, aff_worker_t *w, uint64_t key);

/* The local counters of token r in the modes that split tokens (bands, step windows). */
static aff_loc_t *token_local(aff_scan_t *sc, aff_worker_t *w, const moe_trace_batch_t *b,
                              size_t r)
{
    const moe_affinity_opts_t *o = &sc->a->o;
    aff_loc_t *lc = &w->real;
    if (o->bands) {
        uint64_t h = moe_hash64(o->seed ^ UINT64_C(0x636f6e7665726765), b->seq[r]);
        uint32_t band = h ? (uint32_t)__builtin_clzll(h) : o->bands;
        lc = &w->groups[band < o->bands ? band : o->bands];
    } else if (o->step_window) {
        lc = group_local(sc, w, b->step[r] / o->step_window);
    }
    if (lc && o->step_window) {
        lc->step_lo = b->step[r] < lc->step_lo ? b->step[r] : lc->step_lo;
        lc->step_hi = b->step[r] > lc->step_hi ? b->step[r] : lc->step_hi;
    }
    return lc;
}

/* Room for the masks of n records. */
static int reserve_masks(const aff_shape_t *s, aff_worker_t *w, size_t n)
{
    if (n <= w->mcap)
        return 0;
    uint64_t *f = realloc(w->full, n * s->L * sizeof *f);
    if (f)
        w->full = f;
    uint64_t *g = f ? realloc(w->set, n * s->L * sizeof *g) : NULL;
    if (g)
        w->set = g;
    if (!f || !g)
        return MOE_ENOMEM;
    w->mcap = n;
    return 0;
}

static int worker_init(aff_scan_t *sc, aff_worker_t *w);

/* Worker wk, initialised on its first callback: its counters are zeroed by its own thread,
 * in parallel with the others. NULL after failing the map. */
static aff_worker_t *worker(aff_scan_t *sc, int wk)
{
    aff_worker_t *w = &sc->w[wk];
    if (!w->ready) {
        if (worker_init(sc, w) != 0) {
            moe_trace_map_fail(sc->m, MOE_ENOMEM, "out of memory");
            return NULL;
        }
        w->ready = 1;
    }
    return w;
}

/* Move the masks of the records o->keep accepts to the front of each layer's row of full[]
 * and set[] (stride b->n, as batch_masks wrote them); returns how many there are. */
static size_t keep_rows(const aff_shape_t *s, const moe_affinity_opts_t *o,
                        const moe_trace_batch_t *b, uint64_t *full, uint64_t *set)
{
    size_t n = 0;
    for (size_t r = 0; r < b->n; r++) {
        if (!o->keep(o->keep_ctx, b->token[r], b->seq[r]))
            continue;
        for (uint32_t j = 0; n != r && j < s->L; j++) {
            full[j * b->n + n] = full[j * b->n + r];
            if (set != full)
                set[j * b->n + n] = set[j * b->n + r];
        }
        n++;
    }
    return n;
}

/* Map callback: count a batch (any order, any worker). */
static int scan_batch(void *arg, int wk, moe_trace_batch_t *b)
{
    aff_scan_t *sc = arg;
    aff_worker_t *w = worker(sc, wk);
    if (!w)
        return MOE_ENOMEM;
    const aff_shape_t *s = &sc->a->s;
    const moe_affinity_opts_t *o = &sc->a->o;
    /* Keep the shuffle windows flowing: a task per batch, and more while the pool of windows
     * runs short (the ordered stage would otherwise run them itself while holding up the other
     * workers' batches). */
    int backlog = __atomic_load_n(&sc->nready, __ATOMIC_ACQUIRE);
    for (int k = 0; backlog > 0; k++) {
        int rc = take_task(sc, w);
        if (rc < 0)
            return moe_trace_map_fail(sc->m, MOE_ENOMEM, "out of memory");
        backlog = __atomic_load_n(&sc->nready, __ATOMIC_ACQUIRE);
        if (rc == 0 || (k > 0 && backlog < sc->max_wins - 1))
            break;
    }
    if (!s->mask) {
        for (size_t r = 0; r < b->n; r++) {
            if (o->keep && !o->keep(o->keep_ctx, b->token[r], b->seq[r]))
                continue;
            record_lists(s, w, b, r);
            aff_loc_t *lc = token_local(sc, w, b, r);
            if (!lc)
                goto steps_full;
            count_list(sc, w, lc);
            if (sc->windows)
                record_cells(sc, w, b, r);
            for (uint32_t j = 0; j < s->L; j++)
                b->user |= w->scr.nfull[j] == 0;
        }
        return 0;
    }
    if (sc->real_in_windows) { /* the windows count the transitions; the loads are here */
        uint64_t *set = (uint64_t *)b->scratch;
        uint64_t *full = sc->need_full ? set + (size_t)s->L * b->n : set;
        if (s->top1 && !sc->need_full) {
            if (reserve_masks(s, w, b->n))
                return moe_trace_map_fail(sc->m, MOE_ENOMEM, "out of memory");
            full = w->full;
        }
        b->user = (uint64_t)batch_masks(s, b, full, set);
        w->real.tokens += b->n;
        w->real.pending = 1;
        /* without a missing cell there are no missing counts or exclusions to find */
        if ((b->user || w->real.count_setload) &&
            aff_count_loads(s, &w->real, full, set, b->n, b->n))
            for (uint32_t d = 1; d <= s->hops; d++)
                for (uint32_t j = 0; j + d < s->L; j++)
                    aff_count_exclusions(s, &w->real, aff_pair(s, d, j), set + (size_t)j * b->n,
                                         set + (size_t)(j + d) * b->n, b->n);
        return 0;
    }
    if (reserve_masks(s, w, b->n))
        return moe_trace_map_fail(sc->m, MOE_ENOMEM, "out of memory");
    uint64_t *full = w->full, *set = s->top1 ? w->set : full;
    batch_masks(s, b, full, set);
    if (!o->bands && !o->step_window) {
        size_t n = o->keep ? keep_rows(s, o, b, full, set) : b->n;
        count_masks(sc, w, &w->real, full, set, b->n, n);
        return 0;
    }
    for (size_t r = 0; r < b->n; r++) {
        aff_loc_t *lc = token_local(sc, w, b, r);
        if (!lc)
            goto steps_full;
        count_masks(sc, w, lc, full + r, set + r, b->n, 1);
    }
    return 0;
steps_full:
    return moe_trace_map_fail(sc->m, MOE_ENOMEM, "too many step windows for memory (%zu so "
                              "far): use a larger --by-step", sc->nsteps);
}

/* Map callback, file order: shuffle windows (and sequence runs for convergence). */
static int scan_ordered(void *arg, int wk, moe_trace_batch_t *b)
{
    aff_scan_t *sc = arg;
    const moe_affinity_opts_t *o = &sc->a->o;
    if (o->bands && b) {
        for (size_t r = 0; r < b->n; r++) {
            if (sc->have_last && b->seq[r] == sc->last_seq)
                continue;
            uint64_t h = moe_hash64(o->seed ^ UINT64_C(0x636f6e7665726765), b->seq[r]);
            uint32_t band = h ? (uint32_t)__builtin_clzll(h) : o->bands;
            sc->runs[band < o->bands ? band : o->bands]++;
            sc->last_seq = b->seq[r];
            sc->have_last = 1;
        }
    }
    if (!sc->windows)
        return 0;
    if (!b) {
        if (sc->fill && sc->fill->n)
            window_ready(sc);
        return 0;
    }
    aff_worker_t *w = worker(sc, wk);
    if (!w)
        return MOE_ENOMEM;
    for (size_t r0 = 0; r0 < b->n;) {
        if (!sc->fill && !(sc->fill = window_new(sc, w)))
            return moe_trace_map_fail(sc->m, MOE_ENOMEM, "out of memory");
        uint32_t room = o->window - sc->fill->n;
        uint32_t cnt = b->n - r0 < room ? (uint32_t)(b->n - r0) : room;
        window_insert(sc, b, r0, cnt);
        r0 += cnt;
        if (sc->fill->n == o->window)
            window_ready(sc);
    }
    return 0;
}

/* Map callback after the input: run the remaining window tasks on every worker. */
static int scan_finish(void *arg, int wk)
{
    aff_scan_t *sc = arg;
    if (!sc->w[wk].ready && __atomic_load_n(&sc->nready, __ATOMIC_ACQUIRE) == 0)
        return 0; /* nothing counted here, nothing left to count */
    aff_worker_t *w = worker(sc, wk);
    if (!w)
        return MOE_ENOMEM;
    for (;;) {
        int rc = take_task(sc, w);
        if (rc < 0)
            return moe_trace_map_fail(sc->m, rc, "out of memory");
        if (rc == 1)
            continue;
        /* none free now: done, or wait for a stage another worker is finishing */
        if (__atomic_load_n(&sc->nready, __ATOMIC_ACQUIRE) == 0)
            break;
        sched_yield();
    }
    /* this worker's counters into the totals now, while others may still be counting */
    flush_locked(sc, &w->real);
    flush_locked(sc, &w->shuf);
    return 0;
}

/* ------------------------------------------------------------------ step windows */

/* The shared totals of step window `key`, created on first use (caller holds sc->mu). Each
 * is allocated on its own, so the workers' pointers stay valid as windows are added. */
static aff_tot_t *group_tot(aff_scan_t *sc, uint64_t key)
{
    const aff_shape_t *s = &sc->a->s;
    size_t lo = 0, hi = sc->nsteps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sc->steps[mid]->key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < sc->nsteps && sc->steps[lo]->key == key)
        return sc->steps[lo];
    uint64_t more = ((uint64_t)s->npairs * s->E * s->E + (uint64_t)s->L * s->E) * 8;
    if (sc->bytes + more > MAX_TABLE_BYTES) /* memory grows with windows, not tokens */
        return NULL;
    if (sc->nsteps == sc->steps_cap) {
        size_t cap = sc->steps_cap ? 2 * sc->steps_cap : 16;
        aff_tot_t **p = realloc(sc->steps, cap * sizeof *p);
        if (!p)
            return NULL;
        sc->steps = p;
        sc->steps_cap = cap;
    }
    aff_tot_t *t = malloc(sizeof *t);
    if (!t || aff_tot_init(t, s, 0)) {
        free(t);
        return NULL;
    }
    t->key = key;
    t->step_lo = UINT32_MAX;
    memmove(sc->steps + lo + 1, sc->steps + lo, (sc->nsteps - lo) * sizeof *sc->steps);
    sc->steps[lo] = t;
    sc->nsteps++;
    sc->bytes += more;
    return t;
}

/* By-step: the worker's counters for step window `key`, evicting (flushing) the least recently
 * used one when it holds MAX_STEP_LOCALS. */
static aff_loc_t *group_local(aff_scan_t *sc, aff_worker_t *w, uint64_t key)
{
    size_t victim = 0;
    for (size_t i = 0; i < w->ngroups; i++) {
        if (w->groups[i].tot && w->groups[i].key == key) {
            w->lru[i] = ++w->tick;
            return &w->groups[i];
        }
        if (w->lru[i] < w->lru[victim])
            victim = i;
    }
    aff_loc_t *lc = &w->groups[victim];
    if (lc->tot && lc->pending)
        flush_locked(sc, lc);
    lock(sc);
    aff_tot_t *t = group_tot(sc, key);
    unlock(sc);
    if (!t)
        return NULL;
    lc->tot = t;
    lc->key = key;
    lc->step_lo = UINT32_MAX;
    lc->step_hi = 0;
    w->lru[victim] = ++w->tick;
    return lc;
}

/* ------------------------------------------------------------------ the scan */

static int worker_init(aff_scan_t *sc, aff_worker_t *w)
{
    const aff_shape_t *s = &sc->a->s;
    const moe_affinity_opts_t *o = &sc->a->o;
    int count_setload = !o->coact || o->top1;
    int rc = aff_scr_init(&w->scr, s);
    if (rc)
        return rc;
    size_t tb = (1 + 2 * (size_t)s->hops) * AFF_TILE_BYTES;
    if (!(w->tiles = aligned_alloc(64, tb)))
        return MOE_ENOMEM;
    size_t pb = ((size_t)s->hops + 1) * sc->a->o.window * sc->cs;
    if (sc->windows && !(w->part = aff_big_alloc(pb, 0)))
        return MOE_ENOMEM;
    memset(w->tiles, 0, tb);
    if (o->bands || o->step_window) {
        w->ngroups = o->bands ? o->bands + 1 : MAX_STEP_LOCALS;
        w->groups = calloc(w->ngroups, sizeof *w->groups);
        w->lru = calloc(w->ngroups, sizeof *w->lru);
        if (!w->groups || !w->lru)
            return MOE_ENOMEM;
        for (size_t i = 0; i < w->ngroups; i++) {
            if ((rc = aff_loc_init(&w->groups[i], s, 0, 1, 1)))
                return rc;
            w->groups[i].tot = o->bands ? &sc->a->groups[i] : NULL;
        }
        return 0;
    }
    if ((rc = aff_loc_init(&w->real, s, o->coact, 1, count_setload)))
        return rc;
    w->real.tot = &sc->a->real;
    /* window tasks count top-k co-activation with the matrix's first pair: half of it will do */
    w->real.co_upper = sc->real_in_windows && o->coact && !o->top1 && sc->kern->rows_multi_co;
    if (o->shuffle) {
        if ((rc = aff_loc_init(&w->shuf, s, 0, 0, 0)))
            return rc;
        w->shuf.tot = &sc->a->shuf;
    }
    return 0;
}

static void worker_release(aff_worker_t *w)
{
    aff_loc_release(&w->real);
    aff_loc_release(&w->shuf);
    for (size_t i = 0; w->groups && i < w->ngroups; i++)
        aff_loc_release(&w->groups[i]);
    free(w->groups);
    free(w->lru);
    aff_scr_release(&w->scr);
    free(w->full);
    free(w->set);
    free(w->tiles);
    aff_big_free(w->part);
}

static void scan_free(aff_scan_t *sc)
{
    for (int i = 0; sc->w && i < sc->nw; i++)
        worker_release(&sc->w[i]);
    free(sc->w);
    for (int i = 0; sc->wins && i < sc->nwins; i++) {
        aff_big_free(sc->wins[i]->cells);
        free(sc->wins[i]);
    }
    free(sc->wins);
    for (size_t i = 0; i < sc->nsteps; i++) {
        aff_tot_release(sc->steps[i]);
        free(sc->steps[i]);
    }
    free(sc->steps);
    free(sc->runs);
    if (sc->nw > 1)
        pthread_mutex_destroy(&sc->mu);
}

static void scan_progress(void *arg, uint64_t done, uint64_t total)
{
    aff_scan_t *sc = arg;
    if (sc->progress)
        sc->progress(sc->pctx, done, total);
}

static int groups_reserve(moe_affinity_t *a, size_t n)
{
    if (n <= a->groups_cap)
        return 0;
    aff_tot_t *g = realloc(a->groups, n * sizeof *g);
    if (!g)
        return MOE_ENOMEM;
    a->groups = g;
    a->groups_cap = n;
    return 0;
}

/* Flush every worker's counters into the totals and derive what was not counted. */
static int scan_collect(aff_scan_t *sc)
{
    moe_affinity_t *a = sc->a;
    for (int i = 0; i < sc->nw; i++) { /* single-threaded from here */
        aff_worker_t *w = &sc->w[i];
        if (w->real.tot)
            aff_loc_flush(&a->s, &w->real);
        if (w->shuf.tot)
            aff_loc_flush(&a->s, &w->shuf);
        for (size_t g = 0; g < w->ngroups; g++)
            if (w->groups[g].tot)
                aff_loc_flush(&a->s, &w->groups[g]);
    }
    if (a->real.co && a->o.coact && !a->o.top1)
        aff_tot_setload_from_co(&a->s, &a->real);
    if (a->shuf.tr) { /* the shuffle keeps every layer's cells: same loads */
        memcpy(a->shuf.setload, a->real.setload,
               (size_t)a->s.L * a->s.E * sizeof *a->shuf.setload);
        memcpy(a->shuf.lmiss, a->real.lmiss, a->s.L * sizeof *a->shuf.lmiss);
        a->shuf.tokens = a->real.tokens;
        a->shuf.incomplete = a->real.incomplete;
    }
    for (size_t g = 0; sc->runs && g < a->ngroups; g++)
        a->groups[g].seqs = sc->runs[g];
    if (sc->nsteps && groups_reserve(a, sc->nsteps))
        return MOE_ENOMEM;
    for (size_t g = 0; g < sc->nsteps; g++) { /* the step windows, by key */
        a->groups[a->ngroups++] = *sc->steps[g];
        free(sc->steps[g]);
    }
    sc->nsteps = 0;
    return 0;
}

int moe_affinity_scan(moe_affinity_t *a, moe_trace_map_t *m,
                      void (*progress)(void *ctx, uint64_t done, uint64_t total), void *ctx)
{
    if (a->scan || !moe_trace_hdr_same_shape(moe_trace_map_header(m), &a->hdr))
        return moe_trace_map_fail(m, MOE_EINVAL, "trace shape differs from the counts");
    aff_scan_t sc;
    memset(&sc, 0, sizeof sc);
    sc.a = a;
    sc.m = m;
    sc.progress = progress;
    sc.pctx = ctx;
    sc.kern = aff_kernel(a->o.kernel);
    sc.nw = moe_trace_map_workers(m);
    sc.windows = a->o.shuffle && !a->o.bands && !a->o.step_window && a->s.hops > 0;
    sc.real_in_windows = sc.windows && a->s.mask;
    sc.need_full = sc.real_in_windows && a->s.top1 && a->o.coact;
    sc.cs = a->s.mask ? sizeof(uint64_t) : (size_t)a->s.S * sizeof(uint16_t);
    sc.max_wins = sc.nw + 1;
    int rc = sc.kern ? 0 : MOE_EINVAL;
    if (!rc && a->o.bands) {
        rc = groups_reserve(a, a->o.bands + 1);
        for (uint32_t i = 0; !rc && i <= a->o.bands; i++) {
            rc = aff_tot_init(&a->groups[i], &a->s, 0);
            a->groups[i].key = i;
            a->groups[i].step_lo = UINT32_MAX;
            a->ngroups += rc == 0;
        }
        sc.runs = calloc(a->o.bands + 1, sizeof *sc.runs);
        rc = rc ? rc : sc.runs ? 0 : MOE_ENOMEM;
    }
    sc.w = calloc((size_t)sc.nw, sizeof *sc.w);
    sc.wins = calloc((size_t)sc.max_wins, sizeof *sc.wins);
    rc = rc ? rc : (sc.w && sc.wins) ? 0 : MOE_ENOMEM;
    if (rc) {
        scan_free(&sc);
        return moe_trace_map_fail(m, rc, "out of memory");
    }
    if (sc.nw > 1)
        pthread_mutex_init(&sc.mu, NULL);
    a->scan = &sc;
    unsigned fields = (a->o.bands ? MOE_MAP_SEQ : 0) | (a->o.step_window ? MOE_MAP_STEP : 0) |
                      (a->o.keep ? MOE_MAP_TOKEN | MOE_MAP_SEQ : 0);
    moe_trace_map_ops_t ops = {.batch = scan_batch, .progress = scan_progress,
                               .raw_ids = a->s.mask, .fields = fields ? fields : MOE_MAP_NO_FIELDS};
    if (sc.windows || a->o.bands)
        ops.ordered = scan_ordered;
    if (sc.windows) {
        ops.finish = scan_finish;
        ops.scratch = (size_t)a->s.L * sc.cs * (sc.need_full ? 2 : 1);
    }
    rc = moe_trace_map_run(m, &ops, &sc);
    a->threads = sc.nw;
    int crc = scan_collect(&sc);
    if (!rc && crc)
        rc = moe_trace_map_fail(m, crc, "out of memory");
    a->scan = NULL;
    scan_free(&sc);
    return rc;
}

moe_affinity_t *moe_affinity_count(const char *path, const moe_affinity_opts_t *o, int threads,
                                   void (*progress)(void *ctx, uint64_t done, uint64_t total),
                                   void *ctx, int *status, char *errbuf, size_t errlen)
{
    moe_trace_map_t *m = moe_trace_map_open(path, threads, status, errbuf, errlen);
    if (!m)
        return NULL;
    char why[256];
    moe_affinity_t *a = moe_affinity_new(moe_trace_map_header(m), o, status, why, sizeof why);
    if (!a) {
        snprintf(errbuf, errlen, "'%s': %s", path, why);
    } else if ((*status = moe_affinity_set_source(a, path)) != 0 ||
               (*status = moe_affinity_scan(a, m, progress, ctx)) != 0) {
        snprintf(errbuf, errlen, "%s",
                 *status == MOE_ENOMEM ? moe_strerror(*status) : moe_trace_map_errmsg(m));
        moe_affinity_free(a);
        a = NULL;
    }
    moe_trace_map_close(m);
    return a;
}
