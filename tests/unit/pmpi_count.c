/* tests/unit/pmpi_count.c -- an MPI profiling (PMPI) wrapper linked into a copy of moe-run
 * (tests/unit/moe_run_pmpi) for tests/cli/run_pmpi.sh: it counts the collectives the job
 * issues and the bytes each rank sends in them to other ranks, and the point-to-point
 * messages. At MPI_Finalize the ranks compare their records (collectives are called in the
 * same order on every rank) and rank 0 writes one line to $MOE_PMPI_OUT:
 *   collectives N zero_byte Z barriers B p2p P p2p_zero Q bytes X
 * N data-moving collectives (all-to-all(v), all-gather(v), all-reduce, broadcast, and their
 * non-blocking forms), Z of them carrying 0 bytes from every rank to the others, B barriers,
 * P point-to-point sends, Q of them empty, X bytes all ranks sent in collectives to others.
 * The wrapper's own reductions at MPI_Finalize go to PMPI directly and are not counted.
 * Without MPI the file is empty and the test skips. */
#include "config.h"

#ifdef HAVE_MPI
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double *rec;          /* bytes this rank sent to others in each collective */
static size_t nrec, caprec;
static double barriers, p2p, p2p_zero;

static void record(double bytes)
{
    if (nrec == caprec) {
        size_t cap = caprec ? 2 * caprec : 1024;
        double *p = realloc(rec, cap * sizeof *p);
        if (!p)
            abort();
        rec = p;
        caprec = cap;
    }
    rec[nrec++] = bytes;
}

static double tsize(MPI_Datatype t)
{
    int s = 0;
    PMPI_Type_size(t, &s);
    return s;
}

static int rank_of(MPI_Comm c)
{
    int r = 0;
    PMPI_Comm_rank(c, &r);
    return r;
}

static int size_of(MPI_Comm c)
{
    int n = 1;
    PMPI_Comm_size(c, &n);
    return n;
}

/* Bytes of counts[] to the ranks other than this one. */
static double vbytes(const int *counts, MPI_Datatype t, MPI_Comm c)
{
    double s = 0;
    int me = rank_of(c), n = size_of(c);
    for (int p = 0; p < n; p++)
        if (p != me)
            s += counts[p];
    return s * tsize(t);
}

int MPI_Alltoall(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt,
                 MPI_Comm c)
{
    record((double)sc * tsize(st) * (size_of(c) - 1));
    return PMPI_Alltoall(sb, sc, st, rb, rc, rt, c);
}

int MPI_Alltoallv(const void *sb, const int *sc, const int *sd, MPI_Datatype st, void *rb,
                  const int *rc, const int *rd, MPI_Datatype rt, MPI_Comm c)
{
    record(vbytes(sc, st, c));
    return PMPI_Alltoallv(sb, sc, sd, st, rb, rc, rd, rt, c);
}

int MPI_Ialltoallv(const void *sb, const int *sc, const int *sd, MPI_Datatype st, void *rb,
                   const int *rc, const int *rd, MPI_Datatype rt, MPI_Comm c, MPI_Request *q)
{
    record(vbytes(sc, st, c));
    return PMPI_Ialltoallv(sb, sc, sd, st, rb, rc, rd, rt, c, q);
}

int MPI_Allgather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt,
                  MPI_Comm c)
{
    record((double)sc * tsize(st) * (size_of(c) - 1));
    return PMPI_Allgather(sb, sc, st, rb, rc, rt, c);
}

int MPI_Allgatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int *rc,
                   const int *rd, MPI_Datatype rt, MPI_Comm c)
{
    record((double)sc * tsize(st) * (size_of(c) - 1));
    return PMPI_Allgatherv(sb, sc, st, rb, rc, rd, rt, c);
}

int MPI_Allreduce(const void *sb, void *rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    record(size_of(c) > 1 ? (double)n * tsize(t) : 0);
    return PMPI_Allreduce(sb, rb, n, t, op, c);
}

int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c)
{
    record(rank_of(c) == root ? (double)n * tsize(t) * (size_of(c) - 1) : 0);
    return PMPI_Bcast(b, n, t, root, c);
}

int MPI_Barrier(MPI_Comm c)
{
    barriers++;
    return PMPI_Barrier(c);
}

int MPI_Isend(const void *b, int n, MPI_Datatype t, int to, int tag, MPI_Comm c, MPI_Request *q)
{
    p2p++;
    p2p_zero += n == 0;
    return PMPI_Isend(b, n, t, to, tag, c, q);
}

int MPI_Send(const void *b, int n, MPI_Datatype t, int to, int tag, MPI_Comm c)
{
    p2p++;
    p2p_zero += n == 0;
    return PMPI_Send(b, n, t, to, tag, c);
}

int MPI_Finalize(void)
{
    double n[2] = {(double)nrec, -(double)nrec}, tot[3] = {barriers, p2p, p2p_zero};
    PMPI_Allreduce(MPI_IN_PLACE, n, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double zero = -1, bytes = 0; /* -1: the ranks' records differ in length */
    if (n[0] == -n[1] && nrec > 0) {
        PMPI_Allreduce(MPI_IN_PLACE, rec, (int)nrec, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        zero = 0;
        for (size_t i = 0; i < nrec; i++) {
            zero += rec[i] == 0;
            bytes += rec[i];
        }
    }
    PMPI_Allreduce(MPI_IN_PLACE, tot, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const char *out = getenv("MOE_PMPI_OUT");
    if (out && rank_of(MPI_COMM_WORLD) == 0) {
        FILE *fp = fopen(out, "w");
        if (fp) {
            fprintf(fp, "collectives %zu zero_byte %.0f barriers %.0f p2p %.0f p2p_zero %.0f "
                        "bytes %.0f\n", nrec, zero, tot[0] / size_of(MPI_COMM_WORLD), tot[1],
                    tot[2], bytes);
            fclose(fp);
        }
    }
    free(rec);
    return PMPI_Finalize();
}
#else
/* no MPI: nothing to wrap (ISO C wants a declaration in a translation unit) */
typedef int moe_pmpi_count_unused;
#endif
