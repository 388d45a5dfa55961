/* affinity/affinity_kern.c -- counting kernels of moe-affinity: set masks into u16 row counters
 * (AVX-512, AVX2 or scalar), id lists into u32 counters, flushing into u64 totals. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "affinity_count_internal.h"
#include "moe/moe.h"
#include "util_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AFF_X86 1
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------ memory */

/*
 * The counters and shuffle windows are megabytes, each touched soon after it is allocated, and
 * on virtual machines a page fault can cost 20 us (the 2-core CI machine): hundreds of faults
 * were a tenth of a run. So every block of 64 KiB and more is mapped in one call,
 * madvise(MADV_POPULATE_WRITE) (Linux 5.14; best effort: elsewhere the pages fault in one by one
 * as before; util_populate). Blocks of 512 KiB and more are also aligned to 2 MiB and
 * offered transparent huge pages. All are 64-byte aligned: the vector kernels use aligned rows.
 */
#define HUGE_BYTES ((size_t)2 << 20)

void *aff_big_alloc(size_t n, int zero)
{
    int huge = n >= HUGE_BYTES / 4;
    size_t len = huge ? (n + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES : n ? n : 1;
    void *p = NULL;
    if (posix_memalign(&p, huge ? HUGE_BYTES : 64, len) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (huge)
        madvise(p, len, MADV_HUGEPAGE);
#endif
    /* populated, not calloc'd: a large calloc maps the shared zero page, and the first store
     * after a read of it faults again and flushes the TLBs of every thread */
    util_populate(p, n);
    if (zero)
        memset(p, 0, n);
    return p;
}

void aff_big_free(void *p)
{
    free(p);
}

/* ------------------------------------------------------------------ shapes and tallies */

/* free() each of the n blocks p[i]. */
static void free_each(void *const p[], size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(p[i]);
}


int aff_shape_init(aff_shape_t *s, uint32_t L, uint32_t E, uint32_t K, uint32_t hops, int top1,
                   int coact)
{
    memset(s, 0, sizeof *s);
    s->L = L;
    s->E = E;
    s->K = K;
    s->S = top1 ? 1 : K;
    s->hops = hops;
    s->top1 = top1;
    s->coact = coact;
    s->mask = E <= AFF_MASK_E;
    s->pair_base = calloc((size_t)hops + 2, sizeof *s->pair_base);
    if (!s->pair_base)
        return MOE_ENOMEM;
    for (uint32_t d = 1; d <= hops; d++)
        s->pair_base[d + 1] = s->pair_base[d] + (L - d);
    s->npairs = s->pair_base[hops + 1];
    return 0;
}

void aff_shape_release(aff_shape_t *s)
{
    free(s->pair_base);
    s->pair_base = NULL;
}

int aff_tot_init(aff_tot_t *t, const aff_shape_t *s, int coact)
{
    memset(t, 0, sizeof *t);
    size_t ee = (size_t)s->E * s->E;
    size_t ntr = (size_t)s->npairs * ee + 1, nco = coact ? (size_t)s->L * ee : 0;
    t->tr = aff_big_alloc((ntr + nco) * sizeof *t->tr, 1); /* one block: fewer page faults */
    t->setload = calloc((size_t)s->L * s->E, sizeof *t->setload);
    t->missrow = calloc((size_t)s->npairs * s->E + 1, sizeof *t->missrow);
    t->excl = calloc((size_t)s->npairs + 1, sizeof *t->excl);
    t->lmiss = calloc(s->L, sizeof *t->lmiss);
    if (coact && t->tr)
        t->co = t->tr + ntr;
    if (!t->tr || !t->setload || !t->missrow || !t->excl || !t->lmiss || (coact && !t->co)) {
        aff_tot_release(t);
        return MOE_ENOMEM;
    }
    return 0;
}

void aff_tot_release(aff_tot_t *t)
{
    aff_big_free(t->tr); /* t->co is part of the block */
    free_each((void *[]){t->setload, t->missrow, t->excl, t->lmiss}, 4);
    memset(t, 0, sizeof *t);
}

void aff_tot_add(const aff_shape_t *s, aff_tot_t *t, const aff_tot_t *u)
{
    size_t ee = (size_t)s->E * s->E;
    for (size_t i = 0; i < (size_t)s->npairs * ee; i++)
        t->tr[i] += u->tr[i];
    for (size_t i = 0; t->co && u->co && i < (size_t)s->L * ee; i++)
        t->co[i] += u->co[i];
    for (size_t i = 0; i < (size_t)s->L * s->E; i++)
        t->setload[i] += u->setload[i];
    for (size_t i = 0; i < (size_t)s->npairs * s->E; i++)
        t->missrow[i] += u->missrow[i];
    for (size_t i = 0; i < s->npairs; i++)
        t->excl[i] += u->excl[i];
    for (size_t i = 0; i < s->L; i++)
        t->lmiss[i] += u->lmiss[i];
    t->tokens += u->tokens;
    t->incomplete += u->incomplete;
}

void aff_tot_setload_from_co(const aff_shape_t *s, aff_tot_t *t)
{
    for (uint32_t j = 0; j < s->L; j++)
        for (uint32_t i = 0; i < s->E; i++)
            t->setload[(size_t)j * s->E + i] = t->co[((size_t)j * s->E + i) * s->E + i];
}

/* Bytes of one small-counter matrix. */
static size_t loc_matrix_bytes(const aff_shape_t *s)
{
    return s->mask ? (size_t)AFF_ROW * AFF_ROW * sizeof(uint16_t)
                   : (size_t)s->E * s->E * sizeof(uint32_t);
}

int aff_loc_init(aff_loc_t *lc, const aff_shape_t *s, int coact, int loads, int count_setload)
{
    memset(lc, 0, sizeof *lc);
    size_t mb = loc_matrix_bytes(s);
    /* 64-byte alignment: the vector kernels add whole rows with aligned loads and stores. */
    size_t trb = ((size_t)s->npairs * mb + 63) / 64 * 64 + 64;
    lc->tr = aff_big_alloc(trb, 1);
    if (coact)
        lc->co = aff_big_alloc(((size_t)s->L * mb + 63) / 64 * 64, 1);
    lc->setload = calloc((size_t)s->L * s->E, sizeof *lc->setload);
    lc->missrow = calloc((size_t)s->npairs * s->E + 1, sizeof *lc->missrow);
    lc->excl = calloc((size_t)s->npairs + 1, sizeof *lc->excl);
    lc->lmiss = calloc(s->L, sizeof *lc->lmiss);
    lc->lpend = calloc(s->L, sizeof *lc->lpend);
    lc->limit = s->mask ? UINT16_MAX : UINT32_MAX;
    lc->loads = loads;
    lc->count_setload = count_setload;
    lc->step_lo = UINT32_MAX;
    if (!lc->tr || (coact && !lc->co) || !lc->setload || !lc->missrow || !lc->excl ||
        !lc->lmiss || !lc->lpend) {
        aff_loc_release(lc);
        return MOE_ENOMEM;
    }
    return 0;
}

void aff_loc_release(aff_loc_t *lc)
{
    aff_big_free(lc->co);
    aff_big_free(lc->tr);
    free_each((void *[]){lc->setload, lc->missrow, lc->excl, lc->lmiss, lc->lpend}, 5);
    memset(lc, 0, sizeof *lc);
}

/* Add n matrices of small counters (u16 rows of AFF_ROW or u32 E x E) to u64 E x E totals. */
static void flush_matrices(const aff_shape_t *s, void *small, uint64_t *tot, size_t n)
{
    const size_t E = s->E, ee = E * E;
    if (s->mask) {
        uint16_t *m = small;
        for (size_t k = 0; k < n; k++)
            for (size_t i = 0; i < E; i++) {
                uint16_t *row = m + (k * AFF_ROW + i) * AFF_ROW;
                uint64_t *t = tot + k * ee + i * E;
                if (E == AFF_ROW) /* a fixed trip count: vectorised at -O2 */
                    for (size_t p = 0; p < AFF_ROW; p++)
                        t[p] += row[p];
                else
                    for (size_t p = 0; p < E; p++)
                        t[p] += row[p];
                memset(row, 0, E * sizeof *row);
            }
    } else {
        uint32_t *m = small;
        for (size_t i = 0; i < n * ee; i++)
            tot[i] += m[i];
        memset(m, 0, n * ee * sizeof *m);
    }
}

/* Add n co-activation matrices counted above the diagonal only (aff_loc_t.co_upper) to u64
 * totals, mirrored below it. */
static void flush_co_upper(const aff_shape_t *s, uint16_t *m, uint64_t *tot, size_t n)
{
    const size_t E = s->E, ee = E * E;
    for (size_t k = 0; k < n; k++) {
        uint16_t *mk = m + k * AFF_ROW * AFF_ROW;
        uint64_t *t = tot + k * ee;
        for (size_t i = 0; i < E; i++) {
            const uint16_t *row = mk + i * AFF_ROW;
            t[i * E + i] += row[i];
            for (size_t p = i + 1; p < E; p++) {
                t[i * E + p] += row[p];
                t[p * E + i] += row[p];
            }
        }
        memset(mk, 0, E * AFF_ROW * sizeof *mk);
    }
}

static void flush_co(const aff_shape_t *s, aff_loc_t *lc, void *small, uint64_t *tot, size_t n)
{
    if (lc->co_upper)
        flush_co_upper(s, small, tot, n);
    else
        flush_matrices(s, small, tot, n);
}

void aff_loc_flush(const aff_shape_t *s, aff_loc_t *lc)
{
    aff_tot_t *t = lc->tot;
    if (!t || lc->pending == 0)
        return; /* nothing counted since the last flush */
    flush_matrices(s, lc->tr, t->tr, s->npairs);
    if (lc->co && t->co)
        flush_co(s, lc, lc->co, t->co, s->L);
    for (size_t i = 0; i < (size_t)s->L * s->E; i++) {
        t->setload[i] += lc->setload[i];
        lc->setload[i] = 0;
    }
    for (size_t i = 0; i < (size_t)s->npairs * s->E; i++) {
        t->missrow[i] += lc->missrow[i];
        lc->missrow[i] = 0;
    }
    for (size_t i = 0; i < s->npairs; i++) {
        t->excl[i] += lc->excl[i];
        lc->excl[i] = 0;
    }
    for (size_t i = 0; i < s->L; i++) {
        t->lmiss[i] += lc->lmiss[i];
        lc->lmiss[i] = 0;
    }
    memset(lc->lpend, 0, s->L * sizeof *lc->lpend);
    t->tokens += lc->tokens;
    t->incomplete += lc->incomplete;
    t->step_lo = lc->step_lo < t->step_lo ? lc->step_lo : t->step_lo;
    t->step_hi = lc->step_hi > t->step_hi ? lc->step_hi : t->step_hi;
    lc->tokens = lc->incomplete = 0;
    lc->pending = 0;
}

void aff_loc_flush_layer(const aff_shape_t *s, aff_loc_t *lc, uint32_t j)
{
    const size_t mb = loc_matrix_bytes(s), ee = (size_t)s->E * s->E;
    aff_tot_t *t = lc->tot;
    if (lc->co && t->co)
        flush_co(s, lc, (uint8_t *)lc->co + j * mb, t->co + j * ee, 1);
    for (uint32_t d = 1; d <= s->hops && j + d < s->L; d++) {
        uint32_t p = aff_pair(s, d, j);
        flush_matrices(s, (uint8_t *)lc->tr + p * mb, t->tr + p * ee, 1);
    }
    lc->lpend[j] = 0;
}

int aff_scr_init(aff_scr_t *sc, const aff_shape_t *s)
{
    memset(sc, 0, sizeof *sc);
    size_t nid = (size_t)s->L * s->K;
    sc->set = malloc(nid * sizeof *sc->set);
    sc->full = malloc(nid * sizeof *sc->full);
    sc->nset = calloc(s->L, sizeof *sc->nset);
    sc->nfull = calloc(s->L, sizeof *sc->nfull);
    sc->stamp = calloc(s->E, sizeof *sc->stamp);
    if (!sc->set || !sc->full || !sc->nset || !sc->nfull || !sc->stamp) {
        aff_scr_release(sc);
        return MOE_ENOMEM;
    }
    return 0;
}

void aff_scr_release(aff_scr_t *sc)
{
    free_each((void *[]){sc->set, sc->full, sc->nset, sc->nfull, sc->stamp}, 5);
    memset(sc, 0, sizeof *sc);
}

/* ------------------------------------------------------------------ loads and exclusions */

/* Zeros (missing cells) among n masks. Fixed blocks so that it vectorises at -O2. */
static uint64_t count_zeros(const uint64_t *f, size_t n)
{
    uint64_t z = 0;
    size_t t = 0;
    for (; t + 16 <= n; t += 16)
        for (size_t k = 0; k < 16; k++)
            z += f[t + k] == 0;
    for (; t < n; t++)
        z += f[t] == 0;
    return z;
}

/* Pair p over n tokens: rows A, next sets B. Tokens missing either are excluded, and the
 * experts of A lose that token from their row load. */
void aff_count_exclusions(const aff_shape_t *s, aff_loc_t *lc, uint32_t p, const uint64_t *A,
                          const uint64_t *B, size_t n)
{
    for (size_t t = 0; t < n; t++) {
        if (A[t] && B[t])
            continue;
        lc->excl[p]++;
        for (uint64_t a = A[t]; a; a &= a - 1)
            lc->missrow[(size_t)p * s->E + (uint32_t)__builtin_ctzll(a)]++;
    }
}

/* Loads and missing cells of n tokens (masks of layer j, token t at full[j * stride + t]);
 * returns the number of missing cells. */
uint64_t aff_count_loads(const aff_shape_t *s, aff_loc_t *lc, const uint64_t *full,
                         const uint64_t *set, size_t stride, size_t n)
{
    const uint32_t L = s->L, E = s->E;
    uint64_t zeros = 0;
    for (uint32_t j = 0; j < L; j++) {
        uint64_t z = count_zeros(full + j * stride, n);
        zeros += z;
        lc->lmiss[j] += z;
        if (lc->count_setload) {
            const uint64_t *m = set + j * stride;
            uint64_t *sl = lc->setload + (size_t)j * E;
            for (size_t t = 0; t < n; t++)
                for (uint64_t a = m[t]; a; a &= a - 1)
                    sl[__builtin_ctzll(a)]++;
        }
    }
    if (zeros)
        for (size_t t = 0; t < n; t++) {
            uint32_t j = 0;
            while (j < L && full[j * stride + t])
                j++;
            lc->incomplete += j < L;
        }
    return zeros;
}

/* ------------------------------------------------------------------ row kernels */

/*
 * The primitive of every kernel: for each token t with B[t] != 0, add the mask B[t] to the
 * rows of the experts in A[t] of a u16 counter matrix (rows of AFF_ROW lanes). Callers run it
 * pair by pair over a batch of tokens rather than token by token, so the one matrix being
 * updated stays in the L1 cache; token by token, every token touches all of them (hundreds of
 * KiB) and the adds wait on L2.
 */

static void rows_scalar(void *tile, uint16_t *dst, const uint64_t *A, const uint64_t *B,
                        size_t n)
{
    (void)tile;
    for (size_t t = 0; t < n; t++) {
        uint64_t b = B[t];
        if (!b)
            continue;
        for (uint64_t a = A[t]; a; a &= a - 1) {
            uint16_t *row = dst + (size_t)__builtin_ctzll(a) * AFF_ROW;
            for (uint64_t m = b; m; m &= m - 1)
                row[__builtin_ctzll(m)]++;
        }
    }
}

#ifdef AFF_X86
/* AVX2: a row is four ymm of 16 u16 lanes; lane k of quarter q is bit 16q + k of the mask. */
__attribute__((target("avx2"))) static void rows_avx2(void *tile, uint16_t *dst,
                                                      const uint64_t *A, const uint64_t *B,
                                                      size_t n)
{
    (void)tile;
    const __m256i bits = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048,
                                           4096, 8192, 16384, (short)0x8000);
    __m256i *base = (__m256i *)dst;
    for (size_t t = 0; t < n; t++) {
        uint64_t b = B[t], a = A[t];
        if (!b)
            continue;
        __m256i v[4];
        for (int q = 0; q < 4; q++) {
            __m256i x = _mm256_set1_epi16((short)(uint16_t)(b >> (16 * q)));
            v[q] = _mm256_srli_epi16(_mm256_cmpeq_epi16(_mm256_and_si256(x, bits), bits), 15);
        }
        for (; a; a &= a - 1) {
            __m256i *r = base + 4 * (size_t)__builtin_ctzll(a);
            for (int q = 0; q < 4; q++)
                r[q] = _mm256_add_epi16(r[q], v[q]);
        }
    }
    _mm256_zeroupper(); /* no dirty upper state into SSE code (a large penalty otherwise) */
}

/*
 * AVX-512BW: a set mask expands into 64 byte lanes of 0/1 in one instruction, so a row of 64
 * u8 counters (one zmm) takes one add per expert in the set. The u8 counters live in tiles
 * (4 KiB each, in L1) that are folded into the u16 matrices before a byte can overflow. A
 * vector of per-row hit counts (rows of the experts in A) tells when: a counter can only grow
 * when its row is hit, so a row is folded when it has been hit 240 times since its last fold,
 * checked every 16 tokens -- for real routing a row every few hundred tokens, not all rows
 * every 255. At the end, the rows hit at all are folded.
 */
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,bmi,bmi2")))
#define HIT_CHECK 16
#define HIT_LIMIT (255 - HIT_CHECK)

AVX512_TARGET static void fold_tile(__m512i *tile, uint16_t *dst16, uint64_t rows)
{
    __m512i *dst = (__m512i *)dst16;
    for (; rows; rows = _blsr_u64(rows)) {
        size_t i = _tzcnt_u64(rows);
        __m512i v = tile[i];
        dst[2 * i] = _mm512_add_epi16(dst[2 * i], _mm512_cvtepu8_epi16(_mm512_castsi512_si256(v)));
        dst[2 * i + 1] = _mm512_add_epi16(dst[2 * i + 1],
                                          _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(v, 1)));
        tile[i] = _mm512_setzero_si512();
    }
}

