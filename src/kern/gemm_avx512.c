/* gemm_avx512.c: the AVX-512 table's matrix-matrix kernels (prefill).
 * Owns: every gemm entry of the AVX-512 table, in the rounding kern_ref.c
 * defines: Q4_K (the per-64 "repack gemm" order, the last n_t % 4
 * activation rows of a matmul as vec_dot), Q6_K, Q8_0 and NVFP4 (the vec_dot
 * lanes), F16 (tinyBLAS when n % 16 == 0, else vec_dot), Q5_K as vec_dot
 * (mu_vec_dot_q5_K_ref; llama.cpp has no other Q5_K order for batches),
 * BF16 and F32 as vec_dot_batch (llamafile tinyBLAS; BF16 with n % 32 != 0
 * and F32 with n % 16 != 0 as vec_dot).
 * Does not: decide which rows take which path (forward.c does), nor own the
 * dots (kern_avx512.c) or the block decoders it shares with them
 * (simd_avx512.h).
 * Key design choice: register tiles of weight rows x activation rows, each
 * weight block loaded (quantized types: decoded) once per tile and reused
 * for every activation row, which is what makes prefill compute-bound
 * instead of decode-bound; the integer sums in any (exact) order, every
 * float step in exactly the ref's order. Q4_K runs 16 weight rows
 * "vertically" (interleaved, one row per lane); Q5_K, Q6_K, Q8_0 and NVFP4
 * keep two weight rows per zmm (row r in the low 256 bits, row r + 1 in
 * the high), so the ref's 8 integer lanes of each row sit in the two halves
 * without a fold; Q5_K's mins chain (a scalar per output in the ref) runs as a
 * separate pass with 16 activation rows per vector. Where a gemm leaves rows
 * to vec_dot, they go through the table's own vec_dot, taken at fill time. */
#include <immintrin.h>
#include <string.h>

#include "kern.h"
#include "simd_avx512.h"
#include "simd_x86.h"

#define AI __attribute__((always_inline)) static inline

/* the table's vec_dot for Q4_K, F16, BF16 and F32 (kern_avx512.c fills them
 * first): the rows a gemm leaves to vec_dot */
static mu_vec_dot_fn table_dot_q4_K, table_dot_f16, table_dot_bf16, table_dot_f32;

/* ---- Q4_K, Q6_K, Q8_0, F16: tiles of weight rows x activation rows ------
 * Contract (kern.h gemm): every Y[t][r] is bit-identical to the ref's dot for
 * a matmul of several rows: vec_dot_batch where the ref has one (Q4_K: the
 * per-64 order; F16: tinyBLAS when n % 16 == 0), else vec_dot (Q6_K, Q8_0).
 * Q4_K is the exception: a call covers a whole matmul of n_t activation
 * rows, the last n_t % 4 of which llama.cpp computes with its gemv, so those
 * round as vec_dot (see gemm_q4_K_avx512). For each tile of up to GT activation rows and each weight
 * row, every weight block is decoded once into registers and dotted with the
 * GT activation blocks; the weight slice [r0, r1) is streamed once per tile.
 * The tile width is a compile-time constant so the accumulators are
 * registers: tile_* are always inlined with TN = 1..GT. */

#define GT 8

/* vec_dot_batch order (per 64 values) for every activation row. */
AI void tile_q4_K(int nb, const mu_block_q4_K *x, const uint8_t *a, size_t as, float *y, int ys, const int TN) {
    float acc[GT], accm[GT];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = accm[t] = 0;
    uint32_t u[4];
    q4k_dec dec;
    for (int i = 0; i < nb; i++) {
        q4k_decode(&x[i], &dec, u);
        const float dx = f16_to_f32(x[i].d), dmx = f16_to_f32(x[i].dmin);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++)
            q4k_batch_step(&dec, u, (const mu_block_q8_K *)(a + (size_t)t * as) + i, dx, dmx, &acc[t], &accm[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) y[(size_t)t * ys] = acc[t] - accm[t];
}

AI void tile_q6_K(int nb, const mu_block_q6_K *x, const uint8_t *a, size_t as, float *y, int ys, const int TN) {
    __m256 acc[GT];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm256_setzero_ps();
    q6k_dec dec;
    for (int i = 0; i < nb; i++) {
        q6k_decode(&x[i], &dec);
        const float dx = f16_to_f32(x[i].d);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * dx), _mm256_cvtepi32_ps(q6k_sumi(&dec, b)), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) y[(size_t)t * ys] = hsum_ps256(acc[t]);
}

AI void tile_q8_0(int nb, const mu_block_q8_0 *x, const uint8_t *a, size_t as, float *y, int ys, const int TN) {
    __m256 acc[GT];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        const float dx = f16_to_f32(x[i].d);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)(a + (size_t)t * as) + i;
            const __m256i qy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)b->qs), qx);
            const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, qy);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16_to_f32(b->d)), _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) y[(size_t)t * ys] = hsum_ps256(acc[t]);
}

