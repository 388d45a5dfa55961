/* run/run_iter.c -- moe-run iterations: inputs, timed loop, statistics, outputs, the serial
 * reference of --check, the chunk count of pipelined mode. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_iter_internal.h"
#include "run_modes_internal.h"

void run_load_inputs(run_t *r)
{
    size_t H = r->H;
    r->nloc = 0;
    for (size_t t = 0; t < r->ntok; t++) {
        r->tok_row[t] = UINT32_MAX;
        if (r->src[t] == (uint32_t)r->me) {
            r->tok_row[t] = (uint32_t)r->nloc;
            r->loc[r->nloc++] = (uint32_t)t;
        }
    }
    float *hx = run_hbuf(r, RUN_HS_ROWS, (r->nloc + 1) * H * sizeof *hx);
    for (size_t i = 0; i < r->nloc; i++)
        moe_kern_init_token(r->cfg.seed, r->loc[i], r->H, hx + i * H);
    float *x = run_dbuf(r, &r->x, (r->nloc + 1) * H * sizeof *x);
    RUN_CK(r, r->b->ops->upload(r->b, x, hx, r->nloc * H * sizeof *x));
}

/* Coherent mode ends an iteration with an all-gather that gives every rank the iteration's
 * tokens (Table I's G.N.G term): as ExFlow does, the newly generated token ids, a 4-byte id
 * per token (MOE_EXFLOW_TOKEN_ID, what moe-costmodel prices), never the hidden rows, which
 * nothing reads. With no sampler to generate ids, a token's id is its index in the stream;
 * the gathered ids are checked to name every token once, which is what the next step's
 * embedding on every rank relies on. */
static void coherent_allgather(run_t *r)
{
    int G = r->G;
    size_t id = sizeof(uint32_t), total = 0;
    size_t *c = run_hbuf(r, RUN_HS_COUNTS, 4 * (size_t)G * sizeof *c);
    double *n = run_hbuf(r, RUN_HS_SUMS, (size_t)G * sizeof *n);
    for (int p = 0; p < G; p++)
        n[p] = p == r->me ? (double)r->nloc : 0;
    RUN_CK(r, run_comm_allreduce(r->comm, n, G, MOE_RUN_SUM));
    for (int p = 0; p < G; p++) {
        c[p] = r->nloc * id;
        c[G + p] = 0;
        c[2 * G + p] = (size_t)n[p] * id;
        c[3 * G + p] = total * id;
        total += (size_t)n[p];
        if (r->timing && p != r->me)
            r->ag_bytes[run_link(r, (uint32_t)r->me, (uint32_t)p)] += r->nloc * id;
    }
    uint32_t *all = run_hbuf(r, RUN_HS_GATHER, (total + r->ntok + 1) * sizeof *all);
    RUN_CK(r, run_comm_alltoallv(r->comm, r->loc, c, c + G, all, c + 2 * G, c + 3 * G));
    uint32_t *seen = all + total;
    memset(seen, 0, r->ntok * sizeof *seen);
    for (size_t i = 0; i < total; i++)
        if (all[i] >= r->ntok || seen[all[i]]++)
            run_die(r, "coherent all-gather (a token gathered twice or unknown)", MOE_EINVAL);
    if (total != r->ntok)
        run_die(r, "coherent all-gather (tokens missing)", MOE_EINVAL);
}