/* The same for a co-activation tile counted without the top expert's row (rows3co_avx512):
 * its diagonal lane is replaced by the row's hits, the true diagonal. */
AVX512_TARGET static void fold_tile_co(__m512i *tile, uint16_t *dst16, uint64_t rows,
                                       __m512i hits)
{
    __m512i *dst = (__m512i *)dst16;
    for (; rows; rows = _blsr_u64(rows)) {
        size_t i = _tzcnt_u64(rows);
        __m512i v = _mm512_mask_mov_epi8(tile[i], (__mmask64)1 << i, hits);
        dst[2 * i] = _mm512_add_epi16(dst[2 * i], _mm512_cvtepu8_epi16(_mm512_castsi512_si256(v)));
        dst[2 * i + 1] = _mm512_add_epi16(dst[2 * i + 1],
                                          _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(v, 1)));
        tile[i] = _mm512_setzero_si512();
    }
}

/* Fold the m tiles (AFF_TILE_STRIDE apart) into their matrices. */
AVX512_TARGET static void fold_tiles(__m512i *tile, uint16_t *const *dst, int m, uint64_t rows)
{
    for (int k = 0; k < m; k++)
        fold_tile(tile + (size_t)k * AFF_TILE_STRIDE, dst[k], rows);
}

/* The rows to fold now (checked every HIT_CHECK tokens): those hit HIT_LIMIT times since
 * their last fold. */
