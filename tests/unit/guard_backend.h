/* tests/unit/guard_backend.h -- the CPU backend under a GPU's memory rules, for tests that
 * prove, without a GPU, that moe-run's runtime (forward and training) reaches backend memory
 * only through the backend's operations (moe/run_backend.h): as on a GPU, where the host cannot
 * read or write device memory.
 *
 * Every buffer the guard's alloc returns lies in one arena of address space that is
 * inaccessible (PROT_NONE) except while one of the backend's operations runs: the runtime's
 * own loads and stores of backend memory fault, and the guard's SIGSEGV handler says so (with
 * a backtrace) and ends the process with status 3. Each operation also checks its arguments:
 * every backend pointer it is given lies, with the extent the operation reads or writes, in
 * one buffer from alloc, and every host pointer (upload's source, download's destination, the
 * doubles of allreduce) lies outside the arena; a violation is reported on stderr and the
 * operation returns MOE_EINVAL, which the runtime treats as fatal. The all-to-alls complete
 * within the call (ialltoallv as alltoallv), so that no transfer touches the arena between
 * operations. The computations are the CPU backend's, bit for bit. */
#ifndef MOE_TESTS_GUARD_BACKEND_H
#define MOE_TESTS_GUARD_BACKEND_H

#include <stdint.h>

#include "moe/run_backend.h"

/* How often the training operations ran, and the violations seen, since the process began. */
typedef struct guard_counts {
    uint64_t loss_grad, update, mixer_backward, gate_backward, ffn_backward_grouped;
    uint64_t ffn_grouped_act, violations;
} guard_counts_t;

/* The guard over a new CPU backend on c (name "guard"); NULL with the reason in errbuf. One
 * arena serves every guard of the process. */
moe_run_backend_t *guard_backend(moe_run_comm_t *c, char *errbuf, size_t errlen);
/* The counts so far. */
const guard_counts_t *guard_counts(void);
/* Does p lie in the arena (backend memory of a guard)? */
int guard_owns(const void *p);

#endif
