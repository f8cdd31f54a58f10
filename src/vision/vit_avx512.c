/* vit_avx512.c: the vision encoder's kernels with AVX-512 (the only file of
 * src/vision compiled with ISA flags).
 * Owns: attention for one head (vit_kern.c's attn_ref, lane for lane): the
 * window's K and V converted once to f32 (K transposed by key tile, so 16
 * keys share a vector), then per query the same FMA chains, ggml's vector
 * expf and the same double sums as the reference, in blocks of query rows
 * that share each tile's loads; and the F16 matmul (below).
 * Does not own: anything with a different rounding than the reference; the
 * unit test compares them bit for bit. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kern/expf_avx512.h"
#include "vit.h"

#define TILE 64

#define AI __attribute__((always_inline)) static inline

/* The window's keys as the kernels read them (kt): K^T by key tile, each
 * tile [hd][TILE] contiguous, so a tile's rows stream in order (a layout
 * with the whole window between rows put every row of a tile in the same L1
 * sets); V as rows of hd floats (vf). */
static inline const float *kt_tile(const float *kt, int hd, int t0, int t_base) {
    return kt + (size_t)(t0 - t_base) * hd;
}

/* The key-tile masks of window [lo, hi) for the tile at t0: bit l of
 * live[g] is key t0 + 16 g + l. */
static inline void tile_live(int t0, int lo, int hi, __mmask16 live[4]) {
    for (int g = 0; g < 4; g++) {
        const int j0 = t0 + 16 * g;
        uint32_t m = 0;
        for (int l = 0; l < 16; l++) m |= (uint32_t)(j0 + l >= lo && j0 + l < hi) << l;
        live[g] = (__mmask16)m;
    }
}

/* One row's online-softmax step for a key tile, in the reference's order:
 * s (the 64 scores) scaled, masked, the tile maximum; when it is not -inf
 * the new maximum, the factor *ms for the row's accumulators when the
 * maximum grew (*resc), e = expf(s - M) and the double sum into S. Returns
 * false for a tile with no live key (the row takes nothing from it). */
AI bool softmax_tile(__m512 s[4], const __mmask16 live[4], __m512 vscale, float *M, float *S, float *e, float *ms,
                     bool *resc) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (int g = 0; g < 4; g++) {
        s[g] = _mm512_add_ps(_mm512_mul_ps(s[g], vscale), _mm512_setzero_ps());
        s[g] = _mm512_mask_blend_ps(live[g], ninf, s[g]);
        mx = _mm512_max_ps(mx, s[g]);
    }
    const float tmax = _mm512_reduce_max_ps(mx);
    if (tmax == -INFINITY) return false;
    const float Mnew = fmaxf(*M, tmax);
    *resc = Mnew > *M;
    if (*resc) {
        *ms = expf(*M - Mnew);
        *S *= *ms;
    }
    *M = Mnew;
    const __m512 vm = _mm512_set1_ps(Mnew);
    double sum = 0;
    for (int g = 0; g < 4; g++) {
        const __m512 ev = mu_expf512(_mm512_sub_ps(s[g], vm));
        _mm512_storeu_ps(e + 16 * g, ev);
        sum += (double)_mm512_reduce_add_ps(ev); /* GCC's tree is mu_hsum16's */
    }
    *S = (float)((double)*S + sum);
    return true;
}

/* One query row (any hv): its accumulators in registers across the tiles. */
static void attn_one(const mu_vit_attn_args *a, int i, const float *kt, const float *vf, int t_base, int lo, int hi) {
    const int hd = a->hd, hv = hd / 16;
    const float *q = a->q + (size_t)i * a->ld + a->off;
    float M = -INFINITY, S = 0.0f, e[TILE], ms = 1.0f;
    __m512 acc[32];
    for (int c = 0; c < hv; c++) acc[c] = _mm512_setzero_ps();
    const __m512 vscale = _mm512_set1_ps(a->scale);
    for (int t0 = t_base; t0 < hi; t0 += TILE) {
        __mmask16 live[4];
        tile_live(t0, lo, hi, live);
        __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        const float *kb = kt_tile(kt, hd, t0, t_base);
        for (int d = 0; d < hd; d++) {
            const __m512 qd = _mm512_set1_ps(q[d]);
            for (int g = 0; g < 4; g++) s[g] = _mm512_fmadd_ps(_mm512_load_ps(kb + d * TILE + 16 * g), qd, s[g]);
        }
        bool resc = false;
        if (!softmax_tile(s, live, vscale, &M, &S, e, &ms, &resc)) continue;
        if (resc)
            for (int c = 0; c < hv; c++) acc[c] = _mm512_mul_ps(acc[c], _mm512_set1_ps(ms));
        const int j0 = t0 > lo ? t0 : lo, j1 = t0 + TILE < hi ? t0 + TILE : hi;
        for (int j = j0; j < j1; j++) {
            const float *vr = vf + (size_t)(j - t_base) * hd;
            const __m512 w = _mm512_set1_ps(e[j - t0]);
            for (int c = 0; c < hv; c++) acc[c] = _mm512_fmadd_ps(_mm512_loadu_ps(vr + 16 * c), w, acc[c]);
        }
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    float *o = a->out + (size_t)i * a->ld + a->off;
    for (int c = 0; c < hv; c++) _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(acc[c], _mm512_set1_ps(inv)));
}

