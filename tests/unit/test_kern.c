/* tests/unit/test_kern.c -- the moe-run reference kernels against straightforward recomputations
 * (double precision where it matters) and against known bf16/fp16 bit patterns. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "unit.h"

static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bitsf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void fill(moe_rng_t *r, float *v, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(moe_rng_normal(r) * scale);
}

/* ------------------------------------------------------------------ conversions */

static void test_bf16_patterns(void)
{
    CHECK_EQ_INT(moe_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(moe_f32_to_bf16(-2.0f), 0xc000);
    CHECK_EQ_INT(moe_f32_to_bf16(0.0f), 0x0000);
    CHECK_EQ_INT(moe_f32_to_bf16(-0.0f), 0x8000);
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x40490fdb)), 0x4049);      /* pi rounds down */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x3f80c000)), 0x3f81);      /* above half: up */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x3f808000)), 0x3f80);      /* tie, even below */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x3f818000)), 0x3f82);      /* tie, even above */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x3fffffff)), 0x4000);      /* carry into exponent */
    CHECK_EQ_INT(moe_f32_to_bf16(INFINITY), 0x7f80);
    CHECK_EQ_INT(moe_f32_to_bf16(-INFINITY), 0xff80);
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x7f7fffff)), 0x7f80);      /* FLT_MAX: to Inf */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x7f7f7fff)), 0x7f7f);      /* largest finite kept */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x7fc00000)), 0x7fc0);      /* quiet NaN */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x7f800001)), 0x7fc0);      /* signalling NaN: no Inf */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0xff800001)), 0xffc0);
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x7fffffff)), 0x7fff);      /* no carry out of a NaN */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x00000001)), 0x0000);      /* subnormals round too */
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x00018000)), 0x0002);
    CHECK_EQ_INT(moe_f32_to_bf16(fbits(0x807fffff)), 0x8080);      /* up to the smallest normal */
    CHECK(moe_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(moe_bf16_to_f32(0xc049) == -3.140625f);
    CHECK(isinf(moe_bf16_to_f32(0xff80)) && moe_bf16_to_f32(0xff80) < 0);
    CHECK(isnan(moe_bf16_to_f32(0x7fc1)));
    CHECK(moe_bf16_to_f32(0x0001) == 0x1p-133f);
}

