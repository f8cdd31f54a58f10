/* kern_avx2.c: the AVX2 + FMA + F16C kernel table.
 * Owns: 256-bit versions of the dot products (every weight type; BF16's
 * batch-path dot too; several activation rows at once, vec_dotn, for Q8_0,
 * Q4_K, Q5_K and Q6_K), the activation quantizers and the dequantizers of
 * F16, BF16, Q8_0, Q4_K, Q6_K and NVFP4.
 * Does not own: the numerics, which kern_ref.c defines (llama.cpp's x86
 * summation orders); quantizers, dequantizers and the dots here are
 * bit-identical to it, the BF16 ones by emulating VDPBF16PS (which AVX2
 * does not have) with FMA, DAZ and FTZ as the ref does. Nor the tiled gemm
 * and the other batch-path dots (gemm_avx2.c) or the F16 attention pieces
 * (attn_avx2.c).
 * Key design choice: quantized dots multiply unsigned weight codes with signed
 * activation codes (maddubs), apply the per-sub-block scale with madd into
 * int32, and only convert to float once per 256-value block. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kern.h"
#include "simd_x86.h"

/* ---- F32 / F16 / BF16 dots ---------------------------------------------- */

/* ref (ggml_vec_dot_f32, AVX-512 layout): 4 accumulators of 16 lanes (two
 * ymm each) over steps of 64, combined 0+2, 1+3, then the two; hsum16 in
 * float. Rows with a tail (n % 64) take the ref's own code. */
static float vec_dot_f32_avx2(int n, const void *w, const void *a) {
    if (n % 64) return mu_vec_dot_f32_ref(n, w, a);
    const float *x = w, *y = a;
    __m256 s[8];
    for (int j = 0; j < 8; j++) s[j] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 64)
        for (int j = 0; j < 8; j++) s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), s[j]);
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(s[0], s[4]), _mm256_add_ps(s[2], s[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(s[1], s[5]), _mm256_add_ps(s[3], s[7]));
    return hsum_ps256(_mm256_add_ps(lo, hi));
}

static inline __m256 f16x8(const mu_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* The ref's ggml_vec_dot_f16 order (4 accumulators of 16 lanes over steps of
 * 64, combined 0+2, 1+3, then the two; hsum16; tail in double), each 16-lane
 * accumulator as two ymm. hsum16's first step adds lane i and i+8: lo + hi. */
static float vec_dot_f16_avx2(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    __m256 s[8];
    for (int j = 0; j < 8; j++) s[j] = _mm256_setzero_ps();
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 8; j++) s[j] = _mm256_fmadd_ps(f16x8(x + i + 8 * j), f16x8(y + i + 8 * j), s[j]);
    /* accumulator k = (s[2k], s[2k+1]) */
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(s[0], s[4]), _mm256_add_ps(s[2], s[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(s[1], s[5]), _mm256_add_ps(s[3], s[7]));
    double r = hsum_ps256(_mm256_add_ps(lo, hi));
    for (int i = np; i < n; i++) r += (double)(f16_to_f32(x[i]) * f16_to_f32(y[i]));
    return (float)r;
}

static inline __m256 bf16x8_to_ps(const mu_bf16 *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* VDPBF16PS as kern_ref.c's dpbf16_pair defines it, on 8 lanes: v holds 8
 * bf16 pairs of x, u of y (lane l: element 2l in the low half). Inputs with
 * a zero exponent read as +0 (DAZ), results with one are flushed to a zero
 * of their sign (FTZ); each FMA rounds once. */
static inline __m256 bf16_even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
static inline __m256 bf16_odd(__m256i v) {
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}
static inline __m256 f32_daz(__m256 f) {
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(f), _mm256_set1_epi32(0x7f800000));
    return _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256())), f);
}
static inline __m256 f32_ftz(__m256 f) {
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(f), _mm256_set1_epi32(0x7f800000));
    const __m256i m = _mm256_and_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()), _mm256_set1_epi32(0x7fffffff));
    return _mm256_andnot_ps(_mm256_castsi256_ps(m), f);
}
/* acc (already flushed) + the pairs: the odd element first, then the even */
static inline __m256 dpbf16_8(__m256 acc, __m256i v, __m256i u) {
    acc = f32_ftz(_mm256_fmadd_ps(f32_daz(bf16_odd(v)), f32_daz(bf16_odd(u)), acc));
    return f32_ftz(_mm256_fmadd_ps(f32_daz(bf16_even(v)), f32_daz(bf16_even(u)), acc));
}

