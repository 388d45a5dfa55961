/* affinity/affinity_stats.c -- statistics from affinity counts: conditionals, most affiliated
 * experts, mutual information, the summary and the comparison of two traces. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "affinity_internal.h"
#include "moe/moe.h"

uint64_t aff_row_load(const aff_shape_t *s, const aff_tot_t *t, uint32_t pair, uint32_t i)
{
    uint32_t d = 1;
    while (d < s->hops && pair >= s->pair_base[d + 1])
        d++;
    uint32_t j = pair - s->pair_base[d];
    uint64_t sl = t->setload[(size_t)j * s->E + i], mr = t->missrow[(size_t)pair * s->E + i];
    return sl > mr ? sl - mr : 0;
}

/* x log2 x of counts: a table for the small ones (most entries of a transition matrix), filled
 * once; mutual information needs it for every entry of every pair. */
#define XLOGX_N 4096
static double xlogx_tab[XLOGX_N];
static pthread_once_t xlogx_once = PTHREAD_ONCE_INIT;

static void xlogx_init(void)
{
    xlogx_tab[0] = 0;
    for (int k = 1; k < XLOGX_N; k++)
        xlogx_tab[k] = k * log2((double)k);
}

static inline double xlogx(uint64_t k)
{
    return k < XLOGX_N ? xlogx_tab[k] : (double)k * log2((double)k);
}

/* Index of the largest count of a row (the lower id on ties). */
static uint32_t row_argmax(const uint64_t *row, uint32_t E)
{
    uint32_t best = 0;
    for (uint32_t p = 1; p < E; p++)
        best = row[p] > row[best] ? p : best;
    return best;
}

void aff_pair_stats(const aff_shape_t *s, const aff_tot_t *t, uint32_t pair,
                    moe_affinity_pair_t *out)
{
    const uint32_t E = s->E;
    const uint64_t *T = t->tr + (size_t)pair * E * E;
    memset(out, 0, sizeof *out);
    out->excluded = t->excl[pair];
    out->tokens = t->tokens > out->excluded ? t->tokens - out->excluded : 0;
    double sum_max = 0, wmax = 0, wload = 0;
    uint64_t n = 0;
    for (uint32_t i = 0; i < E; i++) {
        const uint64_t *row = T + (size_t)i * E;
        for (uint32_t p = 0; p < E; p++)
            n += row[p];
        uint64_t rl = aff_row_load(s, t, pair, i);
        if (!rl)
            continue;
        double mx = (double)row[row_argmax(row, E)];
        out->experts++;
        sum_max += mx / (double)rl;
        wmax += mx;
        wload += (double)rl;
    }
    out->transitions = n;
    const double total = (double)n;
    out->mean_max_conditional = out->experts ? sum_max / out->experts : NAN;
    out->weighted_max_conditional = wload > 0 ? wmax / wload : NAN;
    if (total <= 0) {
        out->mutual_information = NAN;
        return;
    }
    /* MI of the joint T / N, N = sum T: (sum T log T - sum r log r - sum c log c + N log N) / N
     * with row sums r and column sums c, all counts (log2). */
    pthread_once(&xlogx_once, xlogx_init);
    double st = 0, sr = 0, sc = 0;
    for (uint32_t p = 0; p < E; p++) {
        uint64_t c = 0;
        for (uint32_t i = 0; i < E; i++)
            c += T[(size_t)i * E + p];
        sc += xlogx(c);
    }
    for (uint32_t i = 0; i < E; i++) {
        const uint64_t *row = T + (size_t)i * E;
        uint64_t r = 0;
        for (uint32_t p = 0; p < E; p++) {
            r += row[p];
            st += xlogx(row[p]);
        }
        sr += xlogx(r);
    }
    double mi = (st - sr - sc + xlogx(out->transitions)) / total;
    out->mutual_information = mi > 0 ? mi : 0; /* rounding below zero for independent layers */
}

/* ------------------------------------------------------------------ accessors */

