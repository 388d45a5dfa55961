/* place/place_search.c -- local search for layouts of a placement stage: exflow's start. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "place_lp_internal.h"
#include "util_internal.h"

/* Weight of the edges whose items are on different places. */
double plc_stage_hops(const plc_stage_t *s, const uint32_t *place)
{
    double h = 0;
    for (size_t e = 0; e < s->eoff[s->layers - 1]; e++)
        if (place[s->edge[e].a] != place[s->edge[e].b])
            h += s->edge[e].w;
    return h;
}

/* Most items in one layer of the stage. */
uint32_t plc_stage_maxn(const plc_stage_t *s)
{
    uint32_t m = 0;
    for (uint32_t j = 0; j < s->layers; j++)
        if (s->off[j + 1] - s->off[j] > m)
            m = s->off[j + 1] - s->off[j];
    return m;
}

/* ------------------------------------------------------------------ the start layout */

/* Which neighbours of a layer count in re-placing it. */
enum { XF_PREV = 1, XF_NEXT = 2 };

/* stay[(k - off[j]) * places + p]: the weight item k of layer j keeps when on place p, given
 * the layouts of the neighbouring layers in `sides`. */
static void layer_stay(const plc_stage_t *s, uint32_t j, int sides, double *stay)
{
    uint32_t P = s->places, o = s->off[j];
    memset(stay, 0, (size_t)(s->off[j + 1] - o) * P * sizeof *stay);
    if ((sides & XF_PREV) && j > 0)
        for (size_t e = s->eoff[j - 1]; e < s->eoff[j]; e++)
            stay[(size_t)(s->edge[e].b - o) * P + s->place[s->edge[e].a]] += s->edge[e].w;
    if ((sides & XF_NEXT) && j + 1 < s->layers)
        for (size_t e = s->eoff[j]; e < s->eoff[j + 1]; e++)
            stay[(size_t)(s->edge[e].a - o) * P + s->place[s->edge[e].b]] += s->edge[e].w;
}

/* The rows of the transportation problem of layer j: each item on one place, eq. 9 per place. */
static int assign_rows(lprec *lp, const plc_stage_t *s, uint32_t j, int *col, REAL *val)
{
    uint32_t P = s->places, n = s->off[j + 1] - s->off[j];
    int ok = 1;
    for (uint32_t k = 0; k < n && ok; k++) {
        for (uint32_t p = 0; p < P; p++) {
            col[p] = 1 + (int)(k * P + p);
            val[p] = 1;
        }
        ok = add_constraintex(lp, (int)P, val, col, EQ, 1);
    }
    for (uint32_t p = 0; p < P && ok; p++) {
        for (uint32_t k = 0; k < n; k++) {
            col[k] = 1 + (int)(k * P + p);
            val[k] = 1;
        }
        ok = add_constraintex(lp, (int)n, val, col, s->exact[j] ? EQ : LE, s->lim[j]);
    }
    return ok;
}

/* The best places of the items of layer j for the given stay: a transportation problem, whose
 * LP optimum (a vertex) is integral. Writes pl[0 .. n-1]; returns 0, or -1 when lp_solve fails
 * (pl untouched). */
static int layer_assign(const plc_stage_t *s, uint32_t j, const double *stay, uint32_t *pl)
{
    uint32_t P = s->places, n = s->off[j + 1] - s->off[j];
    if (!n)
        return 0;
    lprec *lp = plc_lp_new(0, (int)(n * P));
    size_t room = (n > P ? n : P) + 1;
    int *col = malloc(room * sizeof *col);
    REAL *val = malloc(room * sizeof *val), *v;
    int ok = lp && col && val && set_add_rowmode(lp, TRUE);
    for (uint32_t c = 0; c < n * P && ok; c++)
        ok = set_obj(lp, (int)c + 1, stay[c]);
    ok = ok && assign_rows(lp, s, j, col, val) && set_add_rowmode(lp, FALSE);
    if (ok) {
        set_maxim(lp);
        ok = solve(lp) == OPTIMAL && get_ptr_variables(lp, &v);
    }
    for (uint32_t k = 0; k < n && ok; k++)
        for (uint32_t p = 0; p < P; p++)
            if (v[k * P + p] > 0.5)
                pl[k] = p;
    if (lp)
        delete_lp(lp);
    free(col);
    free(val);
    return ok ? 0 : -1;
}

