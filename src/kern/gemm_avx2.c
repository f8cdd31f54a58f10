/* gemm_avx2.c: the AVX2 table's matrix-matrix kernels (prefill).
 * Owns: the gemm entries (Q4_K, Q6_K, Q8_0, F16, NVFP4) and the batch-path dots
 * (vec_dot_batch) of Q4_K, F32 and F16 of the AVX2 table, in the rounding
 * kern_ref.c defines, bit for bit (the integer parts of the quantized dots
 * in any order, the float steps in exactly the ref's order).
 * Does not: decide which rows take which path (forward.c), or own the BF16
 * dots (kern_avx2.c, with the other vec_dot entries).
 * Key design choice: Q4_K runs "vertically": 8 weight rows are interleaved
 * in 4-byte groups (lane r of a ymm = 4 codes of row r), so vpmaddubsw with
 * 4 activation bytes broadcast gives 8 row dots in 8 lanes and no horizontal
 * sums are needed; a sub-block's 8 steps are summed in int16 (|sum| <= 8 * 2
 * * 15 * 128 < 2^15) and scaled once by vpmaddwd. Q6_K, Q8_0 and NVFP4 run
 * "horizontally" (one row's block in natural order, whose 8 int32 lanes are
 * exactly the ref's 8 lanes) over register tiles of rows x activation rows. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kern.h"
#include "simd_x86.h"

#define AI static inline __attribute__((always_inline))

/* ---- helpers ----------------------------------------------------------- */

static inline __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* [imin_0..3]: mn[2j] * (bsums[4j] + bsums[4j+1]) + mn[2j+1] * (bsums[4j+2] + bsums[4j+3]) */
static inline __m128i k4_mins_dot(const uint32_t u[4], const int16_t *bsums) {
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)&u[2]));
    const __m128i b0 = _mm_loadu_si128((const __m128i *)bsums);
    const __m128i b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    return _mm_madd_epi16(_mm_hadd_epi16(b0, b1), mins);
}

/* The table's own vec_dot entries (set by kern_avx2.c before this fill). */
static mu_vec_dot_fn dot_q4_K, dot_q6_K, dot_q8_0, dot_f16;

/* ---- Q4_K batch dot (the repack gemm's per-64 order) -------------------- */

