/* kern_avx512.c: the AVX-512 (F, BW, VL, DQ, VNNI, BF16) kernel table.
 * Owns: 512-bit dots for the hot weight types (Q4_K, Q6_K, Q8_0, F16, F32,
 * BF16; NVFP4 with 256-bit VNNI), their two-row (vec_dot2, Q4_K, Q6_K and
 * NVFP4), several-activation-row (vec_dotn, Q4_K, Q6_K, Q8_0, F16) and
 * batch-path (vec_dot_batch, Q4_K, F16, F32, BF16) variants, and
 * the Q8_K activation quantizer. Entries not set here keep the AVX2 ones (the table arrives as a
 * copy of the AVX2 table).
 * Does not own: numerics (kern_ref.c); the tiled matrix-matrix kernels
 * (gemm_avx512.c) or the attention pieces (attn_avx512.c); the block
 * decoders it shares with gemm_avx512.c (simd_avx512.h).
 * kern_ref.c spells out llama.cpp's x86 summation orders, and every entry
 * here reproduces them bit for bit (the integer parts of the quantized dots
 * in any order, the float steps in exactly the ref's order; BF16 with
 * VDPBF16PS, which the ref emulates).
 * Key design choice: one zmm holds two 32-value sub-blocks of a K-quant block
 * in natural order, so the Q8_K activations load straight from their block;
 * per-sub-block scales are applied with vpdpwssd (VNNI) on the 16-bit pair
 * products, and floats appear only once per 256-value block. Decode reads
 * Q4_K / Q6_K rows in pairs (vec_dot2) with a linear software prefetch, see
 * dot2_pf_base. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kern.h"
#include "simd_avx512.h"
#include "simd_x86.h"

/* ---- Q4_K ---------------------------------------------------------------- */

/* integer part of a Q4_K block dot (before the mins): 16 int32 partials */
static inline __m512i q4k_sumi(const q4k_dec *o, const int8_t *q8) {
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int p = 0; p < 4; p++) {
        const __m512i prod = _mm512_maddubs_epi16(o->q[p], _mm512_loadu_si512(q8 + 64 * p));
        sumi = _mm512_dpwssd_epi32(sumi, prod, o->s[p]);
    }
    return sumi;
}

static inline int hsum_epi32_128(__m128i v) {
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
    return _mm_cvtsi128_si32(v);
}

/* ---- Q4_K decode dot: four super-blocks per step ------------------------
 * Integer parts of four blocks are reduced together by one transpose tree
 * (exact), their scales and mins unpacked together in one zmm (block b in
 * 128-bit lane b: bytes 0-7 the 8 scales, 8-15 the 8 mins), and the float
 * steps then run block by block in the ref's order, the pair (acc, accm) in
 * the two low lanes of one xmm (a lane-wise FMA rounds like fmaf). */

/* Lane b: the block's first 16 bytes (d, dmin, scales) -> 8 scales, 8 mins. */
static inline __m512i q4k_scales4(__m512i v) {
    /* dwords per lane: [ddm, u0, u1, u2] */
    const __m512i p = _mm512_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 1)); /* u0 u2 u1 u2 */
    const __m512i q = _mm512_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 1)); /* u0 u0 u1 u1 */
    const __m512i ps = _mm512_srlv_epi32(p, _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0));
    const __m512i mp = _mm512_set4_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f);
    const __m512i mq = _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0);
    /* (ps & mp) | (q >> 2 & mq) */
    return _mm512_ternarylogic_epi32(_mm512_and_si512(ps, mp), _mm512_srli_epi32(q, 2), mq, 0xF8);
}

/* Integer part of one block before the mins, as 8 int32 partial sums, plus
 * a bias. Per 32-byte chunk p of codes (low nibbles: sub-block 2p, high:
 * 2p+1), vpdpbusd gives 4-product sums r (-7680 <= r <= 7620) of each
 * sub-block; t = (r_hi << 16) + 8192 + r_lo packs both exactly in one int32
 * (its low 16-bit half r_lo + 8192 stays in 0..32767, so the high half is
 * exactly r_hi), and one vpdpwssd against the scale pair sw[p] = sc[2p] |
 * sc[2p+1] << 16 (a broadcast memory operand) applies both scales: 3
 * multiplies per 64 values instead of 4. The 8 lanes then hold 8192 *
 * sum_p sc[2p] each too much, which q4k_dot4 takes off. On Zen 4 a zmm op
 * costs two ymm ops, so 256-bit vectors lose nothing. */
static inline __m256i q4k_block_sumi(const mu_block_q4_K *b, const int8_t *q8, const uint32_t *sw) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int p = 0; p < 4; p++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * p));
        const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        __m256i t = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * p + 32)));
        t = _mm256_dpbusd_epi32(_mm256_or_si256(_mm256_slli_epi32(t, 16), _mm256_set1_epi32(8192)), lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * p)));
        if (p & 1)
            s1 = _mm256_dpwssd_epi32(s1, t, _mm256_set1_epi32((int)sw[p]));
        else
            s0 = _mm256_dpwssd_epi32(s0, t, _mm256_set1_epi32((int)sw[p]));
    }
    return _mm256_add_epi32(s0, s1);
}

static inline __m512i lanes_01(__m512i a, __m512i b) { return _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)); }
static inline __m512i lanes_23(__m512i a, __m512i b) { return _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)); }

/* mn[j] * (bsums[2j] + bsums[2j+1]) of blocks b (low 256) and b+1 (high):
 * sc01 holds block b's scales/mins in lanes 0-1 and block b+1's in 2-3. */
static inline __m512i q4k_mins2(__m512i sc01, const mu_block_q8_K *y) {
    const __m512i c = _mm512_set_epi8(
        -1, 15, -1, 15, -1, 14, -1, 14, -1, 13, -1, 13, -1, 12, -1, 12, /* lane 3: mins 4-7 */
        -1, 11, -1, 11, -1, 10, -1, 10, -1, 9, -1, 9, -1, 8, -1, 8,     /* lane 2: mins 0-3 */
        -1, 15, -1, 15, -1, 14, -1, 14, -1, 13, -1, 13, -1, 12, -1, 12, /* lane 1 */
        -1, 11, -1, 11, -1, 10, -1, 10, -1, 9, -1, 9, -1, 8, -1, 8);    /* lane 0 */
    const __m512i mn = _mm512_shuffle_epi8(sc01, c);
    const __m512i bs = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[0].bsums)),
                                          _mm256_loadu_si256((const __m256i *)y[1].bsums), 1);
    return _mm512_madd_epi16(bs, mn);
}

/* Integer parts of four blocks (sw, scw: their scales as 16-bit words, sc:
 * q4k_scales4), reduced by one transpose tree: [isum, imin] per block. */
