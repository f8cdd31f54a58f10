/* quantize.c: f32 rows -> F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K rows.
 * Owns: the weight quantizers used by the model generator (cmd gen) and the
 * kernel tests. Does not own the block layouts (quant.h), fp16 conversion or
 * dequantization (kern_ref.c), and is never used on the inference path.
 * Key design choice: the careful path follows the spirit of llama.cpp's
 * reference quantizers (weighted least-squares search of each sub-block's
 * scale and min for Q4_K/Q5_K, an RMSE search over 19 candidate scales for
 * Q6_K); the file's bytes define the model, so bit-exactness with llama.cpp's
 * quantizer is not a goal, only exact ggml layouts and a faithful round trip.
 * The fast path (mu_quantize_row_fast) keeps the same layouts and the same
 * final rounding against the stored (fp16/6-bit) scales, and only replaces
 * the search by one min/max pass; the generator uses it for huge models. */
#include "quantize.h"

#include <math.h>
#include <string.h>

#include "../base/err.h"
#include "kern.h"

/* Round to nearest, ties to even, for |v| < 2^22 (every caller's range):
 * adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits. */
static inline int q_round(float v) {
    float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}
static inline int q_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- plain types ------------------------------------------------------- */

static void quantize_f16(const float *x, mu_f16 *y, int n) {
    for (int i = 0; i < n; i++) y[i] = mu_f32_to_f16(x[i]);
}

static void quantize_bf16(const float *x, mu_bf16 *y, int n) {
    for (int i = 0; i < n; i++) y[i] = mu_f32_to_bf16(x[i]);
}

static void quantize_q8_0(const float *x, mu_block_q8_0 *y, int n) {
    for (int b = 0; b < n / MU_QK8_0; b++, x += MU_QK8_0) {
        float amax = 0;
        for (int i = 0; i < MU_QK8_0; i++) {
            float a = fabsf(x[i]);
            amax = a > amax ? a : amax;
        }
        float d = amax / 127.0f;
        float id = d > 0 ? 1.0f / d : 0.0f;
        y[b].d = mu_f32_to_f16(d);
        for (int i = 0; i < MU_QK8_0; i++) y[b].qs[i] = (int8_t)q_clamp(q_round(x[i] * id), -127, 127);
    }
}

/* ---- K-quant sub-block fits -------------------------------------------- */

/* Fit x[i] ~ scale * L[i] - mn with L in [0, nmax] (an asymmetric "type-1"
 * sub-block, mn >= 0). Weighted least squares over a small grid of candidate
 * inverse scales; returns scale, writes mn and nothing else (the final L is
 * recomputed against the stored 6-bit scales by the caller). */
static float fit_min_scale(const float *x, const float *w, int n, int nmax, float rmin, float rdelta,
                           int nstep, float *mn) {
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        *mn = -lo;
        return 0;
    }
    float iscale = nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        int l = q_clamp(q_round(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * l + lo - x[i];
        best += w[i] * diff * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        float isc = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        uint8_t aux[32];
        for (int i = 0; i < n; i++) {
            int l = q_clamp(q_round(isc * (x[i] - lo)), 0, nmax);
            aux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det <= 0) continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / det;
        float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (m > 0) {
            m = 0;
            s = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = s * aux[i] + m - x[i];
            err += w[i] * diff * diff;
        }
        if (err < best) {
            best = err;
            scale = s;
            lo = m;
        }
    }
    *mn = -lo;
    return scale;
}

/* Fast variant: the plain min/max grid. */
static float fit_min_scale_fast(const float *x, int n, int nmax, float *mn) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    if (lo > 0) lo = 0;
    *mn = -lo;
    return hi > lo ? (hi - lo) / nmax : 0;
}

/* Symmetric "type-0" fit x[i] ~ scale * l, l in [-nmax, nmax-1], minimizing
 * the x^2-weighted squared error over 19 candidate scales. */
static float fit_sym_scale(const float *x, int n, int nmax, int search) {
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) {
            amax = a;
            vmax = x[i];
        }
    }
    if (amax < 1e-15f) return 0;
    float iscale = -nmax / vmax;
    if (!search) return 1 / iscale;
    float sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; i++) {
        int l = q_clamp(q_round(iscale * x[i]), -nmax, nmax - 1);
        float w = x[i] * x[i];
        sum_lx += w * x[i] * l;
        sum_l2 += w * l * l;
    }
    float scale = sum_l2 > 0 ? sum_lx / sum_l2 : 0;
    float best = scale * sum_lx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        float isc = -(nmax + 0.1f * is) / vmax;
        float lx = 0, l2 = 0;
        for (int i = 0; i < n; i++) {
            int l = q_clamp(q_round(isc * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            lx += w * x[i] * l;
            l2 += w * l * l;
        }
        if (l2 > 0 && lx * lx > best * l2) {
            scale = lx / l2;
            best = scale * lx;
        }
    }
    return scale;
}

/* ---- Q4_K / Q5_K ------------------------------------------------------- */