/* [isum_0..3] of one block: isum_j = sc[2j] * (lo_j . q8) + sc[2j+1] * (hi_j . q8) */
static inline __m128i q4k_pair_sums(const mu_block_q4_K *x, const uint8_t *sc, const int8_t *q8) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i z[4];
    #pragma GCC unroll 8
    for (int j = 0; j < 4; j++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
        const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)));
        const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)));
        z[j] = _mm256_add_epi32(_mm256_madd_epi16(pl, _mm256_set1_epi16(sc[2 * j])),
                                _mm256_madd_epi16(ph, _mm256_set1_epi16(sc[2 * j + 1])));
    }
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(z[0], z[1]), _mm256_hadd_epi32(z[2], z[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

static float vec_dot_q4_K_batch_avx2(int n, const void *w, const void *act) {
    const mu_block_q4_K *x = w;
    const mu_block_q8_K *y = act;
    float acc = 0, accm = 0;
    uint32_t u[4];
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d = f16_to_f32(x[i].d) * y[i].d, dm = f16_to_f32(x[i].dmin) * y[i].d;
        k4_scales(x[i].scales, u);
        int32_t is[4], im[4];
        _mm_storeu_si128((__m128i *)is, q4k_pair_sums(&x[i], (const uint8_t *)u, y[i].qs));
        _mm_storeu_si128((__m128i *)im, k4_mins_dot(u, y[i].bsums));
        #pragma GCC unroll 8
        for (int j = 0; j < 4; j++) {
            acc = fmaf((float)is[j], d, acc);
            accm = fmaf((float)im[j], dm, accm);
        }
    }
    return acc - accm;
}

/* ---- Q4_K gemm: 8 rows interleaved -------------------------------------- */

typedef struct {
    __m256i w[8][8];       /* [sub-block][step of 4 codes]: lane r = row r's codes (0..15) */
    uint32_t sc[8][8];     /* [sub-block][row]: scale as two equal int16 */
    uint32_t mn[4][8];     /* [pair][row]: (mn[2j], mn[2j+1]) as int16 */
    float dx[8], dmx[8];   /* per row d and dmin */
} q4k_vb;

/* 8x8 dword transpose: r[k] lane e -> o[e] lane k */
AI void transpose8_epi32(const __m256i r[8], __m256i o[8]) {
    __m256i a[8], b[8];
    #pragma GCC unroll 8
    for (int g = 0; g < 2; g++) {
        const __m256i a0 = _mm256_unpacklo_epi32(r[4 * g], r[4 * g + 1]), a1 = _mm256_unpackhi_epi32(r[4 * g], r[4 * g + 1]);
        const __m256i a2 = _mm256_unpacklo_epi32(r[4 * g + 2], r[4 * g + 3]),
                      a3 = _mm256_unpackhi_epi32(r[4 * g + 2], r[4 * g + 3]);
        a[4 * g + 0] = _mm256_unpacklo_epi64(a0, a2); /* rows 4g..4g+3, element 0 (lane 0) / 4 (lane 1) */
        a[4 * g + 1] = _mm256_unpackhi_epi64(a0, a2); /* element 1 / 5 */
        a[4 * g + 2] = _mm256_unpacklo_epi64(a1, a3); /* element 2 / 6 */
        a[4 * g + 3] = _mm256_unpackhi_epi64(a1, a3); /* element 3 / 7 */
    }
    #pragma GCC unroll 8
    for (int e = 0; e < 4; e++) {
        b[e] = _mm256_permute2x128_si256(a[e], a[4 + e], 0x20);
        b[4 + e] = _mm256_permute2x128_si256(a[e], a[4 + e], 0x31);
    }
    #pragma GCC unroll 8
    for (int e = 0; e < 8; e++) o[e] = b[e];
}

/* Block i of rows rows[0..7] (pointers to the rows' block arrays) into the
 * interleaved layout. */
static void q4k_vbuild(const mu_block_q4_K *const rows[8], int i, q4k_vb *o) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    #pragma GCC unroll 8
    for (int p = 0; p < 4; p++) {
        __m256i r[8], t[8];
        #pragma GCC unroll 8
        for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_si256((const __m256i *)(rows[k][i].qs + 32 * p));
        transpose8_epi32(r, t);
        #pragma GCC unroll 8
        for (int st = 0; st < 8; st++) {
            o->w[2 * p][st] = _mm256_and_si256(t[st], m4);
            o->w[2 * p + 1][st] = _mm256_and_si256(_mm256_srli_epi16(t[st], 4), m4);
        }
    }
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const mu_block_q4_K *b = &rows[k][i];
        uint32_t u[4];
        k4_scales(b->scales, u);
        const uint8_t *sc = (const uint8_t *)u, *mn = sc + 8;
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) o->sc[s][k] = (uint32_t)sc[s] * 0x10001u;
        #pragma GCC unroll 8
        for (int j = 0; j < 4; j++) o->mn[j][k] = (uint32_t)mn[2 * j] | (uint32_t)mn[2 * j + 1] << 16;
        o->dx[k] = f16_to_f32(b->d);
        o->dmx[k] = f16_to_f32(b->dmin);
    }
}

/* (bsums[4j] + bsums[4j+1]) | (bsums[4j+2] + bsums[4j+3]) << 16, j = 0..3 */
static inline void q8k_pair_bsums(const mu_block_q8_K *b, int32_t pr[4]) {
    const __m128i h = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)b->bsums),
                                     _mm_loadu_si128((const __m128i *)(b->bsums + 8)));
    _mm_storeu_si128((__m128i *)pr, h);
}

/* One step of 4 codes for 4 activation rows: sa[t] += maddubs(wa, the 4
 * bytes at q_t broadcast), sb[t] likewise with the bytes 32 further. Written
 * in asm because GCC rotated the eight accumulators through extra register
 * moves (and a spill), which made this loop front-end bound. */
