/* tests/unit/test_topo.c -- topology files (moe-topology(5)): parsing, units, the writer's round
 * trip, efficiency curves, transfer times, every rejection, and the presets. */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "moe/moe.h"
#include "moe/topo.h"
#include "unit.h"
#include "unit_tmp.h"

static const char *write_text(const char *name, const char *text)
{
    const char *path = tmp_path(name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
    return path;
}

static int parse(moe_topo_t *t, const char *text, char *err, size_t errlen)
{
    err[0] = '\0';
    return moe_topo_parse(t, text, strlen(text), "x.topo", err, errlen);
}

/* Same struct, field by field (the struct has padding). */
static int same_topo(const moe_topo_t *a, const moe_topo_t *b)
{
    if (strcmp(a->name, b->name) != 0 || a->nodes != b->nodes ||
        a->gpus_per_node != b->gpus_per_node || a->hbm_bw != b->hbm_bw || a->flops != b->flops ||
        a->cores != b->cores || a->bwd_flops != b->bwd_flops || a->coll_lat != b->coll_lat ||
        a->gemm_latency != b->gemm_latency || a->fp8_flops != b->fp8_flops || a->sms != b->sms)
        return 0;
    for (int op = 0; op < MOE_COLLS; op++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++) {
            const moe_link_t *x = &a->coll[op][c], *y = &b->coll[op][c];
            if (x->npoints != y->npoints ||
                (a->coll_lat >> (op * MOE_LINK_CLASSES + c) & 1u && x->latency != y->latency))
                return 0;
            for (uint32_t i = 0; i < x->npoints; i++)
                if (x->size[i] != y->size[i] || x->eff[i] != y->eff[i])
                    return 0;
        }
    for (int c = 0; c < MOE_LINK_CLASSES; c++) {
        const moe_link_t *x = &a->link[c], *y = &b->link[c];
        if (x->bw != y->bw || x->latency != y->latency || x->npoints != y->npoints ||
            a->cost[c] != b->cost[c])
            return 0;
        for (uint32_t i = 0; i < x->npoints; i++)
            if (x->size[i] != y->size[i] || x->eff[i] != y->eff[i])
                return 0;
    }
    /* the cost models' curves */
    const moe_link_t *ma[] = {&a->hbm,         &a->compute, &a->intra_o3, &a->hbm_o3,
                              &a->compute_fp8, &a->attn,    &a->attn_bwd};
    const moe_link_t *mb[] = {&b->hbm,         &b->compute, &b->intra_o3, &b->hbm_o3,
                              &b->compute_fp8, &b->attn,    &b->attn_bwd};
    for (int c = 0; c < 7; c++) {
        if (ma[c]->latency != mb[c]->latency || ma[c]->npoints != mb[c]->npoints)
            return 0;
        for (uint32_t i = 0; i < ma[c]->npoints; i++)
            if (ma[c]->size[i] != mb[c]->size[i] || ma[c]->eff[i] != mb[c]->eff[i])
                return 0;
    }
    return 1;
}

static const char example[] =
    "# a two-node H100 cluster\n"
    "topology dgx-h100\n"
    "nodes 2\n"
    "gpus-per-node 8   # SXM5\n"
    "link intra bandwidth 450e9 latency 3e-6\n"
    "link inter bandwidth 50e9 latency 5e-6\n"
    "\tlink host  latency 10e-6 bandwidth 55e9\n"
    "efficiency intra 1024:0.02 65536:0.35 1048576:0.8 67108864:0.95\n"
    "\n"
    "hbm-bandwidth 3.35e12\n"
    "flops 989e12\n";

static void test_parse(void)
{
    moe_topo_t t;
    char err[256];
    CHECK_EQ_INT(parse(&t, example, err, sizeof err), 0);
    CHECK_STR(t.name, "dgx-h100");
    CHECK_EQ_INT(t.nodes, 2);
    CHECK_EQ_INT(t.gpus_per_node, 8);
    CHECK_EQ_INT(moe_topo_ranks(&t), 16);
    CHECK(t.link[MOE_LINK_INTRA].bw == 450e9 && t.link[MOE_LINK_INTRA].latency == 3e-6);
    CHECK(t.link[MOE_LINK_INTER].bw == 50e9 && t.link[MOE_LINK_INTER].latency == 5e-6);
    CHECK(t.link[MOE_LINK_HOST].bw == 55e9 && t.link[MOE_LINK_HOST].latency == 10e-6);
    CHECK(t.link[MOE_LINK_SELF].bw == 0 && t.link[MOE_LINK_SELF].npoints == 0);
    CHECK_EQ_INT(t.link[MOE_LINK_INTRA].npoints, 4);
    CHECK(t.link[MOE_LINK_INTRA].size[3] == 67108864 && t.link[MOE_LINK_INTRA].eff[3] == 0.95);
    CHECK_EQ_INT(t.link[MOE_LINK_INTER].npoints, 0);
    CHECK(t.hbm_bw == 3.35e12 && t.flops == 989e12);
    CHECK(t.bwd_flops == 0); /* not given: the cost models use flops */
    CHECK(t.cost[MOE_LINK_SELF] == 0 && t.cost[MOE_LINK_INTRA] == 1);
    CHECK(t.cost[MOE_LINK_INTER] == 9); /* 450e9 / 50e9 */
    /* the least a file can say */
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 4", err, sizeof err), 0);
    CHECK_STR(t.name, "x");
    CHECK(t.link[MOE_LINK_INTRA].bw == 0 && t.cost[MOE_LINK_INTER] == 4);
}

static void test_units(void)
{
    moe_topo_t t;
    char err[256];
    const char *u = "nodes 1\ngpus-per-node 8\n"
                    "link intra bandwidth 450 GB/s latency 3 us\n"
                    "link inter bandwidth 400 Gb/s latency 0.5e1 us\n"
                    "link host bandwidth 64 GB/s latency 2 ms\n"
                    "hbm-bandwidth 3.35 TB/s\nflops 989 TFLOP/s\n";
    CHECK_EQ_INT(parse(&t, u, err, sizeof err), 0);
    CHECK(t.link[MOE_LINK_INTRA].bw == 450e9);
    CHECK(t.link[MOE_LINK_INTRA].latency == 3e-6); /* as strtod reads "3e-6": exactly */
    CHECK(t.link[MOE_LINK_INTER].bw == 50e9);
    CHECK(t.link[MOE_LINK_INTER].latency == 5e-6);
    CHECK(t.link[MOE_LINK_HOST].bw == 64e9 && t.link[MOE_LINK_HOST].latency == 2e-3);
    CHECK(t.hbm_bw == 3.35e12 && t.flops == 989e12);
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 1\nlink inter bandwidth 200 Mb/s\n"
                           "flops 1 PFLOP/s\nhbm-bandwidth 7 B/s\nbackward-flops 12 GFLOP/s",
                           err, sizeof err), 0);
    CHECK(t.link[MOE_LINK_INTER].bw == 25e6 && t.flops == 1e15 && t.hbm_bw == 7);
    CHECK(t.bwd_flops == 12e9);
    /* a unit of another quantity is not a unit here */
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 1\nflops 5 GB/s\n", err, sizeof err),
                 MOE_EFORMAT);
    CHECK(strstr(err, "'x.topo' line 3: 'flops' takes one value, found 'GB/s' after it"));
}

