/* simd_avx512.h: the AVX-512 block decoders shared by kern_avx512.c (the
 * dots) and gemm_avx512.c (the tiles). Include only from files built with
 * kern_avx512.c's flags (F, BW, VL, DQ, VNNI, BF16).
 * Owns: Q4_K and Q6_K blocks decoded into registers (codes and scales spread
 * for maddubs + vpdpwssd), their integer sums in the ref's lanes, the
 * per-64 step of the Q4_K batch order, the F16 loads, a 16 x 16 dword
 * transpose (gemm_avx512.c, gemm_amx.c). */
#ifndef MU_KERN_SIMD_AVX512_H
#define MU_KERN_SIMD_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kern.h"
#include "simd_x86.h"

/* sum_j mn[j] * (bsums[2j] + bsums[2j+1]) as 4 int32 partial sums. */
static inline __m128i k4_mins_dot(const uint32_t u[4], const int16_t *bsums) {
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)&u[2]));
    const __m128i b0 = _mm_loadu_si128((const __m128i *)bsums);
    const __m128i b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    return _mm_madd_epi16(_mm_hadd_epi16(b0, b1), mins);
}

/* pshufb controls that spread 16-bit word a over the low 256 bits and word b
 * over the high 256 bits (shuffles stay within 128-bit lanes, so the source
 * holds the same 8 words in every lane). */
static inline __m512i word_pair_ctrl(int a, int b) {
    const __m256i lo = _mm256_set1_epi16((short)((2 * a + 1) << 8 | (2 * a)));
    const __m256i hi = _mm256_set1_epi16((short)((2 * b + 1) << 8 | (2 * b)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Spread words a, a+1, a+2, a+3 over the four 128-bit lanes. */
static inline __m512i word_quad_ctrl(int a) {
    return _mm512_set_epi16(
        (short)((2 * a + 7) << 8 | (2 * a + 6)), (short)((2 * a + 7) << 8 | (2 * a + 6)),
        (short)((2 * a + 7) << 8 | (2 * a + 6)), (short)((2 * a + 7) << 8 | (2 * a + 6)),
        (short)((2 * a + 7) << 8 | (2 * a + 6)), (short)((2 * a + 7) << 8 | (2 * a + 6)),
        (short)((2 * a + 7) << 8 | (2 * a + 6)), (short)((2 * a + 7) << 8 | (2 * a + 6)),
        (short)((2 * a + 5) << 8 | (2 * a + 4)), (short)((2 * a + 5) << 8 | (2 * a + 4)),
        (short)((2 * a + 5) << 8 | (2 * a + 4)), (short)((2 * a + 5) << 8 | (2 * a + 4)),
        (short)((2 * a + 5) << 8 | (2 * a + 4)), (short)((2 * a + 5) << 8 | (2 * a + 4)),
        (short)((2 * a + 5) << 8 | (2 * a + 4)), (short)((2 * a + 5) << 8 | (2 * a + 4)),
        (short)((2 * a + 3) << 8 | (2 * a + 2)), (short)((2 * a + 3) << 8 | (2 * a + 2)),
        (short)((2 * a + 3) << 8 | (2 * a + 2)), (short)((2 * a + 3) << 8 | (2 * a + 2)),
        (short)((2 * a + 3) << 8 | (2 * a + 2)), (short)((2 * a + 3) << 8 | (2 * a + 2)),
        (short)((2 * a + 3) << 8 | (2 * a + 2)), (short)((2 * a + 3) << 8 | (2 * a + 2)),
        (short)((2 * a + 1) << 8 | (2 * a)), (short)((2 * a + 1) << 8 | (2 * a)),
        (short)((2 * a + 1) << 8 | (2 * a)), (short)((2 * a + 1) << 8 | (2 * a)),
        (short)((2 * a + 1) << 8 | (2 * a)), (short)((2 * a + 1) << 8 | (2 * a)),
        (short)((2 * a + 1) << 8 | (2 * a)), (short)((2 * a + 1) << 8 | (2 * a)));
}

/* ---- Q4_K: one decoded block --------------------------------------------
 * q[p] = codes of sub-blocks 2p (low 256 bits) and 2p+1 (high), unsigned;
 * s[p] = their scales as 16-bit words spread the same way. */
typedef struct {
    __m512i q[4], s[4];
} q4k_dec;

static inline void q4k_decode(const mu_block_q4_K *b, q4k_dec *o, uint32_t u[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    k4_scales(b->scales, u);
    const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)u)));
#pragma GCC unroll 8
    for (int p = 0; p < 4; p++) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * p)));
        o->q[p] = _mm512_and_si512(_mm512_srlv_epi16(v, shift), m4);
        o->s[p] = _mm512_shuffle_epi8(sc, word_pair_ctrl(2 * p, 2 * p + 1));
    }
}

/* Integer sums of a block's 4 pairs of sub-blocks (64 values each):
 * [sum over pair 0, 1, 2, 3] of scale * (q4 . q8). */
