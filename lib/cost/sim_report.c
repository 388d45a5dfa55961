/* cost/sim_report.c -- the simulator's results: totals, the ranking of schemes with its reason,
 * and the per-scheme bar chart. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "moe/moe.h"
#include "sim_internal.h"

const moe_acct_t *moe_sim_acct(const moe_sim_t *s)
{
    return s->acct;
}

int moe_sim_accounting(const moe_sim_t *s)
{
    return s->accounting;
}

int moe_sim_has(const moe_sim_t *s, int scheme)
{
    return scheme >= 0 && scheme < MOE_SIM_SCHEMES && (s->schemes >> scheme & 1u);
}

const moe_sim_layer_t *moe_sim_layer(const moe_sim_t *s, int scheme, uint32_t layer)
{
    return moe_sim_has(s, scheme) && layer < s->L ? &s->lay[scheme][layer] : NULL;
}

void moe_sim_iteration(const moe_sim_t *s, int scheme, moe_sim_layer_t *out)
{
    memset(out, 0, sizeof *out);
    if (moe_sim_has(s, scheme))
        *out = s->iter[scheme];
}

static void add_layer(moe_sim_layer_t *o, const moe_sim_layer_t *l)
{
    for (int c = 0; c < MOE_LINK_CLASSES; c++) {
        o->bytes[c] += l->bytes[c];
        o->slow[c] += l->slow[c];
        o->ctime[c] += l->ctime[c];
    }
    o->comm += l->comm;
    o->compute += l->compute;
    o->time += l->time;
    o->max_load = fmax(o->max_load, l->max_load);
    o->imbalance = fmax(o->imbalance, l->imbalance);
}

void moe_sim_total(const moe_sim_t *s, int scheme, moe_sim_layer_t *out)
{
    moe_sim_iteration(s, scheme, out);
    for (uint32_t j = 0; moe_sim_has(s, scheme) && j < s->L; j++)
        add_layer(out, &s->lay[scheme][j]);
}

int moe_sim_layer_mean(const moe_placement_t *p, const moe_topo_t *t, const char *tpath,
                       int threads, const moe_sim_opts_t *o, int scheme, double out[3],
                       char *err, size_t errlen)
{
    int st;
    char why[256];
    moe_trace_map_t *m = moe_trace_map_open(tpath, threads, &st, err, errlen);
    if (!m)
        return st;
    moe_sim_opts_t so = *o;
    so.schemes = 1u << scheme | (scheme == MOE_SIM_PIPELINED ? 1u << MOE_SIM_VANILLA : 0);
    moe_sim_t *s = moe_sim_run(p, t, m, &so, &st, why, sizeof why);
    if (s) {
        moe_sim_layer_t tot;
        moe_sim_total(s, scheme, &tot);
        double L = s->L ? s->L : 1;
        out[0] = tot.comm / L;
        out[1] = tot.compute / L;
        out[2] = tot.time / L;
    } else {
        snprintf(err, errlen, "'%s': %s", tpath, why);
    }
    moe_sim_free(s);
    moe_trace_map_close(m);
    return s ? 0 : st;
}

static void add_rank(moe_acct_rank_t *o, const moe_acct_rank_t *x)
{
    uint64_t *a = (uint64_t *)o;
    const uint64_t *b = (const uint64_t *)x;
    for (size_t i = 0; i < sizeof *o / sizeof *a; i++)
        a[i] += b[i];
}

int moe_sim_rank_xfer(const moe_sim_t *s, int scheme, uint32_t r, moe_acct_rank_t *out)
{
    memset(out, 0, sizeof *out);
    if (!moe_sim_has(s, scheme) || scheme == MOE_SIM_DATACENTRIC || r >= s->G)
        return -1;
    int a = scheme == MOE_SIM_COHERENT ? MOE_SCHEME_COHERENT : MOE_SCHEME_VANILLA;
    for (uint32_t j = 0; j < s->L; j++) {
        if (scheme == MOE_SIM_HIERARCHICAL) {
            add_rank(out, &s->hop[(size_t)j * s->G + r]);
            add_rank(out, &s->fwd[(size_t)j * s->G + r]);
        } else {
            add_rank(out, &moe_acct_ranks(s->acct, a, j)[r]);
        }
    }
    return 0;
}

double moe_sim_vector_bytes(const moe_sim_t *s)
{
    return s->vec;
}

double moe_sim_gather_bytes(const moe_sim_t *s)
{
    return s->gather;
}

double moe_sim_expert_bytes(const moe_sim_t *s)
{
    return s->xbytes;
}

uint32_t moe_sim_chunks(const moe_sim_t *s)
{
    return s->chunks;
}

/* ------------------------------------------------------------------ ranking */