static inline __m256i q4k_ints4(const mu_block_q4_K *x, const mu_block_q8_K *y, __m512i sc, const uint32_t *sw,
                                __m512i scw) {
    __m512i z[4];
    z[0] = _mm512_castsi256_si512(q4k_block_sumi(&x[0], y[0].qs, sw));
    z[1] = _mm512_castsi256_si512(q4k_block_sumi(&x[1], y[1].qs, sw + 4));
    z[2] = _mm512_castsi256_si512(q4k_block_sumi(&x[2], y[2].qs, sw + 8));
    z[3] = _mm512_castsi256_si512(q4k_block_sumi(&x[3], y[3].qs, sw + 12));
    const __m512i m01 = q4k_mins2(_mm512_shuffle_i32x4(sc, sc, _MM_SHUFFLE(1, 1, 0, 0)), &y[0]);
    const __m512i m23 = q4k_mins2(_mm512_shuffle_i32x4(sc, sc, _MM_SHUFFLE(3, 3, 2, 2)), &y[2]);
    /* the bias: -32768 * sc[2p] on lanes p and p + 4 of each block */
    const __m512i nb = _mm512_set1_epi32(0x8000);
    const __m512i b01 = _mm512_madd_epi16(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7), scw), nb);
    const __m512i b23 = _mm512_madd_epi16(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(8, 9, 10, 11, 8, 9, 10, 11, 12, 13, 14, 15, 12, 13, 14, 15), scw), nb);
    const __m512i z01 = _mm512_add_epi32(_mm512_inserti64x4(z[0], _mm512_castsi512_si256(z[1]), 1), b01);
    const __m512i z23 = _mm512_add_epi32(_mm512_inserti64x4(z[2], _mm512_castsi512_si256(z[3]), 1), b23);
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(z01, m01), _mm512_unpackhi_epi32(z01, m01));
    const __m512i t2 = _mm512_add_epi32(_mm512_unpacklo_epi32(z23, m23), _mm512_unpackhi_epi32(z23, m23));
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t1, t2), _mm512_unpackhi_epi64(t1, t2));
    /* lane L of u: [z, m, z', m'] of lane L's 256-bit half; lanes 0+1, 2+3 */
    const __m512i r = _mm512_add_epi32(_mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(3, 2, 2, 0)),
                                       _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(3, 2, 3, 1)));
    /* lanes: 0 = [isum0, imin0, isum2, imin2], 1 = [isum1, imin1, isum3, imin3] */
    return _mm512_castsi512_si256(r);
}

static inline __m512i q4k_head4(const mu_block_q4_K *x) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)&x[0]));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)&x[1]), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)&x[2]), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)&x[3]), 3);
}

static inline __m512i q4k_scw(__m512i sc) {
    return _mm512_cvtepu8_epi16(
        _mm512_castsi512_si256(_mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 0, 0, 0, 0), sc)));
}

static inline void q4k_dot4(const mu_block_q4_K *x, const mu_block_q8_K *y, __m128 *accv) {
    const __m512i v = q4k_head4(x);
    const __m512i sc = q4k_scales4(v);
    /* the 32 scales as 16-bit words, 4 pairs per block, read back from
     * memory: a broadcast load costs no shuffle */
    uint32_t sw[16] __attribute__((aligned(64)));
    const __m512i scw = q4k_scw(sc);
    _mm512_store_si512(sw, scw);
    __asm__ volatile("" : : "m"(sw) : "memory");
    const __m256 f = _mm256_cvtepi32_ps(q4k_ints4(x, y, sc, sw, scw));
    const __m128i hd = _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 4, 8, 0), v));
    const __m128 yd = _mm_setr_ps(y[0].d, y[2].d, y[1].d, y[3].d);
    const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(hd), _mm256_permutevar8x32_ps(_mm256_castps128_ps256(yd), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
    const __m128 f0 = _mm256_castps256_ps128(f), f1 = _mm256_extractf128_ps(f, 1);
    const __m128 d0 = _mm256_castps256_ps128(dd), d1 = _mm256_extractf128_ps(dd, 1);
    __m128 a = *accv;
    a = _mm_fmadd_ps(f0, d0, a);
    a = _mm_fmadd_ps(f1, d1, a);
    a = _mm_fmadd_ps(_mm_movehl_ps(f0, f0), _mm_movehl_ps(d0, d0), a);
    a = _mm_fmadd_ps(_mm_movehl_ps(f1, f1), _mm_movehl_ps(d1, d1), a);
    *accv = a;
}

/* The blocks after the last group of four, one at a time. */
static inline float q4k_tail(int i, int nb, const mu_block_q4_K *x, const mu_block_q8_K *y, float acc, float accm) {
    uint32_t u[4];
    q4k_dec dec;
    for (; i < nb; i++) {
        const float d = f16_to_f32(x[i].d) * y[i].d, dm = f16_to_f32(x[i].dmin) * y[i].d;
        q4k_decode(&x[i], &dec, u);
        const int isum = _mm512_reduce_add_epi32(q4k_sumi(&dec, y[i].qs));
        const int imin = hsum_epi32_128(k4_mins_dot(u, y[i].bsums));
        acc = fmaf((float)isum, d, acc);
        accm = fmaf((float)imin, dm, accm);
    }
    return acc - accm;
}

/* ref: acc += (float)isum * d once per super-block (gemv). */
static float vec_dot_q4_K_avx512(int n, const void *w, const void *act) {
    const mu_block_q4_K *x = w;
    const mu_block_q8_K *y = act;
    const int nb = n / MU_QK_K;
    __m128 accv = _mm_setzero_ps();
    int i = 0;
    for (; i + 4 <= nb; i += 4) q4k_dot4(&x[i], &y[i], &accv);
    return q4k_tail(i, nb, x, y, _mm_cvtss_f32(accv), _mm_cvtss_f32(_mm_movehdup_ps(accv)));
}

/* Prefetch for two-row dots. Reading two rows side by side (a zig-zag
 * within two row lengths) halves what this machine's DRAM delivers to a core
 * (measured: 11 GB/s against 25-29 GB/s for one linear stream, pure loads;
 * the two-row kernels without prefetch ran at 5-6 GB/s), and per-row
 * prefetches do not help; one linear software prefetch stream does. When
 * the rows are adjacent (the engine's case: a pair is one contiguous span of
 * 2 * ws bytes), the kernel walks a prefetch pointer through the following
 * spans at twice the read rate, 2 * ws + DOT2_PF_LEAD bytes ahead, into L2
 * (prefetcht1: T0 and NTA left the kernels at 9-17 GB/s, T1 with about 3
 * pairs of lead gave 19-26). Other rows get no prefetch. */
