/* tests/unit/test_run_guard.c -- the guard backend (guard_backend.h: the CPU backend under a
 * GPU's memory rules) catches each way of breaking those rules: the runtime touching backend
 * memory itself ends the process, an operation given host memory or an extent past a buffer
 * refuses it; the CPU backend's training operations are the reference kernels bit for bit;
 * and moe-run's training on one rank, every mode, trains through it without a
 * violation, its backward computing through the backend's training operations (counted), to
 * the CPU backend's losses bit for bit. tests/cli/run_guard.sh runs every mode on four ranks
 * through it. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/run.h"
#include "moe/run_backend.h"
#include "guard_backend.h"
#include "run/run_internal.h" /* the losses, as doubles, to compare them bit for bit */
#include "unit.h"

/* Under LeakSanitizer, what Open MPI's initialisation keeps is suppressed by its frames
 * (tests/lsan.supp), which need the slow unwinder and MPI's plugins left loaded, as
 * tests/cli/run_lib.sh arranges for moe-run. LeakSanitizer reads this hook at start-up. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "fast_unwind_on_malloc=0";
}

/* A child that writes into a buffer of the guard outside its operations: it must end with the
 * guard's status 3 (the store faults), not 0. */
static void touch_outside(void)
{
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        int argc = 1;
        char *args[] = {(char *)"test_run_guard", NULL}, **argv = args;
        moe_run_comm_t *comm = moe_run_comm_init(&argc, &argv);
        char errbuf[256];
        moe_run_backend_t *b = comm ? guard_backend(comm, errbuf, sizeof errbuf) : NULL;
        float *x = b ? b->ops->alloc(b, 64) : NULL;
        if (!x)
            _exit(2);
        *(volatile float *)x = 1.0f;
        _exit(0);
    }
    int st = 0;
    CHECK(p > 0 && waitpid(p, &st, 0) == p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3);
}

/* Operations given host memory where backend memory belongs, or an extent past a buffer (or
 * the other way round), refuse it. */
static void refusals(moe_run_backend_t *b)
{
    const moe_run_backend_ops_t *o = b->ops;
    float host[16] = {0};
    float *d = o->alloc(b, 16 * sizeof *d), *m = o->alloc(b, 4 * sizeof *m);
    CHECK(d && m && guard_owns(d) && !guard_owns(host));
    uint64_t v0 = guard_counts()->violations;
    CHECK_EQ_INT(o->zero(b, d, 16 * sizeof *d), 0);
    CHECK_EQ_INT(o->zero(b, m, 4 * sizeof *m), 0);
    CHECK_EQ_INT(o->mixer(b, d, 4, 4, m), 0);
    CHECK_EQ_INT(guard_counts()->violations, v0);
    CHECK_EQ_INT(o->mixer(b, host, 4, 4, m), MOE_EINVAL);          /* host rows */
    CHECK_EQ_INT(o->mixer(b, d, 5, 4, m), MOE_EINVAL);             /* past the buffer */
    CHECK_EQ_INT(o->upload(b, d, m, 4 * sizeof *m), MOE_EINVAL);   /* from backend memory */
    CHECK_EQ_INT(o->download(b, d, m, 4 * sizeof *m), MOE_EINVAL); /* into backend memory */
    CHECK_EQ_INT(o->loss_grad(b, d, host, 1, 4, 1.0, d, (double *)host), MOE_EINVAL);
    float *const gt[1] = {m};
    const float *const wt[1] = {host};
    size_t off[2] = {0, 1};
    CHECK_EQ_INT(o->ffn_backward_grouped(b, d, NULL, 1, off, 4, 2, MOE_EXPERT_SILU, wt, wt, d,
                                         NULL, d, gt, gt, NULL),
                 MOE_EINVAL); /* host weights in the table */
    CHECK_EQ_INT(guard_counts()->violations, v0 + 6);
    o->free(b, d);
    o->free(b, m);
}