void moe_affinity_info(const moe_affinity_t *a, moe_affinity_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->layers = a->s.L;
    out->experts = a->s.E;
    out->topk = a->s.K;
    out->sets = a->s.S;
    out->hops = a->s.hops;
    out->pairs = a->s.npairs;
    out->top1 = a->s.top1;
    out->coact = a->real.co != NULL;
    out->shuffled = a->shuf.tr != NULL;
    out->seed = a->o.seed;
    out->window = a->o.window;
    const aff_tot_t *t = &a->real;
    aff_tot_t sum;
    int have = t->tr != NULL;
    if (!have && a->ngroups && aff_tot_init(&sum, &a->s, 0) == 0) { /* modes: add the groups */
        for (size_t g = 0; g < a->ngroups; g++)
            aff_tot_add(&a->s, &sum, &a->groups[g]);
        t = &sum;
        have = 2;
    }
    if (!have)
        return;
    out->tokens = t->tokens;
    out->incomplete = t->incomplete;
    for (uint32_t j = 0; j < a->s.L; j++)
        out->missing_cells += t->lmiss[j];
    if (have == 2)
        aff_tot_release(&sum);
}

static const aff_tot_t *which_tot(const moe_affinity_t *a, int which)
{
    const aff_tot_t *t = which == MOE_AFF_SHUFFLED ? &a->shuf : &a->real;
    return t->tr ? t : NULL;
}

static int pair_index(const moe_affinity_t *a, uint32_t hop, uint32_t layer, uint32_t *pair)
{
    if (hop < 1 || hop > a->s.hops || layer + hop >= a->s.L)
        return MOE_EINVAL;
    *pair = aff_pair(&a->s, hop, layer);
    return 0;
}

const uint64_t *moe_affinity_load(const moe_affinity_t *a, uint32_t layer)
{
    if (layer >= a->s.L || !a->real.setload)
        return NULL;
    return a->real.setload + (size_t)layer * a->s.E;
}

uint64_t moe_affinity_present(const moe_affinity_t *a, uint32_t layer)
{
    if (layer >= a->s.L || !a->real.lmiss)
        return 0;
    return a->real.tokens - a->real.lmiss[layer];
}

const uint64_t *moe_affinity_coact(const moe_affinity_t *a, uint32_t layer)
{
    if (layer >= a->s.L || !a->real.co)
        return NULL;
    return a->real.co + (size_t)layer * a->s.E * a->s.E;
}

const uint64_t *moe_affinity_transitions(const moe_affinity_t *a, int which, uint32_t hop,
                                         uint32_t layer)
{
    uint32_t p;
    const aff_tot_t *t = which_tot(a, which);
    if (!t || pair_index(a, hop, layer, &p))
        return NULL;
    return t->tr + (size_t)p * a->s.E * a->s.E;
}

uint64_t moe_affinity_row_load(const moe_affinity_t *a, int which, uint32_t hop, uint32_t layer,
                               uint32_t i)
{
    uint32_t p;
    const aff_tot_t *t = which_tot(a, which);
    if (!t || i >= a->s.E || pair_index(a, hop, layer, &p))
        return 0;
    return aff_row_load(&a->s, t, p, i);
}

double moe_affinity_conditional(const moe_affinity_t *a, int which, uint32_t hop,
                                uint32_t layer, uint32_t i, uint32_t p)
{
    const uint64_t *T = moe_affinity_transitions(a, which, hop, layer);
    uint64_t rl = moe_affinity_row_load(a, which, hop, layer, i);
    if (!T || !rl || p >= a->s.E)
        return NAN;
    return (double)T[(size_t)i * a->s.E + p] / (double)rl;
}

int moe_affinity_most_affiliated(const moe_affinity_t *a, int which, uint32_t hop,
                                 uint32_t layer, uint32_t i, double *p)
{
    const uint64_t *T = moe_affinity_transitions(a, which, hop, layer);
    uint64_t rl = moe_affinity_row_load(a, which, hop, layer, i);
    if (!T || !rl)
        return -1;
    uint32_t best = row_argmax(T + (size_t)i * a->s.E, a->s.E);
    if (p)
        *p = (double)T[(size_t)i * a->s.E + best] / (double)rl;
    return (int)best;
}