/* Q8_0, two weight rows per zmm (row r in lanes 0-7, row r + 1 in 8-15):
 * the same 8 integer lane sums and the same chain per lane as tile_q8_0,
 * with one 512-bit dpbusd and one FMA per block for both rows. AVX-512 has
 * no vpsignb: |x| by vpabsb and y negated where x < 0 by a masked subtract
 * give the sign trick's bytes (x = 0 zeroes the product either way, and
 * -128 wraps the same). The activations' d come converted from da (block i,
 * row t at da[i * GT + t]), so the scale dx * da is one float multiply as in
 * the ref. */
AI void tile_q8_0x2(int nb, const mu_block_q8_0 *x0, const mu_block_q8_0 *x1, const uint8_t *a, size_t as,
                    const float *da, float *y, int ys, const int TN) {
    __m512 acc[GT];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m512i qx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0[i].qs)),
                                              _mm256_loadu_si256((const __m256i *)x1[i].qs), 1);
        const __m512i ax = _mm512_abs_epi8(qx);
        const __mmask64 neg = _mm512_movepi8_mask(qx);
        const __m512 dx = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(f16_to_f32(x0[i].d))),
                                             _mm256_set1_ps(f16_to_f32(x1[i].d)), 1);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)(a + (size_t)t * as) + i;
            const __m512i qa = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qs));
            const __m512i qy = _mm512_mask_sub_epi8(qa, neg, _mm512_setzero_si512(), qa);
            const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, qy);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(da[i * GT + t])), _mm512_cvtepi32_ps(s), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) {
        y[(size_t)t * ys] = hsum_ps256(_mm512_castps512_ps256(acc[t]));
        y[(size_t)t * ys + 1] = hsum_ps256(_mm512_extractf32x8_ps(acc[t], 1));
    }
}

/* NVFP4: the vec_dot order (8 lanes, two FMAs per block: the first half's
 * scales, then the second's); each block's codes decoded once per tile. */
AI void tile_nvfp4(int nb, const mu_block_nvfp4 *x, const uint8_t *a, size_t as, float *y, int ys, const int TN) {
    __m256 acc[GT];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm256_setzero_ps();
    __m256i c[2];
    for (int i = 0; i < nb; i++) {
        nvfp4_codes(&x[i], c);
        const __m256i ac0 = _mm256_sign_epi8(c[0], c[0]), ac1 = _mm256_sign_epi8(c[1], c[1]);
        /* lane scales before the activation's d: [d0 x4, d1 x4], [d2 x4, d3 x4] */
        const __m128 s4 = nvfp4_scale4(&x[i]);
        const __m256 s01 = nvfp4_expand(s4, 0), s23 = nvfp4_expand(s4, 1);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)(a + (size_t)t * as) + 2 * i;
            const __m256i q0 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)b[0].qs), c[0]);
            const __m256i q1 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)b[1].qs), c[1]);
            const __m256 p0 = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ac0, q0));
            const __m256 p1 = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ac1, q1));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(s01, _mm256_set1_ps(f16_to_f32(b[0].d))), p0, acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(s23, _mm256_set1_ps(f16_to_f32(b[1].d))), p1, acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) y[(size_t)t * ys] = hsum_ps256(acc[t]);
}

/* NVFP4, two weight rows per zmm as tile_q8_0x2: the vec_dot order of
 * tile_nvfp4 (two FMAs per block) in both halves; da holds the d of the
 * activations' Q8_0 blocks (2i and 2i + 1 for block i). */
AI void tile_nvfp4x2(int nb, const mu_block_nvfp4 *x0, const mu_block_nvfp4 *x1, const uint8_t *a, size_t as,
                     const float *da, float *y, int ys, const int TN) {
    __m512 acc[GT];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm512_setzero_ps();
    __m256i c0[2], c1[2];
    for (int i = 0; i < nb; i++) {
        nvfp4_codes(&x0[i], c0);
        nvfp4_codes(&x1[i], c1);
        const __m512i q0 = _mm512_inserti64x4(_mm512_castsi256_si512(c0[0]), c1[0], 1);
        const __m512i q1 = _mm512_inserti64x4(_mm512_castsi256_si512(c0[1]), c1[1], 1);
        const __m512i a0 = _mm512_abs_epi8(q0), a1 = _mm512_abs_epi8(q1);
        const __mmask64 n0 = _mm512_movepi8_mask(q0), n1 = _mm512_movepi8_mask(q1);
        const __m128 s40 = nvfp4_scale4(&x0[i]), s41 = nvfp4_scale4(&x1[i]);
        const __m512 s01 = _mm512_insertf32x8(_mm512_castps256_ps512(nvfp4_expand(s40, 0)), nvfp4_expand(s41, 0), 1);
        const __m512 s23 = _mm512_insertf32x8(_mm512_castps256_ps512(nvfp4_expand(s40, 1)), nvfp4_expand(s41, 1), 1);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)(a + (size_t)t * as) + 2 * i;
            const __m512i b0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[0].qs));
            const __m512i b1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[1].qs));
            const __m512i y0 = _mm512_mask_sub_epi8(b0, n0, _mm512_setzero_si512(), b0);
            const __m512i y1 = _mm512_mask_sub_epi8(b1, n1, _mm512_setzero_si512(), b1);
            const __m512 p0 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), a0, y0));
            const __m512 p1 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), a1, y1));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(s01, _mm512_set1_ps(da[2 * i * GT + t])), p0, acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(s23, _mm512_set1_ps(da[(2 * i + 1) * GT + t])), p1, acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) {
        y[(size_t)t * ys] = hsum_ps256(_mm512_castps512_ps256(acc[t]));
        y[(size_t)t * ys + 1] = hsum_ps256(_mm512_extractf32x8_ps(acc[t], 1));
    }
}