static void test_round_trip(void)
{
    moe_topo_t t, u, w;
    char err[256];
    CHECK_EQ_INT(parse(&t, example, err, sizeof err), 0);
    char *a = moe_topo_format(&t);
    CHECK(a != NULL);
    CHECK_EQ_INT(a ? parse(&u, a, err, sizeof err) : -1, 0);
    CHECK(same_topo(&t, &u));
    char *b = moe_topo_format(&u);
    CHECK_STR(b, a);
    CHECK(a && strstr(a, "\nlink intra bandwidth 450000000000 latency 3e-06\n"));
    free(a);
    free(b);
    /* doubles that need all 17 digits, extremes, zero bandwidth with a latency */
    CHECK_EQ_INT(moe_topo_uniform(&t, 3, 5), 0);
    strcpy(t.name, "odd name#1");
    t.link[MOE_LINK_INTRA].bw = 0.1 + 0.2;
    t.link[MOE_LINK_INTRA].latency = 1.0 / 3;
    t.link[MOE_LINK_INTER].latency = 5e-324;
    t.link[MOE_LINK_HOST].bw = DBL_MAX;
    t.link[MOE_LINK_INTER].npoints = MOE_TOPO_MAX_CURVE;
    for (uint32_t i = 0; i < MOE_TOPO_MAX_CURVE; i++) {
        t.link[MOE_LINK_INTER].size[i] = ldexp(1.0, (int)i) / 3;
        t.link[MOE_LINK_INTER].eff[i] = (i + 1.0) / (MOE_TOPO_MAX_CURVE + 1.0);
    }
    t.hbm_bw = 2.0 / 7;
    t.cores = 1.0 / 3; /* CPU ranks sharing processors */
    t.bwd_flops = 1e10 / 3;
    moe_topo_update_cost(&t);
    a = moe_topo_format(&t);
    CHECK_EQ_INT(a ? parse(&u, a, err, sizeof err) : -1, 0);
    strcpy(t.name, "odd_name_1"); /* blanks and '#' are written as '_' */
    CHECK(same_topo(&t, &u));
    /* through a file, gzip and stdin too */
    const char *f = write_text("rt.topo", a ? a : "");
    CHECK_EQ_INT(moe_topo_read(&w, f, err, sizeof err), 0);
    CHECK(same_topo(&t, &w));
    const char *gz = tmp_path("rt.topo.gz");
    gzFile g = gzopen(gz, "wb");
    if (g && a) {
        gzputs(g, a);
        gzclose(g);
    }
    memset(&w, 0, sizeof w);
    CHECK_EQ_INT(moe_topo_read(&w, gz, err, sizeof err), 0);
    CHECK(same_topo(&t, &w));
    int saved = dup(0), fd = open(f, O_RDONLY);
    CHECK(saved >= 0 && fd >= 0 && dup2(fd, 0) == 0);
    close(fd);
    memset(&w, 0, sizeof w);
    CHECK_EQ_INT(moe_topo_read(&w, "-", err, sizeof err), 0);
    CHECK(same_topo(&t, &w));
    dup2(saved, 0);
    close(saved);
    free(a);
    /* no name: none written, and the reader names it after the file */
    t.name[0] = '\0';
    a = moe_topo_format(&t);
    CHECK(a && !strstr(a, "\ntopology "));
    CHECK_EQ_INT(moe_topo_read(&w, write_text("my.cluster.topo", a ? a : ""), err, sizeof err),
                 0);
    CHECK_STR(w.name, "my.cluster");
    free(a);
}

