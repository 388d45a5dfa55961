/* affinity/affinity_plot.c -- moe-affinity's figures: P(next | this) heatmaps of layer pairs, the
 * grid of all pairs, the layers x experts load map and the by-step evolution. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affinity_internal.h"
#include "moe/moe.h"
#include "moe/plot.h"
#include "util_internal.h"

#define MARGIN 14
#define INK 0x202020u

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}


/* The conditional matrix P(p | i) of a hop-1 pair; rows of experts without load are NaN. */
static double *conditional_matrix(const moe_affinity_t *a, int which, uint32_t j)
{
    const uint32_t E = a->s.E;
    double *v = malloc((size_t)E * E * sizeof *v);
    if (!v)
        return NULL;
    for (uint32_t i = 0; i < E; i++)
        for (uint32_t p = 0; p < E; p++)
            v[(size_t)i * E + p] = moe_affinity_conditional(a, which, 1, j, i, p);
    return v;
}

/* "top-6 sets" / "top-1 experts" and the source, for captions. */
static void describe(const moe_affinity_t *a, int shuffled, char *buf, size_t n)
{
    const char *src = a->source ? a->source : "";
    const char *base = strrchr(src, '/');
    src = base ? base + 1 : src;
    if (a->s.top1)
        snprintf(buf, n, "%s%stop-1 experts%s", src, *src ? ": " : "",
                 shuffled ? ", SHUFFLED baseline" : "");
    else
        snprintf(buf, n, "%s%stop-%u sets%s", src, *src ? ": " : "", a->s.K,
                 shuffled ? ", SHUFFLED baseline" : "");
}

/* A figure: caption lines on top, then panels, then a colour bar on the right. */
typedef struct fig {
    moe_canvas_t *c;
    int w, h;
} fig_t;

static int caption(moe_canvas_t *c, int w, const char *l1, const char *l2, int s)
{
    moe_canvas_text(c, w / 2, MARGIN, l1, s, MOE_TEXT_CENTER, INK);
    if (l2)
        moe_canvas_text(c, w / 2, MARGIN + 9 * s + 4, l2, s, MOE_TEXT_CENTER, 0x505050);
    return MARGIN + (l2 ? 2 : 1) * (9 * s + 4) + 6;
}

static int caption_width(const char *l1, const char *l2, int s)
{
    int a = moe_text_width(l1, s), b = l2 ? moe_text_width(l2, s) : 0;
    return 2 * MARGIN + (a > b ? a : b);
}

/* Lay out n equal panels of pw x ph in `cols` columns below a caption, with a colour bar. */
static moe_canvas_t *grid_canvas(int n, int cols, int pw, int ph, int gap, int capw, int caph,
                                 int s, int *x0, int *y0)
{
    int rows = (n + cols - 1) / cols;
    int w = 2 * MARGIN + cols * pw + (cols - 1) * gap + 16 + moe_colorbar_width(s);
    w = w > capw ? w : capw;
    int h = caph + rows * ph + (rows - 1) * gap + MARGIN;
    *x0 = MARGIN;
    *y0 = caph;
    return moe_canvas_new(w, h);
}