/* Rank 0 collects the final rows of every token (untimed) into r->out. */
static void gather_outputs(run_t *r)
{
    int G = r->G;
    size_t H = r->H, n = r->nloc;
    float *hx = run_hbuf(r, RUN_HS_ROWS, (n + 1) * (H + 1) * sizeof *hx);
    RUN_CK(r, r->b->ops->download(r->b, hx, r->x.p, n * H * sizeof *hx));
    /* token index appended after the rows, as float bits */
    uint32_t *tk = (uint32_t *)(hx + n * H);
    memcpy(tk, r->loc, n * sizeof *tk);
    size_t *c = run_hbuf(r, RUN_HS_COUNTS, 4 * (size_t)G * sizeof *c);
    double *cnt = run_hbuf(r, RUN_HS_SUMS, (size_t)G * sizeof *cnt);
    for (int p = 0; p < G; p++)
        cnt[p] = p == r->me ? (double)n : 0;
    RUN_CK(r, run_comm_allreduce(r->comm, cnt, G, MOE_RUN_SUM));
    size_t total = 0, bytes = (H + 1) * sizeof(float);
    for (int p = 0; p < G; p++) {
        c[p] = p == 0 ? n * bytes : 0;
        c[G + p] = 0;
        c[2 * G + p] = r->me == 0 ? (size_t)cnt[p] * bytes : 0;
        c[3 * G + p] = total * bytes;
        total += (size_t)cnt[p];
    }
    /* rows then ids do not interleave: send rows and ids as one block per rank */
    float *blk = run_hbuf(r, RUN_HS_BLOCK, (n + 1) * bytes);
    for (size_t i = 0; i < n; i++) {
        memcpy(blk + i * (H + 1), hx + i * H, H * sizeof *blk);
        memcpy(blk + i * (H + 1) + H, &tk[i], sizeof *tk);
    }
    float *all = r->me == 0 ? run_hbuf(r, RUN_HS_GATHER, (total + 1) * bytes) : NULL;
    RUN_CK(r, run_comm_alltoallv(r->comm, blk, c, c + G, all, c + 2 * G, c + 3 * G));
    if (r->me)
        return;
    free(r->out);
    r->out = calloc(r->ntok * H + 1, sizeof *r->out);
    if (!r->out)
        run_die(r, "output", MOE_ENOMEM);
    for (size_t i = 0; i < total; i++) {
        uint32_t t;
        memcpy(&t, all + i * (H + 1) + H, sizeof t);
        memcpy(r->out + (size_t)t * H, all + i * (H + 1), H * sizeof *r->out);
    }
}

/* Per-layer statistics: times are the slowest rank's, counts are summed. Rank-local copies
 * of the transfer counts are kept in r->st for the per-rank figures. */

void run_iterations(run_t *r)
{
    int total = r->cfg.warmup + r->cfg.iters;
    if (r->cfg.mode == MOE_RUN_PIPELINED ||
        (r->cfg.mode == MOE_RUN_HIERARCHICAL && r->cfg.chunks_set))
        r->chunks_used = r->cfg.chunks ? r->cfg.chunks : run_auto_chunks(r);
    const moe_run_backend_ops_t *o = r->b->ops;
    moe_run_backend_t *b = r->b;
    r->t_kern = o->kernel_seconds ? 0 : NAN;
    for (int it = 0; it < total; it++) {
        r->timing = it >= r->cfg.warmup;
        uint64_t a0 = b->allocs, s0;
        run_load_inputs(r);
        RUN_CK(r, o->barrier(b));
        double t0 = run_now(r), k0 = o->kernel_seconds ? o->kernel_seconds(b) : 0;
        s0 = b->syncs;
        if (r->cfg.mode == MOE_RUN_DATACENTRIC)
            run_dc_iter(r);
        else
            for (uint32_t l = 0; l < r->L; l++) {
                uint64_t c0[3];
                run_counts(r, c0);
                run_ep_layer(r, l);
                run_count_layer(r, l, c0); /* what the backend counted in the layer */
            }
        if (r->cfg.mode == MOE_RUN_COHERENT)
            coherent_allgather(r);
        RUN_CK(r, o->barrier(b));
        if (r->timing) {
            r->t_iter += run_now(r) - t0;
            if (o->kernel_seconds)
                r->t_kern += o->kernel_seconds(b) - k0;
            r->syncs_it += (double)(b->syncs - s0);
            r->allocs_timed += (double)(b->allocs - a0);
        } else {
            r->allocs_warm += (double)(b->allocs - a0);
        }
    }
    double t[5] = {r->t_iter, o->kernel_seconds ? r->t_kern : 0, r->syncs_it, r->allocs_warm,
                   r->allocs_timed};
    RUN_CK(r, run_comm_allreduce(r->comm, t, 5, MOE_RUN_MAX));
    r->t_iter = t[0];
    r->t_kern = o->kernel_seconds ? t[1] : NAN;
    r->syncs_it = t[2];
    r->allocs_warm = t[3];
    r->allocs_timed = t[4];
}

/* ------------------------------------------------------------------ reference */

