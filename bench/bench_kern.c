/* bench/bench_kern.c -- the CPU expert FFN (moe_kern_ffn, register-blocked: 4 rows x 8
 * columns of outputs held in registers across the sum) against the kernel it replaced, run
 * side by side in this program: blocks of 16 rows, weight row outermost, each output row
 * updated by an axpy per weight row (load, add, store the row again for every weight row).
 * Both give the same floats (each output one sum in the same order), which this program
 * checks; it reports the median time of each in alternating pairs and the median, min and
 * max of the per-pair ratio baseline / moe_kern_ffn.
 *
 * The baseline's speed depends on where its loop lands in the binary (the same source ran
 * 1.4x apart in two builds of moe-run); the register-blocked kernel's does not, as far as
 * measured. See bench/README.
 *
 * usage: bench_kern [--rows N] [--hidden H] [--ffn F] [--expert swiglu|silu] [--pairs P] */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "../lib/run/kern_internal.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The previous moe_kern_ffn on one block of b <= KERN_BLK rows. a: b x C scratch. */
static void base_block(const float *x, size_t b, uint32_t H, uint32_t F, int expert,
                       const float *W1, const float *W2, float *y, float *a)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    float rinv[KERN_BLK];
    for (size_t i = 0; i < b; i++)
        rinv[i] = expert == MOE_EXPERT_SWIGLU ? kern_rinv(x + i * H, H) : 1.0f;
    memset(a, 0, b * C * sizeof *a);
    for (uint32_t h = 0; h < H; h++)
        for (size_t i = 0; i < b; i++)
            kern_axpy(a + i * C, x[i * H + h] * rinv[i], W1 + h * C, (uint32_t)C);
    if (expert == MOE_EXPERT_SILU) {
        for (size_t i = 0; i < b * F; i++)
            a[i] = a[i] / (1.0f + expf(-a[i]));
    } else {
        for (size_t i = 0; i < b; i++)
            for (uint32_t f = 0; f < F; f++) {
                float g = a[i * C + f], u = a[i * C + F + f];
                a[i * F + f] = g / (1.0f + expf(-g)) * u;
            }
    }
    memset(y, 0, b * H * sizeof *y);
    for (uint32_t f = 0; f < F; f++)
        for (size_t i = 0; i < b; i++)
            kern_axpy(y + i * H, a[i * F + f], W2 + (size_t)f * H, H);
}

static void base_ffn(const float *x, size_t n, uint32_t H, uint32_t F, int expert,
                     const float *W1, const float *W2, float *y, float *a)
{
    for (size_t i = 0; i < n; i += KERN_BLK) {
        size_t b = n - i < KERN_BLK ? n - i : KERN_BLK;
        base_block(x + i * H, b, H, F, expert, W1, W2, y + i * H, a);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static unsigned long arg(const char *opt, const char *s, unsigned long lo, unsigned long hi)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_kern: %s: '%s' is not a number in %lu..%lu\n", opt, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    unsigned long n = 1600, H = 256, F = 256, pairs = 9;
    int expert = MOE_EXPERT_SWIGLU;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench_kern: %s needs a value\n", o);
            return 2;
        }
        if (!strcmp(o, "--rows"))
            n = arg(o, v, 1, 1000000);
        else if (!strcmp(o, "--hidden"))
            H = arg(o, v, 1, 65536);
        else if (!strcmp(o, "--ffn"))
            F = arg(o, v, 1, 65536);
        else if (!strcmp(o, "--pairs"))
            pairs = arg(o, v, 1, 1000);
        else if (!strcmp(o, "--expert")) {
            if ((expert = moe_expert_parse(v)) < 0) {
                fprintf(stderr, "bench_kern: --expert: '%s' is not swiglu or silu\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_kern [--rows N] [--hidden H] [--ffn F] "
                            "[--expert swiglu|silu] [--pairs P]\n");
            return 2;
        }
        i++;
    }
    const size_t C = moe_kern_w1_cols((uint32_t)F, expert);
    float *x = malloc(n * H * sizeof *x), *W1 = malloc(H * C * sizeof *W1);
    float *W2 = malloc(F * H * sizeof *W2), *y0 = malloc(n * H * sizeof *y0);
    float *y1 = malloc(n * H * sizeof *y1), *a = malloc(KERN_BLK * C * sizeof *a);
    float *work = malloc(moe_kern_ffn_work_size((uint32_t)F) * sizeof *work);
    double *tb = malloc(pairs * sizeof *tb), *tn = malloc(pairs * sizeof *tn);
    double *ratio = malloc(pairs * sizeof *ratio);
    if (!x || !W1 || !W2 || !y0 || !y1 || !a || !work || !tb || !tn || !ratio) {
        fprintf(stderr, "bench_kern: out of memory\n");
        return 1;
    }
    moe_kern_init_tokens(1, 0, n, (uint32_t)H, x);
    moe_kern_init_expert(1, 0, 0, 1, (uint32_t)H, (uint32_t)F, expert, W1, W2);
    base_ffn(x, n, (uint32_t)H, (uint32_t)F, expert, W1, W2, y0, a); /* warm both */
    moe_kern_ffn(x, n, (uint32_t)H, (uint32_t)F, expert, W1, W2, y1, work);
    int same = memcmp(y0, y1, n * H * sizeof *y0) == 0;
    for (unsigned long p = 0; p < pairs; p++) {
        double t0 = now();
        base_ffn(x, n, (uint32_t)H, (uint32_t)F, expert, W1, W2, y0, a);
        double t1 = now();
        moe_kern_ffn(x, n, (uint32_t)H, (uint32_t)F, expert, W1, W2, y1, work);
        double t2 = now();
        tb[p] = t1 - t0;
        tn[p] = t2 - t1;
        ratio[p] = tb[p] / tn[p];
    }
    double flops = 2.0 * (double)n * (double)H * (double)(C + F);
    double mb = median(tb, (int)pairs), mn = median(tn, (int)pairs);
    double mr = median(ratio, (int)pairs);
    printf("%-7s rows %6lu hidden %5lu ffn %5lu: row-axpy %8.3f ms (%5.1f GFLOP/s)  "
           "register-blocked %8.3f ms (%5.1f GFLOP/s)  ratio %.2f (%.2f-%.2f, %lu pairs)  "
           "outputs %s\n",
           moe_expert_name(expert), n, H, F, 1e3 * mb, flops / mb / 1e9, 1e3 * mn,
           flops / mn / 1e9, mr, ratio[0], ratio[pairs - 1], pairs,
           same ? "bit-identical" : "DIFFER");
    free(x);
    free(W1);
    free(W2);
    free(y0);
    free(y1);
    free(a);
    free(work);
    free(tb);
    free(tn);
    free(ratio);
#if defined(__FMA__)
    return 0; /* fused multiply-adds may round the two kernels' sums differently */
#else
    return same ? 0 : 1;
#endif
}