static void test_efficiency(void)
{
    moe_topo_t t;
    char err[256];
    CHECK_EQ_INT(parse(&t, "nodes 2\ngpus-per-node 2\n"
                           "link intra bandwidth 100e9 latency 1e-6\n"
                           "efficiency intra 1000:0.1 3000:0.5 5000:0.9\n"
                           "link inter bandwidth 10e9\n", err, sizeof err), 0);
    const int I = MOE_LINK_INTRA, X = MOE_LINK_INTER;
    CHECK(moe_topo_efficiency(&t, I, 10) == 0.1);     /* clamped below */
    CHECK(moe_topo_efficiency(&t, I, 1000) == 0.1);
    CHECK(fabs(moe_topo_efficiency(&t, I, 2000) - 0.3) < 1e-15);
    CHECK(fabs(moe_topo_efficiency(&t, I, 4500) - 0.8) < 1e-15);
    CHECK(moe_topo_efficiency(&t, I, 5000) == 0.9);
    CHECK(moe_topo_efficiency(&t, I, 1e12) == 0.9);   /* clamped above */
    CHECK(moe_topo_efficiency(&t, X, 123) == 1.0);    /* no curve */
    CHECK(moe_topo_time(&t, MOE_LINK_SELF, 1e9) == 0);
    CHECK(fabs(moe_topo_time(&t, I, 2000) - (1e-6 + 2000 / (100e9 * 0.3))) < 1e-18);
    CHECK(fabs(moe_topo_time(&t, X, 1e6) - 1e-4) < 1e-18);
    CHECK(isnan(moe_topo_time(&t, MOE_LINK_HOST, 1e6)));
    CHECK_EQ_INT(moe_topo_class(&t, 1, 1), MOE_LINK_SELF);
    CHECK_EQ_INT(moe_topo_class(&t, 0, 1), MOE_LINK_INTRA);
    CHECK_EQ_INT(moe_topo_class(&t, 1, 2), MOE_LINK_INTER);
    CHECK(t.cost[MOE_LINK_INTER] == 10);
}

/* Version 1.1's per-operation costs: read, written losslessly (a 1.0 file stays 1.0), and
 * priced: collective times in nccl-tests' terms, GEMM times with the memory bound. */