AI void q4k_step4(__m256i wa, __m256i wb, const int8_t *q0, const int8_t *q1, const int8_t *q2, const int8_t *q3,
                  __m256i sa[], __m256i sb[]) {
    __asm__("vpbroadcastd (%[p0]), %%ymm14\n\t"
            "vpbroadcastd 32(%[p0]), %%ymm15\n\t"
            "vpmaddubsw %%ymm14, %[wa], %%ymm14\n\t"
            "vpmaddubsw %%ymm15, %[wb], %%ymm15\n\t"
            "vpaddw %%ymm14, %[a0], %[a0]\n\t"
            "vpaddw %%ymm15, %[b0], %[b0]\n\t"
            "vpbroadcastd (%[p1]), %%ymm14\n\t"
            "vpbroadcastd 32(%[p1]), %%ymm15\n\t"
            "vpmaddubsw %%ymm14, %[wa], %%ymm14\n\t"
            "vpmaddubsw %%ymm15, %[wb], %%ymm15\n\t"
            "vpaddw %%ymm14, %[a1], %[a1]\n\t"
            "vpaddw %%ymm15, %[b1], %[b1]\n\t"
            "vpbroadcastd (%[p2]), %%ymm14\n\t"
            "vpbroadcastd 32(%[p2]), %%ymm15\n\t"
            "vpmaddubsw %%ymm14, %[wa], %%ymm14\n\t"
            "vpmaddubsw %%ymm15, %[wb], %%ymm15\n\t"
            "vpaddw %%ymm14, %[a2], %[a2]\n\t"
            "vpaddw %%ymm15, %[b2], %[b2]\n\t"
            "vpbroadcastd (%[p3]), %%ymm14\n\t"
            "vpbroadcastd 32(%[p3]), %%ymm15\n\t"
            "vpmaddubsw %%ymm14, %[wa], %%ymm14\n\t"
            "vpmaddubsw %%ymm15, %[wb], %%ymm15\n\t"
            "vpaddw %%ymm14, %[a3], %[a3]\n\t"
            "vpaddw %%ymm15, %[b3], %[b3]"
            : [a0] "+x"(sa[0]), [a1] "+x"(sa[1]), [a2] "+x"(sa[2]), [a3] "+x"(sa[3]), [b0] "+x"(sb[0]),
              [b1] "+x"(sb[1]), [b2] "+x"(sb[2]), [b3] "+x"(sb[3])
            : [wa] "x"(wa), [wb] "x"(wb), [p0] "r"(q0), [p1] "r"(q1), [p2] "r"(q2), [p3] "r"(q3),
              "m"(*(const int8_t(*)[36])q0), "m"(*(const int8_t(*)[36])q1), "m"(*(const int8_t(*)[36])q2),
              "m"(*(const int8_t(*)[36])q3)
            : "xmm14", "xmm15");
}

/* TN activation rows against the 8 rows of vb, in two passes so that the
 * integer pass keeps only the sub-block sums in registers: (1) isum_j of
 * every block and pair into ib; (2) per activation row, each lane runs the
 * ref's per-64 chains acc = fma(isum_j, d_x * d_a, acc) and accm likewise
 * for the mins. */
#define Q4K_VT_MAX 8
AI void q4k_vtile(int nb, const q4k_vb *vb, const uint8_t *a, size_t as, __m256 out[], __m256i *ib, const int TN) {
    for (int i = 0; i < nb; i++) {
        const q4k_vb *v = &vb[i];
        #pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
            __m256i sa[Q4K_VT_MAX], sb[Q4K_VT_MAX];
            #pragma GCC unroll 8
            for (int t = 0; t < TN; t++) sa[t] = sb[t] = _mm256_setzero_si256();
            if (TN == 4) {
                const int8_t *q0 = ((const mu_block_q8_K *)a + i)->qs + 64 * j;
                const int8_t *q1 = ((const mu_block_q8_K *)(a + as) + i)->qs + 64 * j;
                const int8_t *q2 = ((const mu_block_q8_K *)(a + 2 * as) + i)->qs + 64 * j;
                const int8_t *q3 = ((const mu_block_q8_K *)(a + 3 * as) + i)->qs + 64 * j;
                #pragma GCC unroll 1
                for (int st = 0; st < 8; st++)
                    q4k_step4(v->w[2 * j][st], v->w[2 * j + 1][st], q0 + 4 * st, q1 + 4 * st, q2 + 4 * st,
                              q3 + 4 * st, sa, sb);
            } else {
                #pragma GCC unroll 1
                for (int st = 0; st < 8; st++) {
                    const __m256i wa = v->w[2 * j][st], wb = v->w[2 * j + 1][st];
                    #pragma GCC unroll 8
                    for (int t = 0; t < TN; t++) {
                        const int8_t *q8 = ((const mu_block_q8_K *)(a + (size_t)t * as) + i)->qs + 64 * j + 4 * st;
                        sa[t] = _mm256_add_epi16(sa[t], _mm256_maddubs_epi16(wa, bcast32(q8)));
                        sb[t] = _mm256_add_epi16(sb[t], _mm256_maddubs_epi16(wb, bcast32(q8 + 32)));
                    }
                }
            }
            const __m256i sca = _mm256_load_si256((const __m256i *)v->sc[2 * j]);
            const __m256i scb = _mm256_load_si256((const __m256i *)v->sc[2 * j + 1]);
            #pragma GCC unroll 8
            for (int t = 0; t < TN; t++)
                ib[(4 * i + j) * TN + t] = _mm256_add_epi32(_mm256_madd_epi16(sa[t], sca), _mm256_madd_epi16(sb[t], scb));
        }
    }
    #pragma GCC unroll 1
    for (int t = 0; t < TN; t++) {
        __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
        for (int i = 0; i < nb; i++) {
            const q4k_vb *v = &vb[i];
            const mu_block_q8_K *b = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
            int32_t pr[4];
            q8k_pair_bsums(b, pr);
            const __m256 yd = _mm256_set1_ps(b->d);
            const __m256 d = _mm256_mul_ps(_mm256_load_ps(v->dx), yd), dm = _mm256_mul_ps(_mm256_load_ps(v->dmx), yd);
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ib[(4 * i + j) * TN + t]), d, acc);
                const __m256i im = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)v->mn[j]), _mm256_set1_epi32(pr[j]));
                accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), dm, accm);
            }
        }
        out[t] = _mm256_sub_ps(acc, accm);
    }
}

