/* gemm_avx512.c: AVX-512 matrix-matrix kernels for the types kern_avx512.c
 * has no gemm for (prefill): Q5_K, BF16 and F32 weights.
 * Owns: those gemm entries of the AVX-512 table, in the rounding kern_ref.c
 * defines: Q5_K as vec_dot (mu_vec_dot_q5_K_ref; llama.cpp has no other
 * Q5_K order for batches), BF16 and F32 as vec_dot_batch (llamafile
 * tinyBLAS; BF16 with n % 32 != 0 and F32 with n % 16 != 0 as vec_dot).
 * Does not: decide which rows take which path (forward.c does), nor own the
 * other types' gemm (kern_avx512.c).
 * Key design choice: register tiles of several weight rows x several
 * activation rows, the weight data loaded (Q5_K: decoded) once per tile and
 * reused for every activation row, the integer sums in any (exact) order,
 * every float step in exactly the ref's order. Q5_K keeps two weight rows
 * per zmm (row r in the low 256 bits, row r + 1 in the high), so the ref's
 * 8 integer lanes of each row sit in the two halves without a fold, and its
 * mins chain (a scalar per output in the ref) runs as a separate pass with
 * 16 activation rows per vector. Where tinyBLAS declines (n % 32 or n % 16),
 * the rows go through the table's own vec_dot, taken at fill time. */
#include <immintrin.h>
#include <string.h>

#include "kern.h"
#include "simd_x86.h"

#define AI __attribute__((always_inline)) static inline

/* ---- Q5_K ----------------------------------------------------------------
 * The ref (ggml's AVX2 q5_K): per super-block, integer lane m of 8 holds
 * sum_j sc[j] * (q5 . a) on bytes 4m..4m+3 of sub-block j; acc[m] =
 * fma(d_a * d_x, lane, acc[m]); summs = fma(imin, -d_a * dmin_x, summs)
 * with imin = sum_j mn[j] * (bsums[2j] + bsums[2j+1]); the result is
 * hsum8(acc) + summs.
 *
 * Here a row pair's block is decoded once per token block into a
 * q5k_pblock. The 4-byte dots of sub-blocks 2p and 2p + 1 (vpdpbusd,
 * |dot| <= 4 * 31 * 127 < 2^15) are packed as the two int16 halves of each
 * lane and scaled by one vpdpwssd against (sc[2p], sc[2p + 1]): three
 * multiplies per 64 products of a row pair. */
typedef struct {
    __m512i q[8];  /* sub-block c: codes 0..31; row r low 256 bits, row r + 1 high */
    __m512i s2[4]; /* per dword: sc[2p] | sc[2p + 1] << 16, row r low, row r + 1 high */
    __m512 dx;     /* d of row r (low 8 lanes) and row r + 1 (high) */
    uint32_t mn[2][4]; /* per row: mn[2k] | mn[2k + 1] << 16 */
    float ndmx[2];     /* per row: -dmin */
} q5k_pblock;

static void q5k_pbuild(const mu_block_q5_K *x0, const mu_block_q5_K *x1, q5k_pblock *o) {
    uint32_t u0[4], u1[4];
    k4_scales(x0->scales, u0);
    k4_scales(x1->scales, u1);
    const uint8_t *s0 = (const uint8_t *)u0, *s1 = (const uint8_t *)u1;
    const __m512i m4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(16);
    const __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0->qh)),
                                          _mm256_loadu_si256((const __m256i *)x1->qh), 1);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x0->qs + 32 * j))),
                                             _mm256_loadu_si256((const __m256i *)(x1->qs + 32 * j)), 1);
        const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        const __mmask64 ml = _mm512_test_epi8_mask(qh, _mm512_set1_epi8((char)(1 << (2 * j))));
        const __mmask64 mh = _mm512_test_epi8_mask(qh, _mm512_set1_epi8((char)(2 << (2 * j))));
        o->q[2 * j] = _mm512_mask_add_epi8(lo, ml, lo, b16);
        o->q[2 * j + 1] = _mm512_mask_add_epi8(hi, mh, hi, b16);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
        o->s2[p] = _mm512_inserti64x4(_mm512_set1_epi32((int)((uint32_t)s0[2 * p] | (uint32_t)s0[2 * p + 1] << 16)),
                                      _mm256_set1_epi32((int)((uint32_t)s1[2 * p] | (uint32_t)s1[2 * p + 1] << 16)), 1);
    for (int k = 0; k < 4; k++) {
        o->mn[0][k] = (uint32_t)s0[8 + 2 * k] | (uint32_t)s0[9 + 2 * k] << 16;
        o->mn[1][k] = (uint32_t)s1[8 + 2 * k] | (uint32_t)s1[9 + 2 * k] << 16;
    }
    o->ndmx[0] = -f16_to_f32(x0->dmin);
    o->ndmx[1] = -f16_to_f32(x1->dmin);
    o->dx = _mm512_insertf32x8(_mm512_set1_ps(f16_to_f32(x0->d)), _mm256_set1_ps(f16_to_f32(x1->d)), 1);
}

