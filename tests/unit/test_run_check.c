/* tests/unit/test_run_check.c -- moe-run's --check on one rank: the per-layer reference that
 * follows the run's own state and routing passes a computed bf16 gate at a realistic size
 * (64 experts, top 6, where near-tied experts swap between two computations), and fails each
 * fault a backend can make: a wrong expert output, a weight that is not the gate's softmax, an
 * expert outside the gate's top K. The faults come from a wrapper around the CPU backend. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/run.h"
#include "moe/run_backend.h"
#include "unit.h"

/* Under LeakSanitizer, what Open MPI's initialisation keeps is suppressed by its frames
 * (tests/lsan.supp), which need the slow unwinder and MPI's plugins left loaded, as
 * tests/cli/run_lib.sh arranges for moe-run. LeakSanitizer reads this hook at start-up. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "fast_unwind_on_malloc=0";
}

enum fault {
    FAULT_NONE, FAULT_FFN, FAULT_WEIGHT, FAULT_EXPERT,
    FAULT_LOSS_NEG, FAULT_LOSS_DOUBLE, FAULT_UPDATE_SIGN, FAULT_UPDATE_LR, /* training */
};

static enum fault fault;
static const moe_run_backend_ops_t *cpu_ops;
static moe_run_backend_ops_t faulty_ops;

/* The first row of the first non-empty group comes out 1.0 too large in its first value. */
static int faulty_ffn(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off,
                      uint32_t H, uint32_t F, int expert, const float *const *W1,
                      const float *const *W2, float *y)
{
    int rc = cpu_ops->ffn_grouped(b, x, G, off, H, F, expert, W1, W2, y);
    if (rc == 0 && fault == FAULT_FFN && off[G] > off[0])
        y[off[0] * H] += 1.0f;
    return rc;
}

/* Row 0's routing: the first and last weights swapped (the largest weight on the smallest
 * logit), or its last choice replaced by the expert of the smallest logit. */
static int faulty_gate(moe_run_backend_t *b, const float *x, size_t n, uint32_t H, const float *Wg,
                       uint32_t E, uint32_t K, int32_t *ids, float *w)
{
    int rc = cpu_ops->gate(b, x, n, H, Wg, E, K, ids, w);
    if (rc || n == 0 || K < 2)
        return rc;
    if (fault == FAULT_WEIGHT) {
        float t = w[0];
        w[0] = w[K - 1];
        w[K - 1] = t;
    } else if (fault == FAULT_EXPERT) {
        int32_t all[256];
        float aw[256];
        if (E > 256 || (rc = cpu_ops->gate(b, x, 1, H, Wg, E, E, all, aw)) != 0)
            return rc ? rc : MOE_EINVAL;
        ids[K - 1] = all[E - 1];
    }
    return 0;
}

/* The loss's gradient negated or doubled (gradient ascent, a factor lost or added). */
static int faulty_loss(moe_run_backend_t *b, const float *y, const float *t, size_t n,
                       uint32_t H, double scale, float *dy, double *sum)
{
    int rc = cpu_ops->loss_grad(b, y, t, n, H, scale, dy, sum);
    float f = fault == FAULT_LOSS_NEG ? -1.0f : fault == FAULT_LOSS_DOUBLE ? 2.0f : 1.0f;
    for (size_t i = 0; rc == 0 && f != 1.0f && i < n * H; i++)
        dy[i] *= f;
    return rc;
}

/* A wrong update: up the gradient instead of down, or at twice the learning rate. */
static int faulty_update(moe_run_backend_t *b, int adam, int t, float lr, float *w,
                         const float *g, float *m, float *v, size_t n)
{
    if (fault == FAULT_UPDATE_SIGN)
        lr = -lr;
    else if (fault == FAULT_UPDATE_LR)
        lr *= 2;
    return cpu_ops->update(b, adam, t, lr, w, g, m, v, n);
}

/* One training step (fp32, the computed gate) and --train --check's verdict, the difference
 * in *err. */
static int train_once(moe_run_backend_t *b, int mode, int optimizer, double *err)
{
    moe_run_cfg_t c;
    moe_run_cfg_default(&c);
    c.mode = mode;
    c.optimizer = optimizer;
    c.train = 1;
    c.L = 2, c.E = 8, c.K = 2, c.H = 32, c.F = 32;
    c.tokens_per_rank = 64;
    c.iters = 1, c.warmup = 0;
    c.check = 1;
    char errbuf[256];
    double tol = 0;
    moe_run_t *r = moe_run_new(&c, b);
    int ok = r ? moe_run_setup(r, errbuf, sizeof errbuf) : -1;
    CHECK_EQ_INT(ok, 0);
    if (ok == 0 && (ok = moe_run_iterations(r)) == 0)
        ok = moe_run_check(r, err, &tol);
    moe_run_free(r);
    return ok;
}

/* --train --check at one step passes the faultless run and fails each planted training bug,
 * in every mode and with either optimizer: the per-layer references alone, fed with the run's
 * own output gradient and updates, would pass them all. */