static void test_f16_patterns(void)
{
    CHECK_EQ_INT(moe_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(moe_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(moe_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ_INT(moe_f32_to_f16(0.1f), 0x2e66);
    CHECK_EQ_INT(moe_f32_to_f16(1.0f / 3.0f), 0x3555);
    CHECK_EQ_INT(moe_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);           /* tie, even below */
    CHECK_EQ_INT(moe_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);           /* tie, even above */
    CHECK_EQ_INT(moe_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(moe_f32_to_f16(65519.0f), 0x7bff);
    CHECK_EQ_INT(moe_f32_to_f16(65520.0f), 0x7c00);                  /* tie past max: Inf */
    CHECK_EQ_INT(moe_f32_to_f16(1e10f), 0x7c00);
    CHECK_EQ_INT(moe_f32_to_f16(-INFINITY), 0xfc00);
    CHECK_EQ_INT(moe_f32_to_f16(fbits(0x7fc00000)), 0x7e00);
    CHECK_EQ_INT(moe_f32_to_f16(fbits(0x7f800001)), 0x7e00);         /* sNaN stays NaN */
    CHECK_EQ_INT(moe_f32_to_f16(fbits(0xffc02000)), 0xfe01);         /* sign and payload */
    CHECK_EQ_INT(moe_f32_to_f16(0x1p-14f), 0x0400);                  /* smallest normal */
    CHECK_EQ_INT(moe_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);       /* tie rounds up to it */
    CHECK_EQ_INT(moe_f32_to_f16(0x1p-14f - 0x1p-24f), 0x03ff);       /* largest subnormal */
    CHECK_EQ_INT(moe_f32_to_f16(0x1p-24f), 0x0001);                  /* smallest subnormal */
    CHECK_EQ_INT(moe_f32_to_f16(-0x1p-24f), 0x8001);
    CHECK_EQ_INT(moe_f32_to_f16(0x1p-25f), 0x0000);                  /* tie to even zero */
    CHECK_EQ_INT(moe_f32_to_f16(0x1.000002p-25f), 0x0001);           /* just above the tie */
    CHECK_EQ_INT(moe_f32_to_f16(0x3p-25f), 0x0002);                  /* 1.5 ulp: tie, even */
    CHECK_EQ_INT(moe_f32_to_f16(0x5p-25f), 0x0002);                  /* 2.5 ulp: tie, even */
    CHECK_EQ_INT(moe_f32_to_f16(0x1p-30f), 0x0000);
    CHECK_EQ_INT(moe_f32_to_f16(fbits(0x00000001)), 0x0000);
    CHECK(moe_f16_to_f32(0x3c00) == 1.0f);
    CHECK(moe_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(moe_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(moe_f16_to_f32(0x83ff) == -0x3ffp-24f);
    CHECK(isinf(moe_f16_to_f32(0xfc00)) && moe_f16_to_f32(0xfc00) < 0);
    CHECK(isnan(moe_f16_to_f32(0x7c01)));
    CHECK(bitsf(moe_f16_to_f32(0x8000)) == 0x80000000u);
}

/* Every 16-bit pattern that is not a NaN survives the round trip through fp32; NaNs stay NaN. */
static void test_roundtrip_all(void)
{
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = moe_f16_to_f32((uint16_t)h), g = moe_bf16_to_f32((uint16_t)h);
        int nan16 = (h & 0x7c00) == 0x7c00 && (h & 0x3ff), nanbf = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        bad16 += nan16 ? !(isnan(f) && isnan(moe_f16_to_f32(moe_f32_to_f16(f))))
                       : moe_f32_to_f16(f) != h;
        badbf += nanbf ? !(isnan(g) && isnan(moe_bf16_to_f32(moe_f32_to_bf16(g))))
                       : moe_f32_to_bf16(g) != h;
    }
    CHECK_EQ_INT(bad16, 0);
    CHECK_EQ_INT(badbf, 0);
}

/* Round to nearest even checked from the definition: no representable neighbour is nearer,
 * and on a tie the chosen pattern is even. Random finite floats over the whole range. */
static int rne_ok(float f, uint16_t h, float (*dec)(uint16_t), uint16_t maxfin)
{
    uint16_t mag = h & 0x7fff, sign = h & 0x8000;
    if (mag > maxfin) /* rounded to Inf: f must be at least half an ulp past the max finite */
        return fabs((double)f) >= (double)dec(maxfin) +
                                      ((double)dec(maxfin) - (double)dec(maxfin - 1)) / 2;
    double v = dec(h), d = fabs(v - f);
    for (int s = -1; s <= 1; s += 2) {
        int m = mag + s;
        if (m < 0 || m > maxfin)
            continue;
        double dn = fabs((double)dec((uint16_t)(sign | m)) - f);
        if (dn < d || (dn == d && (h & 1)))
            return 0;
    }
    return 1;
}

static void test_rne_random(void)
{
    moe_rng_t r;
    moe_rng_seed(&r, 99);
    int bad16 = 0, badbf = 0;
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)moe_rng_next(&r);
        if (i % 3 == 0) /* also many values near the fp16 range and its subnormals */
            u = (u & 0x807fffffu) | ((uint32_t)(100 + moe_rng_below(&r, 45)) << 23);
        float f = fbits(u);
        if (!isfinite(f))
            continue;
        bad16 += !rne_ok(f, moe_f32_to_f16(f), moe_f16_to_f32, 0x7bff);
        badbf += !rne_ok(f, moe_f32_to_bf16(f), moe_bf16_to_f32, 0x7f7f);
    }
    CHECK_EQ_INT(bad16, 0);
    CHECK_EQ_INT(badbf, 0);
}

static void test_pack(void)
{
    float src[5] = {1.0f, -0.1f, 65536.0f, 0x1p-20f, 3.0f}, back[5];
    uint8_t buf[20];
    CHECK_EQ_INT(moe_dtype_size(MOE_DTYPE_FP32), 4);
    CHECK_EQ_INT(moe_dtype_size(MOE_DTYPE_BF16), 2);
    CHECK_EQ_INT(moe_dtype_size(MOE_DTYPE_FP16), 2);
    CHECK_EQ_INT(moe_dtype_size(7), 0);
    CHECK_EQ_INT(moe_dtype_parse("bf16"), MOE_DTYPE_BF16);
    CHECK_EQ_INT(moe_dtype_parse("fp16"), MOE_DTYPE_FP16);
    CHECK_EQ_INT(moe_dtype_parse("fp32"), MOE_DTYPE_FP32);
    CHECK_EQ_INT(moe_dtype_parse("f32"), MOE_EINVAL);
    CHECK_EQ_INT(moe_dtype_parse(NULL), MOE_EINVAL);
    CHECK_STR(moe_dtype_name(MOE_DTYPE_FP16), "fp16");
    CHECK_EQ_INT(moe_kern_pack(src, 5, 3, buf), MOE_EINVAL);
    CHECK_EQ_INT(moe_kern_unpack(buf, 5, -1, back), MOE_EINVAL);
    CHECK_EQ_INT(moe_kern_pack(src, 5, MOE_DTYPE_FP32, buf), 0);
    CHECK(memcmp(buf, src, sizeof src) == 0);
    CHECK_EQ_INT(moe_kern_unpack(buf, 5, MOE_DTYPE_FP32, back), 0);
    CHECK(memcmp(back, src, sizeof src) == 0);
    for (int d = MOE_DTYPE_BF16; d <= MOE_DTYPE_FP16; d++) {
        uint16_t (*enc)(float) = d == MOE_DTYPE_BF16 ? moe_f32_to_bf16 : moe_f32_to_f16;
        float (*dec)(uint16_t) = d == MOE_DTYPE_BF16 ? moe_bf16_to_f32 : moe_f16_to_f32;
        CHECK_EQ_INT(moe_kern_pack(src, 5, d, buf), 0);
        CHECK_EQ_INT(moe_kern_unpack(buf, 5, d, back), 0);
        for (int i = 0; i < 5; i++) {
            uint16_t h;
            memcpy(&h, buf + 2 * i, 2);
            CHECK_EQ_INT(h, enc(src[i]));
            CHECK(bitsf(back[i]) == bitsf(dec(h)));
        }
    }
    CHECK(isinf(back[2])); /* 65536 is past fp16 */
}

/* ------------------------------------------------------------------ layer steps */

static double rel_err(const float *a, const double *ref, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        mx = e > mx ? e : mx;
    }
    return mx;
}

static void test_mixer(void)
{
    enum { N = 5, H = 33 };
    float x[N * H], m[H];
    double ref[N * H];
    moe_rng_t r;
    moe_rng_seed(&r, 1);
    fill(&r, x, N * H, 2.0);
    fill(&r, m, H, 1.0);
    for (int i = 0; i < N * H; i++)
        ref[i] = x[i] + 0.25 * tanh((double)m[i % H] * x[i]);
    moe_kern_mixer(x, N, H, m);
    CHECK(rel_err(x, ref, N * H) < 1e-6);
}

/* Top-K by repeated arg-max over the logits (first maximum wins), softmax in double. */
static void gate_naive(const float *x, int H, const float *Wg, int E, int K, int32_t *ids,
                       double *w)
{
    float lg[64];
    int used[64] = {0};
    for (int e = 0; e < E; e++) {
        float s = 0;
        for (int h = 0; h < H; h++)
            s += x[h] * Wg[h * E + e];
        lg[e] = s;
    }
    double sum = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (best < 0 || lg[e] > lg[best]))
                best = e;
        used[best] = 1;
        ids[k] = best;
        w[k] = exp((double)lg[best] - lg[ids[0]]);
        sum += w[k];
    }
    for (int k = 0; k < K; k++)
        w[k] /= sum;
}

