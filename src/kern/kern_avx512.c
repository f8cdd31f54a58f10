/* kern_avx512.c: the AVX-512 (F, BW, VL, DQ, VNNI, BF16) kernel table.
 * Owns: 512-bit dots for the hot weight types (Q4_K, Q6_K, Q8_0, F16, F32,
 * BF16), the Q8_K activation quantizer, and the tiled matrix-matrix kernels
 * (gemm) used by prefill. Entries not set here keep the AVX2 ones (the table
 * arrives as a copy of the AVX2 table).
 * Does not own: numerics (kern_ref.c). kern_ref.c spells out llama.cpp's x86
 * summation orders, and every entry here reproduces them bit for bit (the
 * integer parts of the quantized dots in any order, the float steps in
 * exactly the ref's order; BF16 with VDPBF16PS, which the ref emulates).
 * Key design choice: one zmm holds two 32-value sub-blocks of a K-quant block
 * in natural order, so the Q8_K activations load straight from their block;
 * per-sub-block scales are applied with vpdpwssd (VNNI) on the 16-bit pair
 * products, and floats appear only once per 256-value block. The gemm kernels
 * decode a weight block once into registers and reuse it for a tile of
 * activation rows, which is what makes prefill compute-bound instead of
 * decode-bound. Decode reads Q4_K / Q6_K rows in pairs (vec_dot2) with a
 * linear software prefetch, see dot2_pf_base. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kern.h"
#include "simd_x86.h"

/* ---- helpers ----------------------------------------------------------- */

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

static inline __m512 f16x16(const mu_f16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
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
        for (int k = 0; k < 16; k++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * k)));
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

/* ---- gemm: tiles of weight rows x activation rows ------------------------
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
#define AI __attribute__((always_inline)) static inline

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

/* r[k] lane e = X[k][e] (16 x 16 dwords) -> o[e] lane k = X[k][e]. */
AI void transpose16_epi32(const __m512i r[16], __m512i o[16]) {
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
                    vec_dot_q4_K_avx512(n, (const uint8_t *)w + (size_t)rr * ws, (const uint8_t *)a + (size_t)t * as);
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
                vec_dot_q4_K_avx512(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}
#define tile_q6_K_b tile_q6_K
GEMM(q6_K_b, mu_block_q6_K, n / MU_QK_K)

/* Q6_K, two weight rows per zmm: the low 256 bits hold chunk c (32 values)
 * of row r, the high 256 bits chunk c of row r + 1, so one broadcast of an
 * activation chunk serves both, and the ref's 8 lanes of each row sit in
 * the halves without a fold. Rows go in fours (two zmm pairs) against
 * register tiles of Q6K_VT activation rows; a pair's blocks are decoded
 * once per token block into q6k_pblock scratch. The 4-byte dots of two
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
static void gemm_q6_K_avx512(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                             float *y, int ys) {
    const int nb = n / MU_QK_K;
    const int r4 = r0 + (r1 - r0) / 4 * 4;
    if (nb > Q6K_P_MAX_NB || n_t < 2) {
        gemm_q6_K_b_avx512(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    static _Thread_local q6k_pblock pb[2][Q6K_P_MAX_NB];
    /* token blocks whose activations stay in L2 while the rows sweep them */
    int tb = (int)((192u << 10) / ((unsigned)nb * sizeof(mu_block_q8_K)));
    tb = tb < 4 * Q6K_VT ? 4 * Q6K_VT : tb / Q6K_VT * Q6K_VT;
    for (int t0 = 0; t0 < n_t; t0 += tb) {
        const int t1 = t0 + tb < n_t ? t0 + tb : n_t;
        for (int r = r0; r < r4; r += 4) {
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * ws;
            for (int i = 0; i < nb; i++) {
                q6k_pbuild((const mu_block_q6_K *)wr + i, (const mu_block_q6_K *)(wr + ws) + i, &pb[0][i]);
                q6k_pbuild((const mu_block_q6_K *)(wr + 2 * ws) + i, (const mu_block_q6_K *)(wr + 3 * ws) + i, &pb[1][i]);
            }
            int t = t0;
            for (; t + Q6K_VT <= t1; t += Q6K_VT)
                q6k_ptile(nb, pb[0], pb[1], (const uint8_t *)a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, Q6K_VT);
            const uint8_t *at = (const uint8_t *)a + (size_t)t * as;
            float *yt = y + (size_t)t * ys + r;
            switch (t1 - t) {
            case 5: q6k_ptile(nb, pb[0], pb[1], at, as, yt, ys, 5); break;
            case 4: q6k_ptile(nb, pb[0], pb[1], at, as, yt, ys, 4); break;
            case 3: q6k_ptile(nb, pb[0], pb[1], at, as, yt, ys, 3); break;
            case 2: q6k_ptile(nb, pb[0], pb[1], at, as, yt, ys, 2); break;
            case 1: q6k_ptile(nb, pb[0], pb[1], at, as, yt, ys, 1); break;
            default: break;
            }
        }
    }
    if (r4 < r1) gemm_q6_K_b_avx512(n, w, ws, r4, r1, a, as, n_t, y, ys);
}
GEMM(q8_0, mu_block_q8_0, n / MU_QK8_0)
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
                vec_dot_f16_avx512(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}

static void gemm_fill(mu_kern *k) {
    k->gemm[MU_T_Q4_K] = gemm_q4_K_avx512;
    k->gemm[MU_T_Q6_K] = gemm_q6_K_avx512;
    k->gemm[MU_T_Q8_0] = gemm_q8_0_avx512;
    k->gemm[MU_T_F16] = gemm_f16_avx512;
}

void mu_kern_fill_avx512(mu_kern *k) {
    k->vec_dot[MU_T_F32] = vec_dot_f32_avx512;
    k->vec_dot[MU_T_F16] = vec_dot_f16_avx512;
    k->vec_dot[MU_T_BF16] = vec_dot_bf16_avx512;
    k->vec_dot[MU_T_Q8_0] = vec_dot_q8_0_avx512;
    k->vec_dot[MU_T_Q4_K] = vec_dot_q4_K_avx512;
    k->vec_dot[MU_T_Q6_K] = vec_dot_q6_K_avx512;
    k->vec_dot2[MU_T_Q4_K] = vec_dot2_q4_K_avx512;
    k->vec_dot2[MU_T_Q6_K] = vec_dot2_q6_K_avx512;
    k->vec_dot_batch[MU_T_F16] = vec_dot_f16_batch_avx512;
    k->vec_dot_batch[MU_T_F32] = vec_dot_f32_batch_avx512;
    k->vec_dot_batch[MU_T_BF16] = vec_dot_bf16_batch_avx512;
    k->vec_dot_batch[MU_T_Q4_K] = vec_dot_q4_K_batch_avx512;
    k->quant[MU_T_Q8_K] = quant_q8_K_avx512;
    gemm_fill(k);
}