/* Weight the items of layer j keep in layout pl. */
static double layer_kept(const plc_stage_t *s, uint32_t j, const double *stay, const uint32_t *pl)
{
    double w = 0;
    for (uint32_t k = 0; k < s->off[j + 1] - s->off[j]; k++)
        w += stay[(size_t)k * s->places + pl[k]];
    return w;
}

/* Re-place layer j for the best given the neighbours in `sides`;
 * a new layout is taken only if it keeps at least one more token. Returns 1 if it changed. */
static int layer_improve(plc_stage_t *s, uint32_t j, int sides, double *stay, uint32_t *pl)
{
    uint32_t o = s->off[j], n = s->off[j + 1] - o;
    layer_stay(s, j, sides, stay);
    if (layer_assign(s, j, stay, pl) ||
        layer_kept(s, j, stay, pl) < layer_kept(s, j, stay, s->place + o) + 0.5)
        return 0;
    memcpy(s->place + o, pl, n * sizeof *pl);
    return 1;
}

/* ------------------------------------------------------------------ chain search */

/*
 * Re-placing one layer at a time stops at layouts where improving needs changes in several
 * layers at once. The chain search looks at all layers together: each layer gets a set of
 * candidate changes (none, swapping two of its items or, in small layers, two pairs, moving one
 * to a place with room, exchanging the contents of two places), and since hops only join
 * consecutive layers, the best combination of one candidate per layer is found exactly by
 * dynamic programming along the layers, in time linear in the layers and quadratic in the
 * candidates of a layer.
 */
/* Most single swaps in a layer for pairs of them to be candidates too. */
#define XF_DOUBLES_MAX 48u

typedef struct xf_change {
    uint32_t k, p; /* item k of the layer (counted from the layer's first) goes to place p */
} xf_change_t;

/* Candidates of a layer: candidate c makes changes chg[first[c]] .. chg[first[c + 1] - 1];
 * candidate 0 changes nothing. The one being built has its changes from first[n] to top. */
typedef struct xf_cands {
    uint32_t n, top;
    uint32_t *first;
    xf_change_t *chg;
    size_t room_c, room_x; /* allocated entries of first and chg */
} xf_cands_t;

static int cands_push(xf_cands_t *c, uint32_t k, uint32_t p)
{
    if (util_grow((void **)&c->chg, &c->room_x, (size_t)c->top + 1, sizeof *c->chg))
        return MOE_ENOMEM;
    c->chg[c->top++] = (xf_change_t){k, p};
    return 0;
}

/* Close the candidate being built. */
static int cands_close(xf_cands_t *c)
{
    if (util_grow((void **)&c->first, &c->room_c, (size_t)c->n + 2, sizeof *c->first))
        return MOE_ENOMEM;
    c->first[++c->n] = c->top;
    return 0;
}

static void cands_release(xf_cands_t *c)
{
    free(c->first);
    free(c->chg);
}

/* Swaps of two items on different places: candidates 1 .. (returned count). */
static int cands_swaps(xf_cands_t *c, const uint32_t *pl, uint32_t n)
{
    int rc = 0;
    for (uint32_t k = 0; k < n && !rc; k++)
        for (uint32_t m = k + 1; m < n && !rc; m++)
            if (pl[k] != pl[m] && !(rc = cands_push(c, k, pl[m])) &&
                !(rc = cands_push(c, m, pl[k])))
                rc = cands_close(c);
    return rc;
}

