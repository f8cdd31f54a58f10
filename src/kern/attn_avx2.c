/* attn_avx2.c: the attention and activation kernels of the AVX2 table.
 * Owns: mm_f16 (K.Q and V.softmax over the F16 cache in both of llama.cpp's
 * roundings), softmax_f16 and swiglu with ggml's vector expf, and the F16
 * rounding of activations (to_f16, round_f16), for CPUs with AVX2 + FMA +
 * F16C.
 * Does not: pick the rounding (the engine does) or define it: the numbers
 * are kern_ref.c's (llama.cpp's AVX-512 build), bit for bit, so a 16-lane
 * chain is two 8-lane ones here.
 * Design: every 16-lane accumulator splits into 8-lane "chunks" that are
 * independent FMA chains (tinyBLAS: 2 chunks per step of 16; ggml: 8 per
 * step of 64). A tile of 2 A rows x 4 B rows runs one chunk at a time with 8
 * accumulators in registers, the chunks are then combined in the order
 * kern_ref.c adds them, and the 8 pairs' hsum16 run as one transpose tree
 * whose every addition is the scalar one. expf scales by 2^n in one
 * multiply, or two exact-then-rounding ones near over/underflow, so it
 * always rounds once, like ldexpf. */
#include <immintrin.h>
#include <math.h>

#include "kern.h"

static inline __m256 f16x8(const mu_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* out[p] = hsum8(v[p]): level by level hsum8's additions, lanes i + (i+4),
 * then (0+2) and (1+3), then the two. */
static inline __m256 hsum8_x8(const __m256 v[8]) {
    __m256 s[4], t[2];
#pragma GCC unroll 8
    for (int m = 0; m < 4; m++) /* [v(2m) h0..3 | v(2m+1) h0..3] */
        s[m] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * m], v[2 * m + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * m], v[2 * m + 1], 0x31));