static inline __m128i q4k_pair_sums(const q4k_dec *o, const int8_t *q8) {
    __m512i z[4];
#pragma GCC unroll 8
    for (int p = 0; p < 4; p++)
        z[p] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(o->q[p], _mm512_loadu_si512(q8 + 64 * p)),
                                   o->s[p]);
    const __m512i x = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
    const __m512i y = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
    const __m512i w = _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(w), _mm512_extracti64x4_epi64(w, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* One block in the per-64 order (ref vec_dot_batch, llama.cpp's repack gemm). */
static inline void q4k_batch_step(const q4k_dec *dec, const uint32_t u[4], const mu_block_q8_K *b, float dx, float dmx,
                                  float *acc, float *accm) {
    const float d = dx * b->d, dm = dmx * b->d;
    float fi[4], fm[4];
    _mm_storeu_ps(fi, _mm_cvtepi32_ps(q4k_pair_sums(dec, b->qs)));
    _mm_storeu_ps(fm, _mm_cvtepi32_ps(k4_mins_dot(u, b->bsums)));
    float a = *acc, m = *accm;
    a = fmaf(fi[0], d, a);
    m = fmaf(fm[0], dm, m);
    a = fmaf(fi[1], d, a);
    m = fmaf(fm[1], dm, m);
    a = fmaf(fi[2], d, a);
    m = fmaf(fm[2], dm, m);
    a = fmaf(fi[3], d, a);
    m = fmaf(fm[3], dm, m);
    *acc = a;
    *accm = m;
}

/* ---- Q6_K: one decoded block --------------------------------------------
 * q[k] = unsigned codes (+32) of values 64k..64k+63, four sub-blocks of 16,
 * one per 128-bit lane; s[k] = their scales spread the same way;
 * corr = 32 * sum_j sc[j] * bsums[j] is subtracted per activation row. */
typedef struct {
    __m512i q[4], s[4];
    __m256i sc16;
} q6k_dec;

static inline void q6k_decode(const mu_block_q6_K *b, q6k_dec *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x30);
    const __m512i sl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    o->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
#pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {
        const __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        const __m512i ha = _mm512_and_si512(_mm512_sllv_epi16(hb, sl), m3);
        const __m512i hc = _mm512_and_si512(_mm512_srlv_epi16(hb, sr), m3);
        o->q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), ha);
        o->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), hc);
        const __m512i bc = _mm512_broadcast_i32x4(h ? _mm256_extracti128_si256(o->sc16, 1)
                                                    : _mm256_castsi256_si128(o->sc16));
        o->s[2 * h] = _mm512_shuffle_epi8(bc, word_quad_ctrl(0));
        o->s[2 * h + 1] = _mm512_shuffle_epi8(bc, word_quad_ctrl(4));
    }
}

/* The ref's 8 integer lanes: lane m sums bytes 4m..4m+3 of every 32-value
 * chunk (scaled), minus 32 * (bsums . scales) of sub-blocks 2m, 2m+1. Lane L
 * of a zmm here covers bytes 4(L%8).. of chunk 2k + L/8, so the two 256-bit
 * halves add up to those lanes. */
static inline __m256i q6k_sumi(const q6k_dec *o, const mu_block_q8_K *y) {
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < 4; k++) {
        const __m512i prod = _mm512_maddubs_epi16(o->q[k], _mm512_loadu_si512(y->qs + 64 * k));
        sumi = _mm512_dpwssd_epi32(sumi, prod, o->s[k]);
    }
    const __m256i corr = _mm256_madd_epi16(o->sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
    const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
    return _mm256_sub_epi32(s8, _mm256_slli_epi32(corr, 5));
}

/* 16 F16 values -> 16 floats */
static inline __m512 f16x16(const mu_f16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* r[k] lane e = X[k][e] (16 x 16 dwords) -> o[e] lane k = X[k][e]. */
__attribute__((always_inline)) static inline void transpose16_epi32(const __m512i r[16], __m512i o[16]) {
    __m512i c[4][4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m512i a0 = _mm512_unpacklo_epi32(r[4 * g], r[4 * g + 1]), b0 = _mm512_unpackhi_epi32(r[4 * g], r[4 * g + 1]);
        const __m512i a1 = _mm512_unpacklo_epi32(r[4 * g + 2], r[4 * g + 3]),
                      b1 = _mm512_unpackhi_epi32(r[4 * g + 2], r[4 * g + 3]);
        c[g][0] = _mm512_unpacklo_epi64(a0, a1); /* 128-bit lane L: rows 4g..4g+3 at e = 4L */
        c[g][1] = _mm512_unpackhi_epi64(a0, a1); /* e = 4L + 1 */
        c[g][2] = _mm512_unpacklo_epi64(b0, b1);
        c[g][3] = _mm512_unpackhi_epi64(b0, b1);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i u0 = _mm512_shuffle_i32x4(c[0][j], c[1][j], 0x44), u1 = _mm512_shuffle_i32x4(c[0][j], c[1][j], 0xee);
        const __m512i u2 = _mm512_shuffle_i32x4(c[2][j], c[3][j], 0x44), u3 = _mm512_shuffle_i32x4(c[2][j], c[3][j], 0xee);
        o[j] = _mm512_shuffle_i32x4(u0, u2, 0x88);
        o[4 + j] = _mm512_shuffle_i32x4(u0, u2, 0xdd);
        o[8 + j] = _mm512_shuffle_i32x4(u1, u3, 0x88);
        o[12 + j] = _mm512_shuffle_i32x4(u1, u3, 0xdd);
    }
}

#endif
