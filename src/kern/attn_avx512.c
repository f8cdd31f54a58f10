/* attn_avx512.c: the attention and activation kernels of the AVX-512 table.
 * Owns: mm_f16 (K.Q and V.softmax over the F16 cache in both of llama.cpp's
 * roundings), softmax_f16 and swiglu with ggml's vector expf, and the F16
 * rounding of activations (to_f16, round_f16).
 * Does not: decide which rounding a product takes (the engine does, as
 * llama.cpp's graph would) or touch weights.
 * Design: register tiles of 4 A rows x 4 B rows (tinyBLAS order) or 2 x 2
 * with 4 accumulators each (ggml_vec_dot_f16 order); for head-sized n (a
 * decode step's K.Q) two converted A rows stay in registers for 8 B rows;
 * a prefill item's K.Q converts a tile's 4 cells once for all its query
 * rows (kq_item), and the blocked ggml product runs its 4 accumulators one
 * after another in 4 x 4 tiles (tile_ggml_part_f).
 * The 16 lane reductions of a tile run as one transpose tree whose every
 * addition is the scalar hsum16's, so the results are bit-identical to
 * kern_ref.c. The cache rows come from DRAM at depth: they are prefetched
 * ahead in software (the hardware streams alone left the decode attention
 * at half the kernel's in-cache speed), and a product over more than
 * MM_LONG_* values whose B rows take more than two tiles (the V product at
 * depth: a decode step's heads, a prefill item's rows) runs in blocks of
 * cells with the tiles' accumulators kept in memory between blocks, so
 * that the cache is read once (mm_long). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "expf_avx512.h"
#include "kern.h"

static inline __m512 f16x16(const mu_f16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* hsum16 of v[0..15], as 16 results in v's order: out[p] = hsum16(v[p]).
 * Level by level the additions are hsum16's: lanes i + (i+8), then i + (i+4)
 * of those, then (0+2) and (1+3), then the two. */
static inline __m512 hsum16_x16(const __m512 v[16]) {
    __m512 s[8], t[4], u[2];
    #pragma GCC unroll 16
    for (int m = 0; m < 8; m++) /* [v(2m) h0..7 | v(2m+1) h0..7] */
        s[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0xEE));
    #pragma GCC unroll 16
    for (int m = 0; m < 4; m++) /* 128-bit lane L: the 4 sums of v(4m + L) */
        t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0xDD));
    #pragma GCC unroll 16
    for (int m = 0; m < 2; m++) /* lane L: (0+2, 1+3) of v(8m + L), then of v(8m + 4 + L) */
        u[m] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * m], t[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t[2 * m], t[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane L, element m: the result of v(4m + L) */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, r);
}

/* ---- mm_f16 ------------------------------------------------------------ */

/* One step of 16 values of a 4 x 4 tinyBLAS tile: c[4j + i] += A row i's
 * vector a[i] times B row j's at k. */
static inline __attribute__((always_inline)) void tb_step(const __m512 a[4], const float *const b[4], int k,
                                                          __m512 c[16]) {
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512 bj = _mm512_loadu_ps(b[j] + k);
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) c[4 * j + i] = _mm512_fmadd_ps(a[i], bj, c[4 * j + i]);
    }
}

/* tinyBLAS: v[4j + i] = the accumulator of A row i . B row j. */
static inline void tile_tb(int n, const mu_f16 *const a[4], const float *const b[4], __m512 v[16]) {
    __m512 c[16];
    #pragma GCC unroll 16
    for (int p = 0; p < 16; p++) c[p] = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 16) {
        const __m512 av[4] = {f16x16(a[0] + k), f16x16(a[1] + k), f16x16(a[2] + k), f16x16(a[3] + k)};
        tb_step(av, b, k, c);
    }
    #pragma GCC unroll 16
    for (int p = 0; p < 16; p++) v[p] = c[p];
}

/* The same with the 4 A rows already converted to floats (af, rows n
 * apart) and the B rows ldb apart. */
static inline void tile_tb_f(int n, const float *af, const float *b, size_t ldb, __m512 v[16]) {
    const float *const br[4] = {b, b + ldb, b + 2 * ldb, b + 3 * ldb};
    __m512 c[16];
    #pragma GCC unroll 16
    for (int p = 0; p < 16; p++) c[p] = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 16) {
        const __m512 av[4] = {_mm512_load_ps(af + k), _mm512_load_ps(af + n + k), _mm512_load_ps(af + 2 * n + k),
                              _mm512_load_ps(af + 3 * n + k)};
        tb_step(av, br, k, c);
    }
    #pragma GCC unroll 16
    for (int p = 0; p < 16; p++) v[p] = c[p];
}

