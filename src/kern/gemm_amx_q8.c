/* gemm_amx_q8.c: the AMX table's Q8_0 and NVFP4 gemms (prefill), on tiles
 * or on emulated tiles (the "amxsim" table).
 * Owns: both gemms in the ref's rounding (every output as vec_dot:
 * mu_vec_dot_q8_0_ref, mu_vec_dot_nvfp4_ref), their weight and activation
 * layouts.
 * Does not: own the tile instructions or the scratch (amx_tiles.h,
 * gemm_amx.c), nor any dot: calls of fewer than Q8_MIN_T activation rows,
 * and calls whose activations hold a -128, go through the AVX-512 table's
 * gemm, taken at fill time.
 * Key design choice: the only integer the ref forms for these types is a
 * lane's sum of 4 products (lane l of 8: bytes 4l..4l+3 of one block of
 * 32), each with its own FMA; so one tile product has K = 4 bytes. A = lane
 * l of block i of 16 activation rows (16 rows x 4 bytes), B = the same lane
 * of 16 weight rows (1 row x 64 bytes), C[t][r] = the exact lane sums of
 * 16 x 16 outputs. TDPBSSD takes about as long for K = 4 as for K = 64 on
 * this Xeon, and every design gives one int32 per lane sum (256 a tile),
 * so this one is chosen for its float side: a row of C is 16 weight rows of
 * one activation row, the scale d = s_x * d_a is one multiply per 16
 * outputs, and the results leave as 16 consecutive floats of an output row.
 * The steps run lane-major (lane l over every block, then lane l + 1), so a
 * lane's 16 accumulators stay in registers; the products of the steps two
 * chunks of 4 ahead run while the float steps of a chunk read its sums.
 * Here (docs/benchmarks.md, "AMX tiles") this is as fast as the AVX-512
 * gemm, no faster: a K = 4 product is 1/16 of a tile's peak. Products are
 * plain signed ones (TDPBSSD), which is x86's sign trick (the NVFP4 ref's
 * fp4_mul, the AVX-512 table's Q8_0 dots) for every activation code but
 * -128 (only a non-finite activation makes one): calls with one take the
 * AVX-512 gemm, so the table agrees with its own vec_dot everywhere. */
#include <immintrin.h>
#include <string.h>

#include "amx_tiles.h"
#include "kern.h"
#include "simd_x86.h"

#define AI __attribute__((always_inline)) static inline

/* Fewer activation rows than this go to the AVX-512 gemm (the weights'
 * layout is paid per call, the tiles' gain per activation row). */
#define Q8_MIN_T 32
/* activation rows of a tile, weight rows of a group */
#define Q8_T 16
/* bytes of one block of 32 values of 16 rows: lane l at 64 l, row t at 4 t */
#define Q8_BB 512

static mu_gemm_fn table_gemm_q8_0, table_gemm_nvfp4;

/* the weights' scale per block of 32, lane half (lanes 0-3, 4-7) and row:
 * Q8_0 f16(d) in both halves, NVFP4 the scale of the sub-block of 16 */
typedef struct {
    float s[2][Q8_T];
} q8_meta;

/* tmm0-3 C (16 x 16 int32); tmm4, tmm6 A (16 rows x 4 bytes); tmm5, tmm7 B
 * (1 row x 64 bytes) */
static void q8_cfg(tilecfg *c) {
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int t = 0; t < 4; t++) c->rows[t] = 16, c->colsb[t] = 64;
    c->rows[4] = c->rows[6] = 16, c->colsb[4] = c->colsb[6] = 4;
    c->rows[5] = c->rows[7] = 1, c->colsb[5] = c->colsb[7] = 64;
}

/* Weight rows [r, r + nr) as B tiles: block i (of 32), lane l, row rr at
 * wq + Q8_BB i + 64 l + 4 rr (rows past nr zero, scale 0). */
static void q8_expand(uint32_t type, const uint8_t *w, size_t ws, int r, int nr, int nb, uint8_t *wq,
                      q8_meta *meta) {
    if (nr < Q8_T) {
        memset(wq, 0, (size_t)nb * Q8_BB);
        memset(meta, 0, (size_t)nb * sizeof *meta);
    }
    const __m256i lanes = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
    for (int rr = 0; rr < nr; rr++) {
        const uint8_t *row = w + (size_t)(r + rr) * ws;
        if (type == MU_T_Q8_0) {
            const mu_block_q8_0 *x = (const mu_block_q8_0 *)row;
            for (int i = 0; i < nb; i++) {
                _mm256_i32scatter_epi32(wq + (size_t)i * Q8_BB + 4 * rr, lanes,
                                        _mm256_loadu_si256((const __m256i *)x[i].qs), 1);
                meta[i].s[0][rr] = meta[i].s[1][rr] = f16_to_f32(x[i].d);
            }
        } else {
            const mu_block_nvfp4 *x = (const mu_block_nvfp4 *)row;
            for (int j = 0; j < nb / 2; j++) {
                __m256i c[2];
                nvfp4_codes(&x[j], c);
                for (int h = 0; h < 2; h++) {
                    _mm256_i32scatter_epi32(wq + (size_t)(2 * j + h) * Q8_BB + 4 * rr, lanes, c[h], 1);
                    meta[2 * j + h].s[0][rr] = mu_nvfp4_scale(x[j].d[2 * h]);
                    meta[2 * j + h].s[1][rr] = mu_nvfp4_scale(x[j].d[2 * h + 1]);
                }
            }
        }
    }
}