/* Two swaps of four different items at once, when the single swaps (candidates 1 .. ns) are
 * few enough for their pairs to be cheap: small layers (Mixtral's 8 experts on 2 or 4 places)
 * then reach every layout within two swaps in one search. */
static int cands_doubles(xf_cands_t *c, uint32_t ns)
{
    int rc = 0;
    for (uint32_t u = 1; u <= ns && ns <= XF_DOUBLES_MAX && !rc; u++)
        for (uint32_t v = u + 1; v <= ns && !rc; v++) {
            /* copies: pushing may move the array */
            xf_change_t z[4] = {c->chg[c->first[u]], c->chg[c->first[u] + 1],
                                c->chg[c->first[v]], c->chg[c->first[v] + 1]};
            if (z[0].k == z[2].k || z[0].k == z[3].k || z[1].k == z[2].k || z[1].k == z[3].k)
                continue;
            for (int t = 0; t < 4 && !rc; t++)
                rc = cands_push(c, z[t].k, z[t].p);
            if (!rc)
                rc = cands_close(c);
        }
    return rc;
}

/* The candidates of a layer whose items are on pl[0 .. n-1]: swaps (and pairs of them), moves
 * to a place with room, and exchanges of two places' contents. */
static int cands_build(xf_cands_t *c, const uint32_t *pl, uint32_t n, uint32_t P, uint32_t lim,
                       int exact, uint32_t *cnt)
{
    c->n = c->top = 0;
    if (util_grow((void **)&c->first, &c->room_c, 1, sizeof *c->first))
        return MOE_ENOMEM;
    c->first[0] = 0;
    int rc = cands_close(c);
    if (!rc)
        rc = cands_swaps(c, pl, n);
    if (!rc)
        rc = cands_doubles(c, c->n - 1);
    memset(cnt, 0, P * sizeof *cnt);
    for (uint32_t k = 0; k < n; k++)
        cnt[pl[k]]++;
    for (uint32_t k = 0; k < n && !exact && !rc; k++)
        for (uint32_t q = 0; q < P && !rc; q++)
            if (q != pl[k] && cnt[q] < lim && !(rc = cands_push(c, k, q)))
                rc = cands_close(c);
    for (uint32_t p = 0; p < P && !rc; p++)
        for (uint32_t q = p + 1; q < P && !rc; q++) {
            for (uint32_t k = 0; k < n && !rc; k++)
                if (pl[k] == p || pl[k] == q)
                    rc = cands_push(c, k, pl[k] == p ? q : p);
            if (!rc)
                rc = cands_close(c);
        }
    return rc;
}

/* Scratch of the chain search. */
typedef struct xf_chain {
    xf_cands_t *cand;   /* [layers] */
    uint32_t **back;    /* [layers] best candidate of the layer before, per candidate */
    double *val, *nval; /* best kept weight up to the layer, per candidate */
    double *S;          /* [maxn * places] */
    uint32_t *lay;      /* [maxn] */
} xf_chain_t;

/* Layer j's places under candidate u, into c->lay. */
static void chain_layout(const plc_stage_t *s, const xf_chain_t *c, uint32_t j, uint32_t u)
{
    const xf_cands_t *cd = &c->cand[j];
    memcpy(c->lay, s->place + s->off[j], (s->off[j + 1] - s->off[j]) * sizeof *c->lay);
    for (uint32_t x = cd->first[u]; x < cd->first[u + 1]; x++)
        c->lay[cd->chg[x].k] = cd->chg[x].p;
}

