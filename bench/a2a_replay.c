/* bench/a2a_replay.c -- a bare MPI_Alltoallv of given per-peer bytes, timed, for
 * bench/bench_run.sh: the floor moe-run's dispatch and combine are compared with (issue 43,
 * acceptance 2). Every rank sends `bytes` to every other rank in each of `calls` all-to-alls a
 * round (a layer's dispatch and combine: 2), `rounds` rounds (layers x iterations) after one
 * untimed round; between rounds a barrier, so that no rank's lateness counts as transfer.
 * Rank 0 prints "replay_ms_per_round X" (the slowest rank's mean), to compare with moe-run's
 * dispatch_ms + combine_ms of a layer.
 * Usage: mpirun -np G a2a_replay BYTES CALLS ROUNDS */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef HAVE_MPI
#include <mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, G;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &G);
    long bytes = argc == 4 ? atol(argv[1]) : -1;
    int calls = argc == 4 ? atoi(argv[2]) : 0, rounds = argc == 4 ? atoi(argv[3]) : 0;
    if (bytes < 0 || bytes > 1L << 30 || calls < 1 || rounds < 1) {
        if (!me)
            fprintf(stderr, "usage: a2a_replay BYTES CALLS ROUNDS\n");
        MPI_Finalize();
        return 2;
    }
    int *c = malloc(4 * (size_t)G * sizeof *c);
    char *s = malloc((size_t)bytes * G + 1), *r = malloc((size_t)bytes * G + 1);
    if (!c || !s || !r)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int p = 0; p < G; p++) {
        c[p] = c[2 * G + p] = p == me ? 0 : (int)bytes;
        c[G + p] = c[3 * G + p] = (int)(p * bytes);
    }
    for (long i = 0; i < bytes * G; i++)
        s[i] = (char)i;
    double t = 0;
    for (int k = 0; k <= rounds; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int q = 0; q < calls; q++)
            MPI_Alltoallv(s, c, c + G, MPI_BYTE, r, c + 2 * G, c + 3 * G, MPI_BYTE,
                          MPI_COMM_WORLD);
        if (k) /* round 0 warms the transport up */
            t += MPI_Wtime() - t0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (!me)
        printf("replay_ms_per_round %.6f\n", 1e3 * t / rounds);
    free(c);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
#else
int main(void)
{
    fprintf(stderr, "a2a_replay: built without MPI\n");
    return 77;
}
#endif