/* Rows r..r+3 (pairs pa, pb) against TN activation rows; writes the first
 * nr rows: y[t][k] = hsum8(acc of row k) + sm[k][t] (the mins chain). */
AI void q5k_ptile(int nb, const q5k_pblock *pa, const q5k_pblock *pb, const uint8_t *a, size_t as, float *y, int ys,
                  const float *sm, int sms, int nr, const int TN) {
    __m512 acca[6], accb[6];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acca[t] = accb[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const q5k_pblock *A = &pa[i], *B = &pb[i];
        __m512i ia[6], ib[6];
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) ia[t] = ib[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const __m512i qa0 = A->q[2 * p], qa1 = A->q[2 * p + 1], qb0 = B->q[2 * p], qb1 = B->q[2 * p + 1];
            const __m512i z = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int t = 0; t < TN; t++) {
                const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
                const __m512i av0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 64 * p)));
                const __m512i av1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 64 * p + 32)));
                const __m512i da = _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_dpbusd_epi32(z, qa0, av0),
                                                           _mm512_slli_epi32(_mm512_dpbusd_epi32(z, qa1, av1), 16));
                const __m512i db = _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_dpbusd_epi32(z, qb0, av0),
                                                           _mm512_slli_epi32(_mm512_dpbusd_epi32(z, qb1, av1), 16));
                ia[t] = _mm512_dpwssd_epi32(ia[t], da, A->s2[p]);
                ib[t] = _mm512_dpwssd_epi32(ib[t], db, B->s2[p]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
            const __m512 yd = _mm512_set1_ps(b->d);
            acca[t] = _mm512_fmadd_ps(_mm512_mul_ps(yd, A->dx), _mm512_cvtepi32_ps(ia[t]), acca[t]);
            accb[t] = _mm512_fmadd_ps(_mm512_mul_ps(yd, B->dx), _mm512_cvtepi32_ps(ib[t]), accb[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) {
        float *yt = y + (size_t)t * ys;
        float o[4];
        o[0] = hsum_ps256(_mm512_castps512_ps256(acca[t]));
        o[1] = hsum_ps256(_mm512_extractf32x8_ps(acca[t], 1));
        o[2] = hsum_ps256(_mm512_castps512_ps256(accb[t]));
        o[3] = hsum_ps256(_mm512_extractf32x8_ps(accb[t], 1));
        for (int k = 0; k < nr; k++) yt[k] = o[k] + sm[k * sms + t];
    }
}

/* The mins chain of one row (pblock half h) for the 16 activation rows whose
 * P (bsum pairs, packed as int16 pairs) and d sit at pm, yd (token-major):
 * summs = fma(imin, d_a * -dmin_x, summs) block by block, as the ref. */
static inline void q5k_mins16(int nb, const q5k_pblock *pbk, int h, const int32_t *pm, const float *yd, int tbp,
                              float *out) {
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const q5k_pblock *v = &pbk[i];
        const int32_t *p = pm + (size_t)i * 4 * tbp;
        __m512i im = _mm512_madd_epi16(_mm512_loadu_si512(p), _mm512_set1_epi32((int)v->mn[h][0]));
        im = _mm512_add_epi32(im, _mm512_madd_epi16(_mm512_loadu_si512(p + tbp), _mm512_set1_epi32((int)v->mn[h][1])));
        im = _mm512_add_epi32(im, _mm512_madd_epi16(_mm512_loadu_si512(p + 2 * tbp), _mm512_set1_epi32((int)v->mn[h][2])));
        im = _mm512_add_epi32(im, _mm512_madd_epi16(_mm512_loadu_si512(p + 3 * tbp), _mm512_set1_epi32((int)v->mn[h][3])));
        const __m512 dm = _mm512_mul_ps(_mm512_loadu_ps(yd + (size_t)i * tbp), _mm512_set1_ps(v->ndmx[h]));
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm, s);
    }
    _mm512_storeu_ps(out, s);
}

#ifndef Q5K_VT
#define Q5K_VT 4
#endif
#define Q5K_MAX_NB 96
/* activation bytes of one token block: measured (1 thread, 64 rows, n 6656
 * and 19968) 768 KiB beat 192 and 384 (fewer weight re-reads and decodes) */