static int plot_pairs(const moe_affinity_t *a, const moe_affinity_plot_t *o, moe_canvas_t **out,
                      char *errbuf, size_t errlen)
{
    const uint32_t E = a->s.E;
    uint32_t def = 0;
    const uint32_t *pairs = o->npairs ? o->pairs : &def;
    size_t n = o->npairs ? o->npairs : 1;
    if (a->s.hops < 1)
        return util_errf(errbuf, errlen, MOE_EINVAL, "the trace has a single layer: no pairs");
    for (size_t k = 0; k < n; k++)
        if (pairs[k] + 1 >= a->s.L)
            return util_errf(errbuf, errlen, MOE_EINVAL, "--pair %u: no layer %u (%u layers)",
                            pairs[k], pairs[k] + 1, a->s.L);
    const int s = 2, cell = clampi(512 / (int)E, 2, 32);
    char titles[64], xl[64], yl[64], l2[300];
    moe_heatmap_t hm = {NULL, (int)E, (int)E, 0, 1, cell, cell, "layer 0 -> 1",
                        "expert at layer 1", "expert at layer 0", 0, 0, s};
    int pw, ph, mx, my;
    snprintf(titles, sizeof titles, "layer %u -> %u", a->s.L - 2, a->s.L - 1);
    hm.title = titles;
    moe_heatmap_size(&hm, &pw, &ph, &mx, &my);
    int cols = (int)(n < 3 ? n : 3);
    const char *l1 = "P(expert p in layer j+1 | expert i in layer j)";
    describe(a, o->shuffled, l2, sizeof l2);
    int caph = MARGIN + 2 * (9 * s + 4) + 6, x0, y0;
    moe_canvas_t *c = grid_canvas((int)n, cols, pw, ph, 24, caption_width(l1, l2, s), caph, s,
                                  &x0, &y0);
    if (!c)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "figure too large or out of memory");
    caption(c, moe_canvas_width(c), l1, l2, s);
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        double *v = conditional_matrix(a, o->shuffled ? MOE_AFF_SHUFFLED : MOE_AFF_REAL,
                                       pairs[k]);
        if (!v) {
            rc = MOE_ENOMEM;
            break;
        }
        snprintf(titles, sizeof titles, "layer %u -> %u", pairs[k], pairs[k] + 1);
        snprintf(xl, sizeof xl, "expert p at layer %u", pairs[k] + 1);
        snprintf(yl, sizeof yl, "expert i at layer %u", pairs[k]);
        hm.v = v;
        hm.title = titles;
        hm.xlabel = xl;
        hm.ylabel = yl;
        int col = (int)(k % (size_t)cols), row = (int)(k / (size_t)cols);
        rc = moe_plot_heatmap(c, x0 + col * (pw + 24), y0 + row * (ph + 24), &hm);
        free(v);
    }
    int gx = x0 + cols * (pw + 24) - 24 + 16;
    if (!rc)
        rc = moe_plot_colorbar(c, gx, y0 + my, (int)E * cell, 0, 1, "P(p | i)", s);
    if (rc) {
        moe_canvas_free(c);
        return util_errf(errbuf, errlen, rc, "out of memory");
    }
    *out = c;
    return 0;
}

static int plot_grid(const moe_affinity_t *a, const moe_affinity_plot_t *o, moe_canvas_t **out,
                     char *errbuf, size_t errlen)
{
    const uint32_t E = a->s.E, n = a->s.L - 1;
    if (a->s.hops < 1)
        return util_errf(errbuf, errlen, MOE_EINVAL, "the trace has a single layer: no pairs");
    const int s = 1, cell = clampi(160 / (int)E, 1, 20);
    char title[32], l2[300];
    moe_heatmap_t hm = {NULL, (int)E, (int)E, 0, 1, cell, cell, "00 -> 00", NULL, NULL,
                        (int)(E > 1 ? E / 2 : 1), (int)(E > 1 ? E / 2 : 1), s};
    int pw, ph, mx, my;
    moe_heatmap_size(&hm, &pw, &ph, &mx, &my);
    int cols = (int)ceil(sqrt((double)n));
    const char *l1 = "P(p in layer j+1 | i in layer j), all pairs j -> j+1";
    describe(a, o->shuffled, l2, sizeof l2);
    strncat(l2, "; rows i, columns p", sizeof l2 - strlen(l2) - 1);
    int caph = MARGIN + 2 * (9 * 2 + 4) + 6, x0, y0;
    moe_canvas_t *c = grid_canvas((int)n, cols, pw, ph, 14, caption_width(l1, l2, 2), caph, 1,
                                  &x0, &y0);
    if (!c)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "figure too large or out of memory");
    caption(c, moe_canvas_width(c), l1, l2, 2);
    int rc = 0;
    for (uint32_t j = 0; j < n && !rc; j++) {
        double *v = conditional_matrix(a, o->shuffled ? MOE_AFF_SHUFFLED : MOE_AFF_REAL, j);
        if (!v) {
            rc = MOE_ENOMEM;
            break;
        }
        snprintf(title, sizeof title, "%u -> %u", j, j + 1);
        hm.v = v;
        hm.title = title;
        rc = moe_plot_heatmap(c, x0 + (int)(j % (uint32_t)cols) * (pw + 14),
                              y0 + (int)(j / (uint32_t)cols) * (ph + 14), &hm);
        free(v);
    }
    if (!rc)
        rc = moe_plot_colorbar(c, x0 + cols * (pw + 14) - 14 + 16, y0 + my, ph - my - 20 > 80
                                                                            ? ph - my - 20
                                                                            : 80,
                               0, 1, "P(p | i)", 1);
    if (rc) {
        moe_canvas_free(c);
        return util_errf(errbuf, errlen, rc, "out of memory");
    }
    *out = c;
    return 0;
}

