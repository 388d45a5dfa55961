/* bench/bench_ffn.c -- the GFLOP/s of a bare cblas_sgemm on an expert FFN's two products,
 * x W1 (rows x H times H x C) then h W2 (rows x F times F x H), one BLAS thread: the figure
 * moe-run's expert FFN is compared with in bench/bench_ffn.sh. It prints the median of the
 * repetitions as "gflops N".
 *
 * usage: bench_ffn --rows N --hidden H --ffn F [--expert swiglu|silu] [--reps R] */
#include "config.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_BLIS
void bli_thread_set_num_threads(int64_t n);
#define openblas_set_num_threads bli_thread_set_num_threads
#else
void openblas_set_num_threads(int n);
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *filled(size_t n, uint32_t seed)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_ffn: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) { /* small values of both signs; their size is no matter */
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

int main(int argc, char **argv)
{
    long rows = 2048, H = 1024, F = 2048, reps = 5;
    int swiglu = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            rows = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--hidden"))
            H = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--ffn"))
            F = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--expert"))
            swiglu = strcmp(argv[i + 1], "silu") != 0;
        else {
            fprintf(stderr, "usage: bench_ffn --rows N --hidden H --ffn F [--expert "
                            "swiglu|silu] [--reps R]\n");
            return 2;
        }
    }
    if (rows <= 0 || H <= 0 || F <= 0 || reps <= 0 || reps > 1000) {
        fprintf(stderr, "bench_ffn: sizes and --reps must be positive\n");
        return 2;
    }
    openblas_set_num_threads(1);
    const long C = swiglu ? 2 * F : F;
    float *x = filled((size_t)rows * H, 1), *W1 = filled((size_t)H * C, 2);
    float *W2 = filled((size_t)F * H, 3), *a = filled((size_t)rows * C, 4);
    float *y = filled((size_t)rows * H, 5);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t)
        return 1;
    for (long r = 0; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)C, (int)H, 1.0f,
                    x, (int)H, W1, (int)C, 0.0f, a, (int)C);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)H, (int)F, 1.0f,
                    a, (int)C, W2, (int)H, 0.0f, y, (int)H);
        t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double flops = 2.0 * (double)rows * ((double)H * C + (double)F * H);
    printf("gflops %.2f\n", flops / t[reps / 2] / 1e9);
    free(x);
    free(W1);
    free(W2);
    free(a);
    free(y);
    free(t);
    return 0;
}