#ifndef Q4K_VT
#define Q4K_VT 4
#endif
#define Q4K_V_MAX_NB 128
#ifndef Q4K_TB_BYTES
#define Q4K_TB_BYTES (512u << 10)
#endif

static void q4k_store(float *y, int ys, int nr, const __m256 *v, int TN) {
    #pragma GCC unroll 8
    for (int t = 0; t < TN; t++) {
        if (nr == 8) {
            _mm256_storeu_ps(y + (size_t)t * ys, v[t]);
        } else {
            float tmp[8];
            _mm256_storeu_ps(tmp, v[t]);
            memcpy(y + (size_t)t * ys, tmp, (size_t)nr * sizeof(float));
        }
    }
}

/* Rows r..r+nr-1 (nr <= 8; missing rows repeat the last) against n_t rows. */
static void gemm_q4_K_8rows(int n, const uint8_t *w, size_t ws, int r, int nr, const uint8_t *a, size_t as, int n_t,
                            float *y, int ys) {
    const int nb = n / MU_QK_K;
    static _Thread_local q4k_vb vb[Q4K_V_MAX_NB];
    static _Thread_local __m256i ib[Q4K_V_MAX_NB * 4 * Q4K_VT_MAX];
    const mu_block_q4_K *rows[8];
    for (int k = 0; k < 8; k++) rows[k] = (const mu_block_q4_K *)(w + (size_t)(r + (k < nr ? k : nr - 1)) * ws);
    for (int i = 0; i < nb; i++) q4k_vbuild(rows, i, &vb[i]);
    __m256 out[Q4K_VT_MAX];
    int t = 0;
    for (; t + Q4K_VT <= n_t; t += Q4K_VT) {
        q4k_vtile(nb, vb, a + (size_t)t * as, as, out, ib, Q4K_VT);
        q4k_store(y + (size_t)t * ys + r, ys, nr, out, Q4K_VT);
    }
    const uint8_t *at = a + (size_t)t * as;
    const int left = n_t - t;
    switch (left) {
    case 7: q4k_vtile(nb, vb, at, as, out, ib, 7); break;
    case 6: q4k_vtile(nb, vb, at, as, out, ib, 6); break;
    case 5: q4k_vtile(nb, vb, at, as, out, ib, 5); break;
    case 4: q4k_vtile(nb, vb, at, as, out, ib, 4); break;
    case 3: q4k_vtile(nb, vb, at, as, out, ib, 3); break;
    case 2: q4k_vtile(nb, vb, at, as, out, ib, 2); break;
    case 1: q4k_vtile(nb, vb, at, as, out, ib, 1); break;
    default: break;
    }
    if (left > 0) q4k_store(y + (size_t)t * ys + r, ys, nr, out, left);
}

/* A Q4_K gemm call covers a whole matmul of n_t activation rows, rounding as
 * llama.cpp's repack path does: rows below n_t & ~3 in the per-64 order (its
 * gemm), the last n_t % 4 rows as vec_dot (its gemv). */