#pragma GCC unroll 8
    for (int m = 0; m < 2; m++) /* 128-bit lane L: (0+2, 1+3) of v(4m + L), then of v(4m + 2 + L) */
        t[m] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * m], s[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(s[2 * m], s[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane L, element m: the result of v(2m + L) */
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* ---- mm_f16 ------------------------------------------------------------ */

/* One chunk of a 2 x 4 tile: c[2j + i] = the 8-lane chain of A row i . B row
 * j over the elements off + s * step + (0..7), s < ns. */
static inline void chunk_2x4(int ns, int step, int off, const mu_f16 *a0, const mu_f16 *a1, const float *const b[4],
                             __m256 c[8]) {
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    const float *b0 = b[0] + off, *b1 = b[1] + off, *b2 = b[2] + off, *b3 = b[3] + off;
    a0 += off;
    a1 += off;
    for (int s = 0; s < ns; s++) {
        const size_t k = (size_t)s * step;
        const __m256 x0 = f16x8(a0 + k), x1 = f16x8(a1 + k);
        /* the empty asm keeps each B vector in a register: loaded once, not
         * folded into both FMAs as a memory operand */
        __m256 y = _mm256_loadu_ps(b0 + k);
        __asm__("" : "+x"(y));
        c0 = _mm256_fmadd_ps(x0, y, c0);
        c1 = _mm256_fmadd_ps(x1, y, c1);
        y = _mm256_loadu_ps(b1 + k);
        __asm__("" : "+x"(y));
        c2 = _mm256_fmadd_ps(x0, y, c2);
        c3 = _mm256_fmadd_ps(x1, y, c3);
        y = _mm256_loadu_ps(b2 + k);
        __asm__("" : "+x"(y));
        c4 = _mm256_fmadd_ps(x0, y, c4);
        c5 = _mm256_fmadd_ps(x1, y, c5);
        y = _mm256_loadu_ps(b3 + k);
        __asm__("" : "+x"(y));
        c6 = _mm256_fmadd_ps(x0, y, c6);
        c7 = _mm256_fmadd_ps(x1, y, c7);
    }
    c[0] = c0, c[1] = c1, c[2] = c2, c[3] = c3, c[4] = c4, c[5] = c5, c[6] = c6, c[7] = c7;
}

/* The 8 pairs' sums over the whole steps: tb: one 16-lane chain per pair
 * over steps of 16 (chunks 0 = lanes 0..7, 1 = lanes 8..15); else ggml's 4
 * accumulators q over steps of 64, chunk 2q + h = lanes 8h..8h+7 of q,
 * combined (0+2) + (1+3) per lane. Then hsum16 = hsum8(lanes lo + hi). */
static inline __m256 tile_2x4(int n, int tb, const mu_f16 *a0, const mu_f16 *a1, const float *const b[4]) {
    __m256 v[8];
    if (tb) {
        __m256 lo[8], hi[8];
        chunk_2x4(n / 16, 16, 0, a0, a1, b, lo);
        chunk_2x4(n / 16, 16, 8, a0, a1, b, hi);
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) v[p] = _mm256_add_ps(lo[p], hi[p]);
    } else {
        const int ns = n / 64;
        __m256 c[8][8];
#pragma GCC unroll 8
        for (int o = 0; o < 8; o++) chunk_2x4(ns, 64, 8 * o, a0, a1, b, c[o]);
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const __m256 lo = _mm256_add_ps(_mm256_add_ps(c[0][p], c[4][p]), _mm256_add_ps(c[2][p], c[6][p]));
            const __m256 hi = _mm256_add_ps(_mm256_add_ps(c[1][p], c[5][p]), _mm256_add_ps(c[3][p], c[7][p]));
            v[p] = _mm256_add_ps(lo, hi);
        }
    }
    return hsum8_x8(v);
}

static void mm_f16_avx2(int n, const mu_f16 *A, size_t lda, int na, const float *B, size_t ldb, int nb, float *C,
                        size_t ldc, int tb) {
    const int np = tb ? n : n & ~63;
    /* tiles of 2 A rows x 4 B rows; rows past the end repeat the last one
     * and their results are dropped. A rows outer: the B rows (queries or
     * probabilities) are the smaller operand and stay in cache. */
    const int ahead = n >= 1024 ? 2 : 16; /* rows prefetched ahead: the cache comes from DRAM at depth */
    for (int i0 = 0; i0 < na; i0 += 2) {
        const mu_f16 *a0 = A + (size_t)i0 * lda, *a1 = A + (size_t)(i0 + 1 < na ? i0 + 1 : i0) * lda;
        for (int i = i0 + ahead; i < i0 + ahead + 2 && i < na; i++)
            for (int c = 0; c < n * 2; c += 64) _mm_prefetch((const char *)(A + (size_t)i * lda) + c, _MM_HINT_T0);
        for (int j0 = 0; j0 < nb; j0 += 4) {
            const float *b[4];
            for (int q = 0; q < 4; q++) b[q] = B + (size_t)(j0 + q < nb ? j0 + q : nb - 1) * ldb;
            float r[8];
            _mm256_storeu_ps(r, tile_2x4(np, tb, a0, a1, b));
            for (int j = 0; j < 4 && j0 + j < nb; j++)
                for (int i = 0; i < 2 && i0 + i < na; i++) {
                    float d = r[2 * j + i];
                    if (np < n) { /* ggml's tail, added in double */
                        const mu_f16 *x = i ? a1 : a0;
                        double s = d;
                        for (int k = np; k < n; k++) s += (double)(_cvtsh_ss(x[k]) * b[j][k]);
                        d = (float)s;
                    }
                    C[(size_t)(j0 + j) * ldc + i0 + i] = d;
                }
        }
    }
}

/* ---- ggml's vector expf, softmax, swiglu -------------------------------- */

static __attribute__((noinline)) __m256 expf_lanes_ref(__m256 x) {
    float v[8];
    _mm256_storeu_ps(v, x);
    for (int l = 0; l < 8; l++) v[l] = mu_expf_ggml(v[l]);
    return _mm256_loadu_ps(v);
}

/* kern_ref.c's mu_expf_ggml, operation by operation. */
static inline __m256 v_expf(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-126.f), _CMP_GE_OQ),
                                    _mm256_cmp_ps(n, _mm256_set1_ps(127.f), _CMP_LE_OQ));
    if (_mm256_movemask_ps(in) == 0xff) { /* ldexpf(j, n): j * 2^n, 2^n a normal float */
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(j, _mm256_castsi256_ps(e));
    }
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) return expf_lanes_ref(x); /* NaN: as the scalar */
    /* Near over/underflow: n = n1 + n2 with |n1|, |n2| <= 96. j * 2^n1 is
     * exact (j is about 1), the second multiply rounds once, as ldexpf. */
    const __m256 lim = _mm256_set1_ps(192.f);
    const __m256i ni = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(n, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim));
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23))),
                                     _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
    /* |n| > 192: 0 or inf */
    const __m256 d = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), lim, _CMP_GT_OQ);
    const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
    return _mm256_blendv_ps(res, alt, d);
}