/* F16: the vec_dot_batch order (tinyBLAS), n % 16 == 0 (see gemm_f16). */
AI void tile_f16_tb(int n, const mu_f16 *x, const uint8_t *a, size_t as, float *y, int ys, const int TN) {
    __m512 acc[GT];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i + 16 <= n; i += 16) {
        const __m512 wv = f16x16(x + i);
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++)
            acc[t] = _mm512_fmadd_ps(wv, f16x16((const mu_f16 *)(a + (size_t)t * as) + i), acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) y[(size_t)t * ys] = _mm512_reduce_add_ps(acc[t]);
}

/* One gemm per weight type: token tiles of GT outside, weight rows inside. */
#define GEMM(NAME, WT, LEN)                                                                                        \
    static void gemm_##NAME##_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as,     \
                                     int n_t, float *y, int ys) {                                                   \
        for (int t0 = 0; t0 < n_t; t0 += GT) {                                                                      \
            const int tn = n_t - t0 < GT ? n_t - t0 : GT;                                                           \
            const uint8_t *at = (const uint8_t *)a + (size_t)t0 * as;                                               \
            for (int r = r0; r < r1; r++) {                                                                         \
                const WT *x = (const WT *)((const uint8_t *)w + (size_t)r * ws);                                    \
                float *yr = y + (size_t)t0 * ys + r;                                                                \
                switch (tn) {                                                                                       \
                case 8: tile_##NAME(LEN, x, at, as, yr, ys, 8); break;                                              \
                case 7: tile_##NAME(LEN, x, at, as, yr, ys, 7); break;                                              \
                case 6: tile_##NAME(LEN, x, at, as, yr, ys, 6); break;                                              \
                case 5: tile_##NAME(LEN, x, at, as, yr, ys, 5); break;                                              \
                case 4: tile_##NAME(LEN, x, at, as, yr, ys, 4); break;                                              \
                case 3: tile_##NAME(LEN, x, at, as, yr, ys, 3); break;                                              \
                case 2: tile_##NAME(LEN, x, at, as, yr, ys, 2); break;                                              \
                default: tile_##NAME(LEN, x, at, as, yr, ys, 1); break;                                             \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }

#define tile_q4_K_b tile_q4_K
GEMM(q4_K_b, mu_block_q4_K, n / MU_QK_K)

/* Eight activation rows at once in the per-64 order, for speed: the integer
 * pair sums of the 8 rows are reduced together (a transposing add tree) into
 * one vector per pair index j whose lanes are the rows, so each lane runs
 * exactly the ref's sequential chain acc = fma(isum_j, d, acc), j = 0..3. */
#define Q4K_FAST_MAX_NB 128
static void gemm_q4_K_8rows(int n, const void *w, size_t ws, int r0, int r1, const uint8_t *a, size_t as, float *y,
                            int ys) {
    const int nb = n / MU_QK_K;
    float yd[Q4K_FAST_MAX_NB][8];
    int32_t pm[Q4K_FAST_MAX_NB][4][8]; /* per block, pair j, row t: (P[2j], P[2j+1]) as two int16 */
    for (int t = 0; t < 8; t++) {
        const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as);
        for (int i = 0; i < nb; i++) {
            yd[i][t] = b[i].d;
            const __m128i pr = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)b[i].bsums),
                                              _mm_loadu_si128((const __m128i *)(b[i].bsums + 8)));
            int32_t l[4];
            _mm_storeu_si128((__m128i *)l, pr);
            for (int j = 0; j < 4; j++) pm[i][j][t] = l[j];
        }
    }
    const __m512i idx01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i idx23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    for (int r = r0; r < r1; r++) {
        const mu_block_q4_K *x = (const mu_block_q4_K *)((const uint8_t *)w + (size_t)r * ws);
        __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
        uint32_t u[4];
        q4k_dec dec;
        for (int i = 0; i < nb; i++) {
            q4k_decode(&x[i], &dec, u);
            __m512i wt[8];
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                const int8_t *q8 = ((const mu_block_q8_K *)(a + (size_t)t * as))[i].qs;
                __m512i z[4];
#pragma GCC unroll 8
                for (int p = 0; p < 4; p++)
                    z[p] = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                               _mm512_maddubs_epi16(dec.q[p], _mm512_loadu_si512(q8 + 64 * p)), dec.s[p]);
                const __m512i x01 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
                const __m512i x23 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
                wt[t] = _mm512_add_epi32(_mm512_unpacklo_epi64(x01, x23), _mm512_unpackhi_epi64(x01, x23));
            }
            __m512i h[4];
#pragma GCC unroll 8
            for (int k = 0; k < 4; k++)
                h[k] = _mm512_add_epi32(_mm512_shuffle_i32x4(wt[2 * k], wt[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_i32x4(wt[2 * k], wt[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
            const __m512i r03 = _mm512_add_epi32(_mm512_shuffle_i32x4(h[0], h[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                                 _mm512_shuffle_i32x4(h[0], h[1], _MM_SHUFFLE(3, 1, 3, 1)));
            const __m512i r47 = _mm512_add_epi32(_mm512_shuffle_i32x4(h[2], h[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                                 _mm512_shuffle_i32x4(h[2], h[3], _MM_SHUFFLE(3, 1, 3, 1)));
            const __m512 j01 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(r03, idx01, r47));
            const __m512 j23 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(r03, idx23, r47));
            const __m256 ydv = _mm256_loadu_ps(yd[i]);
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(x[i].d)), ydv);
            const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(x[i].dmin)), ydv);
            acc = _mm256_fmadd_ps(_mm512_castps512_ps256(j01), d, acc);
            acc = _mm256_fmadd_ps(_mm512_extractf32x8_ps(j01, 1), d, acc);
            acc = _mm256_fmadd_ps(_mm512_castps512_ps256(j23), d, acc);
            acc = _mm256_fmadd_ps(_mm512_extractf32x8_ps(j23, 1), d, acc);
            const uint8_t *mn = (const uint8_t *)u + 8;
#pragma GCC unroll 8
            for (int j = 0; j < 4; j++) {
                const __m256i mm = _mm256_set1_epi32((int)((uint32_t)mn[2 * j] | (uint32_t)mn[2 * j + 1] << 16));
                const __m256i im = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)pm[i][j]), mm);
                accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), dm, accm);
            }
        }
        float out[8];
        _mm256_storeu_ps(out, _mm256_sub_ps(acc, accm));
        for (int t = 0; t < 8; t++) y[(size_t)t * ys + r] = out[t];
    }
}

