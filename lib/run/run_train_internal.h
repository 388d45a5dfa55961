/* run/run_train_internal.h -- libmoerun's training layer (run_train.c): --train's steps and
 * their --check. Uses the iterations and modes layers; used by the entry points (run_api.c). */
#ifndef MOE_RUN_TRAIN_INTERNAL_H
#define MOE_RUN_TRAIN_INTERNAL_H

#include "run_internal.h"

/* --train: warm-up and timed training steps (forward, loss, backward, SGD); r->losses[i] the
 * loss of step i, the same on every rank. */
void run_train_iterations(run_t *r);
/* --check with --train: the seeded weights again, one step without the update, its loss and
 * every gradient against the serial reference model (moe_kern_model_loss_grad_routed) on rank
 * 0. Returns the largest relative difference (rank 0; 0 elsewhere). */
double run_train_check(run_t *r);

#endif