/* 6-bit scale/min packing of the 8 sub-blocks, as ggml's get_scale_min_k4 reads it. */
static void k4_pack_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t s[MU_K_SCALE_SIZE]) {
    memset(s, 0, MU_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* One 256-element super-block of Q4_K (nmax 15) or Q5_K (nmax 31): fills
 * d, dmin, scales and L[256] (levels against the stored scales). */
static void k4_block(const float *x, int nmax, int fast, mu_f16 *d_out, mu_f16 *dmin_out,
                     uint8_t scales[MU_K_SCALE_SIZE], uint8_t L[MU_QK_K]) {
    float sc[8], mn[8], w[32];
    float max_sc = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        if (fast) {
            sc[j] = fit_min_scale_fast(xs, 32, nmax, &mn[j]);
        } else {
            float sum_x2 = 0;
            for (int i = 0; i < 32; i++) sum_x2 += xs[i] * xs[i];
            float av = sqrtf(sum_x2 / 32);
            for (int i = 0; i < 32; i++) w[i] = av + fabsf(xs[i]);
            sc[j] = nmax == 15 ? fit_min_scale(xs, w, 32, 15, -1.0f, 0.1f, 20, &mn[j])
                               : fit_min_scale(xs, w, 32, 31, -0.5f, 0.1f, 15, &mn[j]);
        }
        max_sc = fmaxf(max_sc, sc[j]);
        max_mn = fmaxf(max_mn, mn[j]);
    }
    float inv_sc = max_sc > 0 ? 63 / max_sc : 0;
    float inv_mn = max_mn > 0 ? 63 / max_mn : 0;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)q_clamp(q_round(inv_sc * sc[j]), 0, 63);
        lm[j] = (uint8_t)q_clamp(q_round(inv_mn * mn[j]), 0, 63);
    }
    k4_pack_scales(ls, lm, scales);
    *d_out = mu_f32_to_f16(max_sc / 63);
    *dmin_out = mu_f32_to_f16(max_mn / 63);
    float d = mu_f16_to_f32(*d_out), dmin = mu_f16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        float ds = d * ls[j], dm = dmin * lm[j];
        if (ds == 0) {
            memset(L + 32 * j, 0, 32);
            continue;
        }
        float ids = 1 / ds;
        const float *xs = x + 32 * j;
        uint8_t *Ls = L + 32 * j;
        for (int i = 0; i < 32; i++) {
            int l = q_round((xs[i] + dm) * ids);
            l = l < 0 ? 0 : l;
            Ls[i] = (uint8_t)(l > nmax ? nmax : l);
        }
    }
}

static void quantize_q4_K(const float *x, mu_block_q4_K *y, int n, int fast) {
    uint8_t L[MU_QK_K];
    for (int b = 0; b < n / MU_QK_K; b++, x += MU_QK_K) {
        k4_block(x, 15, fast, &y[b].d, &y[b].dmin, y[b].scales, L);
        uint8_t *q = y[b].qs;
        for (int j = 0; j < MU_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void quantize_q5_K(const float *x, mu_block_q5_K *y, int n, int fast) {
    uint8_t L[MU_QK_K];
    for (int b = 0; b < n / MU_QK_K; b++, x += MU_QK_K) {
        k4_block(x, 31, fast, &y[b].d, &y[b].dmin, y[b].scales, L);
        uint8_t *qh = y[b].qh, *ql = y[b].qs;
        memset(qh, 0, MU_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int j = 0; j < MU_QK_K; j += 64, ql += 32) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[j + l], l2 = L[j + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[l] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[l] |= m2;
                }
                ql[l] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

/* ---- Q6_K -------------------------------------------------------------- */

static void quantize_q6_K(const float *x, mu_block_q6_K *y, int n, int fast) {
    uint8_t L[MU_QK_K];
    for (int b = 0; b < n / MU_QK_K; b++, x += MU_QK_K) {
        float sc[16], max_sc = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_sym_scale(x + 16 * j, 16, 32, !fast);
            if (fabsf(sc[j]) > max_abs) {
                max_abs = fabsf(sc[j]);
                max_sc = sc[j];
            }
        }
        mu_block_q6_K *yb = &y[b];
        if (max_abs < 1e-15f) {
            memset(yb, 0, sizeof *yb);
            continue;
        }
        float iscale = -128.0f / max_sc;
        yb->d = mu_f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) yb->scales[j] = (int8_t)q_clamp(q_round(iscale * sc[j]), -128, 127);
        float d = mu_f16_to_f32(yb->d);
        for (int j = 0; j < 16; j++) {
            float ds = d * yb->scales[j];
            if (ds == 0) {
                memset(L + 16 * j, 32, 16);
                continue;
            }
            float ids = 1 / ds;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)(q_clamp(q_round(x[16 * j + i] * ids), -32, 31) + 32);
        }
        uint8_t *ql = yb->ql, *qh = yb->qh;
        for (int j = 0; j < MU_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                uint8_t q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

/* ---- entry points ------------------------------------------------------ */

int mu_quantize_supported(uint32_t type) {
    switch (type) {
    case MU_T_F32: case MU_T_F16: case MU_T_BF16: case MU_T_Q8_0:
    case MU_T_Q4_K: case MU_T_Q5_K: case MU_T_Q6_K:
        return 1;
    }
    return 0;
}

static void quantize_any(uint32_t type, const float *x, void *y, int n, int fast) {
    MU_ASSERT(n >= 0 && mu_quantize_supported(type));
    MU_ASSERT(n % mu_type_get(type)->blck == 0);
    switch (type) {
    case MU_T_F32: memcpy(y, x, (size_t)n * sizeof(float)); break;
    case MU_T_F16: quantize_f16(x, y, n); break;
    case MU_T_BF16: quantize_bf16(x, y, n); break;
    case MU_T_Q8_0: quantize_q8_0(x, y, n); break;
    case MU_T_Q4_K: quantize_q4_K(x, y, n, fast); break;
    case MU_T_Q5_K: quantize_q5_K(x, y, n, fast); break;
    case MU_T_Q6_K: quantize_q6_K(x, y, n, fast); break;
    }
}

void mu_quantize_row(uint32_t type, const float *x, void *y, int n) { quantize_any(type, x, y, n, 0); }

void mu_quantize_row_fast(uint32_t type, const float *x, void *y, int n) { quantize_any(type, x, y, n, 1); }