/* 16 weight rows at once, "vertically": the rows' codes are interleaved in
 * 4-byte groups (lane r of a zmm = 4 codes of row r), so vpdpbusd with the
 * activation's 4 bytes broadcast accumulates 16 row dots in 16 lanes and no
 * horizontal sums are needed. Each lane then runs the ref's per-64 chain:
 * isum_j = sc[2j]*s[2j] + sc[2j+1]*s[2j+1], acc = fma(isum_j, d, acc), same
 * for the mins. The interleave costs a gather pass per 16 rows and block,
 * amortized over all activation rows of the call (a thread-local scratch of
 * ~5 KiB per block: 4 KiB codes + scales). Activation rows go in register
 * tiles of Q4K_VT: each interleaved weight vector is loaded once per tile,
 * and the mins chain runs as its own pass (q4k_vmins) so that only acc and
 * the two sub-block sums per activation row live in registers. */
typedef struct {
    __m512i w[8][8];  /* [sub-block][step of 4 codes]: 16 rows */
    __m512i sc[8];    /* sub-block scales, int32 per row */
    __m512i mn[4];    /* (mn[2j], mn[2j+1]) as int16 pairs per row */
    __m512 dx, dmx;   /* per row d and dmin */
} q4k_vblock;

/* Block i of rows r..r+15 into the vertical layout: the packed codes by two
 * 16 x 16 dword transposes (dword e = 8p + st of a row holds step st of
 * sub-blocks 2p (low nibbles) and 2p+1 (high)), the header (d, dmin, the 12
 * scale bytes) by gathers, and k4_scales' unpacking done on 16 rows at once. */
static void q4k_vbuild(const uint8_t *w, size_t ws, int r, int i, q4k_vblock *o) {
    const uint8_t *b0 = w + (size_t)r * ws + (size_t)i * sizeof(mu_block_q4_K);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i rr[16], t[16];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++)
            rr[k] = _mm512_loadu_si512(b0 + (size_t)k * ws + offsetof(mu_block_q4_K, qs) + 64 * h);
        transpose16_epi32(rr, t);
