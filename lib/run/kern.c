/* run/kern.c -- reference kernels of moe-run (see moe/kern.h and the model in moe-run(1)); part
 * of libmoerun, which the CPU backend, the GPU kernels' tests and tests/unit/test_kern use. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "kern_internal.h"

/* ------------------------------------------------------------------ dtypes */

size_t moe_dtype_size(int dtype)
{
    switch (dtype) {
    case MOE_DTYPE_FP32: return 4;
    case MOE_DTYPE_BF16:
    case MOE_DTYPE_FP16: return 2;
    default: return 0;
    }
}

const char *moe_dtype_name(int dtype)
{
    switch (dtype) {
    case MOE_DTYPE_FP32: return "fp32";
    case MOE_DTYPE_BF16: return "bf16";
    case MOE_DTYPE_FP16: return "fp16";
    default: return "?";
    }
}

int moe_dtype_parse(const char *s)
{
    if (!s)
        return MOE_EINVAL;
    for (int d = MOE_DTYPE_FP32; d <= MOE_DTYPE_FP16; d++)
        if (strcmp(s, moe_dtype_name(d)) == 0)
            return d;
    return MOE_EINVAL;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t moe_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force the quiet bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry out of the
     * mantissa bumps the exponent, which is right (up to Inf past the largest finite). */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float moe_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* |f| in [2^-25, 2^-14): an fp16 subnormal q * 2^-24, rounded to nearest even. */
static uint16_t f16_subnormal(uint32_t ax)
{
    uint32_t e = ax >> 23;                   /* biased exponent, 102 .. 112 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;               /* value = m * 2^(e - 150) = (m >> shift) * 2^-24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++; /* may carry into 0x400, the smallest normal: still the right encoding */
    return (uint16_t)q;
}

uint16_t moe_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t ax = u & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, keeping the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 (Inf included) rounds to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax <= 0x33000000u) /* <= 2^-25: half the smallest subnormal, ties to even zero */
        return sign;
    if (ax < 0x38800000u) /* below 2^-14 */
        return (uint16_t)(sign | f16_subnormal(ax));
    uint32_t r = ax - 0x38000000u; /* rebias the exponent from 127 to 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

float moe_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    if (e == 31)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

int moe_kern_pack(const float *src, size_t n, int dtype, void *dst)
{
    uint16_t *d = dst;
    switch (dtype) {
    case MOE_DTYPE_FP32:
        if (n)
            memcpy(dst, src, n * sizeof *src);
        return 0;
    case MOE_DTYPE_BF16:
        for (size_t i = 0; i < n; i++)
            d[i] = moe_f32_to_bf16(src[i]);
        return 0;
    case MOE_DTYPE_FP16:
        for (size_t i = 0; i < n; i++)
            d[i] = moe_f32_to_f16(src[i]);
        return 0;
    default: return MOE_EINVAL;
    }
}

int moe_kern_unpack(const void *src, size_t n, int dtype, float *dst)
{
    const uint16_t *s = src;
    switch (dtype) {
    case MOE_DTYPE_FP32:
        if (n)
            memcpy(dst, src, n * sizeof *dst);
        return 0;
    case MOE_DTYPE_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = moe_bf16_to_f32(s[i]);
        return 0;
    case MOE_DTYPE_FP16:
        for (size_t i = 0; i < n; i++)
            dst[i] = moe_f16_to_f32(s[i]);
        return 0;
    default: return MOE_EINVAL;
    }
}

/* ------------------------------------------------------------------ mixer, gate, permute */

void moe_kern_mixer(float *x, size_t n, uint32_t H, const float *m)
{
    for (size_t i = 0; i < n; i++) {
        float *r = x + i * H;
        for (uint32_t h = 0; h < H; h++)
            r[h] += 0.25f * tanhf(m[h] * r[h]);
    }
}

/* Insert logit v of expert e into the descending top-K list (ids/val, cnt entries so far).
 * Strict comparisons keep the lower id first among equal logits, since ids arrive ascending. */