static void softmax_f16_avx2(int n, float *x, float mx) {
    const __m256 vm = _mm256_set1_ps(mx);
    double sum = 0;
    int i = 0;
    /* 8 chunks of 16 share one reduction tree; their sums are added in order */
    for (; i + 128 <= n; i += 128) {
        __m256 v[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            float *p = x + i + 16 * c;
            const __m256 lo = v_expf(_mm256_sub_ps(_mm256_loadu_ps(p), vm));
            const __m256 hi = v_expf(_mm256_sub_ps(_mm256_loadu_ps(p + 8), vm));
            _mm256_storeu_ps(p, lo);
            _mm256_storeu_ps(p + 8, hi);
            v[c] = _mm256_add_ps(lo, hi);
        }
        float r[8];
        _mm256_storeu_ps(r, hsum8_x8(v));
        for (int c = 0; c < 8; c++) sum += (double)r[c];
    }
    for (; i < n; i += 16) {
        const __m256 lo = v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        const __m256 hi = v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        _mm256_storeu_ps(x + i, lo);
        _mm256_storeu_ps(x + i + 8, hi);
        float h[8];
        _mm256_storeu_ps(h, _mm256_add_ps(lo, hi));
        sum += (double)mu_hsum8(h);
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i < n; i += 8) {
        const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
}

static void swiglu_avx2(int n, float *g, const float *u) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.f);
    const int n16 = n & ~15;
    for (int i = 0; i < n16; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, v_expf(_mm256_xor_ps(x, sign))));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (int i = n16; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void to_f16_avx2(int n, const float *x, mu_f16 *y) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static void round_f16_avx2(int n, const float *x, float *y) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    for (; i < n; i++) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* sumsq (kern.h): rows side by side, 4 rows a group in the lanes of a ymm
 * of doubles, four groups at once; each 4 x 4 block transposed in
 * registers, each lane adding its row's squares in element order:
 * sumsq_ref's chain per row, bit for bit. */
static inline __attribute__((always_inline)) void sumsq_group_avx2(int n, const float *x, size_t stride, double *out,
                                                                   const int G) {
    __m256d acc[4];
    for (int g = 0; g < G; g++) acc[g] = _mm256_setzero_pd();
    const int n4 = n & ~3;
    for (int i = 0; i < n4; i += 4)
        for (int g = 0; g < G; g++) {
            const float *b = x + (size_t)(4 * g) * stride + i;
            __m128 r0 = _mm_loadu_ps(b), r1 = _mm_loadu_ps(b + stride), r2 = _mm_loadu_ps(b + 2 * stride),
                   r3 = _mm_loadu_ps(b + 3 * stride);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3); /* r_e: element i + e of the 4 rows */
            acc[g] = _mm256_add_pd(acc[g], _mm256_cvtps_pd(_mm_mul_ps(r0, r0)));
            acc[g] = _mm256_add_pd(acc[g], _mm256_cvtps_pd(_mm_mul_ps(r1, r1)));
            acc[g] = _mm256_add_pd(acc[g], _mm256_cvtps_pd(_mm_mul_ps(r2, r2)));
            acc[g] = _mm256_add_pd(acc[g], _mm256_cvtps_pd(_mm_mul_ps(r3, r3)));
        }
    for (int g = 0; g < G; g++) {
        double s[4];
        _mm256_storeu_pd(s, acc[g]);
        for (int j = 0; j < 4; j++) {
            const float *xr = x + (size_t)(4 * g + j) * stride;
            for (int i = n4; i < n; i++) s[j] += (double)(xr[i] * xr[i]);
            out[4 * g + j] = s[j];
        }
    }
}

static void sumsq_avx2(int n, const float *x, size_t stride, int n_rows, double *out) {
    int r = 0;
    for (; r + 16 <= n_rows; r += 16) sumsq_group_avx2(n, x + (size_t)r * stride, stride, out + r, 4);
    for (; r + 4 <= n_rows; r += 4) sumsq_group_avx2(n, x + (size_t)r * stride, stride, out + r, 1);
    if (r < n_rows) mu_kern_ref()->sumsq(n, x + (size_t)r * stride, stride, n_rows - r, out + r); /* rows alone */
}

void mu_kern_fill_attn_avx2(mu_kern *k) {
    k->to_f16 = to_f16_avx2;
    k->round_f16 = round_f16_avx2;
    k->mm_f16 = mm_f16_avx2;
    k->softmax_f16 = softmax_f16_avx2;
    k->swiglu = swiglu_avx2;
    k->sumsq = sumsq_avx2;
}