/* ref (ggml_vec_dot_bf16 with AVX512BF16): two 16-lane accumulators over
 * elements 0..31 and 32..63 of every 64, each reduced as hsum16, added in
 * double, the tail in double. */
static float vec_dot_bf16_avx2(int n, const void *w, const void *a) {
    const mu_bf16 *x = w, *y = a;
    __m256 c[4];
    for (int k = 0; k < 4; k++) c[k] = _mm256_setzero_ps();
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            c[k] = dpbf16_8(c[k], _mm256_loadu_si256((const __m256i *)(x + i + 16 * k)),
                            _mm256_loadu_si256((const __m256i *)(y + i + 16 * k)));
    double s = (double)hsum16_ps(c[0], c[1]);
    s += (double)hsum16_ps(c[2], c[3]);
    for (int i = np; i < n; i++) s += (double)(mu_bf16_to_f32(x[i]) * mu_bf16_to_f32(y[i]));
    return (float)s;
}

/* ref (tinyBLAS BF16, steps of 32): one 16-lane accumulator; n % 32 != 0
 * takes vec_dot, as llama.cpp does. */
static float vec_dot_bf16_batch_avx2(int n, const void *w, const void *a) {
    if (n % 32) return vec_dot_bf16_avx2(n, w, a);
    const mu_bf16 *x = w, *y = a;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int i = 0; i < n; i += 32) {
        lo = dpbf16_8(lo, _mm256_loadu_si256((const __m256i *)(x + i)), _mm256_loadu_si256((const __m256i *)(y + i)));
        hi = dpbf16_8(hi, _mm256_loadu_si256((const __m256i *)(x + i + 16)),
                      _mm256_loadu_si256((const __m256i *)(y + i + 16)));
    }
    return hsum16_ps(lo, hi);
}

/* ---- quantized dots ---------------------------------------------------- */

/* Signed int8 x signed int8 -> 8 int32 partial sums: |x| * (y with x's sign). */
static inline __m256i dot_i8_256(__m256i x, __m256i y) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static float vec_dot_q8_0_avx2(int n, const void *w, const void *a) {
    const mu_block_q8_0 *x = w, *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 d = _mm256_set1_ps(f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_256(qx, qy)), acc);
    }
    return hsum_ps256(acc);
}

/* vec_dot_q8_0_avx2 for n_w weight rows and N activation rows: per pair
 * the same accumulator, scale product (a float multiply, in a vector lane
 * here), FMA order and hsum. |x| and the weight scale are made once per
 * block, the activation scales converted once per call. */