/*
 * The serial vanilla reference on rank 0, one layer at a time in step with the distributed
 * verification iteration: the whole token stream, reference kernels, fp32. Each layer starts
 * from the distributed run's own state (its output of the layer before; the seeded tokens at
 * layer 0) and, with a computed gate, follows the distributed run's own routing, so that
 * rounding differences neither add up over the layers nor swap near-tied experts between the
 * two. The gate is checked on its own: each chosen expert's logit is within the tolerance of
 * the top K (a near-tie may go either way), and its weight is the softmax of the chosen
 * logits.
 */
struct run_ref {
    float *x, *m, *wg, *w, *y, *acc, *gw, *work;
    double *lg; /* the gate's logits of one token, then room for the K largest */
    int32_t *gi;
};

static void ref_free(struct run_ref *f)
{
    if (!f)
        return;
    free(f->x);
    free(f->m);
    free(f->wg);
    free(f->w);
    free(f->y);
    free(f->acc);
    free(f->gw);
    free(f->work);
    free(f->gi);
    free(f->lg);
    free(f);
}

static struct run_ref *ref_new(const run_t *r)
{
    size_t H = r->H, E = r->E, K = r->K;
    struct run_ref *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->x = malloc(r->ntok * H * sizeof *f->x);
    f->m = malloc(H * sizeof *f->m);
    f->wg = malloc(H * E * sizeof *f->wg);
    f->w = malloc(E * r->wn * sizeof *f->w);
    f->y = malloc(H * sizeof *f->y);
    f->acc = malloc(H * sizeof *f->acc);
    f->gw = malloc(K * sizeof *f->gw);
    f->work = malloc(moe_kern_ffn_work_size(r->F) * sizeof *f->work);
    f->gi = malloc(K * sizeof *f->gi);
    f->lg = malloc((E + K) * sizeof *f->lg);
    if (!f->x || !f->m || !f->wg || !f->w || !f->y || !f->acc || !f->gw || !f->work || !f->gi ||
        !f->lg) {
        ref_free(f);
        return NULL;
    }
    moe_kern_init_tokens(r->cfg.seed, 0, r->ntok, r->H, f->x);
    return f;
}

/* Check the distributed run's choice for token xt (mixed) against the gate's logits: the
 * relative amount by which a chosen expert falls short of the K-th largest logit, or its
 * weight misses the softmax of the chosen logits; 0 when the choice is a top K. */
static double ref_gate_err(const run_t *r, struct run_ref *f, const float *xt)
{
    size_t H = r->H, E = r->E, K = r->K;
    double scale = 1, sum = 0, err = 0, *top = f->lg + E; /* the K largest, descending */
    for (size_t e = 0; e < E; e++) {
        double v = 0;
        for (size_t h = 0; h < H; h++)
            v += (double)xt[h] * f->wg[h * E + e];
        f->lg[e] = v;
        scale = fmax(scale, fabs(v));
        size_t j = e < K ? e : K - 1; /* insert v unless it is below a full list's last */
        if (e >= K && !(v > top[K - 1]))
            continue;
        for (; j > 0 && v > top[j - 1]; j--)
            top[j] = top[j - 1];
        top[j] = v;
    }
    double kth = top[K - 1];
    for (size_t k = 0; k < K; k++) {
        if (f->gi[k] < 0 || (size_t)f->gi[k] >= E)
            return INFINITY;
        err = fmax(err, (kth - f->lg[f->gi[k]]) / scale);
    }
    double hi = f->lg[f->gi[0]];
    for (size_t k = 1; k < K; k++)
        hi = fmax(hi, f->lg[f->gi[k]]);
    for (size_t k = 0; k < K; k++)
        sum += exp(f->lg[f->gi[k]] - hi);
    for (size_t k = 0; k < K; k++)
        err = fmax(err, fabs(exp(f->lg[f->gi[k]] - hi) / sum - f->gw[k]));
    return isnan(err) ? INFINITY : err;
}

/* One token through layer l of the reference; 0 or a negative status. A computed gate's check
 * goes to *gate_err (the largest so far). */
