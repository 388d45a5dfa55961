/* pool.c -- the one place libmoecore starts threads (pool_internal.h): teams of workers over the
 * numbered shares of a job, joined by the caller. */
#include "config.h"

#include <stdlib.h>

#include "moe/moe.h"
#include "pool_internal.h"

struct pool_thread {
    pthread_t tid;
    pool_team_t *team;
    int share;
};

static void *thread_main(void *arg)
{
    struct pool_thread *th = arg;
    th->team->fn(th->team->arg, th->share);
    return NULL;
}

int pool_team_start(pool_team_t *t, int n, void (*fn)(void *arg, int share), void *arg)
{
    *t = (pool_team_t){.fn = fn, .arg = arg, .n = n > 0 ? n : 1};
    if (t->n == 1)
        return 0;
    if (!(t->thr = calloc((size_t)t->n - 1, sizeof *t->thr)))
        return MOE_ENOMEM;
    for (int i = 1; i < t->n; i++) {
        struct pool_thread *th = &t->thr[i - 1];
        th->team = t;
        th->share = i;
        if (pthread_create(&th->tid, NULL, thread_main, th) != 0)
            break; /* the rest are the join's to run, or to do without */
        t->started = i;
    }
    return 0;
}

void pool_team_join(pool_team_t *t, int rerun)
{
    for (int i = 1; i <= t->started; i++)
        pthread_join(t->thr[i - 1].tid, NULL);
    for (int i = t->started + 1; rerun && i < t->n; i++)
        t->fn(t->arg, i);
    free(t->thr);
    t->thr = NULL;
    t->started = 0;
}

void pool_run(int n, void (*fn)(void *arg, int share), void *arg)
{
    pool_team_t t;
    if (pool_team_start(&t, n, fn, arg) != 0) /* no memory for the team: the caller runs all */
        t = (pool_team_t){.fn = fn, .arg = arg, .n = n > 0 ? n : 1};
    fn(arg, 0);
    pool_team_join(&t, 1);
}