static void gemm_q4_K_avx2(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    const int nb4 = n_t & ~3;
    const uint8_t *wb = w, *ab = a;
    if (nb4 > 0) {
        if (n / MU_QK_K <= Q4K_V_MAX_NB) {
            /* token blocks whose activations stay in L2 while the rows sweep them */
            int tb = (int)((size_t)Q4K_TB_BYTES / ((size_t)(n / MU_QK_K) * sizeof(mu_block_q8_K)));
            tb = tb < 8 * Q4K_VT ? 8 * Q4K_VT : tb / Q4K_VT * Q4K_VT;
            for (int t0 = 0; t0 < nb4; t0 += tb) {
                const int tn = nb4 - t0 < tb ? nb4 - t0 : tb;
                for (int r = r0; r < r1; r += 8)
                    gemm_q4_K_8rows(n, wb, ws, r, r1 - r < 8 ? r1 - r : 8, ab + (size_t)t0 * as, as, tn,
                                    y + (size_t)t0 * ys, ys);
            }
        } else {
            for (int t = 0; t < nb4; t++)
                for (int r = r0; r < r1; r++)
                    y[(size_t)t * ys + r] = vec_dot_q4_K_batch_avx2(n, wb + (size_t)r * ws, ab + (size_t)t * as);
        }
    }
    for (int t = nb4; t < n_t; t++)
        for (int r = r0; r < r1; r++) y[(size_t)t * ys + r] = dot_q4_K(n, wb + (size_t)r * ws, ab + (size_t)t * as);
}

/* ---- Q6_K gemm: rows x activation rows, the ref's 8 lanes per output ---- */

/* One row's block decoded: chunk c (32 values, activation bytes 32c..) as
 * unsigned codes (+32); its scale words (sc[2c] in the low 128 bits,
 * sc[2c+1] in the high), so vpmaddwd's lane m is the ref's lane m; the
 * -32 * sc correction words for the bsums; d. */
typedef struct {
    __m256i q[8], s[8], corr;
    float d;
} q6k_hb;

static void q6k_hbuild(const mu_block_q6_K *x, q6k_hb *o) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x30);
    const uint8_t *ql = x->ql, *qh = x->qh;
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
        o->q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m3));
        o->q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m3));
        o->q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m3));
        o->q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), m3));
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
        o->s[c] = _mm256_setr_m128i(_mm_set1_epi16(x->scales[2 * c]), _mm_set1_epi16(x->scales[2 * c + 1]));
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    o->corr = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5));
    o->d = f16_to_f32(x->d);
}

/* Rows hb[0..R) (each nb decoded blocks) against TN activation rows, in two
 * passes: the integer lanes of every block into ib (activation codes as
 * memory operands, so only the R x TN sums live in registers), then per
 * output the ref's chain acc = fma(d_a * d_x, lanes, acc) and hsum8. */
#ifndef Q6K_R
#define Q6K_R 2
#endif
#ifndef Q6K_T
#define Q6K_T 4
#endif
#define Q6K_MAX_NB 64
AI void q6k_htile(int nb, const q6k_hb *const hb[], const uint8_t *a, size_t as, float *y, int ys, __m256i *ib,
                  const int R, const int TN) {
    for (int i = 0; i < nb; i++) {
        __m256i sumi[Q6K_R][Q6K_T];
        #pragma GCC unroll 4
        for (int t = 0; t < TN; t++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)((const mu_block_q8_K *)(a + (size_t)t * as) + i)->bsums);
            #pragma GCC unroll 4
            for (int r = 0; r < R; r++) sumi[r][t] = _mm256_madd_epi16(hb[r][i].corr, bs);
        }
        #pragma GCC unroll 1
        for (int c = 0; c < 8; c++) {
            #pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m256i wq = hb[r][i].q[c];
                #pragma GCC unroll 4
                for (int t = 0; t < TN; t++) {
                    const __m256i av = _mm256_loadu_si256(
                        (const __m256i *)(((const mu_block_q8_K *)(a + (size_t)t * as) + i)->qs + 32 * c));
                    sumi[r][t] = _mm256_add_epi32(sumi[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(wq, av), hb[r][i].s[c]));
                }
            }
        }
        #pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            #pragma GCC unroll 4
            for (int t = 0; t < TN; t++) ib[(i * R + r) * TN + t] = sumi[r][t];
    }
    #pragma GCC unroll 1
    for (int t = 0; t < TN; t++)
        #pragma GCC unroll 1
        for (int r = 0; r < R; r++) {
            __m256 acc = _mm256_setzero_ps();
            for (int i = 0; i < nb; i++) {
                const float yd = ((const mu_block_q8_K *)(a + (size_t)t * as) + i)->d;
                acc = _mm256_fmadd_ps(_mm256_set1_ps(yd * hb[r][i].d), _mm256_cvtepi32_ps(ib[(i * R + r) * TN + t]), acc);
            }
            y[(size_t)t * ys + r] = hsum_ps256(acc);
        }
}

