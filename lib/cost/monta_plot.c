/* lib/cost/monta_plot.c -- MoNTA's charts: AllToAll time against chunk count and against
 * sequence length (the paper's Fig. 14), and the forward time of a whole MoE layer. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/plot.h"
#include "util_internal.h"

void moe_monta_layer(const moe_monta_in_t *in, const moe_monta_result_t *r, double ffn,
                     double topk, double flops, moe_monta_layer_t *L)
{
    memset(L, 0, sizeof *L);
    double F = ffn, fl = flops;
    if (!(F > 0) || !(fl > 0) || !(in->s > 0 && in->h > 0))
        return;
    double tokens = in->b * in->s, k = topk;
    double flop = tokens * k * 4 * in->h * F / in->t;
    L->have = 1;
    L->comm = 2 * r->time[r->best];
    L->comp = flop / fl;
    L->total = L->comm + L->comp;
    L->tokens_per_s = tokens / L->total;
    L->mfu = flop / (L->total * fl);
}

/* A chart of several series over the same x values with a legend, drawn at (x0, 0). */
typedef struct series {
    const char *name;
    const double *y;
    uint32_t rgb;
} series_t;

typedef struct chart {
    const char *title, *xlabel, *ylabel;
    const double *x;
    int n;
    const series_t *s;
    int ns;
} chart_t;

#define CHART_W 720
#define CHART_H 440
#define LEGEND_H 24
#define CHART_TOP 10

static int draw_chart(moe_canvas_t *c, int x0, const chart_t *ch)
{
    double lo = 0, hi = -INFINITY;
    for (int k = 0; k < ch->ns; k++)
        for (int i = 0; i < ch->n; i++)
            if (isfinite(ch->s[k].y[i]))
                lo = fmin(lo, ch->s[k].y[i]), hi = fmax(hi, ch->s[k].y[i]);
    hi = hi > lo ? hi * 1.05 : lo + 1;
    int err = 0;
    for (int k = 0; k < ch->ns && !err; k++) {
        moe_linechart_t lc = {ch->x, ch->s[k].y, ch->n, lo, hi, ch->title, ch->xlabel,
                              ch->ylabel, ch->s[k].rgb, 2};
        err = moe_plot_lines(c, x0 + 4, CHART_TOP, CHART_W - 28, CHART_H - CHART_TOP, &lc);
    }
    for (int k = 0, lx = x0 + 80; k < ch->ns && !err; k++) {
        err = moe_canvas_rect(c, lx, CHART_H + 6, 14, 14, ch->s[k].rgb);
        if (!err)
            err = moe_canvas_text(c, lx + 20, CHART_H + 6, ch->s[k].name, 2, MOE_TEXT_LEFT, 0);
        lx += 40 + moe_text_width(ch->s[k].name, 2);
    }
    return err;
}

/* One or two charts side by side on a new canvas. */
static int plot_charts(moe_canvas_t **out, const chart_t *ch, int n, char *errbuf,
                       size_t errlen)
{
    moe_canvas_t *c = moe_canvas_new(CHART_W * n, CHART_H + LEGEND_H);
    int err = c ? 0 : MOE_ENOMEM;
    for (int i = 0; i < n && !err; i++)
        err = draw_chart(c, CHART_W * i, &ch[i]);
    if (err) {
        moe_canvas_free(c);
        return util_errf(errbuf, errlen, MOE_ENOMEM, "cannot draw: out of memory");
    }
    *out = c;
    return 0;
}

static const uint32_t palette[] = {0x444444, 0x1f77b4, 0xd62728, 0x2ca02c, 0xff7f0e};

/* Time against chunk count (O2, O3; baseline and O1 flat) and, when the volume comes from the
 * sequence length, against sequence length 4K..256K as MoNTA's Fig. 14. */
int moe_monta_plot(const moe_monta_in_t *in, const moe_monta_result_t *r, moe_canvas_t **out,
                   char *err, size_t errlen)
{
    enum { NMAX = 64, NSEQ = 7 };
    double x[NMAX], y[4][NMAX], xs[NSEQ], ys[4][NSEQ];
    uint32_t cap = in->max_chunks ? in->max_chunks : 32;
    int n = 0;
    double I = r->volume;
    for (uint32_t N = 1; N <= cap && n < NMAX; N++, n++) {
        if (I / ((double)N * in->t) < in->i_minimal && N > 1)
            break;
        x[n] = N;
        for (int s = 0; s < 4; s++)
            y[s][n] = moe_monta_time(in, s, N) * 1e3;
    }
    series_t s1[4], s2[4];
    for (int s = 0; s < 4; s++) {
        s1[s] = (series_t){moe_monta_strategy_name(s), y[s], palette[s]};
        s2[s] = (series_t){moe_monta_strategy_name(s), ys[s], palette[s]};
    }
    chart_t ch[2] = {{"AllToAll time against chunk count", "chunks N", "ms", x, n, s1, 4},
                     {"AllToAll time against sequence length", "sequence length (K tokens)",
                      "ms", xs, NSEQ, s2, 4}};
    int charts = 1;
    if (!(in->volume > 0)) {
        charts = 2;
        for (int i = 0; i < NSEQ; i++) {
            moe_monta_in_t v = *in;
            v.s = 4096.0 * (1 << i);
            moe_monta_result_t rr;
            xs[i] = v.s / 1024;
            if (moe_monta_eval(&v, 0, &rr))
                return util_errf(err, errlen, MOE_EINVAL, "cannot evaluate the model at "
                                 "sequence length %g", v.s);
            for (int s = 0; s < 4; s++)
                ys[s][i] = rr.time[s] * 1e3;
        }
    }
    return plot_charts(out, ch, charts, err, errlen);
}