AVX512_TARGET static inline __mmask64 fold_due(__m512i hits)
{
    return _mm512_cmpge_epu8_mask(hits, _mm512_set1_epi8((char)HIT_LIMIT));
}

/* Tokens s0 to s1 of rows3_avx512 for m matrices: m is a constant where this is inlined, so
 * each m keeps a loop of its own with no test of m in it. For m = 1 a zero B_0[t] adds nothing
 * and counts no hit. */
AVX512_TARGET static inline __attribute__((always_inline)) void
rows_span(__m512i *t0, const uint64_t *A, const uint64_t *const B[3], int m, size_t s0,
          size_t s1, __m512i *hits, uint64_t *rows)
{
    const __m512i one = _mm512_set1_epi8(1);
    __m512i *t1 = t0 + AFF_TILE_STRIDE, *t2 = t1 + AFF_TILE_STRIDE;
    for (size_t t = s0; t < s1; t++) {
        uint64_t a = m > 1 || B[0][t] ? A[t] : 0;
        __m512i i0 = _mm512_maskz_mov_epi8((__mmask64)B[0][t], one);
        __m512i i1 = m > 1 ? _mm512_maskz_mov_epi8((__mmask64)B[1][t], one) : i0;
        __m512i i2 = m > 2 ? _mm512_maskz_mov_epi8((__mmask64)B[2][t], one) : i0;
        *hits = _mm512_mask_add_epi8(*hits, (__mmask64)a, *hits, one);
        *rows |= a;
        for (; a; a = _blsr_u64(a)) {
            size_t i = _tzcnt_u64(a);
            t0[i] = _mm512_add_epi8(t0[i], i0);
            if (m > 1)
                t1[i] = _mm512_add_epi8(t1[i], i1);
            if (m > 2)
                t2[i] = _mm512_add_epi8(t2[i], i2);
        }
    }
}