/* R rows at r against n_t activation rows. */
AI void q6k_rows(int nb, const uint8_t *w, size_t ws, int r, const uint8_t *a, size_t as, int n_t, float *y, int ys,
                 const int R) {
    static _Thread_local q6k_hb buf[Q6K_R][Q6K_MAX_NB];
    static _Thread_local __m256i ib[Q6K_MAX_NB * Q6K_R * Q6K_T];
    const q6k_hb *hb[Q6K_R];
    for (int k = 0; k < R; k++) {
        const mu_block_q6_K *x = (const mu_block_q6_K *)(w + (size_t)(r + k) * ws);
        for (int i = 0; i < nb; i++) q6k_hbuild(&x[i], &buf[k][i]);
        hb[k] = buf[k];
    }
    int t = 0;
    for (; t + Q6K_T <= n_t; t += Q6K_T)
        q6k_htile(nb, hb, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, ib, R, Q6K_T);
    const uint8_t *at = a + (size_t)t * as;
    float *yt = y + (size_t)t * ys + r;
    switch (n_t - t) {
    case 3: q6k_htile(nb, hb, at, as, yt, ys, ib, R, 3); break;
    case 2: q6k_htile(nb, hb, at, as, yt, ys, ib, R, 2); break;
    case 1: q6k_htile(nb, hb, at, as, yt, ys, ib, R, 1); break;
    default: break;
    }
}

/* Q6_K rounds as vec_dot in every row (llama.cpp does not repack it on x86). */
static void gemm_q6_K_avx2(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    const int nb = n / MU_QK_K;
    const uint8_t *wb = w, *ab = a;
    if (nb > Q6K_MAX_NB || n_t < 2) {
        for (int t = 0; t < n_t; t++)
            for (int r = r0; r < r1; r++) y[(size_t)t * ys + r] = dot_q6_K(n, wb + (size_t)r * ws, ab + (size_t)t * as);
        return;
    }
    /* token blocks whose activations stay in L2 while the rows sweep them */
    int tb = (int)((size_t)Q4K_TB_BYTES / ((size_t)nb * sizeof(mu_block_q8_K)));
    tb = tb < 8 * Q6K_T ? 8 * Q6K_T : tb / Q6K_T * Q6K_T;
    for (int t0 = 0; t0 < n_t; t0 += tb) {
        const int tn = n_t - t0 < tb ? n_t - t0 : tb;
        const uint8_t *at = ab + (size_t)t0 * as;
        float *yt = y + (size_t)t0 * ys;
        int r = r0;
        for (; r + Q6K_R <= r1; r += Q6K_R) q6k_rows(nb, wb, ws, r, at, as, tn, yt, ys, Q6K_R);
        for (; r < r1; r++) q6k_rows(nb, wb, ws, r, at, as, tn, yt, ys, 1);
    }
}

/* ---- F32 / F16 batch dots (llamafile tinyBLAS orders) ------------------- */

static inline __m256 f16x8(const mu_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* ref: one 16-lane FMA accumulator (lanes 0-7, 8-15 in two ymm), hsum16. */
static float vec_dot_f32_batch_avx2(int n, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int i = 0; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), hi);
    }
    return hsum16_ps(lo, hi);
}

/* ref: the same over F16 values (their products are exact in float). */
static float vec_dot_f16_batch_avx2(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int i = 0; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(f16x8(x + i), f16x8(y + i), lo);
        hi = _mm256_fmadd_ps(f16x8(x + i + 8), f16x8(y + i + 8), hi);
    }
    return hsum16_ps(lo, hi);
}

/* ---- F16 gemm (the tinyBLAS order of vec_dot_batch) --------------------- */

#define F16_MAX_N 16384
#define F16_R 3
#define F16_T 2

