/* run/run_comm_internal.h -- libmoerun's transport layer: collectives on the host communicator
 * (run_comm.c). The lowest layer of lib/run: it knows nothing of a run's state, and every
 * other part of lib/run may use it. */
#ifndef MOE_RUN_COMM_INTERNAL_H
#define MOE_RUN_COMM_INTERNAL_H

#include <stddef.h>

#include "moe/run_backend.h"

#ifdef HAVE_MPI
#include <mpi.h>
#endif

/* The collectives return 0 or a negative status; an MPI failure leaves a one-line message,
 * "host:file:line: MPI error: ...", in run_comm_errmsg (the job is then out of step: the
 * caller reports it and the tool ends every rank with moe_run_comm_abort). */
int run_comm_allreduce(moe_run_comm_t *c, double *v, int n, int op);
int run_comm_alltoallv(moe_run_comm_t *c, const void *send, const size_t *sc, const size_t *sd,
                       void *recv, const size_t *rc, const size_t *rd);
int run_comm_allgather(moe_run_comm_t *c, const void *send, size_t bytes, void *recv);

/* Point-to-point messages in flight (isend, irecv, and ialltoallv made of them): a set of
 * requests in the caller's `scratch` (run_comm_req_bytes(c, n) bytes for n requests, kept
 * until they complete). Messages of one tag between two ranks are matched in the order they
 * are posted, whatever collectives the job calls meanwhile. */
typedef struct run_comm_req {
    void *scratch;
    int n;      /* requests posted */
    int active; /* some may be in flight */
} run_comm_req_t;
/* Bytes of the scratch of n requests. */
size_t run_comm_req_bytes(const moe_run_comm_t *c, size_t n);
/* Make q n requests, none posted yet (its scratch must hold n), so that any of them may be
 * posted in any order. */
void run_comm_req_null(run_comm_req_t *q, int n);
/* Post a send of `bytes` to rank `to` (not this one) under tag (0..32767) as request `at` of q:
 * q->n (then q->n grows by one), or a request that has completed, posted again. buf must stay
 * untouched until it completes. */
int run_comm_isend(moe_run_comm_t *c, const void *buf, size_t bytes, int to, int tag, int at,
                   run_comm_req_t *q);
/* Post a receive of `bytes` from rank `from` (not this one) under tag, likewise. */
int run_comm_irecv(moe_run_comm_t *c, void *buf, size_t bytes, int from, int tag, int at,
                   run_comm_req_t *q);
/* An alltoallv of bytes (counts and displacements as run_comm_alltoallv's) under tag, as
 * requests q->n onwards (up to 2 G of them); the local part is copied at once. send and recv
 * must stay untouched until the wait. */
int run_comm_ialltoallv(moe_run_comm_t *c, const void *send, const size_t *sc, const size_t *sd,
                        void *recv, const size_t *rc, const size_t *rd, int tag,
                        run_comm_req_t *q);
/* Let the transfers in flight progress (MPI moves them only inside its calls): *done is set
 * when every request of q has completed. */
int run_comm_test(moe_run_comm_t *c, run_comm_req_t *q, int *done);
/* The requests of q that completed since the last call: their indices into idx (room for
 * q->n), their number into *nd; with `block`, waits until one completes unless none is left
 * in flight (*nd 0). */
int run_comm_some(moe_run_comm_t *c, run_comm_req_t *q, int block, int *idx, int *nd);
/* Complete every request of q. */
int run_comm_wait(moe_run_comm_t *c, run_comm_req_t *q);
int run_comm_barrier(moe_run_comm_t *c);

/* Groups of the host communicator for a layout of gpn ranks per node (hierarchical mode): the
 * ranks of this rank's node (its MPI_COMM_TYPE_SHARED communicator when that holds exactly
 * them, else an MPI_Comm_split by node index, as a topology that lays several nodes on one
 * host needs), and the ranks of its local index on every node (the "rail" among which
 * DeepEP's RDMA copies go). run_comm_groups makes them (collective; again with the same gpn:
 * nothing) and sets *shared when the node group is the machine's own; freed at finalize. */
enum { RUN_GROUP_WORLD = 0, RUN_GROUP_NODE = 1, RUN_GROUP_RAIL = 2 };
int run_comm_groups(moe_run_comm_t *c, int gpn, int *shared);
/* The world ranks of a group: first + i * stride for i < n. */
int run_comm_group_ranks(const moe_run_comm_t *c, int group, int *first, int *stride, int *n);
/* Counts and displacements indexed by world rank (those of ranks outside the group 0, else
 * MOE_EINVAL) as 4 arrays of the group's size in k (room for 4 G). */
int run_comm_group_counts(const moe_run_comm_t *c, int group, const size_t *sc,
                          const size_t *sd, const size_t *rc, const size_t *rd, int *k);
/* run_comm_alltoallv among a group's ranks, counts as run_comm_group_counts takes them. */
int run_comm_group_alltoallv(moe_run_comm_t *c, int group, const void *send, const size_t *sc,
                             const size_t *sd, void *recv, const size_t *rc, const size_t *rd);
#ifdef HAVE_MPI
MPI_Comm run_comm_group_mpi(const moe_run_comm_t *c, int group);
#endif
/* The message of the last MPI failure on this rank ("" when none). */
const char *run_comm_errmsg(const moe_run_comm_t *c);
/* The MPI library's name and version, for reports. */
void run_comm_version(char *buf, size_t len);

#ifdef HAVE_MPI
/* Record an MPI failure of the call at file:line in c's message; returns MOE_ESYS. */
int run_comm_fail(moe_run_comm_t *c, int err, const char *file, int line);
/* Check an MPI call inside a function returning a status: on failure, record and return. */
#define RUN_MPI(c, call)                                                                       \
    do {                                                                                       \
        int run_mpi_rc_ = (call);                                                              \
        if (run_mpi_rc_ != MPI_SUCCESS)                                                        \
            return run_comm_fail((c), run_mpi_rc_, __FILE__, __LINE__);                        \
    } while (0)
#endif

#endif
