/* gemm_amx.c: the AMX table's matrix-matrix kernels (prefill), and the
 * same kernels over emulated tiles (the "amxsim" table).
 * Owns: the Q4_K, Q6_K and Q5_K gemms on AMX int8 tiles in the ref's
 * rounding (Q4_K: the per-64 "repack gemm" order, the last n_t % 4
 * activation rows of a matmul as vec_dot, like every Q4_K gemm; Q6_K, Q5_K:
 * the vec_dot lanes), their tile configurations, the per-thread scratch of
 * every AMX gemm (mu_kern_amx_scratch), and the table's fill (the Q8_0 and
 * NVFP4 gemms are gemm_amx_q8.c's).
 * Does not: detect AMX or ask Linux for the tile state (kern_dispatch.c),
 * nor model the tile instructions (amx_tiles.h), nor own any dot: calls
 * of fewer than AMX_MIN_T activation rows, and rows left to vec_dot, go
 * through the AVX-512 table's gemm and vec_dot, taken at fill time.
 * Key design choice: the tiles compute only integers, and only integers the
 * ref forms as one integer, so the int32 tile sums are exact and every
 * float step runs in AVX-512 in exactly the ref's order. Scales that differ
 * inside such an integer are folded into the weights first (w' = scale *
 * code, split into two int8 tiles: w' = 128 hi + lo). The weights of a
 * group of 32 rows are expanded once per call and reused for every tile of
 * 16 activation rows. Q4_K: the weights are the A tiles (row-major, as
 * expanded) and the activations the B tiles (transposed once per call into
 * the VNNI layout), so C holds a weight row per tile row and the float
 * steps run along activation rows. Q6_K, Q5_K: the activations are the A
 * tiles, permuted so that each ref lane's 32 bytes are one tile row (once
 * per matmul by the engine's quantization pass through the table's prep,
 * or once per call when the caller has no prepared rows), and the weights
 * the B tiles in the VNNI layout. Scratch buffers are the calling
 * thread's, kept between calls (mu_kern_amx_scratch). With `sim` set,
 * the same code runs its tile instructions through amx_tiles.h's emu_*
 * (bit for bit what the instructions are specified to do), so the layouts
 * and the float order are tested on any AVX-512 machine; only the
 * instructions themselves need AMX hardware. */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "simd_avx512.h"
#include "amx_tiles.h"
#include "simd_x86.h"

#define AI __attribute__((always_inline)) static inline

static mu_vec_dot_fn table_dot_q4_K;
/* the AVX-512 gemms: taken when the scratch cannot be allocated */
static mu_gemm_fn table_gemm_q4_K, table_gemm_q6_K, table_gemm_q5_K;

/* ---- tiles ---------------------------------------------------------------
 * Registers: tmm0-3 C (16 x 16 int32); tmm4 and tmm7 16 rows x `ak` bytes,
 * tmm5-6 ak / 4 rows x 64 bytes (a B tile: ak values of 16 columns in the
 * VNNI layout, B[k][4 c + e] = x[c][4 k + e]). ak is 64 (Q4_K: every tile
 * 16 x 64 bytes) or 32 (Q6_K, Q5_K). */
static void cfg_fill(tilecfg *c, int ak) {
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int t = 0; t < 4; t++) c->rows[t] = 16, c->colsb[t] = 64;
    c->rows[4] = c->rows[7] = 16, c->colsb[4] = c->colsb[7] = (uint16_t)ak;
    c->rows[5] = c->rows[6] = (uint8_t)(ak / 4), c->colsb[5] = c->colsb[6] = 64;
}

static void tiles_begin(int sim, tilecfg *c, int ak) {
    cfg_fill(c, ak);
    tiles_load(sim, c);
}

/* Scratch of the calling thread, kept between calls and freed when the
 * thread exits (a pthread key's destructor): slot k grown to at least
 * `bytes`, 64-byte aligned; NULL when that fails. Allocating per call cost
 * the page faults of fresh memory in every call. */