/* Activation rows [0, nt) (nt <= 16, Q8_0 blocks) as A tiles: block i, lane
 * l, row t at aq + Q8_BB i + 64 l + 4 t, and f16(d) at dy[16 i + t] (rows
 * past nt zero). Returns whether a code is -128. */
static int q8_acopy(const uint8_t *a, size_t as, int nt, int nb, uint8_t *aq, float *dy) {
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)as));
    const __mmask16 m = nt >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nt) - 1);
    const __m512i m128 = _mm512_set1_epi8(-128);
    __mmask64 neg = 0;
    for (int i = 0; i < nb; i++) {
        const uint8_t *base = a + (size_t)i * sizeof(mu_block_q8_0) + offsetof(mu_block_q8_0, qs);
        for (int l = 0; l < 8; l++) {
            const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, rows, base + 4 * l, 1);
            neg |= _mm512_cmpeq_epi8_mask(v, m128);
            _mm512_store_si512(aq + (size_t)i * Q8_BB + 64 * l, v);
        }
        for (int t = 0; t < Q8_T; t++)
            dy[16 * i + t] = t < nt ? f16_to_f32(((const mu_block_q8_0 *)(a + (size_t)t * as))[i].d) : 0.f;
    }
    return neg != 0;
}

/* Step s of a tile is lane s / nb, block s % nb; its A and B both start at
 * Q8_BB i + 64 l. Steps go 4 at a time (a tile has 8 nb of them), C q
 * (tmm0-3) for the q-th, A and B in tmm4, tmm5 (even q) or tmm6, tmm7 (odd
 * q), so that a load need not wait for the previous product to have read
 * its register. */
#define Q8_DP(sim, q, ra, rb, aq, wq, off)                                                                         \
    do {                                                                                                            \
        T_ZERO(sim, q);                                                                                             \
        T_LOAD(sim, ra, (aq) + (off), 4);                                                                           \
        T_LOAD(sim, rb, (wq) + (off), 64);                                                                          \
        T_DPBSSD(sim, q, ra, rb);                                                                                   \
    } while (0)

/* the products of steps [s0, s0 + 4) */
AI void q8_products(const int sim, const uint8_t *aq, const uint8_t *wq, int nb, int s0) {
    int off[4];
    for (int q = 0; q < 4; q++) {
        const int l = (s0 + q) / nb, i = s0 + q - l * nb;
        off[q] = i * Q8_BB + 64 * l;
    }
    Q8_DP(sim, 0, 4, 5, aq, wq, off[0]);
    Q8_DP(sim, 1, 6, 7, aq, wq, off[1]);
    Q8_DP(sim, 2, 4, 5, aq, wq, off[2]);
    Q8_DP(sim, 3, 6, 7, aq, wq, off[3]);
}
AI void q8_store(const int sim, int32_t (*S)[Q8_T][16]) {
    T_STORE(sim, 0, S[0], 64);
    T_STORE(sim, 1, S[1], 64);
    T_STORE(sim, 2, S[2], 64);
    T_STORE(sim, 3, S[3], 64);
}

/* One tile of 16 activation rows (aq, dy; nt of them real) against a group
 * of 16 weight rows (wq, meta; nr real): y[t][rr] for t < nt, rr < nr. Per
 * output, in the ref's order: lane l: acc_l = fma(s_x * d_a, sum, acc_l)
 * over the blocks in order (starting from 0); y = hsum8 of the 8 lanes. */