/* A round upper end for a colour scale: v rounded up to two significant digits. */
static double nice_max(double v)
{
    if (!(v > 0))
        return 1;
    double p = pow(10, floor(log10(v)) - 1);
    return ceil(v / p - 1e-9) * p;
}

static int plot_load(const moe_affinity_t *a, const moe_affinity_plot_t *o, moe_canvas_t **out,
                     char *errbuf, size_t errlen)
{
    const uint32_t L = a->s.L, E = a->s.E;
    double *v = malloc((size_t)L * E * sizeof *v);
    if (!v)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    double mx = 0;
    for (uint32_t j = 0; j < L; j++) {
        uint64_t pres = moe_affinity_present(a, j);
        const uint64_t *ld = moe_affinity_load(a, j);
        for (uint32_t i = 0; i < E; i++) {
            double x = pres ? (double)ld[i] / (double)pres : NAN;
            v[(size_t)j * E + i] = x;
            mx = x > mx ? x : mx;
        }
    }
    const int s = 2;
    char l2[300];
    moe_heatmap_t hm = {v, (int)L, (int)E, 0, nice_max(mx), clampi(768 / (int)E, 2, 24),
                        clampi(480 / (int)L, 4, 24), NULL, "expert", "layer", 0, 0, s};
    int pw, ph, mx0, my;
    moe_heatmap_size(&hm, &pw, &ph, &mx0, &my);
    const char *l1 = a->s.top1 ? "expert load: share of tokens whose top-1 expert it is"
                               : "expert load: share of tokens whose top-k set holds the expert";
    describe(a, 0, l2, sizeof l2);
    int caph = MARGIN + 2 * (9 * s + 4) + 6, x0, y0;
    moe_canvas_t *c = grid_canvas(1, 1, pw, ph, 0, caption_width(l1, l2, s), caph, s, &x0, &y0);
    int rc = c ? 0 : MOE_ENOMEM;
    if (!rc) {
        caption(c, moe_canvas_width(c), l1, l2, s);
        rc = moe_plot_heatmap(c, x0, y0, &hm);
    }
    if (!rc)
        rc = moe_plot_colorbar(c, x0 + pw + 16, y0 + my, (int)L * hm.ch, 0, hm.vmax,
                               "share of tokens", s);
    free(v);
    (void)o;
    if (rc) {
        moe_canvas_free(c);
        return util_errf(errbuf, errlen, rc, "figure too large or out of memory");
    }
    *out = c;
    return 0;
}