/* A block of nb query rows (a multiple of 4, at most QB = 32: against 4,
 * the K and V tiles are read from L2 or L3 an eighth as often; at 4096 keys
 * a head's K and V, 3 MB as floats, do not fit in L2) that share the
 * window [lo, hi), HV = hd / 16 a constant. Per key tile, first the scores
 * and softmax of every group of 4 rows (the tile's K^T, 64 x hd floats,
 * stays in L1 while the groups pass it), then the V products of every group
 * (the same for V), each group's accumulators in registers for the tile and
 * in acc between tiles (stored and loaded as they are). Every row keeps its
 * own maximum, sum and chains, in the reference's order. */
#define QB 32

AI void attn_block(const mu_vit_attn_args *a, int i, int nb, const float *kt, const float *vf, int t_base, int lo,
                   int hi, const int HV) {
    const int hd = 16 * HV;
    const float *q[QB];
    float M[QB], S[QB], ms[QB];
    bool use[QB], resc[QB];
    float e[QB][TILE] __attribute__((aligned(64)));
    float acc[QB][16 * HV] __attribute__((aligned(64)));
    for (int r = 0; r < nb; r++) {
        q[r] = a->q + (size_t)(i + r) * a->ld + a->off, M[r] = -INFINITY, S[r] = 0.0f;
        memset(acc[r], 0, sizeof acc[r]);
    }
    const __m512 vscale = _mm512_set1_ps(a->scale);
    for (int t0 = t_base; t0 < hi; t0 += TILE) {
        __mmask16 live[4];
        tile_live(t0, lo, hi, live);
        const float *kb = kt_tile(kt, hd, t0, t_base);
        bool any = false;
        for (int g = 0; g < nb; g += 4) {
            __m512 s[4][4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) s[r][c] = _mm512_setzero_ps();
            for (int d = 0; d < hd; d++) {
                const float *kr = kb + d * TILE;
                const __m512 k0 = _mm512_load_ps(kr), k1 = _mm512_load_ps(kr + 16), k2 = _mm512_load_ps(kr + 32),
                             k3 = _mm512_load_ps(kr + 48);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m512 qd = _mm512_set1_ps(q[g + r][d]);
                    s[r][0] = _mm512_fmadd_ps(k0, qd, s[r][0]);
                    s[r][1] = _mm512_fmadd_ps(k1, qd, s[r][1]);
                    s[r][2] = _mm512_fmadd_ps(k2, qd, s[r][2]);
                    s[r][3] = _mm512_fmadd_ps(k3, qd, s[r][3]);
                }
            }
            for (int r = 0; r < 4; r++) {
                use[g + r] = softmax_tile(s[r], live, vscale, &M[g + r], &S[g + r], e[g + r], &ms[g + r], &resc[g + r]);
                any |= use[g + r];
            }
        }
        if (!any) continue;
        const int j0 = t0 > lo ? t0 : lo, j1 = t0 + TILE < hi ? t0 + TILE : hi;
        for (int g = 0; g < nb; g += 4) {
            __m512 ac[4][HV];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const bool scale = use[g + r] && resc[g + r]; /* the maximum grew: the reference's acc *= ms */
#pragma GCC unroll 8
                for (int c = 0; c < HV; c++) {
                    ac[r][c] = _mm512_load_ps(acc[g + r] + 16 * c);
                    if (scale) ac[r][c] = _mm512_mul_ps(ac[r][c], _mm512_set1_ps(ms[g + r]));
                }
            }
            if (use[g] && use[g + 1] && use[g + 2] && use[g + 3]) {
                for (int j = j0; j < j1; j++) {
                    const float *vr = vf + (size_t)(j - t_base) * hd;
                    __m512 w[4];
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++) w[r] = _mm512_set1_ps(e[g + r][j - t0]);
#pragma GCC unroll 8
                    for (int c = 0; c < HV; c++) {
                        const __m512 v = _mm512_load_ps(vr + 16 * c);
#pragma GCC unroll 4
                        for (int r = 0; r < 4; r++) ac[r][c] = _mm512_fmadd_ps(v, w[r], ac[r][c]);
                    }
                }
            } else { /* a row with no live key in this tile takes nothing from it */
                for (int j = j0; j < j1; j++) {
                    const float *vr = vf + (size_t)(j - t_base) * hd;
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++) {
                        if (!use[g + r]) continue;
                        const __m512 w = _mm512_set1_ps(e[g + r][j - t0]);
#pragma GCC unroll 8
                        for (int c = 0; c < HV; c++) ac[r][c] = _mm512_fmadd_ps(_mm512_load_ps(vr + 16 * c), w, ac[r][c]);
                    }
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
#pragma GCC unroll 8
                for (int c = 0; c < HV; c++) _mm512_store_ps(acc[g + r] + 16 * c, ac[r][c]);
        }
    }
    for (int r = 0; r < nb; r++) {
        const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
        float *o = a->out + (size_t)(i + r) * a->ld + a->off;
        for (int c = 0; c < HV; c++)
            _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(_mm512_load_ps(acc[r] + 16 * c), _mm512_set1_ps(inv)));
    }
}