static void test_ops(void)
{
    moe_topo_t t, u;
    char err[256];
    static const char v11[] =
        "version 1.1\n"
        "nodes 2\ngpus-per-node 8\n"
        "link intra bandwidth 100 GB/s latency 2 us\n"
        "link inter bandwidth 10 GB/s\n"
        "latency allgather intra 30 us\n"
        "efficiency allgather intra 1000000:0.5 100000000:0.8\n"
        "latency alltoall inter 20us\n" /* units may touch the number only as words: no */
        "latency gemm 5 us\n"
        "flops 100e12\nfp8-flops 200e12\nhbm-bandwidth 1e12\nsms 132\n"
        "efficiency compute 1e9:0.5 1e12:0.8\n"
        "efficiency compute-fp8 1e9:0.25 1e12:0.6\n";
    /* "20us" is not a number */
    CHECK_EQ_INT(parse(&t, v11, err, sizeof err), MOE_EFORMAT);
    CHECK(strstr(err, "line 8: latency: expected a number of seconds, found '20us'"));
    char fixed[sizeof v11 + 8];
    snprintf(fixed, sizeof fixed, "%s", v11);
    char *p = strstr(fixed, "20us");
    memmove(p + 3, p + 2, strlen(p + 2) + 1);
    p[2] = ' ';
    CHECK_EQ_INT(parse(&t, fixed, err, sizeof err), 0);
    const int I = MOE_LINK_INTRA, X = MOE_LINK_INTER;
    CHECK(t.coll[MOE_COLL_ALLGATHER][I].latency == 30e-6 && t.gemm_latency == 5e-6);
    CHECK(t.coll_lat == (1u << (MOE_COLL_ALLGATHER * MOE_LINK_CLASSES + I) |
                         1u << (MOE_COLL_ALLTOALL * MOE_LINK_CLASSES + X)));
    CHECK(t.fp8_flops == 200e12 && t.sms == 132);
    /* the collective's own cost where given, the class's where not */
    moe_link_t ag = moe_topo_coll(&t, MOE_COLL_ALLGATHER, I);
    moe_link_t rs = moe_topo_coll(&t, MOE_COLL_REDUCESCATTER, I);
    CHECK(ag.bw == 100e9 && ag.latency == 30e-6 && ag.npoints == 2);
    CHECK(rs.bw == 100e9 && rs.latency == 2e-6 && rs.npoints == 0);
    /* 8 ranks all-gather 100 MB: 30 us + 1e8 * 7/8 / (100e9 * 0.8) */
    double want = 30e-6 + 1e8 * 7.0 / 8 / (100e9 * 0.8);
    CHECK(fabs(moe_topo_coll_time(&t, MOE_COLL_ALLGATHER, I, 1e8, 8) - want) < 1e-15);
    /* an all-reduce moves twice that; no curve: efficiency 1 */
    want = 2e-6 + 1e8 * 2 * 7.0 / 8 / 100e9;
    CHECK(fabs(moe_topo_coll_time(&t, MOE_COLL_ALLREDUCE, I, 1e8, 8) - want) < 1e-15);
    CHECK(moe_topo_coll_time(&t, MOE_COLL_ALLREDUCE, I, 1e8, 1) == 0);
    CHECK(isnan(moe_topo_coll_time(&t, MOE_COLL_ALLREDUCE, MOE_LINK_HOST, 1e8, 8)));
    /* GEMM: 2 x 1024^3 x 4 FLOPs = 8.59e9, efficiency 0.5 + 0.3 * (8.59e9 - 1e9)/(1e12 - 1e9) */
    double fl = 2.0 * 1024 * 1024 * 1024 * 4;
    double e = 0.5 + 0.3 * (fl - 1e9) / (1e12 - 1e9);
    want = fl / (100e12 * e) + 5e-6;
    CHECK(fabs(moe_topo_gemm_time(&t, 1024, 1024, 1024, 4, 2) - want) < 1e-15);
    /* FP8: at fp8-flops and the compute-fp8 curve */
    double e8 = 0.25 + 0.35 * (fl - 1e9) / (1e12 - 1e9);
    CHECK(fabs(moe_topo_gemm_time(&t, 1024, 1024, 1024, 4, 1) - (fl / (200e12 * e8) + 5e-6)) <
          1e-15);
    /* without its own curve FP8 reads the compute curve */
    u = t;
    u.compute_fp8.npoints = 0;
    CHECK(fabs(moe_topo_gemm_time(&u, 1024, 1024, 1024, 4, 1) - (fl / (200e12 * e) + 5e-6)) <
          1e-15);
    /* one token through 8 experts of 4096 x 14336: the weights' bytes bound it */
    want = 8 * (4096.0 + 4096.0 * 14336 + 14336) * 2 / 1e12 + 5e-6;
    CHECK(fabs(moe_topo_gemm_time(&t, 1, 14336, 4096, 8, 2) - want) < 1e-15);
    /* lossless: written as 1.1, read back equal, written again the same */
    char *a = moe_topo_format(&t);
    CHECK(a && strstr(a, "\nversion 1.1\n") && strstr(a, "\nlatency alltoall inter 2e-05\n") &&
          strstr(a, "\nefficiency allgather intra 1000000:0.5 100000000:0.8\n") &&
          strstr(a, "\nlatency gemm 5e-06\nfp8-flops 200000000000000\nsms 132\n") &&
          strstr(a, "\nefficiency compute-fp8 1000000000:0.25 1000000000000:0.6\n"));
    CHECK_EQ_INT(a ? parse(&u, a, err, sizeof err) : -1, 0);
    CHECK(same_topo(&t, &u));
    char *b = moe_topo_format(&u);
    CHECK_STR(b, a);
    free(a);
    free(b);
    /* a zero latency given is kept (it differs from "the class's") */
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 2\nlink intra bandwidth 1e9 latency 1e-6\n"
                           "latency allreduce intra 0\n", err, sizeof err), 0);
    a = moe_topo_format(&t);
    CHECK(a && strstr(a, "\nlatency allreduce intra 0\n"));
    CHECK_EQ_INT(a ? parse(&u, a, err, sizeof err) : -1, 0);
    CHECK(same_topo(&t, &u) && moe_topo_coll(&u, MOE_COLL_ALLREDUCE, I).latency == 0);
    free(a);
    /* a 1.0 topology is written without a version line; a newer minor version reads */
    CHECK_EQ_INT(parse(&t, example, err, sizeof err), 0);
    a = moe_topo_format(&t);
    CHECK(a && !strstr(a, "version"));
    free(a);
    CHECK_EQ_INT(parse(&t, "version 1.7\nnodes 1\ngpus-per-node 1\n", err, sizeof err), 0);
    CHECK_EQ_INT(parse(&t, "version 1.7\nnodes 1\ngpus-per-node 1\nwarp 9\n", err,
                       sizeof err), MOE_EFORMAT);
    CHECK(strstr(err, "line 4: unknown keyword 'warp' (the file is version 1.7, this reader "
                      "knows 1.3)"));
    /* version 1.2: the attention kernels' curves, against the sequence length; a topology
     * with one is written as 1.2, one with only 1.1 statements stays 1.1 (above) */
    CHECK_EQ_INT(parse(&t, "version 1.2\nnodes 1\ngpus-per-node 8\nflops 989e12\n"
                           "efficiency attention 512:0.472 4096:0.645\n"
                           "efficiency attention-bwd 512:0.32 4096:0.548\n", err, sizeof err), 0);
    CHECK(t.attn.npoints == 2 && t.attn.size[1] == 4096 && t.attn.eff[1] == 0.645 &&
          t.attn_bwd.npoints == 2 && t.attn_bwd.eff[0] == 0.32);
    a = moe_topo_format(&t);
    CHECK(a && strstr(a, "\nversion 1.2\n") &&
          strstr(a, "\nefficiency attention 512:0.472 4096:0.645\n") &&
          strstr(a, "\nefficiency attention-bwd 512:0.32 4096:0.548\n"));
    CHECK_EQ_INT(a ? parse(&u, a, err, sizeof err) : -1, 0);
    CHECK(same_topo(&t, &u));
    free(a);
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 1\nefficiency attention 512:0.4\n"
                           "efficiency attention 1024:0.5\n", err, sizeof err), MOE_EFORMAT);
    CHECK(strstr(err, "line 4: second 'efficiency attention' line"));
    /* version 1.3: the grouped GEMM against tokens per expert, linear in log tokens (64 is
     * halfway between 16 and 256), clamped outside; written back as 1.3 */
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 8\nflops 989e12\n"
                           "efficiency grouped-gemm 16:0.2 256:0.6 4096:0.65\n", err,
                       sizeof err), 0);
    CHECK(t.ggemm.npoints == 3 && t.ggemm.size[2] == 4096);
    CHECK(fabs(moe_topo_ggemm_eff(&t, 64) - 0.4) < 1e-12);
    CHECK(moe_topo_ggemm_eff(&t, 1) == 0.2 && moe_topo_ggemm_eff(&t, 1e6) == 0.65 &&
          moe_topo_ggemm_eff(&t, 256) == 0.6);
    a = moe_topo_format(&t);
    CHECK(a && strstr(a, "\nversion 1.3\n") &&
          strstr(a, "\nefficiency grouped-gemm 16:0.2 256:0.6 4096:0.65\n"));
    CHECK_EQ_INT(a ? parse(&u, a, err, sizeof err) : -1, 0);
    CHECK(same_topo(&t, &u) && u.ggemm.npoints == 3);
    free(a);
    CHECK_EQ_INT(parse(&u, "nodes 1\ngpus-per-node 1\n", err, sizeof err), 0);
    CHECK(moe_topo_ggemm_eff(&u, 5) == 1.0);
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 1\nefficiency grouped-gemm 0:0.1 8:0.5\n",
                       err, sizeof err), MOE_ERANGE);
    CHECK(strstr(err, "line 3: grouped-gemm tokens per expert must be at least 1 (0)"));
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 1\nefficiency grouped-gemm 8:1.5\n", err,
                       sizeof err), MOE_ERANGE);
    CHECK(strstr(err, "efficiency 1.5 at size 8 is not in (0, 1]"));
    CHECK_EQ_INT(parse(&t, "nodes 1\ngpus-per-node 1\nefficiency grouped-gemm 64:0.3 16:0.2\n",
                       err, sizeof err), MOE_ERANGE);
    CHECK(strstr(err, "efficiency sizes must increase (16 after 64)"));
}