/* R rows (as floats, n apart) against TN activation rows (F16). */
AI void f16_tile(int n, const float *wf, const uint8_t *a, size_t as, float *y, int ys, const int R, const int TN) {
    __m256 acc[F16_R][F16_T][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TN; t++) acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 16)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256 av[F16_T];
#pragma GCC unroll 4
            for (int t = 0; t < TN; t++) av[t] = f16x8((const mu_f16 *)(a + (size_t)t * as) + i + 8 * h);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m256 wv = _mm256_loadu_ps(wf + (size_t)r * n + i + 8 * h);
#pragma GCC unroll 4
                for (int t = 0; t < TN; t++) acc[r][t][h] = _mm256_fmadd_ps(wv, av[t], acc[r][t][h]);
            }
        }
#pragma GCC unroll 4
    for (int t = 0; t < TN; t++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) y[(size_t)t * ys + r] = hsum16_ps(acc[r][t][0], acc[r][t][1]);
}

AI void f16_rows(int n, const uint8_t *w, size_t ws, int r, const uint8_t *a, size_t as, int n_t, float *y, int ys,
                 const int R) {
    static _Thread_local float wf[F16_R * F16_MAX_N];
    for (int k = 0; k < R; k++) {
        const mu_f16 *x = (const mu_f16 *)(w + (size_t)(r + k) * ws);
        for (int i = 0; i < n; i += 8) _mm256_storeu_ps(wf + (size_t)k * n + i, f16x8(x + i));
    }
    int t = 0;
    for (; t + F16_T <= n_t; t += F16_T) f16_tile(n, wf, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, R, F16_T);
    if (t < n_t) f16_tile(n, wf, a + (size_t)t * as, as, y + (size_t)t * ys + r, ys, R, 1);
}

/* tinyBLAS handles only n % 16 == 0; otherwise llama.cpp (and the ref) use
 * vec_dot for every row. */
static void gemm_f16_avx2(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t, float *y,
                          int ys) {
    const uint8_t *wb = w, *ab = a;
    if (n % 16 || n > F16_MAX_N) {
        mu_vec_dot_fn d = n % 16 ? dot_f16 : vec_dot_f16_batch_avx2;
        for (int t = 0; t < n_t; t++)
            for (int r = r0; r < r1; r++) y[(size_t)t * ys + r] = d(n, wb + (size_t)r * ws, ab + (size_t)t * as);
        return;
    }
    int r = r0;
    for (; r + F16_R <= r1; r += F16_R) f16_rows(n, wb, ws, r, ab, as, n_t, y, ys, F16_R);
    for (; r < r1; r++) f16_rows(n, wb, ws, r, ab, as, n_t, y, ys, 1);
}

/* ---- Q8_0 gemm (the vec_dot order: 8 lanes of 4-byte sums, FMA per block) */

#ifndef Q80_R
#define Q80_R 2
#endif
#ifndef Q80_T
#define Q80_T 4
#endif

AI void q8_0_tile(int nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *y, int ys, const int R,
                  const int TN) {
    __m256 acc[Q80_R][Q80_T];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TN; t++) acc[r][t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < nb; i++) {
        __m256i qy[Q80_T];
        __m256 dy[Q80_T];
#pragma GCC unroll 4
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)(a + (size_t)t * as) + i;
            qy[t] = _mm256_loadu_si256((const __m256i *)b->qs);
            dy[t] = _mm256_set1_ps(f16_to_f32(b->d));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const mu_block_q8_0 *x = (const mu_block_q8_0 *)(w + (size_t)r * ws) + i;
            const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
            const __m256i ax = _mm256_sign_epi8(qx, qx);
            const __m256 dx = _mm256_set1_ps(f16_to_f32(x->d));
#pragma GCC unroll 4
            for (int t = 0; t < TN; t++) {
                const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy[t], qx)), ones);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy[t]), _mm256_cvtepi32_ps(s), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TN; t++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) y[(size_t)t * ys + r] = hsum_ps256(acc[r][t]);
}