static void test_gate(void)
{
    enum { N = 40, H = 24, E = 16, K = 4 };
    float x[N * H], Wg[H * E], w[N * K];
    int32_t ids[N * K], rid[K];
    double rw[K];
    moe_rng_t r;
    moe_rng_seed(&r, 2);
    fill(&r, x, N * H, 1.0);
    fill(&r, Wg, H * E, 0.3);
    /* Experts 5 and 9 get identical gate columns: equal logits, the lower id must come first. */
    for (int h = 0; h < H; h++)
        Wg[h * E + 9] = Wg[h * E + 5];
    CHECK_EQ_INT(moe_kern_gate(x, N, H, Wg, E, K, ids, w), 0);
    int bad_ids = 0, ties = 0;
    double werr = 0;
    for (int i = 0; i < N; i++) {
        gate_naive(x + i * H, H, Wg, E, K, rid, rw);
        double s = 0;
        for (int k = 0; k < K; k++) {
            bad_ids += ids[i * K + k] != rid[k];
            werr = fmax(werr, fabs(w[i * K + k] - rw[k]));
            s += w[i * K + k];
            if (ids[i * K + k] == 5 && k + 1 < K && ids[i * K + k + 1] == 9)
                ties++;
        }
        CHECK(fabs(s - 1.0) < 1e-6);
    }
    CHECK_EQ_INT(bad_ids, 0);
    CHECK(werr < 1e-6);
    CHECK(ties > 0); /* the tie case really happened */
    CHECK_EQ_INT(moe_kern_gate(x, 1, H, Wg, E, 0, ids, w), MOE_EINVAL);
    CHECK_EQ_INT(moe_kern_gate(x, 1, H, Wg, E, E + 1, ids, w), MOE_EINVAL);
    /* K = E: every expert, a full permutation sorted by logit. */
    int32_t all[E];
    float wa[E];
    CHECK_EQ_INT(moe_kern_gate(x, 1, H, Wg, E, E, all, wa), 0);
    int32_t rall[E];
    double rwa[E];
    gate_naive(x, H, Wg, E, E, rall, rwa);
    CHECK(memcmp(all, rall, sizeof all) == 0);
}

