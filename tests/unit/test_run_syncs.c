/* tests/unit/test_run_syncs.c -- the host's waits for the device in moe-run's steady state,
 * without a GPU: the runtime drives a counting backend, the CPU backend under a table of
 * operations that counts the waits as the CUDA backend's rules make them (kernels/run_cuda.cu,
 * its opening comment: a download, a sync or a barrier waits, an upload, a kernel or an NCCL
 * all-to-all does not, a wait with nothing issued since the last one is none; with --comm mpi
 * each all-to-all waits once), for both transports. Each mode's report must then show, per
 * layer of a timed iteration, at most one wait for the gate's routing (once a layer, which
 * a layer without an all-to-all still needs) and one for each dispatch's metadata (read
 * back once its rows landed) with NCCL, with MPI staging also one per all-to-all, and no
 * device allocation. The same
 * backend without phase marks (the runtime then times each phase with sync + now) waits more
 * often than it has all-to-alls: the check can fail. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static const moe_run_backend_ops_t *cpu;
static moe_run_backend_ops_t counting;

/* The model of the CUDA backend's compute stream: work issued, and how much of it the last
 * wait saw; whether the phase marks have their origin; transport MPI or NCCL. */
static struct {
    uint64_t issued, waited;
    int based, mpi;
} m;

/* The CPU backend counts its own downloads and syncs: its counters are set back, and the
 * model's rules count instead. */
#define INNER(b, call)                                                                        \
    do {                                                                                      \
        uint64_t s_ = (b)->syncs;                                                             \
        int rc_ = (call);                                                                     \
        (b)->syncs = s_;                                                                      \
        if (rc_)                                                                              \
            return rc_;                                                                       \
    } while (0)

static void cs_wait(moe_run_backend_t *b)
{
    if (m.issued == m.waited)
        return;
    b->syncs++;
    m.waited = m.issued;
}

static int c_upload(moe_run_backend_t *b, void *d, const void *s, size_t n)
{
    INNER(b, cpu->upload(b, d, s, n));
    m.issued++;
    return 0;
}

static int c_download(moe_run_backend_t *b, void *d, const void *s, size_t n)
{
    INNER(b, cpu->download(b, d, s, n));
    m.issued++;
    cs_wait(b);
    return 0;
}

static int c_copy(moe_run_backend_t *b, void *d, const void *s, size_t n)
{
    INNER(b, cpu->copy(b, d, s, n));
    m.issued++;
    return 0;
}

static int c_zero(moe_run_backend_t *b, void *d, size_t n)
{
    INNER(b, cpu->zero(b, d, n));
    m.issued++;
    return 0;
}

static int c_mixer(moe_run_backend_t *b, float *x, size_t n, uint32_t H, const float *mx)
{
    INNER(b, cpu->mixer(b, x, n, H, mx));
    m.issued++;
    return 0;
}

static int c_gate(moe_run_backend_t *b, const float *x, size_t n, uint32_t H, const float *Wg,
                  uint32_t E, uint32_t K, int32_t *ids, float *w)
{
    INNER(b, cpu->gate(b, x, n, H, Wg, E, K, ids, w));
    m.issued++;
    return 0;
}

static int c_gather(moe_run_backend_t *b, const float *src, const uint32_t *idx, size_t n,
                    uint32_t H, float *dst)
{
    INNER(b, cpu->gather(b, src, idx, n, H, dst));
    m.issued++;
    return 0;
}

static int c_scatter(moe_run_backend_t *b, const float *y, const uint32_t *idx, const float *w,
                     size_t n, uint32_t H, float *out)
{
    INNER(b, cpu->scatter_add(b, y, idx, w, n, H, out));
    m.issued++;
    return 0;
}

static int c_ffn(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off,
                 uint32_t H, uint32_t F, int ex, const float *const *W1, const float *const *W2,
                 float *y)
{
    INNER(b, cpu->ffn_grouped(b, x, G, off, H, F, ex, W1, W2, y));
    m.issued++;
    return 0;
}