int moe_affinity_pair_stats(const moe_affinity_t *a, int which, uint32_t hop, uint32_t layer,
                            moe_affinity_pair_t *out)
{
    uint32_t p;
    const aff_tot_t *t = which_tot(a, which);
    if (!t || pair_index(a, hop, layer, &p))
        return MOE_EINVAL;
    aff_pair_stats(&a->s, t, p, out);
    return 0;
}

/* ------------------------------------------------------------------ summary */

/* max/mean and coefficient of variation of the loads of layer j. */
static void load_skew(const aff_shape_t *s, const aff_tot_t *t, uint32_t j, double *maxmean,
                      double *cv)
{
    const uint64_t *ld = t->setload + (size_t)j * s->E;
    double sum = 0, sq = 0, mx = 0;
    for (uint32_t i = 0; i < s->E; i++) {
        double v = (double)ld[i];
        sum += v;
        sq += v * v;
        mx = v > mx ? v : mx;
    }
    double mean = sum / s->E;
    *maxmean = mean > 0 ? mx / mean : NAN;
    double var = sq / s->E - mean * mean;
    *cv = mean > 0 ? sqrt(var > 0 ? var : 0) / mean : NAN;
}

/* Mean of the finite values of v[0..n). */
static double finite_mean(const double *v, size_t n)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            sum += v[i];
            k++;
        }
    return k ? sum / k : NAN;
}

static double coact_max_conditional(const aff_shape_t *s, const aff_tot_t *t, uint32_t j)
{
    if (!t->co || s->K < 2)
        return NAN;
    const uint64_t *C = t->co + (size_t)j * s->E * s->E;
    double sum = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->E; i++) {
        const uint64_t *row = C + (size_t)i * s->E;
        if (!row[i])
            continue;
        uint64_t mx = 0;
        for (uint32_t p = 0; p < s->E; p++)
            mx = p != i && row[p] > mx ? row[p] : mx;
        sum += (double)mx / (double)row[i];
        n++;
    }
    return n ? sum / n : NAN;
}

void moe_affinity_summary(const moe_affinity_t *a, moe_affinity_summary_t *out)
{
    const aff_shape_t *s = &a->s;
    memset(out, 0, sizeof *out);
    double v1[MOE_TRACE_MAX_LAYERS], v2[MOE_TRACE_MAX_LAYERS], v3[MOE_TRACE_MAX_LAYERS];
    for (uint32_t j = 0; j < s->L; j++) {
        load_skew(s, &a->real, j, &v1[j], &v2[j]);
        v3[j] = coact_max_conditional(s, &a->real, j);
    }
    out->load_max_mean = finite_mean(v1, s->L);
    out->load_cv = finite_mean(v2, s->L);
    out->coact_max_conditional = finite_mean(v3, s->L);
    for (int w = 0; w < 2; w++) {
        const aff_tot_t *t = which_tot(a, w);
        for (uint32_t d = 1; d <= MOE_AFF_MAX_HOPS; d++) {
            if (d > s->hops) {
                out->mean_max_conditional[w][d - 1] = NAN;
                out->weighted_max_conditional[w][d - 1] = NAN;
                out->mutual_information[w][d - 1] = NAN;
                continue;
            }
            uint32_t n = s->L - d;
            for (uint32_t j = 0; j < n; j++) {
                moe_affinity_pair_t ps;
                if (t) {
                    aff_pair_stats(s, t, aff_pair(s, d, j), &ps);
                } else {
                    ps.mean_max_conditional = ps.weighted_max_conditional = NAN;
                    ps.mutual_information = NAN;
                    ps.excluded = 0;
                }
                v1[j] = ps.mean_max_conditional;
                v2[j] = ps.weighted_max_conditional;
                v3[j] = ps.mutual_information;
                if (d == 1)
                    out->excluded[w] += ps.excluded;
            }
            out->mean_max_conditional[w][d - 1] = finite_mean(v1, n);
            out->weighted_max_conditional[w][d - 1] = finite_mean(v2, n);
            out->mutual_information[w][d - 1] = finite_mean(v3, n);
        }
    }
}