/* K.Q of a prefill item (tinyBLAS order, n % 16 == 0, n <= 256): A the
 * cache's cells, B more than 4 query rows. A tile's 4 cells are converted
 * to floats once for every tile of B rows; a whole tile's 16 results leave
 * as four 4-float stores; the cells two tiles ahead are prefetched (from
 * DRAM at depth, where the hardware streams alone left a stall per tile). */
static void kq_item(int n, const mu_f16 *A, size_t lda, int na, const float *B, size_t ldb, int nb, float *C,
                    size_t ldc) {
    float af[4 * 256] __attribute__((aligned(64)));
    float bt[4 * 256] __attribute__((aligned(64)));
    for (int i0 = 0; i0 < na; i0 += 4) {
        for (int q = 0; q < 4; q++) {
            const mu_f16 *a = A + (size_t)(i0 + q < na ? i0 + q : na - 1) * lda;
            for (int k = 0; k < n; k += 16) _mm512_store_ps(af + q * n + k, f16x16(a + k));
        }
        if (i0 + 11 < na)
            for (int q = 8; q < 12; q++)
                for (int c = 0; c < n * 2; c += 64) _mm_prefetch((const char *)(A + (size_t)(i0 + q) * lda) + c, _MM_HINT_T0);
        const int ni = na - i0 < 4 ? na - i0 : 4;
        for (int j0 = 0; j0 < nb; j0 += 4) {
            const int nj = nb - j0 < 4 ? nb - j0 : 4;
            const float *b = B + (size_t)j0 * ldb;
            size_t lb = ldb;
            if (nj < 4) { /* the last rows: those past the end repeat the last one */
                for (int j = 0; j < 4; j++) memcpy(bt + j * n, B + (size_t)(j0 + (j < nj ? j : nj - 1)) * ldb, (size_t)n * sizeof(float));
                b = bt, lb = (size_t)n;
            }
            __m512 v[16];
            tile_tb_f(n, af, b, lb, v);
            const __m512 t = hsum16_x16(v);
            float *c0 = C + (size_t)j0 * ldc + i0;
            if (ni == 4 && nj == 4) {
                _mm_storeu_ps(c0, _mm512_castps512_ps128(t));
                _mm_storeu_ps(c0 + ldc, _mm512_extractf32x4_ps(t, 1));
                _mm_storeu_ps(c0 + 2 * ldc, _mm512_extractf32x4_ps(t, 2));
                _mm_storeu_ps(c0 + 3 * ldc, _mm512_extractf32x4_ps(t, 3));
            } else {
                float r[16];
                _mm512_storeu_ps(r, t);
                for (int j = 0; j < nj; j++)
                    for (int i = 0; i < ni; i++) c0[(size_t)j * ldc + i] = r[4 * j + i];
            }
        }
    }
}

/* ggml_vec_dot_f16 on 2 A rows x 2 B rows, n % 64 == 0: v[2j + i] = the
 * combined accumulator ((0+2) + (1+3)) of A row i . B row j. */
static inline void tile_ggml(int n, const mu_f16 *const a[2], const float *const b[2], __m512 v[4]) {
    __m512 c[4][4];
    #pragma GCC unroll 16
    for (int p = 0; p < 4; p++)
        #pragma GCC unroll 16
        for (int q = 0; q < 4; q++) c[p][q] = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 64) {
        /* 2 KiB ahead in each row */
        _mm_prefetch((const char *)(a[0] + k + 1024), _MM_HINT_T0);
        _mm_prefetch((const char *)(a[0] + k + 1056), _MM_HINT_T0);
        _mm_prefetch((const char *)(a[1] + k + 1024), _MM_HINT_T0);
        _mm_prefetch((const char *)(a[1] + k + 1056), _MM_HINT_T0);
        #pragma GCC unroll 16
        for (int q = 0; q < 4; q++) {
            const __m512 a0 = f16x16(a[0] + k + 16 * q), a1 = f16x16(a[1] + k + 16 * q);
            const __m512 b0 = _mm512_loadu_ps(b[0] + k + 16 * q), b1 = _mm512_loadu_ps(b[1] + k + 16 * q);
            c[0][q] = _mm512_fmadd_ps(a0, b0, c[0][q]);
            c[1][q] = _mm512_fmadd_ps(a1, b0, c[1][q]);
            c[2][q] = _mm512_fmadd_ps(a0, b1, c[2][q]);
            c[3][q] = _mm512_fmadd_ps(a1, b1, c[3][q]);
        }
    }
    #pragma GCC unroll 16
    for (int p = 0; p < 4; p++)
        v[p] = _mm512_add_ps(_mm512_add_ps(c[p][0], c[p][2]), _mm512_add_ps(c[p][1], c[p][3]));
}