static void training_faults(moe_run_backend_t *b)
{
    static const int modes[] = {MOE_RUN_VANILLA, MOE_RUN_COHERENT, MOE_RUN_PIPELINED,
                                MOE_RUN_HIERARCHICAL, MOE_RUN_DATACENTRIC};
    static const enum fault faults[] = {FAULT_NONE, FAULT_LOSS_NEG, FAULT_LOSS_DOUBLE,
                                        FAULT_UPDATE_SIGN, FAULT_UPDATE_LR};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        for (int opt = MOE_RUN_SGD; opt <= MOE_RUN_ADAM; opt++)
            for (size_t f = 0; f < sizeof faults / sizeof *faults; f++) {
                fault = faults[f];
                double err = -1;
                int v = train_once(b, modes[i], opt, &err);
                if (v != (fault == FAULT_NONE))
                    fprintf(stderr, "training, mode %s, %s, fault %d: verdict %d, difference "
                            "%g\n", moe_run_mode_name(modes[i]), moe_run_optimizer_name(opt),
                            (int)fault, v, err);
                CHECK_EQ_INT(v, fault == FAULT_NONE);
                CHECK(fault == FAULT_NONE ? err < 1e-5 : err > 1e-3);
            }
    fault = FAULT_NONE;
}

/* A run of the computed gate in bf16 at a size where near-ties occur; returns moe_run_check's
 * verdict with the difference in *err. */
static int run_once(moe_run_backend_t *b, int mode, double *err)
{
    moe_run_cfg_t c;
    moe_run_cfg_default(&c);
    c.mode = mode;
    c.L = 3, c.E = 64, c.K = 6, c.H = 128, c.F = 64;
    c.tokens_per_rank = 256;
    c.dtype = MOE_DTYPE_BF16;
    c.iters = 0, c.warmup = 0;
    c.check = 1;
    char errbuf[256];
    double tol = 0;
    moe_run_t *r = moe_run_new(&c, b);
    CHECK(r != NULL);
    if (!r)
        return -1;
    int ok = moe_run_setup(r, errbuf, sizeof errbuf);
    CHECK_EQ_INT(ok, 0);
    if (ok == 0)
        ok = moe_run_check(r, err, &tol);
    CHECK(tol > 0 && tol < 0.05);
    moe_run_free(r);
    return ok;
}

/* Settings that exclude each other are refused by the library's set-up, not only by moe-run's
 * options (moe_run_cfg_conflict). */
static void conflicting_settings(moe_run_backend_t *b)
{
    moe_run_cfg_t c;
    moe_run_cfg_default(&c);
    c.chunks = 2, c.chunks_set = 1; /* vanilla is not chunked */
    CHECK_STR(moe_run_cfg_conflict(&c), "--chunks applies to pipelined and hierarchical mode");
    moe_run_t *r = moe_run_new(&c, b);
    char errbuf[256] = "";
    CHECK(r && moe_run_setup(r, errbuf, sizeof errbuf) == 1 && strstr(errbuf, "--chunks"));
    moe_run_free(r);
    c.mode = MOE_RUN_PIPELINED;
    CHECK(moe_run_cfg_conflict(&c) == NULL);
    c.reuse = MOE_REUSE_S1; /* not training */
    CHECK(moe_run_cfg_conflict(&c) != NULL);
    c.train = 1;
    CHECK(moe_run_cfg_conflict(&c) == NULL);
}

int main(int argc, char **argv)
{
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 0);
    moe_run_comm_t *comm = moe_run_comm_init(&argc, &argv);
    CHECK(comm != NULL);
    if (!comm)
        return unit_done("test_run_check");
    char errbuf[256];
    moe_run_backend_t *b = moe_run_backend_cpu(comm, errbuf, sizeof errbuf);
    CHECK(b != NULL);
    if (!b)
        return unit_done("test_run_check");
    conflicting_settings(b);
    cpu_ops = b->ops;
    faulty_ops = *cpu_ops;
    faulty_ops.ffn_grouped = faulty_ffn;
    faulty_ops.gate = faulty_gate;
    faulty_ops.loss_grad = faulty_loss;
    faulty_ops.update = faulty_update;
    b->ops = &faulty_ops;
    training_faults(b);

    static const int modes[] = {MOE_RUN_VANILLA, MOE_RUN_COHERENT, MOE_RUN_DATACENTRIC};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        double err = -1;
        fault = FAULT_NONE;
        CHECK_EQ_INT(run_once(b, modes[i], &err), 1);
        CHECK(err >= 0 && err < 0.01);
        static const enum fault faults[] = {FAULT_FFN, FAULT_WEIGHT, FAULT_EXPERT};
        for (size_t f = 0; f < sizeof faults / sizeof *faults; f++) {
            fault = faults[f];
            err = -1;
            int v = run_once(b, modes[i], &err);
            if (v != 0)
                fprintf(stderr, "mode %s, fault %d: verdict %d, difference %g\n",
                        moe_run_mode_name(modes[i]), (int)fault, v, err);
            CHECK_EQ_INT(v, 0);
            CHECK(err > 0.05);
        }
    }
    b->ops = cpu_ops;
    b->ops->destroy(b);
    moe_run_comm_finalize(comm);
    return unit_done("test_run_check");
}