/* Add, for every token t, the mask B_k[t] to the rows of the experts in A[t] of matrix k, for
 * m = 1 to 3 matrices sharing A (a zero B_k[t] adds nothing): the bits of A are extracted once
 * for all. */
AVX512_TARGET static void rows3_avx512(void *tilev, uint16_t *const *dst, const uint64_t *A,
                                       const uint64_t *const *B, int m, size_t n)
{
    __m512i *t0 = tilev;
    const uint64_t *const Bm[3] = {B[0], m > 1 ? B[1] : A, m > 2 ? B[2] : A};
    __m512i hits = _mm512_setzero_si512();
    uint64_t rows = 0;
    for (size_t s0 = 0; s0 < n; s0 += HIT_CHECK) {
        size_t s1 = s0 + HIT_CHECK < n ? s0 + HIT_CHECK : n;
        if (m == 3)
            rows_span(t0, A, Bm, 3, s0, s1, &hits, &rows);
        else if (m == 2)
            rows_span(t0, A, Bm, 2, s0, s1, &hits, &rows);
        else
            rows_span(t0, A, Bm, 1, s0, s1, &hits, &rows);
        __mmask64 due = fold_due(hits);
        if (due) {
            fold_tiles(t0, dst, m, due);
            hits = _mm512_maskz_mov_epi8(~due, hits);
        }
    }
    fold_tiles(t0, dst, m, rows);
    _mm256_zeroupper(); /* no dirty upper state into SSE code (a large penalty otherwise) */
}