/* K.Q of a decode step (n = 64 or 128): blocks of 16 cells x 8 B rows
 * (query heads; rows past nb repeat the last one and their results are
 * dropped). Two cells at a time share each B load; the combined
 * accumulators wait in vs[row][cell] until the block's 16 cells of a row
 * reduce in one tree, which leaves as one vector store (masked for a short
 * last block). The first product of an accumulator is a plain multiply
 * (ggml adds it to +0: the two differ only in the sign of a zero, which the
 * final +0 removes; ggml never yields -0 from F16 data). */
static __attribute__((always_inline)) inline void mm_ggml_short(int n, const mu_f16 *A, size_t lda, int na,
                                                                const float *B, size_t ldb, int nb, float *C,
                                                                size_t ldc) {
    __m512 vs[8][16];
    for (int j0 = 0; j0 < nb; j0 += 8) {
        const float *b[8];
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) b[j] = B + (size_t)(j0 + j < nb ? j0 + j : nb - 1) * ldb;
        for (int i0 = 0; i0 < na; i0 += 16) {
            for (int c = 0; c < 16; c += 2) {
                const int ia = i0 + c < na ? i0 + c : na - 1, ib = i0 + c + 1 < na ? i0 + c + 1 : na - 1;
                if (ib + 32 < na) /* 32 rows ahead */
                    for (int o = 0; o < n * 2; o += 64) {
                        _mm_prefetch((const char *)(A + (size_t)(ia + 32) * lda) + o, _MM_HINT_T0);
                        _mm_prefetch((const char *)(A + (size_t)(ib + 32) * lda) + o, _MM_HINT_T0);
                    }
                __m512 x0[8], x1[8];
                #pragma GCC unroll 8
                for (int q = 0; q < n / 16; q++) {
                    x0[q] = f16x16(A + (size_t)ia * lda + 16 * q);
                    x1[q] = f16x16(A + (size_t)ib * lda + 16 * q);
                }
                #pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    __m512 c0[4], c1[4];
                    #pragma GCC unroll 4
                    for (int q = 0; q < 4; q++) {
                        const __m512 bq = _mm512_loadu_ps(b[j] + 16 * q);
                        c0[q] = _mm512_mul_ps(x0[q], bq);
                        c1[q] = _mm512_mul_ps(x1[q], bq);
                    }
                    if (n == 128)
                        #pragma GCC unroll 4
                        for (int q = 0; q < 4; q++) {
                            const __m512 bq = _mm512_loadu_ps(b[j] + 64 + 16 * q);
                            c0[q] = _mm512_fmadd_ps(x0[4 + q], bq, c0[q]);
                            c1[q] = _mm512_fmadd_ps(x1[4 + q], bq, c1[q]);
                        }
                    vs[j][c] = _mm512_add_ps(_mm512_add_ps(c0[0], c0[2]), _mm512_add_ps(c0[1], c0[3]));
                    vs[j][c + 1] = _mm512_add_ps(_mm512_add_ps(c1[0], c1[2]), _mm512_add_ps(c1[1], c1[3]));
                }
            }
            const __mmask16 m = na - i0 >= 16 ? 0xFFFF : (__mmask16)((1u << (na - i0)) - 1);
            for (int j = 0; j < 8 && j0 + j < nb; j++)
                _mm512_mask_storeu_ps(C + (size_t)(j0 + j) * ldc + i0, m,
                                      _mm512_add_ps(hsum16_x16(vs[j]), _mm512_setzero_ps()));
        }
    }
}