#define DOT2_PF_LEAD 4096
static inline uintptr_t dot2_pf_base(const void *x0, const void *x1, size_t ws) {
    return (uintptr_t)x1 == (uintptr_t)x0 + ws ? (uintptr_t)x0 + 2 * ws + DOT2_PF_LEAD : 0;
}
static inline void dot2_pf(uintptr_t p) { _mm_prefetch((const char *)p, _MM_HINT_T1); }

/* ---- Q4_K decode dot, two weight rows per pass -------------------------
 * q4k_dot4 for rows x0 and x1 against one activation row: the activation
 * loads, bsums and scales d are shared, the two rows' integer work
 * interleaves (two independent streams), and the float steps of both rows
 * run in one xmm, [acc0, accm0, acc1, accm1], each lane in the ref's order. */
static inline void q4k_dot4x2(const mu_block_q4_K *x0, const mu_block_q4_K *x1, const mu_block_q8_K *y, __m128 *accv) {
    const __m512i v0 = q4k_head4(x0), v1 = q4k_head4(x1);
    const __m512i sc0 = q4k_scales4(v0), sc1 = q4k_scales4(v1);
    uint32_t sw[32] __attribute__((aligned(64)));
    const __m512i scw0 = q4k_scw(sc0), scw1 = q4k_scw(sc1);
    _mm512_store_si512(sw, scw0);
    _mm512_store_si512(sw + 16, scw1);
    __asm__ volatile("" : : "m"(sw) : "memory");
    const __m256i r0 = q4k_ints4(x0, y, sc0, sw, scw0);
    const __m256i r1 = q4k_ints4(x1, y, sc1, sw + 16, scw1);
    /* f: row 0 in the low 256 bits, row 1 in the high */
    const __m512 f = _mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_castsi256_si512(r0), r1, 1));
    const __m256i hd = _mm512_castsi512_si256(
        _mm512_permutex2var_epi32(v0, _mm512_setr_epi32(0, 8, 4, 12, 16, 24, 20, 28, 0, 0, 0, 0, 0, 0, 0, 0), v1));
    const __m512 yd = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 2, 2, 1, 1, 3, 3, 0, 0, 2, 2, 1, 1, 3, 3),
                                            _mm512_castps128_ps512(_mm_setr_ps(y[0].d, y[1].d, y[2].d, y[3].d)));
    const __m512 dd = _mm512_mul_ps(_mm512_cvtph_ps(hd), yd);
    /* 64-bit pieces: f holds [b0 b2 | b1 b3 | b0' b2' | b1' b3']; lane k of
     * the permuted vectors = [block k of row 0, block k of row 1] */
    const __m512i pk = _mm512_setr_epi64(0, 4, 2, 6, 1, 5, 3, 7);
    const __m512 fq = _mm512_castpd_ps(_mm512_permutexvar_pd(pk, _mm512_castps_pd(f)));
    const __m512 dq = _mm512_castpd_ps(_mm512_permutexvar_pd(pk, _mm512_castps_pd(dd)));
    __m128 a = *accv;
    a = _mm_fmadd_ps(_mm512_castps512_ps128(fq), _mm512_castps512_ps128(dq), a);
    a = _mm_fmadd_ps(_mm512_extractf32x4_ps(fq, 1), _mm512_extractf32x4_ps(dq, 1), a);
    a = _mm_fmadd_ps(_mm512_extractf32x4_ps(fq, 2), _mm512_extractf32x4_ps(dq, 2), a);
    a = _mm_fmadd_ps(_mm512_extractf32x4_ps(fq, 3), _mm512_extractf32x4_ps(dq, 3), a);
    *accv = a;
}

static void vec_dot2_q4_K_avx512(int n, const void *w0, const void *w1, const void *act, float out[2]) {
    const mu_block_q4_K *x0 = w0, *x1 = w1;
    const mu_block_q8_K *y = act;
    const int nb = n / MU_QK_K;
    __m128 accv = _mm_setzero_ps();
    int i = 0;
    const uintptr_t pf = dot2_pf_base(x0, x1, (size_t)nb * sizeof(mu_block_q4_K));
    for (; i + 4 <= nb; i += 4) {
        if (pf)
            for (int l = 0; l < 8 * (int)sizeof(mu_block_q4_K); l += 64)
                dot2_pf(pf + 2 * (size_t)i * sizeof(mu_block_q4_K) + (size_t)l);
        q4k_dot4x2(&x0[i], &x1[i], &y[i], &accv);
    }
    if (pf) /* the tail blocks' share of the stream (rows of 26 blocks: 9 lines per pair) */
        for (size_t l = 2 * (size_t)i * sizeof(mu_block_q4_K); l < 2 * (size_t)nb * sizeof(mu_block_q4_K); l += 64)
            dot2_pf(pf + l);
    float a[4];
    _mm_storeu_ps(a, accv);
    out[0] = q4k_tail(i, nb, x0, y, a[0], a[1]);
    out[1] = q4k_tail(i, nb, x1, y, a[2], a[3]);
}

static float vec_dot_q4_K_batch_avx512(int n, const void *w, const void *act) {
    const mu_block_q4_K *x = w;
    const mu_block_q8_K *y = act;
    float acc = 0, accm = 0;
    uint32_t u[4];
    q4k_dec dec;
    for (int i = 0; i < n / MU_QK_K; i++) {
        q4k_decode(&x[i], &dec, u);
        q4k_batch_step(&dec, u, &y[i], f16_to_f32(x[i].d), f16_to_f32(x[i].dmin), &acc, &accm);
    }
    return acc - accm;
}

static float vec_dot_q6_K_avx512(int n, const void *w, const void *act) {
    const mu_block_q6_K *x = w;
    const mu_block_q8_K *y = act;
    __m256 acc = _mm256_setzero_ps();
    q6k_dec dec;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d = y[i].d * f16_to_f32(x[i].d);
        q6k_decode(&x[i], &dec);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q6k_sumi(&dec, &y[i])), acc);
    }
    return hsum_ps256(acc);
}

/* Two rows per pass: one activation block's loads serve both rows' decode
 * and products; each row keeps its own 8-lane accumulator (ref order). */
static void vec_dot2_q6_K_avx512(int n, const void *w0, const void *w1, const void *act, float out[2]) {
    const mu_block_q6_K *x0 = w0, *x1 = w1;
    const mu_block_q8_K *y = act;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    q6k_dec dec0, dec1;
    const uintptr_t pf = dot2_pf_base(x0, x1, (size_t)(n / MU_QK_K) * sizeof(mu_block_q6_K));
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d0 = y[i].d * f16_to_f32(x0[i].d), d1 = y[i].d * f16_to_f32(x1[i].d);
        if (pf)
            for (int l = 0; l < 2 * (int)sizeof(mu_block_q6_K); l += 64)
                dot2_pf(pf + 2 * (size_t)i * sizeof(mu_block_q6_K) + (size_t)l);
        q6k_decode(&x0[i], &dec0);
        q6k_decode(&x1[i], &dec1);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(q6k_sumi(&dec0, &y[i])), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(q6k_sumi(&dec1, &y[i])), acc1);
    }
    out[0] = hsum_ps256(acc0);
    out[1] = hsum_ps256(acc1);
}