#define ATTN_BLOCK(HV)                                                                                              \
    static void attn_block_##HV(const mu_vit_attn_args *a, int i, int nb, const float *kt, const float *vf,        \
                                int t_base, int lo, int hi) {                                                       \
        attn_block(a, i, nb, kt, vf, t_base, lo, hi, HV);                                                           \
    }
ATTN_BLOCK(2)
ATTN_BLOCK(4)
ATTN_BLOCK(6)
ATTN_BLOCK(8)

static void attn_avx512(const mu_vit_attn_args *a, int i0, int i1) {
    const int hd = a->hd, hv = hd / 16;
    if (hd % 16 || hd > 512 || a->n < TILE) {
        mu_vit_attn_ref(a, i0, i1);
        return;
    }
    void (*block)(const mu_vit_attn_args *, int, int, const float *, const float *, int, int, int) =
        hv == 2 ? attn_block_2 : hv == 4 ? attn_block_4 : hv == 6 ? attn_block_6 : hv == 8 ? attn_block_8 : NULL;
    float *kt = NULL, *vf = NULL; /* the window's keys: kt (kt_tile), V [span][hd] */
    int c_lo = -1, c_hi = -1, t_base = 0, span = 0;
    for (int i = i0; i < i1;) {
        const int lo = a->win_lo[i], hi = a->win_hi[i];
        if (lo != c_lo || hi != c_hi) {
            c_lo = lo, c_hi = hi;
            t_base = lo / TILE * TILE;
            span = (hi - t_base + TILE - 1) / TILE * TILE;
            free(kt), free(vf);
            kt = aligned_alloc(64, (size_t)hd * span * sizeof *kt);
            vf = aligned_alloc(64, (size_t)span * hd * sizeof *vf);
            if (!kt || !vf) abort(); /* a few MB at most per thread */
            for (int j = 0; j < span; j++) {
                const int g = t_base + j;
                float *kc = kt + (size_t)(j / TILE) * TILE * hd + j % TILE; /* key j's column of its tile */
                if (g >= lo && g < hi) {
                    const mu_f16 *k = a->k + (size_t)g * a->ld + a->off, *v = a->v + (size_t)g * a->ld + a->off;
                    for (int d = 0; d + 16 <= hd; d += 16) {
                        _mm512_store_ps(vf + (size_t)j * hd + d,
                                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + d))));
                        float tmp[16];
                        _mm512_storeu_ps(tmp, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + d))));
                        for (int l = 0; l < 16; l++) kc[(size_t)(d + l) * TILE] = tmp[l];
                    }
                } else {
                    for (int d = 0; d < hd; d++) kc[(size_t)d * TILE] = 0.0f, vf[(size_t)j * hd + d] = 0.0f;
                }
            }
        }
        int run = 1; /* rows from i that share this window, up to a block */
        while (run < QB && i + run < i1 && a->win_lo[i + run] == lo && a->win_hi[i + run] == hi) run++;
        if (block && run >= 4) {
            block(a, i, run / 4 * 4, kt, vf, t_base, lo, hi);
            i += run / 4 * 4;
        } else {
            attn_one(a, i, kt, vf, t_base, lo, hi);
            i++;
        }
    }
    free(kt), free(vf);
}