typedef struct bad {
    const char *text;
    int status;
    const char *msg;
} bad_t;

#define NG "nodes 1\ngpus-per-node 8\n"

static const bad_t bad_topo[] = {
    {"", MOE_EFORMAT, "'x.topo': no 'nodes' line"},
    {"nodes 2\n", MOE_EFORMAT, "'x.topo': no 'gpus-per-node' line"},
    {NG "link nvl bandwidth 1\n", MOE_EFORMAT,
     "'x.topo' line 3: unknown link class 'nvl' (intra, inter, host)"},
    {NG "link self bandwidth 1\n", MOE_EFORMAT, "line 3: unknown link class 'self'"},
    {NG "link\n", MOE_EFORMAT, "line 3: 'link' lacks a link class"},
    {NG "nvlink 4\n", MOE_EFORMAT, "line 3: unknown keyword 'nvlink'"},
    {NG "nodes 2\n", MOE_EFORMAT, "line 3: second 'nodes' line"},
    {"nodes 0\n", MOE_ERANGE, "line 1: nodes: expected a whole number from 1 to 65535, "
                              "found '0'"},
    {"nodes 65536\n", MOE_ERANGE, "found '65536'"},
    {"nodes two\n", MOE_ERANGE, "found 'two'"},
    {"nodes 1 2\n", MOE_EFORMAT, "line 1: 'nodes' takes one value, found 2"},
    {"nodes 300\ngpus-per-node 300\n", MOE_ERANGE,
     "'x.topo': 300 nodes x 300 GPUs is more than 65535 ranks"},
    {NG "topology a b\n", MOE_EFORMAT, "'topology' takes one value, found 2"},
    {NG "topology 0123456789012345678901234567890123456789012345678901234567890123\n",
     MOE_ERANGE, "topology name longer than 63 characters"},
    {NG "link intra\n", MOE_EFORMAT, "'link intra' sets neither bandwidth nor latency"},
    {NG "link intra speed 4\n", MOE_EFORMAT,
     "unknown link parameter 'speed' (bandwidth, latency)"},
    {NG "link intra bandwidth\n", MOE_EFORMAT, "'bandwidth' lacks a value"},
    {NG "link intra bandwidth 1 bandwidth 2\n", MOE_EFORMAT, "'bandwidth' given twice"},
    {NG "link intra bandwidth fast\n", MOE_EFORMAT,
     "bandwidth: expected a number of bytes/s, found 'fast'"},
    {NG "link intra bandwidth 0x10\n", MOE_EFORMAT, "found '0x10'"},
    {NG "link intra bandwidth inf\n", MOE_EFORMAT, "found 'inf'"},
    {NG "link intra bandwidth 1e999\n", MOE_EFORMAT, "found '1e999'"},
    {NG "link intra bandwidth 1.2.3\n", MOE_EFORMAT, "found '1.2.3'"},
    {NG "link intra latency -1e-6\n", MOE_ERANGE, "latency: -1e-6 is negative"},
    {NG "link intra latency 1 GB/s\n", MOE_EFORMAT,
     "unknown link parameter 'GB/s' (bandwidth, latency)"},
    {NG "link intra latency 1\nlink intra bandwidth 2\n", MOE_EFORMAT,
     "line 4: second 'link intra' line"},
    {NG "efficiency inter\n", MOE_EFORMAT, "'efficiency inter' has no SIZE:EFFICIENCY points"},
    {NG "efficiency inter 1:0.5\nefficiency inter 2:0.5\n", MOE_EFORMAT,
     "line 4: second 'efficiency inter' line"},
    {NG "efficiency inter 1:0.5 1:0.6\n", MOE_ERANGE,
     "efficiency sizes must increase (1 after 1)"},
    {NG "efficiency inter 2:0.5 1:0.6\n", MOE_ERANGE, "efficiency sizes must increase"},
    {NG "efficiency inter 1:0\n", MOE_ERANGE, "efficiency 0 at size 1 is not in (0, 1]"},
    {NG "efficiency inter 1:1.5\n", MOE_ERANGE, "efficiency 1.5 at size 1 is not in (0, 1]"},
    {NG "efficiency inter 1:0.5 2\n", MOE_EFORMAT, "expected SIZE:EFFICIENCY, found '2'"},
    {NG "efficiency inter 1:x\n", MOE_EFORMAT, "expected SIZE:EFFICIENCY, found '1:x'"},
    {NG "efficiency inter -1:0.5\n", MOE_ERANGE, "efficiency size -1 is negative"},
    {NG "hbm-bandwidth\n", MOE_EFORMAT, "'hbm-bandwidth' lacks a value"},
    {NG "flops 1 2\n", MOE_EFORMAT, "'flops' takes one value, found '2' after it"},
    {NG "flops 1\nflops 2\n", MOE_EFORMAT, "line 4: second 'flops' line"},
    {NG "backward-flops 1 2\n", MOE_EFORMAT, "'backward-flops' takes one value, found '2' after it"},
    {NG "cores -2\n", MOE_ERANGE, "cores: -2 is negative"},
    {NG "cores 0\n", MOE_ERANGE, "cores: 0 is below 0.001 processors"},
    {NG "cores 1e-300\n", MOE_ERANGE, "cores: 1e-300 is below 0.001 processors"},
    {NG "cores 2 GB/s\n", MOE_EFORMAT, "'cores' takes one value, found 'GB/s' after it"},
    {NG "cores two\n", MOE_EFORMAT, "cores: expected a number of processors, found 'two'"},
    /* version 1.1 */
    {"version 2.0\n" NG, MOE_EFORMAT, "line 1: version 2.0 is not 1.x: this reader knows "
                                       "topology files up to 1.3"},
    {NG "version 1.1\n", MOE_EFORMAT, "line 3: 'version' must be the first statement"},
    {"version 1\n" NG, MOE_EFORMAT, "expected a version MAJOR.MINOR, found '1'"},
    {"version 1.1.2\n" NG, MOE_EFORMAT, "found '1.1.2'"},
    {"version 1.1\nversion 1.1\n" NG, MOE_EFORMAT, "line 2: second 'version' line"},
    {NG "latency\n", MOE_EFORMAT, "'latency' lacks an operation"},
    {NG "latency broadcast intra 1\n", MOE_EFORMAT,
     "unknown operation 'broadcast' (alltoall, allgather, reducescatter, allreduce, gemm)"},
    {NG "latency alltoall\n", MOE_EFORMAT, "'latency alltoall' lacks a link class"},
    {NG "latency alltoall host 1\n", MOE_EFORMAT,
     "unknown link class 'host' for alltoall (intra, inter)"},
    {NG "latency alltoall inter\n", MOE_EFORMAT, "'latency alltoall' lacks a value"},
    {NG "latency alltoall inter 1 2\n", MOE_EFORMAT,
     "'latency alltoall' takes one value, found '2' after it"},
    {NG "latency alltoall inter -1\n", MOE_ERANGE, "latency: -1 is negative"},
    {NG "latency alltoall inter 1 us\nlatency alltoall inter 2 us\n", MOE_EFORMAT,
     "line 4: second 'latency alltoall inter' line"},
    {NG "latency gemm 1 us\nlatency gemm 1 us\n", MOE_EFORMAT, "second 'latency gemm' line"},
    {NG "latency gemm\n", MOE_EFORMAT, "'latency gemm' lacks a value"},
    {NG "efficiency allreduce inter\n", MOE_EFORMAT,
     "'efficiency allreduce' has no SIZE:EFFICIENCY points"},
    {NG "efficiency allreduce\n", MOE_EFORMAT, "'efficiency allreduce' lacks a link class"},
    {NG "efficiency allreduce inter 1:0.5\nefficiency allreduce inter 2:0.5\n", MOE_EFORMAT,
     "second 'efficiency allreduce inter' line"},
    {NG "efficiency allreduce inter 1:2\n", MOE_ERANGE, "efficiency 2 at size 1 is not in"},
    {NG "fp8-flops 1\nfp8-flops 1\n", MOE_EFORMAT, "second 'fp8-flops' line"},
};