/* ---- several activation rows (vec_dotn) ---------------------------------
 * Each weight block is decoded once (q4k_decode / q6k_decode) for all
 * activation rows; each row then takes the integer sums and float steps of
 * the ref's order (the Q4_K ones as q4k_tail, the Q6_K ones as
 * vec_dot_q6_K_avx512), so every result keeps its vec_dot bits. */
/* Q4_K: the nibbles and scales of a block are unpacked once; per
 * activation row and 64 values two vpdpbusd give the 4-product sums of
 * sub-blocks 2p and 2p+1 (|r| <= 7680), vpackssdw puts them in 16-bit words
 * (exact) and one vpdpwssd applies both scales. Rows go in groups of 4:
 * their integer sums and mins' sums are reduced together (exact in any
 * order) and the float steps run as the lanes of one xmm, lane j being row
 * j's acc = fma((float)isum, dx * yd, acc) and accm likewise, then acc -
 * accm: q4k_tail's operations, row by row. Measured against vec_dot per
 * row (2048 x 512 weights in cache, one core): 8 rows cost 5.6 rows' time,
 * 4 rows 3.4; below 4 rows vec_dot2 per row is cheaper. */
static inline __attribute__((always_inline)) void dotn_q4_K_avx512(const int N, int n, const uint8_t *w, size_t ws,
                                                               int n_w, const uint8_t *a, size_t as, float *out,
                                                               size_t os) {
    if (N < 4) { /* the block's unpacking costs more than it saves: vec_dot2 per activation row */
        for (int j = 0; j < N; j++) {
            const uint8_t *y = a + (size_t)j * as;
            float *o = out + (size_t)j * os;
            int r = 0;
            for (; r + 2 <= n_w; r += 2) vec_dot2_q4_K_avx512(n, w + (size_t)r * ws, w + (size_t)(r + 1) * ws, y, o + r);
            if (r < n_w) o[r] = vec_dot_q4_K_avx512(n, w + (size_t)r * ws, y);
        }
        return;
    }
    const int nb = n / MU_QK_K, G = (N + 3) / 4;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < n_w; r++) {
        const mu_block_q4_K *x = (const mu_block_q4_K *)(w + (size_t)r * ws);
        __m128 acc[MU_DOTN_MAX / 4], accm[MU_DOTN_MAX / 4];
        for (int g = 0; g < G; g++) acc[g] = accm[g] = _mm_setzero_ps();
        for (int i = 0; i < nb; i++) {
            uint32_t u[4];
            k4_scales(x[i].scales, u);
            __m256i lo[4], hi[4], sw[4];
            const __m256i scy = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)u)));
            for (int p = 0; p < 4; p++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * p));
                lo[p] = _mm256_and_si256(v, m4);
                hi[p] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                /* words 0-3 of each 128-bit lane: sub-block 2p's sums, 4-7: 2p+1's (packs) */
                sw[p] = _mm256_shuffle_epi8(scy, _mm256_broadcastsi128_si256(_mm_setr_epi8(
                    4 * p, 4 * p + 1, 4 * p, 4 * p + 1, 4 * p, 4 * p + 1, 4 * p, 4 * p + 1,
                    4 * p + 2, 4 * p + 3, 4 * p + 2, 4 * p + 3, 4 * p + 2, 4 * p + 3, 4 * p + 2, 4 * p + 3)));
            }
            const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)&u[2]));
            const __m128 dx = _mm_set1_ps(f16_to_f32(x[i].d)), dmx = _mm_set1_ps(f16_to_f32(x[i].dmin));
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                __m128i zs[4], ms[4];
                float yd[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const int j = 4 * g + k;
                    if (j < N) {
                        const mu_block_q8_K *y = (const mu_block_q8_K *)(a + (size_t)j * as) + i;
                        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
                        for (int p = 0; p < 4; p++) {
                            const __m256i th = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi[p], _mm256_loadu_si256((const __m256i *)(y->qs + 64 * p + 32)));
                            const __m256i tl = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo[p], _mm256_loadu_si256((const __m256i *)(y->qs + 64 * p)));
                            const __m256i t = _mm256_packs_epi32(tl, th);
                            if (p & 1) s1 = _mm256_dpwssd_epi32(s1, t, sw[p]);
                            else s0 = _mm256_dpwssd_epi32(s0, t, sw[p]);
                        }
                        const __m256i s = _mm256_add_epi32(s0, s1);
                        zs[k] = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                        const __m128i b0 = _mm_loadu_si128((const __m128i *)y->bsums);
                        const __m128i b1 = _mm_loadu_si128((const __m128i *)(y->bsums + 8));
                        ms[k] = _mm_madd_epi16(_mm_hadd_epi16(b0, b1), mins);
                        yd[k] = y->d;
                    } else {
                        zs[k] = ms[k] = _mm_setzero_si128();
                        yd[k] = 0;
                    }
                }
                const __m128i isum = _mm_hadd_epi32(_mm_hadd_epi32(zs[0], zs[1]), _mm_hadd_epi32(zs[2], zs[3]));
                const __m128i imin = _mm_hadd_epi32(_mm_hadd_epi32(ms[0], ms[1]), _mm_hadd_epi32(ms[2], ms[3]));
                const __m128 ydv = _mm_loadu_ps(yd);
                acc[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(dx, ydv), acc[g]);
                accm[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(imin), _mm_mul_ps(dmx, ydv), accm[g]);
            }
        }
        for (int g = 0; g < G; g++) {
            float o[4];
            _mm_storeu_ps(o, _mm_sub_ps(acc[g], accm[g]));
            for (int k = 0; k < 4 && 4 * g + k < N; k++) out[(size_t)(4 * g + k) * os + (size_t)r] = o[k];
        }
    }
}
MU_DOTN_ENTRY(vec_dotn_q4_K_avx512, dotn_q4_K_avx512)

static inline __attribute__((always_inline)) void dotn_q6_K_avx512(const int N, int n, const uint8_t *w, size_t ws,
                                                               int n_w, const uint8_t *a, size_t as, float *out,
                                                               size_t os) {
    const int nb = n / MU_QK_K;
    for (int r = 0; r < n_w; r++) {
        const mu_block_q6_K *x = (const mu_block_q6_K *)(w + (size_t)r * ws);
        __m256 acc[MU_DOTN_MAX];
        for (int j = 0; j < N; j++) acc[j] = _mm256_setzero_ps();
        for (int i = 0; i < nb; i++) {
            q6k_dec dec;
            q6k_decode(&x[i], &dec);
            const float dx = f16_to_f32(x[i].d);
#pragma GCC unroll 16
            for (int j = 0; j < N; j++) {
                const mu_block_q8_K *y = (const mu_block_q8_K *)(a + (size_t)j * as) + i;
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dx), _mm256_cvtepi32_ps(q6k_sumi(&dec, y)), acc[j]);
            }
        }
        for (int j = 0; j < N; j++) out[(size_t)j * os + (size_t)r] = hsum_ps256(acc[j]);
    }
}
MU_DOTN_ENTRY(vec_dotn_q6_K_avx512, dotn_q6_K_avx512)

