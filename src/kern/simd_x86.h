/* simd_x86.h: small helpers shared by the x86 kernel files (kern_avx2.c,
 * kern_avx512.c, gemm_avx2.c, gemm_avx512.c). Include only from files built
 * with at least -mavx2 -mfma -mf16c.
 * Owns: the horizontal sums in llama.cpp's order, the F16 scalar conversion,
 * the Q4_K/Q5_K scale unpacking, the vec_dotn entry points' dispatch. */
#ifndef MU_KERN_SIMD_X86_H
#define MU_KERN_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kern.h"

static inline float f16_to_f32(mu_f16 h) { return _cvtsh_ss(h); }

/* (a0 + a2) + (a1 + a3) */
static inline float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* hsum8 of kern.h (llama.cpp's hsum_float_8): (a0+a4 + a2+a6) + (a1+a5 + a3+a7) */
static inline float hsum_ps256(__m256 v) {
    return hsum_ps128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

/* hsum16 of kern.h for a 16-lane accumulator held as lanes 0-7 (lo) and
 * 8-15 (hi) */
static inline float hsum16_ps(__m256 lo, __m256 hi) { return hsum_ps256(_mm256_add_ps(lo, hi)); }

/* The 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K/Q5_K
 * block, unpacked with 32-bit masks (the values of kern_ref.c's
 * scale_min_k4). */
static inline void k4_scales(const uint8_t *scales, uint32_t u[4]) {
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mins_lo = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3fu;
}

/* The 64 codes of an NVFP4 block (quant.h) in natural order as signed
 * bytes: c[0] the values dotted with the first Q8_0 activation block
 * (sub-blocks 0, 1), c[1] with the second (2, 3). */
static inline void nvfp4_codes(const mu_block_nvfp4 *b, __m256i c[2]) {
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)mu_fp4_codes));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i q = _mm256_loadu_si256((const __m256i *)b->qs);
    const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    const __m256i ul = _mm256_unpacklo_epi64(lo, hi), uh = _mm256_unpackhi_epi64(lo, hi);
    c[0] = _mm256_shuffle_epi8(tbl, _mm256_permute2x128_si256(ul, uh, 0x20));
    c[1] = _mm256_shuffle_epi8(tbl, _mm256_permute2x128_si256(ul, uh, 0x31));
}

/* The 4 sub-block scales of an NVFP4 block (kern.h mu_nvfp4_scale, without
 * branches): exponent 0 gives man * 2^-10, else the bits (e + 119) << 23 |
 * man << 20; bit 7 ignored, the byte 0x7f gives 0. */
static inline __m128 nvfp4_scale4(const mu_block_nvfp4 *b) {
    uint32_t u;
    memcpy(&u, b->d, 4);
    const __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)u));
    const __m128i x = _mm_and_si128(v, _mm_set1_epi32(0x7f));
    const __m128 nrm = _mm_castsi128_ps(_mm_add_epi32(_mm_slli_epi32(x, 20), _mm_set1_epi32(119 << 23)));
    const __m128 sub = _mm_mul_ps(_mm_cvtepi32_ps(_mm_and_si128(v, _mm_set1_epi32(7))), _mm_set1_ps(0x1p-10f));
    const __m128i is_sub = _mm_cmpeq_epi32(_mm_and_si128(v, _mm_set1_epi32(0x78)), _mm_setzero_si128());
    const __m128 r = _mm_blendv_ps(nrm, sub, _mm_castsi128_ps(is_sub));
    return _mm_andnot_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(v, _mm_set1_epi32(0x7f))), r);
}

/* Lanes 0-3 take element 2h of s4, lanes 4-7 element 2h + 1: the ref's
 * scale of each of the 8 lanes in half h of a block. */
static inline __m256 nvfp4_expand(__m128 s4, int h) {
    const __m256i idx = h ? _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2) : _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(s4), idx);
}

/* The lane scales of both halves of a block against activation blocks with
 * scales d0, d1 (F16): scale(d[k]) * f16(d_{k/2}), one float multiply each,
 * as the ref. */
static inline void nvfp4_lane_scales(const mu_block_nvfp4 *b, mu_f16 d0, mu_f16 d1, __m256 s[2]) {
    const __m128 dy = _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)(d1 * 0x10001u), (int)(d0 * 0x10001u)));
    const __m128 sd = _mm_mul_ps(nvfp4_scale4(b), dy);
    s[0] = nvfp4_expand(sd, 0);
    s[1] = nvfp4_expand(sd, 1);
}

/* A vec_dotn entry point (kern.h) over an always-inline body
 * BODY(n_a, n, w, ws, n_w, a, as, out, os) whose activation count is a
 * constant, so its per-row accumulators stay in registers. */
#define MU_DOTN_ENTRY(name, BODY)                                                                                     \
    static void name(int n, const void *w, size_t ws, int n_w, const void *a, size_t as, int n_a, float *out,       \
                     size_t os) {                                                                                   \
        const uint8_t *w8 = w, *a8 = a;                                                                             \
        switch (n_a) {                                                                                              \
        case 1: BODY(1, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 2: BODY(2, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 3: BODY(3, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 4: BODY(4, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 5: BODY(5, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 6: BODY(6, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 7: BODY(7, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 8: BODY(8, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 9: BODY(9, n, w8, ws, n_w, a8, as, out, os); break;                                                     \
        case 10: BODY(10, n, w8, ws, n_w, a8, as, out, os); break;                                                   \
        case 11: BODY(11, n, w8, ws, n_w, a8, as, out, os); break;                                                   \
        case 12: BODY(12, n, w8, ws, n_w, a8, as, out, os); break;                                                   \
        case 13: BODY(13, n, w8, ws, n_w, a8, as, out, os); break;                                                   \
        case 14: BODY(14, n, w8, ws, n_w, a8, as, out, os); break;                                                   \
        case 15: BODY(15, n, w8, ws, n_w, a8, as, out, os); break;                                                   \
        default: BODY(16, n, w8, ws, n_w, a8, as, out, os); break;                                                   \
        }                                                                                                           \
    }
_Static_assert(MU_DOTN_MAX == 16, "MU_DOTN_ENTRY dispatches 1..16 activation rows");

/* Activation rows of a vec_dotn body get converted scales for up to this
 * many blocks (longer rows convert them per block). */
#define MU_DOTN_NB 512

#endif