static inline __attribute__((always_inline)) void dotn_q8_0_avx2(const int N, int n, const uint8_t *w, size_t ws,
                                                             int n_w, const uint8_t *a, size_t as, float *out,
                                                             size_t os) {
    const int nb = n / MU_QK8_0, pre = nb <= MU_DOTN_NB;
    float dy[N][pre ? nb : 1];
    for (int j = 0; pre && j < N; j++)
        for (int i = 0; i < nb; i++) dy[j][i] = f16_to_f32(((const mu_block_q8_0 *)(a + (size_t)j * as))[i].d);
    for (int r = 0; r < n_w; r++) {
        const mu_block_q8_0 *x = (const mu_block_q8_0 *)(w + (size_t)r * ws);
        __m256 acc[MU_DOTN_MAX];
        for (int j = 0; j < N; j++) acc[j] = _mm256_setzero_ps();
        for (int i = 0; i < nb; i++) {
            const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
            const __m256i ax = _mm256_sign_epi8(qx, qx);
            const float dx = f16_to_f32(x[i].d);
            const __m256 dxv = _mm256_set1_ps(dx);
#pragma GCC unroll 8
            for (int j = 0; j < N; j++) {
                const mu_block_q8_0 *y = (const mu_block_q8_0 *)(a + (size_t)j * as) + i;
                const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
                const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx));
                const __m256i s = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
                const __m256 d = pre ? _mm256_mul_ps(dxv, _mm256_set1_ps(dy[j][i])) : _mm256_set1_ps(dx * f16_to_f32(y->d));
                acc[j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[j]);
            }
        }
        for (int j = 0; j < N; j++) out[(size_t)j * os + (size_t)r] = hsum_ps256(acc[j]);
    }
}
MU_DOTN_ENTRY(vec_dotn_q8_0_avx2, dotn_q8_0_avx2)

/* ref: an NVFP4 block against two Q8_0 blocks, 8 lanes of 4-byte sums, two
 * FMAs per block (the first half's scales, then the second's). The byte
 * products use the sign trick as llama.cpp (and the ref). */
static float vec_dot_nvfp4_avx2(int n, const void *w, const void *a) {
    const mu_block_nvfp4 *x = w;
    const mu_block_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    __m256i c[2];
    __m256 s[2];
    for (int i = 0; i < n / MU_QK_NVFP4; i++) {
        nvfp4_codes(&x[i], c);
        nvfp4_lane_scales(&x[i], y[2 * i].d, y[2 * i + 1].d, s);
        for (int h = 0; h < 2; h++) {
            const __m256i p = dot_i8_256(c[h], _mm256_loadu_si256((const __m256i *)y[2 * i + h].qs));
            acc = _mm256_fmadd_ps(s[h], _mm256_cvtepi32_ps(p), acc);
        }
    }
    return hsum_ps256(acc);
}

/* Mins part shared by Q4_K and Q5_K: sum_j mn[j] * (bsums[2j] + bsums[2j+1]). */
static inline __m128i k4_mins_dot(const uint32_t u[4], const int16_t *bsums) {
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)&u[2]));
    const __m128i b0 = _mm_loadu_si128((const __m128i *)bsums);
    const __m128i b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    return _mm_madd_epi16(_mm_hadd_epi16(b0, b1), mins);
}

static inline int hsum_epi32_256(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
    return _mm_cvtsi128_si32(x);
}

static inline int hsum_epi32_128(__m128i x) {
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
    return _mm_cvtsi128_si32(x);
}

/* sum over the 8 sub-blocks of scale * (codes . q8), codes unsigned 0..31 */
static inline int k4_isum(const __m256i lo[4], const __m256i hi[4], const uint8_t *sc, const int8_t *q8) {
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        __m256i pl = _mm256_maddubs_epi16(lo[j], _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)));
        __m256i ph = _mm256_maddubs_epi16(hi[j], _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)));
        pl = _mm256_madd_epi16(pl, _mm256_set1_epi16(sc[2 * j]));
        ph = _mm256_madd_epi16(ph, _mm256_set1_epi16(sc[2 * j + 1]));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    return hsum_epi32_256(sumi);
}

/* ref (llama.cpp's repack gemv): exact integer sums per super-block, then
 * acc += isum * d and accm += imin * dmin by FMA, acc - accm at the end. */