/* Which speed the topology lacks for a NaN time. */
static const char *missing_speed(const moe_sim_t *s)
{
    if (s->gpn > 1 && !(s->topo.link[MOE_LINK_INTRA].bw > 0))
        return "the topology has no intra-node bandwidth";
    if (s->N > 1 && !(s->topo.link[MOE_LINK_INTER].bw > 0))
        return "the topology has no inter-node bandwidth";
    return "the topology has no compute rate (flops)";
}

static double bytes_of(const moe_sim_layer_t *t)
{
    return t->bytes[MOE_LINK_INTRA] + t->bytes[MOE_LINK_INTER];
}

/* Bytes the slowest rank moves. */
static double slow_of(const moe_sim_layer_t *t)
{
    return t->slow[MOE_LINK_INTRA] + t->slow[MOE_LINK_INTER];
}

/* The clause saying why scheme b wins, against vanilla (v). */
static void reason(const moe_sim_t *s, int b, const moe_sim_layer_t *t, char *why, size_t n)
{
    const moe_sim_layer_t *v = &t[MOE_SIM_VANILLA];
    double vs = slow_of(v) > 0 ? slow_of(v) : 1;
    switch (b) {
    case MOE_SIM_COHERENT:
        snprintf(why, n, "the placement keeps tokens where their experts are, so its slowest "
                 "rank moves %.0f%% of vanilla's bytes, which outweighs the per-iteration "
                 "all-gather (%.3g ms)", 100 * slow_of(&t[b]) / vs, 1e3 * s->iter[b].time);
        break;
    case MOE_SIM_PIPELINED:
        snprintf(why, n, "%u chunks hide %.0f%% of vanilla's communication behind expert compute",
                 s->chunks, v->comm > 0 ? 100 * (1 - t[b].comm / v->comm) : 0.0);
        break;
    case MOE_SIM_HIERARCHICAL:
        snprintf(why, n, "sending each token once per node, spread over the node's %u GPUs, "
                 "cuts the slowest rank's inter-node bytes to %.0f%% of vanilla's", s->gpn,
                 100 * t[b].slow[MOE_LINK_INTER] /
                 (v->slow[MOE_LINK_INTER] > 0 ? v->slow[MOE_LINK_INTER] : 1));
        break;
    case MOE_SIM_DATACENTRIC:
        snprintf(why, n, "fetching expert weights (%.3g GB) costs less than moving the tokens "
                 "(%.3g GB)", bytes_of(&t[b]) / 1e9, bytes_of(v) / 1e9);
        break;
    default:
        snprintf(why, n, "no other scheme pays off: communication is %.0f%% of its time",
                 v->time > 0 ? 100 * v->comm / v->time : 0.0);
    }
}

int moe_sim_rank(const moe_sim_t *s, int *order, char *why, size_t n)
{
    moe_sim_layer_t t[MOE_SIM_SCHEMES];
    int m = 0;
    for (int k = 0; k < MOE_SIM_SCHEMES; k++) {
        moe_sim_total(s, k, &t[k]);
        if (!moe_sim_has(s, k))
            continue;
        if (isnan(t[k].time)) {
            snprintf(why, n, "%s", missing_speed(s));
            return 0;
        }
        int at = m++;
        while (at > 0 && t[k].time < t[order[at - 1]].time) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = k;
    }
    if (!m) {
        snprintf(why, n, "no scheme simulated");
        return 0;
    }
    char r[256];
    reason(s, order[0], t, r, sizeof r);
    if (m == 1)
        snprintf(why, n, "%s: %.3g ms per batch; %s", moe_sim_scheme_name(order[0]),
                 1e3 * t[order[0]].time, r);
    else
        snprintf(why, n, "%s is fastest at %.3g ms per batch, %.2fx ahead of %s (%.3g ms): %s",
                 moe_sim_scheme_name(order[0]), 1e3 * t[order[0]].time,
                 t[order[0]].time > 0 ? t[order[1]].time / t[order[0]].time : 1.0,
                 moe_sim_scheme_name(order[1]), 1e3 * t[order[1]].time, r);
    return m;
}

/* ------------------------------------------------------------------ bar chart */