typedef struct {
    void *buf[SCR_N];
    size_t cap[SCR_N];
} scratch_set;
static pthread_key_t scr_key;
static pthread_once_t scr_once = PTHREAD_ONCE_INIT;
static int scr_key_ok;
static void scr_free(void *p) {
    scratch_set *s = p;
    for (int k = 0; k < SCR_N; k++) free(s->buf[k]);
    free(s);
}
static void scr_init(void) { scr_key_ok = pthread_key_create(&scr_key, scr_free) == 0; }
void *mu_kern_amx_scratch(int k, size_t bytes) {
    pthread_once(&scr_once, scr_init);
    if (!scr_key_ok) return NULL;
    scratch_set *s = pthread_getspecific(scr_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(scr_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (bytes > s->cap[k]) {
        free(s->buf[k]);
        s->cap[k] = (bytes + 4095) & ~(size_t)4095;
        s->buf[k] = aligned_alloc(64, s->cap[k]);
        if (!s->buf[k]) s->cap[k] = 0;
    }
    return s->buf[k];
}

/* ---- Q4_K ----------------------------------------------------------------
 * The ref forms one integer per 64 values: isum = sc0 s0 + sc1 s1 over
 * sub-blocks 2j, 2j+1. So the weights are expanded as w' = scale * code
 * (<= 945) and split w' = 128 hi + lo (hi 0..7, lo 0..127): the A tiles,
 * 16 weight rows x the 64 values of a pair j, row-major as the expansion
 * writes them. The activation codes are the B tiles in the VNNI layout
 * (B[k][4 t + e] = code 4 k + e of activation row t), transposed once per
 * call by q4k_acopy. TDPBSSD gives C[r][t]; isum = 128 C_hi + C_lo, exact.
 * The float steps then run along the 16 activation rows of a tile, one zmm
 * per weight row, in the ref's order per output (see q4k_tile). The mins
 * sum imin is formed in float from the mins and the sub-block bsums, all
 * integers, exactly (every product and sum is below 2^24). A group is RG =
 * 32 weight rows (two halves of 16); its blocks are expanded once into wb
 * (per super-block i, pair j, half h: A_hi then A_lo, 1 KB each) and meta,
 * then every tile of 16 activation rows runs against it. The results leave
 * the registers transposed, 16 consecutive floats of an output row per
 * store (a scatter of 16 rows, 8 KB apart, cost more than the tiles). */
#define RG 32
#define TT 16
/* Fewer activation rows than this go to the AVX-512 gemm: the weights'
 * expansion is paid per call, the tiles' gain per activation row. */
#define AMX_MIN_T 32
#define Q4K_SB (4 * 2 * 2 * 1024)

typedef struct {
    float mn[8][RG]; /* the mins of the 8 sub-blocks */
    float dx[RG], dm[RG];
} q4k_meta;

/* per tile of activation rows and super-block: d_a and the bsum pairs of
 * its TT rows (zero past the last row) */
typedef struct {
    float d[TT];
    float b[8][TT]; /* the bsums of the 8 sub-blocks of 32 values */
} q4k_aux;

static void q4k_expand(const uint8_t *w, size_t ws, int r, int nr, int nb, uint8_t *wb, q4k_meta *meta) {
    if (nr < RG) { /* the missing rows: zero codes, scales and d */
        memset(wb, 0, (size_t)nb * Q4K_SB);
        memset(meta, 0, (size_t)nb * sizeof *meta);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m512i m7 = _mm512_set1_epi16(127);
    for (int rr = 0; rr < nr; rr++) {
        const mu_block_q4_K *x = (const mu_block_q4_K *)(w + (size_t)(r + rr) * ws);
        const int h = rr >> 4, c = rr & 15;
        for (int i = 0; i < nb; i++) {
            uint32_t u[4];
            k4_scales(x[i].scales, u);
            const uint8_t *sb = (const uint8_t *)u;
            for (int j = 0; j < 8; j++) meta[i].mn[j][rr] = sb[8 + j];
            meta[i].dx[rr] = f16_to_f32(x[i].d);
            meta[i].dm[rr] = f16_to_f32(x[i].dmin);
            for (int j = 0; j < 4; j++) {
                /* values 0..31 of the pair: sub-block 2j (low nibbles), 32..63: 2j + 1 (high) */
                const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
                const __m512i w0 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm256_and_si256(q, m4)),
                                                      _mm512_set1_epi16(sb[2 * j]));
                const __m512i w1 = _mm512_mullo_epi16(
                    _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4)), _mm512_set1_epi16(sb[2 * j + 1]));
                const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(w0, 7))),
                                                      _mm512_cvtepi16_epi8(_mm512_srli_epi16(w1, 7)), 1);
                const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_and_si512(w0, m7))),
                                                      _mm512_cvtepi16_epi8(_mm512_and_si512(w1, m7)), 1);
                uint8_t *o = wb + (size_t)i * Q4K_SB + (size_t)(j * 2 + h) * 2048 + (size_t)c * 64;
                _mm512_store_si512(o, hi);
                _mm512_store_si512(o + 1024, lo);
            }
        }
    }
}