AI void q8_0_rows(int nb, const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int n_t, float *y, int ys,
                  const int R) {
    int t = 0;
    for (; t + Q80_T <= n_t; t += Q80_T) q8_0_tile(nb, w, ws, a + (size_t)t * as, as, y + (size_t)t * ys, ys, R, Q80_T);
    const uint8_t *at = a + (size_t)t * as;
    float *yt = y + (size_t)t * ys;
    switch (n_t - t) {
    case 3: q8_0_tile(nb, w, ws, at, as, yt, ys, R, 3); break;
    case 2: q8_0_tile(nb, w, ws, at, as, yt, ys, R, 2); break;
    case 1: q8_0_tile(nb, w, ws, at, as, yt, ys, R, 1); break;
    default: break;
    }
}

static void gemm_q8_0_avx2(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    const int nb = n / MU_QK8_0;
    const uint8_t *wb = w, *ab = a;
    int r = r0;
    for (; r + Q80_R <= r1; r += Q80_R) q8_0_rows(nb, wb + (size_t)r * ws, ws, ab, as, n_t, y + r, ys, Q80_R);
    for (; r < r1; r++) q8_0_rows(nb, wb + (size_t)r * ws, ws, ab, as, n_t, y + r, ys, 1);
}

/* ---- NVFP4 gemm (the vec_dot order: 8 lanes, two FMAs per block) -------- */

#define NV_T 4

AI void nvfp4_tile(int nb, const mu_block_nvfp4 *x, const uint8_t *a, size_t as, float *y, int ys, const int TN) {
    __m256 acc[NV_T];
#pragma GCC unroll 4
    for (int t = 0; t < TN; t++) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c[2];
    for (int i = 0; i < nb; i++) {
        nvfp4_codes(&x[i], c);
        const __m256i ac0 = _mm256_sign_epi8(c[0], c[0]), ac1 = _mm256_sign_epi8(c[1], c[1]);
        const __m128 s4 = nvfp4_scale4(&x[i]);
        const __m256 s01 = nvfp4_expand(s4, 0), s23 = nvfp4_expand(s4, 1);
#pragma GCC unroll 4
        for (int t = 0; t < TN; t++) {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)(a + (size_t)t * as) + 2 * i;
            const __m256i q0 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)b[0].qs), c[0]);
            const __m256i q1 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)b[1].qs), c[1]);
            const __m256 p0 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ac0, q0), ones));
            const __m256 p1 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ac1, q1), ones));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(s01, _mm256_set1_ps(f16_to_f32(b[0].d))), p0, acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(s23, _mm256_set1_ps(f16_to_f32(b[1].d))), p1, acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TN; t++) y[(size_t)t * ys] = hsum_ps256(acc[t]);
}

static void gemm_nvfp4_avx2(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                            float *y, int ys) {
    const int nb = n / MU_QK_NVFP4;
    for (int t0 = 0; t0 < n_t; t0 += NV_T) {
        const uint8_t *at = (const uint8_t *)a + (size_t)t0 * as;
        for (int r = r0; r < r1; r++) {
            const mu_block_nvfp4 *x = (const mu_block_nvfp4 *)((const uint8_t *)w + (size_t)r * ws);
            float *yr = y + (size_t)t0 * ys + r;
            switch (n_t - t0 < NV_T ? n_t - t0 : NV_T) {
            case 4: nvfp4_tile(nb, x, at, as, yr, ys, 4); break;
            case 3: nvfp4_tile(nb, x, at, as, yr, ys, 3); break;
            case 2: nvfp4_tile(nb, x, at, as, yr, ys, 2); break;
            default: nvfp4_tile(nb, x, at, as, yr, ys, 1); break;
            }
        }
    }
}

void mu_kern_fill_gemm_avx2(mu_kern *k) {
    dot_q4_K = k->vec_dot[MU_T_Q4_K];
    dot_q6_K = k->vec_dot[MU_T_Q6_K];
    dot_q8_0 = k->vec_dot[MU_T_Q8_0];
    dot_f16 = k->vec_dot[MU_T_F16];
    k->vec_dot_batch[MU_T_Q4_K] = vec_dot_q4_K_batch_avx2;
    k->gemm[MU_T_Q4_K] = gemm_q4_K_avx2;
    k->gemm[MU_T_Q6_K] = gemm_q6_K_avx2;
    k->gemm[MU_T_F16] = gemm_f16_avx2;
    k->gemm[MU_T_Q8_0] = gemm_q8_0_avx2;
    k->gemm[MU_T_NVFP4] = gemm_nvfp4_avx2;
    k->vec_dot_batch[MU_T_F32] = vec_dot_f32_batch_avx2;
    k->vec_dot_batch[MU_T_F16] = vec_dot_f16_batch_avx2;
}