/* ggml_vec_dot_f16 for one pair with a tail (n % 64 != 0): the rare shapes. */
static float dot_ggml_tail(int n, const mu_f16 *x, const float *y) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64) {
        s0 = _mm512_fmadd_ps(f16x16(x + i), _mm512_loadu_ps(y + i), s0);
        s1 = _mm512_fmadd_ps(f16x16(x + i + 16), _mm512_loadu_ps(y + i + 16), s1);
        s2 = _mm512_fmadd_ps(f16x16(x + i + 32), _mm512_loadu_ps(y + i + 32), s2);
        s3 = _mm512_fmadd_ps(f16x16(x + i + 48), _mm512_loadu_ps(y + i + 48), s3);
    }
    /* GCC's reduction adds in hsum16's order (kern_avx512.c and gemm_avx512.c rely on it too) */
    double s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
    for (int i = np; i < n; i++) s += (double)(_cvtsh_ss(x[i]) * y[i]);
    return (float)s;
}

/* ---- long products: blocks of cells ---------------------------------------
 * The V product at depth runs over tens of thousands of cells, and a tile
 * that streams its rows over all of n reads A (the cache) once per tile of
 * B rows, from memory. Past MM_LONG_* values, n is cut into blocks of MM_KB:
 * a block of B is copied into a contiguous buffer (rows of the scores are
 * a power-of-two-ish stride apart and would evict each other), and every
 * tile runs over the block with its accumulators loaded from and stored
 * back to memory. A is read once, B's block stays in L1/L2, and each
 * accumulator sees the same FMAs in the same order as in one pass. Measured
 * on the 2-core EPYC (loaded, so roughly): a prefill item's V product of 64
 * rows over 33K cells 1.4-2.2x faster than the one-pass tiles. On the
 * 2-vCPU Xeon (bench/attnbench.c, one thread, medians of interleaved runs,
 * bench/results/attn32k-issue20-s32-kernels.txt): the tinyBLAS product of
 * 64 rows as fast either way at 6-8K cells, blocked 1.2x faster at 12K and
 * 0.85x as fast at 4K; the ggml product of 8 rows (a decode step's), with
 * its 4 x 4 tiles, blocked 1.1x faster at 2K cells, 1.4x at 4K, 1.7x at 8K. */
#define MM_KB 512
/* n past which, with A read more than twice, a product is blocked */
#define MM_LONG_TB 8192
#define MM_LONG_GGML 2048

/* The accumulators c[RA j + i] (at acc) of an RA x RB tile, A row i . B
 * row j, over the steps k = k0, k0 + step, ... below kn: A rows converted
 * to floats (exact: the products and their order are the one-pass
 * tiles'), B rows of the packed block (both from the block's start).
 * Always inlined: with the shape, step and k0 constants, as fast as the
 * loops it replaced (bench/attnbench.c, interleaved; called, 5% slower). */
static inline __attribute__((always_inline)) void tile_f_steps(int k0, int kn, int step, const float *const *a,
                                                               const float *const *b, __m512 *acc, const int RA,
                                                               const int RB) {
    __m512 c[24];
    #pragma GCC unroll 24
    for (int p = 0; p < RA * RB; p++) c[p] = acc[p];
    for (int k = k0; k < kn; k += step) {
        __m512 av[8];
        #pragma GCC unroll 8
        for (int i = 0; i < RA; i++) av[i] = _mm512_loadu_ps(a[i] + k);
        #pragma GCC unroll 4
        for (int j = 0; j < RB; j++) {
            const __m512 bj = _mm512_loadu_ps(b[j] + k);
            #pragma GCC unroll 8
            for (int i = 0; i < RA; i++) c[RA * j + i] = _mm512_fmadd_ps(av[i], bj, c[RA * j + i]);
        }
    }
    #pragma GCC unroll 24
    for (int p = 0; p < RA * RB; p++) acc[p] = c[p];
}

/* tinyBLAS: one accumulator a pair, every step of 16; 6 A rows x 4 B rows,
 * so that a step reads 4 vectors of the B rows streaming from L2 for 24
 * FMAs (4 x 4 tiles: 4 for 16; bench/attnbench.c at 32K cells, the V
 * product of a prefill item 118-120 -> 127-130 GFLOP/s; 8 x 3 spills) */
#define LONG_TB_RA 6
#define LONG_TB_RB 4
_Static_assert(LONG_TB_RA <= 8 && LONG_TB_RB <= 4 && LONG_TB_RA * LONG_TB_RB <= 24, "mm_long's arrays");
static inline void tile_tb_part_f(int kn, const float *const *a, const float *const *b, __m512 *acc) {
    tile_f_steps(0, kn, 16, a, b, acc, LONG_TB_RA, LONG_TB_RB);
}