/* The activation rows [0, nt) as B tiles: per tile of TT rows k,
 * super-block i and pair j, 1 KB at aq + ((k nb + i) 4 + j) 1024 (rows past
 * nt zero), and their d and bsum pairs in ax[k nb + i]. */
static void q4k_acopy(const uint8_t *a, size_t as, int nt, int nb, uint8_t *aq, q4k_aux *ax) {
    const int ntt = (nt + TT - 1) / TT;
    for (int k = 0; k < ntt; k++)
        for (int i = 0; i < nb; i++) {
            q4k_aux *x = &ax[(size_t)k * nb + i];
            for (int tt = 0; tt < TT; tt++) {
                const int t = k * TT + tt;
                if (t >= nt) {
                    x->d[tt] = 0;
                    for (int j = 0; j < 8; j++) x->b[j][tt] = 0;
                    continue;
                }
                const mu_block_q8_K *yb = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
                x->d[tt] = yb->d;
                for (int j = 0; j < 8; j++) x->b[j][tt] = (float)(yb->bsums[2 * j] + yb->bsums[2 * j + 1]);
            }
            for (int j = 0; j < 4; j++) {
                __m512i rw[TT], o[TT];
                for (int tt = 0; tt < TT; tt++) {
                    const int t = k * TT + tt;
                    rw[tt] = t < nt ? _mm512_loadu_si512(((const mu_block_q8_K *)(a + (size_t)t * as))[i].qs + 64 * j)
                                    : _mm512_setzero_si512();
                }
                transpose16_epi32(rw, o);
                uint8_t *b = aq + (((size_t)k * nb + i) * 4 + j) * 1024;
                for (int e = 0; e < 16; e++) _mm512_store_si512(b + 64 * e, o[e]);
            }
        }
}

/* The tiles of one step (super-block i, pair j): B (the activations) in
 * tmm6 on even steps and tmm7 on odd ones, so that a step's B load need not
 * wait for the previous step's products to have read theirs (tile
 * registers are not renamed); A_hi, A_lo of each half in tmm4, tmm5. */
#define Q4K_TILES(NAME, TB)                                                                                        \
    AI void NAME(const int sim, const uint8_t *aq, const uint8_t *wij, int32_t (*S)[TT][16]) {                    \
        T_LOAD(sim, TB, aq, 64);                                                                                    \
        T_ZERO(sim, 0);                                                                                             \
        T_ZERO(sim, 1);                                                                                             \
        T_LOAD(sim, 4, wij, 64);                                                                                    \
        T_LOAD(sim, 5, wij + 1024, 64);                                                                             \
        T_DPBSSD(sim, 0, 4, TB);                                                                                    \
        T_DPBSSD(sim, 1, 5, TB);                                                                                    \
        T_ZERO(sim, 2);                                                                                             \
        T_ZERO(sim, 3);                                                                                             \
        T_LOAD(sim, 4, wij + 2048, 64);                                                                             \
        T_LOAD(sim, 5, wij + 3072, 64);                                                                             \
        T_DPBSSD(sim, 2, 4, TB);                                                                                    \
        T_DPBSSD(sim, 3, 5, TB);                                                                                    \
        T_STORE(sim, 0, S[0], 64);                                                                                  \
        T_STORE(sim, 1, S[1], 64);                                                                                  \
        T_STORE(sim, 2, S[2], 64);                                                                                  \
        T_STORE(sim, 3, S[3], 64);                                                                                  \
    }
Q4K_TILES(q4k_tiles_even, 6)
Q4K_TILES(q4k_tiles_odd, 7)

/* The tiles of step (super-block i, pair j) into S (j's parity picks
 * the B register) */
AI void q4k_step(const int sim, const uint8_t *aq, const uint8_t *wb, int i, int j, int32_t (*S)[TT][16]) {
    const uint8_t *wij = wb + (size_t)i * Q4K_SB + (size_t)j * 4096, *aij = aq + (size_t)(4 * i + j) * 1024;
    if (j & 1)
        q4k_tiles_odd(sim, aij, wij, S);
    else
        q4k_tiles_even(sim, aij, wij, S);
}

/* One tile of activation rows (aq, ax: its B tiles and aux; nt rows)
 * against a group: y[t][rr] for t < nt, rr < nr.
 * Software-pipelined by super-blocks: the 4 tile steps of super-block
 * i + 1 go into S[(i + 1) & 1], one after each 8 weight rows of the float
 * steps of super-block i (which read S[i & 1]), so the tile unit and the
 * vector units overlap. The float steps run a weight row at a time over
 * the super-block's 4 pairs, with that row's sums in registers (loaded and
 * stored once per super-block, not once per pair). Per output and pair, in
 * the ref's order: acc = fma(isum, d, acc), accm = fma(imin, dm, accm),
 * with d = f16(d_x) * d_a and dm = f16(dmin_x) * d_a; y = acc - accm. */