static float vec_dot_q4_K_avx2(int n, const void *w, const void *act) {
    const mu_block_q4_K *x = w;
    const mu_block_q8_K *y = act;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    float acc = 0, accm = 0;
    uint32_t u[4];
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d = f16_to_f32(x[i].d) * y[i].d, dm = f16_to_f32(x[i].dmin) * y[i].d;
        k4_scales(x[i].scales, u);
        __m256i lo[4], hi[4];
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            lo[j] = _mm256_and_si256(bits, m4);
            hi[j] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        }
        const int isum = k4_isum(lo, hi, (const uint8_t *)u, y[i].qs);
        const int imin = hsum_epi32_128(k4_mins_dot(u, y[i].bsums));
        acc = fmaf((float)isum, d, acc);
        accm = fmaf((float)imin, dm, accm);
    }
    return acc - accm;
}

/* ref (llama.cpp's AVX2 q5_K): 8 integer lanes (bytes 4m..4m+3 of every
 * sub-block, scaled), acc = fma(d, lanes, acc) per super-block, hsum8; the
 * mins in a scalar summs = fma(imin, -d8*dmin, summs); result acc + summs. */
static float vec_dot_q5_K_avx2(int n, const void *w, const void *act) {
    const mu_block_q5_K *x = w;
    const mu_block_q8_K *y = act;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i b16 = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    uint32_t u[4];
    for (int i = 0; i < n / MU_QK_K; i++) {
        k4_scales(x[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        const float d = y[i].d * f16_to_f32(x[i].d), dmin = -y[i].d * f16_to_f32(x[i].dmin);
        summs = fmaf((float)hsum_epi32_128(k4_mins_dot(u, y[i].bsums)), dmin, summs);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            /* bit 2j of qh adds 16 to the low nibble, bit 2j+1 to the high one */
            const __m256i ml = _mm256_set1_epi8((char)(1 << (2 * j)));
            const __m256i mh = _mm256_set1_epi8((char)(2 << (2 * j)));
            const __m256i hl = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, ml), ml), b16);
            const __m256i hh = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, mh), mh), b16);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), hl);
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), hh);
            __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
            __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
            pl = _mm256_madd_epi16(pl, _mm256_set1_epi16(sc[2 * j]));
            ph = _mm256_madd_epi16(ph, _mm256_set1_epi16(sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps256(acc) + summs;
}

static float vec_dot_q6_K_avx2(int n, const void *w, const void *act) {
    const mu_block_q6_K *x = w;
    const mu_block_q8_K *y = act;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m3 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d = y[i].d * f16_to_f32(x[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        /* codes are stored +32: subtract 32 * sum_k sc[k] * bsums[k] */
        const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        const int8_t *sc = x[i].scales;
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *q8 = y[i].qs;
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m3));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m3));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m3));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m3));
            for (int k = 0; k < 4; k++) {
                __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(q8 + 32 * k)));
                /* 32 values = two sub-blocks of 16: scale per 128-bit lane */
                const __m256i s = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * k]), _mm_set1_epi16(sc[2 * k + 1]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
            ql += 64;
            qh += 32;
            q8 += 128;
            sc += 8;
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps256(acc);
}

/* ---- several activation rows (vec_dotn) ---------------------------------
 * The K-quant dots above for n_w weight rows and N activation rows: each
 * weight block's codes and scales are decoded once for all activation rows,
 * which then take vec_dot's integer sums and float steps, in its order. */