static void topk_insert(int32_t *ids, float *val, uint32_t *cnt, uint32_t K, uint32_t e, float v)
{
    uint32_t j = *cnt;
    if (j == K) {
        if (!(v > val[K - 1]))
            return;
        j = K - 1;
    } else {
        (*cnt)++;
    }
    while (j > 0 && v > val[j - 1]) {
        val[j] = val[j - 1];
        ids[j] = ids[j - 1];
        j--;
    }
    val[j] = v;
    ids[j] = (int32_t)e;
}

static void gate_row(const float *restrict x, uint32_t H, const float *restrict Wg, uint32_t E,
                     uint32_t K, float *restrict lg, int32_t *ids, float *w)
{
    kern_logits(x, H, Wg, E, lg);
    uint32_t cnt = 0;
    for (uint32_t e = 0; e < E; e++)
        topk_insert(ids, w, &cnt, K, e, lg[e]);
    kern_softmax(w, K); /* w holds the selected logits in descending order */
}

int moe_kern_gate(const float *x, size_t n, uint32_t H, const float *Wg, uint32_t E, uint32_t K,
                  int32_t *ids, float *w)
{
    if (K == 0 || K > E)
        return MOE_EINVAL;
    float *lg = malloc(E * sizeof *lg);
    if (!lg)
        return MOE_ENOMEM;
    for (size_t i = 0; i < n; i++)
        gate_row(x + i * H, H, Wg, E, K, lg, ids + i * K, w + i * K);
    free(lg);
    return 0;
}

void moe_kern_gather(const float *src, const uint32_t *idx, size_t n, uint32_t H, float *dst)
{
    for (size_t i = 0; i < n; i++)
        memcpy(dst + i * H, src + (size_t)idx[i] * H, H * sizeof *dst);
}

void moe_kern_scatter_add(const float *y, const uint32_t *idx, const float *w, size_t n,
                          uint32_t H, float *out)
{
    for (size_t i = 0; i < n; i++) {
        kern_axpy(out + (size_t)idx[i] * H, w ? w[i] : 1.0f, y + i * H, H);
    }
}

/* ------------------------------------------------------------------ expert FFN */

size_t moe_kern_w1_cols(uint32_t F, int expert)
{
    return (size_t)(moe_expert_mats(expert) - 1) * F;
}

size_t moe_kern_expert_floats(uint32_t H, uint32_t F, int expert)
{
    return (size_t)moe_expert_mats(expert) * H * F;
}

size_t moe_kern_ffn_work_size(uint32_t F)
{
    return (size_t)KERN_BLK * 2 * F;
}

/* One block of b <= KERN_BLK rows: a = x^ W1 and y = act W2, each through kern_mm, whose sums
 * run over h (resp. f) ascending per output element. a: b x C. */
static void ffn_block(const float *restrict x, size_t b, uint32_t H, uint32_t F, int expert,
                      const float *restrict W1, const float *restrict W2, float *restrict y,
                      float *restrict a, float *restrict act)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    float rinv[KERN_BLK];
    for (size_t i = 0; i < b; i++)
        rinv[i] = expert == MOE_EXPERT_SWIGLU ? kern_rinv(x + i * H, H) : 1.0f;
    kern_mm(a, C, 0, b, (uint32_t)C, x, H, rinv, W1, C, H);
    if (act)
        memcpy(act, a, b * C * sizeof *act);
    if (expert == MOE_EXPERT_SILU) {
        for (size_t i = 0; i < b * F; i++)
            a[i] = a[i] / (1.0f + expf(-a[i]));
    } else { /* row i's silu(g) * u to a[i F ..], ascending: never over a value still to read */
        for (size_t i = 0; i < b; i++)
            for (uint32_t f = 0; f < F; f++) {
                float g = a[i * C + f], u = a[i * C + F + f];
                a[i * F + f] = g / (1.0f + expf(-g)) * u;
            }
    }
    kern_mm(y, H, 0, b, H, a, F, NULL, W2, H, F);
}

static void ffn_rows(const float *x, size_t n, uint32_t H, uint32_t F, int expert,
                     const float *W1, const float *W2, float *y, float *act, float *work)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    for (size_t i = 0; i < n; i += KERN_BLK) {
        size_t b = n - i < KERN_BLK ? n - i : KERN_BLK;
        ffn_block(x + i * H, b, H, F, expert, W1, W2, y + i * H, work, act ? act + i * C : NULL);
    }
}