/* ---- the F16 matmul ------------------------------------------------------
 * Both forms below use register tiles of MR weight rows x MT activation
 * rows (24 accumulators), each accumulator the reference's chain (one
 * 16-lane FMA chain over k, reduced as _mm512_reduce_add_ps, + bias).
 *
 * Calls of at most MT activation rows (and the fallback when the panel
 * cannot be allocated): mm_f16_rows. Per step of 16 values, MR weight
 * vectors converted from F16 as loaded and MT activation vectors feed
 * MR * MT FMAs. Activation rows are taken in blocks of about ACT_L2 bytes
 * (they stay in L2 while every weight row of the call passes them), so the
 * weights are read from memory once per block. */
#define MR 4
#define MT 6
#define ACT_L2 (768 << 10)
#define PANEL_KC 512
#define PANEL_L2 (512 << 10)
#define PANEL_L2_LONG (1024 << 10) /* rows over 2048 values */

AI void mm_tile_rows(int n, const mu_f16 *w, size_t ws, const float *a, size_t as, float *y, size_t ys,
                     const float *b, const int RN, const int TN) {
    __m512 acc[MR][MT];
#pragma GCC unroll 8
    for (int r = 0; r < RN; r++)
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) acc[r][t] = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __m512 wv[MR];
#pragma GCC unroll 8
        for (int r = 0; r < RN; r++) wv[r] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)r * ws + i)));
#pragma GCC unroll 8
        for (int t = 0; t < TN; t++) {
            const __m512 av = _mm512_loadu_ps(a + (size_t)t * as + i);
#pragma GCC unroll 8
            for (int r = 0; r < RN; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++)
#pragma GCC unroll 8
        for (int r = 0; r < RN; r++) {
            const float v = _mm512_reduce_add_ps(acc[r][t]);
            y[(size_t)t * ys + r] = b ? v + b[r] : v;
        }
}

#define MM_T(RN, tn, ...)                                                                                          \
    do {                                                                                                            \
        switch (tn) {                                                                                               \
        case 6: mm_tile_rows(__VA_ARGS__, RN, 6); break;                                                                 \
        case 5: mm_tile_rows(__VA_ARGS__, RN, 5); break;                                                                 \
        case 4: mm_tile_rows(__VA_ARGS__, RN, 4); break;                                                                 \
        case 3: mm_tile_rows(__VA_ARGS__, RN, 3); break;                                                                 \
        case 2: mm_tile_rows(__VA_ARGS__, RN, 2); break;                                                                 \
        default: mm_tile_rows(__VA_ARGS__, RN, 1); break;                                                                \
        }                                                                                                           \
    } while (0)

static void mm_f16_rows(int n, const mu_f16 *w, size_t ws, int r0, int r1, const float *a, size_t as, int n_t,
                        float *y, size_t ys, const float *bias) {
    int tb = (int)(ACT_L2 / ((size_t)n * sizeof(float)));
    tb = tb < MT ? MT : tb / MT * MT;
    for (int t0 = 0; t0 < n_t; t0 += tb) {
        const int t1 = t0 + tb < n_t ? t0 + tb : n_t;
        for (int r = r0; r < r1; r += MR) {
            const int nr = r1 - r < MR ? r1 - r : MR;
            const mu_f16 *wr = w + (size_t)r * ws;
            const float *br = bias ? bias + r : NULL;
            for (int t = t0; t < t1; t += MT) {
                const int tn = t1 - t < MT ? t1 - t : MT;
                const float *at = a + (size_t)t * as;
                float *yt = y + (size_t)t * ys + r;
                switch (nr) {
                case 4: MM_T(4, tn, n, wr, ws, at, as, yt, ys, br); break;
                case 3: MM_T(3, tn, n, wr, ws, at, as, yt, ys, br); break;
                case 2: MM_T(2, tn, n, wr, ws, at, as, yt, ys, br); break;
                default: MM_T(1, tn, n, wr, ws, at, as, yt, ys, br); break;
                }
            }
        }
    }
}

