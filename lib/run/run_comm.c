/* run/run_comm.c -- moe-run's host communicator: MPI_COMM_WORLD, or one rank without MPI. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/moe.h"
#include "moe/run.h"
#include "run_comm_internal.h"

struct moe_run_comm {
    int rank, size, local_rank, local_size;
    char err[640]; /* the last MPI failure, "" when none */
    int gpn, shared; /* the groups' ranks per node (0: none made), node group = local's */
#ifdef HAVE_MPI
    MPI_Comm local;
    MPI_Comm node, rail; /* run_comm_groups */
#endif
};

static moe_run_comm_t the_comm;

#ifdef HAVE_MPI
int run_comm_fail(moe_run_comm_t *c, int err, const char *file, int line)
{
    char msg[MPI_MAX_ERROR_STRING], host[256];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error code %d", err);
    if (gethostname(host, sizeof host))
        strcpy(host, "?");
    host[sizeof host - 1] = 0;
    snprintf(c->err, sizeof c->err, "%s:%s:%d: MPI error: %s", host, file, line, msg);
    return MOE_ESYS;
}
#endif

const char *run_comm_errmsg(const moe_run_comm_t *c)
{
    return c->err;
}

const char *moe_run_comm_error(const moe_run_comm_t *c)
{
    return c->err;
}

moe_run_comm_t *moe_run_comm_init(int *argc, char ***argv)
{
    moe_run_comm_t *c = &the_comm;
    c->size = c->local_size = 1;
#ifdef HAVE_MPI
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return NULL;
    /* errors come back as codes: the caller reports them and the tool aborts the job */
    if (MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, &c->size) != MPI_SUCCESS ||
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                            &c->local) != MPI_SUCCESS ||
        MPI_Comm_rank(c->local, &c->local_rank) != MPI_SUCCESS ||
        MPI_Comm_size(c->local, &c->local_size) != MPI_SUCCESS)
        return NULL;
#else
    (void)argc;
    (void)argv;
#endif
    return c;
}

void moe_run_comm_finalize(moe_run_comm_t *c)
{
#ifdef HAVE_MPI
    if (c->gpn) {
        MPI_Comm_free(&c->node);
        MPI_Comm_free(&c->rail);
        c->gpn = 0;
    }
    MPI_Comm_free(&c->local);
    MPI_Finalize();
#else
    (void)c;
#endif
}

int moe_run_comm_rank(const moe_run_comm_t *c) { return c->rank; }
int moe_run_comm_size(const moe_run_comm_t *c) { return c->size; }
int moe_run_comm_local_rank(const moe_run_comm_t *c) { return c->local_rank; }
int moe_run_comm_local_size(const moe_run_comm_t *c) { return c->local_size; }

int moe_run_comm_bcast(moe_run_comm_t *c, void *buf, size_t bytes, int root)
{
    (void)c;
#ifdef HAVE_MPI
    if (bytes > INT32_MAX)
        return MOE_EINVAL;
    RUN_MPI(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD));
#else
    (void)buf;
    (void)bytes;
    (void)root;
#endif
    return 0;
}

void moe_run_comm_abort(moe_run_comm_t *c, int code)
{
    (void)c;
#ifdef HAVE_MPI
    MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)code;
#endif
}

int run_comm_allreduce(moe_run_comm_t *c, double *v, int n, int op)
{
    (void)c;
#ifdef HAVE_MPI
    MPI_Op o = op == MOE_RUN_MAX ? MPI_MAX : op == MOE_RUN_MIN ? MPI_MIN : MPI_SUM;
    RUN_MPI(c, MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, o, MPI_COMM_WORLD));
#else
    (void)v;
    (void)n;
    (void)op;
#endif
    return 0;
}

int run_comm_alltoallv(moe_run_comm_t *c, const void *send, const size_t *sc, const size_t *sd,
                       void *recv, const size_t *rc, const size_t *rd)
{
#ifdef HAVE_MPI
    return run_comm_group_alltoallv(c, RUN_GROUP_WORLD, send, sc, sd, recv, rc, rd);
#else
    (void)c;
    (void)rc;
    if (sc[0])
        memmove((char *)recv + rd[0], (const char *)send + sd[0], sc[0]);
#endif
    return 0;
}

size_t run_comm_req_bytes(const moe_run_comm_t *c, size_t n)
{
    (void)c;
#ifdef HAVE_MPI
    return (n + 1) * sizeof(MPI_Request);
#else
    return n + 1;
#endif
}

void run_comm_req_null(run_comm_req_t *q, int n)
{
#ifdef HAVE_MPI
    MPI_Request *rq = q->scratch;
    for (int i = 0; i < n; i++)
        rq[i] = MPI_REQUEST_NULL;
#endif
    q->n = n;
    q->active = 0;
}