AI void q8_tile(const int sim, int nb, const uint8_t *wq, const q8_meta *meta, const uint8_t *aq, const float *dy,
                int nt, float *y, int ys, int nr) {
    int32_t S[3][4][Q8_T][16] __attribute__((aligned(64))); /* buffer, step, row, column */
    __m512 lane[8][Q8_T];
    __m512 acc[Q8_T];
    const int nch = 2 * nb; /* chunks of 4 steps, at least 2 */
    q8_products(sim, aq, wq, nb, 0);
    q8_store(sim, S[0]);
    q8_products(sim, aq, wq, nb, 4);
    q8_store(sim, S[1]);
    int l = 0, i = 0; /* the float steps' lane and block */
    for (int c = 0; c < nch; c++) {
        /* chunk c + 2's products run while chunk c's float steps do, and
         * are stored after them: the float steps read sums stored a chunk
         * earlier (a load right behind the tile store that feeds it waits
         * for that store to reach the cache) */
        if (c + 2 < nch) q8_products(sim, aq, wq, nb, 4 * (c + 2));
        for (int q = 0; q < 4; q++) {
            const __m512 sx = _mm512_loadu_ps(meta[i].s[l >= 4]);
            const float *d = dy + 16 * i;
            const int32_t(*C)[16] = S[c % 3][q];
#pragma GCC unroll 16
            for (int t = 0; t < Q8_T; t++) {
                const __m512 p = _mm512_mul_ps(sx, _mm512_set1_ps(d[t]));
                const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(C[t]));
                acc[t] = _mm512_fmadd_ps(p, s, i ? acc[t] : _mm512_setzero_ps());
            }
            if (++i == nb) {
                for (int t = 0; t < Q8_T; t++) lane[l][t] = acc[t];
                i = 0;
                l++;
            }
        }
        if (c + 2 < nch) q8_store(sim, S[(c + 2) % 3]);
    }
    const __mmask16 k = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nt; t++) {
        /* hsum8: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
        const __m512 r = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(lane[0][t], lane[4][t]),
                                                     _mm512_add_ps(lane[2][t], lane[6][t])),
                                       _mm512_add_ps(_mm512_add_ps(lane[1][t], lane[5][t]),
                                                     _mm512_add_ps(lane[3][t], lane[7][t])));
        _mm512_mask_storeu_ps(y + (size_t)t * ys, k, r);
    }
}

/* The whole gemm (kern.h mu_gemm_fn): every output as vec_dot. */
AI void gemm_q8_any(const int sim, const uint32_t type, int n, const void *w, size_t ws, int r0, int r1, const void *a,
                    size_t as, int n_t, float *y, int ys) {
    const mu_gemm_fn fb = type == MU_T_Q8_0 ? table_gemm_q8_0 : table_gemm_nvfp4;
    if (n_t <= 0 || r1 <= r0) return;
    if (n_t < Q8_MIN_T) {
        fb(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    const int nb = n / MU_QK8_0, ntt = (n_t + Q8_T - 1) / Q8_T;
    uint8_t *wq = mu_kern_amx_scratch(SCR_WB, (size_t)nb * Q8_BB);
    q8_meta *meta = mu_kern_amx_scratch(SCR_META, (size_t)nb * sizeof *meta);
    uint8_t *aq = mu_kern_amx_scratch(SCR_A, (size_t)ntt * nb * Q8_BB);
    float *dy = mu_kern_amx_scratch(SCR_AX, (size_t)ntt * nb * Q8_T * sizeof(float));
    if (!wq || !meta || !aq || !dy) {
        fb(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    const uint8_t *A = a;
    int neg = 0;
    for (int k = 0; k < ntt; k++) {
        const int nt = n_t - k * Q8_T < Q8_T ? n_t - k * Q8_T : Q8_T;
        neg |= q8_acopy(A + (size_t)k * Q8_T * as, as, nt, nb, aq + (size_t)k * nb * Q8_BB, dy + (size_t)k * nb * Q8_T);
    }
    if (neg) {
        fb(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    tilecfg cfg __attribute__((aligned(64)));
    q8_cfg(&cfg);
    tiles_load(sim, &cfg);
    for (int r = r0; r < r1; r += Q8_T) {
        const int nr = r1 - r < Q8_T ? r1 - r : Q8_T;
        q8_expand(type, w, ws, r, nr, nb, wq, meta);
        for (int k = 0; k < ntt; k++) {
            const int nt = n_t - k * Q8_T < Q8_T ? n_t - k * Q8_T : Q8_T;
            q8_tile(sim, nb, wq, meta, aq + (size_t)k * nb * Q8_BB, dy + (size_t)k * nb * Q8_T, nt,
                    y + (size_t)k * Q8_T * ys + r, ys, nr);
        }
    }
    tiles_end(sim);
}

#define Q8_GEMM(NAME, TYPE, SIM)                                                                                   \
    static void gemm_##NAME(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,     \
                            float *y, int ys) {                                                                     \
        gemm_q8_any(SIM, TYPE, n, w, ws, r0, r1, a, as, n_t, y, ys);                                                \
    }
Q8_GEMM(q8_0_amx, MU_T_Q8_0, 0)
Q8_GEMM(q8_0_amxsim, MU_T_Q8_0, 1)
Q8_GEMM(nvfp4_amx, MU_T_NVFP4, 0)
Q8_GEMM(nvfp4_amxsim, MU_T_NVFP4, 1)

void mu_kern_fill_gemm_amx_q8(mu_kern *k, int sim) {
    table_gemm_q8_0 = k->gemm[MU_T_Q8_0];
    table_gemm_nvfp4 = k->gemm[MU_T_NVFP4];
    k->gemm[MU_T_Q8_0] = sim ? gemm_q8_0_amxsim : gemm_q8_0_amx;
    k->gemm[MU_T_NVFP4] = sim ? gemm_nvfp4_amxsim : gemm_nvfp4_amx;
}