/* ---- Q8_0 --------------------------------------------------------------- */

/* |x| (unsigned) times y with x's sign: exact for any x, y != -128. */
static inline __m256i q8_0_dot(const mu_block_q8_0 *x, const int8_t *yq) {
    const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
    const __m256i qy = _mm256_loadu_si256((const __m256i *)yq);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
}

/* ref: one 8-lane FMA accumulator over the blocks, lanes summed as hsum8. */
static float vec_dot_q8_0_avx512(int n, const void *w, const void *a) {
    const mu_block_q8_0 *x = w, *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q8_0_dot(&x[i], y[i].qs)), acc);
    }
    return hsum_ps256(acc);
}

/* vec_dot_q8_0_avx512 for n_w weight rows and N activation rows, each
 * result with vec_dot's bits: per block the same integer lane sums, the
 * same scale product dx * dy (a float multiply, here 8 rows' in one vector
 * op), the same FMA into an 8-lane accumulator, the same hsum at the end.
 * The integer sums come another way, exactly: the activation codes are
 * prepared once per call as unsigned bytes y + 128, and vpdpbusd starts
 * from -128 * (the lane's 4 weight codes' sum), made once per weight block,
 * so a row costs one vpdpbusd, a conversion and an FMA per block (no sign
 * trick per row). Equal to the sign trick's sums for activation codes
 * -127..127, all that the Q8_0 quantizer makes of finite values; a call
 * whose rows hold a -128 takes the sign trick (dotn_q8_0_has_m128). Weight
 * rows go in pairs through one zmm (dotn_q8_0_chunk2_avx512: each
 * vector op does two rows' work), an odd last one alone (this chunk
 * kernel). Blocks go in chunks of DOTN_Q8_CH: a row that fits in one keeps
 * its accumulators in registers over all n_w weight rows; longer rows go
 * 16 weight rows at a time, their accumulators kept in memory between
 * chunks (stored and reloaded: the same values). From 2 activation rows on
 * (the sign trick per row only for one, or for rows with a -128). */
#define DOTN_Q8_CH 64
#define DOTN_Q8_RG 16
static inline __attribute__((always_inline)) void dotn_q8_0_chunk_avx512(
    const int N, const mu_block_q8_0 *x, int cn, const uint8_t (*u)[DOTN_Q8_CH * MU_QK8_0],
    const float (*dyT)[MU_DOTN_MAX], __m256 *acc) {
    float pr[DOTN_Q8_CH][MU_DOTN_MAX] __attribute__((aligned(64)));
    const __mmask16 m = (__mmask16)((1u << N) - 1); /* rows >= N: lanes neither read nor used */
    for (int i = 0; i < cn; i++)
        _mm512_store_ps(pr[i], _mm512_mul_ps(_mm512_set1_ps(f16_to_f32(x[i].d)), _mm512_maskz_load_ps(m, dyT[i])));
    const __m256i b128 = _mm256_set1_epi8((char)0x80);
    __m256 ac[MU_DOTN_MAX];
    for (int j = 0; j < N; j++) ac[j] = acc[j];
    for (int i = 0; i < cn; i++) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i nc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), b128, qx));
#pragma GCC unroll 16
        for (int j = 0; j < N; j++) {
            const __m256i s = _mm256_dpbusd_epi32(nc, _mm256_load_si256((const __m256i *)(u[j] + i * MU_QK8_0)), qx);
            ac[j] = _mm256_fmadd_ps(_mm256_set1_ps(pr[i][j]), _mm256_cvtepi32_ps(s), ac[j]);
        }
    }
    for (int j = 0; j < N; j++) acc[j] = ac[j];
}
/* The same for two weight rows at once: one zmm holds both rows' block i
 * (row x0 in the low 256 bits, x1 in the high), against activation row j's
 * block broadcast to both halves, so one vpdpbusd, one conversion, one
 * scale product (dx0 | dx1 times dy) and one 16-lane FMA run both rows'
 * 8-lane chains, each lane's operations exactly those of the one-row
 * chunk. acc[j]: row x0's accumulator in the low half, x1's in the high. */
static inline __attribute__((always_inline)) void dotn_q8_0_chunk2_avx512(
    const int N, const mu_block_q8_0 *x0, const mu_block_q8_0 *x1, int cn,
    const uint8_t (*u)[DOTN_Q8_CH * MU_QK8_0], const float (*dyT)[MU_DOTN_MAX], __m512 *acc) {
    const __m512i b128 = _mm512_set1_epi8((char)0x80);
    __m512 ac[MU_DOTN_MAX];
    for (int j = 0; j < N; j++) ac[j] = acc[j];
    for (int i = 0; i < cn; i++) {
        const __m512i qx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0[i].qs)),
                                              _mm256_loadu_si256((const __m256i *)x1[i].qs), 1);
        const __m512i nc = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), b128, qx));
        const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(f16_to_f32(x0[i].d)), _mm256_set1_ps(f16_to_f32(x1[i].d)), 1);
#pragma GCC unroll 16
        for (int j = 0; j < N; j++) {
            const __m512i uj = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(u[j] + i * MU_QK8_0)));
            const __m512i s = _mm512_dpbusd_epi32(nc, uj, qx);
            ac[j] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(dyT[i][j])), _mm512_cvtepi32_ps(s), ac[j]);
        }
    }
    for (int j = 0; j < N; j++) acc[j] = ac[j];
}
static inline __attribute__((always_inline)) void dotn_q8_0_prep_avx512(const int N, const uint8_t *a, size_t as,
                                                                    int c0, int cn,
                                                                    uint8_t (*u)[DOTN_Q8_CH * MU_QK8_0],
                                                                    float (*dyT)[MU_DOTN_MAX]) {
    const __m256i b128 = _mm256_set1_epi8((char)0x80);
    for (int j = 0; j < N; j++) {
        const mu_block_q8_0 *y = (const mu_block_q8_0 *)(a + (size_t)j * as) + c0;
        for (int i = 0; i < cn; i++) {
            _mm256_store_si256((__m256i *)(u[j] + i * MU_QK8_0),
                               _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[i].qs), b128));
            dyT[i][j] = f16_to_f32(y[i].d);
        }
    }
}
/* The sign trick per row, with the activation scales converted once per
 * call: for one activation row (where the prepared path's shared work per
 * block, the weight sums, saves nothing) and for rows holding a -128. */