/* ggml: accumulator q of A row i . B row j at acc[16q + 4j + i]. Each
 * accumulator only sees the steps k = 16q (mod 64), so the four run one
 * after another: 16 live registers cover 16 pairs instead of 4, and a step
 * loads 8 vectors for 16 FMAs instead of 16; each accumulator's FMAs keep
 * their order. */
static inline void tile_ggml_part_f(int kn, const float *const *a, const float *const *b, __m512 *acc) {
    for (int q = 0; q < 4; q++) tile_f_steps(16 * q, kn, 64, a, b, acc + 16 * q, 4, 4);
}

/* mm_f16 over blocks of n (tb: n % 16 == 0; ggml: n % 64 == 0). Returns 0
 * when its buffers cannot be had (the caller then takes the one-pass tiles). */
static int mm_long(int n, const mu_f16 *A, size_t lda, int na, const float *B, size_t ldb, int nb, float *C,
                   size_t ldc, int tb) {
    /* a tile: RA rows of A (converted once per block, in L1) x RB rows of B
     * (the packed block, from L2), W accumulators */
    const int RA = tb ? LONG_TB_RA : 4, RB = tb ? LONG_TB_RB : 4, W = tb ? RA * RB : 64;
    const int ti = (na + RA - 1) / RA, tj = (nb + RB - 1) / RB;
    __m512 *acc = aligned_alloc(64, (size_t)ti * tj * W * sizeof(__m512));
    float *bp = aligned_alloc(64, (size_t)nb * MM_KB * sizeof(float));
    float *ap = aligned_alloc(64, (size_t)RA * MM_KB * sizeof(float)); /* a tile's A rows, converted once */
    if (!acc || !bp || !ap) {
        free(acc);
        free(bp);
        free(ap);
        return 0;
    }
    memset(acc, 0, (size_t)ti * tj * W * sizeof(__m512));
    for (int k0 = 0; k0 < n; k0 += MM_KB) {
        const int kn = n - k0 < MM_KB ? n - k0 : MM_KB;
        for (int j = 0; j < nb; j++) memcpy(bp + (size_t)j * MM_KB, B + (size_t)j * ldb + k0, (size_t)kn * sizeof(float));
        for (int it = 0; it < ti; it++) {
            const mu_f16 *a[8];
            for (int q = 0; q < RA; q++) a[q] = A + (size_t)(it * RA + q < na ? it * RA + q : na - 1) * lda + k0;
            /* these rows' next block: short streams, which the hardware
             * prefetchers would not pick up in time */
            if (k0 + MM_KB < n)
                for (int q = 0; q < RA; q++)
                    for (int c = 0; c < MM_KB * 2; c += 64) _mm_prefetch((const char *)(a[q] + MM_KB) + c, _MM_HINT_T1);
            /* each tile of B rows would convert these A rows again; once
             * here, into floats that stay in L1 for all of them */
            const float *af[8];
            for (int q = 0; q < RA; q++) {
                float *d = ap + (size_t)q * MM_KB;
                for (int c = 0; c < kn; c += 16) _mm512_storeu_ps(d + c, f16x16(a[q] + c));
                af[q] = d;
            }
            for (int jt = 0; jt < tj; jt++) {
                const float *b[4];
                for (int q = 0; q < RB; q++) b[q] = bp + (size_t)(jt * RB + q < nb ? jt * RB + q : nb - 1) * MM_KB;
                __m512 *t = acc + ((size_t)it * tj + jt) * W;
                if (tb)
                    tile_tb_part_f(kn, af, b, t);
                else
                    tile_ggml_part_f(kn, af, b, t);
            }
        }
    }
    /* the combined accumulator of every pair, 16 pairs per reduction tree */
    __m512 v[16];
    int pi[16], pj[16], np = 0;
    for (int j = 0; j < nb; j++)
        for (int i = 0; i < na; i++) {
            const __m512 *t = acc + ((size_t)(i / RA) * tj + j / RB) * W + RA * (j % RB) + i % RA;
            v[np] = tb ? t[0] : _mm512_add_ps(_mm512_add_ps(t[0], t[32]), _mm512_add_ps(t[16], t[48]));
            pi[np] = i;
            pj[np] = j;
            if (++np == 16 || (j == nb - 1 && i == na - 1)) {
                for (int p = np; p < 16; p++) v[p] = v[0];
                float r[16];
                _mm512_storeu_ps(r, hsum16_x16(v));
                for (int p = 0; p < np; p++) C[(size_t)pj[p] * ldc + pi[p]] = r[p];
                np = 0;
            }
        }
    free(ap);
    free(bp);
    free(acc);
    return 1;
}