#pragma GCC unroll 16
        for (int e = 0; e < 16; e++) {
            const int p = 2 * h + e / 8, st = e % 8;
            o->w[2 * p][st] = _mm512_and_si512(t[e], m4);
            o->w[2 * p + 1][st] = _mm512_and_si512(_mm512_srli_epi32(t[e], 4), m4);
        }
    }
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)ws));
    const __m512i hd = _mm512_i32gather_epi32(idx, b0, 1);
    const __m512i u0 = _mm512_i32gather_epi32(idx, b0 + 4, 1);
    const __m512i u1 = _mm512_i32gather_epi32(idx, b0 + 8, 1);
    const __m512i u2 = _mm512_i32gather_epi32(idx, b0 + 12, 1);
    const __m512i c3f = _mm512_set1_epi8(0x3f), c03 = _mm512_set1_epi8(0x03);
    /* k4_scales on 16 lanes: sc = bytes of v0, v1; mn = bytes of v2, v3 */
    const __m512i v3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), c03), 4));
    const __m512i v2 = _mm512_and_si512(u1, c3f);
    const __m512i v1 = _mm512_or_si512(_mm512_and_si512(u2, m4),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), c03), 4));
    const __m512i v0 = _mm512_and_si512(u0, c3f);
    const __m512i ff = _mm512_set1_epi32(0xff);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        o->sc[j] = _mm512_and_si512(_mm512_srli_epi32(v0, 8 * j), ff);
        o->sc[4 + j] = _mm512_and_si512(_mm512_srli_epi32(v1, 8 * j), ff);
    }
    const __m512i lo = _mm512_set1_epi32(0x000000ff), hi = _mm512_set1_epi32(0x00ff0000);
    o->mn[0] = _mm512_or_si512(_mm512_and_si512(v2, lo), _mm512_and_si512(_mm512_slli_epi32(v2, 8), hi));
    o->mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v2, 16), lo), _mm512_and_si512(_mm512_srli_epi32(v2, 8), hi));
    o->mn[2] = _mm512_or_si512(_mm512_and_si512(v3, lo), _mm512_and_si512(_mm512_slli_epi32(v3, 8), hi));
    o->mn[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v3, 16), lo), _mm512_and_si512(_mm512_srli_epi32(v3, 8), hi));
    o->dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd));
    o->dmx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd, 16)));
}

#define Q4K_V_MAX_NB 96

/* acc + u8 x s8 dot of w with the 4 bytes at p broadcast, with the
 * broadcast folded into the instruction's memory operand ({1to16}), which
 * GCC does not do by itself. */
AI __m512i dpbusd_bcast(__m512i acc, __m512i w, const int32_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*p));
    return acc;
}

/* The mins chain of TN activation rows against the 16 rows of vb:
 * accm = fma(imin_j, dmin_x * d_a, accm) for every block and pair j, as the
 * ref does; stored to m[t] for the main pass to subtract. */
AI void q4k_vmins(int nb, const q4k_vblock *vb, const uint8_t *a, size_t as, __m512 *m, const int TN) {
    __m512 accm[8];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) accm[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const q4k_vblock *v = &vb[i];
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
            const __m512 dm = _mm512_mul_ps(v->dmx, _mm512_set1_ps(b->d));
            int32_t pr[4];
            _mm_storeu_si128((__m128i *)pr, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)b->bsums),
                                                           _mm_loadu_si128((const __m128i *)(b->bsums + 8))));
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(v->mn[j], _mm512_set1_epi32(pr[j]))), dm,
                                          accm[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) m[t] = accm[t];
}

/* The main chain of TN activation rows: for each block and pair j, the 16
 * rows' sub-block dots by vpdpbusd (the weights loaded once for all TN
 * rows), scaled, and acc = fma(isum_j, d_x * d_a, acc); y = acc - accm. */
AI void q4k_vtile(int nb, const q4k_vblock *vb, const uint8_t *a, size_t as, float *y, int ys, const int TN) {
    __m512 m[8];
    q4k_vmins(nb, vb, a, as, m, TN);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const q4k_vblock *v = &vb[i];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512i s0[8], s1[8];
#pragma GCC unroll 8
            for (int t = 0; t < TN; t++) s0[t] = s1[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int st = 0; st < 8; st++) {
                const __m512i w0 = v->w[2 * j][st], w1 = v->w[2 * j + 1][st];
#pragma GCC unroll 8
                for (int t = 0; t < TN; t++) {
                    const int32_t *q8 = (const int32_t *)(const void *)((const mu_block_q8_K *)(a + (size_t)t * as) + i)->qs;
                    s0[t] = dpbusd_bcast(s0[t], w0, &q8[16 * j + st]);
                    s1[t] = dpbusd_bcast(s1[t], w1, &q8[16 * j + 8 + st]);
                }
            }
#pragma GCC unroll 8
            for (int t = 0; t < TN; t++) {
                const float yd = ((const mu_block_q8_K *)(a + (size_t)t * as) + i)->d;
                const __m512i isum =
                    _mm512_add_epi32(_mm512_mullo_epi32(s0[t], v->sc[2 * j]), _mm512_mullo_epi32(s1[t], v->sc[2 * j + 1]));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(v->dx, _mm512_set1_ps(yd)), acc[t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) _mm512_storeu_ps(y + (size_t)t * ys, _mm512_sub_ps(acc[t], m[t]));
}

#ifndef Q4K_VT
#define Q4K_VT 6
#endif
/* Rows r..r+15 against n_t activation rows; meanwhile the next group's
 * pf_rows weight rows are prefetched into L2, spread over the tiles, so
 * that its interleave does not wait on memory. */
static void gemm_q4_K_16rows(int n, const uint8_t *w, size_t ws, int r, const uint8_t *a, size_t as, int n_t, float *y,
                             int ys, int pf_rows) {
    const int nb = n / MU_QK_K;
    static _Thread_local q4k_vblock vb[Q4K_V_MAX_NB];
    for (int i = 0; i < nb; i++) q4k_vbuild(w, ws, r, i, &vb[i]);
    const uint8_t *pf = w + (size_t)(r + 16) * ws;
    const size_t pf_lines = ((size_t)pf_rows * ws + 63) / 64;
    const int tiles = (n_t + Q4K_VT - 1) / Q4K_VT;
    const size_t pf_step = (pf_lines + (size_t)tiles - 1) / (size_t)tiles;
    size_t pf_at = 0;
    int t = 0;
    for (; t + Q4K_VT <= n_t; t += Q4K_VT) {
        for (size_t e = pf_at + pf_step; pf_at < e && pf_at < pf_lines; pf_at++)
            _mm_prefetch((const char *)pf + 64 * pf_at, _MM_HINT_T1);
        q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, Q4K_VT);
    }
    for (; pf_at < pf_lines; pf_at++) _mm_prefetch((const char *)pf + 64 * pf_at, _MM_HINT_T1);
    switch (n_t - t) {
    case 7: q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, 7); break;
    case 6: q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, 6); break;
    case 5: q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, 5); break;
    case 4: q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, 4); break;
    case 3: q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, 3); break;
    case 2: q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, 2); break;
    case 1: q4k_vtile(nb, vb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, 1); break;
    default: break;
    }
}