static int ref_token(const run_t *r, struct run_ref *f, uint32_t l, size_t t, double *gate_err)
{
    size_t H = r->H, K = r->K, LK = (size_t)r->L * K;
    float *xt = f->x + t * H;
    moe_kern_mixer(xt, 1, r->H, f->m);
    if (r->replay) {
        for (size_t k = 0; k < K; k++) {
            uint16_t e = r->ids[t * LK + l * K + k];
            f->gi[k] = e == MOE_EXPERT_NONE ? -1 : e;
            f->gw[k] = r->wts[t * LK + l * K + k];
        }
    } else {
        for (size_t k = 0; k < K; k++) { /* the distributed run's routing */
            const double *c = r->chk_route + (t * K + k) * 2;
            f->gi[k] = (int32_t)c[0] - 1;
            f->gw[k] = (float)c[1];
        }
        *gate_err = fmax(*gate_err, ref_gate_err(r, f, xt));
    }
    if (f->gi[0] < 0)
        return 0;
    memset(f->acc, 0, H * sizeof *f->acc);
    for (size_t k = 0; k < K; k++) {
        const float *w1 = f->w + (size_t)f->gi[k] * r->wn;
        int rc = moe_kern_ffn(xt, 1, r->H, r->F, r->expert, w1, w1 + r->w1n, f->y, f->work);
        if (rc)
            return rc;
        for (size_t h = 0; h < H; h++)
            f->acc[h] += f->gw[k] * f->y[h];
    }
    for (size_t h = 0; h < H; h++)
        xt[h] += f->acc[h];
    return 0;
}

/* Run the reference through layer l and compare it with r->out: the largest over tokens of
 * max_h |out - ref| / max(1, max_h |ref|), and of the gate's check. Then the reference takes
 * r->out as the next layer's input. */
static double ref_layer(run_t *r, struct run_ref *f, uint32_t l)
{
    double gate_err = 0;
    size_t H = r->H;
    moe_kern_init_mixer(r->cfg.seed, l, r->E, r->H, f->m);
    moe_kern_init_gate(r->cfg.seed, l, r->E, r->H, f->wg);
    for (uint32_t e = 0; e < r->E; e++)
        moe_kern_init_expert(r->cfg.seed, l, e, r->E, r->H, r->F, r->expert, f->w + e * r->wn,
                             f->w + e * r->wn + r->w1n);
    for (size_t t = 0; t < r->ntok; t++) {
        int rc = ref_token(r, f, l, t, &gate_err);
        if (rc)
            run_die(r, "reference", rc);
    }
    /* per token: the largest difference over the largest magnitude of its reference row (at
     * least 1), so that a token's small components are measured on the scale of the token */
    double err = 0;
    for (size_t t = 0; t < r->ntok; t++) {
        const float *o = r->out + t * H, *x = f->x + t * H;
        double d = 0, m = 1;
        for (size_t h = 0; h < H; h++) {
            if (!isfinite(o[h]) || !isfinite(x[h])) { /* a diverged run never passes */
                d = INFINITY;
                break;
            }
            d = fmax(d, fabs((double)o[h] - x[h]));
            m = fmax(m, fabs((double)x[h]));
        }
        err = fmax(err, d / m);
    }
    memcpy(f->x, r->out, r->ntok * H * sizeof *f->x);
    return fmax(err, gate_err);
}

/* End of layer l of the verification iteration: compare it with the reference. */
static void layer_done(run_t *r, uint32_t l)
{
    gather_outputs(r);
    size_t n = r->ntok * r->K * 2;
    if (r->chk_route) /* each token's routing, from the rank that routed it, to rank 0 */
        RUN_CK(r, run_comm_allreduce(r->comm, r->chk_route, (int)n, MOE_RUN_SUM));
    if (r->me == 0)
        r->layer_err[l] = ref_layer(r, r->ref, l);
    if (r->chk_route)
        memset(r->chk_route, 0, n * sizeof *r->chk_route);
}

double run_check(run_t *r)
{
    r->layer_err = calloc(r->L, sizeof *r->layer_err);
    if (!r->replay)
        r->chk_route = calloc(r->ntok * r->K * 2 + 1, sizeof *r->chk_route);
    if (!r->layer_err || (r->me == 0 && !(r->ref = ref_new(r))) || (!r->replay && !r->chk_route))
        run_die(r, "--check", MOE_ENOMEM);
    r->timing = 0;
    r->layer_done = layer_done;
    run_load_inputs(r);
    if (r->cfg.mode == MOE_RUN_DATACENTRIC)
        run_dc_iter(r);
    else
        for (uint32_t l = 0; l < r->L; l++) {
            run_ep_layer(r, l);
            layer_done(r, l);
        }
    r->layer_done = NULL;
    double err = 0;
    for (uint32_t l = 0; r->me == 0 && l < r->L; l++)
        if (!(r->layer_err[l] <= err))
            err = r->layer_err[l];
    ref_free(r->ref);
    r->ref = NULL;
    free(r->chk_route);
    r->chk_route = NULL;
    return err;
}