#ifndef Q5K_TB_KIB
#define Q5K_TB_KIB 768u
#endif
/* blocks x padded activation rows of one token block (the mins pass's scratch) */
#ifndef Q5K_PM_CAP
#define Q5K_PM_CAP 4096
#endif

static void gemm_q5_K_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                             float *y, int ys) {
    const int nb = n / MU_QK_K;
    if (nb > Q5K_MAX_NB) { /* no scratch for such rows: the ref itself */
        for (int t = 0; t < n_t; t++)
            for (int r = r0; r < r1; r++)
                y[(size_t)t * ys + r] =
                    mu_vec_dot_q5_K_ref(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
        return;
    }
    static _Thread_local q5k_pblock pb[2][Q5K_MAX_NB];
    static _Thread_local int32_t pm[4 * Q5K_PM_CAP] __attribute__((aligned(64)));
    static _Thread_local float pyd[Q5K_PM_CAP] __attribute__((aligned(64)));
    static _Thread_local float sm[4][Q5K_PM_CAP / 16 * 16 + 16];
    /* token blocks whose activations stay in L2 (1 MiB) while the rows sweep them */
    int tb = (int)((Q5K_TB_KIB << 10) / ((unsigned)nb * sizeof(mu_block_q8_K)));
    tb = tb < 4 * Q5K_VT ? 4 * Q5K_VT : tb / Q5K_VT * Q5K_VT;
    while (tb > Q5K_VT && nb * ((tb + 15) & ~15) > Q5K_PM_CAP) tb -= Q5K_VT;
    for (int t0 = 0; t0 < n_t; t0 += tb) {
        const int t1 = t0 + tb < n_t ? t0 + tb : n_t;
        const int tbp = (t1 - t0 + 15) & ~15;
        /* the activation rows' bsum pairs and scales, token-major */
        for (int tt = 0; tt < tbp; tt++) {
            const mu_block_q8_K *b = (const mu_block_q8_K *)((const uint8_t *)a + (size_t)(t0 + (tt < t1 - t0 ? tt : 0)) * as);
            for (int i = 0; i < nb; i++) {
                const int16_t *bs = b[i].bsums;
                for (int k = 0; k < 4; k++) {
                    const int p0 = bs[4 * k] + bs[4 * k + 1], p1 = bs[4 * k + 2] + bs[4 * k + 3];
                    pm[((size_t)i * 4 + k) * tbp + tt] = (int32_t)((uint32_t)(uint16_t)p0 | (uint32_t)(uint16_t)p1 << 16);
                }
                pyd[(size_t)i * tbp + tt] = b[i].d;
            }
        }
        for (int r = r0; r < r1; r += 4) {
            const int nr = r1 - r < 4 ? r1 - r : 4;
            const uint8_t *wr[4];
            for (int k = 0; k < 4; k++) wr[k] = (const uint8_t *)w + (size_t)(r + (k < nr ? k : 0)) * ws;
            for (int i = 0; i < nb; i++) {
                q5k_pbuild((const mu_block_q5_K *)wr[0] + i, (const mu_block_q5_K *)wr[1] + i, &pb[0][i]);
                q5k_pbuild((const mu_block_q5_K *)wr[2] + i, (const mu_block_q5_K *)wr[3] + i, &pb[1][i]);
            }
            for (int k = 0; k < nr; k++)
                for (int c = 0; c < tbp; c += 16) q5k_mins16(nb, pb[k / 2], k % 2, pm + c, pyd + c, tbp, &sm[k][c]);
            const int sms = (int)(sizeof sm[0] / sizeof sm[0][0]);
            int t = t0;
            for (; t + Q5K_VT <= t1; t += Q5K_VT)
                q5k_ptile(nb, pb[0], pb[1], (const uint8_t *)a + (size_t)t * as, as, y + (size_t)t * ys + r, ys,
                          &sm[0][t - t0], sms, nr, Q5K_VT);
            const uint8_t *at = (const uint8_t *)a + (size_t)t * as;
            float *yt = y + (size_t)t * ys + r;
            const float *st = &sm[0][t - t0];
            switch (t1 - t) {
#if Q5K_VT > 5
            case 5: q5k_ptile(nb, pb[0], pb[1], at, as, yt, ys, st, sms, nr, 5); break;
#endif
#if Q5K_VT > 4
            case 4: q5k_ptile(nb, pb[0], pb[1], at, as, yt, ys, st, sms, nr, 4); break;
#endif
            case 3: q5k_ptile(nb, pb[0], pb[1], at, as, yt, ys, st, sms, nr, 3); break;
            case 2: q5k_ptile(nb, pb[0], pb[1], at, as, yt, ys, st, sms, nr, 2); break;
            case 1: q5k_ptile(nb, pb[0], pb[1], at, as, yt, ys, st, sms, nr, 1); break;
            default: break;
            }
        }
    }
}

/* ---- BF16 and F32 (tinyBLAS orders) ----------------------------------------
 * One 16-lane accumulator per output over steps of 32 (BF16, VDPBF16PS) or
 * 16 (F32, FMA), reduced as _mm512_reduce_add_ps (mu_hsum16). A tile is FR
 * weight rows x TN activation rows of accumulators (6 x 4: 24 accumulators,
 * 6 weight vectors and one activation vector in registers). Measured on
 * this Zen 4 (kernbench-style, 1 thread, 64 activation rows): 6 x 4 beat
 * 4 x 6 and 5 x 5; row blocks in L2 beat token blocks in L2 for n = 6656
 * and 19968 (there token blocks re-read the weights from memory every few
 * activation rows), token blocks won for BF16 n = 2048 (89 vs 76 GMAC/s). */
#define FR 6 /* the remainder switch in FGEMM assumes 6 */
#ifndef FT
#define FT 4
#endif
#ifndef F_RB_KIB
#define F_RB_KIB 512
#endif
#ifndef F_TB_KIB
#define F_TB_KIB 256
#endif
#ifndef F_SHORT_ROW
#define F_SHORT_ROW 4096
#endif

AI void ftile_bf16(int n, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *y, int ys, const int RN,
                   const int TN) {
    __m512 acc[FR][FT];
#pragma GCC unroll 8
    for (int r = 0; r < RN; r++)
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) acc[r][t] = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 32) {
        __m512bh wv[FR];
#pragma GCC unroll 8
        for (int r = 0; r < RN; r++) wv[r] = (__m512bh)_mm512_loadu_si512(w + (size_t)r * ws + 2 * (size_t)i);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const __m512bh av = (__m512bh)_mm512_loadu_si512(a + (size_t)t * as + 2 * (size_t)i);
#pragma GCC unroll 8
            for (int r = 0; r < RN; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], av);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++)
