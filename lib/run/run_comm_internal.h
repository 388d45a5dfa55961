/* run/run_comm_internal.h -- libmoerun's transport layer: collectives on the host communicator
 * (run_comm.c). The lowest layer of lib/run: it knows nothing of a run's state, and every
 * other part of lib/run may use it. */
#ifndef MOE_RUN_COMM_INTERNAL_H
#define MOE_RUN_COMM_INTERNAL_H

#include <stddef.h>

#include "moe/run_backend.h"

/* The collectives return 0 or a negative status; an MPI failure leaves a one-line message,
 * "host:file:line: MPI error: ...", in run_comm_errmsg (the job is then out of step: the
 * caller reports it and the tool ends every rank with moe_run_comm_abort). */
int run_comm_allreduce(moe_run_comm_t *c, double *v, int n, int op);
int run_comm_alltoallv(moe_run_comm_t *c, const void *send, const size_t *sc, const size_t *sd,
                       void *recv, const size_t *rc, const size_t *rd);
int run_comm_allgather(moe_run_comm_t *c, const void *send, size_t bytes, void *recv);
int run_comm_barrier(moe_run_comm_t *c);
/* The message of the last MPI failure on this rank ("" when none). */
const char *run_comm_errmsg(const moe_run_comm_t *c);
/* The MPI library's name and version, for reports. */
void run_comm_version(char *buf, size_t len);

#ifdef HAVE_MPI
#include <mpi.h>
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