AI void q4k_tile(const int sim, int nb, const uint8_t *wb, const q4k_meta *meta, const uint8_t *aq,
                 const q4k_aux *ax, int nt, float *y, int ys, int nr) {
    /* buffer, pair, (half, hi/lo), weight row, activation row */
    int32_t S[2][4][4][TT][16] __attribute__((aligned(64)));
    __m512 acc[RG], accm[RG];
    for (int j = 0; j < 4; j++) q4k_step(sim, aq, wb, 0, j, S[0][j]);
    for (int i = 0; i < nb; i++) {
        const q4k_meta *m = &meta[i];
        const q4k_aux *x = &ax[i];
        const int32_t(*C)[4][TT][16] = S[i & 1];
        const __m512 yd = _mm512_loadu_ps(x->d);
        __m512 bs[8];
        for (int j = 0; j < 8; j++) bs[j] = _mm512_loadu_ps(x->b[j]);
        for (int q = 0; q < 4; q++) {
            if (i + 1 < nb) q4k_step(sim, aq, wb, i + 1, q, S[(i + 1) & 1][q]);
            for (int r8 = 0; r8 < 8; r8++) {
                const int rr = 8 * q + r8, h = rr >> 4, r = rr & 15;
                const __m512 d = _mm512_mul_ps(_mm512_set1_ps(m->dx[rr]), yd);
                const __m512 dm = _mm512_mul_ps(_mm512_set1_ps(m->dm[rr]), yd);
                /* the first super-block starts from zero (no array to clear) */
                __m512 a = i ? acc[rr] : _mm512_setzero_ps(), am = i ? accm[rr] : _mm512_setzero_ps();
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(C[j][2 * h][r]), 7),
                                                          _mm512_load_si512(C[j][2 * h + 1][r]));
                    /* imin = mn_2j b_2j + mn_2j+1 b_2j+1: integers below 2^24,
                     * so the float product and the one-rounding FMA are exact */
                    const __m512 imin = _mm512_fmadd_ps(_mm512_set1_ps(m->mn[2 * j][rr]), bs[2 * j],
                                                        _mm512_mul_ps(_mm512_set1_ps(m->mn[2 * j + 1][rr]), bs[2 * j + 1]));
                    a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, a);
                    am = _mm512_fmadd_ps(imin, dm, am);
                }
                acc[rr] = a;
                accm[rr] = am;
            }
        }
    }
    /* y[t][16 h + r]: each half's 16 x 16 results transposed in registers,
     * so that every store is 16 consecutive floats of one output row */
    for (int h = 0; h < 2 && 16 * h < nr; h++) {
        const int left = nr - 16 * h;
        const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512i v[16], o[16];
        for (int r = 0; r < 16; r++) v[r] = _mm512_castps_si512(_mm512_sub_ps(acc[16 * h + r], accm[16 * h + r]));
        transpose16_epi32(v, o);
        for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y + (size_t)t * ys + 16 * h, k, _mm512_castsi512_ps(o[t]));
    }
}

/* The whole gemm (kern.h mu_gemm_fn) with the Q4_K rule of gemm_avx512.c:
 * activation rows below n_t & ~3 in the per-64 order, the rest as vec_dot. */