static void test_errors(void)
{
    for (size_t i = 0; i < sizeof bad_topo / sizeof *bad_topo; i++) {
        const bad_t *b = &bad_topo[i];
        moe_topo_t t;
        memset(&t, 0x5a, sizeof t);
        char err[256];
        int rc = parse(&t, b->text, err, sizeof err);
        CHECK_EQ_INT(rc, b->status);
        if (!strstr(err, b->msg))
            fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err, b->msg);
        CHECK(strstr(err, b->msg) != NULL);
        CHECK(t.nodes == 0x5a5a5a5a); /* left alone */
    }
    /* 64 points are fine, 65 are not */
    char buf[4096];
    int n = snprintf(buf, sizeof buf, NG "efficiency intra");
    for (int i = 1; i <= 64; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, " %d:0.5", i);
    moe_topo_t t;
    char err[256];
    CHECK_EQ_INT(parse(&t, buf, err, sizeof err), 0);
    CHECK_EQ_INT(t.link[MOE_LINK_INTRA].npoints, 64);
    snprintf(buf + n, sizeof buf - (size_t)n, " 65:0.5\n");
    CHECK_EQ_INT(parse(&t, buf, err, sizeof err), MOE_ERANGE);
    CHECK(strstr(err, "more than 64 efficiency points"));
    static const char nul[] = "nodes 1\ngpus\0-per-node 8\n";
    CHECK_EQ_INT(moe_topo_parse(&t, nul, sizeof nul - 1, "n", err, sizeof err), MOE_EFORMAT);
    CHECK_STR(err, "'n' line 2: NUL byte in line");
    CHECK_EQ_INT(moe_topo_read(&t, tmp_path("none.topo"), err, sizeof err), MOE_ESYS);
    CHECK(strstr(err, "cannot open"));
    CHECK_EQ_INT(moe_topo_parse(&t, "nodes 0", 7, NULL, NULL, 0), MOE_ERANGE);
}