/* Tokens s0 to s1 of rows3co_avx512 for m = 1 or 3 matrices, m a constant where inlined (as
 * rows_span). */
AVX512_TARGET static inline __attribute__((always_inline)) void
rows_span_co(__m512i *t0, const uint64_t *A, const uint64_t *B1, const uint64_t *B2, int m,
             size_t s0, size_t s1, __m512i *hits, uint64_t *rows)
{
    const __m512i one = _mm512_set1_epi8(1);
    __m512i *t1 = t0 + AFF_TILE_STRIDE, *t2 = t1 + AFF_TILE_STRIDE;
    for (size_t t = s0; t < s1; t++) {
        uint64_t a = A[t];
        if (!a)
            continue;
        __m512i i0 = _mm512_maskz_mov_epi8((__mmask64)a, one);
        __m512i i1 = m > 1 ? _mm512_maskz_mov_epi8((__mmask64)B1[t], one) : i0;
        __m512i i2 = m > 1 ? _mm512_maskz_mov_epi8((__mmask64)B2[t], one) : i0;
        *hits = _mm512_mask_add_epi8(*hits, (__mmask64)a, *hits, one);
        *rows |= a;
        size_t top = 63 - (size_t)__builtin_clzll(a); /* a != 0 */
        for (uint64_t r = _bzhi_u64(a, (unsigned)top); r; r = _blsr_u64(r)) {
            size_t i = _tzcnt_u64(r);
            t0[i] = _mm512_add_epi8(t0[i], i0);
            if (m > 1) {
                t1[i] = _mm512_add_epi8(t1[i], i1);
                t2[i] = _mm512_add_epi8(t2[i], i2);
            }
        }
        if (m > 1) {
            t1[top] = _mm512_add_epi8(t1[top], i1);
            t2[top] = _mm512_add_epi8(t2[top], i2);
        }
    }
}