static inline __attribute__((always_inline)) void dotn_q8_0_few_avx512(const int N, int n, const uint8_t *w,
                                                                   size_t ws, int n_w, const uint8_t *a, size_t as,
                                                                   float *out, size_t os) {
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
                const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, _mm256_sign_epi8(qy, qx));
                const __m256 d = pre ? _mm256_mul_ps(dxv, _mm256_set1_ps(dy[j][i])) : _mm256_set1_ps(dx * f16_to_f32(y->d));
                acc[j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[j]);
            }
        }
        for (int j = 0; j < N; j++) out[(size_t)j * os + (size_t)r] = hsum_ps256(acc[j]);
    }
}
/* Whether an activation row holds the code -128, where the sign trick is
 * not the true product (only non-finite activations make it: the Q8_0
 * quantizer's "integer indefinite", docs/llamacpp-numerics.md); such rows
 * take the sign trick itself, so the result is vec_dot's there too. */
static inline int dotn_q8_0_has_m128(const int N, const uint8_t *a, size_t as, int nb) {
    const __m256i m128 = _mm256_set1_epi8((char)0x80);
    __mmask32 hit = 0;
    for (int j = 0; j < N; j++) {
        const mu_block_q8_0 *y = (const mu_block_q8_0 *)(a + (size_t)j * as);
        for (int i = 0; i < nb; i++) hit |= _mm256_cmpeq_epi8_mask(_mm256_loadu_si256((const __m256i *)y[i].qs), m128);
    }
    return hit != 0;
}
static inline __attribute__((always_inline)) void dotn_q8_0_avx512(const int N, int n, const uint8_t *w, size_t ws,
                                                               int n_w, const uint8_t *a, size_t as, float *out,
                                                               size_t os) {
    const int nb = n / MU_QK8_0;
    if (N < 2 || dotn_q8_0_has_m128(N, a, as, nb)) {
        dotn_q8_0_few_avx512(N, n, w, ws, n_w, a, as, out, os);
        return;
    }
    uint8_t u[MU_DOTN_MAX][DOTN_Q8_CH * MU_QK8_0] __attribute__((aligned(32)));
    float dyT[DOTN_Q8_CH][MU_DOTN_MAX] __attribute__((aligned(64)));
    if (nb <= DOTN_Q8_CH) {
        dotn_q8_0_prep_avx512(N, a, as, 0, nb, u, dyT);
        int r = 0;
        for (; r + 2 <= n_w; r += 2) {
            __m512 acc[MU_DOTN_MAX];
            for (int j = 0; j < N; j++) acc[j] = _mm512_setzero_ps();
            dotn_q8_0_chunk2_avx512(N, (const mu_block_q8_0 *)(w + (size_t)r * ws),
                                    (const mu_block_q8_0 *)(w + (size_t)(r + 1) * ws), nb, u, dyT, acc);
            for (int j = 0; j < N; j++) {
                out[(size_t)j * os + (size_t)r] = hsum_ps256(_mm512_castps512_ps256(acc[j]));
                out[(size_t)j * os + (size_t)r + 1] = hsum_ps256(_mm512_extractf32x8_ps(acc[j], 1));
            }
        }
        for (; r < n_w; r++) {
            __m256 acc[MU_DOTN_MAX];
            for (int j = 0; j < N; j++) acc[j] = _mm256_setzero_ps();
            dotn_q8_0_chunk_avx512(N, (const mu_block_q8_0 *)(w + (size_t)r * ws), nb, u, dyT, acc);
            for (int j = 0; j < N; j++) out[(size_t)j * os + (size_t)r] = hsum_ps256(acc[j]);
        }
        return;
    }
    for (int r0 = 0; r0 < n_w; r0 += DOTN_Q8_RG) {
        const int nr = n_w - r0 < DOTN_Q8_RG ? n_w - r0 : DOTN_Q8_RG;
        /* pairs of weight rows (acc2), an odd last one alone (acc1) */
        __m512 acc2[DOTN_Q8_RG / 2][MU_DOTN_MAX];
        __m256 acc1[MU_DOTN_MAX];
        for (int r = 0; r < nr / 2; r++)
            for (int j = 0; j < N; j++) acc2[r][j] = _mm512_setzero_ps();
        for (int j = 0; j < N; j++) acc1[j] = _mm256_setzero_ps();
        for (int c0 = 0; c0 < nb; c0 += DOTN_Q8_CH) {
            const int cn = nb - c0 < DOTN_Q8_CH ? nb - c0 : DOTN_Q8_CH;
            dotn_q8_0_prep_avx512(N, a, as, c0, cn, u, dyT);
            for (int r = 0; r < nr / 2; r++)
                dotn_q8_0_chunk2_avx512(N, (const mu_block_q8_0 *)(w + (size_t)(r0 + 2 * r) * ws) + c0,
                                        (const mu_block_q8_0 *)(w + (size_t)(r0 + 2 * r + 1) * ws) + c0, cn, u, dyT,
                                        acc2[r]);
            if (nr % 2)
                dotn_q8_0_chunk_avx512(N, (const mu_block_q8_0 *)(w + (size_t)(r0 + nr - 1) * ws) + c0, cn, u, dyT, acc1);
        }
        for (int r = 0; r < nr / 2; r++)
            for (int j = 0; j < N; j++) {
                out[(size_t)j * os + (size_t)(r0 + 2 * r)] = hsum_ps256(_mm512_castps512_ps256(acc2[r][j]));
                out[(size_t)j * os + (size_t)(r0 + 2 * r + 1)] = hsum_ps256(_mm512_extractf32x8_ps(acc2[r][j], 1));
            }
        for (int j = 0; nr % 2 && j < N; j++) out[(size_t)j * os + (size_t)(r0 + nr - 1)] = hsum_ps256(acc1[j]);
    }
}
MU_DOTN_ENTRY(vec_dotn_q8_0_avx512, dotn_q8_0_avx512)

/* ---- NVFP4 --------------------------------------------------------------- */

/* the 8 lane sums of one half of an NVFP4 block (codes c) against a Q8_0
 * block, with the sign trick (exact unless an activation is -128, where it
 * is what llama.cpp and the ref compute) */
static inline __m256 nvfp4_half(__m256i c, const mu_block_q8_0 *yb) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)yb->qs);
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(c, c), _mm256_sign_epi8(qy, c)));
}