static void test_gather_scatter(void)
{
    enum { N = 7, H = 5, M = 4 };
    float src[M * H], dst[N * H], out[M * H];
    double ref[M * H];
    uint32_t idx[N] = {3, 0, 3, 1, 2, 0, 3};
    float w[N] = {0.5f, 0.25f, -1.0f, 2.0f, 0.125f, 1.0f, 0.75f};
    moe_rng_t r;
    moe_rng_seed(&r, 3);
    fill(&r, src, M * H, 1.0);
    moe_kern_gather(src, idx, N, H, dst);
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++)
            bad += dst[i * H + h] != src[idx[i] * H + h];
    CHECK_EQ_INT(bad, 0);
    /* scatter the gathered rows back with weights: target row t gets sum of w * its copies */
    fill(&r, out, M * H, 1.0);
    for (int i = 0; i < M * H; i++)
        ref[i] = out[i];
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++)
            ref[idx[i] * H + h] += (double)w[i] * dst[i * H + h];
    moe_kern_scatter_add(dst, idx, w, N, H, out);
    CHECK(rel_err(out, ref, M * H) < 1e-6);
    /* in-order application in fp32: exactly the left-to-right float sums */
    float o2[H] = {0}, y2[3 * H];
    uint32_t z[3] = {0, 0, 0};
    float w3[3] = {1.0f, 1.0f, 1.0f};
    for (int h = 0; h < H; h++) {
        y2[h] = 1e8f;
        y2[H + h] = 1.0f;
        y2[2 * H + h] = -1e8f;
    }
    moe_kern_scatter_add(y2, z, w3, 3, H, o2);
    CHECK(o2[0] == 0.0f); /* (1e8 + 1) - 1e8 in float is 0: proves the order */
    float o3[H] = {0};
    moe_kern_scatter_add(y2, z + 1, NULL, 1, H, o3); /* NULL weights: 1 */
    CHECK(o3[H - 1] == 1e8f);
}

/* The expert in double, straight from its definition: a = x^ W1 (SwiGLU: x^ the row over its
 * RMS, C = 2F columns; SiLU: x^ = x, C = F), the activation silu(a) or silu(g) u with g =
 * a[0..F) and u = a[F..2F), then y = act W2. */
static void ffn_naive(const float *x, int H, int F, int expert, const float *W1, const float *W2,
                      double *y)
{
    const int C = expert == MOE_EXPERT_SWIGLU ? 2 * F : F;
    double a[512], act[256], ms = 0;
    for (int h = 0; h < H; h++)
        ms += (double)x[h] * x[h];
    const double r = C == F ? 1 : 1 / sqrt(ms / H + 1e-6); /* SwiGLU's input RMS norm */
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int h = 0; h < H; h++)
            s += (double)x[h] * r * W1[h * C + c];
        a[c] = s;
    }
    for (int f = 0; f < F; f++)
        act[f] = a[f] / (1 + exp(-a[f])) * (C == F ? 1.0 : a[F + f]);
    for (int h = 0; h < H; h++) {
        double s = 0;
        for (int f = 0; f < F; f++)
            s += act[f] * W2[f * H + h];
        y[h] = s;
    }
}