static int c_pack(moe_run_backend_t *b, const float *src, size_t n, int dt, void *dst)
{
    INNER(b, cpu->pack(b, src, n, dt, dst));
    m.issued++;
    return 0;
}

static int c_unpack(moe_run_backend_t *b, const void *src, size_t n, int dt, float *dst)
{
    INNER(b, cpu->unpack(b, src, n, dt, dst));
    m.issued++;
    return 0;
}

/* NCCL: the compute stream waits for the NCCL stream (work issued, no host wait); MPI: the
 * send rows to the host (a wait), the received ones back (issued). */
static void staged(moe_run_backend_t *b)
{
    m.issued++;
    if (m.mpi) {
        cs_wait(b);
        m.issued++;
    }
}

static int c_alltoallv(moe_run_backend_t *b, const void *s, const size_t *sc, const size_t *sd,
                       void *r, const size_t *rc, const size_t *rd)
{
    INNER(b, cpu->alltoallv(b, s, sc, sd, r, rc, rd));
    staged(b);
    return 0;
}

static int c_ialltoallv(moe_run_backend_t *b, const void *s, const size_t *sc,
                        const size_t *sd, void *r, const size_t *rc, const size_t *rd,
                        moe_run_req_t **q)
{
    INNER(b, cpu->ialltoallv(b, s, sc, sd, r, rc, rd, q));
    if (m.mpi)
        staged(b);
    return 0;
}

static int c_wait(moe_run_backend_t *b, moe_run_req_t *q)
{
    INNER(b, cpu->wait(b, q));
    if (!m.mpi)
        m.issued++;
    return 0;
}

static int c_allgather(moe_run_backend_t *b, const void *s, size_t n, void *r)
{
    INNER(b, cpu->allgather(b, s, n, r));
    staged(b);
    return 0;
}

static int c_allreduce(moe_run_backend_t *b, double *v, int n, int op)
{
    INNER(b, cpu->allreduce(b, v, n, op));
    if (!m.mpi && n > 0) /* through the NCCL stream, polled */
        b->syncs++;
    return 0;
}

static int c_barrier(moe_run_backend_t *b)
{
    INNER(b, cpu->barrier(b));
    if (m.mpi) {
        cs_wait(b);
    } else { /* one allreduce ordered after the compute stream */
        b->syncs++;
        m.waited = m.issued;
    }
    return 0;
}

static int c_sync(moe_run_backend_t *b)
{
    INNER(b, cpu->sync(b));
    cs_wait(b);
    return 0;
}

static double c_kernel_seconds(moe_run_backend_t *b)
{
    cs_wait(b);
    return cpu->kernel_seconds(b);
}

static int c_mark(moe_run_backend_t *b, uint32_t *id)
{
    if (!id)
        m.based = m.issued == m.waited;
    else if (!m.based) {
        cs_wait(b);
        m.based = 1;
    }
    return cpu->mark(b, id);
}

/* The runtime reads the marks' times right after a sync: every mark is done then. */
static int c_mark_time(moe_run_backend_t *b, uint32_t id, double *t)
{
    return cpu->mark_time(b, id, t);
}

static void make_table(void)
{
    counting = *cpu;
    counting.upload = c_upload;
    counting.download = c_download;
    counting.copy = c_copy;
    counting.zero = c_zero;
    counting.mixer = c_mixer;
    counting.gate = c_gate;
    counting.gather = c_gather;
    counting.scatter_add = c_scatter;
    counting.ffn_grouped = c_ffn;
    counting.pack = c_pack;
    counting.unpack = c_unpack;
    counting.alltoallv = c_alltoallv;
    counting.ialltoallv = c_ialltoallv;
    counting.wait = c_wait;
    counting.allgather = c_allgather;
    counting.allreduce = c_allreduce;
    counting.barrier = c_barrier;
    counting.sync = c_sync;
    counting.kernel_seconds = c_kernel_seconds;
    counting.mark = c_mark;
    counting.mark_time = c_mark_time;
}

/* One mode on b; the JSON report's per-layer host_syncs, allocs and alltoalls into c[L][3].
 * Returns 0 or -1. */