/*
 * rows3_avx512 for a co-activation matrix (dst[0], rows and columns both A) and up to two more
 * (m = 1 or 3). Co-activation is symmetric, so the row of each token's highest expert is left
 * out -- its entries above the diagonal are none, and those below are entries above the
 * diagonal of the other experts' rows: five adds instead of six for top-6. The matrix is then
 * exact above the diagonal, the diagonal comes from the hit counts when folding, and the
 * entries below it are to be ignored (aff_loc_t.co_upper: flushes mirror the upper half).
 */
AVX512_TARGET static void rows3co_avx512(void *tilev, uint16_t *const *dst, const uint64_t *A,
                                         const uint64_t *const *B, int m, size_t n)
{
    __m512i *t0 = tilev, *t1 = t0 + AFF_TILE_STRIDE;
    const uint64_t *B1 = m > 1 ? B[1] : A, *B2 = m > 2 ? B[2] : A;
    __m512i hits = _mm512_setzero_si512();
    uint64_t rows = 0;
    for (size_t s0 = 0; s0 < n; s0 += HIT_CHECK) {
        size_t s1 = s0 + HIT_CHECK < n ? s0 + HIT_CHECK : n;
        if (m == 3)
            rows_span_co(t0, A, B1, B2, 3, s0, s1, &hits, &rows);
        else
            rows_span_co(t0, A, B1, B2, 1, s0, s1, &hits, &rows);
        __mmask64 due = fold_due(hits);
        if (due) {
            fold_tile_co(t0, dst[0], due, hits);
            fold_tiles(t1, dst + 1, m - 1, due);
            hits = _mm512_maskz_mov_epi8(~due, hits);
        }
    }
    fold_tile_co(t0, dst[0], rows, hits);
    fold_tiles(t1, dst + 1, m - 1, rows);
    _mm256_zeroupper();
}

static void rows_avx512(void *tile, uint16_t *dst, const uint64_t *A, const uint64_t *B,
                        size_t n)
{
    rows3_avx512(tile, &dst, A, &B, 1, n);
}

static void rows_multi_avx512(void *tile, uint16_t *const *dst, const uint64_t *A,
                              const uint64_t *const *B, int m, size_t n)
{
    for (int k = 0; k < m; k += 3)
        rows3_avx512(tile, dst + k, A, B + k, m - k < 3 ? m - k : 3, n);
}

static void rows_multi_co_avx512(void *tile, uint16_t *const *dst, const uint64_t *A,
                                 const uint64_t *const *B, int m, size_t n)
{
    int k = m >= 3 ? 3 : 1; /* co-activation and the first pair, or co-activation alone */
    rows3co_avx512(tile, dst, A, B, k, n);
    if (k < m)
        rows_multi_avx512(tile, dst + k, A, B + k, m - k, n);
}
#endif

#ifdef AFF_X86
#define VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi")))

/* The masks of up to eight cells of one record (layers j0.. of its ids), lane c = cell c. */
VBMI_TARGET static inline __m512i cells8(const uint8_t *ids, uint32_t j0, uint32_t cells,
                                         uint32_t K, const __m512i *perm)
{
    const __mmask64 low = 0x0101010101010101u; /* the low byte of each 64-bit lane */
    const __m512i one = _mm512_set1_epi64(1);
    __mmask64 ld = cells * K >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (cells * K)) - 1);
    __m512i v = _mm512_maskz_loadu_epi8(ld, ids + (size_t)j0 * K);
    __m512i m = _mm512_setzero_si512();
    for (uint32_t k = 0; k < K; k++) {
        __m512i id = _mm512_maskz_permutexvar_epi8(low, perm[k], v);
        m = _mm512_or_si512(m, _mm512_sllv_epi64(one, id));
    }
    return m;
}