/* One step of the dynamic program: from the values of layer j's candidates to layer j+1's. */
static void chain_step(const plc_stage_t *s, xf_chain_t *c, uint32_t j)
{
    uint32_t P = s->places, o1 = s->off[j + 1], n1 = s->off[j + 2] - o1;
    const xf_cands_t *cu = &c->cand[j], *cv = &c->cand[j + 1];
    const uint32_t *cur = s->place + o1;
    for (uint32_t v = 0; v < cv->n; v++)
        c->nval[v] = -1;
    for (uint32_t u = 0; u < cu->n; u++) {
        chain_layout(s, c, j, u);
        memset(c->S, 0, (size_t)n1 * P * sizeof *c->S);
        for (size_t e = s->eoff[j]; e < s->eoff[j + 1]; e++)
            c->S[(size_t)(s->edge[e].b - o1) * P + c->lay[s->edge[e].a - s->off[j]]] +=
                s->edge[e].w;
        double base = c->val[u];
        for (uint32_t b = 0; b < n1; b++)
            base += c->S[(size_t)b * P + cur[b]];
        for (uint32_t v = 0; v < cv->n; v++) {
            double kept = base;
            for (uint32_t x = cv->first[v]; x < cv->first[v + 1]; x++) {
                const double *Sb = c->S + (size_t)cv->chg[x].k * P;
                kept += Sb[cv->chg[x].p] - Sb[cur[cv->chg[x].k]];
            }
            if (kept > c->nval[v]) {
                c->nval[v] = kept;
                c->back[j + 1][v] = u;
            }
        }
    }
    double *t = c->val;
    c->val = c->nval;
    c->nval = t;
}

/* Run the dynamic program and apply the best choice; *gain = the weight it keeps more. */
static void chain_apply(plc_stage_t *s, xf_chain_t *c, double kept, double *gain)
{
    uint32_t L = s->layers, best = 0;
    memset(c->val, 0, c->cand[0].n * sizeof *c->val);
    for (uint32_t j = 0; j + 1 < L; j++)
        chain_step(s, c, j);
    for (uint32_t v = 1; v < c->cand[L - 1].n; v++)
        if (c->val[v] > c->val[best])
            best = v;
    *gain = c->val[best] - kept;
    if (*gain < 0.5) {
        *gain = 0;
        return;
    }
    for (uint32_t j = L; j-- > 0;) {
        const xf_cands_t *cd = &c->cand[j];
        for (uint32_t x = cd->first[best]; x < cd->first[best + 1]; x++)
            s->place[s->off[j] + cd->chg[x].k] = cd->chg[x].p;
        if (j)
            best = c->back[j][best];
    }
}

static void chain_release(xf_chain_t *c, uint32_t L)
{
    for (uint32_t j = 0; c->cand && j < L; j++)
        cands_release(&c->cand[j]);
    for (uint32_t j = 0; c->back && j < L; j++)
        free(c->back[j]);
    free(c->cand);
    free(c->back);
    free(c->val);
    free(c->nval);
    free(c->S);
    free(c->lay);
}

/* Candidates of every layer and room for the program; MOE_ENOMEM, or 1 when the program would
 * take too long (over about 1e8 steps: many items per layer). */
static int chain_init(const plc_stage_t *s, xf_chain_t *c, uint32_t maxn, uint32_t *cnt)
{
    uint32_t L = s->layers, most = 1;
    double work = 0;
    memset(c, 0, sizeof *c);
    c->cand = calloc(L, sizeof *c->cand);
    c->back = calloc(L, sizeof *c->back);
    c->S = malloc(((size_t)maxn * s->places + 1) * sizeof *c->S);
    c->lay = malloc(((size_t)maxn + 1) * sizeof *c->lay);
    if (!c->cand || !c->back || !c->S || !c->lay)
        return MOE_ENOMEM;
    for (uint32_t j = 0; j < L; j++) {
        int rc = cands_build(&c->cand[j], s->place + s->off[j], s->off[j + 1] - s->off[j],
                             s->places, s->lim[j], s->exact[j], cnt);
        if (rc)
            return rc;
        if (!(c->back[j] = malloc(c->cand[j].n * sizeof *c->back[j])))
            return MOE_ENOMEM;
        most = c->cand[j].n > most ? c->cand[j].n : most;
        work += j ? (double)c->cand[j].n * c->cand[j - 1].n : 0;
    }
    c->val = malloc(most * sizeof *c->val);
    c->nval = malloc(most * sizeof *c->nval);
    if (!c->val || !c->nval)
        return MOE_ENOMEM;
    return work > 1e8;
}