/* Every preset parses, names itself after its file, and says nodes 1. */
static void test_presets(void)
{
    const char *top = getenv("top_srcdir");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/share/topologies", top ? top : ".");
    DIR *d = opendir(dir);
    if (!d) {
        printf("test_topo: no %s, skipping the presets\n", dir);
        return;
    }
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".topo") != 0)
            continue;
        char path[2048], err[256], want[256];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        moe_topo_t t;
        int rc = moe_topo_read(&t, path, err, sizeof err);
        if (rc)
            fprintf(stderr, "%s\n", err);
        CHECK_EQ_INT(rc, 0);
        snprintf(want, sizeof want, "%.*s", (int)(len - 5), de->d_name);
        CHECK_STR(t.name, want);
        CHECK_EQ_INT(t.nodes, 1);
        CHECK(t.link[MOE_LINK_INTRA].bw > 0 && t.link[MOE_LINK_INTER].bw > 0);
        CHECK(t.hbm_bw > 0 && t.flops > 0);
        /* the DGX presets carry the measured per-operation costs of version 1.1 */
        if (!strncmp(de->d_name, "dgx-", 4))
            CHECK(t.fp8_flops > 0 && t.compute.npoints > 0 &&
                  t.coll[MOE_COLL_ALLTOALL][MOE_LINK_INTER].npoints > 0);
        /* DGX H100 and H200 (1.3): DeepGEMM's grouped GEMMs by tokens per expert and
         * DeepEP's inter-node all-to-all latency (issue 45) */
        if (!strcmp(de->d_name, "dgx-h100.topo") || !strcmp(de->d_name, "dgx-h200.topo"))
            CHECK(t.ggemm.npoints == 7 && t.ggemm.size[2] == 256 && t.ggemm.eff[2] == 0.4414 &&
                  (t.coll_lat >> (MOE_COLL_ALLTOALL * MOE_LINK_CLASSES + MOE_LINK_INTER) & 1u) &&
                  t.coll[MOE_COLL_ALLTOALL][MOE_LINK_INTER].latency == 42e-6);
        /* and the H100-class ones FlashAttention-3's measured attention kernels (1.2) */
        if (!strcmp(de->d_name, "dgx-h100.topo") || !strcmp(de->d_name, "dgx-h800.topo"))
            CHECK(t.attn.npoints == 6 && t.attn_bwd.npoints == 6 && t.attn.eff[3] == 0.6451);
        count++;
    }
    closedir(d);
    CHECK(count >= 9);
}