/* A Q4_K gemm call covers a whole matmul of n_t activation rows, and rounds
 * as llama.cpp's repack path does for it: rows below n_t & ~3 in the
 * per-64 order (its gemm), the last n_t % 4 rows as vec_dot (its gemv). */
static void gemm_q4_K_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                             float *y, int ys) {
    const int nb4 = n_t & ~3;
    if (nb4 >= 4 && n / MU_QK_K <= Q4K_V_MAX_NB) { /* vertical path for whole groups of 16 rows (its interleave pays off from 4 activation rows) */
        int r = r0;
        for (; r + 16 <= r1; r += 16) {
            const int next = r1 - (r + 16);
            gemm_q4_K_16rows(n, w, ws, r, a, as, nb4, y, ys, next < 16 ? next : 16);
        }
        if (r < r1) gemm_q4_K_b_avx512(n, w, ws, r, r1, a, as, nb4, y, ys);
        for (int t = nb4; t < n_t; t++)
            for (int rr = r0; rr < r1; rr++)
                y[(size_t)t * ys + rr] =
                    table_dot_q4_K(n, (const uint8_t *)w + (size_t)rr * ws, (const uint8_t *)a + (size_t)t * as);
        return;
    }
    int t0 = 0;
    if (n / MU_QK_K <= Q4K_FAST_MAX_NB)
        for (; t0 + 8 <= nb4; t0 += 8)
            gemm_q4_K_8rows(n, w, ws, r0, r1, (const uint8_t *)a + (size_t)t0 * as, as, y + (size_t)t0 * ys, ys);
    if (nb4 > t0)
        gemm_q4_K_b_avx512(n, w, ws, r0, r1, (const uint8_t *)a + (size_t)t0 * as, as, nb4 - t0, y + (size_t)t0 * ys, ys);
    for (int t = nb4; t < n_t; t++)
        for (int r = r0; r < r1; r++)
            y[(size_t)t * ys + r] =
                table_dot_q4_K(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}
#define tile_q6_K_b tile_q6_K
GEMM(q6_K_b, mu_block_q6_K, n / MU_QK_K)

/* Q6_K, two weight rows per zmm: the low 256 bits hold chunk c (32 values)
 * of row r, the high 256 bits chunk c of row r + 1, so one broadcast of an
 * activation chunk serves both, and the ref's 8 lanes of each row sit in
 * the halves without a fold. Rows go in fours (two zmm pairs) against
 * register tiles of Q6K_VT activation rows; a pair's blocks are decoded
 * once per call into q6k_pblock scratch, which holds several groups of 4
 * rows while the token blocks go by. The 4-byte dots of two
 * chunks (vpdpbusd, |dot| <= 4 * 63 * 128 < 2^15) are packed as the two
 * int16 halves of each lane and scaled by one vpdpwssd: three multiplies
 * per 128 products instead of four (vpmaddubsw + vpdpwssd per chunk). */
typedef struct {
    __m512i q[8];  /* chunk c: codes (+32, unsigned) */
    __m512i s2[4]; /* per dword lane: (scale of chunk 2p, scale of chunk 2p + 1) as words */
    __m512i corr;       /* -32 * scales as words, for bsums */
    __m512 dx;          /* d of row r (low 8 lanes) and row r + 1 (high) */
} q6k_pblock;

static void q6k_pbuild(const mu_block_q6_K *x0, const mu_block_q6_K *x1, q6k_pblock *o) {
    q6k_dec d0, d1;
    q6k_decode(x0, &d0);
    q6k_decode(x1, &d1);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        o->q[2 * k] = _mm512_shuffle_i64x2(d0.q[k], d1.q[k], 0x44);
        o->q[2 * k + 1] = _mm512_shuffle_i64x2(d0.q[k], d1.q[k], 0xee);
        o->s2[k] = _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_shuffle_i64x2(d0.s[k], d1.s[k], 0x44),
                                           _mm512_shuffle_i64x2(d0.s[k], d1.s[k], 0xee));
    }
    o->corr = _mm512_slli_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(d0.sc16), d1.sc16, 1), 5);
    o->corr = _mm512_sub_epi16(_mm512_setzero_si512(), o->corr);
    o->dx = _mm512_insertf32x8(_mm512_set1_ps(f16_to_f32(x0->d)), _mm256_set1_ps(f16_to_f32(x1->d)), 1);
}