/* Every other call (n a multiple of 16, more than MT activation rows):
 * mm_f16_panel, with no conversion in the inner loop.
 *  - the weight rows in blocks of about PANEL_L2 bytes once converted to
 *    f32 (panels of MR rows, step-major: the MR vectors of one step side by
 *    side), converted once per block and kept in L2 while every activation
 *    tile passes them;
 *  - per block, one tile of MT activation rows at a time, in slices of
 *    PANEL_KC values (MT * PANEL_KC floats stay in L1), against every panel
 *    of the block, which stream from L2.
 * Between slices a tile's accumulators wait in sv (stored and loaded as
 * they are, so each chain is unchanged). The activations are read from
 * L3 or memory once per block, so rows over 2048 values take blocks of
 * PANEL_L2_LONG: 28 rows of the FFN's down projection (K = 8960) instead
 * of 12 (bench/results/vision-mmbench-s29.txt: about 70 -> 90 GFLOP/s a
 * thread in a quiet stretch); the K = 1536 matmuls keep 512 KB blocks
 * (1 MB showed no gain there in the whole encode). */
AI void mm_tile_panel(int k0, int k1, int first, int last, const float *pan, const float *a, size_t as, __m512 *sv,
                      float *y, size_t ys, const float *b, const int RN, const int TN) {
    __m512 acc[MR][MT];
#pragma GCC unroll 16
    for (int r = 0; r < RN; r++)
#pragma GCC unroll 16
        for (int t = 0; t < TN; t++) acc[r][t] = first ? _mm512_setzero_ps() : sv[r * MT + t];
    pan += (size_t)k0 * MR;
    for (int i = k0; i < k1; i += 16, pan += MR * 16) {
        __m512 wv[MR];
#pragma GCC unroll 16
        for (int r = 0; r < RN; r++) wv[r] = _mm512_load_ps(pan + r * 16);
#pragma GCC unroll 16
        for (int t = 0; t < TN; t++) {
            const __m512 av = _mm512_loadu_ps(a + (size_t)t * as + i);
#pragma GCC unroll 16
            for (int r = 0; r < RN; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    if (!last) {
#pragma GCC unroll 16
        for (int r = 0; r < RN; r++)
#pragma GCC unroll 16
            for (int t = 0; t < TN; t++) sv[r * MT + t] = acc[r][t];
        return;
    }
#pragma GCC unroll 16
    for (int t = 0; t < TN; t++)
#pragma GCC unroll 16
        for (int r = 0; r < RN; r++) {
            const float v = _mm512_reduce_add_ps(acc[r][t]);
            y[(size_t)t * ys + r] = b ? v + b[r] : v;
        }
}

#define MM_P(RN, tn, ...)                                                                                          \
    do {                                                                                                            \
        switch (tn) {                                                                                               \
        case 6: mm_tile_panel(__VA_ARGS__, RN, 6); break;                                                           \
        case 5: mm_tile_panel(__VA_ARGS__, RN, 5); break;                                                           \
        case 4: mm_tile_panel(__VA_ARGS__, RN, 4); break;                                                           \
        case 3: mm_tile_panel(__VA_ARGS__, RN, 3); break;                                                           \
        case 2: mm_tile_panel(__VA_ARGS__, RN, 2); break;                                                           \
        default: mm_tile_panel(__VA_ARGS__, RN, 1); break;                                                          \
        }                                                                                                           \
    } while (0)

static void mm_f16_panel(int n, const mu_f16 *w, size_t ws, int r0, int r1, const float *a, size_t as, int n_t,
                         float *y, size_t ys, const float *bias) {
    int rb = (int)((n > 2048 ? PANEL_L2_LONG : PANEL_L2) / ((size_t)n * sizeof(float)));
    rb = rb < MR ? MR : rb / MR * MR;
    if (rb > r1 - r0) rb = (r1 - r0 + MR - 1) / MR * MR;
    float *pan = aligned_alloc(64, (size_t)rb * n * sizeof *pan);
    __m512 *sv = n <= PANEL_KC ? NULL : aligned_alloc(64, (size_t)rb * MT * sizeof *sv);
    if (!pan || (n > PANEL_KC && !sv)) {
        free(pan), free(sv);
        mm_f16_rows(n, w, ws, r0, r1, a, as, n_t, y, ys, bias);
        return;
    }
    for (int b0 = r0; b0 < r1; b0 += rb) {
        const int b1 = b0 + rb < r1 ? b0 + rb : r1;
        for (int r = b0; r < b1; r += MR) {
            const int nr = b1 - r < MR ? b1 - r : MR;
            float *p = pan + (size_t)(r - b0) * n;
            for (int i = 0; i < n; i += 16, p += MR * 16)
                for (int k = 0; k < nr; k++)
                    _mm512_store_ps(p + k * 16, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)(r + k) * ws + i))));
        }
        for (int t = 0; t < n_t; t += MT) {
            const int tn = n_t - t < MT ? n_t - t : MT;
            const float *at = a + (size_t)t * as;
            for (int k0 = 0; k0 < n; k0 += PANEL_KC) {
                const int k1 = k0 + PANEL_KC < n ? k0 + PANEL_KC : n, first = k0 == 0, last = k1 == n;
                for (int r = b0; r < b1; r += MR) {
                    const int nr = b1 - r < MR ? b1 - r : MR;
                    const float *p = pan + (size_t)(r - b0) * n;
                    const float *br = bias ? bias + r : NULL;
                    float *yt = y + (size_t)t * ys + r;
                    __m512 *st = sv ? sv + (size_t)(r - b0) * MT : NULL;
                    switch (nr) {
                    case 4: MM_P(4, tn, k0, k1, first, last, p, at, as, st, yt, ys, br); break;
                    case 3: MM_P(3, tn, k0, k1, first, last, p, at, as, st, yt, ys, br); break;
                    case 2: MM_P(2, tn, k0, k1, first, last, p, at, as, st, yt, ys, br); break;
                    default: MM_P(1, tn, k0, k1, first, last, p, at, as, st, yt, ys, br); break;
                    }
                }
            }
        }
    }
    free(pan), free(sv);
}