/* moe-run --calibrate's sweep check, on made-up sweeps of 8 sizes 64 B .. 1 MiB per peer: a
 * clean one (20 us + size / 10 GB/s, repeats within 10%), the busy machine of issue 41 (the
 * small sizes' medians pushed up past the larger ones' by other jobs), and one whose
 * repeats disagree (the middle repeats of 16 KiB 3x apart). */
static void test_sweep(void)
{
    double t[8], lo[8], hi[8];
    for (int i = 0; i < 8; i++) {
        t[i] = 20e-6 + 7 * 64.0 * (1 << (2 * i)) / 10e9;
        lo[i] = 0.95 * t[i];
        hi[i] = 1.05 * t[i];
    }
    int at = -2;
    CHECK_EQ_INT(moe_topo_sweep_check(t, lo, hi, 8, &at), 0);
    CHECK_EQ_INT(at, -1);
    /* the latency-bound sizes within noise of each other do not count as non-monotonic */
    t[1] = 0.9 * t[0];
    CHECK_EQ_INT(moe_topo_sweep_check(t, lo, hi, 8, NULL), 0);
    double busy[8] = {410e-6, 95e-6, 380e-6, 60e-6, 140e-6, 520e-6, 2.1e-3, 8.3e-3};
    CHECK_EQ_INT(moe_topo_sweep_check(busy, NULL, NULL, 8, &at), MOE_SWEEP_NONMONO);
    CHECK_EQ_INT(at, 1);
    double spread[8];
    memcpy(spread, t, sizeof t);
    lo[5] = 0.5 * t[5];
    hi[5] = 1.5 * t[5];
    CHECK_EQ_INT(moe_topo_sweep_check(spread, lo, hi, 8, &at), MOE_SWEEP_SPREAD);
    CHECK_EQ_INT(at, 5);
    CHECK_EQ_INT(moe_topo_sweep_check(busy, lo, hi, 8, &at), MOE_SWEEP_NONMONO | MOE_SWEEP_SPREAD);
    CHECK_EQ_INT(at, 1);
}

int main(void)
{
    if (unit_tmp_init("test_topo"))
        return 1;
    moe_log_set_level(MOE_LOG_OFF);
    test_parse();
    test_units();
    test_round_trip();
    test_efficiency();
    test_ops();
    test_errors();
    test_presets();
    test_sweep();
    unit_tmp_done();
    return unit_done("test_topo");
}