#define PLOT_W 880
#define PLOT_H 420
#define AX_X 80
#define AX_Y 50
#define AX_W 770
#define AX_H 290
#define COL_COMPUTE 0x4477aau
#define COL_COMM 0xee6677u

/* A "nice" axis maximum: 1, 2 or 5 times a power of ten, at least v. */
static double nice_max(double v)
{
    double p = pow(10, floor(log10(v)));
    return v <= p ? p : v <= 2 * p ? 2 * p : v <= 5 * p ? 5 * p : 10 * p;
}

static int plot_axes(moe_canvas_t *c, double ymax)
{
    char b[32];
    int rc = moe_canvas_text(c, PLOT_W / 2, 12, "simulated time per batch (ms)", 2,
                             MOE_TEXT_CENTER, 0);
    rc = rc ? rc : moe_canvas_line(c, AX_X, AX_Y, AX_X, AX_Y + AX_H, 1, 0);
    rc = rc ? rc : moe_canvas_line(c, AX_X, AX_Y + AX_H, AX_X + AX_W, AX_Y + AX_H, 1, 0);
    for (int i = 0; i <= 5 && !rc; i++) {
        int y = AX_Y + AX_H - i * AX_H / 5;
        snprintf(b, sizeof b, "%.4g", ymax * i / 5);
        rc = moe_canvas_line(c, AX_X - 5, y, AX_X, y, 1, 0);
        rc = rc ? rc : moe_canvas_text(c, AX_X - 8, y - 7, b, 2, MOE_TEXT_RIGHT, 0);
    }
    rc = rc ? rc : moe_canvas_rect(c, AX_X + 10, PLOT_H - 30, 14, 14, COL_COMPUTE);
    rc = rc ? rc : moe_canvas_text(c, AX_X + 30, PLOT_H - 30, "compute", 2, MOE_TEXT_LEFT, 0);
    rc = rc ? rc : moe_canvas_rect(c, AX_X + 160, PLOT_H - 30, 14, 14, COL_COMM);
    return rc ? rc : moe_canvas_text(c, AX_X + 180, PLOT_H - 30, "communication (exposed)", 2,
                                     MOE_TEXT_LEFT, 0);
}

static int plot_bar(moe_canvas_t *c, int x, int w, const moe_sim_layer_t *t, double ymax,
                    const char *name)
{
    char b[32];
    double comp = isnan(t->compute) ? 0 : t->compute, comm = isnan(t->comm) ? 0 : t->comm;
    int hc = (int)lround(AX_H * 1e3 * comp / ymax), hm = (int)lround(AX_H * 1e3 * comm / ymax);
    int base = AX_Y + AX_H;
    int rc = hc > 0 ? moe_canvas_rect(c, x, base - hc, w, hc, COL_COMPUTE) : 0;
    rc = rc || hm <= 0 ? rc : moe_canvas_rect(c, x, base - hc - hm, w, hm, COL_COMM);
    snprintf(b, sizeof b, isnan(t->time) ? "NA" : "%.3g", 1e3 * t->time);
    rc = rc ? rc : moe_canvas_text(c, x + w / 2, base - hc - hm - 18, b, 2, MOE_TEXT_CENTER, 0);
    return rc ? rc : moe_canvas_text(c, x + w / 2, base + 8, name, 2, MOE_TEXT_CENTER, 0);
}

moe_canvas_t *moe_sim_plot(const moe_sim_t *s)
{
    moe_sim_layer_t t[MOE_SIM_SCHEMES];
    double top = 0;
    int m = 0;
    for (int k = 0; k < MOE_SIM_SCHEMES; k++) {
        moe_sim_total(s, k, &t[k]);
        if (moe_sim_has(s, k)) {
            m++;
            top = fmax(top, 1e3 * ((isnan(t[k].comm) ? 0 : t[k].comm) +
                                   (isnan(t[k].compute) ? 0 : t[k].compute)));
        }
    }
    double ymax = top > 0 ? nice_max(top * 1.1) : 1;
    moe_canvas_t *c = moe_canvas_new(PLOT_W, PLOT_H);
    int rc = c ? plot_axes(c, ymax) : MOE_ENOMEM;
    int slot = m ? AX_W / m : AX_W, i = 0;
    for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++)
        if (moe_sim_has(s, k))
            rc = plot_bar(c, AX_X + slot * i++ + slot / 5, slot * 3 / 5, &t[k], ymax,
                          moe_sim_scheme_name(k));
    if (rc) {
        moe_canvas_free(c);
        return NULL;
    }
    return c;
}