static inline __attribute__((always_inline)) void dotn_q4_K_avx2(const int N, int n, const uint8_t *w, size_t ws,
                                                             int n_w, const uint8_t *a, size_t as, float *out,
                                                             size_t os) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < n_w; r++) {
        const mu_block_q4_K *x = (const mu_block_q4_K *)(w + (size_t)r * ws);
        float acc[MU_DOTN_MAX], accm[MU_DOTN_MAX];
        for (int j = 0; j < N; j++) acc[j] = accm[j] = 0;
        for (int i = 0; i < n / MU_QK_K; i++) {
            uint32_t u[4];
            k4_scales(x[i].scales, u);
            __m256i lo[4], hi[4];
            for (int p = 0; p < 4; p++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * p));
                lo[p] = _mm256_and_si256(bits, m4);
                hi[p] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            }
            const float dx = f16_to_f32(x[i].d), dmx = f16_to_f32(x[i].dmin);
            for (int j = 0; j < N; j++) {
                const mu_block_q8_K *y = (const mu_block_q8_K *)(a + (size_t)j * as) + i;
                const int isum = k4_isum(lo, hi, (const uint8_t *)u, y->qs);
                const int imin = hsum_epi32_128(k4_mins_dot(u, y->bsums));
                acc[j] = fmaf((float)isum, dx * y->d, acc[j]);
                accm[j] = fmaf((float)imin, dmx * y->d, accm[j]);
            }
        }
        for (int j = 0; j < N; j++) out[(size_t)j * os + (size_t)r] = acc[j] - accm[j];
    }
}
MU_DOTN_ENTRY(vec_dotn_q4_K_avx2, dotn_q4_K_avx2)

static inline __attribute__((always_inline)) void dotn_q5_K_avx2(const int N, int n, const uint8_t *w, size_t ws,
                                                             int n_w, const uint8_t *a, size_t as, float *out,
                                                             size_t os) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i b16 = _mm256_set1_epi8(16);
    for (int r = 0; r < n_w; r++) {
        const mu_block_q5_K *x = (const mu_block_q5_K *)(w + (size_t)r * ws);
        __m256 acc[MU_DOTN_MAX];
        float summs[MU_DOTN_MAX];
        for (int j = 0; j < N; j++) acc[j] = _mm256_setzero_ps(), summs[j] = 0;
        for (int i = 0; i < n / MU_QK_K; i++) {
            uint32_t u[4];
            k4_scales(x[i].scales, u);
            const uint8_t *sc = (const uint8_t *)u;
            const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
            __m256i lo[4], hi[4], sl[4], sh[4];
            for (int p = 0; p < 4; p++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * p));
                const __m256i ml = _mm256_set1_epi8((char)(1 << (2 * p)));
                const __m256i mh = _mm256_set1_epi8((char)(2 << (2 * p)));
                const __m256i hl = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, ml), ml), b16);
                const __m256i hh = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, mh), mh), b16);
                lo[p] = _mm256_or_si256(_mm256_and_si256(bits, m4), hl);
                hi[p] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), hh);
                sl[p] = _mm256_set1_epi16(sc[2 * p]);
                sh[p] = _mm256_set1_epi16(sc[2 * p + 1]);
            }
            const float dx = f16_to_f32(x[i].d), dmx = f16_to_f32(x[i].dmin);
            for (int j = 0; j < N; j++) {
                const mu_block_q8_K *y = (const mu_block_q8_K *)(a + (size_t)j * as) + i;
                const float d = y->d * dx, dmin = -y->d * dmx;
                summs[j] = fmaf((float)hsum_epi32_128(k4_mins_dot(u, y->bsums)), dmin, summs[j]);
                __m256i sumi = _mm256_setzero_si256();
                for (int p = 0; p < 4; p++) {
                    __m256i pl = _mm256_maddubs_epi16(lo[p], _mm256_loadu_si256((const __m256i *)(y->qs + 64 * p)));
                    __m256i ph = _mm256_maddubs_epi16(hi[p], _mm256_loadu_si256((const __m256i *)(y->qs + 64 * p + 32)));
                    pl = _mm256_madd_epi16(pl, sl[p]);
                    ph = _mm256_madd_epi16(ph, sh[p]);
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
                }
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[j]);
            }
        }
        for (int j = 0; j < N; j++) out[(size_t)j * os + (size_t)r] = hsum_ps256(acc[j]) + summs[j];
    }
}
MU_DOTN_ENTRY(vec_dotn_q5_K_avx2, dotn_q5_K_avx2)