AI void gemm_q4_K_amx_any(const int sim, int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as,
                          int n_t, float *y, int ys) {
    const int nb = n / MU_QK_K, nb4 = n_t & ~3;
    const uint8_t *A = a;
    if (nb4 < AMX_MIN_T) { /* a decode batch: expanding the weights costs more than it saves */
        table_gemm_q4_K(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    if (r1 > r0) {
        const int ntt = (nb4 + TT - 1) / TT;
        uint8_t *wb = mu_kern_amx_scratch(SCR_WB, (size_t)nb * Q4K_SB);
        q4k_meta *meta = mu_kern_amx_scratch(SCR_META, (size_t)nb * sizeof *meta);
        uint8_t *aq = mu_kern_amx_scratch(SCR_A, (size_t)ntt * nb * 4 * 1024);
        q4k_aux *ax = mu_kern_amx_scratch(SCR_AX, (size_t)ntt * nb * sizeof *ax);
        if (!wb || !meta || !aq || !ax) {
            table_gemm_q4_K(n, w, ws, r0, r1, a, as, n_t, y, ys);
            return;
        }
        q4k_acopy(A, as, nb4, nb, aq, ax);
        tilecfg cfg __attribute__((aligned(64)));
        tiles_begin(sim, &cfg, 64);
        for (int r = r0; r < r1; r += RG) {
            const int nr = r1 - r < RG ? r1 - r : RG;
            q4k_expand(w, ws, r, nr, nb, wb, meta);
            for (int k = 0; k < ntt; k++) {
                const int nt = nb4 - k * TT < TT ? nb4 - k * TT : TT;
                q4k_tile(sim, nb, wb, meta, aq + (size_t)k * nb * 4 * 1024, ax + (size_t)k * nb, nt,
                         y + (size_t)k * TT * ys + r, ys, nr);
            }
        }
        tiles_end(sim);
    }
    for (int t = nb4; t < n_t; t++)
        for (int r = r0; r < r1; r++)
            y[(size_t)t * ys + r] = table_dot_q4_K(n, (const uint8_t *)w + (size_t)r * ws, A + (size_t)t * as);
}

static void gemm_q4_K_amx(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t, float *y,
                          int ys) {
    gemm_q4_K_amx_any(0, n, w, ws, r0, r1, a, as, n_t, y, ys);
}
static void gemm_q4_K_amxsim(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                             float *y, int ys) {
    gemm_q4_K_amx_any(1, n, w, ws, r0, r1, a, as, n_t, y, ys);
}

/* ---- Q6_K, Q5_K: the ref's 8 lanes ----------------------------------------
 * Their dots (kern_ref.c) keep 8 float lanes per output: lane m takes bytes
 * 4m..4m+3 of every chunk of 32 values, each chunk with its own scale, and
 * the lane's integer sum over a super-block goes into one FMA. So a tile sum
 * must be one lane of one super-block with the scales already inside: the
 * weights are expanded as w' = scale * code, split w' = 128 hi + lo (hi
 * signed, lo in 0..127, both bytes; |w'| <= 8064), and lane m's 32 values
 * (8 chunks x 4 bytes) form the K of one TDPBSSD pair: C_hi = A . B_hi,
 * C_lo = A . B_lo, lane sum = 128 C_hi + C_lo, exact. The activations are
 * permuted to match (lane_perm_row): row t, super-block i, lane m holds
 * bytes 32c + 4m + e of the Q8_K block for c < 8, e < 4. */
typedef struct {
    /* words (lo, hi) for VPMADDWD: Q6_K: scales (2m, 2m + 1) for lane m's
     * bsum correction; Q5_K, m < 4: mins (2m, 2m + 1) */
    int32_t sp[8][RG];
    float dx[RG], dm[RG];
} lane_meta;

/* The 256 codes of a block (unsigned, as the ref decodes them), as 8
 * chunks of 32, with each value's scale as words (cs[k]: chunk k). */
static void q6k_codes(const mu_block_q6_K *x, __m256i u[8], __m512i cs[8], int32_t sub[16]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i q1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4);
        const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4);
        const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4);
        u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(q0, m4), h0);
        u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(q1, m4), h1);
        u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), h2);
        u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4), h3);
    }
    for (int k = 0; k < 8; k++)
        cs[k] = _mm512_inserti64x4(_mm512_set1_epi16(x->scales[2 * k]), _mm256_set1_epi16(x->scales[2 * k + 1]), 1);
    for (int j = 0; j < 16; j++) sub[j] = x->scales[j];
}

static void q5k_codes(const mu_block_q5_K *x, __m256i u[8], __m512i cs[8], int32_t mins[16]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const __m256i hb = _mm256_loadu_si256((const __m256i *)x->qh);
    for (int j = 0; j < 4; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
        const __m256i b0 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * j)), one);
        const __m256i b1 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * j + 1)), one);
        u[2 * j] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(b0, 4));
        u[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_slli_epi16(b1, 4));
    }
    uint32_t w[4];
    k4_scales(x->scales, w);
    const uint8_t *b = (const uint8_t *)w;
    for (int k = 0; k < 8; k++) cs[k] = _mm512_set1_epi16(b[k]);
    for (int j = 0; j < 16; j++) mins[j] = j < 8 ? b[8 + j] : 0;
}

/* wb per super-block i, lane m, half h: B_hi then B_lo (512 bytes each),
 * B[c][4 r + e] = part of w'[32c + 4m + e] of row 16h + r. */