/* ------------------------------------------------------------------ pipelined: chunk count */

void run_measure_rates(run_t *r, double *v)
{
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    size_t *c = run_hbuf(r, RUN_HS_COUNTS, 4 * (size_t)G * sizeof *c);
    size_t msg = (size_t)1 << 20, per = msg / (size_t)G;
    void *s = run_dbuf(r, &r->d[RUN_DS_SEND], msg + 1);
    void *d = run_dbuf(r, &r->d[RUN_DS_RECV], msg + 1);
    double t[2];
    for (int k = 0; k < 2; k++) {
        size_t each = k ? per : 0;
        for (int p = 0; p < G; p++) {
            c[p] = c[2 * G + p] = each;
            c[G + p] = c[3 * G + p] = (size_t)p * each;
        }
        RUN_CK(r, o->barrier(r->b));
        double t0 = run_now(r);
        for (int i = 0; i < 5; i++)
            RUN_CK(r, o->alltoallv(r->b, s, c, c + G, d, c + 2 * G, c + 3 * G));
        t[k] = (run_now(r) - t0) / 5;
    }
    /* FFN rate on 64 rows of a fresh expert: one warm-up call (a GPU's first call sets up
     * its libraries and buffers), then the best of three */
    size_t H = r->H, bytes = (128 * H + r->wn) * sizeof(float);
    float *x = run_dbuf(r, &r->d[RUN_DS_WORK], bytes);
    RUN_CK(r, o->zero(r->b, x, bytes));
    const float *W1[1] = {x + 128 * H}, *W2[1] = {x + 128 * H + r->w1n};
    size_t off[2] = {0, 64};
    double per_pair = INFINITY;
    for (int i = 0; i < 4; i++) {
        double t0 = run_now(r);
        RUN_CK(r, o->ffn_grouped(r->b, x, 1, off, r->H, r->F, r->expert, W1, W2, x + 64 * H));
        if (i > 0)
            per_pair = fmin(per_pair, (run_now(r) - t0) / 64);
    }
    v[0] = t[0];
    v[1] = t[1] > t[0] ? (double)msg / (t[1] - t[0]) : 1e9;
    v[2] = per_pair;
    RUN_CK(r, run_comm_allreduce(r->comm, v, 3, MOE_RUN_MAX));
}

/*
 * auto: a two-stage pipeline of n chunks takes about
 *     T(n) = n * a + D/n + C/n + (n - 1) * max(D, C)/n
 * with a the fixed cost of one all-to-all (latency, measured here with empty all-to-alls),
 * D the dispatch time of the whole layer (bytes over the measured bandwidth of a 1 MiB
 * all-to-all) and C its compute time (expert FFN rate measured on this rank). n = 1..16 with
 * the least T wins. Where the CPU backend's ranks on some machine outnumber its processors,
 * a transfer is a copy by the processors the compute needs: nothing overlaps,
 * T(n) = n * a + D + C, and 1 wins (every rank decides alike: the test is all-reduced).
 */
uint32_t run_auto_chunks(run_t *r)
{
    double v[3], shared[1];
    long procs = sysconf(_SC_NPROCESSORS_ONLN);
    shared[0] = strcmp(r->b->name, "cpu") == 0 && procs > 0 &&
                moe_run_comm_local_size(r->comm) > procs;
    RUN_CK(r, run_comm_allreduce(r->comm, shared, 1, MOE_RUN_MAX));
    if (shared[0] > 0) {
        if (r->me == 0)
            moe_log(MOE_LOG_INFO, "--chunks auto: 1 (ranks outnumber the processors: transfers "
                                  "cannot overlap compute)");
        return 1;
    }
    run_measure_rates(r, v);
    size_t H = r->H;
    int G = r->G;
    double rows = (double)r->ntok / G * r->K, D = rows * H * r->esz / v[1], C = rows * v[2];
    uint32_t best = 1;
    double bt = 0;
    for (uint32_t n = 1; n <= 16; n++) {
        double T = n * v[0] + D / n + C / n + (n - 1) * fmax(D, C) / n;
        if (n == 1 || T < bt) {
            bt = T;
            best = n;
        }
    }
    return best;
}
