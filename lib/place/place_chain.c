/* place/place_chain.c -- exact solution of a small exflow stage by dynamic programming. */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "place_internal.h"
#include "place_lp_internal.h"

/*
 * Hops only join consecutive layers, and the places are interchangeable. Write a layout as,
 * per layer, a partition of its items into places (canonical: places numbered in order of
 * their first item) and a labelling of those places. A pair's hops depend on the two
 * partitions and on how the places of one are matched to those of the other, and whatever
 * layer j's labelling, layer j + 1's can be chosen to realise any matching: so the fewest hops
 * of a pair of partitions is the best matching of their places (an assignment problem), and
 * the fewest hops of the stage the shortest path through one partition per layer, a dynamic
 * program over the layers. It is exact, and bounded by work, never by the clock: the answer
 * is the same on any machine. It pays only when the partitions are few: Mixtral's 8 experts
 * per layer have 105 on 4 GPUs of 2 (lp_solve cannot close its gap there in 60 s), 35 on 2
 * nodes of 4 and 1 on 8 GPUs; 16 experts on 2 places of 8 already have 6435.
 */

/* Most partitions of a layer, and most work (assignments times places cubed) of a stage. */
#define CH_MAX_PARTS 4096u
#define CH_MAX_WORK 3e8

typedef struct ch_enum {
    uint32_t n, P, lim, exact;
    uint8_t cur[256];
    uint32_t cnt[256];
    uint8_t *out;      /* n bytes per partition, or NULL to count only */
    uint32_t ns;
} ch_enum_t;

/* The canonical partitions of items i .. n - 1 given the first i, `used` places opened. */
static void ch_rec(ch_enum_t *g, uint32_t i, uint32_t used)
{
    if (g->ns > CH_MAX_PARTS)
        return;
    if (i == g->n) {
        for (uint32_t p = 0; p < g->P && g->exact; p++)
            if (g->cnt[p] != g->lim)
                return;
        if (g->out && g->ns < CH_MAX_PARTS)
            memcpy(g->out + (size_t)g->ns * g->n, g->cur, g->n);
        g->ns++;
        return;
    }
    for (uint32_t p = 0; p <= used && p < g->P; p++) {
        if (g->cnt[p] >= g->lim)
            continue;
        g->cur[i] = (uint8_t)p;
        g->cnt[p]++;
        ch_rec(g, i + 1, used + (p == used));
        g->cnt[p]--;
    }
}

/* Partitions of layer j into `out` (NULL: count); more than CH_MAX_PARTS returns that + 1. */
static uint32_t ch_parts(const plc_stage_t *s, uint32_t j, uint8_t *out)
{
    ch_enum_t g = {.n = s->off[j + 1] - s->off[j], .P = s->places, .lim = s->lim[j],
                   .exact = s->exact[j], .out = out};
    memset(g.cnt, 0, sizeof g.cnt);
    ch_rec(&g, 0, 0);
    return g.ns;
}

/* Scratch of the program. */
typedef struct ch {
    uint8_t **part;     /* [layers] partitions, n_j bytes each */
    uint32_t *np;       /* [layers] how many */
    uint32_t **from;    /* [layers] best partition of the layer before, per partition */
    uint8_t **match;    /* [layers] its places matched to this one's: P bytes per partition */
    double *val, *nval; /* fewest hops up to the layer, per partition */
    double *S, *cost, *M;
    uint32_t *col;
} ch_t;

static void ch_release(ch_t *c, uint32_t L)
{
    for (uint32_t j = 0; j < L; j++) {
        if (c->part)
            free(c->part[j]);
        if (c->from)
            free(c->from[j]);
        if (c->match)
            free(c->match[j]);
    }
    free(c->part);
    free(c->np);
    free(c->from);
    free(c->match);
    free(c->val);
    free(c->nval);
    free(c->S);
    free(c->cost);
    free(c->M);
    free(c->col);
}

/* Count the partitions and the work; 1 when over the limits, else allocate and enumerate. */
static int ch_init(ch_t *c, const plc_stage_t *s)
{
    uint32_t L = s->layers, P = s->places, maxn = plc_stage_maxn(s), most = 1;
    double work = 0;
    memset(c, 0, sizeof *c);
    if (P > 255 || maxn > 255)
        return 1;
    c->np = calloc(L, sizeof *c->np);
    if (!c->np)
        return MOE_ENOMEM;
    for (uint32_t j = 0; j < L; j++) {
        if ((c->np[j] = ch_parts(s, j, NULL)) > CH_MAX_PARTS || !c->np[j])
            return 1;
        most = c->np[j] > most ? c->np[j] : most;
        work += j ? (double)c->np[j - 1] * c->np[j] * ((double)P * P * P + maxn * P) : 0;
    }
    if (work > CH_MAX_WORK)
        return 1;
    c->part = calloc(L, sizeof *c->part);
    c->from = calloc(L, sizeof *c->from);
    c->match = calloc(L, sizeof *c->match);
    c->val = malloc(most * sizeof *c->val);
    c->nval = malloc(most * sizeof *c->nval);
    c->S = malloc((size_t)maxn * P * sizeof *c->S);
    c->cost = malloc((size_t)P * P * sizeof *c->cost);
    c->M = malloc((size_t)P * P * sizeof *c->M);
    c->col = malloc(P * sizeof *c->col);
    if (!c->part || !c->from || !c->match || !c->val || !c->nval || !c->S || !c->cost ||
        !c->M || !c->col)
        return MOE_ENOMEM;
    for (uint32_t j = 0; j < L; j++) {
        size_t n = s->off[j + 1] - s->off[j];
        c->part[j] = malloc(c->np[j] * n + 1);
        c->from[j] = malloc(c->np[j] * sizeof *c->from[j]);
        c->match[j] = malloc((size_t)c->np[j] * P);
        if (!c->part[j] || !c->from[j] || !c->match[j])
            return MOE_ENOMEM;
        ch_parts(s, j, c->part[j]);
    }
    return 0;
}