/* Rows r..r+3 (pairs pa, pb) against TN activation rows; the ref's lane m
 * of row r is lane m of acc a, row r + 1 lane 8 + m, summed as hsum_float_8. */
AI void q6k_ptile(int nb, const q6k_pblock *pa, const q6k_pblock *pb, const uint8_t *a, size_t as, float *y, int ys,
                  const int TN) {
    __m512 acca[6], accb[6];
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acca[t] = accb[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const q6k_pblock *A = &pa[i], *B = &pb[i];
        __m512i ia[6], ib[6];
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
            const __m512i bs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->bsums));
            ia[t] = _mm512_madd_epi16(bs, A->corr);
            ib[t] = _mm512_madd_epi16(bs, B->corr);
        }
        /* chunks 2p, 2p + 1: the 4-byte dots (|.| < 2^15) by vpdpbusd, packed
         * as the two words of each lane, scaled and summed by vpdpwssd */
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const __m512i qa0 = A->q[2 * p], qa1 = A->q[2 * p + 1], qb0 = B->q[2 * p], qb1 = B->q[2 * p + 1];
            const __m512i z = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int t = 0; t < TN; t++) {
                const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
                const __m512i av0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 64 * p)));
                const __m512i av1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 64 * p + 32)));
                const __m512i da = _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_dpbusd_epi32(z, qa0, av0), _mm512_slli_epi32(_mm512_dpbusd_epi32(z, qa1, av1), 16));
                const __m512i db = _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_dpbusd_epi32(z, qb0, av0), _mm512_slli_epi32(_mm512_dpbusd_epi32(z, qb1, av1), 16));
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
        yt[0] = hsum_ps256(_mm512_castps512_ps256(acca[t]));
        yt[1] = hsum_ps256(_mm512_extractf32x8_ps(acca[t], 1));
        yt[2] = hsum_ps256(_mm512_castps512_ps256(accb[t]));
        yt[3] = hsum_ps256(_mm512_extractf32x8_ps(accb[t], 1));
    }
}

#ifndef Q6K_VT
#define Q6K_VT 4
#endif
#define Q6K_P_MAX_NB 96
/* pair blocks (896 bytes) kept by a thread: 384 KiB, beside a token
 * block's 192 KiB of activations in L2; at least one group of 4 rows of
 * Q6K_P_MAX_NB blocks */