/* n values of a seeded stream in [-1, 1). */
static float *values(size_t n, uint64_t seed)
{
    float *v = malloc((n + 1) * sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = (float)((double)(moe_hash64(seed, i) >> 11) * 0x1p-52 - 1.0);
    return v;
}

/* Whether a[0..n) is the reference r: bit for bit where the backend runs the reference
 * kernels, within fp32 rounding of a reordered sum where its FFN is a CBLAS sgemm
 * (HAVE_CBLAS: lib/run/kern_blas.c sums the same products in the BLAS's order). */
static int same(const float *a, const float *r, size_t n)
{
#ifdef HAVE_CBLAS
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - r[i]) <= 1e-5f * (1.0f + fabsf(r[i]))))
            return 0;
    return 1;
#else
    return memcmp(a, r, n * sizeof *a) == 0;
#endif
}

/* The CPU backend's training operations are the reference kernels (see same()): the mixer's
 * and the gate's backward, and the grouped FFN backward as one moe_kern_ffn_backward_scaled
 * per group (groups of 5, 0 and 19 rows after 2 rows of none, gradients accumulated onto
 * non-zero values, a kept and a recomputed T_M). */
static void cpu_ops_match(moe_run_backend_t *b)
{
    const moe_run_backend_ops_t *o = b->ops;
    const uint32_t H = 12, F = 10, E = 6, K = 2, G = 3;
    const size_t n = 26, off[4] = {2, 7, 7, 26};
    for (int ex = MOE_EXPERT_SWIGLU; ex <= MOE_EXPERT_SILU; ex++) {
        const size_t C = moe_kern_w1_cols(F, ex), HC = H * C, FH = (size_t)F * H;
        float *x = values(n * H, 1), *a = values(n * C, 2), *dy = values(n * H, 3);
        float *s = values(n, 4), *w1 = values(G * HC, 5), *w2 = values(G * FH, 6);
        float *dx = values(n * H, 7), *ds = values(n, 8), *g = values(G * (HC + FH), 9);
        float *rdx = values(n * H, 7), *rds = values(n, 8), *rg = values(G * (HC + FH), 9);
        for (int kept = 0; kept < 2; kept++) {
            const float *t1[3], *t2[3];
            float *d1[3], *d2[3];
            for (uint32_t q = 0; q < G; q++) {
                t1[q] = w1 + q * HC;
                t2[q] = w2 + q * FH;
                d1[q] = g + q * (HC + FH);
                d2[q] = d1[q] + HC;
                size_t r0 = off[q], m = off[q + 1] - r0;
                if (m)
                    CHECK_EQ_INT(moe_kern_ffn_backward_scaled(
                                     x + r0 * H, kept ? a + r0 * C : NULL, m, H, F, ex, t1[q],
                                     t2[q], dy + r0 * H, s + r0, rdx + r0 * H,
                                     rg + q * (HC + FH), rg + q * (HC + FH) + HC, rds + r0,
                                     NULL),
                                 0);
            }
            CHECK_EQ_INT(o->ffn_backward_grouped(b, x, kept ? a : NULL, G, off, H, F, ex, t1,
                                                 t2, dy, s, dx, d1, d2, ds),
                         0);
            CHECK(same(dx, rdx, n * H));
            CHECK(same(ds, rds, n));
            CHECK(same(g, rg, G * (HC + FH)));
        }
        free(x), free(a), free(dy), free(s), free(w1), free(w2), free(dx), free(ds), free(g);
        free(rdx), free(rds), free(rg);
    }
    float *x = values(n * H, 10), *m = values(H, 11), *dy = values(n * H, 12);
    float *dx = values(n * H, 13), *dm = values(H, 14), *rdx = values(n * H, 13);
    float *rdm = values(H, 14), *wg = values((size_t)H * E, 15), *w = values(n * K, 16);
    float *dw = values(n * K, 17), *dwg = values((size_t)H * E, 18);
    float *rdwg = values((size_t)H * E, 18);
    int32_t ids[26 * 2];
    for (size_t i = 0; i < n * K; i++)
        ids[i] = (int32_t)((i * 5 + i / K) % E);
    ids[3 * K] = -1; /* a missing cell */
    moe_kern_mixer_backward(x, n, H, m, dy, rdx, rdm);
    CHECK_EQ_INT(o->mixer_backward(b, x, n, H, m, dy, dx, dm), 0);
    CHECK(memcmp(dx, rdx, n * H * sizeof *dx) == 0 && memcmp(dm, rdm, H * sizeof *dm) == 0);
    moe_kern_gate_backward(x, n, H, wg, E, K, ids, w, dw, rdx, rdwg);
    CHECK_EQ_INT(o->gate_backward(b, x, n, H, wg, E, K, ids, w, dw, dx, dwg), 0);
    CHECK(memcmp(dx, rdx, n * H * sizeof *dx) == 0);
    CHECK(memcmp(dwg, rdwg, (size_t)H * E * sizeof *dwg) == 0);
    float *p[] = {x, m, dy, dx, dm, rdx, rdm, wg, w, dw, dwg, rdwg};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

/* A training run of `mode` on backend b, two steps and --check; the losses to l[2]. Returns
 * the check's verdict (1 passed). */
static int train(moe_run_backend_t *b, int mode, int optimizer, double l[2])
{
    moe_run_cfg_t c;
    moe_run_cfg_default(&c);
    c.mode = mode;
    c.optimizer = optimizer;
    c.train = 1;
    c.L = 2, c.E = 4, c.K = 2, c.H = 16, c.F = 12;
    c.tokens_per_rank = 32;
    c.iters = 2, c.warmup = 0;
    c.check = 1;
    if (mode == MOE_RUN_PIPELINED)
        c.chunks = 2, c.chunks_set = 1;
    char errbuf[256] = "";
    double err = -1, tol = 0;
    moe_run_t *r = moe_run_new(&c, b);
    int ok = r ? moe_run_setup(r, errbuf, sizeof errbuf) : -1;
    if (ok)
        fprintf(stderr, "set-up: %s\n", errbuf);
    CHECK_EQ_INT(ok, 0);
    if (ok == 0 && (ok = moe_run_iterations(r)) == 0) {
        ok = moe_run_check(r, &err, &tol);
        memcpy(l, r->train.losses, 2 * sizeof *l);
    } else if (r) {
        fprintf(stderr, "%s\n", moe_run_errmsg(r));
    }
    moe_run_free(r);
    return ok;
}

int main(int argc, char **argv)
{
    touch_outside();
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 0);
    moe_run_comm_t *comm = moe_run_comm_init(&argc, &argv);
    CHECK(comm != NULL);
    if (!comm)
        return unit_done("test_run_guard");
    char errbuf[256];
    moe_run_backend_t *g = guard_backend(comm, errbuf, sizeof errbuf);
    moe_run_backend_t *cpu = moe_run_backend_cpu(comm, errbuf, sizeof errbuf);
    CHECK(g != NULL && cpu != NULL);
    if (!g || !cpu)
        return unit_done("test_run_guard");
    refusals(g);
    cpu_ops_match(cpu);
    uint64_t v0 = guard_counts()->violations;
    for (int mode = 0; mode < MOE_RUN_MODES; mode++)
        for (int opt = MOE_RUN_SGD; opt <= MOE_RUN_ADAM; opt++) {
            guard_counts_t c0 = *guard_counts();
            double lg[2] = {0, 0}, lc[2] = {1, 1};
            CHECK_EQ_INT(train(g, mode, opt, lg), 1);
            const guard_counts_t *c = guard_counts();
            /* the backward's arithmetic went through the backend's operations */
            CHECK(c->mixer_backward > c0.mixer_backward);
            CHECK(c->gate_backward > c0.gate_backward);
            CHECK(c->ffn_backward_grouped > c0.ffn_backward_grouped);
            CHECK(c->loss_grad > c0.loss_grad && c->update > c0.update);
            /* pipelined mode keeps T_M (--reuse none): the forward wrote it on the backend */
            CHECK(mode != MOE_RUN_PIPELINED || c->ffn_grouped_act > c0.ffn_grouped_act);
            CHECK_EQ_INT(train(cpu, mode, opt, lc), 1);
            CHECK(memcmp(lg, lc, sizeof lg) == 0);
            if (memcmp(lg, lc, sizeof lg))
                fprintf(stderr, "mode %s: guard losses %.17g %.17g, cpu %.17g %.17g\n",
                        moe_run_mode_name(mode), lg[0], lg[1], lc[0], lc[1]);
        }
    CHECK_EQ_INT(guard_counts()->violations, v0);
    g->ops->destroy(g);
    cpu->ops->destroy(cpu);
    moe_run_comm_finalize(comm);
    return unit_done("test_run_guard");
}