/* Transpose eight vectors of eight 64-bit lanes: x[q] lane c becomes x[c] lane q. */
VBMI_TARGET static inline void transpose8(__m512i *x)
{
    __m512i a[8], b[8];
    for (int q = 0; q < 8; q += 2) {
        a[q] = _mm512_unpacklo_epi64(x[q], x[q + 1]);     /* columns 0 2 4 6 of rows q, q+1 */
        a[q + 1] = _mm512_unpackhi_epi64(x[q], x[q + 1]); /* columns 1 3 5 7 */
    }
    const __m512i lo2 = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i hi2 = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    for (int h = 0; h < 8; h += 4) /* rows h..h+3: columns (0,4), (2,6), (1,5), (3,7) */
        for (int e = 0; e < 2; e++) {
            b[h + 2 * e] = _mm512_permutex2var_epi64(a[h + e], lo2, a[h + 2 + e]);
            b[h + 2 * e + 1] = _mm512_permutex2var_epi64(a[h + e], hi2, a[h + 2 + e]);
        }
    const __m512i lo4 = _mm512_set_epi64(11, 10, 9, 8, 3, 2, 1, 0);
    const __m512i hi4 = _mm512_set_epi64(15, 14, 13, 12, 7, 6, 5, 4);
    static const int col[4] = {0, 2, 1, 3}; /* b[k] and b[k + 4] hold columns col[k], +4 */
    for (int k = 0; k < 4; k++) {
        x[col[k]] = _mm512_permutex2var_epi64(b[k], lo4, b[k + 4]);
        x[col[k] + 4] = _mm512_permutex2var_epi64(b[k], hi4, b[k + 4]);
    }
}

/*
 * Set masks of whole records with AVX-512 VBMI: eight cells (layers) at a time, for K <= 8 and
 * one byte per id. For each k, a byte permutation moves id k of the eight cells into the low
 * byte of eight 64-bit lanes (the rest zeroed), and a variable shift turns it into its bit;
 * the missing marker 0xff shifts the bit out, so a missing cell comes out as 0, as it should.
 * Eight records at a time, the 8 x 8 masks are transposed so that each layer's eight are
 * stored at once.
 */
VBMI_TARGET static int masks_vbmi(const uint8_t *raw, size_t stride, size_t n, uint32_t L,
                                  uint32_t K, uint64_t *full, size_t ostride)
{
    __m512i perm[8];
    for (uint32_t k = 0; k < K; k++) {
        uint8_t idx[64] = {0};
        for (int c = 0; c < 8; c++)
            idx[8 * c] = (uint8_t)(c * K + k);
        perm[k] = _mm512_loadu_si512(idx);
    }
    unsigned zeros = 0;
    size_t r = 0;
    for (; r + 8 <= n; r += 8) {
        for (uint32_t j0 = 0; j0 < L; j0 += 8) {
            uint32_t cells = L - j0 < 8 ? L - j0 : 8;
            __m512i x[8];
            for (int q = 0; q < 8; q++) {
                x[q] = cells8(raw + (r + (size_t)q) * stride, j0, cells, K, perm);
                zeros |= _mm512_cmpeq_epi64_mask(x[q], _mm512_setzero_si512()) &
                         ((1u << cells) - 1);
            }
            transpose8(x);
            for (uint32_t c = 0; c < cells; c++)
                _mm512_storeu_si512(full + (size_t)(j0 + c) * ostride + r, x[c]);
        }
    }
    for (; r < n; r++) {
        const uint8_t *ids = raw + r * stride;
        for (uint32_t j0 = 0; j0 < L; j0 += 8) {
            uint32_t cells = L - j0 < 8 ? L - j0 : 8;
            __m512i m = cells8(ids, j0, cells, K, perm);
            zeros |= _mm512_cmpeq_epi64_mask(m, _mm512_setzero_si512()) & ((1u << cells) - 1);
            uint64_t out[8];
            _mm512_storeu_si512(out, m);
            for (uint32_t c = 0; c < cells; c++)
                full[(size_t)(j0 + c) * ostride + r] = out[c];
        }
    }
    _mm256_zeroupper();
    return zeros != 0;
}
#endif

int aff_masks_fast(const uint8_t *raw, size_t stride, size_t n, uint32_t L, uint32_t K,
                   uint64_t *full)
{
#ifdef AFF_X86
    static int cached = -1; /* workers may race to fill it in: relaxed atomics */
    int has = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vbmi");
        __atomic_store_n(&cached, has, __ATOMIC_RELAXED);
    }
    if (has && K <= 8)
        return masks_vbmi(raw, stride, n, L, K, full, n);
#endif
    (void)raw;
    (void)stride;
    (void)n;
    (void)L;
    (void)K;
    (void)full;
    return -1;
}