static void mm_f16_avx512(int n, const mu_f16 *w, size_t ws, int r0, int r1, const float *a, size_t as, int n_t,
                          float *y, size_t ys, const float *bias) {
    if (n % 16)
        mu_vit_mm_f16_ref(n, w, ws, r0, r1, a, as, n_t, y, ys, bias);
    else if (n_t > MT)
        mm_f16_panel(n, w, ws, r0, r1, a, as, n_t, y, ys, bias);
    else
        mm_f16_rows(n, w, ws, r0, r1, a, as, n_t, y, ys, bias);
}

/* ---- exact GELU -----------------------------------------------------------
 * ggml's gelu_erf calls libm's erff per value. glibc 2.36's erff (x86-64) is
 * fdlibm's float algorithm: by |x|, x + x*pp(x^2)/qq(x^2) below 0.84375,
 * +-(erx + pa(s)/qa(s)) with s = |x| - 1 below 1.25, and from there to 6
 * 1 - r/|x| with r = expf(-z*z - 0.5625) * expf((z - |x|)(z + |x|) + R/S)
 * (z = |x| with its low 12 bits cleared, R/S two rational fits in 1/x^2,
 * split at 1/0.35), +-1 beyond; every step a float multiply, add or divide,
 * none fused. Its expf (the FMA variant that glibc picks on CPUs with FMA)
 * works in double: k = round(x * 32/ln2), r = x * 32/ln2 - k, 2^(k/32) as
 * the table entry for k mod 32 with k's upper bits added to its exponent,
 * times a cubic in r, with fused multiply-adds.
 * erf16 computes the same, lane for lane, evaluating a branch only when a
 * lane needs it. gelu_self_check compares it with the libm of the running
 * process at load time; a libm that differs keeps the reference GELU. */