static int run_mode(moe_run_backend_t *b, int mode, uint32_t L, double *c)
{
    moe_run_cfg_t cfg;
    moe_run_cfg_default(&cfg);
    cfg.mode = mode;
    cfg.L = L, cfg.E = 8, cfg.K = 2, cfg.H = 16, cfg.F = 16;
    cfg.tokens_per_rank = 32;
    cfg.iters = 2, cfg.warmup = 1;
    if (mode == MOE_RUN_PIPELINED)
        cfg.chunks = 2, cfg.chunks_set = 1;
    char errbuf[256], path[] = "/tmp/test_run_syncs.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    moe_run_t *r = moe_run_new(&cfg, b);
    int rc = r ? moe_run_setup(r, errbuf, sizeof errbuf) : -1;
    if (!rc)
        rc = moe_run_iterations(r);
    if (!rc)
        rc = moe_run_report_json(r, path, errbuf, sizeof errbuf);
    moe_run_free(r);
    FILE *fp = rc ? NULL : fopen(path, "r");
    static char text[1 << 16];
    size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
    if (fp)
        fclose(fp);
    remove(path);
    text[n] = '\0';
    const char *p = text;
    for (uint32_t l = 0; !rc && l < L; l++) {
        p = strstr(p, "\"host_syncs\": ");
        if (!p || sscanf(p, "\"host_syncs\": %lf, \"allocs\": %lf, \"alltoalls\": %lf",
                         &c[l * 3], &c[l * 3 + 1], &c[l * 3 + 2]) != 3)
            rc = -1;
        else
            p++;
    }
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 0);
    moe_run_comm_t *comm = moe_run_comm_init(&argc, &argv);
    CHECK(comm != NULL);
    if (!comm)
        return unit_done("test_run_syncs");
    char errbuf[256];
    moe_run_backend_t *b = moe_run_backend_cpu(comm, errbuf, sizeof errbuf);
    CHECK(b != NULL);
    if (!b)
        return unit_done("test_run_syncs");
    cpu = b->ops;
    make_table();
    b->ops = &counting;
    enum { L = 3 };
    for (m.mpi = 0; m.mpi <= 1; m.mpi++)
        for (int mode = 0; mode < MOE_RUN_MODES; mode++) {
            double c[L * 3];
            CHECK_EQ_INT(run_mode(b, mode, L, c), 0);
            for (uint32_t l = 0; l < L; l++) {
                double waits = c[l * 3], a2a = c[l * 3 + 2];
                /* one rank: datacentric fetches nothing (no all-to-all), the gate still
                 * waits once */
                /* each dispatch also waits once: its rows' metadata, which travels in the
                 * rows' message, is read back once they landed; a lone rank lays its rows
                 * out in place (no all-to-all), so its all-to-alls are the combines, one a
                 * dispatch */
                int ok = waits <= 1 + a2a + (m.mpi ? a2a : 0) && c[l * 3 + 1] == 0;
                CHECK(a2a >= 1 || mode == MOE_RUN_DATACENTRIC);
                if (!ok)
                    fprintf(stderr, "%s, %s: layer %u: %g waits, %g all-to-alls, %g allocs\n",
                            m.mpi ? "mpi" : "nccl", moe_run_mode_name(mode), l, waits, a2a,
                            c[l * 3 + 1]);
                CHECK(ok);
                if (mode == MOE_RUN_VANILLA) /* the gate and the dispatch's metadata once,
                                              * and with MPI the combine's all-to-all */
                    CHECK(waits == 2 + (m.mpi ? a2a : 0) && a2a == 1);
            }
        }
    /* the phase timers without marks: a sync at every phase boundary, more waits than
     * all-to-alls */
    m.mpi = 0;
    counting.mark = NULL;
    counting.mark_time = NULL;
    double c[L * 3];
    CHECK_EQ_INT(run_mode(b, MOE_RUN_VANILLA, L, c), 0);
    CHECK(c[0] > c[2]);
    b->ops = cpu;
    b->ops->destroy(b);
    moe_run_comm_finalize(comm);
    return unit_done("test_run_syncs");
}