static void mm_f16_avx512(int n, const mu_f16 *A, size_t lda, int na, const float *B, size_t ldb, int nb, float *C,
                          size_t ldc, int tb) {
    /* the one-pass tiles read A once per tile of B rows (4 tinyBLAS, 2 ggml) */
    if (n > (tb ? MM_LONG_TB : MM_LONG_GGML) && (tb ? n % 16 : n % 64) == 0 && (nb + (tb ? 3 : 1)) / (tb ? 4 : 2) > 2 &&
        mm_long(n, A, lda, na, B, ldb, nb, C, ldc, tb))
        return;
    if (!tb && n % 64) {
        for (int j = 0; j < nb; j++)
            for (int i = 0; i < na; i++) C[(size_t)j * ldc + i] = dot_ggml_tail(n, A + (size_t)i * lda, B + (size_t)j * ldb);
        return;
    }
    if (!tb && n == 128) return mm_ggml_short(128, A, lda, na, B, ldb, nb, C, ldc);
    if (!tb && n == 64) return mm_ggml_short(64, A, lda, na, B, ldb, nb, C, ldc);
    /* 16 pairs (4 A rows x 4 B rows) per reduction; rows past the end repeat
     * the last one and their results are dropped. Short rows (K.Q: n is a
     * head's size, A the cache's cells, B a few query rows): each tile of A
     * rows meets every B row, so the cache is read once and B stays in L1.
     * Long rows (V.softmax over the cells): each tile of B rows meets every
     * A row, B's tile staying in L2 while A streams. */
    const int a_out = n <= 256;
    if (tb && a_out && nb > 4 && n % 16 == 0) return kq_item(n, A, lda, na, B, ldb, nb, C, ldc);
    for (int o0 = 0; o0 < (a_out ? na : nb); o0 += 4)
        for (int n0 = 0; n0 < (a_out ? nb : na); n0 += 4) {
            const int i0 = a_out ? o0 : n0, j0 = a_out ? n0 : o0;
            const mu_f16 *a[4];
            const float *b[4];
            for (int q = 0; q < 4; q++) {
                a[q] = A + (size_t)(i0 + q < na ? i0 + q : na - 1) * lda;
                b[q] = B + (size_t)(j0 + q < nb ? j0 + q : nb - 1) * ldb;
            }
            __m512 v[16];
            float r[16];
            if (tb)
                tile_tb(n, a, b, v);
            else
                #pragma GCC unroll 16
                for (int jj = 0; jj < 4; jj += 2)
                    #pragma GCC unroll 16
                    for (int ii = 0; ii < 4; ii += 2) {
                        __m512 w[4];
                        tile_ggml(n, a + ii, b + jj, w);
                        v[4 * jj + ii] = w[0];
                        v[4 * jj + ii + 1] = w[1];
                        v[4 * (jj + 1) + ii] = w[2];
                        v[4 * (jj + 1) + ii + 1] = w[3];
                    }
            _mm512_storeu_ps(r, hsum16_x16(v));
            for (int j = 0; j < 4 && j0 + j < nb; j++)
                for (int i = 0; i < 4 && i0 + i < na; i++) C[(size_t)(j0 + j) * ldc + i0 + i] = r[4 * j + i];
        }
}

/* ---- ggml's vector expf, softmax, swiglu -------------------------------- */


static void softmax_f16_avx512(int n, float *x, float mx) {
    const __m512 vm = _mm512_set1_ps(mx);
    double sum = 0;
    int i = 0;
    /* 16 chunks share one reduction tree; their sums are added in order */
    for (; i + 256 <= n; i += 256) {
        __m512 e[16];
        #pragma GCC unroll 16
        for (int c = 0; c < 16; c++) {
            e[c] = mu_expf512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16 * c), vm));
            _mm512_storeu_ps(x + i + 16 * c, e[c]);
        }
        float r[16];
        _mm512_storeu_ps(r, hsum16_x16(e));
        #pragma GCC unroll 16
        for (int c = 0; c < 16; c++) sum += (double)r[c];
    }
    for (; i < n; i += 16) {
        const __m512 e = mu_expf512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        sum += (double)_mm512_reduce_add_ps(e);
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (i = 0; i < n; i += 16) {
        const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + i), inv);
        _mm512_storeu_ps(x + i, _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
}