/* ------------------------------------------------------------------ comparison */

/* Row i of pair p normalised into a distribution over the next expert, smoothed towards the
 * column marginal m (alpha pseudo-transitions): P(p | i) = (T + alpha m) / (row + alpha). */
static double smoothed(const uint64_t *row, double rsum, const double *m, uint32_t p)
{
    const double alpha = 1.0;
    return ((double)row[p] + alpha * m[p]) / (rsum + alpha);
}

int moe_affinity_compare(const moe_affinity_t *a, const moe_affinity_t *b, uint32_t layer,
                         moe_affinity_cmp_t *out)
{
    const aff_shape_t *s = &a->s;
    memset(out, 0, sizeof *out);
    if (a->s.L != b->s.L || a->s.E != b->s.E)
        return MOE_ESHAPE;
    if (!a->shuf.tr || !a->real.tr || !b->real.tr || layer + 1 >= s->L)
        return MOE_EINVAL;
    const uint32_t E = s->E, pa = aff_pair(s, 1, layer), pb = aff_pair(&b->s, 1, layer);
    const uint64_t *TA = a->real.tr + (size_t)pa * E * E, *TS = a->shuf.tr + (size_t)pa * E * E;
    const uint64_t *TB = b->real.tr + (size_t)pb * E * E;
    double ma[AFF_MASK_E], ms[AFF_MASK_E], *m = ma, *msh = ms, *heap = NULL;
    if (E > AFF_MASK_E) {
        if (!(heap = calloc(2 * (size_t)E, sizeof *heap)))
            return MOE_ENOMEM;
        m = heap;
        msh = heap + E;
    }
    /* Column marginals of a (and of its shuffle), with add-one smoothing so that no next
     * expert has probability 0. */
    double ta = 0, ts = 0;
    for (uint32_t p = 0; p < E; p++) {
        m[p] = msh[p] = 1;
        for (uint32_t i = 0; i < E; i++) {
            m[p] += (double)TA[(size_t)i * E + p];
            msh[p] += (double)TS[(size_t)i * E + p];
        }
        ta += m[p];
        ts += msh[p];
    }
    for (uint32_t p = 0; p < E; p++) {
        m[p] /= ta;
        msh[p] /= ts;
    }
    double tv = 0, ll = 0, lls = 0, nb = 0;
    uint32_t common = 0;
    for (uint32_t i = 0; i < E; i++) {
        const uint64_t *ra = TA + (size_t)i * E, *rs = TS + (size_t)i * E,
                       *rb = TB + (size_t)i * E;
        double sa = 0, ss = 0, sb = 0;
        for (uint32_t p = 0; p < E; p++) {
            sa += (double)ra[p];
            ss += (double)rs[p];
            sb += (double)rb[p];
        }
        for (uint32_t p = 0; p < E; p++) {
            if (!rb[p])
                continue;
            ll += (double)rb[p] * log2(smoothed(ra, sa, m, p));
            lls += (double)rb[p] * log2(smoothed(rs, ss, msh, p));
        }
        nb += sb;
        if (sa <= 0 || sb <= 0)
            continue;
        double d = 0;
        for (uint32_t p = 0; p < E; p++)
            d += fabs((double)ra[p] / sa - (double)rb[p] / sb);
        tv += d / 2;
        out->experts++;
        common += row_argmax(ra, E) == row_argmax(rb, E);
    }
    free(heap);
    out->tv = out->experts ? tv / out->experts : NAN;
    out->ma_common = out->experts ? (double)common / out->experts : NAN;
    out->ll = nb > 0 ? ll / nb : NAN;
    out->ll_shuffled = nb > 0 ? lls / nb : NAN;
    return 0;
}