/* ref: one 8-lane FMA accumulator, two steps per block, hsum8. */
static float vec_dot_nvfp4_avx512(int n, const void *w, const void *a) {
    const mu_block_nvfp4 *x = w;
    const mu_block_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    __m256i c[2];
    __m256 s[2];
    for (int i = 0; i < n / MU_QK_NVFP4; i++) {
        nvfp4_codes(&x[i], c);
        nvfp4_lane_scales(&x[i], y[2 * i].d, y[2 * i + 1].d, s);
        acc = _mm256_fmadd_ps(s[0], nvfp4_half(c[0], &y[2 * i]), acc);
        acc = _mm256_fmadd_ps(s[1], nvfp4_half(c[1], &y[2 * i + 1]), acc);
    }
    return hsum_ps256(acc);
}

/* Two rows against one activation row (decode). One zmm holds the same half
 * of a block for both rows (row 0 in the low 256 bits, row 1 in the high),
 * against the activation block broadcast to both, so one 16-lane FMA runs
 * both rows' 8-lane chains, each exactly the ref's. */
static void vec_dot2_nvfp4_avx512(int n, const void *w0, const void *w1, const void *a, float out[2]) {
    const mu_block_nvfp4 *x0 = w0, *x1 = w1;
    const mu_block_q8_0 *y = a;
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)mu_fp4_codes));
    const __m512i m4 = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
    /* 128-bit lanes per row: (sub 0 | sub 1 as unpacklo/unpackhi of bytes 0-15), then bytes 16-31 */
    const __m512i h0 = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), h1 = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    const __m512i s0i = _mm512_set_epi32(5, 5, 5, 5, 4, 4, 4, 4, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i s1i = _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 3, 3, 3, 3, 2, 2, 2, 2);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n / MU_QK_NVFP4; i++) {
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0[i].qs)),
                                             _mm256_loadu_si256((const __m256i *)x1[i].qs), 1);
        const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        const __m512i ul = _mm512_unpacklo_epi64(lo, hi), uh = _mm512_unpackhi_epi64(lo, hi);
        __m512 p[2];
        for (int h = 0; h < 2; h++) {
            const __m512i c = _mm512_shuffle_epi8(tbl, _mm512_permutex2var_epi64(ul, h ? h1 : h0, uh));
            const __m512i ya = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)y[2 * i + h].qs));
            const __m512i sy = _mm512_mask_sub_epi8(ya, _mm512_movepi8_mask(c), zero, ya); /* the sign trick */
            p[h] = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, _mm512_abs_epi8(c), sy));
        }
        /* scales: lanes 0-3 row 0's sub-blocks, 4-7 row 1's, times [dy0 dy0 dy1 dy1] */
        uint32_t u0, u1;
        memcpy(&u0, x0[i].d, 4);
        memcpy(&u1, x1[i].d, 4);
        const __m256i v = _mm256_cvtepu8_epi32(_mm_insert_epi32(_mm_cvtsi32_si128((int)u0), (int)u1, 1));
        const __m256i xv = _mm256_and_si256(v, _mm256_set1_epi32(0x7f));
        const __m256 nrm = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(xv, 20), _mm256_set1_epi32(119 << 23)));
        const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(7))), _mm256_set1_ps(0x1p-10f));
        const __m256i is_sub = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x78)), _mm256_setzero_si256());
        __m256 sc = _mm256_blendv_ps(nrm, sub, _mm256_castsi256_ps(is_sub));
        sc = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, _mm256_set1_epi32(0x7f))), sc);
        const __m128 dy =
            _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)(y[2 * i + 1].d * 0x10001u), (int)(y[2 * i].d * 0x10001u)));
        const __m512 sd = _mm512_castps256_ps512(_mm256_mul_ps(sc, _mm256_set_m128(dy, dy)));
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(s0i, sd), p[0], acc);
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(s1i, sd), p[1], acc);
    }
    out[0] = hsum_ps256(_mm512_castps512_ps256(acc));
    out[1] = hsum_ps256(_mm512_extractf32x8_ps(acc, 1));
}

/* ---- F32 / F16 / BF16 --------------------------------------------------- */

/* ref (ggml_vec_dot_f32): 4 accumulators of 16 lanes over steps of 64,
 * combined 0+2, 1+3, then the two, hsum16 in float; rows with a tail
 * (n % 64) take the ref's own code. */
static float vec_dot_f32_avx512(int n, const void *w, const void *a) {
    if (n % 64) return mu_vec_dot_f32_ref(n, w, a);
    const float *x = w, *y = a;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int i = 0; i < n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), s3);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
}

/* ref vec_dot_batch (tinyBLAS F32): one 16-lane FMA accumulator, hsum16. */
static float vec_dot_f32_batch_avx512(int n, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc);
    return _mm512_reduce_add_ps(acc);
}

static inline __m512 f16x16_mask(const mu_f16 *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* ref (ggml_vec_dot_f16): 4 accumulators of 16 lanes over steps of 64,
 * combined (0+2, 1+3, then the two), reduced as hsum16 (which is what
 * _mm512_reduce_add_ps computes), the tail added in double. A product of two
 * F16 values is exact in float, so the FMA rounds like the ref's add. */
static float vec_dot_f16_avx512(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64) {
        s0 = _mm512_fmadd_ps(f16x16(x + i), f16x16(y + i), s0);
        s1 = _mm512_fmadd_ps(f16x16(x + i + 16), f16x16(y + i + 16), s1);
        s2 = _mm512_fmadd_ps(f16x16(x + i + 32), f16x16(y + i + 32), s2);
        s3 = _mm512_fmadd_ps(f16x16(x + i + 48), f16x16(y + i + 48), s3);
    }
    s0 = _mm512_add_ps(s0, s2);
    s1 = _mm512_add_ps(s1, s3);
    double s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    for (int i = np; i < n; i++) s += (double)(f16_to_f32(x[i]) * f16_to_f32(y[i]));
    return (float)s;
}

/* ref vec_dot_batch (llamafile tinyBLAS): one 16-lane accumulator, hsum16. */
static float vec_dot_f16_batch_avx512(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(f16x16(x + i), f16x16(y + i), acc);
    return _mm512_reduce_add_ps(acc);
}

/* vec_dot_f16_avx512 for n_w weight rows and N activation rows: the
 * weight's 64 values per step are converted once for up to 4 activation
 * rows (4 accumulators each fill 16 of the 32 zmm), each row then summed
 * in vec_dot's order. */