/* One step: from the values of layer j's partitions to layer j + 1's. */
static int ch_step(const plc_stage_t *s, ch_t *c, uint32_t j)
{
    uint32_t P = s->places, o0 = s->off[j], o1 = s->off[j + 1], n0 = o1 - o0;
    uint32_t n1 = s->off[j + 2] - o1;
    double tot = 0;
    for (size_t e = s->eoff[j]; e < s->eoff[j + 1]; e++)
        tot += s->edge[e].w;
    for (uint32_t t = 0; t < c->np[j + 1]; t++)
        c->nval[t] = INFINITY;
    for (uint32_t u = 0; u < c->np[j]; u++) {
        const uint8_t *pu = c->part[j] + (size_t)u * n0;
        memset(c->S, 0, (size_t)n1 * P * sizeof *c->S);
        for (size_t e = s->eoff[j]; e < s->eoff[j + 1]; e++)
            c->S[(size_t)(s->edge[e].b - o1) * P + pu[s->edge[e].a - o0]] += s->edge[e].w;
        for (uint32_t t = 0; t < c->np[j + 1]; t++) {
            const uint8_t *pt = c->part[j + 1] + (size_t)t * n1;
            /* M[p][q]: the weight kept when u's place p is t's place q */
            memset(c->M, 0, (size_t)P * P * sizeof *c->M);
            for (uint32_t y = 0; y < n1; y++)
                for (uint32_t p = 0; p < P; p++)
                    c->M[(size_t)p * P + pt[y]] += c->S[(size_t)y * P + p];
            for (size_t x = 0; x < (size_t)P * P; x++)
                c->cost[x] = tot - c->M[x];
            if (place_assign(c->cost, P, P, c->col))
                return MOE_ENOMEM;
            double kept = 0;
            for (uint32_t p = 0; p < P; p++)
                kept += c->M[(size_t)p * P + c->col[p]];
            double v = c->val[u] + tot - kept;
            /* the first best wins: the same layout on every run */
            if (v < c->nval[t] - 1e-9) {
                c->nval[t] = v;
                c->from[j + 1][t] = u;
                for (uint32_t p = 0; p < P; p++)
                    c->match[j + 1][(size_t)t * P + p] = (uint8_t)c->col[p];
            }
        }
    }
    double *x = c->val;
    c->val = c->nval;
    c->nval = x;
    return 0;
}

/* The layout of the best path into place[] (s->place's numbering). 0 or MOE_ENOMEM. */
static int ch_layout(const plc_stage_t *s, ch_t *c, uint32_t best, uint32_t *place)
{
    uint32_t L = s->layers, P = s->places;
    uint32_t *pick = malloc(L * sizeof *pick);
    uint8_t *label = malloc((size_t)L * P);
    if (!pick || !label) {
        free(pick);
        free(label);
        return MOE_ENOMEM;
    }
    for (uint32_t j = L; j-- > 0;) {
        pick[j] = best;
        if (j)
            best = c->from[j][best];
    }
    /* layer 0 keeps its canonical labels; a place matched to layer j's place p takes p's */
    for (uint32_t p = 0; p < P; p++)
        label[p] = (uint8_t)p;
    for (uint32_t j = 1; j < L; j++)
        for (uint32_t p = 0; p < P; p++)
            label[(size_t)j * P + c->match[j][(size_t)pick[j] * P + p]] =
                label[(size_t)(j - 1) * P + p];
    for (uint32_t j = 0; j < L; j++) {
        uint32_t n = s->off[j + 1] - s->off[j];
        const uint8_t *pt = c->part[j] + (size_t)pick[j] * n;
        for (uint32_t k = 0; k < n; k++)
            place[s->off[j] + k] = label[(size_t)j * P + pt[k]];
    }
    free(pick);
    free(label);
    return 0;
}

int plc_stage_exact(const plc_stage_t *s, uint32_t *place, double *hops)
{
    ch_t c;
    uint32_t L = s->layers;
    int rc = ch_init(&c, s);
    if (!rc) {
        for (uint32_t u = 0; u < c.np[0]; u++)
            c.val[u] = 0;
        for (uint32_t j = 0; j + 1 < L && !rc; j++)
            rc = ch_step(s, &c, j);
    }
    if (!rc) {
        uint32_t best = 0;
        for (uint32_t t = 1; t < c.np[L - 1]; t++)
            if (c.val[t] < c.val[best] - 1e-9)
                best = t;
        rc = ch_layout(s, &c, best, place);
        *hops = rc ? INFINITY : plc_stage_hops(s, place);
        /* the layout realises the program's value */
        assert(rc || fabs(*hops - c.val[best]) <= 1e-6 * (1 + c.val[best]));
    }
    ch_release(&c, L);
    return rc;
}