static void test_ffn_kind(int expert)
{
    enum { N = 37, H = 48, F = 40, G = 4 };
    static float x[N * H], y[N * H], yg[N * H], W1[G][H * 2 * F], W2[G][F * H];
    static double ref[N * H];
    const size_t C = moe_kern_w1_cols(F, expert);
    CHECK_EQ_INT((int)C, expert == MOE_EXPERT_SWIGLU ? 2 * F : F);
    CHECK_EQ_INT((int)moe_kern_expert_floats(H, F, expert), (int)(H * C + F * H));
    moe_rng_t r;
    moe_rng_seed(&r, 4);
    fill(&r, x, N * H, 1.0);
    for (int g = 0; g < G; g++) {
        fill(&r, W1[g], H * C, 1.0 / sqrt(H));
        fill(&r, W2[g], F * H, 1.0 / sqrt(F));
    }
    for (int i = 0; i < N; i++)
        ffn_naive(x + i * H, H, F, expert, W1[0], W2[0], ref + i * H);
    CHECK_EQ_INT(moe_kern_ffn(x, N, H, F, expert, W1[0], W2[0], y, NULL), 0);
    CHECK(rel_err(y, ref, N * H) < 1e-5);
    float *work = malloc(moe_kern_ffn_work_size(F) * sizeof *work);
    memset(y, 0, sizeof y);
    CHECK_EQ_INT(moe_kern_ffn(x, N, H, F, expert, W1[0], W2[0], y, work), 0);
    CHECK(rel_err(y, ref, N * H) < 1e-5);
    CHECK_EQ_INT(moe_kern_ffn(x, 0, H, F, expert, W1[0], W2[0], y, work), 0);
    CHECK_EQ_INT(moe_kern_ffn(x, N, H, F, 7, W1[0], W2[0], y, work), MOE_EINVAL);

    /* grouped: rows 0..16 expert 0, none for expert 1, 17..35 expert 2, 36 expert 3 */
    size_t off[G + 1] = {0, 17, 17, 36, 37};
    const float *p1[G] = {W1[0], NULL, W1[2], W1[3]}, *p2[G] = {W2[0], NULL, W2[2], W2[3]};
    CHECK_EQ_INT(moe_kern_ffn_grouped(x, G, off, H, F, expert, p1, p2, yg, work), 0);
    for (int g = 0; g < G; g++)
        for (size_t i = off[g]; i < off[g + 1]; i++)
            ffn_naive(x + i * H, H, F, expert, W1[g], W2[g], ref + i * H);
    CHECK(rel_err(yg, ref, N * H) < 1e-5);
    size_t bad[3] = {0, 5, 4};
    CHECK_EQ_INT(moe_kern_ffn_grouped(x, 2, bad, H, F, expert, p1, p2, yg, work), MOE_EINVAL);
    free(work);
}

/* A SiLU expert in float, as plain loops: each sum from 0 over h (resp. f) ascending. The
 * kernel must equal it bit for bit (its documented order) at sizes that leave partial tiles
 * of rows and columns, and with more than one pass over the rows of W1 (H > 256). Where the
 * compiler may fuse a multiply and an add (FMA targets), two fusings of one sum can differ,
 * so only the tolerance check runs there. */
static void ffn_order_case(int N, int H, int F)
{
    float *x = malloc(sizeof *x * N * H), *y = malloc(sizeof *y * N * H);
    float *W1 = malloc(sizeof *W1 * H * F), *W2 = malloc(sizeof *W2 * F * H);
    float *ref = malloc(sizeof *ref * N * H), *act = malloc(sizeof *act * F);
    float *y1 = malloc(sizeof *y1 * H);
    moe_rng_t r;
    moe_rng_seed(&r, 9);
    fill(&r, x, (size_t)N * H, 1.0);
    fill(&r, W1, (size_t)H * F, 1.0 / sqrt(H));
    fill(&r, W2, (size_t)F * H, 1.0 / sqrt(F));
    for (int i = 0; i < N; i++) {
        for (int f = 0; f < F; f++) {
            float s = 0.0f;
            for (int h = 0; h < H; h++)
                s += x[i * H + h] * W1[h * F + f];
            act[f] = s / (1.0f + expf(-s));
        }
        for (int h = 0; h < H; h++) {
            float s = 0.0f;
            for (int f = 0; f < F; f++)
                s += act[f] * W2[f * H + h];
            ref[i * H + h] = s;
        }
    }
    CHECK_EQ_INT(moe_kern_ffn(x, N, H, F, MOE_EXPERT_SILU, W1, W2, y, NULL), 0);
#if !defined(__FMA__)
    CHECK(memcmp(y, ref, sizeof *y * N * H) == 0);
#endif
    double err = 0;
    for (int i = 0; i < N * H; i++)
        err = fmax(err, fabs((double)y[i] - ref[i]));
    CHECK(err < 1e-5);
    /* one row alone gives the same row as within the block */
    CHECK_EQ_INT(moe_kern_ffn(x + (N - 1) * H, 1, H, F, MOE_EXPERT_SILU, W1, W2, y1, NULL), 0);
    CHECK(memcmp(y1, y + (N - 1) * H, sizeof *y1 * H) == 0);
    free(x);
    free(y);
    free(W1);
    free(W2);
    free(ref);
    free(act);
    free(y1);
}