static inline __attribute__((always_inline)) void dotn_f16_g_avx512(const int G, int n, const mu_f16 *x,
                                                                const uint8_t *a, size_t as, float *out, size_t os) {
    __m512 s[4][4];
    for (int j = 0; j < G; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = _mm512_setzero_ps();
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64) {
        const __m512 x0 = f16x16(x + i), x1 = f16x16(x + i + 16), x2 = f16x16(x + i + 32), x3 = f16x16(x + i + 48);
#pragma GCC unroll 4
        for (int j = 0; j < G; j++) {
            const mu_f16 *y = (const mu_f16 *)(a + (size_t)j * as);
            s[j][0] = _mm512_fmadd_ps(x0, f16x16(y + i), s[j][0]);
            s[j][1] = _mm512_fmadd_ps(x1, f16x16(y + i + 16), s[j][1]);
            s[j][2] = _mm512_fmadd_ps(x2, f16x16(y + i + 32), s[j][2]);
            s[j][3] = _mm512_fmadd_ps(x3, f16x16(y + i + 48), s[j][3]);
        }
    }
    for (int j = 0; j < G; j++) {
        const mu_f16 *y = (const mu_f16 *)(a + (size_t)j * as);
        double t = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[j][0], s[j][2]), _mm512_add_ps(s[j][1], s[j][3])));
        for (int i = np; i < n; i++) t += (double)(f16_to_f32(x[i]) * f16_to_f32(y[i]));
        out[(size_t)j * os] = (float)t;
    }
}
static inline __attribute__((always_inline)) void dotn_f16_avx512(const int N, int n, const uint8_t *w, size_t ws,
                                                              int n_w, const uint8_t *a, size_t as, float *out,
                                                              size_t os) {
    for (int r = 0; r < n_w; r++) {
        const mu_f16 *x = (const mu_f16 *)(w + (size_t)r * ws);
        float *o = out + r;
        int j = 0;
        for (; j + 4 <= N; j += 4) dotn_f16_g_avx512(4, n, x, a + (size_t)j * as, as, o + (size_t)j * os, os);
        if (N % 4) dotn_f16_g_avx512(N % 4, n, x, a + (size_t)j * as, as, o + (size_t)j * os, os);
    }
}
MU_DOTN_ENTRY(vec_dotn_f16_avx512, dotn_f16_avx512)

/* ref (ggml_vec_dot_bf16 with AVX512BF16): VDPBF16PS itself, whose
 * rounding, DAZ and FTZ the ref emulates: two accumulators (elements 0..31
 * and 32..63 of every 64), each reduced in float, added in double, the tail
 * in double. */
static inline __m512bh bf16x32(const mu_bf16 *p) { return (__m512bh)_mm512_loadu_si512(p); }

static float vec_dot_bf16_avx512(int n, const void *w, const void *a) {
    const mu_bf16 *x = w, *y = a;
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64) {
        c0 = _mm512_dpbf16_ps(c0, bf16x32(x + i), bf16x32(y + i));
        c1 = _mm512_dpbf16_ps(c1, bf16x32(x + i + 32), bf16x32(y + i + 32));
    }
    double s = (double)_mm512_reduce_add_ps(c0);
    s += (double)_mm512_reduce_add_ps(c1);
    for (int i = np; i < n; i++) s += (double)(mu_bf16_to_f32(x[i]) * mu_bf16_to_f32(y[i]));
    return (float)s;
}

/* ref vec_dot_batch (tinyBLAS BF16, KN 32): one accumulator; n % 32 != 0
 * falls back to vec_dot as in the ref. */
static float vec_dot_bf16_batch_avx512(int n, const void *w, const void *a) {
    if (n % 32) return vec_dot_bf16_avx512(n, w, a);
    const mu_bf16 *x = w, *y = a;
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 32) acc = _mm512_dpbf16_ps(acc, bf16x32(x + i), bf16x32(y + i));
    return _mm512_reduce_add_ps(acc);
}

/* ---- Q8_K activation quantizer (bit-identical to kern_ref.c) ------------ */

static void quant_q8_K_avx512(const float *x, void *vy, int n) {
    mu_block_q8_K *y = vy;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float *xb = x + i * MU_QK_K;
        __m512 m = _mm512_setzero_ps();
        __mmask16 bad = 0;
        const __m512 inf = _mm512_set1_ps(INFINITY);
        for (int k = 0; k < 16; k++) {
            const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * k));
            m = _mm512_max_ps(m, a);
            bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ); /* NaN or inf */
        }
        if (bad) { /* non-finite: the ref defines it */
            mu_quant_q8_K_ref(xb, &y[i], MU_QK_K);
            continue;
        }
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the ref takes the first element of largest magnitude, with its sign */
        float max = 0;
        const __m512 va = _mm512_set1_ps(amax);
        for (int k = 0; k < 16; k++) {
            const __mmask16 hit = _mm512_cmpeq_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + 16 * k)), va);
            if (hit) {
                max = xb[16 * k + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        if (isinf(iscale)) { /* |max| below ~3.7e-37: products overflow, the ref defines them */
            mu_quant_q8_K_ref(xb, &y[i], MU_QK_K);
            continue;
        }
        const __m512 mul = _mm512_set1_ps(iscale);
        const __m512i lim = _mm512_set1_epi32(127);
        for (int k = 0; k < 16; k++) {
            const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + 16 * k), mul);
            const __m512i q = _mm512_min_epi32(_mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lim);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * k), _mm512_cvtsepi32_epi8(q));
            y[i].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1.f / iscale;
    }
}

void mu_kern_fill_avx512(mu_kern *k) {
    k->vec_dot[MU_T_F32] = vec_dot_f32_avx512;
    k->vec_dot[MU_T_F16] = vec_dot_f16_avx512;
    k->vec_dot[MU_T_BF16] = vec_dot_bf16_avx512;
    k->vec_dot[MU_T_Q8_0] = vec_dot_q8_0_avx512;
    k->vec_dotn[MU_T_Q8_0] = vec_dotn_q8_0_avx512;
    k->vec_dotn[MU_T_Q4_K] = vec_dotn_q4_K_avx512;
    k->vec_dotn[MU_T_Q6_K] = vec_dotn_q6_K_avx512;
    k->vec_dotn[MU_T_F16] = vec_dotn_f16_avx512;
    k->vec_dot[MU_T_Q4_K] = vec_dot_q4_K_avx512;
    k->vec_dot[MU_T_Q6_K] = vec_dot_q6_K_avx512;
    k->vec_dot[MU_T_NVFP4] = vec_dot_nvfp4_avx512;
    k->vec_dot2[MU_T_NVFP4] = vec_dot2_nvfp4_avx512;
    k->vec_dot2[MU_T_Q4_K] = vec_dot2_q4_K_avx512;
    k->vec_dot2[MU_T_Q6_K] = vec_dot2_q6_K_avx512;
    k->vec_dot_batch[MU_T_F16] = vec_dot_f16_batch_avx512;
    k->vec_dot_batch[MU_T_F32] = vec_dot_f32_batch_avx512;
    k->vec_dot_batch[MU_T_BF16] = vec_dot_bf16_batch_avx512;
    k->vec_dot_batch[MU_T_Q4_K] = vec_dot_q4_K_batch_avx512;
    k->quant[MU_T_Q8_K] = quant_q8_K_avx512;
}
