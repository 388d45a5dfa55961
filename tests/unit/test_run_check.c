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

enum fault { FAULT_NONE, FAULT_FFN, FAULT_WEIGHT, FAULT_EXPERT };

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
    b->ops = &faulty_ops;

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