static const uint64_t EXP2_T[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

/* expf of 8 floats (as doubles) in the range the erff tail feeds it */
static inline __m256 expf8(__m256 xf) {
    const __m512d x = _mm512_cvtps_pd(xf), inv = _mm512_set1_pd(0x1.71547652b82fep+5),
                  shift = _mm512_set1_pd(0x1.8p+52);
    const __m512d z = _mm512_fmadd_pd(inv, x, shift);
    const __m512i ki = _mm512_castpd_si512(z);
    const __m512d kd = _mm512_sub_pd(z, shift);
    const __m512d r = _mm512_fmsub_pd(inv, x, kd);
    const __m512i t = _mm512_add_epi64(_mm512_i64gather_epi64(_mm512_and_si512(ki, _mm512_set1_epi64(31)), EXP2_T, 8),
                                       _mm512_slli_epi64(ki, 47));
    const __m512d c = _mm512_fmadd_pd(_mm512_set1_pd(0x1.c6af84b912394p-20), r, _mm512_set1_pd(0x1.ebfce50fac4f3p-13));
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(0x1.62e42ff0c52d6p-6), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(c, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

static inline __m512 expf16(__m512 x) {
    const __m256 lo = expf8(_mm512_castps512_ps256(x)), hi = expf8(_mm512_extractf32x8_ps(x, 1));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

#define F(c) _mm512_set1_ps(c)
static inline __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
static inline __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }

/* c[0] + t (c[1] + t (... + t c[n - 1])), a multiply and an add a step */
static inline __m512 horner(__m512 t, const float *c, int n) {
    __m512 p = F(c[n - 1]);
    for (int i = n - 2; i >= 0; i--) p = add(F(c[i]), mul(t, p));
    return p;
}

static const float PP[] = {0x1.06eba8p-3f, -0x1.4cd7d6p-2f, -0x1.d2a51ep-6f, -0x1.7a2912p-8f, -0x1.8ead62p-16f},
                   QQ[] = {1.0f, 0x1.97779cp-2f, 0x1.0a54c6p-4f, 0x1.4d022cp-8f, 0x1.15dc92p-13f, -0x1.09c434p-18f},
                   PA[] = {-0x1.359b8cp-9f, 0x1.a8d00ap-2f, -0x1.7d2410p-2f, 0x1.45fca8p-2f, -0x1.c63984p-4f,
                           0x1.22a366p-5f, -0x1.1bf38p-9f},
                   QA[] = {1.0f, 0x1.b3e662p-4f, 0x1.14af0ap-1f, 0x1.2635cep-4f, 0x1.02660ep-3f, 0x1.bedc26p-7f,
                           0x1.88b546p-7f},
                   RA[] = {-0x1.434126p-7f, -0x1.63416ep-1f, -0x1.51e044p+3f, -0x1.f300aep+5f, -0x1.44cb18p+7f,
                           -0x1.7135cep+7f, -0x1.452656p+6f, -0x1.3a0efcp+3f},
                   SA[] = {1.0f, 0x1.3a6b9cp+4f, 0x1.1350c6p+7f, 0x1.b290dep+8f, 0x1.42b192p+9f, 0x1.ad0216p+8f,
                           0x1.b28a3ep+6f, 0x1.a47ef8p+2f, -0x1.eeff2ep-5f},
                   RB[] = {-0x1.434124p-7f, -0x1.993ba8p-1f, -0x1.1c2096p+4f, -0x1.4145d4p+7f, -0x1.3ec882p+9f,
                           -0x1.004616p+10f, -0x1.e384eap+8f},
                   SB[] = {1.0f, 0x1.e568b2p+4f, 0x1.45cae2p+8f, 0x1.802eb2p+10f, 0x1.8ffb76p+11f, 0x1.3f219cp+11f,
                           0x1.da874ep+8f, -0x1.670e24p+4f};
#define NC(a) ((int)(sizeof a / sizeof a[0]))

static __m512 erf16(__m512 x) {
    const __m512i ix = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    const __m512 ax = _mm512_castsi512_ps(ix);
    const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x));
#define BELOW(c) _mm512_cmplt_epi32_mask(ix, _mm512_set1_epi32(c))
    const __mmask16 finite = BELOW(0x7f800000), tiny = BELOW(0x31800000), b = BELOW(0x3f580000) & ~tiny,
                    c = BELOW(0x3fa00000) & ~BELOW(0x3f580000), e = BELOW(0x40c00000) & ~BELOW(0x3fa00000),
                    e1 = e & BELOW(0x4036db6e);
    __m512 res = _mm512_mask_blend_ps(neg, F(1.0f), F(-1.0f)); /* |x| >= 6 */
    if (tiny) {
        const __m512 t0 = add(x, mul(F(0x1.06eba8p-3f), x));
        const __m512 t1 = mul(F(0x1p-4f), add(mul(F(16.0f), x), mul(F(0x1.06eba8p+1f), x)));
        res = _mm512_mask_blend_ps(tiny, res, _mm512_mask_blend_ps(BELOW(0x04000000), t0, t1));
    }
    if (b) {
        const __m512 z = mul(x, x);
        res = _mm512_mask_blend_ps(b, res, add(x, mul(x, _mm512_div_ps(horner(z, PP, NC(PP)), horner(z, QQ, NC(QQ))))));
    }
    if (c) {
        const __m512 s = _mm512_sub_ps(ax, F(1.0f));
        const __m512 pq = _mm512_div_ps(horner(s, PA, NC(PA)), horner(s, QA, NC(QA)));
        res = _mm512_mask_blend_ps(c, res, _mm512_mask_blend_ps(neg, add(F(0x1.b0ac16p-1f), pq),
                                                                 _mm512_sub_ps(F(-0x1.b0ac16p-1f), pq)));
    }
    if (e) {
        const __m512 s = _mm512_div_ps(F(1.0f), mul(x, x));
        __m512 R = F(0.0f), S = F(1.0f);
        if (e1) R = horner(s, RA, NC(RA)), S = horner(s, SA, NC(SA));
        if (e & ~e1)
            R = _mm512_mask_blend_ps(e1, horner(s, RB, NC(RB)), R), S = _mm512_mask_blend_ps(e1, horner(s, SB, NC(SB)), S);
        const __m512 z = _mm512_castsi512_ps(_mm512_and_si512(ix, _mm512_set1_epi32((int)0xfffff000)));
        const __m512 e_a = expf16(_mm512_sub_ps(mul(_mm512_sub_ps(F(0.0f), z), z), F(0x1.2p-1f)));
        const __m512 e_b = expf16(add(mul(_mm512_sub_ps(z, ax), add(z, ax)), _mm512_div_ps(R, S)));
        const __m512 r = _mm512_div_ps(mul(e_b, e_a), ax);
        res = _mm512_mask_blend_ps(e, res, _mm512_mask_blend_ps(neg, _mm512_sub_ps(F(1.0f), r), _mm512_sub_ps(r, F(1.0f))));
    }
#undef BELOW
    if (finite != 0xffff) { /* inf, nan: libm's own */
        float v[16], o[16];
        _mm512_storeu_ps(v, x), _mm512_storeu_ps(o, res);
        for (int l = 0; l < 16; l++)
            if (!(finite >> l & 1)) o[l] = erff(v[l]);
        res = _mm512_loadu_ps(o);
    }
    return res;
}

static void gelu_avx512(int n, float *x) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        _mm512_storeu_ps(x + i, mul(mul(F(0.5f), v), add(F(1.0f), erf16(mul(v, F(0.70710678118654752440084436210484f))))));
    }
    if (i < n) mu_vit_gelu_erf(n - i, x + i);
}
#undef F