static void swiglu_avx512(int n, float *g, const float *u) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(g + i);
        const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, mu_expf512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(s, _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* sumsq (kern.h): rows side by side, a row in each lane of a zmm of
 * doubles, G groups of 8 rows at once (G chains of adds in flight: 4, 2 or
 * 1 by the rows left). Each 8 x
 * 8 block of floats (8 rows, 8 elements) is transposed in registers, so
 * element i of the group's rows is one ymm; its squares (vmulps, the float
 * product) widen exactly to doubles and join each lane's sum in element
 * order: every row's sum is sumsq_ref's chain, bit for bit. Elements past
 * the last whole 8 continue each row's chain in scalar code. */
static inline __attribute__((always_inline)) void sumsq_group(int n, const float *x, size_t stride, double *out,
                                                              const int G) {
    __m512d acc[4];
    for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_pd();
    const int n8 = n & ~7;
    for (int i = 0; i < n8; i += 8)
        for (int g = 0; g < G; g++) {
            const float *b = x + (size_t)(8 * g) * stride + i;
            __m256 r[8], t[8], u[8];
            for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(b + (size_t)j * stride);
            for (int j = 0; j < 8; j += 2) {
                t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
                t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
            }
            for (int h = 0; h < 8; h += 4) { /* rows h .. h + 3: elements (0, 4), (1, 5), (2, 6), (3, 7) */
                u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
                u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);
                u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
                u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
            }
            /* c[e]: element i + e of the 8 rows (the immediates must be
             * constants at every optimization level: no loop here) */
            const __m256 c[8] = {_mm256_permute2f128_ps(u[0], u[4], 0x20), _mm256_permute2f128_ps(u[1], u[5], 0x20),
                                 _mm256_permute2f128_ps(u[2], u[6], 0x20), _mm256_permute2f128_ps(u[3], u[7], 0x20),
                                 _mm256_permute2f128_ps(u[0], u[4], 0x31), _mm256_permute2f128_ps(u[1], u[5], 0x31),
                                 _mm256_permute2f128_ps(u[2], u[6], 0x31), _mm256_permute2f128_ps(u[3], u[7], 0x31)};
            for (int e = 0; e < 8; e++) acc[g] = _mm512_add_pd(acc[g], _mm512_cvtps_pd(_mm256_mul_ps(c[e], c[e])));
        }
    for (int g = 0; g < G; g++) {
        double s[8];
        _mm512_storeu_pd(s, acc[g]);
        for (int j = 0; j < 8; j++) {
            const float *xr = x + (size_t)(8 * g + j) * stride;
            for (int i = n8; i < n; i++) s[j] += (double)(xr[i] * xr[i]);
            out[8 * g + j] = s[j];
        }
    }
}

static void sumsq_avx512(int n, const float *x, size_t stride, int n_rows, double *out) {
    int r = 0;
    for (; r + 32 <= n_rows; r += 32) sumsq_group(n, x + (size_t)r * stride, stride, out + r, 4);
    for (; r + 16 <= n_rows; r += 16) sumsq_group(n, x + (size_t)r * stride, stride, out + r, 2);
    for (; r + 8 <= n_rows; r += 8) sumsq_group(n, x + (size_t)r * stride, stride, out + r, 1);
    if (r < n_rows) mu_kern_ref()->sumsq(n, x + (size_t)r * stride, stride, n_rows - r, out + r); /* rows alone */
}

static void to_f16_avx512(int n, const float *x, mu_f16 *y) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static void round_f16_avx512(int n, const float *x, float *y) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    for (; i < n; i++) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

void mu_kern_fill_attn_avx512(mu_kern *k) {
    k->to_f16 = to_f16_avx512;
    k->round_f16 = round_f16_avx512;
    k->mm_f16 = mm_f16_avx512;
    k->softmax_f16 = softmax_f16_avx512;
    k->swiglu = swiglu_avx512;
    k->sumsq = sumsq_avx512;
}