static inline __attribute__((always_inline)) void dotn_q6_K_avx2(const int N, int n, const uint8_t *w, size_t ws,
                                                             int n_w, const uint8_t *a, size_t as, float *out,
                                                             size_t os) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m3 = _mm256_set1_epi8(0x30);
    for (int r = 0; r < n_w; r++) {
        const mu_block_q6_K *x = (const mu_block_q6_K *)(w + (size_t)r * ws);
        __m256 acc[MU_DOTN_MAX];
        for (int j = 0; j < N; j++) acc[j] = _mm256_setzero_ps();
        for (int i = 0; i < n / MU_QK_K; i++) {
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
            const int8_t *sc = x[i].scales;
            __m256i q[8], s[8];
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = x[i].ql + 64 * h, *qhp = x[i].qh + 32 * h;
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
                const __m256i hb = _mm256_loadu_si256((const __m256i *)qhp);
                __m256i *qq = q + 4 * h;
                qq[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m3));
                qq[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m3));
                qq[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m3));
                qq[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                        _mm256_and_si256(_mm256_srli_epi16(hb, 2), m3));
                for (int k = 0; k < 4; k++)
                    s[4 * h + k] = _mm256_setr_m128i(_mm_set1_epi16(sc[8 * h + 2 * k]), _mm_set1_epi16(sc[8 * h + 2 * k + 1]));
            }
            const float dx = f16_to_f32(x[i].d);
            for (int j = 0; j < N; j++) {
                const mu_block_q8_K *y = (const mu_block_q8_K *)(a + (size_t)j * as) + i;
                const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
                __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
                for (int k = 0; k < 8; k++) {
                    const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * k)));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s[k]));
                }
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dx), _mm256_cvtepi32_ps(sumi), acc[j]);
            }
        }
        for (int j = 0; j < N; j++) out[(size_t)j * os + (size_t)r] = hsum_ps256(acc[j]);
    }
}
MU_DOTN_ENTRY(vec_dotn_q6_K_avx2, dotn_q6_K_avx2)

/* ---- activation quantizers (bit-identical to kern_ref.c) --------------- */

#define ROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static void quant_q8_0_avx2(const float *x, void *vy, int n) {
    mu_block_q8_0 *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const float *xb = x + i * MU_QK8_0;
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m); /* a NaN operand yields m: NaN ignored, as fmaxf */
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.f;
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        y[i].d = mu_f32_to_f16(d);
        const __m256 mul = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], mul), ROUND));
        /* pack 4 x 8 int32 -> 32 int8 in order */
        __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
        __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
        __m256i p = _mm256_packs_epi16(p01, p23);
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)y[i].qs, p);
    }
}

static void quant_q8_K_avx2(const float *x, void *vy, int n) {
    mu_block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float *xb = x + i * MU_QK_K;
        __m256 m = _mm256_setzero_ps();
        __m256 bad = _mm256_setzero_ps();
        const __m256 inf = _mm256_set1_ps(INFINITY);
        for (int k = 0; k < 32; k++) {
            const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k));
            m = _mm256_max_ps(m, a);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); /* NaN or inf */
        }
        if (_mm256_movemask_ps(bad)) { /* non-finite: the ref defines it */
            mu_quant_q8_K_ref(xb, &y[i], MU_QK_K);
            continue;
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0;
        for (int j = 0; j < MU_QK_K; j++) /* first element of largest magnitude, as the ref */
            if (fabsf(xb[j]) == amax) {
                max = xb[j];
                break;
            }
        const float iscale = -127.f / max;
        if (isinf(iscale)) { /* |max| below ~3.7e-37: products overflow, the ref defines them */
            mu_quant_q8_K_ref(xb, &y[i], MU_QK_K);
            continue;
        }
        const __m256 mul = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int k = 0; k < 8; k++) { /* 32 values per step */
            __m256i q[4];
            for (int l = 0; l < 4; l++) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 32 * k + 8 * l), mul);
                q[l] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(v, ROUND)), lim);
            }
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), p);
            /* bsums of the two groups of 16 */
            const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), p);
            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            __m128i t = _mm256_castsi256_si128(s32);
            __m128i u = _mm256_extracti128_si256(s32, 1);
            t = _mm_hadd_epi32(t, u);   /* [a0+a1, a2+a3, b0+b1, b2+b3] */
            t = _mm_hadd_epi32(t, t);   /* [a, b, a, b] */
            y[i].bsums[2 * k] = (int16_t)_mm_cvtsi128_si32(t);
            y[i].bsums[2 * k + 1] = (int16_t)_mm_extract_epi32(t, 1);
        }
        y[i].d = 1.f / iscale;
    }
}

