/* run/run_api.c -- moe/run.h: the runtime's entry points. Each one arms the run's fatal-error
 * jump (run_die), so that a failure deep inside a collective step comes back to the caller as
 * a status and a message instead of ending the process. */
#include "config.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "run_iter_internal.h"
#include "run_report_internal.h"
#include "run_train_internal.h"

int moe_run_comm_max(moe_run_comm_t *c, int v)
{
    double d = v;
    if (run_comm_allreduce(c, &d, 1, MOE_RUN_MAX))
        return v ? v : 1;
    return (int)d;
}

moe_run_t *moe_run_new(const moe_run_cfg_t *cfg, moe_run_backend_t *b)
{
    moe_run_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->cfg = *cfg;
    r->b = b;
    r->comm = b->comm;
    r->check_err = -1;
    r->check_ok = 1;
    return r;
}

void moe_run_free(moe_run_t *r)
{
    if (!r)
        return;
    run_release(r);
    free(r);
}

const char *moe_run_errmsg(const moe_run_t *r)
{
    return r->errmsg;
}

/* ARM(r): the entry point's landing place for run_die. The functions below call one inner
 * function after it and keep no local state across it (setjmp's rule for locals). */
#define ARM(r)                                                                                 \
    do {                                                                                       \
        if (setjmp((r)->fatal))                                                                \
            return (r)->fatal_status;                                                          \
    } while (0)

int moe_run_setup(moe_run_t *r, char *errbuf, size_t errlen)
{
    ARM(r);
    return run_setup(r, errbuf, errlen);
}

int moe_run_iterations(moe_run_t *r)
{
    ARM(r);
    if (r->cfg.train)
        run_train_iterations(r);
    else
        run_iterations(r);
    return 0;
}

/* --check's tolerance: the rounding of the wire type. */
static double tolerance(const moe_run_t *r)
{
    return r->cfg.dtype == MOE_DTYPE_FP32 ? 1e-4 : 2e-2;
}

/* moe_run_check's collective part: the verification iteration and the agreed verdict. */
static void check(moe_run_t *r)
{
    double tol = tolerance(r);
    r->check_err = r->cfg.train ? run_train_check(r) : run_check(r);
    double bad = r->me == 0 && !(r->check_err <= tol);
    RUN_CK(r, run_comm_allreduce(r->comm, &bad, 1, MOE_RUN_MAX));
    r->check_ok = bad == 0;
}

int moe_run_check(moe_run_t *r, double *err, double *tol)
{
    *tol = tolerance(r);
    ARM(r);
    check(r);
    *err = r->check_err;
    return r->check_ok;
}

int moe_run_report(moe_run_t *r, FILE *fp)
{
    ARM(r);
    return run_report(r, fp, r->check_err, r->check_ok);
}

int moe_run_report_json(moe_run_t *r, const char *path, char *errbuf, size_t errlen)
{
    ARM(r);
    return run_report_json(r, path, r->check_err, r->check_ok, errbuf, errlen);
}

int moe_run_calibrate(moe_run_t *r, const char *out, char *errbuf, size_t errlen)
{
    ARM(r);
    return run_calibrate(r, out, errbuf, errlen);
}

int moe_run_rank(const moe_run_t *r)
{
    return r->b->rank;
}
