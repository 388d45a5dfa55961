/* tests/unit/test_pool.c -- lib/pool.c, where libmoecore starts its threads: every share of a
 * fork-join runs exactly once, share 0 on the caller; a team's threads run beside the caller
 * and are joined; a join with rerun runs what no thread ran. */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "pool_internal.h"
#include "unit.h"

typedef struct job {
    int runs[64];
    pthread_t who[64];
} job_t;

static void share_fn(void *arg, int share)
{
    job_t *j = arg;
    __atomic_fetch_add(&j->runs[share], 1, __ATOMIC_RELAXED);
    j->who[share] = pthread_self();
}

int main(void)
{
    for (int n = 0; n <= 17; n++) {
        job_t j;
        memset(&j, 0, sizeof j);
        pool_run(n, share_fn, &j);
        int m = n > 0 ? n : 1, bad = 0;
        for (int i = 0; i < 64; i++)
            bad += j.runs[i] != (i < m);
        CHECK_EQ_INT(bad, 0);
        CHECK(pthread_equal(j.who[0], pthread_self()));
    }
    /* a team beside the caller: its threads run shares 1..n-1, joined without rerun */
    job_t j;
    memset(&j, 0, sizeof j);
    pool_team_t t;
    CHECK_EQ_INT(pool_team_start(&t, 5, share_fn, &j), 0);
    CHECK(t.started <= 4);
    int started = t.started;
    pool_team_join(&t, 0);
    for (int i = 1; i <= started; i++)
        CHECK(j.runs[i] == 1 && !pthread_equal(j.who[i], pthread_self()));
    CHECK_EQ_INT(j.runs[0], 0);
    /* a join with rerun completes whatever did not start: simulated by a team told it started
     * none of its threads */
    memset(&j, 0, sizeof j);
    pool_team_t none = {.fn = share_fn, .arg = &j, .n = 4, .started = 0, .thr = NULL};
    pool_team_join(&none, 1);
    CHECK(j.runs[1] == 1 && j.runs[2] == 1 && j.runs[3] == 1 && j.runs[0] == 0);
    return unit_done("test_pool");
}