#define Q6K_PB_CACHE 438
_Static_assert(Q6K_PB_CACHE >= 2 * Q6K_P_MAX_NB, "Q6K_PB_CACHE holds a group of 4 rows");
static void gemm_q6_K_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                             float *y, int ys) {
    const int nb = n / MU_QK_K;
    const int r4 = r0 + (r1 - r0) / 4 * 4;
    if (nb > Q6K_P_MAX_NB || n_t < 2) {
        gemm_q6_K_b_avx512(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    /* the decoded pairs of up to Q6K_PB_CACHE / (2 nb) groups of 4 rows,
     * built once and kept while the token blocks go by (built per token
     * block, they cost a fifth of the kernel's time at 512 tokens) */
    static _Thread_local q6k_pblock pbc[Q6K_PB_CACHE];
    const int g_max = Q6K_PB_CACHE / (2 * nb);
    /* token blocks whose activations stay in L2 while the rows sweep them */
    int tb = (int)((192u << 10) / ((unsigned)nb * sizeof(mu_block_q8_K)));
    tb = tb < 4 * Q6K_VT ? 4 * Q6K_VT : tb / Q6K_VT * Q6K_VT;
    for (int rg = r0; rg < r4; rg += 4 * g_max) {
        const int ng = (r4 - rg) / 4 < g_max ? (r4 - rg) / 4 : g_max;
        for (int g = 0; g < ng; g++) {
            const uint8_t *wr = (const uint8_t *)w + (size_t)(rg + 4 * g) * ws;
            q6k_pblock *pa = pbc + (size_t)2 * g * nb, *pb = pa + nb;
            for (int i = 0; i < nb; i++) {
                q6k_pbuild((const mu_block_q6_K *)wr + i, (const mu_block_q6_K *)(wr + ws) + i, &pa[i]);
                q6k_pbuild((const mu_block_q6_K *)(wr + 2 * ws) + i, (const mu_block_q6_K *)(wr + 3 * ws) + i, &pb[i]);
            }
        }
        for (int t0 = 0; t0 < n_t; t0 += tb) {
            const int t1 = t0 + tb < n_t ? t0 + tb : n_t;
            for (int g = 0; g < ng; g++) {
                const int r = rg + 4 * g;
                const q6k_pblock *pa = pbc + (size_t)2 * g * nb, *pb = pa + nb;
                int t = t0;
                for (; t + Q6K_VT <= t1; t += Q6K_VT)
                    q6k_ptile(nb, pa, pb, (const uint8_t *)a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, Q6K_VT);
                const uint8_t *at = (const uint8_t *)a + (size_t)t * as;
                float *yt = y + (size_t)t * ys + r;
                switch (t1 - t) {
                case 5: q6k_ptile(nb, pa, pb, at, as, yt, ys, 5); break;
                case 4: q6k_ptile(nb, pa, pb, at, as, yt, ys, 4); break;
                case 3: q6k_ptile(nb, pa, pb, at, as, yt, ys, 3); break;
                case 2: q6k_ptile(nb, pa, pb, at, as, yt, ys, 2); break;
                case 1: q6k_ptile(nb, pa, pb, at, as, yt, ys, 1); break;
                default: break;
                }
            }
        }
    }
    if (r4 < r1) gemm_q6_K_b_avx512(n, w, ws, r4, r1, a, as, n_t, y, ys);
}
#define tile_q8_0_1 tile_q8_0
GEMM(q8_0_1, mu_block_q8_0, n / MU_QK8_0)
#define tile_nvfp4_1 tile_nvfp4
GEMM(nvfp4_1, mu_block_nvfp4, n / MU_QK_NVFP4)

/* Q8_0 and NVFP4: tiles of GT activation rows, their d converted once per
 * tile into da, the weight rows two at a time (tile_*x2); an odd last row,
 * and rows of more than Q8_MAX_NB activation blocks, one at a time (the
 * GEMM above). */
#define Q8_MAX_NB 1024
#define GEMM_X2(NAME, WT, QK)                                                                                      \
    static void gemm_##NAME##_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as,     \
                                     int n_t, float *y, int ys) {                                                   \
        const int nb = n / (QK), na = n / MU_QK8_0;                                                                 \
        if (na > Q8_MAX_NB || r1 - r0 < 2) {                                                                        \
            gemm_##NAME##_1_avx512(n, w, ws, r0, r1, a, as, n_t, y, ys);                                            \
            return;                                                                                                 \
        }                                                                                                           \
        static _Thread_local float da[Q8_MAX_NB * GT];                                                              \
        const int r2 = r0 + (r1 - r0) / 2 * 2;                                                                      \
        for (int t0 = 0; t0 < n_t; t0 += GT) {                                                                      \
            const int tn = n_t - t0 < GT ? n_t - t0 : GT;                                                           \
            const uint8_t *at = (const uint8_t *)a + (size_t)t0 * as;                                               \
            for (int t = 0; t < tn; t++)                                                                            \
                for (int i = 0; i < na; i++)                                                                        \
                    da[i * GT + t] = f16_to_f32(((const mu_block_q8_0 *)(at + (size_t)t * as))[i].d);               \
            for (int r = r0; r < r2; r += 2) {                                                                      \
                const WT *x0 = (const WT *)((const uint8_t *)w + (size_t)r * ws);                                   \
                const WT *x1 = (const WT *)((const uint8_t *)w + (size_t)(r + 1) * ws);                             \
                float *yr = y + (size_t)t0 * ys + r;                                                                \
                switch (tn) {                                                                                       \
                case 8: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 8); break;                                  \
                case 7: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 7); break;                                  \
                case 6: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 6); break;                                  \
                case 5: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 5); break;                                  \
                case 4: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 4); break;                                  \
                case 3: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 3); break;                                  \
                case 2: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 2); break;                                  \
                default: tile_##NAME##x2(nb, x0, x1, at, as, da, yr, ys, 1); break;                                 \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
        if (r2 < r1) gemm_##NAME##_1_avx512(n, w, ws, r2, r1, a, as, n_t, y, ys);                                   \
    }
GEMM_X2(q8_0, mu_block_q8_0, MU_QK8_0)
GEMM_X2(nvfp4, mu_block_nvfp4, MU_QK_NVFP4)
GEMM(f16_tb, mu_f16, n)

/* tinyBLAS handles only n % 16 == 0; otherwise llama.cpp (and the ref) use
 * vec_dot for every row. */
static void gemm_f16_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                            float *y, int ys) {
    if (n % 16 == 0) {
        gemm_f16_tb_avx512(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    for (int t = 0; t < n_t; t++)
        for (int r = r0; r < r1; r++)
            y[(size_t)t * ys + r] =
                table_dot_f16(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}

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
    table_dot_q4_K = k->vec_dot[MU_T_Q4_K];
    table_dot_f16 = k->vec_dot[MU_T_F16];
    table_dot_bf16 = k->vec_dot[MU_T_BF16];
    table_dot_f32 = k->vec_dot[MU_T_F32];
    k->gemm[MU_T_Q4_K] = gemm_q4_K_avx512;
    k->gemm[MU_T_Q6_K] = gemm_q6_K_avx512;
    k->gemm[MU_T_Q8_0] = gemm_q8_0_avx512;
    k->gemm[MU_T_NVFP4] = gemm_nvfp4_avx512;
    k->gemm[MU_T_F16] = gemm_f16_avx512;
    k->gemm[MU_T_Q5_K] = gemm_q5_K_avx512;
    k->gemm[MU_T_BF16] = gemm_bf16_avx512;
    k->gemm[MU_T_F32] = gemm_f32_avx512;
}