static void test_ffn_order(void)
{
    ffn_order_case(37, 45, 37);
    ffn_order_case(6, 300, 20);
}

static void test_ffn(void)
{
    test_ffn_kind(MOE_EXPERT_SWIGLU);
    test_ffn_kind(MOE_EXPERT_SILU);
    test_ffn_order();
    CHECK(strcmp(moe_expert_name(MOE_EXPERT_SWIGLU), "swiglu") == 0);
    CHECK_EQ_INT(moe_expert_parse("silu"), MOE_EXPERT_SILU);
    CHECK_EQ_INT(moe_expert_parse("gelu"), MOE_EINVAL);
    CHECK_EQ_INT((int)moe_expert_mats(MOE_EXPERT_SWIGLU), 3);
    CHECK_EQ_INT((int)moe_expert_mats(-1), 0);
}

/* ------------------------------------------------------------------ seeded model */

static void test_init(void)
{
    enum { E = 6, H = 8, F = 5 };
    float W1[H * 2 * F], W2[F * H], Wg[H * E], m[H], x[3 * H], x1[H];
    const uint64_t seed = 1234;
    const uint32_t l = 2, e = 4;
    moe_rng_t r;
    int bad = 0;
    /* SwiGLU: W1 is H x 2F (gate and up side by side), one stream with W2 */
    moe_kern_init_expert(seed, l, e, E, H, F, MOE_EXPERT_SWIGLU, W1, W2);
    moe_rng_seed(&r, moe_hash64(seed, (uint64_t)l * (E + 2) + e));
    for (int i = 0; i < H * 2 * F; i++)
        bad += W1[i] != (float)(moe_rng_normal(&r) / sqrt((double)H));
    for (int i = 0; i < F * H; i++)
        bad += W2[i] != (float)(moe_rng_normal(&r) / sqrt((double)F));
    moe_kern_init_expert(seed, l, e, E, H, F, MOE_EXPERT_SILU, W1, W2);
    moe_rng_seed(&r, moe_hash64(seed, (uint64_t)l * (E + 2) + e));
    for (int i = 0; i < H * F; i++)
        bad += W1[i] != (float)(moe_rng_normal(&r) / sqrt((double)H));
    for (int i = 0; i < F * H; i++)
        bad += W2[i] != (float)(moe_rng_normal(&r) / sqrt((double)F));
    moe_kern_init_gate(seed, l, E, H, Wg);
    moe_rng_seed(&r, moe_hash64(seed, (uint64_t)l * (E + 2) + E));
    for (int i = 0; i < H * E; i++)
        bad += Wg[i] != (float)(moe_rng_normal(&r) / sqrt((double)H));
    moe_kern_init_mixer(seed, l, E, H, m);
    moe_rng_seed(&r, moe_hash64(seed, (uint64_t)l * (E + 2) + E + 1));
    for (int i = 0; i < H; i++)
        bad += m[i] != (float)moe_rng_normal(&r);
    moe_kern_init_tokens(seed, 41, 3, H, x);
    moe_rng_seed(&r, moe_hash64(seed ^ UINT64_C(0x9e3779b97f4a7c15), 42));
    for (int i = 0; i < H; i++)
        bad += x[H + i] != (float)moe_rng_normal(&r);
    moe_kern_init_token(seed, 43, H, x1);
    bad += memcmp(x1, x + 2 * H, sizeof x1) != 0;
    CHECK_EQ_INT(bad, 0);
    /* neighbouring layers and experts are different streams */
    float V1[H * F], V2[F * H];
    moe_kern_init_expert(seed, l + 1, e, E, H, F, MOE_EXPERT_SILU, V1, V2);
    CHECK(memcmp(V1, W1, sizeof V1) != 0);
    moe_kern_init_expert(seed, l, e - 1, E, H, F, MOE_EXPERT_SILU, V1, V2);
    CHECK(memcmp(V1, W1, sizeof V1) != 0);
}

int main(void)
{
    test_bf16_patterns();
    test_f16_patterns();
    test_roundtrip_all();
    test_rne_random();
    test_pack();
    test_mixer();
    test_gate();
    test_gather_scatter();
    test_ffn();
    test_init();
    return unit_done("test_kern");
}
