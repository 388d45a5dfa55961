/* pool_internal.h -- the threads of libmoecore: every thread the library starts is started in
 * lib/pool.c, as a team running one function on numbered shares of a job (htslib keeps one
 * thread pool likewise). A shared piece: includes nothing of the library's parts. */
#ifndef MOE_POOL_INTERNAL_H
#define MOE_POOL_INTERNAL_H

#include <pthread.h>

/* A team: fn(arg, i) for shares i = 1..n-1 on threads of their own; share 0 is the caller's. */
typedef struct pool_team {
    void (*fn)(void *arg, int share);
    void *arg;
    int n;                   /* shares */
    int started;             /* threads running: shares 1..started */
    struct pool_thread *thr; /* [n - 1] */
} pool_team_t;

/* Start shares 1..n-1 of fn(arg, share) on threads of their own; the caller runs share 0 if
 * the job has one for it. A thread that cannot start stops the starting: shares from it on are
 * left to pool_team_join (t->started says how many run). Returns 0, or MOE_ENOMEM with no
 * thread started. */
int pool_team_start(pool_team_t *t, int n, void (*fn)(void *arg, int share), void *arg);
/* Wait for the team's threads. With rerun, the shares whose thread did not start run now, on
 * the caller, in order: a job of fixed shares is then complete however many threads started,
 * and a job whose workers take work from a common queue finds the queue empty. */
void pool_team_join(pool_team_t *t, int rerun);
/* A fork-join of n fixed shares: start, run share 0 here, join with rerun. Runs every share,
 * on the caller alone if no thread starts. */
void pool_run(int n, void (*fn)(void *arg, int share), void *arg);

#endif