/* A send (recv 0) or receive of `bytes` with rank `peer` as request `at` of q. */
static int post(moe_run_comm_t *c, void *buf, size_t bytes, int peer, int tag, int at,
                run_comm_req_t *q, int recv)
{
    if (bytes > INT32_MAX)
        return MOE_ERANGE;
    if (peer == c->rank || peer < 0 || peer >= c->size || at < 0 || at > q->n)
        return MOE_EINVAL;
#ifdef HAVE_MPI
    MPI_Request *rq = q->scratch;
    if (recv)
        RUN_MPI(c, MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq[at]));
    else
        RUN_MPI(c, MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq[at]));
    q->n = at + 1 > q->n ? at + 1 : q->n;
    q->active = 1;
    return 0;
#else
    (void)buf;
    (void)tag;
    (void)recv;
    return MOE_EINVAL;
#endif
}

int run_comm_isend(moe_run_comm_t *c, const void *buf, size_t bytes, int to, int tag, int at,
                   run_comm_req_t *q)
{
    return post(c, (void *)buf, bytes, to, tag, at, q, 0);
}

int run_comm_irecv(moe_run_comm_t *c, void *buf, size_t bytes, int from, int tag, int at,
                   run_comm_req_t *q)
{
    return post(c, buf, bytes, from, tag, at, q, 1);
}

int run_comm_ialltoallv(moe_run_comm_t *c, const void *send, const size_t *sc, const size_t *sd,
                        void *recv, const size_t *rc, const size_t *rd, int tag,
                        run_comm_req_t *q)
{
    int me = c->rank, G = c->size, rcode;
    /* the receives first, so that no message waits unexpected */
    for (int k = 1; k < G; k++) {
        int p = (me + G - k) % G;
        if (rc[p] && (rcode = run_comm_irecv(c, (char *)recv + rd[p], rc[p], p, tag, q->n, q)))
            return rcode;
    }
    for (int k = 1; k < G; k++) {
        int p = (me + k) % G;
        if (sc[p] &&
            (rcode = run_comm_isend(c, (const char *)send + sd[p], sc[p], p, tag, q->n, q)))
            return rcode;
    }
    if (sc[me] != rc[me])
        return MOE_EINVAL;
    if (sc[me])
        memmove((char *)recv + rd[me], (const char *)send + sd[me], sc[me]);
    return 0;
}

int run_comm_test(moe_run_comm_t *c, run_comm_req_t *q, int *done)
{
    *done = 1;
    if (!q->active)
        return 0;
#ifdef HAVE_MPI
    RUN_MPI(c, MPI_Testall(q->n, q->scratch, done, MPI_STATUSES_IGNORE));
    q->active = !*done;
#else
    (void)c;
#endif
    return 0;
}

int run_comm_some(moe_run_comm_t *c, run_comm_req_t *q, int block, int *idx, int *nd)
{
    *nd = 0;
    if (!q->active)
        return 0;
#ifdef HAVE_MPI
    int n;
    RUN_MPI(c, block ? MPI_Waitsome(q->n, q->scratch, &n, idx, MPI_STATUSES_IGNORE)
                     : MPI_Testsome(q->n, q->scratch, &n, idx, MPI_STATUSES_IGNORE));
    if (n == MPI_UNDEFINED) {
        q->active = 0;
        n = 0;
    }
    *nd = n;
#else
    (void)c;
    (void)block;
    (void)idx;
#endif
    return 0;
}

int run_comm_wait(moe_run_comm_t *c, run_comm_req_t *q)
{
    if (!q->active)
        return 0;
    q->active = 0;
#ifdef HAVE_MPI
    RUN_MPI(c, MPI_Waitall(q->n, q->scratch, MPI_STATUSES_IGNORE));
#else
    (void)c;
#endif
    return 0;
}

int run_comm_allgather(moe_run_comm_t *c, const void *send, size_t bytes, void *recv)
{
    (void)c;
#ifdef HAVE_MPI
    if (bytes > INT32_MAX)
        return MOE_ERANGE;
    RUN_MPI(c, MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                             MPI_COMM_WORLD));
#else
    if (bytes)
        memmove(recv, send, bytes);
#endif
    return 0;
}

void run_comm_version(char *buf, size_t len)
{
#ifdef HAVE_MPI
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(v, &n);
    v[strcspn(v, ",\n")] = 0; /* "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4" */
    snprintf(buf, len, "%s", v);
#else
    snprintf(buf, len, "no MPI (single rank)");
#endif
}

int run_comm_barrier(moe_run_comm_t *c)
{
    (void)c;
#ifdef HAVE_MPI
    RUN_MPI(c, MPI_Barrier(MPI_COMM_WORLD));
#endif
    return 0;
}

int moe_run_comm_allreduce(moe_run_comm_t *c, double *v, int n, int op)
{
    return run_comm_allreduce(c, v, n, op);
}

int moe_run_comm_alltoallv(moe_run_comm_t *c, const void *send, const size_t *sc,
                           const size_t *sd, void *recv, const size_t *rc, const size_t *rd)
{
    return run_comm_alltoallv(c, send, sc, sd, recv, rc, rd);
}