static void quant_f16_avx2(const float *x, void *vy, int n) {
    mu_f16 *y = vy;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = _mm256_cvtps_ph(v, ROUND);
        /* NaN: the ref writes sign | 0x7e00 */
        const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        if (_mm256_movemask_ps(nan)) {
            for (int k = 0; k < 8; k++) y[i + k] = mu_f32_to_f16(x[i + k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), h);
    }
    for (; i < n; i++) y[i] = mu_f32_to_f16(x[i]);
}

static void quant_bf16_avx2(const float *x, void *vy, int n) {
    mu_bf16 *y = vy;
    int i = 0;
    const __m256i one = _mm256_set1_epi32(1), r = _mm256_set1_epi32(0x7fff);
    for (; i + 16 <= n; i += 16) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(x + i + 8));
        const __m256 fa = _mm256_castsi256_ps(a), fb = _mm256_castsi256_ps(b);
        if (_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(fa, fa, _CMP_UNORD_Q), _mm256_cmp_ps(fb, fb, _CMP_UNORD_Q)))) {
            for (int k = 0; k < 16; k++) y[i + k] = mu_f32_to_bf16(x[i + k]);
            continue;
        }
        a = _mm256_srli_epi32(_mm256_add_epi32(a, _mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(a, 16), one))), 16);
        b = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(b, 16), one))), 16);
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(y + i), p);
    }
    for (; i < n; i++) y[i] = mu_f32_to_bf16(x[i]);
}

/* ---- dequantizers (bit-identical to kern_ref.c: no fused multiply-add) -- */

static void dequant_f16_avx2(const void *w, float *y, int n) {
    const mu_f16 *x = w;
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = mu_f16_to_f32(x[i]);
}

static void dequant_bf16_avx2(const void *w, float *y, int n) {
    const mu_bf16 *x = w;
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, bf16x8_to_ps(x + i));
    for (; i < n; i++) y[i] = mu_bf16_to_f32(x[i]);
}

/* code * scale, exact (as the ref) */
static void dequant_nvfp4_avx2(const void *w, float *y, int n) {
    const mu_block_nvfp4 *x = w;
    __m256i c[2];
    for (int i = 0; i < n / MU_QK_NVFP4; i++, y += MU_QK_NVFP4) {
        nvfp4_codes(&x[i], c);
        float sc[4];
        _mm_storeu_ps(sc, nvfp4_scale4(&x[i]));
        for (int s = 0; s < 4; s++) {
            const __m128i cs = s & 1 ? _mm256_extracti128_si256(c[s / 2], 1) : _mm256_castsi256_si128(c[s / 2]);
            const __m256 d = _mm256_set1_ps(sc[s]);
            _mm256_storeu_ps(y + 16 * s, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(cs)), d));
            _mm256_storeu_ps(y + 16 * s + 8,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(cs, 8))), d));
        }
    }
}