static int plot_steps(const moe_affinity_t *a, const moe_affinity_plot_t *o, moe_canvas_t **out,
                      char *errbuf, size_t errlen)
{
    const uint32_t E = a->s.E;
    const int nw = (int)a->ngroups;
    if (!a->o.step_window || nw == 0)
        return util_errf(errbuf, errlen, MOE_EINVAL, "the steps plot needs --by-step");
    uint32_t J = o->layer == UINT32_MAX ? a->s.L - 1 : o->layer;
    if (J >= a->s.L)
        return util_errf(errbuf, errlen, MOE_EINVAL, "--layer %u: the trace has %u layers", J,
                        a->s.L);
    int cw = clampi(768 / nw, 1, 24);
    if (nw * cw > 15000)
        return util_errf(errbuf, errlen, MOE_ERANGE, "%d step windows are too many to draw: use "
                        "a larger --by-step", nw);
    double *v = malloc((size_t)E * nw * sizeof *v), *xs = malloc((size_t)nw * sizeof *xs);
    double *ys = malloc((size_t)nw * sizeof *ys);
    if (!v || !xs || !ys) {
        free(v);
        free(xs);
        free(ys);
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    }
    double mx = 0;
    for (int g = 0; g < nw; g++) {
        const aff_tot_t *t = &a->groups[g];
        uint64_t pres = t->tokens - t->lmiss[J];
        for (uint32_t i = 0; i < E; i++) {
            double x = pres ? (double)t->setload[(size_t)J * E + i] / (double)pres : NAN;
            v[(size_t)i * nw + g] = x;
            mx = x > mx ? x : mx;
        }
        double sum = 0;
        int np = 0;
        for (uint32_t j = 0; j + 1 < a->s.L; j++) {
            moe_affinity_pair_t ps;
            aff_pair_stats(&a->s, t, aff_pair(&a->s, 1, j), &ps);
            if (isfinite(ps.mean_max_conditional)) {
                sum += ps.mean_max_conditional;
                np++;
            }
        }
        xs[g] = (double)t->key * a->o.step_window;
        ys[g] = np ? sum / np : NAN;
    }
    const int s = 2;
    char yl[64], xl[80], l2[300];
    snprintf(yl, sizeof yl, "expert at layer %u", J);
    snprintf(xl, sizeof xl, "window of %u steps", a->o.step_window);
    moe_heatmap_t hm = {v, (int)E, nw, 0, nice_max(mx), cw, clampi(384 / (int)E, 2, 16),
                        "load share per window", xl, yl, 0, 0, s};
    int pw, ph, mx0, my;
    moe_heatmap_size(&hm, &pw, &ph, &mx0, &my);
    const char *l1 = "expert load and inter-layer affinity over training steps";
    describe(a, 0, l2, sizeof l2);
    int caph = MARGIN + 2 * (9 * s + 4) + 6, x0, y0, chart_h = 240;
    int w = 2 * MARGIN + pw + 16 + moe_colorbar_width(s), capw = caption_width(l1, l2, s);
    w = w > capw ? w : capw;
    w = w > 520 ? w : 520;
    moe_canvas_t *c = moe_canvas_new(w, caph + ph + 24 + chart_h + MARGIN);
    x0 = MARGIN;
    y0 = caph;
    int rc = c ? 0 : MOE_ENOMEM;
    if (!rc) {
        caption(c, w, l1, l2, s);
        rc = moe_plot_heatmap(c, x0, y0, &hm);
    }
    if (!rc)
        rc = moe_plot_colorbar(c, x0 + pw + 16, y0 + my, (int)E * hm.ch, 0, hm.vmax,
                               "share of tokens", s);
    if (!rc) {
        moe_linechart_t lc = {xs, ys, nw, 0, 0, "mean max conditional (hop 1)",
                              "first step of the window", "affinity", 0xbd0026, s};
        rc = moe_plot_lines(c, x0, y0 + ph + 24, w - 2 * MARGIN, chart_h, &lc);
    }
    free(v);
    free(xs);
    free(ys);
    if (rc) {
        moe_canvas_free(c);
        return util_errf(errbuf, errlen, rc, "figure too large or out of memory");
    }
    *out = c;
    return 0;
}

int moe_affinity_plot(const moe_affinity_t *a, const moe_affinity_plot_t *o, moe_canvas_t **out,
                      char *errbuf, size_t errlen)
{
    *out = NULL;
    if (o->shuffled && !a->shuf.tr && (o->kind == MOE_AFF_PLOT_PAIR ||
                                       o->kind == MOE_AFF_PLOT_GRID))
        return util_errf(errbuf, errlen, MOE_EINVAL, "--shuffled needs the shuffled baseline");
    if (o->kind != MOE_AFF_PLOT_STEPS && !a->real.tr)
        return util_errf(errbuf, errlen, MOE_EINVAL, "this plot needs the affinity table mode");
    switch (o->kind) {
    case MOE_AFF_PLOT_PAIR: return plot_pairs(a, o, out, errbuf, errlen);
    case MOE_AFF_PLOT_GRID: return plot_grid(a, o, out, errbuf, errlen);
    case MOE_AFF_PLOT_LOAD: return plot_load(a, o, out, errbuf, errlen);
    case MOE_AFF_PLOT_STEPS: return plot_steps(a, o, out, errbuf, errlen);
    default: return util_errf(errbuf, errlen, MOE_EINVAL, "unknown plot kind %d", o->kind);
    }
}