#pragma GCC unroll 8
        for (int r = 0; r < RN; r++) y[(size_t)t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
}

AI void ftile_f32(int n, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *y, int ys, const int RN,
                  const int TN) {
    __m512 acc[FR][FT];
#pragma GCC unroll 8
    for (int r = 0; r < RN; r++)
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) acc[r][t] = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __m512 wv[FR];
#pragma GCC unroll 8
        for (int r = 0; r < RN; r++) wv[r] = _mm512_loadu_ps((const float *)(w + (size_t)r * ws) + i);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const __m512 av = _mm512_loadu_ps((const float *)(a + (size_t)t * as) + i);
#pragma GCC unroll 8
            for (int r = 0; r < RN; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++)
#pragma GCC unroll 8
        for (int r = 0; r < RN; r++) y[(size_t)t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* tn (1..FT) activation rows against RN weight rows, tn a constant inside */
#define FTILE_N(NAME, RN, tn, ...)                                                                                  \
    do {                                                                                                            \
        switch (tn) {                                                                                               \
        case 6: if (FT >= 6) ftile_##NAME(__VA_ARGS__, RN, FT >= 6 ? 6 : 1); break;                                 \
        case 5: if (FT >= 5) ftile_##NAME(__VA_ARGS__, RN, FT >= 5 ? 5 : 1); break;                                 \
        case 4: if (FT >= 4) ftile_##NAME(__VA_ARGS__, RN, FT >= 4 ? 4 : 1); break;                                 \
        case 3: ftile_##NAME(__VA_ARGS__, RN, 3); break;                                                            \
        case 2: ftile_##NAME(__VA_ARGS__, RN, 2); break;                                                            \
        default: ftile_##NAME(__VA_ARGS__, RN, 1); break;                                                           \
        }                                                                                                           \
    } while (0)

/* nr (1..FR) weight rows x tn (1..FT) activation rows, both constants inside */
#define FTILE_RT(NAME, nr, tn, ...)                                                                                 \
    do {                                                                                                            \
        switch (nr) {                                                                                               \
        case 6: FTILE_N(NAME, 6, tn, __VA_ARGS__); break;                                                           \
        case 5: FTILE_N(NAME, 5, tn, __VA_ARGS__); break;                                                           \
        case 4: FTILE_N(NAME, 4, tn, __VA_ARGS__); break;                                                           \
        case 3: FTILE_N(NAME, 3, tn, __VA_ARGS__); break;                                                           \
        case 2: FTILE_N(NAME, 2, tn, __VA_ARGS__); break;                                                           \
        default: FTILE_N(NAME, 1, tn, __VA_ARGS__); break;                                                          \
        }                                                                                                           \
    } while (0)

/* Two loop orders, by row length. Short rows (n * size <= F_SHORT_ROW):
 * token blocks of about F_TB_KIB of activations stay in L2 while each group
 * of FR weight rows, in L1, passes over them (the weights are read from
 * memory once per token block of at least 32 rows). Long rows: row blocks
 * of about F_RB_KIB of weights stay in L2 while every activation row passes
 * them in tiles of FT (each tile read once from L3 or memory, then reused by
 * every row group of the block), so the weights are read once per call. */
#define FGEMM(NAME, ESZ)                                                                                            \
    static void fgemm_##NAME(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,    \
                             float *y, int ys) {                                                                    \
        const size_t rowb = (size_t)n * (ESZ);                                                                      \
        if (rowb <= F_SHORT_ROW) {                                                                                  \
            int tb = (int)(((size_t)F_TB_KIB << 10) / rowb);                                                        \
            tb = tb < FT ? FT : tb / FT * FT;                                                                       \
            for (int t0 = 0; t0 < n_t; t0 += tb) {                                                                  \
                const int t1 = t0 + tb < n_t ? t0 + tb : n_t;                                                       \
                for (int r = r0; r < r1; r += FR) {                                                                 \
                    const int nr = r1 - r < FR ? r1 - r : FR;                                                       \
                    const uint8_t *wr = (const uint8_t *)w + (size_t)r * ws;                                        \
                    for (int t = t0; t < t1; t += FT) {                                                             \
                        const int tn = t1 - t < FT ? t1 - t : FT;                                                   \
                        FTILE_RT(NAME, nr, tn, n, wr, ws, (const uint8_t *)a + (size_t)t * as, as,                  \
                                 y + (size_t)t * ys + r, ys);                                                       \
                    }                                                                                               \
                }                                                                                                   \
            }                                                                                                       \
            return;                                                                                                 \
        }                                                                                                           \
        int rb = (int)(((size_t)F_RB_KIB << 10) / rowb);                                                            \
        rb = rb < FR ? FR : rb / FR * FR;                                                                           \
        for (int b0 = r0; b0 < r1; b0 += rb) {                                                                      \
            const int b1 = b0 + rb < r1 ? b0 + rb : r1;                                                             \
            for (int t = 0; t < n_t; t += FT) {                                                                     \
                const int tn = n_t - t < FT ? n_t - t : FT;                                                         \
                for (int r = b0; r < b1; r += FR) {                                                                 \
                    const int nr = b1 - r < FR ? b1 - r : FR;                                                       \
                    FTILE_RT(NAME, nr, tn, n, (const uint8_t *)w + (size_t)r * ws, ws,                              \
                             (const uint8_t *)a + (size_t)t * as, as, y + (size_t)t * ys + r, ys);                  \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }

FGEMM(bf16, 2)
FGEMM(f32, 4)

/* the table's vec_dot for BF16 and F32 (kern_avx512.c fills them first) */
static mu_vec_dot_fn table_dot_bf16, table_dot_f32;

/* tinyBLAS needs n % 32 == 0; otherwise llama.cpp (and the ref's
 * vec_dot_batch) use vec_dot. */
static void gemm_bf16_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                             float *y, int ys) {
    if (n % 32 == 0) {
        fgemm_bf16(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    for (int t = 0; t < n_t; t++)
        for (int r = r0; r < r1; r++)
            y[(size_t)t * ys + r] =
                table_dot_bf16(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}

/* tinyBLAS needs n % 16 == 0; otherwise llama.cpp uses vec_dot (and
 * forward.c does not call the gemm). */
static void gemm_f32_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                            float *y, int ys) {
    if (n % 16 == 0) {
        fgemm_f32(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    for (int t = 0; t < n_t; t++)
        for (int r = r0; r < r1; r++)
            y[(size_t)t * ys + r] =
                table_dot_f32(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}

void mu_kern_fill_gemm_avx512(mu_kern *k) {
    table_dot_bf16 = k->vec_dot[MU_T_BF16];
    table_dot_f32 = k->vec_dot[MU_T_F32];
    k->gemm[MU_T_Q5_K] = gemm_q5_K_avx512;
    k->gemm[MU_T_BF16] = gemm_bf16_avx512;
    k->gemm[MU_T_F32] = gemm_f32_avx512;
}