/* One chain search from the current layout; *gain as chain_apply (0 when skipped). */
static int chain_search(plc_stage_t *s, uint32_t maxn, double *gain)
{
    xf_chain_t c;
    uint32_t *cnt = malloc(s->places * sizeof *cnt);
    int rc = cnt ? chain_init(s, &c, maxn, cnt) : MOE_ENOMEM;
    *gain = 0;
    if (!rc)
        chain_apply(s, &c, s->total - plc_stage_hops(s, s->place), gain);
    if (cnt)
        chain_release(&c, s->layers);
    free(cnt);
    return rc < 0 ? rc : 0;
}

/* Layers placed outwards from layer m: m fills its places in order, each later layer is placed
 * for the best given the one before it, each earlier layer given the one after it. */
static void start_from(plc_stage_t *s, uint32_t m, double *stay, uint32_t *pl)
{
    for (uint32_t j = 0; j < s->layers; j++)
        for (uint32_t k = s->off[j]; k < s->off[j + 1]; k++)
            s->place[k] = (k - s->off[j]) % s->places;
    for (uint32_t j = m + 1; j < s->layers; j++)
        layer_improve(s, j, XF_PREV, stay, pl);
    for (uint32_t j = m; j-- > 0;)
        layer_improve(s, j, XF_NEXT, stay, pl);
}

/* Improve the layout until neither re-placing single layers (given both neighbours) nor the
 * chain search helps, or the deadline (0: none) passes. Each change keeps at least one more
 * token, so this ends; the counts are capped all the same. */
static int descend(plc_stage_t *s, uint32_t maxn, double deadline, double *stay, uint32_t *pl)
{
    double gain = 1;
    int rc = 0;
    for (int round = 0; round < 1000 && gain > 0 && !rc; round++) {
        for (int pass = 0, any = 1; pass < 100 && any; pass++) {
            any = 0;
            for (uint32_t j = 0; j < s->layers; j++)
                any |= layer_improve(s, j, XF_PREV | XF_NEXT, stay, pl);
        }
        if (deadline > 0 && util_now() >= deadline)
            break;
        rc = chain_search(s, maxn, &gain);
    }
    return rc;
}

/*
 * The start layout: the best of local searches from a few layouts built outwards from
 * different layers (the first, the last, the middle, the quarters). The first search always
 * finishes; the others run while the clock allows. With one expert per place the first is
 * optimal at once: each layer pair is then an assignment problem of its own, and placing each
 * layer for the best given the one before solves them all.
 */
int plc_stage_start(plc_stage_t *s, double deadline)
{
    uint32_t L = s->layers, N = s->off[L], maxn = plc_stage_maxn(s);
    uint32_t anchor[5] = {0, L - 1, L / 2, L / 4, 3 * L / 4};
    double *stay = malloc(((size_t)maxn * s->places + 1) * sizeof *stay), best = INFINITY;
    uint32_t *pl = malloc(((size_t)maxn + 1) * sizeof *pl);
    uint32_t *keep = malloc(((size_t)N + 1) * sizeof *keep);
    int rc = stay && pl && keep ? 0 : MOE_ENOMEM;
    for (uint32_t a = 0; a < 5 && !rc && (a == 0 || util_now() < deadline); a++) {
        int seen = 0;
        for (uint32_t b = 0; b < a; b++)
            seen |= anchor[b] == anchor[a];
        if (seen)
            continue;
        start_from(s, anchor[a], stay, pl);
        rc = descend(s, maxn, a ? deadline : 0, stay, pl);
        double h = plc_stage_hops(s, s->place);
        if (!rc && h < best) {
            best = h;
            memcpy(keep, s->place, N * sizeof *keep);
        }
    }
    if (!rc)
        memcpy(s->place, keep, N * sizeof *keep);
    free(stay);
    free(pl);
    free(keep);
    return rc;
}