/* Without a shared kernel: one pass per matrix. */
static void rows_multi_generic(const aff_kern_t *k, void *tile, uint16_t *const *dst,
                               const uint64_t *A, const uint64_t *const *B, int m, size_t n)
{
    for (int i = 0; i < m; i++)
        k->rows(tile, dst[i], A, B[i], n);
}

static const aff_kern_t kernels[] = {
    {"scalar", rows_scalar, NULL, NULL},
#ifdef AFF_X86
    {"avx2", rows_avx2, NULL, NULL},
    {"avx512", rows_avx512, rows_multi_avx512, rows_multi_co_avx512},
#endif
};

const aff_kern_t *aff_kernel(int which)
{
#ifdef AFF_X86
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    int has2 = __builtin_cpu_supports("avx2");
    if ((which == MOE_AFF_KERNEL_AUTO || which == MOE_AFF_KERNEL_AVX512) && has512)
        return &kernels[2];
    if ((which == MOE_AFF_KERNEL_AUTO || which == MOE_AFF_KERNEL_AVX2) && has2)
        return &kernels[1];
#endif
    if (which == MOE_AFF_KERNEL_AUTO || which == MOE_AFF_KERNEL_SCALAR)
        return &kernels[0];
    return NULL;
}

/* ------------------------------------------------------------------ counting a batch */

void aff_count_batch(const aff_shape_t *s, const aff_kern_t *k, aff_loc_t *lc, void *tile,
                     const uint64_t *full, const uint64_t *set, size_t stride, size_t n)
{
    const uint32_t L = s->L;
    uint16_t *co = lc->co, *tr = lc->tr;
    const size_t mat = (size_t)AFF_ROW * AFF_ROW;
    if (co)
        for (uint32_t j = 0; j < L; j++)
            k->rows(tile, co + j * mat, full + j * stride, full + j * stride, n);
    for (uint32_t d = 1; d <= s->hops; d++)
        for (uint32_t j = 0; j + d < L; j++)
            k->rows(tile, tr + aff_pair(s, d, j) * mat, set + j * stride,
                    set + (j + d) * stride, n);
    if (lc->loads && !aff_count_loads(s, lc, full, set, stride, n))
        return; /* nothing missing: no exclusions */
    for (uint32_t d = 1; d <= s->hops; d++)
        for (uint32_t j = 0; j + d < L; j++)
            aff_count_exclusions(s, lc, aff_pair(s, d, j), set + j * stride,
                             set + (j + d) * stride, n);
}

void aff_rows_multi(const aff_kern_t *k, void *tile, uint16_t *const *dst, const uint64_t *A,
                    const uint64_t *const *B, int m, size_t n, int co_upper)
{
    if (co_upper)
        k->rows_multi_co(tile, dst, A, B, m, n);
    else if (k->rows_multi)
        k->rows_multi(tile, dst, A, B, m, n);
    else
        rows_multi_generic(k, tile, dst, A, B, m, n);
}

/* ------------------------------------------------------------------ list path (E > 64) */

void aff_count_lists(const aff_shape_t *s, aff_loc_t *lc, aff_scr_t *sc)
{
    const uint32_t L = s->L, E = s->E, K = s->K, S = s->S;
    const size_t ee = (size_t)E * E;
    uint32_t *co = lc->co, *tr = lc->tr;
    unsigned miss = 0;
    for (uint32_t j = 0; j < L; j++) {
        const uint16_t *f = sc->full + (size_t)j * K;
        uint32_t nf = sc->nfull[j];
        if (!nf) {
            if (lc->loads)
                lc->lmiss[j]++;
            miss = 1;
            continue;
        }
        if (co)
            for (uint32_t a = 0; a < nf; a++) {
                uint32_t *row = co + j * ee + (size_t)f[a] * E;
                for (uint32_t b = 0; b < nf; b++)
                    row[f[b]]++;
            }
        if (lc->loads && lc->count_setload)
            for (uint32_t a = 0; a < sc->nset[j]; a++)
                lc->setload[(size_t)j * E + sc->set[(size_t)j * S + a]]++;
    }
    if (lc->loads)
        lc->incomplete += miss;
    for (uint32_t d = 1; d <= s->hops; d++)
        for (uint32_t j = 0; j + d < L; j++) {
            const uint16_t *x = sc->set + (size_t)j * S, *y = sc->set + (size_t)(j + d) * S;
            uint32_t nx = sc->nset[j], ny = sc->nset[j + d], p = aff_pair(s, d, j);
            if (!nx || !ny) {
                lc->excl[p]++;
                for (uint32_t a = 0; a < nx; a++)
                    lc->missrow[(size_t)p * E + x[a]]++;
                continue;
            }
            uint32_t *base = tr + p * ee;
            for (uint32_t a = 0; a < nx; a++) {
                uint32_t *row = base + (size_t)x[a] * E;
                for (uint32_t b = 0; b < ny; b++)
                    row[y[b]]++;
            }
        }
}