/* erf16 against this process's erff on values from every branch and their
 * borders (both signs, with and without the last bits) */
static bool gelu_self_check(void) {
    static const uint32_t edge[] = {0x00000000, 0x00000001, 0x03ffffff, 0x04000000, 0x317fffff, 0x31800000,
                                    0x3f57ffff, 0x3f580000, 0x3f9fffff, 0x3fa00000, 0x4036db6d, 0x4036db6e,
                                    0x40bfffff, 0x40c00000, 0x7f7fffff, 0x7f800000, 0x7fc00000};
    float in[16], want[16];
    uint32_t seed = 12345;
    for (int round = 0; round < 4096; round++) {
        for (int l = 0; l < 16; l++) {
            seed = seed * 1664525u + 1013904223u;
            uint32_t u = round < 3 ? edge[(round * 16 + l) % (sizeof edge / sizeof edge[0])]
                                   : 0x30000000u + (seed >> 8) % 0x11000000u; /* |x| from 4.7e-10 to 8 */
            u ^= (seed >> 4 & 1) << 31;
            memcpy(&in[l], &u, 4);
            want[l] = erff(in[l]);
        }
        float got[16];
        _mm512_storeu_ps(got, erf16(_mm512_loadu_ps(in)));
        for (int l = 0; l < 16; l++)
            if (memcmp(&got[l], &want[l], 4) && !(want[l] != want[l] && got[l] != got[l])) return false;
    }
    return true;
}

/* mu_vit_blend_ref, 16 lanes at a time: the same products and fused adds
 * (an FMA instruction rounds once, as fmaf) */
static void blend_avx512(int E, const float *a, const float *b, const float *c, const float *d, float dx, float dy,
                         float *o) {
    const float omx = 1 - dx, omy = 1 - dy;
    const __m512 vdx = _mm512_set1_ps(dx), vdy = _mm512_set1_ps(dy), vmx = _mm512_set1_ps(omx),
                 vmy = _mm512_set1_ps(omy);
    int e = 0;
    for (; e + 16 <= E; e += 16) {
        const __m512 bb = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(b + e), vdx), vmy);
        __m512 r = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(a + e), vmx), vmy, bb);
        r = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(c + e), vmx), vdy, r);
        r = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(d + e), vdx), vdy, r);
        _mm512_storeu_ps(o + e, r);
    }
    for (; e < E; e++) o[e] = fmaf(d[e] * dx, dy, fmaf(c[e] * omx, dy, fmaf(a[e] * omx, omy, b[e] * dx * omy)));
}

void mu_vit_fill_avx512(mu_vit_kern *k) {
    k->name = "avx512";
    k->attn = attn_avx512;
    k->mm_f16 = mm_f16_avx512;
    k->blend = blend_avx512;
    if (gelu_self_check()) k->gelu = gelu_avx512;
}