#define LANE_SB (8 * 2 * 2 * 512)
static void lane_expand(uint32_t type, const uint8_t *w, size_t ws, int r, int nr, int nb, uint8_t *wb,
                        lane_meta *meta) {
    if (nr < RG) {
        memset(wb, 0, (size_t)nb * LANE_SB);
        memset(meta, 0, (size_t)nb * sizeof *meta);
    }
    const __m512i m7 = _mm512_set1_epi16(127);
    for (int rr = 0; rr < nr; rr++) {
        const uint8_t *row = w + (size_t)(r + rr) * ws;
        const int h = rr >> 4, c0 = rr & 15;
        for (int i = 0; i < nb; i++) {
            int32_t side[16];
            __m256i u[8];
            __m512i cs[8];
            if (type == MU_T_Q6_K) {
                const mu_block_q6_K *x = (const mu_block_q6_K *)row + i;
                q6k_codes(x, u, cs, side);
                meta[i].dx[rr] = f16_to_f32(x->d);
            } else {
                const mu_block_q5_K *x = (const mu_block_q5_K *)row + i;
                q5k_codes(x, u, cs, side);
                meta[i].dx[rr] = f16_to_f32(x->d);
                meta[i].dm[rr] = f16_to_f32(x->dmin);
            }
            for (int j = 0; j < 8; j++)
                meta[i].sp[j][rr] = (int32_t)((uint32_t)(uint16_t)side[2 * j] | (uint32_t)side[2 * j + 1] << 16);
            uint8_t *bi = wb + (size_t)i * LANE_SB;
            for (int c = 0; c < 8; c++) {
                /* w' = scale * code in 16 bits (|w'| <= 8064), hi = w' >> 7, lo = w' & 127 */
                const __m512i wp = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(u[c]), cs[c]);
                uint32_t hi[8], lo[8];
                _mm256_storeu_si256((__m256i *)hi, _mm512_cvtepi16_epi8(_mm512_srai_epi16(wp, 7)));
                _mm256_storeu_si256((__m256i *)lo, _mm512_cvtepi16_epi8(_mm512_and_si512(wp, m7)));
                for (int m = 0; m < 8; m++) {
                    uint8_t *bh = bi + ((m * 2 + h) * 2 + 0) * 512 + c * 64 + 4 * c0;
                    memcpy(bh, &hi[m], 4);
                    memcpy(bh + 512, &lo[m], 4);
                }
            }
        }
    }
}

/* The activation codes of rows [0, nt) permuted to the lane order, TT rows
 * (the missing ones zero), nb * 256 bytes a row. */
/* One activation row (nb Q8_K blocks) into nb * 256 bytes at o. */
static void lane_perm_row(const uint8_t *a, int nb, uint8_t *o) {
    /* output dword 16k + j (lane m = 2k + j / 8, chunk c = j % 8) is input
     * dword 8c + m: an 8 x 8 transpose of dwords, 16 per gather */
    __m512i idx[4];
    for (int k = 0; k < 4; k++)
        idx[k] = _mm512_set_epi32(8 * 7 + 2 * k + 1, 8 * 6 + 2 * k + 1, 8 * 5 + 2 * k + 1, 8 * 4 + 2 * k + 1,
                                  8 * 3 + 2 * k + 1, 8 * 2 + 2 * k + 1, 8 * 1 + 2 * k + 1, 2 * k + 1, 8 * 7 + 2 * k,
                                  8 * 6 + 2 * k, 8 * 5 + 2 * k, 8 * 4 + 2 * k, 8 * 3 + 2 * k, 8 * 2 + 2 * k,
                                  8 * 1 + 2 * k, 2 * k);
    for (int i = 0; i < nb; i++) {
        const int8_t *q = ((const mu_block_q8_K *)a)[i].qs;
        for (int k = 0; k < 4; k++) _mm512_storeu_si512(o + (size_t)i * 256 + 64 * k, _mm512_i32gather_epi32(idx[k], q, 4));
    }
}

static void lane_perm(const uint8_t *a, size_t as, int nt, int nb, uint8_t *p) {
    if (nt < TT) memset(p + (size_t)nt * nb * 256, 0, (size_t)(TT - nt) * nb * 256);
    for (int t = 0; t < nt; t++) lane_perm_row(a + (size_t)t * as, nb, p + (size_t)t * nb * 256);
}

/* the table's prep for Q6_K and Q5_K (kern.h mu_prep_fn) */
static void prep_lane(int n, const void *a, void *p) { lane_perm_row(a, n / MU_QK_K, p); }

/* One tile of TT permuted activation rows p (row t: nb * 256 bytes) against
 * a group; a: the Q8_K rows themselves (d, bsums), nt of them. */