static void dequant_q8_0_avx2(const void *w, float *y, int n) {
    const mu_block_q8_0 *x = w;
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(x[i].d));
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + 8 * k)));
            _mm256_storeu_ps(y + i * MU_QK8_0 + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

static void dequant_q4_K_avx2(const void *w, float *y, int n) {
    const mu_block_q4_K *x = w;
    uint32_t u[4];
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
        k4_scales(x[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u, *mn = sc + 8;
        for (int j = 0; j < 4; j++) {
            const uint8_t *q = x[i].qs + 32 * j;
            const __m256 d1 = _mm256_set1_ps(d * sc[2 * j]), m1 = _mm256_set1_ps(dmin * mn[2 * j]);
            const __m256 d2 = _mm256_set1_ps(d * sc[2 * j + 1]), m2 = _mm256_set1_ps(dmin * mn[2 * j + 1]);
            for (int l = 0; l < 32; l += 8) {
                const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + l)));
                const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(0xf)));
                const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
                _mm256_storeu_ps(y + l, _mm256_sub_ps(_mm256_mul_ps(d1, lo), m1));
                _mm256_storeu_ps(y + 32 + l, _mm256_sub_ps(_mm256_mul_ps(d2, hi), m2));
            }
            y += 64;
        }
    }
}

static void dequant_q6_K_avx2(const void *w, float *y, int n) {
    const mu_block_q6_K *x = w;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l += 8) {
                const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
                const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + 32 + l)));
                const __m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                const __m256i m4 = _mm256_set1_epi32(0xf), m3 = _mm256_set1_epi32(0x30), c32 = _mm256_set1_epi32(32);
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi32(hb, 4), m3));
                q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi32(hb, 2), m3));
                q[2] = _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_and_si256(hb, m3));
                q[3] = _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_and_si256(_mm256_srli_epi32(hb, 2), m3));
                const int is = l / 16;
                for (int k = 0; k < 4; k++) {
                    const __m256 ds = _mm256_set1_ps(d * sc[is + 2 * k]);
                    const __m256 qf = _mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], c32));
                    _mm256_storeu_ps(y + 32 * k + l, _mm256_mul_ps(ds, qf));
                }
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void mu_kern_fill_avx2(mu_kern *k) {
    k->vec_dot[MU_T_F32] = vec_dot_f32_avx2;
    k->vec_dot[MU_T_F16] = vec_dot_f16_avx2;
    k->vec_dot[MU_T_Q8_0] = vec_dot_q8_0_avx2;
    k->vec_dotn[MU_T_Q8_0] = vec_dotn_q8_0_avx2;
    k->vec_dotn[MU_T_Q4_K] = vec_dotn_q4_K_avx2;
    k->vec_dotn[MU_T_Q5_K] = vec_dotn_q5_K_avx2;
    k->vec_dotn[MU_T_Q6_K] = vec_dotn_q6_K_avx2;
    k->vec_dot[MU_T_Q4_K] = vec_dot_q4_K_avx2;
    k->vec_dot[MU_T_Q5_K] = vec_dot_q5_K_avx2;
    k->vec_dot[MU_T_Q6_K] = vec_dot_q6_K_avx2;
    k->vec_dot[MU_T_BF16] = vec_dot_bf16_avx2;
    k->vec_dot[MU_T_NVFP4] = vec_dot_nvfp4_avx2;
    k->vec_dot_batch[MU_T_BF16] = vec_dot_bf16_batch_avx2;
    k->quant[MU_T_Q8_0] = quant_q8_0_avx2;
    k->quant[MU_T_Q8_K] = quant_q8_K_avx2;
    k->quant[MU_T_F16] = quant_f16_avx2;
    k->quant[MU_T_BF16] = quant_bf16_avx2;
    k->dequant[MU_T_F16] = dequant_f16_avx2;
    k->dequant[MU_T_BF16] = dequant_bf16_avx2;
    k->dequant[MU_T_Q8_0] = dequant_q8_0_avx2;
    k->dequant[MU_T_Q4_K] = dequant_q4_K_avx2;
    k->dequant[MU_T_Q6_K] = dequant_q6_K_avx2;
    k->dequant[MU_T_NVFP4] = dequant_nvfp4_avx2;
}