int moe_run_comm_allgather(moe_run_comm_t *c, const void *send, size_t bytes, void *recv)
{
    return run_comm_allgather(c, send, bytes, recv);
}

int moe_run_comm_barrier(moe_run_comm_t *c)
{
    return run_comm_barrier(c);
}

/* ------------------------------------------------------------------ groups */

int run_comm_groups(moe_run_comm_t *c, int gpn, int *shared)
{
    if (gpn <= 0 || c->size % gpn)
        return MOE_EINVAL;
    if (c->gpn == gpn) {
        *shared = c->shared;
        return 0;
    }
#ifdef HAVE_MPI
    if (c->gpn) {
        MPI_Comm_free(&c->node);
        MPI_Comm_free(&c->rail);
        c->gpn = 0;
    }
    /* the machine's own node (MPI_COMM_TYPE_SHARED, made at init) when it holds exactly the
     * ranks of this rank's node index on every rank, else those ranks by MPI_Comm_split (a
     * topology that lays several nodes on one host) */
    int lo = c->rank / gpn, hi = lo, ok;
    RUN_MPI(c, MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, c->local));
    RUN_MPI(c, MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, c->local));
    ok = lo == hi && c->local_size == gpn;
    RUN_MPI(c, MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (ok) /* its ranks in world order: the split_type was keyed by rank */
        RUN_MPI(c, MPI_Comm_dup(c->local, &c->node));
    else
        RUN_MPI(c, MPI_Comm_split(MPI_COMM_WORLD, c->rank / gpn, c->rank, &c->node));
    RUN_MPI(c, MPI_Comm_split(MPI_COMM_WORLD, c->rank % gpn, c->rank, &c->rail));
    c->shared = ok;
#else
    c->shared = 1;
#endif
    c->gpn = gpn;
    *shared = c->shared;
    return 0;
}

int run_comm_group_ranks(const moe_run_comm_t *c, int group, int *first, int *stride, int *n)
{
    if (group == RUN_GROUP_WORLD || !c->gpn) {
        *first = 0;
        *stride = 1;
        *n = c->size;
        return group == RUN_GROUP_WORLD ? 0 : MOE_EINVAL;
    }
    if (group == RUN_GROUP_NODE) {
        *first = c->rank / c->gpn * c->gpn;
        *stride = 1;
        *n = c->gpn;
    } else {
        *first = c->rank % c->gpn;
        *stride = c->gpn;
        *n = c->size / c->gpn;
    }
    return 0;
}

#ifdef HAVE_MPI
MPI_Comm run_comm_group_mpi(const moe_run_comm_t *c, int group)
{
    return group == RUN_GROUP_NODE ? c->node : group == RUN_GROUP_RAIL ? c->rail : MPI_COMM_WORLD;
}
#endif

int run_comm_group_counts(const moe_run_comm_t *c, int group, const size_t *sc,
                          const size_t *sd, const size_t *rc, const size_t *rd, int *k)
{
    int first, stride, n, rcode = run_comm_group_ranks(c, group, &first, &stride, &n);
    if (rcode)
        return rcode;
    for (int p = 0, i = 0; p < c->size; p++) {
        int in = p >= first && (p - first) % stride == 0 && (p - first) / stride < n;
        if (!in) {
            if (sc[p] || rc[p])
                return MOE_EINVAL;
            continue;
        }
        if (sc[p] > INT32_MAX || sd[p] > INT32_MAX || rc[p] > INT32_MAX || rd[p] > INT32_MAX)
            return MOE_ERANGE;
        k[i] = (int)sc[p];
        k[n + i] = (int)sd[p];
        k[2 * n + i] = (int)rc[p];
        k[3 * n + i] = (int)rd[p];
        i++;
    }
    return 0;
}

int run_comm_group_alltoallv(moe_run_comm_t *c, int group, const void *send, const size_t *sc,
                             const size_t *sd, void *recv, const size_t *rc, const size_t *rd)
{
#ifdef HAVE_MPI
    int *k = malloc(4 * (size_t)c->size * sizeof *k);
    if (!k)
        return MOE_ENOMEM;
    int rcode = run_comm_group_counts(c, group, sc, sd, rc, rd, k), first, stride, n;
    run_comm_group_ranks(c, group, &first, &stride, &n);
    int err = rcode ? MPI_SUCCESS
                    : MPI_Alltoallv(send, k, k + n, MPI_BYTE, recv, k + 2 * n, k + 3 * n,
                                    MPI_BYTE, run_comm_group_mpi(c, group));
    free(k);
    if (err != MPI_SUCCESS)
        return run_comm_fail(c, err, __FILE__, __LINE__);
    return rcode;
#else
    (void)group; /* one rank: every group is the world */
    return run_comm_alltoallv(c, send, sc, sd, recv, rc, rd);
#endif
}