int moe_kern_ffn(const float *x, size_t n, uint32_t H, uint32_t F, int expert, const float *W1,
                 const float *W2, float *y, float *work)
{
    size_t off[2] = {0, n};
    return moe_kern_ffn_grouped_act(x, 1, off, H, F, expert, &W1, &W2, y, NULL, work);
}

int moe_kern_ffn_grouped(const float *x, uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                         int expert, const float *const *W1, const float *const *W2, float *y,
                         float *work)
{
    return moe_kern_ffn_grouped_act(x, G, off, H, F, expert, W1, W2, y, NULL, work);
}

int kern_grouped_check(uint32_t G, const size_t *off, int expert)
{
    if (!moe_expert_mats(expert))
        return MOE_EINVAL;
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g])
            return MOE_EINVAL;
    return 0;
}

int moe_kern_ffn_grouped_act(const float *x, uint32_t G, const size_t *off, uint32_t H,
                             uint32_t F, int expert, const float *const *W1,
                             const float *const *W2, float *y, float *act, float *work)
{
    float *own = NULL;
    const size_t C = moe_kern_w1_cols(F, expert);
    if (kern_grouped_check(G, off, expert))
        return MOE_EINVAL;
    if (G == 0 || off[G] == off[0])
        return 0;
    if (!work && !(work = own = malloc(moe_kern_ffn_work_size(F) * sizeof *work)))
        return MOE_ENOMEM;
    for (uint32_t g = 0; g < G; g++) {
        size_t r0 = off[g], n = off[g + 1] - r0;
        if (n)
            ffn_rows(x + r0 * H, n, H, F, expert, W1[g], W2[g], y + r0 * H,
                     act ? act + r0 * C : NULL, work);
    }
    free(own);
    return 0;
}

/* ------------------------------------------------------------------ seeded model */

static void layer_rng(moe_rng_t *r, uint64_t seed, uint32_t l, uint32_t E, uint32_t slot)
{
    moe_rng_seed(r, moe_hash64(seed, (uint64_t)l * ((uint64_t)E + 2) + slot));
}

static void fill_normal(moe_rng_t *r, float *dst, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)(moe_rng_normal(r) * scale);
}

void moe_kern_init_expert(uint64_t seed, uint32_t l, uint32_t e, uint32_t E, uint32_t H,
                          uint32_t F, int expert, float *W1, float *W2)
{
    moe_rng_t r;
    layer_rng(&r, seed, l, E, e);
    fill_normal(&r, W1, H * moe_kern_w1_cols(F, expert), 1.0 / sqrt((double)H));
    fill_normal(&r, W2, (size_t)F * H, 1.0 / sqrt((double)F));
}

void moe_kern_init_gate(uint64_t seed, uint32_t l, uint32_t E, uint32_t H, float *Wg)
{
    moe_rng_t r;
    layer_rng(&r, seed, l, E, E);
    fill_normal(&r, Wg, (size_t)H * E, 1.0 / sqrt((double)H));
}

void moe_kern_init_mixer(uint64_t seed, uint32_t l, uint32_t E, uint32_t H, float *m)
{
    moe_rng_t r;
    layer_rng(&r, seed, l, E, E + 1);
    fill_normal(&r, m, H, 1.0);
}

void moe_kern_init_token(uint64_t seed, uint64_t t, uint32_t H, float *x)
{
    moe_rng_t r;
    moe_rng_seed(&r, moe_hash64(seed ^ UINT64_C(0x9e3779b97f4a7c15), t));
    fill_normal(&r, x, H, 1.0);
}

void moe_kern_init_target(uint64_t seed, uint64_t t, uint32_t H, float *x)
{
    moe_kern_init_token(seed ^ 0x2545f4914f6cdd1dULL, t, H, x);
}

void moe_kern_init_tokens(uint64_t seed, uint64_t t0, size_t n, uint32_t H, float *x)
{
    for (size_t i = 0; i < n; i++)
        moe_kern_init_token(seed, t0 + i, H, x + i * H);
}