AI void lane_tile(const int sim, const uint32_t type, int nb, const uint8_t *wb, const lane_meta *meta,
                  const uint8_t *p, const uint8_t *a, size_t as, int nt, float *y, int ys, int nr) {
    int32_t S[8][4][TT][16] __attribute__((aligned(64))); /* lane, (half, hi/lo), row, col */
    __m512 acc[TT][2][8], summs[TT][2];
    const size_t ps = (size_t)nb * 256;
    for (int t = 0; t < TT; t++)
        for (int h = 0; h < 2; h++) {
            summs[t][h] = _mm512_setzero_ps();
            for (int m = 0; m < 8; m++) acc[t][h][m] = _mm512_setzero_ps();
        }
    for (int i = 0; i < nb; i++) {
        const uint8_t *wi = wb + (size_t)i * LANE_SB;
        for (int m = 0; m < 8; m++) {
            T_ZERO(sim, 0);
            T_ZERO(sim, 1);
            T_ZERO(sim, 2);
            T_ZERO(sim, 3);
            T_LOAD(sim, 4, p + (size_t)i * 256 + 32 * m, ps);
            T_LOAD(sim, 5, wi + ((m * 2 + 0) * 2 + 0) * 512, 64);
            T_LOAD(sim, 6, wi + ((m * 2 + 0) * 2 + 1) * 512, 64);
            T_DPBSSD(sim, 0, 4, 5);
            T_DPBSSD(sim, 1, 4, 6);
            T_LOAD(sim, 5, wi + ((m * 2 + 1) * 2 + 0) * 512, 64);
            T_LOAD(sim, 6, wi + ((m * 2 + 1) * 2 + 1) * 512, 64);
            T_DPBSSD(sim, 2, 4, 5);
            T_DPBSSD(sim, 3, 4, 6);
            T_STORE(sim, 0, S[m][0], 64);
            T_STORE(sim, 1, S[m][1], 64);
            T_STORE(sim, 2, S[m][2], 64);
            T_STORE(sim, 3, S[m][3], 64);
        }
        const lane_meta *mt = &meta[i];
        for (int t = 0; t < nt; t++) {
            const mu_block_q8_K *yb = (const mu_block_q8_K *)(a + (size_t)t * as) + i;
            const __m512 yd = _mm512_set1_ps(yb->d);
            for (int h = 0; h < 2; h++) {
                /* d = d_a * f16(d_x), as the ref */
                const __m512 d = _mm512_mul_ps(yd, _mm512_loadu_ps(&mt->dx[16 * h]));
                if (type == MU_T_Q5_K) {
                    /* summs = fma(sum_j mn_j (bsum_2j + bsum_2j+1), -d_a * f16(dmin_x), summs) */
                    __m512i imin = _mm512_setzero_si512();
                    for (int j = 0; j < 4; j++) {
                        const uint32_t b0 = (uint16_t)(yb->bsums[4 * j] + yb->bsums[4 * j + 1]);
                        const uint32_t b1 = (uint16_t)(yb->bsums[4 * j + 2] + yb->bsums[4 * j + 3]);
                        imin = _mm512_add_epi32(imin, _mm512_madd_epi16(_mm512_loadu_si512(&mt->sp[j][16 * h]),
                                                                        _mm512_set1_epi32((int32_t)(b0 | b1 << 16))));
                    }
                    const __m512 dmin = _mm512_mul_ps(_mm512_set1_ps(-yb->d), _mm512_loadu_ps(&mt->dm[16 * h]));
                    summs[t][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), dmin, summs[t][h]);
                }
                for (int m = 0; m < 8; m++) {
                    __m512i s = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(S[m][2 * h][t]), 7),
                                                 _mm512_load_si512(S[m][2 * h + 1][t]));
                    if (type == MU_T_Q6_K) {
                        /* - 32 (bsum_2m sc_2m + bsum_2m+1 sc_2m+1) */
                        int32_t bp;
                        memcpy(&bp, &yb->bsums[2 * m], 4);
                        const __m512i corr =
                            _mm512_madd_epi16(_mm512_set1_epi32(bp), _mm512_loadu_si512(&mt->sp[m][16 * h]));
                        s = _mm512_sub_epi32(s, _mm512_slli_epi32(corr, 5));
                    }
                    acc[t][h][m] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[t][h][m]);
                }
            }
        }
    }
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < 2; h++) {
            const int left = nr - 16 * h;
            if (left <= 0) break;
            const __m512 *l = acc[t][h];
            /* hsum8 over the lanes: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
            __m512 r = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                                     _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])));
            if (type == MU_T_Q5_K) r = _mm512_add_ps(r, summs[t][h]);
            const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            _mm512_mask_storeu_ps(y + (size_t)t * ys + 16 * h, k, r);
        }
}

/* Every activation row in the vec_dot order (Q6_K and Q5_K have no other),
 * from the rows prepared by lane_perm at p (NULL: prepared here). */
AI void gemm_lane_any(const int sim, const uint32_t type, int n, const void *w, size_t ws, int r0, int r1,
                      const void *a, size_t as, const uint8_t *pp, int n_t, float *y, int ys) {
    const int nb = n / MU_QK_K, n_tt = (n_t + TT - 1) / TT;
    if (n_t <= 0 || r1 <= r0) return;
    if (n_t < AMX_MIN_T) {
        (type == MU_T_Q6_K ? table_gemm_q6_K : table_gemm_q5_K)(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    uint8_t *wb = mu_kern_amx_scratch(SCR_WB, (size_t)nb * LANE_SB);
    lane_meta *meta = mu_kern_amx_scratch(SCR_META, (size_t)nb * sizeof *meta);
    uint8_t *p = pp ? NULL : mu_kern_amx_scratch(SCR_A, (size_t)n_tt * TT * nb * 256);
    if (!wb || !meta || (!pp && !p)) {
        (type == MU_T_Q6_K ? table_gemm_q6_K : table_gemm_q5_K)(n, w, ws, r0, r1, a, as, n_t, y, ys);
        return;
    }
    const uint8_t *A = a;
    if (!pp)
        for (int k = 0; k < n_tt; k++) {
            const int nt = n_t - k * TT < TT ? n_t - k * TT : TT;
            lane_perm(A + (size_t)k * TT * as, as, nt, nb, p + (size_t)k * TT * nb * 256);
        }
    else
        p = (uint8_t *)pp; /* read only below; not freed */
    tilecfg cfg __attribute__((aligned(64)));
    tiles_begin(sim, &cfg, 32);
    for (int r = r0; r < r1; r += RG) {
        const int nr = r1 - r < RG ? r1 - r : RG;
        lane_expand(type, w, ws, r, nr, nb, wb, meta);
        for (int k = 0; k < n_tt; k++) {
            const int nt = n_t - k * TT < TT ? n_t - k * TT : TT;
            lane_tile(sim, type, nb, wb, meta, p + (size_t)k * TT * nb * 256, A + (size_t)k * TT * as, as, nt,
                      y + (size_t)k * TT * ys + r, ys, nr);
        }
    }
    tiles_end(sim);
}

#define LANE_GEMMS(NAME, TYPE, SIM)                                                                                \
    static void gemm_##NAME(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,     \
                            float *y, int ys) {                                                                     \
        gemm_lane_any(SIM, TYPE, n, w, ws, r0, r1, a, as, NULL, n_t, y, ys);                                        \
    }                                                                                                               \
    static void gemm_p_##NAME(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as,           \
                              const void *p, int n_t, float *y, int ys) {                                           \
        gemm_lane_any(SIM, TYPE, n, w, ws, r0, r1, a, as, p, n_t, y, ys);                                           \
    }
LANE_GEMMS(q6_K_amx, MU_T_Q6_K, 0)
LANE_GEMMS(q6_K_amxsim, MU_T_Q6_K, 1)
LANE_GEMMS(q5_K_amx, MU_T_Q5_K, 0)
LANE_GEMMS(q5_K_amxsim, MU_T_Q5_K, 1)

void mu_kern_fill_gemm_amx(mu_kern *k, int sim) {
    table_dot_q4_K = k->vec_dot[MU_T_Q4_K];
    table_gemm_q4_K = k->gemm[MU_T_Q4_K];
    table_gemm_q6_K = k->gemm[MU_T_Q6_K];
    table_gemm_q5_K = k->gemm[MU_T_Q5_K];
    k->gemm[MU_T_Q4_K] = sim ? gemm_q4_K_amxsim : gemm_q4_K_amx;
    k->gemm[MU_T_Q6_K] = sim ? gemm_q6_K_amxsim : gemm_q6_K_amx;
    k->gemm[MU_T_Q5_K] = sim ? gemm_q5_K_amxsim : gemm_q5_K_amx;
    /* the lane layout once per matmul, not once per thread */
    k->prep[MU_T_Q6_K] = k->prep[MU_T_Q5_K] = prep_lane;
    k->gemm_p[MU_T_Q6_K] = sim ? gemm_p_q6_K_amxsim : gemm_p_q6_K_amx;
    k->gemm_p[MU_T_Q5_K] = sim ? gemm_p_q5_K_amxsim : gemm_p_q5_K_amx;
    k->prep_min_t = AMX_MIN_T;
    mu_kern_fill_gemm_amx_q8(k, sim);
}
